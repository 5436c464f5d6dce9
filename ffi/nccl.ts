/**
 * NCCL (libnccl.so.2), opened with Deno.dlopen where ffi/cuda_libs.ts finds
 * it: the symbol table of the calls dtrain makes, the element-type and
 * reduce-op codes, and error text that carries NCCL's own string (and
 * ncclGetLastError's detail when this NCCL has it).
 *
 * Callers outside ffi/ reach NCCL only through `NcclCalls` (ncclCalls(), or
 * an opened library's `calls`), never the raw symbols. NCCL answers
 * ncclResult_t, and on a nonblocking communicator ncclInProgress is an
 * answer, not a failure, so the surface has three kinds of call, each named
 * for what it answers:
 * - checked calls throw DtNativeError (the call's name, NCCL's text) unless
 *   NCCL answered ncclSuccess: ncclGetUniqueId, ncclCommGetAsyncError;
 * - nonblocking calls answer `NcclProgress` ("done" | "in-progress") and
 *   throw on any other result: the communicator's start, the four
 *   collectives, and `asyncProgress` (the poll that follows them);
 * - teardown calls and `pollAsyncError` never throw and answer NCCL's result
 *   code: they run while another failure is being reported, or in the
 *   watchdog thread, where a throw would replace that failure or stop the
 *   watch.
 *
 * @module
 */
import { describeMissing, findCudaLibrary, type LibrarySearchOptions } from "./cuda_libs.ts";
import { cString, DtNativeError } from "./native.ts";

const P = "pointer" as const;
const B = "buffer" as const;
const I32 = "i32" as const;
const USIZE = "usize" as const;
/** ncclUniqueId: 128 opaque bytes, passed by value. */
const UNIQUE_ID = { struct: Array.from({ length: 128 }, () => "u8" as const) };

/** The NCCL calls dtrain makes, with their C signatures. */
export const NCCL_SYMBOLS = {
  /** ncclResult_t ncclGetVersion(int* version) */
  ncclGetVersion: { parameters: [B], result: I32 },
  /** ncclResult_t ncclGetUniqueId(ncclUniqueId* id) */
  ncclGetUniqueId: { parameters: [B], result: I32 },
  /** ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
   *  ncclConfig_t* config): called with config.blocking = 0 from the thread that chose the GPU
   *  (NCCL takes the calling thread's current device); returns ncclInProgress at once, and
   *  ncclCommGetAsyncError says when the start ended (distributed/nccl_comm.ts). */
  ncclCommInitRankConfig: { parameters: [B, I32, UNIQUE_ID, I32, B], result: I32 },
  /** (sendbuff, recvbuff, count, datatype, op, comm, stream) */
  ncclAllReduce: { parameters: [P, P, USIZE, I32, I32, P, P], result: I32 },
  /** (sendbuff, recvbuff, count, datatype, root, comm, stream) */
  ncclBroadcast: { parameters: [P, P, USIZE, I32, I32, P, P], result: I32 },
  /** (sendbuff, recvbuff, sendcount, datatype, comm, stream) */
  ncclAllGather: { parameters: [P, P, USIZE, I32, P, P], result: I32 },
  /** (sendbuff, recvbuff, recvcount, datatype, op, comm, stream) */
  ncclReduceScatter: { parameters: [P, P, USIZE, I32, I32, P, P], result: I32 },
  /** ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) */
  ncclCommGetAsyncError: { parameters: [P, B], result: I32 },
  /** ncclResult_t ncclCommFinalize(ncclComm_t comm): flushes the queued work before a destroy
   *  (NCCL 2.14+, hence optional); ncclInProgress on a nonblocking communicator */
  ncclCommFinalize: { parameters: [P], result: I32, optional: true },
  /** frees the communicator's resources after aborting its operations (never hangs; on a
   *  nonblocking communicator it may answer ncclInProgress: distributed/backends/nccl_teardown.ts) */
  ncclCommAbort: { parameters: [P], result: I32 },
  /** waits for pending operations, then frees the communicator (may answer ncclInProgress) */
  ncclCommDestroy: { parameters: [P], result: I32 },
  /** const char* ncclGetErrorString(ncclResult_t result) */
  ncclGetErrorString: { parameters: [I32], result: P },
  /** const char* ncclGetLastError(ncclComm_t comm): NCCL 2.13+, hence optional */
  ncclGetLastError: { parameters: [P], result: P, optional: true },
  /** int dt_nccl_emu_live_communicators(void): only the emulated device's stand-in
   *  (kernels/nccl_emu) has it: communicators not freed yet, for lifecycle tests */
  dt_nccl_emu_live_communicators: { parameters: [], result: I32, optional: true },
} as const satisfies Deno.ForeignLibraryInterface;

