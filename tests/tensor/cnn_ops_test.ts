/**
 * The convolutional-network and everyday ops against finite differences
 * (every differentiable input of every op, several argument sets), plus their
 * shapes and the errors that name the op and the shapes. Numbers against
 * PyTorch itself are in tests/parity/ops_parity_test.ts.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { gradCheck, rand } from "./_gradcheck.ts";
import { fromArray, full, scope, zeros } from "../../tensor/tensor.ts";
import { backward } from "../../tensor/autograd.ts";
import { conv2d, withConvPaths } from "../../tensor/ops/conv.ts";
import { adaptiveAvgPool2d, avgPool2d, maxPool2d } from "../../tensor/ops/pool.ts";
import { batchNorm, batchNormReluMaxPool2d, type StatsBuffer } from "../../tensor/ops/batchnorm.ts";
import {
  cat,
  expand,
  flatten,
  narrow,
  pad,
  permute,
  squeeze,
  stack,
  transpose,
  unsqueeze,
} from "../../tensor/ops/layout.ts";
import { argmax, argmin, max, mean, min, sum, sumTo } from "../../tensor/ops/reduce.ts";
import { clamp, exp, log, pow, sigmoid, sqrt, tanh } from "../../tensor/ops/unary.ts";
import { add, div, mul, relu, sub } from "../../tensor/ops/elementwise.ts";
import { gather, indexSelect, maskedFill, where } from "../../tensor/ops/select.ts";
import { logSoftmax, softmax } from "../../tensor/ops/softmax.ts";

buildNative({ quiet: true });

const TOL = 2e-2; // central differences of f32 forwards at eps 1e-2 (see autograd_test.ts)
let seed = 100;
const inp = (shape: number[], map?: (v: number) => number) => {
  const data = rand(shape.reduce((a, b) => a * b, 1), seed++);
  return { shape, data: map ? data.map(map) : data };
};
/** Distinct values 0.1 apart in a seeded order: a max never changes place under a 1e-2 nudge. */
const distinct = (shape: number[]) => {
  const n = shape.reduce((a, b) => a * b, 1), r = rand(n, seed++);
  const order = [...Array(n).keys()].sort((a, b) => r[a]! - r[b]!);
  const data = new Float32Array(n);
  order.forEach((k, i) => (data[k] = (i - n / 2) * 0.1));
  return { shape, data };
};
const ok = (
  f: Parameters<typeof gradCheck>[0],
  inputs: ReturnType<typeof inp>[],
  what: string,
  eps?: number,
) => {
  const err = gradCheck(f, inputs, eps);
  assert.ok(err < TOL, `${what}: gradient error ${err}`);
};

for (const [path, directMaxTaps] of [["GEMM", 0], ["direct", 64]] as const) {
  Deno.test(`conv2d gradients (${path} path): stride, padding, dilation, groups, bias`, () => {
    withConvPaths({ directMaxTaps, winograd: false }, () => {
      const cfgs = [
        { stride: 1, padding: 1 },
        { stride: 2, padding: 0 },
        { stride: [2, 1], padding: [1, 2], dilation: [1, 2] },
        { padding: 2, dilation: 2, groups: 2 },
        { padding: "same" as const },
      ];
      for (const cfg of cfgs) {
        const g = cfg.groups ?? 1;
        ok(
          (x, w, b) => conv2d(x, w, b, cfg),
          [inp([2, 4, 6, 5]), inp([6, 4 / g, 3, 2]), inp([6])],
          JSON.stringify(cfg),
        );
      }
      ok(
        (x, w) => conv2d(x, w, null, { stride: 2 }),
        [inp([1, 3, 7, 7]), inp([2, 3, 3, 3])],
        "no bias, N = 1",
      );
      ok(
        (x, w) => conv2d(x, w, null, { padding: "same" }),
        [inp([3, 5, 5]), inp([2, 3, 2, 2])],
        "unbatched, even kernel 'same'",
      );
    });
  });
}

