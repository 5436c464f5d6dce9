/**
 * layerNorm and addLayerNorm (tensor/ops/layernorm.ts): the fused residual
 * add and norm against the composed add + layerNorm, forward and every
 * gradient (the sum's too); the parameter gradients written straight into a
 * fresh .grad or added to an existing one; bf16 rows in and the output dtype
 * option; bad arguments.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { gradCheck, rand } from "./_gradcheck.ts";
import { add, mul } from "../../tensor/ops/elementwise.ts";
import { addLayerNorm, layerNorm } from "../../tensor/ops/nn.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import { castTensor, fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { backward } from "../../tensor/autograd.ts";

buildNative({ quiet: true });

const leaf = (data: Float32Array, shape: number[]) => {
  const t = fromArray(data, shape);
  t.requiresGrad = true;
  return t;
};
const arr = (t: Tensor) => Array.from(t.toArray() as Float32Array);

function assertNear(a: number[], b: number[], tol: number, what: string) {
  assert.equal(a.length, b.length, what);
  const scale = Math.max(1e-30, ...b.map(Math.abs));
  for (let i = 0; i < a.length; i++) {
    assert.ok(Math.abs(a[i]! - b[i]!) <= tol * scale, `${what}[${i}]: ${a[i]} vs ${b[i]}`);
  }
}

Deno.test("addLayerNorm: gradients match finite differences (both outputs used)", () => {
  const f = (x: Tensor, y: Tensor, w: Tensor, b: Tensor) => {
    const [h, n] = addLayerNorm(x, y, w, b);
    return add(mul(h, h), n); // both the residual and the norm reach the loss
  };
  const inp = (shape: number[], seed: number) => ({
    shape,
    data: rand(shape[0]! * (shape[1] ?? 1), seed),
  });
  assert.ok(gradCheck(f, [inp([4, 6], 1), inp([4, 6], 2), inp([6], 3), inp([6], 4)]) < 2e-2);
});

Deno.test("addLayerNorm equals add then layerNorm, values and gradients, fresh and accumulated", () => {
  const rows = 5, C = 33;
  const data = [
    rand(rows * C, 11),
    rand(rows * C, 12),
    rand(C, 13),
    rand(C, 14),
    rand(rows * C, 15),
  ];
  const run = (fused: boolean, passes: number) =>
    scope(() => {
      const [x, y] = [leaf(data[0]!, [rows, C]), leaf(data[1]!, [rows, C])];
      const [w, b] = [leaf(data[2]!, [C]), leaf(data[3]!, [C])];
      const g = fromArray(data[4]!, [rows, C]);
      let h: Tensor | null = null, n: Tensor | null = null;
      for (let p = 0; p < passes; p++) {
        // a second pass adds into the .grad the first one made (the kernel's add flag)
        [h, n] = fused ? addLayerNorm(x, y, w, b) : (() => {
          const s = add(x, y);
          return [s, layerNorm(s, w, b)] as [Tensor, Tensor];
        })();
        backward(add(sum(mul(n, g)), sum(mul(h, h))));
      }
      return [h!, n!, x.grad!, y.grad!, w.grad!, b.grad!].map(arr);
    });
  for (const passes of [1, 2]) {
    const fused = run(true, passes), composed = run(false, passes);
    const names = ["sum", "norm", "dx", "dy", "dweight", "dbias"];
    fused.forEach((v, i) => assertNear(v, composed[i]!, 1e-5, `${names[i]} (${passes} passes)`));
  }
});

Deno.test("layerNorm reads bf16 rows and writes the dtype asked for; the sum keeps x's dtype", () => {
  scope(() => {
    const rows = 3, C = 40;
    const x = castTensor(fromArray(rand(rows * C, 21), [rows, C]), "bf16");
    const y = fromArray(rand(rows * C, 22), [rows, C]);
    const w = fromArray(rand(C, 23), [C]);
    const ref = layerNorm(castTensor(x, "f32"), w, null);
    const out = layerNorm(x, w, null);
    assert.equal(out.dtype, "f32");
    assertNear(arr(out), arr(ref), 1e-6, "f32 out of bf16 rows");
    const low = layerNorm(x, w, null, 1e-5, { outDtype: "bf16" });
    assert.equal(low.dtype, "bf16");
    assertNear(arr(castTensor(low, "f32")), arr(ref), 1e-2, "bf16 out");
    const [h, n] = addLayerNorm(x, y, w, null, 1e-5, { outDtype: "bf16" });
    assert.equal(h.dtype, "bf16");
    assert.equal(n.dtype, "bf16");
    // the sum rounded once to bf16
    const want = castTensor(add(castTensor(x, "f32"), y), "bf16");
    assert.deepEqual(arr(castTensor(h, "f32")), arr(castTensor(want, "f32")));
  });
});

Deno.test("layerNorm and addLayerNorm reject mismatched shapes and a non-float output dtype", () => {
  scope(() => {
    const x = fromArray(rand(12, 1), [3, 4]);
    assert.throws(
      () => layerNorm(x, fromArray(rand(5, 2), [5]), null),
      /weight \[5\] does not match/,
    );
    assert.throws(
      () => addLayerNorm(x, fromArray(rand(8, 3), [2, 4]), null, null),
      /cannot add \[2,4\]/,
    );
    assert.throws(
      () => layerNorm(x, null, null, 1e-5, { outDtype: "i32" }),
      /outDtype i32 is not a float/,
    );
  });
});
