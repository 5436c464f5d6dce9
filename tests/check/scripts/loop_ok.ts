/**
 * A correct hand-written DDP loop for `dtrain check`'s tests: the same
 * seed on every rank, DistributedDataParallel, a DistributedSampler with
 * setEpoch each epoch, B/N samples per rank, a mean loss, AdamW, and a
 * rank-0 checkpoint every CHECKPOINT_EVERY steps that a restart resumes from.
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
} from "dtrain";
import {
  CHECKPOINT_EVERY,
  EPOCHS,
  GLOBAL_BATCH,
  openCheckpoints,
  resumeTraining,
  saveTraining,
  SEED,
  toyData,
  toyModel,
} from "../../../examples/broken/_toy.ts";

const pg = initProcessGroup();
manualSeed(SEED);
const model = toyModel();
const ddp = new DistributedDataParallel(model, pg);
const optimizer = new AdamW(ddp.parameters(), { lr: 1e-2 });
const data = toyData();
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