Deno.test("conv2d's GEMM and direct paths agree", () => {
  scope(() => {
    const x = fromArray(rand(3 * 4 * 9 * 8, 7), [3, 4, 9, 8]),
      w = fromArray(rand(6 * 2 * 9, 8), [6, 2, 3, 3]);
    const b = fromArray(rand(6, 9), [6]);
    const cfg = { stride: [2, 1], padding: [1, 2], dilation: [1, 2], groups: 2 };
    const viaGemm = withConvPaths({ directMaxTaps: 0, winograd: false }, () => conv2d(x, w, b, cfg))
      .toArray() as Float32Array;
    const direct = withConvPaths({ directMaxTaps: 64 }, () => conv2d(x, w, b, cfg))
      .toArray() as Float32Array;
    for (let i = 0; i < direct.length; i++) {
      assert.ok(
        Math.abs(direct[i]! - viaGemm[i]!) <= 1e-5 * (1 + Math.abs(viaGemm[i]!)),
        `element ${i}`,
      );
    }
  });
});

Deno.test("conv2d in chunks of images (large batches) gives the unchunked gradients", () => {
  for (
    const [chunk, cfg] of [[1, {}], [2 * 4 * 9 * 30, { padding: 1 }], [4 * 9 * 25, {
      stride: 2,
      groups: 2,
    }]] as const
  ) {
    withConvPaths({ chunkFloats: chunk, directMaxTaps: 0, winograd: false }, () => {
      const g = (cfg as { groups?: number }).groups ?? 1;
      ok(
        (x, w, b) => conv2d(x, w, b, cfg),
        [inp([5, 4, 6, 5]), inp([6, 4 / g, 3, 3]), inp([6])],
        `chunk ${chunk} ${JSON.stringify(cfg)}`,
      );
    });
  }
});

Deno.test("conv2d gradients (Winograd path): 3x3 at stride 1, any padding, partial tiles, blocks", () => {
  // every tile in one block, and blocks of 3 tiles (they split tile rows and images)
  for (const winogradBlock of [0, 3]) {
    withConvPaths({ directMaxTaps: 0, winogradBlock }, () => {
      for (const padding of [1, 0, 2, [0, 1]] as const) {
        ok(
          (x, w, b) => conv2d(x, w, b, { padding: padding as number | number[] }),
          [inp([2, 3, 6, 5]), inp([4, 3, 3, 3]), inp([4])],
          `padding ${padding}, block ${winogradBlock}`,
        );
      }
      ok((x, w) => conv2d(x, w), [inp([1, 2, 4, 4]), inp([3, 2, 3, 3])], "no bias, N = 1");
      ok(
        (x, w) => conv2d(x, w, null, { padding: "same" }),
        [inp([2, 7, 3]), inp([2, 2, 3, 3])],
        "unbatched, 'same', one row of tiles",
      );
    });
  }
});

Deno.test("conv2d's Winograd and GEMM paths agree, in any blocks of tiles", () => {
  scope(() => {
    const [N, C, H, W, Cout] = [3, 8, 13, 11, 5];
    const x = fromArray(rand(N * C * H * W, 17), [N, C, H, W]);
    const w = fromArray(rand(Cout * C * 9, 18), [Cout, C, 3, 3]);
    const b = fromArray(rand(Cout, 19), [Cout]);
    for (const t of [x, w, b]) t.requiresGrad = true;
    const dy = fromArray(rand(N * Cout * H * W, 20), [N, Cout, H, W]);
    const run = (paths: Parameters<typeof withConvPaths>[0]) =>
      withConvPaths(paths, () => {
        const y = conv2d(x, w, b, { padding: 1 });
        backward(sum(mul(y, dy)));
        const got = [y, x.grad!, w.grad!, b.grad!].map((t) => t.toArray() as Float32Array);
        for (const t of [x, w, b]) {
          t.grad!.dispose();
          t.grad = null;
        }
        return got;
      });
    const gemm = run({ directMaxTaps: 0, winograd: false });
    for (const winogradBlock of [0, 1, 7, 40]) {
      const wino = run({ directMaxTaps: 0, winogradBlock });
      ["out", "grad x", "grad weight", "grad bias"].forEach((what, i) => {
        const a = wino[i]!, r = gemm[i]!;
        const scale = Math.max(...r.map(Math.abs));
        const err = Math.max(...a.map((v, k) => Math.abs(v - r[k]!)));
        // a few f32 ulps of the largest value: the two roundings of the same sums
        assert.ok(err <= 2e-6 * scale, `${what}, block ${winogradBlock}: ${err} vs scale ${scale}`);
      });
    }
  });
});

