/**
 * One DDP training step on the emulated GPU, counted: launched as
 * `dtrain --nproc 2 --device cuda-emu ddp_step_syncs.ts`. After warm-up
 * steps, a step (forward, a logged loss.item(), ddp.backward with the
 * buckets' reductions overlapping it and waited for on the GPU, the GradScaler's
 * inf/NaN check, clipping, AdamW) is measured twice over: the host waits
 * dtrain reports (tensor/host_sync.ts) and the waits the emulated device saw
 * (dt_emu_host_waits: every cudaStreamSynchronize, copy into pageable
 * memory, cudaFree...). Each rank prints one JSON line: the step's counts and
 * what the same explicit reads cost alone.
 */
import {
  AdamW,
  clipGradNorm,
  crossEntropy,
  DistributedDataParallel,
  fromArray,
  GradScaler,
  hostSyncCounts,
  initProcessGroup,
  Linear,
  manualSeed,
  ReLU,
  scope,
  Sequential,
  type Tensor,
  zeros,
} from "dtrain";
import { autocast } from "../../../amp/autocast.ts";
import { findLibrary } from "../../../ffi/native.ts";

const emulator = Deno.dlopen(findLibrary("libdtrain_cudart_emu.so"), {
  dt_emu_host_waits: { parameters: [], result: "u64" },
});
const deviceWaits = () => Number(emulator.symbols.dt_emu_host_waits());
const hostWaits = () => hostSyncCounts().total;

const pg = initProcessGroup();
manualSeed(0);
// three layers and a 1 KiB bucket cap: several buckets, so reductions start during backward
const model = new Sequential(
  new Linear(32, 64),
  new ReLU(),
  new Linear(64, 64),
  new ReLU(),
  new Linear(64, 4),
);
const ddp = new DistributedDataParallel(model, pg, { bucketCapMb: 1 / 1024 });
const opt = new AdamW(ddp.parameters(), { lr: 1e-3 });
const scaler = new GradScaler({ initScale: 1024 }, (flag: Tensor) => {
  pg.allReduce({ ptr: flag.ptr, count: 1, dtype: "f32", device: flag.device }, "max");
});
const x = fromArray(Float32Array.from({ length: 16 * 32 }, (_, i) => Math.sin(i + pg.rank)), [
  16,
  32,
]);
const y = fromArray(Int32Array.from({ length: 16 }, (_, i) => (i + pg.rank) % 4), [16]);

function step(): number {
  return scope(() => {
    const loss = autocast("f16", () => crossEntropy(ddp.forward(x), y));
    const value = loss.item(); // the logged loss: an explicit wait
    ddp.backward(scaler.scale(loss));
    scaler.unscale(opt); // the inf/NaN check: the step's other explicit wait
    clipGradNorm(ddp.parameters(), 1.0); // one reduction, one read of the norm
    scaler.step(opt);
    scaler.update();
    opt.zeroGrad();
    return value;
  });
}

for (let i = 0; i < 3; i++) step(); // warm-up: the allocator's cache fills
const h0 = hostWaits(), d0 = deviceWaits();
const loss = step();
const stepHost = hostWaits() - h0, stepDevice = deviceWaits() - d0;
const byWhat = hostSyncCounts().byWhat;

// What the explicit reads cost alone: a one-element tensor read back, and one clipping.
const one = zeros([1]);
const h1 = hostWaits(), d1 = deviceWaits();
one.item();
const itemHost = hostWaits() - h1, itemDevice = deviceWaits() - d1;
const grads = model.parameters().map((p) => {
  p.grad = zeros(p.shape).fill(0.5);
  return p;
});
const h2 = hostWaits(), d2 = deviceWaits();
clipGradNorm(grads, 1.0);
const clipHost = hostWaits() - h2, clipDevice = deviceWaits() - d2;

console.log(JSON.stringify({
  event: "syncs",
  rank: pg.rank,
  backend: pg.backend,
  buckets: ddp.buckets.length,
  loss,
  stepHost,
  stepDevice,
  itemHost,
  itemDevice,
  clipHost,
  clipDevice,
  byWhat,
}));
pg.close();
