/**
 * gpu-check step 4c, and the emulated device's whole-run test: a Trainer run
 * of a small MLP on synthetic data with f16 autocast and the GradScaler,
 * gradient clipping, and a checkpoint every 2 steps, on whatever device the
 * launcher gave the ranks (public API only: it runs from the device bundle).
 * `dtrain --nproc 2 --device cuda train_job.ts STEPS`, then the same with
 * `--resume <run>/checkpoints/step-…` in a new run directory, which must
 * repeat the first run's later steps (resume_check.ts compares them).
 */
import { crossEntropy, Linear, manualSeed, ReLU, Sequential, TensorDataset, Trainer } from "dtrain";

const steps = Number(Deno.args[0] ?? 4);
const N = 256, F = 24, C = 4;
let seed = 7;
const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
const X = Float32Array.from({ length: N * F }, rand);
const y = Int32Array.from(
  { length: N },
  (_, i) => (X[i * F]! > 0 ? 1 : 0) + (X[i * F + 1]! > 0 ? 2 : 0),
);

const trainer = new Trainer({
  model: () => {
    manualSeed(3);
    return new Sequential(new Linear(F, 48), new ReLU(), new Linear(48, C));
  },
  data: new TensorDataset({ data: X, sampleShape: [F] }, { data: y, sampleShape: [] }),
  loss: (model, [xb, yb]) => crossEntropy(model.forward(xb!), yb!),
  config: {
    epochs: 10,
    maxSteps: steps,
    data: { globalBatchSize: 32, shuffle: true },
    optim: { name: "adamw", lr: 3e-3 },
    precision: { autocast: "f16" }, // the GradScaler is on for f16
    clipGradNorm: 0.5,
    checkpoint: { everySteps: 2, everyEpoch: false, keepLast: 5 },
    logEvery: 1,
  },
});
await trainer.fit();
trainer.pg.close();