Deno.test("conv2d output shapes follow PyTorch's formula; bad shapes name what differs", () => {
  scope(() => {
    const x = zeros([2, 4, 9, 7]);
    assert.deepEqual(conv2d(x, zeros([8, 4, 3, 3]), null, { stride: 2, padding: 1 }).shape, [
      2,
      8,
      5,
      4,
    ]);
    assert.deepEqual(conv2d(x, zeros([8, 2, 3, 1]), null, { groups: 2, dilation: 3 }).shape, [
      2,
      8,
      3,
      7,
    ]);
    assert.deepEqual(conv2d(x, zeros([3, 4, 2, 2]), null, { padding: "same" }).shape, [2, 3, 9, 7]);
    assert.throws(
      () => conv2d(x, zeros([8, 3, 3, 3])),
      /weight \[8,3,3,3\] expects 3 input channels .* the input \[2,4,9,7\] has 4/,
    );
    assert.throws(
      () => conv2d(x, zeros([8, 4, 3, 3]), null, { groups: 3 }),
      /groups=3 must be a positive integer dividing/,
    );
    assert.throws(() => conv2d(x, zeros([8, 4, 11, 3])), /smaller than the dilated kernel/);
    assert.throws(
      () => conv2d(x, zeros([8, 4, 3, 3]), zeros([7])),
      /bias \[7\] must have shape \[8\]/,
    );
    assert.throws(
      () => conv2d(x, zeros([8, 4, 3, 3]), null, { stride: 0 }),
      /stride must be an integer >= 1/,
    );
  });
});

Deno.test("pooling gradients and output sizes (ceil mode, padding, dilation, divisors, adaptive windows)", () => {
  ok((x) => maxPool2d(x, 2), [distinct([2, 3, 6, 6])], "max 2");
  ok(
    (x) => maxPool2d(x, 3, { stride: 2, padding: 1, ceilMode: true }),
    [distinct([1, 2, 7, 8])],
    "max ceil",
  );
  ok((x) => maxPool2d(x, [3, 2], { stride: [1, 2], padding: [1, 0], dilation: [2, 1] }), [
    distinct([1, 2, 9, 7]),
  ], "max dilated");
  ok((x) => avgPool2d(x, 3, { stride: 2, padding: 1, ceilMode: true, countIncludePad: false }), [
    inp([2, 2, 7, 8]),
  ], "avg");
  ok((x) => avgPool2d(x, [3, 2], { stride: 1, padding: [1, 0], divisorOverride: 5 }), [
    inp([1, 2, 6, 5]),
  ], "avg divisor");
  ok((x) => adaptiveAvgPool2d(x, [3, 4]), [inp([2, 2, 7, 9])], "adaptive");
  ok((x) => adaptiveAvgPool2d(x, 1), [inp([3, 5, 5])], "adaptive global, unbatched");
  scope(() => {
    const x = zeros([1, 1, 7, 8]);
    assert.deepEqual(maxPool2d(x, 3, { stride: 2, padding: 1, ceilMode: true }).shape, [
      1,
      1,
      4,
      5,
    ]);
    assert.deepEqual(maxPool2d(x, 2, { ceilMode: true }).shape, [1, 1, 4, 4]);
    assert.deepEqual(avgPool2d(x, 2).shape, [1, 1, 3, 4]);
    assert.deepEqual(adaptiveAvgPool2d(x, [null, 2]).shape, [1, 1, 7, 2]);
    assert.throws(
      () => maxPool2d(x, 2, { padding: 2 }),
      /padding \(2, 2\) must be at most half the kernel/,
    );
    assert.throws(
      () => maxPool2d(zeros([7, 8]), 2),
      /expected an input \(N, C, H, W\) or \(C, H, W\), got \[7,8\]/,
    );
    assert.throws(
      () => avgPool2d(x, 9),
      /input size 7 with padding 0 is smaller than the kernel 9/,
    );
  });
});

