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
  stride?: number | readonly number[];
  padding?: number | readonly number[] | "valid" | "same";
  dilation?: number | readonly number[];
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
  readonly weight: Tensor;
  readonly bias: Tensor | null;
  readonly kernelSize: [number, number];
  readonly stride: number | readonly number[];
  readonly padding: number | readonly number[] | "valid" | "same";
  readonly dilation: number | readonly number[];
  readonly groups: number;

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

  forward(x: Tensor): Tensor {
    return conv2d(x, this.weight, this.bias, {
      stride: this.stride,
      padding: this.padding,
      dilation: this.dilation,
      groups: this.groups,
    });
  }
}
