/**
 * eq, ne, lt, le, gt, ge (tensor or number, broadcast) and maximum /
 * minimum against IEEE comparisons computed here element by element, which
 * is what torch's are: NaN unequal to everything, -0 == +0; integer operands
 * (argmax results against class targets); maximum's NaN propagation and its
 * gradient going to the operand picked.
 */
import assert from "node:assert/strict";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { eq, ge, gt, le, lt, maximum, minimum, ne } from "../../tensor/ops/compare.ts";
import { argmax, mean, sum } from "../../tensor/ops/reduce.ts";
import { backward } from "../../tensor/autograd.ts";

const A = [1, -0, NaN, 2.5, -Infinity, 3, 0.25, 7];
const B = [1, 0, NaN, 2, -Infinity, 4, 0.25, NaN];
const OPS: [
  string,
  (a: Tensor, b: Tensor | number) => Tensor,
  (x: number, y: number) => boolean,
][] = [
  ["eq", eq, (x, y) => x === y],
  ["ne", ne, (x, y) => x !== y],
  ["lt", lt, (x, y) => x < y],
  ["le", le, (x, y) => x <= y],
  ["gt", gt, (x, y) => x > y],
  ["ge", ge, (x, y) => x >= y],
];

const bits = (t: Tensor) => Array.from(t.toArray() as Uint8Array);

for (const [name, op, ref] of OPS) {
  Deno.test(`${name}: elementwise, against a number, and broadcast, as IEEE comparisons`, () => {
    scope(() => {
      const a = fromArray(A, [2, 4]), b = fromArray(B, [2, 4]);
      const out = op(a, b);
      assert.equal(out.dtype, "u8");
      assert.deepEqual(out.shape, [2, 4]);
      assert.deepEqual(bits(out), A.map((x, i) => (ref(x, B[i]!) ? 1 : 0)));
      assert.deepEqual(bits(op(a, 0.25)), A.map((x) => (ref(x, 0.25) ? 1 : 0)));
      const row = fromArray([1, 0, 3, 0.25], [4]); // broadcast along the rows
      assert.deepEqual(
        bits(op(a, row)),
        A.map((x, i) => (ref(x, [1, 0, 3, 0.25][i % 4]!) ? 1 : 0)),
      );
      const col = fromArray([2, 3], [2, 1]); // a column: both operands expand
      assert.deepEqual(
        bits(op(fromArray([1, 2, 3], [1, 3]), col)),
        [1, 2, 3, 1, 2, 3].map((x, i) => (ref(x, i < 3 ? 2 : 3) ? 1 : 0)),
      );
    });
  });
}

Deno.test("eq of argmax (i32) against i64 targets counts the correct predictions", () => {
  scope(() => {
    const logits = fromArray([0.1, 0.9, 0.0, 2, 1, 0, 0, 0, 5], [3, 3]);
    const targets = fromArray(new BigInt64Array([1n, 1n, 2n]));
    assert.deepEqual(bits(eq(argmax(logits, 1), targets)), [1, 0, 1]);
    assert.equal(sum(eq(argmax(logits, 1), targets)).item(), 2);
    assert.deepEqual(Array.from(sum(gt(logits, 0.5), 1).toArray() as Float32Array), [1, 2, 1]);
    assert.throws(() => mean(eq(logits, 0)), /mean: expected a floating-point tensor, got u8/);
  });
});

Deno.test("maximum and minimum: NaN propagates, the gradient goes to the operand picked", () => {
  scope(() => {
    const a = fromArray([1, 5, NaN, -2, 3]), b = fromArray([2, 4, 1, NaN, 3]);
    assert.deepEqual(Array.from(maximum(a, b).toArray() as Float32Array), [2, 5, NaN, NaN, 3]);
    assert.deepEqual(Array.from(minimum(a, b).toArray() as Float32Array), [1, 4, NaN, NaN, 3]);
    const x = fromArray([1, 5, 0]), y = fromArray([2, 4, 0]);
    x.requiresGrad = y.requiresGrad = true;
    backward(sum(maximum(x, y)));
    assert.deepEqual(Array.from(x.grad!.toArray() as Float32Array), [0, 1, 0]);
    assert.deepEqual(Array.from(y.grad!.toArray() as Float32Array), [1, 0, 1]);
  });
});

Deno.test("comparisons refuse shapes that do not broadcast, naming them", () => {
  scope(() => {
    assert.throws(() => eq(fromArray([1, 2, 3]), fromArray([1, 2])), /\[2\].*\[3\]|\[3\].*\[2\]/);
  });
});
