/**
 * Which dataset indices each rank sees in an epoch, with PyTorch's exact
 * `DistributedSampler` semantics (shuffle by torch's randperm seeded
 * seed + epoch, pad by repeating or trim, then rank r takes every
 * numReplicas-th index from r). Unlike torch, reusing an epoch warns.
 */
import { TorchGenerator } from "../random/torch_generator.ts";

/** One pass a DistributedSampler served: a rank's indices of an epoch. */
export interface SamplerPass {
  /**
   * Which sampler of this process: 0 for the first one built, 1 for the
   * next, … (so a training and an evaluation sampler are told apart; the
   * ranks build theirs in the same order)
   */
  sampler: number;
  rank: number;
  epoch: number;
  datasetLength: number;
  numReplicas: number;
  /** the indices served (the hook must not keep a reference past its call) */
  indices: Int32Array;
}

/** Called after every pass a DistributedSampler serves: a hook point for tools (`dtrain check`'s probe). */
export type SamplerPassHook = (pass: SamplerPass) => void;

const passHooks = new Set<SamplerPassHook>();
let samplersBuilt = 0;

/** Adds a hook to every sampler pass; returns the function that removes it. */
export function addSamplerPassHook(hook: SamplerPassHook): () => void {
  passHooks.add(hook);
  return () => passHooks.delete(hook);
}

/** How one epoch of a dataset is split across ranks (see shardIndices). */
export interface ShardOptions {
  /** Permute the indices with torch's randperm before splitting. Default true. */
  shuffle?: boolean;
  /** Base seed; the permutation of epoch e uses seed + e. Default 0. */
  seed?: number;
  /** Epoch whose order is wanted. Default 0. */
  epoch?: number;
  /** Trim the tail so every rank gets the same count without padding. Default false. */
  dropLast?: boolean;
}

/** Per-rank and total sample counts of a split. */
export interface SamplerSizes {
  /** Indices each rank receives per epoch (torch's `num_samples`). */
  numSamples: number;
  /** numSamples * numReplicas: the padded or trimmed epoch length (torch's `total_size`). */
  totalSize: number;
}

function checkCount(what: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(
      `Invalid DistributedSampler ${what} ${value}: expected an integer >= ${min}`,
    );
  }
}

function checkRank(rank: number, numReplicas: number): void {
  if (!Number.isSafeInteger(rank) || rank < 0 || rank >= numReplicas) {
    throw new RangeError(
      `Invalid DistributedSampler rank ${rank}: expected an integer in [0, ${numReplicas}) for numReplicas=${numReplicas}`,
    );
  }
}

function checkSeedAndEpoch(seed: number, epoch: number): void {
  if (!Number.isSafeInteger(seed)) {
    throw new RangeError(
      `Invalid DistributedSampler seed ${seed}: expected a safe integer`,
    );
  }
  checkCount("epoch", epoch, 0);
  if (!Number.isSafeInteger(seed + epoch)) {
    throw new RangeError(
      `Invalid DistributedSampler seed ${seed} with epoch ${epoch}: seed + epoch must be a safe integer`,
    );
  }
}

/**
 * torch's sizes: `num_samples = ceil(n / numReplicas)`, or with dropLast
 * `ceil((n - numReplicas) / numReplicas)` when n is not divisible (which is
 * `floor(n / numReplicas)`, 0 when n < numReplicas).
 *
 * @example
 * ```ts
 * samplerSizes(10, 3, { dropLast: false }); // { numSamples: 4, totalSize: 12 }
 * ```
 */
export function samplerSizes(
  n: number,
  numReplicas: number,
  options: { dropLast?: boolean } = {},
): SamplerSizes {
  checkCount("dataset length", n, 0);
  checkCount("numReplicas", numReplicas, 1);
  const numSamples = options.dropLast ? Math.floor(n / numReplicas) : Math.ceil(n / numReplicas);
  return { numSamples, totalSize: numSamples * numReplicas };
}

/**
 * The indices rank `rank` of `numReplicas` sees in one epoch of a dataset of
 * length `n`, identical to `list(iter(DistributedSampler(range(n), ...)))`
 * after `set_epoch(epoch)` in torch 1.13. A pure function, so resume logic
 * and `dtrain check` can compute any rank's order without a sampler.
 *
 * @example
 * ```ts
 * shardIndices(10, 3, 1, { shuffle: false }); // Int32Array [1, 4, 7, 0]
 * ```
 */
export function shardIndices(
  n: number,
  numReplicas: number,
  rank: number,
  options: ShardOptions = {},
): Int32Array<ArrayBuffer> {
  const { shuffle = true, seed = 0, epoch = 0, dropLast = false } = options;
  const { numSamples } = samplerSizes(n, numReplicas, { dropLast });
  checkRank(rank, numReplicas);
  checkSeedAndEpoch(seed, epoch);
  const order = shuffle ? new TorchGenerator(seed + epoch).randperm(n) : null;
  const out = new Int32Array(numSamples);
  for (let k = 0; k < numSamples; k++) {
    // Position in the padded/trimmed epoch list. Padding repeats the list from
    // its start (as often as needed), so position p holds order[p % n].
    const position = (rank + k * numReplicas) % n;
    out[k] = order ? order[position]! : position;
  }
  return out;
}

