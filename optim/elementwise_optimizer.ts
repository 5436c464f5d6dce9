/**
 * The base of the optimizers whose update is a short chain of elementwise
 * tensor ops (Adam, Adadelta, Adagrad, RMSprop): per-parameter state tensors
 * by torch's names plus a step count, the state dict in the layout AdamW and
 * SGD use ("<index>.<name>" tensors, "<index>.step" a 0-dim tensor,
 * param_groups as torch writes them), and a step that runs each parameter's
 * update on the tensors' own backend. The ops are the ones torch's
 * single-tensor loop runs, in its order and with its scalars rounded where
 * torch rounds them, so a step differs from torch's only where torch fuses a
 * multiply-add into one rounding (an ulp or so per step, see the parity tests).
 * They run on any backend the tensor ops run on (CPU, CUDA, the emulated GPU).
 */
import { noGrad } from "../tensor/autograd.ts";
import { backend } from "../tensor/backend.ts";
import { full, scope, type Tensor, zeros } from "../tensor/tensor.ts";
import { add, div, mul, scale } from "../tensor/ops/elementwise.ts";
import { checkStepTensor } from "./tensor_table.ts";
import { Optimizer, type OptimizerState, type ParamGroupSpec } from "./optimizer.ts";

/** A parameter's optimizer state: its step count and named buffers (torch's state keys). */
export interface ElementwiseState {
  /** Steps taken (torch's state "step"). */
  step: number;
  /** The state tensors by torch's names (exp_avg, sum, square_avg, ...). */
  buffers: Map<string, Tensor>;
}

/** Base of Adam, Adadelta, Adagrad and RMSprop (not exported from mod.ts). */
export abstract class ElementwiseOptimizer<H extends { lr: number }> extends Optimizer<H> {
  readonly #state = new Map<Tensor, ElementwiseState>();

  /** Builds the groups (see Optimizer) and checks every group's hyperparameters. */
  constructor(params: Tensor[] | ParamGroupSpec<H>[], defaults: H) {
    super(params, defaults);
    for (const [i, g] of this.groups.entries()) this.checkHyper(g.hyper, i);
  }

  /** Throws a RangeError naming a hyperparameter of group `index` that torch refuses. */
  protected abstract checkHyper(h: H, index: number): void;
  /** The state buffers a parameter of a group with `h` keeps, by torch's names, with their initial value. */
  protected abstract buffers(h: H): [name: string, initial: number][];
  /** One parameter's update, in place, after its step count was incremented. */
  protected abstract updateOne(p: Tensor, g: Tensor, s: ElementwiseState, h: H): void;
  /** A group's hyperparameters as torch's param_groups entry writes them. */
  protected abstract groupJson(h: H): Record<string, unknown>;
  /** Reads a saved param_groups entry back into `h`. */
  protected abstract readGroup(saved: Record<string, unknown>, h: H): void;

