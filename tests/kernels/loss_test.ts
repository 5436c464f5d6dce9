/**
 * Tests of the softmax cross-entropy kernels: the mean loss over rows that
 * are not ignored, the saved probabilities and the gradient, against float64
 * references and finite differences; and the refusal of bad targets.
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

const U = 2 ** -24;

/** Mean over non-ignored rows of logsumexp(row) - row[target], in float64. */
function lossRef(
  logits: ArrayLike<number>,
  targets: Int32Array,
  V: number,
  ignore: number,
): number {
  let sum = 0, valid = 0;
  for (let r = 0; r < targets.length; r++) {
    if (targets[r] === ignore) continue;
    let max = -Infinity;
    for (let j = 0; j < V; j++) max = Math.max(max, logits[r * V + j]!);
    let z = 0;
    for (let j = 0; j < V; j++) z += Math.exp(logits[r * V + j]! - max);
    sum += max + Math.log(z) - logits[r * V + targets[r]!]!;
    valid++;
  }
  return sum / valid;
}

/** Runs the forward kernel; returns loss and probabilities. */
function forward(
  logits: Float32Array<ArrayBuffer>,
  targets: Int32Array<ArrayBuffer>,
  V: number,
  ignore: number,
) {
  const loss = new Float32Array(1), probs = new Float32Array(logits.length);
  ok(
    K.dt_crossentropy_fwd(
      ptr(loss),
      ptr(probs),
      ptr(logits),
      ptr(targets),
      n64(targets.length),
      n64(V),
      n64(ignore),
      null,
    ),
  );
  return { loss: loss[0]!, probs };
}

Deno.test("dt_crossentropy_fwd() matches the float64 loss and softmax, skipping ignored rows", () => {
  const rng = new Rng(1);
  for (const [rows, V] of [[1, 1], [5, 3], [256, 256], [64, 5000], [1000, 33]] as const) {
    const logits = rng.normals(rows * V, 3);
    const targets = rng.ints(rows, 0, V);
    for (let r = 1; r < rows; r += 4) targets[r] = -100; // torch's default ignore_index
    const { loss, probs } = forward(logits, targets, V, -100);
    const ref = lossRef(logits, targets, V, -100);
    // per-row float32 log-sum-exp (~4 ulps of max + log z), summed in double, one rounding
    assert.ok(
      Math.abs(loss - ref) <= 8 * U * (Math.abs(ref) + 3),
      `loss ${rows}x${V}: ${loss} vs ${ref}`,
    );
    for (let r = 0; r < rows; r++) {
      let max = -Infinity, z = 0;
      for (let j = 0; j < V; j++) max = Math.max(max, logits[r * V + j]!);
      for (let j = 0; j < V; j++) z += Math.exp(logits[r * V + j]! - max);
      for (let j = 0; j < V; j++) {
        const p = Math.exp(logits[r * V + j]! - max) / z, got = probs[r * V + j]!;
        // expf of a rounded difference (|x - max| * U), reciprocal and product: a few ulps
        const tol = (6 + 2 * Math.abs(logits[r * V + j]! - max)) * U * p;
        if (!(Math.abs(got - p) <= tol)) assert.fail(`probs[${r}, ${j}] = ${got}, expected ${p}`);
      }
    }
  }
});

Deno.test("dt_crossentropy_fwd() gives NaN when every row is ignored, as torch", () => {
  const { loss, probs } = forward(new Float32Array([1, 2, 3, 4]), new Int32Array([-1, -1]), 2, -1);
  assert.ok(Number.isNaN(loss));
  assert.ok(probs.every((p) => p > 0 && p < 1), "ignored rows still get probabilities");
});

