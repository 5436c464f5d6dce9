/**
 * A 10,000-step training loop of the toy model that prints its native and
 * resident memory at step 1,000 and step 10,000 as one JSON line. Run as
 * its own process so that no other test's allocations show in its RSS.
 */
import { fromArray, scope } from "../../../tensor/tensor.ts";
import { memoryStats } from "../../../tensor/allocator.ts";
import { Linear, ReLU, Sequential } from "../../../nn/layers.ts";
import { AdamW } from "../../../optim/adamw.ts";
import { clipGradNorm } from "../../../optim/clip.ts";
import { crossEntropy } from "../../../tensor/ops/nn.ts";
import { backward } from "../../../tensor/autograd.ts";
import { manualSeed } from "../../../nn/init.ts";

manualSeed(0);
const model = new Sequential(new Linear(128, 256), new ReLU(), new Linear(256, 2));
const opt = new AdamW(model.parameters(), { lr: 1e-3 });
const x = fromArray(new Float32Array(64 * 128).map((_, i) => Math.sin(i)), [64, 128]).keep();
const y = fromArray(Int32Array.from({ length: 64 }, (_, i) => i % 2), [64]).keep();
const samples: { step: number; live: number; cached: number; rss: number }[] = [];
for (let step = 1; step <= 10_000; step++) {
  scope(() => {
    opt.zeroGrad();
    const loss = crossEntropy(model.forward(x), y);
    backward(loss);
    clipGradNorm(model.parameters(), 1.0);
    opt.step();
  });
  if (step === 1000 || step === 10_000) {
    const m = memoryStats();
    samples.push({ step, live: m.liveBytes, cached: m.cachedBytes, rss: Deno.memoryUsage().rss });
  }
}
console.log(JSON.stringify(samples));
