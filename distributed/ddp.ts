/**
 * DistributedDataParallel: the same model on every rank, kept identical.
 * At construction it checks that every rank has the same parameter names,
 * shapes and dtypes (the error lists the differences by rank) and copies
 * rank 0's parameters and buffers to all. Gradients land in flat buckets
 * (gradient views, ~25 MiB each, filled in reverse parameter order), and the
 * training step drives their averaging across ranks in one call, as
 * `loss.backward()` does under torch's DDP:
 *
 *     ddp.backward(loss);    // each bucket's allReduce starts as soon as its last gradient is
 *                            // complete; returns with the gradients the mean over ranks
 *     optimizer.step();
 *
 * A backend that overlaps collectives with compute (NCCL) reduces the first
 * buckets while backward still computes the others. A script that wants to
 * overlap work of its own with the last reductions defers the wait:
 * `ddp.backward(loss, { deferGradSync: true })`, its work, then
 * `ddp.finishGradSync()` (also the completion of `backward(loss, {
 * onLeafGrad: ddp.gradReady })`, the wiring ddp.backward uses). noSync() accumulates
 * locally for gradient accumulation. DDP also checks every backward pass
 * through the model: a parameter without a gradient, a plain backward()
 * outside noSync() (which would leave the ranks apart) and a forward before
 * the previous sync finished are errors that say what to do. state_dict
 * keys never carry a "module." prefix.
 */
import type { Module } from "../nn/module.ts";
import {
  type CollectiveBuffer,
  COMPLETED,
  type ProcessGroup,
  SharedReserveError,
  type Work,
} from "./process_group.ts";
import { announceTrainedModel } from "../nn/trained_model_hook.ts";
import { addBackwardObserver, backward, type BackwardOptions } from "../tensor/autograd.ts";
import { full, type Tensor, tensorOverHostMemory, zeros } from "../tensor/tensor.ts";
import { backend } from "../tensor/backend.ts";
import { scale } from "../tensor/ops/elementwise.ts";
import { phase } from "./control/phase.ts";
import { asMemoryKind } from "../tensor/memory_kinds.ts";
import { allGatherJson } from "./gather_json.ts";
import { enter, leave } from "../profile/profile.ts";
import { numericsPolicy, setNumericsPolicy } from "../tensor/numerics_policy.ts";
import { clearShardSlots, setShardSlots } from "../tensor/exact_shards.ts";
import { ExactPlan, exactShardCount, installShardedForward, reduceSlots } from "./exact.ts";

/** DDP options (torch's names in camelCase). */
export interface DDPOptions {
  /** Bucket capacity in MiB (default 25). */
  bucketCapMb?: number;
  /** Allow trainable parameters that get no gradient in a backward pass (default false: error). */
  findUnusedParameters?: boolean;
  /** Copy rank 0's buffers to every rank at construction (default true). */
  broadcastBuffers?: boolean;
  /**
   * Exact mode (distributed/exact.ts): the same bits at every world size
   * that divides the shard count, and in a single process. true: the
   * numerics policy's shard count, else 8; a number: that many canonical
   * shards (a power of two); false: off. Not given: the numerics policy's
   * `exact` field decides. Given, it becomes the process policy's `exact`,
   * so the run's records say what it does.
   */
  exact?: boolean | number;
  /**
   * Keep the gradient buckets in the process group's shared memory, where their allReduce reads
   * and writes the ranks' buckets directly instead of copying them through the group's buffers
   * (the shared-memory group on the CPU, 2 ranks or more; the same bits either way). Default
   * true: the group reserves room for the buckets (reserveShared) unless it was opened with a
   * fixed region (DTRAIN_SHM_SHARED_BYTES=<n>, where they go while they fit) or none
   * (DTRAIN_SHM_SHARED_BYTES=0). When any rank cannot reserve (DTRAIN_SHM_SHARED_LIMIT_BYTES, a
   * full /dev/shm), every rank keeps ordinary buckets and rank 0 says why on stderr.
   */
  sharedBuckets?: boolean;
}

