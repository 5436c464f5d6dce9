/**
 * The shared-memory process group's results: every op x dtype x size (0,
 * smaller than the world, not divisible by it, many buffers long) run by 2, 3
 * and 4 rank processes, compared with results computed here from the same
 * inputs, and compared bit for bit across ranks.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import type { CollectiveDType } from "../../distributed/process_group.ts";
import { buildCases, BYTES, caseName, outputCount } from "./scripts/_cases.ts";
import { expected, firstDifference } from "./scripts/_expected.ts";
import { shmEntries, uniqueRunId, withRanks } from "./scripts/_ranks.ts";

async function runMatrix(
  world: number,
  sizes: number[],
  env: Record<string, string>,
  dtypes?: CollectiveDType[],
): Promise<void> {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-pg-" });
  const runId = uniqueRunId(`matrix${world}`);
  try {
    const caseEnv = {
      CASE_SIZES: sizes.join(","),
      ...(dtypes ? { CASE_DTYPES: dtypes.join(",") } : {}),
      ...env,
    };
    await withRanks(
      { world, runId, env: () => caseEnv, args: (r) => ["matrix", join(dir, `rank${r}.bin`)] },
      async (procs) => {
        for (const p of procs) assert.equal((await p.next("done")).event, "done");
      },
    );
    assert.deepEqual(shmEntries(runId), [], "segment left in /dev/shm");
    const cases = buildCases(world, sizes, dtypes, env.CASE_ALLREDUCE_ONLY === "1");
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
        const diff = firstDifference(c.dtype, got[r]!, want[r]!);
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

Deno.test("allReduce/reduceScatter/broadcast/allGather match independent results for every op, dtype and size, 3 ranks", async () => {
  // 4 KiB buffers: 3001 elements take several buffers, 1000 f32 does not divide by 3
  await runMatrix(3, [0, 1, 2, 1000, 3001], { DTRAIN_SHM_CHUNK_BYTES: "4096" });
});

Deno.test("collectives match independent results with 2 ranks and with 4 ranks", async () => {
  await runMatrix(2, [0, 5, 2049], { DTRAIN_SHM_CHUNK_BYTES: "1024" });
  await runMatrix(4, [3, 1001], { DTRAIN_SHM_CHUNK_BYTES: "4096" }, ["f32", "i64", "bf16"]);
});

Deno.test("collectives larger than the default 1 MiB buffer match independent results, 2 ranks", async () => {
  await runMatrix(2, [270_001], {}, ["f32"]); // 1 MiB = 262144 f32
});

Deno.test("allReduce of messages written with streaming stores (>= 4 MiB) at unaligned addresses matches, 2 and 3 ranks", async () => {
  // 1,048,603 f32 is just over 4 MiB: the f32 sum/avg path streams into the caller's buffer,
  // whose start is 4 bytes past a 64-byte boundary here, and whose length leaves a ragged tail
  const env = { CASE_OFFSET: "4", CASE_ALLREDUCE_ONLY: "1" };
  await runMatrix(2, [1_048_603], env, ["f32"]);
  await runMatrix(3, [1_048_603], env, ["f32"]);
});

Deno.test("allReduce of arrays in the shared regions matches independent results for every op, dtype and size, 2 and 3 ranks", async () => {
  // 4 KiB buffers: 1000 f32 goes the one-barrier way, 1000 f64 and 3001 of any dtype wider
  // than a byte through the shared regions; 3001 splits unevenly into 2 and 3 shares, and the
  // data start 8 bytes past a 64-byte boundary
  const env = {
    DTRAIN_SHM_CHUNK_BYTES: "4096",
    DTRAIN_SHM_SHARED_BYTES: String(8 << 20),
    CASE_SHARED: "1",
    CASE_OFFSET: "8",
  };
  await runMatrix(2, [0, 1, 5, 1000, 3001], env);
  await runMatrix(3, [2, 1000, 3001], env);
});

Deno.test("allReduce of large arrays in the shared regions (the default buffers) matches, 2 and 3 ranks", async () => {
  // 1,048,603 f32: just over 4 MiB, an odd count; with 3 ranks each result is also copied to the third
  const env = {
    DTRAIN_SHM_SHARED_BYTES: String(24 << 20),
    CASE_SHARED: "1",
    CASE_OFFSET: "4",
    CASE_ALLREDUCE_ONLY: "1",
  };
  await runMatrix(2, [1_048_603], env, ["f32", "bf16"]);
  await runMatrix(3, [1_048_603], env, ["f32"]);
});

Deno.test("allReduce of arrays in a region reserved after open (reserveShared) matches independent results, 2 and 3 ranks", async () => {
  // no region at open: each rank reserves 16 MiB, its arrays start 8 bytes past a 64-byte boundary
  // there; 3001 f32 and 270,001 f32 take several 4 KiB buffers on the ordinary path, so they are
  // reduced in place across the reserved regions, to the ordinary path's bits
  const env = {
    DTRAIN_SHM_CHUNK_BYTES: "4096",
    DTRAIN_SHM_SHARED_BYTES: "",
    CASE_RESERVE: String(16 << 20),
    CASE_SHARED: "1",
    CASE_OFFSET: "8",
    CASE_ALLREDUCE_ONLY: "1",
  };
  await runMatrix(2, [1000, 3001, 270_001], env, ["f32", "f64"]);
  await runMatrix(3, [3001, 270_001], env, ["f32"]);
});
