/**
 * The losses against torch 1.13 (fixtures/torch_api/losses.json): for every
 * loss, option set and reduction, the output and the gradients of the inputs
 * torch differentiates, under a random upstream gradient for unreduced
 * outputs.
 *
 * Tolerance. The values are O(1) (logits up to ~6, log-probabilities down
 * to ~-10) and each output is a sum of at most 35 terms, each a few f32 ops
 * (a log-softmax, products by weights, the smoothing mix) that torch rounds
 * in another order or fuses (its backward formulas are written out, dtrain's
 * come from autograd): a few ulps (2^-24 relative) per term. The bound,
 * 2e-6 + 2e-6·|torch| (about 16 ulps of a unit value), leaves that room; the
 * largest difference seen is a tenth of it, and a wrong rule (a dropped
 * weight, a wrong mean's count, smoothing over C-1 classes) moves values by
 * 1e-3 or more.
 */
import assert from "node:assert/strict";
import { castTensor, fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { crossEntropy as fusedCrossEntropy } from "../../tensor/ops/nn.ts";
import { backend } from "../../tensor/backend.ts";
import { backward } from "../../tensor/autograd.ts";
import {
  BCELoss,
  BCEWithLogitsLoss,
  binaryCrossEntropy,
  binaryCrossEntropyWithLogits,
  crossEntropy,
  CrossEntropyLoss,
  L1Loss,
  l1Loss,
  MSELoss,
  mseLoss,
  NLLLoss,
  nllLoss,
  SmoothL1Loss,
  smoothL1Loss,
} from "../../nn/losses.ts";
import { logSoftmax } from "../../tensor/ops/softmax.ts";
import { assertClose, type FixtureTensor, readPiecesFixture } from "./_fixtures.ts";

interface LossCase {
  name: string;
  // deno-lint-ignore no-explicit-any
  kwargs: Record<string, any>;
  inputs: Record<string, FixtureTensor>;
  out: FixtureTensor;
  dy: FixtureTensor;
  grads: Record<string, FixtureTensor>;
}

const FIX = readPiecesFixture<{ cases: LossCase[] }>("losses.json");
const RTOL = 2e-6, ATOL = 2e-6;

function tensor(t: FixtureTensor, integer: boolean): Tensor {
  return integer
    ? fromArray(BigInt64Array.from(t.data.map(BigInt)), t.shape)
    : fromArray(Float32Array.from(t.data), t.shape);
}

// deno-lint-ignore no-explicit-any
type Fn = (x: Tensor, y: Tensor, opts: any) => Tensor;
const FNS: Record<string, Fn> = {
  nll: nllLoss,
  ce: crossEntropy,
  mse: mseLoss,
  l1: l1Loss,
  smooth: smoothL1Loss,
  bce_logits: binaryCrossEntropyWithLogits,
  bce: binaryCrossEntropy,
};

function fnOf(name: string): Fn {
  const key = Object.keys(FNS).sort((a, b) => b.length - a.length).find((k) => name.startsWith(k));
  if (!key) throw new Error(`no loss for case ${name}`);
  return FNS[key]!;
}

for (const c of FIX.cases) {
  Deno.test(`${c.name} ${JSON.stringify(c.kwargs)}: output and gradients equal torch's`, () => {
    scope(() => {
      const x = tensor(c.inputs.input!, false);
      x.requiresGrad = true;
      const integerTarget = c.inputs.target!.data.every(Number.isInteger) &&
        c.name.match(/^(nll|ce)(?!_probs)/) !== null;
      const target = tensor(c.inputs.target!, integerTarget);
      if (c.grads.target) target.requiresGrad = true;
      const opts = {
        reduction: c.kwargs.reduction,
        ...(c.inputs.weight ? { weight: tensor(c.inputs.weight, false) } : {}),
        ...(c.inputs.pos_weight ? { posWeight: tensor(c.inputs.pos_weight, false) } : {}),
        ...(c.kwargs.ignore_index !== undefined ? { ignoreIndex: c.kwargs.ignore_index } : {}),
        ...(c.kwargs.label_smoothing !== undefined
          ? { labelSmoothing: c.kwargs.label_smoothing }
          : {}),
        ...(c.kwargs.beta !== undefined ? { beta: c.kwargs.beta } : {}),
      };
      const out = fnOf(c.name)(x, target, opts);
      assert.deepEqual(out.shape, c.out.shape);
      assertClose("output", out.toArray() as Float32Array, c.out.data, RTOL, ATOL);
      backward(out, c.out.shape.length > 0 ? { gradient: tensor(c.dy, false) } : {});
      for (const [name, want] of Object.entries(c.grads)) {
        const t = name === "input" ? x : target;
        assert.ok(t.grad, `no gradient for ${name}`);
        assertClose(`gradient of ${name}`, t.grad.toArray() as Float32Array, want.data, RTOL, ATOL);
      }
    });
  });
}

Deno.test("crossEntropy and nllLoss find the class dim from the shapes, and ask when both layouts fit", () => {
  scope(() => {
    const x = fromArray(new Float32Array(2 * 3 * 4).map((_, i) => Math.sin(i)), [2, 3, 4]);
    const torchLayout = fromArray(new Int32Array([0, 1, 2, 0, 1, 2, 0, 1]), [2, 4]); // (N, d1): classes in dim 1
    const lastLayout = fromArray(new Int32Array([0, 1, 2, 3, 0, 1]), [2, 3]); // (...): classes last
    const a = crossEntropy(x, torchLayout).item();
    const b = nllLoss(logSoftmax(x, 1), torchLayout).item();
    assert.ok(Math.abs(a - b) < 1e-6, `${a} vs ${b}`);
    const c = crossEntropy(x, lastLayout).item();
    const d = nllLoss(logSoftmax(x, -1), lastLayout).item();
    assert.ok(Math.abs(c - d) < 1e-6, `${c} vs ${d}`);
    const square = fromArray(new Float32Array(2 * 3 * 3), [2, 3, 3]);
    const t = fromArray(new Int32Array(6), [2, 3]);
    assert.throws(() => crossEntropy(square, t), /say which with classDim/);
    assert.equal(crossEntropy(square, t, { classDim: 1 }).shape.length, 0);
    assert.throws(
      () => crossEntropy(x, fromArray(new Int32Array(5), [5])),
      /needs targets of shape \[2,4\]/,
    );
    assert.throws(
      () => nllLoss(x, torchLayout, { reduction: "avg" as never }),
      /reduction must be "none", "mean" or "sum"/,
    );
    assert.throws(
      () => crossEntropy(x, torchLayout, { weight: fromArray([1, 2]) }),
      /one value per class \(3\)/,
    );
    assert.throws(() => mseLoss(x, fromArray([1])), /must have the input's shape/);
  });
});

Deno.test("a mean over targets that are all ignored is NaN, as torch's", () => {
  scope(() => {
    const x = fromArray(new Float32Array(6), [2, 3]);
    const t = fromArray(new Int32Array([-100, -100]));
    assert.ok(Number.isNaN(crossEntropy(x, t, { labelSmoothing: 0.1 }).item()));
    assert.equal(crossEntropy(x, t, { reduction: "sum" }).item(), 0);
  });
});

Deno.test("the torch.nn loss classes keep their options and give the functions' values", () => {
  scope(() => {
    const x = fromArray([2, 0.5, -1, 0.1, 1.5, 0.3], [2, 3]);
    const y = fromArray(new Int32Array([0, 2]));
    const t = fromArray([1, 0, 1, 0, 1, 1], [2, 3]);
    const same = (a: Tensor, b: Tensor) => assert.deepEqual(a.toArray(), b.toArray());
    same(
      new CrossEntropyLoss({ labelSmoothing: 0.1 }).forward(x, y),
      crossEntropy(x, y, { labelSmoothing: 0.1 }),
    );
    same(new NLLLoss({ reduction: "sum" }).forward(x, y), nllLoss(x, y, { reduction: "sum" }));
    same(new MSELoss().forward(x, t), mseLoss(x, t));
    same(new L1Loss({ reduction: "none" }).forward(x, t), l1Loss(x, t, { reduction: "none" }));
    same(new SmoothL1Loss({ beta: 0.5 }).forward(x, t), smoothL1Loss(x, t, { beta: 0.5 }));
    const p = fromArray([0.9, 0.2, 0.6, 0.1, 0.7, 0.5], [2, 3]);
    same(new BCELoss().forward(p, t), binaryCrossEntropy(p, t));
    same(
      new BCEWithLogitsLoss({ posWeight: fromArray([2, 1, 1]) }).forward(x, t),
      binaryCrossEntropyWithLogits(x, t, { posWeight: fromArray([2, 1, 1]) }),
    );
    assert.throws(() => new MSELoss({ reduction: "avg" as never }), /MSELoss: reduction must be/);
  });
});

Deno.test("plain crossEntropy keeps the fused kernel, for bf16 logits too (autocast's outputs)", () => {
  scope(() => {
    const call = backend().call as unknown as Record<string, (...a: unknown[]) => unknown>;
    const saved = call.dt_crossentropy_fwd!;
    let fused = 0;
    call.dt_crossentropy_fwd = (...a: unknown[]) => {
      fused++;
      return saved(...a);
    };
    try {
      const logits = fromArray([2, 0.5, -1, 0.1, 1.5, 0.3], [2, 3]);
      const y = fromArray(new Int32Array([0, 2]));
      const low = castTensor(logits, "bf16");
      assert.equal(crossEntropy(low, y).item(), fusedCrossEntropy(low, y).item());
      assert.equal(crossEntropy(logits, y).item(), fusedCrossEntropy(logits, y).item());
      assert.equal(fused, 4); // each crossEntropy call above ran the fused kernel
      crossEntropy(logits, y, { labelSmoothing: 0.1 });
      assert.equal(fused, 4); // smoothing composes ops instead
    } finally {
      call.dt_crossentropy_fwd = saved;
    }
  });
});
