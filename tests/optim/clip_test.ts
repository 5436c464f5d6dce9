/**
 * clipGradNorm through the tensor API: torch 1.13's arithmetic (each
 * gradient's norm in f32, the total of their squares in f32, coef = min(max /
 * (total + 1e-6), 1), each element times coef), bit for bit, whatever the
 * parameter lists of the calls before it (its host table is reused across
 * calls), with parameters that have no gradient skipped.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { fromArray, type Tensor } from "../../tensor/tensor.ts";
import { clipGradNorm, sumOfSquares } from "../../optim/clip.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";

buildNative({ quiet: true });
const f = Math.fround;

/** A parameter with a gradient of `n` normal draws (scaled by `scale`), or none when n is null. */
function param(gen: TorchGenerator, n: number, grad: number | null): Tensor {
  const p = fromArray(new Float32Array(n)).keep();
  if (grad !== null) {
    const g = gen.normal_(new Float32Array(n), 0, grad);
    p.grad = fromArray(g).keep();
  }
  return p;
}

/** The reference: torch's arithmetic on copies of the gradients. */
function expected(params: Tensor[], maxNorm: number): { total: number; grads: Float32Array[] } {
  let sq = 0;
  for (const p of params) {
    if (!p.grad) continue;
    const n = f(Math.sqrt(sumOfSquares(p.grad)));
    sq = f(sq + f(n * n));
  }
  const total = f(Math.sqrt(sq));
  const coef = Math.min(f(maxNorm / f(total + 1e-6)), 1);
  const grads = params.filter((p) => p.grad).map((p) =>
    (p.grad!.toArray() as Float32Array).map((v) => coef === 1 ? v : f(v * coef))
  );
  return { total, grads };
}

Deno.test("clipGradNorm() gives torch's total and scaled gradients bit for bit across calls of other sizes", () => {
  const gen = new TorchGenerator(11);
  // lists that grow and shrink between calls, with gradient-less parameters among them
  const lists = [
    [param(gen, 1000, 3), param(gen, 7, null), param(gen, 33, 2)],
    [
      param(gen, 5, 1),
      param(gen, 70_001, 0.01),
      param(gen, 1, 4),
      param(gen, 3, null),
      param(gen, 9, 5),
    ],
    [param(gen, 64, 0.001)], // below the threshold: coef 1, nothing scaled
    [param(gen, 2, 10), param(gen, 300, 1)],
    Array.from({ length: 9 }, (_, k) => param(gen, 17 * k + 1, k === 4 ? null : 1 + k)),
  ];
  for (const [i, params] of lists.entries()) {
    for (const maxNorm of [1, 0.5]) {
      const want = expected(params, maxNorm);
      const total = clipGradNorm(params, maxNorm);
      assert.equal(total, want.total, `list ${i}, max ${maxNorm}: total norm`);
      const got = params.filter((p) => p.grad).map((p) => p.grad!.toArray() as Float32Array);
      got.forEach((g, j) => assert.deepEqual(g, want.grads[j], `list ${i}: gradient ${j}`));
    }
  }
  for (const p of lists.flat()) (p.grad?.dispose(), p.dispose());
});

Deno.test("clipGradNorm() of parameters without gradients is 0; a negative maxNorm is refused", () => {
  const p = fromArray(new Float32Array(4)).keep();
  assert.equal(clipGradNorm([p], 1), 0);
  assert.equal(clipGradNorm([], 1), 0);
  assert.throws(() => clipGradNorm([p], -1), /maxNorm must be >= 0, got -1/);
  p.dispose();
});
