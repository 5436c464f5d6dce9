/**
 * What every optimizer shares: parameter groups with their hyperparameters,
 * zeroGrad, and a state dict laid out as PyTorch's (per-parameter state
 * tensors under "state.<index>.<name>", param_groups as JSON), so a dtrain
 * optimizer state reads like torch's optimizer.state_dict() flattened.
 */
import type { Tensor } from "../tensor/tensor.ts";

/** One group of parameters sharing hyperparameters (torch's param_groups). */
export interface ParamGroup<H> {
  params: Tensor[];
  hyper: H;
}

/** An optimizer's state: tensors by "<index>.<name>" and the groups' hyperparameters. */
export interface OptimizerState {
  /** per-parameter tensors, keyed "<param index>.<name>" (e.g. "0.exp_avg") */
  tensors: Map<string, Tensor>;
  /** JSON-able: the groups' hyperparameters plus "params": [indices] */
  paramGroups: Record<string, unknown>[];
}

/**
 * Called by every optimizer's step() before it updates the parameters: a
 * hook point for tools built on the library (`dtrain check`'s probe records
 * the gradient norm of each step there, and may end the process).
 */
export type OptimizerStepHook = (optimizer: Optimizer<{ lr: number }>) => void;

const stepHooks = new Set<OptimizerStepHook>();

/** Adds a hook to every optimizer step; returns the function that removes it. */
export function addOptimizerStepHook(hook: OptimizerStepHook): () => void {
  stepHooks.add(hook);
  return () => stepHooks.delete(hook);
}

/** Base of SGD and AdamW. */
export abstract class Optimizer<H extends { lr: number }> {
  readonly groups: ParamGroup<H>[];

  constructor(
    params: Tensor[] | { params: Tensor[]; hyper?: Partial<H> }[],
    defaults: H,
  ) {
    const groups = Array.isArray(params) && params.length > 0 &&
        "params" in (params[0] as object)
      ? params as { params: Tensor[]; hyper?: Partial<H> }[]
      : [{ params: params as Tensor[] }];
    this.groups = groups.map((g) => ({
      params: g.params,
      hyper: { ...defaults, ...(g.hyper ?? {}) },
    }));
    const seen = new Set<Tensor>();
    for (const g of this.groups) {
      for (const p of g.params) {
        if (seen.has(p)) {
          throw new Error(
            `Optimizer: a parameter of shape [${p.shape}] appears in more than one group`,
          );
        }
        seen.add(p);
      }
    }
  }

  /** Every parameter in group order (the indices of the state dict). */
  params(): Tensor[] {
    return this.groups.flatMap((g) => g.params);
  }

  /** Sets every gradient to zero (torch 1.13's default zero_grad, not None). */
  zeroGrad(): void {
    for (const p of this.params()) p.grad?.fill(0);
  }

  /** Learning rate of the first group (schedules set every group's). */
  get lr(): number {
    return this.groups[0]!.hyper.lr;
  }
  set lr(v: number) {
    for (const g of this.groups) g.hyper.lr = v;
  }

  /** Applies one update from the current gradients (parameters without a grad are skipped). */
  step(): void {
    for (const hook of stepHooks) hook(this);
    this.update();
  }

  /** The update rule itself (step() without the step hooks). */
  protected abstract update(): void;
  abstract stateDict(): OptimizerState;
  abstract loadStateDict(state: OptimizerState): void;

  /** The groups' hyperparameters as torch writes them, with parameter indices. */
  protected groupsJson(
    extra: (h: H) => Record<string, unknown>,
  ): Record<string, unknown>[] {
    let i = 0;
    return this.groups.map((g) => ({
      ...extra(g.hyper),
      params: g.params.map(() => i++),
    }));
  }

  /** Checks a saved state's groups against this optimizer's and restores hyperparameters. */
  protected restoreGroups(
    state: OptimizerState,
    read: (saved: Record<string, unknown>, h: H) => void,
  ): void {
    if (state.paramGroups.length !== this.groups.length) {
      throw new Error(
        `Cannot load optimizer state: it has ${state.paramGroups.length} parameter groups, this optimizer ${this.groups.length}`,
      );
    }
    state.paramGroups.forEach((saved, gi) => {
      const n = (saved.params as unknown[] | undefined)?.length;
      const g = this.groups[gi]!;
      if (n !== undefined && n !== g.params.length) {
        throw new Error(
          `Cannot load optimizer state: group ${gi} has ${n} parameters, this optimizer ${g.params.length}`,
        );
      }
      read(saved, g.hyper);
    });
  }
}
