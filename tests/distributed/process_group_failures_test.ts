/**
 * How the shared-memory process group fails: a rank that never arrives (a
 * timeout naming it), a rank SIGKILLed or closed mid-job (peers fail at once;
 * nothing is left in /dev/shm), mismatched collectives (both sides reported),
 * and rendezvous problems (missing rank 0 or peer, stale segment, different
 * WORLD_SIZE). Every rank process is killed when its test ends.
 */
import assert from "node:assert/strict";
import { type RankProcess, shmEntries, uniqueRunId, withRanks } from "./scripts/_ranks.ts";

const DT_ERR_ARG = 1, DT_ERR_TIMEOUT = 7, DT_ERR_SYS = 8;

type Outcome = { ok: boolean; error?: string; status?: number; ms: number };

async function ready(procs: RankProcess[]): Promise<void> {
  for (const p of procs) {
    const r = await p.next("ready", "init-failed");
    assert.equal(r.event, "ready", `rank ${p.rank} could not join: ${r.error}`);
  }
}

async function run(p: RankProcess, line: string): Promise<Outcome> {
  await p.send(line);
  return (await p.next("done")) as unknown as Outcome;
}

function serve(world: number, tag: string, env: Record<string, string> = {}) {
  return { world, runId: uniqueRunId(tag), args: ["serve"], env: () => env };
}

Deno.test("barrier() returns on no rank before the last rank has entered it", async () => {
  await withRanks(serve(3, "barrier"), async (procs) => {
    await ready(procs);
    const [r0, r1, r2] = procs as [RankProcess, RankProcess, RankProcess];
    for (const p of [r0, r1]) {
      await p.send("barrier epoch-end 30000");
      await p.next("enter");
    }
    // ranks 0 and 1 are in the barrier, and have been for a round trip to rank 1
    assert.equal(
      r0.has("done") || r1.has("done"),
      false,
      "a rank left the barrier before rank 2 entered it",
    );
    await r2.send("barrier epoch-end 30000");
    for (const p of procs) {
      const done = await p.next("done");
      assert.equal(done.ok, true, String(done.error));
    }
  });
});

