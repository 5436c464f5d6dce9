/**
 * Finite-difference gradient checks for the autograd tests: the analytic
 * gradient of sum(f(inputs) * w) (w random, so every output element counts)
 * against central differences computed in f64 from f32 forward passes.
 */
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { backward, noGrad } from "../../tensor/autograd.ts";
import { mul } from "../../tensor/ops/elementwise.ts";
import { sum } from "../../tensor/ops/reduce.ts";

/** A deterministic pseudo-random Float32Array in [-1, 1). */
export function rand(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    out[i] = (s / 2 ** 32) * 2 - 1;
  }
  return out;
}

/**
 * Returns the worst relative error between analytic and numeric gradients
 * over every element of every input.
 */
export function gradCheck(
  f: (...xs: Tensor[]) => Tensor,
  inputs: { data: Float32Array; shape: number[] }[],
  eps = 1e-2,
): number {
  return scope(() => {
    const xs = inputs.map((i) => {
      const t = fromArray(i.data, i.shape);
      t.requiresGrad = true;
      return t;
    });
    const out0 = f(...xs);
    const w = fromArray(rand(out0.numel, 99), [...out0.shape]);
    const loss = sum(mul(out0, w));
    backward(loss);
    const objective = (vals: Float32Array[]) =>
      noGrad(() =>
        scope(() => {
          const ts = vals.map((v, k) => fromArray(v, inputs[k]!.shape));
          return sum(mul(f(...ts), w)).item();
        })
      );
    let worst = 0;
    inputs.forEach((inp, k) => {
      const analytic = xs[k]!.grad!.toArray() as Float32Array;
      for (let i = 0; i < inp.data.length; i++) {
        const vals = inputs.map((x) => x.data.slice());
        vals[k]![i] = inp.data[i]! + eps;
        const up = objective(vals);
        vals[k]![i] = inp.data[i]! - eps;
        const down = objective(vals);
        const numeric = (up - down) / (2 * eps);
        const err = Math.abs(numeric - analytic[i]!) /
          Math.max(1e-2, Math.abs(numeric));
        if (!(err <= worst)) worst = err;
      }
    });
    for (const x of xs) x.grad?.dispose();
    return worst;
  });
}
