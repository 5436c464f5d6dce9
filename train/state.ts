/**
 * What a checkpoint holds and how it is put back: the model (PyTorch names,
 * no "module." prefix), the optimizer state (torch's layout, param_groups in
 * metadata), and a JSON state with the schedule, the loss scaler, epoch and
 * step, the data position, every rank's RNG state, the resolved config, the
 * world size and the run id.
 */
import type { StTensor } from "../io/st_tensor.ts";
import type { Module } from "../nn/module.ts";
import { getRngState, type RngState, setRngState } from "../nn/rng_state.ts";
import type { Optimizer } from "../optim/optimizer.ts";
import type { LrScheduler } from "../optim/lr_schedule.ts";
import type { GradScaler, GradScalerState } from "../amp/grad_scaler.ts";
import { toStTensor } from "../tensor/st_bridge.ts";
import { scope, type Tensor } from "../tensor/tensor.ts";
import type { ResumePoint } from "../data/resumable_sampler.ts";
import type { CheckpointFile } from "./checkpoint/manager.ts";
import type { TrainConfig } from "./config.ts";

/** One rank's random state: the default generator and every Dropout's mask position. */
export type RankRngState = RngState;

/** The JSON part of a checkpoint. */
export interface TrainState {
  format: "dtrain.train-state/1";
  epoch: number;
  /** optimizer steps completed in total */
  step: number;
  /** where the data order continues */
  data: ResumePoint;
  schedule: { step: number };
  scaler: GradScalerState;
  /** indexed by rank */
  rng: RankRngState[];
  config: TrainConfig;
  worldSize: number;
  runId: string;
  /** the best evaluation so far (checkpoint.best), or null */
  best?: BestEvaluation | null;
}

/** The best value of the metric checkpoint.best names, and the step it was reached after. */
export interface BestEvaluation {
  /** The metric's name. */
  metric: string;
  /** Its best value. */
  value: number;
  /** The optimizer step after which it was reached. */
  step: number;
}

/** This rank's RNG state. */
export function captureRng(model: Module): RankRngState {
  return getRngState(model);
}

/** Restores an RNG state captured by captureRng on a model of the same structure. */
export function restoreRng(model: Module, s: RankRngState): void {
  setRngState(s, model);
}

/** Named tensors as a checkpoint file `<name>.safetensors` (a copy of their bytes). */
export function tensorFile(name: string, tensors: Map<string, Tensor>): CheckpointFile {
  const out = new Map<string, StTensor>();
  for (const [k, t] of tensors) out.set(k, toStTensor(t));
  return { name, tensors: out };
}

/** The model's state dict as the checkpoint file "model". */
export function modelFile(model: Module): CheckpointFile {
  return tensorFile("model", model.stateDict());
}

/** The optimizer state as a checkpoint file (tensors "state.<i>.<name>", param_groups in metadata). */
export function optimizerFile(opt: Optimizer<{ lr: number }>): CheckpointFile {
  return scope(() => {
    const s = opt.stateDict();
    const tensors = new Map<string, StTensor>();
    for (const [k, t] of s.tensors) tensors.set(`state.${k}`, toStTensor(t));
    return {
      name: "optimizer",
      tensors,
      metadata: { param_groups: JSON.stringify(s.paramGroups) },
    };
  });
}

/** Loads an optimizer state saved by optimizerFile (the same as opt.loadStateDict(file)). */
export function restoreOptimizer(
  opt: Optimizer<{ lr: number }>,
  file: { tensors: Map<string, StTensor>; metadata: Record<string, string> },
): void {
  opt.loadStateDict(file);
}

/** Everything of a step that the JSON state records. */
export function trainState(parts: {
  epoch: number;
  step: number;
  data: ResumePoint;
  schedule: LrScheduler;
  scaler: GradScaler;
  rng: RankRngState[];
  config: TrainConfig;
  worldSize: number;
  runId: string;
  best?: BestEvaluation | null;
}): TrainState {
  return {
    format: "dtrain.train-state/1",
    epoch: parts.epoch,
    step: parts.step,
    data: parts.data,
    schedule: parts.schedule.stateDict(),
    scaler: parts.scaler.stateDict(),
    rng: parts.rng,
    config: parts.config,
    worldSize: parts.worldSize,
    runId: parts.runId,
    ...(parts.best !== undefined ? { best: parts.best } : {}),
  };
}