Deno.test("batchNorm gradients in training (batch statistics) and eval (running statistics)", () => {
  for (const shape of [[4, 3, 2, 3], [6, 4], [3, 2, 5]]) {
    const C = shape[1]!;
    const rm = () => zeros([C]), rv = () => full([C], 1);
    ok(
      (x, w, b) => batchNorm(x, rm(), rv(), { weight: w, bias: b, training: true }),
      [inp(shape, (v) => 2 * v + 0.3), inp([C]), inp([C])],
      `train [${shape}]`,
      1e-3,
    );
    ok((x, w, b) => batchNorm(x, rm(), rv(), { weight: w, bias: b }), [
      inp(shape),
      inp([C]),
      inp([C]),
    ], `eval [${shape}]`);
    ok(
      (x) => batchNorm(x, null, null, { training: true }),
      [inp(shape, (v) => 3 * v)],
      `no affine, no running stats [${shape}]`,
      1e-3,
    );
  }
});

Deno.test("batchNorm updates running statistics, counts batches and refuses what PyTorch refuses", () => {
  scope(() => {
    const x = fromArray(Float32Array.from([1, 2, 3, 5, -1, 0, 2, 7]), [4, 2]); // channel 0: 1 3 -1 2, channel 1: 2 5 0 7
    const rm = zeros([2]), rv = full([2], 1), nbt = zeros([], "i64");
    batchNorm(x, rm, rv, { training: true, momentum: 0.5, numBatchesTracked: nbt });
    const f = Math.fround;
    assert.deepEqual([...rm.toArray()], [f(0.5 * 1.25), f(0.5 * 3.5)]);
    const uv0 = (0.0625 + 3.0625 + 5.0625 + 0.5625) / 3, uv1 = (2.25 + 2.25 + 12.25 + 12.25) / 3;
    assert.deepEqual([...rv.toArray()], [f(0.5 * uv0 + 0.5), f(0.5 * uv1 + 0.5)]);
    assert.equal((nbt.toArray() as BigInt64Array)[0], 1n);
    batchNorm(x, rm, rv, { training: true, momentum: null, numBatchesTracked: nbt }); // cumulative: factor 1/2
    assert.equal((nbt.toArray() as BigInt64Array)[0], 2n);
    assert.ok(Math.abs((rm.toArray() as Float32Array)[0]! - (0.5 * 0.625 + 0.5 * 1.25)) < 1e-6);
    assert.throws(
      () => batchNorm(zeros([1, 3]), null, null, { training: true }),
      /expected more than 1 value per channel when training/,
    );
    assert.throws(
      () => batchNorm(zeros([2, 3]), null, null),
      /evaluation \(training: false\) needs runningMean/,
    );
    assert.throws(
      () => batchNorm(zeros([2, 3]), zeros([4]), full([4], 1)),
      /runningMean \[4\] f32 does not match the 3 channels/,
    );
    assert.throws(
      () => batchNorm(zeros([2, 3]), null, null, { training: true, momentum: 2 }),
      /momentum must be in \[0, 1\] or null/,
    );
  });
});

Deno.test("layout ops: gradients of permute, transpose, expand, pad, narrow, cat, stack", () => {
  ok((x) => permute(x, [2, 0, 3, 1]), [inp([2, 3, 4, 2])], "permute");
  ok((x) => transpose(x, -1, 0), [inp([3, 2, 4])], "transpose");
  ok((x) => expand(x, [2, 3, -1, 4]), [inp([3, 1, 4])], "expand");
  ok((x) => pad(x, [1, 2, 0, 1], { value: 0.5 }), [inp([2, 3, 4])], "pad");
  ok((x) => pad(x, [-1, 2, 1, -2]), [inp([2, 4, 5])], "pad with crops");
  ok((x) => narrow(x, 1, 1, 2), [inp([2, 4, 3])], "narrow");
  ok((a, b) => cat([a, b, a], 1), [inp([2, 3, 2]), inp([2, 1, 2])], "cat (one input twice)");
  ok((a, b) => stack([a, b], -1), [inp([3, 2]), inp([3, 2])], "stack");
  ok((x) => flatten(unsqueeze(squeeze(x), 0), 1), [inp([2, 1, 3])], "views");
});

