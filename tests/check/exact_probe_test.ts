/**
 * The probe's side of `dtrain check --exact`, in real single processes of
 * tests/check/scripts/exact_mlp.ts: the hashed state of each step names the
 * model's tensors, the state after the last step is recorded both when the
 * probe stops the run and when the script ends by itself (at `unload`), and
 * exact mode is switched on with the shard count asked for.
 */
import assert from "node:assert/strict";
import { readRankEvents } from "../../check/events.ts";
import { statesOf } from "../../check/exact_compare.ts";
import { CHECK_ENV } from "../../check/env.ts";
import { runStage } from "../../check/runs.ts";
import { REPO } from "./_helpers.ts";
import { join } from "node:path";

/** Runs a script (exact_mlp.ts) alone with the probe's variables and returns rank 0's states and the log. */
async function alone(
  env: Record<string, string>,
  args: string[],
  code = 0,
  script = "exact_mlp.ts",
) {
  const outDir = Deno.makeTempDirSync({ prefix: "dtrain-exact-probe-" });
  try {
    const r = await runStage({ name: "alone", title: "single process", nproc: null, env }, {
      script: join(REPO, "tests/check/scripts", script),
      scriptArgs: args,
      outDir,
      timeoutS: 120,
    });
    const log = Deno.readTextFileSync(r.logPath);
    assert.equal(r.code, code, log);
    return { states: statesOf(readRankEvents(r.probeDir).get(0) ?? []), log };
  } finally {
    Deno.removeSync(outDir, { recursive: true });
  }
}

Deno.test("the probe hashes named tensors each step and the end state, stopped or ending by itself", async () => {
  const hash = { [CHECK_ENV.HASH_STATE]: "1", [CHECK_ENV.EXACT]: "8" };
  // stopped by the probe at its 3rd step, after hashing the state 2 steps left
  const stopped = await alone({ ...hash, [CHECK_ENV.STOP_AFTER]: "2" }, []);
  // the script stops after 2 steps by itself: the state is hashed at unload
  const ended = await alone(hash, ["--steps-at-world", "alone:2"]);
  for (const { states } of [stopped, ended]) {
    assert.equal(states.steps.length, 2);
    assert.ok(states.end, "no end state recorded");
  }
  assert.deepEqual(stopped.states.steps, ended.states.steps);
  assert.deepEqual(stopped.states.end, ended.states.end);
  const labels = stopped.states.steps[1]!.map(([label]) => label);
  assert.deepEqual(labels.slice(0, 4), [
    "parameter 0.weight",
    "parameter 0.bias",
    "parameter 2.weight",
    "parameter 2.bias",
  ]);
  assert.ok(labels.includes("optimizer exp_avg_sq of 2.bias"), labels.join(", "));
  assert.ok(labels.includes("hyperparameter lr of group 0"), labels.join(", "));
  assert.equal(labels.at(-1), "gradient of 2.bias");
  // the end state is the parameters and optimizer state alone, changed by step 2's update
  assert.ok(stopped.states.end!.every(([l]) => /^(parameter|optimizer) /.test(l)));
  assert.notDeepEqual(stopped.states.end![0], stopped.states.steps[1]![0]);
});

Deno.test("the probe switches exact mode on with the shard count asked for", async () => {
  // a global batch of 24 splits into 8 canonical shards but not into 16: exact mode refuses it
  const args = ["--batch", "24"];
  await alone({ [CHECK_ENV.EXACT]: "8", [CHECK_ENV.STOP_AFTER]: "1" }, args);
  const refused = await alone({ [CHECK_ENV.EXACT]: "16", [CHECK_ENV.STOP_AFTER]: "1" }, args, 1);
  // a policy the script sets of its own keeps the check's exact mode
  const own = await alone(
    { [CHECK_ENV.EXACT]: "16", [CHECK_ENV.STOP_AFTER]: "1" },
    [...args, "--own-policy"],
    1,
  );
  for (const log of [refused.log, own.log]) {
    assert.match(
      log,
      /a local batch of 24 rows does not split into this rank's 16 canonical shards/,
    );
  }
});

Deno.test("under --exact the script's dropout and autocast stay on (the staged check's plain numerics do not apply)", async () => {
  const env = { [CHECK_ENV.HASH_STATE]: "1", [CHECK_ENV.EXACT]: "8", [CHECK_ENV.STOP_AFTER]: "1" };
  const gradients = async (args: string[]) =>
    (await alone(env, args, 0, "exact_gpt.ts")).states.steps[0]!.filter(([l]) =>
      l.startsWith("gradient ")
    );
  const plain = await gradients(["--dropout", "0"]);
  // dropout 0.1 and bf16 autocast each change step 1's gradients: neither was turned off
  assert.notDeepEqual(await gradients([]), plain);
  assert.notDeepEqual(await gradients(["--dropout", "0", "--bf16"]), plain);
});
