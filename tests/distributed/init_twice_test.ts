/**
 * initProcessGroup() twice: refused while the first group of several ranks
 * is open, as PyTorch refuses a second init_process_group; allowed again
 * once it is closed, under a segment name of its own (a rank still leaving the
 * first group's rendezvous unlinks the first name: had the second segment
 * taken it, the peer would never have found it, and both ranks hung). Launched
 * on 2 ranks.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";

Deno.test("a second initProcessGroup() while the first is open is refused with a clear error; after close() it works", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(
      t.launch([
        "--nproc",
        "2",
        "--log-ranks",
        "all",
        join(REPO, "tests/distributed/scripts/init_twice.ts"),
      ]),
      120_000,
    );
    assert.equal(r.code, 0, r.stderr);
    for (const rank of [0, 1]) {
      const out = r.stdout.split("\n").filter((l) => l.startsWith(`[r${rank}]`)).join("\n");
      assert.match(out, /current is first: true/);
      assert.match(
        out,
        new RegExp(
          `refused: initProcessGroup: this process already has an open process group \\(shm, rank ${rank} of 2\\); use it \\(currentProcessGroup\\(\\) returns it\\), or close\\(\\) it first`,
        ),
      );
      assert.doesNotMatch(out, /second group made/);
      assert.match(out, /after close: null/);
      assert.match(out, /second group sums to 3/);
      assert.match(out, /segments differ: true \(\/dtrain-.*-a0-pg2\)/);
    }
  } finally {
    await t.cleanup();
  }
});
