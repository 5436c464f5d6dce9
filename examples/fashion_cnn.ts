/**
 * A small CNN on Fashion-MNIST in a loop of its own, the way PyTorch's DDP
 * tutorial writes it: two conv + batch-norm + ReLU + max-pool blocks and a
 * linear head, the batch norms converted to SyncBatchNorm (statistics of
 * every rank's batch together), DistributedDataParallel, a
 * DistributedSampler with setEpoch, AdamW at 2e-3 decaying to 0 along a
 * cosine, batch 64 per rank, 3 epochs, and the test accuracy after each
 * epoch computed on every rank's share of the test set and summed. The
 * recipe of scripts/peers/fashion_cnn.py.
 *
 *   ./dtrain --nproc 2 examples/fashion_cnn.ts [epochs]
 */
import {
  AdamW,
  argmax,
  BatchNorm2d,
  Conv2d,
  convertSyncBatchNorm,
  crossEntropy,
  DataLoader,
  DistributedDataParallel,
  DistributedSampler,
  Flatten,
  initProcessGroup,
  Linear,
  loadFashionMnist,
  LrScheduler,
  manualSeed,
  MaxPool2d,
  noGrad,
  ReLU,
  reshape,
  scope,
  Sequential,
  type Tensor,
  warmupCosineLr,
} from "dtrain";

const epochs = Number(Deno.args[0] ?? 3);
const batchPerRank = 64;
using pg = initProcessGroup();
const { train, test } = await loadFashionMnist();

manualSeed(0); // every rank builds the same initial weights (DDP checks, then broadcasts rank 0's)
const model = convertSyncBatchNorm(
  new Sequential(
    new Conv2d(1, 32, 3, { padding: 1 }),
    new BatchNorm2d(32),
    new ReLU(),
    new MaxPool2d(2),
    new Conv2d(32, 64, 3, { padding: 1 }),
    new BatchNorm2d(64),
    new ReLU(),
    new MaxPool2d(2),
    new Flatten(),
    new Linear(64 * 7 * 7, 10),
  ),
  pg,
);
const ddp = new DistributedDataParallel(model, pg);
const trainSampler = new DistributedSampler(train.length, {
  numReplicas: pg.size,
  rank: pg.rank,
  seed: 0,
});
const trainLoader = new DataLoader(train, { batchSize: batchPerRank, sampler: trainSampler });
const optimizer = new AdamW(ddp.parameters(), { lr: 2e-3 });
const totalSteps = epochs * trainLoader.batchesFor(trainSampler.numSamples);
const schedule = new LrScheduler(
  optimizer,
  warmupCosineLr({ maxLr: 2e-3, warmupSteps: 0, totalSteps }),
);
// Each rank scores its share of the test set and the counts are summed (10000 images split evenly for
// 2, 4, 5 or 8 ranks; for other world sizes DistributedSampler repeats a few to even the shares).
const testLoader = new DataLoader(test, {
  batchSize: 500,
  sampler: new DistributedSampler(test.length, {
    numReplicas: pg.size,
    rank: pg.rank,
    shuffle: false,
  }),
});
const images = (x: Tensor) => reshape(x, [x.shape[0]!, 1, 28, 28]);

for (let epoch = 0; epoch < epochs; epoch++) {
  trainSampler.setEpoch(epoch);
  model.train();
  const t0 = performance.now();
  let lossSum = 0, samples = 0;
  for await (const { tensors: [x, y] } of trainLoader) {
    lossSum += scope(() => {
      optimizer.zeroGrad();
      const loss = crossEntropy(ddp.forward(images(x!)), y!);
      // SyncBatchNorm's statistics and DDP's gradient buckets all-reduce here; on return the
      // gradients are the mean over ranks
      ddp.backward(loss);
      optimizer.step();
      schedule.step();
      return loss.item() * x!.shape[0]!;
    });
    samples += x!.shape[0]!;
    x!.dispose();
    y!.dispose();
  }
  const seconds = (performance.now() - t0) / 1000;
  model.eval(); // batch norms use their running statistics: no collectives
  const counts = new Float64Array([0, 0, lossSum, samples]); // correct, seen, train loss sum, train samples
  for await (const { tensors: [x, y] } of testLoader) {
    noGrad(() =>
      scope(() => {
        const pred = argmax(model.forward(images(x!)), 1).toArray() as Int32Array;
        const labels = y!.toArray() as Int32Array;
        counts[0] += pred.reduce((n, p, i) => n + (p === labels[i] ? 1 : 0), 0);
        counts[1] += labels.length;
      })
    );
    x!.dispose();
    y!.dispose();
  }
  pg.allReduce(counts, "sum");
  if (pg.rank === 0) {
    console.log(JSON.stringify({
      epoch,
      train_loss: +(counts[2]! / counts[3]!).toFixed(4),
      test_accuracy: +(counts[0]! / counts[1]!).toFixed(4),
      train_seconds: +seconds.toFixed(1),
      samples_per_s: Math.round(counts[3]! / seconds),
    }));
  }
}
ddp.close();
