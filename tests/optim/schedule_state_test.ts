import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { constantLr, LrScheduler, stepLr, warmupCosineLr } from "../../optim/lr_schedule.ts";
import { AdamW } from "../../optim/adamw.ts";
import { SGD } from "../../optim/sgd.ts";
import { fromArray, scope } from "../../tensor/tensor.ts";
import type { Tensor } from "../../tensor/tensor.ts";
import type { Optimizer } from "../../optim/optimizer.ts";

buildNative({ quiet: true });

Deno.test("learning-rate schedules: constant, linear warmup then cosine, step decay", () => {
  assert.equal(constantLr(0.1)(1234), 0.1);
  const cos = warmupCosineLr({ maxLr: 1, minLr: 0.1, warmupSteps: 4, totalSteps: 14 });
  assert.deepEqual([0, 1, 2, 3].map(cos), [0.2, 0.4, 0.6, 0.8]); // nanoGPT's (step + 1) / (warmup + 1)
  assert.equal(cos(4), 1);
  assert.ok(Math.abs(cos(9) - 0.55) < 1e-12); // halfway down the cosine
  assert.equal(cos(14), 0.1);
  assert.equal(cos(100), 0.1);
  const st = stepLr({ lr: 1, stepSize: 10, gamma: 0.5 });
  assert.deepEqual([0, 9, 10, 25].map(st), [1, 1, 0.5, 0.25]);
  assert.throws(
    () => warmupCosineLr({ maxLr: 1, warmupSteps: 5, totalSteps: 5 }),
    /warmupSteps \(5\) < totalSteps \(5\)/,
  );
});

function param(values: number[]): Tensor {
  const p = fromArray(new Float32Array(values)).keep();
  p.requiresGrad = true;
  p.grad = fromArray(new Float32Array(values.map((v) => v * 0.5 - 0.1))).keep();
  return p;
}

/** Steps `a` n times, saves, loads into `b`, then steps both and compares bit for bit. */
function roundTrip(make: (ps: Tensor[]) => Optimizer<{ lr: number }>): void {
  const pa = [param([1, -2, 3]), param([0.5])], pb = [param([1, -2, 3]), param([0.5])];
  const a = make(pa), b = make(pb);
  const sched = new LrScheduler(a, stepLr({ lr: 0.1, stepSize: 2, gamma: 0.5 }));
  for (let i = 0; i < 3; i++) {
    a.step();
    sched.step();
  }
  scope(() => b.loadStateDict(a.stateDict()));
  const sb = new LrScheduler(b, stepLr({ lr: 0.1, stepSize: 2, gamma: 0.5 }));
  sb.loadStateDict(sched.stateDict());
  assert.equal(b.lr, a.lr);
  pa.forEach((p, i) => pb[i]!.copyFrom(p));
  a.step();
  b.step();
  pa.forEach((p, i) => assert.deepEqual(pb[i]!.toArray(), p.toArray()));
}

Deno.test("AdamW and SGD state dicts round-trip: a loaded optimizer continues identically", () => {
  roundTrip((ps) => new AdamW(ps, { lr: 0.1 }));
  roundTrip((ps) => new SGD(ps, { lr: 0.1, momentum: 0.9, nesterov: true }));
});

Deno.test("Optimizer.loadStateDict() names what does not fit", () => {
  const a = new AdamW([param([1, 2])]);
  a.step();
  const b = new AdamW([param([1, 2, 3])]);
  assert.throws(
    () => scope(() => b.loadStateDict(a.stateDict())),
    /exp_avg \[2\] does not match the parameter \[3\]/,
  );
  const c = new AdamW([param([1]), param([2])]);
  assert.throws(
    () => scope(() => c.loadStateDict(a.stateDict())),
    /group 0 has 1 parameters, this optimizer 2/,
  );
});
