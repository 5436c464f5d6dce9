/**
 * CPU cost of the toy DDP step's parts in one process (a world of one, one
 * kernel thread): the bare step of bench_train, then the same with the
 * DataLoader, with DDP's forward and synced backward, and with clipping,
 * each layer alternating with the others for several rounds, as CPU µs per step
 * once the JIT is warm.
 *
 * --cold instead runs what one rank of the 2-rank toy DDP run does (3 epochs
 * of its half of the data, the same step, from a fresh process) and prints
 * the CPU per step over steps 11..end, the benchmark's steady window, which
 * is the JIT's warm-up: the main thread's (from /proc/thread-self/schedstat)
 * and the whole process's (V8's compiler and GC threads too), plus a hash of
 * every loss (changes to the machinery must leave it alone).
 *
 *   deno run -A scripts/profile_ddp_step.ts [--steps 2000] [--rounds 5]
 *   deno run -A scripts/profile_ddp_step.ts --cold [--epochs 3]
 */
import process from "node:process";
import { parseArgs } from "node:util";
import { cpuCalls } from "../ffi/cpu.ts";
import { scope } from "../tensor/tensor.ts";
import { Linear, ReLU, Sequential } from "../nn/layers.ts";
import { AdamW } from "../optim/adamw.ts";
import { clipGradNorm } from "../optim/clip.ts";
import { crossEntropy } from "../tensor/ops/nn.ts";
import { backward } from "../tensor/autograd.ts";
import { manualSeed } from "../nn/init.ts";
import { DataLoader } from "../data/dataloader.ts";
import { DistributedSampler } from "../data/distributed_sampler.ts";
import { DistributedDataParallel } from "../distributed/ddp.ts";
import { SingleProcessGroup } from "../distributed/backends/single_backend.ts";
import { syntheticDataset } from "../examples/toy_classifier.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    steps: { type: "string", default: "2000" },
    rounds: { type: "string", default: "5" },
    cold: { type: "boolean", default: false },
    epochs: { type: "string", default: "3" },
  },
});
const steps = Number(values.steps), rounds = Number(values.rounds);
cpuCalls().dt_set_num_threads(1);

const gen = manualSeed(0);
const dataset = syntheticDataset(10_000, 128, gen);
const toy = () => new Sequential(new Linear(128, 256), new ReLU(), new Linear(256, 2));
const model = toy(), wrapped = toy(); // DDP checks every backward pass through its model
const opt = new AdamW(model.parameters(), { lr: 1e-3 });
const ddp = new DistributedDataParallel(wrapped, new SingleProcessGroup(60_000, "cpu"));
const ddpOpt = new AdamW(ddp.parameters(), { lr: 1e-3 });
const sampler = new DistributedSampler(dataset.length, { numReplicas: 1, rank: 0, seed: 42 });
const loader = new DataLoader(dataset, { batchSize: 64, sampler });
const [x0, y0] = dataset.getBatch(Int32Array.from({ length: 64 }, (_, i) => i)).map((t) =>
  t.keep()
);

/** This thread's CPU time in µs (the kernel's schedstat: time on a CPU, in ns). */
function threadCpuUs(): number {
  return Number(Deno.readTextFileSync("/proc/thread-self/schedstat").split(" ")[0]) / 1000;
}

if (values.cold) {
  // rank 0 of 2's share of the toy DDP run: the same sampler split, loader, model and step
  const share = new DistributedSampler(dataset.length, { numReplicas: 2, rank: 0, seed: 42 });
  const coldLoader = new DataLoader(dataset, { batchSize: 64, sampler: share });
  const losses: number[] = [];
  let n = 0, c0 = process.cpuUsage(), m0 = 0, t0 = 0;
  for (let epoch = 0; epoch < Number(values.epochs); epoch++) {
    share.setEpoch(epoch);
    for await (const { tensors: [x, y] } of coldLoader) {
      losses.push(step("ddp+clip", x!, y!));
      x!.dispose();
      y!.dispose();
      if (++n === 10) [c0, m0, t0] = [process.cpuUsage(), threadCpuUs(), performance.now()];
    }
  }
  const c = process.cpuUsage(c0), main = threadCpuUs() - m0, wall = performance.now() - t0;
  let hash = 0;
  for (const b of new Uint8Array(new Float64Array(losses).buffer)) hash = (hash * 31 + b) >>> 0;
  const per = (us: number) => (us / (n - 10)).toFixed(0);
  console.log(
    `steps 11..${n}: main thread CPU ${per(main)} µs/step, process CPU ${
      per(c.user + c.system)
    } µs/step, wall ${per(wall * 1000)} µs/step; losses hash ${hash.toString(16)}`,
  );
  Deno.exit(0);
}

type Layer = "bare" | "loader" | "ddp" | "ddp+clip";

/** One step of `layer` on (x, y). */
function step(layer: Layer, x: typeof x0, y: typeof y0): number {
  return scope(() => {
    if (layer === "bare" || layer === "loader") {
      opt.zeroGrad();
      const loss = crossEntropy(model.forward(x!), y!);
      backward(loss);
      opt.step();
      return loss.item();
    }
    ddpOpt.zeroGrad();
    const loss = crossEntropy(ddp.forward(x!), y!);
    ddp.backward(loss);
    if (layer === "ddp+clip") clipGradNorm(ddp.parameters(), 1.0);
    ddpOpt.step();
    return loss.item();
  });
}

let epoch = 0;
async function run(layer: Layer, n: number): Promise<void> {
  if (layer === "bare") {
    for (let i = 0; i < n; i++) step(layer, x0, y0);
    return;
  }
  let done = 0;
  while (done < n) {
    sampler.setEpoch(epoch++);
    for await (const { tensors: [x, y] } of loader) {
      step(layer, x!, y!);
      x!.dispose();
      y!.dispose();
      if (++done === n) break;
    }
  }
}

const layers: Layer[] = ["bare", "loader", "ddp", "ddp+clip"];
const cpu = new Map<Layer, number[]>(layers.map((l) => [l, []]));
for (const l of layers) await run(l, 300); // warm-up
for (let r = 0; r < rounds; r++) {
  for (const l of layers) {
    const c0 = process.cpuUsage();
    await run(l, steps);
    const c = process.cpuUsage(c0);
    cpu.get(l)!.push((c.user + c.system) / steps);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const l of layers) {
  const xs = cpu.get(l)!;
  console.log(
    `${l.padEnd(9)} CPU µs/step median ${median(xs).toFixed(1)}  (${
      xs.map((v) => v.toFixed(0)).join(" ")
    })`,
  );
}