Deno.test("layout ops: shapes, values and errors", () => {
  scope(() => {
    const x = fromArray(Float32Array.from({ length: 6 }, (_, i) => i), [2, 3]);
    assert.deepEqual([...transpose(x, 0, 1).toArray()], [0, 3, 1, 4, 2, 5]);
    assert.deepEqual([...pad(x, [1, 0], { value: 9 }).toArray()], [9, 0, 1, 2, 9, 3, 4, 5]);
    assert.deepEqual([...pad(x, [0, -1, -1, 0]).toArray()], [3, 4]);
    assert.deepEqual([...cat([x, x], 0).toArray()], [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]);
    assert.deepEqual(stack([x, x, x], 1).shape, [2, 3, 3]);
    assert.deepEqual([...expand(fromArray([7, 8], [2, 1]), [2, 3]).toArray()], [7, 7, 7, 8, 8, 8]);
    assert.deepEqual([...narrow(x, 1, 1, 2).toArray()], [1, 2, 4, 5]);
    const idx = fromArray(Int32Array.of(2, 0), [2]);
    assert.deepEqual([...cat([idx, idx]).toArray()], [2, 0, 2, 0], "cat of i32");
    assert.throws(
      () => permute(x, [0, 0]),
      /\[0,0\] is not a permutation of the 2 dims of \[2,3\]/,
    );
    assert.throws(
      () => transpose(x, 0, 2),
      /transpose: dim 2 is out of range for a tensor of 2 dims/,
    );
    assert.throws(
      () => cat([x, zeros([3, 3])], 1),
      /tensor 1 is \[3,3\] f32, tensor 0 is \[2,3\] f32/,
    );
    assert.throws(() => expand(x, [2, 4]), /cannot expand \[2,3\] to \[2,4\]/);
    assert.throws(() => pad(x, [1]), /expected an even number of integer pads/);
    assert.throws(() => pad(x, [-2, -2]), /gives the negative size \[2,-1\]/);
    assert.throws(() => narrow(x, 1, 2, 2), /\[2, 4\) is outside dim 1 of \[2,3\]/);
  });
});

Deno.test("reductions along dims: gradients, keepdim shapes, max/min indices, argmax", () => {
  ok((x) => sum(x, 1), [inp([3, 4, 2])], "sum dim");
  ok((x) => sum(x, [0, 2], { keepdim: true }), [inp([3, 4, 2])], "sum dims keepdim");
  ok((x) => mean(x, -1), [inp([3, 4])], "mean");
  ok((x) => mean(x, [1, 2]), [inp([2, 3, 4])], "mean of a block");
  ok((x) => mean(x, [0, 2]), [inp([2, 3, 4])], "mean of two blocks");
  ok((x) => max(x, 1).values, [distinct([3, 5])], "max dim");
  ok((x) => min(x, 0, { keepdim: true }).values, [distinct([4, 3])], "min dim");
  ok((x) => max(x), [distinct([7])], "max all");
  scope(() => {
    const x = fromArray(Float32Array.of(1, 9, 9, 4, -2, 3), [2, 3]);
    assert.deepEqual(sum(x, 1, { keepdim: true }).shape, [2, 1]);
    assert.deepEqual([...mean(x, 0).toArray()], [2.5, 3.5, 6]);
    const m = max(x, 1);
    assert.deepEqual([...m.values.toArray()], [9, 4]);
    assert.deepEqual([...m.indices.toArray()], [1, 0], "first of equal maxima");
    assert.deepEqual([...argmax(x, 1).toArray()], [1, 0]);
    assert.deepEqual([...argmin(x, 0).toArray()], [0, 1, 1]);
    assert.equal(argmax(x).item(), 1, "flattened");
    assert.equal(max(x).item(), 9);
    assert.equal(min(x).item(), -2);
    assert.deepEqual(
      sumTo(fromArray(Float32Array.of(1, 2, 3, 4, 5, 6), [2, 3]), [3]).toArray(),
      Float32Array.of(5, 7, 9),
    );
    assert.throws(() => sum(x, [1, -1]), /dim 1 appears more than once/);
    assert.throws(() => max(zeros([2, 0]), 1), /max: the reduced dimension of \[2,0\] is empty/);
  });
});

