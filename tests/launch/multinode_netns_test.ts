/**
 * CPU training across two simulated hosts: two network namespaces joined by
 * a veth pair (scripts/netns.ts), one launcher in each, the Gloo
 * backend bound to the veth interface (GLOO_SOCKET_IFNAME). toy_ddp.ts on 2
 * hosts x 1 rank and 2 x 2 gives the single-host losses, its gradients cross
 * the veth pair, and a rank failing on the second host stops the first's
 * within 5 s with its error. Skipped, with the reason, where namespaces
 * cannot be made (not root, no iproute2); the namespaces are removed also
 * when a test fails.
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
import {
  makeHosts,
  netnsProblem,
  removeHosts,
  sentBytes,
  type TwoHosts,
} from "../../scripts/netns.ts";

const problem = GLOO_MISSING ?? netnsProblem();
const skipped = problem ? ` (skipped: ${problem})` : "";

async function onTwoHosts(body: (t: TestRun, hosts: TwoHosts) => Promise<void>): Promise<void> {
  const hosts = makeHosts();
  const t = new TestRun();
  try {
    await body(t, hosts);
  } finally {
    await t.cleanup();
    removeHosts(hosts);
  }
}

function nodes(hosts: TwoHosts) {
  return [
    { prefix: hosts.prefix(0), masterAddr: hosts.addrs[0] },
    { prefix: hosts.prefix(1), masterAddr: hosts.addrs[0] },
  ] as const;
}

async function toyOnTwoHosts(t: TestRun, hosts: TwoHosts, perNode: number) {
  const runDir = join(t.dir, `runs/hosts-${perNode}`);
  const before = sentBytes(hosts, 1);
  const { node0, node1 } = await twoGlooNodes(t, {
    perNode,
    port: 29500,
    token: tokenFile(t, `token-${perNode}`, 0o600),
    rest: ["--run-dir", runDir, TOY_DDP, "1"],
    env: { DTRAIN_PRINT_LOSSES: "1", GLOO_SOCKET_IFNAME: hosts.iface },
    hosts: nodes(hosts),
  });
  const [r0, r1] = await Promise.all([t.finish(node0, 90_000), t.finish(node1, 90_000)]);
  assert.equal(r0.code, 0, r0.stderr);
  assert.equal(r1.code, 0, r1.stderr);
  return {
    losses: lossesOf(r0.stdout),
    record: runRecord(runDir),
    sent: sentBytes(hosts, 1) - before,
  };
}

async function oneHostToy(t: TestRun, nproc: number): Promise<number[]> {
  const r = await t.finish(
    t.launch(
      ["--nproc", String(nproc), "--run-dir", join(t.dir, `runs/one-${nproc}`), TOY_DDP, "1"],
      { env: { DTRAIN_PRINT_LOSSES: "1" } },
    ),
    90_000,
  );
  assert.equal(r.code, 0, r.stderr);
  return lossesOf(r.stdout);
}

Deno.test({
  name:
    `toy_ddp on two hosts (network namespaces) x 1 and x 2 ranks gives one host's losses${skipped}`,
  ignore: problem !== null,
  fn: () =>
    onTwoHosts(async (t, hosts) => {
      const two = await toyOnTwoHosts(t, hosts, 1);
      assertSameLosses(two.losses, await oneHostToy(t, 2), 1e-4, "2 hosts x 1 vs 1 host x 2");
      assert.equal(two.record.world.backend, "gloo");
      // ~79 steps of a 33,538-parameter model's f32 gradients (134 KB a step) crossed the veth pair
      assert.ok(two.sent > 50 * 134_000, `only ${two.sent} bytes crossed the veth pair`);
      const four = await toyOnTwoHosts(t, hosts, 2);
      assertSameLosses(four.losses, await oneHostToy(t, 4), 1e-4, "2 hosts x 2 vs 1 host x 4");
      assert.equal(four.record.world.backend, "gloo");
    }),
});

Deno.test({
  name:
    `a rank failing on the second host stops the first host's ranks within 5 s with its error${skipped}`,
  ignore: problem !== null,
  fn: () =>
    onTwoHosts(async (t, hosts) => {
      const { node0, node1 } = await twoGlooNodes(t, {
        perNode: 2,
        port: freePort(),
        token: tokenFile(t, "token", 0o600),
        rest: [join(SCRIPTS, "gloo_fail.ts"), "3", "20"],
        hosts: nodes(hosts),
      });
      const [r0, r1] = await Promise.all([t.finish(node0, 30_000), t.finish(node1, 30_000)]);
      const failedAt = Number(Deno.readTextFileSync(join(t.pidDir, "failed-at")));
      assert.equal(r0.code, 1, r0.stderr);
      assert.equal(r1.code, 1, r1.stderr);
      for (const r of [r0, r1]) {
        assert.match(
          r.stderr,
          /rank 3 \(node 1, pid \d+\) failed first: (exit code 1|it reported an error)/,
        );
        assert.match(r.stderr, /error: Error: rank 3 exploded on purpose after 20 all-reduces/);
      }
      assert.ok(
        Date.now() - failedAt < 5000 + 1000,
        `the first host's launcher ended ${Date.now() - failedAt} ms after the failure`,
      );
      for (const pid of t.pids().values()) assert.ok(!alive(pid), `rank ${pid} is still alive`);
    }),
});
