/**
 * The process group inside one process: the trivial world of one (identities,
 * argument checks, phase reports), the settings read from the environment
 * (timeouts, debug flag, refusal of multi-machine CPU groups), and the native
 * library's own argument checks through a one-rank shared-memory group.
 */
import assert from "node:assert/strict";
import { initProcessGroup } from "../../distributed/init_process_group.ts";
import {
  DEFAULT_SPIN_US,
  defaultSpinUs,
  resolveProcessGroupConfig,
} from "../../distributed/pg_config.ts";
import { ShmProcessGroup } from "../../distributed/backends/shm_backend.ts";
import { type CollectiveRecord, setPhaseSink } from "../../distributed/control/phase.ts";
import { SHM_DTYPE_CODE, shmLibrary } from "../../ffi/shm.ts";
import { launcherEnv, shmEntries, uniqueRunId } from "./scripts/_ranks.ts";

Deno.test("initProcessGroup() without a launcher environment is a world of one whose collectives are identities", () => {
  using pg = initProcessGroup({ env: {} });
  assert.equal(pg.backend, "single");
  assert.deepEqual([pg.rank, pg.size], [0, 1]);
  const x = new Float32Array([1.5, -2, 3]);
  for (const op of ["sum", "avg", "max", "min"] as const) {
    pg.allReduce(x, op);
    assert.deepEqual(Array.from(x), [1.5, -2, 3], op);
  }
  pg.broadcast(x, 0);
  const gathered = new Float32Array(3);
  pg.allGather(gathered, x);
  assert.deepEqual(Array.from(gathered), [1.5, -2, 3]);
  const scattered = new Int32Array(2);
  pg.reduceScatter(scattered, new Int32Array([7, -8]), "max");
  assert.deepEqual(Array.from(scattered), [7, -8]);
  pg.barrier("epoch-end");
});

Deno.test("a world of one checks arguments like a real group", () => {
  using pg = initProcessGroup({ env: { WORLD_SIZE: "1", RANK: "0" } });
  assert.throws(
    () => pg.broadcast(new Float32Array(2), 1),
    /broadcast: root 1 is not a rank of this group \(size 1\)/,
  );
  assert.throws(
    () => pg.allGather(new Float32Array(3), new Float32Array(2)),
    /allGather: out has 3 and inp 2 elements: expected out = 1 x inp = 2 elements/,
  );
  assert.throws(
    () => pg.allGather(new Float64Array(2), new Float32Array(2)),
    /out is f64 but inp is f32/,
  );
  assert.throws(
    () => pg.allReduce(new Int32Array(2), "avg"),
    /avg needs a floating dtype .* got i32/,
  );
  assert.throws(
    () => pg.allReduce(new Float32Array(2), "prod" as "sum"),
    /reduce op "prod" is not one of sum, avg, max, min/,
  );
  assert.throws(
    () => pg.allReduce({ ptr: null, count: 4, dtype: "f32" }),
    /null pointer but count 4/,
  );
  assert.throws(
    () => pg.allReduce({ ptr: null, count: 0, dtype: "q8" as "f32" }),
    /dtype "q8": expected one of/,
  );
  assert.throws(
    () => pg.barrier("x", { timeoutMs: 0 }),
    /timeoutMs must be a positive number, got 0/,
  );
  pg.close();
  assert.throws(() => pg.barrier("after close"), /barrier: the single-process group is closed/);
});

Deno.test("every collective reports enter and exit to the phase sink with its sequence number", () => {
  const seen: [string, CollectiveRecord][] = [];
  setPhaseSink({ phase() {}, collective: (rec, state) => seen.push([state, { ...rec }]) });
  try {
    using pg = initProcessGroup({ env: {} });
    pg.allReduce(new Float32Array(4));
    pg.barrier("epoch-end");
  } finally {
    setPhaseSink(null);
  }
  assert.deepEqual(seen, [
    ["enter", { seq: 1, op: "allReduce", bytes: 16 }],
    ["exit", { seq: 1, op: "allReduce", bytes: 16 }],
    ["enter", { seq: 2, op: "barrier", bytes: 0, detail: "epoch-end" }],
    ["exit", { seq: 2, op: "barrier", bytes: 0, detail: "epoch-end" }],
  ]);
});

