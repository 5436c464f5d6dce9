/**
 * One rank of scripts/bench_memory.ts: a GPT trained a few steps in one
 * memory mode on random tokens, printing one JSON line with this rank's
 * measured bytes (tensor/memory_kinds.ts) and the steady-state tokens/s.
 *
 *   dtrain --nproc N scripts/bench_memory_rank.ts <ddp|zero1|zero2|checkpointing> <mini|large>
 */
import {
  AdamW,
  DistributedDataParallel,
  fromArray,
  GPT,
  type GPTConfig,
  initProcessGroup,
  manualSeed,
  type Optimizer,
  scope,
  ZeroRedundancyOptimizer,
} from "../mod.ts";
import { memoryByKind, resetMemoryPeaks } from "../tensor/memory_kinds.ts";

const MODELS: Record<string, { cfg: GPTConfig; batch: number }> = {
  // examples/char_gpt.ts's GPT-mini
  mini: {
    cfg: { vocabSize: 256, blockSize: 128, nLayer: 4, nHead: 4, nEmbd: 128, dropout: 0.1 },
    batch: 8,
  },
  // wide enough that the optimizer state outweighs the activations
  large: {
    cfg: { vocabSize: 256, blockSize: 128, nLayer: 6, nHead: 8, nEmbd: 384, dropout: 0.1 },
    batch: 4,
  },
};
const WARMUP = 2, STEPS = Number(Deno.env.get("BENCH_STEPS") ?? 4);

const [mode, which] = Deno.args;
const model = MODELS[which ?? ""];
if (!model || !["ddp", "zero1", "zero2", "checkpointing"].includes(mode ?? "")) {
  throw new Error(
    "usage: bench_memory_rank.ts <ddp|zero1|zero2|checkpointing> <mini|large>",
  );
}
const pg = initProcessGroup();
manualSeed(0);
const gpt = new GPT({ ...model.cfg, checkpointBlocks: mode === "checkpointing" });
// 5 MiB buckets (as DeepSpeed's bucket sizes, smaller than the model): ZeRO-2 frees each bucket
// at its reduce-scatter, so a rank holds one or two buckets of whole gradients at a time
const ddp = new DistributedDataParallel(gpt, pg, { bucketCapMb: 5 });
const hyper = { lr: 3e-4, weightDecay: 0.1 };
const opt: Optimizer<{ lr: number }> = mode === "zero1" || mode === "zero2"
  ? new ZeroRedundancyOptimizer(ddp.parameters(), {
    optimizerClass: AdamW,
    ddp,
    shard: mode === "zero1" ? "optimizer" : "gradients",
    ...hyper,
  })
  : new AdamW(ddp.parameters(), hyper);
const T = model.cfg.blockSize, B = model.batch;
const gen = manualSeed(100 + pg.rank);
resetMemoryPeaks(); // the steps' memory, weights included; not the set-up's transients
let gradientsAtStep = 0;
let start = 0;
for (let s = 0; s < WARMUP + STEPS; s++) {
  if (s === WARMUP) {
    pg.barrier("measure");
    start = performance.now();
  }
  // as the Trainer does: the forward's tensors are freed before the optimizer steps
  scope(() => {
    const toks = Int32Array.from({ length: B * (T + 1) }, () => gen.randint(0, 256));
    const x = fromArray(toks.filter((_, i) => i % (T + 1) !== T), [B, T]);
    const y = fromArray(toks.filter((_, i) => i % (T + 1) !== 0), [B, T]);
    ddp.backward(gpt.loss(x, y));
  });
  const g = memoryByKind().get("cpu")!.live.gradients;
  if (g > gradientsAtStep) gradientsAtStep = g;
  opt.step();
  opt.zeroGrad();
}
pg.barrier("measured");
const seconds = (performance.now() - start) / 1000;
const m = memoryByKind().get("cpu")!;
console.log(JSON.stringify({
  rank: pg.rank,
  mode,
  model: which,
  parameters: gpt.parameters().reduce((a, p) => a + p.numel, 0),
  optimizerStateBytes: m.peak.optimizer,
  gradientBytesAtStep: gradientsAtStep,
  gradientPeakBytes: m.peak.gradients,
  activationPeakBytes: m.peak.activations,
  communicationPeakBytes: m.peak.communication,
  weightBytes: m.peak.weights,
  peakBytes: m.peakTotal,
  atPeak: m.atPeak,
  tokensPerS: (STEPS * B * T * pg.size) / seconds,
}));
ddp.close();
pg.close();
