/**
 * Test rank script: a tiny Trainer run in which one rank fails. Args:
 * <failing rank> <how> where how is
 *   throw      the loss throws at step 3 on that rank only
 *   save       checkpoints go to $CKPT_DIR (a tiny full disk in the test): rank 0's save fails
 *   resume     every rank resumes from $RESUME_<rank> (the test corrupts one rank's copy)
 *   none       nobody fails; saves a checkpoint every 2 steps into $CKPT_DIR when set
 */
import { Linear } from "../../../nn/layers.ts";
import { TensorDataset } from "../../../data/dataset.ts";
import { mean } from "../../../tensor/ops/reduce.ts";
import { mul } from "../../../tensor/ops/elementwise.ts";
import { Trainer } from "../../../train/engine.ts";

const rank = Number(Deno.env.get("RANK"));
const [failRank = "1", how = "throw"] = Deno.args;
// $WIDE: a model big enough (111 KB of checkpoint) to overflow a 64 KiB disk.
const width = Deno.env.get("WIDE") ? 96 : 4;
const x = Float32Array.from({ length: 64 * width }, (_, i) => ((i * 7919) % 13) / 13 - 0.5);
let calls = 0;
const trainer = new Trainer({
  model: () => new Linear(width, width),
  data: new TensorDataset({ data: x, sampleShape: [width] }),
  loss: (m, [xb]) => {
    if (how === "throw" && rank === Number(failRank) && ++calls === 3) {
      throw new Error(`rank ${rank} failed on purpose at step 3`);
    }
    const y = m.forward(xb!);
    return mean(mul(y, y));
  },
  config: {
    epochs: 1,
    data: { globalBatchSize: 8 },
    logEvery: 1000,
    checkpoint: {
      dir: Deno.env.get("CKPT_DIR") ?? null,
      everySteps: Deno.env.get("CKPT_DIR") ? 2 : null,
      everyEpoch: false,
      resume: how === "resume" ? Deno.env.get(`RESUME_${rank}`)! : "never",
    },
  },
  runDir: null,
});
await trainer.fit();
