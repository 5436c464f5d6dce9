/**
 * The original harness's ToyClassifier (Linear 128→256, ReLU, Linear 256→2)
 * on its synthetic dataset (10,000 samples of 128 features drawn exactly as
 * torch.manual_seed(0); torch.randn; torch.randint does), batch 64, AdamW
 * 1e-3, clipping at 1.0, 3 epochs — one Trainer call. Runs alone or under
 * the launcher (`./dtrain --nproc 2 examples/toy_classifier.ts`).
 */
import {
  crossEntropy,
  Linear,
  ReLU,
  Sequential,
  TensorDataset,
  TorchGenerator,
  Trainer,
} from "dtrain";

/**
 * SyntheticDataset(size, featureDim) of the harness, bit for bit: drawn from
 * `gen` (torch.randn then torch.randint), by default a generator seeded 0.
 */
export function syntheticDataset(
  size = 10_000,
  featureDim = 128,
  gen = new TorchGenerator(0),
): TensorDataset {
  const x = gen.normal_(new Float32Array(size * featureDim), 0, 1);
  const y = Int32Array.from({ length: size }, () => gen.randint(0, 2));
  // owned: the arrays are the dataset's alone, so it keeps them rather than copying 5 MB at start-up
  return new TensorDataset(
    { data: x, sampleShape: [featureDim], owned: true },
    { data: y, sampleShape: [], owned: true },
  );
}

if (import.meta.main) {
  const epochs = Number(Deno.args[0] ?? 3);
  const trainer = new Trainer({
    model: () => new Sequential(new Linear(128, 256), new ReLU(), new Linear(256, 2)),
    data: syntheticDataset(),
    loss: (model, [x, y]) => crossEntropy(model.forward(x!), y!),
    config: {
      epochs,
      seed: 42,
      data: { globalBatchSize: 64 },
      optim: { name: "adamw", lr: 1e-3 },
      clipGradNorm: 1.0,
      logEvery: 1000,
    },
  });
  await trainer.fit();
}
