/**
 * DataLoader: batches of a Dataset in the order a sampler gives (a
 * DistributedSampler, or the identity), with the next batches prepared in
 * the background while the current step computes, the time spent waiting
 * for data measured per batch, and a state (epoch, position) from which a
 * resumed run continues mid-epoch.
 */
import type { Dataset } from "./dataset.ts";
import type { Tensor } from "../tensor/tensor.ts";
import { setImmediate } from "node:timers";
import { enter, leave } from "../profile/profile.ts";

/** What orders the indices of an epoch. */
export interface Sampler {
  /** Selects the epoch whose order indices() returns next. */
  setEpoch(epoch: number): void;
  /** The dataset indices of the current epoch, in the order to visit them. */
  indices(): Int32Array;
  /** The sampler's current epoch, when it tracks one (setEpoch called on the sampler directly). */
  readonly epoch?: number;
  /** Told when an iteration went through `epoch`'s order to its end (DistributedSampler warns on repeats). */
  passCompleted?(epoch: number): void;
  /** Indices per epoch (torch's `len(sampler)`), which DataLoader.length reads; without it, indices() is counted. */
  readonly length?: number;
}

/** Options of a DataLoader. */
export interface DataLoaderOptions {
  /** Samples per batch. */
  batchSize: number;
  /** Ordering of indices (default: 0..n-1 every epoch). */
  sampler?: Sampler;
  /** Drop the last incomplete batch (default false). */
  dropLast?: boolean;
  /** Batches prepared ahead (default 2; 0 disables prefetch). */
  prefetch?: number;
}

/** A batch and where it sits in its epoch. */
export interface Batch {
  /** One tensor per dataset column, each with the batch as its first dim. */
  tensors: Tensor[];
  /** dataset indices of the samples */
  indices: Int32Array;
  /** The epoch the batch belongs to. */
  epoch: number;
  /** 0-based batch number inside the epoch */
  position: number;
  /** milliseconds the consumer waited for this batch */
  waitMs: number;
}

/** Where iteration stands: the next batch to produce. */
export interface DataLoaderState {
  /** The epoch of the next batch. */
  epoch: number;
  /** 0-based number of the next batch within its epoch. */
  position: number;
}

/** What a loader pass hook sees: the epoch and its index order, drawn before any batch. */
export interface LoaderPass {
  epoch: number;
  order: Int32Array;
}

/**
 * Called at the start of every loader pass, after the sampler drew the
 * order; returning false makes the pass yield no batch, a number makes it
 * yield at most that many. A hook point for tools: `dtrain check`'s sampler
 * stage records every rank's order computing one batch per pass.
 */
export type LoaderPassHook = (pass: LoaderPass) => boolean | number;

const passHooks = new Set<LoaderPassHook>();

/** Adds a hook to every loader pass; returns the function that removes it. */
export function addLoaderPassHook(hook: LoaderPassHook): () => void {
  passHooks.add(hook);
  return () => passHooks.delete(hook);
}

/** What a loader batch hook sees: the dataset indices of a batch about to be yielded. */
export interface LoaderBatch {
  epoch: number;
  /** the batch's place in its epoch */
  position: number;
  /** its dataset indices (the hook must not keep a reference past its call) */
  indices: Int32Array;
}

/** Called before every batch a loader yields: a hook point for tools (`dtrain check` measures batches). */
export type LoaderBatchHook = (batch: LoaderBatch) => void;

const batchHooks = new Set<LoaderBatchHook>();

/** Adds a hook to every batch of every loader; returns the function that removes it. */
export function addLoaderBatchHook(hook: LoaderBatchHook): () => void {
  batchHooks.add(hook);
  return () => batchHooks.delete(hook);
}

/** How often iteration lets timers, signals and sockets run (ms). */
const YIELD_EVERY_MS = 20;

/** Identity order. */
class SequentialSampler implements Sampler {
  constructor(readonly n: number) {}
  get length(): number {
    return this.n;
  }
  setEpoch(_epoch: number): void {}
  indices(): Int32Array {
    return Int32Array.from({ length: this.n }, (_, i) => i);
  }
}

