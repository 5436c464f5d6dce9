/** `dtrain check` on examples/broken/rank_dependent_init.ts: the gradient and state stages find the unbroadcast init. */
import assert from "node:assert/strict";
import { formatTable } from "../../check/verdict.ts";
import { assertFailsWith, checkScript, withOutcome } from "./_helpers.ts";

Deno.test("dtrain check catches a rank-dependent init that is never broadcast in the gradient and state stages", async () => {
  const rows = await checkScript("examples/broken/rank_dependent_init.ts");
  assert.deepEqual(
    withOutcome(rows, "FAIL"),
    [
      "gradients / ranks in sync (2 ranks)",
      "gradients / world 2 vs single process",
      "state / resume on 2 ranks from step 2",
    ],
    formatTable(rows),
  );
  assertFailsWith(
    rows,
    "gradients",
    "ranks in sync",
    "parameters differ between ranks before the first update",
    "never broadcast",
  );
  assertFailsWith(
    rows,
    "state",
    "resume on 2 ranks",
    "rank 1 holds parameters other than the ones it trained with",
  );
});