Deno.test("a CPU group across machines chooses Gloo, which needs the launcher's store; shm across machines is refused", () => {
  const twoNodes = { ...launcherEnv(0, 4, "multi"), LOCAL_WORLD_SIZE: "2", DTRAIN_NNODES: "2" };
  assert.equal(resolveProcessGroupConfig({ env: twoNodes }).backend, "gloo");
  assert.equal(resolveProcessGroupConfig({ env: launcherEnv(0, 4, "one") }).backend, "shm");
  assert.equal(
    resolveProcessGroupConfig({ env: { ...launcherEnv(0, 4, "one"), DTRAIN_CPU_BACKEND: "gloo" } })
      .backend,
    "gloo",
  );
  assert.throws(
    () => initProcessGroup({ env: twoNodes }),
    /meets its peers through the dtrain launcher's control store, and this process has none \(DTRAIN_STORE_TOKEN/,
  );
  assert.throws(
    () => resolveProcessGroupConfig({ env: { ...twoNodes, DTRAIN_CPU_BACKEND: "shm" } }),
    /Cannot use the shared-memory backend across machines/,
  );
  assert.throws(
    () => resolveProcessGroupConfig({ env: { ...twoNodes, DTRAIN_CPU_BACKEND: "mpi" } }),
    /DTRAIN_CPU_BACKEND="mpi": expected shm, gloo, or unset/,
  );
});

Deno.test("resolveProcessGroupConfig() reads the timeout, debug flag and run id, and names bad values", () => {
  const env = launcherEnv(1, 2, "run-7");
  assert.equal(resolveProcessGroupConfig({ env }).timeoutMs, 1_800_000);
  assert.equal(
    resolveProcessGroupConfig({ env: { ...env, DTRAIN_TIMEOUT: "2.5" } }).timeoutMs,
    2500,
  );
  assert.equal(
    resolveProcessGroupConfig({ env: { ...env, DTRAIN_TIMEOUT: "2.5" }, timeoutMs: 40 }).timeoutMs,
    40,
  );
  assert.equal(
    resolveProcessGroupConfig({ env: { ...env, DTRAIN_DISTRIBUTED_DEBUG: "detail" } }).detail,
    true,
  );
  assert.equal(resolveProcessGroupConfig({ env }).detail, false);
  const cfg = resolveProcessGroupConfig({ env });
  assert.deepEqual([cfg.rank, cfg.size, cfg.runId], [1, 2, "run-7"]);
  assert.throws(
    () => resolveProcessGroupConfig({ env: { ...env, DTRAIN_DISTRIBUTED_DEBUG: "LOUD" } }),
    /DTRAIN_DISTRIBUTED_DEBUG="LOUD": expected OFF, INFO or DETAIL/,
  );
  assert.throws(
    () => resolveProcessGroupConfig({ env: { RANK: "0", WORLD_SIZE: "2" } }),
    /DTRAIN_RUN_ID="" must be 1-160 characters/,
  );
  assert.throws(
    () => resolveProcessGroupConfig({ env: { RANK: "0" } }),
    /RANK is set but WORLD_SIZE is not/,
  );
});

Deno.test("a waiting rank spins only while every local rank can have a core; DTRAIN_SHM_SPIN_US decides when set", () => {
  assert.equal(defaultSpinUs(2, 2), DEFAULT_SPIN_US);
  assert.equal(defaultSpinUs(8, 16), DEFAULT_SPIN_US);
  assert.equal(defaultSpinUs(3, 2), 0);
  assert.equal(defaultSpinUs(8, 2), 0);
  const env = launcherEnv(1, 2, "run-spin");
  assert.equal(
    resolveProcessGroupConfig({ env }).spinUs,
    defaultSpinUs(2, navigator.hardwareConcurrency),
  );
  assert.equal(resolveProcessGroupConfig({ env: { ...env, DTRAIN_SHM_SPIN_US: "7" } }).spinUs, 7);
});

Deno.test("the shared region's size comes from sharedBytes, else DTRAIN_SHM_SHARED_BYTES, else none", () => {
  const env = launcherEnv(1, 2, "run-shared");
  assert.equal(resolveProcessGroupConfig({ env }).sharedBytes, 0);
  assert.equal(resolveProcessGroupConfig({ env }).sharedOnDemand, true);
  const off = { ...env, DTRAIN_SHM_SHARED_BYTES: "0" };
  assert.equal(resolveProcessGroupConfig({ env: off }).sharedOnDemand, false);
  const set = { ...env, DTRAIN_SHM_SHARED_BYTES: "8192" };
  assert.equal(resolveProcessGroupConfig({ env: set }).sharedBytes, 8192);
  assert.equal(resolveProcessGroupConfig({ env: set, sharedBytes: 4096 }).sharedBytes, 4096);
  assert.throws(
    () => resolveProcessGroupConfig({ env: { ...env, DTRAIN_SHM_SHARED_BYTES: "1 GiB" } }),
    /DTRAIN_SHM_SHARED_BYTES="1 GiB" is not a non-negative integer/,
  );
  assert.equal(resolveProcessGroupConfig({ env: set }).sharedOnDemand, false);
});

