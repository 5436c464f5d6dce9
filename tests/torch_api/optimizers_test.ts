/**
 * Adam, Adadelta, Adagrad and RMSprop against torch 1.13
 * (fixtures/torch_api/optimizers.json: two parameter groups, the second with
 * its own hyperparameters, six steps from the same parameters and
 * gradients): the parameters after every step, the final state tensors and
 * param_groups, a state_dict round trip that continues the same trajectory,
 * and torch's argument checks.
 *
 * Tolerance. dtrain composes each update from f32 tensor ops in torch's
 * order with torch's scalars, so every intermediate is rounded where torch
 * rounds it, except where torch's vectorised add(alpha)/addcmul/addcdiv
 * fuse a multiply-add into one rounding (dtrain rounds twice): at most a
 * few half-ulps (2^-24 relative) per op, about 10 ops per step, and the
 * state carries them into later steps. Six steps then allow
 * 6 * 10 * 2^-24 ≈ 4e-6 relative to the values, plus an absolute part for
 * values that cancel to near zero (a parameter moved by lr-sized updates:
 * steps * lr * 4e-6). The bound used, rtol 4e-6 and atol 2e-6 * steps *
 * max(lr, 1e-3), is far below any wrong rule: a missing bias correction,
 * a wrong beta or eps placement changes values by 1e-3 or more. Adam
 * without AMSGrad or weight decay runs AdamW's fused kernel, which rounds
 * as torch does: that case must equal torch bit for bit.
 */
import assert from "node:assert/strict";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { Adam } from "../../optim/adam.ts";
import { Adadelta } from "../../optim/adadelta.ts";
import { Adagrad } from "../../optim/adagrad.ts";
import { RMSprop } from "../../optim/rmsprop.ts";
import type { Optimizer } from "../../optim/optimizer.ts";
import { assertClose, readPiecesFixture } from "./_fixtures.ts";

interface OptCase {
  name: string;
  optimizer: "Adam" | "Adadelta" | "Adagrad" | "RMSprop";
  defaults: Record<string, unknown>;
  second_group: Record<string, unknown>;
  shapes: number[][];
  init: number[][];
  grads: number[][][];
  after: number[][][];
  state: Record<string, Record<string, number | number[]>>;
  param_groups: Record<string, unknown>[];
}

const FIX = readPiecesFixture<{ steps: number; cases: OptCase[] }>("optimizers.json");

/** torch's keyword names to dtrain's option names. */
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

function options(torchKw: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(torchKw).map(([k, v]) => {
      const name = NAMES[k];
      if (!name) throw new Error(`no dtrain name for torch option ${k}`);
      return [name, v];
    }),
  );
}

// deno-lint-ignore no-explicit-any
const CLASSES: Record<OptCase["optimizer"], new (p: any, o: any) => Optimizer<{ lr: number }>> = {
  Adam,
  Adadelta,
  Adagrad,
  RMSprop,
};

function build(c: OptCase, params: Tensor[]): Optimizer<{ lr: number }> {
  return new CLASSES[c.optimizer](
    [{ params: params.slice(0, 2) }, { params: params.slice(2), ...options(c.second_group) }],
    options(c.defaults),
  );
}

function leaves(c: OptCase): Tensor[] {
  return c.init.map((d, i) => {
    const t = fromArray(Float32Array.from(d), c.shapes[i]).keep();
    t.requiresGrad = true;
    return t;
  });
}

function setGrads(c: OptCase, params: Tensor[], step: number): void {
  params.forEach((p, i) => {
    p.grad?.dispose();
    p.grad = fromArray(Float32Array.from(c.grads[step]![i]!), c.shapes[i]).keep();
  });
}

function tolerances(c: OptCase): { rtol: number; atol: number } {
  const lrs = [c.defaults.lr, c.second_group.lr].filter((v) => typeof v === "number") as number[];
  const lr = Math.max(1e-3, ...lrs, c.optimizer === "Adadelta" ? 1 : 0);
  return c.name === "adam_default"
    ? { rtol: 0, atol: 0 }
    : { rtol: 4e-6, atol: 2e-6 * FIX.steps * lr };
}

