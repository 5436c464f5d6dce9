/**
 * Parameter initialisation with PyTorch's default generator semantics:
 * `manualSeed(s)` seeds the process-wide generator (torch.manual_seed), and
 * the layer constructors draw from it in PyTorch's order, so a dtrain model
 * built after manualSeed(1) has the same initial weights as PyTorch's.
 */
import { TorchGenerator } from "../random/torch_generator.ts";
export { kaimingUniformLinearBound as linearWeightBound, linearBiasBound } from "../random/init.ts";
import { fromArray, type Tensor } from "../tensor/tensor.ts";

let defaultGenerator = new TorchGenerator(0);

/** Seeds the default generator (as torch.manual_seed). */
export function manualSeed(seed: number): TorchGenerator {
  defaultGenerator = new TorchGenerator(seed);
  return defaultGenerator;
}

/** The default generator used by layer constructors. */
export function getDefaultGenerator(): TorchGenerator {
  return defaultGenerator;
}

/** A tensor of shape with U(lo, hi) float32 elements drawn as torch's uniform_. */
export function uniformTensor(
  shape: number[],
  lo: number,
  hi: number,
  gen = defaultGenerator,
): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  gen.uniform_(data, lo, hi);
  return fromArray(data, shape);
}

/** A tensor of shape with N(mean, std) elements drawn as torch's normal_. */
export function normalTensor(
  shape: number[],
  mean: number,
  std: number,
  gen = defaultGenerator,
): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  gen.normal_(data, mean, std);
  return fromArray(data, shape);
}
