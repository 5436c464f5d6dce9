/**
 * No host synchronisation inside a DDP step on the emulated GPU other than
 * the explicit ones: a logged loss.item(), the GradScaler's inf/NaN check and
 * the clipping's one read of the norm. Counted twice over in a 2-rank
 * `dtrain --device cuda-emu` run: the waits dtrain reports, and every wait
 * the emulated device itself saw, which must be exactly what those three
 * reads cost alone (tests/gpu/scripts/ddp_step_syncs.ts).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { HAVE_EMU, rankJson } from "./_emu.ts";

Deno.test({
  name:
    "a DDP step on cuda-emu waits for the device only for its explicit reads (3), on every rank",
  ignore: !HAVE_EMU,
  async fn() {
    const t = new TestRun();
    try {
      const l = t.launch([
        "--nproc",
        "2",
        "--device",
        "cuda-emu",
        "--log-ranks",
        "all",
        join(REPO, "tests/gpu/scripts/ddp_step_syncs.ts"),
      ]);
      const r = await t.finish(l, 120_000);
      assert.equal(r.code, 0, r.stdout + r.stderr);
      for (const rank of [0, 1]) {
        const [s] = rankJson(r.stdout, rank);
        assert.ok(s, `rank ${rank} printed nothing: ${r.stdout}`);
        assert.equal(s.backend, "nccl");
        assert.ok(Number(s.buckets) > 1, "the step should have several gradient buckets");
        assert.equal(s.stepHost, 3, `host waits in the step: ${JSON.stringify(s.byWhat)}`);
        assert.equal(s.itemHost, 1);
        assert.equal(s.clipHost, 1);
        // the device saw exactly the waits of two reads of a tensor and one clipping
        assert.equal(
          s.stepDevice,
          2 * Number(s.itemDevice) + Number(s.clipDevice),
          `the emulated device saw ${s.stepDevice} waits in the step; reads cost ${s.itemDevice} ` +
            `each and clipping ${s.clipDevice}`,
        );
        assert.ok(Number(s.itemDevice) > 0, "the emulator counts the waits of a read");
      }
    } finally {
      await t.cleanup();
    }
  },
});
