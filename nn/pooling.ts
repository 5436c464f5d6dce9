/**
 * Pooling layers constructed as PyTorch's: MaxPool2d, AvgPool2d (stride
 * defaults to the kernel size) and AdaptiveAvgPool2d. No parameters.
 */
import { Layer } from "./layers.ts";
import type { Tensor } from "../tensor/tensor.ts";
import {
  adaptiveAvgPool2d,
  avgPool2d,
  type AvgPool2dOptions,
  maxPool2d,
  type MaxPool2dOptions,
} from "../tensor/ops/pool.ts";
import { pair } from "../tensor/ops/_util.ts";

/**
 * Max over kernel windows (torch.nn.MaxPool2d).
 *
 * @example
 * ```ts
 * const pool = new MaxPool2d(2); // (N, C, 28, 28) -> (N, C, 14, 14)
 * ```
 */
export class MaxPool2d extends Layer {
  /** Windows of `kernelSize` (one number or [h, w]); stride defaults to the kernel size. */
  constructor(
    readonly kernelSize: number | readonly number[],
    readonly opts: MaxPool2dOptions = {},
  ) {
    super();
    pair("MaxPool2d", "kernelSize", kernelSize);
  }
  /** The max of each window of an (N, C, H, W) input. */
  forward(x: Tensor): Tensor {
    return maxPool2d(x, this.kernelSize, this.opts);
  }
  /** Whether this is plain 2x2 pooling at stride 2 (no padding, dilation or ceil mode) with
   *  its class's forward: what Sequential may fuse with a batch norm and ReLU before it. */
  pools2x2(): boolean {
    const o = this.opts;
    /** v (a number, a pair, or absent meaning `absent`) is `want` in every dim */
    const is = (v: number | readonly number[] | null | undefined, want: number, absent: number) =>
      v === undefined || v === null
        ? absent === want
        : typeof v === "number"
        ? v === want
        : v.every((e) => e === want);
    return this.forward === MaxPool2d.prototype.forward && is(this.kernelSize, 2, 0) &&
      is(o.stride, 2, 2) && is(o.padding, 0, 0) && is(o.dilation, 1, 1) && !o.ceilMode;
  }
}

/** Mean over kernel windows (torch.nn.AvgPool2d). */
export class AvgPool2d extends Layer {
  /** Windows of `kernelSize` (one number or [h, w]); stride defaults to the kernel size. */
  constructor(
    readonly kernelSize: number | readonly number[],
    readonly opts: AvgPool2dOptions = {},
  ) {
    super();
    pair("AvgPool2d", "kernelSize", kernelSize);
  }
  /** The mean of each window of an (N, C, H, W) input. */
  forward(x: Tensor): Tensor {
    return avgPool2d(x, this.kernelSize, this.opts);
  }
}

/** Mean over adaptive windows to a fixed output size (torch.nn.AdaptiveAvgPool2d). */
export class AdaptiveAvgPool2d extends Layer {
  /** Pools to `outputSize`: one number, or [h, w] where null keeps that dim's input size. */
  constructor(readonly outputSize: number | readonly (number | null)[]) {
    super();
  }
  /** An (N, C, H, W) input pooled to (N, C, outH, outW). */
  forward(x: Tensor): Tensor {
    return adaptiveAvgPool2d(x, this.outputSize);
  }
}
