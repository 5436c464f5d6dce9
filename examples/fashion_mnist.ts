/**
 * Fashion-MNIST classification with the Trainer (Debian package
 * dataset-fashion-mnist): an MLP 784-256-256-10, AdamW 1e-3, batch 128 per
 * rank, 3 epochs, test accuracy after every epoch (each rank evaluates its
 * share of the test set) — the recipe of
 * scripts/peers/fashion_mnist.py. `./dtrain --nproc 2 examples/fashion_mnist.ts`
 */
import {
  argmax,
  crossEntropy,
  getWorld,
  Linear,
  loadFashionMnist,
  ReLU,
  Sequential,
  Trainer,
} from "dtrain";

const epochs = Number(Deno.args[0] ?? 3);
const { train, test } = await loadFashionMnist();

const trainer = new Trainer({
  model: () =>
    new Sequential(
      new Linear(784, 256),
      new ReLU(),
      new Linear(256, 256),
      new ReLU(),
      new Linear(256, 10),
    ),
  data: train,
  loss: (model, [x, y]) => crossEntropy(model.forward(x!), y!),
  // Every rank evaluates its share of the test set; the Trainer averages over all of it.
  evalData: test,
  evalStep: (model, [x, y]) => {
    const pred = argmax(model.forward(x!), 1).toArray() as Int32Array;
    const labels = y!.toArray() as Int32Array;
    return {
      "test accuracy": pred.reduce((n, p, i) => n + (p === labels[i] ? 1 : 0), 0) / labels.length,
    };
  },
  config: {
    epochs,
    seed: 0,
    data: { globalBatchSize: 128 * getWorld().worldSize },
    optim: { name: "adamw", lr: 1e-3 },
    eval: { batchSize: 1000 },
    logEvery: 100,
  },
});
const result = await trainer.fit();
const final = result.evaluations.at(-1)?.["test accuracy"];
if (final !== undefined) console.log(`final test accuracy ${(100 * final).toFixed(2)}%`);
