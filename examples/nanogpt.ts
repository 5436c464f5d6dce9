/**
 * nanoGPT's train.py for dtrain: a GPT trained on token files (nanoGPT's
 * train.bin/val.bin, llm.c's .bin, .npy, or shard folders) read window by
 * window, with nanoGPT's knobs: AdamW with weight decay on 2-D parameters
 * only, linear warmup then cosine decay, gradient clipping, gradient
 * accumulation, bf16 autocast, an eval on val every k steps, and checkpoints
 * that a run resumes from. scripts/peers/nanogpt.py is its PyTorch twin.
 *
 *   ./dtrain prepare --tokenizer gpt2 input.txt data/shakespeare
 *   ./dtrain --nproc 2 examples/nanogpt.ts --data data/shakespeare --steps 500
 *   ./dtrain exec examples/nanogpt_sample.ts --out out-nanogpt --start "ROMEO:"
 *
 * Options (defaults in brackets): --data DIR, --steps N [500], --batch B [12],
 * --block T [64], --layers [4], --heads [4], --width [128], --vocab [from
 * DIR/meta.json: 50304 for gpt2, 256 for bytes; else 50304], --bias 0|1 [0],
 * --lr [6e-4], --min-lr [lr/10], --warmup [100, at most decay-steps - 1],
 * --decay-steps [steps],
 * --weight-decay [0.1], --beta2 [0.95], --grad-clip [1.0], --accum [1],
 * --dtype f32|bf16 [f32], --eval-every [100], --eval-iters [20], --seed
 * [1337], --out DIR [out-nanogpt], --resume (continue from --out's latest
 * checkpoint), --print-losses (a LOSSES JSON line at the end, for tests).
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import {
  AdamW,
  autocast,
  CheckpointManager,
  clipGradNorm,
  DistributedDataParallel,
  GPT,
  initProcessGroup,
  manualSeed,
  noGrad,
  optimizerFile,
  RandomWindows,
  scale,
  scope,
  tensorFile,
  TokenStream,
  warmupCosineLr,
} from "dtrain";

const { values: o } = parseArgs({
  args: Deno.args,
  options: {
    data: { type: "string" },
    steps: { type: "string", default: "500" },
    batch: { type: "string", default: "12" },
    block: { type: "string", default: "64" },
    layers: { type: "string", default: "4" },
    heads: { type: "string", default: "4" },
    width: { type: "string", default: "128" },
    vocab: { type: "string" },
    bias: { type: "string", default: "0" },
    lr: { type: "string", default: "6e-4" },
    "min-lr": { type: "string" },
    warmup: { type: "string" },
    "decay-steps": { type: "string" },
    "weight-decay": { type: "string", default: "0.1" },
    beta2: { type: "string", default: "0.95" },
    "grad-clip": { type: "string", default: "1.0" },
    accum: { type: "string", default: "1" },
    dtype: { type: "string", default: "f32" },
    "eval-every": { type: "string", default: "100" },
    "eval-iters": { type: "string", default: "20" },
    seed: { type: "string", default: "1337" },
    out: { type: "string", default: "out-nanogpt" },
    resume: { type: "boolean", default: false },
    "print-losses": { type: "boolean", default: false },
  },
});

function num(name: keyof typeof o, value = o[name]): number {
  const v = Number(value);
  if (typeof value !== "string" || !Number.isFinite(v)) {
    throw new RangeError(`--${name} must be a number, got ${JSON.stringify(value)}`);
  }
  return v;
}
if (!o.data) throw new RangeError("--data DIR is required (a folder with train.bin and val.bin)");
if (o.dtype !== "f32" && o.dtype !== "bf16") throw new RangeError("--dtype must be f32 or bf16");

/** The vocabulary: --vocab, else DIR/meta.json's tokenizer (as `dtrain prepare` writes it). */
function vocabSize(): number {
  if (o.vocab !== undefined) return num("vocab");
  try {
    const meta = JSON.parse(Deno.readTextFileSync(join(o.data!, "meta.json")));
    return meta.tokenizer === "bytes" ? 256 : 50304; // nanoGPT pads GPT-2's 50257 to 50304
  } catch {
    return 50304;
  }
}

const cfg = {
  steps: num("steps"),
  batch: num("batch"),
  block: num("block"),
  nLayer: num("layers"),
  nHead: num("heads"),
  nEmbd: num("width"),
  vocab: vocabSize(),
  bias: o.bias === "1",
  lr: num("lr"),
  minLr: o["min-lr"] === undefined ? num("lr") / 10 : num("min-lr"),
  // nanoGPT's 100 warmup steps, fewer in a run too short to decay after them
  warmup: o.warmup === undefined
    ? Math.min(
      100,
      Math.max(0, (o["decay-steps"] === undefined ? num("steps") : num("decay-steps")) - 1),
    )
    : num("warmup"),
  decaySteps: o["decay-steps"] === undefined ? num("steps") : num("decay-steps"),
  weightDecay: num("weight-decay"),
  beta2: num("beta2"),
  gradClip: num("grad-clip"),
  accum: num("accum"),
  dtype: o.dtype,
  evalEvery: num("eval-every"),
  evalIters: num("eval-iters"),
  seed: num("seed"),
};

