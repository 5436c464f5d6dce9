/**
 * Loss functions with PyTorch's names, arguments and semantics
 * (torch.nn.functional): nll_loss, cross_entropy (class or probability
 * targets, label smoothing, class weights, ignore_index), mse_loss, l1_loss,
 * smooth_l1_loss, binary_cross_entropy and binary_cross_entropy_with_logits
 * (pos_weight), each with reduction "none" | "mean" | "sum". They are
 * composed from differentiable tensor ops (so they run on every backend and
 * their gradients come from autograd); the plain cross-entropy (class
 * targets, mean, no weight or smoothing) keeps the fused kernel. Integer
 * targets stay on the device: nothing here reads tensor data back.
 */
import { castTensor, full, type Tensor } from "../tensor/tensor.ts";
import { add, div, mul, relu, scale, sub } from "../tensor/ops/elementwise.ts";
import { clamp, exp, log } from "../tensor/ops/unary.ts";
import { logSoftmax } from "../tensor/ops/softmax.ts";
import { mean, sum } from "../tensor/ops/reduce.ts";
import { gather, indexSelect, where } from "../tensor/ops/select.ts";
import { reshape } from "../tensor/ops/shape.ts";
import { unsqueeze } from "../tensor/ops/layout.ts";
import { eq, lt, ne } from "../tensor/ops/compare.ts";
import { crossEntropy as fusedCrossEntropy } from "../tensor/ops/nn.ts";

/** How a loss reduces its per-element values: PyTorch's reduction argument. */
export type Reduction = "none" | "mean" | "sum";

/** Options shared by every loss. */
export interface LossOptions {
  /** "mean" (default), "sum", or "none" for the unreduced values */
  reduction?: Reduction;
}

/** Options of nllLoss and of crossEntropy with class-index targets. */
export interface ClassLossOptions extends LossOptions {
  /** a weight per class (1-D of C), as torch's `weight` */
  weight?: Tensor;
  /** targets equal to it add nothing, to the loss or to the mean's count (-100) */
  ignoreIndex?: number;
  /**
   * The dim of the input that holds the classes. Default: torch's layout,
   * (N, C) or (N, C, d1, ...) with targets (N, d1, ...), or dtrain's
   * earlier (..., C) with targets (...) when only that matches the shapes.
   */
  classDim?: number;
}

/** Options of crossEntropy. */
export interface CrossEntropyOptions extends ClassLossOptions {
  /** spread this share of the target's mass evenly over the classes (0; torch's label_smoothing) */
  labelSmoothing?: number;
}

function reductionOf(who: string, opts: LossOptions): Reduction {
  const r = opts.reduction ?? "mean";
  if (r !== "none" && r !== "mean" && r !== "sum") {
    throw new RangeError(
      `${who}: reduction must be "none", "mean" or "sum", got ${JSON.stringify(r)}`,
    );
  }
  return r;
}

function reduce(x: Tensor, r: Reduction): Tensor {
  return r === "none" ? x : r === "sum" ? sum(x) : mean(x);
}

function sameShape(who: string, a: Tensor, b: Tensor, what = "target"): void {
  if (a.shape.length !== b.shape.length || a.shape.some((s, i) => s !== b.shape[i])) {
    throw new RangeError(
      `${who}: the ${what} [${b.shape}] must have the input's shape [${a.shape}]`,
    );
  }
}

