/**
 * GPT-mini under bf16 autocast with bf16 activations end to end: the loss is
 * PyTorch's bf16 loss within docs/CORRECTNESS.md's bf16 tolerance (8e-3 relative), the
 * GELU (in c_fc's GEMM epilogue, its gradient on bf16) and the residual adds
 * (fused with the layer norms) take bf16 operands without casts, so forward and
 * backward make at most the measured 57 casts and 253 kernel calls on the GPU
 * path (76 and 272 before; a CPU with AVX512_BF16 makes fewer, its mixed GEMMs
 * being CPU extras); on the emulated GPU the same step gives the CPU's loss
 * and gradients.
 */
import assert from "node:assert/strict";
import { HAVE_EMU, lastJsonOf } from "../gpu/_emu.ts";
import { type Bf16Step, gptBf16Step, haveGptMini } from "./scripts/gpt_bf16_step.ts";

const HAVE_FIXTURE = haveGptMini();

let cpu: Bf16Step | undefined;
const cpuStep = () => (cpu ??= gptBf16Step());

Deno.test({
  name:
    "GPT-mini bf16 forward and backward on the CPU: PyTorch's bf16 loss, at most 57 casts and 253 calls",
  ignore: !HAVE_FIXTURE,
  fn() {
    const r = cpuStep();
    assert.ok(
      Math.abs(r.loss - r.torchLoss) <= 8e-3 * Math.abs(r.torchLoss),
      `${r.loss} vs ${r.torchLoss}`,
    );
    // forward, backward and the loss read (no optimizer), counted by symbol
    const total = Object.values(r.calls).reduce((a, b) => a + b, 0);
    const casts = r.calls.dt_cast ?? 0;
    assert.ok(casts <= 57, `${casts} casts: ${JSON.stringify(r.calls)}`);
    assert.ok(total <= 253, `${total} native calls: ${JSON.stringify(r.calls)}`);
    // the MLP's GELU is c_fc's GEMM epilogue; its gradient runs on bf16
    assert.equal(r.calls.dt_gelu_fwd_ex ?? 0, 0);
    assert.equal(r.calls.dt_gelu_bwd_ex, 2);
    assert.equal(r.calls.dt_gelu_fwd ?? 0, 0);
    for (const [name, g] of Object.entries(r.grads)) {
      assert.ok(g.every(Number.isFinite), `gradient of ${name} is not finite`);
    }
  },
});

Deno.test({
  name: "on the emulated GPU the GPT-mini bf16 step gives the CPU's loss and gradients",
  ignore: !HAVE_EMU || !HAVE_FIXTURE,
  async fn() {
    const emu: Bf16Step = await lastJsonOf("tests/amp/scripts/gpt_bf16_step.ts", "cuda-emu");
    const c = cpuStep();
    // row reductions (layer norm, softmax, cross-entropy) fold in another order on the device:
    // f32 rounding, a few ops deep, then bf16 roundings that may fall the other way
    assert.ok(Math.abs(emu.loss - c.loss) <= 1e-5 * Math.abs(c.loss), `${emu.loss} vs ${c.loss}`);
    for (const [name, g] of Object.entries(c.grads)) {
      const e = emu.grads[name]!;
      let d = 0, s = 0;
      g.forEach((v, i) => {
        d += (v - e[i]!) ** 2;
        s += v * v;
      });
      assert.ok(Math.sqrt(d) <= 1e-2 * Math.sqrt(s), `${name}: relative L2 ${Math.sqrt(d / s)}`);
    }
    // the GPU path's counts (the CPU's may be lower: its mixed bf16 GEMMs cast while packing)
    assert.equal(emu.calls.dt_gelu_fwd_ex ?? 0, 0);
    assert.equal(emu.calls.dt_gelu_bwd_ex, 2);
    const total = Object.values(emu.calls).reduce((a, b) => a + b, 0);
    assert.ok(emu.calls.dt_cast! <= 57, `${emu.calls.dt_cast} casts: ${JSON.stringify(emu.calls)}`);
    assert.ok(total <= 253, `${total} kernel calls: ${JSON.stringify(emu.calls)}`);
  },
});
