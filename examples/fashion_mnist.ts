/**
 * Fashion-MNIST classification with the Trainer (Debian package
 * dataset-fashion-mnist): an MLP 784-256-256-10, AdamW 1e-3, batch 128 per
 * rank, 3 epochs, test accuracy after every epoch — the recipe of
 * scripts/peers/fashion_mnist.py. `./dtrain --nproc 2 examples/fashion_mnist.ts`
 */
import {
  argmax,
  crossEntropy,
  getWorld,
  Linear,
  loadFashionMnist,
  noGrad,
  ReLU,
  scope,
  Sequential,
  Trainer,
} from "dtrain";

const epochs = Number(Deno.args[0] ?? 3);
const { train, test } = await loadFashionMnist();

/** Share of test images classified correctly. */
function accuracy(model: Sequential): number {
  let correct = 0;
  const batch = 1000;
  noGrad(() => {
    for (let start = 0; start < test.length; start += batch) {
      const idx = Int32Array.from(
        { length: Math.min(batch, test.length - start) },
        (_, i) => start + i,
      );
      correct += scope(() => {
        const [x, y] = test.getBatch(idx);
        const pred = argmax(model.forward(x!), -1).toArray() as Int32Array;
        const labels = y!.toArray() as Int32Array;
        return pred.reduce((n, p, i) => n + (p === labels[i] ? 1 : 0), 0);
      });
    }
  });
  return correct / test.length;
}

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
  evaluate: (model) => ({ "test accuracy": accuracy(model) }),
  config: {
    epochs,
    seed: 0,
    data: { globalBatchSize: 128 * getWorld().worldSize },
    optim: { name: "adamw", lr: 1e-3 },
    logEvery: 100,
  },
});
const result = await trainer.fit();
const final = result.evaluations.at(-1)?.["test accuracy"];
if (final !== undefined) console.log(`final test accuracy ${(100 * final).toFixed(2)}%`);
