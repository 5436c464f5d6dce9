/**
 * NCCL (libnccl.so.2), opened with Deno.dlopen where ffi/cuda_libs.ts finds
 * it: the symbol table of the calls dtrain makes, the element-type and
 * reduce-op codes, and error text that carries NCCL's own string (and
 * ncclGetLastError's detail when this NCCL has it).
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
 * lib.symbols.ncclCommInitRankConfig(out, size, id, rank, ncclConfig({ blocking: false }));
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

/** An opened NCCL with status checking. */
export interface NcclLibrary {
  readonly path: string;
  /** e.g. "2.27.3" */
  readonly version: string;
  readonly symbols: Deno.DynamicLibrary<NcclSymbols>["symbols"];
  /** Throws DtNativeError with NCCL's text (and the communicator's last error) when result != 0. */
  check(result: number, symbol: string, comm?: Deno.PointerValue): void;
  /** NCCL's text for a result code. */
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
  const errorText = (result: number, comm?: Deno.PointerValue): string => {
    const text = cString(lib.symbols.ncclGetErrorString(result));
    const detail = comm && lib.symbols.ncclGetLastError
      ? cString(lib.symbols.ncclGetLastError(comm))
      : "";
    return detail ? `${text} (${detail})` : text;
  };
  const v = new Int32Array(1);
  const vr = lib.symbols.ncclGetVersion(v);
  if (vr !== NCCL_SUCCESS) throw new DtNativeError("nccl", "ncclGetVersion", vr, errorText(vr));
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9
  const version = `${Math.floor(v[0]! / 10000)}.${Math.floor((v[0]! % 10000) / 100)}.${
    v[0]! % 100
  }`;
  const opened: NcclLibrary = {
    path: file,
    version,
    symbols: lib.symbols,
    errorText,
    check(result, symbol, comm) {
      if (result !== NCCL_SUCCESS) {
        throw new DtNativeError("nccl", symbol, result, errorText(result, comm));
      }
    },
  };
  if (!opts) nccl = opened;
  return opened;
}
