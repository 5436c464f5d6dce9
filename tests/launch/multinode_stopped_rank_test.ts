/**
 * Node 0's hang report sees other nodes' ranks as well as its own: each launcher forwards its
 * ranks' state pages and process states (launch/page_forwarder.ts, launch/node_view.ts), so a rank
 * stopped on node 1 is named first by node 0, and a node whose launcher went silent is named as
 * such instead of one of its ranks being blamed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, freePort, SCRIPTS, TestRun, tokenFile, waitUntil } from "./launch_helpers.ts";
import { GLOO_MISSING, twoGlooNodes } from "./gloo_helpers.ts";
import type { RankState, RankView } from "../../distributed/control/rank_state.ts";
import { StatePage, statePagePath } from "../../distributed/control/state_page.ts";
import { findHang } from "../../launch/hang_report.ts";
import { NODE_SILENT_S, type NodeView, RemoteRanks } from "../../launch/node_view.ts";
import { nodeView } from "../../launch/page_forwarder.ts";
import { attemptSegments, removeAttemptSegments } from "../../launch/attempt_segments.ts";
import type { StoreClient, StoreEntry } from "../../distributed/control/store.ts";

const enc = new TextEncoder();

/** A rank's page record, `ageMs` old by its writer's clock. */
function page(rank: number, pid: number, seq: number, inColl: boolean): string {
  const now = Date.now();
  const s: RankState = {
    rank,
    host: "n1",
    pid,
    phase: 'barrier "step"',
    phaseAt: now - 20_000,
    phaseFrequent: true,
    coll: { seq, op: "barrier", bytes: 0, detail: "step" },
    inColl,
    collAt: now - 20_000,
    status: "running",
    sentAt: now - 20_000,
  };
  return JSON.stringify(s);
}

function viewEntry(view: NodeView, ageMs: number): StoreEntry {
  return { key: `dtrain/a0/view/${view.node}`, value: enc.encode(JSON.stringify(view)), ageMs };
}

/** A store record of rank `rank` (what a rank whose loop never yields left there long ago). */
function stale(rank: number, pid: number, heardS: number): RankView {
  return {
    rank,
    host: "n1",
    pid,
    phase: "start",
    phaseFrequent: false,
    phaseS: heardS,
    coll: null,
    inColl: false,
    collS: heardS,
    heardS,
    status: "running",
  };
}

function waiting(rank: number, seq: number, waitS: number): RankView {
  return {
    ...stale(rank, 100 + rank, 0.2),
    phase: 'barrier "step"',
    phaseFrequent: true,
    coll: { seq, op: "barrier", bytes: 0, detail: "step" },
    inColl: true,
    collS: waitS,
  };
}

Deno.test("forwarded pages replace older store records, and a remote rank's process state is its node's", () => {
  const remote = new RemoteRanks(0, 2);
  remote.update([
    viewEntry({
      node: 1,
      ranks: [
        { rank: 2, pid: 202, page: page(2, 202, 41, true), pageAgeMs: 0, state: "S", exit: null },
        { rank: 3, pid: 203, page: page(3, 203, 40, false), pageAgeMs: 0, state: "T", exit: null },
      ],
    }, 300),
    // node 0's own view is not read back by node 0
    viewEntry({
      node: 0,
      ranks: [{ rank: 0, pid: 100, page: null, pageAgeMs: 0, state: "T", exit: null }],
    }, 0),
  ]);
  const byRank = new Map([[2, stale(2, 202, 25)], [3, stale(3, 203, 25)]]);
  remote.merge(byRank);
  assert.equal(byRank.get(2)!.coll?.seq, 41);
  assert.equal(byRank.get(2)!.inColl, true);
  // the page was 0 ms old when forwarded, and the view is 300 ms old in the store
  assert.ok(Math.abs(byRank.get(2)!.heardS - 0.3) < 0.05, String(byRank.get(2)!.heardS));
  assert.equal(byRank.get(3)!.coll?.seq, 40);
  assert.equal(remote.processState(3, 203), "T");
  assert.equal(remote.processState(3, 999), null, "another pid's state is not this rank's");
  assert.equal(remote.processState(0, 100), null, "own node: /proc is read directly");
  assert.deepEqual(remote.silentNodes([...byRank.values()]), []);

  // A store record newer than the forwarded page stays.
  const newer = new Map([[2, stale(2, 202, 0.01)]]);
  remote.merge(newer);
  assert.equal(newer.get(2)!.coll, null);
  // A page some other process of the rank wrote is not this process's.
  remote.update([viewEntry({
    node: 1,
    ranks: [{
      rank: 3,
      pid: 203,
      page: page(3, 1, 40, true),
      pageAgeMs: 0,
      state: "S",
      exit: null,
    }],
  }, 0)]);
  const other = new Map([[3, stale(3, 203, 25)]]);
  remote.merge(other);
  assert.equal(other.get(3)!.coll, null);
});

