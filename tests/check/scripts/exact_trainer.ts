/**
 * A Trainer script for `dtrain check --exact`'s tests, which says nothing of
 * exact mode (the check switches it on through the Trainer's config): the
 * toy set and MLP, global batch 16, AdamW, clipping, two epochs.
 */
import { crossEntropy, Trainer } from "dtrain";
import { SEED, toyData, toyModel } from "../../../examples/broken/_toy.ts";

const trainer = new Trainer({
  model: toyModel,
  data: toyData(),
  loss: (model, [x, y]) => crossEntropy(model.forward(x!), y!),
  config: {
    epochs: 2,
    seed: SEED,
    data: { globalBatchSize: 16 },
    optim: { name: "adamw", lr: 1e-2 },
    clipGradNorm: 1.0,
    logEvery: 1000,
  },
});
await trainer.fit();
