/**
 * Two launchers on loopback acting as two nodes (--nnodes 2, --node-rank 0/1, a shared token file):
 * rendezvous and the environment contract across both, the token file's permission check, and the
 * store's refusal (logged) of a node with a wrong token.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort, SCRIPTS, TestRun, tokenFile, twoNodes } from "./launch_helpers.ts";

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
    assert.equal(open.code, 2, "a refused token file is a bad command line");
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
    assert.equal(r1.code, 2, "the launcher's own error, not a rank's code");
    assert.match(
      r1.stderr,
      /Cannot join the dtrain store at 127\.0\.0\.1:\d+: store refused the connection: wrong token/,
    );
    assert.match(
      r0.stderr,
      /store: refused connection from 127\.0\.0\.1:\d+: wrong token \(client says it is "launcher node 1"\)/,
    );
    assert.equal(r0.code, 124, "the rendezvous timeout ended the run");
    assert.match(r0.stderr, /Rendezvous failed: node\(s\) 1 did not join within 3 s/);
    assert.equal(t.pids().size, 0, "no rank started");
  } finally {
    await t.cleanup();
  }
});
