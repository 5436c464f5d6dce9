// bench_train's limit on bf16 / f32: the step's thread CPU split into its matrix products and the
// rest, and the ceiling that doubling only the products allows.
import assert from "node:assert/strict";
import {
  alternatedBf16Ratio,
  doubledProductsLimit,
  productSplit,
} from "../../scripts/bench_train.ts";
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

Deno.test("alternatedBf16Ratio alternates f32 and bf16 steps on one model and gives quartiles", () => {
  // every product of an f32 step runs on f32 operands and every one of a bf16 step on bf16: as
  // many of each over the warm-up pairs and the timed one
  const calls = cpuCalls() as unknown as Record<string, (...a: unknown[]) => unknown>;
  const plain = calls.dt_gemm_ex!;
  const byDtype = new Map<number, number>();
  calls.dt_gemm_ex = (...args: unknown[]) => {
    byDtype.set(Number(args[0]), (byDtype.get(Number(args[0])) ?? 0) + 1);
    return plain(...args);
  };
  let r;
  try {
    r = alternatedBf16Ratio(1);
  } finally {
    calls.dt_gemm_ex = plain;
  }
  const f32 = byDtype.get(0) ?? 0, bf16 = byDtype.get(1) ?? 0;
  assert.ok(f32 > 0 && f32 === bf16, `products by operand dtype: ${JSON.stringify([...byDtype])}`);
  assert.ok(r.q1 > 0 && r.q1 <= r.median && r.median <= r.q3, JSON.stringify(r));
});
