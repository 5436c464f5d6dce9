/**
 * The memory report's counts (tensor/memory_kinds.ts): a module's
 * parameters count as weights, autograd's leaf gradients as gradients,
 * AdamW's moments as optimizer state, the forward's tensors as activations;
 * freed blocks leave their kind; peaks restart from what is live.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { Linear } from "../../nn/layers.ts";
import { manualSeed } from "../../nn/init.ts";
import { AdamW } from "../../optim/adamw.ts";
import { backward } from "../../tensor/autograd.ts";
import { fromArray, scope } from "../../tensor/tensor.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import {
  formatBytes,
  formatMemoryReport,
  memoryByKind,
  resetMemoryPeaks,
} from "../../tensor/memory_kinds.ts";

buildNative({ quiet: true });

const live = () => ({ ...memoryByKind().get("cpu")!.live });

Deno.test("weights, gradients, optimizer state and activations are counted under their kinds", () => {
  manualSeed(0);
  scope(() => fromArray(new Float32Array(1), [1])); // the CPU's counts exist
  const at0 = live();
  const lin = new Linear(64, 32); // weight 8 KiB, bias 128 B (one 256-byte block)
  const at1 = live();
  assert.equal(at1.weights - at0.weights, 8192 + 256);
  const opt = new AdamW(lin.parameters());
  resetMemoryPeaks();
  scope(() => {
    const x = fromArray(new Float32Array(16 * 64).fill(0.5), [16, 64]);
    backward(sum(lin.forward(x)));
    const during = memoryByKind().get("cpu")!;
    assert.ok(during.peak.activations - at1.activations >= 16 * 64 * 4, "the input and output");
  });
  const at2 = live();
  assert.equal(at2.gradients - at1.gradients, 8192 + 256);
  assert.equal(at2.activations, at1.activations, "the step's tensors are freed with its scope");
  opt.step();
  const at3 = live();
  assert.equal(at3.optimizer - at2.optimizer, 2 * (8192 + 256));
  lin.dispose();
  opt.zeroGrad();
  const lines = formatMemoryReport("test");
  assert.match(
    lines[0]!,
    /^\[memory\] test, CPU: peak .* = weights .* \+ gradients .* \+ optimizer/,
  );
  assert.equal(formatBytes(1536), "1.5 KiB");
  assert.equal(formatBytes(3 * 2 ** 20), "3.00 MiB");
});
