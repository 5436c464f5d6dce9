/**
 * The optimizers, schedulers, losses and everyday ops on one device (`device_checks.ts <device>`, e.g.
 * cuda-emu), in a process of its own: the comparisons, each optimizer's
 * second fixture case (six steps, two groups) and the losses' fixture cases
 * with options, against torch's values with the tolerances of the CPU tests
 * (tests/torch_api/*_test.ts explain them). Prints {"ok": true, ...counts} last.
 */
import assert from "node:assert/strict";
import { useDevice } from "../../../tensor/device_choice.ts";
import { backend } from "../../../tensor/backend.ts";
import { fromArray, scope, type Tensor } from "../../../tensor/tensor.ts";
import { backward } from "../../../tensor/autograd.ts";
import { eq, gt, maximum } from "../../../tensor/ops/compare.ts";
import { sum } from "../../../tensor/ops/reduce.ts";
import { Adam } from "../../../optim/adam.ts";
import { Adadelta } from "../../../optim/adadelta.ts";
import { Adagrad } from "../../../optim/adagrad.ts";
import { RMSprop } from "../../../optim/rmsprop.ts";
import {
  binaryCrossEntropyWithLogits,
  crossEntropy,
  nllLoss,
  smoothL1Loss,
} from "../../../nn/losses.ts";
import { assertClose, type FixtureTensor, readPiecesFixture } from "../_fixtures.ts";

useDevice(Deno.args[0] ?? "cpu");
const device = backend().device;

// comparisons
scope(() => {
  const a = fromArray([1, NaN, 3, -0]), b = fromArray([1, 2, NaN, 0]);
  assert.deepEqual(Array.from(eq(a, b).toArray() as Uint8Array), [1, 0, 0, 1]);
  assert.deepEqual(Array.from(gt(a, 0.5).toArray() as Uint8Array), [1, 0, 1, 0]);
  assert.equal(sum(eq(a, a)).item(), 3);
  assert.deepEqual(Array.from(maximum(a, b).toArray() as Float32Array), [1, NaN, NaN, 0]);
});

// optimizers: the second case of each (weight decay, amsgrad, lr decay, momentum + centered), and
// Adam's fused path
interface OptCase {
  name: string;
  optimizer: string;
  defaults: Record<string, unknown>;
  second_group: Record<string, unknown>;
  shapes: number[][];
  init: number[][];
  grads: number[][][];
  after: number[][][];
}
const NAMES: Record<string, string> = {
  lr: "lr",
  betas: "betas",
  eps: "eps",
  weight_decay: "weightDecay",
  amsgrad: "amsgrad",
  lr_decay: "lrDecay",
  initial_accumulator_value: "initialAccumulatorValue",
  alpha: "alpha",
  momentum: "momentum",
  centered: "centered",
  rho: "rho",
};
const opts = (kw: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(kw).map(([k, v]) => [NAMES[k]!, v]));
// deno-lint-ignore no-explicit-any
const CLASSES: Record<string, any> = { Adam, Adadelta, Adagrad, RMSprop };
const optFix = readPiecesFixture<{ steps: number; cases: OptCase[] }>("optimizers.json");
const chosen = [
  "adam_default",
  "adam_amsgrad_wd",
  "adagrad_decay",
  "rmsprop_centered_momentum",
  "adadelta_tuned",
];
for (const c of optFix.cases.filter((c) => chosen.includes(c.name))) {
  scope(() => {
    const params = c.init.map((d, i) => {
      const t = fromArray(Float32Array.from(d), c.shapes[i]).keep();
      t.requiresGrad = true;
      return t;
    });
    const opt = new CLASSES[c.optimizer](
      [{ params: params.slice(0, 2) }, { params: params.slice(2), ...opts(c.second_group) }],
      opts(c.defaults),
    );
    const lr = Math.max(
      1e-3,
      c.defaults.lr as number ?? 0,
      c.second_group.lr as number ?? 0,
      c.optimizer === "Adadelta" ? 1 : 0,
    );
    for (let s = 0; s < optFix.steps; s++) {
      params.forEach((p, i) => {
        p.grad?.dispose();
        p.grad = fromArray(Float32Array.from(c.grads[s]![i]!), c.shapes[i]).keep();
      });
      opt.step();
    }
    params.forEach((p, i) => {
      assert.equal(p.device, device);
      assertClose(
        `${c.name} parameter ${i}`,
        p.toArray() as Float32Array,
        c.after[optFix.steps - 1]![i]!,
        4e-6,
        2e-6 * optFix.steps * lr,
      );
    });
  });
}

// losses with options
interface LossCase {
  name: string;
  // deno-lint-ignore no-explicit-any
  kwargs: Record<string, any>;
  inputs: Record<string, FixtureTensor>;
  out: FixtureTensor;
  dy: FixtureTensor;
  grads: Record<string, FixtureTensor>;
}
const lossFix = readPiecesFixture<{ cases: LossCase[] }>("losses.json");
const f32 = (t: FixtureTensor) => fromArray(Float32Array.from(t.data), t.shape);
const i64 = (t: FixtureTensor) => fromArray(BigInt64Array.from(t.data.map(BigInt)), t.shape);
let losses = 0;
for (const c of lossFix.cases) {
  let fn: ((x: Tensor, c: LossCase) => Tensor) | null = null;
  const w = c.inputs.weight ? { weight: f32(c.inputs.weight) } : {};
  if (c.name.startsWith("nll_3d")) {
    fn = (x) =>
      nllLoss(x, i64(c.inputs.target!), {
        reduction: c.kwargs.reduction,
        ignoreIndex: c.kwargs.ignore_index,
      });
  } else if (c.name.startsWith("ce_smooth_weight") || c.name.startsWith("ce/")) {
    fn = (x) =>
      crossEntropy(x, i64(c.inputs.target!), {
        reduction: c.kwargs.reduction,
        labelSmoothing: c.kwargs.label_smoothing,
        ...w,
      });
  } else if (c.name.startsWith("ce_probs_smooth_weight")) {
    fn = (x) =>
      crossEntropy(x, f32(c.inputs.target!), {
        reduction: c.kwargs.reduction,
        labelSmoothing: c.kwargs.label_smoothing,
        ...w,
      });
  } else if (c.name.startsWith("bce_logits_weight_pos")) {
    fn = (x) =>
      binaryCrossEntropyWithLogits(x, f32(c.inputs.target!), {
        reduction: c.kwargs.reduction,
        posWeight: f32(c.inputs.pos_weight!),
        ...w,
      });
  } else if (c.name.startsWith("smooth_l1_b0.5")) {
    fn = (x) =>
      smoothL1Loss(x, f32(c.inputs.target!), { reduction: c.kwargs.reduction, beta: 0.5 });
  }
  if (!fn) continue;
  scope(() => {
    const x = f32(c.inputs.input!);
    x.requiresGrad = true;
    const out = fn!(x, c);
    assertClose(`${c.name} output`, out.toArray() as Float32Array, c.out.data, 2e-6, 2e-6);
    backward(out, c.out.shape.length > 0 ? { gradient: f32(c.dy) } : {});
    assertClose(
      `${c.name} gradient`,
      x.grad!.toArray() as Float32Array,
      c.grads.input!.data,
      2e-6,
      2e-6,
    );
  });
  losses++;
}
console.log(JSON.stringify({ ok: true, device, optimizers: chosen.length, losses }));
