/**
 * Adagrad as torch 1.13's single-tensor loop runs it: the sum of squared
 * gradients per element, a learning rate decayed as lr / (1 + (step - 1) *
 * lrDecay), and L2 weight decay added to the gradient.
 */
import { type Tensor } from "../tensor/tensor.ts";
import { sqrt } from "../tensor/ops/unary.ts";
import {
  addcdiv,
  addcmul,
  addScalar,
  effectiveGrad,
  ElementwiseOptimizer,
  type ElementwiseState,
  requireNonNegative,
} from "./elementwise_optimizer.ts";
import type { ParamGroupSpec } from "./optimizer.ts";

/** Adagrad hyperparameters; defaults are torch's. */
export interface AdagradOptions {
  /** learning rate (1e-2) */
  lr: number;
  /** learning-rate decay per step (0) */
  lrDecay: number;
  /** L2 penalty added to the gradient (0) */
  weightDecay: number;
  /** starting value of the sum of squares (0) */
  initialAccumulatorValue: number;
  /** added to the denominator (1e-10) */
  eps: number;
  /** maximise the objective instead (false) */
  maximize: boolean;
}

const DEFAULTS: AdagradOptions = {
  lr: 1e-2,
  lrDecay: 0,
  weightDecay: 0,
  initialAccumulatorValue: 0,
  eps: 1e-10,
  maximize: false,
};

/** torch.optim.Adagrad. */
export class Adagrad extends ElementwiseOptimizer<AdagradOptions> {
  /** Builds it over `params` (a list, or parameter groups with their own options); options not given take torch's defaults. */
  constructor(
    params: Tensor[] | ParamGroupSpec<AdagradOptions>[],
    opts: Partial<AdagradOptions> = {},
  ) {
    super(params, { ...DEFAULTS, ...opts });
  }

  /** Refuses the values torch refuses. */
  protected checkHyper(h: AdagradOptions, i: number): void {
    requireNonNegative("Adagrad", "lr", h.lr, i);
    requireNonNegative("Adagrad", "lrDecay", h.lrDecay, i);
    requireNonNegative("Adagrad", "weightDecay", h.weightDecay, i);
    requireNonNegative("Adagrad", "initialAccumulatorValue", h.initialAccumulatorValue, i);
    requireNonNegative("Adagrad", "eps", h.eps, i);
  }

  /** The state tensors it keeps per parameter (torch's names). */
  protected buffers(h: AdagradOptions): [string, number][] {
    return [["sum", h.initialAccumulatorValue]];
  }

  /** torch's single-tensor update of one parameter. */
  protected updateOne(p: Tensor, g0: Tensor, s: ElementwiseState, h: AdagradOptions): void {
    const g = effectiveGrad(g0, p, h.weightDecay, h.maximize);
    const clr = h.lr / (1 + (s.step - 1) * h.lrDecay);
    const sum = s.buffers.get("sum")!;
    sum.copyFrom(addcmul(sum, g, g, 1));
    const std = addScalar(sqrt(sum), h.eps);
    p.copyFrom(addcdiv(p, g, std, -clr));
  }

  /** A group as torch's param_groups writes it. */
  protected groupJson(h: AdagradOptions): Record<string, unknown> {
    return {
      lr: h.lr,
      lr_decay: h.lrDecay,
      eps: h.eps,
      weight_decay: h.weightDecay,
      initial_accumulator_value: h.initialAccumulatorValue,
      foreach: null,
      maximize: h.maximize,
    };
  }

  /** Reads a saved param_groups entry back. */
  protected readGroup(saved: Record<string, unknown>, h: AdagradOptions): void {
    if (typeof saved.lr === "number") h.lr = saved.lr;
    if (typeof saved.lr_decay === "number") h.lrDecay = saved.lr_decay;
    if (typeof saved.eps === "number") h.eps = saved.eps;
    if (typeof saved.weight_decay === "number") h.weightDecay = saved.weight_decay;
    if (typeof saved.initial_accumulator_value === "number") {
      h.initialAccumulatorValue = saved.initial_accumulator_value;
    }
    if (typeof saved.maximize === "boolean") h.maximize = saved.maximize;
  }
}
