/**
 * Shared helpers of the CPU kernel tests: opening the library (built on
 * first use), pointers to typed arrays, seeded random inputs, error checks
 * and tolerance comparisons that print the worst element on failure.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { cpuKernels } from "../../ffi/cpu.ts";
import { cString } from "../../ffi/native.ts";
import { fileURLToPath as fromFileUrl } from "node:url";

buildNative({ quiet: true });

/** The CPU kernel library's symbols. */
export const K = cpuKernels().symbols;

/** A pointer to a typed array's memory (fine in tests; hot paths cache pointers). */
export function ptr(a: ArrayBufferView<ArrayBuffer>): Deno.PointerValue {
  return Deno.UnsafePointer.of(a);
}

/** i64 argument (the ABI takes BigInt). */
export const n64 = (n: number): bigint => BigInt(n);

type F32 = Float32Array<ArrayBuffer>;

/**
 * dt_layernorm_fwd on f32 rows (output f32): out, mean and rstd of x, or of x + res with a
 * residual (f32, or bf16 bits with resBf16), the sum written to `sum` when one is given.
 */
export function layerNormF32(
  x: F32,
  w: F32 | null,
  b: F32 | null,
  rows: number,
  C: number,
  eps: number,
  residual: { res: ArrayBufferView<ArrayBuffer>; resBf16: boolean; sum: F32 | null } | null = null,
): { out: F32; mean: F32; rstd: F32 } {
  const out = new Float32Array(rows * C),
    mean = new Float32Array(rows),
    rstd = new Float32Array(rows);
  ok(
    K.dt_layernorm_fwd(
      ptr(out),
      ptr(mean),
      ptr(rstd),
      ptr(x),
      w && ptr(w),
      b && ptr(b),
      n64(rows),
      n64(C),
      eps,
      0,
      0,
      residual && ptr(residual.res),
      residual?.resBf16 ? 1 : 0,
      residual?.sum ? ptr(residual.sum) : null,
      null,
    ),
  );
  return { out, mean, rstd };
}

/** The library's text for the last failed call on this thread. */
export function lastError(): string {
  return cString(K.dt_last_error());
}

/** Asserts a call succeeded, showing the library's text when it did not. */
export function ok(status: number): void {
  if (status !== 0) assert.fail(`kernel returned status ${status}: ${lastError()}`);
}

/** Asserts a call failed with DT_ERR_ARG (1) and an error text containing `text`. */
export function failsWith(status: number, text: string | RegExp): void {
  assert.equal(status, 1, `expected DT_ERR_ARG, got status ${status}`);
  const message = lastError();
  if (typeof text === "string") {
    assert.ok(
      message.includes(text),
      `error text ${JSON.stringify(message)} lacks ${JSON.stringify(text)}`,
    );
  } else assert.match(message, text);
}

/** A small seeded generator (mulberry32) so failures reproduce. */
export class Rng {
  #state: number;
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.#state = (this.#state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** Standard normal (Box-Muller). */
  normal(): number {
    const u = 1 - this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.next());
  }
  /** Integer in [lo, hi). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }
  /** n float32 values, normal with standard deviation `scale`. */
  normals(n: number, scale = 1): Float32Array<ArrayBuffer> {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = this.normal() * scale;
    return a;
  }
  /** n int32 values in [lo, hi). */
  ints(n: number, lo: number, hi: number): Int32Array<ArrayBuffer> {
    const a = new Int32Array(n);
    for (let i = 0; i < n; i++) a[i] = this.int(lo, hi);
    return a;
  }
}

/**
 * Largest |actual - expected| / (|expected| + floor) over all elements, with
 * where it happened; NaN in exactly one of the two counts as Infinity.
 */
export function maxRelErr(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  floor = 0,
): { err: number; at: number } {
  assert.equal(actual.length, expected.length, "length mismatch");
  let err = 0, at = -1;
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i]!, e = expected[i]!;
    if (Number.isNaN(a) || Number.isNaN(e)) {
      if (Number.isNaN(a) !== Number.isNaN(e)) return { err: Infinity, at: i };
      continue;
    }
    const d = a === e ? 0 : Math.abs(a - e) / (Math.abs(e) + floor);
    if (d > err) [err, at] = [d, i];
  }
  return { err, at };
}

/** Asserts maxRelErr(actual, expected, floor) <= tol, naming the worst element. */
export function assertClose(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  tol: number,
  what: string,
  floor = 0,
): void {
  const { err, at } = maxRelErr(actual, expected, floor);
  if (!(err <= tol)) {
    assert.fail(
      `${what}: max relative error ${err.toExponential(3)} > ${tol} at element ${at}: ` +
        `got ${actual[at]}, expected ${expected[at]}`,
    );
  }
}

