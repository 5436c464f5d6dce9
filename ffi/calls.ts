/**
 * The one FFI call convention: a native symbol that returns a dt_status is
 * called through a wrapper that appends the stream argument (where the symbol
 * takes one) and throws DtNativeError naming the symbol when the status is
 * not 0. Callers write `call.dt_scale(out, inp, n, alpha)`.
 *
 * Each wrapper has the symbol's fixed arity: a rest parameter spread into the
 * FFI function drops the call off V8's fast path (about 25 times slower,
 * `scripts/bench_ffi_call.ts`), so the wrappers come from one closure factory
 * per argument count.
 *
 * @module
 */
import { DtNativeError, type NativeLibrary } from "./native.ts";
import { countingCalls, noteCall } from "../profile/call_count.ts";
import {
  KERNEL_STREAMED,
  KERNEL_SYMBOLS,
  KERNEL_UNSTREAMED,
  type KernelStreamed,
  type KernelSymbols,
} from "./symbols.ts";

// deno-lint-ignore no-explicit-any
type Raw = (...args: any[]) => number;
/** Throws the library's error for `symbol`; called only when status != 0. */
type Fail = (symbol: string, status: number) => never;

/** The JS parameters of symbol K of table S. */
type Params<S extends Deno.ForeignLibraryInterface, K extends keyof S> =
  Deno.DynamicLibrary<S>["symbols"][K] extends (...args: infer A) => unknown ? A : never;
/** A tuple without its last element (the stream). */
type DropLast<T extends readonly unknown[]> = T extends readonly [...infer Head, unknown] ? Head
  : never;

/** Status-checked wrappers of the symbols K of S, each taking every parameter. */
export type CheckedCalls<S extends Deno.ForeignLibraryInterface, K extends keyof S> = {
  readonly [N in K]: (...args: Params<S, N>) => void;
};

/** Status-checked wrappers of the symbols K of S, each taking every parameter but the stream. */
export type StreamCalls<S extends Deno.ForeignLibraryInterface, K extends keyof S> = {
  readonly [N in K]: (...args: DropLast<Params<S, N>>) => void;
};

/* Factories by argument count (the stream, when appended, is not counted), written out so that
 * each wrapper has exactly the FFI function's arity. Up to 20 arguments (dt_gemm has 18,
 * dt_cpu_gemm_bf16_mixed 20, dt_gloo_open 16). */
