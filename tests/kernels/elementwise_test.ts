/**
 * Tests of the elementwise kernels (dt_binary, dt_scale, dt_axpy, ReLU, GELU,
 * dropout) against TypeScript references. One float32 operation is correctly
 * rounded, so Math.fround(a op b) and fmaf32 give the exact expected bits.
 */
import assert from "node:assert/strict";
import { fmaf32 } from "../../random/float32_fma.ts";
import {
  assertClose,
  assertSameBits,
  failsWith,
  K,
  n64,
  ok,
  ptr,
  Rng,
  SIZES,
  withThreads,
} from "./_helpers.ts";

const f = Math.fround;
const OPS: [string, (a: number, b: number) => number][] = [
  ["add", (a, b) => f(a + b)],
  ["sub", (a, b) => f(a - b)],
  ["mul", (a, b) => f(a * b)],
  ["div", (a, b) => f(a / b)],
];

/** out[i] = a[i] op b[(i / inner) % bn], the documented rule, element by element. */
function binaryRef(
  op: number,
  a: Float32Array,
  b: Float32Array,
  bn: number,
  inner: number,
): Float32Array {
  const out = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = OPS[op]![1](a[i]!, b[Math.floor(i / inner) % bn]!);
  return out;
}

Deno.test("dt_binary() matches the reference for every op and broadcast form", () => {
  const rng = new Rng(1);
  for (const n of SIZES) {
    const a = rng.normals(n);
    // [bn, inner]: same shape, trailing vector, column vector, both, a bn that does not divide n
    const forms: [number, number][] = [
      [n, 1],
      [Math.min(n, 7), 1],
      [Math.max(1, Math.floor(n / 33)), 33],
      [3, 5],
      [
        Math.min(n, 10),
        7,
      ],
    ];
    for (const [bn, inner] of forms) {
      const b = rng.normals(bn);
      for (let op = 0; op < 4; op++) {
        const out = new Float32Array(n);
        ok(K.dt_binary(op, ptr(out), ptr(a), ptr(b), n64(n), n64(bn), n64(inner), null));
        assertSameBits(
          out,
          binaryRef(op, a, b, bn, inner),
          `${OPS[op]![0]} n=${n} bn=${bn} inner=${inner}`,
        );
      }
    }
  }
});

Deno.test("dt_binary() may write its output over a", () => {
  const rng = new Rng(2);
  const a = rng.normals(1003), b = rng.normals(17);
  const expected = binaryRef(2, a, b, 17, 1);
  ok(K.dt_binary(2, ptr(a), ptr(a), ptr(b), n64(a.length), 17n, 1n, null));
  assertSameBits(a, expected, "in-place mul");
});

Deno.test("dt_binary() rejects an unknown op, negative n and empty broadcast", () => {
  const x = new Float32Array(4);
  failsWith(K.dt_binary(7, ptr(x), ptr(x), ptr(x), 4n, 4n, 1n, null), "dt_binary: unknown op 7");
  failsWith(K.dt_binary(0, ptr(x), ptr(x), ptr(x), -1n, 4n, 1n, null), "negative size n=-1");
  failsWith(
    K.dt_binary(0, ptr(x), ptr(x), ptr(x), 4n, 0n, 1n, null),
    "bn=0 inner=1 must both be >= 1",
  );
  failsWith(K.dt_binary(0, null, ptr(x), ptr(x), 4n, 4n, 1n, null), "dt_binary: null pointer");
  ok(K.dt_binary(0, null, null, null, 0n, 0n, 0n, null)); // nothing to do is not an error
});

Deno.test("dt_scale() and dt_axpy() round like torch's mul and add_(alpha)", () => {
  const rng = new Rng(3);
  for (const n of SIZES) {
    const x = rng.normals(n), y = rng.normals(n);
    const alpha = f(-0.37);
    const scaled = new Float32Array(n);
    ok(K.dt_scale(ptr(scaled), ptr(x), n64(n), alpha, null));
    assertSameBits(scaled, x.map((v) => f(alpha * v)), `scale n=${n}`);
    // axpy is one fused multiply-add per element, as torch's AVX2 add_(x, alpha=...)
    const expected = y.map((v, i) => fmaf32(x[i]!, alpha, v));
    ok(K.dt_axpy(ptr(y), ptr(x), n64(n), alpha, null));
    assertSameBits(y, expected, `axpy n=${n}`);
  }
  failsWith(K.dt_axpy(null, null, 5n, 1, null), "dt_axpy: null pointer");
  failsWith(K.dt_scale(null, null, -3n, 1, null), "dt_scale: negative size n=-3");
});

