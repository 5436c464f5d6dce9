/**
 * Tests of dt_reduce_dim (sum, mean, max, min along one dim of (outer, D,
 * inner)) and dt_softmax_dim_fwd/bwd (softmax and log-softmax along any dim):
 * against float64 references, torch's tie and NaN rules for max/min, the row
 * path agreeing bit for bit with dt_softmax_fwd, thread invariance and the
 * argument checks.
 */
import assert from "node:assert/strict";
import {
  assertClose,
  assertSameBits,
  failsWith,
  K,
  n64,
  ok,
  ptr,
  Rng,
  withThreads,
} from "./_helpers.ts";

const RED = { sum: 0, mean: 1, max: 2, min: 3 } as const;
const SHAPES: [number, number, number][] = [[1, 1, 1], [3, 7, 1], [5, 4, 300], [2, 1000, 3], [
  1,
  33,
  700,
], [64, 9, 9]];

function reduce(op: number, x: Float32Array<ArrayBuffer>, [o, d, i]: [number, number, number]) {
  const out = new Float32Array(o * i).fill(NaN), idx = new Int32Array(o * i).fill(-7);
  const wantIdx = op === RED.max || op === RED.min;
  ok(
    K.dt_reduce_dim(op, ptr(out), wantIdx ? ptr(idx) : null, ptr(x), n64(o), n64(d), n64(i), null),
  );
  return { out, idx };
}

Deno.test("dt_reduce_dim() sums and averages along D in double, whatever the layout", () => {
  const rng = new Rng(1);
  for (const s of SHAPES) {
    const [o, d, i] = s;
    const x = rng.normals(o * d * i);
    const sums = new Float64Array(o * i);
    for (let a = 0; a < o; a++) {
      for (let b = 0; b < d; b++) {
        for (let c = 0; c < i; c++) sums[a * i + c] += x[(a * d + b) * i + c]!;
      }
    }
    // f64 sums of f32 values differ from the exact sum by far less than half an f32 ulp
    assertClose(
      reduce(RED.sum, x, s).out,
      Array.from(sums, Math.fround),
      1.2e-7,
      `sum [${s}]`,
      1e-30,
    );
    assertClose(
      reduce(RED.mean, x, s).out,
      Array.from(sums, (v) => Math.fround(v / d)),
      1.2e-7,
      `mean [${s}]`,
    );
  }
});

Deno.test("dt_reduce_dim() max/min return the first extreme, and a NaN wins at its first position", () => {
  const rng = new Rng(2);
  for (const s of SHAPES) {
    const [o, d, i] = s;
    const x = Float32Array.from(rng.normals(o * d * i), (v) => Math.round(v * 2) / 2); // many ties
    if (x.length > 10) x[7] = NaN;
    for (const op of [RED.max, RED.min]) {
      const { out, idx } = reduce(op, x, s);
      for (let a = 0; a < o; a++) {
        for (let c = 0; c < i; c++) {
          let best = x[a * d * i + c]!, at = 0;
          for (let b = 1; b < d; b++) {
            const v = x[(a * d + b) * i + c]!;
            if (Number.isNaN(best)) break;
            if (Number.isNaN(v) || (op === RED.max ? v > best : v < best)) [best, at] = [v, b];
          }
          assert.ok(Object.is(out[a * i + c], best), `[${s}] op ${op} value at (${a}, ${c})`);
          assert.equal(idx[a * i + c], at, `[${s}] op ${op} index at (${a}, ${c})`);
        }
      }
    }
  }
});

Deno.test("dt_reduce_dim() gives argmax alone (out NULL), 0 / NaN for an empty sum / mean", () => {
  const x = Float32Array.of(1, 5, 5, 2), idx = new Int32Array(1);
  ok(K.dt_reduce_dim(RED.max, null, ptr(idx), ptr(x), 1n, 4n, 1n, null));
  assert.equal(idx[0], 1);
  const out = new Float32Array(3).fill(9);
  ok(K.dt_reduce_dim(RED.sum, ptr(out), null, null, 3n, 0n, 1n, null));
  assertSameBits(out, [0, 0, 0], "empty sum");
  ok(K.dt_reduce_dim(RED.mean, ptr(out), null, null, 3n, 0n, 1n, null));
  assertSameBits(out, [NaN, NaN, NaN], "empty mean");
  failsWith(
    K.dt_reduce_dim(RED.max, ptr(out), ptr(idx), ptr(x), 3n, 0n, 1n, null),
    "empty dimension",
  );
  failsWith(K.dt_reduce_dim(4, ptr(out), null, ptr(x), 1n, 4n, 1n, null), "unknown op 4");
  failsWith(
    K.dt_reduce_dim(RED.sum, ptr(out), ptr(idx), ptr(x), 1n, 4n, 1n, null),
    "idx is only written by max",
  );
  failsWith(K.dt_reduce_dim(RED.sum, ptr(out), null, ptr(x), -1n, 4n, 1n, null), "negative size");
});

