/**
 * Where a GPT-mini training step's CPU time goes, on one rank: the step of
 * examples/char_gpt.ts (4 layers, 4 heads, 128 wide, vocabulary 256, batch
 * 16 × 128 tokens, DDP, AdamW 3e-4, one kernel thread) on random bytes, with
 * every native kernel call timed by this thread's CPU clock
 * (clock_gettime(CLOCK_THREAD_CPUTIME_ID)) and charged to a role: the
 * products by their part (forward NT, dX NN, dW TN), attention, softmax,
 * layer norm, GELU, cross-entropy, AdamW, clipping, … . What no kernel
 * claims is the JavaScript around them (autograd, DDP's buckets, the
 * allocator). Waits for the gradient reduction are timed twice: the thread's
 * CPU inside them (a spinning wait) and their wall time.
 *
 * Run it as the 2 ranks of the DDP benchmark (rank 0 prints):
 *
 *   ./dtrain --nproc 2 --threads 1 scripts/profile_gpt_step.ts [--steps 30] [--clip]
 *
 * or alone (a world of one: no reduction to wait for):
 *
 *   deno run -A scripts/profile_gpt_step.ts [--steps 30] [--clip] [--bf16]
 *
 * --bf16 runs the forward under bf16 autocast, as bench_train's gpt-bf16 does.
 * --by-shape splits the products by M x N x K and operand -> output dtype,
 * and the other roles by kernel symbol.
 *
 * The first 5 steps warm the JIT and are not counted. The table also gives the
 * step's GFLOP/s counted as bench_ddp does (6N + 6LCT per token). With
 * --peak G (the single-thread sgemm peak, bench_gemm's best shape, in GFLOP/s)
 * it adds what the step would reach with every product at that peak and the
 * rest as measured: the ceiling the parts outside the products leave.
 */
import { parseArgs } from "node:util";
import { backend } from "../tensor/backend.ts";
import { cpuCalls } from "../ffi/cpu.ts";
import { KERNEL_STREAMED } from "../ffi/symbols.ts";
import { scope } from "../tensor/tensor.ts";
import { GPT } from "../nn/gpt.ts";
import { manualSeed } from "../nn/init.ts";
import { AdamW } from "../optim/adamw.ts";
import { clipGradNorm } from "../optim/clip.ts";
import { DistributedDataParallel } from "../distributed/ddp.ts";
import { SingleProcessGroup } from "../distributed/backends/single_backend.ts";
import { initProcessGroup } from "../distributed/init_process_group.ts";
import { getWorld } from "../distributed/control/env.ts";
import type { ProcessGroup, Work } from "../distributed/process_group.ts";
import { CharWindows } from "../data/char_corpus.ts";
import { TorchGenerator } from "../random/torch_generator.ts";
import { threadCpuClock } from "./bench_gemm.ts";
import { autocast } from "../amp/autocast.ts";
import { DTYPE_CODE } from "../tensor/dtype.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    steps: { type: "string", default: "30" },
    warmup: { type: "string", default: "5" },
    clip: { type: "boolean", default: false },
    bf16: { type: "boolean", default: false },
    peak: { type: "string" },
    "by-shape": { type: "boolean", default: false },
  },
});
const steps = Number(values.steps), warmup = Number(values.warmup);
if (!(steps >= 1) || !(warmup >= 0)) {
  throw new RangeError(`--steps ${values.steps} / --warmup ${values.warmup}: need 1+ / 0+`);
}
const peak = values.peak === undefined ? null : Number(values.peak);
if (peak !== null && !(peak > 0)) {
  throw new RangeError(
    `--peak ${values.peak}: expected the sgemm peak in GFLOP/s, a positive number`,
  );
}
const BATCH = 16, BLOCK = 128, LAYERS = 4, HEADS = 4, EMBD = 128;

const cpu = threadCpuClock();
const wall = () => performance.now() / 1000;

/** A role's thread CPU and wall seconds, and its calls, summed over the counted steps. */
interface Tally {
  cpu: number;
  wall: number;
  calls: number;
  flops: number;
}
const tallies = new Map<string, Tally>();
let counting = false;
function charge(role: string, c: number, w: number, flops = 0): void {
  if (!counting) return;
  const t = tallies.get(role) ?? { cpu: 0, wall: 0, calls: 0, flops: 0 };
  t.cpu += c;
  t.wall += w;
  t.calls++;
  t.flops += flops;
  tallies.set(role, t);
}

