/**
 * Learning-rate schedules: constant, linear warmup then cosine decay, and
 * step decay. A schedule is a pure function of the step, so its state dict
 * is just the step count; `step()` advances it and sets the optimizer's lr:
 * the first parameter group gets the schedule's value and every other group
 * the same multiple of its own initial rate, so per-group rates are scaled,
 * not overwritten (as PyTorch's schedulers scale each group's base lr).
 */
import type { Optimizer } from "./optimizer.ts";

/** lr at a given step (0-based count of completed optimizer steps). */
export type LrFunction = (step: number) => number;

/** A constant learning rate (in PyTorch: no scheduler). */
export function constantLr(lr: number): LrFunction {
  return () => lr;
}

/**
 * Linear warmup from 0 to maxLr over warmupSteps, then cosine decay to minLr
 * at totalSteps (and minLr after), as nanoGPT's get_lr.
 */
export function warmupCosineLr(
  opts: {
    maxLr: number;
    minLr?: number;
    warmupSteps: number;
    totalSteps: number;
  },
): LrFunction {
  const { maxLr, warmupSteps, totalSteps } = opts;
  const minLr = opts.minLr ?? 0;
  if (!(totalSteps > warmupSteps && warmupSteps >= 0)) {
    throw new RangeError(
      `warmupCosineLr: need 0 <= warmupSteps (${warmupSteps}) < totalSteps (${totalSteps})`,
    );
  }
  return (step) => {
    if (step < warmupSteps) return (maxLr * (step + 1)) / (warmupSteps + 1);
    if (step >= totalSteps) return minLr;
    const ratio = (step - warmupSteps) / (totalSteps - warmupSteps);
    return minLr + 0.5 * (1 + Math.cos(Math.PI * ratio)) * (maxLr - minLr);
  };
}

/** lr * gamma^floor(step / stepSize), as torch's StepLR. */
export function stepLr(
  opts: { lr: number; stepSize: number; gamma?: number },
): LrFunction {
  const gamma = opts.gamma ?? 0.1;
  if (!(opts.stepSize > 0)) {
    throw new RangeError(
      `stepLr: stepSize must be positive, got ${opts.stepSize}`,
    );
  }
  return (step) => opts.lr * gamma ** Math.floor(step / opts.stepSize);
}

/**
 * Drives an optimizer's learning rates from a schedule: `fn` gives the rate
 * for a group that started at `baseLr` (default: the first group's initial
 * rate), and every group gets that value times its own initial rate / baseLr.
 *
 * @example
 * ```ts
 * const opt = new AdamW([{ params: decay, weightDecay: 0.1 }, { params: rest, weightDecay: 0, lr: 5e-4 }], { lr: 1e-3 });
 * const schedule = new LrScheduler(opt, warmupCosineLr({ maxLr: 1e-3, warmupSteps: 100, totalSteps: 5000 }));
 * // after each opt.step(): schedule.step(); the second group runs at half the first group's rate
 * ```
 */
export class LrScheduler {
  #step = 0;
  /** the rate the schedule's values are for (a group starting at it follows fn exactly) */
  readonly baseLr: number;
  /**
   * Drives `optimizer`'s rates by `fn` (the factor of step 0 is applied now); `baseLr` defaults to
   * the first group's initial rate.
   */
  constructor(
    readonly optimizer: Optimizer<{ lr: number }>,
    readonly fn: LrFunction,
    opts: { baseLr?: number } = {},
  ) {
    this.baseLr = opts.baseLr ?? optimizer.groups[0]!.initialLr;
    optimizer.setLrScaled(fn(0), this.baseLr);
  }
  /** Optimizer steps completed so far. */
  get stepCount(): number {
    return this.#step;
  }
  /** The schedule's current value (the rate of a group that started at baseLr). */
  get lr(): number {
    return this.fn(this.#step);
  }
  /** Advances one optimizer step and applies the new lr. */
  step(): void {
    this.#step++;
    this.optimizer.setLrScaled(this.fn(this.#step), this.baseLr);
  }
  /** The steps taken (saved with a checkpoint). */
  stateDict(): { step: number } {
    return { step: this.#step };
  }
  /**
   * Resumes at a saved step and applies that step's rate; throws on a step that is not a non-
   * negative integer.
   */
  loadStateDict(s: { step: number }): void {
    if (!Number.isSafeInteger(s.step) || s.step < 0) {
      throw new RangeError(
        `LrScheduler: saved step must be a non-negative integer, got ${s.step}`,
      );
    }
    this.#step = s.step;
    this.optimizer.setLrScaled(this.fn(this.#step), this.baseLr);
  }
}
