/**
 * ZeroRedundancyOptimizer: torch's ZeroRedundancyOptimizer (ZeRO stage 1)
 * over a DDP model, and ZeRO stage 2 with `shard: "gradients"`. Each rank
 * keeps the optimizer state (AdamW's moments, SGD's momentum) of its share of
 * the parameters only, whole parameters assigned bucket by bucket
 * (zero_partition.ts); after the gradients are averaged it updates its share
 * and the updated parameters are all-gathered, bucket by bucket, so every
 * rank again holds the whole model. Under "gradients" DDP reduce-scatters
 * each bucket instead of all-reducing it and keeps only this rank's share of
 * the gradients. The update of each parameter is the wrapped optimizer's own
 * (the same bits as DDP with that optimizer), clipping takes the global norm
 * across shards (clipGradNormSharded), and the state dict, once consolidated
 * on one rank, is the wrapped optimizer's layout: it loads into a plain
 * optimizer and back, at any world size.
 *
 *     const ddp = new DistributedDataParallel(model, pg);
 *     const opt = new ZeroRedundancyOptimizer(ddp.parameters(), { optimizerClass: AdamW, ddp, lr: 3e-4 });
 */
import type { Module } from "../nn/module.ts";
import { empty, scope, type Tensor, zeros } from "../tensor/tensor.ts";
import { Optimizer, type OptimizerState, type ParamGroupSpec } from "../optim/optimizer.ts";
import { clipGradNormSharded, gradNormSharded } from "../optim/clip.ts";
import type { NumericsPolicy } from "../tensor/numerics_policy.ts";
import { bufferOf, type DistributedDataParallel } from "./ddp.ts";
import { allGatherJson } from "./gather_json.ts";
import type { ProcessGroup } from "./process_group.ts";
import { blockLayout, partitionBuckets } from "./zero_partition.ts";
import { phase } from "./control/phase.ts";
import type { DType } from "../tensor/dtype.ts";
import { asMemoryKind } from "../tensor/memory_kinds.ts";

/** What is sharded: the optimizer state (ZeRO-1) or also the gradients (ZeRO-2). */
export type ShardMode = "optimizer" | "gradients";

/** The class of the optimizer that each rank runs over its share. */
export type OptimizerClass<H extends { lr: number }> = new (
  params: Tensor[] | ParamGroupSpec<H>[],
  opts?: Partial<H>,
) => Optimizer<H>;

/** ZeroRedundancyOptimizer's own options; the wrapped optimizer's hyperparameters sit beside them. */
export interface ZeroRedundancyOptions<H extends { lr: number }> {
  /** The optimizer each rank runs over its share (torch's optimizer_class). */
  optimizerClass: OptimizerClass<H>;
  /** The DDP model whose parameters are optimized: its process group and gradient buckets. */
  ddp: DistributedDataParallel<Module>;
  /** "optimizer" (ZeRO-1, default) or "gradients" (ZeRO-2: DDP reduce-scatters the gradients). */
  shard?: ShardMode;
}

/** One of DDP's buckets as the sharded step sees it: its parameters, their owners and block offsets. */
export interface ShardBucket {
  /** the bucket's optimized parameters, in packing order */
  params: Tensor[];
  /** the rank that updates each parameter */
  owners: number[];
  /** each parameter's offset in the bucket's flat layout, grouped by owner */
  offsets: number[];
  /** elements per rank's block */
  blockSize: number;
}