/** Exact mode's state of one DDP: the plan, and each bucket's gradient slots by shard. */
interface ExactState {
  plan: ExactPlan;
  /** per bucket, per canonical shard (this rank's only), a flat slot like the bucket's */
  slots: (Tensor | undefined)[][];
  /** the parameters' slots: views of the flat slots */
  views: Tensor[];
  /** puts the module's own forward back */
  uninstall: () => void;
}

/** ddp.backward's options: backward's own, and when the gradient sync is waited for. */
export interface DDPBackwardOptions extends Omit<BackwardOptions, "onLeafGrad"> {
  /**
   * Return as soon as backward has run, with the last buckets' reductions
   * possibly still in flight (default false: ddp.backward returns with the
   * gradients averaged). The caller then calls ddp.finishGradSync() before
   * anything reads the gradients; the next forward or backward through the
   * model without it is an error.
   */
  deferGradSync?: boolean;
}

/** A bucket's layout under sharded gradients: per-rank blocks, each parameter in its owner's. */
export interface ShardedBucket {
  /** the rank that owns (and updates) each parameter of the bucket, in packing order */
  owners: readonly number[];
  /** each parameter's offset in the bucket's flat layout, grouped by owner */
  offsets: readonly number[];
  /** elements per rank's block (the longest owner's share; shorter ones are padded) */
  blockSize: number;
  /** this rank's block after the reduce-scatter: the gradients of the parameters it owns */
  out: Tensor;
  /** each parameter's place in the bucket */
  slot: Map<Tensor, number>;
  /** the parameters' grads that are views of the flat now (null: not yet moved in) */
  views: (Tensor | null)[];
}

/** Gradients of several parameters packed in one flat tensor, all-reduced (or reduce-scattered) as one message. */
export interface Bucket {
  /** its place in buckets (the phase names it) */
  index: number;
  /** the gradients of its parameters, as views (null: a sharded bucket between steps) */
  flat: Tensor | null;
  /** the flat buffer as the process group takes it (made once per flat: its address never changes) */
  buffer: CollectiveBuffer;
  /** flat lies in the group's shared region (allocShared): its allReduce copies nothing */
  shared: boolean;
  /** under sharded gradients (ZeRO-2): this rank's block of the bucket, and where each parameter is */
  shard: ShardedBucket | null;
  /** The parameters whose gradients the bucket holds, in packing order. */
  params: Tensor[];
  /** gradients of this backward pass still to come */
  pending: number;
  /** the bucket's allReduce in this step, once started */
  work: Work | null;
}

/**
 * Wraps a module for data-parallel training over a process group.
 * (torch.nn.parallel.DistributedDataParallel, with the gradient sync called explicitly:
 * `ddp.backward(loss); ddp.finishGradSync(); opt.step()`.)
 *
 * @example
 * ```ts
 * // ./dtrain --nproc 2 script.ts
 * import { AdamW, crossEntropy, DistributedDataParallel, fromArray, initProcessGroup, Linear, scope } from "dtrain";
 * using pg = initProcessGroup();
 * const ddp = new DistributedDataParallel(new Linear(4, 2), pg); // rank 0's weights on every rank
 * const opt = new AdamW(ddp.parameters(), { lr: 1e-2 });
 * const x = fromArray(new Float32Array(8).fill(pg.rank + 1), [2, 4]); // each rank its own batch
 * const y = fromArray(new Int32Array([0, 1]), [2]);
 * scope(() => {
 *   opt.zeroGrad();
 *   ddp.backward(crossEntropy(ddp.forward(x), y));
 *   ddp.finishGradSync(); // the gradients are now the mean over the ranks
 *   opt.step();
 * });
 * ```
 */