Deno.test("bad DTRAIN_SHM_SHARED_BYTES and DTRAIN_SHM_SHARED_LIMIT_BYTES values are refused, naming the variable and the value", () => {
  const env = launcherEnv(1, 2, "run-shared-bad");
  const bad = (vars: Record<string, string>) => () =>
    resolveProcessGroupConfig({ env: { ...env, ...vars } });
  assert.throws(
    bad({ DTRAIN_SHM_SHARED_BYTES: "5000" }),
    /Environment variable DTRAIN_SHM_SHARED_BYTES=5000 must be a multiple of 4096/,
  );
  assert.throws(
    bad({ DTRAIN_SHM_SHARED_BYTES: "-4096" }),
    /DTRAIN_SHM_SHARED_BYTES="-4096" is not a non-negative integer/,
  );
  assert.throws(
    bad({ DTRAIN_SHM_SHARED_LIMIT_BYTES: "64M" }),
    /DTRAIN_SHM_SHARED_LIMIT_BYTES="64M" is not a non-negative integer/,
  );
  assert.throws(
    bad({ DTRAIN_SHM_SHARED_LIMIT_BYTES: "99999999999999999999" }),
    /DTRAIN_SHM_SHARED_LIMIT_BYTES="99999999999999999999" is too large/,
  );
  assert.throws(
    () => resolveProcessGroupConfig({ env, sharedLimitBytes: -1 }),
    /sharedLimitBytes=-1 must be a non-negative integer/,
  );
  const ok = resolveProcessGroupConfig({ env: { ...env, DTRAIN_SHM_SHARED_LIMIT_BYTES: "65536" } });
  assert.equal(ok.sharedLimitBytes, 65536);
  assert.equal(resolveProcessGroupConfig({ env }).sharedLimitBytes, undefined);
});

function oneRankGroup(tag: string, chunkBytes = 4096): ShmProcessGroup {
  const runId = uniqueRunId(tag);
  return ShmProcessGroup.open({
    rank: 0,
    size: 1,
    runId,
    timeoutMs: 5000,
    detail: false,
    chunkBytes,
    spinUs: 0,
  });
}

Deno.test("a one-rank shared-memory group runs every collective natively and leaves nothing in /dev/shm", () => {
  using pg = oneRankGroup("one");
  assert.deepEqual(shmEntries(pg.segmentName.slice(1)), []);
  assert.equal(pg.chunkBytes, 4096);
  const x = new Float64Array(3000).map((_, i) => i * 0.5 - 7);
  const copy = x.slice();
  pg.allReduce(x, "avg");
  assert.deepEqual(x, copy);
  const out = new Float64Array(3000);
  pg.allGather(out, x);
  assert.deepEqual(out, copy);
  pg.reduceScatter(out, x, "min");
  assert.deepEqual(out, copy);
  pg.broadcast(x, 0);
  pg.barrier("done");
  pg.close();
  pg.close(); // idempotent
  assert.throws(
    () => pg.allReduce(x),
    /allReduce: the shared-memory process group \/dtrain-.*-pg is closed/,
  );
});

Deno.test("a bad argument aborts the shared-memory group: later calls fail with the first error", () => {
  using pg = oneRankGroup("badarg");
  assert.throws(
    () => pg.broadcast(new Float32Array(2), 3),
    /root 3 is not a rank of this group \(size 1\)/,
  );
  assert.throws(
    () => pg.barrier("next"),
    /cannot be used after an earlier failure on rank 0: rank 0 called broadcast #1 with bad arguments: broadcast: root 3/,
  );
});

