/**
 * A rank whose script is over is not "killed" by a stop signal that arrives
 * while the runtime tears down. The runtime removes the script's listeners on
 * the way out, and the kernel's default action would end the process with the
 * signal; the launcher forwards a stop to each rank in turn, so a rank whose
 * loop already ended on a peer's stop request can get its own signal in that
 * window, and the summary then blamed "rank 1 killed by SIGTERM" for a rank
 * that had saved and exited 0. The rank bootstrap ignores stop signals from
 * its unload on; without that, this test's rank ends killed by SIGTERM.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { SCRIPTS, TestRun } from "./launch_helpers.ts";

Deno.test("stop signals after a rank's script ended leave its exit code 0", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(
      t.launch(["--nproc", "1", "--log-ranks", "all", join(SCRIPTS, "stop_then_exit.ts")]),
      120_000,
    );
    assert.match(r.stdout, /script done/, r.stderr);
    assert.match(r.stdout, /sent itself SIGTERM, SIGINT and SIGHUP after its end/, r.stderr);
    assert.doesNotMatch(r.stdout, /reached the script's listener/);
    assert.equal(r.code, 0, r.stderr);
  } finally {
    await t.cleanup();
  }
});
