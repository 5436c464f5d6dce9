/** `dtrain check` on examples/broken/missing_set_epoch.ts: the sampler stage, and only it, fails. */
import assert from "node:assert/strict";
import { formatTable } from "../../check/verdict.ts";
import { assertFailsWith, checkScript, withOutcome } from "./_helpers.ts";

Deno.test("dtrain check catches a missing setEpoch in the sampler stage", async () => {
  const rows = await checkScript("examples/broken/missing_set_epoch.ts");
  assert.deepEqual(
    withOutcome(rows, "FAIL"),
    ["sampler / order changes between epochs"],
    formatTable(rows),
  );
  assertFailsWith(
    rows,
    "sampler",
    "order changes between epochs",
    "order did not change between epochs",
    "is setEpoch(epoch) called each epoch?",
  );
});
