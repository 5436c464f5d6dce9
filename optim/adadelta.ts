/**
 * Adadelta as torch 1.13's single-tensor loop runs it: running averages of
 * squared gradients and squared updates (rho), the update scaled by lr, and
 * L2 weight decay added to the gradient.
 */
import { type Tensor } from "../tensor/tensor.ts";
import { div, mul, scale } from "../tensor/ops/elementwise.ts";
import { sqrt } from "../tensor/ops/unary.ts";
import {
  addcmul,
  addScalar,
  effectiveGrad,
  ElementwiseOptimizer,
  type ElementwiseState,
  mulAdd,
  requireNonNegative,
} from "./elementwise_optimizer.ts";
import type { ParamGroupSpec } from "./optimizer.ts";

/** Adadelta hyperparameters; defaults are torch's. */
export interface AdadeltaOptions {
  /** scale of the update (1.0) */
  lr: number;
  /** smoothing constant of the running averages (0.9) */
  rho: number;
  /** added inside the square roots (1e-6) */
  eps: number;
  /** L2 penalty added to the gradient (0) */
  weightDecay: number;
  /** maximise the objective instead (false) */
  maximize: boolean;
}

const DEFAULTS: AdadeltaOptions = { lr: 1.0, rho: 0.9, eps: 1e-6, weightDecay: 0, maximize: false };

/** torch.optim.Adadelta. */
export class Adadelta extends ElementwiseOptimizer<AdadeltaOptions> {
  /** Builds it over `params` (a list, or parameter groups with their own options); options not given take torch's defaults. */
  constructor(
    params: Tensor[] | ParamGroupSpec<AdadeltaOptions>[],
    opts: Partial<AdadeltaOptions> = {},
  ) {
    super(params, { ...DEFAULTS, ...opts });
  }

  /** Refuses the values torch refuses. */
  protected checkHyper(h: AdadeltaOptions, i: number): void {
    requireNonNegative("Adadelta", "lr", h.lr, i);
    if (!(h.rho >= 0 && h.rho <= 1)) {
      throw new RangeError(
        `Adadelta: invalid rho ${h.rho} in parameter group ${i} (expected 0 <= rho <= 1)`,
      );
    }
    requireNonNegative("Adadelta", "eps", h.eps, i);
    requireNonNegative("Adadelta", "weightDecay", h.weightDecay, i);
  }

  /** The state tensors it keeps per parameter (torch's names). */
  protected buffers(): [string, number][] {
    return [["square_avg", 0], ["acc_delta", 0]];
  }

  /** torch's single-tensor update of one parameter. */
  protected updateOne(p: Tensor, g0: Tensor, s: ElementwiseState, h: AdadeltaOptions): void {
    const g = effectiveGrad(g0, p, h.weightDecay, h.maximize);
    const sq = s.buffers.get("square_avg")!, acc = s.buffers.get("acc_delta")!;
    sq.copyFrom(addcmul(scale(sq, h.rho), g, g, 1 - h.rho));
    const std = sqrt(addScalar(sq, h.eps));
    const delta = mul(div(sqrt(addScalar(acc, h.eps)), std), g);
    acc.copyFrom(addcmul(scale(acc, h.rho), delta, delta, 1 - h.rho));
    p.copyFrom(mulAdd(p, 1, delta, -h.lr));
  }

  /** A group as torch's param_groups writes it. */
  protected groupJson(h: AdadeltaOptions): Record<string, unknown> {
    return {
      lr: h.lr,
      rho: h.rho,
      eps: h.eps,
      weight_decay: h.weightDecay,
      maximize: h.maximize,
      foreach: null,
    };
  }

  /** Reads a saved param_groups entry back. */
  protected readGroup(saved: Record<string, unknown>, h: AdadeltaOptions): void {
    if (typeof saved.lr === "number") h.lr = saved.lr;
    if (typeof saved.rho === "number") h.rho = saved.rho;
    if (typeof saved.eps === "number") h.eps = saved.eps;
    if (typeof saved.weight_decay === "number") h.weightDecay = saved.weight_decay;
    if (typeof saved.maximize === "boolean") h.maximize = saved.maximize;
  }
}