Deno.test("allReduce times out after its timeout and names the rank that never arrived", async () => {
  const opts = serve(2, "timeout");
  await withRanks(opts, async ([r0, r1]) => {
    await ready([r0!, r1!]);
    const res = await run(r0!, "allreduce 10 f32 800");
    assert.equal(res.ok, false);
    assert.equal(res.status, DT_ERR_TIMEOUT);
    assert.match(res.error!, /#1 allReduce\(sum, 10 x f32\) timed out on rank 0 after \d+ ms/);
    assert.match(res.error!, /rank 1 has not entered any collective yet/);
    assert.ok(res.ms >= 790 && res.ms < 5000, `timed out after ${res.ms} ms, expected about 800`);
    // rank 0's failure aborted the group: rank 1 stops at once with rank 0's reason
    const late = await run(r1!, "barrier late 30000");
    assert.equal(late.ok, false);
    assert.match(late.error!, /rank 0 aborted the process group: .*timed out/);
    assert.ok(late.ms < 5000, `rank 1 waited ${late.ms} ms`);
  });
  assert.deepEqual(shmEntries(opts.runId), []);
});

Deno.test("a rank SIGKILLed mid-job: the survivor's collective fails at once and /dev/shm stays empty", async () => {
  const opts = serve(2, "kill");
  await withRanks(opts, async ([r0, r1]) => {
    await ready([r0!, r1!]);
    assert.deepEqual(
      shmEntries(opts.runId),
      [],
      "the segment name must be gone once every rank joined",
    );
    for (const p of [r0!, r1!]) await p.send("allreduce 1000 f32 30000");
    for (const p of [r0!, r1!]) {
      assert.equal((await p.next("done")).ok, true, "a first allReduce works");
    }
    await r0!.send("allreduce 100000 f32 30000");
    await r0!.next("enter");
    await r1!.kill();
    const res = (await r0!.next("done")) as unknown as Outcome;
    assert.equal(res.ok, false);
    assert.equal(res.status, DT_ERR_SYS);
    assert.match(
      res.error!,
      /#2 allReduce\(sum, 100000 x f32\) on rank 0 cannot complete: rank 1 \(pid \d+\) exited/,
    );
    assert.ok(res.ms < 5000, `noticed after ${res.ms} ms, expected well before the 30 s timeout`);
    await r0!.kill();
    assert.deepEqual(
      shmEntries(opts.runId),
      [],
      "segment left in /dev/shm after every rank was killed",
    );
  });
});

Deno.test("a bad argument on one rank makes its peer's collective fail at once with that rank's error", async () => {
  await withRanks(serve(2, "badarg"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    const bad = await run(r0!, "broadcast 10 5 30000");
    assert.equal(bad.ok, false);
    assert.match(bad.error!, /broadcast: root 5 is not a rank of this group \(size 2\)/);
    const peer = await run(r1!, "broadcast 10 0 30000");
    assert.equal(peer.ok, false);
    assert.match(
      peer.error!,
      /rank 0 aborted the process group: rank 0 called broadcast #1 with bad arguments/,
    );
    assert.ok(peer.ms < 5000, `rank 1 waited ${peer.ms} ms`);
  });
});

Deno.test("a bad allReduce argument (avg of integers, a bad timeout) aborts the group for its peer too", async () => {
  await withRanks(serve(2, "badarg"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    const bad = await run(r0!, "allreduce 10 i32 30000 avg");
    assert.equal(bad.ok, false);
    assert.match(
      bad.error!,
      /allReduce: avg needs a floating dtype \(f32, f64, bf16, f16\), got i32/,
    );
    const peer = await run(r1!, "allreduce 10 i32 30000 sum");
    assert.equal(peer.ok, false);
    assert.match(
      peer.error!,
      /rank 0 aborted the process group: rank 0 called allReduce #1 with bad arguments: allReduce: avg/,
    );
    assert.ok(peer.ms < 5000, `rank 1 waited ${peer.ms} ms`);
  });
  await withRanks(serve(2, "badtimeout"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    const bad = await run(r0!, "allreduce 10 f32 -5");
    assert.equal(bad.ok, false);
    assert.match(bad.error!, /allReduce: timeoutMs must be a positive number, got -5/);
    const peer = await run(r1!, "allreduce 10 f32 30000");
    assert.match(peer.error!, /rank 0 called allReduce #1 with bad arguments/);
  });
});

Deno.test("close() on one rank makes a peer's collective fail at once", async () => {
  await withRanks(serve(2, "close"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    assert.equal((await run(r1!, "close")).ok, true);
    const res = await run(r0!, "allreduce 10 f32 30000");
    assert.equal(res.ok, false);
    assert.match(res.error!, /rank 1 \(pid \d+\) closed its process group/);
    assert.ok(res.ms < 5000, `noticed after ${res.ms} ms`);
  });
});

async function mismatch(
  env: Record<string, string>,
  line0: string,
  line1: string,
): Promise<[Outcome, Outcome]> {
  return await withRanks(serve(2, "mismatch", env), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    await r0!.send(line0);
    await r1!.send(line1);
    return [
      (await r0!.next("done")) as unknown as Outcome,
      (await r1!.next("done")) as unknown as Outcome,
    ];
  });
}

Deno.test("allReduce of 10 floats on rank 0 and 12 on rank 1 is reported on both ranks with both calls", async () => {
  const [a, b] = await mismatch({}, "allreduce 10 f32 10000", "allreduce 12 f32 10000");
  for (const [res, me, other] of [[a, "10", "12"], [b, "12", "10"]] as const) {
    assert.equal(res.ok, false);
    assert.equal(res.status, DT_ERR_ARG);
    assert.match(
      res.error!,
      new RegExp(
        `Collective mismatch at #1: rank \\d called allReduce\\(sum, ${me} x f32\\) but rank \\d called #1 allReduce\\(sum, ${other} x f32\\)`,
      ),
    );
  }
});

Deno.test("allReduce of a shared-region array on one rank against an ordinary array on the other is a mismatch on both", async () => {
  const env = { DTRAIN_SHM_CHUNK_BYTES: "4096", DTRAIN_SHM_SHARED_BYTES: String(1 << 20) };
  // 5000 f32 is more than one 4 KiB buffer: the shared array would be reduced in place
  const [a, b] = await mismatch(env, "allreduce-shared 5000 f32 10000", "allreduce 5000 f32 10000");
  for (const res of [a, b]) {
    assert.equal(res.ok, false);
    assert.equal(res.status, DT_ERR_ARG);
    assert.match(res.error!, /allReduce\[shared buffer\]\(sum, 5000 x f32\)/);
    assert.match(
      res.error!,
      /called #1 allReduce\(sum, 5000 x f32\)|called allReduce\(sum, 5000 x f32\)/,
    );
  }
  // a message of one barrier takes that path whatever its memory: no mismatch
  const [c, d] = await mismatch(env, "allreduce-shared 10 f32 10000", "allreduce 10 f32 10000");
  assert.deepEqual([c.ok, d.ok], [true, true]);
});

Deno.test("broadcast on one rank against allReduce on the other is reported with both calls", async () => {
  const [a, b] = await mismatch({}, "broadcast 10 0 10000", "allreduce 10 f32 10000");
  for (const res of [a, b]) {
    assert.equal(res.ok, false);
    assert.match(res.error!, /broadcast\(root 0, 10 x f32\)/);
    assert.match(res.error!, /allReduce\(sum, 10 x f32\)/);
  }
});

Deno.test("equal-size calls with different barrier names are caught only under DTRAIN_DISTRIBUTED_DEBUG=DETAIL", async () => {
  const [a, b] = await mismatch({}, "barrier epoch-end 10000", "barrier after-scan 10000");
  assert.deepEqual([a.ok, b.ok], [true, true], "op and size match: only DETAIL compares names");
  const [c, d] = await mismatch(
    { DTRAIN_DISTRIBUTED_DEBUG: "DETAIL" },
    "allreduce 10 f32 10000",
    "allreduce 10 i32 10000",
  );
  for (const res of [c, d]) {
    assert.equal(res.ok, false);
    assert.match(
      res.error!,
      /allReduce\(sum, 10 x f32\).*allReduce\(sum, 10 x i32\)|allReduce\(sum, 10 x i32\).*allReduce\(sum, 10 x f32\)/,
    );
  }
  const [e, f] = await mismatch(
    { DTRAIN_DISTRIBUTED_DEBUG: "DETAIL" },
    "barrier epoch-end 10000",
    "barrier after-scan 10000",
  );
  for (const res of [e, f]) {
    assert.equal(res.ok, false);
    assert.match(res.error!, /barrier\("epoch-end"\)/);
    assert.match(res.error!, /barrier\("after-scan"\)/);
  }
});

Deno.test("rendezvous without rank 1 times out naming it and removes the segment", async () => {
  const opts = { ...serve(2, "norank1", { DTRAIN_TIMEOUT: "1" }), ranks: [0] };
  await withRanks(opts, async ([r0]) => {
    const res = await r0!.next("init-failed", "ready");
    assert.equal(res.event, "init-failed");
    assert.match(
      String(res.error),
      /Rendezvous on \/dev\/shm\/dtrain-.*-pg timed out on rank 0 after \d+ ms: rank 1 has not attached/,
    );
    assert.ok(Number(res.ms) < 6000);
  });
  assert.deepEqual(shmEntries(opts.runId), []);
});

Deno.test("rendezvous without rank 0 times out naming the segment it waited for", async () => {
  const opts = { ...serve(2, "norank0", { DTRAIN_TIMEOUT: "1" }), ranks: [1] };
  await withRanks(opts, async ([r1]) => {
    const res = await r1!.next("init-failed", "ready");
    assert.match(
      String(res.error),
      new RegExp(
        `rank 0 did not create the shared-memory segment /dev/shm/dtrain-${opts.runId}-a0-pg`,
      ),
    );
  });
});

Deno.test("a stale segment of the same run id is refused, not reused", async () => {
  const opts = { ...serve(2, "stale", { DTRAIN_TIMEOUT: "2" }), ranks: [0] };
  const path = `/dev/shm/dtrain-${opts.runId}-a0-pg`;
  Deno.writeFileSync(path, new Uint8Array(8192));
  try {
    await withRanks(opts, async ([r0]) => {
      const res = await r0!.next("init-failed", "ready");
      assert.match(String(res.error), /Cannot create shared-memory segment .* it already exists/);
      assert.match(String(res.error), /Use a new DTRAIN_RUN_ID/);
    });
  } finally {
    Deno.removeSync(path);
  }
});

Deno.test("a rank started with a different WORLD_SIZE is refused with both sizes", async () => {
  const base = serve(2, "worldsize");
  const opts = {
    ...base,
    env: (r: number): Record<string, string> =>
      r === 1
        ? { WORLD_SIZE: "3", LOCAL_WORLD_SIZE: "3", DTRAIN_TIMEOUT: "2" }
        : { DTRAIN_TIMEOUT: "2" },
  };
  await withRanks(opts, async ([r0, r1]) => {
    const res = await r1!.next("init-failed", "ready");
    assert.match(
      String(res.error),
      /Rank 1 was started with WORLD_SIZE=3 but rank 0 created .* for world size 2/,
    );
    const res0 = await r0!.next("init-failed", "ready");
    assert.match(String(res0.error), /rank 1 has not attached/);
  });
  assert.deepEqual(shmEntries(opts.runId), []);
});
