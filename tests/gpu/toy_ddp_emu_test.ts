/**
 * The main job on the GPU path without a GPU: `dtrain --nproc 2 --device
 * cuda-emu examples/toy_ddp.ts` — every rank on its own emulated GPU, DDP
 * through the NCCL group with its reductions overlapping backward, clipping
 * and AdamW on the device, checkpoints from device tensors — reaches the CPU
 * run's epoch losses within 1e-3, says which GPU each rank got, and its run
 * record names the device and the nccl backend.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { HAVE_EMU } from "./_emu.ts";

const EPOCHS = 2; // the emulated device is slow: two epochs still check setEpoch's reshuffle

function epochLosses(stdout: string): number[] {
  return [...stdout.matchAll(/^\[r0\] Epoch (\d+): avg loss ([0-9.]+)/gm)].map((m) => Number(m[2]));
}

Deno.test({
  name: "toy_ddp on 2 emulated GPUs reaches the CPU run's epoch losses within 1e-3 over NCCL",
  ignore: !HAVE_EMU,
  async fn() {
    const t = new TestRun();
    try {
      const script = join(REPO, "examples/toy_ddp.ts");
      const cpuDir = join(t.dir, "cpu"), gpuDir = join(t.dir, "emu");
      const cpu = await t.finish(
        t.launch(["--nproc", "2", "--device", "cpu", "--run-dir", cpuDir, script, String(EPOCHS)]),
        120_000,
      );
      assert.equal(cpu.code, 0, cpu.stdout + cpu.stderr);
      const emu = await t.finish(
        t.launch([
          "--nproc",
          "2",
          "--device",
          "cuda-emu",
          "--run-dir",
          gpuDir,
          script,
          String(EPOCHS),
        ]),
        300_000,
      );
      assert.equal(emu.code, 0, emu.stdout + emu.stderr);
      const [a, b] = [epochLosses(cpu.stdout), epochLosses(emu.stdout)];
      assert.equal(a.length, EPOCHS, cpu.stdout);
      assert.equal(b.length, EPOCHS, emu.stdout);
      a.forEach((loss, i) => {
        assert.ok(Math.abs(loss - b[i]!) <= 1e-3, `epoch ${i}: CPU ${loss}, cuda-emu ${b[i]}`);
      });
      // the launcher said, once, which GPU each rank got
      const lines = emu.stderr.split("\n").filter((l) => l.includes("ranks compute on cuda-emu"));
      assert.equal(lines.length, 1, emu.stderr);
      assert.match(lines[0]!, /rank 0 → GPU 0, rank 1 → GPU 1/);
      const run = JSON.parse(Deno.readTextFileSync(join(gpuDir, "run.json")));
      assert.equal(run.world.device, "cuda-emu");
      assert.equal(run.world.backend, "nccl"); // as planned before the ranks started
      assert.deepEqual(run.attempts[0].processGroup, {
        backend: "nccl",
        worldSize: 2,
        device: "cuda-emu:0",
      });
      // run.json's versions are nativeVersions()'s answer for the emulated stack
      assert.match(run.versions.nccl, /^\d+\.\d+\.\d+ \(stand-in\)$/);
      assert.match(run.versions.cuda.runtime, / \(emulated\)$/);
      assert.equal(run.versions.cuda.driver, "none (emulated device)");
      assert.equal(run.versions.cuda.gpus.length, 2);
      const emuHash = new URL("../../build/libdtrain_cuda_emu.so.hash", import.meta.url);
      assert.equal(run.versions.native.cuda, Deno.readTextFileSync(emuHash).trim());
      const cpuRun = JSON.parse(Deno.readTextFileSync(join(cpuDir, "run.json")));
      assert.equal(cpuRun.attempts[0].processGroup.backend, "shm");
      // checkpoints written from device tensors
      const ckpts = [...Deno.readDirSync(join(gpuDir, "checkpoints"))].map((e) => e.name);
      assert.ok(ckpts.some((n) => n.startsWith("step-")), `checkpoints: ${ckpts}`);
    } finally {
      await t.cleanup();
    }
  },
});
