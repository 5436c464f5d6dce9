/**
 * Tests of the fused classifier's cross-entropy kernels: the mean loss over
 * rows that are not ignored, the saved log-sum-exps and valid-row count, and
 * the gradient recomputed from them (f32, bf16 and f16 logits, in place too),
 * against float64 references and finite differences; and the refusal of bad
 * targets.
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

const u32 = new Uint32Array(1), f32v = new Float32Array(u32.buffer);
/** f32 values rounded to bf16 bits (nearest even). */
function toBf16(x: Float32Array): Uint16Array<ArrayBuffer> {
  return Uint16Array.from(x, (v) => {
    f32v[0] = v;
    const u = u32[0]!;
    return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
  });
}
function fromBf16(h: Uint16Array): Float32Array<ArrayBuffer> {
  return Float32Array.from(h, (b) => {
    u32[0] = b << 16;
    return f32v[0]!;
  });
}
function toF16(x: Float32Array): Uint16Array<ArrayBuffer> {
  return new Uint16Array(Float16Array.from(x).buffer);
}
function fromF16(h: Uint16Array): Float32Array<ArrayBuffer> {
  return Float32Array.from(new Float16Array(h.buffer, h.byteOffset, h.length));
}

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

const DT = { f32: 0, bf16: 1, f16: 2 } as const;

/** Runs the forward kernel on f32 logits (or their raw bits of `dtype`); returns loss, lse and valid count. */
function forward(
  logits: Float32Array<ArrayBuffer> | Uint16Array<ArrayBuffer>,
  targets: Int32Array<ArrayBuffer>,
  V: number,
  ignore: number,
  dtype: keyof typeof DT = "f32",
) {
  const loss = new Float32Array(1), lse = new Float32Array(targets.length);
  const valid = new Float32Array(1);
  ok(
    K.dt_crossentropy_fwd(
      ptr(loss),
      ptr(lse),
      ptr(valid),
      ptr(logits),
      DT[dtype],
      ptr(targets),
      n64(targets.length),
      n64(V),
      n64(ignore),
      null,
    ),
  );
  return { loss: loss[0]!, lse, valid };
}

/** The backward kernel into a new array (or in place when `into` is the logits). */
function backwardInto(
  into: Float32Array<ArrayBuffer> | Uint16Array<ArrayBuffer>,
  logits: Float32Array<ArrayBuffer> | Uint16Array<ArrayBuffer>,
  f: { lse: Float32Array<ArrayBuffer>; valid: Float32Array<ArrayBuffer> },
  targets: Int32Array<ArrayBuffer>,
  dloss: number,
  V: number,
  ignore: number,
  dtype: keyof typeof DT = "f32",
): void {
  ok(
    K.dt_crossentropy_bwd(
      ptr(into),
      ptr(logits),
      ptr(f.lse),
      ptr(f.valid),
      ptr(targets),
      ptr(new Float32Array([dloss])),
      DT[dtype],
      n64(targets.length),
      n64(V),
      n64(ignore),
      null,
    ),
  );
}

Deno.test("dt_crossentropy_fwd() matches the float64 loss and log-sum-exps, skipping ignored rows", () => {
  const rng = new Rng(1);
  for (
    const [rows, V] of [[1, 1], [5, 3], [256, 256], [64, 5000], [3, 50_257], [1000, 33]] as const
  ) {
    const logits = rng.normals(rows * V, 3);
    const targets = rng.ints(rows, 0, V);
    for (let r = 1; r < rows; r += 4) targets[r] = -100; // torch's default ignore_index
    const { loss, lse, valid } = forward(logits, targets, V, -100);
    const ref = lossRef(logits, targets, V, -100);
    // per-row float32 log-sum-exp (~4 ulps of max + log z), summed in double, one rounding
    assert.ok(
      Math.abs(loss - ref) <= 8 * U * (Math.abs(ref) + 3),
      `loss ${rows}x${V}: ${loss} vs ${ref}`,
    );
    assert.equal(valid[0], targets.filter((t) => t !== -100).length);
    for (let r = 0; r < rows; r++) {
      let max = -Infinity, z = 0;
      for (let j = 0; j < V; j++) max = Math.max(max, logits[r * V + j]!);
      for (let j = 0; j < V; j++) z += Math.exp(logits[r * V + j]! - max);
      const want = max + Math.log(z);
      // chunk sums merged by rescaling: a few ulps of the row's scale
      assert.ok(
        Math.abs(lse[r]! - want) <= 16 * U * (Math.abs(want) + 3),
        `lse[${r}] ${lse[r]} vs ${want}`,
      );
    }
  }
});

Deno.test("dt_crossentropy_fwd() gives NaN when every row is ignored, as torch", () => {
  const { loss, lse, valid } = forward(
    new Float32Array([1, 2, 3, 4]),
    new Int32Array([-1, -1]),
    2,
    -1,
  );
  assert.ok(Number.isNaN(loss));
  assert.equal(valid[0], 0);
  assert.ok(lse.every((l) => Number.isFinite(l)), "ignored rows still get their log-sum-exp");
});

