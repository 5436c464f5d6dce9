/**
 * PyTorch's learning-rate schedulers by their names and with their
 * semantics: StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR,
 * LinearLR, LambdaLR, OneCycleLR and SequentialLR. Each one, like torch's,
 * sets the rates when built (last_epoch -1 -> 0), moves on with `step()`
 * after `optimizer.step()`, reports `getLastLr()`, and computes each new rate
 * from the group's current one in torch's chainable form (the same float64
 * arithmetic in the same order, so the rates equal torch's bit for bit);
 * `step(epoch)` uses the closed form, as torch does. `stateDict()` is JSON
 * with torch's keys, to save beside the optimizer's state.
 */
import type { Optimizer, ParamGroup } from "./optimizer.ts";

/** Any optimizer whose groups have a learning rate (the schedulers drive it). */
export type SchedulableOptimizer = Optimizer<{ lr: number }>;

/** A scheduler's state: JSON with torch's state_dict keys (last_epoch, base_lrs, _step_count, _last_lr, ...). */
export type LRSchedulerState = Record<string, unknown>;

/**
 * The base of the PyTorch-style schedulers (torch.optim.lr_scheduler._LRScheduler).
 * Subclasses compute `getLr()`; building one performs torch's initial step.
 */
export abstract class LRSchedulerBase {
  /** The index of the last epoch (step) taken: 0 right after construction. */
  lastEpoch: number;
  /** Each group's rate when the schedule started (torch's base_lrs, the groups' initial_lr). */
  baseLrs: number[];
  /** step() calls so far, the constructor's included (torch's _step_count). */
  protected stepCount = 0;
  #lastLr: number[] = [];

  /** Takes the optimizer's groups' initial rates as base_lrs; lastEpoch -1 starts a new schedule. */
  constructor(readonly optimizer: SchedulableOptimizer, lastEpoch = -1) {
    if (!Number.isInteger(lastEpoch) || lastEpoch < -1) {
      throw new RangeError(
        `${new.target.name}: lastEpoch must be an integer >= -1, got ${lastEpoch}`,
      );
    }
    this.lastEpoch = lastEpoch;
    this.baseLrs = optimizer.groups.map((g) => g.initialLr);
  }

  /** The optimizer's groups. */
  protected get groups(): ParamGroup<{ lr: number }>[] {
    return this.optimizer.groups;
  }

  /** torch's _initial_step: the first step(), which sets the epoch-0 rates. Subclasses call it last in their constructor. */
  initialStep(): void {
    this.stepCount = 0;
    this.step();
  }

  /** The chainable form: each group's next rate from its current one. */
  protected abstract getLr(): number[];
  /** The closed form (the rate at lastEpoch from the base rates), where the schedule has one. */
  protected closedFormLr(): number[] | null {
    return null;
  }

  /**
   * Moves to the next epoch (step) and sets every group's rate; call it after
   * optimizer.step(). With `epoch`, jumps to it using the closed form (torch's
   * deprecated step(epoch)).
   */
  step(epoch?: number): void {
    this.stepCount++;
    let values: number[];
    if (epoch === undefined) {
      this.lastEpoch++;
      values = this.getLr();
    } else {
      if (!Number.isInteger(epoch) || epoch < 0) {
        throw new RangeError(
          `${this.constructor.name}.step: epoch must be a non-negative integer, got ${epoch}`,
        );
      }
      this.lastEpoch = epoch;
      values = this.closedFormLr() ?? this.getLr();
    }
    this.groups.forEach((g, i) => (g.hyper.lr = values[i]!));
    this.#lastLr = this.groups.map((g) => g.hyper.lr);
  }

