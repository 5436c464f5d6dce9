/**
 * A Trainer with clipping asked for (clipGradNorm 1.0) under the numerics
 * policy its first argument names: "default", or "no-clipping" (the config's
 * numerics.clipping false). For tests/train/numerics_record_test.ts.
 */
import { crossEntropy, Trainer } from "dtrain";
import { SEED, toyData, toyModel } from "../../../examples/broken/_toy.ts";

const policy = Deno.args[0] ?? "default";
if (policy !== "default" && policy !== "no-clipping") {
  throw new RangeError(`numerics_trainer.ts: policy must be default or no-clipping, got ${policy}`);
}
const trainer = new Trainer({
  model: toyModel,
  data: toyData(),
  loss: (model, [x, y]) => crossEntropy(model.forward(x!), y!),
  config: {
    epochs: 1,
    maxSteps: 3,
    seed: SEED,
    data: { globalBatchSize: 20 },
    optim: { name: "adamw", lr: 1e-2 },
    clipGradNorm: 1.0,
    numerics: policy === "no-clipping" ? { clipping: false } : {},
    checkpoint: { everyEpoch: false },
    logEvery: 1000,
  },
});
await trainer.fit();
