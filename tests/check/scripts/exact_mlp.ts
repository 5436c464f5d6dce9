/**
 * A DDP loop for `dtrain check --exact`'s tests: the toy set and MLP, a
 * DistributedSampler, 16 / world size samples per rank (exact mode cuts each
 * global batch into 8 canonical shards), AdamW and clipping. Clean as it stands; `--plant <bug>` plants one that makes the
 * result depend on the world size:
 * - lr-times-world: the learning rate scaled by the world size (a common
 *   "linear scaling rule" carried over to a fixed global batch);
 * - rank-local-loss: the mean loss divided by the fraction of class-1 labels
 *   in the rank's own batch, a statistic of the rank's samples only.
 * And for the check's bounds: `--crash-at-world W` throws at world size W,
 * `--steps-at-world W:S` stops after S optimizer steps at world size W
 * (S = 0: no step at all); W "alone" is the single process without the
 * launcher. `--own-policy` sets a numerics policy of the script's own
 * (dropout off, exact not named) before it builds DDP.
 */
import {
  AdamW,
  clipGradNorm,
  crossEntropy,
  DataLoader,
  DistributedDataParallel,
  DistributedSampler,
  initProcessGroup,
  manualSeed,
  scale,
  scope,
  setNumericsPolicy,
} from "dtrain";
import { SEED, toyData, toyModel } from "../../../examples/broken/_toy.ts";

/** `--batch B` sets another global batch (exact mode refuses one that is not a multiple of its shards). */
const GLOBAL_BATCH = Deno.args.includes("--batch")
  ? Number(Deno.args[Deno.args.indexOf("--batch") + 1])
  : 16;

const plant = Deno.args.includes("--plant") ? Deno.args[Deno.args.indexOf("--plant") + 1] : null;
if (plant !== null && plant !== "lr-times-world" && plant !== "rank-local-loss") {
  throw new RangeError(`--plant must be lr-times-world or rank-local-loss, got ${plant}`);
}

/** The value of `--<name> W:S` (or `--<name> W`) when W is this process's world size (or "alone"). */
function atWorld(name: string, size: number): number | null {
  const i = Deno.args.indexOf(`--${name}`);
  if (i < 0) return null;
  const [w, v] = Deno.args[i + 1]!.split(":");
  const alone = Deno.env.get("WORLD_SIZE") === undefined;
  return (w === "alone" ? alone : !alone && Number(w) === size) ? Number(v ?? 0) : null;
}

const pg = initProcessGroup();
if (Deno.args.includes("--own-policy")) setNumericsPolicy({ dropout: false }, "exact_mlp.ts");
if (atWorld("crash-at-world", pg.size) !== null) {
  throw new Error(`planted crash at world size ${pg.size}`);
}
const maxSteps = atWorld("steps-at-world", pg.size) ?? Infinity;
let steps = 0;
manualSeed(SEED);
const model = toyModel();
const ddp = new DistributedDataParallel(model, pg);
const lr = plant === "lr-times-world" ? 1e-2 * pg.size : 1e-2;
const optimizer = new AdamW(ddp.parameters(), { lr });
const data = toyData();
const sampler = new DistributedSampler(data.length, {
  numReplicas: pg.size,
  rank: pg.rank,
  seed: SEED,
});
const loader = new DataLoader(data, { batchSize: GLOBAL_BATCH / pg.size, sampler });

try {
  for (let epoch = 0; epoch < 2; epoch++) {
    sampler.setEpoch(epoch);
    for await (const { tensors: [x, y] } of loader) {
      if (steps++ >= maxSteps) {
        x!.dispose();
        y!.dispose();
        break;
      }
      scope(() => {
        optimizer.zeroGrad();
        let loss = crossEntropy(ddp.forward(x!), y!);
        if (plant === "rank-local-loss") {
          const labels = y!.toArray() as Int32Array;
          const ones = labels.reduce((s, v) => s + v, 0) / labels.length;
          loss = scale(loss, 1 / (0.5 + ones));
        }
        ddp.backward(loss);
        clipGradNorm(ddp.parameters(), 1.0);
        optimizer.step();
      });
      x!.dispose();
      y!.dispose();
    }
  }
} finally {
  pg.close();
}
