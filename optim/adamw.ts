/**
 * AdamW as torch 1.13 runs it (decoupled weight decay, bias corrections in
 * double): every parameter of a device in one native call (dt_adamw_many, one
 * kernel launch on a GPU, like torch's fused AdamW), each with its group's
 * hyperparameters and its own step, the same bits as torch's single-tensor
 * loop.
 */
import { backendOf, type Device } from "../tensor/backend.ts";
import { type Tensor, zeros } from "../tensor/tensor.ts";
import {
  address,
  byDevice,
  checkStepTensor,
  count,
  HostTable,
  onDevice,
  oneDevice,
} from "./tensor_table.ts";
import { Optimizer, type OptimizerState, type ParamGroupSpec } from "./optimizer.ts";

/** AdamW hyperparameters; names and defaults are torch's (`betas=(0.9, 0.999)`). */
export interface AdamWOptions {
  /** Learning rate (default 1e-3). */
  lr: number;
  /** Decay rates of the running means of gradients and of squared gradients (torch's betas, default [0.9, 0.999]); each in [0, 1). */
  betas: [number, number];
  /** Added to the denominator (default 1e-8). */
  eps: number;
  /**
   * Decoupled weight decay: each step multiplies parameters by 1 - lr * weightDecay (default 1e-2).
   */
  weightDecay: number;
}

/**
 * What AdamW's constructor and parameter groups accept: AdamWOptions, or the
 * old spelling `beta1`/`beta2` (deprecated: it warns once, use `betas`).
 */
export type AdamWOptionsInput = Partial<AdamWOptions> & {
  /** @deprecated use `betas: [beta1, beta2]` */
  beta1?: number;
  /** @deprecated use `betas: [beta1, beta2]` */
  beta2?: number;
};

const DEFAULTS: AdamWOptions = {
  lr: 1e-3,
  betas: [0.9, 0.999],
  eps: 1e-8,
  weightDecay: 1e-2,
};

let warnedBetaAlias = false;

/**
 * `opts` with the deprecated beta1/beta2 turned into `betas` (the other one
 * from `fallback`), warning once per process; the betas checked as torch does.
 */
function normalizeBetas<T extends AdamWOptionsInput>(
  opts: T,
  fallback: [number, number],
  where: string,
): Omit<T, "beta1" | "beta2"> {
  const { beta1, beta2, ...rest } = opts;
  if (beta1 !== undefined || beta2 !== undefined) {
    if (rest.betas !== undefined) {
      throw new TypeError(
        `${where}: sets both betas and the deprecated beta1/beta2; give betas only`,
      );
    }
    if (!warnedBetaAlias) {
      warnedBetaAlias = true;
      console.warn(
        "dtrain: AdamW's beta1/beta2 options are deprecated; write betas: [beta1, beta2] as in PyTorch",
      );
    }
    rest.betas = [beta1 ?? fallback[0], beta2 ?? fallback[1]];
  }
  if (rest.betas !== undefined) {
    const b = rest.betas as unknown;
    if (!Array.isArray(b) || b.length !== 2) {
      throw new TypeError(
        `${where}: betas must be two numbers [beta1, beta2], got ${JSON.stringify(b)}`,
      );
    }
    b.forEach((x, i) => {
      if (typeof x !== "number" || !(x >= 0 && x < 1)) {
        throw new RangeError(
          `${where}: invalid beta parameter at index ${i}: ${x} (expected 0 <= beta < 1)`,
        );
      }
    });
    rest.betas = [b[0], b[1]];
  }
  return rest;
}

interface AdamState {
  step: number;
  expAvg: Tensor;
  expAvgSq: Tensor;
}

/** A parameter in a step: its gradient, state, group hyperparameters and index. */
interface AdamItem {
  p: Tensor;
  g: Tensor;
  s: AdamState;
  h: AdamWOptions;
  index: number;
}

/** torch.optim.AdamW. */
export class AdamW extends Optimizer<AdamWOptions> {
  readonly #state = new Map<Tensor, AdamState>();
  /** the step's host tables (params, grads, exp_avgs, exp_avg_sqs; steps; 5 scalars each) */
  readonly #table = new HostTable(4, 5, 0);
  readonly #items = new Map<Tensor, AdamItem>();
  readonly #list: AdamItem[] = [];

  /**
   * AdamW over `params` (a list, or groups with their own overrides), options defaulting to
   * torch's.
   *
   * @example
   * ```ts
   * import { AdamW, Linear } from "dtrain";
   * const model = new Linear(4, 2);
   * const opt = new AdamW(model.parameters(), { lr: 3e-4, weightDecay: 0.1 });
   * // nanoGPT's groups: no decay on biases and norm weights
   * const grouped = new AdamW([
   *   { params: model.parameters().filter((p) => p.shape.length >= 2) },
   *   { params: model.parameters().filter((p) => p.shape.length < 2), weightDecay: 0 },
   * ]);
   * ```
   */
  constructor(
    params: Tensor[] | (ParamGroupSpec<AdamWOptions> & AdamWOptionsInput)[],
    opts: AdamWOptionsInput = {},
  ) {
    const defaults = { ...DEFAULTS, ...normalizeBetas(opts, DEFAULTS.betas, "AdamW") };
    const groups = Array.isArray(params) && params.length > 0 && "params" in (params[0] as object)
      ? (params as (ParamGroupSpec<AdamWOptions> & AdamWOptionsInput)[]).map((g, i) => {
        const where = `AdamW: parameter group ${i}`;
        const spec = normalizeBetas(g, defaults.betas, where) as ParamGroupSpec<AdamWOptions>;
        if (g.hyper) {
          spec.hyper = normalizeBetas(g.hyper as AdamWOptionsInput, defaults.betas, where);
        }
        return spec;
      })
      : params as Tensor[];
    super(groups, defaults);
  }

