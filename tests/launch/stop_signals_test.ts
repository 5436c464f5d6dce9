/**
 * Every stop signal a launcher can receive is handled like SIGTERM: an ssh
 * disconnect (SIGHUP) or Ctrl-\ (SIGQUIT) no longer kills the launcher
 * outright; the ranks get SIGTERM and the grace period to save, the launcher
 * exits 128+N, and run.json says "interrupted" with what happened. A second
 * signal kills the ranks at once, and run.json says that, not the first
 * signal's promise of a grace period.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, onlyRunDir, SCRIPTS, TestRun, waitUntil } from "./launch_helpers.ts";
import { signalExitCode } from "../../os/exit_status.ts";

interface RecordedAttempt {
  exitCode: number | null;
  signal: string | null;
  reason: string | null;
  endedAt: string | null;
}

function lastAttempt(runDir: string): { status: string; attempt: RecordedAttempt } {
  const rec = JSON.parse(Deno.readTextFileSync(join(runDir, "run.json")));
  return { status: rec.status, attempt: rec.attempts.at(-1) };
}

for (const sig of ["SIGHUP", "SIGQUIT"] as const) {
  Deno.test(`${sig} to the launcher: the ranks get SIGTERM and save, exit ${signalExitCode(sig)}, run.json "interrupted"`, async () => {
    const t = new TestRun();
    try {
      const l = t.launch(["--nproc", "2", "--grace", "30", join(SCRIPTS, "sigterm.ts")]);
      await t.ranksStarted(2); // each rank records its pid once its listeners are on
      Deno.kill(l.pid, sig);
      const r = await t.finish(l);
      assert.equal(r.code, signalExitCode(sig), r.stderr);
      assert.match(
        r.stderr,
        new RegExp(`received ${sig}: forwarding SIGTERM to the ranks, which have 30 s to save`),
      );
      for (const rank of [0, 1]) {
        assert.equal(Deno.readTextFileSync(join(t.pidDir, `saved-${rank}`)), "checkpoint");
      }
      const { status, attempt } = lastAttempt(onlyRunDir(t.dir));
      assert.equal(status, "interrupted");
      assert.equal(attempt.signal, sig);
      assert.equal(attempt.exitCode, signalExitCode(sig));
      assert.match(
        attempt.reason!,
        new RegExp(`launcher received ${sig}; .*every rank of node 0 exited within it`),
      );
    } finally {
      await t.cleanup();
    }
  });
}

Deno.test("a second SIGINT kills the ranks at once, and run.json says so instead of the first one's grace", async () => {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "2", "--grace", "60", join(SCRIPTS, "sigterm.ts")], {
      env: { TEST_IGNORE_TERM: "1" }, // the ranks would use all of the 60 s
    });
    const pids = await t.ranksStarted(2);
    Deno.kill(l.pid, "SIGINT");
    await waitUntil(() => /rank 1 ignores SIGINT/.test(l.stderr()), 30_000, "the ranks got it");
    Deno.kill(l.pid, "SIGINT");
    const r = await t.finish(l, 30_000);
    assert.equal(r.code, 130, r.stderr);
    for (const pid of pids.values()) assert.ok(!alive(pid));
    const { status, attempt } = lastAttempt(onlyRunDir(t.dir));
    assert.equal(status, "interrupted");
    assert.match(
      attempt.reason!,
      /received SIGINT; ranks got 60 s to save and exit; then a second signal \(SIGINT\) [\d.]+ s later killed every rank of node 0 at once \(SIGKILL\), before its grace ended/,
    );
  } finally {
    await t.cleanup();
  }
});

Deno.test("ranks that outlive the grace are named in run.json as killed", async () => {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "2", "--grace", "1", join(SCRIPTS, "sigterm.ts")], {
      env: { TEST_IGNORE_TERM: "1" },
    });
    await t.ranksStarted(2);
    Deno.kill(l.pid, "SIGTERM");
    const r = await t.finish(l);
    assert.equal(r.code, 143, r.stderr);
    const { attempt } = lastAttempt(onlyRunDir(t.dir));
    assert.match(
      attempt.reason!,
      /rank\(s\) 0,1 did not exit within 1\.0 s and were killed \(SIGKILL\)/,
    );
  } finally {
    await t.cleanup();
  }
});
