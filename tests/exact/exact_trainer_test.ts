/**
 * Exact mode through the Trainer (tests/exact/scripts/exact_trainer.ts):
 * GPT-mini with dropout, AdamW, clipping, gradient accumulation and bf16
 * autocast, and a CNN with SyncBatchNorm and SGD with momentum, 50 steps
 * over several epochs, give one digest of every weight, buffer and
 * optimizer-state tensor as a single process and on 1, 2, 4 and 8 ranks, and
 * after saving on 2 ranks at step 25 and resuming on 4; GPT-mini under f16
 * autocast with its GradScaler gives one digest in one process and on 2 and
 * 8 ranks; evaluations every 10 steps change no bit. With exact mode off
 * the same GPT run parts between 1 and 2 ranks, so the comparison can fail.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { launched, type Line, single } from "./_runs.ts";

buildNative({ quiet: true });
const SCRIPT = "tests/exact/scripts/exact_trainer.ts";

/** Every rank's digest of `lines` (one line per rank of a `world`-rank run of `kase`). */
function digests(lines: Line[], kase: string, world: number, steps = 50): string[] {
  const mine = lines.filter((l) => l.case === kase);
  assert.equal(mine.length, world, JSON.stringify(lines));
  for (const l of mine) {
    assert.equal(l.world, world);
    assert.equal(l.steps, steps, JSON.stringify(l));
  }
  return mine.map((l) => l.digest);
}

async function onRanks(kase: string, n: number, env: Record<string, string> = {}, steps = 50) {
  const r = await launched(SCRIPT, n, { env: { CASE: kase, ...env } });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  return { digests: digests(r.lines, kase, n, steps), lines: r.lines, records: r.records };
}

for (const kase of ["gpt", "cnn"]) {
  Deno.test(`exact mode: ${kase} trained by the Trainer has the same bits in one process and on 1, 2, 4 and 8 ranks`, async () => {
    const ref = digests(await single(SCRIPT, { CASE: kase }), kase, 1)[0]!;
    for (const n of [1, 2, 4, 8]) {
      const r = await onRanks(kase, n);
      for (const d of r.digests) assert.equal(d, ref, `${kase}, ${n} rank(s)`);
      // The records say so: config.json the switch and the policy's shard count, run.json the policy.
      const config = r.records["config.json"], run = r.records["run.json"];
      assert.ok(config && run, `run records: ${Object.keys(r.records)}`);
      assert.equal(config.config.exact, true);
      assert.equal(config.config.numerics.exact, 8);
      assert.equal(run.attempts.at(-1).numerics.exact, 8, JSON.stringify(run.attempts.at(-1)));
    }
  });
}

Deno.test("exact mode: GPT-mini under f16 autocast with its GradScaler has the same bits in one process and on 2 and 8 ranks", async () => {
  // A mean loss makes every gradient of a pass W times its single-process value unless the pass
  // is seeded with 1/W: f16's narrow range then overflowed (the scaler skipping other steps) or
  // went subnormal at one world size and not another (1, 2 and 8 ranks parted before the seed).
  const env = { AUTOCAST: "f16" };
  const ref = digests(await single(SCRIPT, { CASE: "gpt", ...env }), "gpt", 1)[0]!;
  assert.notEqual(ref, digests(await single(SCRIPT, { CASE: "gpt" }), "gpt", 1)[0], "f16 ran");
  for (const n of [2, 8]) {
    const r = await onRanks("gpt", n, env);
    assert.equal(r.records["config.json"]?.config.precision.autocast, "f16");
    for (const d of r.digests) assert.equal(d, ref, `f16, ${n} rank(s)`);
  }
});

Deno.test("exact mode: evaluations every 10 steps (eval mode, noGrad, 21 samples shared unevenly) leave GPT-mini's bits in one process and on 2 ranks", async () => {
  const ref = digests(await single(SCRIPT, { CASE: "gpt" }), "gpt", 1)[0]!;
  const one = await single(SCRIPT, { CASE: "gpt", EVAL: "1" });
  assert.equal(digests(one, "gpt", 1)[0], ref);
  const two = await onRanks("gpt", 2, { EVAL: "1" });
  // at steps 10, 20, 30, 40, 50 and at the ends of the first three 16-step epochs
  for (const l of [...one, ...two.lines]) assert.equal(l.evaluations, 8, JSON.stringify(l));
  for (const d of two.digests) assert.equal(d, ref, "with evaluations, 2 ranks");
});

Deno.test("exact mode: GPT-mini saved on 2 ranks at step 25 and resumed on 4 ends with the uninterrupted run's bits", async () => {
  const ref = digests(await single(SCRIPT, { CASE: "gpt" }), "gpt", 1)[0]!;
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-exact-resume-" });
  try {
    const ckpt = join(dir, "checkpoints");
    const first = await onRanks("gpt", 2, { STEPS: "25", SAVE_AT: "25", CKPT_DIR: ckpt }, 25);
    assert.notEqual(first.digests[0], ref);
    const rest = await onRanks("gpt", 4, { CKPT_DIR: ckpt });
    for (const l of rest.lines) assert.equal(l.resumedFrom, 25, JSON.stringify(l));
    for (const d of rest.digests) assert.equal(d, ref, "resumed on 4 ranks");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("exact mode off: the same GPT-mini run parts between 1 and 2 ranks (the check can fail)", async () => {
  const one = digests(await single(SCRIPT, { CASE: "gpt", EXACT: "0" }), "gpt", 1)[0]!;
  const two = (await onRanks("gpt", 2, { EXACT: "0" })).digests;
  assert.equal(two[0], two[1], "the ranks agree with each other");
  assert.notEqual(two[0], one);
});