export type NcclSymbols = typeof NCCL_SYMBOLS;

/** ncclResult_t values that dtrain tells apart. */
export const NCCL_SUCCESS = 0;
export const NCCL_IN_PROGRESS = 7;

/** ncclDataType_t of each collective element type (distributed/backends/nccl_backend.ts checks that
 *  every CollectiveDType has one). */
export const NCCL_DTYPE = {
  u8: 1, // ncclUint8
  i32: 2, // ncclInt32
  i64: 4, // ncclInt64
  f16: 6, // ncclFloat16
  f32: 7, // ncclFloat32
  f64: 8, // ncclFloat64
  bf16: 9, // ncclBfloat16 (NCCL 2.10+)
} as const;

/** ncclRedOp_t of each reduce op (avg needs NCCL 2.10+). */
export const NCCL_OP = { sum: 0, max: 2, min: 3, avg: 4 } as const;

/** ncclConfig_t's magic (NCCL_CONFIG_INITIALIZER). */
const NCCL_CONFIG_MAGIC = 0xcafebeef;

/**
 * An ncclConfig_t that sets only `blocking`: the struct's head as NCCL 2.14
 * defined it (size, magic, version, blocking). NCCL copies `size` bytes over
 * its own defaults, so every later field keeps NCCL's default.
 *
 * @example
 * ```ts
 * ncclCalls().ncclCommInitRankConfig(out, size, id, rank, ncclConfig({ blocking: false }));
 * ```
 */
export function ncclConfig(opts: { blocking: boolean }): Uint8Array<ArrayBuffer> {
  const bytes = new Uint8Array(24);
  const v = new DataView(bytes.buffer);
  v.setBigUint64(0, 24n, true); // size_t size
  v.setUint32(8, NCCL_CONFIG_MAGIC, true); // unsigned int magic
  v.setUint32(12, 21400, true); // unsigned int version: NCCL_VERSION(2, 14, 0)
  v.setInt32(16, opts.blocking ? 1 : 0, true); // int blocking
  return bytes;
}

/** What a nonblocking call answered when it did not fail: it ended, or NCCL still works on it
 * (then ncclCommGetAsyncError says when it ends: `NcclCalls.asyncProgress`). */
export type NcclProgress = "done" | "in-progress";

/**
 * The NCCL calls of one opened library, by what they answer (see the module's
 * text). A failure throws DtNativeError("nccl", the call's name, NCCL's
 * result, NCCL's text with the communicator's last error when there is one).
 */
export interface NcclCalls {
  readonly path: string;
  /** e.g. "2.27.3" */
  readonly version: string;

  /** Checked: writes a new ncclUniqueId (128 bytes) into `id`. */
  ncclGetUniqueId(id: Uint8Array<ArrayBuffer>): void;
  /** Checked: the communicator's asynchronous result (ncclSuccess, ncclInProgress or an error
   *  code, for the caller to act on); throws only when the query itself fails. */
  ncclCommGetAsyncError(comm: Deno.PointerObject): number;

