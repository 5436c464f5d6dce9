/**
 * Adam as torch 1.13's single-tensor loop runs it: L2 weight decay added to
 * the gradient (not decoupled: that is AdamW), bias corrections in double,
 * and the AMSGrad variant keeping the running maximum of the second moment.
 * Without AMSGrad a parameter's update is one call of AdamW's fused kernel
 * (dt_adamw with no decoupled decay), which rounds as torch does; AMSGrad
 * composes tensor ops.
 */
import { type Tensor } from "../tensor/tensor.ts";
import { backendOf } from "../tensor/backend.ts";
import { sqrt } from "../tensor/ops/unary.ts";
import { scale } from "../tensor/ops/elementwise.ts";
import { maximum } from "../tensor/ops/compare.ts";
import {
  addcdiv,
  addcmul,
  addScalar,
  divScalar,
  effectiveGrad,
  ElementwiseOptimizer,
  type ElementwiseState,
  mulAdd,
  requireNonNegative,
  requireUnitInterval,
} from "./elementwise_optimizer.ts";
import type { ParamGroupSpec } from "./optimizer.ts";

/** Adam hyperparameters; defaults are torch's. */
export interface AdamOptions {
  /** learning rate (1e-3) */
  lr: number;
  /** decay rates of the first and second moment averages ([0.9, 0.999]) */
  betas: [number, number];
  /** added to the denominator (1e-8) */
  eps: number;
  /** L2 penalty added to the gradient (0) */
  weightDecay: number;
  /** use the maximum of past second moments (AMSGrad; false) */
  amsgrad: boolean;
  /** maximise the objective instead (false) */
  maximize: boolean;
}

const DEFAULTS: AdamOptions = {
  lr: 1e-3,
  betas: [0.9, 0.999],
  eps: 1e-8,
  weightDecay: 0,
  amsgrad: false,
  maximize: false,
};

/**
 * torch.optim.Adam.
 *
 * @example
 * ```ts
 * const opt = new Adam(model.parameters(), { lr: 1e-3, betas: [0.9, 0.999] });
 * ```
 */
export class Adam extends ElementwiseOptimizer<AdamOptions> {
  /** Builds it over `params` (a list, or parameter groups with their own options); options not given take torch's defaults. */
  constructor(params: Tensor[] | ParamGroupSpec<AdamOptions>[], opts: Partial<AdamOptions> = {}) {
    super(params, { ...DEFAULTS, ...opts });
  }

  /** Refuses the values torch refuses. */
  protected checkHyper(h: AdamOptions, i: number): void {
    requireNonNegative("Adam", "lr", h.lr, i);
    requireNonNegative("Adam", "eps", h.eps, i);
    requireNonNegative("Adam", "weightDecay", h.weightDecay, i);
    if (!Array.isArray(h.betas) || h.betas.length !== 2) {
      throw new RangeError(`Adam: betas must be [beta1, beta2], got ${JSON.stringify(h.betas)}`);
    }
    requireUnitInterval("Adam", "betas[0]", h.betas[0], i);
    requireUnitInterval("Adam", "betas[1]", h.betas[1], i);
  }

  /** The state tensors it keeps per parameter (torch's names). */
  protected buffers(h: AdamOptions): [string, number][] {
    const b: [string, number][] = [["exp_avg", 0], ["exp_avg_sq", 0]];
    if (h.amsgrad) b.push(["max_exp_avg_sq", 0]);
    return b;
  }

  /** torch's single-tensor update of one parameter. */
  protected updateOne(p: Tensor, g0: Tensor, s: ElementwiseState, h: AdamOptions): void {
    const [beta1, beta2] = h.betas;
    const g = effectiveGrad(g0, p, h.weightDecay, h.maximize);
    const m = s.buffers.get("exp_avg")!, v = s.buffers.get("exp_avg_sq")!;
    if (!h.amsgrad) {
      // Adam is AdamW without decoupled decay on the L2-adjusted gradient: AdamW's fused
      // kernel (torch's roundings, one call) with weight_decay 0 leaves p's factor exactly 1
      backendOf(p.device).call.dt_adamw(
        p.ptr,
        g.ptr,
        m.ptr,
        v.ptr,
        BigInt(p.numel),
        h.lr,
        beta1,
        beta2,
        h.eps,
        0,
        BigInt(s.step),
      );
      for (const t of [p, m, v]) t.markModified();
      return;
    }
    m.copyFrom(mulAdd(m, beta1, g, 1 - beta1));
    v.copyFrom(addcmul(scale(v, beta2), g, g, 1 - beta2));
    const bc1 = 1 - beta1 ** s.step;
    const bc2 = 1 - beta2 ** s.step;
    const stepSize = h.lr / bc1;
    let second = v;
    if (h.amsgrad) {
      const vmax = s.buffers.get("max_exp_avg_sq")!;
      vmax.copyFrom(maximum(vmax, v));
      second = vmax;
    }
    const denom = addScalar(divScalar(sqrt(second), Math.sqrt(bc2)), h.eps);
    p.copyFrom(addcdiv(p, m, denom, -stepSize));
  }

  /** A group as torch's param_groups writes it. */
  protected groupJson(h: AdamOptions): Record<string, unknown> {
    return {
      lr: h.lr,
      betas: [...h.betas],
      eps: h.eps,
      weight_decay: h.weightDecay,
      amsgrad: h.amsgrad,
      maximize: h.maximize,
      foreach: null,
      capturable: false,
    };
  }

  /** Reads a saved param_groups entry back. */
  protected readGroup(saved: Record<string, unknown>, h: AdamOptions): void {
    if (typeof saved.lr === "number") h.lr = saved.lr;
    const betas = saved.betas as number[] | undefined;
    if (Array.isArray(betas) && betas.length === 2) h.betas = [betas[0]!, betas[1]!];
    if (typeof saved.eps === "number") h.eps = saved.eps;
    if (typeof saved.weight_decay === "number") h.weightDecay = saved.weight_decay;
    if (typeof saved.amsgrad === "boolean") h.amsgrad = saved.amsgrad;
    if (typeof saved.maximize === "boolean") h.maximize = saved.maximize;
  }
}
