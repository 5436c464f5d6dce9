/**
 * Failures across two launchers on loopback acting as two nodes: a rank failing on node 1 stops
 * both nodes' ranks, node 0 diagnoses a hang across nodes and --timeout stops both, and either
 * launcher dying makes the other stop its ranks and fail.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  alive,
  freePort,
  SCRIPTS,
  TestRun,
  tokenFile,
  twoNodes,
  waitUntil,
} from "./launch_helpers.ts";

Deno.test("a rank failing on node 1 stops the ranks of both nodes, and both launchers report it", async () => {
  const t = new TestRun();
  try {
    const { node0, node1 } = await twoNodes(t, freePort(), tokenFile(t, "token", 0o600), [
      join(SCRIPTS, "fail_one.ts"),
      "3",
      "throw",
      "500",
    ]);
    const [r0, r1] = await Promise.all([t.finish(node0), t.finish(node1)]);
    const failedAt = Number(Deno.readTextFileSync(join(t.pidDir, "failed-at")));
    assert.ok(
      Date.now() - failedAt < 5000 + 500,
      "both launchers ended within about 5 s of the failure",
    );
    assert.equal(r0.code, 1, r0.stderr);
    assert.equal(r1.code, 1, r1.stderr);
    for (const r of [r0, r1]) {
      assert.match(r.stderr, /rank 3 \(node 1, pid \d+\) failed first: exit code 1/);
      assert.match(r.stderr, /error: Error: rank 3 exploded on purpose/);
      assert.match(
        r.stderr,
        /^\[dtrain\] 0\s+0\s+.*barrier "never"/m,
        "the table shows node 0's ranks",
      );
    }
    assert.match(
      r0.stderr,
      /node 0's ranks ended: rank 0 killed by SIGTERM, rank 1 killed by SIGTERM/,
    );
    const pids = t.pids();
    assert.equal(pids.size, 4);
    for (const pid of pids.values()) assert.ok(!alive(pid), `rank process ${pid} is still alive`);
  } finally {
    await t.cleanup();
  }
});

Deno.test("node 0 diagnoses a hang across nodes, and --timeout stops both nodes", async () => {
  const t = new TestRun();
  try {
    const data = join(t.dir, "dataset");
    Deno.mkdirSync(data);
    for (let i = 0; i < 2000; i++) Deno.writeFileSync(join(data, `f${i}`), new Uint8Array(1));
    const { node0, node1 } = await twoNodes(t, freePort(), tokenFile(t, "token", 0o600), [
      "--hang-warn",
      "1",
      "--timeout",
      "3",
      join(SCRIPTS, "scan_hang.ts"),
      data,
      "60",
    ]);
    const [r0, r1] = await Promise.all([t.finish(node0), t.finish(node1)]);
    assert.equal(r0.code, 124, r0.stderr);
    assert.equal(r1.code, 124, r1.stderr);
    assert.match(
      r0.stderr,
      /\[dtrain\] hang: ranks 1,2,3 wait at barrier "after-scan" \(seq 1\) for [\d.]+ s; rank 0 is elsewhere: phase "scan dataset"/,
    );
    assert.match(
      r0.stderr,
      /^\[dtrain\] 3\s+1\s+\S+\s+\d+\s+running\s+barrier "after-scan"/m,
      "rank 3 is listed on node 1",
    );
    assert.match(
      r1.stderr,
      /timeout: a collective waited [\d.]+ s \(--timeout 3 s\)/,
      "node 1 learns of the timeout through the store",
    );
    for (const pid of t.pids().values()) assert.ok(!alive(pid));
  } finally {
    await t.cleanup();
  }
});

Deno.test("when node 0's launcher dies, node 1 stops its ranks and fails; when node 1's dies, node 0 does", async () => {
  for (const victim of [0, 1] as const) {
    const t = new TestRun();
    try {
      // Rank 1 runs until stopped; the other ranks wait for it at a barrier.
      const nodes = await twoNodes(t, freePort(), tokenFile(t, "token", 0o600), [
        join(SCRIPTS, "fail_one.ts"),
        "1",
        "none",
      ]);
      const pids = await t.ranksStarted(4);
      const [dead, survivor] = victim === 0
        ? [nodes.node0, nodes.node1]
        : [nodes.node1, nodes.node0];
      Deno.kill(dead.pid, "SIGKILL");
      const r = await t.finish(survivor, 10_000);
      assert.equal(r.code, 1, r.stderr);
      if (victim === 0) {
        assert.match(
          r.stderr,
          /lost the control store at 127\.0\.0\.1:\d+ .*node 0's launcher is gone/,
        );
      } else {assert.match(
          r.stderr,
          /node 1 is lost: its launcher disconnected from the store; stopping every rank/,
        );}
      await waitUntil(
        () => [...pids.values()].every((p) => !alive(p)),
        3000,
        "every rank of both nodes died",
      );
    } finally {
      await t.cleanup();
    }
  }
});
