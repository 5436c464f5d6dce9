/**
 * Shared regions reserved after open (ShmProcessGroup.reserveShared): a
 * failure on one rank only (its limit, a name already taken in /dev/shm) is
 * the same SharedReserveError on every rank, naming that rank, with no hang
 * and nothing left in /dev/shm, and the group stays usable; releaseShared
 * gives a region's pages back. (The reduction of arrays in reserved regions
 * is checked with the collective matrix, process_group_collectives_test.ts.)
 */
import assert from "node:assert/strict";
import { ShmProcessGroup } from "../../distributed/backends/shm_backend.ts";
import { SharedReserveError } from "../../distributed/process_group.ts";
import { type RankProcess, shmEntries, uniqueRunId, withRanks } from "./scripts/_ranks.ts";

/** Well past a test rank's timeouts (a hang fails the test instead of holding it up). */
const LIMIT_MS = 120_000;

type Answer = {
  ok: boolean;
  error?: string;
  errorName?: string;
  failedRank?: number;
  step?: string;
  sharedBytes?: number;
};

async function ready(procs: RankProcess[]): Promise<number[]> {
  const pids = [];
  for (const p of procs) {
    const r = await p.nextWithin(LIMIT_MS, "ready", "init-failed");
    assert.equal(r.event, "ready", `rank ${p.rank} could not join: ${r.error}`);
    pids.push(Number(r.pid));
  }
  return pids;
}

/** Sends `line` to every rank, then collects every answer. */
async function all(procs: RankProcess[], line: string): Promise<Answer[]> {
  for (const p of procs) await p.send(line);
  const out = [];
  for (const p of procs) out.push((await p.nextWithin(LIMIT_MS, "done")) as unknown as Answer);
  return out;
}

for (const world of [2, 3]) {
  Deno.test(`reserveShared over a limit on rank ${world - 1} only fails with the same SharedReserveError on all ${world} ranks, and the group goes on`, async () => {
    const runId = uniqueRunId(`reslimit${world}`);
    const last = world - 1;
    const opts = {
      world,
      runId,
      args: ["serve"],
      env: (r: number) => ({
        DTRAIN_SHM_CHUNK_BYTES: "4096",
        ...(r === last ? { DTRAIN_SHM_SHARED_LIMIT_BYTES: String(64 << 10) } : {}),
      }),
    };
    await withRanks(opts, async (procs) => {
      await ready(procs);
      const failed = await all(procs, "reserve 1048576 60000");
      for (const res of failed) {
        assert.equal(res.ok, false);
        assert.equal(res.errorName, "SharedReserveError", res.error);
        assert.equal(res.failedRank, last);
        assert.equal(res.step, "limit");
        assert.equal(res.sharedBytes, 0);
        assert.equal(
          res.error,
          `reserveShared(1048576 bytes per rank) failed on rank ${last}: rank ${last} may reserve ` +
            `at most 65536 bytes of shared memory (its limit), and 1048576 per rank were asked for`,
        );
      }
      assert.deepEqual(shmEntries(runId), [], "a region left in /dev/shm");
      // the group goes on: an ordinary collective, then a reservation under the limit and an
      // allReduce of arrays in it
      for (const res of await all(procs, "allreduce 5000 f32 30000")) assert.ok(res.ok, res.error);
      for (const res of await all(procs, "reserve 65536 30000")) {
        assert.ok(res.ok, res.error);
        assert.equal(res.sharedBytes, 65536);
      }
      for (const res of await all(procs, "allreduce-shared 5000 f32 30000")) {
        assert.ok(res.ok, res.error);
      }
      assert.deepEqual(shmEntries(runId), [], "a region left in /dev/shm");
    });
    assert.deepEqual(shmEntries(runId), []);
  });
}