/** Asserts two arrays hold identical values (bitwise for floats; NaN equals NaN), naming the first difference. */
export function assertSameBits(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  what: string,
): void {
  assert.equal(actual.length, expected.length, `${what}: length mismatch`);
  for (let i = 0; i < actual.length; i++) {
    if (!Object.is(actual[i], expected[i])) {
      assert.fail(`${what}: element ${i} is ${actual[i]}, expected ${expected[i]}`);
    }
  }
}

/** Runs fn with the library's pool set to `threads`, restoring the previous count after. */
export function withThreads<T>(threads: number, fn: () => T): T {
  const before = K.dt_get_num_threads();
  ok(K.dt_set_num_threads(threads));
  try {
    return fn();
  } finally {
    ok(K.dt_set_num_threads(before));
  }
}

/** Sizes that exercise scalar tails, vector bodies and multi-threaded chunks. */
export const SIZES = [1, 7, 8, 33, 1000, 65_537, 300_001];

/** Set in the child processes of `testUnderEachIsa`: they run with one kernel forced. */
export const isIsaChild = Deno.env.get("DTRAIN_CPU_ISA") !== undefined;

/**
 * Registers a test that runs the file at `fileUrl` again under each
 * DTRAIN_CPU_ISA cap (avx512, avx2, generic), so that its tests pass with
 * every kernel this CPU can run, and never an illegal instruction; `what`
 * names the function under test. Tests that do not depend on the kernel
 * skip themselves in those children (`ignore: isIsaChild`).
 */
export function testUnderEachIsa(what: string, fileUrl: string): void {
  Deno.test({
    name: `${what} passes these tests with each kernel (DTRAIN_CPU_ISA = avx512, avx2, generic)`,
    ignore: isIsaChild,
    fn: async () => {
      for (const isa of ["avx512", "avx2", "generic"]) {
        const out = await new Deno.Command(Deno.execPath(), {
          args: ["test", "-A", "--no-check", fromFileUrl(fileUrl)],
          env: { DTRAIN_CPU_ISA: isa },
          cwd: fromFileUrl(new URL("../..", import.meta.url).href),
          stdout: "piped",
          stderr: "piped",
        }).output();
        const text = new TextDecoder();
        assert.equal(
          out.code,
          0,
          `with DTRAIN_CPU_ISA=${isa}:\n${text.decode(out.stdout)}${text.decode(out.stderr)}`,
        );
      }
    },
  });
}

/**
 * Memory whose last byte is followed by an inaccessible page (libc mmap +
 * mprotect), so that reading one element past an operand kills the process
 * instead of passing unnoticed.
 */
export class GuardedMemory {
  #libc = Deno.dlopen("libc.so.6", {
    getpagesize: { parameters: [], result: "i32" },
    mmap: { parameters: ["pointer", "usize", "i32", "i32", "i32", "i64"], result: "pointer" },
    mprotect: { parameters: ["pointer", "usize", "i32"], result: "i32" },
    munmap: { parameters: ["pointer", "usize"], result: "i32" },
  });
  #maps: [Deno.PointerValue, bigint][] = [];

  /** A copy of `src` that ends exactly where the guard page starts. */
  place(
    src: ArrayBufferView<ArrayBuffer>,
  ): { ptr: Deno.PointerValue; bytes: Uint8Array<ArrayBuffer> } {
    const page = this.#libc.symbols.getpagesize();
    const dataPages = Math.ceil(src.byteLength / page) || 1, total = BigInt((dataPages + 1) * page);
    const PROT_RW = 3, MAP_PRIVATE_ANON = 0x22;
    const base = this.#libc.symbols.mmap(null, total, PROT_RW, MAP_PRIVATE_ANON, -1, 0n);
    if (base === null || Deno.UnsafePointer.value(base) === -1n) throw new Error("mmap failed");
    this.#maps.push([base, total]);
    const at = (offset: number): Deno.PointerObject =>
      Deno.UnsafePointer.offset(base, offset) ?? base;
    const guard = at(dataPages * page);
    if (this.#libc.symbols.mprotect(guard, BigInt(page), 0) !== 0) {
      throw new Error("mprotect failed");
    }
    const ptr = at(dataPages * page - src.byteLength);
    const bytes = new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(ptr, src.byteLength));
    bytes.set(new Uint8Array(src.buffer, src.byteOffset, src.byteLength));
    return { ptr, bytes };
  }

  [Symbol.dispose](): void {
    for (const [base, total] of this.#maps) this.#libc.symbols.munmap(base, total);
    this.#libc.close();
  }
}