/** The class dim of `input` for class-index `target` (see ClassLossOptions.classDim). */
function classDimOf(who: string, input: Tensor, target: Tensor, given: number | undefined): number {
  const n = input.shape.length;
  const without = (d: number) => input.shape.filter((_, i) => i !== d);
  const fits = (d: number) => {
    const s = without(d);
    return s.length === target.shape.length && s.every((v, i) => v === target.shape[i]);
  };
  if (n === 0) throw new RangeError(`${who}: the input must have a class dim, got a 0-dim tensor`);
  if (given !== undefined) {
    const d = given < 0 ? given + n : given;
    if (!Number.isInteger(given) || d < 0 || d >= n) {
      throw new RangeError(
        `${who}: classDim ${given} is out of range for an input of shape [${input.shape}]`,
      );
    }
    if (!fits(d)) {
      throw new RangeError(
        `${who}: targets [${target.shape}] do not match the input [${input.shape}] without its class dim ${given}`,
      );
    }
    return d;
  }
  const torchDim = n === 1 ? 0 : 1;
  if (n <= 2 || (fits(torchDim) && !fits(n - 1))) {
    if (!fits(torchDim)) {
      throw new RangeError(
        `${who}: the input [${input.shape}] needs targets of shape [${
          without(torchDim)
        }], got [${target.shape}]`,
      );
    }
    return torchDim;
  }
  if (fits(n - 1) && !fits(torchDim)) return n - 1;
  if (fits(n - 1)) {
    throw new RangeError(
      `${who}: targets [${target.shape}] match the input [${input.shape}] with the classes in dim 1 or in the last dim; ` +
        `say which with classDim`,
    );
  }
  throw new RangeError(
    `${who}: the input [${input.shape}] needs targets of shape [${
      without(torchDim)
    }] (classes in dim 1), got [${target.shape}]`,
  );
}

function requireClassWeight(who: string, weight: Tensor | undefined, C: number): void {
  if (weight && (weight.shape.length !== 1 || weight.shape[0] !== C)) {
    throw new RangeError(
      `${who}: weight must be 1-D with one value per class (${C}), got [${weight.shape}]`,
    );
  }
}

/** A class-index tensor's checks: an integer dtype. */
function requireIndexTargets(who: string, target: Tensor): void {
  if (target.dtype !== "i32" && target.dtype !== "i64") {
    throw new TypeError(`${who}: class targets must be an i32 or i64 tensor, got ${target.dtype}`);
  }
}

/**
 * The per-target picks of nll: -w[t] * logp[t] (0 where ignored), the
 * weights w[t] (0 where ignored) and the valid mask, all of the target's shape.
 */
function nllParts(
  who: string,
  logp: Tensor,
  target: Tensor,
  d: number,
  opts: ClassLossOptions,
): { losses: Tensor; weights: Tensor; valid: Tensor } {
  const C = logp.shape[d]!;
  requireClassWeight(who, opts.weight, C);
  const ignore = opts.ignoreIndex ?? -100;
  const valid = ne(target, ignore); // u8, target's shape
  // ignored targets pick class 0 (their loss and weight are then zeroed)
  const safe = castTensor(where(valid, castTensor(target, "f32"), 0), "i32");
  const picked = reshape(gather(logp, d, unsqueeze(safe, d)), target.shape);
  const weights = opts.weight
    ? where(
      valid,
      reshape(indexSelect(opts.weight, 0, reshape(safe, [safe.numel])), target.shape),
      0,
    )
    : where(valid, 1, 0);
  const losses = scale(mul(picked, weights), -1);
  return { losses, weights, valid };
}

function finishNll(parts: { losses: Tensor; weights: Tensor }, r: Reduction): Tensor {
  if (r === "none") return parts.losses;
  if (r === "sum") return sum(parts.losses);
  return div(sum(parts.losses), sum(parts.weights));
}

/**
 * The negative log-likelihood of log-probabilities `input` (N, C) or
 * (N, C, d1, ...) at class-index `target` (N) or (N, d1, ...), as
 * torch.nn.functional.nll_loss: class weights, ignoreIndex (-100), and a
 * "mean" that divides by the summed weights of the counted targets.
 *
 * @example
 * ```ts
 * const loss = nllLoss(logSoftmax(model.forward(x), 1), y);
 * ```
 */
export function nllLoss(input: Tensor, target: Tensor, opts: ClassLossOptions = {}): Tensor {
  const r = reductionOf("nllLoss", opts);
  requireIndexTargets("nllLoss", target);
  const d = classDimOf("nllLoss", input, target, opts.classDim);
  return finishNll(nllParts("nllLoss", input, target, d, opts), r);
}

