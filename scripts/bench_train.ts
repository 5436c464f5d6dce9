/**
 * Single-process training steps/s (forward + backward + AdamW) of the toy
 * classifier (batch 64), GPT-mini (vocab 256, block 128, 4 layers, 4 heads,
 * width 128, batch 16) in f32 and with its forward under bf16 autocast
 * (gpt-bf16), and a small CNN (two conv + batch-norm + ReLU + max-pool blocks
 * and a linear head, batch 64 of 28x28), dtrain and PyTorch side by side in
 * one run, both on one thread, alternating trials; prints both and the ratio
 * of wall-clock steps/s, and the ratio of steps per CPU second (what each
 * process itself spent: steadier on a shared machine); with gpt and gpt-bf16,
 * also dtrain's bf16 against its own f32: the median of the ratios of the two
 * runs of each trial (a trial runs every model once), each ratio printed,
 * and the same ratio from f32 and bf16 steps alternated step by step on one
 * model (the quartiles of the per-pair ratios: steady where the trials, runs
 * seconds apart, swing with the shared host's load), and the limit the
 * products set on it: one more run of each with its
 * matrix products timed gives the f32 step's split into products and the
 * rest, and bf16 / f32 can reach at most f32 / (products / 2 + rest)
 * while bf16 only doubles the products' multiply-adds.
 *
 *   deno run -A scripts/bench_train.ts [--trials 3] [--models toy,gpt,gpt-bf16,cnn]
 */
import process from "node:process";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { buildNative } from "./build_native.ts";
import { cpuCalls } from "../ffi/cpu.ts";
import { fromArray, scope } from "../tensor/tensor.ts";
import { Linear, ReLU, Sequential } from "../nn/layers.ts";
import { GPT } from "../nn/gpt.ts";
import { AdamW } from "../optim/adamw.ts";
import { crossEntropy } from "../tensor/ops/nn.ts";
import { backward } from "../tensor/autograd.ts";
import { getDefaultGenerator, manualSeed } from "../nn/init.ts";
import { smallCnn } from "../parity/cnn.ts";
import { autocast } from "../amp/autocast.ts";
import { gemmKernel } from "../ffi/cpu_extras.ts";
import { peerCommandEnv, peerEnvLine, torchPeerLine } from "./peer_env.ts";
import { threadCpuClock } from "./bench_gemm.ts";
import { backend } from "../tensor/backend.ts";

type Model = "toy" | "gpt" | "gpt-bf16" | "cnn";

/** Steps per second of wall clock and of this process's CPU time. */
interface Rate {
  wall: number;
  cpu: number;
}

const PYTHON = "/usr/bin/python3";

/** Called just before and just after the timed steps of dtrainSteps (its warm-up steps are outside). */
interface TimedSpan {
  begin(): void;
  end(): void;
}

/** GPT-mini on one batch of random tokens, a training step with or without bf16 autocast. */
function gptTraining(): { step(low: "bf16" | null): void; dispose(): void } {
  const gen = getDefaultGenerator();
  const model = new GPT({ vocabSize: 256, blockSize: 128, nLayer: 4, nHead: 4, nEmbd: 128 });
  const tok = () =>
    fromArray(
      Int32Array.from({ length: 16 * 128 }, () => gen.randint(0, 256)),
      [16, 128],
    ).keep();
  const xt = tok(), yt = tok();
  const opt = new AdamW(model.parameters(), { lr: 3e-4 });
  return {
    step: (low) =>
      scope(() => {
        opt.zeroGrad();
        const loss = autocast(low, () => model.loss(xt, yt));
        backward(loss);
        opt.step();
        loss.item();
      }),
    dispose: () => (model.dispose(), xt.dispose(), yt.dispose()),
  };
}