Deno.test("allocShared hands out zeroed, 64-byte aligned arrays of the shared region, reduced in place, and says when it is full", () => {
  const runId = uniqueRunId("shared");
  const open = (tag: string, sharedBytes?: number) =>
    ShmProcessGroup.open({
      rank: 0,
      size: 1,
      runId: `${runId}-${tag}`,
      timeoutMs: 5000,
      detail: false,
      chunkBytes: 4096,
      ...(sharedBytes === undefined ? {} : { sharedBytes }),
      spinUs: 0,
    });
  {
    using none = open("none");
    assert.equal(none.sharedBytes, 0);
    assert.throws(
      () => none.allocShared(1),
      /4 bytes do not fit in this rank's shared region \(0 bytes, 0 left\): reserve one with reserveShared\(\), or set DTRAIN_SHM_SHARED_BYTES/,
    );
  }
  const pg = open("some", 16384);
  assert.equal(pg.sharedBytes, 16384);
  assert.deepEqual(shmEntries(pg.segmentName.slice(1)), []);
  const a = pg.allocShared(3); // 12 bytes: the next array starts at byte 64
  const b = pg.allocShared(1500, "f64");
  const c = pg.allocShared(5, "i64");
  assert.ok(a instanceof Float32Array && b instanceof Float64Array && c instanceof BigInt64Array);
  assert.equal(pg.sharedBytesLeft, 16384 - (64 + 12032 + 40));
  for (const arr of [a, b, c]) {
    assert.equal(Deno.UnsafePointer.value(Deno.UnsafePointer.of(arr)!) % 64n, 0n);
    assert.ok(Array.from(arr as ArrayLike<number | bigint>).every((x) => x == 0), "zeroed");
  }
  // 12,000 bytes is more than one 4 KiB buffer: the in-place path, here over one rank
  b.forEach((_, i) => b[i] = i * 0.25 - 3);
  const before = b.slice();
  pg.allReduce(b, "avg");
  assert.deepEqual(b, before);
  assert.throws(
    () => pg.allocShared(1100),
    /4400 bytes do not fit in this rank's shared region \(16384 bytes, 4224 left\)/,
  );
  assert.throws(() => pg.allocShared(-1), /count -1 is not a non-negative integer/);
  assert.throws(
    () => pg.allocShared(1, "bf16" as "f32"),
    /dtype "bf16" is not one of f32, f64, i32, i64, u8/,
  );
  pg.close();
  // the arrays stay readable after close (the region is not unmapped under them)
  assert.equal(b[5], 5 * 0.25 - 3);
  assert.throws(() => pg.allocShared(1), /is closed/);
});

Deno.test("the native library rejects bad arguments with text that names them", () => {
  const lib = shmLibrary();
  const text = (status: number) => {
    try {
      lib.check(status, "call");
      return "ok";
    } catch (e) {
      return (e as Error).message;
    }
  };
  const out = new BigUint64Array(1);
  const name = new TextEncoder().encode(`/dtrain-${uniqueRunId("native")}-pg\0`);
  const open = (chunk: bigint, rank = 0, world = 1) =>
    text(lib.symbols.dt_shm_open(name, rank, world, chunk, 0n, 0, 1000n, out));
  assert.match(
    open(100n),
    /chunk size 100 bytes must be a multiple of 64 between 64 x world size \(64\)/,
  );
  assert.match(open(4096n, 2, 2), /rank 2 is not in \[0, 2\)/);
  assert.match(
    text(lib.symbols.dt_shm_open_shared(name, 0, 1, 4096n, 1000n, 0n, 0, 1000n, out)),
    /shared region of 1000 bytes per rank must be a multiple of 4096 between 0 and/,
  );
  assert.match(
    text(
      lib.symbols.dt_shm_open(
        new TextEncoder().encode("no-slash\0"),
        0,
        1,
        4096n,
        0n,
        0,
        1000n,
        out,
      ),
    ),
    /segment name "no-slash" must be '\/' followed by/,
  );
  for (
    const [call, pattern] of [
      [
        (h: Deno.PointerObject) => lib.symbols.dt_shm_allreduce(h, null, 4n, 99, 0, 1000n),
        /unknown dtype code 99/,
      ],
      [
        (h: Deno.PointerObject) =>
          lib.symbols.dt_shm_allreduce(h, null, 4n, SHM_DTYPE_CODE.f32, 0, 1000n),
        /buf is NULL but the count is 4/,
      ],
      [
        (h: Deno.PointerObject) =>
          lib.symbols.dt_shm_allreduce(h, null, -1n, SHM_DTYPE_CODE.f32, 0, 1000n),
        /element count -1 is negative/,
      ],
      [
        (h: Deno.PointerObject) =>
          lib.symbols.dt_shm_allreduce(h, null, 0n, SHM_DTYPE_CODE.i64, 1, 1000n),
        /reduce op avg is not supported for i64/,
      ],
      [
        (h: Deno.PointerObject) => lib.symbols.dt_shm_barrier(h, new Uint8Array([0]), 0n),
        /timeout 0 ms must be positive/,
      ],
    ] as const
  ) {
    assert.equal(open(4096n), "ok");
    const h = Deno.UnsafePointer.create(out[0]!)!;
    try {
      assert.match(text(call(h)), pattern);
    } finally {
      lib.symbols.dt_shm_close(h);
    }
  }
});
