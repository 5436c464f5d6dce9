/**
 * Tests of check/exact_compare.ts and the verdict of check/exact_check.ts on
 * made-up hashed states: the first step and item where two runs part, the
 * step an item belongs to, step counts that differ, ranks that disagree,
 * runs that crashed or never stepped.
 */
import assert from "node:assert/strict";
import {
  describeDivergence,
  firstDivergence,
  type RankStates,
  statesOf,
} from "../../check/exact_compare.ts";
import {
  compareExactRuns,
  type ExactRun,
  exactRuns,
  exactWorldSizes,
} from "../../check/exact_check.ts";
import type { SnapshotItem } from "../../check/exact_snapshot.ts";
import { CHECK_ENV } from "../../check/env.ts";

/** A step's state: parameter w (value p), optimizer m after the first step, lr, gradient (value g). */
function step(p: string, g: string, lr = "0.01", withState = true): SnapshotItem[] {
  return [
    ["parameter w", p],
    ...(withState ? [["optimizer exp_avg of w", `m${p}`] as SnapshotItem] : []),
    ["buffer bn.running_mean", `b${p}`],
    ["hyperparameter lr of group 0", lr],
    ["gradient of w", g],
  ];
}

/** States of a run whose parameter after step s is `p${s}` and gradient in step s is `g${s}`. */
function run(
  k: number,
  edit: (s: number, items: SnapshotItem[]) => SnapshotItem[] = (_, i) => i,
): RankStates {
  const steps = Array.from(
    { length: k },
    (_, i) => edit(i + 1, step(`p${i}`, `g${i + 1}`, "0.01", i > 0)),
  );
  return { steps, end: [["parameter w", `p${k}`], ["optimizer exp_avg of w", `mp${k}`]] };
}

Deno.test("firstDivergence() is null for the same bits and names the first item that differs", () => {
  assert.equal(firstDivergence(run(3), run(3)), null);
  // a gradient of step 2 differs: the parameter after step 2 (and everything later) differs too
  const b = run(
    3,
    (s, items) => s === 2 ? items.map(([l, v]) => [l, l.startsWith("gradient") ? "G" : v]) : items,
  );
  const d = firstDivergence(run(3), b)!;
  assert.deepEqual([d.step, d.what, d.a, d.b], [2, "gradient of w in step 2", "g2", "G"]);
  // a parameter at snapshot 3 is the work of step 2's update
  const c = run(
    3,
    (s, items) => s === 3 ? items.map(([l, v]) => [l, l.startsWith("parameter") ? "P" : v]) : items,
  );
  assert.deepEqual(
    [firstDivergence(run(3), c)!.step, firstDivergence(run(3), c)!.what],
    [2, "parameter w after step 2"],
  );
  // the state a run ends with
  const e = run(3);
  e.end = [["parameter w", "other"], ["optimizer exp_avg of w", "mp3"]];
  assert.deepEqual([firstDivergence(run(3), e)!.step, firstDivergence(run(3), e)!.what], [
    3,
    "parameter w after step 3",
  ]);
  // different initial weights: step 0, before the first step
  const f = run(
    3,
    (s, items) => s === 1 ? items.map(([l, v]) => [l, l.startsWith("parameter") ? "P" : v]) : items,
  );
  assert.deepEqual([firstDivergence(run(3), f)!.step, firstDivergence(run(3), f)!.what], [
    0,
    "parameter w before step 1",
  ]);
});

Deno.test("firstDivergence() reports a differing rate first, then the first tensor it changes", () => {
  const scaled = run(
    3,
    (_, items) => items.map(([l, v]) => [l, l.startsWith("hyperparameter lr") ? "0.02" : v]),
  );
  // the tensors of step 2 onwards follow from the larger rate
  const b = run(3, (s, items) =>
    items.map(([l, v]) => [
      l,
      l.startsWith("hyperparameter lr")
        ? "0.02"
        : s >= 2 && !l.startsWith("gradient") && !l.startsWith("buffer")
        ? `${v}'`
        : v,
    ]));
  const d = firstDivergence(run(3), b)!;
  assert.deepEqual([d.step, d.what, d.a, d.b], [
    1,
    "hyperparameter lr of group 0 in step 1",
    "0.01",
    "0.02",
  ]);
  assert.deepEqual(d.firstTensor, { step: 1, what: "parameter w after step 1" });
  assert.match(
    describeDivergence(d, "single process", "world 2"),
    /^step 1: hyperparameter lr of group 0 in step 1 differs — 0\.01 \(single process\) vs 0\.02 \(world 2\); the first tensor to differ: parameter w after step 1$/,
  );
  // a rate that differs without any tensor following (the steps ran out) says so
  assert.match(
    describeDivergence(firstDivergence(run(3), scaled)!, "a", "b"),
    /no tensor differs in the steps compared/,
  );
});

