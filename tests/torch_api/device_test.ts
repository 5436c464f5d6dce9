/**
 * The optimizers, schedulers, losses and everyday ops (comparisons, the new optimizers, the losses with
 * options) against torch's values on the CPU and, where g++ builds it, on
 * the emulated GPU, each in a process of its own
 * (tests/torch_api/scripts/device_checks.ts).
 */
import assert from "node:assert/strict";
import { HAVE_EMU, lastJsonOf } from "../gpu/_emu.ts";

const SCRIPT = "tests/torch_api/scripts/device_checks.ts";

Deno.test("the PyTorch-API pieces pass their torch checks on the CPU", async () => {
  const r = await lastJsonOf(SCRIPT, "cpu");
  assert.deepEqual(r, { ok: true, device: "cpu", optimizers: 5, losses: 16 });
});

Deno.test({
  name: "the PyTorch-API pieces pass their torch checks on the emulated GPU",
  ignore: !HAVE_EMU,
  async fn() {
    const r = await lastJsonOf(SCRIPT, "cuda-emu");
    assert.equal(r.ok, true);
    assert.match(r.device, /^cuda/);
    assert.deepEqual([r.optimizers, r.losses], [5, 16]);
  },
});