  /** The rates the last step set, one per group (torch's get_last_lr()). */
  getLastLr(): number[] {
    return [...this.#lastLr];
  }

  /** This scheduler's own settings for the state dict (step_size, gamma, ...). */
  protected settings(): Record<string, unknown> {
    return {};
  }

  /** The state as torch's state_dict() names it, as JSON. */
  stateDict(): LRSchedulerState {
    return {
      ...this.settings(),
      base_lrs: [...this.baseLrs],
      last_epoch: this.lastEpoch,
      _step_count: this.stepCount,
      _last_lr: [...this.#lastLr],
    };
  }

  /**
   * Restores a state from stateDict() (the group rates themselves come back
   * with the optimizer's state, as in torch).
   */
  loadStateDict(state: LRSchedulerState): void {
    const who = `${this.constructor.name}.loadStateDict`;
    const n = this.groups.length;
    const nums = (key: string): number[] => {
      const v = state[key];
      if (!Array.isArray(v) || v.length !== n || v.some((x) => typeof x !== "number")) {
        throw new Error(
          `${who}: "${key}" must be a list of ${n} numbers (one per parameter group), got ${
            JSON.stringify(v)
          }`,
        );
      }
      return v as number[];
    };
    const epoch = state.last_epoch;
    if (!Number.isInteger(epoch) || (epoch as number) < -1) {
      throw new Error(
        `${who}: "last_epoch" must be an integer >= -1, got ${JSON.stringify(epoch)}`,
      );
    }
    this.baseLrs = [...nums("base_lrs")];
    this.#lastLr = [...nums("_last_lr")];
    this.lastEpoch = epoch as number;
    this.stepCount = typeof state._step_count === "number" ? state._step_count : this.stepCount;
    this.loadSettings(state);
  }

  /** Restores this scheduler's own settings from a state. */
  protected loadSettings(_state: LRSchedulerState): void {}
}

/** lr × gamma every stepSize epochs (torch.optim.lr_scheduler.StepLR). */
export class StepLR extends LRSchedulerBase {
  /** lr × gamma every stepSize epochs (torch's StepLR(optimizer, step_size, gamma)). */
  constructor(
    optimizer: SchedulableOptimizer,
    readonly stepSize: number,
    readonly gamma = 0.1,
    lastEpoch = -1,
  ) {
    super(optimizer, lastEpoch);
    if (!Number.isInteger(stepSize) || stepSize <= 0) {
      throw new RangeError(`StepLR: stepSize must be a positive integer, got ${stepSize}`);
    }
    this.initialStep();
  }
  /** torch's get_lr: the chainable form. */
  protected getLr(): number[] {
    if (this.lastEpoch === 0 || this.lastEpoch % this.stepSize !== 0) {
      return this.groups.map((g) => g.hyper.lr);
    }
    return this.groups.map((g) => g.hyper.lr * this.gamma);
  }
  /** torch's _get_closed_form_lr. */
  protected override closedFormLr(): number[] {
    return this.baseLrs.map((b) => b * this.gamma ** Math.floor(this.lastEpoch / this.stepSize));
  }
  /** Its own state_dict entries, by torch's names. */
  protected override settings(): Record<string, unknown> {
    return { step_size: this.stepSize, gamma: this.gamma };
  }
}

/** lr × gamma at each milestone epoch (a repeated milestone decays again; torch's MultiStepLR). */
export class MultiStepLR extends LRSchedulerBase {
  /** Epochs at which the rate is multiplied by gamma (sorted; torch's milestones). */
  readonly milestones: number[];
  /** lr × gamma at each milestone (torch's MultiStepLR(optimizer, milestones, gamma)). */
  constructor(
    optimizer: SchedulableOptimizer,
    milestones: number[],
    readonly gamma = 0.1,
    lastEpoch = -1,
  ) {
    super(optimizer, lastEpoch);
    if (!Array.isArray(milestones) || milestones.some((m) => !Number.isInteger(m))) {
      throw new RangeError(
        `MultiStepLR: milestones must be a list of integers, got ${JSON.stringify(milestones)}`,
      );
    }
    this.milestones = [...milestones].sort((a, b) => a - b);
    this.initialStep();
  }
  /** torch's get_lr: the chainable form. */
  protected getLr(): number[] {
    const count = this.milestones.filter((m) => m === this.lastEpoch).length;
    if (count === 0) return this.groups.map((g) => g.hyper.lr);
    return this.groups.map((g) => g.hyper.lr * this.gamma ** count);
  }
  /** torch's _get_closed_form_lr. */
  protected override closedFormLr(): number[] {
    const passed = this.milestones.filter((m) => m <= this.lastEpoch).length;
    return this.baseLrs.map((b) => b * this.gamma ** passed);
  }
  /** Its own state_dict entries, by torch's names. */
  protected override settings(): Record<string, unknown> {
    return { milestones: [...this.milestones], gamma: this.gamma };
  }
}

/** lr × gamma every epoch (torch.optim.lr_scheduler.ExponentialLR). */
export class ExponentialLR extends LRSchedulerBase {
  /** lr × gamma every epoch (torch's ExponentialLR(optimizer, gamma)). */
  constructor(optimizer: SchedulableOptimizer, readonly gamma: number, lastEpoch = -1) {
    super(optimizer, lastEpoch);
    if (!(gamma > 0)) throw new RangeError(`ExponentialLR: gamma must be positive, got ${gamma}`);
    this.initialStep();
  }
  /** torch's get_lr: the chainable form. */
  protected getLr(): number[] {
    if (this.lastEpoch === 0) return this.groups.map((g) => g.hyper.lr);
    return this.groups.map((g) => g.hyper.lr * this.gamma);
  }
  /** torch's _get_closed_form_lr. */
  protected override closedFormLr(): number[] {
    return this.baseLrs.map((b) => b * this.gamma ** this.lastEpoch);
  }
  /** Its own state_dict entries, by torch's names. */
  protected override settings(): Record<string, unknown> {
    return { gamma: this.gamma };
  }
}

/**
 * Cosine annealing from the base rate to etaMin over tMax epochs, then back
 * up (torch.optim.lr_scheduler.CosineAnnealingLR, its recursive form).
 */
export class CosineAnnealingLR extends LRSchedulerBase {
  /** Anneals to etaMin over tMax epochs (torch's CosineAnnealingLR(optimizer, T_max, eta_min)). */
  constructor(
    optimizer: SchedulableOptimizer,
    readonly tMax: number,
    readonly etaMin = 0,
    lastEpoch = -1,
  ) {
    super(optimizer, lastEpoch);
    if (!(tMax > 0)) throw new RangeError(`CosineAnnealingLR: tMax must be positive, got ${tMax}`);
    this.initialStep();
  }
  /** torch's get_lr: the chainable form. */
  protected getLr(): number[] {
    const e = this.lastEpoch, T = this.tMax, eta = this.etaMin;
    if (e === 0) return this.groups.map((g) => g.hyper.lr);
    if (this.stepCount === 1 && e > 0) {
      return this.baseLrs.map((b) => eta + (b - eta) * (1 + Math.cos(e * Math.PI / T)) / 2);
    }
    if (pyMod(e - 1 - T, 2 * T) === 0) {
      return this.groups.map((g, i) =>
        g.hyper.lr + (this.baseLrs[i]! - eta) * (1 - Math.cos(Math.PI / T)) / 2
      );
    }
    return this.groups.map((g) =>
      (1 + Math.cos(Math.PI * e / T)) / (1 + Math.cos(Math.PI * (e - 1) / T)) * (g.hyper.lr - eta) +
      eta
    );
  }
  /** torch's _get_closed_form_lr. */
  protected override closedFormLr(): number[] {
    const e = this.lastEpoch;
    return this.baseLrs.map((b) =>
      this.etaMin + (b - this.etaMin) * (1 + Math.cos(Math.PI * e / this.tMax)) / 2
    );
  }
  /** Its own state_dict entries, by torch's names. */
  protected override settings(): Record<string, unknown> {
    return { T_max: this.tMax, eta_min: this.etaMin };
  }
}

/** Options of LinearLR; defaults are torch's. */
export interface LinearLROptions {
  /** factor of the first epoch (1/3) */
  startFactor?: number;
  /** factor reached at totalIters (1) */
  endFactor?: number;
  /** epochs of the ramp (5) */
  totalIters?: number;
}

/**
 * The rate times a factor going linearly from startFactor to endFactor over
 * totalIters epochs (torch.optim.lr_scheduler.LinearLR): the usual warm-up.
 */
export class LinearLR extends LRSchedulerBase {
  /** Factor of the first epoch. */
  readonly startFactor: number;
  /** Factor reached at totalIters. */
  readonly endFactor: number;
  /** Epochs of the ramp. */
  readonly totalIters: number;
  /** Ramps the factor from startFactor to endFactor (torch's LinearLR). */
  constructor(optimizer: SchedulableOptimizer, opts: LinearLROptions = {}, lastEpoch = -1) {
    super(optimizer, lastEpoch);
    this.startFactor = opts.startFactor ?? 1 / 3;
    this.endFactor = opts.endFactor ?? 1;
    this.totalIters = opts.totalIters ?? 5;
    if (!(this.startFactor > 0 && this.startFactor <= 1)) {
      // torch accepts 0 but then divides by zero on the second step
      throw new RangeError(`LinearLR: startFactor must be in (0, 1], got ${this.startFactor}`);
    }
    if (!(this.endFactor >= 0 && this.endFactor <= 1)) {
      throw new RangeError(`LinearLR: endFactor must be in [0, 1], got ${this.endFactor}`);
    }
    if (!Number.isInteger(this.totalIters) || this.totalIters <= 0) {
      throw new RangeError(
        `LinearLR: totalIters must be a positive integer, got ${this.totalIters}`,
      );
    }
    this.initialStep();
  }
  /** torch's get_lr: the chainable form. */
  protected getLr(): number[] {
    const { startFactor: s, endFactor: f, totalIters: n } = this;
    if (this.lastEpoch === 0) return this.groups.map((g) => g.hyper.lr * s);
    if (this.lastEpoch > n) return this.groups.map((g) => g.hyper.lr);
    return this.groups.map((g) =>
      g.hyper.lr * (1 + (f - s) / (n * s + (this.lastEpoch - 1) * (f - s)))
    );
  }
  /** torch's _get_closed_form_lr. */
  protected override closedFormLr(): number[] {
    const { startFactor: s, endFactor: f, totalIters: n } = this;
    return this.baseLrs.map((b) => b * (s + (f - s) * Math.min(n, this.lastEpoch) / n));
  }
  /** Its own state_dict entries, by torch's names. */
  protected override settings(): Record<string, unknown> {
    return {
      start_factor: this.startFactor,
      end_factor: this.endFactor,
      total_iters: this.totalIters,
    };
  }
}

/**
 * The base rate times `lambda(epoch)`, one function for all groups or one
 * per group (torch.optim.lr_scheduler.LambdaLR). The functions are not part
 * of the state.
 */
export class LambdaLR extends LRSchedulerBase {
  /** One factor function per group. */
  readonly lrLambdas: ((epoch: number) => number)[];
  /** The base rate times lrLambda(epoch), one function or one per group (torch's LambdaLR). */
  constructor(
    optimizer: SchedulableOptimizer,
    lrLambda: ((epoch: number) => number) | ((epoch: number) => number)[],
    lastEpoch = -1,
  ) {
    super(optimizer, lastEpoch);
    const n = optimizer.groups.length;
    if (Array.isArray(lrLambda)) {
      if (lrLambda.length !== n) {
        throw new RangeError(
          `LambdaLR: expected ${n} lrLambdas (one per group), got ${lrLambda.length}`,
        );
      }
      this.lrLambdas = [...lrLambda];
    } else {
      this.lrLambdas = Array(n).fill(lrLambda);
    }
    this.initialStep();
  }
  /** torch's get_lr: the chainable form. */
  protected getLr(): number[] {
    return this.baseLrs.map((b, i) => b * this.lrLambdas[i]!(this.lastEpoch));
  }
}

/** Options of OneCycleLR; defaults are torch's. Give totalSteps, or epochs and stepsPerEpoch. */
export interface OneCycleLROptions {
  /** the peak rate, one for all groups or one per group */
  maxLr: number | number[];
  /** steps of the whole cycle (or give epochs and stepsPerEpoch) */
  totalSteps?: number;
  /** epochs of the cycle, with stepsPerEpoch */
  epochs?: number;
  /** optimizer steps per epoch, with epochs */
  stepsPerEpoch?: number;
  /** fraction of the cycle spent increasing the rate (0.3) */
  pctStart?: number;
  /** "cos" (default) or "linear" */
  annealStrategy?: "cos" | "linear";
  /** cycle the momentum (SGD's momentum, Adam's betas[0]) inversely to the rate (true) */
  cycleMomentum?: boolean;
  /** lowest momentum (0.85) */
  baseMomentum?: number | number[];
  /** highest momentum (0.95) */
  maxMomentum?: number | number[];
  /** initial rate = maxLr / divFactor (25) */
  divFactor?: number;
  /** final rate = initial rate / finalDivFactor (1e4) */
  finalDivFactor?: number;
  /** a third phase annihilating the rate, as fastai (false) */
  threePhase?: boolean;
}

type Phase = {
  endStep: number;
  startLr: "initial" | "max" | "min";
  endLr: "initial" | "max" | "min";
  startMom: "max" | "base";
  endMom: "max" | "base";
};

/** The 1cycle policy (torch.optim.lr_scheduler.OneCycleLR), stepped once per batch. */
export class OneCycleLR extends LRSchedulerBase {
  /** Steps of the whole cycle. */
  readonly totalSteps: number;
  /** Whether the momentum cycles inversely to the rate. */
  readonly cycleMomentum: boolean;
  /** How each phase moves between its ends. */
  readonly annealStrategy: "cos" | "linear";
  /** per group: initial, max and min rates, and max/base momentum */
  readonly initialLrs: number[];
  /** Peak rate per group. */
  readonly maxLrs: number[];
  /** Final rate per group. */
  readonly minLrs: number[];
  /** Highest momentum per group. */
  readonly maxMomentums: number[];
  /** Lowest momentum per group. */
  readonly baseMomentums: number[];
  readonly #phases: Phase[];
  readonly #momentumKey: "betas" | "beta1" | "momentum" | null;

  /** The 1cycle schedule of opts (torch's OneCycleLR). */
  constructor(optimizer: SchedulableOptimizer, opts: OneCycleLROptions, lastEpoch = -1) {
    super(optimizer, lastEpoch);
    const n = optimizer.groups.length;
    if (opts.totalSteps !== undefined) {
      if (!Number.isInteger(opts.totalSteps) || opts.totalSteps <= 0) {
        throw new RangeError(
          `OneCycleLR: totalSteps must be a positive integer, got ${opts.totalSteps}`,
        );
      }
      this.totalSteps = opts.totalSteps;
    } else if (opts.epochs !== undefined && opts.stepsPerEpoch !== undefined) {
      for (
        const [k, v] of [["epochs", opts.epochs], ["stepsPerEpoch", opts.stepsPerEpoch]] as const
      ) {
        if (!Number.isInteger(v) || v <= 0) {
          throw new RangeError(`OneCycleLR: ${k} must be a positive integer, got ${v}`);
        }
      }
      this.totalSteps = opts.epochs * opts.stepsPerEpoch;
    } else {
      throw new RangeError("OneCycleLR: give totalSteps, or epochs and stepsPerEpoch");
    }
    const pct = opts.pctStart ?? 0.3;
    if (!(pct >= 0 && pct <= 1)) {
      throw new RangeError(`OneCycleLR: pctStart must be in [0, 1], got ${pct}`);
    }
    this.annealStrategy = opts.annealStrategy ?? "cos";
    if (this.annealStrategy !== "cos" && this.annealStrategy !== "linear") {
      throw new RangeError(
        `OneCycleLR: annealStrategy must be "cos" or "linear", got ${
          JSON.stringify(this.annealStrategy)
        }`,
      );
    }
    const T = this.totalSteps;
    this.#phases = opts.threePhase
      ? [
        { endStep: pct * T - 1, startLr: "initial", endLr: "max", startMom: "max", endMom: "base" },
        {
          endStep: 2 * pct * T - 2,
          startLr: "max",
          endLr: "initial",
          startMom: "base",
          endMom: "max",
        },
        { endStep: T - 1, startLr: "initial", endLr: "min", startMom: "max", endMom: "max" },
      ]
      : [
        { endStep: pct * T - 1, startLr: "initial", endLr: "max", startMom: "max", endMom: "base" },
        { endStep: T - 1, startLr: "max", endLr: "min", startMom: "base", endMom: "max" },
      ];
    const perGroup = (name: string, v: number | number[]): number[] => {
      if (!Array.isArray(v)) return Array(n).fill(v);
      if (v.length !== n) {
        throw new RangeError(`OneCycleLR: expected ${n} values for ${name}, got ${v.length}`);
      }
      return [...v];
    };
    const div = opts.divFactor ?? 25, finalDiv = opts.finalDivFactor ?? 1e4;
    this.maxLrs = perGroup("maxLr", opts.maxLr);
    this.initialLrs = this.maxLrs.map((m) => m / div);
    this.minLrs = this.initialLrs.map((i) => i / finalDiv);
    this.baseLrs = [...this.initialLrs];
    this.cycleMomentum = opts.cycleMomentum ?? true;
    this.maxMomentums = perGroup("maxMomentum", opts.maxMomentum ?? 0.95);
    this.baseMomentums = perGroup("baseMomentum", opts.baseMomentum ?? 0.85);
    const h = optimizer.groups[0]!.hyper as Record<string, unknown>;
    this.#momentumKey = "betas" in h
      ? "betas"
      : "beta1" in h
      ? "beta1"
      : "momentum" in h
      ? "momentum"
      : null;
    if (this.cycleMomentum) {
      if (this.#momentumKey === null) {
        throw new RangeError(
          `OneCycleLR: ${optimizer.constructor.name} has no momentum or betas to cycle; pass cycleMomentum: false`,
        );
      }
      if (lastEpoch === -1) {
        this.groups.forEach((_, i) => this.#setMomentum(i, this.maxMomentums[i]!));
      }
    }
    this.initialStep();
  }

  #setMomentum(i: number, m: number): void {
    const h = this.groups[i]!.hyper as Record<string, unknown>;
    if (this.#momentumKey === "betas") h.betas = [m, (h.betas as number[])[1]];
    else h[this.#momentumKey!] = m;
  }

  #anneal(start: number, end: number, pct: number): number {
    if (this.annealStrategy === "linear") return (end - start) * pct + start;
    const cosOut = Math.cos(Math.PI * pct) + 1;
    return end + (start - end) / 2.0 * cosOut;
  }

  /** torch's get_lr: the chainable form. */
  protected getLr(): number[] {
    const stepNum = this.lastEpoch;
    if (stepNum > this.totalSteps) {
      throw new RangeError(
        `OneCycleLR: tried to step ${
          stepNum + 1
        } times; the schedule has ${this.totalSteps} total steps`,
      );
    }
    const lrOf = { initial: this.initialLrs, max: this.maxLrs, min: this.minLrs };
    const momOf = { max: this.maxMomentums, base: this.baseMomentums };
    return this.groups.map((_, gi) => {
      let start = 0, lr = 0, mom = 0;
      for (let i = 0; i < this.#phases.length; i++) {
        const p = this.#phases[i]!;
        if (stepNum <= p.endStep || i === this.#phases.length - 1) {
          const pct = (stepNum - start) / (p.endStep - start);
          lr = this.#anneal(lrOf[p.startLr][gi]!, lrOf[p.endLr][gi]!, pct);
          if (this.cycleMomentum) {
            mom = this.#anneal(momOf[p.startMom][gi]!, momOf[p.endMom][gi]!, pct);
          }
          break;
        }
        start = p.endStep;
      }
      if (this.cycleMomentum) this.#setMomentum(gi, mom);
      return lr;
    });
  }

  /** Its own state_dict entries, by torch's names. */
  protected override settings(): Record<string, unknown> {
    return {
      total_steps: this.totalSteps,
      anneal_strategy: this.annealStrategy,
      cycle_momentum: this.cycleMomentum,
      initial_lr: [...this.initialLrs],
      max_lr: [...this.maxLrs],
      min_lr: [...this.minLrs],
      max_momentum: [...this.maxMomentums],
      base_momentum: [...this.baseMomentums],
    };
  }
}

/**
 * Several schedulers one after the other, switching at the milestones
 * (torch.optim.lr_scheduler.SequentialLR): LinearLR warm-up then cosine
 * decay, for example. Build the schedulers on the same optimizer first.
 *
 * @example
 * ```ts
 * const warm = new LinearLR(opt, { startFactor: 0.1, totalIters: 5 });
 * const decay = new CosineAnnealingLR(opt, 95);
 * const sched = new SequentialLR(opt, [warm, decay], [5]);
 * ```
 */
export class SequentialLR extends LRSchedulerBase {
  /** The schedulers in order. */
  readonly schedulers: LRSchedulerBase[];
  /** Epochs at which the rate is multiplied by gamma (sorted; torch's milestones). */
  readonly milestones: number[];
  /** Runs `schedulers` in turn, switching at `milestones` (torch's SequentialLR). */
  constructor(
    optimizer: SchedulableOptimizer,
    schedulers: LRSchedulerBase[],
    milestones: number[],
    lastEpoch = -1,
  ) {
    super(optimizer, lastEpoch);
    schedulers.forEach((s, i) => {
      if (s.optimizer !== optimizer) {
        throw new RangeError(
          `SequentialLR: scheduler ${i} belongs to another optimizer than the one given`,
        );
      }
    });
    if (milestones.length !== schedulers.length - 1) {
      throw new RangeError(
        `SequentialLR: expected ${
          schedulers.length - 1
        } milestones for ${schedulers.length} schedulers, got ${milestones.length}`,
      );
    }
    this.schedulers = [...schedulers];
    this.milestones = [...milestones];
    this.lastEpoch = lastEpoch + 1;
    // as torch: back to the initial rates, undo the schedulers' own first steps, restart the first one
    this.groups.forEach((g) => (g.hyper.lr = g.initialLr));
    for (const s of this.schedulers) s.lastEpoch -= 1;
    this.schedulers[0]!.initialStep();
    this.#last = this.schedulers[0]!.getLastLr();
  }
  #last: number[];

  /** torch's get_lr: the chainable form. */
  protected getLr(): number[] {
    return this.#last;
  }

  /** Steps the scheduler whose turn it is (at a milestone, the next one from epoch 0). */
  override step(): void {
    this.lastEpoch++;
    const idx = bisectRight(this.milestones, this.lastEpoch);
    const s = this.schedulers[idx]!;
    if (idx > 0 && this.milestones[idx - 1] === this.lastEpoch) s.step(0);
    else s.step();
    this.#last = s.getLastLr();
  }

  /** The rates the current scheduler set last. */
  override getLastLr(): number[] {
    return [...this.#last];
  }

  /** Its state and every scheduler's, as torch's SequentialLR.state_dict(). */
  override stateDict(): LRSchedulerState {
    return {
      base_lrs: [...this.baseLrs],
      last_epoch: this.lastEpoch,
      _milestones: [...this.milestones],
      _last_lr: [...this.#last],
      _schedulers: this.schedulers.map((s) => s.stateDict()),
    };
  }

  /** Restores stateDict()'s output, every scheduler's included. */
  override loadStateDict(state: LRSchedulerState): void {
    const subs = state._schedulers;
    if (!Array.isArray(subs) || subs.length !== this.schedulers.length) {
      throw new Error(
        `SequentialLR.loadStateDict: "_schedulers" must hold ${this.schedulers.length} states`,
      );
    }
    subs.forEach((s, i) => this.schedulers[i]!.loadStateDict(s as LRSchedulerState));
    if (!Number.isInteger(state.last_epoch)) {
      throw new Error(
        `SequentialLR.loadStateDict: "last_epoch" must be an integer, got ${
          JSON.stringify(state.last_epoch)
        }`,
      );
    }
    this.lastEpoch = state.last_epoch as number;
    if (Array.isArray(state._last_lr)) this.#last = [...state._last_lr as number[]];
  }
}

/** Python's a % b for b > 0 (the sign of the divisor). */
function pyMod(a: number, b: number): number {
  return ((a % b) + b) % b;
}

/** Python's bisect.bisect_right on a sorted list. */
function bisectRight(xs: number[], x: number): number {
  let lo = 0, hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (x < xs[mid]!) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
