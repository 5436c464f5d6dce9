/**
 * linear under bf16 autocast, as torch's addmm: x, weight and bias rounded
 * to bf16, the product accumulated in f32 together with the bias, and the sum
 * rounded to bf16 once; the gradients are the bf16 products of the rounded
 * output gradient, widened to f32, and the bias gradient the f32 sum over
 * rows. Small integers keep every sum exact, so the expected values are too.
 */
import assert from "node:assert/strict";
import { autocast } from "../../amp/autocast.ts";
import { fromArray, scope } from "../../tensor/tensor.ts";
import { linear } from "../../tensor/ops/linalg.ts";
import { mul } from "../../tensor/ops/elementwise.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import { backward } from "../../tensor/autograd.ts";

Deno.test("linear under bf16 autocast adds the bias before its one rounding to bf16", () => {
  scope(() => {
    // x @ w^T = 1 * 256 + 1 * 1 = 257, exact in f32; + bias 1 = 258, a bf16 value. Rounding
    // the product first would give 256 (257 ties to even), and 256 + 1 = 257 rounds to 256.
    const x = fromArray(new Float32Array([1, 1]), [1, 2]);
    const w = fromArray(new Float32Array([256, 1]), [1, 2]);
    const b = fromArray(new Float32Array([1]), [1]);
    const y = autocast("bf16", () => linear(x, w, b));
    assert.equal(y.dtype, "bf16");
    assert.deepEqual([...(y.toArray() as Float32Array)], [258]);
  });
});

Deno.test("linear under bf16 autocast: output, and gradients of input, weight and bias", () => {
  scope(() => {
    const M = 5, K = 7, N = 3;
    const ints = (n: number, seed: number) =>
      Float32Array.from({ length: n }, (_, i) => ((i * 7 + seed) % 9) - 4);
    const xv = ints(M * K, 1), wv = ints(N * K, 2), bv = ints(N, 3), gv = ints(M * N, 4);
    const x = fromArray(xv, [M, K]), w = fromArray(wv, [N, K]), b = fromArray(bv, [N]);
    for (const t of [x, w, b]) t.requiresGrad = true;
    const g = fromArray(gv, [M, N]);
    const y = autocast("bf16", () => linear(x, w, b));
    backward(sum(mul(y, g))); // dL/dy = g
    const want = new Float32Array(M * N);
    for (let i = 0; i < M; i++) {
      for (let j = 0; j < N; j++) {
        let s = bv[j]!;
        for (let k = 0; k < K; k++) s += xv[i * K + k]! * wv[j * K + k]!;
        want[i * N + j] = s;
      }
    }
    assert.deepEqual([...(y.toArray() as Float32Array)], Array.from(want));
    const gx = new Float32Array(M * K), gw = new Float32Array(N * K), gb = new Float32Array(N);
    for (let i = 0; i < M; i++) {
      for (let j = 0; j < N; j++) {
        gb[j]! += gv[i * N + j]!;
        for (let k = 0; k < K; k++) {
          gx[i * K + k]! += gv[i * N + j]! * wv[j * K + k]!;
          gw[j * K + k]! += gv[i * N + j]! * xv[i * K + k]!;
        }
      }
    }
    assert.deepEqual([...(x.grad!.toArray() as Float32Array)], Array.from(gx));
    assert.deepEqual([...(w.grad!.toArray() as Float32Array)], Array.from(gw));
    assert.deepEqual([...(b.grad!.toArray() as Float32Array)], Array.from(gb));
    for (const t of [x.grad!, w.grad!, b.grad!]) assert.equal(t.dtype, "f32");
  });
});
