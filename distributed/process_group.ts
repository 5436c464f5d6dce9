/**
 * The ProcessGroup interface: the collectives (allReduce, broadcast,
 * allGather, reduceScatter, barrier) that training code uses, and the
 * contract every backend in distributed/backends/ keeps. initProcessGroup
 * (init_process_group.ts) chooses and opens the backend; this file only says
 * what one must provide.
 *
 * What a backend must provide, beyond the signatures below:
 * - Every call goes through the collective runner (backends/collective_runner.ts; a backend
 *   extends backends/collective_group.ts, whose collectives are the runner's), which checks the
 *   arguments with the texts of backends/collective_args.ts, numbers the call, reports it to the
 *   launcher (enter and exit, for the hang report and the state page), takes the clock as
 *   "reduction wait", and turns a bad argument into an abort of the whole group so the peers
 *   fail at once instead of timing out. The backend supplies only the data movement, how to
 *   abort its peers, and close().
 * - The same bits on every rank: floats are combined in rank order 0..size-1 (or by a library
 *   that promises identical results on every rank, as NCCL does for one communicator).
 * - A mismatch across ranks (another op, size, dtype, reduce op or root) fails on every rank,
 *   naming both sides, where the transport can see it (shared memory and Gloo compare call
 *   records; NCCL cannot, and a mismatch there ends in the timeout).
 * - A call that waits longer than its timeout throws, naming the ranks that did not arrive where
 *   it can, with the failure kind "timeout"; after any failure the group is unusable on every
 *   rank, and a failure that is a consequence of a peer's carries the kind "peer".
 *
 * @module
 */
import type { BufferLike, ReduceOp, SharedArrayTypes } from "./backends/collective_buffer.ts";

export type {
  BufferLike,
  CollectiveBuffer,
  CollectiveDType,
  ReduceOp,
  SharedArrayTypes,
} from "./backends/collective_buffer.ts";

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
  /** "nccl" (GPU ranks), "shm" (CPU ranks on one machine), "gloo" (CPU ranks on several
   *  machines) or "single" (a world of one process). */
  readonly backend: "nccl" | "shm" | "gloo" | "single";
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
  /**
   * Only where the backend has one (the shared-memory group opened with
   * `sharedBytes` / DTRAIN_SHM_SHARED_BYTES): a zeroed array in memory the
   * peers can reach, which allReduce reduces in place across the ranks without
   * copying it through the group's buffers. Every rank must then pass such an
   * array (see ShmProcessGroup.allocShared).
   */
  allocShared?<K extends keyof SharedArrayTypes = "f32">(
    count: number,
    dtype?: K,
  ): SharedArrayTypes[K];
  /** Only where the backend has one (the shared-memory group): bytes of this rank's shared
   *  region (0: none yet). */
  readonly sharedBytes?: number;
  /** Only where the backend has one: bytes of the shared region allocShared has not handed out. */
  readonly sharedBytesLeft?: number;
  /**
   * Only where the backend can (the shared-memory group opened without a fixed region, i.e.
   * DTRAIN_SHM_SHARED_BYTES unset): true when users of the group such as DDP should reserve a
   * shared region for their long-lived buffers (reserveShared) by default.
   */
  readonly sharedOnDemand?: boolean;
  /**
   * Collective, only where the backend has it (the shared-memory group): reserves a shared
   * region of `bytes` per rank (rounded up to 4096) after open, for allocShared. Throws
   * SharedReserveError, the same on every rank, when any rank cannot (a limit, a full
   * /dev/shm); the group stays usable.
   */
  reserveShared?(bytes: number, opts?: CallOptions): void;
  /**
   * Only where the backend has it: gives back the memory of the whole pages of `arr` (an array
   * from allocShared); the array stays usable and reads as zeros. Returns the bytes given back.
   * Not collective, but the pages read as zeros on every rank.
   */
  releaseShared?(arr: ArrayBufferView): number;
  /** Detaches from the group (idempotent); peers still waiting on this rank fail at once. */
  close(): void;
  /** Same as close(), for `using pg = initProcessGroup()`. */
  [Symbol.dispose](): void;
}

/**
 * A collective in flight: what ProcessGroup.allReduceStart returns. A backend
 * that overlaps collectives with compute (NCCL, on its own stream) hands out
 * real ones; a backend that completes the call before returning (shared
 * memory, Gloo, a single process) hands out COMPLETED. Its buffers may be used
 * only after wait().
 */
export interface Work {
  /**
   * Returns once the result may be used (by this thread and by kernels
   * issued after it); throws the collective's failure. Calling it again
   * returns at once.
   */
  wait(): void;
}

/** The work of a collective that had completed when it was returned. */
export const COMPLETED: Work = Object.freeze({ wait() {} });

/** What failed on the rank that failed a reserveShared(): its limit, creating its region, room in
 *  /dev/shm, mapping its region, or mapping a peer's. */
export type SharedReserveStep = "limit" | "create" | "space" | "map" | "map-peer" | "unknown";

/**
 * A reserveShared() that failed on some rank: every rank throws it, with the same message,
 * naming the first rank that failed and why (`step`: "limit", "create", "space", "map" or
 * "map-peer"); the group stays usable.
 */
export class SharedReserveError extends Error {
  /** "SharedReserveError" */
  override readonly name = "SharedReserveError";
  /** Made by the shared-memory group's reserveShared, the same on every rank. */
  constructor(
    message: string,
    /** the first rank whose part failed */
    readonly failedRank: number,
    /** what failed there */
    readonly step: SharedReserveStep,
    /** bytes per rank that were asked for */
    readonly bytes: number,
  ) {
    super(message);
  }
}