/**
 * dtrain's GPT-mini f32 step time over its bf16 step time, the two alternated step by step on
 * one model (after warm-up steps of each), each step timed by this thread's CPU clock: per pair
 * of neighbouring steps, f32 / bf16; the quartiles of those ratios. A pair is ~0.15 s, so the
 * shared host's drift, which moved whole runs seconds apart by a third, mostly cancels in it.
 */
export function alternatedBf16Ratio(pairs: number): { median: number; q1: number; q3: number } {
  manualSeed(0);
  const clock = threadCpuClock();
  const gpt = gptTraining();
  const ratios: number[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      gpt.step(null);
      gpt.step("bf16");
    }
    for (let i = 0; i < pairs; i++) {
      const t0 = clock();
      gpt.step(null);
      const t1 = clock();
      gpt.step("bf16");
      ratios.push((t1 - t0) / (clock() - t1));
    }
  } finally {
    gpt.dispose();
  }
  const s = ratios.sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
  return { median: at(0.5), q1: at(0.25), q3: at(0.75) };
}

/** Times `steps` training steps of dtrain's model. */
function dtrainSteps(which: Model, steps: number, span?: TimedSpan): Rate {
  manualSeed(0);
  const gen = getDefaultGenerator();
  let stepFn: () => void;
  let dispose: () => void;
  if (which === "toy") {
    const model = new Sequential(
      new Linear(128, 256),
      new ReLU(),
      new Linear(256, 2),
    );
    const x = new Float32Array(64 * 128);
    gen.normal_(x, 0, 1);
    const xt = fromArray(x, [64, 128]).keep();
    const yt = fromArray(
      Int32Array.from({ length: 64 }, () => gen.randint(0, 2)),
      [64],
    ).keep();
    const opt = new AdamW(model.parameters(), { lr: 3e-4 });
    stepFn = () =>
      scope(() => {
        opt.zeroGrad();
        const loss = crossEntropy(model.forward(xt), yt);
        backward(loss);
        opt.step();
        loss.item();
      });
    dispose = () => (model.dispose(), xt.dispose(), yt.dispose());
  } else if (which === "cnn") {
    const model = smallCnn(32, 64);
    const x = new Float32Array(64 * 28 * 28);
    gen.normal_(x, 0, 1);
    const xt = fromArray(x, [64, 1, 28, 28]).keep();
    const yt = fromArray(Int32Array.from({ length: 64 }, () => gen.randint(0, 10)), [64]).keep();
    const opt = new AdamW(model.parameters(), { lr: 3e-4 });
    stepFn = () =>
      scope(() => {
        opt.zeroGrad();
        const loss = crossEntropy(model.forward(xt), yt);
        backward(loss);
        opt.step();
        loss.item();
      });
    dispose = () => (model.dispose(), xt.dispose(), yt.dispose());
  } else {
    const gpt = gptTraining();
    const low = which === "gpt-bf16" ? "bf16" : null;
    stepFn = () => gpt.step(low);
    dispose = gpt.dispose;
  }
  for (let i = 0; i < 3; i++) stepFn();
  span?.begin();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) stepFn();
  const s = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  span?.end();
  dispose();
  return { wall: steps / s, cpu: steps / ((c.user + c.system) / 1e6) };
}

/** A step's thread CPU milliseconds: in its matrix products, and in all. */
interface ProductSplit {
  products: number;
  step: number;
}

const PRODUCT_KERNELS = ["dt_gemm", "dt_gemm_ex"];

/**
 * The most that doubling the products' speed can give a step split as `s`, the rest unchanged:
 * step / (products / 2 + rest).
 */
export function doubledProductsLimit(s: ProductSplit): number {
  return s.step / (s.products / 2 + (s.step - s.products));
}

/**
 * Where one model's step spends this thread's CPU: an extra, untimed run of `steps` steps with
 * every matrix-product kernel call timed by the thread's CPU clock (a few hundred ns per call
 * against the tens of µs of GPT-mini's smallest product).
 */
