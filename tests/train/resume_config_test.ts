/**
 * A resume compares the checkpoint's training config with this run's: a
 * changed global batch (or data order) is refused, naming the change and
 * --allow-config-change, before anything is loaded; with the option it goes
 * on; any other change (the learning rate, epochs) is listed once in the log
 * and in run.json's attempt.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { configChanges, describeChange } from "../../train/resume_changes.ts";

const SCRIPT = join(REPO, "tests/train/scripts/shared_checkpoints.ts");

Deno.test("configChanges() sorts order and batch changes first and ignores where checkpoints go", () => {
  const saved = {
    seed: 1,
    data: { globalBatchSize: 8, shuffle: true },
    optim: { lr: 0.1 },
    checkpoint: { dir: "a" },
  };
  const now = {
    seed: 2,
    data: { globalBatchSize: 12, shuffle: true },
    optim: { lr: 0.2 },
    checkpoint: { dir: "b" },
  };
  assert.deepEqual(configChanges(saved, now, 2, 3).map((c) => [c.kind, describeChange(c)]), [
    ["order", "seed 1 → 2"],
    ["batch", "data.globalBatchSize 8 → 12"],
    ["other", "optim.lr 0.1 → 0.2"],
    ["other", "worldSize 2 → 3"],
  ]);
  assert.deepEqual(configChanges(saved, saved, 2, 2), []);
});

Deno.test("a resume with another global batch is refused unless --allow-config-change; other changes are listed in the log and run.json", async () => {
  const t = new TestRun();
  try {
    const runDir = join(t.dir, "run");
    const ck = join(runDir, "checkpoints");
    const env = { TEST_CK_DIR: ck };
    const first = await t.finish(
      t.launch(["--nproc", "1", "--run-dir", runDir, SCRIPT], { env }),
      120_000,
    );
    assert.equal(first.code, 0, first.stderr);
    const latest = Deno.readTextFileSync(join(ck, "latest"));

    const refused = await t.finish(
      t.launch(["--nproc", "1", "--run-dir", runDir, SCRIPT], {
        env: { ...env, TEST_EPOCHS: "3", TEST_BATCH: "32" },
      }),
      120_000,
    );
    assert.notEqual(refused.code, 0);
    assert.match(
      refused.stderr + refused.stdout,
      /Cannot resume from \S+step-\d+: this run changes the global batch size it was trained with \(data\.globalBatchSize 16 → 32\)\. If that is intended, launch with --allow-config-change/,
    );
    assert.equal(Deno.readTextFileSync(join(ck, "latest")), latest, "nothing was saved");

    const allowed = await t.finish(
      t.launch(["--nproc", "1", "--allow-config-change", "--run-dir", runDir, SCRIPT], {
        env: { ...env, TEST_EPOCHS: "3", TEST_BATCH: "32", TEST_LR: "0.002" },
      }),
      120_000,
    );
    assert.equal(allowed.code, 0, allowed.stderr);
    const line =
      /resuming with 3 change\(s\) to the training config the checkpoint was trained with: data\.globalBatchSize 16 → 32; epochs 2 → 3; optim\.lr 0\.001 → 0\.002/;
    assert.match(allowed.stdout, line);
    assert.equal(allowed.stdout.split("\n").filter((l) => line.test(l)).length, 1, "listed once");
    const rec = JSON.parse(Deno.readTextFileSync(join(runDir, "run.json")));
    assert.deepEqual(rec.attempts.at(-1).resumed.configChanges, [
      "data.globalBatchSize 16 → 32",
      "epochs 2 → 3",
      "optim.lr 0.001 → 0.002",
    ]);
    assert.equal(rec.attempts.at(-1).resumed.savedBy, rec.runId);
  } finally {
    await t.cleanup();
  }
});
