/**
 * The CPU process group for ranks on one machine: a thin class over
 * libdtrain_shm.so (kernels/shm), which keeps the segment, the barriers and
 * the arithmetic. This file checks arguments, reports every call to
 * distributed/control/phase.ts for the launcher's hang diagnosis, and owns the handle.
 */
import {
  DT_ERR_ARG,
  DT_ERR_SYS,
  DT_ERR_TIMEOUT,
  SHM_DTYPE_CODE,
  SHM_FLAG_DETAIL,
  SHM_REDUCE_CODE,
  shmLibrary,
} from "../../ffi/shm.ts";
import { DtNativeError } from "../../ffi/native.ts";
import { type CollectiveRecord, reportCollective } from "../control/phase.ts";
import { type FailureKind, withFailureKind } from "../control/failure_kind.ts";
import { enter, leave } from "../../profile/profile.ts";
import {
  type BufferLike,
  checkReduceDType,
  checkReduceOp,
  checkSizes,
  type ReduceOp,
  requireHostBuffer,
  resolveBuffer,
  type ResolvedBuffer,
} from "./collective_buffer.ts";
import type { ProcessGroupConfig } from "../pg_config.ts";
import { type CallOptions, COMPLETED, type ProcessGroup, type Work } from "../process_group.ts";

const encoder = new TextEncoder();
const cString = (s: string) => encoder.encode(s.replaceAll("\0", " ") + "\0");