Deno.test("dt_crossentropy_bwd() matches finite differences of the float64 loss", () => {
  const rng = new Rng(2);
  const rows = 6, V = 5, ignore = 3;
  const logits = rng.normals(rows * V, 2);
  const targets = new Int32Array([0, 3, 4, 1, 3, 2]); // rows 1 and 4 ignored: 4 valid rows
  const { probs } = forward(logits, targets, V, ignore);
  const dloss = new Float32Array([0.75]);
  const dlogits = new Float32Array(rows * V).fill(NaN);
  ok(
    K.dt_crossentropy_bwd(
      ptr(dlogits),
      ptr(probs),
      ptr(targets),
      ptr(dloss),
      n64(rows),
      n64(V),
      n64(ignore),
      null,
    ),
  );
  const x = Float64Array.from(logits), fd = new Float64Array(x.length), h = 1e-5;
  for (let i = 0; i < x.length; i++) {
    const v = x[i]!;
    x[i] = v + h;
    const up = lossRef(x, targets, V, ignore);
    x[i] = v - h;
    fd[i] = 0.75 * (up - lossRef(x, targets, V, ignore)) / (2 * h);
    x[i] = v;
  }
  // finite differences err by ~1e-10 here; the gradient is O(0.2) with float32 rounding
  assertClose(dlogits, fd, 1e-5, "dlogits vs finite differences", 0.05);
  for (const r of [1, 4]) {
    assertSameBits(dlogits.subarray(r * V, r * V + V), new Float32Array(V), `ignored row ${r}`);
  }
});

Deno.test("dt_crossentropy_bwd() is (probs - onehot) * dloss / valid rows, on any thread count", () => {
  const rng = new Rng(3);
  const rows = 2048, V = 512;
  const logits = rng.normals(rows * V), targets = rng.ints(rows, 0, V);
  targets[7] = -1;
  const { probs } = forward(logits, targets, V, -1);
  const dloss = new Float32Array([1.5]);
  const run = () => {
    const d = new Float32Array(rows * V);
    ok(
      K.dt_crossentropy_bwd(
        ptr(d),
        ptr(probs),
        ptr(targets),
        ptr(dloss),
        n64(rows),
        n64(V),
        -1n,
        null,
      ),
    );
    return d;
  };
  const one = withThreads(1, run), three = withThreads(3, run);
  assertSameBits(three, one, "1 vs 3 threads");
  const w = Math.fround(1.5 / (rows - 1));
  const expected = new Float32Array(rows * V);
  for (let r = 0; r < rows; r++) {
    if (r === 7) continue;
    for (let j = 0; j < V; j++) {
      const pw = Math.fround(probs[r * V + j]! * w);
      expected[r * V + j] = j === targets[r] ? Math.fround(pw - w) : pw;
    }
  }
  assertSameBits(one, expected, "gradient formula");
});

Deno.test("cross-entropy kernels name a target outside [0, V) and write nothing", () => {
  const logits = new Float32Array(6),
    probs = new Float32Array(6).fill(7),
    loss = new Float32Array([7]);
  const bad = new Int32Array([1, 3]);
  failsWith(
    K.dt_crossentropy_fwd(ptr(loss), ptr(probs), ptr(logits), ptr(bad), 2n, 3n, -100n, null),
    "dt_crossentropy_fwd: target 3 at row 1 is outside [0, 3) (ignore_index -100)",
  );
  assert.equal(loss[0], 7);
  assert.ok(probs.every((p) => p === 7));
  const negative = new Int32Array([-5, 0]);
  failsWith(
    K.dt_crossentropy_bwd(ptr(probs), ptr(probs), ptr(negative), ptr(loss), 2n, 3n, -100n, null),
    "dt_crossentropy_bwd: target -5 at row 0 is outside [0, 3)",
  );
  failsWith(
    K.dt_crossentropy_fwd(ptr(loss), ptr(probs), ptr(logits), ptr(bad), 2n, 0n, -100n, null),
    "V=0 must be in [1, 2^31)",
  );
  failsWith(
    K.dt_crossentropy_fwd(ptr(loss), ptr(probs), ptr(logits), null, 2n, 3n, -100n, null),
    "null targets",
  );
});
