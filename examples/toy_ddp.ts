/**
 * The original harness written with dtrain's parts in a loop of its own:
 * DistributedDataParallel, a DistributedSampler with setEpoch, AdamW,
 * gradient clipping, a rank-0 checkpoint and a barrier at each epoch end,
 * and a clean shutdown. Start it with `./dtrain --nproc 2 examples/toy_ddp.ts`.
 */
import {
  AdamW,
  CheckpointManager,
  clipGradNorm,
  crossEntropy,
  DataLoader,
  DistributedDataParallel,
  DistributedSampler,
  getWorld,
  initProcessGroup,
  Linear,
  manualSeed,
  ReLU,
  scope,
  Sequential,
  tensorFile,
} from "dtrain";
import { syntheticDataset } from "./toy_classifier.ts";

const epochs = Number(Deno.args[0] ?? 3);
const world = getWorld();
const pg = initProcessGroup();
// As the PyTorch harness: torch.manual_seed(0), then the dataset, then the model draw from one generator.
const gen = manualSeed(0);
const dataset = syntheticDataset(10_000, 128, gen); // every rank holds the same data; the sampler splits it
const sampler = new DistributedSampler(dataset.length, {
  numReplicas: pg.size,
  rank: pg.rank,
  seed: 42,
});
const loader = new DataLoader(dataset, { batchSize: 64, sampler });
const model = new Sequential(new Linear(128, 256), new ReLU(), new Linear(256, 2));
const ddp = new DistributedDataParallel(model, pg); // checks the replicas match, broadcasts rank 0's weights
const optimizer = new AdamW(ddp.parameters(), { lr: 1e-3 });
// Synchronous saves, measured: this 134 KB checkpoint costs rank 0 ~5 ms a save on a quiet disk,
// less than the ~50 ms of CPU an asynchronous manager's worker thread takes to start (docs/LIBRARY.md,
// "Asynchronous saves"); with a bigger model or a busy disk, pass `async: true`.
const checkpoints = new CheckpointManager(`${world.runDir ?? "runs/toy_ddp"}/checkpoints`, {
  rank: pg.rank,
});

// scripts/bench_ddp.ts times this script side by side with PyTorch's: the same stamps as the peer.
const bench = Deno.env.get("DTRAIN_BENCH") === "1";
let step = 0, tFirst = 0, tSteady = 0, steadySamples = 0, cpuSteady = { main: 0, process: 0 };
// Tests compare runs step by step (e.g. 2 nodes against 1): every loss at full precision, at the end.
const stepLosses: number[] | null = Deno.env.get("DTRAIN_PRINT_LOSSES") === "1" ? [] : null;

/** CPU time (µs) of this thread and of the whole process (V8's compiler and GC threads too), from
 * the kernel's per-thread schedstat (time on a CPU, in ns). */
function cpuUs(): { main: number; process: number } {
  const onCpu = (path: string) => Number(Deno.readTextFileSync(path).split(" ")[0]) / 1000;
  let all = 0;
  for (const t of Deno.readDirSync("/proc/self/task")) {
    all += onCpu(`/proc/self/task/${t.name}/schedstat`);
  }
  return { main: onCpu("/proc/thread-self/schedstat"), process: all };
}

try {
  for (let epoch = 0; epoch < epochs; epoch++) {
    sampler.setEpoch(epoch); // without it every epoch repeats epoch 0's order
    const t0 = performance.now();
    let total = 0, batches = 0;
    for await (const { tensors: [x, y] } of loader) {
      const stepLoss = scope(() => {
        optimizer.zeroGrad();
        const loss = crossEntropy(ddp.forward(x!), y!);
        // each gradient bucket's allReduce starts as soon as it is complete; returns with every
        // bucket done: the gradients are the mean over ranks
        ddp.backward(loss);
        clipGradNorm(ddp.parameters(), 1.0);
        optimizer.step();
        return loss.item();
      });
      total += stepLoss;
      stepLosses?.push(stepLoss);
      if (++step === 1) tFirst = Date.now() / 1000;
      if (step === 10) [tSteady, cpuSteady] = [performance.now(), bench ? cpuUs() : cpuSteady];
      else if (step > 10) steadySamples += x!.shape[0]!;
      x!.dispose();
      y!.dispose();
      batches++;
    }
    if (pg.rank === 0) {
      console.log(
        `Epoch ${epoch}: avg loss ${(total / batches).toFixed(4)}, time ${
          ((performance.now() - t0) / 1000).toFixed(3)
        }s`,
      );
    }
    checkpoints.save({
      step: epoch,
      files: [tensorFile("model", ddp.stateDict())],
      state: { epoch },
    }); // rank 0 only
    pg.barrier("epoch-end");
  }
  if (stepLosses && pg.rank === 0) console.log(`LOSSES ${JSON.stringify(stepLosses)}`);
  if (bench) {
    const ss = (steadySamples * pg.size) / ((performance.now() - tSteady) / 1000);
    // This rank's CPU per steady step: what it asked of its core, whatever the machine's load.
    const cpu = cpuUs(), steps = step - 10;
    console.log(
      "BENCH " +
        JSON.stringify({
          rank: pg.rank,
          t_first_step: tFirst,
          ss_samples_per_s: ss,
          t_end: Date.now() / 1000,
          cpu_main_us_per_step: (cpu.main - cpuSteady.main) / steps,
          cpu_process_us_per_step: (cpu.process - cpuSteady.process) / steps,
        }),
    );
  }
} finally {
  pg.close();
}
