/**
 * state.json is checked against a strict schema before anything of a
 * checkpoint is loaded: a negative step, a data position beyond the data, a
 * wrong rank count or an unknown field make the checkpoint count as corrupt,
 * so the Trainer falls back to an older one and says why (or, for an
 * explicitly named checkpoint, refuses it naming the field).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { Trainer } from "../../train/engine.ts";
import { checkTrainState } from "../../train/state_schema.ts";
import { Linear } from "../../nn/layers.ts";
import { TensorDataset } from "../../data/dataset.ts";
import { mean } from "../../tensor/ops/reduce.ts";
import { mul } from "../../tensor/ops/elementwise.ts";

const SAMPLES = 32;

function trainer(runDir: string, config: Record<string, unknown> = {}) {
  const x = Float32Array.from({ length: SAMPLES }, (_, i) => i / SAMPLES);
  return new Trainer({
    model: () => new Linear(1, 1),
    data: new TensorDataset({ data: x, sampleShape: [1] }),
    loss: (m, [xb]) => {
      const y = m.forward(xb!);
      return mean(mul(y, y));
    },
    config: {
      epochs: 2,
      data: { globalBatchSize: 8 },
      checkpoint: { everySteps: 2, keepLast: 10 },
      logEvery: 1000,
      ...config,
    },
    runDir,
  });
}

/** Replaces state.json of a checkpoint and re-signs its manifest, as a buggy writer would. */
function rewriteState(dir: string, edit: (s: Record<string, unknown>) => void): void {
  const path = join(dir, "state.json");
  const state = JSON.parse(Deno.readTextFileSync(path));
  edit(state);
  const bytes = new TextEncoder().encode(JSON.stringify(state));
  Deno.writeFileSync(path, bytes);
  const manifestPath = join(dir, "manifest.json");
  const manifest = JSON.parse(Deno.readTextFileSync(manifestPath));
  for (const f of manifest.files) {
    if (f.name !== "state.json") continue;
    f.bytes = bytes.length;
    f.sha256 = createHash("sha256").update(bytes).digest("hex");
  }
  Deno.writeTextFileSync(manifestPath, JSON.stringify(manifest));
}

async function withRun(fn: (runDir: string, good: Record<string, unknown>) => Promise<void>) {
  const runDir = Deno.makeTempDirSync({ prefix: "dtrain-state-schema-" });
  const warn = console.warn;
  console.warn = () => {};
  try {
    const first = await trainer(runDir, { maxSteps: 4 }).fit();
    assert.equal(first.steps, 4);
    const good = JSON.parse(
      Deno.readTextFileSync(join(runDir, "checkpoints/step-00000004/state.json")),
    );
    await fn(runDir, good);
  } finally {
    console.warn = warn;
    Deno.removeSync(runDir, { recursive: true });
  }
}

const ctx = { datasetLength: SAMPLES, dropLast: false };

Deno.test("checkTrainState() accepts what the Trainer wrote and names every bad field", async () => {
  await withRun((_dir, good) => {
    assert.equal(checkTrainState(good, ctx).step, 4);
    const bad = (edit: (s: Record<string, unknown>) => void) => {
      const s = structuredClone(good);
      edit(s);
      try {
        checkTrainState(s, ctx);
      } catch (e) {
        return (e as Error).message;
      }
      throw new Error("accepted");
    };
    assert.match(bad((s) => s.step = -7), /step = -7: Too small: expected number to be >=0/);
    assert.match(bad((s) => s.step = 1.5), /step = 1\.5: .*expected int/);
    assert.match(
      bad((s) => (s.data as { consumed: number }).consumed = 1e9),
      /data\.consumed = 1000000000: beyond the 32 samples of an epoch of this data \(32 samples\) at world size 1/,
    );
    assert.match(bad((s) => s.worldSize = 2), /rng holds 1 rank states but worldSize is 2/);
    assert.match(bad((s) => s.format = "other/1"), /format = "other\/1": .*dtrain\.train-state\/1/);
    assert.match(bad((s) => s.stepp = 3), /stepp is not a field; did you mean step\?/);
    assert.match(
      bad((s) => (s.config as { optim: Record<string, unknown> }).optim.learningRate = 1),
      /config\.optim\.learningRate is not a field; did you mean config\.optim\.lr\?/,
    );
    assert.match(
      bad((s) => ((s.rng as { generator: { words: number[] } }[])[0]!.generator.words.length = 3)),
      /rng\.0\.generator\.words = .*: Too small: expected array to have exactly 624 items/,
    );
    assert.match(bad((s) => delete s.scaler), /scaler: .*expected object/);
    return Promise.resolve();
  });
});

for (
  const [what, edit, reason] of [
    ["a negative step", (s: Record<string, unknown>) => s.step = -7, /step = -7/],
    [
      "a data position beyond the data",
      (s: Record<string, unknown>) => (s.data as { consumed: number }).consumed = 1e9,
      /data\.consumed = 1000000000: beyond the 32 samples/,
    ],
  ] as const
) {
  Deno.test(`a state.json with ${what} is treated as a corrupt checkpoint: the Trainer resumes from the one before and says why`, async () => {
    await withRun(async (runDir) => {
      rewriteState(join(runDir, "checkpoints/step-00000004"), edit);
      const lines: string[] = [];
      const log = console.log;
      console.log = (...a: unknown[]) => lines.push(a.join(" "));
      let resumed;
      try {
        resumed = await trainer(runDir, { maxSteps: 6 }).fit();
      } finally {
        console.log = log;
      }
      assert.equal(resumed.resumedFrom, 2, lines.join("\n"));
      assert.equal(resumed.steps, 6);
      const text = lines.join("\n");
      assert.match(text, /skipped checkpoint .*step-00000004: not a valid dtrain training state: /);
      assert.match(text, reason);
      assert.match(text, /resumed from .*step-00000002: epoch 0, step 2/);
    });
  });
}

Deno.test("an explicitly named checkpoint with a bad state.json is refused, naming the field", async () => {
  await withRun(async (runDir) => {
    const dir = join(runDir, "checkpoints/step-00000004");
    rewriteState(dir, (s) => s.step = -7);
    const t = trainer(Deno.makeTempDirSync({ prefix: "dtrain-state-schema-other-" }), {
      checkpoint: { resume: dir },
    });
    await assert.rejects(
      () => t.fit(),
      /Cannot resume from .*step-00000004: not a valid dtrain training state: step = -7/,
    );
    Deno.removeSync(t.runDir!, { recursive: true });
  });
});
