/**
 * Native calls of one GPT-mini training step under bf16 autocast (forward
 * and loss under autocast, backward, AdamW step), counted by symbol, and the
 * bf16 loss against PyTorch's (the gpt_mini fixture). Prints one JSON line:
 * `deno run -A scripts/count_amp_calls.ts [steps] [device]` (cuda-emu counts
 * the GPU path; on a CPU with AVX512_BF16 the mixed bf16 GEMMs are CPU extras,
 * outside the kernel ABI, and not counted). A count, not a timing: it holds
 * on any machine.
 */
import { backend } from "../tensor/backend.ts";
import { useDevice } from "../tensor/device_choice.ts";
import { scope } from "../tensor/tensor.ts";
import { backward } from "../tensor/autograd.ts";
import { crossEntropy } from "../tensor/ops/nn.ts";
import { autocast } from "../amp/autocast.ts";
import { AdamW } from "../optim/adamw.ts";
import { defaultFixtureDir, FixtureDir, toTensor } from "../parity/fixtures.ts";
import { gptMiniFromFixture } from "../parity/gpt_mini.ts";

/** Calls per symbol while fn runs (every wrapper of backend().call swapped for a counting one). */
export function countNativeCalls(fn: () => void): Map<string, number> {
  const call = backend().call as unknown as Record<string, (...a: unknown[]) => unknown>;
  const saved = { ...call };
  const counts = new Map<string, number>();
  for (const [name, f] of Object.entries(saved)) {
    call[name] = (...a: unknown[]) => {
      counts.set(name, (counts.get(name) ?? 0) + 1);
      return f(...a);
    };
  }
  try {
    fn();
  } finally {
    Object.assign(call, saved);
  }
  return counts;
}

if (import.meta.main) {
  const steps = Number(Deno.args[0] ?? 3);
  useDevice(Deno.args[1] ?? "cpu");
  const fx = new FixtureDir(defaultFixtureDir());
  const meta = fx.json("gpt_mini.json");
  const io = fx.tensors("gpt_mini_io.safetensors");
  const model = gptMiniFromFixture(fx);
  const x = toTensor(io.get("x")!).keep(), y = toTensor(io.get("y")!).keep();
  const opt = new AdamW(model.parameters(), { lr: 1e-3, weightDecay: 0 });
  let loss0 = NaN;
  let last = new Map<string, number>();
  for (let s = 0; s < steps; s++) {
    last = countNativeCalls(() =>
      scope(() => {
        opt.zeroGrad();
        const loss = autocast("bf16", () => crossEntropy(model.forward(x), y, { ignoreIndex: -1 }));
        backward(loss);
        opt.step();
        if (s === 0) loss0 = loss.item();
      })
    );
  }
  const total = [...last.values()].reduce((a, b) => a + b, 0);
  const bySymbol = Object.fromEntries([...last].sort((a, b) => b[1] - a[1]));
  const ref = Number(meta.loss_autocast_bf16);
  console.log(JSON.stringify({
    step: steps,
    calls: total,
    casts: last.get("dt_cast") ?? 0,
    bf16Loss: loss0,
    torchBf16Loss: ref,
    relError: Math.abs(loss0 - ref) / Math.abs(ref),
    bySymbol,
  }));
}
