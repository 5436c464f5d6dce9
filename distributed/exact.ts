/**
 * Exact mode's arithmetic (docs/DESIGN.md, "Exact mode"): the global batch
 * is cut into S canonical shards (shard s holds the global positions p ≡ s
 * mod S), the model's forward runs once per shard this process holds, with
 * the same shapes at every world size, each shard's parameter gradients land
 * in a slot of their own (tensor/exact_shards.ts), and the slots are summed
 * in one fixed tree whose subtrees are exactly what each rank holds for every
 * world size that divides S. The weights then have the same bits on 1, 2, 4,
 * … S ranks and in a single process.
 */
import type { Module } from "../nn/module.ts";
import type { ProcessGroup } from "./process_group.ts";
import { isGradEnabled } from "../tensor/autograd.ts";
import { inShard, shardScope, takeShardStatistics } from "../tensor/exact_shards.ts";
import { backend } from "../tensor/backend.ts";
import { empty, fromArray, Tensor } from "../tensor/tensor.ts";
import { cat } from "../tensor/ops/layout.ts";
import { indexSelect } from "../tensor/ops/select.ts";

/** The shard count when exact mode is asked for without one. */
export const DEFAULT_EXACT_SHARDS = 8;

/**
 * The shard count of a DDP `exact` option (true: the policy's count, else 8;
 * a number: itself), or null when exact mode is off. `policy` is the
 * numerics policy's `exact` field, read when the option is not given.
 */
export function exactShardCount(
  option: boolean | number | undefined,
  policy: false | number,
): number | null {
  const v = option === undefined ? policy : option;
  if (v === false) return null;
  if (v === true) return typeof policy === "number" ? policy : DEFAULT_EXACT_SHARDS;
  checkShardCount(v, "exact");
  return v;
}

/** Throws unless `n` is a power of two ≥ 1 (the fixed tree halves it level by level). */
export function checkShardCount(n: unknown, what: string): void {
  if (typeof n !== "number" || !Number.isInteger(n) || n < 1 || (n & (n - 1)) !== 0) {
    throw new RangeError(
      `${what}: the number of canonical shards must be a power of two ≥ 1, got ${
        JSON.stringify(n)
      }`,
    );
  }
}

/** Which canonical shards a rank holds, and which rows of its batch belong to each. */
export class ExactPlan {
  /** canonical shards per rank (S / W) */
  readonly perRank: number;
  /** the canonical shards this rank holds, in increasing order: rank + k·W */
  readonly local: readonly number[];
  readonly #rows = new Map<number, { split: Tensor[]; back: Tensor | null }>();

  /** Checks S and W (W must divide S; both powers of two). */
  constructor(readonly shards: number, readonly world: number, readonly rank: number) {
    checkShardCount(shards, "exact mode");
    if (world > shards || shards % world !== 0) {
      throw new RangeError(
        `exact mode: world size ${world} does not divide the ${shards} canonical shards ` +
          "(run on a power of two of ranks up to the shard count, or raise the shard count)",
      );
    }
    this.perRank = shards / world;
    this.local = Array.from({ length: this.perRank }, (_, k) => rank + k * world);
  }

  /**
   * For a local batch of b rows (torch's DistributedSampler: local row j is
   * global position rank + W·j of the step's block), the rows of each local
   * shard (row j is in local shard j mod S/W, rows in increasing order) and
   * the permutation that puts the shards' outputs back in row order (null:
   * one shard, nothing to permute).
   */
  rows(b: number): { split: Tensor[]; back: Tensor | null } {
    const known = this.#rows.get(b);
    if (known) return known;
    const m = this.perRank;
    if (b % m !== 0 || b === 0) {
      throw new RangeError(
        `exact mode: a local batch of ${b} rows does not split into this rank's ${m} canonical ` +
          `shards (${this.shards} shards over ${this.world} rank(s)): the global batch must be a ` +
          `multiple of ${this.shards} in every micro-batch (drop the last partial batch)`,
      );
    }
    const per = b / m;
    const split = Array.from(
      { length: m },
      (_, k) => fromArray(Int32Array.from({ length: per }, (_, i) => k + m * i), [per]).keep(),
    );
    // Row j sits at position (j mod m)·per + ⌊j / m⌋ of the shards' outputs joined in shard order.
    const back = m === 1
      ? null
      : fromArray(Int32Array.from({ length: b }, (_, j) => (j % m) * per + Math.floor(j / m)), [b])
        .keep();
    const r = { split, back };
    this.#rows.set(b, r);
    return r;
  }

