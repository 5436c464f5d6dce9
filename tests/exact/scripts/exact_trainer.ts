/**
 * The Trainer in exact mode on two models, chosen by CASE:
 * - "gpt": GPT-mini with dropout 0.1, AdamW, clipping at 1, two accumulated
 *   micro-batches per step and bf16 autocast (AUTOCAST=f16: f16, with the
 *   Trainer's GradScaler);
 * - "cnn": a small CNN (conv, batch norm converted to SyncBatchNorm, ReLU,
 *   max pooling, linear) with SGD and momentum.
 * STEPS optimizer steps (default 50, over more than one epoch); SAVE_AT saves
 * a checkpoint every that many steps into CKPT_DIR, from which a later run
 * resumes (at any world size); EXACT=0 trains without exact mode; EVAL=1
 * adds an evaluation every 10 steps. Prints one
 * JSON line per rank: the digest of every weight, buffer and optimizer-state
 * tensor.
 */
import {
  BatchNorm2d,
  Conv2d,
  convertSyncBatchNorm,
  crossEntropy,
  currentProcessGroup,
  Flatten,
  GPT,
  initProcessGroup,
  Linear,
  MaxPool2d,
  type Module,
  ReLU,
  Sequential,
  Subset,
  TensorDataset,
  Trainer,
  type TrainerOptions,
} from "dtrain";
import { stateDigest } from "./_digest.ts";

const CASE = Deno.env.get("CASE") ?? "gpt";
const STEPS = Number(Deno.env.get("STEPS") ?? 50);
const SAVE_AT = Deno.env.get("SAVE_AT");
const CKPT_DIR = Deno.env.get("CKPT_DIR") ?? null;
const EXACT = Deno.env.get("EXACT") !== "0";
const pg = currentProcessGroup() ?? initProcessGroup();

/** A fixed pseudo-random value in [0, 1) for each integer. */
function hash01(i: number): number {
  let s = (i * 2654435761 + 0x9e3779b9) >>> 0;
  s = Math.imul(s ^ (s >>> 16), 0x45d9f3b) >>> 0;
  s = Math.imul(s ^ (s >>> 16), 0x45d9f3b) >>> 0;
  return ((s ^ (s >>> 16)) >>> 0) / 2 ** 32;
}

const checkpoint = {
  dir: CKPT_DIR,
  everyEpoch: false,
  everySteps: SAVE_AT ? Number(SAVE_AT) : null,
  resume: CKPT_DIR ? "auto" : "never",
  async: false,
};

function gptOptions(): TrainerOptions<Module> {
  const N = 512, T = 8, V = 16;
  const tokens = Int32Array.from({ length: N + T }, (_, i) => Math.floor(hash01(i) * V));
  const x = new Int32Array(N * T), y = new Int32Array(N * T);
  for (let i = 0; i < N; i++) {
    x.set(tokens.subarray(i, i + T), i * T);
    y.set(tokens.subarray(i + 1, i + T + 1), i * T);
  }
  return {
    model: () =>
      new GPT({ vocabSize: V, blockSize: T, nLayer: 2, nHead: 2, nEmbd: 16, dropout: 0.1 }),
    data: new TensorDataset({ data: x, sampleShape: [T] }, { data: y, sampleShape: [T] }),
    loss: (m, [x, y]) => (m as GPT).loss(x!, y!),
    config: {
      epochs: 4,
      maxSteps: STEPS,
      seed: 7,
      exact: EXACT,
      data: { globalBatchSize: 32, gradAccumulation: 2 },
      optim: { name: "adamw", lr: 3e-3 },
      precision: { autocast: (Deno.env.get("AUTOCAST") ?? "bf16") as "bf16" | "f16" },
      clipGradNorm: 1,
      checkpoint,
      logEvery: 1000,
    },
  };
}

function cnnOptions(): TrainerOptions<Module> {
  const N = 256, H = 8, CLASSES = 3;
  const images = Float32Array.from({ length: N * H * H }, (_, i) => hash01(i) * 2 - 1);
  const labels = Int32Array.from({ length: N }, (_, i) => {
    const px = images.subarray(i * H * H, (i + 1) * H * H);
    return (px[0]! + px[9]! > 0 ? 1 : 0) + (px[18]! > 0.5 ? 1 : 0);
  });
  return {
    model: () =>
      convertSyncBatchNorm(
        new Sequential(
          new Conv2d(1, 4, 3, { padding: 1 }),
          new BatchNorm2d(4),
          new ReLU(),
          new MaxPool2d(2),
          new Flatten(),
          new Linear(4 * 4 * 4, CLASSES),
        ),
        pg,
      ),
    data: new TensorDataset(
      { data: images, sampleShape: [1, H, H] },
      { data: labels, sampleShape: [] },
    ),
    loss: (m, [x, y]) => crossEntropy((m as Sequential).forward(x!), y!),
    config: {
      epochs: 4,
      maxSteps: STEPS,
      seed: 3,
      exact: EXACT,
      data: { globalBatchSize: 16 },
      optim: { name: "sgd", lr: 0.05, momentum: 0.9 },
      checkpoint,
      logEvery: 1000,
    },
  };
}

const opts = CASE === "gpt" ? gptOptions() : cnnOptions();
if (Deno.env.get("EVAL") === "1") {
  // An evaluation pass every 10 steps on 21 held-out samples (not a multiple of the shards, so
  // the ranks' shares differ), in eval mode under noGrad: it must leave training's bits alone.
  opts.evalData = new Subset(opts.data, Array.from({ length: 21 }, (_, i) => i));
  opts.evalStep = (m, batch) => ({ loss: opts.loss(m, batch).item() });
  opts.config = { ...opts.config, eval: { everySteps: 10, batchSize: 5 } };
}
const trainer = new Trainer({ ...opts, processGroup: pg });
const result = await trainer.fit();
console.log(JSON.stringify({
  case: CASE,
  rank: pg.rank,
  world: pg.size,
  exact: EXACT,
  steps: result.steps,
  resumedFrom: result.resumedFrom,
  evaluations: result.evaluations.length,
  digest: stateDigest(trainer.model, trainer.optimizer),
}));
