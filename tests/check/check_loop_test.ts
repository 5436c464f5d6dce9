/** `dtrain check` end to end on a correct hand-written loop (DDP, DistributedSampler.setEpoch, AdamW, its own checkpoints). */
import assert from "node:assert/strict";
import { formatTable } from "../../check/verdict.ts";
import { checkScript, rowOf, withOutcome } from "./_helpers.ts";

Deno.test("dtrain check passes a correct hand-written DDP loop in every stage", async () => {
  const rows = await checkScript("tests/check/scripts/loop_ok.ts");
  const table = formatTable(rows);
  assert.deepEqual(withOutcome(rows, "FAIL"), [], table);
  assert.deepEqual(withOutcome(rows, "SKIP"), [], table);
  assert.equal(rows.length, 12, table);
  assert.match(
    rowOf(rows, "state", "resume on 2 ranks").measured,
    /loss max \|diff\| 0, grad norm 0$/,
  );
  assert.match(
    rowOf(rows, "gradients", "ranks in sync").measured,
    /^parameters identical at 4\/4 steps/,
  );
});
