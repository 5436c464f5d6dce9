/**
 * Where a training step of the benchmark CNN (scripts/bench_train.ts's CNN
 * row: two conv + batch-norm + ReLU + max-pool blocks and a linear head,
 * batch 64 of 28x28, AdamW, one thread) spends its time: every kernel call
 * timed by this process's CPU time (steady on a shared machine, unlike the
 * wall clock), summed per kernel and shape, per step, largest first.
 *
 *   deno run -A scripts/profile_cnn.ts [--steps 20]
 */
import process from "node:process";
import { parseArgs } from "node:util";
import { buildNative } from "./build_native.ts";
import { cpuCalls } from "../ffi/cpu.ts";
import { backend } from "../tensor/backend.ts";
import { fromArray, scope } from "../tensor/tensor.ts";
import { AdamW } from "../optim/adamw.ts";
import { crossEntropy } from "../tensor/ops/nn.ts";
import { backward } from "../tensor/autograd.ts";
import { getDefaultGenerator, manualSeed } from "../nn/init.ts";
import { smallCnn } from "../parity/cnn.ts";

/** A label for a call: the symbol, and the shape of a GEMM or a layout copy. */
function label(name: string, a: unknown[]): string {
  if (name === "dt_gemm") {
    const t = `${a[1] ? "T" : "N"}${a[2] ? "T" : "N"}`;
    return `${name} ${t} ${a[3]}x${a[4]}x${a[5]}${a[14] === 1n ? "" : ` x${a[14]}`}`;
  }
  if (name === "dt_transpose_0213") return `${name} ${a.slice(2, 6).join("x")}`;
  return name;
}

/** CPU milliseconds used by this process since `from`. */
function cpuMs(from: NodeJS.CpuUsage): number {
  const u = process.cpuUsage(from);
  return (u.user + u.system) / 1000;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: { steps: { type: "string", default: "20" } },
  });
  const steps = Number(values.steps);
  buildNative({ quiet: true });
  cpuCalls().dt_set_num_threads(1);
  // every status-checked kernel call of the backend, timed while `on`
  const totals = new Map<string, { ms: number; calls: number }>();
  let on = false;
  const calls = backend().call as unknown as Record<string, (...a: unknown[]) => void>;
  for (const name of Object.keys(calls)) {
    const f = calls[name]!;
    Object.defineProperty(calls, name, {
      value: (...a: unknown[]) => {
        if (!on) return f(...a);
        const t = process.cpuUsage();
        f(...a);
        const ms = cpuMs(t), key = label(name, a);
        const e = totals.get(key) ?? { ms: 0, calls: 0 };
        e.ms += ms;
        e.calls++;
        totals.set(key, e);
      },
    });
  }
  manualSeed(0);
  const gen = getDefaultGenerator();
  const model = smallCnn(32, 64);
  const x = new Float32Array(64 * 28 * 28);
  gen.normal_(x, 0, 1);
  const xt = fromArray(x, [64, 1, 28, 28]).keep();
  const yt = fromArray(Int32Array.from({ length: 64 }, () => gen.randint(0, 10)), [64]).keep();
  const opt = new AdamW(model.parameters(), { lr: 3e-4 });
  const step = () =>
    scope(() => {
      opt.zeroGrad();
      const loss = crossEntropy(model.forward(xt), yt);
      backward(loss);
      opt.step();
      loss.item();
    });
  for (let i = 0; i < 3; i++) step();
  on = true;
  const c0 = process.cpuUsage(), t0 = performance.now();
  for (let i = 0; i < steps; i++) step();
  const wall = (performance.now() - t0) / steps, cpu = cpuMs(c0) / steps;
  on = false;
  console.log(`per step: ${cpu.toFixed(1)} ms CPU, ${wall.toFixed(1)} ms wall (${steps} steps)`);
  let kernels = 0;
  for (const [key, { ms, calls: n }] of [...totals].sort((a, b) => b[1].ms - a[1].ms)) {
    kernels += ms;
    console.log(
      `${(ms / steps).toFixed(2).padStart(7)} ms  ${String(n / steps).padStart(3)}x  ${key}`,
    );
  }
  console.log(
    `${(kernels / steps).toFixed(1).padStart(7)} ms  in kernels (the rest: TypeScript, timing)`,
  );
  model.dispose();
  xt.dispose();
  yt.dispose();
}
