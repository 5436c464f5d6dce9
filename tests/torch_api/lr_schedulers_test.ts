/**
 * The PyTorch-style schedulers against torch 1.13
 * (fixtures/torch_api/lr_schedulers.json): every group's rate (two groups, the
 * second starting at half the first's) after construction and after each of
 * 30 steps, and OneCycleLR's momentum (SGD's momentum, Adam's betas[0]).
 * Both sides compute in float64 in the same order (on this machine the rates
 * are equal bit for bit); the only differences another machine could see
 * come from V8's Math.cos / ** against its libm's cos / pow, each within an
 * ulp, so the bound is 4 ulps of float64 (1e-15 relative): a wrong step, a
 * factor applied twice or an off-by-one epoch errs by 1e-3 or more. Also: a
 * state_dict restored into fresh schedulers continues the same sequence.
 */
import assert from "node:assert/strict";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { SGD } from "../../optim/sgd.ts";
import { Adam } from "../../optim/adam.ts";
import type { Optimizer } from "../../optim/optimizer.ts";
import {
  CosineAnnealingLR,
  ExponentialLR,
  LambdaLR,
  LinearLR,
  LRSchedulerBase,
  MultiStepLR,
  OneCycleLR,
  SequentialLR,
  StepLR,
} from "../../optim/lr_schedulers.ts";
import { assertClose, readPiecesFixture } from "./_fixtures.ts";

// deno-lint-ignore no-explicit-any
type Spec = Record<string, any>;
interface SchedCase {
  name: string;
  optimizer: "sgd" | "adam";
  spec: Spec;
  lrs: number[][];
  momentum: number[][];
}

const FIX = readPiecesFixture<{ steps: number; cases: SchedCase[] }>("lr_schedulers.json");
const REL = 1e-15;

// deno-lint-ignore no-explicit-any
function optimizer(kind: "sgd" | "adam", params: Tensor[]): Optimizer<any> {
  const groups = [{ params: [params[0]!] }, { params: [params[1]!], lr: 0.05 }];
  return kind === "sgd"
    ? new SGD(groups, { lr: 0.1, momentum: 0.9 })
    : new Adam(groups, { lr: 0.1 });
}

// deno-lint-ignore no-explicit-any
function build(opt: Optimizer<any>, s: Spec): LRSchedulerBase {
  switch (s.kind) {
    case "StepLR":
      return new StepLR(opt, s.step_size, s.gamma);
    case "MultiStepLR":
      return new MultiStepLR(opt, s.milestones, s.gamma);
    case "ExponentialLR":
      return new ExponentialLR(opt, s.gamma);
    case "CosineAnnealingLR":
      return new CosineAnnealingLR(opt, s.T_max, s.eta_min ?? 0);
    case "LinearLR":
      return new LinearLR(opt, {
        startFactor: s.start_factor,
        endFactor: s.end_factor,
        totalIters: s.total_iters,
      });
    case "LambdaLR":
      assert.equal(s.lambda, "0.97 ** epoch / (1 + epoch // 10)");
      return new LambdaLR(opt, (e) => 0.97 ** e / (1 + Math.floor(e / 10)));
    case "OneCycleLR":
      return new OneCycleLR(opt, {
        maxLr: s.max_lr,
        totalSteps: s.total_steps,
        pctStart: s.pct_start,
        annealStrategy: s.anneal_strategy,
        threePhase: s.three_phase,
        divFactor: s.div_factor,
        finalDivFactor: s.final_div_factor,
      });
    case "SequentialLR":
      return new SequentialLR(opt, s.schedulers.map((x: Spec) => build(opt, x)), s.milestones);
  }
  throw new Error(`unknown scheduler ${s.kind}`);
}

// deno-lint-ignore no-explicit-any
function momentumOf(opt: Optimizer<any>): number[] {
  return opt.groups.map((g) => g.hyper.betas ? g.hyper.betas[0] : g.hyper.momentum);
}

function params(): Tensor[] {
  return [fromArray([0]).keep(), fromArray([0]).keep()];
}

for (const c of FIX.cases) {
  Deno.test(`${c.name}: the rates of ${FIX.steps} steps equal torch's`, () => {
    scope(() => {
      const opt = optimizer(c.optimizer, params());
      const sched = build(opt, c.spec);
      for (let s = 0; s <= FIX.steps; s++) {
        if (s > 0) {
          opt.step();
          sched.step();
        }
        assertClose(`rates after step ${s}`, sched.getLastLr(), c.lrs[s]!, REL, 0);
        assertClose(
          `group rates after step ${s}`,
          opt.groups.map((g) => g.hyper.lr),
          c.lrs[s]!,
          REL,
          0,
        );
        if (c.spec.kind === "OneCycleLR") {
          assertClose(`momentum after step ${s}`, momentumOf(opt), c.momentum[s]!, REL, 0);
        }
      }
    });
  });

  Deno.test(`${c.name}: a state saved after 11 steps continues torch's sequence in new schedulers`, () => {
    scope(() => {
      const ps = params();
      const opt = optimizer(c.optimizer, ps);
      const sched = build(opt, c.spec);
      for (let s = 1; s <= 11; s++) {
        opt.step();
        sched.step();
      }
      const saved = JSON.parse(
        JSON.stringify({ opt: opt.stateDict().paramGroups, sched: sched.stateDict() }),
      );
      const opt2 = optimizer(c.optimizer, ps);
      const sched2 = build(opt2, c.spec);
      opt2.loadStateDict({ tensors: new Map(), paramGroups: saved.opt });
      sched2.loadStateDict(saved.sched);
      assertClose("restored rates", sched2.getLastLr(), c.lrs[11]!, REL, 0);
      for (let s = 12; s <= FIX.steps; s++) {
        opt2.step();
        sched2.step();
        assertClose(
          `restored rates after step ${s}`,
          opt2.groups.map((g) => g.hyper.lr),
          c.lrs[s]!,
          REL,
          0,
        );
      }
    });
  });
}

Deno.test("schedulers refuse bad arguments, naming them", () => {
  scope(() => {
    const opt = optimizer("sgd", params());
    assert.throws(() => new StepLR(opt, 0), /stepSize must be a positive integer, got 0/);
    assert.throws(() => new LinearLR(opt, { startFactor: 2 }), /startFactor/);
    assert.throws(() => new LambdaLR(opt, [(e) => e]), /expected 2 lrLambdas/);
    assert.throws(() => new OneCycleLR(opt, { maxLr: 1 }), /totalSteps/);
    assert.throws(() => new SequentialLR(opt, [new StepLR(opt, 2)], [3]), /expected 0 milestones/);
    const one = new OneCycleLR(opt, { maxLr: 1, totalSteps: 2 });
    one.step();
    one.step();
    assert.throws(() => one.step(), /tried to step 4 times; the schedule has 2 total steps/);
    assert.throws(
      () => new StepLR(opt, 2).loadStateDict({ last_epoch: 1, base_lrs: [1] }),
      /base_lrs/,
    );
  });
});

Deno.test("step(epoch) jumps with the closed form, as torch's", () => {
  scope(() => {
    const opt = optimizer("sgd", params());
    const s = new StepLR(opt, 3, 0.5);
    s.step(7);
    assert.deepEqual(s.getLastLr(), [0.1 * 0.25, 0.05 * 0.25]);
    assert.equal(s.lastEpoch, 7);
  });
});
