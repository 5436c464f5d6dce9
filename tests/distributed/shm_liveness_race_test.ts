/**
 * A waiter reads which ranks are missing, then probes whether those ranks
 * still live. A peer can arrive, finish the collective and exit between the
 * two: the waiter must then return, not report "rank 1 exited" for a
 * collective that completed (a two-rank `dtrain check --exact` run once
 * failed this way at its last step, on a loaded machine).
 *
 * The window is microseconds wide, so the test holds it open: a test build
 * of libdtrain_shm.so (-DDT_SHM_TEST_PROBE_GATE) stops rank 0 once it has
 * read rank 1 as missing, until the test says go, and the test makes rank 1
 * arrive, finish and exit (or close, or abort the group) meanwhile. Rank 0's
 * barrier completed, so it must return without error.
 *
 * The same build also holds a waiter after it has read the abort word: a
 * rank that closes its group because another aborted must not be named as
 * the cause.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative, buildVariant } from "../../scripts/build_native.ts";
import { type RankProcess, shmEntries, uniqueRunId, withRanks } from "./scripts/_ranks.ts";

/** Waits until `path` exists (the test build creates it when it holds), at most `limitMs`. */
async function appears(path: string, limitMs: number): Promise<boolean> {
  const until = Date.now() + limitMs;
  for (;;) {
    try {
      Deno.statSync(path);
      return true;
    } catch { /* not yet */ }
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * `world` ranks serving on the test build, rank 0 held at the gate file: `body` gets the ranks,
 * ready, and the gate's path. Afterwards no shared-memory segment of the run is left.
 */
async function withGatedRanks(
  world: number,
  tag: string,
  body: (procs: RankProcess[], gate: string) => Promise<void>,
): Promise<void> {
  buildNative({ quiet: true });
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-shm-gate-" });
  try {
    buildVariant("libdtrain_shm.so", dir, ["-DDT_SHM_TEST_PROBE_GATE"]);
    const gate = join(dir, "gate");
    const runId = uniqueRunId(tag);
    await withRanks({
      world,
      runId,
      args: ["serve"],
      env: (r) => ({ DTRAIN_LIB_DIR: dir, ...(r === 0 ? { DT_SHM_TEST_GATE: gate } : {}) }),
    }, async (procs) => {
      for (const p of procs) assert.equal((await p.next("ready", "init-failed")).event, "ready");
      await body(procs, gate);
    });
    assert.deepEqual(shmEntries(runId), []);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

for (const how of ["exits", "closes its group", "aborts the group"] as const) {
  Deno.test(`a peer that arrives, finishes the barrier and ${how} before the waiter looks again: the barrier completes`, async () => {
    await withGatedRanks(2, "gate", async (procs, gate) => {
      const [r0, r1] = procs as [RankProcess, RankProcess];
      await r0.send("barrier gate 60000");
      assert.ok(await appears(`${gate}.held`, 60_000), "rank 0 never waited for rank 1");
      // rank 0 read rank 1 as missing and is held before it looks again
      await r1.send("barrier gate 60000");
      const done1 = await r1.next("done");
      assert.equal(done1.ok, true, String(done1.error));
      if (how === "exits") {
        await r1.kill();
      } else if (how === "closes its group") {
        await r1.send("close");
        assert.equal((await r1.next("done")).ok, true);
      } else {
        // a broadcast from a root that does not exist: rank 1 aborts the group
        await r1.send("broadcast 10 5 60000");
        assert.match(String((await r1.next("done")).error), /root 5 is not a rank/);
      }
      Deno.writeFileSync(`${gate}.go`, new Uint8Array());
      const done0 = await r0.next("done");
      assert.equal(done0.ok, true, `rank 0's completed barrier failed: ${done0.error}`);
    });
  });
}

Deno.test("a peer that closes its group after another aborted it, while the waiter looks: the abort is named, not the close", async () => {
  await withGatedRanks(3, "gate-late", async (procs, gate) => {
    const [r0, r1, r2] = procs as [RankProcess, RankProcess, RankProcess];
    await r0.send("barrier gate-late 60000");
    assert.ok(await appears(`${gate}.held`, 60_000), "rank 0 never waited for ranks 1 and 2");
    // rank 0 read ranks 1 and 2 as missing and no abort; now rank 2 aborts, and rank 1 closes
    await r2.send("broadcast 10 5 60000");
    assert.match(String((await r2.next("done")).error), /root 5 is not a rank/);
    await r1.send("close");
    await r1.next("done");
    Deno.writeFileSync(`${gate}.go`, new Uint8Array());
    const done0 = await r0.next("done");
    assert.equal(done0.ok, false);
    assert.match(String(done0.error), /rank 2 aborted the process group/);
    assert.doesNotMatch(String(done0.error), /rank 1/);
  });
});
