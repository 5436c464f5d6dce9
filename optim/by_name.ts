/**
 * The optimizers that a configuration names beside AdamW and SGD ("adam",
 * "adadelta", "adagrad", "rmsprop"), built from one set of settings: each
 * takes the ones it has, under PyTorch's meaning, and ignores the rest.
 */
import type { Tensor } from "../tensor/tensor.ts";
import { Adam } from "./adam.ts";
import { Adadelta } from "./adadelta.ts";
import { Adagrad } from "./adagrad.ts";
import { RMSprop } from "./rmsprop.ts";
import type { Optimizer } from "./optimizer.ts";

/** The names elementwiseOptimizer() builds. */
export const ELEMENTWISE_OPTIMIZERS = ["adam", "adadelta", "adagrad", "rmsprop"] as const;
/** One of ELEMENTWISE_OPTIMIZERS. */
export type ElementwiseOptimizerName = typeof ELEMENTWISE_OPTIMIZERS[number];

/** The settings elementwiseOptimizer() reads (each optimizer reads its own). */
export interface ElementwiseOptimizerSettings {
  lr: number;
  weightDecay: number;
  eps: number;
  /** Adam */
  betas: [number, number];
  /** Adam */
  amsgrad: boolean;
  /** RMSprop */
  momentum: number;
  /** RMSprop */
  alpha: number;
  /** RMSprop */
  centered: boolean;
  /** Adadelta */
  rho: number;
  /** Adagrad */
  lrDecay: number;
}

/** A parameter group with optional own lr / weight decay (the Trainer's groups). */
export type GroupSettings = { params: Tensor[]; lr?: number; weightDecay?: number };

/** Builds the optimizer `name` over `groups` with the settings it has. */
export function elementwiseOptimizer(
  name: ElementwiseOptimizerName,
  groups: GroupSettings[],
  s: ElementwiseOptimizerSettings,
): Optimizer<{ lr: number }> {
  const common = { lr: s.lr, weightDecay: s.weightDecay, eps: s.eps };
  switch (name) {
    case "adam":
      return new Adam(groups, { ...common, betas: [s.betas[0], s.betas[1]], amsgrad: s.amsgrad });
    case "adadelta":
      return new Adadelta(groups, { ...common, rho: s.rho });
    case "adagrad":
      return new Adagrad(groups, { ...common, lrDecay: s.lrDecay });
    case "rmsprop":
      return new RMSprop(groups, {
        ...common,
        momentum: s.momentum,
        alpha: s.alpha,
        centered: s.centered,
      });
  }
  throw new RangeError(
    `elementwiseOptimizer: unknown optimizer ${JSON.stringify(name)} (expected one of ${
      ELEMENTWISE_OPTIMIZERS.join(", ")
    })`,
  );
}