const DTYPE_NAME = Object.fromEntries(Object.entries(DTYPE_CODE).map(([k, v]) => [v, k]));

/** The role of a kernel call: products by their transposes, others by their symbol. */
const GEMM_ROLE = ["dX (NN)", "forward (NT)", "dW (TN)", "TT"];
const ROLES: [RegExp, string][] = [
  [/attention/, "attention (fused kernel)"],
  [/softmax/, "softmax"],
  [/layer_?norm|layernorm/, "layer norm"],
  [/gelu/, "GELU"],
  [/cross_entropy|log_softmax|nll/, "cross-entropy"],
  [/adam/, "AdamW"],
  [/norm|clip/, "clipping (norms)"],
  [/gather|embedding|index|scatter/, "embedding gather/scatter"],
  [/reduce|sum/, "sums (bias grads, reductions)"],
  [/fill|zero|copy|memcpy|cast|convert|strided|layout/, "copies and fills"],
];
function roleOf(name: string, args: unknown[]): [string, number] {
  if (name === "dt_gemm" || name === "dt_gemm_ex") {
    // dt_gemm(dtype, ta, tb, M, N, K, …, batch at 15); dt_gemm_ex(adtype, cdtype, ta, tb, M, N, K, …)
    const o = name === "dt_gemm" ? 1 : 2;
    const ta = Number(args[o]), tb = Number(args[o + 1]);
    const [m, n, k] = [args[o + 2], args[o + 3], args[o + 4]].map(Number) as [
      number,
      number,
      number,
    ];
    const batch = name === "dt_gemm" ? Number(args[15] ?? 1) : 1;
    const flops = 2 * m * n * k * Math.max(1, batch);
    const shape = values["by-shape"]
      ? ` ${m}x${n}x${k} ${
        name === "dt_gemm"
          ? DTYPE_NAME[Number(args[0])]
          : `${DTYPE_NAME[Number(args[0])]}->${DTYPE_NAME[Number(args[1])]}`
      }`
      : "";
    const role = `GEMM ${GEMM_ROLE[ta * 2 + tb]}${shape}`;
    return [batch > 1 ? `${role}, batched` : role, flops];
  }
  for (const [re, role] of ROLES) {
    if (re.test(name)) return [values["by-shape"] ? `${role} (${name})` : role, 0];
  }
  return [`other kernels (${name})`, 0];
}

/** Every kernel of the active (CPU) backend, wrapped to charge its time to its role. */
function timeKernels(): void {
  const calls = cpuCalls() as unknown as Record<string, (...a: unknown[]) => void>;
  if ((backend().call as unknown) !== calls) throw new Error("the active backend is not the CPU");
  for (const name of KERNEL_STREAMED) {
    const plain = calls[name];
    if (typeof plain !== "function") continue;
    calls[name] = (...args: unknown[]) => {
      const c0 = cpu(), w0 = wall();
      plain(...args);
      const [role, flops] = roleOf(name, args);
      charge(role, cpu() - c0, wall() - w0, flops);
    };
  }
}

/** The process group's reductions, their start and their wait each timed. */
function timeCollectives(pg: ProcessGroup): void {
  const start = pg.allReduceStart.bind(pg);
  pg.allReduceStart = (...args: Parameters<ProcessGroup["allReduceStart"]>): Work => {
    const c0 = cpu(), w0 = wall();
    const work = start(...args);
    charge("all-reduce start", cpu() - c0, wall() - w0);
    return {
      wait() {
        const c1 = cpu(), w1 = wall();
        work.wait();
        charge("reduction wait", cpu() - c1, wall() - w1);
      },
    };
  };
}

cpuCalls().dt_set_num_threads(1);
const world = getWorld();
const pg: ProcessGroup = world.worldSize > 1
  ? initProcessGroup()
  : new SingleProcessGroup(60_000, "cpu");
manualSeed(1337);
const model = new GPT({
  vocabSize: 256,
  blockSize: BLOCK,
  nLayer: LAYERS,
  nHead: HEADS,
  nEmbd: EMBD,
  maskBuffer: false,
});
const ddp = new DistributedDataParallel(model, pg);
const optimizer = new AdamW(ddp.parameters(), { lr: 3e-4 });
const gen = new TorchGenerator(1000 + pg.rank);
const text = new Uint8Array(1 << 20);
for (let i = 0; i < text.length; i++) text[i] = (i * 2654435761 >>> 13) & 0x7f;
const windows = new CharWindows(text, BLOCK);
timeKernels();
timeCollectives(pg);

