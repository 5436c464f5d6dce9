/**
 * The ProcessGroup API that training code uses for collectives (allReduce,
 * broadcast, allGather, reduceScatter, barrier), and initProcessGroup, which
 * builds the group this process belongs to from the launcher's environment
 * and the rank's device: NCCL for GPU ranks, the shared-memory backend for
 * CPU ranks on one machine, Gloo for CPU ranks on several machines, or a
 * trivial group when the process runs alone.
 *
 * @module
 */
import type { BufferLike, ReduceOp } from "./collective_buffer.ts";
import type { Work } from "./work.ts";
import { type ProcessGroupOptions, resolveProcessGroupConfig } from "./pg_config.ts";
import { GlooProcessGroup } from "./gloo_backend.ts";
import { ShmProcessGroup } from "./shm_backend.ts";
import { NcclProcessGroup } from "./nccl_backend.ts";
import { backend } from "../tensor/backend.ts";
import { describeBackend } from "../tensor/device_choice.ts";
import { reportProcessGroup } from "./control/rank_runtime.ts";
import { SingleProcessGroup } from "./single_process_group.ts";
import { section } from "../profile/profile.ts";

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
  /** Detaches from the group (idempotent); peers still waiting on this rank fail at once. */
  close(): void;
  /** Same as close(), for `using pg = initProcessGroup()`. */
  [Symbol.dispose](): void;
}

/**
 * Creates this process's group from the environment set by the launcher
 * (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, DTRAIN_RUN_ID) and the
 * rank's device (tensor/backend.ts; a launched rank computes on its GPU
 * unless the script chose the CPU). GPU ranks use NCCL on their GPUs. CPU
 * ranks on one machine share memory; CPU ranks on several machines
 * (DTRAIN_NNODES > 1) meet through the run's control store and use Gloo over
 * TCP (GLOO_SOCKET_IFNAME picks the interface), with shared memory within
 * each node where that is faster; DTRAIN_CPU_BACKEND=gloo forces Gloo on one
 * machine. Without a launcher, the group is this process alone and every
 * collective is an identity.
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
  const b = backend();
  const cfg = resolveProcessGroupConfig({ ...options, device: b.device });
  if (openGroup && cfg.size > 1) {
    // PyTorch refuses a second init_process_group too: two groups of the same ranks would share
    // the launcher's barriers and the failure notices, and a collective on one never matches
    // the other's.
    throw new Error(
      `initProcessGroup: this process already has an open process group (${openGroup.backend}, ` +
        `rank ${openGroup.rank} of ${openGroup.size}); use it (currentProcessGroup() returns ` +
        `it), or close() it first`,
    );
  }
  const kind = options.backend ??
    (cfg.size === 1 ? "single" : b.device === "cuda" ? "nccl" : cfg.backend);
  if (!["nccl", "shm", "gloo", "single"].includes(kind)) {
    throw new TypeError(
      `initProcessGroup: backend ${
        JSON.stringify(kind)
      } is not one of "nccl", "gloo", "shm", "single"`,
    );
  }
  if (kind === "nccl" && b.device !== "cuda") {
    throw new Error(
      `initProcessGroup({ backend: "nccl" }): this rank computes on the CPU; NCCL needs its GPU ` +
        `(start the run with --device cuda, or call useDevice("cuda") first)`,
    );
  }
  if (kind === "single" && cfg.size !== 1) {
    throw new RangeError(`initProcessGroup({ backend: "single" }) in a world of ${cfg.size} ranks`);
  }
  const pg: ProcessGroup = kind === "single"
    ? new SingleProcessGroup(cfg.timeoutMs, b.device)
    : section("rendezvous", () =>
      kind === "nccl"
        ? NcclProcessGroup.open({ rank: cfg.rank, size: cfg.size, timeoutMs: cfg.timeoutMs })
        : kind === "gloo"
        ? GlooProcessGroup.open(cfg)
        : ShmProcessGroup.open(cfg));
  reportProcessGroup({ backend: pg.backend, worldSize: pg.size, device: describeBackend(b) });
  if (pg.size > 1) trackOpen(pg);
  return pg;
}

/** The group of several ranks that initProcessGroup() made and nobody closed yet. */
let openGroup: ProcessGroup | null = null;

/** Remembers `pg` as this process's open group until its close(). */
function trackOpen(pg: ProcessGroup): void {
  openGroup = pg;
  const close = pg.close.bind(pg);
  pg.close = () => {
    if (openGroup === pg) openGroup = null;
    close();
  };
}

/**
 * The process group of several ranks that initProcessGroup() made in this
 * process and that is still open, or null (PyTorch's
 * `torch.distributed.is_initialized()` with the default group).
 */
export function currentProcessGroup(): ProcessGroup | null {
  return openGroup;
}