/** Options of a DistributedSampler: the split, plus where warnings go. */
export interface DistributedSamplerOptions {
  /** Number of ranks sharing the dataset (torch's `num_replicas`). */
  numReplicas: number;
  /** This rank, in [0, numReplicas). */
  rank: number;
  /** Permute each epoch (default true). */
  shuffle?: boolean;
  /** Base seed; epoch e uses seed + e (default 0). Must be the same on every rank. */
  seed?: number;
  /** Trim instead of pad (default false). */
  dropLast?: boolean;
  /** Receives the repeated-epoch warning; defaults to console.warn. */
  onWarning?: (message: string) => void;
}

/**
 * torch's `DistributedSampler` for a dataset of `datasetLength` items. Call
 * `setEpoch(epoch)` at the start of every epoch (the Trainer does); going
 * through a shuffling sampler's order of one epoch to its end twice (by its
 * own iterator or a DataLoader) warns once, because that is almost always a
 * forgotten `setEpoch` that silently repeats the order. A pass left early (a
 * peek at the first batch, as PyTorch's DDP tutorial does) does not count.
 *
 * @example
 * ```ts
 * const sampler = new DistributedSampler(1000, { numReplicas: 2, rank: 0, seed: 42 });
 * for (let epoch = 0; epoch < 3; epoch++) {
 *   sampler.setEpoch(epoch);
 *   for (const index of sampler) console.log(index);
 * }
 * ```
 */
export class DistributedSampler implements Iterable<number> {
  /** Length of the dataset being split. */
  readonly datasetLength: number;
  /** Number of ranks sharing the dataset (torch's num_replicas). */
  readonly numReplicas: number;
  /** This rank's share. */
  readonly rank: number;
  /** Whether each epoch is a permutation of the seed + epoch (torch's order), or 0..n-1. */
  readonly shuffle: boolean;
  /** Seed of the permutation. */
  readonly seed: number;
  /** Drop the tail so every rank gets the same count, instead of padding with the first indices. */
  readonly dropLast: boolean;
  /** Indices this rank receives per epoch. */
  readonly numSamples: number;
  /** numSamples * numReplicas. */
  readonly totalSize: number;
  #epoch = 0;
  /** this sampler's place in the process's construction order (SamplerPass.sampler) */
  readonly #id = samplersBuilt++;
  #consumedEpochs = new Set<number>();
  #warned = false;
  #onWarning: (message: string) => void;

  /** Validates the options (rank range, counts, seed) and fixes the split sizes. */
  constructor(datasetLength: number, options: DistributedSamplerOptions) {
    const { numReplicas, rank, shuffle = true, seed = 0, dropLast = false } = options;
    const sizes = samplerSizes(datasetLength, numReplicas, { dropLast });
    checkRank(rank, numReplicas);
    checkSeedAndEpoch(seed, 0);
    this.datasetLength = datasetLength;
    this.numReplicas = numReplicas;
    this.rank = rank;
    this.shuffle = shuffle;
    this.seed = seed;
    this.dropLast = dropLast;
    this.numSamples = sizes.numSamples;
    this.totalSize = sizes.totalSize;
    this.#onWarning = options.onWarning ?? ((message) => console.warn(message));
  }

  /** The current epoch (0 until setEpoch is called). */
  get epoch(): number {
    return this.#epoch;
  }

  /** Number of indices per epoch for this rank (torch's `len(sampler)`). */
  get length(): number {
    return this.numSamples;
  }

  /** Selects the epoch whose order indices() and iteration return next. */
  setEpoch(epoch: number): void {
    checkSeedAndEpoch(this.seed, epoch);
    this.#epoch = epoch;
  }

  /** This rank's indices for the current epoch (a pass over them starts). */
  indices(): Int32Array<ArrayBuffer> {
    const epoch = this.#epoch;
    const out = this.indicesFor(epoch);
    for (const hook of passHooks) {
      hook({
        sampler: this.#id,
        rank: this.rank,
        epoch,
        datasetLength: this.datasetLength,
        numReplicas: this.numReplicas,
        indices: out,
      });
    }
    return out;
  }

  /** This rank's indices for any `epoch`, without touching the current epoch or warning. */
  indicesFor(epoch: number): Int32Array<ArrayBuffer> {
    return shardIndices(this.datasetLength, this.numReplicas, this.rank, {
      shuffle: this.shuffle,
      seed: this.seed,
      epoch,
      dropLast: this.dropLast,
    });
  }

  /**
   * Says that a pass over `epoch`'s order went to its end (the DataLoader
   * calls it, and so does this sampler's own iterator). With shuffle on, a
   * second complete pass over one epoch warns once (see the class doc).
   */
  passCompleted(epoch: number): void {
    if (this.shuffle && this.#consumedEpochs.has(epoch) && !this.#warned) {
      this.#warned = true;
      this.#onWarning(
        `DistributedSampler (rank ${this.rank}): the order of epoch ${epoch} was gone through ` +
          `again, so this pass repeated the previous pass's sample order exactly. ` +
          `Call sampler.setEpoch(epoch) at the start of each epoch ` +
          `(the dtrain Trainer does this for you). This warning is shown once.`,
      );
    }
    this.#consumedEpochs.add(epoch);
  }

  /** Iterates indices() of the current epoch (computed when iteration starts). */
  *[Symbol.iterator](): IterableIterator<number> {
    const epoch = this.#epoch;
    yield* this.indices();
    this.passCompleted(epoch);
  }
}
