/**
 * The process-group tests' rank handle itself: waiting for a record a rank
 * never prints fails within its limit, naming the rank and the record, so a
 * hung rank fails its test instead of holding up the whole suite.
 */
import assert from "node:assert/strict";
import { uniqueRunId, withRanks } from "./scripts/_ranks.ts";

Deno.test("a record a rank never prints fails the wait within its limit, naming the rank", async () => {
  await withRanks({ world: 1, runId: uniqueRunId("nextlimit"), args: ["serve"] }, async ([r0]) => {
    const ready = await r0!.next("ready", "init-failed");
    assert.equal(ready.event, "ready", String(ready.error));
    const t0 = performance.now();
    await assert.rejects(
      () => r0!.nextWithin(500, "never-printed"),
      /rank 0 printed no never-printed record within 500 ms/,
    );
    // liveness only: the wait ends at its limit, not at the rank's collective timeout (60 s)
    assert.ok(performance.now() - t0 < 30_000);
  });
});
