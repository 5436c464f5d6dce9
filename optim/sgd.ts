/** SGD with momentum, dampening, Nesterov and weight decay, as torch 1.13 (fused native kernel). */
import { backend } from "../tensor/backend.ts";
import { type Tensor, zeros } from "../tensor/tensor.ts";
import { Optimizer, type OptimizerState, type ParamGroupSpec } from "./optimizer.ts";

/** SGD hyperparameters; defaults are torch's (lr has none there; 1e-2 here). */
export interface SGDOptions {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
}

const DEFAULTS: SGDOptions = {
  lr: 1e-2,
  momentum: 0,
  dampening: 0,
  weightDecay: 0,
  nesterov: false,
};

/** torch.optim.SGD. */
export class SGD extends Optimizer<SGDOptions> {
  readonly #buf = new Map<Tensor, Tensor>();

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

  protected update(): void {
    const b = backend();
    for (const g of this.groups) {
      const h = g.hyper;
      for (const p of g.params) {
        if (!p.grad) continue;
        let buf = this.#buf.get(p);
        const first = !buf;
        if (!buf && h.momentum !== 0) {
          buf = zeros(p.shape).keep();
          this.#buf.set(p, buf);
        }
        b.call.dt_sgd(
          p.ptr,
          p.grad.ptr,
          buf?.ptr ?? null,
          BigInt(p.numel),
          h.lr,
          h.momentum,
          h.dampening,
          h.weightDecay,
          h.nesterov ? 1 : 0,
          first ? 1 : 0,
        );
      }
    }
  }

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
      this.#buf.get(p)?.dispose();
      this.#buf.set(p, zeros(p.shape).keep().copyFrom(buf));
    });
  }
}
