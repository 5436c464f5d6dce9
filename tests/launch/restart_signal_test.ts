/**
 * Restarts and preemption: --max-restarts relaunches every rank after a
 * failure with DTRAIN_RESTART_COUNT incremented; SIGTERM to the launcher is
 * forwarded to the ranks, which get --grace seconds to save and exit before
 * SIGKILL, and the launcher exits 128+15 without restarting.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, onlyRunDir, SCRIPTS, TestRun } from "./launch_helpers.ts";

Deno.test("--max-restarts 1 relaunches every rank after a failure, with DTRAIN_RESTART_COUNT=1", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(
      t.launch([
        "--nproc",
        "2",
        "--max-restarts",
        "1",
        "--log-ranks",
        "all",
        join(SCRIPTS, "restart.ts"),
      ]),
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /rank 1 \(node 0, pid \d+\) failed first: exit code 1/);
    assert.match(r.stderr, /restarting every rank \(restart 1 of 1\); DTRAIN_RESTART_COUNT=1/);
    assert.match(r.stdout, /^\[r0\] rank 0 passed the barrier on restart 1$/m);
    assert.match(r.stdout, /^\[r1\] rank 1 passed the barrier on restart 1$/m);
    assert.ok(
      !/passed the barrier on restart 0/.test(r.stdout),
      "the first attempt's barrier never completed",
    );
    const record = JSON.parse(Deno.readTextFileSync(join(onlyRunDir(t.dir), "launch.json")));
    assert.equal(record.attempts, 2);
    assert.equal(record.exitCode, 0);
  } finally {
    await t.cleanup();
  }
});

Deno.test("without restarts left, the launcher gives up with the failing rank's code", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(
      t.launch(["--nproc", "2", "--max-restarts", "0", join(SCRIPTS, "restart.ts")]),
    );
    assert.equal(r.code, 1);
    assert.ok(!r.stderr.includes("restarting"));
  } finally {
    await t.cleanup();
  }
});

Deno.test("SIGTERM to the launcher is forwarded; ranks that handle it save and exit cleanly within the grace period", async () => {
  const t = new TestRun();
  try {
    const l = t.launch([
      "--nproc",
      "2",
      "--grace",
      "30",
      "--max-restarts",
      "1",
      join(SCRIPTS, "sigterm.ts"),
    ]);
    const pids = await t.ranksStarted(2); // each rank records its pid once its listeners are on
    const sentAt = performance.now();
    Deno.kill(l.pid, "SIGTERM");
    const r = await t.finish(l);
    const took = performance.now() - sentAt;
    assert.equal(r.code, 143, r.stderr);
    // Ranks still running when the grace period ends are killed (and the exit codes below fail);
    // the period is long so that a loaded machine's slow exits stay inside it.
    assert.ok(took < 30_000, `the ranks took ${took} ms to stop, the grace period is 30 s`);
    for (const rank of [0, 1]) {
      assert.equal(Deno.readTextFileSync(join(t.pidDir, `saved-${rank}`)), "checkpoint");
    }
    assert.match(
      r.stderr,
      /received SIGTERM: forwarding it to the ranks, which have 30 s to save and exit/,
    );
    assert.match(r.stderr, /node 0's ranks ended: rank 0 exit code 0, rank 1 exit code 0/);
    assert.equal(
      (r.stderr.match(/got SIGTERM, saving/g) ?? []).length,
      2,
      "each rank gets SIGTERM once",
    );
    assert.ok(!r.stderr.includes("restarting"), "a preempted run is not restarted");
    for (const pid of pids.values()) assert.ok(!alive(pid));
  } finally {
    await t.cleanup();
  }
});

Deno.test("ranks that ignore a forwarded SIGINT are killed when --grace runs out", async () => {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "2", "--grace", "1", join(SCRIPTS, "sigterm.ts")], {
      env: { TEST_IGNORE_TERM: "1" },
    });
    const pids = await t.ranksStarted(2); // each rank records its pid once its listeners are on
    const sentAt = performance.now();
    Deno.kill(l.pid, "SIGINT");
    const r = await t.finish(l);
    const took = performance.now() - sentAt;
    assert.equal(r.code, 130, r.stderr);
    // Not before the grace second; the upper bound is liveness only (a loaded machine reaps slowly).
    assert.ok(took >= 900 && took < 20_000, `stopped after ${took} ms with --grace 1`);
    assert.match(r.stderr, /rank 0 ignores SIGINT/, "the launcher forwards the signal it received");
    assert.match(
      r.stderr,
      /node 0.s ranks ended: rank 0 killed by SIGKILL, rank 1 killed by SIGKILL/,
    );
    for (const pid of pids.values()) assert.ok(!alive(pid));
  } finally {
    await t.cleanup();
  }
});
