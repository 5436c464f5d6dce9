/**
 * Data order that survives a restart, also on another number of ranks. An
 * epoch's order is torch's DistributedSampler order: the padded global list
 * L (randperm seeded seed + epoch, padded to a multiple of the world size W
 * the epoch started with), of which rank r takes L[r], L[r + W], … so every
 * optimizer step consumes one contiguous block of L. Resuming after P
 * samples of L continues with L[P:], split the same strided way over the
 * new world W': at W' = W that is exactly the interrupted run's order; at
 * another W' no sample of L is skipped or repeated (when W' does not divide
 * the rest, its first elements are repeated as padding, as torch pads).
 */
import { DistributedSampler, samplerSizes } from "./distributed_sampler.ts";
import { TorchGenerator } from "../random/torch_generator.ts";
import type { Sampler } from "./dataloader.ts";

/** How an epoch's global order is made. */
export interface OrderOptions {
  /** Permute each epoch (torch's DistributedSampler order for seed + epoch). */
  shuffle: boolean;
  /** Seed of the permutation. */
  seed: number;
  /** Drop the tail instead of padding with the first indices. */
  dropLast: boolean;
}

/** The padded global list L of an epoch for world size W (rank r's indices are L[r::W]). */
export function globalOrder(
  n: number,
  worldSize: number,
  epoch: number,
  o: OrderOptions,
): Int32Array {
  const { totalSize } = samplerSizes(n, worldSize, { dropLast: o.dropLast });
  const out = new Int32Array(totalSize);
  if (n === 0) return out;
  const base = o.shuffle ? new TorchGenerator(o.seed + epoch).randperm(n) : null;
  for (let p = 0; p < totalSize; p++) out[p] = base ? base[p % n]! : p % n;
  return out;
}

/** Where a resumed epoch continues: its world size at start and the samples of L already consumed. */
export interface ResumePoint {
  /** The epoch to continue. */
  epoch: number;
  /** world size the epoch started with (defines L) */
  epochWorldSize: number;
  /** samples of L consumed by completed optimizer steps */
  consumed: number;
}

/** rank's share of L[start:], strided over `worldSize`, padded from its start to equal shares. */
export function remainderIndices(
  order: Int32Array,
  start: number,
  worldSize: number,
  rank: number,
): Int32Array {
  const rest = order.subarray(Math.min(start, order.length));
  const per = Math.ceil(rest.length / worldSize);
  const out = new Int32Array(per);
  for (let j = 0; j < per; j++) {
    const p = rank + j * worldSize;
    out[j] = rest[p % rest.length]!;
  }
  return out;
}

/**
 * A DistributedSampler that can resume mid-epoch: after resume(point), the
 * order of point.epoch is the remainder of that epoch; later epochs are
 * torch's order for this world size.
 */
export class ResumableSampler implements Sampler {
  /** The DistributedSampler that gives the order of epochs not resumed. */
  readonly inner: DistributedSampler;
  #resume: ResumePoint | null = null;

  /** Rank `rank` of `worldSize` over a dataset of `datasetLength` samples. */
  constructor(
    readonly datasetLength: number,
    readonly worldSize: number,
    readonly rank: number,
    readonly opts: OrderOptions,
  ) {
    this.inner = new DistributedSampler(datasetLength, { numReplicas: worldSize, rank, ...opts });
  }

  /** The current epoch. */
  get epoch(): number {
    return this.inner.epoch;
  }

  /** Indices per full epoch for this rank (torch's `len(sampler)`; a resumed epoch yields fewer). */
  get length(): number {
    return this.inner.length;
  }

  /** Continues `point.epoch` after `point.consumed` samples of its global order. */
  resume(point: ResumePoint): void {
    this.#resume = point;
    this.inner.setEpoch(point.epoch);
  }

  /** Selects the epoch (a resume point of another epoch is dropped). */
  setEpoch(epoch: number): void {
    if (this.#resume && this.#resume.epoch !== epoch) this.#resume = null;
    this.inner.setEpoch(epoch);
  }

  /** Samples of L consumed before this rank's list of the current epoch begins. */
  get startOffset(): number {
    return this.#resume && this.#resume.epoch === this.inner.epoch ? this.#resume.consumed : 0;
  }

  /** World size that defines the current epoch's global order. */
  get epochWorldSize(): number {
    return this.#resume && this.#resume.epoch === this.inner.epoch
      ? this.#resume.epochWorldSize
      : this.worldSize;
  }

  /** This rank's indices of the current epoch (warns, like DistributedSampler, when an epoch repeats). */
  indices(): Int32Array {
    return this.#remainder() ?? this.inner.indices();
  }

  /** The same indices without counting as a pass over the epoch (for records and checks). */
  peekIndices(): Int32Array {
    return this.#remainder() ?? this.inner.indicesFor(this.inner.epoch);
  }

  #remainder(): Int32Array | null {
    const r = this.#resume;
    if (!r || r.epoch !== this.inner.epoch) return null;
    const order = globalOrder(this.datasetLength, r.epochWorldSize, r.epoch, this.opts);
    return remainderIndices(order, r.consumed, this.worldSize, this.rank);
  }
}
