/**
 * A rank that dies during the shared-memory rendezvous leaves the segment
 * rank 0 created (nobody unlinks it once not every rank attached): the
 * launcher removes every segment of an attempt when the attempt ends,
 * whatever happened, also between restarts.
 */
import assert from "node:assert/strict";
import { basename, join } from "node:path";
import { onlyRunDir, REPO, TestRun } from "../launch/launch_helpers.ts";
import { attemptSegments, removeAttemptSegments } from "../../launch/attempt_segments.ts";

const DIE = join(REPO, "tests/faults/scripts/die_in_rendezvous.ts");

for (const how of ["3", "kill"]) {
  Deno.test(`a rank that ${how === "kill" ? "is SIGKILLed" : "exits"} during rendezvous leaves nothing in /dev/shm`, async () => {
    const t = new TestRun();
    let runId: string | null = null;
    try {
      const r = await t.finish(t.launch(["--nproc", "2", "--max-restarts", "1", DIE, how]), 30_000);
      assert.equal(r.code, how === "kill" ? 137 : 3, r.stderr);
      runId = basename(onlyRunDir(t.dir));
      for (const attempt of [0, 1]) {
        const seen = Deno.readTextFileSync(join(t.pidDir, `segment-seen-${attempt}`));
        assert.equal(seen, `dtrain-${runId}-a${attempt}-pg`, "the segment existed during the run");
        assert.deepEqual(attemptSegments(runId, attempt), [], `attempt ${attempt} left a segment`);
      }
    } finally {
      await t.cleanup();
      // Also when the test fails: leave nothing in the machine's /dev/shm.
      if (runId) { for (const attempt of [0, 1]) removeAttemptSegments(runId, attempt); }
    }
  });
}

Deno.test("removeAttemptSegments() removes one attempt's segments and nothing else", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-fake-shm-" });
  try {
    for (
      const n of [
        "dtrain-run-a0-pg",
        "dtrain-run-a0-extra",
        "dtrain-run-a1-pg",
        "dtrain-run-2-a0-pg",
        "other",
      ]
    ) {
      Deno.writeTextFileSync(join(dir, n), "");
    }
    assert.deepEqual(removeAttemptSegments("run", 0, dir).removed.sort(), [
      "dtrain-run-a0-extra",
      "dtrain-run-a0-pg",
    ]);
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name).sort(), [
      "dtrain-run-2-a0-pg",
      "dtrain-run-a1-pg",
      "other",
    ]);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