/**
 * Cross-entropy of logits `input` against class indices (N) / (N, d1, ...)
 * or class probabilities (the input's shape), as
 * torch.nn.functional.cross_entropy: class weights, ignoreIndex (class
 * targets), labelSmoothing, reduction. Plain calls (class targets, "mean",
 * no weight or smoothing) run the fused kernel.
 *
 * @example
 * ```ts
 * const loss = crossEntropy(logits, labels, { labelSmoothing: 0.1 });
 * const soft = crossEntropy(logits, mixupTargets); // probabilities, the shape of logits
 * ```
 */
export function crossEntropy(
  input: Tensor,
  target: Tensor,
  opts: CrossEntropyOptions = {},
): Tensor {
  const who = "crossEntropy";
  const r = reductionOf(who, opts);
  const eps = opts.labelSmoothing ?? 0;
  if (!(eps >= 0 && eps <= 1)) {
    throw new RangeError(`${who}: labelSmoothing must be in [0, 1], got ${eps}`);
  }
  const probs = target.dtype === "f32" || target.dtype === "bf16" || target.dtype === "f16";
  if (probs) {
    sameShape(who, input, target, "probability target");
    const d = opts.classDim === undefined ? (input.shape.length === 1 ? 0 : 1) : opts.classDim;
    const n = input.shape.length, cd = d < 0 ? d + n : d;
    if (!Number.isInteger(d) || cd < 0 || cd >= n) {
      throw new RangeError(
        `${who}: classDim ${d} is out of range for an input of shape [${input.shape}]`,
      );
    }
    const C = input.shape[cd]!;
    requireClassWeight(who, opts.weight, C);
    const t = eps > 0 ? add(scale(target, 1 - eps), full([], eps / C)) : target;
    let prod = mul(logSoftmax(input, cd), t);
    if (opts.weight) prod = mul(prod, classBroadcast(opts.weight, n, cd));
    if (r === "none") return scale(sum(prod, cd), -1);
    const total = scale(sum(prod), -1);
    return r === "sum" ? total : div(total, full([], input.numel / C));
  }
  requireIndexTargets(who, target);
  const d = classDimOf(who, input, target, opts.classDim);
  if (
    // the fused kernel also reads bf16/f16 logits (autocast's outputs) as they are
    r === "mean" && !opts.weight && eps === 0 && d === input.shape.length - 1
  ) {
    return fusedCrossEntropy(input, target, { ignoreIndex: opts.ignoreIndex ?? -100 });
  }
  const logp = logSoftmax(input, d);
  const parts = nllParts(who, logp, target, d, opts);
  const nll = finishNll(parts, r);
  if (eps === 0) return nll;
  // torch's label smoothing: (1 - eps) * nll + eps / C * the summed -logp (weighted), ignored targets 0
  const C = input.shape[d]!;
  const weighted = opts.weight
    ? mul(logp, classBroadcast(opts.weight, input.shape.length, d))
    : logp;
  const smooth = where(parts.valid, scale(sum(weighted, d), -1), 0);
  const smoothRed = r === "none"
    ? smooth
    : r === "sum"
    ? sum(smooth)
    : div(sum(smooth), sum(parts.weights));
  return add(scale(nll, 1 - eps), scale(smoothRed, eps / C));
}

/** The 1-D class weight shaped to broadcast along dim `d` of an n-dim input. */
function classBroadcast(weight: Tensor, n: number, d: number): Tensor {
  return reshape(weight, Array.from({ length: n }, (_, i) => (i === d ? weight.numel : 1)));
}

/** |x| with torch's gradient (sign x, 0 at 0). */
function abs(x: Tensor): Tensor {
  return add(relu(x), relu(scale(x, -1)));
}

/** Mean (or summed, or unreduced) squared error, as torch.nn.functional.mse_loss. */
export function mseLoss(input: Tensor, target: Tensor, opts: LossOptions = {}): Tensor {
  const r = reductionOf("mseLoss", opts);
  sameShape("mseLoss", input, target);
  const d = sub(input, target);
  return reduce(mul(d, d), r);
}

