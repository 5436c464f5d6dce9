/**
 * A hook point for tools that need a run's model by name: DDP and the
 * Trainer announce the model they train, so `dtrain check --exact`'s probe
 * can name each parameter, gradient, buffer and optimizer-state tensor it
 * hashes (the optimizer alone knows its tensors but not their names).
 */
import type { Module } from "./module.ts";

/** Called with each model a DDP wrapper or a Trainer is about to train. */
export type TrainedModelHook = (model: Module) => void;

const hooks = new Set<TrainedModelHook>();

/** Adds a hook to every announced model; returns the function that removes it. */
export function addTrainedModelHook(hook: TrainedModelHook): () => void {
  hooks.add(hook);
  return () => hooks.delete(hook);
}

/** Announces a model that is about to be trained (a model announced twice reaches the hooks twice). */
export function announceTrainedModel(model: Module): void {
  for (const hook of hooks) hook(model);
}
