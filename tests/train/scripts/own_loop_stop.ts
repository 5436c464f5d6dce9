/**
 * Test rank script: a hand-written DDP loop that polls stopRequested(pg) at
 * every step boundary. It records its pid in $TEST_PID_DIR once it has
 * trained a few steps; when stopped it saves a checkpoint on rank 0 and
 * exits 0. It would run 1 000 000 steps otherwise.
 */
import {
  CheckpointManager,
  crossEntropy,
  DistributedDataParallel,
  fromArray,
  getWorld,
  initProcessGroup,
  Linear,
  manualSeed,
  scope,
  SGD,
  stopRequested,
  tensorFile,
} from "dtrain";

const pg = initProcessGroup();
manualSeed(0);
const model = new Linear(4, 2);
const ddp = new DistributedDataParallel(model, pg);
const opt = new SGD(model.parameters(), { lr: 1e-3 });
const checkpoints = new CheckpointManager(`${getWorld().runDir}/checkpoints`, { rank: pg.rank });
const x = fromArray(new Float32Array(32).fill(0.5), [8, 4]);
const y = fromArray(new Int32Array(8).fill(1), [8]);
for (let step = 1; step <= 1_000_000; step++) {
  scope(() => {
    opt.zeroGrad();
    ddp.backward(crossEntropy(ddp.forward(x), y));
    ddp.finishGradSync();
    opt.step();
  });
  if (step === 3) {
    Deno.writeTextFileSync(`${Deno.env.get("TEST_PID_DIR")}/rank-${pg.rank}.pid`, String(Deno.pid));
  }
  if (await stopRequested(pg)) {
    checkpoints.save({ step, files: [tensorFile("model", model.stateDict())], state: {} });
    await checkpoints.wait();
    console.log(`rank ${pg.rank} stopped on request at step ${step}`);
    break;
  }
}
pg.close();
