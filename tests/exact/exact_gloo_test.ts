/**
 * Exact mode over Gloo: the cross-rank levels of the fixed tree go through
 * Gloo's allGather instead of shared memory's. The toy MLP loop
 * (tests/exact/scripts/mlp_loop.ts) on 2 and 4 ranks of one node forced onto
 * Gloo, and on 2 nodes x 2 ranks (two launchers on loopback: Gloo across the
 * nodes, shared memory inside each), and the CNN with SyncBatchNorm through
 * the Trainer on 2 Gloo ranks, each end with the digest of the single process
 * and of the shared-memory run, on every rank; run.json names gloo, so the
 * comparison is not between two shared-memory runs.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { freePort, REPO, TestRun, tokenFile } from "../launch/launch_helpers.ts";
import { GLOO_MISSING, runRecord, twoGlooNodes } from "../launch/gloo_helpers.ts";
import { jsonLines, launched, type Line, single } from "./_runs.ts";

buildNative({ quiet: true });
const MLP = "tests/exact/scripts/mlp_loop.ts";
const TRAINER = "tests/exact/scripts/exact_trainer.ts";
const GLOO = { DTRAIN_CPU_BACKEND: "gloo" };

/** Every rank's digest of a `world`-rank run of `kase`. */
function digests(lines: Line[], kase: string, world: number): string[] {
  const mine = lines.filter((l) => l.case === kase);
  assert.equal(mine.length, world, JSON.stringify(lines));
  for (const l of mine) assert.equal(l.world, world, JSON.stringify(l));
  return mine.map((l) => l.digest);
}

/** `script` on `n` ranks of one node; its digests and the backend run.json names. */
async function oneNode(script: string, kase: string, n: number, env: Record<string, string>) {
  const r = await launched(script, n, { env });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  return { digests: digests(r.lines, kase, n), backend: r.records["run.json"]?.world?.backend };
}

Deno.test({
  name:
    "exact mode over Gloo: the MLP on 2 and 4 Gloo ranks and on 2 nodes x 2 has the single process's and shared memory's bits",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const ref = digests(await single(MLP), "mlp", 1)[0]!;
  const shm = await oneNode(MLP, "mlp", 2, {});
  assert.equal(shm.backend, "shm");
  for (const d of shm.digests) assert.equal(d, ref, "2 shared-memory ranks");
  for (const n of [2, 4]) {
    const gloo = await oneNode(MLP, "mlp", n, GLOO);
    assert.equal(gloo.backend, "gloo", "DTRAIN_CPU_BACKEND=gloo put the ranks on Gloo");
    for (const d of gloo.digests) assert.equal(d, ref, `${n} Gloo ranks on one node`);
  }
  const t = new TestRun();
  try {
    const runDir = join(t.dir, "runs/two-nodes");
    const { node0, node1 } = await twoGlooNodes(t, {
      perNode: 2,
      port: freePort(),
      token: tokenFile(t, "token", 0o600),
      rest: ["--log-ranks", "all", "--run-dir", runDir, join(REPO, MLP)],
    });
    const [r0, r1] = await Promise.all([t.finish(node0, 120_000), t.finish(node1, 120_000)]);
    assert.equal(r0.code, 0, r0.stdout + r0.stderr);
    assert.equal(r1.code, 0, r1.stdout + r1.stderr);
    const record = runRecord(runDir);
    assert.equal(record.world.backend, "gloo");
    assert.equal(record.world.nnodes, 2);
    // Each launcher prints its own node's ranks.
    const lines = [...jsonLines(r0.stdout), ...jsonLines(r1.stdout)];
    assert.deepEqual(lines.map((l) => l.rank).sort(), [0, 1, 2, 3]);
    for (const d of digests(lines, "mlp", 4)) assert.equal(d, ref, "2 nodes x 2 ranks");
  } finally {
    await t.cleanup();
  }
});

Deno.test({
  name:
    "exact mode over Gloo: the CNN with SyncBatchNorm through the Trainer on 2 Gloo ranks has the single process's bits",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const ref = digests(await single(TRAINER, { CASE: "cnn" }), "cnn", 1)[0]!;
  const gloo = await oneNode(TRAINER, "cnn", 2, { CASE: "cnn", ...GLOO });
  assert.equal(gloo.backend, "gloo");
  for (const d of gloo.digests) assert.equal(d, ref, "CNN on 2 Gloo ranks");
});
