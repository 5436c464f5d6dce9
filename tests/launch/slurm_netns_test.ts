/**
 * 2-node launches as srun and mpirun start them, on the simulated hosts of the
 * multi-node tests (two network namespaces, scripts/netns.ts): each launcher
 * gets only `--nproc 1 toy_ddp.ts` and the variables srun sets (SLURM_NODEID,
 * SLURM_NNODES, SLURM_JOB_NODELIST=node[01-02], …) or Open MPI's
 * (OMPI_COMM_WORLD_*, MASTER_ADDR exported with -x); the host names resolve
 * through each namespace's own hosts file (`ip netns exec` mounts
 * /etc/netns/<name>/hosts over /etc/hosts). Each run must give one host's
 * losses. Skipped, with the reason, where namespaces cannot be made.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { TestRun, tokenFile } from "./launch_helpers.ts";
import { assertSameLosses, GLOO_MISSING, lossesOf, runRecord, TOY_DDP } from "./gloo_helpers.ts";
import { makeHosts, netnsProblem, removeHosts } from "../../scripts/netns.ts";

const problem = GLOO_MISSING ?? netnsProblem();
const skipped = problem ? ` (skipped: ${problem})` : "";

/** srun's variables for node `node` of a 2-node step on node[01-02]. */
function srunEnv(node: number): Record<string, string> {
  return {
    SLURM_JOB_ID: "777",
    SLURM_STEP_ID: "0",
    SLURM_NODEID: String(node),
    SLURM_NNODES: "2",
    SLURM_JOB_NODELIST: "node[01-02]",
    SLURM_NTASKS: "2",
    SLURM_LOCALID: "0",
    SLURM_PROCID: String(node),
    SLURMD_NODENAME: `node0${node + 1}`,
  };
}

/** mpirun's variables (one process per node), node 0's name exported as MASTER_ADDR. */
function mpirunEnv(node: number): Record<string, string> {
  return {
    OMPI_COMM_WORLD_RANK: String(node),
    OMPI_COMM_WORLD_SIZE: "2",
    OMPI_COMM_WORLD_LOCAL_RANK: "0",
    OMPI_COMM_WORLD_LOCAL_SIZE: "1",
    OMPI_COMM_WORLD_NODE_RANK: String(node),
    MASTER_ADDR: "node01",
  };
}

const LAUNCHERS = [
  { what: "srun", env: srunEnv, label: "Slurm job 777 step 0" },
  { what: "mpirun", env: mpirunEnv, label: "Open MPI \\(mpirun\\)" },
];

Deno.test({
  name:
    `srun's and mpirun's environments alone launch toy_ddp on two hosts (node01, node02) with one host's losses${skipped}`,
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
      const one = await t.finish(
        t.launch(["--nproc", "2", "--run-dir", join(t.dir, "runs/one"), TOY_DDP, "1"], {
          env: { DTRAIN_PRINT_LOSSES: "1" },
        }),
        120_000,
      );
      assert.equal(one.code, 0, one.stderr);
      for (const { what, env, label } of LAUNCHERS) {
        const runDir = join(t.dir, `runs/${what}`);
        const launch = (node: 0 | 1) =>
          t.launch(["--nproc", "1", "--run-dir", runDir, TOY_DDP, "1"], {
            env: {
              ...env(node),
              DTRAIN_RDZV_TOKEN_FILE: token,
              GLOO_SOCKET_IFNAME: hosts.iface,
              DTRAIN_PRINT_LOSSES: "1",
            },
            prefix: hosts.prefix(node),
          });
        const node1 = launch(1);
        await new Promise((r) => setTimeout(r, 300));
        const node0 = launch(0);
        const [r0, r1] = await Promise.all([t.finish(node0, 120_000), t.finish(node1, 120_000)]);
        assert.equal(r0.code, 0, `${what}: ${r0.stderr}`);
        assert.equal(r1.code, 0, `${what}: ${r1.stderr}`);
        for (const [r, node] of [[r0, 0], [r1, 1]] as const) {
          assert.match(
            r.stderr,
            new RegExp(`launcher environment: ${label}: node ${node} of 2, rendezvous host node01`),
          );
        }
        assert.equal(runRecord(runDir).world.nnodes, 2);
        assertSameLosses(
          lossesOf(r0.stdout),
          lossesOf(one.stdout),
          1e-4,
          `${what} 2 nodes vs 1 host x 2`,
        );
      }
    } finally {
      await t.cleanup();
      removeHosts(hosts);
      for (const dir of etc) Deno.removeSync(dir, { recursive: true });
    }
  },
});
