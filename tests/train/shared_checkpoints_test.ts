/**
 * Two runs pointed at one checkpoint folder: while the first is live, the
 * second is refused before it loads or writes anything, naming the live run
 * (it would otherwise adopt the other's state and the two would rotate each
 * other's checkpoints away); once the first has ended, a run may adopt its
 * state, and says whose state it adopts.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun, waitUntil } from "../launch/launch_helpers.ts";

const SCRIPT = join(REPO, "tests/train/scripts/shared_checkpoints.ts");

function exists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

function listing(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((e) => `${e.name}`).sort();
}

Deno.test("a second live run on a live run's checkpoint folder is refused, naming it; after it ends its state is adopted and said so", async () => {
  const t = new TestRun();
  try {
    const ck = join(t.dir, "shared-checkpoints");
    const env = { TEST_CK_DIR: ck };
    const a = t.launch(["--nproc", "1", "--run-dir", join(t.dir, "a"), SCRIPT], {
      env: { ...env, TEST_HOLD: "1" },
    });
    await t.ranksStarted(1, 120_000); // A saved its first epoch's checkpoints and is live
    // The launcher writes run.json once the ranks are past their start-up, which may come after
    // the rank recorded its pid: wait for it rather than read it at once.
    const runJson = join(t.dir, "a", "run.json");
    await waitUntil(() => exists(runJson), 120_000, "run A's run.json");
    const runA = JSON.parse(Deno.readTextFileSync(runJson)).runId as string;
    const before = listing(ck);
    const latest = Deno.readTextFileSync(join(ck, "latest"));

    const b = await t.finish(
      t.launch(["--nproc", "1", "--run-dir", join(t.dir, "b"), SCRIPT], { env }),
      120_000,
    );
    assert.notEqual(b.code, 0, b.stderr);
    assert.match(
      b.stderr + b.stdout,
      new RegExp(
        `Checkpoint folder ${ck} is being written by another live run \\(run ${runA}, pid \\d+ on [^,]+, since \\S+\\), so this run cannot resume from it or write its checkpoints there`,
      ),
    );
    assert.doesNotMatch(b.stdout + b.stderr, /resumed from/, "B adopted nothing");
    assert.deepEqual(listing(ck), before, "B wrote and removed nothing");
    assert.equal(Deno.readTextFileSync(join(ck, "latest")), latest);

    // --resume from the live run's folder (a fork with its own folder) is refused as well.
    const fork = await t.finish(
      t.launch(["--nproc", "1", "--run-dir", join(t.dir, "fork"), "--resume", ck, SCRIPT], {
        env: { TEST_CK_DIR: join(t.dir, "fork-checkpoints") },
      }),
      120_000,
    );
    assert.notEqual(fork.code, 0, fork.stderr);
    assert.match(
      fork.stderr + fork.stdout,
      new RegExp(
        `another live run \\(run ${runA}, .*so this run cannot resume from it \\(--resume\\)`,
      ),
    );
    assert.deepEqual(listing(ck), before, "the fork touched nothing of A's");

    Deno.writeTextFileSync(join(t.pidDir, "release"), "");
    const ra = await t.finish(a, 120_000);
    assert.equal(ra.code, 0, ra.stderr);

    // A is over: C may continue from A's checkpoints (one more epoch), and says whose they are.
    const c = await t.finish(
      t.launch(["--nproc", "1", "--run-dir", join(t.dir, "c"), SCRIPT], {
        env: { ...env, TEST_EPOCHS: "3" },
      }),
      120_000,
    );
    assert.equal(c.code, 0, c.stderr);
    assert.match(
      c.stdout,
      new RegExp(
        `resumed from ${ck}/step-\\d+: epoch \\d+, step 8; adopting the state of run ${runA}, which is not live`,
      ),
    );
  } finally {
    await t.cleanup();
  }
});