export function productSplit(which: Model, steps: number): ProductSplit {
  const clock = threadCpuClock();
  const calls = cpuCalls() as unknown as Record<string, (...a: unknown[]) => unknown>;
  if ((backend().call as unknown) !== calls) throw new Error("the active backend is not the CPU");
  const plain = new Map(PRODUCT_KERNELS.map((n) => [n, calls[n]!]));
  let counting = false, products = 0, t0 = 0, step = 0;
  for (const [name, kernel] of plain) {
    calls[name] = (...args: unknown[]) => {
      if (!counting) return kernel(...args);
      const c0 = clock();
      const r = kernel(...args);
      products += clock() - c0;
      return r;
    };
  }
  try {
    dtrainSteps(which, steps, {
      begin: () => (counting = true, t0 = clock()),
      end: () => (step = clock() - t0, counting = false),
    });
  } finally {
    for (const [name, kernel] of plain) calls[name] = kernel;
  }
  return { products: (products / steps) * 1e3, step: (step / steps) * 1e3 };
}

/** Times the same work in PyTorch; null when torch is not importable. */
async function torchSteps(which: Model, steps: number): Promise<Rate | null> {
  const script = fileURLToPath(
    new URL("./peers/train_step.py", import.meta.url),
  );
  try {
    const out = await new Deno.Command(PYTHON, {
      args: [script, which, String(steps)],
      ...peerCommandEnv({ OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1" }),
      stderr: "piped",
    }).output();
    if (!out.success) {
      console.error(
        `PyTorch peer failed: ${new TextDecoder().decode(out.stderr).trim().split("\n").pop()}`,
      );
      return null;
    }
    const r = JSON.parse(new TextDecoder().decode(out.stdout));
    return { wall: r.steps_per_s, cpu: r.steps / r.cpu_seconds };
  } catch {
    return null;
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const LABEL: Record<Model, string> = {
  toy: "toy (batch 64)",
  gpt: "GPT-mini (batch 16x128)",
  "gpt-bf16": "GPT-mini, bf16 autocast",
  cnn: "CNN (batch 64, 28x28)",
};
const GOAL: Record<Model, string> = {
  toy: ">= 3x",
  gpt: ">= 1.0x",
  "gpt-bf16": "",
  cnn: ">= 1.5x",
};
const STEPS: Record<Model, number> = { toy: 2000, gpt: 20, "gpt-bf16": 20, cnn: 30 };
const ALTERNATED_PAIRS = 30;

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      trials: { type: "string", default: "3" },
      models: { type: "string", default: "toy,gpt,gpt-bf16,cnn" },
    },
  });
  buildNative({ quiet: true });
  cpuCalls().dt_set_num_threads(1);
  const trials = Number(values.trials);
  const rows: string[][] = [[
    "model",
    "dtrain steps/s",
    "PyTorch steps/s",
    "ratio",
    "ratio per CPU second",
    "goal",
  ]];
  const models = values.models!.split(",") as Model[];
  for (const which of models) {
    if (!(which in LABEL)) {
      throw new RangeError(`--models: unknown model "${which}" (toy, gpt, gpt-bf16, cnn)`);
    }
  }
  // Each trial runs every model once, dtrain then PyTorch, so that one model's trials are spread
  // over the whole run and gpt and gpt-bf16 run seconds apart: their ratio is taken per trial,
  // where the shared host's load is nearly the same for both (blocks of trials minutes apart
  // gave the bf16 / f32 ratio as 1.36x in one run and 1.77x in the next).
  const ours = new Map<Model, Rate[]>(models.map((m) => [m, []]));
  const theirs = new Map<Model, Rate[]>(models.map((m) => [m, []]));
  for (let t = 0; t < trials; t++) {
    for (const which of models) {
      ours.get(which)!.push(dtrainSteps(which, STEPS[which]));
      const p = await torchSteps(which, STEPS[which]);
      if (p !== null) theirs.get(which)!.push(p);
    }
  }
  for (const which of models) {
    const mine = ours.get(which)!, peer = theirs.get(which)!;
    const o = median(mine.map((r) => r.wall)), oc = median(mine.map((r) => r.cpu));
    const p = peer.length ? median(peer.map((r) => r.wall)) : NaN;
    const pc = peer.length ? median(peer.map((r) => r.cpu)) : NaN;
    rows.push([
      LABEL[which],
      o.toFixed(1),
      Number.isNaN(p) ? "n/a" : p.toFixed(1),
      Number.isNaN(p) ? "n/a" : (o / p).toFixed(2) + "x",
      Number.isNaN(pc) ? "n/a" : (oc / pc).toFixed(2) + "x",
      GOAL[which],
    ]);
  }
  const f32 = ours.get("gpt"), bf16 = ours.get("gpt-bf16");
  let pairs: { wall: number; cpu: number }[] = [];
  let split: { f32: ProductSplit; bf16: ProductSplit } | null = null;
  if (f32 && bf16) {
    pairs = f32.map((r, t) => ({ wall: bf16[t]!.wall / r.wall, cpu: bf16[t]!.cpu / r.cpu }));
    rows.push([
      "GPT-mini bf16 / dtrain f32",
      "",
      "",
      median(pairs.map((r) => r.wall)).toFixed(2) + "x",
      median(pairs.map((r) => r.cpu)).toFixed(2) + "x",
      ">= 1.5x",
    ]);
    const alt = alternatedBf16Ratio(ALTERNATED_PAIRS);
    rows.push([
      `  the same, f32 and bf16 steps alternated (${ALTERNATED_PAIRS} pairs, quartiles)`,
      "",
      "",
      "",
      `${alt.median.toFixed(2)}x (${alt.q1.toFixed(2)}-${alt.q3.toFixed(2)})`,
      ">= 1.5x",
    ]);
    // The limit the products set: bf16 doubles the multiply-adds of each instruction, so with the
    // products at twice their f32 speed and the rest of the step as f32 spends on it, bf16 / f32
    // could reach f32 / (products / 2 + rest), measured here on the f32 step.
    split = { f32: productSplit("gpt", STEPS.gpt), bf16: productSplit("gpt-bf16", STEPS.gpt) };
    rows.push([
      "  limit: products at 2x their f32 speed, the rest as f32",
      "",
      "",
      "",
      doubledProductsLimit(split.f32).toFixed(2) + "x",
      "",
    ]);
  }
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const r of rows) {
    console.log(r.map((c, i) => c.padEnd(w[i]!)).join("  "));
  }
  console.log(
    `(median of ${trials} alternating trials, one thread each; dtrain's bf16 GEMM kernel: ${
      gemmKernel("bf16")
    })`,
  );
  if (pairs.length > 0) {
    const list = (xs: number[]) => xs.map((x) => x.toFixed(2) + "x").join(", ");
    console.log(
      `GPT-mini bf16 / f32, trial by trial (the median of these above): wall ${
        list(pairs.map((r) => r.wall))
      }; per CPU second ${list(pairs.map((r) => r.cpu))}`,
    );
  }
  if (split) {
    const part = (x: ProductSplit) =>
      `${x.step.toFixed(1)} ms = products ${x.products.toFixed(1)} + rest ${
        (x.step - x.products).toFixed(1)
      }`;
    const { f32: a, bf16: b } = split;
    console.log(
      `GPT-mini step, thread CPU (one more run of each, products timed): f32 ${part(a)}; bf16 ${
        part(b)
      }; products ${
        (a.products / b.products).toFixed(2)
      }x faster in bf16 (goal >= 1.8x), the rest ${
        ((a.step - a.products) / (b.step - b.products)).toFixed(2)
      }x`,
    );
  }
  console.log(peerEnvLine());
  console.log(await torchPeerLine(PYTHON));
}
