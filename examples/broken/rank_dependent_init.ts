/**
 * BROKEN ON PURPOSE (for `dtrain check`): a loop that averages gradients
 * itself with pg.allReduce instead of using DistributedDataParallel, and
 * seeds each rank with seed + rank before building the model. Nothing ever
 * copies rank 0's weights to the others, so the ranks train different
 * models on averaged gradients, and only rank 0's survives a checkpoint.
 * The check's gradient stage finds the ranks' parameters differing before
 * the first update; its state stage finds rank 1 changed by a resume.
 */
import {
  AdamW,
  backward,
  crossEntropy,
  DataLoader,
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
} from "./_toy.ts";

const pg = initProcessGroup();
manualSeed(SEED + pg.rank); // BUG: a different initialisation on every rank, never broadcast
const model = toyModel();
const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
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
        backward(crossEntropy(model.forward(x!), y!));
        for (const p of model.parameters()) {
          pg.allReduce({ ptr: p.grad!.ptr, count: p.grad!.numel, dtype: "f32" }, "avg");
        }
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
