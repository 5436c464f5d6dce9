/**
 * RMSprop as torch 1.13's single-tensor loop runs it: a running average of
 * squared gradients (alpha), optionally centered (minus the squared running
 * mean of the gradients), optionally with a momentum buffer, and L2 weight
 * decay added to the gradient.
 */
import { type Tensor } from "../tensor/tensor.ts";
import { scale } from "../tensor/ops/elementwise.ts";
import { sqrt } from "../tensor/ops/unary.ts";
import {
  addcdiv,
  addcmul,
  addScalar,
  effectiveGrad,
  ElementwiseOptimizer,
  type ElementwiseState,
  mulAdd,
  requireNonNegative,
} from "./elementwise_optimizer.ts";
import type { ParamGroupSpec } from "./optimizer.ts";

/** RMSprop hyperparameters; defaults are torch's. */
export interface RMSpropOptions {
  /** learning rate (1e-2) */
  lr: number;
  /** smoothing constant of the squared-gradient average (0.99) */
  alpha: number;
  /** added to the denominator (1e-8) */
  eps: number;
  /** L2 penalty added to the gradient (0) */
  weightDecay: number;
  /** momentum factor (0: no momentum buffer) */
  momentum: number;
  /** normalise by the gradient's estimated variance instead (false) */
  centered: boolean;
  /** maximise the objective instead (false) */
  maximize: boolean;
}

const DEFAULTS: RMSpropOptions = {
  lr: 1e-2,
  alpha: 0.99,
  eps: 1e-8,
  weightDecay: 0,
  momentum: 0,
  centered: false,
  maximize: false,
};

/** torch.optim.RMSprop. */
export class RMSprop extends ElementwiseOptimizer<RMSpropOptions> {
  /** Builds it over `params` (a list, or parameter groups with their own options); options not given take torch's defaults. */
  constructor(
    params: Tensor[] | ParamGroupSpec<RMSpropOptions>[],
    opts: Partial<RMSpropOptions> = {},
  ) {
    super(params, { ...DEFAULTS, ...opts });
  }

  /** Refuses the values torch refuses. */
  protected checkHyper(h: RMSpropOptions, i: number): void {
    requireNonNegative("RMSprop", "lr", h.lr, i);
    requireNonNegative("RMSprop", "alpha", h.alpha, i);
    requireNonNegative("RMSprop", "eps", h.eps, i);
    requireNonNegative("RMSprop", "weightDecay", h.weightDecay, i);
    requireNonNegative("RMSprop", "momentum", h.momentum, i);
  }

  /** The state tensors it keeps per parameter (torch's names). */
  protected buffers(h: RMSpropOptions): [string, number][] {
    const b: [string, number][] = [["square_avg", 0]];
    if (h.momentum > 0) b.push(["momentum_buffer", 0]);
    if (h.centered) b.push(["grad_avg", 0]);
    return b;
  }

  /** torch's single-tensor update of one parameter. */
  protected updateOne(p: Tensor, g0: Tensor, s: ElementwiseState, h: RMSpropOptions): void {
    const g = effectiveGrad(g0, p, h.weightDecay, h.maximize);
    const sq = s.buffers.get("square_avg")!;
    sq.copyFrom(addcmul(scale(sq, h.alpha), g, g, 1 - h.alpha));
    let avg: Tensor;
    if (h.centered) {
      const ga = s.buffers.get("grad_avg")!;
      ga.copyFrom(mulAdd(ga, h.alpha, g, 1 - h.alpha));
      avg = sqrt(addcmul(sq, ga, ga, -1));
    } else {
      avg = sqrt(sq);
    }
    avg = addScalar(avg, h.eps);
    if (h.momentum > 0) {
      const buf = s.buffers.get("momentum_buffer")!;
      buf.copyFrom(addcdiv(scale(buf, h.momentum), g, avg, 1));
      p.copyFrom(mulAdd(p, 1, buf, -h.lr));
    } else {
      p.copyFrom(addcdiv(p, g, avg, -h.lr));
    }
  }

  /** A group as torch's param_groups writes it. */
  protected groupJson(h: RMSpropOptions): Record<string, unknown> {
    return {
      lr: h.lr,
      momentum: h.momentum,
      alpha: h.alpha,
      eps: h.eps,
      centered: h.centered,
      weight_decay: h.weightDecay,
      foreach: null,
      maximize: h.maximize,
    };
  }

  /** Reads a saved param_groups entry back. */
  protected readGroup(saved: Record<string, unknown>, h: RMSpropOptions): void {
    if (typeof saved.lr === "number") h.lr = saved.lr;
    if (typeof saved.momentum === "number") h.momentum = saved.momentum;
    if (typeof saved.alpha === "number") h.alpha = saved.alpha;
    if (typeof saved.eps === "number") h.eps = saved.eps;
    if (typeof saved.centered === "boolean") h.centered = saved.centered;
    if (typeof saved.weight_decay === "number") h.weightDecay = saved.weight_decay;
    if (typeof saved.maximize === "boolean") h.maximize = saved.maximize;
  }
}
