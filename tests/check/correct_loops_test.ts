/**
 * `dtrain check` never fails a correct script: hand-written DDP loops that
 * PyTorch ports write — with Dropout, with a pass over the sampler in setup
 * and the DDP tutorial's peek at a batch before setEpoch, with an evaluation
 * on every rank — pass every stage; the tutorial's batch size per rank fails
 * with the cause measured (the samples per step), nothing else blamed.
 */
import assert from "node:assert/strict";
import { formatTable } from "../../check/verdict.ts";
import { assertFailsWith, checkScript, rowOf, withOutcome } from "./_helpers.ts";

const SCRIPT = "tests/check/scripts/loop_variants.ts";

Deno.test("dtrain check passes a DDP loop with Dropout, and says dropout was off for the comparison", async () => {
  const rows = await checkScript(SCRIPT, ["dropout"]);
  const table = formatTable(rows);
  assert.deepEqual(withOutcome(rows, "FAIL"), [], table);
  assert.deepEqual(withOutcome(rows, "SKIP"), [], table);
  assert.match(rowOf(rows, "gradients", "world 2 vs single").measured, /dropout off/);
  assert.match(
    rowOf(rows, "state", "resume on 2 ranks").measured,
    /loss max \|diff\| 0, grad norm 0$/,
  );
});

Deno.test("dtrain check passes a loop that goes over its sampler in setup and peeks at a batch each epoch", async () => {
  const rows = await checkScript(SCRIPT, ["setup-pass"]);
  const table = formatTable(rows);
  assert.deepEqual(withOutcome(rows, "FAIL"), [], table);
  assert.deepEqual(withOutcome(rows, "SKIP"), [], table);
  assert.match(
    rowOf(rows, "sampler", "ranks agree").measured,
    /no backward followed \(setup, peeks\)/,
  );
  assert.equal(
    rowOf(rows, "sampler", "order changes").measured,
    "order differs on 2/2 ranks (epochs 0 -> 1)",
  );
});

Deno.test("dtrain check passes a loop that evaluates on every rank, and checks the evaluation's split", async () => {
  const rows = await checkScript(SCRIPT, ["eval"]);
  const table = formatTable(rows);
  assert.deepEqual(withOutcome(rows, "FAIL"), [], table);
  assert.deepEqual(withOutcome(rows, "SKIP"), [], table);
  assert.equal(
    rowOf(rows, "sampler", "epoch 1 coverage").measured,
    "200/200 indices, 0 overlaps beyond 0 pad",
  );
  assert.equal(
    rowOf(rows, "sampler", "sampler 2 (60 samples)").measured,
    "60/60 indices, 0 overlaps beyond 0 pad",
  );
});

Deno.test("dtrain check measures the tutorial's per-rank batch: N x B samples per step, blaming nothing else", async () => {
  const rows = await checkScript(SCRIPT, ["per-rank-batch"]);
  const table = formatTable(rows);
  assert.deepEqual(withOutcome(rows, "FAIL"), ["gradients / world 2 vs single process"], table);
  assertFailsWith(
    rows,
    "gradients",
    "world 2 vs single process",
    "the 2 ranks trained on 20 samples in step 1 together (rank 0: 10, rank 1: 10), the single process on 10",
  );
  assert.doesNotMatch(
    rowOf(rows, "gradients", "world 2 vs single").cause!,
    /summed|sqrt|did not resume/,
  );
  assert.equal(rowOf(rows, "state", "resume on 2 ranks").outcome, "PASS", table);
});
