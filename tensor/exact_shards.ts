/**
 * The shard context of exact mode (distributed/exact.ts): which canonical
 * shard of the global batch the code running now computes, and where each
 * parameter's gradient for that shard goes. Autograd stamps every node
 * recorded inside a shard with the shard's index, and in the backward pass
 * adds a parameter's gradient from such a node into the parameter's slot for
 * that shard instead of its `.grad`, so no sum inside a process ever mixes
 * two shards: that association would depend on how many shards a process
 * holds, i.e. on the world size.
 */
import type { Tensor } from "./tensor.ts";

/** The shard a forward computes now. */
export interface ShardScope {
  /** the canonical shard's index in [0, count) */
  readonly shard: number;
  /** the number of canonical shards of the global batch */
  readonly count: number;
  /** bumped once per sharded forward (a Dropout layer's masks advance once per forward) */
  readonly generation: number;
}

let active: ShardScope | null = null;

/** The shard being computed now (inside a sharded forward), or null. */
export function shardScope(): ShardScope | null {
  return active;
}

/** Runs fn as the forward of one canonical shard (nodes recorded inside carry its index). */
export function inShard<T>(scope: ShardScope, fn: () => T): T {
  if (active !== null) {
    throw new Error(
      `exact mode: the forward of shard ${scope.shard} started inside shard ${active.shard}'s ` +
        "(a sharded forward called from inside another)",
    );
  }
  active = scope;
  try {
    return fn();
  } finally {
    active = null;
  }
}

/** Each exact-mode parameter's gradient slots, by canonical shard (sparse: this rank's shards). */
const slotsOf = new WeakMap<Tensor, readonly (Tensor | undefined)[]>();
let registered = 0;

/** Gives `param` one gradient slot per canonical shard this process computes (index: shard). */
export function setShardSlots(param: Tensor, slots: readonly (Tensor | undefined)[]): void {
  if (!slotsOf.has(param)) registered++;
  slotsOf.set(param, slots);
}

/** Removes `param`'s slots (its gradients go to `.grad` again). */
export function clearShardSlots(param: Tensor): void {
  if (slotsOf.delete(param)) registered--;
}

/** Whether any parameter has slots (autograd checks leaves only then). */
export function anyShardSlots(): boolean {
  return registered > 0;
}

/** The shard whose nodes the backward pass runs now (-1: a node recorded outside any shard). */
let backwardShard = -1;

/** Autograd: the node about to run was recorded in `shard` (-1: outside any). */
export function setBackwardShard(shard: number): void {
  backwardShard = shard;
}

/**
 * Where a leaf's gradient from the node running now goes in exact mode: its
 * slot for the node's shard; null when the leaf has no slots and the node no
 * shard (the ordinary `.grad`). Throws when only one of the two holds: a
 * parameter of an exact model used outside its sharded forward, or a tensor
 * that requires grad reached from inside one without being the model's
 * parameter — either would add gradients across shards in an order that
 * depends on the world size.
 */
export function shardSlotOf(leaf: Tensor, nodeName: string): Tensor | null {
  const slots = registered > 0 ? slotsOf.get(leaf) : undefined;
  if (slots === undefined) {
    if (backwardShard < 0) return null;
    throw new Error(
      `exact mode: ${nodeName} in shard ${backwardShard}'s forward reads a tensor of shape ` +
        `[${leaf.shape}] that requires grad but is not a parameter of the exact model ` +
        "(its gradient would sum the shards in an order that depends on the world size)",
    );
  }
  if (backwardShard < 0) {
    throw new Error(
      `exact mode: a parameter of shape [${leaf.shape}] gets a gradient from ${nodeName}, ` +
        "outside the model's sharded forward (exact mode sums a parameter's gradient shard by " +
        "shard; use parameters inside the model's forward only)",
    );
  }
  const slot = slots[backwardShard];
  if (slot === undefined) {
    throw new Error(
      `exact mode: shard ${backwardShard} is not one this process computes (no gradient slot)`,
    );
  }
  return slot;
}

/**
 * A layer that keeps batch statistics per shard during a sharded forward
 * (batch norm's running statistics): after the forward, exact mode sums each
 * owner's shards in the fixed tree across the ranks and hands it the mean
 * over all S shards, so every rank updates its buffers with the same bits.
 */
export interface ShardStatistics {
  /** This forward's statistics by canonical shard: flat f32 tensors of one length. */
  readonly byShard: Map<number, Tensor>;
  /** Takes the mean over all shards (a new f32 tensor, the owner's to keep or free). */
  applyShardMean(mean: Tensor): void;
}

const pendingStatistics: ShardStatistics[] = [];

/** A layer kept statistics in the sharded forward running now (in order of first use). */
export function noteShardStatistics(owner: ShardStatistics): void {
  if (!pendingStatistics.includes(owner)) pendingStatistics.push(owner);
}

/** The owners noted since the last call, in order of first use; forgets them. */
export function takeShardStatistics(): ShardStatistics[] {
  return pendingStatistics.splice(0);
}
