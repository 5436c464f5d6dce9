/**
 * linear() as one product with its epilogue: values and gradients against
 * the composed ops (matmul, add, gelu) in f32; the weight and bias gradients
 * added straight into the parameters' .grad (fresh or accumulating, also
 * for a weight used twice in one graph, and for a weight that is not a
 * leaf); the bias gradient alone; under autocast a parameter is cast to bf16
 * once per optimizer step and recast after any change; bf16 results within
 * bf16 rounding of f32; bad shapes are named.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { rand } from "./_gradcheck.ts";
import { linear, matmul } from "../../tensor/ops/linalg.ts";
import { add, gelu, mul, scale } from "../../tensor/ops/elementwise.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { backward } from "../../tensor/autograd.ts";
import { autocast } from "../../amp/autocast.ts";
import { SGD } from "../../optim/sgd.ts";

buildNative({ quiet: true });

function normwise(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0, s = 0;
  for (let i = 0; i < b.length; i++) {
    d = Math.max(d, Math.abs(a[i]! - b[i]!));
    s = Math.max(s, Math.abs(b[i]!));
  }
  return d / (s || 1);
}

const arr = (t: Tensor) => t.toArray() as Float32Array;

/** Leaves x (rows, K), w (N, K), b (N) with fixed data. */
function leaves(rows: number, N: number, K: number, seed: number) {
  const mk = (shape: number[], s: number) => {
    const t = fromArray(rand(shape.reduce((a, b) => a * b, 1), s), shape).keep();
    t.requiresGrad = true;
    return t;
  };
  return { x: mk([rows, K], seed), w: mk([N, K], seed + 1), b: mk([N], seed + 2) };
}

function release(...ts: Tensor[]) {
  for (const t of ts) {
    t.grad?.dispose();
    t.dispose();
  }
}

for (const activation of [undefined, "gelu"] as const) {
  Deno.test(`linear${activation ? " + gelu" : ""} equals the composed ops, values and gradients`, () => {
    const results = (["fused", "composed"] as const).map((how) => {
      const { x, w, b } = leaves(2 * 5, 7, 6, 11);
      const out = scope(() => {
        const y = how === "fused" ? linear(x, w, b, activation ? { activation } : {}) : (() => {
          const z = add(matmul(x, w, { transB: true }), b);
          return activation ? gelu(z) : z;
        })();
        const weights = fromArray(rand(y.numel, 3), [...y.shape]);
        backward(sum(mul(y, weights)));
        return [arr(y), arr(x.grad!), arr(w.grad!), arr(b.grad!)];
      });
      release(x, w, b);
      return out;
    });
    for (let i = 0; i < 4; i++) {
      const e = normwise(results[0]![i]!, results[1]![i]!);
      assert.ok(e < 2e-6, `${["y", "dx", "dW", "db"][i]} differs by ${e}`);
    }
  });
}

Deno.test("linear adds gradients into existing .grad, and a weight used twice gets both", () => {
  const { x, w, b } = leaves(4, 3, 5, 21);
  scope(() => {
    // twice through the same layer in one graph: dW = g1^T x + g2^T x
    const y = add(linear(x, w, b), scale(linear(x, w, b), 2));
    backward(sum(y));
    // the gradient of sum(y) wrt W is 3 * (column sums of x) for every row of W
    const xs = arr(x);
    const want = new Float32Array(3 * 5);
    for (let n = 0; n < 3; n++) {
      for (let k = 0; k < 5; k++) {
        for (let r = 0; r < 4; r++) want[n * 5 + k]! += 3 * xs[r * 5 + k]!;
      }
    }
    assert.ok(normwise(arr(w.grad!), want) < 1e-6);
    assert.deepEqual([...arr(b.grad!)], [12, 12, 12]); // 3 per row, 4 rows
    // a second backward accumulates on top (beta = 1 into the existing .grad)
    backward(sum(linear(x, w, b)));
    assert.deepEqual([...arr(b.grad!)], [16, 16, 16]);
    const wg = arr(w.grad!);
    assert.ok(normwise(wg, want.map((v) => (v * 4) / 3)) < 1e-6);
  });
  release(x, w, b);
});

Deno.test("linear gives the bias gradient alone, and a non-leaf weight its gradient as a tensor", () => {
  const { x, w, b } = leaves(6, 2, 3, 31);
  w.requiresGrad = false;
  scope(() => {
    backward(sum(linear(x, w, b)));
    assert.deepEqual([...arr(b.grad!)], [6, 6]);
    assert.equal(w.grad, null);
  });
  w.requiresGrad = true;
  scope(() => {
    const w2 = scale(w, 2); // a computed weight: its gradient flows back through scale
    backward(sum(linear(x, w2)));
    const xs = arr(x);
    const colSums = [0, 1, 2].map((k) =>
      [0, 1, 2, 3, 4, 5].reduce((s, r) => s + xs[r * 3 + k]!, 0)
    );
    assert.ok(normwise(arr(w.grad!), [...colSums, ...colSums].map((v) => 2 * v)) < 1e-6);
  });
  release(x, w, b);
});

Deno.test("under autocast linear reads a parameter's cast copy, and sees an in-place change", () => {
  const { x, w, b } = leaves(8, 4, 4, 41);
  x.requiresGrad = false;
  const opt = new SGD([w, b], { lr: 0.1 });
  const step = () =>
    scope(() => {
      opt.zeroGrad();
      const y = autocast("bf16", () => {
        const [y1, y2] = [linear(x, w, b), linear(x, w, b)];
        assert.equal(y1.dtype, "bf16");
        return add(y1, y2);
      });
      const out = arr(y);
      backward(sum(y));
      opt.step();
      return out;
    });
  // the second step's forward reads copies recast after the first step's update (a stale copy
  // would give the same outputs again)
  assert.notDeepEqual(step(), step());
  // an in-place change of a parameter is seen by the next forward
  const y1 = scope(() => arr(autocast("bf16", () => linear(x, w, b))));
  w.copyFrom(scope(() => scale(w, 0).keep()));
  const y2 = scope(() => arr(autocast("bf16", () => linear(x, w, b))));
  assert.notDeepEqual(y2, y1);
  const bv = arr(b);
  for (let r = 0; r < 8; r++) {
    for (let n = 0; n < 4; n++) {
      assert.ok(Math.abs(y2[r * 4 + n]! - bv[n]!) <= 4e-3 * Math.abs(bv[n]!), "y = b once W = 0");
    }
  }
  release(x, w, b);
});

Deno.test("bf16 linear + gelu is the f32 result rounded, within bf16 rounding", () => {
  const { x, w, b } = leaves(16, 24, 32, 51);
  scope(() => {
    const f32 = arr(linear(x, w, b, { activation: "gelu" }));
    const low = arr(autocast("bf16", () => linear(x, w, b, { activation: "gelu" })));
    // operands rounded to bf16 (2^-9 each), f32 sums, one rounding of the output
    assert.ok(normwise(low, f32) < 1e-2, `${normwise(low, f32)}`);
  });
  release(x, w, b);
});

Deno.test("linear names the shapes it cannot multiply", () => {
  scope(() => {
    const x = fromArray(new Float32Array(6), [2, 3]), w = fromArray(new Float32Array(8), [2, 4]);
    assert.throws(
      () => linear(x, w),
      /linear: input \[2,3\] does not match weight \[2,4\] \(in_features 4\)/,
    );
    const w3 = fromArray(new Float32Array(6), [2, 3]), b = fromArray(new Float32Array(3), [3]);
    assert.throws(() => linear(x, w3, b), /bias \[3\] does not match 2 out_features/);
  });
});
