/**
 * What every optimizer shares: parameter groups with their hyperparameters,
 * zeroGrad, and a state dict laid out as PyTorch's (per-parameter state
 * tensors under "state.<index>.<name>", param_groups as JSON), so a dtrain
 * optimizer state reads like torch's optimizer.state_dict() flattened.
 */
import { scope, Tensor } from "../tensor/tensor.ts";
import { fromStTensor } from "../tensor/st_bridge.ts";
import { isStTensor } from "../io/st_tensor.ts";
import { type CheckpointLike, pickTensors, type TensorFileLike } from "../tensor/state_source.ts";
import { enter, leave, stepDone } from "../profile/profile.ts";
import { countStepDone } from "../profile/call_count.ts";
import { dropWeightCasts } from "../tensor/weight_cast.ts";
import { backendOf } from "../tensor/backend.ts";
import { asMemoryKind } from "../tensor/memory_kinds.ts";
import { address, count, HostTable } from "./tensor_table.ts";

/** One group of parameters sharing hyperparameters (torch's param_groups). */
export interface ParamGroup<H> {
  /** The group's parameters. */
  params: Tensor[];
  /** The group's hyperparameters (the optimizer's defaults with the group's overrides). */
  hyper: H;
  /**
   * The group's learning rate when the optimizer was built (torch's
   * `initial_lr`): a schedule keeps each group's lr at this ratio to the
   * first group's, so it scales per-group rates instead of overwriting them.
   */
  readonly initialLr: number;
}

/**
 * A parameter group as given to an optimizer: its parameters and the
 * hyperparameters it overrides, written as in PyTorch
 * (`{ params, weightDecay: 0 }`) or under `hyper`.
 */
export type ParamGroupSpec<H> = { params: Tensor[]; hyper?: Partial<H> } & Partial<H>;

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

/** Base of SGD and AdamW. (torch.optim.Optimizer: param groups, zeroGrad, step, state dicts.) */
export abstract class Optimizer<H extends { lr: number }> {
  /**
   * The parameter groups in the order given (torch's `optimizer.param_groups`); set
   * `groups[i].hyper.lr` to change a rate by hand.
   */
  readonly groups: ParamGroup<H>[];
  /** zeroGrad's host table (the gradients' addresses and sizes) */
  readonly #zeroTable = new HostTable(1, 0, 0);
  /** the parameters this optimizer updates and keeps state for (null: all; see keepShard) */
  #shard: ReadonlySet<Tensor> | null = null;

