/**
 * BROKEN ON PURPOSE (for `dtrain check`): each rank keeps only "its" rows of
 * the 201-row file (rows rank, rank + N, …) and then also hands them to a
 * DistributedSampler — the data is sharded twice. The ranks' datasets
 * differ in content and, since 201 is odd, in length (101 vs 100 on two
 * ranks), so most samples are never seen and the ranks run different
 * numbers of steps per epoch. The check's sampler stage reports the lengths.
 */
import {
  AdamW,
  crossEntropy,
  DataLoader,
  DistributedDataParallel,
  DistributedSampler,
  initProcessGroup,
  manualSeed,
  scope,
  TensorDataset,
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
} from "./_toy.ts";

const ROWS = 201;

/** Rows rank, rank + size, … of the toy set (what a per-rank shard of a file holds). */
function shardOf(rank: number, size: number): TensorDataset {
  const mine = Int32Array.from(
    { length: Math.ceil((ROWS - rank) / size) },
    (_, i) => rank + i * size,
  );
  const [x, y] = toyData(ROWS).getBatch(mine);
  return new TensorDataset(
    { data: x!.toArray() as Float32Array, sampleShape: [FEATURES] },
    { data: y!.toArray() as Int32Array, sampleShape: [] },
  );
}

const pg = initProcessGroup();
manualSeed(SEED);
const model = toyModel();
const ddp = new DistributedDataParallel(model, pg);
const optimizer = new AdamW(ddp.parameters(), { lr: 1e-2 });
const data = shardOf(pg.rank, pg.size); // BUG: the sampler below shards again; every rank needs the full set
const sampler = new DistributedSampler(data.length, {
  numReplicas: pg.size,
  rank: pg.rank,
  seed: SEED,
});
const loader = new DataLoader(data, { batchSize: GLOBAL_BATCH / pg.size, sampler });
const checkpoints = openCheckpoints(pg.rank);
const parts = { model, optimizer, loader, batchesPerEpoch: loader.batchesFor(sampler.length) };
let { step, epoch: start } = resumeTraining(checkpoints, parts);

try {
  for (let epoch = start; epoch < EPOCHS; epoch++) {
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
  }
} finally {
  pg.close();
}