let stepCpu = 0, stepWall = 0;
try {
  for (let step = 1; step <= warmup + steps; step++) {
    counting = step > warmup;
    const c0 = cpu(), w0 = wall();
    scope(() => {
      const [x, y] = windows.getBatch(windows.randomOffsets(gen, BATCH));
      optimizer.zeroGrad();
      const l = autocast(values.bf16 ? "bf16" : null, () => model.loss(x!, y!));
      ddp.backward(l);
      if (values.clip) clipGradNorm(ddp.parameters(), 1.0);
      optimizer.step();
      return l.item();
    });
    if (counting) {
      stepCpu += cpu() - c0;
      stepWall += wall() - w0;
    }
  }
} finally {
  pg.close();
}

if (pg.rank === 0) {
  const params = model.parameters().reduce((n, p) => n + p.numel, 0);
  const flopsPerToken = 6 * params + 6 * LAYERS * EMBD * BLOCK;
  const tokens = BATCH * BLOCK;
  const ms = (s: number) => (1000 * s / steps).toFixed(2);
  const pct = (s: number) => `${(100 * s / stepCpu).toFixed(1)}%`;
  const rows = [[
    "part of the step",
    "CPU ms/step",
    "share",
    "wall ms/step",
    "calls/step",
    "GFLOP/s",
  ]];
  let claimed = 0;
  for (const [role, t] of [...tallies].sort((a, b) => b[1].cpu - a[1].cpu)) {
    claimed += t.cpu;
    rows.push([
      role,
      ms(t.cpu),
      pct(t.cpu),
      ms(t.wall),
      (t.calls / steps).toFixed(0),
      t.flops ? (t.flops / t.cpu / 1e9).toFixed(1) : "",
    ]);
  }
  rows.push([
    "JavaScript and the rest (no kernel)",
    ms(stepCpu - claimed),
    pct(stepCpu - claimed),
    "",
    "",
    "",
  ]);
  rows.push(["whole step", ms(stepCpu), "100%", ms(stepWall), "", ""]);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const [load1, load5] = Deno.loadavg();
  console.log(
    `GPT-mini step, rank 0 of ${pg.size}, ${BATCH}x${BLOCK} tokens, ${params} parameters, ` +
      `steps ${warmup + 1}..${warmup + steps}${values.clip ? ", clipping" : ""}${
        values.bf16 ? ", bf16 autocast" : ""
      }; load ${load1} ${load5}`,
  );
  for (const r of rows) {
    console.log(r.map((c, i) => i ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)).join("  "));
  }
  const gemm = [...tallies].filter(([r]) => r.startsWith("GEMM"));
  const gemmCpu = gemm.reduce((s, [, t]) => s + t.cpu, 0);
  const gemmFlops = gemm.reduce((s, [, t]) => s + t.flops, 0);
  console.log(
    `6N + 6LCT: ${(flopsPerToken * tokens / 1e9).toFixed(2)} GFLOP per step: ` +
      `${(flopsPerToken * tokens * steps / stepCpu / 1e9).toFixed(1)} GFLOP/s per CPU second, ` +
      `${(flopsPerToken * tokens * steps / stepWall / 1e9).toFixed(1)} per wall second; ` +
      `the products alone ${(gemmFlops / gemmCpu / 1e9).toFixed(1)} GFLOP/s over ${
        (100 * gemmCpu / stepCpu).toFixed(0)
      }% of the CPU`,
  );
  if (peak !== null) {
    const stepAtPeak = stepCpu - gemmCpu + gemmFlops / (peak * 1e9);
    const rate = flopsPerToken * tokens * steps / stepAtPeak / 1e9;
    console.log(
      `with every product at the ${peak} GFLOP/s peak and the rest as measured: ` +
        `${(1000 * stepAtPeak / steps).toFixed(1)} CPU ms/step, ${rate.toFixed(1)} GFLOP/s = ` +
        `${(100 * rate / peak).toFixed(0)}% of the peak; the products now run at ` +
        `${(100 * gemmFlops / gemmCpu / 1e9 / peak).toFixed(0)}% of it`,
    );
  }
}
