/**
 * Conv2d: torch.nn.Conv2d's constructor, parameter names (weight
 * (out, in/groups, kh, kw), bias (out)) and default initialisation
 * (kaiming-uniform with a = √5, bias U(±1/√fan_in)), drawn from the default
 * generator in torch's order.
 */
import { Layer } from "./layers.ts";
import { linearBiasBound, linearWeightBound, uniformTensor } from "./init.ts";
import type { Tensor } from "../tensor/tensor.ts";
import { conv2d } from "../tensor/ops/conv.ts";
import { pair } from "../tensor/ops/_util.ts";
import type { TorchGenerator } from "../random/torch_generator.ts";

/** Options of Conv2d (PyTorch's keyword arguments). */
export interface Conv2dLayerOptions {
  /** Step of the kernel: one number or [h, w] (default 1). */
  stride?: number | readonly number[];
  /**
   * Zero padding on each side: one number, [h, w], "valid" (none) or "same" (output size = input
   * size; stride 1 only). Default 0.
   */
  padding?: number | readonly number[] | "valid" | "same";
  /** Spacing between the kernel's elements: one number or [h, w] (default 1). */
  dilation?: number | readonly number[];
  /** Split the channels into this many independent convolutions (default 1). */
  groups?: number;
  /** Learn an additive bias (default true). */
  bias?: boolean;
  /** Only "zeros" (PyTorch's default) is supported. */
  paddingMode?: "zeros";
  /** Generator of the initial weights (default: the one manualSeed() seeds). */
  generator?: TorchGenerator;
}

/**
 * A 2-D convolution layer, constructed as torch.nn.Conv2d.
 *
 * @example
 * ```ts
 * const conv = new Conv2d(1, 32, 3, { padding: 1 }); // (N, 1, 28, 28) -> (N, 32, 28, 28)
 * ```
 */
export class Conv2d extends Layer {
  /** The (out, in / groups, kh, kw) kernels, uniform in ±1/√fanIn at init. */
  readonly weight: Tensor;
  /** The (out) bias, uniform in ±1/√fanIn at init; null when made with `bias: false`. */
  readonly bias: Tensor | null;
  /** The kernel's [height, width]. */
  readonly kernelSize: [number, number];
  /** The stride as given (default 1). */
  readonly stride: number | readonly number[];
  /** The padding as given (default 0). */
  readonly padding: number | readonly number[] | "valid" | "same";
  /** The dilation as given (default 1). */
  readonly dilation: number | readonly number[];
  /** The number of channel groups (default 1). */
  readonly groups: number;

  /**
   * `inChannels` to `outChannels` with a `kernelSize` kernel (one number or [h, w]), as
   * torch.nn.Conv2d(in, out, kernel_size, …); throws naming a bad channel count, groups or padding
   * mode.
   */
  constructor(
    readonly inChannels: number,
    readonly outChannels: number,
    kernelSize: number | readonly number[],
    opts: Conv2dLayerOptions = {},
  ) {
    super();
    this.kernelSize = pair("Conv2d", "kernelSize", kernelSize);
    this.groups = opts.groups ?? 1;
    for (
      const [name, v] of [["inChannels", inChannels], ["outChannels", outChannels], [
        "groups",
        this.groups,
      ]] as const
    ) {
      if (!Number.isSafeInteger(v) || v < 1) {
        throw new RangeError(`Conv2d: ${name} must be a positive integer, got ${v}`);
      }
    }
    if (inChannels % this.groups !== 0 || outChannels % this.groups !== 0) {
      throw new RangeError(
        `Conv2d: groups=${this.groups} must divide inChannels=${inChannels} and outChannels=${outChannels}`,
      );
    }
    if ((opts.paddingMode ?? "zeros") !== "zeros") {
      throw new RangeError(
        `Conv2d: paddingMode "${opts.paddingMode}" is not supported (only "zeros")`,
      );
    }
    this.stride = opts.stride ?? 1;
    this.padding = opts.padding ?? 0;
    this.dilation = opts.dilation ?? 1;
    const [kh, kw] = this.kernelSize;
    const fanIn = (inChannels / this.groups) * kh * kw;
    const wb = linearWeightBound(fanIn);
    this.weight = this.registerParameter(
      "weight",
      uniformTensor([outChannels, inChannels / this.groups, kh, kw], -wb, wb, opts.generator),
    );
    if (opts.bias ?? true) {
      const bb = linearBiasBound(fanIn);
      this.bias = this.registerParameter(
        "bias",
        uniformTensor([outChannels], -bb, bb, opts.generator),
      );
    } else {
      this.bias = null;
    }
  }

  /** The convolution of an (N, C_in, H, W) input: (N, C_out, H_out, W_out). */
  forward(x: Tensor): Tensor {
    return conv2d(x, this.weight, this.bias, {
      stride: this.stride,
      padding: this.padding,
      dilation: this.dilation,
      groups: this.groups,
    });
  }
}