Deno.test("unary ops and div: gradients, with PyTorch's broadcasting", () => {
  ok((x) => exp(x), [inp([6])], "exp");
  ok((x) => log(x), [inp([6], (v) => v + 1.5)], "log");
  ok((x) => sigmoid(x), [inp([6], (v) => 3 * v)], "sigmoid");
  ok((x) => tanh(x), [inp([6])], "tanh");
  ok((x) => sqrt(x), [inp([6], (v) => v + 1.5)], "sqrt");
  for (const p of [2, 3, 0.5, -1, 1.7]) {
    ok((x) => pow(x, p), [inp([6], (v) => v + 1.5)], `pow ${p}`);
  }
  // values on a 0.1 grid, bounds between grid points: no value within a nudge of a bound
  ok((x) => clamp(x, { min: -0.35, max: 0.45 }), [distinct([20])], "clamp");
  ok((a, b) => div(a, b), [inp([3, 4]), inp([4], (v) => v + 2)], "div by a bias");
  ok((a, b) => div(a, b), [inp([4]), inp([3, 4], (v) => v + 2)], "div, the smaller first");
  ok((a, b) => mul(a, b), [inp([3, 1, 2]), inp([4, 1])], "mul, both broadcast");
  ok((a, b) => sub(a, b), [inp([2, 1]), inp([3])], "sub, outer");
  scope(() => {
    assert.deepEqual(add(zeros([3, 1, 2]), zeros([4, 1])).shape, [3, 4, 2]);
    assert.throws(
      () => add(zeros([3, 2]), zeros([3])),
      /add: shapes \[3,2\] and \[3\] do not broadcast: size 2 against 3 in dim -1/,
    );
    assert.throws(() => clamp(zeros([2]), {}), /give at least one of min and max/);
  });
});

Deno.test("where, maskedFill, gather, indexSelect: values and gradients", () => {
  scope(() => {
    const cond = fromArray(Uint8Array.of(1, 0, 0, 1), [2, 2], "u8");
    const mask = fromArray(Uint8Array.of(0, 1), [2], "u8");
    ok((a, b) => where(cond, a, b), [inp([2, 2]), inp([2])], "where, b broadcast");
    ok((a) => where(cond, a, a), [inp([2, 2])], "where with one tensor on both sides");
    ok((x) => maskedFill(x, mask, -5), [inp([3, 2])], "maskedFill broadcast");
    const x = fromArray(Float32Array.of(1, 2, 3, 4), [2, 2]);
    assert.deepEqual([...where(cond, x, 0).toArray()], [1, 0, 0, 4]);
    assert.deepEqual([...maskedFill(x, mask, -Infinity).toArray()], [1, -Infinity, 3, -Infinity]);
    const idx = fromArray(BigInt64Array.of(1n, 1n, 0n, 1n), [2, 2]);
    ok((t) => gather(t, 1, idx), [inp([2, 3])], "gather (i64 index, repeated picks)");
    ok(
      (t) => indexSelect(t, 0, fromArray(Int32Array.of(2, 0, 2), [3])),
      [inp([3, 2])],
      "indexSelect",
    );
    assert.deepEqual([...gather(x, 1, idx).toArray()], [2, 2, 3, 4]);
    assert.deepEqual([...indexSelect(x, 1, fromArray(Int32Array.of(1, 1, 0), [3])).toArray()], [
      2,
      2,
      1,
      4,
      4,
      3,
    ]);
    assert.throws(() => where(x, x, x), /the condition must be a u8 \(boolean\) tensor, got f32/);
    assert.throws(
      () => gather(x, 1, fromArray(Int32Array.of(0, 1), [1, 2])),
      /index \[1,2\] must have the dims of the input \[2,2\]/,
    );
    assert.throws(
      () => gather(x, 1, fromArray(Int32Array.of(0, 5, 1, 1), [2, 2])),
      (e: Error) =>
        e.name === "DtNativeError" && /index 5 at position 1 is outside \[0, 2\)/.test(e.message),
    );
    assert.throws(
      () => maskedFill(x, fromArray(Uint8Array.of(1, 0, 1), [3], "u8"), 0),
      /do not broadcast/,
    );
  });
});

