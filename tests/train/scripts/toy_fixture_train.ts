/**
 * Trains the toy_mlp fixture recipe with the Trainer under the launcher (or
 * alone): init and data from the fixture, no shuffle, AdamW 1e-3, global
 * batch 64. Rank 0 writes per-step losses and final weights to $OUT_DIR.
 * Options (env): STEPS (maxSteps), EPOCHS, ACCUM, CLIP, CKPT_EVERY,
 * CRASH_AT_STEP (throw after that many steps on the first attempt),
 * RESUME ("auto" | "never"), EVAL (evaluate the loss on the first 256
 * samples at every epoch end), SHARD ("optimizer" | "gradients": ZeRO).
 */
import { join } from "node:path";
import { defaultFixtureDir, FixtureDir, toFloat32 } from "../../../parity/fixtures.ts";
import { toyModelFromInit } from "../../../parity/toy_mlp.ts";
import {
  crossEntropy,
  fromArray,
  noGrad,
  scope,
  serializeSafetensorsOf,
  TensorDataset,
  Trainer,
} from "./_exports.ts";

const env = (k: string) => Deno.env.get(k);
const fx = new FixtureDir(defaultFixtureDir());
const data = fx.tensors("toy_mlp_data.safetensors");
const X = toFloat32(data.get("X")!, "X");
const y = new Int32Array([...new BigInt64Array(data.get("y")!.data.slice().buffer)].map(Number));
const crashAt = Number(env("CRASH_AT_STEP") ?? 0);
const attempt = Number(env("DTRAIN_RESTART_COUNT") ?? 0);
let steps = 0;
const features = X.length / y.length;
const EVAL_N = 256;

const trainer = new Trainer({
  model: () => toyModelFromInit(fx),
  data: new TensorDataset({ data: X, sampleShape: [X.length / y.length] }, {
    data: y,
    sampleShape: [],
  }),
  loss: (model, [xb, yb]) => {
    if (crashAt && attempt === 0 && steps++ === crashAt * Number(env("ACCUM") ?? 1)) {
      throw new Error(`deliberate crash at step ${crashAt}`);
    }
    return crossEntropy(model.forward(xb!), yb!);
  },
  evaluate: env("EVAL")
    ? (model) =>
      scope(() =>
        noGrad(() => {
          const xb = fromArray(X.slice(0, EVAL_N * features), [EVAL_N, features]);
          const yb = fromArray(y.slice(0, EVAL_N), [EVAL_N]);
          return { "loss on 256 samples": crossEntropy(model.forward(xb), yb).item() };
        })
      )
    : undefined,
  config: {
    epochs: Number(env("EPOCHS") ?? 2),
    maxSteps: env("STEPS") ? Number(env("STEPS")) : null,
    data: { globalBatchSize: 64, shuffle: false, gradAccumulation: Number(env("ACCUM") ?? 1) },
    optim: { name: "adamw", lr: 1e-3 },
    clipGradNorm: env("CLIP") ? Number(env("CLIP")) : null,
    checkpoint: {
      everySteps: env("CKPT_EVERY") ? Number(env("CKPT_EVERY")) : null,
      resume: env("RESUME") ?? "auto",
    },
    logEvery: 1000,
    ...(env("SHARD") ? { ddp: { shard: env("SHARD") as "optimizer" | "gradients" } } : {}),
  },
});
const result = await trainer.fit();
const out = env("OUT_DIR");
if (out && trainer.pg.rank === 0) {
  Deno.writeTextFileSync(join(out, `result-${attempt}.json`), JSON.stringify(result));
  Deno.writeFileSync(
    join(out, `final-${attempt}.safetensors`),
    serializeSafetensorsOf(trainer.model.stateDict()),
  );
}
