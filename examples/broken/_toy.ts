/**
 * What the deliberately broken scripts of this folder (and the correct ones
 * `dtrain check`'s tests hold them against) share: a 200-sample toy
 * classification set, a small MLP, the batch and epoch settings, and a
 * hand-written loop's checkpoint save and resume under the run directory.
 */
import {
  type AdamW,
  CheckpointManager,
  type DataLoader,
  getWorld,
  Linear,
  type Module,
  ReLU,
  scope,
  Sequential,
  TensorDataset,
  tensorFile,
  TorchGenerator,
} from "dtrain";
import { join } from "node:path";
import { stateTensor } from "../../nn/load.ts";
import { fromStTensor } from "../../tensor/st_bridge.ts";

/** Samples in the toy set. */
export const SAMPLES = 200;
/** Features per sample. */
export const FEATURES = 8;
/** Samples per optimizer step over all ranks (each rank takes GLOBAL_BATCH / world size). */
export const GLOBAL_BATCH = 20;
export const EPOCHS = 3;
export const SEED = 7;
/** A hand-written loop saves every this many steps. */
export const CHECKPOINT_EVERY = 2;

/** `size` samples of FEATURES normal features with a label that depends on them (two classes). */
export function toyData(size = SAMPLES): TensorDataset {
  const gen = new TorchGenerator(0);
  const x = gen.normal_(new Float32Array(size * FEATURES), 0, 1);
  const y = Int32Array.from(
    { length: size },
    (_, i) => (x[i * FEATURES]! + x[i * FEATURES + 1]! > 0 ? 1 : 0),
  );
  return new TensorDataset({ data: x, sampleShape: [FEATURES] }, { data: y, sampleShape: [] });
}

/** Linear(8, 16), ReLU, Linear(16, 2), drawn from the default generator (seed it first). */
export function toyModel(): Sequential {
  return new Sequential(new Linear(FEATURES, 16), new ReLU(), new Linear(16, 2));
}

/** Checkpoints under <run dir>/checkpoints, or null when the process has no run directory (run alone). */
export function openCheckpoints(rank: number): CheckpointManager | null {
  const runDir = getWorld().runDir;
  return runDir ? new CheckpointManager(join(runDir, "checkpoints"), { rank }) : null;
}

/** Rank 0 saves model, optimizer, step and data position (the other ranks return at once). */
export function saveTraining(
  checkpoints: CheckpointManager | null,
  step: number,
  parts: { model: Module; optimizer: AdamW; loader: DataLoader },
): void {
  if (!checkpoints) return;
  const opt = parts.optimizer.stateDict();
  checkpoints.save({
    step,
    files: [tensorFile("model", parts.model.stateDict()), tensorFile("optimizer", opt.tensors)],
    state: { step, loader: { ...parts.loader.state() }, paramGroups: opt.paramGroups },
  });
}

/**
 * Loads the latest checkpoint into model, optimizer and loader; returns the
 * step and epoch to continue from (0, 0 on a fresh start).
 */
export function resumeTraining(
  checkpoints: CheckpointManager | null,
  parts: { model: Module; optimizer: AdamW; loader: DataLoader; batchesPerEpoch: number },
): { step: number; epoch: number } {
  const loaded = checkpoints?.loadLatest();
  if (!loaded) return { step: 0, epoch: 0 };
  const state = loaded.state as {
    step: number;
    loader: { epoch: number; position: number };
    paramGroups: Record<string, unknown>[];
  };
  const model = loaded.files.get("model")!.tensors;
  parts.model.loadStateDict(new Map([...model].map(([k, t]) => [k, stateTensor(t)])));
  const opt = loaded.files.get("optimizer")!.tensors;
  scope(() =>
    parts.optimizer.loadStateDict({
      tensors: new Map([...opt].map(([k, t]) => [k, fromStTensor(t, k)])),
      paramGroups: state.paramGroups,
    })
  );
  // A checkpoint taken after an epoch's last batch continues with the next epoch.
  const { epoch, position } = state.loader;
  const next = position >= parts.batchesPerEpoch
    ? { epoch: epoch + 1, position: 0 }
    : { epoch, position };
  parts.loader.loadState(next);
  return { step: state.step, epoch: next.epoch };
}