Deno.test("dt_reduce_dim() is the same on 1 and 2 threads", () => {
  const x = new Rng(3).normals(64 * 300 * 40);
  for (const op of [RED.sum, RED.max]) {
    for (const s of [[64, 300, 40], [64 * 300, 40, 1]] as [number, number, number][]) {
      const one = withThreads(1, () => reduce(op, x, s)),
        two = withThreads(2, () => reduce(op, x, s));
      assertSameBits(two.out, one.out, `op ${op} [${s}]`);
    }
  }
});

/** Softmax / log-softmax of (o, d, i) along d in float64, from x - max rounded to
 *  float32 as the kernel (and torch) subtracts it. */
function softmaxRef(
  x: Float32Array,
  [o, d, i]: [number, number, number],
  log: boolean,
): Float64Array {
  const out = new Float64Array(x.length);
  for (let a = 0; a < o; a++) {
    for (let c = 0; c < i; c++) {
      const at = (b: number) => (a * d + b) * i + c;
      let max = -Infinity;
      for (let b = 0; b < d; b++) max = Math.max(max, x[at(b)]!);
      let sum = 0;
      const z = (b: number) => Math.fround(x[at(b)]! - max);
      for (let b = 0; b < d; b++) sum += Math.exp(z(b));
      for (let b = 0; b < d; b++) out[at(b)] = log ? z(b) - Math.log(sum) : Math.exp(z(b)) / sum;
    }
  }
  return out;
}

function softmaxDim(
  x: Float32Array<ArrayBuffer>,
  [o, d, i]: [number, number, number],
  log: boolean,
) {
  const out = new Float32Array(x.length).fill(NaN);
  ok(K.dt_softmax_dim_fwd(ptr(out), ptr(x), n64(o), n64(d), n64(i), log ? 1 : 0, null));
  return out;
}

Deno.test("dt_softmax_dim_fwd() matches float64 softmax and log-softmax along any dim", () => {
  const rng = new Rng(4);
  for (const s of SHAPES) {
    const x = rng.normals(s[0] * s[1] * s[2], 3);
    assertClose(softmaxDim(x, s, false), softmaxRef(x, s, false), 6e-7, `softmax [${s}]`, 1e-30);
    // log-softmax: absolute error of a few ulps of |x - max| + log(sum)
    const ref = softmaxRef(x, s, true), got = softmaxDim(x, s, true);
    for (let k = 0; k < x.length; k++) {
      assert.ok(
        Math.abs(got[k]! - ref[k]!) <= 4 * 2 ** -24 * (Math.abs(ref[k]!) + 10),
        `log-softmax [${s}] at ${k}`,
      );
    }
  }
});

Deno.test("dt_softmax_dim_fwd() on rows gives dt_softmax_fwd's bits", () => {
  const x = new Rng(5).normals(40 * 77, 2);
  const a = softmaxDim(x, [40, 77, 1], false), b = new Float32Array(x.length);
  ok(K.dt_softmax_fwd(ptr(b), ptr(x), 40n, 77n, 0n, 1, null));
  assertSameBits(a, b, "rows");
});

Deno.test("dt_softmax_dim_bwd() is the vector-Jacobian product of the forward", () => {
  const rng = new Rng(6);
  for (const s of [[2, 5, 3], [4, 9, 1], [1, 6, 40]] as [number, number, number][]) {
    const [o, d, i] = s;
    const x = rng.normals(o * d * i, 2), dy = rng.normals(o * d * i);
    for (const log of [false, true]) {
      const y = softmaxDim(x, s, log);
      const dx = new Float32Array(x.length).fill(NaN);
      ok(K.dt_softmax_dim_bwd(ptr(dx), ptr(dy), ptr(y), n64(o), n64(d), n64(i), log ? 1 : 0, null));
      const want = new Float64Array(x.length);
      for (let a = 0; a < o; a++) {
        for (let c = 0; c < i; c++) {
          const at = (b: number) => (a * d + b) * i + c;
          let acc = 0;
          for (let b = 0; b < d; b++) acc += log ? dy[at(b)]! : dy[at(b)]! * y[at(b)]!;
          for (let b = 0; b < d; b++) {
            want[at(b)] = log
              ? dy[at(b)]! - Math.exp(y[at(b)]!) * acc
              : (dy[at(b)]! - acc) * y[at(b)]!;
          }
        }
      }
      for (let k = 0; k < x.length; k++) {
        assert.ok(
          Math.abs(dx[k]! - want[k]!) <= 1e-6 * (1 + Math.abs(want[k]!)),
          `[${s}] log=${log} at ${k}`,
        );
      }
    }
  }
});

Deno.test("dt_softmax_dim kernels refuse bad sizes, flags and pointers", () => {
  const x = new Float32Array(8);
  failsWith(K.dt_softmax_dim_fwd(ptr(x), ptr(x), 2n, -4n, 1n, 0, null), "negative size");
  failsWith(K.dt_softmax_dim_fwd(ptr(x), ptr(x), 2n, 4n, 1n, 2, null), "is_log=2 must be 0 or 1");
  failsWith(K.dt_softmax_dim_bwd(ptr(x), null, ptr(x), 2n, 4n, 1n, 0, null), "null pointer");
});