const pg = initProcessGroup();
const rank0 = pg.rank === 0;
const say = (line: string) => rank0 && console.log(line);
using train = TokenStream.openSplit(o.data, "train");
using val = TokenStream.openSplit(o.data, "val");
const trainWindows = new RandomWindows(train, {
  block: cfg.block,
  batch: cfg.batch,
  seed: cfg.seed,
  rank: pg.rank,
});
// The eval draws the same windows every time: a fixed sample of val.bin.
const valWindows = new RandomWindows(val, {
  block: cfg.block,
  batch: cfg.batch,
  seed: cfg.seed + 1,
  rank: 0,
});

manualSeed(cfg.seed);
const model = new GPT({
  vocabSize: cfg.vocab,
  blockSize: cfg.block,
  nLayer: cfg.nLayer,
  nHead: cfg.nHead,
  nEmbd: cfg.nEmbd,
  bias: cfg.bias,
  maskBuffer: false,
});
const ddp = new DistributedDataParallel(model, pg);
// nanoGPT's configure_optimizers: weight decay on matrices and embeddings, not on biases and norms
const params = ddp.parameters();
const optimizer = new AdamW([
  { params: params.filter((p) => p.shape.length >= 2), weightDecay: cfg.weightDecay },
  { params: params.filter((p) => p.shape.length < 2), weightDecay: 0 },
], { lr: cfg.lr, beta1: 0.9, beta2: cfg.beta2 });
const lrAt = warmupCosineLr({
  maxLr: cfg.lr,
  minLr: cfg.minLr,
  warmupSteps: cfg.warmup,
  totalSteps: cfg.decaySteps,
});

const checkpoints = new CheckpointManager(join(o.out, "checkpoints"), { rank: pg.rank });
let start = 0;
if (o.resume) {
  const ck = checkpoints.loadLatest();
  if (!ck) throw new Error(`--resume: ${o.out}/checkpoints holds no checkpoint`);
  model.loadStateDict(ck);
  optimizer.loadStateDict(ck);
  start = ck.step;
  say(`resuming from step ${start} (${ck.dir})`);
}

function save(step: number): void {
  checkpoints.save({
    step,
    files: [tensorFile("model", ddp.stateDict()), optimizerFile(optimizer)],
    state: { config: cfg, data: o.data! },
  });
}

/** Mean loss over eval-iters fixed val batches (every rank computes it: no rank waits). */
function evalLoss(): number {
  return noGrad(() => {
    let sum = 0;
    for (let k = 0; k < cfg.evalIters; k++) {
      sum += scope(() => {
        const [x, y] = valWindows.batch(k);
        return autocast(cfg.dtype as "f32" | "bf16", () => model.loss(x!, y!)).item();
      });
    }
    return sum / cfg.evalIters;
  });
}

const losses: number[] = [];
try {
  let t0 = performance.now();
  for (let step = start; step < cfg.steps; step++) {
    if (step % cfg.evalEvery === 0 && step > start) {
      say(`step ${step}: val loss ${evalLoss().toFixed(4)}`);
      save(step);
    }
    const lr = lrAt(step);
    optimizer.lr = lr;
    optimizer.zeroGrad();
    let loss = 0;
    for (let micro = 0; micro < cfg.accum; micro++) {
      const last = micro === cfg.accum - 1;
      loss += scope(() => {
        // windows keyed by the micro step: a resumed run draws the interrupted run's batches
        const [x, y] = trainWindows.batch(step * cfg.accum + micro);
        const l = autocast(cfg.dtype as "f32" | "bf16", () => model.loss(x!, y!));
        const scaled = scale(l, 1 / cfg.accum);
        if (last) ddp.backward(scaled);
        else ddp.noSync(() => ddp.backward(scaled));
        return scaled.item();
      });
    }
    ddp.finishGradSync();
    if (cfg.gradClip > 0) clipGradNorm(params, cfg.gradClip);
    optimizer.step();
    losses.push(loss);
    if (step % 10 === 0 || step === cfg.steps - 1) {
      const ms = (performance.now() - t0) / (step % 10 === 0 ? 1 : (step % 10));
      say(`iter ${step}: loss ${loss.toFixed(4)}, lr ${lr.toExponential(2)}, ${ms.toFixed(0)} ms`);
      t0 = performance.now();
    }
  }
  say(`step ${cfg.steps}: val loss ${evalLoss().toFixed(4)}`);
  save(cfg.steps);
  checkpoints.close();
  if (o["print-losses"]) say(`LOSSES ${JSON.stringify(losses)}`);
  pg.barrier("done");
} finally {
  ddp.close();
  pg.close();
}
