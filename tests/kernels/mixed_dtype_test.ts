/**
 * The mixed-dtype elementwise kernels (dt_binary_ex, dt_gelu_fwd_ex,
 * dt_gelu_bwd_ex) give exactly the bits of the cast → f32 op → cast round
 * trip they replace (dt_cast, dt_binary / dt_gelu_*, dt_cast), for every
 * combination of f32, bf16 and f16 operands, every broadcast form and op, odd
 * and empty sizes; and refuse what they cannot do, naming it.
 */
import assert from "node:assert/strict";
import { failsWith, K, n64, ok, ptr, Rng, testUnderEachIsa } from "./_helpers.ts";

const DT = { f32: 0, bf16: 1, f16: 2 } as const;
type D = keyof typeof DT;
const DTYPES: D[] = ["f32", "bf16", "f16"];
const bytesOf = (d: D) => (d === "f32" ? 4 : 2);

/** n values in dtype d (random normals rounded into d by the library's own cast). */
function data(rng: Rng, n: number, d: D, scale = 1): Uint8Array<ArrayBuffer> {
  const f = rng.normals(n).map((x) => x * scale);
  return cast(new Uint8Array(f.buffer), "f32", d, n);
}

function cast(src: Uint8Array<ArrayBuffer>, from: D, to: D, n: number): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(Math.max(n * bytesOf(to), 4));
  ok(K.dt_cast(ptr(out), DT[to], ptr(src), DT[from], n64(n), null));
  return out.subarray(0, n * bytesOf(to));
}

function assertSameBytes(got: Uint8Array, want: Uint8Array, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  const at = got.findIndex((b, i) => b !== want[i]);
  assert.equal(at, -1, `${what}: first difference at byte ${at}`);
}

Deno.test("dt_binary_ex() is the cast → dt_binary → cast round trip, bit for bit, for every dtype mix", () => {
  const rng = new Rng(11);
  // [n, bn, inner]: same shape, a trailing bias, a column vector, a middle block, one element, empty
  const forms: [number, number, number][] = [
    [1003, 1003, 1],
    [77 * 33, 33, 1],
    [64 * 33, 64, 33],
    [12_345, 7, 10],
    [300, 1, 1],
    [0, 5, 1],
  ];
  for (const [n, bn, inner] of forms) {
    for (const op of [0, 1, 2, 3]) {
      for (const ad of DTYPES) {
        for (const bd of DTYPES) {
          for (const od of DTYPES) {
            const a = data(rng, n, ad), b = data(rng, bn, bd, op === 3 ? 3 : 1);
            const out = new Uint8Array(Math.max(n * bytesOf(od), 4));
            ok(
              K.dt_binary_ex(
                op,
                ptr(out),
                DT[od],
                ptr(a),
                DT[ad],
                ptr(b),
                DT[bd],
                n64(n),
                n64(bn),
                n64(inner),
                null,
              ),
            );
            const af = cast(a, ad, "f32", n), bf = cast(b, bd, "f32", bn);
            const rf = new Uint8Array(Math.max(n * 4, 4));
            ok(K.dt_binary(op, ptr(rf), ptr(af), ptr(bf), n64(n), n64(bn), n64(inner), null));
            const want = cast(rf.subarray(0, n * 4), "f32", od, n);
            assertSameBytes(
              out.subarray(0, n * bytesOf(od)),
              want,
              `op ${op} ${ad} ${bd} -> ${od} n=${n}/${bn}x${inner}`,
            );
          }
        }
      }
    }
  }
});

Deno.test("dt_binary_ex() may write into its first operand, as gradient accumulation does", () => {
  const rng = new Rng(12);
  const n = 40_009;
  const acc = data(rng, n, "f32"), g = data(rng, n, "bf16");
  const want = new Uint8Array(n * 4);
  ok(K.dt_binary(0, ptr(want), ptr(acc), ptr(cast(g, "bf16", "f32", n)), n64(n), n64(n), 1n, null));
  ok(
    K.dt_binary_ex(
      0,
      ptr(acc),
      DT.f32,
      ptr(acc),
      DT.f32,
      ptr(g),
      DT.bf16,
      n64(n),
      n64(n),
      1n,
      null,
    ),
  );
  assertSameBytes(acc, want, "acc += bf16 gradient");
});

