/**
 * BROKEN ON PURPOSE (for `dtrain check`): a Trainer script whose loss is
 * summed over the batch (PyTorch's reduction="sum") instead of averaged.
 * Alone it trains; on N ranks each rank sums only B/N samples, so the loss
 * and the gradients DDP averages are 1/N of the single process's. The
 * check's gradient stage reports the 1/N ratio and names the summed loss.
 */
import { crossEntropy, scale, Trainer } from "dtrain";
import { EPOCHS, GLOBAL_BATCH, SEED, toyData, toyModel } from "./_toy.ts";

const trainer = new Trainer({
  model: toyModel,
  data: toyData(),
  // BUG: mean loss times the batch size = the summed loss.
  loss: (model, [x, y]) => scale(crossEntropy(model.forward(x!), y!), x!.shape[0]!),
  config: {
    epochs: EPOCHS,
    seed: SEED,
    data: { globalBatchSize: GLOBAL_BATCH },
    optim: { name: "adamw", lr: 1e-2 },
    logEvery: 1000,
  },
});
await trainer.fit();