  /** Nonblocking: starts a communicator, writing its handle into `out` even when the start
   *  fails (the caller aborts it then); ncclCommGetAsyncError says when an "in-progress" start ends. */
  ncclCommInitRankConfig(
    out: BigUint64Array<ArrayBuffer>,
    nranks: number,
    id: Uint8Array<ArrayBuffer>,
    rank: number,
    config: Uint8Array<ArrayBuffer>,
  ): NcclProgress;
  /** Nonblocking: queues an all-reduce on `stream` (send, recv, count, datatype, op, comm, stream). */
  ncclAllReduce(
    send: Deno.PointerValue,
    recv: Deno.PointerValue,
    count: bigint,
    datatype: number,
    op: number,
    comm: Deno.PointerObject,
    stream: Deno.PointerValue,
  ): NcclProgress;
  /** Nonblocking: queues a broadcast (send, recv, count, datatype, root, comm, stream). */
  ncclBroadcast(
    send: Deno.PointerValue,
    recv: Deno.PointerValue,
    count: bigint,
    datatype: number,
    root: number,
    comm: Deno.PointerObject,
    stream: Deno.PointerValue,
  ): NcclProgress;
  /** Nonblocking: queues an all-gather (send, recv, sendcount, datatype, comm, stream). */
  ncclAllGather(
    send: Deno.PointerValue,
    recv: Deno.PointerValue,
    count: bigint,
    datatype: number,
    comm: Deno.PointerObject,
    stream: Deno.PointerValue,
  ): NcclProgress;
  /** Nonblocking: queues a reduce-scatter (send, recv, recvcount, datatype, op, comm, stream). */
  ncclReduceScatter(
    send: Deno.PointerValue,
    recv: Deno.PointerValue,
    count: bigint,
    datatype: number,
    op: number,
    comm: Deno.PointerObject,
    stream: Deno.PointerValue,
  ): NcclProgress;
  /** Nonblocking: whether the communicator's pending call `call` (the start, a collective being
   *  queued) has ended; its failure (or the query's) throws naming `call`. */
  asyncProgress(comm: Deno.PointerObject, call: string): NcclProgress;

  /** Never throws: the query's own failure, else the communicator's asynchronous result. */
  pollAsyncError(comm: Deno.PointerObject): number;
  /** Never throws: ncclCommAbort's result (ncclInProgress: poll pollAsyncError to the end). */
  abort(comm: Deno.PointerObject): number;
  /** Never throws: ncclCommDestroy's result (ncclInProgress: poll pollAsyncError to the end). */
  destroy(comm: Deno.PointerObject): number;
  /** Never throws: ncclCommFinalize's result; null where this NCCL has no ncclCommFinalize (< 2.14). */
  finalize(comm: Deno.PointerObject): number | null;

  /** NCCL's text for a result code (and the communicator's last error, given `comm`). */
  errorText(result: number, comm?: Deno.PointerValue): string;
}

/** The raw functions ncclCalls binds: the library's symbols (a test may plant its own). */
export type NcclFunctions = Deno.DynamicLibrary<NcclSymbols>["symbols"];

/**
 * Binds the call surface over NCCL's raw functions (ncclLibrary() does it
 * for the library it opens).
 */
export function bindNcclCalls(s: NcclFunctions, path: string, version: string): NcclCalls {
  const errorText = (result: number, comm?: Deno.PointerValue): string => {
    const text = cString(s.ncclGetErrorString(result));
    const detail = comm && s.ncclGetLastError ? cString(s.ncclGetLastError(comm)) : "";
    return detail ? `${text} (${detail})` : text;
  };
  const fail = (call: string, result: number, comm?: Deno.PointerValue): never => {
    throw new DtNativeError("nccl", call, result, errorText(result, comm));
  };
  const progress = (call: string, result: number, comm?: Deno.PointerValue): NcclProgress => {
    if (result === NCCL_SUCCESS) return "done";
    if (result === NCCL_IN_PROGRESS) return "in-progress";
    return fail(call, result, comm);
  };
  const state = new Int32Array(1);
  const pollAsyncError = (comm: Deno.PointerObject): number => {
    const r = s.ncclCommGetAsyncError(comm, state);
    return r !== NCCL_SUCCESS ? r : state[0]!;
  };
  return {
    path,
    version,
    ncclGetUniqueId(id) {
      const r = s.ncclGetUniqueId(id);
      if (r !== NCCL_SUCCESS) fail("ncclGetUniqueId", r);
    },
    ncclCommGetAsyncError(comm) {
      const r = s.ncclCommGetAsyncError(comm, state);
      if (r !== NCCL_SUCCESS) fail("ncclCommGetAsyncError", r, comm);
      return state[0]!;
    },
    ncclCommInitRankConfig(out, nranks, id, rank, config) {
      const r = s.ncclCommInitRankConfig(out, nranks, id, rank, config);
      return progress("ncclCommInitRankConfig", r, Deno.UnsafePointer.create(out[0]!));
    },
    ncclAllReduce: (send, recv, count, datatype, op, comm, stream) =>
      progress(
        "ncclAllReduce",
        s.ncclAllReduce(send, recv, count, datatype, op, comm, stream),
        comm,
      ),
    ncclBroadcast: (send, recv, count, datatype, root, comm, stream) =>
      progress(
        "ncclBroadcast",
        s.ncclBroadcast(send, recv, count, datatype, root, comm, stream),
        comm,
      ),
    ncclAllGather: (send, recv, count, datatype, comm, stream) =>
      progress("ncclAllGather", s.ncclAllGather(send, recv, count, datatype, comm, stream), comm),
    ncclReduceScatter: (send, recv, count, datatype, op, comm, stream) =>
      progress(
        "ncclReduceScatter",
        s.ncclReduceScatter(send, recv, count, datatype, op, comm, stream),
        comm,
      ),
    asyncProgress: (comm, call) => progress(call, pollAsyncError(comm), comm),
    pollAsyncError,
    abort: (comm) => s.ncclCommAbort(comm),
    destroy: (comm) => s.ncclCommDestroy(comm),
    finalize: (comm) => s.ncclCommFinalize ? s.ncclCommFinalize(comm) : null,
    errorText,
  };
}

