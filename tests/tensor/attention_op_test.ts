/**
 * The fused self-attention op against the composed one (scores, masked
 * softmax, product) on the CPU: outputs and gradients of qkv agree to f32
 * rounding, also under bf16 autocast (bf16 in and out, within bf16's
 * rounding), GPT's "composed" option runs the other path, and shapes that
 * do not fit are refused with their sizes.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { gradCheck, rand } from "./_gradcheck.ts";
import { selfAttention } from "../../tensor/ops/attention.ts";
import { composedCausalSelfAttention } from "../../tensor/ops/nn.ts";
import { linear } from "../../tensor/ops/linalg.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import { mul } from "../../tensor/ops/elementwise.ts";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { backward } from "../../tensor/autograd.ts";
import { autocast } from "../../amp/autocast.ts";
import { GPT } from "../../nn/gpt.ts";
import { manualSeed } from "../../nn/init.ts";

buildNative({ quiet: true });

/** max |a - b| / max |b| */
function normwise(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0, s = 0;
  for (let i = 0; i < b.length; i++) {
    d = Math.max(d, Math.abs(a[i]! - b[i]!));
    s = Math.max(s, Math.abs(b[i]!));
  }
  return d / (s || 1);
}

/** Output and qkv gradient of sum(attention(qkv) * w) for one implementation. */
function outputAndGrad(
  attend: (qkv: Tensor) => Tensor,
  shape: [number, number, number],
  seed: number,
): [Float32Array, Float32Array] {
  return scope(() => {
    const n = shape[0] * shape[1] * shape[2];
    const qkv = fromArray(rand(n, seed), shape);
    qkv.requiresGrad = true;
    const y = attend(qkv);
    const w = fromArray(rand(y.numel, seed + 1), [...y.shape]);
    backward(sum(mul(y, w)));
    const out = [y.toArray() as Float32Array, qkv.grad!.toArray() as Float32Array] as [
      Float32Array,
      Float32Array,
    ];
    qkv.grad!.dispose();
    return out;
  });
}

for (const [B, T, H, D] of [[2, 37, 3, 16], [1, 70, 2, 32], [1, 9, 1, 64]]) {
  Deno.test(`selfAttention equals the composed ops: B=${B} T=${T} H=${H} D=${D}`, () => {
    const shape: [number, number, number] = [B!, T!, 3 * H! * D!];
    const [yf, gf] = outputAndGrad((x) => selfAttention(x, H!), shape, T!);
    const [yc, gc] = outputAndGrad((x) => composedCausalSelfAttention(x, H!), shape, T!);
    assert.ok(normwise(yf, yc) < 1e-6, `outputs differ by ${normwise(yf, yc)}`);
    assert.ok(normwise(gf, gc) < 1e-5, `gradients differ by ${normwise(gf, gc)}`);
  });
}

Deno.test("selfAttention gradient matches central differences (causal and full)", () => {
  const inp = { shape: [2, 5, 12], data: rand(120, 3) };
  assert.ok(gradCheck((qkv) => selfAttention(qkv, 2), [inp]) < 2e-2);
  assert.ok(gradCheck((qkv) => selfAttention(qkv, 2, { causal: false }), [inp]) < 2e-2);
});

Deno.test("under bf16 autocast the fused attention takes and gives bf16, within bf16 rounding", () => {
  scope(() => {
    const x = fromArray(rand(2 * 33 * 32, 5), [2, 33, 32]);
    const w = fromArray(rand(96 * 32, 6), [96, 32]);
    const [fused, composed] = ["fused", "composed"].map((kind) =>
      autocast("bf16", () => {
        const qkv = linear(x, w); // bf16 under autocast
        assert.equal(qkv.dtype, "bf16");
        const y = kind === "fused" ? selfAttention(qkv, 2) : composedCausalSelfAttention(qkv, 2);
        if (kind === "fused") assert.equal(y.dtype, "bf16");
        return y.toArray() as Float32Array;
      })
    );
    // both round the attention output to bf16 (2^-9 relative) once, from f32 sums
    assert.ok(normwise(fused!, composed!) < 1e-2, `differ by ${normwise(fused!, composed!)}`);
  });
});

Deno.test("GPT's attention option picks the path; both give the same loss", () => {
  const losses = (["fused", "composed"] as const).map((attention) =>
    scope(() => {
      manualSeed(4);
      const m = new GPT({
        vocabSize: 50,
        blockSize: 16,
        nLayer: 1,
        nHead: 2,
        nEmbd: 16,
        attention,
      });
      const idx = fromArray(Int32Array.from({ length: 32 }, (_, i) => (i * 7) % 50), [2, 16]);
      const loss = m.loss(idx, idx).item();
      m.dispose();
      return loss;
    })
  );
  assert.ok(Math.abs(losses[0]! - losses[1]!) < 1e-6 * Math.abs(losses[1]!), `${losses}`);
  assert.throws(
    () =>
      new GPT({
        vocabSize: 5,
        blockSize: 4,
        nLayer: 1,
        nHead: 1,
        nEmbd: 4,
        attention: "flash" as "fused",
      }),
    /attention "flash" is not "fused" or "composed"/,
  );
});

Deno.test("selfAttention refuses shapes it cannot split into heads, naming them", () => {
  scope(() => {
    const qkv = fromArray(new Float32Array(2 * 3 * 10), [2, 3, 10]);
    assert.throws(
      () => selfAttention(qkv, 2),
      /expected \(B, T, 3C\) with C divisible by 2 heads, got \[2,3,10\]/,
    );
    const wide = fromArray(new Float32Array(3 * 258 * 2), [1, 2, 3 * 258]);
    assert.throws(() => selfAttention(wide, 1), /head dimension 258 is above 256/);
  });
});