Deno.test("dt_gelu_fwd_ex() and dt_gelu_bwd_ex() are the f32 GELU between two casts, bit for bit", () => {
  const rng = new Rng(13);
  for (const n of [0, 1, 7, 1000, 65_537]) {
    for (const d of DTYPES) {
      const x = data(rng, n, d, 3), dy = data(rng, n, d);
      const y = new Uint8Array(Math.max(n * bytesOf(d), 4)), dx = new Uint8Array(y.length);
      ok(K.dt_gelu_fwd_ex(ptr(y), ptr(x), n64(n), DT[d], null));
      ok(K.dt_gelu_bwd_ex(ptr(dx), ptr(dy), ptr(x), n64(n), DT[d], null));
      const xf = cast(x, d, "f32", n), dyf = cast(dy, d, "f32", n);
      const yf = new Uint8Array(Math.max(n * 4, 4)), dxf = new Uint8Array(yf.length);
      ok(K.dt_gelu_fwd(ptr(yf), ptr(xf), n64(n), null));
      ok(K.dt_gelu_bwd(ptr(dxf), ptr(dyf), ptr(xf), n64(n), null));
      const len = n * bytesOf(d);
      assertSameBytes(
        y.subarray(0, len),
        cast(yf.subarray(0, n * 4), "f32", d, n),
        `gelu ${d} n=${n}`,
      );
      assertSameBytes(
        dx.subarray(0, len),
        cast(dxf.subarray(0, n * 4), "f32", d, n),
        `gelu grad ${d} n=${n}`,
      );
    }
  }
});

Deno.test("dt_gelu_bwd_ex() in bf16 is the f32 gradient between two casts for every bf16 input", () => {
  // every one of the 65,536 bf16 values of x (NaNs, infinities, subnormals, both zeros) against
  // gradients that are ordinary, tiny, huge, subnormal, zero, infinite and NaN, widened in blocks
  // and rounded once as the f32 kernel's result is
  const douts = [1, -0.3671875, 3.0e-3, -2.5e3, 1e-40, 0, -0, Infinity, NaN, 3.3e38];
  const n = 65536 * douts.length;
  const x = new Uint16Array(n), dyf = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x[i] = i % 65536;
    dyf[i] = douts[Math.floor(i / 65536)]!;
  }
  const dy = cast(new Uint8Array(dyf.buffer), "f32", "bf16", n);
  const xb = new Uint8Array(x.buffer);
  const dx = new Uint8Array(n * 2);
  ok(K.dt_gelu_bwd_ex(ptr(dx), ptr(dy), ptr(xb), n64(n), DT.bf16, null));
  const xf = cast(xb, "bf16", "f32", n), dyw = cast(dy, "bf16", "f32", n);
  const dxf = new Uint8Array(n * 4);
  ok(K.dt_gelu_bwd(ptr(dxf), ptr(dyw), ptr(xf), n64(n), null));
  assertSameBytes(dx, cast(dxf, "f32", "bf16", n), "gelu grad, every bf16 x");
});

Deno.test("the mixed-dtype kernels refuse integer dtypes, unknown ops and bad sizes, naming them", () => {
  const x = new Float32Array(8);
  failsWith(
    K.dt_binary_ex(0, ptr(x), 3, ptr(x), 0, ptr(x), 0, 4n, 4n, 1n, null),
    "dt_binary_ex: dtypes out=i32 a=f32 b=f32 must be f32, bf16 or f16",
  );
  failsWith(
    K.dt_binary_ex(9, ptr(x), 0, ptr(x), 0, ptr(x), 0, 4n, 4n, 1n, null),
    "dt_binary_ex: unknown op 9",
  );
  failsWith(
    K.dt_binary_ex(0, ptr(x), 0, ptr(x), 0, ptr(x), 0, 4n, 0n, 1n, null),
    "dt_binary_ex: broadcast bn=0 inner=1 must both be >= 1",
  );
  failsWith(
    K.dt_binary_ex(0, null, 0, ptr(x), 0, ptr(x), 0, 4n, 4n, 1n, null),
    "dt_binary_ex: null pointer",
  );
  failsWith(
    K.dt_gelu_fwd_ex(ptr(x), ptr(x), 4n, 4, null),
    "dt_gelu_fwd_ex: dtype i64 must be f32, bf16 or f16",
  );
  failsWith(K.dt_gelu_bwd_ex(ptr(x), null, ptr(x), 4n, 1, null), "dt_gelu_bwd_ex: null pointer");
  failsWith(K.dt_gelu_fwd_ex(ptr(x), ptr(x), -1n, 0, null), "dt_gelu_fwd_ex: negative size n=-1");
});

// The file again with each kernel forced (DTRAIN_CPU_ISA): GELU's f32 bodies in AVX-512
// intrinsics, or as the compiler vectorises them, behind the same widening and rounding.
testUnderEachIsa("the mixed-dtype kernels", import.meta.url);
