/**
 * Tests of check/state_stage.ts: choosing and staging the resume
 * checkpoint, and checking a real checkpoint on disk (hashes, "module."
 * keys, the trained parameters).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { CheckpointManager } from "../../train/checkpoint/manager.ts";
import type { StTensor } from "../../io/st_tensor.ts";
import { tensorDigest } from "../../check/probe.ts";
import {
  checkSaved,
  chooseResumeStep,
  planResume,
  type ResumePlan,
  savedCheckpoints,
  stageResume,
} from "../../check/state_stage.ts";
import type { Row } from "../../check/verdict.ts";
import { assertFailsWith } from "./_helpers.ts";

function withTempDir(fn: (dir: string) => void): void {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-check-state-" });
  try {
    fn(dir);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

function f32(values: number[]): StTensor {
  return {
    dtype: "F32",
    shape: [values.length],
    data: new Uint8Array(Float32Array.from(values).buffer),
  };
}

/** Saves a checkpoint of `step` with a model file of the given tensors under <runDir>/checkpoints; returns its directory. */
function saveModel(runDir: string, step: number, model: Map<string, StTensor>): string {
  const manager = new CheckpointManager(join(runDir, "checkpoints"), { rank: 0, fsync: false });
  return manager.save({ step, files: [{ name: "model", tensors: model }], state: { step } })!;
}

const WEIGHTS = new Map([["0.weight", f32([1, 2, 3])], ["0.bias", f32([0.5])]]);
const DIGESTS = [...WEIGHTS.values()].map((t) => tensorDigest(t.data));

Deno.test("chooseResumeStep() takes floor(K/2), else the latest step before it, else before K", () => {
  assert.equal(chooseResumeStep([1, 2, 3, 4], 4), 2);
  assert.equal(chooseResumeStep([1, 2, 3, 4, 5], 5), 2);
  assert.equal(chooseResumeStep([1, 4], 5), 1);
  assert.equal(chooseResumeStep([3, 4], 4), 3);
  assert.equal(chooseResumeStep([4], 4), null);
  assert.equal(chooseResumeStep([], 4), null);
});

/** planResume()'s answer when it must be a row. */
function asRow(answer: ReturnType<typeof planResume>): Row {
  assert.ok("outcome" in answer, `expected a verdict row, got the plan ${JSON.stringify(answer)}`);
  return answer;
}

Deno.test("planResume() explains a run without a usable checkpoint", () => {
  const at = (step: number, dir: string) => ({ step, dir, copy: `/kept/step-${step}` });
  // A script that saves less often than the check runs is not at fault: resuming is not checked.
  const none = asRow(planResume([], 4, "/run"));
  assert.equal(none.outcome, "SKIP");
  assert.match(none.cause!, /saved no checkpoint within 4 steps, so resuming was not checked/);
  const late = asRow(planResume([at(4, "/run/checkpoints/step-00000004")], 4, "/run"));
  assert.equal(late.outcome, "SKIP");
  assert.match(late.cause!, /no checkpoint before step 4, so resuming was not checked/);
  const outside = asRow(planResume([at(2, "/elsewhere/ckpt/step-00000002")], 4, "/run"));
  assert.equal(outside.outcome, "SKIP");
  assert.match(outside.cause!, /outside the run directory/);
  const plan = planResume(
    [at(1, "/run/checkpoints/step-00000001"), at(2, "/run/checkpoints/step-00000002")],
    4,
    "/run",
  );
  assert.ok(!("outcome" in plan));
  assert.deepEqual(plan, {
    checkpoint: at(2, "/run/checkpoints/step-00000002"),
    root: "checkpoints",
  });
});

Deno.test("savedCheckpoints() keeps the last save of each step, by step", () => {
  const saved = savedCheckpoints([
    { kind: "checkpoint", dir: "/r/step-2", step: 2, copy: "/k/a" },
    { kind: "loss", value: 1 },
    { kind: "checkpoint", dir: "/r/step-1", step: 1, copy: "/k/b" },
    { kind: "checkpoint", dir: "/r/step-2", step: 2, copy: "/k/c" },
  ]);
  assert.deepEqual(saved.map((c) => [c.step, c.copy]), [[1, "/k/b"], [2, "/k/c"]]);
});

Deno.test("checkSaved() verifies a checkpoint and compares its tensors with the trained parameters", () => {
  withTempDir((runDir) => {
    const dir = saveModel(runDir, 2, WEIGHTS);
    const plan: ResumePlan = { checkpoint: { step: 2, dir, copy: dir }, root: "checkpoints" };
    const rows = checkSaved(plan, DIGESTS);
    assert.deepEqual(rows.map((r) => r.outcome), ["PASS", "PASS"]);
    assert.equal(
      rows[0]!.measured,
      'step 2: manifest hashes verify, 2 model tensors, 0 "module." keys',
    );
    assert.equal(rows[1]!.measured, "2/2 parameter tensors bit-identical to rank 0's after step 2");
    const moved = checkSaved(plan, [DIGESTS[0]!, tensorDigest(f32([1, 2, 3.0001]).data)]);
    assertFailsWith(
      moved,
      "state",
      "saved = trained parameters",
      "does not hold the parameters rank 0 was training with",
    );
    assert.equal(checkSaved(plan, null)[1]!.outcome, "SKIP");
  });
});

Deno.test('checkSaved() fails a corrupt checkpoint, a "module." prefix and a missing model file', () => {
  withTempDir((runDir) => {
    const dir = saveModel(runDir, 1, WEIGHTS);
    const plan = (d: string, step: number): ResumePlan => ({
      checkpoint: { step, dir: d, copy: d },
      root: "checkpoints",
    });
    const file = join(dir, "model.safetensors");
    const bytes = Deno.readFileSync(file);
    bytes[bytes.length - 1]! ^= 0xff;
    Deno.writeFileSync(file, bytes);
    assertFailsWith(
      checkSaved(plan(dir, 1), DIGESTS),
      "state",
      "checkpoint verifies",
      "Cannot load checkpoint",
    );

    const prefixed = saveModel(
      runDir,
      2,
      new Map([...WEIGHTS].map(([k, t]) => [`module.${k}`, t])),
    );
    assertFailsWith(
      checkSaved(plan(prefixed, 2), DIGESTS),
      "state",
      "checkpoint verifies",
      '2 model keys start with "module."',
    );

    const manager = new CheckpointManager(join(runDir, "checkpoints"), { rank: 0, fsync: false });
    const noModel = manager.save({
      step: 3,
      files: [{ name: "weights", tensors: WEIGHTS }],
      state: {},
    })!;
    assertFailsWith(
      checkSaved(plan(noModel, 3), DIGESTS),
      "state",
      "checkpoint verifies",
      'no "model" file',
    );
  });
});

Deno.test("stageResume() puts the checkpoint where the script's CheckpointManager finds it as latest", () => {
  withTempDir((tmp) => {
    const original = join(tmp, "original");
    saveModel(original, 1, WEIGHTS);
    const dir = saveModel(original, 2, WEIGHTS);
    const fresh = join(tmp, "fresh");
    stageResume({
      checkpoint: { step: 1, dir, copy: join(original, "checkpoints", "step-00000001") },
      root: "checkpoints",
    }, fresh);
    const loaded = new CheckpointManager(join(fresh, "checkpoints"), { rank: 0 }).loadLatest();
    assert.equal(loaded?.step, 1);
    assert.deepEqual([...loaded!.files.get("model")!.tensors.keys()].sort(), [
      "0.bias",
      "0.weight",
    ]);
  });
});
