// bench_train's limit on bf16 / f32: the step's thread CPU split into its matrix products and the
// rest, and the ceiling that doubling only the products allows.
import assert from "node:assert/strict";
import { doubledProductsLimit, productSplit } from "../../scripts/bench_train.ts";
import { cpuCalls } from "../../ffi/cpu.ts";

Deno.test("doubledProductsLimit: step / (products / 2 + rest)", () => {
  assert.equal(doubledProductsLimit({ products: 60, step: 80 }), 80 / 50);
  assert.equal(doubledProductsLimit({ products: 0, step: 80 }), 1);
  assert.equal(doubledProductsLimit({ products: 80, step: 80 }), 2);
});

Deno.test("productSplit times the toy model's products inside its step, and restores the kernels", () => {
  const calls = cpuCalls() as unknown as Record<string, unknown>;
  const before = [calls.dt_gemm, calls.dt_gemm_ex];
  const s = productSplit("toy", 1);
  assert.deepEqual([calls.dt_gemm, calls.dt_gemm_ex], before);
  // the toy step is 2 linear layers (forward, dX, dW), AdamW and the loss: its products take a
  // part of it, never all, never none. One timed step after the 3 warm-up steps: products timed
  // outside the span as well would come to about 4 steps' worth, more than the step.
  assert.ok(s.products > 0 && s.products < s.step, JSON.stringify(s));
});
