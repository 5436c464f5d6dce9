/**
 * Launchers started with different options refuse the launch at rendezvous,
 * and every node says so and why: the node that sees the difference names
 * it, the others say which node refused and why — not "node(s) ? did not
 * join", not a timeout's 124 — and all exit 2 (a bad command line), well
 * before --rdzv-timeout.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort, SCRIPTS, TestRun, tokenFile } from "./launch_helpers.ts";

function node(t: TestRun, token: string, port: number, rank: number, nnodes: number) {
  return t.launch([
    "--nnodes",
    String(nnodes),
    "--node-rank",
    String(rank),
    "--nproc",
    "1",
    "--master-port",
    String(port),
    "--rdzv-timeout",
    "60",
    "--rdzv-token-file",
    token,
    join(SCRIPTS, "print_env.ts"),
  ]);
}

for (const [n0, n1] of [[3, 2], [2, 3]]) {
  Deno.test(`node 0 with --nnodes ${n0}, node 1 with --nnodes ${n1}: both refuse at once and say why`, async () => {
    const t = new TestRun();
    try {
      const token = tokenFile(t, "token", 0o600);
      const port = freePort();
      const zero = node(t, token, port, 0, n0);
      await new Promise((r) => setTimeout(r, 300));
      const one = node(t, token, port, 1, n1);
      const [r0, r1] = await Promise.all([t.finish(zero, 50_000), t.finish(one, 50_000)]);
      const why =
        /node [01]( \([^)]*\))? runs with nnodes=[23] but node [01] with nnodes=[23]; every node must be given the same/;
      for (const [r, name] of [[r0, "node 0"], [r1, "node 1"]] as const) {
        assert.equal(r.code, 2, `${name}: ${r.stderr}`);
        assert.match(r.stderr, /Rendezvous failed: /, name);
        assert.match(r.stderr, why, `${name}: ${r.stderr}`);
        assert.doesNotMatch(r.stderr, /did not join|\?/, name);
      }
      // Where node 0 waits for a third node that will never come, it learns of node 1's refusal.
      if (n0 === 3) assert.match(r0.stderr, /node 1 \([^)]*\) refused the launch: node 0/);
      assert.ok(r0.elapsedMs < 45_000 && r1.elapsedMs < 45_000, "long before --rdzv-timeout");
    } finally {
      await t.cleanup();
    }
  });
}