/** Mean (or summed, or unreduced) absolute error, as torch.nn.functional.l1_loss. */
export function l1Loss(input: Tensor, target: Tensor, opts: LossOptions = {}): Tensor {
  const r = reductionOf("l1Loss", opts);
  sameShape("l1Loss", input, target);
  return reduce(abs(sub(input, target)), r);
}

/** Options of smoothL1Loss. */
export interface SmoothL1Options extends LossOptions {
  /** where the loss turns from quadratic to linear (1.0; 0 gives the L1 loss) */
  beta?: number;
}

/**
 * The Huber-like smooth L1 loss, as torch.nn.functional.smooth_l1_loss:
 * 0.5 d² / beta where |d| < beta, else |d| - 0.5 beta.
 */
export function smoothL1Loss(input: Tensor, target: Tensor, opts: SmoothL1Options = {}): Tensor {
  const r = reductionOf("smoothL1Loss", opts);
  sameShape("smoothL1Loss", input, target);
  const beta = opts.beta ?? 1;
  if (!(beta >= 0)) throw new RangeError(`smoothL1Loss: beta must be >= 0, got ${beta}`);
  const d = sub(input, target);
  const z = abs(d);
  if (beta === 0) return reduce(z, r);
  const quad = div(scale(mul(d, d), 0.5), full([], beta));
  return reduce(where(lt(z, beta), quad, sub(z, full([], 0.5 * beta))), r);
}

/** Options of the binary cross-entropies. */
export interface BCEOptions extends LossOptions {
  /** a weight per element, broadcast to the input (torch's weight) */
  weight?: Tensor;
}

/**
 * Binary cross-entropy of probabilities `input` (in [0, 1]) against targets
 * of its shape, as torch.nn.functional.binary_cross_entropy (each log
 * clamped at -100, as torch's).
 */
export function binaryCrossEntropy(input: Tensor, target: Tensor, opts: BCEOptions = {}): Tensor {
  const r = reductionOf("binaryCrossEntropy", opts);
  sameShape("binaryCrossEntropy", input, target);
  const logX = clamp(log(input), { min: -100 });
  const log1mX = clamp(log(sub(full([], 1), input)), { min: -100 });
  // -(t * log x + (1 - t) * log(1 - x))
  let loss = scale(add(mul(target, logX), mul(sub(full([], 1), target), log1mX)), -1);
  if (opts.weight) loss = mul(loss, opts.weight);
  return reduce(loss, r);
}

/** Options of binaryCrossEntropyWithLogits. */
export interface BCEWithLogitsOptions extends BCEOptions {
  /** a weight of the positive examples per class, broadcast along the last dim (torch's pos_weight) */
  posWeight?: Tensor;
}

/** log(1 + y) for y in [0, 1], accurate also for tiny y (Goldberg's log(u) * y / (u - 1), u = 1 + y). */
function log1p(y: Tensor): Tensor {
  const u = add(y, full([], 1));
  const one = eq(u, 1);
  const den = where(one, 1, sub(u, full([], 1)));
  return where(one, y, div(mul(log(u), y), den));
}

/**
 * Binary cross-entropy of logits, computed stably, as
 * torch.nn.functional.binary_cross_entropy_with_logits: element weights
 * and posWeight (per class, along the last dim).
 *
 * @example
 * ```ts
 * const loss = binaryCrossEntropyWithLogits(logits, labels, { posWeight: fromArray([3]) });
 * ```
 */