export class DistributedDataParallel<M extends Module> {
  /** The gradient buckets, filled in reverse parameter order as torch's (~bucketCapMb each). */
  readonly buckets: Bucket[] = [];
  readonly #bucketOf = new Map<Tensor, Bucket>();
  readonly #names = new Map<Tensor, string>();
  readonly #findUnused: boolean;
  #sync = true;
  #step = 0;
  /** gradReady() saw a parameter of this model in the current backward pass */
  #passWired = false;
  /** exact mode: the pass running now was seeded with 1/W by ddp.backward */
  #passSeeded = false;
  /**
   * exact mode: whether the passes since the last reduction were seeded with
   * 1/W (the root then takes factor 1) or not (1/W at the root); null: none yet
   */
  #windowSeeded: boolean | null = null;
  /** buckets whose allReduce this step started, in start order; finishGradSync() waits for them */
  #started: Bucket[] = [];
  /** this rank, as shardGradients was told it */
  #rank = 0;
  /** a synced backward ran and finishGradSync() has not yet completed its step */
  #syncPending = false;
  #removeObserver: () => void;
  /** the module's forward function and its bound copy, as `forward` last returned them */
  #boundOf: unknown = null;
  // deno-lint-ignore no-explicit-any
  #bound: any = null;
  /** backward()'s options when the caller passes none (made once) */
  readonly #wired: BackwardOptions;
  /** the shared-region arrays of the buckets whose flat lies there, by bucket index */
  readonly #sharedArrays = new Map<number, Float32Array>();
  /** exact mode's plan and slots, or null when off */
  readonly #exact: ExactState | null = null;

