/**
 * The ProcessGroup API that training code uses for collectives (allReduce,
 * broadcast, allGather, reduceScatter, barrier), and initProcessGroup, which
 * builds the group this process belongs to from the launcher's environment:
 * the shared-memory CPU backend for ranks on one machine, Gloo for CPU ranks
 * on several machines, or a trivial group when the process runs alone. GPU
 * ranks will get NCCL behind the same API.
 *
 * @module
 */
import type { BufferLike, ReduceOp } from "./collective_buffer.ts";
import type { Work } from "./work.ts";
import { type ProcessGroupOptions, resolveProcessGroupConfig } from "./pg_config.ts";
import { GlooProcessGroup } from "./gloo_backend.ts";
import { ShmProcessGroup } from "./shm_backend.ts";
import { SingleProcessGroup } from "./single_process_group.ts";

export type {
  BufferLike,
  CollectiveBuffer,
  CollectiveDType,
  ReduceOp,
} from "./collective_buffer.ts";
export type { ProcessGroupOptions } from "./pg_config.ts";
export type { Work } from "./work.ts";

/** Per-call options. */
export interface CallOptions {
  /** This call's timeout in ms (default: the group's). */
  timeoutMs?: number;
}

/**
 * The ranks of one job and the collectives between them. Every rank must call
 * the same collectives in the same order with the same sizes; a mismatch is
 * reported with both sides (op and size always; dtype, reduce op, root and
 * barrier name too under DTRAIN_DISTRIBUTED_DEBUG=DETAIL). A call that waits
 * longer than its timeout throws, naming the ranks that did not arrive; after
 * any failure the group is unusable on every rank. Calls block this thread.
 */
export interface ProcessGroup {
  /** This process's rank, 0 ≤ rank < size. */
  readonly rank: number;
  /** Number of ranks. */
  readonly size: number;
  /** "shm" (ranks on one machine), "gloo" (CPU ranks on several machines)
   *  or "single" (a world of one process). */
  readonly backend: "shm" | "gloo" | "single";
  /** In place: every element becomes `op` over the ranks' values, the same
   *  bits on every rank (floats are combined in rank order 0..size-1). */
  allReduce(buf: BufferLike, op?: ReduceOp, opts?: CallOptions): void;
  /**
   * Starts the same in-place allReduce and returns its Work: buf may be read
   * or written only after wait(). A backend that can overlap the reduction
   * with compute (NCCL, on its own stream) returns at once; the
   * shared-memory and single-process groups complete it before returning.
   * Started reductions complete in the order they were started; wait for
   * each before any other collective of the group.
   */
  allReduceStart(buf: BufferLike, op?: ReduceOp, opts?: CallOptions): Work;
  /** Every rank's buf becomes a copy of rank `root`'s. */
  broadcast(buf: BufferLike, root: number, opts?: CallOptions): void;
  /** out (size × inp elements) = the ranks' inp, concatenated in rank order. */
  allGather(out: BufferLike, inp: BufferLike, opts?: CallOptions): void;
  /** out = `op` over the ranks of block `rank` of their inp (size × out elements). */
  reduceScatter(out: BufferLike, inp: BufferLike, op?: ReduceOp, opts?: CallOptions): void;
  /** Returns once every rank has reached a barrier; the name appears in the
   *  launcher's hang report and in timeout messages (and its first 31 bytes
   *  are compared across ranks under DTRAIN_DISTRIBUTED_DEBUG=DETAIL). */
  barrier(name: string, opts?: CallOptions): void;
  /** Detaches from the group (idempotent); peers still waiting on this rank fail at once. */
  close(): void;
  /** Same as close(), for `using pg = initProcessGroup()`. */
  [Symbol.dispose](): void;
}

/**
 * Creates this process's group from the environment set by the launcher
 * (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, DTRAIN_RUN_ID). Without
 * it, the group is this process alone and every collective is an identity.
 * Ranks on one machine share memory; ranks on several machines (DTRAIN_NNODES
 * > 1) meet through the run's control store and use Gloo over TCP
 * (GLOO_SOCKET_IFNAME picks the interface), with shared memory within each
 * node where that is faster. DTRAIN_CPU_BACKEND=gloo forces Gloo on one machine.
 *
 * @example
 * ```ts
 * using pg = initProcessGroup({ timeoutMs: 60_000 });
 * const grads = new Float32Array(1024);
 * pg.allReduce(grads, "avg");
 * pg.barrier("epoch-end");
 * ```
 */
export function initProcessGroup(options: ProcessGroupOptions = {}): ProcessGroup {
  const cfg = resolveProcessGroupConfig(options);
  if (cfg.size === 1) return new SingleProcessGroup(cfg.timeoutMs);
  if (cfg.backend === "gloo") return GlooProcessGroup.open(cfg);
  return ShmProcessGroup.open(cfg);
}
