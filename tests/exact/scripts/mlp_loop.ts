/**
 * A loop of one's own in exact mode: the toy MLP under DDP, AdamW, 50 steps
 * of a global batch of 32, each rank taking torch's DistributedSampler rows
 * (global position rank + W·j of the step's block). Prints one JSON line:
 * the digest of every weight and optimizer-state tensor. EXACT=0 turns exact
 * mode off (the control: then the digests differ between world sizes).
 * PEEK=1 puts a BatchNorm1d and a Dropout into the MLP and, before each
 * step, runs the model on the step's rows under noGrad still in training
 * mode (a loss looked at without calling eval()): that forward moves the
 * dropout stream and the running statistics too, so it must be sharded.
 * BACKWARD=plain starts each pass with backward(loss, { onLeafGrad:
 * ddp.gradReady }) and ddp.finishGradSync() instead of ddp.backward (no 1/W
 * seed: the root takes 1/W); BACKWARD=mixed accumulates a first half-batch
 * that way under noSync and the second through ddp.backward (refused).
 */
import {
  AdamW,
  backward,
  BatchNorm1d,
  crossEntropy,
  DistributedDataParallel,
  Dropout,
  fromArray,
  initProcessGroup,
  Linear,
  manualSeed,
  noGrad,
  ReLU,
  scope,
  Sequential,
} from "dtrain";
import { stateDigest } from "./_digest.ts";

const STEPS = 50, B = 32, IN = 8, CLASSES = 4;
const pg = initProcessGroup();
const W = pg.size, rank = pg.rank;
manualSeed(0);
const peek = Deno.env.get("PEEK") === "1";
const model = peek
  ? new Sequential(
    new Linear(IN, 32),
    new BatchNorm1d(32),
    new ReLU(),
    new Dropout(0.25),
    new Linear(32, CLASSES),
  )
  : new Sequential(new Linear(IN, 32), new ReLU(), new Linear(32, CLASSES));
const exact = Deno.env.get("EXACT") !== "0";
const how = Deno.env.get("BACKWARD") ?? "ddp";
const ddp = new DistributedDataParallel(model, pg, { exact: exact ? 8 : false });
const opt = new AdamW(ddp.parameters(), { lr: 1e-2 });

/** Sample p of the data: features from a fixed hash of p, a label the features decide. */
function sample(p: number): { x: number[]; y: number } {
  let s = (p * 2654435761) >>> 0;
  const x = Array.from({ length: IN }, () => {
    s = (s * 1103515245 + 12345) >>> 0;
    return (s / 2 ** 32) * 2 - 1;
  });
  return { x, y: (x[0]! > 0 ? 1 : 0) + (x[1]! + x[2]! > 0 ? 2 : 0) };
}

for (let step = 0; step < STEPS; step++) {
  const rows = Array.from({ length: B / W }, (_, j) => sample(step * B + rank + W * j));
  scope(() => {
    const x = fromArray(Float32Array.from(rows.flatMap((r) => r.x)), [rows.length, IN]);
    const y = fromArray(Int32Array.from(rows.map((r) => r.y)), [rows.length]);
    if (peek) noGrad(() => crossEntropy(ddp.forward(x), y));
    opt.zeroGrad();
    if (how === "plain") {
      backward(crossEntropy(ddp.forward(x), y), { onLeafGrad: ddp.gradReady });
      ddp.finishGradSync();
    } else if (how === "mixed") {
      const half = (t: typeof x) => t.subview(0, [rows.length / 2, ...t.shape.slice(1)]);
      ddp.noSync(() =>
        backward(crossEntropy(ddp.forward(half(x)), half(y)), { onLeafGrad: ddp.gradReady })
      );
      ddp.backward(crossEntropy(ddp.forward(half(x)), half(y)));
    } else ddp.backward(crossEntropy(ddp.forward(x), y));
    opt.step();
  });
}
console.log(
  JSON.stringify({ case: "mlp", rank, world: W, exact, digest: stateDigest(model, opt) }),
);
ddp.close();
pg.close();
