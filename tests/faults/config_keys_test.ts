/**
 * Misspelled config keys at any depth are refused with their full path and
 * the nearest valid field, never silently ignored (a typo in a nested
 * section used to train with the default); a Trainer refuses them before
 * anything runs.
 */
import assert from "node:assert/strict";
import { resolveConfig } from "../../train/config.ts";
import { editDistance, nearestNames } from "../../train/config_errors.ts";
import { Trainer } from "../../train/engine.ts";
import { Linear } from "../../nn/layers.ts";
import { TensorDataset } from "../../data/dataset.ts";
import { mean } from "../../tensor/ops/reduce.ts";

function refusal(input: unknown): string {
  try {
    resolveConfig(input);
  } catch (e) {
    assert.ok(e instanceof TypeError);
    return e.message;
  }
  throw new Error(`resolveConfig accepted ${JSON.stringify(input)}`);
}

Deno.test("an unknown key in any section is refused with its full path and the nearest field", () => {
  const cases: [unknown, RegExp][] = [
    [
      { optim: { learningRate: 0.1 } },
      /optim\.learningRate is not a field; did you mean optim\.lr\?/,
    ],
    [
      { optim: { weight_decay: 0.1 } },
      /optim\.weight_decay is not a field; did you mean optim\.weightDecay\?/,
    ],
    [
      { checkpoint: { every: 5 } },
      /checkpoint\.every is not a field; did you mean checkpoint\.everySteps or checkpoint\.everyEpoch\?/,
    ],
    [
      { data: { batchSize: 8 } },
      /data\.batchSize is not a field; did you mean data\.globalBatchSize\?/,
    ],
    [{ schedule: { warmup_steps: 3 } }, /did you mean schedule\.warmupSteps\?/],
    [
      { ddp: { bucketCapMB: 3 } },
      /ddp\.bucketCapMB is not a field; did you mean ddp\.bucketCapMb\?/,
    ],
    [
      { optim: { betas: [0.9, 0.99], nesterv: true } },
      /optim\.nesterv is not a field; did you mean optim\.nesterov\?/,
    ],
    // A field of another section at the top level.
    [{ lr: 0.1 }, /^Invalid training config: lr is not a field; did you mean optim\.lr\?$/],
    [{ epoch: 3 }, /epoch is not a field; did you mean epochs\?/],
  ];
  for (const [input, want] of cases) assert.match(refusal(input), want, JSON.stringify(input));
});

Deno.test("an unknown key with no near field lists the section's fields", () => {
  assert.equal(
    refusal({ precision: { typo: true } }),
    "Invalid training config: precision.typo is not a field; the fields of precision are autocast, gradScaler",
  );
});

Deno.test("every problem is reported at once, unknown keys and bad values alike", () => {
  const m = refusal({
    optim: { lr: -1, learningRate: 0.1 },
    data: { batchSize: 8, shuffle: "yes" },
  });
  assert.match(m, /optim\.learningRate is not a field; did you mean optim\.lr\?/);
  assert.match(m, /optim\.lr = -1: .*>0/);
  assert.match(m, /data\.batchSize is not a field/);
  assert.match(m, /data\.shuffle = "yes": .*expected boolean/);
});

Deno.test("valid nested configs still resolve with their defaults", () => {
  const c = resolveConfig({ optim: { lr: 0.1, weightDecay: 0 }, checkpoint: { everySteps: 5 } });
  assert.equal(c.optim.lr, 0.1);
  assert.equal(c.optim.weightDecay, 0);
  assert.equal(c.checkpoint.everySteps, 5);
  assert.equal(c.checkpoint.everyEpoch, true);
});

Deno.test("nearestNames() and editDistance() agree with their definitions", () => {
  assert.equal(editDistance("abc", "acb"), 1, "a transposition is one edit");
  assert.equal(editDistance("", "abc"), 3);
  assert.equal(editDistance("kitten", "sitting"), 3);
  assert.deepEqual(nearestNames("zzzzzz", ["lr", "eps"]), []);
  assert.deepEqual(nearestNames("LR", ["lr", "eps"]), ["lr"]);
});

Deno.test("a Trainer with a misspelled nested key refuses to start", () => {
  const data = new TensorDataset({ data: new Float32Array(8), sampleShape: [1] });
  assert.throws(
    () =>
      new Trainer({
        model: () => new Linear(1, 1),
        data,
        loss: (m, [x]) => mean(m.forward(x!)),
        config: { optim: { learningRate: 0.1 } } as never,
        runDir: null,
      }),
    /optim\.learningRate is not a field; did you mean optim\.lr\?/,
  );
});
