/**
 * Fault injection: ranks that call the same collective with the same byte
 * size but a different dtype, reduce op or broadcast root, with no debug
 * setting, fail on every rank with both sides named (before, such programs
 * exited 0 with wrong numbers unless DTRAIN_DISTRIBUTED_DEBUG=DETAIL).
 */
import assert from "node:assert/strict";
import {
  type RankProcess,
  shmEntries,
  uniqueRunId,
  withRanks,
} from "../distributed/scripts/_ranks.ts";

const DT_ERR_ARG = 1;

type Outcome = { ok: boolean; error?: string; status?: number; ms: number };

/** Two ranks (no DTRAIN_DISTRIBUTED_DEBUG) run one command each; returns both outcomes. */
async function clash(tag: string, line0: string, line1: string): Promise<[Outcome, Outcome]> {
  const runId = uniqueRunId(tag);
  const env = { DTRAIN_DISTRIBUTED_DEBUG: "" };
  const result = await withRanks(
    { world: 2, runId, args: ["serve"], env: () => env },
    async ([r0, r1]) => {
      for (const p of [r0!, r1!] as RankProcess[]) {
        const r = await p.next("ready", "init-failed");
        assert.equal(r.event, "ready", `rank ${p.rank} could not join: ${r.error}`);
      }
      await r0!.send(line0);
      await r1!.send(line1);
      return [
        (await r0!.next("done")) as unknown as Outcome,
        (await r1!.next("done")) as unknown as Outcome,
      ] as [Outcome, Outcome];
    },
  );
  assert.deepEqual(shmEntries(runId), [], "segment left in /dev/shm");
  return result;
}

function assertBothSides(outcomes: Outcome[], mine: RegExp, theirs: RegExp): void {
  for (const res of outcomes) {
    assert.equal(res.ok, false, "a mismatched collective completed");
    assert.equal(res.status, DT_ERR_ARG);
    assert.match(res.error!, /Collective mismatch at #1: rank \d called/);
    assert.match(res.error!, mine);
    assert.match(res.error!, theirs);
    assert.ok(res.ms < 5000, `noticed after ${res.ms} ms`);
  }
}

Deno.test("allReduce of f32 on one rank and i32 (same bytes) on the other fails on both, naming both dtypes", async () => {
  const [a, b] = await clash("dtype", "allreduce 10 f32 10000", "allreduce 10 i32 10000");
  assertBothSides([a, b], /allReduce\(sum, 10 x f32\)/, /allReduce\(sum, 10 x i32\)/);
});

Deno.test("allReduce sum on one rank and max on the other fails on both, naming both ops", async () => {
  const [a, b] = await clash("redop", "allreduce 10 f32 10000 sum", "allreduce 10 f32 10000 max");
  assertBothSides([a, b], /allReduce\(sum, 10 x f32\)/, /allReduce\(max, 10 x f32\)/);
});

Deno.test("broadcast from root 0 on one rank and root 1 on the other fails on both, naming both roots", async () => {
  const [a, b] = await clash("root", "broadcast 10 0 10000", "broadcast 10 1 10000");
  assertBothSides([a, b], /broadcast\(root 0, 10 x f32\)/, /broadcast\(root 1, 10 x f32\)/);
});

Deno.test("matching calls still pass the always-on check", async () => {
  const [a, b] = await clash("same", "allreduce 10 f32 10000 avg", "allreduce 10 f32 10000 avg");
  assert.deepEqual([a.ok, b.ok], [true, true], `${a.error} / ${b.error}`);
});
