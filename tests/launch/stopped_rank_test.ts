/**
 * A rank stopped by SIGSTOP (a debugger, a suspended job) is named first in
 * the hang report, from what the launcher sees itself (/proc: process state
 * "T"), instead of "every rank is in it, so the collective itself is stuck".
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { SCRIPTS, TestRun, waitUntil } from "./launch_helpers.ts";
import type { RankView } from "../../distributed/control/rank_state.ts";
import { findHang, rankTable } from "../../launch/hang_report.ts";

function atBarrier(rank: number, waitS: number, heardS = 0.5): RankView {
  return {
    rank,
    host: "h",
    pid: 100 + rank,
    phase: 'barrier "step"',
    phaseFrequent: true,
    phaseS: waitS,
    coll: { seq: 40, op: "barrier", bytes: 0, detail: "step" },
    inColl: true,
    collS: waitS,
    heardS,
    status: "running",
  };
}

Deno.test("findHang() names a stopped rank first and never calls the collective itself stuck", () => {
  // Rank 2's last record says it entered the same barrier; the process is really stopped.
  const views = [atBarrier(0, 30), atBarrier(1, 30), atBarrier(2, 30, 29), atBarrier(3, 30)];
  const blind = findHang(views, 4, 10)!;
  assert.match(blind.sentence, /the collective itself is stuck/);
  const seen = findHang(views, 4, 10, (rank) => rank === 2 ? "T" : "S")!;
  assert.match(
    seen.sentence,
    /^rank 2 \(pid 102\) is stopped by a signal \(process state "T": SIGSTOP, a debugger or a suspended job\) and has not been heard from for 29 s: ranks 0,1,3 wait at barrier "step" \(seq 40\) for 30 s$/,
  );
  assert.doesNotMatch(seen.sentence, /itself is stuck/);
  assert.notEqual(seen.signature, blind.signature);
});

Deno.test("a launched rank stopped by SIGSTOP is named as stopped in the hang report", async () => {
  const t = new TestRun();
  let stopped: number | undefined;
  try {
    const l = t.launch([
      "--nproc",
      "2",
      "--hang-warn",
      "3",
      "--timeout",
      "120",
      join(SCRIPTS, "barrier_loop.ts"),
    ]);
    const pids = await t.ranksStarted(2, 120_000);
    stopped = pids.get(1)!;
    Deno.kill(stopped, "SIGSTOP");
    await waitUntil(() => /hang: /.test(l.stderr()), 60_000, "the hang report");
    assert.match(
      l.stderr(),
      new RegExp(`hang: rank 1 \\(pid ${stopped}\\) is stopped by a signal \\(process state "T"`),
    );
    assert.doesNotMatch(l.stderr(), /itself is stuck/);
  } finally {
    if (stopped !== undefined) {
      try {
        Deno.kill(stopped, "SIGCONT");
      } catch { /* gone */ }
    }
    await t.cleanup();
  }
});

Deno.test("a silent rank's old phase is shown as unknown, and a rank running code is not guessed blocked", () => {
  // Rank 1 runs a loop without `await`: its record (DDP's set-up phase) is 21 s old.
  const stale: RankView = {
    ...atBarrier(1, 0, 21),
    phase: "ddp: verify parameters",
    phaseS: 21,
    inColl: false,
    coll: { seq: 3, op: "allReduce", bytes: 4 },
  };
  const views = [atBarrier(0, 30), stale];
  const table = rankTable(views, { worldSize: 2, nproc: 2, processState: () => "R" });
  assert.match(table, /unknown \(last: ddp: verify parameters\)/);
  assert.doesNotMatch(table, /ddp: verify parameters\s+21/, "no time in a phase that is not known");
  const hang = findHang(views, 2, 10, () => "R")!;
  assert.match(
    hang.sentence,
    /rank 1 is elsewhere, phase unknown \(its last record, phase "ddp: verify parameters", is 21 s old\)/,
  );
  // Without the process state, a silent rank in a library phase is taken as blocked (as before).
  assert.doesNotMatch(findHang(views, 2, 10)!.sentence, /phase unknown/);
});

Deno.test("the hang report names the collective a rank blocks in from a loop without await", async () => {
  // Rank 1's store records of its later barriers wait in the connection's writer for an event-loop
  // turn that never comes; its state page has barrier "step 201" (written before it blocked).
  const t = new TestRun();
  try {
    const l = t.launch([
      "--nproc",
      "2",
      "--hang-warn",
      "3",
      "--timeout",
      "120",
      join(SCRIPTS, "unawaited_barriers.ts"),
      "200",
    ]);
    await t.ranksStarted(2, 120_000);
    await waitUntil(() => /hang: /.test(l.stderr()), 60_000, "the hang report");
    const hang = l.stderr().split("\n").find((line) => /hang: /.test(line))!;
    assert.match(hang, /rank 1 waits at barrier "step 201" \(seq \d+\)/, l.stderr());
  } finally {
    await t.cleanup();
  }
});
