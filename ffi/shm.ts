/**
 * The shared-memory collective library (build/libdtrain_shm.so, built from
 * kernels/shm): its symbol table and its loading, once, on first use. The CPU
 * process group (distributed/backends/shm_backend.ts) is its only user.
 *
 * Conventions as in ffi/symbols.ts: every dt_shm_* call returns a dt_status;
 * counts and timeouts are i64 and must be passed as BigInt. Callers use the
 * status-checked wrappers of shmCalls(), and shmAbort()/shmCloseLeaked() where
 * a failure must not throw; never the raw symbols.
 *
 * @module
 */
import { type CheckedCalls, checkedCalls } from "./calls.ts";
import { cBytes, type NativeLibrary, openLibrary } from "./native.ts";

const P = "pointer" as const;
const BUF = "buffer" as const;
const I64 = "i64" as const;
const I32 = "i32" as const;
const STATUS = { result: I32 } as const;

/** Every symbol of libdtrain_shm.so, with its C parameters. */
export const SHM_SYMBOLS = {
  dt_abi_version: { parameters: [], result: I32 },
  /** const char*: text of the last error on this thread. */
  dt_last_error: { parameters: [], result: P },
  /** const char*: hash of the sources this library was built from. */
  dt_build_hash: { parameters: [], result: P },
  /** (name "/dtrain-<run id>-pg\0", rank, world, chunk_bytes, spin_ns, flags
   *  DT_SHM_FLAG_*, timeout_ms, uint64_t* out_handle): join (rank 0: create)
   *  the group; returns once every rank has attached and the name is unlinked. */
  dt_shm_open: { parameters: [BUF, I32, I32, I64, I64, I32, I64, BUF], ...STATUS },
  /** dt_shm_open with, after chunk_bytes, shared_bytes: the bytes of each rank's shared region
   *  (a multiple of 4096; rank 0's value wins), where buffers that peers read directly live. */
  dt_shm_open_shared: { parameters: [BUF, I32, I32, I64, I64, I64, I32, I64, BUF], ...STATUS },
  /** (handle, keep, uint64_t out[2]): this rank's shared region's address and bytes; with keep
   *  (arrays are made over it) the region stays mapped until the process exits. */
  dt_shm_shared: { parameters: [P, I32, BUF], ...STATUS },
  /** (handle, bytes, limit_bytes (< 0: none), timeout_ms, int64_t out[3]): collective; every rank
   *  makes a shared region of `bytes` that every peer maps. On an agreed failure every rank returns
   *  DT_ERR_SYS with out[0] = the first failing rank, out[1] its step (SHM_RESERVE_STEP), out[2]
   *  its errno; out[0] = -1 otherwise. */
  dt_shm_reserve: { parameters: [P, I64, I64, I64, BUF], ...STATUS },
  /** (handle, offset, bytes, int64_t out[1]): gives back the whole pages of that range of this
   *  rank's shared region (madvise MADV_REMOVE); out[0] = bytes given back. */
  dt_shm_release: { parameters: [P, I64, I64, BUF], ...STATUS },
  /** (handle): detach; peers waiting on this rank fail at once. */
  dt_shm_close: { parameters: [P], ...STATUS },
  /** (handle, status, reason "\0"-terminated): fail the group for every rank. */
  dt_shm_abort: { parameters: [P, I32, BUF], ...STATUS },
  /** (handle, int64_t out[6]): rank, world, chunk_bytes, segment_bytes, seq, flags. */
  dt_shm_info: { parameters: [P, BUF], ...STATUS },
  /** (handle, buf, count, dtype, redop, timeout_ms): in-place all-reduce. */
  dt_shm_allreduce: { parameters: [P, P, I64, I32, I32, I64], ...STATUS },
  /** (handle, buf, count, dtype, root, timeout_ms) */
  dt_shm_broadcast: { parameters: [P, P, I64, I32, I32, I64], ...STATUS },
  /** (handle, out [world x count], inp [count], count, dtype, timeout_ms) */
  dt_shm_allgather: { parameters: [P, P, P, I64, I32, I64], ...STATUS },
  /** (handle, out [count], inp [world x count], count, dtype, redop, timeout_ms) */
  dt_shm_reduce_scatter: { parameters: [P, P, P, I64, I32, I32, I64], ...STATUS },
  /** (handle, name "\0"-terminated, timeout_ms) */
  dt_shm_barrier: { parameters: [P, BUF, I64], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;

/** The type of SHM_SYMBOLS. */
export type ShmSymbols = typeof SHM_SYMBOLS;

/** dt_status codes this library returns (kernels/common/dt_common.h); a
 * peer that aborted the group or exited is DT_ERR_SYS. */
export const DT_ERR_ARG = 1;
/** A wait ran past its deadline. */
export const DT_ERR_TIMEOUT = 7;
/** An operating-system call failed, or a peer aborted the group or is gone. */
export const DT_ERR_SYS = 8;

/** dt_shm_open flags (kernels/shm/shm_internal.h). */
export const SHM_FLAG_DETAIL = 1;

/** What a rank's failed step of dt_shm_reserve was (DT_SHM_RESERVE_* in kernels/shm/shm_regions.c). */
export const SHM_RESERVE_STEP: Readonly<
  Record<number, "limit" | "create" | "space" | "map" | "map-peer">
> = {
  1: "limit",
  2: "create",
  3: "space",
  4: "map",
  5: "map-peer",
};

/** Reduce-op codes of the library (DT_SHM_SUM ... in shm_internal.h). */
export const SHM_REDUCE_CODE = { sum: 0, avg: 1, max: 2, min: 3 } as const;

/** Dtype codes of dt_common.h, plus f64 under the library's own code 6 until
 *  dt_common.h defines it. */
export const SHM_DTYPE_CODE = { f32: 0, bf16: 1, f16: 2, i32: 3, i64: 4, u8: 5, f64: 6 } as const;

let shm: NativeLibrary<ShmSymbols> | undefined;

/** The shared-memory collective library, opened on first call. */
export function shmLibrary(): NativeLibrary<ShmSymbols> {
  shm ??= openLibrary("libdtrain_shm.so", SHM_SYMBOLS);
  return shm;
}

/** The dt_status symbols of the library, each status-checked (ffi/calls.ts). */
const SHM_CALLED = [
  "dt_shm_open",
  "dt_shm_open_shared",
  "dt_shm_shared",
  "dt_shm_reserve",
  "dt_shm_release",
  "dt_shm_close",
  "dt_shm_info",
  "dt_shm_allreduce",
  "dt_shm_broadcast",
  "dt_shm_allgather",
  "dt_shm_reduce_scatter",
  "dt_shm_barrier",
] as const satisfies readonly (keyof ShmSymbols)[];

/** The status-checked calls of libdtrain_shm.so: they throw DtNativeError with the library's text. */
export type ShmCalls = CheckedCalls<ShmSymbols, (typeof SHM_CALLED)[number]>;

/** A NUL-terminated C string as the library's `const char*` parameters take it. */
type CText = Parameters<Deno.DynamicLibrary<ShmSymbols>["symbols"]["dt_shm_abort"]>[2];

let calls: ShmCalls | undefined;

/** The status-checked calls of the shared-memory library, bound on first call. */
export function shmCalls(): ShmCalls {
  calls ??= checkedCalls(shmLibrary(), SHM_SYMBOLS, SHM_CALLED);
  return calls;
}

/**
 * Fails the group of `handle` for every rank with `status` and `reason`
 * (NUL-terminated). Never throws: it runs while another error is already
 * being reported, which must not be replaced by this one's.
 */
export function shmAbort(handle: Deno.PointerObject, status: number, reason: CText): void {
  shmLibrary().symbols.dt_shm_abort(handle, status, reason);
}

/**
 * Detaches a handle whose group was dropped without close() (a finalizer's
 * backstop): nobody is left to hear of a failure, so its status is ignored.
 */
export function shmCloseLeaked(handle: Deno.PointerObject): void {
  shmLibrary().symbols.dt_shm_close(handle);
}

/** What a shared-memory segment is opened with (the process group's, or the node's). */
export interface ShmOpenSpec {
  /** the segment's name, e.g. /dtrain-<run>-a<attempt>-pg */
  name: string;
  rank: number;
  size: number;
  chunkBytes: number;
  /** bytes of each rank's shared region (absent: none) */
  sharedBytes?: number;
  spinUs: number;
  /** record per-call detail for the failure report */
  detail: boolean;
  timeoutMs: number;
}

/** Joins (creating if first) a segment; returns once every rank has joined, with its handle. */
export function shmOpen(spec: ShmOpenSpec): Deno.PointerObject {
  const out = new BigUint64Array(1);
  shmCalls().dt_shm_open_shared(
    cBytes(spec.name),
    spec.rank,
    spec.size,
    BigInt(spec.chunkBytes),
    BigInt(spec.sharedBytes ?? 0),
    BigInt(Math.round(spec.spinUs * 1000)),
    spec.detail ? SHM_FLAG_DETAIL : 0,
    BigInt(Math.ceil(spec.timeoutMs)),
    out,
  );
  const handle = Deno.UnsafePointer.create(out[0]!);
  if (handle === null) throw new Error("dt_shm_open returned success but no handle");
  return handle;
}
