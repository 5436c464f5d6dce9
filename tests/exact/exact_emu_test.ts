/**
 * Exact mode on the emulated GPU (cuda-emu, the NCCL stand-in between
 * ranks): the toy MLP loop, the Trainer's CNN with SyncBatchNorm and GPT-mini
 * give one digest of every weight, buffer and optimizer-state tensor on 1 and
 * 2 emulated GPUs. (The GPU build's bits are its own: its optimizers and
 * bf16 kernels round differently from the CPU's, so the CPU is no reference
 * here.) GPT-mini runs 6 steps: the emulator is slow.
 */
import assert from "node:assert/strict";
import { HAVE_EMU, lastJsonOf } from "../gpu/_emu.ts";
import { launched } from "./_runs.ts";

async function emuDigests(script: string, n: number, env: Record<string, string>) {
  const r = await launched(script, n, { device: "cuda-emu", env, timeoutMs: 300_000 });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.equal(r.lines.length, n, r.stdout);
  return r.lines.map((l) => l.digest as string);
}

const CASES: { name: string; script: string; env: Record<string, string> }[] = [
  { name: "the toy MLP loop", script: "tests/exact/scripts/mlp_loop.ts", env: {} },
  {
    name: "the CNN with SyncBatchNorm",
    script: "tests/exact/scripts/exact_trainer.ts",
    env: { CASE: "cnn" },
  },
  {
    name: "GPT-mini (dropout, AdamW, clipping, accumulation, bf16), 6 steps",
    script: "tests/exact/scripts/exact_trainer.ts",
    env: { CASE: "gpt", STEPS: "6" },
  },
];

for (const c of CASES) {
  Deno.test({
    name: `exact mode on cuda-emu: ${c.name} has the same bits on 1 and 2 emulated GPUs`,
    ignore: !HAVE_EMU,
    async fn() {
      const [one] = await emuDigests(c.script, 1, c.env);
      assert.match(one!, /^[0-9a-f]{64}$/);
      for (const d of await emuDigests(c.script, 2, c.env)) assert.equal(d, one, "2 GPUs");
    },
  });
}

Deno.test({
  name:
    "cross-entropy's gradient of a row has the same bits at any place in the batch, on the CPU and on cuda-emu",
  ignore: !HAVE_EMU,
  async fn() {
    // Exact mode computes the loss over a rank's whole batch: a row's place in it changes with
    // the world size. The GPU kernel once chose its vector split by the row's own address.
    const none = { V3: 0, V6: 0, V8: 0 };
    assert.deepEqual(await lastJsonOf("tests/exact/scripts/ce_rows.ts", "cpu"), none);
    assert.deepEqual(await lastJsonOf("tests/exact/scripts/ce_rows.ts", "cuda-emu"), none);
  },
});
