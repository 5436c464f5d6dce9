/**
 * SGD with momentum, dampening, Nesterov and weight decay, as torch 1.13:
 * every parameter of a device in one native call (dt_sgd_many, one kernel
 * launch on a GPU), the same bits as torch's single-tensor loop.
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

/** SGD hyperparameters; defaults are torch's (lr has none there; 1e-2 here). */
export interface SGDOptions {
  /** Learning rate (default 1e-2). */
  lr: number;
  /** Momentum factor (default 0: plain SGD). */
  momentum: number;
  /** Dampening of the momentum (default 0). */
  dampening: number;
  /** L2 penalty added to the gradient (default 0). */
  weightDecay: number;
  /** Nesterov momentum (needs momentum > 0 and dampening 0; default false). */
  nesterov: boolean;
}

const DEFAULTS: SGDOptions = {
  lr: 1e-2,
  momentum: 0,
  dampening: 0,
  weightDecay: 0,
  nesterov: false,
};

/** A parameter in a step: its gradient, buffer (first: made this step), group hyperparameters, index. */
interface SgdItem {
  p: Tensor;
  g: Tensor;
  buf: Tensor | undefined;
  first: boolean;
  h: SGDOptions;
  index: number;
}

/** torch.optim.SGD. */
export class SGD extends Optimizer<SGDOptions> {
  readonly #buf = new Map<Tensor, Tensor>();
  /** the step's host tables (params, grads, buffers; 4 scalars and 2 flags each) */
  readonly #table = new HostTable(3, 4, 2);
  readonly #items = new Map<Tensor, SgdItem>();
  readonly #list: SgdItem[] = [];

  /**
   * SGD over `params` (a list, or groups with their own overrides); throws on Nesterov without
   * momentum or with dampening, as torch.
   *
   * @example
   * ```ts
   * import { Linear, SGD } from "dtrain";
   * const model = new Linear(4, 2);
   * const opt = new SGD(model.parameters(), { lr: 0.1, momentum: 0.9 });
   * ```
   */
  constructor(
    params: Tensor[] | ParamGroupSpec<SGDOptions>[],
    opts: Partial<SGDOptions> = {},
  ) {
    super(params, { ...DEFAULTS, ...opts });
    for (const g of this.groups) {
      if (
        g.hyper.nesterov && (g.hyper.momentum <= 0 || g.hyper.dampening !== 0)
      ) {
        throw new RangeError(
          "SGD: Nesterov momentum requires a momentum and zero dampening",
        );
      }
    }
  }

  /** One SGD step of every parameter that has a gradient. */
  protected update(): void {
    // the step's items are kept per parameter and the list reused: a step allocates nearly nothing
    const items = this.#list;
    items.length = 0;
    let index = 0;
    for (const g of this.groups) {
      const h = g.hyper;
      for (const p of g.params) {
        const i = index++;
        if (!p.grad || !this.owns(p)) continue;
        let buf = this.#buf.get(p);
        const first = !buf;
        if (!buf && h.momentum !== 0) {
          buf = zeros(p.shape).keep();
          this.#buf.set(p, buf);
        }
        let it = this.#items.get(p);
        if (!it) {
          it = { p, g: p.grad, buf, first, h, index: i };
          this.#items.set(p, it);
        }
        it.g = p.grad;
        it.buf = buf;
        it.first = first;
        it.h = h;
        it.index = i;
        items.push(it);
      }
    }
    for (const it of items) {
      checkStepTensor("SGD.step", it.p, it.index, it.p);
      checkStepTensor("SGD.step", it.p, it.index, it.g);
      checkStepTensor("SGD.step", it.p, it.index, it.buf);
    }
    const device = oneDevice(items, onDevice);
    if (device) this.#call(device, items);
    else for (const [d, list] of byDevice(items, onDevice)) this.#call(d, list);
  }

  /** One dt_sgd_many over `list`, all on `device`. */
  #call(device: Device, list: SgdItem[]): void {
    const n = list.length;
    const T = this.#table.reserve(n);
    const params = T.ptrs[0]!;
    const grads = T.ptrs[1]!;
    const bufs = T.ptrs[2]!;
    for (let t = 0; t < n; t++) {
      const it = list[t]!;
      params[t] = address(it.p);
      grads[t] = address(it.g);
      // momentum 0: no buffer (torch keeps none either)
      bufs[t] = it.h.momentum !== 0 ? address(it.buf) : 0n;
      T.counts[t] = count(it.p);
      const h = T.f64, k = 4 * t;
      h[k] = it.h.lr;
      h[k + 1] = it.h.momentum;
      h[k + 2] = it.h.dampening;
      h[k + 3] = it.h.weightDecay;
      T.i32[2 * t] = it.h.nesterov ? 1 : 0;
      T.i32[2 * t + 1] = it.first ? 1 : 0;
    }
    const at = T.at;
    backendOf(device).call.dt_sgd_many(
      at.ptrs[0]!,
      at.ptrs[1]!,
      at.ptrs[2]!,
      at.counts,
      at.f64,
      at.i32,
      BigInt(n),
    );
  }

  /** Per parameter `momentum_buffer`, and each group's hyperparameters, named as torch's. */
  stateDict(): OptimizerState {
    const tensors = new Map<string, Tensor>();
    this.params().forEach((p, i) => {
      const buf = this.#buf.get(p);
      if (buf) tensors.set(`${i}.momentum_buffer`, buf);
    });
    const paramGroups = this.groupsJson((h) => ({
      lr: h.lr,
      momentum: h.momentum,
      dampening: h.dampening,
      weight_decay: h.weightDecay,
      nesterov: h.nesterov,
      maximize: false,
      foreach: null,
    }));
    return { tensors, paramGroups };
  }

  /** Restores what stateDict() returned. */
  protected loadState(state: OptimizerState): void {
    this.restoreGroups(state, (saved, h) => {
      if (typeof saved.lr === "number") h.lr = saved.lr;
      if (typeof saved.momentum === "number") h.momentum = saved.momentum;
      if (typeof saved.dampening === "number") h.dampening = saved.dampening;
      if (typeof saved.weight_decay === "number") {
        h.weightDecay = saved.weight_decay;
      }
      if (typeof saved.nesterov === "boolean") h.nesterov = saved.nesterov;
    });
    this.params().forEach((p, i) => {
      const buf = state.tensors.get(`${i}.momentum_buffer`);
      if (!buf) return;
      if (buf.numel !== p.numel) {
        throw new Error(
          `Cannot load SGD state of parameter ${i}: momentum_buffer [${buf.shape}] does not match [${p.shape}]`,
        );
      }
      if (!this.owns(p)) return; // another rank's share (keepShard)
      this.#buf.get(p)?.dispose();
      this.#buf.set(p, zeros(p.shape).keep().copyFrom(buf));
    });
  }
}
