/**
 * One GPT-mini training step under bf16 autocast (the gpt_mini fixture's
 * model and batch): the loss, every parameter's gradient and the native calls
 * of the step by symbol. Run as a script (`gpt_bf16_step.ts <device>`) it
 * does this on that device in a process of its own and prints one JSON line.
 */
import { useDevice } from "../../../tensor/device_choice.ts";
import { scope } from "../../../tensor/tensor.ts";
import { backward } from "../../../tensor/autograd.ts";
import { crossEntropy } from "../../../tensor/ops/nn.ts";
import { autocast } from "../../../amp/autocast.ts";
import { defaultFixtureDir, FixtureDir, toTensor } from "../../../parity/fixtures.ts";
import { gptMiniFromFixture } from "../../../parity/gpt_mini.ts";
import { countNativeCalls } from "../../../scripts/count_amp_calls.ts";

/** Whether the gpt_mini fixture is there. */
export function haveGptMini(): boolean {
  return new FixtureDir(defaultFixtureDir()).has("gpt_mini.json");
}

export interface Bf16Step {
  loss: number;
  torchLoss: number;
  grads: Record<string, number[]>;
  calls: Record<string, number>;
}

/** The step on the current device. */
export function gptBf16Step(): Bf16Step {
  const fx = new FixtureDir(defaultFixtureDir());
  const io = fx.tensors("gpt_mini_io.safetensors");
  const model = gptMiniFromFixture(fx);
  const x = toTensor(io.get("x")!).keep(), y = toTensor(io.get("y")!).keep();
  let loss = NaN;
  const calls = countNativeCalls(() =>
    scope(() => {
      const l = autocast("bf16", () => crossEntropy(model.forward(x), y, { ignoreIndex: -1 }));
      backward(l);
      loss = l.item();
    })
  );
  const grads = Object.fromEntries(
    model.namedParameters().map(([n, p]) => [n, [...(p.grad!.toArray() as Float32Array)]]),
  );
  return {
    loss,
    torchLoss: Number(fx.json("gpt_mini.json").loss_autocast_bf16),
    grads,
    calls: Object.fromEntries(calls),
  };
}

if (import.meta.main) {
  useDevice(Deno.args[0] ?? "cpu");
  console.log(JSON.stringify(gptBf16Step()));
}
