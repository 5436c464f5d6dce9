/**
 * What `dtrain check --exact` hashes at an optimizer step: every parameter
 * (by the name its model gives it), its gradient, every optimizer-state
 * tensor, every buffer of the trained models and each group's
 * hyperparameters, as labelled items in the order the step made them — so
 * the first item that differs between two runs is the first place their
 * bits part.
 */
import { createHash } from "node:crypto";
import { scope, type Tensor } from "../tensor/tensor.ts";
import type { Module } from "../nn/module.ts";
import type { Optimizer } from "../optim/optimizer.ts";
import { ZeroRedundancyOptimizer } from "../distributed/zero.ts";

/** One hashed thing: its label ("parameter fc1.weight") and its value (a digest, or a number's text). */
export type SnapshotItem = [label: string, value: string];

/**
 * A tensor's digest: the first 32 hex digits (128 bits) of the SHA-256 of
 * its dtype, shape and raw bytes (two tensors with the same bytes but
 * another shape are not the same state).
 */
export function stateDigest(t: Tensor): string {
  return createHash("sha256")
    .update(`${t.dtype}[${t.shape.join(",")}]`)
    .update(t.toBytes())
    .digest("hex")
    .slice(0, 32);
}

/** Names tensors by the models announced so far (the first name a tensor is given wins). */
export class TensorNames {
  readonly #params = new Map<Tensor, string>();
  readonly #models: Module[] = [];

  /** Adds a model's parameters (a model added twice is kept once). */
  addModel(model: Module): void {
    if (this.#models.includes(model)) return;
    this.#models.push(model);
    for (const [name, p] of model.namedParameters()) {
      if (!this.#params.has(p)) this.#params.set(p, name);
    }
  }

  /** A parameter's name, or "#<index in the optimizer> [shape]" when no announced model holds it. */
  param(p: Tensor, index: number): string {
    return this.#params.get(p) ?? `#${index} [${p.shape.join(", ")}]`;
  }

  /** Every buffer of the announced models, named (a buffer shared by two models once). */
  buffers(): [string, Tensor][] {
    const seen = new Set<Tensor>();
    const out: [string, Tensor][] = [];
    for (const model of this.#models) {
      for (const [name, b] of model.namedBuffers()) {
        if (seen.has(b)) continue;
        seen.add(b);
        out.push([name, b]);
      }
    }
    return out;
  }
}

/**
 * What a run holds where an optimizer step starts (before its update):
 * the parameters and optimizer state the step starts from (those left by
 * the previous step), the buffers its forward passes left, each group's
 * hyperparameters and the gradients it applies. `withStep: false` leaves out
 * the hyperparameters and gradients: the state a run ends with.
 *
 * A sharded optimizer (ZeRO) holds only its share of the state on each rank,
 * which depends on the world size by design: its state tensors are left out.
 */
export function snapshot(
  optimizer: Optimizer<{ lr: number }>,
  names: TensorNames,
  withStep: boolean,
): SnapshotItem[] {
  return scope(() => {
    const params = optimizer.params();
    const items: SnapshotItem[] = params.map((p, i) => [
      `parameter ${names.param(p, i)}`,
      stateDigest(p),
    ]);
    if (!(optimizer instanceof ZeroRedundancyOptimizer)) {
      const state = optimizer.stateDict();
      for (const [key, t] of [...state.tensors].sort(([a], [b]) => stateKeyOrder(a, b))) {
        const dot = key.indexOf(".");
        const index = Number(key.slice(0, dot));
        const param = params[index];
        const owner = param ? names.param(param, index) : `#${index}`;
        items.push([`optimizer ${key.slice(dot + 1)} of ${owner}`, stateDigest(t)]);
      }
    }
    for (const [name, b] of names.buffers()) items.push([`buffer ${name}`, stateDigest(b)]);
    if (!withStep) return items;
    optimizer.groups.forEach((g, gi) => {
      for (const [k, v] of Object.entries(g.hyper as Record<string, unknown>)) {
        items.push([`hyperparameter ${k} of group ${gi}`, JSON.stringify(v)]);
      }
    });
    params.forEach((p, i) => {
      items.push([
        `gradient of ${names.param(p, i)}`,
        p.grad ? stateDigest(p.grad) : "none",
      ]);
    });
    return items;
  });
}

/** Orders "<index>.<name>" keys by parameter index, then name. */
function stateKeyOrder(a: string, b: string): number {
  const ia = Number(a.slice(0, a.indexOf("."))), ib = Number(b.slice(0, b.indexOf(".")));
  return ia !== ib ? ia - ib : a < b ? -1 : a > b ? 1 : 0;
}