Deno.test("a rank whose process ended on its node is exited, whatever its last record says", () => {
  const remote = new RemoteRanks(0, 2);
  remote.update([viewEntry({
    node: 1,
    ranks: [{
      rank: 3,
      pid: 203,
      page: page(3, 203, 40, true),
      pageAgeMs: 10,
      state: null,
      exit: "exit code 0",
    }],
  }, 100)]);
  const byRank = new Map<number, RankView>();
  remote.merge(byRank);
  assert.equal(byRank.get(3)!.status, "exited");
  assert.equal(byRank.get(3)!.inColl, false);
});

Deno.test("a node whose launcher went silent is named, and its silent ranks are neither blamed nor counted", () => {
  const remote = new RemoteRanks(0, 2);
  const silentMs = (NODE_SILENT_S + 7) * 1000;
  remote.update([viewEntry({
    node: 1,
    ranks: [
      // its last view said rank 3 was stopped: no longer current, so not repeated as a fact
      { rank: 2, pid: 202, page: page(2, 202, 40, false), pageAgeMs: 0, state: "S", exit: null },
      { rank: 3, pid: 203, page: page(3, 203, 40, false), pageAgeMs: 0, state: "T", exit: null },
    ],
  }, silentMs)]);
  const byRank = new Map([[0, waiting(0, 41, 12)], [1, waiting(1, 41, 12)]]);
  remote.merge(byRank);
  const views = [...byRank.values()];
  assert.equal(remote.processState(3, 203), null, "a silent node's old process state is not used");
  const silent = remote.silentNodes(views);
  assert.deepEqual(silent.map((n) => [n.node, n.ranks]), [[1, [2, 3]]]);
  const hang = findHang(views, 4, 3, (r, pid) => remote.processState(r, pid), silent)!;
  assert.match(
    hang.sentence,
    /^node 1's launcher has not been heard from for 12 s \(the node is stopped, overloaded or cut off\), so where rank\(s\) 2,3 are is not known: ranks 0,1 wait at barrier "step" \(seq 41\) for 12 s$/,
  );
  // Without the silent node, the same views blame the collective itself or rank 2/3's old pages.
  const blind = findHang(views, 4, 3)!;
  assert.doesNotMatch(blind.sentence, /launcher has not been heard/);
  assert.notEqual(blind.signature, hang.signature);

  // A rank of the silent node that still reports (its heartbeat is fresh) is known, not unknown.
  const fresh = [...views.filter((v) => v.rank !== 2), stale(2, 202, 0.5)];
  assert.deepEqual(remote.silentNodes(fresh).map((n) => n.ranks), [[3]]);
});

Deno.test("nodeView() forwards each rank's page of its own pid, its process state and its exit", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-node-view-" });
  try {
    const p2 = StatePage.open(statePagePath(dir, 2))!;
    p2.write(page(2, 202, 7, true).replace(/"sentAt":\d+/, `"sentAt":${Date.now()}`));
    p2.close();
    // rank 3's page was left by an earlier attempt's process
    const p3 = StatePage.open(statePagePath(dir, 3))!;
    p3.write(page(3, 1, 5, false));
    p3.close();
    const view = nodeView({
      client: null as unknown as StoreClient,
      key: "k",
      node: 1,
      runDir: dir,
      ranks: () => [
        { rank: 2, pid: 202, exit: null },
        { rank: 3, pid: 203, exit: { code: 137, signal: "SIGKILL" } },
      ],
      processStates: () => new Map([[2, "T"]]),
    });
    assert.equal(view.node, 1);
    const [r2, r3] = view.ranks;
    assert.equal(JSON.parse(r2!.page!).coll.seq, 7);
    assert.ok(r2!.pageAgeMs < 5000);
    assert.equal(r2!.state, "T");
    assert.equal(r2!.exit, null);
    assert.equal(r3!.page, null);
    assert.equal(r3!.state, null);
    assert.equal(r3!.exit, "killed by SIGKILL");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

/** The run id node 0's launcher printed ("run <id>: node 0 of 2, …"), for its segments. */
function runIdOf(stderr: string): string | null {
  return /\brun (\S+): node 0 of 2/.exec(stderr)?.[1] ?? null;
}

/** SIGCONT to pids a test stopped (a stopped process would outlive its SIGTERM). */
function resume(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      Deno.kill(pid, "SIGCONT");
    } catch { /* gone */ }
  }
}

/** After cleanup: no process left, and no shared-memory segment of the run left in /dev/shm. */
function removeSegments(runId: string | null): void {
  if (runId === null) return;
  const { failed } = removeAttemptSegments(runId, 0);
  assert.deepEqual(failed, []);
  assert.deepEqual(attemptSegments(runId, 0), []);
}

