/**
 * A correct Trainer script for `dtrain check`'s tests: the toy set and
 * model, global batch 20, AdamW, clipping (which the check turns off), three
 * epochs; the Trainer seeds, shards, averages, checkpoints and resumes.
 * SHARD=optimizer|gradients runs it with a sharded optimizer (ZeRO).
 */
import { crossEntropy, Trainer } from "dtrain";
import { EPOCHS, GLOBAL_BATCH, SEED, toyData, toyModel } from "../../../examples/broken/_toy.ts";

const trainer = new Trainer({
  model: toyModel,
  data: toyData(),
  loss: (model, [x, y]) => crossEntropy(model.forward(x!), y!),
  config: {
    epochs: EPOCHS,
    seed: SEED,
    data: { globalBatchSize: GLOBAL_BATCH },
    optim: { name: "adamw", lr: 1e-2 },
    clipGradNorm: 1.0,
    logEvery: 1000,
    ...(Deno.env.get("SHARD")
      ? { ddp: { shard: Deno.env.get("SHARD") as "optimizer" | "gradients" } }
      : {}),
  },
});
await trainer.fit();
