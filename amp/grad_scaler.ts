/**
 * GradScaler with torch.cuda.amp.GradScaler's defaults and semantics: the
 * loss is multiplied by the scale before backward; unscale() divides the
 * gradients and notes inf/NaN (call it before clipping); step() skips the
 * optimizer step when any gradient was not finite; update() halves the scale
 * after a skipped step and doubles it after growthInterval good steps.
 */
import { backend } from "../tensor/backend.ts";
import { empty, type Tensor } from "../tensor/tensor.ts";
import { scale as scaleOp } from "../tensor/ops/elementwise.ts";
import type { Optimizer } from "../optim/optimizer.ts";
import {
  noteNumericsOverride,
  type NumericsPolicy,
  numericsPolicy,
} from "../tensor/numerics_policy.ts";

/** Options, with torch's defaults. */
export interface GradScalerOptions {
  /** The first loss scale (default 65536 = 2^16). */
  initScale: number;
  /** Scale multiplier after growthInterval steps without inf/NaN (default 2). */
  growthFactor: number;
  /** Scale multiplier after a step with inf/NaN (default 0.5). */
  backoffFactor: number;
  /** Good steps between growths (default 2000). */
  growthInterval: number;
  /** false: scale() returns the loss and step() always steps (default true). */
  enabled: boolean;
}

/** The scaler's saved state (torch's GradScaler.state_dict keys). */
export interface GradScalerState {
  /** The current scale. */
  scale: number;
  /** See GradScalerOptions.growthFactor. */
  growth_factor: number;
  /** See GradScalerOptions.backoffFactor. */
  backoff_factor: number;
  /** See GradScalerOptions.growthInterval. */
  growth_interval: number;
  /** Good steps since the last growth or backoff. */
  _growth_tracker: number;
}

/**
 * Reduces "found inf" across ranks (max, in place) so every rank skips the
 * same steps: `flag` is a one-element f32 tensor on the compute device, 1
 * when some gradient of this rank was not finite; the trainer passes its
 * process group's allReduce. The flag is read once afterwards, so on a GPU
 * the reduction and the check cost the step one wait for the device.
 */
export type FoundInfReducer = (flag: Tensor) => void;

/**
 * Dynamic loss scaling for f16 training (torch.cuda.amp.GradScaler).
 *
 * @example
 * ```ts
 * import { AdamW, autocast, backward, crossEntropy, fromArray, GradScaler, Linear, scope } from "dtrain";
 * const model = new Linear(4, 2);
 * const opt = new AdamW(model.parameters());
 * const scaler = new GradScaler();
 * const x = fromArray(new Float32Array(8).fill(1), [2, 4]);
 * const y = fromArray(new Int32Array([0, 1]), [2]);
 * scope(() => {
 *   opt.zeroGrad();
 *   const loss = autocast("f16", () => crossEntropy(model.forward(x), y));
 *   backward(scaler.scale(loss));
 *   scaler.step(opt); // skipped when a gradient is inf/NaN
 *   scaler.update();
 * });
 * ```
 */
export class GradScaler {
  /** The options in use (loadStateDict may change the factors and interval). */
  readonly opts: GradScalerOptions;
  #scale: number;
  #growthTracker = 0;
  #unscaled = false;
  #foundInf = 0;
  #skipped = 0;

  /**
   * Options default to torch's; `reduceFoundInf` makes every rank skip the same steps (the Trainer
   * passes its process group's max all-reduce).
   */
  constructor(
    opts: Partial<GradScalerOptions> = {},
    readonly reduceFoundInf: FoundInfReducer = () => {},
    numerics: NumericsPolicy = numericsPolicy(),
  ) {
    this.opts = {
      initScale: 65536,
      growthFactor: 2,
      backoffFactor: 0.5,
      growthInterval: 2000,
      enabled: true,
      ...opts,
    };
    if (this.opts.enabled && !numerics.lossScaling) {
      this.opts.enabled = false;
      noteNumericsOverride(
        "loss scaling",
        "loss scaling is off: a GradScaler scales by 1 and skips no step",
        numerics,
      );
    }
    this.#scale = this.opts.initScale;
  }

  /** Current loss scale (1 when disabled). */
  get scaleValue(): number {
    return this.opts.enabled ? this.#scale : 1;
  }

  /** Steps skipped so far because gradients held inf/NaN. */
  get skippedSteps(): number {
    return this.#skipped;
  }

  /** loss * scale (a differentiable op); the loss itself when disabled. */
  scale(loss: Tensor): Tensor {
    return this.opts.enabled ? scaleOp(loss, this.#scale) : loss;
  }

  /** Divides the optimizer's gradients by the scale and records inf/NaN; once per step. */
  unscale(opt: Optimizer<{ lr: number }>): void {
    if (!this.opts.enabled || this.#unscaled) return;
    const b = backend();
    const inv = Math.fround(1 / this.#scale);
    const flag = empty([1], "f32").fill(0);
    for (const p of opt.params()) {
      if (!p.grad) continue;
      b.call.dt_unscale_check(p.grad.ptr, BigInt(p.grad.numel), inv, flag.ptr);
    }
    try {
      this.reduceFoundInf(flag);
      this.#foundInf = flag.item(); // the step's one read of the flag
    } finally {
      flag.dispose();
    }
    this.#unscaled = true;
  }

  /** Unscales if needed, then steps the optimizer unless gradients held inf/NaN; returns whether it stepped. */
  step(opt: Optimizer<{ lr: number }>): boolean {
    if (!this.opts.enabled) {
      opt.step();
      return true;
    }
    this.unscale(opt);
    if (this.#foundInf > 0) {
      this.#skipped++;
      return false;
    }
    opt.step();
    return true;
  }

  /** Adjusts the scale after a step: backoff on inf/NaN, growth after growthInterval good steps. */
  update(): void {
    if (!this.opts.enabled) return;
    if (this.#foundInf > 0) {
      this.#scale *= this.opts.backoffFactor;
      this.#growthTracker = 0;
    } else if (++this.#growthTracker === this.opts.growthInterval) {
      this.#scale *= this.opts.growthFactor;
      this.#growthTracker = 0;
    }
    this.#scale = Math.fround(this.#scale);
    this.#unscaled = false;
    this.#foundInf = 0;
  }

  /** The state under torch's GradScaler.state_dict() keys. */
  stateDict(): GradScalerState {
    return {
      scale: this.#scale,
      growth_factor: this.opts.growthFactor,
      backoff_factor: this.opts.backoffFactor,
      growth_interval: this.opts.growthInterval,
      _growth_tracker: this.#growthTracker,
    };
  }

  /** Restores a saved state; throws on a scale that is not a positive finite number. */
  loadStateDict(s: GradScalerState): void {
    if (!(s.scale > 0) || !Number.isFinite(s.scale)) {
      throw new RangeError(
        `GradScaler: saved scale must be a positive finite number, got ${s.scale}`,
      );
    }
    this.#scale = s.scale;
    this.#growthTracker = s._growth_tracker ?? 0;
    this.opts.growthFactor = s.growth_factor ?? this.opts.growthFactor;
    this.opts.backoffFactor = s.backoff_factor ?? this.opts.backoffFactor;
    this.opts.growthInterval = s.growth_interval ?? this.opts.growthInterval;
  }
}
