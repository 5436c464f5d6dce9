/**
 * Test script: a Trainer with the optimizer named in $OPTIM for $STEPS
 * steps, checkpointing every 3 steps into $RUN_DIR (resuming from the latest
 * checkpoint there when one exists), then writes the final weights' bytes
 * (hex) and the optimizer's class and first group to $OUT as JSON.
 */
import {
  crossEntropy,
  Linear,
  ReLU,
  Sequential,
  TensorDataset,
  TorchGenerator,
  Trainer,
} from "../../../mod.ts";

function dataset(n: number): TensorDataset {
  const g = new TorchGenerator(5);
  const x = g.normal_(new Float32Array(n * 6), 0, 1);
  const y = Int32Array.from(
    { length: n },
    (_, i) => (x[i * 6]! > 0 ? 1 : 0) + (x[i * 6 + 1]! > 0 ? 2 : 0),
  );
  return new TensorDataset({ data: x, sampleShape: [6] }, { data: y, sampleShape: [] });
}

const env = (k: string) => {
  const v = Deno.env.get(k);
  if (!v) throw new Error(`set ${k}`);
  return v;
};
const trainer = new Trainer({
  model: () => new Sequential(new Linear(6, 16), new ReLU(), new Linear(16, 4)),
  data: dataset(128),
  loss: (model, [x, y]) => crossEntropy(model.forward(x!), y!),
  config: {
    epochs: 10,
    maxSteps: Number(env("STEPS")),
    seed: 1,
    data: { globalBatchSize: 16, prefetch: 0 },
    // deno-lint-ignore no-explicit-any
    optim: { name: env("OPTIM") as any, lr: 1e-2, weightDecay: 0, momentum: 0.5, centered: true },
    checkpoint: { dir: env("RUN_DIR"), everySteps: 3 },
  },
});
await trainer.fit();
const weights = trainer.model.parameters().map((p) =>
  Array.from(
    new Uint8Array((p.toArray() as Float32Array).buffer),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("")
);
Deno.writeTextFileSync(
  env("OUT"),
  JSON.stringify({
    optimizer: trainer.optimizer.constructor.name,
    hyper: trainer.optimizer.groups[0]!.hyper,
    weights,
  }),
);
Deno.exit(0);