/** An opened NCCL: its call surface, and (for ffi/ and tests only) its raw symbols. */
export interface NcclLibrary {
  readonly path: string;
  /** e.g. "2.27.3" */
  readonly version: string;
  /** The calls callers make (see NcclCalls). */
  readonly calls: NcclCalls;
  /** The raw symbols: ffi/ and tests only (tests/ffi/native_call_sites_test.ts keeps it so). */
  readonly symbols: NcclFunctions;
  /** NCCL's text for a result code (and the communicator's last error, given `comm`). */
  errorText(result: number, comm?: Deno.PointerValue): string;
}

let nccl: NcclLibrary | undefined;

/**
 * Opens NCCL (once), or throws naming the folders searched.
 *
 * @example
 * ```ts
 * const n = ncclLibrary();
 * console.log(`NCCL ${n.version} from ${n.path}`);
 * ```
 */
export function ncclLibrary(opts?: LibrarySearchOptions, path?: string): NcclLibrary {
  if (nccl && !opts) {
    if (path !== undefined && path !== nccl.path) {
      throw new Error(`Cannot open NCCL from ${path}: this process already uses ${nccl.path}`);
    }
    return nccl;
  }
  let file = path; // the emulated device's stand-in, or a file the caller chose
  if (file === undefined) {
    const found = findCudaLibrary("nccl", opts);
    if (!found.path) {
      throw new Error(
        `Cannot use NCCL for a process group of GPU ranks: ${describeMissing(found)}. ` +
          `Install NCCL (pip install nvidia-nccl-cu13, or the system package libnccl2) or put ` +
          `its folder on LD_LIBRARY_PATH.`,
      );
    }
    file = found.path;
  }
  let lib: Deno.DynamicLibrary<NcclSymbols>;
  try {
    lib = Deno.dlopen(file, NCCL_SYMBOLS);
  } catch (e) {
    throw new Error(`Cannot load NCCL from ${file}: ${(e as Error).message}`, { cause: e });
  }
  const v = new Int32Array(1);
  const vr = lib.symbols.ncclGetVersion(v);
  if (vr !== NCCL_SUCCESS) {
    throw new DtNativeError(
      "nccl",
      "ncclGetVersion",
      vr,
      cString(lib.symbols.ncclGetErrorString(vr)),
    );
  }
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9
  const version = `${Math.floor(v[0]! / 10000)}.${Math.floor((v[0]! % 10000) / 100)}.${
    v[0]! % 100
  }`;
  const calls = bindNcclCalls(lib.symbols, file, version);
  const opened: NcclLibrary = {
    path: file,
    version,
    calls,
    symbols: lib.symbols,
    errorText: calls.errorText,
  };
  if (!opts) nccl = opened;
  return opened;
}

/**
 * The call surface of NCCL (opened once, as ncclLibrary() opens it; `path`
 * picks the emulated device's stand-in or a file of the caller's choice).
 *
 * @example
 * ```ts
 * const nccl = ncclCalls();
 * const id = new Uint8Array(128);
 * nccl.ncclGetUniqueId(id);
 * ```
 */
export function ncclCalls(path?: string): NcclCalls {
  return ncclLibrary(undefined, path).calls;
}
