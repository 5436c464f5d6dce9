/**
 * A small training loop of the library's parts (generated data, DataLoader,
 * DDP when launched on several ranks, AdamW, clipping, a checkpoint) for the
 * DTRAIN_PROFILE tests: `profiled_loop.ts <steps> <checkpoint dir>`.
 */
import {
  AdamW,
  backward,
  CheckpointManager,
  clipGradNorm,
  crossEntropy,
  DataLoader,
  DistributedDataParallel,
  DistributedSampler,
  initProcessGroup,
  Linear,
  manualSeed,
  ReLU,
  scope,
  Sequential,
  TensorDataset,
  tensorFile,
} from "../../../mod.ts";

const steps = Number(Deno.args[0] ?? 20);
const dir = Deno.args[1]!;
const pg = initProcessGroup();
const gen = manualSeed(0);
const n = 64 * steps * pg.size;
const x = gen.normal_(new Float32Array(n * 16), 0, 1);
const y = Int32Array.from({ length: n }, () => gen.randint(0, 2));
const data = new TensorDataset({ data: x, sampleShape: [16] }, { data: y, sampleShape: [] });
const sampler = new DistributedSampler(n, { numReplicas: pg.size, rank: pg.rank, seed: 1 });
const loader = new DataLoader(data, { batchSize: 64, sampler });
const model = new Sequential(new Linear(16, 32), new ReLU(), new Linear(32, 2));
const ddp = pg.size > 1 ? new DistributedDataParallel(model, pg) : null;
const opt = new AdamW(model.parameters(), { lr: 1e-3 });
for await (const { tensors: [xb, yb] } of loader) {
  scope(() => {
    opt.zeroGrad();
    const loss = crossEntropy((ddp ?? model).forward(xb!), yb!);
    if (ddp) {
      ddp.backward(loss);
    } else backward(loss);
    clipGradNorm(model.parameters(), 1.0);
    opt.step();
  });
  xb!.dispose();
  yb!.dispose();
}
new CheckpointManager(dir, { rank: pg.rank }).save({
  step: steps,
  files: [tensorFile("model", model.stateDict())],
  state: {},
});
pg.barrier("end");
pg.close();
