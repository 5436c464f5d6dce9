/**
 * The Gloo process group's results on simulated nodes of this machine (2
 * nodes x 1 rank, 3 x 1, 2 x 2 with and without the shared-memory step):
 * every op x dtype x size against results computed here — exact for
 * integers, max, min, broadcast, allGather and reduceScatter (which sums in
 * rank order); within the bound of another summation order for float sums
 * of allReduce (Gloo's ring) — and bit for bit across ranks.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import type { CollectiveDType } from "../../distributed/process_group.ts";
import { buildCases, BYTES, caseName, outputCount } from "./scripts/_cases.ts";
import { expected, firstDifferenceInAnyOrder } from "./scripts/_expected.ts";
import { shmEntries } from "./scripts/_ranks.ts";
import { withGlooRanks } from "./scripts/_gloo_ranks.ts";
import { GLOO_MISSING } from "../launch/gloo_helpers.ts";

async function runMatrix(
  nodes: number,
  perNode: number,
  sizes: number[],
  env: Record<string, string>,
  dtypes?: CollectiveDType[],
): Promise<void> {
  const world = nodes * perNode;
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-gloo-" });
  try {
    const caseEnv = {
      CASE_SIZES: sizes.join(","),
      ...(dtypes ? { CASE_DTYPES: dtypes.join(",") } : {}),
      ...env,
    };
    const runId = await withGlooRanks(
      {
        nodes,
        perNode,
        tag: `gloo${nodes}x${perNode}`,
        env: () => caseEnv,
        args: (r) => ["matrix", join(dir, `rank${r}.bin`)],
      },
      async (procs, ctx) => {
        for (const p of procs) {
          const done = await p.next("done");
          assert.equal(done.backend, "gloo", `rank ${p.rank} used ${done.backend}`);
        }
        return ctx.runId;
      },
    );
    assert.deepEqual(shmEntries(runId), [], "segment left in /dev/shm");
    const cases = buildCases(world, sizes, dtypes);
    const results = Array.from(
      { length: world },
      (_, r) => Deno.readFileSync(join(dir, `rank${r}.bin`)),
    );
    const offsets = new Array<number>(world).fill(0);
    const failures: string[] = [];
    cases.forEach((c, index) => {
      const size = outputCount(c, world) * BYTES[c.dtype];
      const got = results.map((res, r) => res.subarray(offsets[r]!, offsets[r]! += size));
      const want = expected(c, index, world);
      for (let r = 0; r < world; r++) {
        const diff = firstDifferenceInAnyOrder(c, index, world, got[r]!, want[r]!, r);
        if (diff) failures.push(`${caseName(c)} on rank ${r} of ${world}: ${diff}`);
      }
      if (c.op !== "reduceScatter") {
        for (let r = 1; r < world; r++) {
          if (!got[r]!.every((b, i) => b === got[0]![i])) {
            failures.push(`${caseName(c)}: rank ${r} bits differ from rank 0`);
          }
        }
      }
    });
    results.forEach((res, r) =>
      assert.equal(offsets[r], res.length, `rank ${r} wrote extra bytes`)
    );
    assert.deepEqual(
      failures.slice(0, 10),
      [],
      `${failures.length} of ${cases.length * world} results are wrong`,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

Deno.test({
  name: "Gloo collectives match independent results for every op, dtype and size, 2 nodes x 1 rank",
  ignore: GLOO_MISSING !== null,
}, async () => {
  await runMatrix(2, 1, [0, 1, 7, 1000], {});
});

Deno.test({
  name:
    "Gloo collectives match with 2 nodes x 2 ranks: shared memory within each node, Gloo between nodes",
  ignore: GLOO_MISSING !== null,
}, async () => {
  // 1001 is odd: its last element takes the all-rank path beside the per-node shares
  await runMatrix(2, 2, [1, 3, 1001], { DTRAIN_SHM_CHUNK_BYTES: "1024" });
});

Deno.test({
  name: "Gloo collectives match with 2 nodes x 2 ranks all over Gloo, and with 3 nodes",
  ignore: GLOO_MISSING !== null,
}, async () => {
  await runMatrix(2, 2, [5, 1001], { DTRAIN_GLOO_HIERARCHY: "off" }, ["f32", "bf16", "i64"]);
  await runMatrix(3, 1, [2, 1000], {}, ["f32", "f16", "i32", "u8"]);
});

Deno.test({
  name: "Gloo collectives of many shared-memory buffers match, 2 nodes x 2 ranks",
  ignore: GLOO_MISSING !== null,
}, async () => {
  // 280 KB per rank through 16 KiB shared-memory buffers; the odd element goes through Gloo alone
  await runMatrix(2, 2, [70_001], { DTRAIN_SHM_CHUNK_BYTES: "16384" }, ["f32"]);
});
