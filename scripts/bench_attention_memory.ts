/**
 * Peak memory and step time of GPT-mini (vocab 256, 4 layers, 4 heads, width
 * 128) training on the CPU at growing sequence lengths, with the fused
 * attention (no T x T matrix) and with the composed one (scores, masked
 * softmax, product: nanoGPT's manual path), side by side. Each measurement
 * runs in a fresh process, so peaks do not mix; the peak is the caching
 * allocator's highest count of live tensor bytes during one training step.
 *
 *   deno run -A scripts/bench_attention_memory.ts [--seqs 256,512,1024] [--batch 4] [--steps 2]
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { buildNative } from "./build_native.ts";
import { cpuCalls } from "../ffi/cpu.ts";
import { GPT } from "../nn/gpt.ts";
import { manualSeed } from "../nn/init.ts";
import { AdamW } from "../optim/adamw.ts";
import { backward } from "../tensor/autograd.ts";
import { fromArray, scope } from "../tensor/tensor.ts";
import { memoryStats } from "../tensor/allocator.ts";

interface Measured {
  attention: string;
  T: number;
  B: number;
  peakBytes: number;
  stepMs: number;
  loss: number;
}

/** One process's measurement: a warm-up step, then `steps` timed ones. */
function measure(attention: "fused" | "composed", T: number, B: number, steps: number): Measured {
  cpuCalls().dt_set_num_threads(1);
  manualSeed(0);
  const model = new GPT({
    vocabSize: 256,
    blockSize: T,
    nLayer: 4,
    nHead: 4,
    nEmbd: 128,
    maskBuffer: false,
    attention,
  });
  const opt = new AdamW(model.parameters(), { lr: 3e-4 });
  let seed = 7;
  const tok = () =>
    fromArray(
      Int32Array.from({ length: B * T }, () => (seed = (seed * 1103515245 + 12345) >>> 0) % 256),
      [B, T],
    ).keep();
  const x = tok(), y = tok();
  let loss = 0;
  const step = () =>
    scope(() => {
      opt.zeroGrad();
      const l = model.loss(x, y);
      backward(l);
      opt.step();
      loss = l.item();
    });
  step();
  const times: number[] = [];
  for (let i = 0; i < steps; i++) {
    const t0 = performance.now();
    step();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return {
    attention,
    T,
    B,
    peakBytes: memoryStats().peakLiveBytes,
    stepMs: times[Math.floor(times.length / 2)]!,
    loss,
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      seqs: { type: "string", default: "256,512,1024" },
      batch: { type: "string", default: "4" },
      steps: { type: "string", default: "2" },
      child: { type: "string" },
    },
  });
  const B = Number(values.batch), steps = Number(values.steps);
  if (values.child) {
    const [attention, T] = values.child.split(":") as ["fused" | "composed", string];
    console.log(JSON.stringify(measure(attention, Number(T), B, steps)));
    Deno.exit(0);
  }
  buildNative({ quiet: true });
  const self = fileURLToPath(import.meta.url);
  const rows: string[][] = [[
    "T",
    "fused peak MiB",
    "composed peak MiB",
    "saved MiB",
    "B*H*T^2 f32 MiB",
    "fused ms/step",
    "composed ms/step",
    "loss fused / composed",
  ]];
  for (const T of values.seqs!.split(",").map(Number)) {
    const run = async (attention: string): Promise<Measured> => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          self,
          "--child",
          `${attention}:${T}`,
          "--batch",
          `${B}`,
          "--steps",
          `${steps}`,
        ],
        stderr: "inherit",
      }).output();
      if (!out.success) throw new Error(`the ${attention} measurement at T=${T} failed`);
      return JSON.parse(new TextDecoder().decode(out.stdout));
    };
    const f = await run("fused"), c = await run("composed");
    const mib = (b: number) => (b / 2 ** 20).toFixed(1);
    rows.push([
      `${T}`,
      mib(f.peakBytes),
      mib(c.peakBytes),
      mib(c.peakBytes - f.peakBytes),
      mib(B * 4 * T * T * 4),
      f.stepMs.toFixed(0),
      c.stepMs.toFixed(0),
      `${f.loss.toFixed(5)} / ${c.loss.toFixed(5)}`,
    ]);
  }
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const r of rows) console.log(r.map((c, i) => c.padEnd(w[i]!)).join("  "));
  console.log(
    `(GPT-mini, batch ${B}, one thread, peak = most live tensor bytes in a training step; median of ${steps} steps)`,
  );
}