  /** Frees the cached row indices. */
  dispose(): void {
    for (const r of this.#rows.values()) {
      for (const t of r.split) t.dispose();
      r.back?.dispose();
    }
    this.#rows.clear();
  }
}

let generation = 0;

/**
 * Replaces `module.forward` (on the instance) by one that, in training mode
 * or with gradients recorded, runs the original once per local canonical shard
 * — every tensor argument whose first dim is the batch's rows is split,
 * anything else passed as it is — and joins the shards' outputs back in the
 * caller's row order by a differentiable gather. Layers that kept
 * statistics per shard (batch norm) then get the mean over all S shards, summed
 * in the fixed tree across the ranks. Returns the function that puts the
 * original back.
 */
export function installShardedForward(
  module: Module,
  plan: ExactPlan,
  pg: ProcessGroup,
): () => void {
  // deno-lint-ignore no-explicit-any
  const m = module as any;
  const own = Object.prototype.hasOwnProperty.call(m, "forward");
  const previous = m.forward;
  if (typeof previous !== "function") {
    throw new TypeError("exact mode: the model has no forward method to run shard by shard");
  }
  const original = previous.bind(m);
  m.forward = (...args: unknown[]) => {
    // Sharded whenever the forward can change what training computes: in training mode (even
    // under noGrad, where dropout still moves its stream and batch norm its running statistics,
    // by amounts that depend on the rows a process holds) and whenever gradients are recorded
    // (an eval-mode forward trained through). Only an eval-mode, no-grad forward — evaluation,
    // which may run on any batch size — runs whole.
    if ((!module.training && !isGradEnabled()) || shardScope() !== null) return original(...args);
    takeShardStatistics(); // nothing of an earlier forward that failed half-way
    const out = shardedCall(original, args, plan);
    combineShardStatistics(plan, pg);
    return out;
  };
  return () => {
    if (own) m.forward = previous;
    else delete m.forward;
  };
}

function shardedCall(
  original: (...args: unknown[]) => unknown,
  args: unknown[],
  plan: ExactPlan,
): unknown {
  const first = args.find((a): a is Tensor => a instanceof Tensor && a.shape.length > 0);
  if (!first) {
    throw new TypeError(
      "exact mode: the model's forward got no tensor with a batch dim to split into shards",
    );
  }
  const b = first.shape[0]!;
  if (!isGradEnabled() && (b === 0 || b % plan.perRank !== 0)) {
    throw new RangeError(
      `exact mode: a training-mode forward under noGrad got a local batch of ${b} rows, which ` +
        `does not split into this rank's ${plan.perRank} canonical shards: in training mode ` +
        "dropout and batch norm's running statistics move, so the forward runs shard by shard; " +
        "to evaluate, call model.eval() first (an eval-mode forward under noGrad runs whole, on " +
        "any batch)",
    );
  }
  const { split, back } = plan.rows(b);
  for (const a of args) {
    if (a instanceof Tensor && a.requiresGrad) {
      throw new Error(
        `exact mode: the model's forward got an input of shape [${a.shape}] that requires grad; ` +
          "its gradient would sum the shards in an order that depends on the world size",
      );
    }
  }
  const gen = ++generation;
  const outs = plan.local.map((shard, k) => {
    const shardArgs = args.map((a) =>
      a instanceof Tensor && a.shape.length > 0 && a.shape[0] === b && back !== null
        ? indexSelect(a, 0, split[k]!)
        : a
    );
    return inShard(
      { shard, count: plan.shards, generation: gen },
      () => original(...shardArgs),
    );
  });
  return join(outs, b / plan.perRank, back);
}

