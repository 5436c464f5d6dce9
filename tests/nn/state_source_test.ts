/**
 * Module.loadStateDict and Optimizer.loadStateDict take what dtrain hands
 * out, as a PyTorch user passes it: another module's stateDict(), a loaded
 * checkpoint (CheckpointManager.loadLatest()), one of its files, or the
 * file's tensors; anything else is refused with the entry named.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { manualSeed } from "../../nn/init.ts";
import { AdamW } from "../../optim/adamw.ts";
import { SGD } from "../../optim/sgd.ts";
import { CheckpointManager } from "../../train/checkpoint/manager.ts";
import { modelFile, optimizerFile } from "../../train/state.ts";
import { backward } from "../../tensor/autograd.ts";
import { fromArray, scope } from "../../tensor/tensor.ts";
import { crossEntropy } from "../../tensor/ops/nn.ts";

function net(seed: number): Sequential {
  manualSeed(seed);
  return new Sequential(new Linear(4, 8), new ReLU(), new Linear(8, 3));
}

function values(m: Sequential): number[][] {
  return [...m.stateDict().values()].map((t) => [...(t.toArray() as Float32Array)]);
}

function trainSteps(m: Sequential, opt: AdamW | SGD, steps: number): number[] {
  const x = fromArray(Float32Array.from({ length: 8 }, (_, i) => i / 8 - 0.4), [2, 4]);
  const y = fromArray(new Int32Array([2, 0]), [2]);
  const losses: number[] = [];
  for (let s = 0; s < steps; s++) {
    losses.push(scope(() => {
      opt.zeroGrad();
      const loss = crossEntropy(m.forward(x), y);
      backward(loss);
      opt.step();
      return loss.item();
    }));
  }
  return losses;
}

Deno.test("loadStateDict takes another module's stateDict() (tensors), like load_state_dict", () => {
  const a = net(1), b = net(2);
  assert.notDeepEqual(values(a), values(b));
  b.loadStateDict(a.stateDict());
  assert.deepEqual(values(b), values(a));
});

Deno.test("model and optimizer load CheckpointManager.loadLatest()'s result directly", () => {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-state-source-" });
  try {
    const a = net(1);
    const optA = new AdamW(a.parameters(), { lr: 0.05 });
    trainSteps(a, optA, 3);
    const checkpoints = new CheckpointManager(join(root, "ckpt"), { rank: 0, fsync: false });
    checkpoints.save({ step: 3, files: [modelFile(a), optimizerFile(optA)], state: {} });
    const saved = values(a);
    const after = trainSteps(a, optA, 3);

    const loaded = checkpoints.loadLatest()!;
    for (const source of [loaded, loaded.files.get("model")!, loaded.files.get("model")!.tensors]) {
      const b = net(5);
      b.loadStateDict(source);
      assert.deepEqual(values(b), saved);
    }
    const b = net(5);
    const optB = new AdamW(b.parameters(), { lr: 0.05 });
    b.loadStateDict(loaded);
    optB.loadStateDict(loaded);
    assert.deepEqual(trainSteps(b, optB, 3), after, "the optimizer state resumes bit for bit");

    const c = net(6);
    const optC = new AdamW(c.parameters(), { lr: 0.05 });
    c.loadStateDict(loaded.files.get("model"));
    optC.loadStateDict(loaded.files.get("optimizer"));
    assert.deepEqual(trainSteps(c, optC, 3), after, "…also from the files");
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("loadStateDict names what is wrong with what it was given", () => {
  const m = net(1);
  assert.throws(
    () => m.loadStateDict(null),
    /got null instead of a state dict.*loadLatest\(\) returns null/,
  );
  assert.throws(
    () =>
      m.loadStateDict({ files: new Map([["weights", { tensors: new Map() }]]), dir: "/c/step-1" }),
    /the checkpoint \/c\/step-1 has no "model" file \(it has: weights\)/,
  );
  const bad = new Map([["0.weight", { shape: [8, 4], dtype: "F32" }]]);
  assert.throws(
    // @ts-expect-error: not a tensor, as an untyped script might pass
    () => m.loadStateDict(bad),
    /entry "0\.weight" is Object \{ shape, dtype \}, not a tensor/,
  );
  const opt = new SGD(m.parameters(), { lr: 0.1 });
  assert.throws(
    () => opt.loadStateDict({ tensors: new Map(), metadata: {} }),
    /SGD\.loadStateDict: the optimizer file has no param_groups metadata/,
  );
});
