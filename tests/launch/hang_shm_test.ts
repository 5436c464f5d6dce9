/**
 * The hang diagnosis with the real shared-memory process group: ranks blocked in pg.barrier(), a
 * synchronous native wait, still show up in the launcher's table (their state left before they
 * blocked). Skipped when the shared-memory library is not built.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, SCRIPTS, TestRun } from "./launch_helpers.ts";

const shmLibrary = join(REPO, "build/libdtrain_shm.so");
Deno.test({
  name: "the hang diagnosis sees ranks blocked in the shared-memory process group's barrier",
  ignore: (() => {
    try {
      return !Deno.statSync(shmLibrary).isFile;
    } catch {
      return true;
    }
  })(),
  fn: async () => {
    const t = new TestRun();
    try {
      const data = join(t.dir, "dataset");
      Deno.mkdirSync(data);
      for (let i = 0; i < 2000; i++) Deno.writeFileSync(join(data, `f${i}`), new Uint8Array(1));
      const r = await t.finish(
        t.launch([
          "--nproc",
          "3",
          "--hang-warn",
          "1",
          join(SCRIPTS, "pg_scan_hang.ts"),
          data,
          "2.5",
        ]),
      );
      assert.equal(r.code, 0, r.stderr);
      assert.match(
        r.stderr,
        /hang: ranks 1,2 wait at barrier "after-scan" \(seq \d+\) for [\d.]+ s; rank 0 is elsewhere: phase "scan dataset"/,
      );
    } finally {
      await t.cleanup();
    }
  },
});
