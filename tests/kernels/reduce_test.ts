/**
 * Tests of the reductions: dt_reduce_bcast (the gradient of a broadcast
 * operand), dt_sumsq and dt_argmax_rows, against float64 references, and the
 * promise that the thread count never changes the bits.
 */
import assert from "node:assert/strict";
import { assertSameBits, failsWith, K, n64, ok, ptr, Rng, withThreads } from "./_helpers.ts";

/** out[j] = sum of inp[i] over (i / inner) % bn == j, in float64, plus the sum of |inp| there. */
function reduceRef(
  inp: Float32Array,
  bn: number,
  inner: number,
): { sum: Float64Array; abs: Float64Array } {
  const sum = new Float64Array(bn), abs = new Float64Array(bn);
  for (let i = 0; i < inp.length; i++) {
    const j = Math.floor(i / inner) % bn;
    sum[j]! += inp[i]!;
    abs[j]! += Math.abs(inp[i]!);
  }
  return { sum, abs };
}

Deno.test("dt_reduce_bcast() sums every broadcast form to within one float32 rounding", () => {
  const rng = new Rng(1);
  // [n, bn, inner]: bias gradient (rows x C -> C), column vector (R x C -> R),
  // a (bn, inner) pair that repeats, a partial last row, bn = n (a copy), one output.
  const cases: [number, number, number][] = [
    [64 * 256, 256, 1],
    [1000 * 257, 257, 1],
    [300 * 70, 300, 70],
    [6 * 5 * 4, 5, 4],
    [1001, 10, 1],
    [1003, 1003, 1],
    [70_001, 1, 1],
    [513, 2, 300],
  ];
  for (const [n, bn, inner] of cases) {
    // the input is the front of a longer random buffer: reading past n would change the sums
    const inp = rng.normals(n + 64).subarray(0, n);
    const out = new Float32Array(bn);
    ok(K.dt_reduce_bcast(ptr(out), ptr(inp), n64(n), n64(bn), n64(inner), null));
    const { sum, abs } = reduceRef(inp, bn, inner);
    for (let j = 0; j < bn; j++) {
      // float64 accumulation errs by ~1e-16 * sum|x|; the result is then rounded once to float32.
      const tol = 2 ** -24 * Math.abs(sum[j]!) + 1e-14 * abs[j]!;
      if (!(Math.abs(out[j]! - sum[j]!) <= tol)) {
        assert.fail(`n=${n} bn=${bn} inner=${inner} out[${j}]=${out[j]}, expected ${sum[j]}`);
      }
    }
  }
});

Deno.test("dt_reduce_bcast() and dt_sumsq() give the same bits on 1, 2 and 3 threads", () => {
  const rng = new Rng(2);
  const inp = rng.normals(1 << 20, 10);
  const run = () => {
    const cols = new Float32Array(1024), rows = new Float32Array(1024), sq = new Float64Array(1);
    ok(K.dt_reduce_bcast(ptr(cols), ptr(inp), n64(inp.length), 1024n, 1n, null));
    ok(K.dt_reduce_bcast(ptr(rows), ptr(inp), n64(inp.length), 1024n, 1024n, null));
    ok(K.dt_sumsq(ptr(sq), ptr(inp), n64(inp.length), null));
    return [cols, rows, sq] as const;
  };
  const one = withThreads(1, run);
  for (const t of [2, 3]) {
    const many = withThreads(t, run);
    for (let k = 0; k < 3; k++) assertSameBits(many[k]!, one[k]!, `threads=${t} result ${k}`);
  }
});

/** Neumaier-compensated float64 sum: accurate to ~1 ulp of the result for these inputs. */
function compensatedSum(values: number[]): number {
  let sum = 0, carry = 0;
  for (const v of values) {
    const t = sum + v;
    carry += Math.abs(sum) >= Math.abs(v) ? (sum - t) + v : (v - t) + sum;
    sum = t;
  }
  return sum + carry;
}

Deno.test("dt_sumsq() accumulates in float64", () => {
  const rng = new Rng(3);
  for (const n of [0, 1, 7, 8, 9, 16_385, 300_001]) {
    const inp = rng.normals(n, 3);
    const out = new Float64Array([123]);
    ok(K.dt_sumsq(ptr(out), ptr(inp), n64(n), null));
    const ref = compensatedSum(Array.from(inp, (v) => v * v));
    // Squares are exact in float64; the kernel adds at most ~2^11 of them in
    // sequence per lane (16K-element blocks, 8 lanes), so it errs by < 2^11 * 2^-53.
    assert.ok(Math.abs(out[0]! - ref) <= 2.5e-13 * ref, `n=${n}: ${out[0]} vs ${ref}`);
  }
  // Values whose float32 squares would overflow or lose all bits still sum correctly.
  const wide = new Float32Array([3e30, 1e-30, 3e30]);
  const out = new Float64Array(1);
  ok(K.dt_sumsq(ptr(out), ptr(wide), 3n, null));
  const big = Math.fround(3e30), small = Math.fround(1e-30);
  assert.equal(out[0], big * big + small * small + big * big);
});

Deno.test("dt_argmax_rows() returns the first maximum, and NaN as torch.argmax", () => {
  const rng = new Rng(4);
  for (const [rows, cols] of [[1, 1], [3, 7], [1000, 33], [64, 5000]]) {
    const inp = rng.normals(rows * cols);
    for (let r = 0; r < rows; r += 2) inp[r * cols + cols - 1] = inp[r * cols]!; // ties: the first one wins
    const out = new Int32Array(rows);
    ok(K.dt_argmax_rows(ptr(out), ptr(inp), n64(rows), n64(cols), null));
    for (let r = 0; r < rows; r++) {
      let best = 0;
      for (let j = 1; j < cols; j++) if (inp[r * cols + j]! > inp[r * cols + best]!) best = j;
      assert.equal(out[r], best, `row ${r} of ${rows}x${cols}`);
    }
  }
  const withNan = new Float32Array([1, NaN, 5, NaN, -Infinity, -Infinity]);
  const out = new Int32Array(2);
  ok(K.dt_argmax_rows(ptr(out), ptr(withNan), 2n, 3n, null));
  assert.deepEqual(Array.from(out), [1, 0]);
});

Deno.test("reductions reject bad sizes and null pointers", () => {
  const x = new Float32Array(4);
  failsWith(
    K.dt_reduce_bcast(ptr(x), ptr(x), 4n, 0n, 1n, null),
    "dt_reduce_bcast: broadcast bn=0 inner=1",
  );
  failsWith(
    K.dt_reduce_bcast(ptr(x), ptr(x), -4n, 1n, 1n, null),
    "dt_reduce_bcast: negative size n=-4",
  );
  failsWith(K.dt_sumsq(null, ptr(x), 4n, null), "dt_sumsq: null pointer");
  failsWith(
    K.dt_argmax_rows(ptr(x), ptr(x), 2n, 0n, null),
    "dt_argmax_rows: cols=0 must be in [1, 2^31)",
  );
  failsWith(K.dt_argmax_rows(ptr(x), ptr(x), -1n, 2n, null), "dt_argmax_rows: negative rows=-1");
});
