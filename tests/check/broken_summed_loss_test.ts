/** `dtrain check` on examples/broken/summed_loss.ts: the gradient stage fails and names the summed loss. */
import assert from "node:assert/strict";
import { formatTable } from "../../check/verdict.ts";
import { assertFailsWith, checkScript, rowOf, withOutcome } from "./_helpers.ts";

Deno.test("dtrain check catches a loss summed instead of averaged in the gradient stage", async () => {
  const rows = await checkScript("examples/broken/summed_loss.ts");
  const table = formatTable(rows);
  assert.deepEqual(withOutcome(rows, "FAIL"), ["gradients / world 2 vs single process"], table);
  assertFailsWith(
    rows,
    "gradients",
    "world 2 vs single process",
    "1/2 of the single process's",
    "summed over the batch instead of averaged",
  );
  assert.match(
    rowOf(rows, "gradients", "world 2 vs single").measured,
    /^loss max rel diff 5\.0e-1, grad norm 5\.0e-1/,
  );
  // The state is still saved and resumed exactly; only a single process cannot continue the 2-rank run.
  assert.deepEqual(withOutcome(rows, "SKIP"), ["state / resume in 1 process from step 2"], table);
});
