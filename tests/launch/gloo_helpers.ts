/**
 * Helpers for the multi-node Gloo tests: two launchers as nodes 0 and 1 (on
 * loopback, or each inside its own network namespace through a command
 * prefix), the per-step losses examples/toy_ddp.ts prints with
 * DTRAIN_PRINT_LOSSES=1, and the run record of a run directory.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import type { Launched, TestRun } from "./launch_helpers.ts";
import { REPO } from "./launch_helpers.ts";

/**
 * Why the Gloo tests cannot run here (the Gloo library was not built: Debian's
 * libgloo-dev is missing), or null. Tests that need it are skipped with this
 * reason in their name.
 */
export const GLOO_MISSING: string | null = (() => {
  try {
    Deno.statSync(join(REPO, "build/libdtrain_gloo.so"));
    return null;
  } catch {
    return "build/libdtrain_gloo.so was not built: install Debian's libgloo-dev and libgloo0";
  }
})();
if (GLOO_MISSING) console.log(`Gloo tests skipped: ${GLOO_MISSING}`);

/** examples/toy_ddp.ts */
export const TOY_DDP = join(REPO, "examples/toy_ddp.ts");

/** How to reach a node: its command prefix (a network namespace) and node 0's address from there. */
export interface NodeHost {
  prefix?: string[];
  masterAddr: string;
}

/** Options of a two-node launch. */
export interface TwoNodeJob {
  perNode: number;
  port: number;
  /** the token file both launchers read */
  token: string;
  /** launcher options and script, after the node options */
  rest: string[];
  env?: Record<string, string>;
  /** default: both on loopback */
  hosts?: readonly [NodeHost, NodeHost];
}

/** Starts node 1, then node 0 (node 1 must wait for node 0's store). */
export async function twoGlooNodes(
  t: TestRun,
  job: TwoNodeJob,
): Promise<{ node0: Launched; node1: Launched }> {
  const hosts = job.hosts ?? [{ masterAddr: "127.0.0.1" }, { masterAddr: "127.0.0.1" }];
  const args = (node: number) => [
    "--nnodes",
    "2",
    "--node-rank",
    String(node),
    "--nproc",
    String(job.perNode),
    "--master-addr",
    hosts[node]!.masterAddr,
    "--master-port",
    String(job.port),
    "--rdzv-token-file",
    job.token,
    ...job.rest,
  ];
  const launch = (node: number) =>
    t.launch(args(node), { env: job.env ?? {}, prefix: hosts[node]!.prefix ?? [] });
  const node1 = launch(1);
  await new Promise((r) => setTimeout(r, 300));
  const node0 = launch(0);
  return { node0, node1 };
}

/** The per-step losses rank 0 printed (toy_ddp.ts with DTRAIN_PRINT_LOSSES=1). */
export function lossesOf(stdout: string): number[] {
  const line = stdout.split("\n").find((l) => l.includes("LOSSES ["));
  assert.ok(line, `no LOSSES line in:\n${stdout}`);
  return JSON.parse(line.slice(line.indexOf("LOSSES ") + 7)) as number[];
}

/** Asserts two runs' losses agree step by step within `tol`. */
export function assertSameLosses(got: number[], want: number[], tol: number, what: string): void {
  assert.equal(got.length, want.length, `${what}: ${got.length} steps, expected ${want.length}`);
  const worst = got.reduce((m, g, i) => Math.max(m, Math.abs(g - want[i]!)), 0);
  assert.ok(worst <= tol, `${what}: largest loss difference ${worst} > ${tol}`);
}

/** run.json of a run directory. */
export function runRecord(runDir: string): {
  world: { backend?: string; nnodes: number };
  versions: { gloo?: string; native: { gloo?: string } };
} {
  return JSON.parse(Deno.readTextFileSync(join(runDir, "run.json")));
}