/** Sharded optimizer state (ZeRO-1) and gradients (ZeRO-2) over a DDP model. */
export class ZeroRedundancyOptimizer<H extends { lr: number }> extends Optimizer<H> {
  /** The wrapped optimizer: the whole parameter list, state and updates for this rank's share only. */
  readonly local: Optimizer<H>;
  /** The DDP model's process group: the ranks the state is spread over. */
  readonly pg: ProcessGroup;
  /** "optimizer" (ZeRO-1) or "gradients" (ZeRO-2). */
  readonly shard: ShardMode;
  /** DDP's buckets with each parameter's owner (only the optimized parameters). */
  readonly buckets: ShardBucket[];
  /** The parameters this rank updates. */
  readonly mine: ReadonlySet<Tensor>;
  readonly #ddp: DistributedDataParallel<Module>;
  #consolidated: { to: number; state: OptimizerState; kept: Tensor[] } | null = null;
  readonly #reduceSums = (v: Float64Array) => {
    if (this.pg.size > 1) this.pg.allReduce(v, "sum");
  };

  /**
   * Shards `params`' optimizer state (and with shard "gradients" their gradients) over the
   * ranks of `opts.ddp`; the other options are the wrapped optimizer's hyperparameters.
   */
  constructor(
    params: Tensor[] | ParamGroupSpec<H>[],
    opts: ZeroRedundancyOptions<H> & Partial<H>,
  ) {
    const { optimizerClass, ddp, shard = "optimizer", ...hyper } = opts;
    if (typeof optimizerClass !== "function") {
      throw new TypeError("ZeroRedundancyOptimizer: optimizerClass (e.g. AdamW) is required");
    }
    if (!ddp || !Array.isArray(ddp.buckets)) {
      throw new TypeError(
        "ZeroRedundancyOptimizer: ddp (the DistributedDataParallel model) is required",
      );
    }
    if (shard !== "optimizer" && shard !== "gradients") {
      throw new TypeError(
        `ZeroRedundancyOptimizer: shard must be "optimizer" or "gradients", got ${
          JSON.stringify(shard)
        }`,
      );
    }
    const local = new optimizerClass(params, hyper as unknown as Partial<H>);
    super(
      local.groups.map((g) => ({ params: g.params, hyper: g.hyper })) as unknown as ParamGroupSpec<
        H
      >[],
      { ...local.groups[0]!.hyper },
    );
    // One set of hyperparameters: a schedule setting this optimizer's rates sets the local one's.
    local.groups.forEach((g, i) => g.hyper = this.groups[i]!.hyper);
    this.local = local;
    this.pg = ddp.pg;
    this.shard = shard;
    this.#ddp = ddp;
    const optimized = new Set(local.params());
    const inBuckets = new Set(ddp.buckets.flatMap((b) => b.params));
    for (const p of optimized) {
      if (!inBuckets.has(p)) {
        throw new Error(
          `ZeroRedundancyOptimizer: a parameter of shape [${p.shape}] is not a trainable parameter ` +
            "of the DDP model given as ddp",
        );
      }
    }
    const lists = ddp.buckets.map((b) => b.params.filter((p) => optimized.has(p)));
    const owners = partitionBuckets(lists.map((ps) => ps.map((p) => p.numel)), this.pg.size);
    this.buckets = lists.map((ps, b) => {
      const { offsets, blockSize } = blockLayout(
        ps.map((p) => p.numel),
        owners[b]!,
        this.pg.size,
      );
      return { params: ps, owners: owners[b]!, offsets, blockSize };
    });
    const mine = new Set<Tensor>();
    this.buckets.forEach((b) =>
      b.params.forEach((p, i) => {
        if (b.owners[i] === this.pg.rank) mine.add(p);
      })
    );
    this.mine = mine;
    local.keepShard(mine);
    if (shard === "gradients") ddp.shardGradients(this.buckets, this.pg.rank);
  }

  /** Whether this rank updates p. */
  override owns(p: Tensor): boolean {
    return this.mine.has(p);
  }

  /** One step: this rank updates its share, then every rank gets the others' updated parameters. */
  protected update(): void {
    this.#dropConsolidated();
    this.local.updateOnly();
    asMemoryKind("communication", () => this.#gatherParameters());
  }

  /**
   * Every rank's updated share to every rank, bucket by bucket: each rank
   * packs its parameters of the bucket into its block, one allGather, and
   * the others' parameters are copied out of their owners' blocks.
   */
  #gatherParameters(): void {
    const { size, rank } = this.pg;
    if (size === 1) return;
    this.buckets.forEach((b, bi) => {
      if (b.blockSize === 0) return;
      scope(() => {
        const send = zeros([b.blockSize]);
        b.params.forEach((p, i) => {
          if (b.owners[i] === rank) send.subview(b.offsets[i]!, p.shape).copyFrom(p);
        });
        const all = empty([size * b.blockSize]);
        phase(`zero: allgather parameters of bucket ${bi}`, { frequent: true });
        this.pg.allGather(bufferOf(all), bufferOf(send));
        b.params.forEach((p, i) => {
          const r = b.owners[i]!;
          if (r === rank) return;
          p.copyFrom(all.subview(r * b.blockSize + b.offsets[i]!, p.shape));
          p.markModified();
        });
      });
    });
  }

  /**
   * Clips the gradients to a global L2 norm taken across the shards (each
   * rank sums its share; one allReduce of a number per parameter), scaling
   * this rank's share; returns the norm. The same bits as clipGradNorm over
   * every gradient in plain DDP.
   */
  clipGradNorm(maxNorm: number, opts: { numerics?: NumericsPolicy } = {}): number {
    return clipGradNormSharded(
      this.params(),
      (p) => this.mine.has(p),
      maxNorm,
      this.#reduceSums,
      opts,
    );
  }

  /** The global gradient norm (f64) across the shards, as gradNorm gives it in plain DDP. */
  gradNorm(): number {
    return gradNormSharded(this.params(), (p) => this.mine.has(p), this.#reduceSums);
  }

  /**
   * Gathers the whole optimizer state on rank `to` (every rank calls it; as
   * torch's consolidate_state_dict): each state tensor is broadcast by its
   * owner. Afterwards stateDict() on rank `to` returns the state in the
   * wrapped optimizer's own layout, until the next step.
   */
  override consolidateStateDict(to = 0): void {
    if (!Number.isInteger(to) || to < 0 || to >= this.pg.size) {
      throw new RangeError(
        `consolidateStateDict: rank ${to} is not a rank of this group (size ${this.pg.size})`,
      );
    }
    this.#dropConsolidated();
    const own = this.local.stateDict();
    if (this.pg.size === 1) {
      this.#consolidated = { to, state: own, kept: [] };
      return;
    }
    phase("zero: consolidate optimizer state");
    const entries = [...own.tensors].map(([k, t]) => [k, [...t.shape], t.dtype] as const);
    const lists = allGatherJson(this.pg, entries);
    const tensors = new Map<string, Tensor>();
    const kept: Tensor[] = [];
    const me = this.pg.rank;
    lists.forEach((list, r) => {
      for (const [key, shape, dtype] of list) {
        if (r === me) {
          const t = own.tensors.get(key)!;
          this.pg.broadcast(bufferOf(t), r);
          if (me === to) tensors.set(key, t);
          continue;
        }
        const t = asMemoryKind(
          me === to ? "optimizer" : "communication",
          () => empty(shape, dtype as DType).keep(),
        );
        this.pg.broadcast(bufferOf(t), r);
        if (me === to) {
          tensors.set(key, t);
          kept.push(t);
        } else t.dispose();
      }
    });
    // In parameter order, as a plain optimizer's stateDict lists them.
    const order = (k: string) => Number(k.slice(0, k.indexOf(".")));
    const sorted = new Map([...tensors].sort(([a], [b]) => order(a) - order(b)));
    this.#consolidated = { to, state: { tensors: sorted, paramGroups: own.paramGroups }, kept };
  }

  /**
   * The whole optimizer state in the wrapped optimizer's layout: on the rank
   * that consolidateStateDict() gathered it to (in a world of one, always).
   */
  stateDict(): OptimizerState {
    if (this.pg.size === 1) return this.local.stateDict();
    const c = this.#consolidated;
    if (c === null || c.to !== this.pg.rank) {
      throw new Error(
        `ZeroRedundancyOptimizer.stateDict: rank ${this.pg.rank} holds only its share of the ` +
          "optimizer state; call consolidateStateDict(to) on every rank first, then stateDict() " +
          "on rank `to`",
      );
    }
    return c.state;
  }

  /** Loads a whole state (from any world size, or a plain optimizer's): this rank keeps its share. */
  protected loadState(state: OptimizerState): void {
    this.#dropConsolidated();
    this.local.loadStateDict(state);
  }

  #dropConsolidated(): void {
    for (const t of this.#consolidated?.kept ?? []) t.dispose();
    this.#consolidated = null;
  }

  /** The DDP model this optimizer shards for. */
  get ddp(): DistributedDataParallel<Module> {
    return this.#ddp;
  }
}
