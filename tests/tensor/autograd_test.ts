import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { gradCheck, rand } from "./_gradcheck.ts";
import { add, gelu, mul, relu, scale, sub } from "../../tensor/ops/elementwise.ts";
import { linear, matmul } from "../../tensor/ops/linalg.ts";
import { causalSelfAttention, crossEntropy, embedding, layerNorm } from "../../tensor/ops/nn.ts";
import { softmax } from "../../tensor/ops/softmax.ts";
import { reshape, splitLast } from "../../tensor/ops/shape.ts";
import { transpose } from "../../tensor/ops/layout.ts";
import { mean, sum } from "../../tensor/ops/reduce.ts";
import { fromArray, scope } from "../../tensor/tensor.ts";
import { backward } from "../../tensor/autograd.ts";

buildNative({ quiet: true });

// Central differences on f32 forward passes are good to ~1e-3 relative at eps 1e-2.
const TOL = 2e-2;
const inp = (shape: number[], seed: number) => ({
  shape,
  data: rand(shape.reduce((a, b) => a * b, 1), seed),
});

Deno.test("add/sub/mul gradients with bias-style broadcasting", () => {
  assert.ok(
    gradCheck((a, b) => add(a, b), [inp([3, 4], 1), inp([4], 2)]) < TOL,
  );
  assert.ok(
    gradCheck((a, b) => sub(a, b), [inp([2, 3, 4], 3), inp([3, 4], 4)]) < TOL,
  );
  assert.ok(
    gradCheck((a, b) => mul(a, b), [inp([3, 4], 5), inp([3, 1], 6)]) < TOL,
  );
  assert.ok(
    gradCheck((a, b) => mul(a, b), [inp([3, 4], 7), inp([3, 4], 8)]) < TOL,
  );
  assert.ok(gradCheck((a) => scale(a, -2.5), [inp([5], 9)]) < TOL);
});

Deno.test("relu and gelu gradients", () => {
  // Keep inputs away from relu's kink so central differences are exact.
  const away = inp([17], 10);
  away.data = away.data.map((v) => v + Math.sign(v) * 0.1);
  assert.ok(gradCheck((a) => relu(a), [away]) < TOL);
  assert.ok(gradCheck((a) => gelu(a), [inp([17], 11)]) < TOL);
});

Deno.test("matmul and linear gradients, 2-D and batched, transposed", () => {
  assert.ok(
    gradCheck((a, b) => matmul(a, b), [inp([3, 5], 12), inp([5, 4], 13)]) < TOL,
  );
  assert.ok(
    gradCheck((a, b) => matmul(a, b, { transB: true }), [
      inp([2, 3, 5], 14),
      inp([4, 5], 15),
    ]) < TOL,
  );
  assert.ok(
    gradCheck((a, b) => matmul(a, b), [
      inp([2, 3, 5], 16),
      inp([2, 5, 4], 17),
    ]) < TOL,
  );
  assert.ok(
    gradCheck((a, b) => matmul(a, b, { transB: true }), [
      inp([2, 3, 5], 18),
      inp([2, 4, 5], 19),
    ]) < TOL,
  );
  assert.ok(
    gradCheck((x, w, b) => linear(x, w, b), [
      inp([4, 6], 20),
      inp([3, 6], 21),
      inp([3], 22),
    ]) < TOL,
  );
});

Deno.test("softmax (plain and causal), layerNorm gradients", () => {
  assert.ok(
    gradCheck((a) => softmax(a, -1, { scale: 0.7 }), [inp([3, 5], 23)]) < TOL,
  );
  assert.ok(
    gradCheck((a) => softmax(a, -1, { causal: true }), [inp([2, 4, 4], 24)]) < TOL,
  );
  assert.ok(
    gradCheck((x, w, b) => layerNorm(x, w, b), [
      inp([3, 8], 25),
      inp([8], 26),
      inp([8], 27),
    ]) < TOL,
  );
});

Deno.test("shape ops and reductions gradients", () => {
  assert.ok(gradCheck((a) => reshape(a, [4, -1]), [inp([2, 6], 28)]) < TOL);
  assert.ok(gradCheck((a) => transpose(a, 1, 2), [inp([2, 3, 4, 2], 29)]) < TOL);
  assert.ok(gradCheck((a) => transpose(a, 0, 1), [inp([3, 5], 30)]) < TOL);
  assert.ok(
    gradCheck((a) => mul(splitLast(a, 2)[1]!, splitLast(a, 2)[2]!), [
      inp([3, 6], 31),
    ]) < TOL,
  );
  assert.ok(gradCheck((a) => sum(a), [inp([7], 32)]) < TOL);
  assert.ok(gradCheck((a) => mean(a), [inp([7], 33)]) < TOL);
});

Deno.test("causalSelfAttention gradient", () => {
  assert.ok(
    gradCheck((qkv) => causalSelfAttention(qkv, 2), [inp([2, 3, 12], 34)]) <
      TOL,
  );
});

Deno.test("embedding and crossEntropy gradients (ignore_index skipped)", () => {
  const idx = fromArray(new Int32Array([2, 0, 2, 1]), [4]).keep();
  assert.ok(gradCheck((t) => embedding(idx, t), [inp([3, 5], 35)]) < TOL);
  const tgt = fromArray(new Int32Array([1, -1, 3]), [3]).keep();
  assert.ok(
    gradCheck((l) => crossEntropy(l, tgt, { ignoreIndex: -1 }), [
      inp([3, 4], 36),
    ]) < TOL,
  );
  idx.dispose();
  tgt.dispose();
});

Deno.test("a parameter used twice gets both gradient contributions", () => {
  scope(() => {
    const w = fromArray(new Float32Array([1, 2, 3]), [3]);
    w.requiresGrad = true;
    const y = sum(mul(add(w, w), w)); // 2 w^2 -> grad 4w
    backward(y);
    assert.deepEqual([...(w.grad!.toArray() as Float32Array)], [4, 8, 12]);
    w.grad!.dispose();
  });
});

Deno.test("shape mismatches name the op and both shapes", () => {
  scope(() => {
    const a = fromArray(new Float32Array(6), [2, 3]);
    const b = fromArray(new Float32Array(8), [2, 4]);
    assert.throws(
      () => matmul(a, b),
      /matmul: inner dimensions differ: \[2,3\] @ \[2,4\]/,
    );
    assert.throws(
      () => add(a, b),
      /add: shapes \[2,3\] and \[2,4\] do not broadcast: size 3 against 4 in dim -1/,
    );
    assert.throws(() => reshape(a, [4, 2]), /element count 6 != 8/);
  });
});

Deno.test("a native error becomes an exception carrying the library's text", () => {
  scope(() => {
    const table = fromArray(new Float32Array(6), [3, 2]);
    const idx = fromArray(new Int32Array([0, 7]), [2]);
    assert.throws(
      () => embedding(idx, table),
      (e: Error) => e.name === "DtNativeError" && /7/.test(e.message),
    );
  });
});