/** The shards' outputs (tensors, or arrays of them) joined back in the caller's row order. */
function join(outs: unknown[], per: number, back: Tensor | null): unknown {
  const o0 = outs[0];
  if (o0 instanceof Tensor) {
    const ts = outs as Tensor[];
    for (const t of ts) {
      if (t.shape.length === 0 || t.shape[0] !== per) {
        throw new Error(
          `exact mode: the model's forward returned a tensor of shape [${t.shape}] for a shard of ` +
            `${per} rows; a forward run shard by shard can only return per-row outputs (first ` +
            "dim the batch's rows): compute losses and batch statistics outside the model",
        );
      }
    }
    return back === null ? ts[0] : indexSelect(cat(ts, 0), 0, back);
  }
  if (Array.isArray(o0)) {
    return o0.map((_, i) => join(outs.map((o) => (o as unknown[])[i]), per, back));
  }
  throw new TypeError(
    "exact mode: the model's forward must return a tensor or an array of tensors to run shard " +
      `by shard, got ${o0 === null ? "null" : typeof o0}`,
  );
}

/**
 * The fixed tree: value(c mod 2^d) = value(c mod 2^(d+1)) + value(c + 2^d
 * mod 2^(d+1)), the smaller residue on the left, down to `leafDepth` where
 * `leaf(c)` gives the value of residue class c. Returns the value of class
 * c at depth d as a new tensor (the caller disposes it) or a leaf itself
 * (never written).
 */
export function treeSum(
  c: number,
  d: number,
  leafDepth: number,
  leaf: (c: number) => Tensor,
): { value: Tensor; owned: boolean } {
  if (d === leafDepth) return { value: leaf(c), owned: false };
  const left = treeSum(c, d + 1, leafDepth, leaf);
  const right = treeSum(c + 2 ** d, d + 1, leafDepth, leaf);
  const out = left.owned ? left.value : empty(left.value.shape, "f32").keep();
  const n = BigInt(out.numel);
  backend().call.dt_binary(0, out.ptr, left.value.ptr, right.value.ptr, n, n, 1n);
  if (right.owned) right.value.dispose();
  return { value: out, owned: true };
}

/**
 * Sums the canonical shards' slots of one flat gradient buffer across the
 * ranks in the fixed tree and adds sum · factor into `into` (default 1/W,
 * the mean over ranks: a power of two, exact); the slots are zeroed for the
 * next step.
 * `slots[s]` is shard s's slot (this rank's shards only).
 */
export function reduceSlots(
  into: Tensor,
  slots: readonly (Tensor | undefined)[],
  plan: ExactPlan,
  pg: ProcessGroup,
  factor = 1 / plan.world,
): void {
  const W = plan.world, S = plan.shards;
  const log2 = (n: number) => Math.round(Math.log2(n));
  const n = BigInt(into.numel);
  // This rank's subtree: residue class rank mod W, from its S/W leaves.
  const mine = treeSum(plan.rank, log2(W), log2(S), (s) => slots[s]!);
  if (W === 1) {
    backend().call.dt_axpy(into.ptr, mine.value.ptr, n, factor);
    if (mine.owned) mine.value.dispose();
  } else {
    // The levels above the ranks: every rank evaluates them from all subtrees, in one order.
    const gathered = empty([W * into.numel], "f32").keep();
    pg.allGather(bufferFor(gathered), bufferFor(mine.value));
    if (mine.owned) mine.value.dispose();
    const parts = Array.from({ length: W }, (_, r) => gathered.subview(r * into.numel, into.shape));
    const total = treeSum(0, 0, log2(W), (r) => parts[r]!);
    backend().call.dt_axpy(into.ptr, total.value.ptr, n, factor);
    total.value.dispose();
    for (const p of parts) p.dispose();
    gathered.dispose();
  }
  into.markModified();
  for (const s of plan.local) slots[s]!.fill(0);
}

function bufferFor(t: Tensor) {
  return { ptr: t.ptr, count: t.numel, dtype: "f32" as const, device: t.device };
}

/**
 * After a sharded forward: each layer that kept statistics per shard gets
 * their mean over all S shards (the fixed tree across the ranks, then 1/S),
 * in the order the layers ran (the same on every rank: one model).
 */
export function combineShardStatistics(plan: ExactPlan, pg: ProcessGroup): void {
  for (const owner of takeShardStatistics()) {
    const first = owner.byShard.get(plan.local[0]!);
    if (first === undefined) continue;
    const slots: (Tensor | undefined)[] = [];
    for (const s of plan.local) slots[s] = owner.byShard.get(s);
    const mean = empty(first.shape, "f32").keep().fill(0);
    reduceSlots(mean, slots, plan, pg, 1 / plan.shards);
    owner.applyShardMean(mean);
  }
}