type U = unknown;
// deno-fmt-ignore
const WITH_STREAM: ((f: Raw, name: string, s: Deno.PointerValue, fail: Fail) => unknown)[] = [
  (f, n, s, x) => () => {
    const r = f(s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U) => {
    const r = f(a, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U) => {
    const r = f(a, b, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U) => {
    const r = f(a, b, c, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U) => {
    const r = f(a, b, c, d, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U) => {
    const r = f(a, b, c, d, e, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U) => {
    const r = f(a, b, c, d, e, g, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U) => {
    const r = f(a, b, c, d, e, g, h, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U) => {
    const r = f(a, b, c, d, e, g, h, i, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U, u: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, u, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U, u: U, v: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, u, v, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U, u: U, v: U, w: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, u, v, w, s);
    if (r !== 0) x(n, r);
  },
  (f, n, s, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U, u: U, v: U, w: U, z: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, u, v, w, z, s);
    if (r !== 0) x(n, r);
  },
];
// deno-fmt-ignore
const PLAIN: ((f: Raw, name: string, fail: Fail) => unknown)[] = [
  (f, n, x) => () => {
    const r = f();
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U) => {
    const r = f(a);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U) => {
    const r = f(a, b);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U) => {
    const r = f(a, b, c);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U) => {
    const r = f(a, b, c, d);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U) => {
    const r = f(a, b, c, d, e);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U) => {
    const r = f(a, b, c, d, e, g);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U) => {
    const r = f(a, b, c, d, e, g, h);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U) => {
    const r = f(a, b, c, d, e, g, h, i);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U) => {
    const r = f(a, b, c, d, e, g, h, i, j);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U, u: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, u);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U, u: U, v: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, u, v);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U, u: U, v: U, w: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, u, v, w);
    if (r !== 0) x(n, r);
  },
  (f, n, x) => (a: U, b: U, c: U, d: U, e: U, g: U, h: U, i: U, j: U, k: U, l: U, m: U, o: U,
    p: U, q: U, t: U, u: U, v: U, w: U, z: U) => {
    const r = f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, t, u, v, w, z);
    if (r !== 0) x(n, r);
  },
];

/** The arity of symbol `name` in `table`, checked against what a factory exists for. */
function arity(table: Deno.ForeignLibraryInterface, name: string, stream: boolean): number {
  const def = table[name];
  if (!def || !("parameters" in def)) throw new TypeError(`${name} is not a function symbol`);
  if (def.nonblocking) throw new TypeError(`${name} is nonblocking: its status is a Promise`);
  const n = def.parameters.length - (stream ? 1 : 0);
  if (stream && def.parameters[def.parameters.length - 1] !== "pointer") {
    throw new TypeError(`${name} does not end with a stream (pointer) parameter`);
  }
  if (!(stream ? WITH_STREAM : PLAIN)[n]) {
    throw new TypeError(`no checked-call wrapper for ${n} arguments (${name}): add one`);
  }
  return n;
}

/**
 * Wrappers of `names` that pass `stream` as the last argument and throw
 * DtNativeError (symbol, library and the library's own text) on a non-zero
 * status.
 *
 * @example
 * ```ts
 * const call = streamCalls(lib, KERNEL_SYMBOLS, ["dt_scale"], null);
 * call.dt_scale(out, inp, BigInt(n), 0.5);
 * ```
 */
export function streamCalls<S extends Deno.ForeignLibraryInterface, K extends keyof S & string>(
  lib: NativeLibrary<S>,
  table: S,
  names: readonly K[],
  stream: Deno.PointerValue,
): StreamCalls<S, K> {
  const out = {};
  for (const name of names) {
    arity(table, name, true); // a table the wrappers cannot serve is refused now, not at a call
    onFirstUse(out, name, () => streamCall(lib, table, name, stream));
  }
  return out as StreamCalls<S, K>;
}

/** The wrapper of one symbol that takes a stream (the stand-in that throws when it is absent). */
function streamCall(
  lib: NativeLibrary<Deno.ForeignLibraryInterface>,
  table: Deno.ForeignLibraryInterface,
  name: string,
  stream: Deno.PointerValue,
): unknown {
  const f = (lib.symbols as unknown as Record<string, Raw | null>)[name];
  const n = arity(table, name, true);
  const fail: Fail = (symbol, status) => lib.fail(symbol, status);
  return f ? counted(name, WITH_STREAM[n]!(f, name, stream, fail)) : absent(lib, name);
}

/** The wrapper of one symbol without a stream. */
function plainCall(
  lib: NativeLibrary<Deno.ForeignLibraryInterface>,
  table: Deno.ForeignLibraryInterface,
  name: string,
): unknown {
  const f = (lib.symbols as unknown as Record<string, Raw>)[name]!;
  const fail: Fail = (symbol, status) => lib.fail(symbol, status);
  return counted(name, PLAIN[arity(table, name, false)]!(f, name, fail));
}

/**
 * Defines `out[name]` as `make()`, made when it is first read: the wrapper, and the binding of
 * its native symbol under it (ffi/native.ts), cost only for the calls a process makes. Read once,
 * it is a plain property holding the wrapper.
 */
function onFirstUse(out: object, name: string, make: () => unknown): void {
  // A plain, writable property once settled, as the eager table's were (tests wrap wrappers).
  const settle = (value: unknown) =>
    Object.defineProperty(out, name, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  Object.defineProperty(out, name, {
    configurable: true,
    enumerable: true,
    get() {
      const value = make();
      settle(value);
      return value;
    },
    set: settle,
  });
}

/** Symbols that read the counts themselves (not counted). */
const UNCOUNTED: ReadonlySet<string> = new Set(["dt_cuda_work_count"]);

/** The wrapper itself, or with DTRAIN_COUNT_CALLS=1 one that counts its calls first (off the
 *  fast path, which only counting pays for). */
function counted(name: string, wrapper: unknown): unknown {
  if (!countingCalls || UNCOUNTED.has(name)) return wrapper;
  const w = wrapper as (...args: unknown[]) => void;
  return (...args: unknown[]) => {
    noteCall(name);
    w(...args);
  };
}

/** The stand-in for an optional symbol the library lacks (a kernel the CUDA
 *  library does not have yet): it throws, naming the symbol and the library. */
function absent(lib: { path: string }, name: string): () => never {
  return () => {
    throw new DtNativeError(
      lib.path,
      name,
      -1,
      'this library does not have the kernel yet; run the op on the CPU (useDevice("cpu"))',
    );
  };
}

/** Wrappers of `names` (symbols without a stream) that throw DtNativeError on a non-zero status. */
export function checkedCalls<S extends Deno.ForeignLibraryInterface, K extends keyof S & string>(
  lib: NativeLibrary<S>,
  table: S,
  names: readonly K[],
): CheckedCalls<S, K> {
  const out = {};
  for (const name of names) {
    arity(table, name, false);
    onFirstUse(out, name, () => plainCall(lib, table, name));
  }
  return out as CheckedCalls<S, K>;
}

/** The status-checked kernel calls of a backend: every dt_status symbol of ffi/symbols.ts. */
export type KernelCalls =
  & StreamCalls<KernelSymbols, KernelStreamed>
  & CheckedCalls<KernelSymbols, (typeof KERNEL_UNSTREAMED)[number]>;

/** Binds every dt_status kernel symbol of `lib`, with `stream` appended where the symbol takes one. */
export function kernelCalls(
  lib: NativeLibrary<KernelSymbols>,
  stream: Deno.PointerValue,
): KernelCalls {
  // One object (a spread would read, and so bind, every wrapper).
  const out = {};
  for (const name of KERNEL_STREAMED) {
    onFirstUse(out, name, () => streamCall(lib, KERNEL_SYMBOLS, name, stream));
  }
  for (const name of KERNEL_UNSTREAMED) {
    onFirstUse(out, name, () => plainCall(lib, KERNEL_SYMBOLS, name));
  }
  return out as KernelCalls;
}
