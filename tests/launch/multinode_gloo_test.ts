/**
 * CPU training across machines on the Gloo backend, with two launchers on
 * loopback as two nodes: examples/toy_ddp.ts on 2 nodes x 1 rank and 2 x 2
 * gives the single-node run's losses at the same world size, and run.json
 * names gloo; a rank failing on node 1 stops node 0's ranks within 5 s with
 * its error; a hang on node 1 is diagnosed with every node's ranks in the
 * table; a third launcher with the wrong token is refused and logged.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, freePort, SCRIPTS, TestRun, tokenFile } from "./launch_helpers.ts";
import {
  assertSameLosses,
  GLOO_MISSING,
  lossesOf,
  runRecord,
  TOY_DDP,
  twoGlooNodes,
} from "./gloo_helpers.ts";

const LOSSES = { DTRAIN_PRINT_LOSSES: "1" };

/** Losses (and run record) of toy_ddp.ts for one epoch on 2 nodes x perNode over Gloo. */
async function twoNodeToy(t: TestRun, perNode: number, env: Record<string, string> = {}) {
  const runDir = join(t.dir, `runs/gloo-${perNode}-${Object.keys(env).length}`);
  const { node0, node1 } = await twoGlooNodes(t, {
    perNode,
    port: freePort(),
    token: tokenFile(t, `token-${perNode}`, 0o600),
    rest: ["--run-dir", runDir, TOY_DDP, "1"],
    env: { ...LOSSES, ...env },
  });
  const [r0, r1] = await Promise.all([t.finish(node0, 60_000), t.finish(node1, 60_000)]);
  assert.equal(r0.code, 0, r0.stderr);
  assert.equal(r1.code, 0, r1.stderr);
  return { losses: lossesOf(r0.stdout), record: runRecord(runDir) };
}

async function oneNodeToy(t: TestRun, nproc: number): Promise<number[]> {
  const r = await t.finish(
    t.launch([
      "--nproc",
      String(nproc),
      "--run-dir",
      join(t.dir, `runs/one-${nproc}`),
      TOY_DDP,
      "1",
    ], {
      env: LOSSES,
    }),
    60_000,
  );
  assert.equal(r.code, 0, r.stderr);
  return lossesOf(r.stdout);
}

Deno.test({
  name:
    "toy_ddp on 2 nodes x 1 rank over Gloo gives the single-node losses at world size 2; run.json names gloo",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const t = new TestRun();
  try {
    const { losses, record } = await twoNodeToy(t, 1);
    assertSameLosses(losses, await oneNodeToy(t, 2), 1e-4, "2 nodes x 1 vs 1 node x 2");
    assert.equal(record.world.backend, "gloo");
    assert.equal(record.world.nnodes, 2);
    assert.match(record.versions.gloo ?? "", /^\d+\.\d+\.\d+$/);
    assert.match(record.versions.native.gloo ?? "", /^[0-9a-f]{16}$/);
  } finally {
    await t.cleanup();
  }
});

Deno.test({
  name:
    "toy_ddp on 2 nodes x 2 ranks gives the single-node 4-rank losses, with and without the shared-memory step",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const t = new TestRun();
  try {
    const reference = await oneNodeToy(t, 4);
    const hierarchical = await twoNodeToy(t, 2);
    assertSameLosses(
      hierarchical.losses,
      reference,
      1e-4,
      "2 nodes x 2 (shm + Gloo) vs 1 node x 4",
    );
    assert.equal(hierarchical.record.world.backend, "gloo");
    const flat = await twoNodeToy(t, 2, { DTRAIN_GLOO_HIERARCHY: "off" });
    assertSameLosses(flat.losses, reference, 1e-4, "2 nodes x 2 (Gloo only) vs 1 node x 4");
  } finally {
    await t.cleanup();
  }
});

