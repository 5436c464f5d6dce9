/**
 * The workloads of scripts/bench_exact.ts: one DDP loop run in normal or in
 * exact mode (DDP's `exact` option), printing rank 0's steady-state rate as a
 * BENCH line. Both workloads feed the ranks torch's DistributedSampler rows
 * of one global batch (rank r takes positions r, r + W, …), so the same
 * samples are trained at every world size:
 * - toy: examples/toy_ddp.ts's model and data (Linear 128→256→2 on 10,000
 *   synthetic samples), 64 samples per rank, AdamW, clipping; samples/s over
 *   steps 11..end;
 * - gpt: GPT-mini (4 layers, 4 heads, width 128, block 128) on the fortunes
 *   corpus, 16 windows per rank, AdamW 3e-4; tokens/s over steps 11..end.
 *
 *   ./dtrain --nproc 2 scripts/exact_workload.ts --workload toy|gpt [--exact S] [--steps N]
 */
import { parseArgs } from "node:util";
import {
  AdamW,
  CharWindows,
  clipGradNorm,
  crossEntropy,
  DistributedDataParallel,
  GPT,
  initProcessGroup,
  Linear,
  loadCharCorpus,
  manualSeed,
  ReLU,
  scope,
  Sequential,
  type Tensor,
  TorchGenerator,
} from "dtrain";
import { syntheticDataset } from "../examples/toy_classifier.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    workload: { type: "string" },
    exact: { type: "string" },
    steps: { type: "string" },
  },
});
const workload = values.workload;
if (workload !== "toy" && workload !== "gpt") {
  throw new RangeError(`--workload must be toy or gpt, got ${JSON.stringify(workload)}`);
}
const exact = values.exact === undefined ? false : Number(values.exact);
const steps = Number(values.steps ?? (workload === "toy" ? 300 : 60));
if (!Number.isSafeInteger(steps) || steps <= 10) {
  throw new RangeError(
    `--steps must be an integer > 10 (steps 11..N are timed), got ${values.steps}`,
  );
}

const pg = initProcessGroup();
const W = pg.size;
const gen = manualSeed(workload === "toy" ? 0 : 1337);

/** One step's batch of this rank: rows r, r + W, … of a global batch drawn the same on every rank. */
type Batch = () => Tensor[];
let model: Sequential | GPT;
let batchOf: (step: number) => Batch;
let lossOf: (batch: Tensor[]) => Tensor;
let unitsPerStep: number;
let unit: string;
if (workload === "toy") {
  const PER_RANK = 64;
  const data = syntheticDataset(10_000, 128, gen);
  model = new Sequential(new Linear(128, 256), new ReLU(), new Linear(256, 2));
  const order = new TorchGenerator(42).randperm(data.length);
  batchOf = (step) => () => {
    const start = (step * PER_RANK * W) % (data.length - PER_RANK * W);
    const rows = Int32Array.from({ length: PER_RANK }, (_, j) => order[start + pg.rank + W * j]!);
    return data.getBatch(rows);
  };
  const m = model;
  lossOf = ([x, y]) => crossEntropy(m.forward(x!), y!);
  unitsPerStep = PER_RANK * W;
  unit = "samples_per_s";
} else {
  const PER_RANK = 16, BLOCK = 128;
  const corpus = loadCharCorpus();
  const train = new CharWindows(corpus.train, BLOCK);
  model = new GPT({
    vocabSize: 256,
    blockSize: BLOCK,
    nLayer: 4,
    nHead: 4,
    nEmbd: 128,
    maskBuffer: false,
  });
  batchOf = (step) => () => {
    const all = train.randomOffsets(new TorchGenerator(1000 + step), PER_RANK * W);
    return train.getBatch(Int32Array.from({ length: PER_RANK }, (_, j) => all[pg.rank + W * j]!));
  };
  const m = model;
  lossOf = ([x, y]) => m.loss(x!, y!);
  unitsPerStep = PER_RANK * W * BLOCK;
  unit = "tokens_per_s";
}

const ddp = new DistributedDataParallel(model, pg, { exact });
const optimizer = new AdamW(ddp.parameters(), { lr: workload === "toy" ? 1e-3 : 3e-4 });
let tWarm = performance.now();
for (let step = 1; step <= steps; step++) {
  scope(() => {
    const batch = batchOf(step)();
    optimizer.zeroGrad();
    ddp.backward(lossOf(batch));
    if (workload === "toy") clipGradNorm(ddp.parameters(), 1.0);
    optimizer.step();
  });
  if (step === 10) tWarm = performance.now();
}
const rate = ((steps - 10) * unitsPerStep) / ((performance.now() - tWarm) / 1000);
if (pg.rank === 0) {
  console.log(`BENCH ${JSON.stringify({ workload, world: W, exact, steps, [unit]: rate })}`);
}
ddp.close();
pg.close();
