/**
 * Two launchers on loopback acting as two nodes (--nnodes 2, --node-rank
 * 0/1, a shared token file): rendezvous and the environment contract across
 * both, the token file's permission check and the store's refusal of a
 * wrong token, fail-fast across nodes, and hang diagnosis across nodes.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, freePort, SCRIPTS, TestRun, waitUntil } from "./launch_helpers.ts";

function tokenFile(
  t: TestRun,
  name: string,
  mode: number,
  token = "0123456789abcdef0123456789abcdef",
): string {
  const path = join(t.dir, name);
  Deno.writeTextFileSync(path, token + "\n");
  Deno.chmodSync(path, mode);
  return path;
}

/** Starts node 1 first (it must wait for node 0's store), then node 0. */
async function twoNodes(t: TestRun, port: number, token: string, rest: string[]) {
  const common = [
    "--nnodes",
    "2",
    "--nproc",
    "2",
    "--master-port",
    String(port),
    "--rdzv-token-file",
    token,
  ];
  const node1 = t.launch([...common, "--node-rank", "1", ...rest]);
  await new Promise((r) => setTimeout(r, 300));
  const node0 = t.launch([...common, "--node-rank", "0", ...rest]);
  return { node0, node1 };
}

Deno.test("two launchers rendezvous as two nodes and give ranks 0-3 the right environment", async () => {
  const t = new TestRun();
  try {
    const port = freePort();
    const { node0, node1 } = await twoNodes(t, port, tokenFile(t, "token", 0o600), [
      "--log-ranks",
      "all",
      join(SCRIPTS, "print_env.ts"),
    ]);
    const [r0, r1] = await Promise.all([t.finish(node0), t.finish(node1)]);
    assert.equal(r0.code, 0, r0.stderr);
    assert.equal(r1.code, 0, r1.stderr);
    const envs = [r0.stdout, r1.stdout].flatMap((out, node) =>
      out.split("\n").filter((l) => l.includes(" ENV ")).map((l) => ({
        node,
        line: l,
        env: JSON.parse(l.slice(l.indexOf("{"))),
      }))
    );
    assert.equal(envs.length, 4);
    const runIds = new Set(envs.map((e) => e.env.DTRAIN_RUN_ID));
    assert.equal(runIds.size, 1, "both nodes share node 0's run id");
    for (const { node, line, env } of envs) {
      const rank = Number(env.RANK);
      assert.ok(line.startsWith(`[r${rank}] `));
      assert.equal(Math.floor(rank / 2), node, `rank ${rank} runs on node ${node}`);
      assert.equal(env.LOCAL_RANK, String(rank % 2));
      assert.equal(env.GROUP_RANK, String(node));
      assert.equal(env.WORLD_SIZE, "4");
      assert.equal(env.LOCAL_WORLD_SIZE, "2");
      assert.equal(env.DTRAIN_NNODES, "2");
      assert.equal(env.MASTER_PORT, String(port));
      assert.equal(env.MASTER_ADDR, "127.0.0.1");
    }
    assert.deepEqual(envs.map((e) => Number(e.env.RANK)).sort(), [0, 1, 2, 3]);
    const tokens = [0, 1, 2, 3].map((r) => Deno.readTextFileSync(join(t.pidDir, `token-${r}`)));
    assert.deepEqual(
      new Set(tokens),
      new Set(["0123456789abcdef0123456789abcdef"]),
      "every rank got the shared token",
    );
  } finally {
    await t.cleanup();
  }
});

Deno.test("a token file readable by others is refused, and the store refuses and logs a node with a wrong token", async () => {
  const t = new TestRun();
  try {
    const open = await t.finish(
      t.launch([
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--rdzv-token-file",
        tokenFile(t, "open", 0o644),
        join(SCRIPTS, "print_env.ts"),
      ]),
    );
    assert.equal(open.code, 1);
    assert.match(
      open.stderr,
      /Refusing the rendezvous token file .*open: its mode is 0644, so other users can read it; run `chmod 600/,
    );

    const port = freePort();
    const common = [
      "--nnodes",
      "2",
      "--nproc",
      "1",
      "--master-port",
      String(port),
      "--rdzv-timeout",
      "3",
    ];
    const node0 = t.launch([
      ...common,
      "--node-rank",
      "0",
      "--rdzv-token-file",
      tokenFile(t, "good", 0o600),
      join(SCRIPTS, "print_env.ts"),
    ]);
    await new Promise((r) => setTimeout(r, 300));
    const intruder = t.launch([
      ...common,
      "--node-rank",
      "1",
      "--rdzv-token-file",
      tokenFile(t, "bad", 0o600, "ffffffffffffffffffffffffffffffff"),
      join(SCRIPTS, "print_env.ts"),
    ]);
    const [r0, r1] = await Promise.all([t.finish(node0), t.finish(intruder)]);
    assert.equal(r1.code, 1);
    assert.match(
      r1.stderr,
      /Cannot join the dtrain store at 127\.0\.0\.1:\d+: store refused the connection: wrong token/,
    );
    assert.match(
      r0.stderr,
      /store: refused connection from 127\.0\.0\.1:\d+: wrong token \(client says it is "launcher node 1"\)/,
    );
    assert.equal(r0.code, 1);
    assert.match(r0.stderr, /Rendezvous failed: node\(s\) 1 did not join within 3 s/);
    assert.equal(t.pids().size, 0, "no rank started");
  } finally {
    await t.cleanup();
  }
});

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
