/**
 * A run ended by a timeout exits 124 whether the launcher's --timeout or a
 * rank's own collective or barrier timeout fired; the rank that stopped
 * answering is shown as "not responding" (stopped by a signal, when the
 * launcher can see it) and the timed-out rank's collective as failed, not
 * done. A correct run of the same script exits 0 with no such line.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, REPO, TestRun } from "../launch/launch_helpers.ts";
import { rankTable } from "../../launch/hang_report.ts";
import type { RankView } from "../../distributed/control/rank_state.ts";

const STALL = join(REPO, "tests/faults/scripts/stall.ts");

Deno.test("a SIGSTOPped rank: the peer's collective timeout ends the run with 124 and the table says who stopped answering", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "2", STALL, "stop"]), 30_000);
    assert.equal(r.code, 124, r.stderr);
    assert.match(
      r.stderr,
      /^\[dtrain\] rank 0 \(node 0, pid \d+\) timed out first: a timeout fired \(exit code 124\)$/m,
    );
    assert.match(
      r.stderr,
      /^\[dtrain\] error: DtNativeError: dt_shm_allreduce failed .*timed out on rank 0 after \d+ ms: rank 1 is still at #14/m,
    );
    assert.match(r.stderr, /^\[dtrain\] 0 .* allReduce \(seq 15\) failed /m);
    assert.match(
      r.stderr,
      /^\[dtrain\] 1 .* not responding \(stopped by a signal\), then killed by SIGKILL /m,
    );
    assert.match(r.stderr, /run \S+ failed: exit code 124$/m);
    for (const pid of t.pids().values()) assert.ok(!alive(pid), `rank ${pid} survived`);
  } finally {
    await t.cleanup();
  }
});

Deno.test("a store barrier's own timeout ends the run with 124", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "2", STALL, "barrier"]), 30_000);
    assert.equal(r.code, 124, r.stderr);
    assert.match(r.stderr, /rank 0 \(node 0, pid \d+\) timed out first: a timeout fired/);
    assert.match(
      r.stderr,
      /error: Error: storeBarrier\("never-complete"\) timed out after 4000 ms: 1 of 2 ranks arrived; elsewhere: rank 1 in phase "start"/,
    );
    assert.match(r.stderr, /^\[dtrain\] 0 .*barrier "never-complete" \(seq 1\) failed /m);
  } finally {
    await t.cleanup();
  }
});

Deno.test("the same script without a fault exits 0 and reports nobody as not responding", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "2", STALL, "none"]), 30_000);
    assert.equal(r.code, 0, r.stderr);
    assert.doesNotMatch(r.stderr, /not responding|timed out/);
  } finally {
    await t.cleanup();
  }
});

function view(rank: number, over: Partial<RankView> = {}): RankView {
  return {
    rank,
    host: "h",
    pid: 100 + rank,
    phase: "forward",
    phaseFrequent: true,
    phaseS: 5,
    coll: { seq: 15, op: "allReduce", bytes: 16 },
    inColl: false,
    collS: 5,
    heardS: 0.5,
    status: "running",
    ...over,
  };
}

Deno.test("rankTable() marks a silent running rank as not responding, and only that one", () => {
  const table = rankTable([
    view(0, { inColl: true, coll: { seq: 16, op: "allReduce", bytes: 16 }, collS: 5 }),
    view(1, { heardS: 5 }),
    view(2, { heardS: 6, inColl: true, coll: { seq: 16, op: "allReduce", bytes: 16 } }),
    view(3, { heardS: 5, status: "exited" }),
  ], {
    worldSize: 4,
    nproc: 4,
    processState: (rank) => rank === 1 ? "T" : "S",
  });
  const rows = table.split("\n");
  assert.match(rows[1]!, /^0 .* running .* allReduce \(seq 16\) waiting 5\.0 s/);
  assert.match(
    rows[2]!,
    /^1 .* not responding \(stopped by a signal\) .* past allReduce \(seq 15\) \(done 5\.0 s ago\)/,
  );
  assert.match(
    rows[3]!,
    /^2 .* not responding \(waiting in a system call\) .* allReduce \(seq 16\) stuck 5\.0 s/,
  );
  assert.match(rows[4]!, /^3 .* exited /, "an exited rank is not 'not responding'");
});
