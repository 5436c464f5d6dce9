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
/** Dropout layers built since the last manualSeed: the next one's place in construction order. */
let dropoutLayers = 0n;

/** Seeds the default generator (as torch.manual_seed). */
export function manualSeed(seed: number): TorchGenerator {
  defaultGenerator = new TorchGenerator(seed);
  dropoutLayers = 0n;
  return defaultGenerator;
}

/**
 * The mask seed of the next Dropout layer built: a hash of the manualSeed
 * seed and the layer's place in construction order. Layers get different
 * masks (not one shared pattern), a model built the same way after the same
 * manualSeed gets the same seeds (every rank, and a resumed run), and no
 * draw is taken from the generator, so initial weights stay PyTorch's.
 */
export function nextDropoutSeed(): bigint {
  return BigInt.asIntN(64, splitmix64(defaultGenerator.initialSeed() ^ (dropoutLayers++ << 32n)));
}

/** SplitMix64's output function: a bijective 64-bit mix. */
function splitmix64(x: bigint): bigint {
  const M = (1n << 64n) - 1n;
  let z = (x + 0x9e3779b97f4a7c15n) & M;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M;
  return z ^ (z >> 31n);
}

/**
 * The default generator used by layer constructors. (torch.default_generator, which manualSeed
 * seeds.)
 */
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