for (const c of FIX.cases) {
  Deno.test(`${c.optimizer} ${c.name}: parameters after each of ${FIX.steps} steps and the state equal torch's`, () => {
    scope(() => {
      const params = leaves(c);
      const opt = build(c, params);
      const { rtol, atol } = tolerances(c);
      for (let s = 0; s < FIX.steps; s++) {
        setGrads(c, params, s);
        opt.step();
        params.forEach((p, i) =>
          assertClose(
            `step ${s + 1} parameter ${i}`,
            p.toArray() as Float32Array,
            c.after[s]![i]!,
            rtol,
            atol,
          )
        );
      }
      const sd = opt.stateDict();
      for (const [index, st] of Object.entries(c.state)) {
        for (const [key, want] of Object.entries(st)) {
          const got = sd.tensors.get(`${index}.${key}`);
          assert.ok(got, `state ${index}.${key} is missing (have ${[...sd.tensors.keys()]})`);
          const expected = typeof want === "number" ? [want] : want;
          assertClose(`state ${index}.${key}`, got.toArray() as Float32Array, expected, rtol, atol);
        }
      }
      assert.equal(
        sd.tensors.size,
        Object.values(c.state).reduce((n, s) => n + Object.keys(s).length, 0),
      );
      sd.paramGroups.forEach((g, gi) => {
        const want = c.param_groups[gi]!;
        for (const [k, v] of Object.entries(g)) {
          if (k === "foreach" || k === "capturable") continue;
          assert.deepEqual(v, want[k], `param_groups[${gi}].${k}`);
        }
      });
      for (const p of params) p.grad?.dispose();
    });
  });

  Deno.test(`${c.optimizer} ${c.name}: a state_dict saved after 3 steps continues torch's trajectory in a new optimizer`, () => {
    scope(() => {
      const { rtol, atol } = tolerances(c);
      const params = leaves(c);
      const opt = build(c, params);
      for (let s = 0; s < 3; s++) {
        setGrads(c, params, s);
        opt.step();
      }
      const saved = opt.stateDict();
      // a fresh optimizer built with other hyperparameters takes the saved ones
      const again = new CLASSES[c.optimizer](params, { lr: 123 });
      assert.throws(() => again.loadStateDict(saved), /parameter groups/);
      const restored = build(c, params);
      restored.loadStateDict({
        tensors: new Map(saved.tensors),
        paramGroups: structuredClone(saved.paramGroups),
      });
      for (let s = 3; s < FIX.steps; s++) {
        setGrads(c, params, s);
        restored.step();
      }
      params.forEach((p, i) =>
        assertClose(
          `restored parameter ${i}`,
          p.toArray() as Float32Array,
          c.after[FIX.steps - 1]![i]!,
          rtol,
          atol,
        )
      );
      for (const p of params) p.grad?.dispose();
    });
  });
}

Deno.test("the new optimizers refuse torch's invalid hyperparameters, naming them", () => {
  scope(() => {
    const p = fromArray([1, 2]).keep();
    assert.throws(() => new Adam([p], { betas: [1.0, 0.999] }), /betas\[0\] 1/);
    assert.throws(() => new Adam([p], { lr: -1 }), /invalid lr -1/);
    assert.throws(() => new Adagrad([p], { lrDecay: -0.1 }), /lrDecay/);
    assert.throws(() => new RMSprop([p], { alpha: -0.5 }), /alpha/);
    assert.throws(() => new Adadelta([p], { rho: 1.5 }), /rho 1.5/);
    assert.throws(
      () => new Adam([{ params: [p], momentum: 0.9 } as never]),
      /momentum, which this optimizer does not have/,
    );
  });
});

Deno.test("a parameter without a gradient is skipped and keeps no state", () => {
  scope(() => {
    const a = fromArray([1, 2]).keep(), b = fromArray([3]).keep();
    a.requiresGrad = b.requiresGrad = true;
    a.grad = fromArray([0.5, -0.5]).keep();
    const opt = new Adam([a, b], { lr: 0.1 });
    opt.step();
    assert.deepEqual([...b.toArray()], [3]);
    assert.deepEqual([...opt.stateDict().tensors.keys()].sort(), [
      "0.exp_avg",
      "0.exp_avg_sq",
      "0.step",
    ]);
    assert.ok(Math.abs(Number(a.toArray()[0]) - 0.9) < 1e-6); // Adam's first step moves by lr
  });
});
