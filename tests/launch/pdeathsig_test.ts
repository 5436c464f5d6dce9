/**
 * PDEATHSIG fires when the parent *thread* exits. The launcher must spawn
 * ranks from a thread that lives as long as it does, or ranks would be
 * killed when an idle runtime thread retires (Deno's blocking pool lets idle
 * threads go after 10 s). A rank living past that must not be killed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { SCRIPTS, TestRun } from "./launch_helpers.ts";

Deno.test("ranks outlive the launcher's idle runtime threads (no spurious PDEATHSIG)", async () => {
  const t = new TestRun();
  try {
    // Measured: a launcher has 3 "tokio-runtime-w" threads 1.5 s after start
    // and none at 12 s, so threads do exit while these ranks run.
    const r = await t.finish(
      t.launch(["--nproc", "2", "--log-ranks", "all", join(SCRIPTS, "long_lived.ts"), "11.5"]),
      30_000,
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^\[r0\] rank 0 lived 11.5 s$/m);
    assert.match(r.stdout, /^\[r1\] rank 1 lived 11.5 s$/m);
  } finally {
    await t.cleanup();
  }
});