Deno.test("bf16 and f16 logits: the same loss as their f32 values, gradients rounded once", () => {
  const rng = new Rng(5);
  const rows = 9, V = 3001;
  const x32 = rng.normals(rows * V, 2);
  const targets = rng.ints(rows, 0, V);
  targets[4] = -100;
  for (
    const [dtype, toBits, fromBits] of [
      ["bf16", toBf16, fromBf16],
      ["f16", toF16, fromF16],
    ] as const
  ) {
    const bits = toBits(x32), values = fromBits(bits);
    const low = forward(bits, targets, V, -100, dtype), f32 = forward(values, targets, V, -100);
    // the same numbers in f32 arithmetic: identical sums, identical loss
    assert.equal(low.loss, f32.loss, dtype);
    const dlow = new Uint16Array(rows * V), d32 = new Float32Array(rows * V);
    backwardInto(dlow, bits, low, targets, 2, V, -100, dtype);
    backwardInto(d32, values, f32, targets, 2, V, -100);
    assertSameBits(
      fromBits(dlow),
      fromBits(toBits(d32)),
      `${dtype} gradient is the f32 one rounded`,
    );
    // in place: the gradient overwrites the logits
    const inPlace = bits.slice();
    backwardInto(inPlace, inPlace, low, targets, 2, V, -100, dtype);
    assertSameBits(inPlace, dlow, `${dtype} in place`);
  }
});

Deno.test("dt_crossentropy_bwd() matches finite differences of the float64 loss", () => {
  const rng = new Rng(2);
  const rows = 6, V = 5, ignore = 3;
  const logits = rng.normals(rows * V, 2);
  const targets = new Int32Array([0, 3, 4, 1, 3, 2]); // rows 1 and 4 ignored: 4 valid rows
  const f = forward(logits, targets, V, ignore);
  const dlogits = new Float32Array(rows * V).fill(NaN);
  backwardInto(dlogits, logits, f, targets, 0.75, V, ignore);
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

Deno.test("dt_crossentropy_bwd() is (exp(x - lse) - onehot) * dloss / valid rows, on any thread count", () => {
  const rng = new Rng(3);
  const rows = 2048, V = 512;
  const logits = rng.normals(rows * V), targets = rng.ints(rows, 0, V);
  targets[7] = -1;
  const f = withThreads(1, () => forward(logits, targets, V, -1));
  const f3 = withThreads(3, () => forward(logits, targets, V, -1));
  assertSameBits(f3.lse, f.lse, "log-sum-exps on 1 vs 3 threads");
  assert.equal(f.valid[0], rows - 1);
  const run = () => {
    const d = new Float32Array(rows * V);
    backwardInto(d, logits, f, targets, 1.5, V, -1);
    return d;
  };
  const one = withThreads(1, run), three = withThreads(3, run);
  assertSameBits(three, one, "1 vs 3 threads");
  // the probabilities: within a few ulps of float64 softmax; the rows of the gradient sum to 0
  const w = 1.5 / (rows - 1);
  for (const r of [0, 1, 2047]) {
    let max = -Infinity, z = 0, sum = 0;
    for (let j = 0; j < V; j++) max = Math.max(max, logits[r * V + j]!);
    for (let j = 0; j < V; j++) z += Math.exp(logits[r * V + j]! - max);
    for (let j = 0; j < V; j++) {
      const p = Math.exp(logits[r * V + j]! - max) / z;
      const want = (p - (j === targets[r] ? 1 : 0)) * w;
      const got = one[r * V + j]!;
      if (!(Math.abs(got - want) <= 8 * U * w)) {
        assert.fail(`d[${r}, ${j}] = ${got}, expected ${want}`);
      }
      sum += got;
    }
    assert.ok(Math.abs(sum) < 1e-5 * w, `row ${r} sums to ${sum}`);
  }
  assertSameBits(one.subarray(7 * V, 8 * V), new Float32Array(V), "ignored row");
});

Deno.test("cross-entropy kernels name a target outside [0, V) and write nothing", () => {
  const logits = new Float32Array(6),
    lse = new Float32Array(2).fill(7),
    valid = new Float32Array([7]),
    loss = new Float32Array([7]);
  const bad = new Int32Array([1, 3]);
  const fwd = (t: Int32Array<ArrayBuffer> | null, V: bigint, dtype = 0) =>
    K.dt_crossentropy_fwd(
      ptr(loss),
      ptr(lse),
      ptr(valid),
      ptr(logits),
      dtype,
      t && ptr(t),
      2n,
      V,
      -100n,
      null,
    );
  failsWith(
    fwd(bad, 3n),
    "dt_crossentropy_fwd: target 3 at row 1 is outside [0, 3) (ignore_index -100)",
  );
  assert.equal(loss[0], 7);
  assert.ok(lse.every((p) => p === 7) && valid[0] === 7);
  const negative = new Int32Array([-5, 0]);
  const d = new Float32Array(6).fill(7);
  failsWith(
    K.dt_crossentropy_bwd(
      ptr(d),
      ptr(logits),
      ptr(lse),
      ptr(valid),
      ptr(negative),
      ptr(loss),
      0,
      2n,
      3n,
      -100n,
      null,
    ),
    "dt_crossentropy_bwd: target -5 at row 0 is outside [0, 3)",
  );
  assert.ok(d.every((v) => v === 7));
  failsWith(fwd(bad, 0n), "V=0 must be in [1, 2^31)");
  failsWith(fwd(null, 3n), "null targets");
  failsWith(fwd(bad, 3n, 3), "dtype 3 is not supported");
});
