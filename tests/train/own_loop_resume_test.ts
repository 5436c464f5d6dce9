/**
 * A hand-written loop with Dropout and random input noise resumes bit for
 * bit from its own checkpoint with the public API only: model, optimizer,
 * DataLoader state and getRngState() saved; loadStateDict(loadLatest()),
 * loader.loadState and setRngState on resume. Without setRngState the
 * continuation differs (so the test can tell).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  AdamW,
  add,
  backward,
  CheckpointManager,
  crossEntropy,
  DataLoader,
  type DataLoaderState,
  DistributedSampler,
  Dropout,
  fromArray,
  getDefaultGenerator,
  getRngState,
  Linear,
  manualSeed,
  optimizerFile,
  ReLU,
  type RngState,
  scope,
  Sequential,
  setRngState,
  TensorDataset,
  tensorFile,
} from "../../mod.ts";

const STEPS = 8;
const SAVE_AT = 4;

function setup() {
  manualSeed(0);
  const g = getDefaultGenerator();
  const x = g.normal_(new Float32Array(96 * 6), 0, 1);
  const y = Int32Array.from({ length: 96 }, () => g.randint(0, 3));
  const data = new TensorDataset({ data: x, sampleShape: [6] }, { data: y, sampleShape: [] });
  const model = new Sequential(
    new Linear(6, 32),
    new ReLU(),
    new Dropout(0.3),
    new Linear(32, 32),
    new ReLU(),
    new Dropout(0.3),
    new Linear(32, 3),
  );
  const opt = new AdamW(model.parameters(), { lr: 1e-2 });
  const sampler = new DistributedSampler(data.length, { numReplicas: 1, rank: 0, seed: 3 });
  const loader = new DataLoader(data, { batchSize: 16, sampler });
  return { model, opt, sampler, loader };
}

type Loop = ReturnType<typeof setup>;

/** Trains until `until` steps are done; calls `onStep` after each; returns the losses. */
async function train(
  l: Loop,
  from: number,
  until: number,
  onStep: (step: number) => void = () => {},
): Promise<number[]> {
  const losses: number[] = [];
  let step = from;
  for (let epoch = l.loader.state().epoch; step < until; epoch++) {
    l.loader.setEpoch(epoch);
    for await (const { tensors: [x, y] } of l.loader) {
      // Input noise from the default generator, as an augmentation would draw it.
      const noise = getDefaultGenerator().normal_(new Float32Array(x!.numel), 0, 0.1);
      losses.push(scope(() => {
        l.opt.zeroGrad();
        const loss = crossEntropy(l.model.forward(add(x!, fromArray(noise, x!.shape))), y!);
        backward(loss);
        l.opt.step();
        return loss.item();
      }));
      x!.dispose();
      y!.dispose();
      onStep(++step);
      if (step === until) return losses;
    }
  }
  return losses;
}

function resumed(dir: string, restoreRng: boolean): Promise<number[]> {
  const l = setup();
  const ck = new CheckpointManager(dir, { rank: 0, fsync: false }).loadLatest()!;
  l.model.loadStateDict(ck);
  l.opt.loadStateDict(ck);
  const state = ck.state as { step: number; loader: DataLoaderState; rng: RngState };
  l.loader.loadState(state.loader);
  if (restoreRng) setRngState(state.rng, l.model);
  return train(l, state.step, STEPS);
}

Deno.test("a hand-written loop with dropout resumes bit for bit with getRngState/setRngState", async () => {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-own-resume-" });
  try {
    const dir = join(root, "checkpoints");
    const checkpoints = new CheckpointManager(dir, { rank: 0, fsync: false });
    const l = setup();
    const all = await train(l, 0, STEPS, (step) => {
      if (step !== SAVE_AT) return;
      checkpoints.save({
        step,
        files: [tensorFile("model", l.model.stateDict()), optimizerFile(l.opt)],
        state: { step, loader: { ...l.loader.state() }, rng: getRngState(l.model) },
      });
    });
    assert.equal(all.length, STEPS);
    assert.deepEqual(await resumed(dir, true), all.slice(SAVE_AT));
    const withoutRng = await resumed(dir, false);
    assert.notDeepEqual(withoutRng, all.slice(SAVE_AT), "restoring the RNG state matters here");
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("Dropout layers of one model draw different masks; the same model rebuilt draws the same", () => {
  manualSeed(1);
  const a = [new Dropout(0.5), new Dropout(0.5)];
  manualSeed(1);
  const b = [new Dropout(0.5), new Dropout(0.5)];
  manualSeed(2);
  const c = new Dropout(0.5);
  assert.notEqual(a[0]!.seed, a[1]!.seed);
  assert.deepEqual(b.map((d) => d.seed), a.map((d) => d.seed));
  assert.notEqual(c.seed, a[0]!.seed);
  const x = fromArray(new Float32Array(64).fill(1), [64]);
  const masks = a.map((d) => [...(d.forward(x).toArray() as Float32Array)].map((v) => v > 0));
  assert.notDeepEqual(masks[0], masks[1]);
});
