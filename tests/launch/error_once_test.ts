/**
 * An error is printed once, with its rank: when every rank fails with the
 * same error, the launcher's summary shows it (and its stack) for the first
 * rank and names the others that failed alike; the ranks do not print it
 * again themselves.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { SCRIPTS, TestRun } from "./launch_helpers.ts";

Deno.test("the same error on every rank is printed once, with the rank, and the others are named", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "2", join(SCRIPTS, "all_fail.ts")]), 120_000);
    assert.equal(r.code, 1, r.stderr);
    const all = r.stdout + r.stderr;
    assert.equal(
      all.split("the dataset is missing on purpose").length - 1,
      1,
      `printed more than once:\n${all}`,
    );
    assert.match(
      r.stderr,
      /rank ([01]) \(node 0, pid \d+\) failed first: exit code 1\n.*error: Error: the dataset is missing on purpose/,
    );
    // The other rank either failed too before the summary (then it is named, not printed again)
    // or was stopped first (then it never failed): both rank exits say which.
    if (/rank 0 exit code 1, rank 1 exit code 1/.test(r.stderr)) {
      assert.match(r.stderr, /rank\(s\) [01] failed with the same error/);
    }
  } finally {
    await t.cleanup();
  }
});
