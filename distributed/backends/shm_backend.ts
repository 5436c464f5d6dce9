/**
 * The CPU process group for ranks on one machine: a thin class over
 * libdtrain_shm.so (kernels/shm), which keeps the segment, the barriers and
 * the arithmetic. This file owns the handle and makes the native calls; the
 * collective runner checks the arguments and reports every call.
 */
import {
  DT_ERR_ARG,
  DT_ERR_SYS,
  DT_ERR_TIMEOUT,
  SHM_DTYPE_CODE,
  SHM_REDUCE_CODE,
  shmAbort,
  shmCalls,
  shmCloseLeaked,
  shmOpen,
} from "../../ffi/shm.ts";
import { cBytes, DtNativeError } from "../../ffi/native.ts";
import { type FailureKind, withFailureKind } from "../control/failure_kind.ts";
import type { Collective } from "./collective_args.ts";
import { type CollectiveBackend, CollectiveRunner } from "./collective_runner.ts";
import { CollectiveGroup } from "./collective_group.ts";
import type { ProcessGroupConfig } from "../pg_config.ts";
import { COMPLETED, type Work } from "../process_group.ts";

/** Closes handles whose group was dropped without close(): a backstop only. */
const leaked = new FinalizationRegistry<Deno.PointerObject>((handle) => {
  shmCloseLeaked(handle);
});

/**
 * What a failed collective call tells the launcher: a wait past its deadline
 * is a timeout; a system error inside a collective means a peer closed, left
 * or aborted the group (the call makes no other system call that can fail),
 * a consequence of that peer's failure; anything else (a mismatch) is this
 * rank's own error.
 */
function shmFailureKind(e: unknown): FailureKind {
  if (!(e instanceof DtNativeError)) return "error";
  if (e.status === DT_ERR_TIMEOUT) return "timeout";
  return e.status === DT_ERR_SYS ? "peer" : "error";
}

/** The shared-memory process group; create it with initProcessGroup(). */
export class ShmProcessGroup extends CollectiveGroup {
  readonly rank: number;
  readonly size: number;
  readonly backend = "shm" as const;
  /** The segment's name (unlinked once every rank attached). */
  readonly segmentName: string;
  /** Bytes of each data buffer, as rank 0 chose them. */
  readonly chunkBytes: number;
  /** Bytes of the whole segment. */
  readonly segmentBytes: number;
  readonly #handle: Deno.PointerObject;
  protected readonly runner: CollectiveRunner;

  private constructor(cfg: ProcessGroupConfig, handle: Deno.PointerObject, name: string) {
    super();
    this.rank = cfg.rank;
    this.size = cfg.size;
    this.segmentName = name;
    this.#handle = handle;
    const backend: CollectiveBackend = {
      groupName: `shared-memory process group ${name}`,
      hostOnly: "shared-memory process group",
      abortForBadArguments: (reason) => this.#abortForBadArguments(reason),
      perform: (c, _seq, timeoutMs) => this.#perform(c, timeoutMs),
      failed: shmFailure,
    };
    this.runner = new CollectiveRunner(backend, cfg.rank, cfg.size, cfg.timeoutMs);
    const info = new BigInt64Array(6);
    shmCalls().dt_shm_info(handle, info);
    this.chunkBytes = Number(info[2]);
    this.segmentBytes = Number(info[3]);
    leaked.register(this, handle, this);
  }

  /** Joins the group described by `cfg`; returns once every rank has joined. */
  static open(cfg: ProcessGroupConfig): ShmProcessGroup {
    // Each launch attempt gets its own segment: a restart never meets a crashed attempt's leftovers.
    const attempt = Deno.env.get("DTRAIN_RESTART_COUNT") ?? "0";
    const name = `/dtrain-${cfg.runId}-a${attempt}-pg`;
    const handle = shmOpen({ ...cfg, name });
    return new ShmProcessGroup(cfg, handle, name);
  }

  override close(): void {
    if (!this.runner.close()) return;
    const handle = this.#handle;
    leaked.unregister(this);
    shmCalls().dt_shm_close(handle);
  }

  /** An argument error aborts the group, so the peers stop waiting for this rank instead of
   *  timing out. */
  #abortForBadArguments(reason: string): void {
    shmAbort(this.#handle, DT_ERR_ARG, cBytes(reason));
  }

  /** One native call; the library compares the ranks' calls at its first barrier and watches
   *  the deadline, the abort word and dead peers. */
  #perform(c: Collective, timeoutMs: number): Work {
    const handle = this.#handle;
    const lib = shmCalls();
    const t = BigInt(Math.ceil(timeoutMs));
    switch (c.op) {
      case "allReduce": {
        const b = c.inp!;
        lib.dt_shm_allreduce(
          handle,
          b.ptr,
          BigInt(b.count),
          SHM_DTYPE_CODE[b.dtype],
          SHM_REDUCE_CODE[c.reduceOp],
          t,
        );
        break;
      }
      case "broadcast": {
        const b = c.inp!;
        const args = [b.ptr, BigInt(b.count), SHM_DTYPE_CODE[b.dtype], c.root] as const;
        lib.dt_shm_broadcast(handle, ...args, t);
        break;
      }
      case "allGather": {
        const o = c.out!, i = c.inp!;
        const args = [o.ptr, i.ptr, BigInt(i.count), SHM_DTYPE_CODE[i.dtype]] as const;
        lib.dt_shm_allgather(handle, ...args, t);
        break;
      }
      case "reduceScatter": {
        const o = c.out!, i = c.inp!;
        const args = [
          o.ptr,
          i.ptr,
          BigInt(o.count),
          SHM_DTYPE_CODE[o.dtype],
          SHM_REDUCE_CODE[c.reduceOp],
        ] as const;
        lib.dt_shm_reduce_scatter(handle, ...args, t);
        break;
      }
      case "barrier": {
        const cname = cBytes(c.name);
        lib.dt_shm_barrier(handle, cname, t);
        break;
      }
    }
    return COMPLETED;
  }
}

/** A failed call's error with its kind (the native library already aborted the group). */
function shmFailure(e: unknown): Error {
  return withFailureKind(e as Error, shmFailureKind(e), { inCollective: true });
}