  /** The state of parameter `p`, made when first needed (as torch's lazy state). */
  #stateOf(p: Tensor, h: H): ElementwiseState {
    let s = this.#state.get(p);
    if (!s) {
      s = { step: 0, buffers: new Map() };
      this.#state.set(p, s);
    }
    // a buffer the group asks for that the state lacks (e.g. momentum turned on later) starts at its initial value
    for (const [name, initial] of this.buffers(h)) {
      if (!s.buffers.has(name)) s.buffers.set(name, full(p.shape, initial).keep());
    }
    return s;
  }

  /** Runs updateOne on every parameter that has a gradient. */
  protected update(): void {
    const who = `${this.constructor.name}.step`;
    const device = backend().device;
    noGrad(() => {
      let index = 0;
      for (const group of this.groups) {
        for (const p of group.params) {
          const i = index++;
          const g = p.grad;
          if (!g) continue;
          checkStepTensor(who, p, i, p);
          checkStepTensor(who, p, i, g);
          if (p.device !== device) {
            throw new TypeError(
              `${who}: parameter ${i} [${p.shape}] is on ${p.device} but the active device is ${device}; ` +
                `step the optimizer with its parameters' device active`,
            );
          }
          const s = this.#stateOf(p, group.hyper);
          s.step++;
          scope(() => this.updateOne(p, g, s, group.hyper));
        }
      }
    });
  }

  /** The state as torch's state_dict lays it out: "<index>.step" and "<index>.<buffer>" tensors, param_groups. */
  stateDict(): OptimizerState {
    const tensors = new Map<string, Tensor>();
    this.params().forEach((p, i) => {
      const s = this.#state.get(p);
      if (!s) return;
      tensors.set(`${i}.step`, zeros([]).fill(s.step));
      for (const [name, t] of s.buffers) tensors.set(`${i}.${name}`, t);
    });
    return { tensors, paramGroups: this.groupsJson((h) => this.groupJson(h)) };
  }

  /** Restores a state of this optimizer's layout. */
  protected loadState(state: OptimizerState): void {
    const name = this.constructor.name;
    this.restoreGroups(state, (saved, h) => this.readGroup(saved, h));
    let index = 0;
    for (const group of this.groups) {
      for (const p of group.params) {
        const i = index++;
        const step = state.tensors.get(`${i}.step`);
        const wanted = this.buffers(group.hyper).map(([n]) => n);
        const present = wanted.filter((n) => state.tensors.has(`${i}.${n}`));
        if (!step && present.length === 0) continue;
        if (!step || present.length !== wanted.length) {
          const missing = [
            ...(step ? [] : ["step"]),
            ...wanted.filter((n) => !present.includes(n)),
          ];
          throw new Error(
            `Cannot load ${name} state of parameter ${i}: it lacks ${missing.join(", ")}`,
          );
        }
        const buffers = new Map<string, Tensor>();
        for (const n of wanted) {
          const t = state.tensors.get(`${i}.${n}`)!;
          if (t.numel !== p.numel) {
            throw new Error(
              `Cannot load ${name} state of parameter ${i}: ${n} [${t.shape}] does not match the parameter [${p.shape}]`,
            );
          }
          buffers.set(n, zeros(p.shape).keep().copyFrom(t));
        }
        const old = this.#state.get(p);
        if (old) { for (const t of old.buffers.values()) t.dispose(); }
        this.#state.set(p, { step: step.item(), buffers });
      }
    }
  }
}

// ---- the ops of torch's in-place updates, each rounding where torch's does ----

/** x + c, c rounded to f32 (torch's `x.add(c)` with a Python float). */
export function addScalar(x: Tensor, c: number): Tensor {
  return add(x, full([], c));
}

/** x / c, c rounded to f32 (torch's `x / c` with a Python float). */
export function divScalar(x: Tensor, c: number): Tensor {
  return div(x, full([], c));
}

/** a * alpha + b (torch's `a.mul_(alpha).add_(b, alpha=beta)` with b pre-scaled by beta). */
export function mulAdd(a: Tensor, alpha: number, b: Tensor, beta: number): Tensor {
  return add(alpha === 1 ? a : scale(a, alpha), beta === 1 ? b : scale(b, beta));
}

/** x + value * t1 * t2 (torch's addcmul: (value * t1) * t2, then the sum). */
export function addcmul(x: Tensor, t1: Tensor, t2: Tensor, value: number): Tensor {
  return add(x, mul(value === 1 ? t1 : scale(t1, value), t2));
}

/** x + value * t1 / t2 (torch's addcdiv: (value * t1) / t2, then the sum). */
export function addcdiv(x: Tensor, t1: Tensor, t2: Tensor, value: number): Tensor {
  return add(x, div(value === 1 ? t1 : scale(t1, value), t2));
}

/**
 * The gradient as torch's loops first rewrite it: negated under `maximize`,
 * then with L2 weight decay folded in (`grad.add(param, alpha=weight_decay)`).
 */
export function effectiveGrad(
  g: Tensor,
  p: Tensor,
  weightDecay: number,
  maximize: boolean,
): Tensor {
  const d = maximize ? scale(g, -1) : g;
  return weightDecay === 0 ? d : add(d, scale(p, weightDecay));
}

/** Throws unless `v` is a finite number >= 0 (torch's "Invalid ... value" checks). */
export function requireNonNegative(who: string, name: string, v: number, index: number): void {
  if (!(typeof v === "number" && Number.isFinite(v) && v >= 0)) {
    throw new RangeError(
      `${who}: invalid ${name} ${v} in parameter group ${index} (expected >= 0)`,
    );
  }
}

/** Throws unless `v` is in [0, 1) (torch's beta checks). */
export function requireUnitInterval(who: string, name: string, v: number, index: number): void {
  if (!(typeof v === "number" && v >= 0 && v < 1)) {
    throw new RangeError(
      `${who}: invalid ${name} ${v} in parameter group ${index} (expected 0 <= ${name} < 1)`,
    );
  }
}
