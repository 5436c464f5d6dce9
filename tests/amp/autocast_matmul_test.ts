/**
 * matmul under bf16 autocast (shared and batched right operands, transB,
 * alpha): output rounded to bf16, gradients in f32 — against the same product
 * in f32. Small integers keep every sum exact in bf16, so both must agree
 * exactly; on a CPU with AVX512_BF16 this covers the GEMM that writes the f32
 * gradients itself (dt_cpu_gemm_bf16_mixed).
 */
import assert from "node:assert/strict";
import { autocast } from "../../amp/autocast.ts";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { matmul } from "../../tensor/ops/linalg.ts";
import { mul } from "../../tensor/ops/elementwise.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import { backward } from "../../tensor/autograd.ts";

const ints = (n: number, seed: number) =>
  Float32Array.from({ length: n }, (_, i) => ((i * 7 + seed) % 9) - 4);

/** y = matmul(a, b) and the gradients of a and b for dL/dy = g, under `low` or in f32. */
function run(
  low: "bf16" | null,
  aShape: number[],
  bShape: number[],
  opts: { transB?: boolean; alpha?: number },
) {
  return scope(() => {
    const n = (s: number[]) => s.reduce((x, y) => x * y, 1);
    const a = fromArray(ints(n(aShape), 1), aShape), b = fromArray(ints(n(bShape), 2), bShape);
    a.requiresGrad = true;
    b.requiresGrad = true;
    const y = autocast(low, () => matmul(a, b, opts));
    const g = fromArray(ints(y.numel, 3), y.shape);
    backward(sum(mul(y, g)));
    const arr = (t: Tensor) => [...(t.toArray() as Float32Array)];
    return {
      dtype: y.dtype,
      y: arr(y),
      ga: arr(a.grad!),
      gb: arr(b.grad!),
      gaDtype: a.grad!.dtype,
    };
  });
}

Deno.test("matmul under bf16 autocast: output and f32 gradients, exact on small integers", () => {
  const cases: [number[], number[], { transB?: boolean; alpha?: number }][] = [
    [[5, 7], [7, 3], {}],
    [[2, 5, 7], [7, 33], { alpha: 0.5 }], // shared b: one GEMM over both batches
    [[2, 5, 7], [2, 3, 7], { transB: true }], // batched, as attention's q @ k^T
    [[3, 13, 4], [3, 4, 9], {}],
  ];
  for (const [aShape, bShape, opts] of cases) {
    const name = `[${aShape}] @ [${bShape}] ${JSON.stringify(opts)}`;
    const low = run("bf16", aShape, bShape, opts), ref = run(null, aShape, bShape, opts);
    assert.equal(low.dtype, "bf16", name);
    assert.equal(low.gaDtype, "f32", name);
    assert.deepEqual(low.y, ref.y, `${name}: output`);
    assert.deepEqual(low.ga, ref.ga, `${name}: gradient of a`);
    assert.deepEqual(low.gb, ref.gb, `${name}: gradient of b`);
  }
});