  /** One AdamW step of every parameter that has a gradient. */
  protected update(): void {
    // the step's items are kept per parameter and the list reused: a step allocates nearly nothing
    const items = this.#list;
    items.length = 0;
    let index = 0;
    for (const g of this.groups) {
      for (const p of g.params) {
        const i = index++;
        if (!p.grad || !this.owns(p)) continue;
        let s = this.#state.get(p);
        if (!s) {
          s = {
            step: 0,
            expAvg: zeros(p.shape).keep(),
            expAvgSq: zeros(p.shape).keep(),
          };
          this.#state.set(p, s);
        }
        let it = this.#items.get(p);
        if (!it) {
          it = { p, g: p.grad, s, h: g.hyper, index: i };
          this.#items.set(p, it);
        }
        it.g = p.grad;
        it.s = s;
        it.h = g.hyper;
        it.index = i;
        items.push(it);
      }
    }
    for (const it of items) {
      checkStepTensor("AdamW.step", it.p, it.index, it.p);
      checkStepTensor("AdamW.step", it.p, it.index, it.g);
      checkStepTensor("AdamW.step", it.p, it.index, it.s.expAvg);
      checkStepTensor("AdamW.step", it.p, it.index, it.s.expAvgSq);
    }
    for (const it of items) it.s.step++;
    const device = oneDevice(items, onDevice);
    if (device) this.#call(device, items);
    else for (const [d, list] of byDevice(items, onDevice)) this.#call(d, list);
  }

  /** One dt_adamw_many over `list`, all on `device`. */
  #call(device: Device, list: AdamItem[]): void {
    const n = list.length;
    const T = this.#table.reserve(n);
    const params = T.ptrs[0]!;
    const grads = T.ptrs[1]!;
    const m = T.ptrs[2]!;
    const v = T.ptrs[3]!;
    for (let t = 0; t < n; t++) {
      const it = list[t]!;
      params[t] = address(it.p);
      grads[t] = address(it.g);
      m[t] = address(it.s.expAvg);
      v[t] = address(it.s.expAvgSq);
      T.counts[t] = count(it.p);
      T.ints[t] = BigInt(it.s.step);
      const h = T.f64, k = 5 * t;
      h[k] = it.h.lr;
      h[k + 1] = it.h.betas[0];
      h[k + 2] = it.h.betas[1];
      h[k + 3] = it.h.eps;
      h[k + 4] = it.h.weightDecay;
    }
    const at = T.at;
    backendOf(device).call.dt_adamw_many(
      at.ptrs[0]!,
      at.ptrs[1]!,
      at.ptrs[2]!,
      at.ptrs[3]!,
      at.counts,
      at.ints,
      at.f64,
      BigInt(n),
    );
  }

  /**
   * Per parameter `step`, `exp_avg` and `exp_avg_sq`, and each group's lr, betas, eps and
   * weight_decay, named as torch's.
   */
  stateDict(): OptimizerState {
    const tensors = new Map<string, Tensor>();
    this.params().forEach((p, i) => {
      const s = this.#state.get(p);
      if (!s) return;
      tensors.set(`${i}.step`, zeros([]).fill(s.step));
      tensors.set(`${i}.exp_avg`, s.expAvg);
      tensors.set(`${i}.exp_avg_sq`, s.expAvgSq);
    });
    const paramGroups = this.groupsJson((h) => ({
      lr: h.lr,
      betas: [...h.betas],
      eps: h.eps,
      weight_decay: h.weightDecay,
      amsgrad: false,
      maximize: false,
      foreach: null,
      capturable: false,
    }));
    return { tensors, paramGroups };
  }

  /** Restores what stateDict() returned. */
  protected loadState(state: OptimizerState): void {
    this.restoreGroups(state, (saved, h) => {
      if (typeof saved.lr === "number") h.lr = saved.lr;
      const betas = saved.betas as number[] | undefined;
      if (betas) h.betas = [betas[0]!, betas[1]!];
      if (typeof saved.eps === "number") h.eps = saved.eps;
      if (typeof saved.weight_decay === "number") {
        h.weightDecay = saved.weight_decay;
      }
    });
    this.params().forEach((p, i) => {
      const step = state.tensors.get(`${i}.step`);
      const m = state.tensors.get(`${i}.exp_avg`);
      const v = state.tensors.get(`${i}.exp_avg_sq`);
      if (!step && !m && !v) return;
      if (!step || !m || !v) {
        throw new Error(
          `Cannot load AdamW state of parameter ${i}: step, exp_avg and exp_avg_sq are needed`,
        );
      }
      if (m.numel !== p.numel || v.numel !== p.numel) {
        throw new Error(
          `Cannot load AdamW state of parameter ${i}: exp_avg [${m.shape}] does not match the parameter [${p.shape}]`,
        );
      }
      if (!this.owns(p)) return; // another rank's share (keepShard)
      const old = this.#state.get(p);
      old?.expAvg.dispose();
      old?.expAvgSq.dispose();
      this.#state.set(p, {
        step: step.item(),
        expAvg: zeros(p.shape).keep().copyFrom(m),
        expAvgSq: zeros(p.shape).keep().copyFrom(v),
      });
    });
  }
}
