/**
 * Launching again into a run directory (the way a failed run is resumed)
 * continues its run.json: the run keeps its id, the failed attempt stays
 * recorded, the new attempt is the next number (the ranks'
 * DTRAIN_RESTART_COUNT, which metrics.jsonl records), and `launches` lists
 * each command.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { SCRIPTS, TestRun } from "./launch_helpers.ts";
import { readRunRecord } from "../../run_record/record.ts";

Deno.test("a second launch into the same --run-dir keeps the first attempt in run.json", async () => {
  const t = new TestRun();
  try {
    const runDir = join(t.dir, "resumed-run");
    const args = ["--nproc", "2", "--run-dir", runDir, "--log-ranks", "all"];
    const first = await t.finish(t.launch([...args, join(SCRIPTS, "restart.ts")]));
    assert.equal(first.code, 1, "attempt 0 fails on purpose");
    const before = readRunRecord(runDir)!;
    assert.equal(before.attempts.length, 1);

    const second = await t.finish(t.launch([...args, join(SCRIPTS, "restart.ts"), "again"]));
    assert.equal(second.code, 0, second.stderr);
    assert.match(second.stdout, /^\[r1\] rank 1 sees DTRAIN_RESTART_COUNT=1$/m);
    assert.match(second.stderr, /attempt 1: started ranks 0,1 of 2/);

    const after = readRunRecord(runDir)!;
    assert.equal(after.runId, before.runId);
    assert.equal(after.createdAt, before.createdAt);
    assert.deepEqual(after.attempts[0], before.attempts[0]);
    assert.deepEqual(after.attempts.map((a) => [a.attempt, a.exitCode]), [[0, 1], [1, 0]]);
    assert.equal(after.status, "succeeded");
    assert.deepEqual(after.launches!.map((l) => [l.firstAttempt, l.script.args]), [
      [0, []],
      [1, ["again"]],
    ]);
    assert.deepEqual(after.script.args, ["again"], "the top level is the latest launch's");
  } finally {
    await t.cleanup();
  }
});

Deno.test("a run.json that does not parse is not overwritten: the launch is refused naming it", async () => {
  const t = new TestRun();
  try {
    const runDir = join(t.dir, "broken-run");
    Deno.mkdirSync(runDir);
    Deno.writeTextFileSync(join(runDir, "run.json"), "{ not json");
    const r = await t.finish(
      t.launch(["--nproc", "1", "--run-dir", runDir, join(SCRIPTS, "print_env.ts")]),
    );
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /holds a run\.json that cannot be continued .*not valid JSON/);
    assert.equal(Deno.readTextFileSync(join(runDir, "run.json")), "{ not json");
  } finally {
    await t.cleanup();
  }
});

Deno.test("records that cannot be written once the ranks started stop them: the launch fails naming the file", async () => {
  const t = new TestRun();
  try {
    // The first attempt's ranks start before launch.json and run.json are written (their start-up
    // overlaps the bookkeeping): a launch.json that cannot be replaced must still end the run.
    const runDir = join(t.dir, "unwritable");
    Deno.mkdirSync(join(runDir, "launch.json"), { recursive: true });
    const r = await t.finish(
      t.launch(["--nproc", "2", "--run-dir", runDir, join(SCRIPTS, "long_lived.ts"), "30"]),
    );
    assert.equal(r.code, 2, `an error of dtrain itself, not a rank's code: ${r.stderr}`);
    assert.match(r.stderr, /cannot write the run's records: .*launch\.json/);
    assert.doesNotMatch(r.stdout, /lived 30 s/);
    assert.ok(r.elapsedMs < 25_000, `took ${r.elapsedMs} ms: the ranks were not stopped`);
  } finally {
    await t.cleanup();
  }
});