/**
 * Batches of a Dataset in a sampler's order, prepared ahead, resumable mid-epoch
 * (torch.utils.data.DataLoader); iterate it with `for await`.
 *
 * @example
 * ```ts
 * import { DataLoader, DistributedSampler, fromArray, scope, TensorDataset } from "dtrain";
 * const data = new TensorDataset(
 *   { data: new Float32Array(64 * 4), sampleShape: [4] },
 *   { data: new Int32Array(64), sampleShape: [] },
 * );
 * const sampler = new DistributedSampler(data.length, { numReplicas: 1, rank: 0, seed: 0 });
 * const loader = new DataLoader(data, { batchSize: 16, sampler });
 * for (let epoch = 0; epoch < 2; epoch++) {
 *   loader.setEpoch(epoch);
 *   for await (const { tensors: [x, y] } of loader) scope(() => console.log(x!.shape, y!.shape));
 * }
 * ```
 */
export class DataLoader {
  /** Samples per batch. */
  readonly batchSize: number;
  /** The order of each epoch (default: 0..n-1 every epoch). */
  readonly sampler: Sampler;
  /** Whether the last incomplete batch is dropped. */
  readonly dropLast: boolean;
  /** Batches prepared ahead (0: none). */
  readonly prefetch: number;
  #epoch = 0;
  #position = 0;
  /** where the next iteration starts (set by loadState), or null: at the epoch's start */
  #resumeAt: number | null = null;
  #totalWaitMs = 0;
  #lastYield = 0;
  #batches = 0;

  /** A loader over `dataset`; throws unless batchSize is a positive integer. */
  constructor(readonly dataset: Dataset, opts: DataLoaderOptions) {
    if (!Number.isSafeInteger(opts.batchSize) || opts.batchSize < 1) {
      throw new RangeError(
        `DataLoader: batchSize must be a positive integer, got ${opts.batchSize}`,
      );
    }
    this.batchSize = opts.batchSize;
    this.sampler = opts.sampler ?? new SequentialSampler(dataset.length);
    this.dropLast = opts.dropLast ?? false;
    this.prefetch = opts.prefetch ?? 2;
  }

  /**
   * Batches in a full epoch (torch's `len(loader)`): the sampler's length
   * (this rank's share under a DistributedSampler) over the batch size,
   * rounded down with dropLast, up without.
   *
   * @example
   * ```ts
   * const stepsPerEpoch = loader.length;
   * ```
   */
  get length(): number {
    const n = this.sampler.length;
    return this.batchesFor(typeof n === "number" ? n : this.sampler.indices().length);
  }

  /** Number of batches in an epoch of `count` indices. */
  batchesFor(count: number): number {
    return this.dropLast ? Math.floor(count / this.batchSize) : Math.ceil(count / this.batchSize);
  }

  /** Selects the epoch that the next iteration produces (and tells the sampler). */
  setEpoch(epoch: number): void {
    if (epoch !== this.#epoch) {
      this.#position = 0;
      this.#resumeAt = null;
    }
    this.#epoch = epoch;
    this.sampler.setEpoch(epoch);
  }