Deno.test({
  name:
    "a rank failing on node 1 stops node 0's ranks within 5 s, and both launchers name it and its error",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const t = new TestRun();
  try {
    const { node0, node1 } = await twoGlooNodes(t, {
      perNode: 2,
      port: freePort(),
      token: tokenFile(t, "token", 0o600),
      rest: [join(SCRIPTS, "gloo_fail.ts"), "2", "20"],
    });
    const [r0, r1] = await Promise.all([t.finish(node0, 30_000), t.finish(node1, 30_000)]);
    const failedAt = Number(Deno.readTextFileSync(join(t.pidDir, "failed-at")));
    const pids = t.pids();
    assert.equal(r0.code, 1, r0.stderr);
    assert.equal(r1.code, 1, r1.stderr);
    for (const r of [r0, r1]) {
      assert.match(
        r.stderr,
        /rank 2 \(node 1, pid \d+\) failed first: (exit code 1|it reported an error)/,
      );
      assert.match(r.stderr, /error: Error: rank 2 exploded on purpose after 20 all-reduces/);
    }
    assert.match(r0.stderr, /node 0's ranks ended: rank 0 .*, rank 1 /);
    assert.ok(
      Date.now() - failedAt < 5000 + 1000,
      `node 0's launcher ended ${Date.now() - failedAt} ms after the failure`,
    );
    for (const pid of pids.values()) assert.ok(!alive(pid), `rank process ${pid} is still alive`);
  } finally {
    await t.cleanup();
  }
});

Deno.test({
  name:
    "a hang on node 1 is diagnosed by node 0 with every node's ranks, and --timeout stops both nodes",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const t = new TestRun();
  try {
    const data = join(t.dir, "dataset");
    Deno.mkdirSync(data);
    for (let i = 0; i < 2000; i++) Deno.writeFileSync(join(data, `f${i}`), new Uint8Array(1));
    const { node0, node1 } = await twoGlooNodes(t, {
      perNode: 2,
      port: freePort(),
      token: tokenFile(t, "token", 0o600),
      rest: [
        "--hang-warn",
        "1",
        "--timeout",
        "4",
        join(SCRIPTS, "gloo_hang.ts"),
        "3",
        data,
        "60",
      ],
    });
    const [r0, r1] = await Promise.all([t.finish(node0, 30_000), t.finish(node1, 30_000)]);
    assert.equal(r0.code, 124, r0.stderr);
    assert.equal(r1.code, 124, r1.stderr);
    assert.match(
      r0.stderr,
      /\[dtrain\] hang: ranks 0,1,2 wait at barrier "after-scan" \(seq \d+\) for [\d.]+ s; rank 3 is elsewhere: phase "scan dataset"/,
    );
    for (const [rank, node] of [[0, 0], [1, 0], [2, 1]]) {
      assert.match(
        r0.stderr,
        new RegExp(
          `^\\[dtrain\\] ${rank}\\s+${node}\\s+\\S+\\s+\\d+\\s+running\\s+start\\s+[\\d.]+ s\\s+barrier "after-scan"`,
          "m",
        ),
        `rank ${rank} of node ${node} is in the table`,
      );
    }
    assert.match(
      r0.stderr,
      /^\[dtrain\] 3\s+1\s+\S+\s+\d+\s+running\s+scan dataset\s+[\d.]+ s\s+-/m,
    );
    for (const pid of t.pids().values()) assert.ok(!alive(pid));
  } finally {
    await t.cleanup();
  }
});

Deno.test({
  name:
    "a third launcher with the wrong token is refused and logged while a Gloo job runs to the end",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const t = new TestRun();
  try {
    const port = freePort();
    const { node0, node1 } = await twoGlooNodes(t, {
      perNode: 2,
      port,
      token: tokenFile(t, "token", 0o600),
      rest: ["--log-ranks", "all", join(SCRIPTS, "gloo_steps.ts")],
    });
    await t.ranksStarted(4, 30_000);
    const intruder = t.launch([
      "--nnodes",
      "2",
      "--node-rank",
      "1",
      "--nproc",
      "2",
      "--master-port",
      String(port),
      "--rdzv-token-file",
      tokenFile(t, "wrong", 0o600, "ffffffffffffffffffffffffffffffff"),
      join(SCRIPTS, "gloo_steps.ts"),
    ]);
    const ri = await t.finish(intruder, 30_000);
    Deno.writeTextFileSync(join(t.pidDir, "go"), "");
    const [r0, r1] = await Promise.all([t.finish(node0, 30_000), t.finish(node1, 30_000)]);
    assert.notEqual(ri.code, 0);
    assert.match(ri.stderr, /store refused the connection: wrong token/);
    assert.match(
      r0.stderr,
      /store: refused connection from 127\.0\.0\.1:\d+: wrong token \(client says it is "launcher node 1"\)/,
    );
    assert.equal(r0.code, 0, r0.stderr);
    assert.equal(r1.code, 0, r1.stderr);
    for (const r of [r0, r1]) assert.equal(r.stdout.match(/backend gloo/g)?.length, 2, r.stdout);
  } finally {
    await t.cleanup();
  }
});
