/**
 * gpu-check step 5: training throughput of a GPT-2-124M-shaped model (12
 * layers, 12 heads, width 768, block 1024, vocab 50257) on the GPU in bf16
 * autocast: forward, backward and AdamW on random tokens. Prints tokens/s and
 * MFU with llm.c's count (6N + 6·L·C·T flops per token) against a bf16 dense
 * peak (989 TFLOP/s for an H200/H100 SXM unless --peak-tflops says otherwise),
 * and the device work per step (kernel launches, cuBLASLt matmuls, memsets and
 * copies, from the CUDA library's own count), then one RESULT line and a
 * SUMMARY line for the device bundle's run.sh. With DTRAIN_COUNT_CALLS=1 the
 * library also prints each step's native calls and launches per layer, and
 * the summary says the last step's launches per layer.
 *
 *   deno run -A scripts/gpu_check/bench_gpt.ts [--batch 8] [--steps 10] [--warmup 3]
 *
 * `--device cpu --tiny` (2 layers, width 64, 32 tokens) checks the script itself without a GPU
 * (`--device cuda-emu --tiny` on the emulated GPU).
 */
import { parseArgs } from "node:util";
import { setDevice } from "../../tensor/backend.ts";
import { GPT } from "../../nn/gpt.ts";
import { manualSeed } from "../../nn/init.ts";
import { AdamW } from "../../optim/adamw.ts";
import { autocast } from "../../amp/autocast.ts";
import { backward } from "../../tensor/autograd.ts";
import { fromArray, scope } from "../../tensor/tensor.ts";
import { openedCudaBackend } from "../../tensor/cuda_backend.ts";
import { lastStep } from "../../profile/call_count.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    batch: { type: "string", default: "8" },
    seq: { type: "string", default: "1024" },
    steps: { type: "string", default: "10" },
    warmup: { type: "string", default: "3" },
    "peak-tflops": { type: "string", default: "989" },
    device: { type: "string", default: "cuda" },
    tiny: { type: "boolean", default: false },
  },
});
const tiny = values.tiny;
const B = tiny ? 2 : Number(values.batch), T = tiny ? 32 : Number(values.seq);
const steps = Number(values.steps), warmup = Number(values.warmup);
const peak = Number(values["peak-tflops"]) * 1e12;
const cfg = tiny
  ? { vocabSize: 50257, blockSize: 64, nLayer: 2, nHead: 2, nEmbd: 64 }
  : { vocabSize: 50257, blockSize: 1024, nLayer: 12, nHead: 12, nEmbd: 768 };
if (values.device !== "cuda" && values.device !== "cpu" && values.device !== "cuda-emu") {
  throw new TypeError(`--device ${values.device}: expected cuda, cuda-emu or cpu`);
}

const backend = setDevice(values.device);
manualSeed(0);
const model = new GPT(cfg);
const params = model.parameters();
const N = params.reduce((n, p) => n + p.numel, 0);
const opt = new AdamW(params, { lr: 6e-4, betas: [0.9, 0.95], weightDecay: 0.1 });
const flopsPerToken = 6 * N + 6 * cfg.nLayer * cfg.nEmbd * T;

// random tokens: inputs and next-token targets of B sequences of T + 1 tokens
let seed = 12345;
const tokens = Int32Array.from(
  { length: B * (T + 1) },
  () => (seed = (seed * 1103515245 + 12345) >>> 0) % cfg.vocabSize,
);
const inputs = new Int32Array(B * T), targets = new Int32Array(B * T);
for (let b = 0; b < B; b++) {
  inputs.set(tokens.subarray(b * (T + 1), b * (T + 1) + T), b * T);
  targets.set(tokens.subarray(b * (T + 1) + 1, (b + 1) * (T + 1)), b * T);
}
const idx = fromArray(inputs, [B, T]).keep();
const tgt = fromArray(targets, [B, T]).keep();

/** One training step; returns the loss (reading it waits for the GPU). */
function step(): number {
  return scope(() => {
    opt.zeroGrad();
    const loss = autocast("bf16", () => model.loss(idx, tgt));
    backward(loss);
    opt.step();
    return loss.item();
  });
}

console.log(
  `bench_gpt: ${backend.device}, ${
    (N / 1e6).toFixed(1)
  }M parameters, batch ${B} x ${T} tokens, bf16 autocast`,
);
let loss = 0;
const tw = performance.now();
for (let i = 0; i < warmup; i++) loss = step();
console.log(
  `warm-up: ${warmup} steps in ${((performance.now() - tw) / 1000).toFixed(2)} s, loss ${
    loss.toFixed(4)
  }`,
);
const gpu = openedCudaBackend();
const work = () => {
  const w = gpu?.workCount();
  return w ? w.launches + w.matmuls + w.copies : 0;
};
const work0 = work();
const times: number[] = [];
for (let i = 0; i < steps; i++) {
  const t0 = performance.now();
  loss = step();
  times.push(performance.now() - t0);
}
const launches = gpu ? (work() - work0) / steps : null;
const mean = times.reduce((a, b) => a + b, 0) / times.length;
const tokensPerS = (B * T) / (mean / 1000);
const mfu = (tokensPerS * flopsPerToken) / peak;
console.log(
  `steps: ${steps}, mean ${mean.toFixed(1)} ms (min ${Math.min(...times).toFixed(1)}, max ${
    Math.max(...times).toFixed(1)
  }), ` +
    `loss ${loss.toFixed(4)}`,
);
console.log(
  `tokens/s ${tokensPerS.toFixed(0)}, MFU ${(100 * mfu).toFixed(1)}% of ${
    values["peak-tflops"]
  } TFLOP/s`,
);
// with DTRAIN_COUNT_CALLS=1: the last step's device launches in each layer, on average
let perLayer: number | null = null;
if (lastStep !== null && gpu) {
  const layers = [...lastStep.layers.entries()].filter(([i]) => i >= 0).map(([, c]) => c);
  const work = layers.reduce((s, c) => s + c.launches + c.matmuls + c.copies, 0);
  perLayer = layers.length > 0 ? work / layers.length : null;
}
if (launches !== null) {
  console.log(
    `device launches per step: ${launches}` +
      (perLayer !== null
        ? `, ${perLayer.toFixed(1)} per layer`
        : " (DTRAIN_COUNT_CALLS=1 splits them by layer)"),
  );
}
console.log(
  `SUMMARY ${tokensPerS.toFixed(0)} tokens/s, MFU ${(100 * mfu).toFixed(1)}%, ` +
    `${mean.toFixed(1)} ms/step` + (launches !== null ? `, ${launches} launches/step` : "") +
    (perLayer !== null ? ` (${perLayer.toFixed(1)} per layer)` : "") +
    ` (batch ${B} x ${T}${tiny ? ", tiny model" : ""})`,
);
console.log(
  `RESULT ${
    JSON.stringify({
      impl: "dtrain",
      tokens_per_s: tokensPerS,
      mfu,
      step_ms: mean,
      loss,
      launches_per_step: launches,
      launches_per_layer: perLayer,
      batch: B,
      seq: T,
    })
  }`,
);
if (!Number.isFinite(loss)) {
  console.error("bench_gpt: the loss is not finite");
  Deno.exit(1);
}
