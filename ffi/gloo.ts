/**
 * The Gloo library (build/libdtrain_gloo.so, a C++ shim over Debian's libgloo
 * built from kernels/gloo): its symbol table and its loading, once, on first
 * use. The Gloo process group (distributed/backends/gloo_backend.ts) and `dtrain
 * doctor` are its users.
 *
 * Conventions as in ffi/symbols.ts: every dt_gloo_* call returns a dt_status;
 * counts, sequence numbers and timeouts are 64-bit and must be BigInt.
 * Callers use glooCalls() (status-checked), and glooAbort()/glooCloseLeaked()
 * where a failure must not throw; never the raw symbols.
 *
 * @module
 */
import { type CheckedCalls, checkedCalls } from "./calls.ts";
import { cString, type NativeLibrary, openLibrary } from "./native.ts";
import { buildHash } from "./value_calls.ts";

const P = "pointer" as const;
const BUF = "buffer" as const;
const I64 = "i64" as const;
const U64 = "u64" as const;
const I32 = "i32" as const;
const STATUS = { result: I32 } as const;

/** Every symbol of libdtrain_gloo.so, with its C parameters. */
export const GLOO_SYMBOLS = {
  dt_abi_version: { parameters: [], result: I32 },
  /** const char*: text of the last error on this thread. */
  dt_last_error: { parameters: [], result: P },
  /** const char*: hash of the sources this library was built from. */
  dt_build_hash: { parameters: [], result: P },
  /** const char*: the Gloo version it was built against ("0.5.0"). */
  dt_gloo_version: { parameters: [], result: P },
  /** (store_host, store_port, token, identity, key prefix, attempt abort key,
   *  rank, size, labels (size NUL-terminated names back to back), iface,
   *  bind_host, proofs_out [size x 32], proofs_in [size x 32], flags,
   *  timeout_ms, uint64_t* out_handle): join the group (all strings
   *  NUL-terminated). */
  dt_gloo_open: {
    parameters: [BUF, I32, BUF, BUF, BUF, BUF, I32, I32, BUF, BUF, BUF, BUF, BUF, I32, I64, BUF],
    ...STATUS,
  },
  /** (handle): leave; peers waiting on this member fail at once. */
  dt_gloo_close: { parameters: [P], ...STATUS },
  /** (handle, status, reason): fail the group for every member. */
  dt_gloo_abort: { parameters: [P, I32, BUF], ...STATUS },
  /** (handle, char* out, cap): Gloo's description of the group's device. */
  dt_gloo_info: { parameters: [P, BUF, I64], ...STATUS },
  /** (iface, toward host, char* out, cap): the device a group would use. */
  dt_gloo_probe: { parameters: [BUF, BUF, BUF, I64], ...STATUS },
  /** (handle, op, dtype, count, redop, root, name, timeout_ms): call record
   *  exchange (sizes and names compared; the barrier). */
  dt_gloo_check: { parameters: [P, I32, I32, I64, I32, I32, BUF, I64], ...STATUS },
  /** (handle, buf, count, dtype, redop, divisor, seq, timeout_ms) */
  dt_gloo_allreduce: { parameters: [P, P, I64, I32, I32, I64, U64, I64], ...STATUS },
  /** (handle, buf, count, dtype, root, seq, timeout_ms) */
  dt_gloo_broadcast: { parameters: [P, P, I64, I32, I32, U64, I64], ...STATUS },
  /** (handle, out [size x count], inp [count], count, dtype, seq, timeout_ms) */
  dt_gloo_allgather: { parameters: [P, P, P, I64, I32, U64, I64], ...STATUS },
  /** (handle, out [count], inp [size x count], count, dtype, redop, seq, timeout_ms); avg divides by size */
  dt_gloo_reduce_scatter: { parameters: [P, P, P, I64, I32, I32, U64, I64], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;

/** The type of GLOO_SYMBOLS. */
export type GlooSymbols = typeof GLOO_SYMBOLS;

/** Call-record op codes of dt_gloo_check (kernels/gloo/gloo_collectives.cc). */
export const GLOO_OP = {
  allReduce: 1,
  broadcast: 2,
  allGather: 3,
  reduceScatter: 4,
  barrier: 5,
} as const;

/** dt_gloo_open's status when a pair connection failed its membership proof. */
export const GLOO_ERR_REFUSED = 9;

/** dt_gloo_open flags. */
export const GLOO_FLAG_DETAIL = 1;

/** Bytes of one pair's membership proof. */
export const GLOO_PROOF_BYTES = 32;

let gloo: NativeLibrary<GlooSymbols> | undefined;

/** The Gloo library, opened on first call. */
export function glooLibrary(): NativeLibrary<GlooSymbols> {
  gloo ??= openLibrary("libdtrain_gloo.so", GLOO_SYMBOLS);
  return gloo;
}

/** The dt_status symbols of the library that callers call, each status-checked. */
const GLOO_CALLED = [
  "dt_gloo_open",
  "dt_gloo_close",
  "dt_gloo_info",
  "dt_gloo_probe",
  "dt_gloo_check",
  "dt_gloo_allreduce",
  "dt_gloo_broadcast",
  "dt_gloo_allgather",
  "dt_gloo_reduce_scatter",
] as const satisfies readonly (keyof GlooSymbols)[];

/** The group's calls, status-checked (ffi/calls.ts): they throw DtNativeError with the library's text. */
export type GlooCalls = CheckedCalls<GlooSymbols, (typeof GLOO_CALLED)[number]>;

/** A NUL-terminated C string as the library's `const char*` parameters take it. */
type CText = Parameters<Deno.DynamicLibrary<GlooSymbols>["symbols"]["dt_gloo_abort"]>[2];

let calls: GlooCalls | undefined;

/** The status-checked calls of the Gloo library, bound on first call. */
export function glooCalls(): GlooCalls {
  calls ??= checkedCalls(glooLibrary(), GLOO_SYMBOLS, GLOO_CALLED);
  return calls;
}

/**
 * Fails the group of `handle` for every member with `status` and `reason`
 * (NUL-terminated). Never throws: it runs while another error is already
 * being reported, which must not be replaced by this one's.
 */
export function glooAbort(handle: Deno.PointerObject, status: number, reason: CText): void {
  glooLibrary().symbols.dt_gloo_abort(handle, status, reason);
}

/**
 * Leaves a group whose handle was dropped without close() (a finalizer's
 * backstop): nobody is left to hear of a failure, so its status is ignored.
 */
export function glooCloseLeaked(handle: Deno.PointerObject): void {
  glooLibrary().symbols.dt_gloo_close(handle);
}

/** The Gloo version `lib` (this library, perhaps opened by a probe of its own) was built against. */
export function glooVersion(lib: NativeLibrary<GlooSymbols> = glooLibrary()): string {
  return cString(lib.symbols.dt_gloo_version());
}

/** The library's build hash and the Gloo version it was built against (for run records). */
export function glooBuildInfo(): { buildHash: string; version: string } {
  return { buildHash: buildHash(glooLibrary()), version: glooVersion() };
}