  /** The next batch to be produced (save it in a checkpoint to resume mid-epoch). */
  state(): DataLoaderState {
    return { epoch: this.#epoch, position: this.#position };
  }

  /**
   * Continues from a saved state: the next iteration starts at that batch
   * (a state saved after an epoch's last batch starts that epoch again; call
   * setEpoch(epoch + 1) for the next one).
   */
  loadState(s: DataLoaderState): void {
    if (
      !Number.isSafeInteger(s.epoch) || s.epoch < 0 ||
      !Number.isSafeInteger(s.position) || s.position < 0
    ) {
      throw new RangeError(
        `DataLoader: invalid state epoch=${s.epoch} position=${s.position}`,
      );
    }
    this.#epoch = s.epoch;
    this.#position = s.position;
    this.#resumeAt = s.position;
    this.sampler.setEpoch(s.epoch);
  }

  /** Mean milliseconds per batch that the consumer waited for data. */
  get meanWaitMs(): number {
    return this.#batches ? this.#totalWaitMs / this.#batches : 0;
  }

  /**
   * The batches of the current epoch. As a new iterator of a PyTorch
   * DataLoader, each iteration starts at the epoch's first batch (a peek at
   * one batch in setup skips nothing); after loadState() iterations of that
   * epoch start at the saved position until one goes to the epoch's end.
   * Tensors of a batch belong to the consumer (dispose them, or create them
   * in a scope).
   */
  async *[Symbol.asyncIterator](): AsyncGenerator<Batch> {
    // The user may call sampler.setEpoch() directly, as with torch: follow it.
    const samplerEpoch = this.sampler.epoch ?? this.#epoch;
    if (samplerEpoch !== this.#epoch) {
      this.#epoch = samplerEpoch;
      this.#resumeAt = null;
    }
    // A loadState() point holds for every pass of its epoch until one goes to the end, so a
    // peek at a batch after resuming (the DDP tutorial's) does not use it up.
    const resumeAt = this.#resumeAt ?? 0;
    const order = this.sampler.indices();
    const nBatches = this.batchesFor(order.length);
    // A state saved after the epoch's last batch: the epoch again.
    this.#position = resumeAt >= nBatches ? 0 : resumeAt;
    let end = nBatches;
    for (const hook of passHooks) {
      const allow = hook({ epoch: this.#epoch, order });
      if (allow === false) return;
      if (typeof allow === "number") end = Math.min(end, this.#position + Math.max(0, allow));
    }
    const epoch = this.#epoch;
    const slice = (b: number) =>
      order.subarray(
        b * this.batchSize,
        Math.min(order.length, (b + 1) * this.batchSize),
      );
    // Batches are prepared ahead only where that happens off this thread.
    const useAsync = this.prefetch > 0 && this.dataset.getBatchAsync !== undefined &&
      (this.dataset.fetchesInBackground?.(this.batchSize) ?? true);
    const pending = new Map<number, Promise<Tensor[]>>();
    const start = (b: number) => {
      if (b < nBatches && !pending.has(b)) {
        const p = this.dataset.getBatchAsync!(slice(b));
        p.catch(() => {}); // observed when awaited
        pending.set(b, p);
      }
    };
    try {
      for (let b = this.#position; b < end; b++) {
        // Batches that are ready at once resolve as microtasks, which would starve the event
        // loop (signal handlers, the control store's phase reports): give it a turn now and then.
        let t0 = performance.now();
        if (t0 - this.#lastYield > YIELD_EVERY_MS) {
          // setImmediate, not setTimeout(0): one turn of the loop (timers, I/O, signals) in a few
          // microseconds, where a timer waits for the clock's next millisecond (~1-3 ms here).
          await new Promise((r) => setImmediate(r));
          this.#lastYield = t0 = performance.now();
        }
        const prev = enter("data wait");
        let tensors: Tensor[];
        try {
          if (useAsync) {
            start(b);
            for (let k = 1; k <= this.prefetch; k++) start(b + k);
            tensors = await pending.get(b)!;
            pending.delete(b);
          } else {
            tensors = this.dataset.getBatch(slice(b));
          }
        } finally {
          leave(prev);
        }
        const waitMs = performance.now() - t0;
        this.#totalWaitMs += waitMs;
        this.#batches++;
        this.#position = b + 1;
        const indices = slice(b);
        for (const hook of batchHooks) hook({ epoch, position: b, indices });
        yield { tensors, indices, epoch, position: b, waitMs };
      }
      if (end < nBatches) return; // a hook cut the pass short
      if (this.#epoch === epoch) {
        this.#position = nBatches;
        this.#resumeAt = null; // the resumed epoch is done: later passes start at its beginning
      }
      this.sampler.passCompleted?.(epoch);
    } finally {
      // Batches prepared ahead but never consumed (the loop was left early).
      for (const p of pending.values()) {
        p.then((ts) => ts.forEach((t) => t.dispose()), () => {});
      }
    }
  }
}