export function binaryCrossEntropyWithLogits(
  input: Tensor,
  target: Tensor,
  opts: BCEWithLogitsOptions = {},
): Tensor {
  const r = reductionOf("binaryCrossEntropyWithLogits", opts);
  sameShape("binaryCrossEntropyWithLogits", input, target);
  const negX = scale(input, -1);
  const maxVal = relu(negX); // (-x).clamp_min(0)
  const base = mul(sub(full([], 1), target), input); // (1 - t) * x
  let loss: Tensor;
  if (opts.posWeight) {
    // torch: (1 - t) x + (1 + (pw - 1) t) (log1p(exp(-|x|)) + max(-x, 0))
    const logWeight = add(mul(sub(opts.posWeight, full([], 1)), target), full([], 1));
    loss = add(base, mul(logWeight, add(log1p(exp(scale(abs(input), -1))), maxVal)));
  } else {
    // torch: (1 - t) x + m + log(exp(-m) + exp(-x - m)), m = max(-x, 0)
    loss = add(add(base, maxVal), log(add(exp(scale(maxVal, -1)), exp(sub(negX, maxVal)))));
  }
  if (opts.weight) loss = mul(loss, opts.weight);
  return reduce(loss, r);
}

// ---- the torch.nn loss classes: the options fixed once, forward(input, target) ----

/** torch.nn.NLLLoss: `new NLLLoss(opts).forward(logProbs, target)` is nllLoss(logProbs, target, opts). */
export class NLLLoss {
  /** Keeps `opts` for every call. */
  constructor(readonly opts: ClassLossOptions = {}) {
    reductionOf("NLLLoss", opts);
  }
  /** The loss of one batch. */
  forward(input: Tensor, target: Tensor): Tensor {
    return nllLoss(input, target, this.opts);
  }
}

/**
 * torch.nn.CrossEntropyLoss.
 *
 * @example
 * ```ts
 * const criterion = new CrossEntropyLoss({ labelSmoothing: 0.1 });
 * const loss = criterion.forward(model.forward(x), y);
 * ```
 */
export class CrossEntropyLoss {
  /** Keeps `opts` for every call. */
  constructor(readonly opts: CrossEntropyOptions = {}) {
    reductionOf("CrossEntropyLoss", opts);
  }
  /** The loss of one batch. */
  forward(input: Tensor, target: Tensor): Tensor {
    return crossEntropy(input, target, this.opts);
  }
}

/** torch.nn.MSELoss. */
export class MSELoss {
  /** Keeps `opts` for every call. */
  constructor(readonly opts: LossOptions = {}) {
    reductionOf("MSELoss", opts);
  }
  /** The loss of one batch. */
  forward(input: Tensor, target: Tensor): Tensor {
    return mseLoss(input, target, this.opts);
  }
}

/** torch.nn.L1Loss. */
export class L1Loss {
  /** Keeps `opts` for every call. */
  constructor(readonly opts: LossOptions = {}) {
    reductionOf("L1Loss", opts);
  }
  /** The loss of one batch. */
  forward(input: Tensor, target: Tensor): Tensor {
    return l1Loss(input, target, this.opts);
  }
}

/** torch.nn.SmoothL1Loss. */
export class SmoothL1Loss {
  /** Keeps `opts` for every call. */
  constructor(readonly opts: SmoothL1Options = {}) {
    reductionOf("SmoothL1Loss", opts);
  }
  /** The loss of one batch. */
  forward(input: Tensor, target: Tensor): Tensor {
    return smoothL1Loss(input, target, this.opts);
  }
}

/** torch.nn.BCELoss. */
export class BCELoss {
  /** Keeps `opts` for every call. */
  constructor(readonly opts: BCEOptions = {}) {
    reductionOf("BCELoss", opts);
  }
  /** The loss of one batch. */
  forward(input: Tensor, target: Tensor): Tensor {
    return binaryCrossEntropy(input, target, this.opts);
  }
}

/** torch.nn.BCEWithLogitsLoss. */
export class BCEWithLogitsLoss {
  /** Keeps `opts` for every call. */
  constructor(readonly opts: BCEWithLogitsOptions = {}) {
    reductionOf("BCEWithLogitsLoss", opts);
  }
  /** The loss of one batch. */
  forward(input: Tensor, target: Tensor): Tensor {
    return binaryCrossEntropyWithLogits(input, target, this.opts);
  }
}