  /**
   * Parameters as one list, or as groups (`{ params, ...overrides }`, as PyTorch's param groups)
   * over the `defaults`.
   */
  constructor(
    params: Tensor[] | ParamGroupSpec<H>[],
    defaults: H,
  ) {
    const groups = Array.isArray(params) && params.length > 0 &&
        "params" in (params[0] as object)
      ? params as ParamGroupSpec<H>[]
      : [{ params: params as Tensor[] } as ParamGroupSpec<H>];
    this.groups = groups.map((g, i) => {
      const { params: ps, hyper, ...direct } = g;
      if (!Array.isArray(ps)) {
        throw new TypeError(`Optimizer: parameter group ${i} has no params list`);
      }
      const unknown = Object.keys(direct).filter((k) => !(k in defaults));
      if (unknown.length > 0) {
        throw new TypeError(
          `Optimizer: parameter group ${i} sets ${unknown.join(", ")}, which this optimizer does ` +
            `not have (it has ${Object.keys(defaults).join(", ")})`,
        );
      }
      const h = { ...defaults, ...(hyper ?? {}), ...(direct as unknown as Partial<H>) };
      return { params: ps, hyper: h, initialLr: h.lr };
    });
    if (this.groups.every((g) => g.params.length === 0)) {
      throw new Error(
        `${new.target.name}: got no parameters to optimize (torch: "optimizer got an empty parameter ` +
          `list"). A model's parameters are its registered layers: layers held in fields ` +
          `(fc1 = new Linear(4, 16)) or registered with registerModule, tensors made with Parameter()`,
      );
    }
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

  /**
   * Restricts updates and state to `shard`, a subset of the parameters (the
   * sharded optimizer's share of them, distributed/zero.ts): the others are
   * skipped by step(), get no state, and are left out when a state dict is
   * loaded. Indices and param_groups stay those of every parameter, so the
   * state dict keeps the layout of an optimizer over all of them.
   */
  keepShard(shard: ReadonlySet<Tensor>): void {
    for (const p of shard) {
      if (!this.groups.some((g) => g.params.includes(p))) {
        throw new Error(`Optimizer.keepShard: a tensor of shape [${p.shape}] is not a parameter`);
      }
    }
    this.#shard = shard;
  }

  /** Whether step() updates p (every parameter unless keepShard restricted them). */
  protected owns(p: Tensor): boolean {
    return this.#shard === null || this.#shard.has(p);
  }

  /** The update rule without step()'s hooks and bookkeeping (a wrapping optimizer's step runs those). */
  updateOnly(): void {
    this.update();
  }

  /** Every parameter in group order (the indices of the state dict). */
  params(): Tensor[] {
    return this.groups.flatMap((g) => g.params);
  }

  /**
   * Sets every gradient to zero (torch 1.13's default zero_grad, not None):
   * the f32 gradients, all on one device as usual, in one native call
   * (dt_zero_many); others one by one. Allocates nothing in the usual case.
   */
  zeroGrad(): void {
    const prev = enter("optimizer");
    try {
      let n = 0, device: Tensor["device"] | null = null, oneDevice = true;
      for (const g of this.groups) {
        for (const p of g.params) {
          if (p.grad?.dtype !== "f32") continue;
          n++;
          if (device === null) device = p.grad.device;
          else if (p.grad.device !== device) oneDevice = false;
        }
      }
      const T = this.#zeroTable.reserve(n);
      let t = 0;
      for (const g of this.groups) {
        for (const p of g.params) {
          if (!p.grad) continue;
          if (p.grad.dtype !== "f32" || !oneDevice) {
            p.grad.fill(0);
            continue;
          }
          T.ptrs[0]![t] = address(p.grad);
          T.counts[t++] = count(p.grad);
          p.grad.markModified();
        }
      }
      if (oneDevice && n > 0) {
        backendOf(device!).call.dt_zero_many(T.at.ptrs[0]!, T.at.counts, BigInt(n));
      }
    } finally {
      leave(prev);
    }
  }

  /** Learning rate of the first group. */
  get lr(): number {
    return this.groups[0]!.hyper.lr;
  }
  /**
   * Sets the first group's learning rate to `v` and every other group's to
   * the same multiple of its initial rate (a group built with half the first
   * group's rate keeps half of it): how schedules drive the rates. Set
   * `groups[i].hyper.lr` to change one group alone.
   */
  set lr(v: number) {
    this.setLrScaled(v, this.groups[0]!.initialLr);
  }

  /**
   * Sets every group's learning rate to `v` times its initial rate divided
   * by `reference` (a group whose initial rate is `reference` gets exactly
   * `v`): a schedule's value for the rate `reference`, applied to each group.
   */
  setLrScaled(v: number, reference: number): void {
    for (const g of this.groups) {
      g.hyper.lr = g.initialLr === reference || reference === 0 ? v : v * (g.initialLr / reference);
    }
  }

  /** Applies one update from the current gradients (parameters without a grad are skipped). */
  step(): void {
    for (const hook of stepHooks) hook(this);
    const prev = enter("optimizer");
    try {
      asMemoryKind("optimizer", () => this.update()); // its state, made on the first step
    } finally {
      // the parameters changed in place: nothing derived from their old values (autocast's
      // cached low-precision copies) may be used again, also when the update failed part way
      for (const g of this.groups) {
        for (const p of g.params) if (p.grad && !p.disposed) p.markModified();
      }
      dropWeightCasts();
      leave(prev);
    }
    stepDone();
    countStepDone();
  }

  /**
   * Gathers the whole state on rank `to` before a checkpoint: every rank
   * calls it. An optimizer that holds all of its state has nothing to gather;
   * a sharded one (distributed/zero.ts) does its collectives here.
   */
  consolidateStateDict(_to = 0): void {}

  /** The update rule itself (step() without the step hooks). */
  protected abstract update(): void;
  /**
   * The state as PyTorch lays it out (torch's `optimizer.state_dict()`): per-parameter tensors and
   * the groups' hyperparameters.
   */
  abstract stateDict(): OptimizerState;
  /** Restores a state of this optimizer's own layout (what stateDict() returned). */
  protected abstract loadState(state: OptimizerState): void;

  /**
   * Restores the state and the groups' hyperparameters from what stateDict()
   * returned, from a checkpoint's "optimizer" file (tensors `state.<i>.<name>`,
   * param_groups in its metadata, as optimizerFile() writes it), or from a
   * whole loaded checkpoint: `optimizer.loadStateDict(checkpoints.loadLatest())`.
   */
  loadStateDict(source: OptimizerState | TensorFileLike | CheckpointLike | null | undefined): void {
    asMemoryKind("optimizer", () => this.#loadStateDict(source));
  }

  #loadStateDict(
    source: OptimizerState | TensorFileLike | CheckpointLike | null | undefined,
  ): void {
    const what = `${this.constructor.name}.loadStateDict`;
    if (source && "paramGroups" in source && source.tensors instanceof Map) {
      this.loadState(source as OptimizerState);
      return;
    }
    const isFile = source && "tensors" in source && !("files" in source);
    const file: TensorFileLike = isFile ? source : {
      tensors: pickTensors(source as CheckpointLike | null | undefined, "optimizer", what),
      metadata: (source as CheckpointLike).files.get("optimizer")!.metadata ?? {},
    };
    const groups = file.metadata?.param_groups;
    if (groups === undefined) {
      throw new Error(
        `${what}: the optimizer file has no param_groups metadata (save it with optimizerFile(optimizer))`,
      );
    }
    scope(() => {
      const tensors = new Map<string, Tensor>();
      for (const [k, t] of file.tensors) {
        if (!k.startsWith("state.")) continue;
        const key = k.slice("state.".length);
        if (isStTensor(t)) tensors.set(key, fromStTensor(t, k));
        else if (t instanceof Tensor) tensors.set(key, t);
        else throw new TypeError(`${what}: entry "${k}" is not a tensor`);
      }
      let paramGroups: Record<string, unknown>[];
      try {
        paramGroups = JSON.parse(groups);
      } catch (e) {
        throw new Error(`${what}: param_groups metadata is not JSON: ${(e as Error).message}`);
      }
      if (!Array.isArray(paramGroups)) {
        throw new Error(`${what}: param_groups metadata is not a list of groups`);
      }
      this.loadState({ tensors, paramGroups });
    });
  }

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
