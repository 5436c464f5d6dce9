/**
 * A GPT-mini DDP loop for `dtrain check --exact`'s tests and the exact-mode
 * cost benchmark: a 2-layer GPT with dropout 0.1 on windows of a fixed
 * pseudo-random token sequence, a DistributedSampler, GLOBAL_BATCH / world
 * size windows per rank, AdamW and clipping: the numerics exact mode must
 * hold for, none of them turned off; `--bf16` adds bf16 autocast.
 *
 *   ./dtrain --nproc 2 tests/check/scripts/exact_gpt.ts [--steps K] [--width C] [--block T] [--dropout P] [--bf16]
 */
import {
  AdamW,
  autocast,
  clipGradNorm,
  DataLoader,
  DistributedDataParallel,
  DistributedSampler,
  GPT,
  initProcessGroup,
  manualSeed,
  scope,
  TensorDataset,
  TorchGenerator,
} from "dtrain";

function option(name: string, fallback: number): number {
  const i = Deno.args.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(Deno.args[i + 1]);
}
const STEPS = option("steps", 1000), WIDTH = option("width", 32), BLOCK = option("block", 16);
const DROPOUT = option("dropout", 0.1);
const GLOBAL_BATCH = 8, VOCAB = 64, WINDOWS = 128, SEED = 11;

/** WINDOWS windows of BLOCK + 1 tokens: inputs and next-token targets. */
function windows(): TensorDataset {
  const gen = new TorchGenerator(5);
  const tokens = Int32Array.from({ length: WINDOWS * (BLOCK + 1) }, () => gen.randint(0, VOCAB));
  const x = new Int32Array(WINDOWS * BLOCK), y = new Int32Array(WINDOWS * BLOCK);
  for (let w = 0; w < WINDOWS; w++) {
    for (let t = 0; t < BLOCK; t++) {
      x[w * BLOCK + t] = tokens[w * (BLOCK + 1) + t]!;
      y[w * BLOCK + t] = tokens[w * (BLOCK + 1) + t + 1]!;
    }
  }
  return new TensorDataset({ data: x, sampleShape: [BLOCK] }, { data: y, sampleShape: [BLOCK] });
}

const pg = initProcessGroup();
manualSeed(SEED);
const model = new GPT({
  vocabSize: VOCAB,
  blockSize: BLOCK,
  nLayer: 2,
  nHead: 2,
  nEmbd: WIDTH,
  dropout: DROPOUT,
  maskBuffer: false,
});
const ddp = new DistributedDataParallel(model, pg);
const optimizer = new AdamW(ddp.parameters(), { lr: 1e-3 });
const data = windows();
const sampler = new DistributedSampler(data.length, {
  numReplicas: pg.size,
  rank: pg.rank,
  seed: SEED,
});
const loader = new DataLoader(data, { batchSize: GLOBAL_BATCH / pg.size, sampler });

let step = 0;
try {
  for (let epoch = 0; step < STEPS; epoch++) {
    sampler.setEpoch(epoch);
    for await (const { tensors: [x, y] } of loader) {
      scope(() => {
        optimizer.zeroGrad();
        const bf16 = Deno.args.includes("--bf16");
        ddp.backward(autocast(bf16 ? "bf16" : "f32", () => model.loss(x!, y!)));
        clipGradNorm(ddp.parameters(), 1.0);
        optimizer.step();
      });
      x!.dispose();
      y!.dispose();
      if (++step >= STEPS) break;
    }
  }
} finally {
  pg.close();
}
