/**
 * PyTorch's DDP tutorial (pytorch/examples, distributed/ddp-tutorial-series
 * multigpu.py) ported line for line, on Fashion-MNIST with an MLP: a batch
 * size per rank, the tutorial's peek at the first batch, DistributedSampler
 * with set_epoch, SGD, a checkpoint every `saveEvery` epochs — plus what a
 * loop of one's own gets from dtrain: a RunLog (metrics.jsonl, config.json,
 * data_order.jsonl, TensorBoard), an evaluation on every rank under noGrad
 * reduced over the ranks, a resume from the latest checkpoint, and a graceful
 * stop: on Ctrl-C or SIGTERM (a preemption) every rank finishes its step,
 * rank 0 saves, and the run exits 0 within the launcher's --grace; the next
 * launch resumes at the step where it stopped.
 *
 *   ./dtrain --nproc 2 examples/ddp_tutorial.ts [epochs=3] [batchSize=32] [--limit N]
 *
 * `--limit N` trains on the first N training and N/4 test images (tests).
 */
import {
  argmax,
  CheckpointManager,
  crossEntropy,
  DataLoader,
  type Dataset,
  DistributedDataParallel,
  DistributedSampler,
  getRngState,
  getWorld,
  initProcessGroup,
  Linear,
  loadFashionMnist,
  manualSeed,
  noGrad,
  optimizerFile,
  type ProcessGroup,
  ReLU,
  type RngState,
  RunLog,
  scope,
  Sequential,
  setRngState,
  SGD,
  stopRequested,
  Subset,
  tensorFile,
} from "dtrain";

const args = Deno.args.filter((a, i) => !a.startsWith("--") && Deno.args[i - 1] !== "--limit");
const totalEpochs = Number(args[0] ?? 3);
const batchSize = Number(args[1] ?? 32); // per rank, as in the tutorial
const limitAt = Deno.args.indexOf("--limit");
const limit = limitAt >= 0 ? Number(Deno.args[limitAt + 1]) : null;
const saveEvery = 1;
const lr = 1e-2;

function firstN(ds: Dataset, n: number | null): Dataset {
  return n === null ? ds : new Subset(ds, Int32Array.from({ length: n }, (_, i) => i));
}

class Trainer {
  readonly ddp: DistributedDataParallel<Sequential>;

  constructor(
    readonly model: Sequential,
    readonly trainData: DataLoader,
    readonly testData: DataLoader,
    readonly optimizer: SGD,
    readonly pg: ProcessGroup,
    readonly log: RunLog,
    readonly checkpoints: CheckpointManager,
    readonly epochsRun: number,
    /** batches of epoch `epochsRun` a stopped run already trained on */
    readonly batchesRun = 0,
  ) {
    this.ddp = new DistributedDataParallel(model, pg);
  }

  runBatch(
    source: Parameters<typeof crossEntropy>[0],
    targets: Parameters<typeof crossEntropy>[1],
  ) {
    return scope(() => {
      this.optimizer.zeroGrad();
      const loss = crossEntropy(this.ddp.forward(source), targets);
      // loss.backward(): each bucket's allReduce starts when it is complete, and every one is
      // done when it returns: the gradients are the mean over ranks
      this.ddp.backward(loss);
      this.optimizer.step();
      return loss.item();
    });
  }

  /** Trains one epoch from batch `skip`; returns the batches done when a stop was requested, else null. */
  async runEpoch(epoch: number, skip = 0): Promise<number | null> {
    const it = this.trainData[Symbol.asyncIterator]();
    const first = (await it.next()).value; // b_sz = len(next(iter(self.train_data))[0])
    const bSz = first?.tensors[0]?.shape[0] ?? 0;
    for (const t of first?.tensors ?? []) t.dispose();
    await it.return(undefined);
    const sampler = this.trainData.sampler as DistributedSampler;
    console.log(
      `[rank ${this.pg.rank}] Epoch ${epoch} | Batchsize: ${bSz} | Steps: ${
        this.trainData.batchesFor(sampler.length)
      }`,
    );
    sampler.setEpoch(epoch);
    this.log.epoch(epoch);
    let batch = 0;
    for await (const { tensors: [source, targets], waitMs } of this.trainData) {
      if (batch++ < skip) { // trained before the stop: the same order, since set_epoch(epoch)
        source!.dispose();
        targets!.dispose();
        continue;
      }
      const loss = this.runBatch(source!, targets!);
      this.log.step({ loss, samples: source!.shape[0]!, dataWaitMs: waitMs });
      source!.dispose();
      targets!.dispose();
      // Ctrl-C or SIGTERM on any rank: every rank learns it here, at the same step.
      if (await stopRequested(this.pg)) return batch;
    }
    return null;
  }

