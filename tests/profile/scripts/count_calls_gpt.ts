/**
 * A GPT-mini training loop for the DTRAIN_COUNT_CALLS test: `steps` steps
 * (forward under bf16 autocast when asked, backward, AdamW) on `device`, then
 * one JSON line with the last step's counts and its native calls by symbol.
 *
 *   DTRAIN_COUNT_CALLS=1 deno run -A count_calls_gpt.ts <device> <steps> <f32|bf16>
 */
import { setDevice } from "../../../tensor/backend.ts";
import { GPT } from "../../../nn/gpt.ts";
import { manualSeed } from "../../../nn/init.ts";
import { AdamW } from "../../../optim/adamw.ts";
import { autocast } from "../../../amp/autocast.ts";
import { backward } from "../../../tensor/autograd.ts";
import { fromArray, scope } from "../../../tensor/tensor.ts";
import { lastStep } from "../../../profile/call_count.ts";

const [device = "cpu", stepsArg = "3", precision = "f32"] = Deno.args;
setDevice(device as "cpu" | "cuda-emu");
manualSeed(0);
const cfg = { vocabSize: 96, blockSize: 16, nLayer: 3, nHead: 2, nEmbd: 32 };
const model = new GPT(cfg);
const opt = new AdamW(model.parameters(), { lr: 1e-3, weightDecay: 0.1 });
const B = 2, T = 16;
const idx = fromArray(Int32Array.from({ length: B * T }, (_, i) => (i * 7) % cfg.vocabSize), [B, T])
  .keep();
const tgt = fromArray(Int32Array.from({ length: B * T }, (_, i) => (i * 5 + 1) % cfg.vocabSize), [
  B,
  T,
])
  .keep();
for (let s = 0; s < Number(stepsArg); s++) {
  scope(() => {
    opt.zeroGrad();
    const loss = precision === "bf16"
      ? autocast("bf16", () => model.loss(idx, tgt))
      : model.loss(idx, tgt);
    backward(loss);
    opt.step();
    loss.item();
  });
}
if (lastStep === null) Deno.exit(0); // not counting
const last = lastStep;
console.log(JSON.stringify({
  total: last.total,
  layers: Object.fromEntries(last.layers),
  symbols: Object.fromEntries(last.symbols),
}));
