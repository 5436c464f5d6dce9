/**
 * Real kill -9 during checkpoint saves: a writer process saves checkpoints in
 * a loop and is SIGKILLed at seeded random moments; after each kill the latest
 * checkpoint must verify and hold exactly what its step wrote. The long run
 * (50+ trials) is scripts/checkpoint_killtest.ts.
 */
import assert from "node:assert/strict";
import { finalCheck, runKillTrials } from "../../../scripts/checkpoint_killtest.ts";

Deno.test("CheckpointManager survives 10 kill -9s at random moments of a save loop", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-kill-" });
  try {
    const opts = { dir, trials: 10, seed: 20240527, maxDelayMs: 250, scale: 8 };
    const summary = await runKillTrials(opts);
    assert.equal(summary.trials, 10);
    assert.ok(
      summary.killedDuringWrite >= 1,
      `no kill landed inside a save: ${JSON.stringify(summary)}`,
    );
    assert.ok(
      summary.savesCompleted >= 1,
      `the writers completed only ${summary.savesCompleted} saves`,
    );
    const left = finalCheck(opts, summary.finalStep + 1);
    assert.ok(left.includes("latest") && left.length >= 3, left.join(", "));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("async CheckpointManager survives 10 kill -9s at random moments, its worker mid-commit", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-kill-async-" });
  try {
    const opts = { dir, trials: 10, seed: 20241201, maxDelayMs: 250, scale: 8, async: true };
    const summary = await runKillTrials(opts);
    assert.equal(summary.trials, 10);
    assert.ok(
      summary.killedDuringWrite >= 1,
      `no kill landed inside a commit: ${JSON.stringify(summary)}`,
    );
    assert.ok(summary.savesCompleted >= 1, `only ${summary.savesCompleted} commits completed`);
    const left = finalCheck(opts, summary.finalStep + 1);
    assert.ok(left.includes("latest") && left.length >= 3, left.join(", "));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
