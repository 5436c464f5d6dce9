/**
 * Test rank script: a Trainer with nanoGPT's parameter groups, a cosine
 * schedule, evaluation on every rank (an async evalStep over 101 held-out
 * samples, so the ranks' shares differ), evaluations every 4 steps and at
 * epoch ends, and the best checkpoint by accuracy. Rank 0 then evaluates
 * the final model alone over the whole held-out set and writes both to
 * $OUT_DIR/trainer_eval.json.
 */
import {
  argmax,
  crossEntropy,
  Linear,
  noGrad,
  ReLU,
  scope,
  Sequential,
  type Tensor,
  TensorDataset,
  TorchGenerator,
  Trainer,
} from "../../../mod.ts";

function dataset(n: number, seed: number): TensorDataset {
  const g = new TorchGenerator(seed);
  const x = g.normal_(new Float32Array(n * 8), 0, 1);
  // A learnable rule: the class is the sign pattern of two features.
  const y = Int32Array.from(
    { length: n },
    (_, i) => (x[i * 8]! > 0 ? 1 : 0) + (x[i * 8 + 1]! > 0 ? 2 : 0),
  );
  return new TensorDataset({ data: x, sampleShape: [8] }, { data: y, sampleShape: [] });
}

function metrics(model: Sequential, [x, y]: Tensor[]): Record<string, number> {
  return scope(() => {
    const logits = model.forward(x!);
    const pred = argmax(logits, 1).toArray() as Int32Array;
    const labels = y!.toArray() as Int32Array;
    const correct = pred.reduce((a, p, i) => a + (p === labels[i] ? 1 : 0), 0);
    return { loss: crossEntropy(logits, y!).item(), accuracy: correct / labels.length };
  });
}

const held = dataset(101, 2);
const trainer = new Trainer({
  model: () => new Sequential(new Linear(8, 32), new ReLU(), new Linear(32, 4)),
  data: dataset(256, 1),
  loss: (model, [x, y]) => crossEntropy(model.forward(x!), y!),
  evalData: held,
  evalStep: async (model, batch) => {
    await new Promise((r) => setTimeout(r, 0)); // an await before the forward: still under noGrad
    return metrics(model, batch);
  },
  config: {
    epochs: 2,
    seed: 3,
    data: { globalBatchSize: 32 },
    optim: { lr: 3e-2, weightDecay: 0.1, groups: [{ maxDims: 1, weightDecay: 0 }] },
    schedule: { kind: "cosine", warmupSteps: 2, minLr: 3e-3 },
    eval: { everySteps: 4, batchSize: 16 },
    checkpoint: { best: { metric: "accuracy", mode: "max" } },
  },
});
const result = await trainer.fit();
if (trainer.pg.rank === 0) {
  const whole = noGrad(() =>
    metrics(trainer.model.eval(), held.getBatch(Int32Array.from({ length: 101 }, (_, i) => i)))
  );
  const groups = trainer.optimizer.groups.map((g) => ({
    count: g.params.length,
    weightDecay: (g.hyper as unknown as { weightDecay: number }).weightDecay,
  }));
  Deno.writeTextFileSync(
    `${Deno.env.get("OUT_DIR")}/trainer_eval.json`,
    JSON.stringify({
      evaluations: result.evaluations,
      best: result.best,
      whole,
      groups,
      steps: result.steps,
    }),
  );
}
trainer.pg.close();
