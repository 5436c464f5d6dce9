/**
 * Correct hand-written DDP loops for `dtrain check`'s tests, each the loop
 * of loop_ok.ts plus what PyTorch ports do (the first argument picks one):
 *   dropout         the model has Dropout layers (no RNG state saved: as most ports)
 *   setup-pass      setup goes over the sampler once (counting it) and peeks
 *                   at a batch before each epoch's setEpoch, as the DDP tutorial does
 *   per-rank-batch  the tutorial's batch size per rank (10), whatever the world size
 *   eval            an evaluation on every rank after each epoch: a DistributedSampler
 *                   over held-out data under noGrad, reduced over the ranks
 */
import {
  AdamW,
  argmax,
  crossEntropy,
  DataLoader,
  DistributedDataParallel,
  DistributedSampler,
  Dropout,
  initProcessGroup,
  Linear,
  manualSeed,
  noGrad,
  ReLU,
  scope,
  Sequential,
} from "dtrain";
import {
  CHECKPOINT_EVERY,
  EPOCHS,
  FEATURES,
  GLOBAL_BATCH,
  openCheckpoints,
  resumeTraining,
  saveTraining,
  SEED,
  toyData,
  toyModel,
} from "../../../examples/broken/_toy.ts";

const mode = Deno.args[0] ?? "";
if (!["dropout", "setup-pass", "per-rank-batch", "eval"].includes(mode)) {
  throw new Error(`unknown mode "${mode}"`);
}
const pg = initProcessGroup();
manualSeed(SEED);
const model = mode === "dropout"
  ? new Sequential(
    new Linear(FEATURES, 16),
    new ReLU(),
    new Dropout(0.3),
    new Linear(16, 16),
    new ReLU(),
    new Dropout(0.3),
    new Linear(16, 2),
  )
  : toyModel();
const ddp = new DistributedDataParallel(model, pg);
const optimizer = new AdamW(ddp.parameters(), { lr: 1e-2 });
const data = toyData();
const sampler = new DistributedSampler(data.length, {
  numReplicas: pg.size,
  rank: pg.rank,
  seed: SEED,
});
const perRank = mode === "per-rank-batch" ? GLOBAL_BATCH / 2 : GLOBAL_BATCH / pg.size;
const loader = new DataLoader(data, { batchSize: perRank, sampler });
const checkpoints = openCheckpoints(pg.rank);
const parts = { model, optimizer, loader, batchesPerEpoch: loader.batchesFor(sampler.length) };
let { step, epoch: start } = resumeTraining(checkpoints, parts);

if (mode === "setup-pass") {
  let n = 0;
  for (const _ of sampler) n++; // e.g. to size a progress bar
  if (n !== sampler.length) throw new Error("the sampler's length is wrong");
}

const held = toyData(60);
const heldSampler = new DistributedSampler(held.length, {
  numReplicas: pg.size,
  rank: pg.rank,
  shuffle: false,
});
const heldLoader = new DataLoader(held, { batchSize: 16, sampler: heldSampler });

async function evaluate(): Promise<number> {
  model.eval();
  const counts = await noGrad(async () => {
    let correct = 0, seen = 0;
    for await (const { tensors: [x, y] } of heldLoader) {
      scope(() => {
        const pred = argmax(ddp.forward(x!), 1).toArray() as Int32Array;
        const labels = y!.toArray() as Int32Array;
        correct += pred.reduce((a, p, i) => a + (p === labels[i] ? 1 : 0), 0);
        seen += labels.length;
      });
      x!.dispose();
      y!.dispose();
    }
    return Float64Array.of(correct, seen);
  });
  model.train();
  pg.allReduce(counts, "sum");
  return counts[0]! / counts[1]!;
}

try {
  for (let epoch = start; epoch < EPOCHS; epoch++) {
    if (mode === "setup-pass") {
      // The DDP tutorial: b_sz = len(next(iter(train_data))[0]), before set_epoch.
      const it = loader[Symbol.asyncIterator]();
      const first = await it.next();
      for (const t of first.value?.tensors ?? []) t.dispose();
      await it.return(undefined);
    }
    sampler.setEpoch(epoch);
    for await (const { tensors: [x, y] } of loader) {
      scope(() => {
        optimizer.zeroGrad();
        ddp.backward(crossEntropy(ddp.forward(x!), y!));
        optimizer.step();
      });
      x!.dispose();
      y!.dispose();
      if (++step % CHECKPOINT_EVERY === 0) saveTraining(checkpoints, step, parts);
    }
    if (mode === "eval") {
      const accuracy = await evaluate();
      if (pg.rank === 0) console.log(`epoch ${epoch}: held-out accuracy ${accuracy.toFixed(3)}`);
    }
  }
} finally {
  pg.close();
}
