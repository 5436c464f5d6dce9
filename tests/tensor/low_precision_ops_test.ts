/**
 * bf16/f16 activations without casts: add/sub/mul/div on mixed float dtypes
 * and gelu on bf16/f16 give torch's result dtype (the operands' shared low
 * precision, else f32) and exactly the values of widening, computing in f32
 * and rounding once; their gradients (and autograd's sums and leaf
 * accumulation of low-precision gradients) equal the f32 computation's,
 * rounded into each operand's dtype.
 */
import assert from "node:assert/strict";
import { castTensor, fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { add, div, gelu, mul, sub } from "../../tensor/ops/elementwise.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import { backward } from "../../tensor/autograd.ts";
import type { DType } from "../../tensor/dtype.ts";

const bytes = (t: Tensor) => [...t.toBytes()];
const values = (n: number, seed: number, lo = 0) =>
  Float32Array.from({ length: n }, (_, i) => lo + Math.sin(i * 12.9898 + seed) * 1.7);

/** A leaf of `dtype` holding `data` rounded into it. */
function leaf(data: Float32Array, shape: number[], dtype: DType): Tensor {
  const f = fromArray(data, shape);
  const t = dtype === "f32" ? f : castTensor(f, dtype);
  t.requiresGrad = true;
  return t;
}

/** An f32 leaf with the same values as t (widened exactly). */
function widened(t: Tensor): Tensor {
  const w = t.dtype === "f32"
    ? fromArray(t.toArray() as Float32Array, t.shape)
    : castTensor(t, "f32");
  w.requiresGrad = true;
  return w;
}

const OPS = { add, sub, mul, div };

Deno.test("mixed-dtype add/sub/mul/div: torch's result dtype, the values and gradients of the f32 computation", () => {
  // [a shape, b shape]: same shape, a bias, a column vector, b the larger operand
  const shapes: [number[], number[]][] = [[[6, 33], [6, 33]], [[6, 33], [33]], [[6, 33], [6, 1]], [[
    33,
  ], [
    6,
    33,
  ]]];
  const mixes: [DType, DType][] = [["f32", "bf16"], ["bf16", "bf16"], ["bf16", "f32"], [
    "f16",
    "f16",
  ], [
    "bf16",
    "f16",
  ]];
  for (const [name, op] of Object.entries(OPS)) {
    for (const [sa, sb] of shapes) {
      if (name !== "add" && name !== "mul" && sb.length > sa.length) continue; // b larger: add, mul only
      for (const [da, db] of mixes) {
        scope(() => {
          const na = sa.reduce((x, y) => x * y), nb = sb.reduce((x, y) => x * y);
          const a = leaf(values(na, 1), sa, da),
            b = leaf(values(nb, 2, name === "div" ? 3 : 0), sb, db);
          const out = op(a, b);
          const want = da === db ? da : "f32";
          const what = `${name} ${da}[${sa}] ${db}[${sb}]`;
          assert.equal(out.dtype, want, `${what}: dtype`);
          const af = widened(a), bf = widened(b);
          const ref = op(af, bf);
          const refOut = want === "f32" ? ref : castTensor(ref, want);
          assert.deepEqual(bytes(out), bytes(refOut), `${what}: values`);
          // a weighted sum, so every element's gradient differs; the weights (multiples of 1/8)
          // are exact in every dtype, so the gradient reaching `out` is the same in both runs
          const w = fromArray(
            Float32Array.from({ length: out.numel }, (_, i) => ((i * 7) % 17 - 8) / 8),
            out.shape,
          );
          backward(sum(mul(out, w)));
          backward(sum(mul(ref, w)));
          // leaves accumulate into f32 grads; the gradient reaching a low-precision leaf was rounded
          // into its dtype once (mul/div), or is the f32 one (add/sub pass it through)
          for (const [t, f] of [[a, af], [b, bf]] as const) {
            const roundsInto = (name === "mul" || name === "div") && t.numel === out.numel;
            const r = roundsInto && t.dtype !== "f32"
              ? castTensor(castTensor(f.grad!, t.dtype), "f32")
              : f.grad!;
            const got = t.grad!;
            assert.equal(got.dtype, "f32");
            const gv = got.toArray() as Float32Array, rv = r.toArray() as Float32Array;
            const which = `${what}: gradient of ${t === a ? "a" : "b"}`;
            if (name === "div" && t === b && want !== "f32") {
              // -(g * out) / b reads the rounded low-precision quotient: within its rounding
              const worst = gv.reduce((m, v, i) => Math.max(m, Math.abs(v - rv[i]!)), 0);
              const scale = rv.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
              assert.ok(worst <= scale * 2 ** -7, `${which}: ${worst} of ${scale}`);
              continue;
            }
            // summed over broadcast dims in f32 either way, in the same order
            assert.deepEqual([...gv], [...rv], which);
          }
        });
      }
    }
  }
});

Deno.test("gelu on bf16/f16 stays in that dtype, with the values and gradient of the f32 GELU rounded once", () => {
  for (const dt of ["bf16", "f16"] as const) {
    scope(() => {
      const x = leaf(values(1001, 4), [7, 143], dt);
      const y = gelu(x);
      assert.equal(y.dtype, dt);
      const xf = widened(x), yf = gelu(xf);
      assert.deepEqual(bytes(y), bytes(castTensor(yf, dt)));
      // the gradient arriving is in the output's dtype (mul of bf16 by bf16 gives bf16)
      const w = castTensor(fromArray(values(1001, 5), [7, 143]), dt);
      backward(sum(mul(y, w)));
      backward(sum(mul(yf, castTensor(w, "f32"))));
      // dL/dy = w exactly; the GELU gradient computed in f32 and rounded into dt, widened into x.grad
      const ref = castTensor(castTensor(xf.grad!, dt), "f32");
      assert.deepEqual(bytes(x.grad!), bytes(ref), `${dt}: gradient`);
    });
  }
});

Deno.test("two bf16 gradients of one tensor are summed in bf16, a bf16 and an f32 one in f32", () => {
  scope(() => {
    const x = leaf(values(64, 6), [64], "bf16");
    const y = gelu(x); // bf16
    const z = add(mul(y, y), y); // y receives two bf16 gradients
    assert.equal(z.dtype, "bf16");
    backward(sum(z));
    const xf = widened(x), yf = gelu(xf);
    const yb = castTensor(castTensor(yf, "bf16"), "f32"); // y's values
    yb.requiresGrad = true;
    backward(sum(add(mul(yb, yb), yb)));
    // dz/dy = 2y + 1 computed as bf16(y) + ... : the bf16 gradients y and y (of y*y), then + 1
    const gy = castTensor(castTensor(yb.grad!, "bf16"), "f32").toArray() as Float32Array;
    assert.ok(gy.every(Number.isFinite));
    assert.equal(x.grad!.dtype, "f32");
    // x.grad = bf16(gelu'(x) * bf16(dz/dy)), within one bf16 rounding of the f32 chain
    const gx = x.grad!.toArray() as Float32Array;
    const rx = scope(() => {
      const t = fromArray(values(64, 6), [64]);
      const tb = castTensor(castTensor(t, "bf16"), "f32");
      tb.requiresGrad = true;
      const u = gelu(tb);
      backward(sum(mul(u, fromArray(gy, [64]))));
      return castTensor(castTensor(tb.grad!, "bf16"), "f32").toArray() as Float32Array;
    });
    assert.deepEqual([...gx], [...rx]);
  });
});

Deno.test("dropout with p = 0 is the identity in the input's dtype", async () => {
  const { dropout } = await import("../../tensor/ops/elementwise.ts");
  scope(() => {
    const x = castTensor(fromArray(values(10, 7), [10]), "bf16");
    assert.equal(dropout(x, 0, 1n), x);
  });
});
