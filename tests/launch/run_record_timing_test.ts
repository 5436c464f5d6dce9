/**
 * When the launcher writes run.json: after the ranks' start-up (rank 0's process group), so that
 * building it does not compete with them for the cores — but at most ~2 s after the spawn, so a
 * script that never makes a process group still has its record on disk while it runs (a launcher
 * killed then leaves it behind), and always with the attempt's real start time.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { onlyRunDir, SCRIPTS, TestRun, waitUntil } from "./launch_helpers.ts";

interface RunJson {
  createdAt: string;
  status: string;
  attempts: { startedAt: string; endedAt: string | null }[];
}

function readRunJson(runDir: string): RunJson | null {
  try {
    return JSON.parse(Deno.readTextFileSync(join(runDir, "run.json")));
  } catch {
    return null; // not written yet
  }
}

Deno.test("run.json of a script that makes no process group is written while it runs, with the attempt's start time", async () => {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "1", "--no-check", join(SCRIPTS, "until_released.ts")]);
    await t.ranksStarted(1);
    let runDir = "";
    await waitUntil(
      () => {
        try {
          runDir = onlyRunDir(t.dir);
        } catch {
          return false;
        }
        return readRunJson(runDir) !== null;
      },
      30_000,
      "run.json to be written while the rank runs",
    );
    const running = readRunJson(runDir)!;
    assert.equal(running.status, "running");
    assert.equal(running.attempts.length, 1);
    assert.equal(running.attempts[0]!.endedAt, null);
    // The record is written after the rank started, but dated from the attempt's start, before it.
    const rankStarted = Number(Deno.readTextFileSync(join(t.pidDir, "started-0")));
    const attemptStarted = Date.parse(running.attempts[0]!.startedAt);
    assert.ok(
      attemptStarted <= rankStarted,
      `attempt started ${running.attempts[0]!.startedAt}, after its rank (${
        new Date(rankStarted).toISOString()
      })`,
    );
    assert.ok(Date.parse(running.createdAt) <= rankStarted, `run created ${running.createdAt}`);
    Deno.writeTextFileSync(join(t.pidDir, "release"), "");
    const r = await t.finish(l);
    assert.equal(r.code, 0, r.stderr);
    const done = readRunJson(runDir)!;
    assert.equal(done.status, "succeeded");
    assert.equal(done.attempts[0]!.startedAt, running.attempts[0]!.startedAt);
  } finally {
    await t.cleanup();
  }
});