  /**
   * Wraps `module` for data-parallel training over `pg`
   * (torch.nn.parallel.DistributedDataParallel): checks every rank has the same parameters, copies
   * rank 0's parameters (and buffers unless broadcastBuffers is false) to all, and buckets the
   * gradients.
   */
  constructor(readonly module: M, readonly pg: ProcessGroup, opts: DDPOptions = {}) {
    this.#findUnused = opts.findUnusedParameters ?? false;
    this.#wired = { onLeafGrad: this.gradReady };
    const profiled = enter("ddp setup");
    announceTrainedModel(module);
    const named = module.namedParameters();
    for (const [n, p] of named) this.#names.set(p, n);
    phase("ddp: verify parameters");
    this.#verifyAcrossRanks();
    phase("ddp: broadcast parameters");
    for (const [, p] of named) pg.broadcast(bufferOf(p), 0);
    for (const [, p] of named) p.markModified(); // written through its address: no cached copy of it holds
    if (opts.broadcastBuffers ?? true) {
      for (const [, b] of module.namedBuffers()) pg.broadcast(bufferOf(b), 0);
    }
    const shards = exactShardCount(opts.exact, numericsPolicy().exact);
    // exact mode reduces its own slots, never a bucket's flat: no shared memory for them
    this.#makeBuckets(
      named.map(([, p]) => p).reverse(),
      (opts.bucketCapMb ?? 25) * 2 ** 20,
      (opts.sharedBuckets ?? true) && shards === null,
    );
    if (shards !== null) this.#exact = this.#makeExact(new ExactPlan(shards, pg.size, pg.rank));
    if ((shards ?? false) !== numericsPolicy().exact) {
      // The records (run.json's numerics, from the process's policy) say what the run does.
      setNumericsPolicy({ ...numericsPolicy(), exact: shards ?? false }, "DDP's exact option");
    }
    // Checks every backward pass through this model; the reduction itself is the step's (gradReady).
    this.#removeObserver = addBackwardObserver({
      onBackwardEnd: (received) => this.#endPass(received),
    });
    leave(profiled);
  }

  /** Exact mode's canonical shard count, or null when exact mode is off. */
  get exactShards(): number | null {
    return this.#exact?.plan.shards ?? null;
  }

  /** Exact mode: a slot per bucket and local shard, the parameters' slots views of it. */
  #makeExact(plan: ExactPlan): ExactState {
    const slots = this.buckets.map((b) => {
      const flat = b.flat!;
      const perShard: (Tensor | undefined)[] = [];
      for (const s of plan.local) {
        perShard[s] = asMemoryKind("gradients", () => zeros([flat.numel]).keep());
      }
      return perShard;
    });
    const views: Tensor[] = [];
    this.buckets.forEach((b, i) => {
      let off = 0;
      for (const p of b.params) {
        const mine: (Tensor | undefined)[] = [];
        for (const s of plan.local) {
          mine[s] = slots[i]![s]!.subview(off, p.shape).keep();
          views.push(mine[s]!);
        }
        setShardSlots(p, mine);
        off += p.numel;
      }
    });
    return { plan, slots, views, uninstall: installShardedForward(this.module, plan, this.pg) };
  }

  /** The wrapped module's forward, typed by the module. */
  get forward(): M extends { forward: infer F } ? F : never {
    this.#requireFinished("forward");
    // deno-lint-ignore no-explicit-any
    const m = this.module as any;
    // Bound once per forward function (a step reads ddp.forward once: no closure per step).
    if (this.#boundOf !== m.forward) {
      this.#boundOf = m.forward;
      this.#bound = m.forward.bind(m);
    }
    return this.#bound;
  }

  /**
   * backward(loss) with this model's gradient reduction wired in: each
   * bucket's allReduce (mean over ranks) starts as soon as its last gradient
   * is complete, and the call returns once every bucket is reduced: the
   * gradients are the mean over ranks, ready for clipping and the optimizer.
   * Inside noSync() the gradients only accumulate. With `deferGradSync:
   * true` it returns without waiting; finishGradSync() completes the sync.
   */
  backward(loss: Tensor, opts: DDPBackwardOptions = {}): void {
    this.#requireFinished("backward");
    this.#armShardedBuckets();
    let any = false, defer = false;
    for (const k in opts) {
      if (k === "deferGradSync") defer = opts.deferGradSync === true;
      else any = true;
    }
    const seed = this.#exactSeed(loss, opts.gradient);
    this.#passSeeded = seed !== null;
    try {
      if (any || seed) {
        const { deferGradSync: _, ...rest } = opts;
        backward(loss, {
          ...rest,
          ...(seed ? { gradient: seed } : {}),
          onLeafGrad: this.gradReady,
        });
      } else backward(loss, this.#wired); // the step's common case: no options object made
    } finally {
      this.#passSeeded = false;
      seed?.dispose();
    }
    if (!defer) this.finishGradSync();
  }

  /**
   * Exact mode on W > 1 ranks: the backward's seed times 1/W (null: the
   * caller's seed as it is). A mean loss over the rank's B/W rows gives each
   * row a factor W/B, so without it every gradient inside the backward is W
   * times its single-process value: exact in f32 and bf16 arithmetic, but
   * not where a value leaves the number format's range — an f16 product's
   * gradient that overflows (GradScaler then skips the step) or goes
   * subnormal at one world size and not another. With the seed 1/W (a power
   * of two: exact) every value of the pass has its single-process bits.
   */
  #exactSeed(loss: Tensor, given: Tensor | undefined): Tensor | null {
    const W = this.#exact?.plan.world ?? 1;
    if (W === 1) return null;
    return given ? scale(given, 1 / W).keep() : full(loss.shape, 1 / W, loss.dtype).keep();
  }

  /**
   * backward()'s per-leaf callback for this model (`backward(loss, {
   * onLeafGrad: ddp.gradReady })`): counts the parameter's bucket down and
   * starts the bucket's allReduce when it is complete.
   */
  readonly gradReady = (leaf: Tensor): void => {
    const b = this.#bucketOf.get(leaf);
    if (!b) return;
    this.#passWired = true;
    if (this.#exact && this.#windowSeeded !== this.#passSeeded) {
      if (this.#windowSeeded !== null) {
        throw new Error(
          "exact mode: the backward passes of one step were started both by ddp.backward(loss) " +
            "(seeded with 1/W) and by backward(loss, { onLeafGrad: ddp.gradReady }) (not): their " +
            "gradients would be summed at two scales; start every pass of a step the same way " +
            "(ddp.backward is the one whose bits do not depend on the world size in f16)",
        );
      }
      this.#windowSeeded = this.#passSeeded;
    }
    if (b.shard) this.#intoFlat(b, b.shard, leaf);
    b.pending--;
    if (b.pending === 0 && this.#sync) this.#start(b);
  };

  /**
   * Completes a deferred gradient sync (`ddp.backward(loss, { deferGradSync:
   * true })`, or `backward(loss, { onLeafGrad: ddp.gradReady })`): starts the allReduce of every
   * bucket the backward pass left incomplete (parameters without a gradient,
   * with findUnusedParameters), then waits for every bucket. Afterwards every
   * rank holds the same gradients, the mean over ranks. Does nothing when no
   * synced backward ran since the last call.
   */
  finishGradSync(): void {
    if (!this.#syncPending) return;
    const profiled = enter("reduction wait");
    try {
      for (const b of this.buckets) if (!b.work) this.#start(b);
      for (const b of this.#started) b.work!.wait();
    } finally {
      leave(profiled);
      for (const b of this.buckets) b.work = null;
      this.#started = [];
      this.#syncPending = false;
      this.#windowSeeded = null;
      this.#step++;
    }
  }

  /** The wrapped module's parameters. */
  parameters(): Tensor[] {
    return this.module.parameters();
  }

  /** The wrapped module's state dict: no "module." prefix. */
  stateDict(): Map<string, Tensor> {
    return this.module.stateDict();
  }

  /** Runs fn with gradient averaging off: backward passes inside only accumulate locally. */
  noSync<T>(fn: () => T): T {
    const prev = this.#sync;
    this.#sync = false;
    try {
      return fn();
    } finally {
      this.#sync = prev;
    }
  }

  /** Stops watching backward passes and frees the buckets (the module stays usable alone). */
  close(): void {
    this.#removeObserver();
    this.#dropStarted(); // nothing may still write into the buckets
    this.#syncPending = false;
    if (this.#exact) {
      this.#exact.uninstall();
      for (const b of this.buckets) for (const p of b.params) clearShardSlots(p);
      for (const v of this.#exact.views) v.dispose();
      for (const perShard of this.#exact.slots) for (const t of perShard) t?.dispose();
      this.#exact.plan.dispose();
    }
    for (const b of this.buckets) {
      for (const p of b.params) {
        if (!p.grad) continue; // another rank's share under sharded gradients
        const g = asMemoryKind("gradients", () => zeros(p.shape).keep()).copyFrom(p.grad);
        p.grad.dispose();
        p.grad = g;
      }
      b.flat?.dispose();
      b.shard?.out.dispose();
    }
    this.buckets.length = 0;
    this.#bucketOf.clear();
  }

  /**
   * A bucket's flat gradients (zeroed) in the group's shared region, whose allReduce then reads and
   * writes the ranks' buckets directly instead of copying them through the group's buffers (once
   * #useSharedMemory said yes), with its array; null once the region is full. Every rank gets the
   * same answer: the region's size is the same on every rank (rank 0's, or reserved by all), and
   * every rank asks for the same buckets in the same order.
   */
  #sharedFlat(numel: number): { flat: Tensor; arr: Float32Array } | null {
    if (!this.pg.allocShared || numel === 0) return null;
    let arr: Float32Array;
    try {
      arr = this.pg.allocShared(numel);
    } catch (e) {
      if (e instanceof RangeError) return null; // no region, or no room left in it
      throw e;
    }
    const ptr = Deno.UnsafePointer.of(arr)!;
    const flat = asMemoryKind("gradients", () => tensorOverHostMemory(ptr, [numel]).keep());
    return { flat, arr };
  }

  /**
   * Whether the buckets (`bytes` in the shared region, each from a 64-byte boundary) go to the
   * group's shared memory: on the shared-memory group, on the CPU, with 2 ranks or more. A group
   * opened without a fixed region reserves them room now (collective: every rank asks for the
   * same bytes); when any rank cannot, every rank gets the same SharedReserveError and keeps
   * ordinary buckets, and rank 0 says why in one line.
   */
  #useSharedMemory(wanted: boolean, bytes: number): boolean {
    const pg = this.pg;
    if (!wanted || !pg.allocShared || pg.size < 2 || bytes === 0 || backend().device !== "cpu") {
      return false;
    }
    if ((pg.sharedBytes ?? 0) > 0) return true; // a region already: buckets go there while they fit
    if (!pg.sharedOnDemand || !pg.reserveShared) return false;
    try {
      pg.reserveShared(bytes);
      return true;
    } catch (e) {
      if (!(e instanceof SharedReserveError)) throw e;
      if (pg.rank === 0) console.error(`[dtrain] ${sharedFallbackLine(e)}`);
      return false;
    }
  }

  #makeBuckets(params: Tensor[], capBytes: number, sharedWanted: boolean): void {
    const groups: Tensor[][] = [];
    let group: Tensor[] = [];
    let bytes = 0;
    for (const p of params) {
      if (p.dtype !== "f32") {
        throw new TypeError(
          `DDP: parameter ${this.#names.get(p)} is ${p.dtype}; master weights must be f32`,
        );
      }
      if (bytes > 0 && bytes + p.bytes > capBytes) {
        groups.push(group);
        group = [];
        bytes = 0;
      }
      group.push(p);
      bytes += p.bytes;
    }
    if (group.length > 0) groups.push(group);
    const sharedBytes = groups.reduce(
      (a, g) => a + Math.ceil(g.reduce((n, p) => n + p.bytes, 0) / 64) * 64,
      0,
    );
    const shared = this.#useSharedMemory(sharedWanted, sharedBytes);
    for (const group of groups) {
      const numel = group.reduce((a, p) => a + p.numel, 0);
      const sharedFlat = shared ? this.#sharedFlat(numel) : null;
      if (sharedFlat) this.#sharedArrays.set(this.buckets.length, sharedFlat.arr);
      const flat = sharedFlat?.flat ?? asMemoryKind("gradients", () => zeros([numel]).keep());
      let off = 0;
      for (const p of group) {
        const view = flat.subview(off, p.shape).keep();
        if (p.grad) {
          view.copyFrom(p.grad);
          p.grad.dispose();
        }
        p.grad = view;
        off += p.numel;
      }
      const bucket: Bucket = {
        index: this.buckets.length,
        flat,
        buffer: bufferOf(flat),
        shared: sharedFlat !== null,
        shard: null,
        params: group,
        pending: group.length,
        work: null,
      };
      for (const p of group) this.#bucketOf.set(p, bucket);
      this.buckets.push(bucket);
    }
  }

  #start(b: Bucket): void {
    if (this.#exact) {
      // The fixed tree over every rank's shards, added into the bucket as the mean over ranks.
      phase(`exact reduction of bucket ${b.index} of step ${this.#step}`, FREQUENT);
      // Passes seeded with 1/W by ddp.backward hold the mean over ranks already.
      const factor = this.#windowSeeded ? 1 : 1 / this.#exact.plan.world;
      reduceSlots(b.flat!, this.#exact.slots[b.index]!, this.#exact.plan, this.pg, factor);
      b.work = COMPLETED;
      this.#started.push(b);
      return;
    }
    if (b.shard) {
      this.#reduceScatter(b, b.shard);
      return;
    }
    phase(`allreduce bucket ${b.index} of step ${this.#step}`, FREQUENT);
    b.work = this.pg.allReduceStart(b.buffer, "avg");
    this.#started.push(b);
  }

  /**
   * Sharded gradients (ZeRO-2, set by a ZeroRedundancyOptimizer with shard:
   * "gradients"): each bucket is laid out as one block per rank, each
   * parameter's gradient in its owner's block (`layout[b]`, for every
   * bucket, listing its parameters in bucket order). A synced backward then
   * reduce-scatters every complete bucket (the mean over ranks, the same
   * arithmetic as the allReduce) and frees it: afterwards this rank holds the
   * gradients of its own parameters only; the others' grad is null. A bucket
   * is whole only from its first complete gradient to its reduce-scatter.
   * Every synced step through ddp.backward starts from zero gradients.
   */
  shardGradients(
    layout: readonly {
      params: readonly Tensor[];
      owners: readonly number[];
      offsets: readonly number[];
      blockSize: number;
    }[],
    rank: number,
  ): void {
    if (this.#exact) {
      throw new Error(
        "DDP: exact mode cannot shard gradients (ZeRO, ddp.shard): a reduce-scatter's sums " +
          "depend on the world size; train exact runs with plain DDP",
      );
    }
    if (this.#syncPending || this.buckets.some((b) => b.shard)) {
      throw new Error("DDP.shardGradients: called twice, or while a gradient sync is pending");
    }
    const same = layout.length === this.buckets.length &&
      layout.every((l, i) =>
        l.params.length === this.buckets[i]!.params.length &&
        l.params.every((p, j) => p === this.buckets[i]!.params[j])
      );
    if (!same) {
      throw new Error(
        "DDP: sharded gradients need every trainable parameter of the model in the sharded " +
          "optimizer (freeze the others with requiresGrad = false before wrapping the model)",
      );
    }
    layout.forEach((l, i) => {
      const b = this.buckets[i]!;
      const out = asMemoryKind("gradients", () => zeros([l.blockSize]).keep());
      b.shard = {
        owners: l.owners,
        offsets: l.offsets,
        blockSize: l.blockSize,
        out,
        slot: new Map(b.params.map((p, j) => [p, j])),
        views: b.params.map(() => null),
      };
      this.#releaseFlat(b, b.shard, rank);
    });
    this.#rank = rank;
  }

  /**
   * At a synced step's first backward, sharded buckets hold no flat: every
   * parameter's grad is dropped (this rank's were views of its block), so
   * autograd gives each a gradient of its own, which #intoFlat moves into the
   * bucket once it is complete. A bucket's flat exists only from its first
   * complete gradient to its reduce-scatter.
   */
  #armShardedBuckets(): void {
    for (const b of this.buckets) {
      if (!b.shard || b.flat) continue;
      for (const p of b.params) {
        p.grad?.dispose();
        p.grad = null;
      }
    }
  }

  /** A sharded bucket's flat (zeroed), made at its first complete gradient. */
  #flatOf(b: Bucket, sh: ShardedBucket): Tensor {
    if (!b.flat) {
      b.flat = asMemoryKind("gradients", () => zeros([this.pg.size * sh.blockSize]).keep());
      b.buffer = bufferOf(b.flat);
    }
    return b.flat;
  }

  /** Moves a complete gradient into its slot of the bucket's flat (once; later passes add there). */
  #intoFlat(b: Bucket, sh: ShardedBucket, p: Tensor): void {
    const i = sh.slot.get(p)!;
    if (sh.views[i] !== null && sh.views[i] === p.grad) return;
    const view = this.#flatOf(b, sh).subview(sh.owners[i]! * sh.blockSize + sh.offsets[i]!, p.shape)
      .keep();
    if (p.grad) {
      view.copyFrom(p.grad);
      p.grad.dispose();
    }
    p.grad = view;
    sh.views[i] = view;
  }

  #reduceScatter(b: Bucket, sh: ShardedBucket): void {
    const flat = this.#flatOf(b, sh); // none yet when no parameter of the bucket got a gradient
    phase(`reduce-scatter bucket ${b.index} of step ${this.#step}`, FREQUENT);
    this.pg.reduceScatter(bufferOf(sh.out), bufferOf(flat), "avg");
    this.#releaseFlat(b, sh, this.#rank);
    b.work = COMPLETED;
    this.#started.push(b);
  }

  /** The bucket's flat goes: this rank's parameters' grads become views of its block, the others' null. */
  #releaseFlat(b: Bucket, sh: ShardedBucket, rank: number): void {
    b.params.forEach((p, i) => {
      p.grad?.dispose();
      p.grad = sh.owners[i] === rank ? sh.out.subview(sh.offsets[i]!, p.shape).keep() : null;
      sh.views[i] = null;
    });
    b.flat?.dispose();
    b.flat = null;
    // A flat in the shared region is never used again (the next is an ordinary one, made at the
    // first complete gradient): its pages go back, or every rank would keep the whole bucket.
    const arr = this.#sharedArrays.get(b.index);
    if (arr) {
      this.pg.releaseShared?.(arr);
      this.#sharedArrays.delete(b.index);
      b.shared = false;
    }
  }

  /** The end of a backward pass: which parameters got no gradient, and whether the pass was synced. */
  #endPass(received: ReadonlySet<Tensor>): void {
    const wired = this.#passWired;
    this.#passWired = false;
    let got = 0;
    for (const b of this.buckets) {
      b.pending = b.params.length;
      for (const p of b.params) if (received.has(p)) got++;
    }
    if (got === 0) return; // a backward pass over another model
    // In parameter order, as the user knows them (listed only when some are missing).
    const unused = got === this.#bucketOf.size
      ? []
      : [...this.#names.keys()].filter((p) => this.#bucketOf.has(p) && !received.has(p));
    if (unused.length > 0 && !this.#findUnused) {
      this.#dropStarted();
      throw new Error(
        `DDP: ${unused.length} trainable parameter(s) received no gradient in this backward pass: ` +
          `${
            unused.map((p) => this.#names.get(p)).join(", ")
          }. Every rank must use every parameter ` +
          `(or pass findUnusedParameters: true, or set requiresGrad = false on parameters you do not train).`,
      );
    }
    if (!this.#sync) return;
    if (!wired) {
      this.#dropStarted();
      throw new Error(
        "DDP: backward() ran through the wrapped model without its gradient sync, so the ranks' " +
          "gradients were not averaged: use ddp.backward(loss), which returns with them averaged, " +
          "or ddp.noSync(() => ddp.backward(loss)) to accumulate gradients locally.",
      );
    }
    this.#syncPending = true;
  }

  /** After a failed pass: lets the reductions it started finish, and forgets them. */
  #dropStarted(): void {
    for (const b of this.#started) {
      try {
        b.work!.wait();
      } catch { /* the pass already failed; its error is the one to report */ }
    }
    for (const b of this.buckets) b.work = null;
    this.#started = [];
  }

  /** Throws when the previous synced backward's gradients were never finished. */
  #requireFinished(what: string): void {
    if (!this.#syncPending) return;
    throw new Error(
      `DDP: ${what} before the previous backward's gradient sync finished: a deferred sync ` +
        "(ddp.backward(loss, { deferGradSync: true })) needs ddp.finishGradSync() before the " +
        "optimizer step and the next forward.",
    );
  }

  /** Every rank's parameter list equals rank 0's, or an error lists the differences by rank. */
  #verifyAcrossRanks(): void {
    const mine = this.module.namedParameters().map(([n, p]) => `${n}:${p.dtype}[${p.shape}]`);
    const lists = allGatherJson(this.pg, mine);
    const ref = lists[0]!;
    const problems: string[] = [];
    lists.forEach((list, r) => {
      if (r === 0) return;
      const refNames = new Map(ref.map((e) => [e.split(":")[0]!, e]));
      const names = new Map(list.map((e) => [e.split(":")[0]!, e]));
      const diffs: string[] = [];
      for (const [n, e] of names) {
        const re = refNames.get(n);
        if (!re) diffs.push(`has ${e} which rank 0 lacks`);
        else if (re !== e) diffs.push(`${e} vs rank 0 ${re}`);
      }
      for (const [n, e] of refNames) if (!names.has(n)) diffs.push(`lacks ${e}`);
      if (diffs.length === 0 && list.join() !== ref.join()) {
        diffs.push("same parameters in a different order");
      }
      if (diffs.length) problems.push(`rank ${r}: ${diffs.join("; ")}`);
    });
    if (problems.length) {
      throw new Error(`DDP: the model differs between ranks: ${problems.join(" | ")}`);
    }
  }
}

