/**
 * A 2-node launch as srun starts it, on the simulated hosts of the multi-node
 * tests (two network namespaces, scripts/netns.ts): each launcher gets only
 * `--nproc 1 toy_ddp.ts` and the variables srun sets (SLURM_NODEID,
 * SLURM_NNODES, SLURM_JOB_NODELIST=node[01-02], …); the host names resolve
 * through each namespace's own hosts file (`ip netns exec` mounts
 * /etc/netns/<name>/hosts over /etc/hosts). The run must give one host's
 * losses. Skipped, with the reason, where namespaces cannot be made.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { TestRun, tokenFile } from "./launch_helpers.ts";
import { assertSameLosses, GLOO_MISSING, lossesOf, runRecord, TOY_DDP } from "./gloo_helpers.ts";
import { makeHosts, netnsProblem, removeHosts } from "../../scripts/netns.ts";

const problem = GLOO_MISSING ?? netnsProblem();
const skipped = problem ? ` (skipped: ${problem})` : "";

Deno.test({
  name:
    `srun's environment alone launches toy_ddp on two hosts (node[01-02]) with one host's losses${skipped}`,
  ignore: problem !== null,
  async fn() {
    const hosts = makeHosts();
    const t = new TestRun();
    const etc = hosts.names.map((n) => `/etc/netns/${n}`);
    try {
      for (const dir of etc) {
        Deno.mkdirSync(dir, { recursive: true });
        Deno.writeTextFileSync(
          join(dir, "hosts"),
          `127.0.0.1 localhost\n${hosts.addrs[0]} node01\n${hosts.addrs[1]} node02\n`,
        );
      }
      const token = tokenFile(t, "token", 0o600);
      const runDir = join(t.dir, "runs/slurm");
      const srunEnv = (node: number): Record<string, string> => ({
        SLURM_JOB_ID: "777",
        SLURM_STEP_ID: "0",
        SLURM_NODEID: String(node),
        SLURM_NNODES: "2",
        SLURM_JOB_NODELIST: "node[01-02]",
        SLURM_NTASKS: "2",
        SLURM_LOCALID: "0",
        SLURM_PROCID: String(node),
        SLURMD_NODENAME: `node0${node + 1}`,
        DTRAIN_RDZV_TOKEN_FILE: token,
        GLOO_SOCKET_IFNAME: hosts.iface,
        DTRAIN_PRINT_LOSSES: "1",
      });
      const launch = (node: 0 | 1) =>
        t.launch(["--nproc", "1", "--run-dir", runDir, TOY_DDP, "1"], {
          env: srunEnv(node),
          prefix: hosts.prefix(node),
        });
      const node1 = launch(1);
      await new Promise((r) => setTimeout(r, 300));
      const node0 = launch(0);
      const [r0, r1] = await Promise.all([t.finish(node0, 120_000), t.finish(node1, 120_000)]);
      assert.equal(r0.code, 0, r0.stderr);
      assert.equal(r1.code, 0, r1.stderr);
      for (const [r, node] of [[r0, 0], [r1, 1]] as const) {
        assert.match(
          r.stderr,
          new RegExp(
            `launcher environment: Slurm job 777 step 0: node ${node} of 2, rendezvous host node01`,
          ),
        );
      }
      assert.equal(runRecord(runDir).world.nnodes, 2);
      const one = await t.finish(
        t.launch(["--nproc", "2", "--run-dir", join(t.dir, "runs/one"), TOY_DDP, "1"], {
          env: { DTRAIN_PRINT_LOSSES: "1" },
        }),
        120_000,
      );
      assert.equal(one.code, 0, one.stderr);
      assertSameLosses(
        lossesOf(r0.stdout),
        lossesOf(one.stdout),
        1e-4,
        "srun 2 nodes vs 1 host x 2",
      );
    } finally {
      await t.cleanup();
      removeHosts(hosts);
      for (const dir of etc) Deno.removeSync(dir, { recursive: true });
    }
  },
});