Deno.test({
  name: "a rank stopped on node 1 is named first, as stopped, by node 0's hang report",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const t = new TestRun();
  const stopped: number[] = [];
  let node0Stderr = () => "";
  try {
    const { node0, node1 } = await twoGlooNodes(t, {
      perNode: 2,
      port: freePort(),
      token: tokenFile(t, "token", 0o600),
      // The report waits 5 s: node 1's launcher forwards every 0.5 s, even on a loaded machine.
      rest: [
        "--hang-warn",
        "5",
        "--timeout",
        "300",
        join(SCRIPTS, "stop_self.ts"),
        "3",
        "20",
      ],
    });
    node0Stderr = node0.stderr;
    const pids = await t.ranksStarted(4, 120_000);
    stopped.push(pids.get(3)!);
    await waitUntil(() => /hang: /.test(node0.stderr()), 90_000, "node 0's hang report");
    const err = node0.stderr();
    const hang = err.split("\n").find((l) => /hang: /.test(l))!;
    // Rank 3's store record never left its loop; only its node's forwarded view knows it stopped.
    const head = `hang: rank 3 (pid ${pids.get(3)}) is stopped by a signal (process state "T": ` +
      `SIGSTOP, a debugger or a suspended job) and has not been heard from for `;
    const at = hang.indexOf(head);
    assert.ok(
      at >= 0,
      `node 0's hang line:\n${hang}\n\nnode 0:\n${err}\n\nnode 1:\n${node1.stderr()}`,
    );
    // Then the waiting ranks, rank 2 among them where its forwarded page has it (barrier 21 or 22;
    // its store record is still at barrier 1). A barrier is an exchange of records in which some
    // ranks may finish before others, so which of 21 and 22 each waits in is not fixed.
    const rest = hang.slice(at + head.length);
    assert.match(rest, /^[\d.]+ s: ranks? [\d,]+ waits? at barrier "step" \(seq 2[12]\)/, hang);
    assert.doesNotMatch(rest, /rank 3|\(seq 1\)|itself is stuck/, hang);
    // The table has rank 3 where its page left it (past barrier i = 20, the group's 21st
    // collective), on node 1, not responding because it is stopped; and rank 2 in the next one.
    assert.match(
      err,
      new RegExp(
        `^\\[dtrain\\] 3\\s+1\\s+\\S+\\s+${
          pids.get(3)
        }\\s+not responding \\(stopped by a signal\\)` +
          `.*past barrier "step" \\(seq 21\\)`,
        "m",
      ),
      err,
    );
    assert.match(err, /^\[dtrain\] 2\s+1\s+.*barrier "step" \(seq 2[12]\) (stuck|waiting)/m, err);
  } finally {
    resume(stopped);
    await t.cleanup();
    for (const pid of stopped) await waitUntil(() => !alive(pid), 30_000, `rank ${pid} has ended`);
    removeSegments(runIdOf(node0Stderr()));
  }
});

Deno.test({
  name:
    "a node whose launcher and ranks are stopped is named as a silent node, not as a stuck rank",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const t = new TestRun();
  const stopped: number[] = [];
  let node0Stderr = () => "";
  try {
    const { node0, node1 } = await twoGlooNodes(t, {
      perNode: 2,
      port: freePort(),
      token: tokenFile(t, "token", 0o600),
      // The first report comes after node 1's view is NODE_SILENT_S old: its ranks are stopped
      // after its launcher, so their wait is never longer than the launcher's silence.
      rest: ["--hang-warn", String(NODE_SILENT_S + 2), "--timeout", "300"].concat(
        join(SCRIPTS, "barrier_loop.ts"),
      ),
    });
    node0Stderr = node0.stderr;
    const pids = await t.ranksStarted(4, 120_000);
    // The whole of node 1 stops (a suspended host): its launcher first, then its ranks.
    stopped.push(node1.pid);
    Deno.kill(node1.pid, "SIGSTOP");
    for (const r of [2, 3]) {
      stopped.push(pids.get(r)!);
      Deno.kill(pids.get(r)!, "SIGSTOP");
    }
    await waitUntil(() => /hang: /.test(node0.stderr()), 90_000, "node 0's hang report");
    const err = node0.stderr();
    const hang = err.split("\n").find((l) => /hang: /.test(l))!;
    const head =
      /hang: node 1's launcher has not been heard from for [\d.]+ s \(the node is stopped, overloaded or cut off\), so where rank\(s\) 2,3 are is not known: /;
    assert.match(hang, head, err);
    // The waiting ranks are node 0's; a barrier is an exchange of records in which some ranks may
    // finish before others, so ranks 0 and 1 may wait in two successive barriers.
    const rest = hang.slice(hang.search(head)).replace(head, "");
    assert.match(rest, /^ranks? [01,]+ waits? at barrier "step"/, hang);
    assert.doesNotMatch(rest, /rank [23]\b|ranks [\d,]*[23]\b|is stopped|itself is stuck/, hang);
  } finally {
    resume(stopped);
    await t.cleanup();
    for (const pid of stopped) {
      await waitUntil(() => !alive(pid), 30_000, `process ${pid} has ended`);
    }
    removeSegments(runIdOf(node0Stderr()));
  }
});