Deno.test("reserveShared fails alike on both ranks when rank 0 cannot create its region, and leaves /dev/shm as it was", async () => {
  const runId = uniqueRunId("rescreate");
  const opts = { world: 2, runId, args: ["serve"], env: () => ({}) };
  const taken: string[] = [];
  try {
    await withRanks(opts, async (procs) => {
      const [pid0] = await ready(procs);
      // rank 0's region name for the group's first call (shm_regions.c), taken before it asks
      const name = `/dev/shm/dtrain-${runId}-a0-pg-sh0-${pid0}-1`;
      Deno.writeFileSync(name, new Uint8Array(0), { createNew: true });
      taken.push(name);
      const before = shmEntries(runId);
      for (const res of await all(procs, "reserve 8192 60000")) {
        assert.equal(res.ok, false);
        assert.equal(res.errorName, "SharedReserveError", res.error);
        assert.equal(res.failedRank, 0);
        assert.equal(res.step, "create");
        assert.match(
          res.error!,
          /rank 0 could not create its 8192-byte region in \/dev\/shm: File exists/,
        );
      }
      assert.deepEqual(shmEntries(runId), before, "rank 1's region left in /dev/shm");
      for (const res of await all(procs, "allreduce 10 f32 30000")) assert.ok(res.ok, res.error);
    });
  } finally {
    for (const n of taken) Deno.removeSync(n);
  }
  assert.deepEqual(shmEntries(runId), []);
});

/** Resident bytes of the mapping that contains `addr`, from /proc/self/smaps. */
function residentAt(addr: bigint): number {
  const lines = Deno.readTextFileSync("/proc/self/smaps").split("\n");
  let inside = false;
  for (const line of lines) {
    const range = /^([0-9a-f]+)-([0-9a-f]+) /.exec(line);
    if (range) {
      inside = BigInt("0x" + range[1]) <= addr && addr < BigInt("0x" + range[2]);
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (inside && rss) return Number(rss[1]) * 1024;
  }
  throw new Error(`no mapping holds 0x${addr.toString(16)}`);
}

Deno.test("releaseShared gives a reserved region's pages back: the mapping's RSS drops, the array reads zeros and stays usable", () => {
  const runId = uniqueRunId("release");
  using pg = ShmProcessGroup.open({
    rank: 0,
    size: 1,
    runId,
    timeoutMs: 5000,
    detail: false,
    chunkBytes: 4096,
    spinUs: 0,
  });
  const bytes = 8 << 20;
  pg.reserveShared(bytes);
  assert.equal(pg.sharedBytes, bytes);
  assert.deepEqual(shmEntries(runId), [], "the reserved region's name is left in /dev/shm");
  const keep = pg.allocShared(1024); // its page stays
  const arr = pg.allocShared((bytes - 8192) / 4);
  arr.fill(1.5);
  keep.fill(2);
  const addr = BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(arr)!));
  const before = residentAt(addr);
  assert.ok(before >= bytes - 8192, `only ${before} bytes resident after filling the array`);
  const given = pg.releaseShared(arr);
  // the array starts 4096 bytes in (after `keep`, 64-byte aligned): every page but the last partial one
  assert.ok(given >= bytes - 3 * 4096, `only ${given} bytes given back`);
  const after = residentAt(addr);
  assert.ok(before - after >= given, `RSS ${before} -> ${after} after giving back ${given} bytes`);
  assert.equal(arr[0], 0);
  assert.equal(arr[arr.length >> 1], 0);
  assert.ok(keep.every((v) => v === 2), "a page outside the array was given back");
  arr.fill(3);
  pg.allReduce(arr, "sum");
  assert.equal(arr[12345], 3);
  assert.throws(
    () => pg.releaseShared(new Float32Array(4)),
    /not made by this group's allocShared/,
  );
  assert.throws(
    () => pg.reserveShared(4096),
    /already has a shared region of 8388608 bytes per rank/,
  );
  assert.ok(new SharedReserveError("x", 0, "limit", 1) instanceof Error);
});