Deno.test("softmax and logSoftmax along any dim: gradients and normalisation", () => {
  for (const dim of [0, 1, -1]) {
    ok((x) => softmax(x, dim), [inp([3, 4, 2])], `softmax dim ${dim}`);
    ok((x) => logSoftmax(x, dim), [inp([3, 4, 2])], `logSoftmax dim ${dim}`);
  }
  scope(() => {
    const x = fromArray(rand(24, 5), [2, 3, 4]);
    const s = softmax(x, 1).toArray() as Float32Array;
    for (let a = 0; a < 2; a++) {
      for (let c = 0; c < 4; c++) {
        const total = [0, 1, 2].reduce((acc, b) => acc + s[(a * 3 + b) * 4 + c]!, 0);
        assert.ok(Math.abs(total - 1) < 1e-6, `sums to 1 at (${a}, ${c})`);
      }
    }
    const ls = logSoftmax(x, 1).toArray() as Float32Array;
    for (let i = 0; i < 24; i++) assert.ok(Math.abs(Math.exp(ls[i]!) - s[i]!) < 1e-6);
    assert.throws(
      () => softmax(x, 0, { causal: true }),
      /causal and scale apply along the last dim only/,
    );
  });
});

Deno.test("batchNormReluMaxPool2d gives maxPool2d(relu(batchNorm(x)), 2)'s bits: outputs, gradients, statistics", () => {
  for (const [N, C, H, W] of [[4, 3, 8, 10], [2, 2, 7, 9], [3, 1, 2, 3]]) {
    for (const training of [true, false]) {
      for (const affine of [true, false]) {
        scope(() => {
          /** One run: the fused op or the three, from the same data; what each produced. */
          const run = (fused: boolean) => {
            const x = fromArray(rand(N * C * H * W, 31).map((v) => Math.round(v * 8) / 8), [
              N,
              C,
              H,
              W,
            ]);
            const w = affine ? fromArray(rand(C, 32), [C]) : null;
            const b = affine ? fromArray(rand(C, 33), [C]) : null;
            for (const t of [x, w, b]) if (t) t.requiresGrad = true;
            const rm = fromArray(rand(C, 34), [C]), rv = full([C], 1.5);
            const nbt = zeros([], "i64");
            const sums: number[] = []; // what a synchronised norm would all-reduce, in order
            const allReduce = (buf: StatsBuffer) => sums.push(buf.count);
            const opts = { weight: w, bias: b, training, numBatchesTracked: nbt, allReduce };
            const y = fused
              ? batchNormReluMaxPool2d(x, rm, rv, opts)
              : maxPool2d(relu(batchNorm(x, rm, rv, opts)), 2);
            backward(sum(mul(y, fromArray(rand(y.numel, 35), [...y.shape]))));
            const arrays = [y, x.grad!, w?.grad, b?.grad, rm, rv, nbt].filter((t) => t)
              .map((t) => t!.toArray());
            return { arrays, sums, shape: y.shape };
          };
          const a = run(true), u = run(false);
          const what = `${[N, C, H, W]} training=${training} affine=${affine}`;
          assert.deepEqual(a.shape, [N, C, Math.floor(H / 2), Math.floor(W / 2)], what);
          assert.deepEqual(a.sums, u.sums, `${what}: all-reduced buffers`);
          a.arrays.forEach((arr, i) => {
            const v = Array.from(arr as ArrayLike<number | bigint>);
            const r = Array.from(u.arrays[i] as ArrayLike<number | bigint>);
            assert.ok(v.every((e, k) => Object.is(e, r[k])), `${what}: tensor ${i} differs`);
          });
        });
      }
    }
  }
  assert.throws(
    () => scope(() => batchNormReluMaxPool2d(zeros([2, 3, 1, 4]), null, null, { training: true })),
    /batchNormReluMaxPool2d: expected an input \(N, C, H, W\) with H, W >= 2, got \[2,3,1,4\]/,
  );
});
