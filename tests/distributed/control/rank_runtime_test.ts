/**
 * The rank-facing runtime: rankZeroFirst() and storeBarrier() across
 * launched ranks (rank 0 goes first; a barrier timeout says who is missing
 * and where), and the same calls in a plain process (a world of one).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  getStore,
  rankZeroFirst,
  storeBarrier,
} from "../../../distributed/control/rank_runtime.ts";
import { getWorld } from "../../../distributed/control/env.ts";
import { currentPhase } from "../../../distributed/control/phase.ts";
import { SCRIPTS, TestRun } from "../../launch/launch_helpers.ts";

Deno.test("rankZeroFirst() runs rank 0 first, and a storeBarrier() timeout names the rank elsewhere", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(
      t.launch(["--nproc", "3", "--log-ranks", "all", join(SCRIPTS, "rank_zero_first.ts"), t.dir]),
    );
    assert.equal(r.code, 0, r.stderr);
    for (const rank of [0, 1, 2]) {
      assert.match(r.stdout, new RegExp(`^\\[r${rank}\\] rank ${rank} saw ready$`, "m"));
    }
    for (const rank of [1, 2]) {
      assert.match(
        r.stdout,
        new RegExp(
          `^\\[r${rank}\\] rank ${rank} barrier error: storeBarrier\\("late"\\) timed out after 500 ms: [12] of 3 ranks arrived; ` +
            `elsewhere: rank 0 in phase "writing a checkpoint"`,
          "m",
        ),
      );
    }
  } finally {
    await t.cleanup();
  }
});

Deno.test({
  name: "outside a launcher, barriers pass at once and rankZeroFirst() just runs fn",
  // Meaningless when the test process itself was started by a launcher.
  ignore: Boolean(Deno.env.get("DTRAIN_RUN_ID")),
}, async () => {
  assert.equal(getWorld().worldSize, 1);
  const before = currentPhase().phase;
  await storeBarrier("alone");
  assert.equal(currentPhase().phase, before, "the phase is restored after a barrier");
  assert.equal(await rankZeroFirst("prep", () => 42), 42);
  assert.throws(
    () => getStore(),
    /No dtrain control store in this process: it was not started by the dtrain launcher/,
  );
});
