/**
 * CPU cost of the toy DDP step's parts in one process (a world of one, one
 * kernel thread): the bare step of bench_train, then the same with the
 * DataLoader, with DDP's forward/backward/finishGradSync, and with clipping,
 * each layer alternating with the others for several rounds, as CPU µs per step.
 *
 *   deno run -A scripts/profile_ddp_step.ts [--steps 2000] [--rounds 5]
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
import { SingleProcessGroup } from "../distributed/single_process_group.ts";
import { syntheticDataset } from "../examples/toy_classifier.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: { steps: { type: "string", default: "2000" }, rounds: { type: "string", default: "5" } },
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
    ddp.finishGradSync();
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
