import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { fromArray, scope } from "../../tensor/tensor.ts";
import { backward } from "../../tensor/autograd.ts";
import { Linear } from "../../nn/layers.ts";
import { SGD } from "../../optim/sgd.ts";
import { GradScaler } from "../../amp/grad_scaler.ts";
import { autocast } from "../../amp/autocast.ts";
import { mean } from "../../tensor/ops/reduce.ts";
import { manualSeed } from "../../nn/init.ts";

buildNative({ quiet: true });

Deno.test("GradScaler: an f16 step that overflows is skipped and halves the scale", () => {
  manualSeed(0);
  const layer = new Linear(4, 4);
  const opt = new SGD(layer.parameters(), { lr: 0.1 });
  const scaler = new GradScaler();
  assert.equal(scaler.scaleValue, 65536);
  const before = layer.weight.toArray();
  // Activations of ~3e4: f16 holds them, but the scaled loss gradient (65536 × …) overflows to inf.
  const stepped = scope(() => {
    const x = fromArray(new Float32Array(8).fill(3e4), [2, 4]);
    const loss = autocast("f16", () => mean(layer.forward(x)));
    backward(scaler.scale(loss));
    const ok = scaler.step(opt);
    scaler.update();
    return ok;
  });
  assert.equal(stepped, false);
  assert.equal(scaler.skippedSteps, 1);
  assert.equal(scaler.scaleValue, 32768);
  assert.deepEqual(layer.weight.toArray(), before, "a skipped step must not touch the weights");
  layer.dispose();
});

Deno.test("GradScaler: finite steps unscale before the update and grow the scale after growthInterval", () => {
  manualSeed(0);
  const layer = new Linear(2, 1, { bias: false });
  layer.weight.copyFromArray(new Float32Array([1, 1]));
  const opt = new SGD(layer.parameters(), { lr: 0.5 });
  const scaler = new GradScaler({ initScale: 8, growthInterval: 2 });
  const x = fromArray(new Float32Array([1, 2]), [1, 2]).keep();
  for (let i = 0; i < 2; i++) {
    scope(() => {
      opt.zeroGrad();
      backward(scaler.scale(mean(layer.forward(x))));
      scaler.unscale(opt);
      // The gradient of the mean is x itself once unscaled.
      assert.deepEqual([...(layer.weight.grad!.toArray() as Float32Array)], [1, 2]);
      assert.ok(scaler.step(opt));
      scaler.update();
    });
  }
  assert.equal(scaler.scaleValue, 16, "two good steps with growthInterval 2 double the scale");
  assert.deepEqual([...(layer.weight.toArray() as Float32Array)], [0, -1]);
  const saved = scaler.stateDict();
  const other = new GradScaler();
  other.loadStateDict(saved);
  assert.equal(other.scaleValue, 16);
  x.dispose();
  layer.dispose();
});
