import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { fromArray, scope } from "../../tensor/tensor.ts";
import { memoryStats } from "../../tensor/allocator.ts";
import { Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { AdamW } from "../../optim/adamw.ts";
import { clipGradNorm } from "../../optim/clip.ts";
import { crossEntropy } from "../../tensor/ops/nn.ts";
import { backward } from "../../tensor/autograd.ts";
import { manualSeed } from "../../nn/init.ts";
import { rand } from "./_gradcheck.ts";

buildNative({ quiet: true });

Deno.test("a 10,000-step training loop keeps native and resident memory flat", () => {
  manualSeed(0);
  const model = new Sequential(
    new Linear(128, 256),
    new ReLU(),
    new Linear(256, 2),
  );
  const opt = new AdamW(model.parameters(), { lr: 1e-3 });
  const x = fromArray(rand(64 * 128, 1), [64, 128]).keep();
  const y = fromArray(Int32Array.from({ length: 64 }, (_, i) => i % 2), [64])
    .keep();
  const samples: { live: number; cached: number; rss: number }[] = [];
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
      samples.push({
        live: m.liveBytes,
        cached: m.cachedBytes,
        rss: Deno.memoryUsage().rss,
      });
    }
  }
  const [a, b] = samples as [typeof samples[0], typeof samples[0]];
  // Native memory: the same blocks are live and cached after every step.
  assert.equal(
    b.live,
    a.live,
    "live native bytes changed between step 1,000 and 10,000",
  );
  assert.equal(
    b.cached,
    a.cached,
    "cached native bytes changed between step 1,000 and 10,000",
  );
  // Resident memory: V8's heap may breathe a little; a leak of one step's
  // temporaries (~0.4 MB) over 9,000 steps would add gigabytes.
  const growth = b.rss - a.rss;
  assert.ok(
    growth < 16 * 2 ** 20,
    `resident memory grew by ${(growth / 2 ** 20).toFixed(1)} MiB`,
  );
  x.dispose();
  y.dispose();
  model.dispose();
});
