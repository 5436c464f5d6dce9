/**
 * Hang diagnosis on hand-made rank views: who waits where, who is
 * elsewhere, reporting once per hang, the rank table, and the failure
 * summary built from an abort record.
 */
import assert from "node:assert/strict";
import type { RankView } from "../../distributed/control/rank_state.ts";
import { findHang, rankList, rankTable, seconds } from "../../launch/hang_report.ts";
import { failureSummary } from "../../launch/failure_report.ts";

function view(rank: number, over: Partial<RankView> = {}): RankView {
  return {
    rank,
    host: "h",
    pid: 100 + rank,
    phase: "train",
    phaseFrequent: false,
    phaseS: 5,
    coll: null,
    inColl: false,
    collS: 0,
    heardS: 0.5,
    status: "running",
    ...over,
  };
}
const atBarrier = (rank: number, waitS: number) =>
  view(rank, {
    phase: 'barrier "after-scan"',
    phaseS: waitS,
    coll: { seq: 4, op: "barrier", bytes: 0, detail: "after-scan" },
    inColl: true,
    collS: waitS,
  });

Deno.test("findHang() names the waiting ranks and what the rank elsewhere is doing", () => {
  const views = [
    view(0, { phase: "scan dataset", phaseS: 61.2 }),
    atBarrier(1, 61),
    atBarrier(2, 60.5),
    atBarrier(3, 3),
  ];
  const hang = findHang(views, 4, 60)!;
  assert.equal(
    hang.sentence,
    'ranks 1,2,3 wait at barrier "after-scan" (seq 4) for 61 s; rank 0 is elsewhere: phase "scan dataset" for 61 s',
  );
  assert.equal(hang.waitS, 61);
  assert.equal(findHang(views, 4, 62), null, "nothing is reported below the threshold");
  assert.equal(
    findHang([view(0), view(1)], 2, 1),
    null,
    "ranks outside collectives are not a hang",
  );
});

Deno.test("findHang() keeps one signature per hang as the seconds grow", () => {
  const at = (t: number) =>
    findHang([view(0, { phase: "scan dataset", phaseS: t }), atBarrier(1, t)], 2, 1)!.signature;
  assert.equal(at(2), at(30));
  const other = findHang([view(0, { phase: "load", phaseS: 5 }), atBarrier(1, 5)], 2, 1)!.signature;
  assert.notEqual(other, at(2), "a different phase elsewhere is a new hang");
});

Deno.test("findHang() describes ranks in another collective, exited, or never heard from", () => {
  const allReduce = view(2, {
    coll: { seq: 9, op: "allReduce", bytes: 4096 },
    inColl: true,
    collS: 70,
  });
  const views = [
    atBarrier(0, 80),
    atBarrier(1, 80),
    allReduce,
    view(3, { status: "exited", phase: "done" }),
  ];
  const hang = findHang(views, 5, 60)!;
  assert.match(hang.sentence, /^ranks 0,1 wait at barrier "after-scan" \(seq 4\) for 80 s; /);
  assert.match(hang.sentence, /rank 2 waits at allReduce \(seq 9\) for 70 s/);
  assert.match(hang.sentence, /rank 3 has exited/);
  assert.match(hang.sentence, /rank 4 has not reported/);
  const everyone = findHang([atBarrier(0, 90), atBarrier(1, 90)], 2, 60)!;
  assert.match(everyone.sentence, /every rank is in it, so the collective itself is stuck/);
});

Deno.test("rankList() and seconds() format for people", () => {
  assert.equal(rankList([3, 1, 2]), "1,2,3");
  assert.equal(rankList([0, 1, 2, 3, 4, 9]), "0-4,9");
  assert.equal(seconds(3.24), "3.2 s");
  assert.equal(seconds(61.4), "61 s");
});

Deno.test("rankTable() shows every rank, including those that never reported", () => {
  const table = rankTable([view(0, { phase: "scan dataset", phaseS: 12 }), atBarrier(1, 11)], {
    worldSize: 3,
    nproc: 2,
    exits: new Map([[0, "exit code 1"]]),
  });
  const lines = table.split("\n");
  assert.equal(lines.length, 4);
  assert.match(
    lines[0]!,
    /^rank\s+node\s+host\s+pid\s+state\s+phase\s+in phase\s+last collective\s+heard$/,
  );
  assert.match(lines[1]!, /^0\s+0\s+h\s+100\s+exit code 1\s+scan dataset\s+12 s\s+-\s+0\.5 s ago$/);
  assert.match(
    lines[2]!,
    /^1\s+0\s+h\s+101\s+running\s+barrier "after-scan"\s+11 s\s+barrier "after-scan" \(seq 4\) waiting 11 s\s+0\.5 s ago$/,
  );
  assert.match(lines[3]!, /^2\s+1\s+-\s+-\s+no report/);
});

Deno.test("failureSummary() prints the failing rank's error and stack, or its stderr tail", () => {
  const withNotice = failureSummary({
    reason: "rank-failed",
    node: 0,
    rank: 1,
    pid: 42,
    code: 1,
    detail: "exit code 1",
    graceMs: 2000,
    notice: {
      rank: 1,
      host: "h",
      pid: 42,
      kind: "error",
      at: 0,
      message: "Error: boom",
      stack: "Error: boom\n    at f (file:///x.ts:1:1)",
    },
  }, "TABLE");
  assert.equal(
    withNotice,
    "rank 1 (node 0, pid 42) failed first: exit code 1\nerror: Error: boom\n    at f (file:///x.ts:1:1)\nevery rank at that moment:\nTABLE",
  );
  const withTail = failureSummary({
    reason: "rank-failed",
    node: 1,
    rank: 3,
    code: 139,
    signal: "SIGSEGV",
    detail: "killed by SIGSEGV",
    graceMs: 0,
    stderrTail: ["last words"],
  }, "T");
  assert.match(
    withTail,
    /rank 3 \(node 1\) failed first: killed by SIGSEGV\nit left no error report; the last lines of its stderr:\n {2}\| last words/,
  );
});

Deno.test("findHang() takes a silent rank in a library phase as blocked in the collective after its last report", () => {
  // Ranks 0 and 1 reported allReduce seq 41 done, then went silent in a per-step phase (their
  // next enter is reported late); rank 2 is busy in a phase of its own and still reporting.
  const blocked = (rank: number) =>
    view(rank, {
      phase: "allreduce bucket 0 of step 41",
      phaseFrequent: true,
      coll: { seq: 41, op: "allReduce", bytes: 4096 },
      collS: 70,
      heardS: 70,
    });
  const views = [blocked(0), blocked(1), view(2, { phase: "evaluate", phaseS: 71 })];
  const hang = findHang(views, 3, 60)!;
  assert.ok(hang, "a hang must be found");
  assert.match(
    hang.sentence,
    /ranks 0,1 wait at collective "after allReduce seq 41" \(seq 42\) for 70(\.0)? s/,
  );
  assert.match(hang.sentence, /rank 2 is elsewhere: phase "evaluate"/);
  // A silent rank in a user phase (e.g. a long synchronous scan) is busy, not blocked.
  assert.equal(
    findHang(
      [view(0, { phase: "scan", heardS: 70, coll: { seq: 3, op: "allReduce", bytes: 4 } })],
      1,
      60,
    ),
    null,
  );
});