const FREQUENT = { frequent: true } as const;

/** A tensor as a collective buffer, saying where its memory is (a group refuses the wrong device). */
export function bufferOf(
  t: Tensor,
): {
  ptr: Deno.PointerObject;
  count: number;
  dtype: "f32" | "i32" | "i64";
  device: "cpu" | "cuda";
} {
  if (t.dtype !== "f32" && t.dtype !== "i32" && t.dtype !== "i64") {
    throw new TypeError(`cannot synchronise a ${t.dtype} tensor across ranks`);
  }
  return { ptr: t.ptr, count: t.numel, dtype: t.dtype, device: t.device };
}

/** Rank 0's line when DDP keeps ordinary buckets because reserving shared memory failed. */
function sharedFallbackLine(e: SharedReserveError): string {
  const fix = e.step === "limit"
    ? `raise DTRAIN_SHM_SHARED_LIMIT_BYTES to at least ${e.bytes}`
    : e.step === "space"
    ? `give /dev/shm room for ${e.bytes} bytes per rank (docker --shm-size, or ` +
      "mount -o remount,size=<bytes> /dev/shm; dtrain doctor --params N says how much)"
    : "check /dev/shm (dtrain doctor)";
  return `DDP keeps its gradient buckets out of shared memory, so their allReduce copies ` +
    `through the group's buffers (slower): ${e.message}. To fix: ${fix}; ` +
    "DTRAIN_SHM_SHARED_BYTES=0 turns the shared buckets off without this line";
}