  /** Test accuracy and loss over every rank's share of the test set. */
  async evaluate(): Promise<void> {
    this.model.eval();
    const { correct, lossSum, seen } = await noGrad(async () => {
      let correct = 0, lossSum = 0, seen = 0;
      for await (const { tensors: [x, y] } of this.testData) {
        scope(() => {
          const logits = this.model.forward(x!);
          const pred = argmax(logits, 1).toArray() as Int32Array;
          const labels = y!.toArray() as Int32Array;
          correct += pred.reduce((n, p, i) => n + (p === labels[i] ? 1 : 0), 0);
          lossSum += crossEntropy(logits, y!).item() * labels.length;
          seen += labels.length;
        });
        x!.dispose();
        y!.dispose();
      }
      return { correct, lossSum, seen };
    });
    this.model.train();
    this.log.eval(
      { "test accuracy": correct / seen, "test loss": lossSum / seen },
      { weight: seen },
    );
  }

  /** Saves after `epoch`, or inside it after `batchesRun` batches (a stop). */
  saveCheckpoint(epoch: number, batchesRun: number | null = null): void {
    const rng = [getRngState(this.model)]; // rank 0's: every rank draws alike here
    this.checkpoints.save({
      step: this.log.stepCount,
      files: [tensorFile("model", this.model.stateDict()), optimizerFile(this.optimizer)],
      state: batchesRun === null
        ? { epochsRun: epoch + 1, batchesRun: 0, rng }
        : { epochsRun: epoch, batchesRun, rng },
    });
    this.log.print(`Epoch ${epoch} | Training checkpoint saved`);
  }

  async train(maxEpochs: number): Promise<void> {
    for (let epoch = this.epochsRun; epoch < maxEpochs; epoch++) {
      const stoppedAt = await this.runEpoch(epoch, epoch === this.epochsRun ? this.batchesRun : 0);
      if (stoppedAt !== null) {
        this.saveCheckpoint(epoch, stoppedAt);
        await this.checkpoints.wait(); // durable before the grace period ends
        this.log.print(
          `stopped on request at epoch ${epoch}, batch ${stoppedAt}; checkpoint saved`,
        );
        return;
      }
      await this.evaluate();
      if (epoch % saveEvery === 0) this.saveCheckpoint(epoch);
      this.pg.barrier("epoch-end");
    }
  }
}

const pg = initProcessGroup();
try {
  const { train, test } = await loadFashionMnist();
  const trainSet = firstN(train, limit), testSet = firstN(test, limit && limit / 4);
  manualSeed(0);
  const model = new Sequential(new Linear(784, 256), new ReLU(), new Linear(256, 10));
  const optimizer = new SGD(model.parameters(), { lr, momentum: 0.9 });
  const trainSampler = new DistributedSampler(trainSet.length, {
    numReplicas: pg.size,
    rank: pg.rank,
  });
  const testSampler = new DistributedSampler(testSet.length, {
    numReplicas: pg.size,
    rank: pg.rank,
    shuffle: false,
  });
  const trainData = new DataLoader(trainSet, { batchSize, sampler: trainSampler });
  const testData = new DataLoader(testSet, { batchSize: 500, sampler: testSampler });
  const stepsPerEpoch = trainData.batchesFor(trainSampler.length);
  // Resume from the latest checkpoint, if the run directory holds one.
  const checkpoints = new CheckpointManager(
    `${getWorld().runDir ?? "runs/ddp_tutorial"}/checkpoints`,
    { rank: pg.rank },
  );
  const ck = checkpoints.loadLatest();
  let epochsRun = 0, batchesRun = 0;
  if (ck) {
    model.loadStateDict(ck);
    optimizer.loadStateDict(ck);
    const state = ck.state as { epochsRun: number; batchesRun?: number; rng: RngState[] };
    setRngState(state.rng[0]!, model);
    epochsRun = state.epochsRun;
    batchesRun = state.batchesRun ?? 0;
  }
  const log = new RunLog({
    config: {
      model: "mlp-784-256-10",
      optimizer: "sgd",
      lr,
      momentum: 0.9,
      batchSize,
      totalEpochs,
      limit,
    },
    seed: 0,
    processGroup: pg,
    optimizer,
    sampler: trainSampler,
    totalSteps: stepsPerEpoch * totalEpochs,
    logEvery: 50,
    startStep: ck?.step ?? 0,
  });
  if (ck) {
    log.print(
      batchesRun > 0
        ? `resuming training in epoch ${epochsRun} after batch ${batchesRun}`
        : `resuming training from the checkpoint of epoch ${epochsRun - 1}`,
    );
  }
  const trainer = new Trainer(
    model,
    trainData,
    testData,
    optimizer,
    pg,
    log,
    checkpoints,
    epochsRun,
    batchesRun,
  );
  await trainer.train(totalEpochs);
  log.close();
} finally {
  pg.close();
}
