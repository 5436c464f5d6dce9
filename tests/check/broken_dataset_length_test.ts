/** `dtrain check` on examples/broken/dataset_length_differs.ts: the sampler stage names the differing lengths. */
import assert from "node:assert/strict";
import { formatTable } from "../../check/verdict.ts";
import { assertFailsWith, checkScript, rowOf } from "./_helpers.ts";

Deno.test("dtrain check catches a dataset whose length differs between ranks in the sampler stage", async () => {
  const rows = await checkScript("examples/broken/dataset_length_differs.ts");
  assertFailsWith(
    rows,
    "sampler",
    "ranks agree",
    "dataset length differs between ranks (rank 0: 101, rank 1: 100)",
  );
  assertFailsWith(rows, "sampler", "epoch 0 coverage", "indices are on no rank");
  // Sharding twice also changes what the ranks train on, which the gradient stage sees.
  assert.equal(rowOf(rows, "gradients", "world 2 vs single").outcome, "FAIL", formatTable(rows));
});