Deno.test("dt_relu_fwd() and dt_relu_bwd() keep NaN and -0 as torch.relu", () => {
  const rng = new Rng(4);
  for (const n of SIZES) {
    const x = rng.normals(n);
    if (n > 3) [x[0], x[1], x[2]] = [NaN, -0, 0];
    const out = new Float32Array(n);
    ok(K.dt_relu_fwd(ptr(out), ptr(x), n64(n), null));
    assertSameBits(out, x.map((v) => (v < 0 ? 0 : v)), `relu n=${n}`);
    const dout = rng.normals(n), dinp = new Float32Array(n);
    ok(K.dt_relu_bwd(ptr(dinp), ptr(dout), ptr(x), n64(n), null));
    assertSameBits(dinp, dout.map((d, i) => (x[i]! > 0 ? d : 0)), `relu bwd n=${n}`);
  }
});

/** GELU (tanh form) in float64. */
function gelu64(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

Deno.test("dt_gelu_fwd() matches the tanh formula in float64", () => {
  const rng = new Rng(5);
  for (const n of SIZES) {
    const x = rng.normals(n, 4);
    const out = new Float32Array(n);
    ok(K.dt_gelu_fwd(ptr(out), ptr(x), n64(n), null));
    // Error budget: a few float32 roundings of O(|x|) values plus tanhf's ulp,
    // which (1 + tanh) turns into an absolute error ~6e-8 * |x| for x << 0.
    const expected = Array.from(x, gelu64);
    for (let i = 0; i < n; i++) {
      const tol = 4e-7 * Math.max(1, Math.abs(x[i]!)) + 3e-7 * Math.abs(expected[i]!);
      if (!(Math.abs(out[i]! - expected[i]!) <= tol)) {
        assert.fail(`gelu(${x[i]}) = ${out[i]}, expected ${expected[i]} (n=${n}, i=${i})`);
      }
    }
  }
});

Deno.test("dt_gelu_bwd() matches finite differences of the float64 forward", () => {
  const rng = new Rng(6);
  for (const n of SIZES) {
    const x = rng.normals(n, 4), dout = rng.normals(n);
    const dinp = new Float32Array(n);
    ok(K.dt_gelu_bwd(ptr(dinp), ptr(dout), ptr(x), n64(n), null));
    const h = 1e-4; // central differences: truncation error ~h^2 * |gelu'''| < 1e-8
    const expected = Array.from(x, (v, i) => dout[i]! * (gelu64(v + h) - gelu64(v - h)) / (2 * h));
    // The derivative is O(1); float32 rounding of its terms gives ~1e-6 of |dout|.
    for (let i = 0; i < n; i++) {
      const tol = 2e-6 * Math.abs(dout[i]!) * Math.max(1, Math.abs(x[i]!));
      if (!(Math.abs(dinp[i]! - expected[i]!) <= tol)) {
        assert.fail(`gelu'(${x[i]}) * ${dout[i]} = ${dinp[i]}, expected ${expected[i]}`);
      }
    }
  }
});

/** dt_hash_u32 of kernels/common/dt_common.h (splitmix64), in BigInt. */
function hashU32(seed: bigint, index: bigint): number {
  const M = (1n << 64n) - 1n;
  let z = (seed + 0x9e3779b97f4a7c15n * (index + 1n)) & M;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M;
  z = z ^ (z >> 31n);
  return Number(z >> 32n);
}

Deno.test("dt_dropout_fwd() keeps exactly the elements whose hash clears p * 2^32", () => {
  const rng = new Rng(7);
  const n = 4099, p = 0.3, seed = 123456789n, offset = 1000n;
  const x = rng.normals(n), out = new Float32Array(n);
  ok(K.dt_dropout_fwd(ptr(out), ptr(x), n64(n), p, seed, offset, null));
  const threshold = Math.floor(f(p) * 2 ** 32);
  const scale = f(1 / (1 - f(p)));
  const expected = x.map((
    v,
    i,
  ) => (hashU32(seed, offset + BigInt(i)) >= threshold ? f(v * scale) : 0));
  assertSameBits(out, expected, "dropout mask and scale");
});

Deno.test("dt_dropout_fwd() keeps an element whose hash equals p * 2^32 exactly", () => {
  // Find a seed whose first hash has at most 24 significant bits, so p = hash / 2^32 is
  // an exact float32 and the threshold equals the hash: the boundary case of ">=".
  let seed = 1n;
  while ((hashU32(seed, 0n) & 0xff) !== 0) seed++;
  const hash = hashU32(seed, 0n), p = hash / 2 ** 32;
  assert.equal(Math.fround(p), p);
  const x = new Float32Array([2]), out = new Float32Array(1);
  ok(K.dt_dropout_fwd(ptr(out), ptr(x), 1n, p, seed, 0n, null));
  assert.equal(
    out[0],
    Math.fround(2 * Math.fround(1 / (1 - p))),
    `hash ${hash} == threshold is kept`,
  );
  // a threshold 256 above the hash (still an exact float32 p) drops it
  const above = (hash + 256) / 2 ** 32;
  ok(K.dt_dropout_fwd(ptr(out), ptr(x), 1n, above, seed, 0n, null));
  assert.equal(out[0], 0);
});

Deno.test("dt_dropout_bwd() recomputes the forward mask, whatever the thread split", () => {
  const n = 300_001, p = 0.25;
  const ones = new Float32Array(n).fill(1);
  const fwd = new Float32Array(n), bwd = new Float32Array(n);
  ok(K.dt_dropout_fwd(ptr(fwd), ptr(ones), n64(n), p, 42n, 0n, null));
  withThreads(3, () => ok(K.dt_dropout_bwd(ptr(bwd), ptr(ones), n64(n), p, 42n, 0n, null)));
  assertSameBits(bwd, fwd, "same mask in backward");
  const kept = fwd.reduce((s, v) => s + (v !== 0 ? 1 : 0), 0);
  // Binomial(n, 0.75): standard deviation ~237; 6 sigma is a real failure.
  assert.ok(Math.abs(kept - 0.75 * n) < 6 * Math.sqrt(n * 0.75 * 0.25), `kept ${kept} of ${n}`);
  // A shifted offset is the same stream: element i at offset k is element i + k at offset 0.
  const shifted = new Float32Array(n - 10);
  ok(K.dt_dropout_fwd(ptr(shifted), ptr(ones), n64(n - 10), p, 42n, 10n, null));
  assertSameBits(shifted, fwd.subarray(10), "offset shifts the mask");
  // Another seed gives another mask.
  const other = new Float32Array(n);
  ok(K.dt_dropout_fwd(ptr(other), ptr(ones), n64(n), p, 43n, 0n, null));
  assert.notDeepEqual(other, fwd);
});

Deno.test("dt_dropout_fwd() with p = 0 is the identity, p = 1 zeroes all, p outside [0, 1] fails", () => {
  const x = new Rng(9).normals(100), out = new Float32Array(100);
  ok(K.dt_dropout_fwd(ptr(out), ptr(x), 100n, 0, 1n, 0n, null));
  assertSameBits(out, x, "p = 0");
  ok(K.dt_dropout_fwd(ptr(out), ptr(x), 100n, 1, 1n, 0n, null));
  assertSameBits(out, new Float32Array(100), "p = 1");
  failsWith(K.dt_dropout_fwd(ptr(out), ptr(x), 100n, 1.5, 1n, 0n, null), "p=1.5 is outside [0, 1]");
  failsWith(
    K.dt_dropout_bwd(ptr(out), ptr(x), 100n, NaN, 1n, 0n, null),
    "dt_dropout_bwd: drop probability p=nan",
  );
});

Deno.test("elementwise kernels give the same bits on 1 and 4 threads", () => {
  const rng = new Rng(10);
  const n = 300_001, x = rng.normals(n, 3), b = rng.normals(n);
  const run = () => {
    const g = new Float32Array(n), s = new Float32Array(n);
    ok(K.dt_gelu_fwd(ptr(g), ptr(x), n64(n), null));
    ok(K.dt_binary(3, ptr(s), ptr(x), ptr(b), n64(n), n64(n), 1n, null));
    return [g, s];
  };
  const [g1, s1] = withThreads(1, run), [g4, s4] = withThreads(4, run);
  assertSameBits(g4!, g1!, "gelu");
  assertSameBits(s4!, s1!, "div");
  assertClose(s1!, binaryRef(3, x, b, n, 1), 0, "div vs reference");
});
