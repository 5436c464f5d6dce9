/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * The library's identity, its thread count, and memory: allocation, copies, fills, casts
 * and synchronisation.
 *
 * @module
 */
import { F64, I32, I64, P, STATUS } from "./c_types.ts";

export const RUNTIME_SYMBOLS = {
  // ---- library identity and runtime -------------------------------------
  dt_abi_version: { parameters: [], result: I32 },
  /** const char*: text of the last error on this thread. */
  dt_last_error: { parameters: [], result: P },
  /** const char*: "cpu-avx2", "cpu-generic", "cuda sm_90", ... */
  dt_backend_name: { parameters: [], result: P },
  /** const char*: sha256 of the kernel sources this library was built from. */
  dt_build_hash: { parameters: [], result: P },
  dt_set_num_threads: { parameters: [I32], ...STATUS },
  dt_get_num_threads: { parameters: [], result: I32 },

  // ---- memory ------------------------------------------------------------
  /** void* dt_alloc(size_t bytes): 64-byte aligned; NULL + error on failure. */
  dt_alloc: { parameters: [I64], result: P },
  dt_free: { parameters: [P], ...STATUS },
  /** (dst, src, bytes, kind 0=h2h 1=h2d 2=d2h 3=d2d, stream) */
  dt_memcpy: { parameters: [P, P, I64, I32, P], ...STATUS },
  dt_synchronize: { parameters: [P], ...STATUS },
  /** (stream): the first data error that kernels found on the device since the
   *  last call (see the conventions above), then forgotten; 0 when none.
   *  Synchronises the stream. Always 0 on the CPU library. */
  dt_deferred_error: { parameters: [P], ...STATUS },
  /** (out, dtype, n, value, stream): every element = value (cast to dtype). */
  dt_fill: { parameters: [P, I32, I64, F64, P], ...STATUS },
  /** (out, out_dtype, inp, inp_dtype, n, stream): elementwise conversion; floats
   *  round to nearest even; into an integer type, a value it cannot hold is a
   *  data error (CUDA: written as 0, reported by dt_deferred_error). */
  dt_cast: { parameters: [P, I32, P, I32, I64, P], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;
