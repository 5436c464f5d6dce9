/**
 * A single-process loop for the probe's tests: EPOCHS epochs of a
 * DataLoader over a DistributedSampler, one AdamW step per batch after
 * clipping to a tiny norm, and a checkpoint after every step in the folder
 * given as the first argument (keeping only the newest). Prints "batch" per
 * batch and "finished" at the end, so a test sees where the probe stopped it.
 */
import {
  AdamW,
  backward,
  CheckpointManager,
  clipGradNorm,
  crossEntropy,
  DataLoader,
  DistributedSampler,
  manualSeed,
  scope,
  tensorFile,
} from "dtrain";
import { EPOCHS, GLOBAL_BATCH, SEED, toyData, toyModel } from "../../../examples/broken/_toy.ts";

manualSeed(SEED);
const model = toyModel();
const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
const data = toyData();
const sampler = new DistributedSampler(data.length, { numReplicas: 1, rank: 0, seed: SEED });
const loader = new DataLoader(data, { batchSize: GLOBAL_BATCH, sampler });
const checkpoints = new CheckpointManager(Deno.args[0]!, { rank: 0, keepLast: 1, fsync: false });
let step = 0;
for (let epoch = 0; epoch < EPOCHS; epoch++) {
  sampler.setEpoch(epoch);
  for await (const { tensors: [x, y] } of loader) {
    console.log("batch");
    scope(() => {
      optimizer.zeroGrad();
      backward(crossEntropy(model.forward(x!), y!));
      clipGradNorm(model.parameters(), 1e-6); // DTRAIN_CHECK_PLAIN=1 turns this off
      optimizer.step();
    });
    x!.dispose();
    y!.dispose();
    step++;
    checkpoints.save({ step, files: [tensorFile("model", model.stateDict())], state: { step } });
  }
}
console.log("finished");
