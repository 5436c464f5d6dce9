/**
 * The native calls whose result is a value, not a dt_status (so they have no
 * wrapper in ffi/calls.ts): a library's identity (build hash, code path), the
 * last error text, and allocation, which answers NULL when memory is short
 * so the caller can free its cache and try again. Everything outside ffi/
 * reads these through the functions here, never through a library's symbols.
 *
 * @module
 */
import { cString } from "./native.ts";

/** A library that exports dt_build_hash (every dtrain library does). */
interface Identified {
  readonly symbols: { dt_build_hash(): Deno.PointerValue };
}

/** A library that says which code path it runs (the kernel libraries). */
interface Named {
  readonly symbols: { dt_backend_name(): Deno.PointerValue };
}

/** A library with the kernel ABI's allocation and error text. */
interface Allocating {
  readonly symbols: {
    dt_alloc(bytes: bigint): Deno.PointerValue;
    dt_last_error(): Deno.PointerValue;
  };
}

/** The sha256 of the sources `lib` was built from (dt_build_hash). */
export function buildHash(lib: Identified): string {
  return cString(lib.symbols.dt_build_hash());
}

/** The code path `lib` runs: "cpu-avx2", "cuda sm_90", … (dt_backend_name). */
export function backendName(lib: Named): string {
  return cString(lib.symbols.dt_backend_name());
}

/**
 * `bytes` of the library's memory (dt_alloc: 64-byte aligned), or null when
 * it has none to give; lastAllocError() then says why.
 */
export function allocOrNull(lib: Allocating, bytes: number): Deno.PointerValue {
  return lib.symbols.dt_alloc(BigInt(bytes));
}

/** The library's text for this thread's last failure (after allocOrNull answered null). */
export function lastAllocError(lib: Allocating): string {
  return cString(lib.symbols.dt_last_error());
}
