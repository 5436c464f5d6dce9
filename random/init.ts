/**
 * PyTorch's default parameter initialisation for nn.Linear (kaiming-uniform
 * weight, uniform bias), drawn from a TorchGenerator in torch's order, so a
 * model built here starts from the same bits as the same model built in torch.
 */
import type { TorchGenerator } from "./torch_generator.ts";

/** `nn.init.calculate_gain("leaky_relu", sqrt(5))`, computed as Python does in float64. */
function leakyReluGainForSqrt5(): number {
  const negativeSlope = Math.sqrt(5);
  return Math.sqrt(2.0 / (1 + negativeSlope * negativeSlope));
}

function checkFeatures(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new RangeError(
      `Cannot initialise Linear: ${name} is ${value}, expected a positive integer`,
    );
  }
}

/**
 * The bound `b` of Linear's default weight init U(-b, b):
 * `kaiming_uniform_(a=sqrt(5))` gives `b = sqrt(3) * gain / sqrt(fanIn)`.
 *
 * @example
 * ```ts
 * kaimingUniformLinearBound(128); // 1/sqrt(128) up to float64 rounding
 * ```
 */
export function kaimingUniformLinearBound(fanIn: number): number {
  checkFeatures("fanIn", fanIn);
  const std = leakyReluGainForSqrt5() / Math.sqrt(fanIn);
  return Math.sqrt(3.0) * std;
}

/**
 * The bound of Linear's default bias init U(-b, b): `b = 1 / sqrt(fanIn)`.
 *
 * @example
 * ```ts
 * linearBiasBound(256); // 0.0625
 * ```
 */
export function linearBiasBound(fanIn: number): number {
  checkFeatures("fanIn", fanIn);
  return 1 / Math.sqrt(fanIn);
}

/** The parameters of one Linear layer, in torch layout: weight is [outFeatures, inFeatures]. */
export interface LinearInit {
  weight: Float32Array<ArrayBuffer>;
  bias: Float32Array<ArrayBuffer> | null;
}

/**
 * Draws `nn.Linear(inFeatures, outFeatures)`'s default parameters from `gen`
 * exactly as torch 1.13's `reset_parameters`: the weight first (row-major
 * [outFeatures, inFeatures], kaiming-uniform), then the bias (uniform), each
 * element one float32 `uniform_` draw. With `bias: false` only the weight is
 * drawn, as `nn.Linear(..., bias=False)` does.
 *
 * @example
 * ```ts
 * const gen = new TorchGenerator(1);
 * const layer0 = kaimingUniformLinear(gen, 256, 128); // torch.manual_seed(1); nn.Linear(128, 256)
 * ```
 */
export function kaimingUniformLinear(
  gen: TorchGenerator,
  outFeatures: number,
  inFeatures: number,
  options: { bias?: boolean } = {},
): LinearInit {
  checkFeatures("outFeatures", outFeatures);
  checkFeatures("inFeatures", inFeatures);
  const weightBound = kaimingUniformLinearBound(inFeatures);
  const weight = gen.uniform_(
    new Float32Array(outFeatures * inFeatures),
    -weightBound,
    weightBound,
  );
  if (options.bias === false) return { weight, bias: null };
  const biasBound = linearBiasBound(inFeatures);
  const bias = gen.uniform_(
    new Float32Array(outFeatures),
    -biasBound,
    biasBound,
  );
  return { weight, bias };
}