Deno.test("firstDivergence() reports step counts that differ, and a tensor one run lacks", () => {
  const d = firstDivergence(run(3), run(2))!;
  assert.deepEqual(d.stepCounts, [3, 2]);
  assert.equal(
    describeDivergence(d, "world 1", "world 2"),
    "world 1 made 3 optimizer steps, world 2 2; the steps both made hold the same bits",
  );
  const lacking = run(3, (_, items) => items.filter(([l]) => l !== "buffer bn.running_mean"));
  const e = firstDivergence(run(3), lacking)!;
  assert.deepEqual([e.step, e.what, e.b], [
    1,
    "buffer bn.running_mean in step 1's forward",
    "absent",
  ]);
});

Deno.test("statesOf() takes the state events of a rank's probe record", () => {
  const s = statesOf([
    { kind: "loss", value: 1 },
    { kind: "state", step: 1, items: [["parameter w", "a"]] },
    { kind: "step", gradNorm: 1 },
    { kind: "state", step: 1, end: true, items: [["parameter w", "b"]] },
  ]);
  assert.deepEqual(s, { steps: [[["parameter w", "a"]]], end: [["parameter w", "b"]] });
});

const ok = (title: string, nproc: number | null, ranks: RankStates[]): ExactRun => ({
  title,
  nproc,
  ranks: new Map(ranks.map((r, i) => [i, r])),
});

Deno.test("compareExactRuns() says identical with exit 0 when every run and rank holds the same bits", () => {
  const v = compareExactRuns(
    [
      ok("single process", null, [run(3)]),
      ok("world 1", 1, [run(3)]),
      ok("world 2", 2, [run(3), run(3)]),
    ],
    3,
  );
  assert.equal(v.code, 0);
  assert.equal(
    v.line,
    "dtrain check --exact: identical — single process, world 1, world 2 hold the same bits at every one of 3 steps",
  );
  assert.ok(v.rows.every((r) => r.outcome === "PASS"));
});

Deno.test("compareExactRuns() names the earliest divergence and the two runs, with exit 1", () => {
  const late = run(
    3,
    (s, items) => s === 3 ? items.map(([l, v]) => [l, l.startsWith("gradient") ? "x" : v]) : items,
  );
  const early = run(
    3,
    (s, items) => s === 2 ? items.map(([l, v]) => [l, l.startsWith("gradient") ? "y" : v]) : items,
  );
  const v = compareExactRuns(
    [
      ok("single process", null, [run(3)]),
      ok("world 2", 2, [late, late]),
      ok("world 4", 4, [early, early, early, early]),
    ],
    3,
  );
  assert.equal(v.code, 1);
  assert.match(
    v.line,
    /^dtrain check --exact: DIFFERENT — step 2: gradient of w in step 2 differs — g2 \(single process\) vs y \(world 4\)$/,
  );
  // ranks of one run that disagree are named too
  const split = compareExactRuns([
    ok("single process", null, [run(3)]),
    ok("world 2", 2, [run(3), early]),
  ], 3);
  assert.match(
    split.line,
    /step 2: gradient of w in step 2 differs — g2 \(world 2 rank 0\) vs y \(world 2 rank 1\)/,
  );
});

Deno.test("compareExactRuns() reports a run that crashed, and a script that never steps", () => {
  const crashed = compareExactRuns(
    [ok("single process", null, [run(3)]), {
      title: "world 2",
      nproc: 2,
      failed: "exited with code 1",
    }],
    3,
  );
  assert.equal(crashed.code, 1);
  assert.equal(crashed.line, "dtrain check --exact: FAIL — world 2 did not finish");
  const idle = compareExactRuns(
    [
      ok("single process", null, [{ steps: [], end: null }]),
      ok("world 1", 1, [{ steps: [], end: null }]),
    ],
    3,
  );
  assert.equal(idle.code, 1);
  assert.match(idle.rows[0]!.cause!, /made no optimizer step/);
});

Deno.test("exactRuns() runs one process and world sizes 1, 2, 4 with exact mode and state hashes on", () => {
  assert.deepEqual(exactWorldSizes(8), [1, 2, 4, 8]);
  assert.throws(() => exactWorldSizes(3), /must be a power of two/);
  const runs = exactRuns({ nproc: 4, steps: 5 });
  assert.deepEqual(runs.map((r) => [r.title, r.nproc]), [
    ["single process", null],
    ["world 1", 1],
    ["world 2", 2],
    ["world 4", 4],
  ]);
  // K steps hashed, then the state after step K at the (K+1)-th: a Trainer is allowed K+1 steps
  assert.equal(runs[0]!.env[CHECK_ENV.EXACT], "8"); // exact mode's default shard count
  assert.equal(exactRuns({ nproc: 16, steps: 5 })[0]!.env[CHECK_ENV.EXACT], "16");
  assert.equal(runs[0]!.env[CHECK_ENV.STOP_AFTER], "5");
  assert.equal(runs[0]!.env[CHECK_ENV.MAX_STEPS], "6");
  assert.equal(
    exactRuns({ nproc: 1, steps: 2, exactMode: false })[0]!.env[CHECK_ENV.EXACT],
    undefined,
  );
});