/** Closes handles whose group was dropped without close(): a backstop only. */
const leaked = new FinalizationRegistry<Deno.PointerObject>((handle) => {
  shmLibrary().symbols.dt_shm_close(handle);
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

/** A checked buffer in host memory: GPU memory is refused before any byte is touched. */
function hostBuffer(b: BufferLike, what: string): ResolvedBuffer {
  const r = resolveBuffer(b, what);
  requireHostBuffer(r, what, "shared-memory process group");
  return r;
}

/** A native call of one collective, given the handle and the timeout. */
type NativeCall = (handle: Deno.PointerObject, timeoutMs: bigint) => number;

const SYMBOL_OF: Record<string, string> = {
  allReduce: "dt_shm_allreduce",
  broadcast: "dt_shm_broadcast",
  allGather: "dt_shm_allgather",
  reduceScatter: "dt_shm_reduce_scatter",
  barrier: "dt_shm_barrier",
};

/** The shared-memory process group; create it with initProcessGroup(). */
export class ShmProcessGroup implements ProcessGroup {
  readonly rank: number;
  readonly size: number;
  readonly backend = "shm" as const;
  /** The segment's name (unlinked once every rank attached). */
  readonly segmentName: string;
  /** Bytes of each data buffer, as rank 0 chose them. */
  readonly chunkBytes: number;
  /** Bytes of the whole segment. */
  readonly segmentBytes: number;
  #handle: Deno.PointerObject | null;
  #timeoutMs: number;
  #seq = 0;

  private constructor(cfg: ProcessGroupConfig, handle: Deno.PointerObject, name: string) {
    this.rank = cfg.rank;
    this.size = cfg.size;
    this.segmentName = name;
    this.#handle = handle;
    this.#timeoutMs = cfg.timeoutMs;
    const info = new BigInt64Array(6);
    shmLibrary().check(shmLibrary().symbols.dt_shm_info(handle, info), "dt_shm_info");
    this.chunkBytes = Number(info[2]);
    this.segmentBytes = Number(info[3]);
    leaked.register(this, handle, this);
  }

  /** Joins the group described by `cfg`; returns once every rank has joined. */
  static open(cfg: ProcessGroupConfig): ShmProcessGroup {
    const lib = shmLibrary();
    // Each launch attempt gets its own segment: a restart never meets a crashed attempt's leftovers.
    const attempt = Deno.env.get("DTRAIN_RESTART_COUNT") ?? "0";
    const name = `/dtrain-${cfg.runId}-a${attempt}-pg`;
    const out = new BigUint64Array(1);
    const status = lib.symbols.dt_shm_open(
      cString(name),
      cfg.rank,
      cfg.size,
      BigInt(cfg.chunkBytes),
      BigInt(Math.round(cfg.spinUs * 1000)),
      cfg.detail ? SHM_FLAG_DETAIL : 0,
      BigInt(Math.ceil(cfg.timeoutMs)),
      out,
    );
    lib.check(status, "dt_shm_open");
    const handle = Deno.UnsafePointer.create(out[0]!);
    if (handle === null) throw new Error("dt_shm_open returned success but no handle");
    return new ShmProcessGroup(cfg, handle, name);
  }

  allReduce(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): void {
    // Written out rather than through #run: a DDP step calls it once per bucket, and the
    // closures and argument lists of the general path cost more than the checks themselves.
    const handle = this.#handle;
    if (handle === null) throw new Error(`allReduce: process group ${this.segmentName} is closed`);
    const seq = ++this.#seq;
    let b: ResolvedBuffer, timeoutMs: number;
    try {
      b = hostBuffer(buf, "allReduce buf");
      checkReduceDType(checkReduceOp(op, "allReduce"), b.dtype, "allReduce");
      timeoutMs = this.#callTimeout("allReduce", opts);
    } catch (e) {
      this.#abortBadArgs(handle, "allReduce", seq, e);
      throw e;
    }
    const rec: CollectiveRecord = { seq, op: "allReduce", bytes: b.bytes };
    reportCollective(rec, "enter");
    const prev = enter("reduction wait");
    try {
      const lib = shmLibrary();
      lib.check(
        lib.symbols.dt_shm_allreduce(
          handle,
          b.ptr,
          BigInt(b.count),
          SHM_DTYPE_CODE[b.dtype],
          SHM_REDUCE_CODE[op],
          BigInt(Math.ceil(timeoutMs)),
        ),
        "dt_shm_allreduce",
      );
    } catch (e) {
      throw withFailureKind(e as Error, shmFailureKind(e), { inCollective: true });
    } finally {
      leave(prev);
      reportCollective(rec, "exit");
    }
  }

  /** allReduce, completed before it returns (this thread does the reduction). */
  allReduceStart(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): Work {
    this.allReduce(buf, op, opts);
    return COMPLETED;
  }

  broadcast(buf: BufferLike, root: number, opts: CallOptions = {}): void {
    this.#run("broadcast", `root ${root}`, () => {
      const b = hostBuffer(buf, "broadcast buf");
      if (!Number.isInteger(root) || root < 0 || root >= this.size) {
        throw new RangeError(
          `broadcast: root ${root} is not a rank of this group (size ${this.size})`,
        );
      }
      const args = [b.ptr, BigInt(b.count), SHM_DTYPE_CODE[b.dtype], root] as const;
      return [b.bytes, (h, t) => shmLibrary().symbols.dt_shm_broadcast(h, ...args, t)];
    }, opts);
  }

  allGather(out: BufferLike, inp: BufferLike, opts: CallOptions = {}): void {
    this.#run("allGather", undefined, () => {
      const o = hostBuffer(out, "allGather out");
      const i = hostBuffer(inp, "allGather inp");
      checkSizes(o, i, this.size, 1, "allGather");
      const args = [o.ptr, i.ptr, BigInt(i.count), SHM_DTYPE_CODE[i.dtype]] as const;
      return [i.bytes, (h, t) => shmLibrary().symbols.dt_shm_allgather(h, ...args, t)];
    }, opts);
  }

  reduceScatter(
    out: BufferLike,
    inp: BufferLike,
    op: ReduceOp = "sum",
    opts: CallOptions = {},
  ): void {
    this.#run("reduceScatter", undefined, () => {
      const o = hostBuffer(out, "reduceScatter out");
      const i = hostBuffer(inp, "reduceScatter inp");
      checkSizes(o, i, 1, this.size, "reduceScatter");
      checkReduceDType(checkReduceOp(op, "reduceScatter"), o.dtype, "reduceScatter");
      const args = [
        o.ptr,
        i.ptr,
        BigInt(o.count),
        SHM_DTYPE_CODE[o.dtype],
        SHM_REDUCE_CODE[op],
      ] as const;
      return [o.bytes, (h, t) => shmLibrary().symbols.dt_shm_reduce_scatter(h, ...args, t)];
    }, opts);
  }

  barrier(name: string, opts: CallOptions = {}): void {
    this.#run("barrier", String(name), () => {
      const cname = cString(String(name));
      return [0, (h, t) => shmLibrary().symbols.dt_shm_barrier(h, cname, t)];
    }, opts);
  }

  close(): void {
    const handle = this.#handle;
    if (handle === null) return;
    this.#handle = null;
    leaked.unregister(this);
    shmLibrary().check(shmLibrary().symbols.dt_shm_close(handle), "dt_shm_close");
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /** The call's timeout: its own or the group's, checked. */
  #callTimeout(op: string, opts: CallOptions): number {
    const timeoutMs = opts.timeoutMs ?? this.#timeoutMs;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`${op}: timeoutMs must be a positive number, got ${timeoutMs}`);
    }
    return timeoutMs;
  }

  /** An argument error aborts the group, so the peers stop waiting for this rank instead of timing out. */
  #abortBadArgs(handle: Deno.PointerObject, op: string, seq: number, e: unknown): void {
    const reason = `rank ${this.rank} called ${op} #${seq} with bad arguments: ${
      (e as Error).message
    }`;
    shmLibrary().symbols.dt_shm_abort(handle, DT_ERR_ARG, cString(reason));
  }

  /** Checks the arguments (`prepare` returns the payload bytes and the native
   *  call), reports the call, and runs it. An argument error aborts the
   *  group, so the peers stop waiting for this rank instead of timing out. */
  #run(
    op: string,
    detail: string | undefined,
    prepare: () => [number, NativeCall],
    opts: CallOptions,
  ): void {
    const handle = this.#handle;
    if (handle === null) throw new Error(`${op}: process group ${this.segmentName} is closed`);
    const seq = ++this.#seq;
    let bytes: number, call: NativeCall, timeoutMs: number;
    try {
      [bytes, call] = prepare();
      timeoutMs = this.#callTimeout(op, opts);
    } catch (e) {
      this.#abortBadArgs(handle, op, seq, e);
      throw e;
    }
    const rec = detail === undefined ? { seq, op, bytes } : { seq, op, bytes, detail };
    reportCollective(rec, "enter");
    const prev = enter("reduction wait");
    try {
      shmLibrary().check(call(handle, BigInt(Math.ceil(timeoutMs))), SYMBOL_OF[op] ?? op);
    } catch (e) {
      throw withFailureKind(e as Error, shmFailureKind(e), { inCollective: true });
    } finally {
      leave(prev);
      reportCollective(rec, "exit");
    }
  }
}
