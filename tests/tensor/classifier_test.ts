/**
 * crossEntropy as the fused classifier: bf16 logits are read as they are (no
 * f32 copy, no stored probabilities: what the forward keeps for backward is
 * one float per row), the loss equals the f32 loss of the same values, and
 * the gradient comes back in the logits' dtype, the f32 one rounded once.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { crossEntropy } from "../../tensor/ops/nn.ts";
import { cast } from "../../tensor/ops/elementwise.ts";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { memoryStats } from "../../tensor/allocator.ts";
import { rand } from "./_gradcheck.ts";

buildNative({ quiet: true });

/** The gradient crossEntropy's node passes to its logits for dloss = 1. */
function logitsGrad(logits: Tensor, targets: Tensor): Tensor {
  const loss = crossEntropy(logits, targets);
  return loss.node!.backward(fromArray(new Float32Array([1]), []))[0] as Tensor;
}

Deno.test("crossEntropy on bf16 logits keeps one float per row, not rows x V probabilities", () => {
  scope(() => {
    const rows = 64, V = 4096;
    const logits = cast(fromArray(rand(rows * V, 3), [rows, V]), "bf16");
    logits.requiresGrad = true;
    const targets = fromArray(Int32Array.from({ length: rows }, (_, i) => (i * 37) % V), [rows]);
    const before = memoryStats().liveBytes;
    const loss = crossEntropy(logits, targets);
    const kept = memoryStats().liveBytes - before;
    // the loss, a log-sum-exp per row, the valid count (each rounded up to 256 bytes)
    assert.ok(kept <= 3 * 256 + rows * 4, `the forward kept ${kept} bytes`);
    const same = crossEntropy(cast(logits, "f32"), targets);
    assert.equal(loss.item(), same.item());
  });
});

Deno.test("crossEntropy's gradient of bf16 logits is the f32 gradient rounded once", () => {
  scope(() => {
    const rows = 10, V = 777;
    const x = cast(fromArray(rand(rows * V, 4), [rows, V]), "bf16");
    const targets = fromArray(
      Int32Array.from({ length: rows }, (_, i) => (i === 3 ? -100 : i * 11)),
      [rows],
    );
    const [low, full] = (["bf16", "f32"] as const).map((dt) => {
      const leaf = cast(x, dt);
      leaf.requiresGrad = true;
      return logitsGrad(leaf, targets);
    }) as [Tensor, Tensor];
    assert.equal(low.dtype, "bf16");
    assert.equal(full.dtype, "f32");
    const got = low.toArray() as Float32Array;
    assert.deepEqual(got, cast(full, "bf16").toArray());
    assert.ok(got.subarray(3 * V, 4 * V).every((v) => v === 0), "the ignored row");
  });
});
