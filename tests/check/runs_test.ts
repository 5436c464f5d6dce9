/**
 * Tests of check/runs.ts: a stage run gets the probe's variables and none
 * of the caller's launch variables, its output lands in output.log with the
 * tail kept, and a run past its time limit is stopped and reported.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describeExit, type RunSpec, runStage } from "../../check/runs.ts";
import { REPO } from "./_helpers.ts";

const SCRIPT = join(REPO, "tests/check/scripts/stage_env.ts");

async function withOutDir(fn: (out: string) => Promise<void>): Promise<void> {
  const out = Deno.makeTempDirSync({ prefix: "dtrain-check-runs-" });
  try {
    await fn(out);
  } finally {
    Deno.removeSync(out, { recursive: true });
  }
}

const spec: RunSpec = {
  name: "single",
  title: "single process",
  nproc: null,
  env: { DTRAIN_CHECK_STAGE: "gradients" },
};

Deno.test("runStage() runs the script alone with the probe's variables and without inherited launch variables", async () => {
  const outer = {
    RANK: "1",
    WORLD_SIZE: "2",
    DTRAIN_RUN_ID: "outer",
    DTRAIN_RUN_DIR: "/outer",
    DTRAIN_CHECK_OTHER: "x",
    KEEP_ME: "yes",
  };
  // Given as the base environment, not set on this process: other test files run in it at the same time.
  const baseEnv = { ...Deno.env.toObject(), ...outer };
  {
    await withOutDir(async (out) => {
      const r = await runStage(spec, {
        script: SCRIPT,
        scriptArgs: [],
        outDir: out,
        timeoutS: 60,
        baseEnv,
      });
      assert.equal(r.code, 3);
      assert.equal(r.timedOut, false);
      assert.equal(r.probeDir, join(out, "single", "probe"));
      assert.ok(
        Deno.statSync(r.probeDir).isDirectory,
        "the probe folder exists before the script starts",
      );
      const log = Deno.readTextFileSync(r.logPath);
      for (
        const line of [
          "RANK=",
          "WORLD_SIZE=",
          "DTRAIN_RUN_ID=",
          "DTRAIN_RUN_DIR=",
          `DTRAIN_CHECK_OUT=${r.probeDir}`,
          "DTRAIN_CHECK_STAGE=gradients",
          "DTRAIN_CHECK_OTHER=",
          "KEEP_ME=yes",
          "to stderr",
        ]
      ) assert.ok(log.split("\n").includes(line), `output.log lacks "${line}":\n${log}`);
      assert.equal(r.tail.length, 9);
      assert.match(
        describeExit(r),
        /^the run \(single process\) exited with code 3; see .*output\.log: .*to stderr/,
      );
    });
  }
});

Deno.test("runStage() stops a run at its time limit and says so", async () => {
  await withOutDir(async (out) => {
    const t0 = performance.now();
    const r = await runStage(spec, {
      script: SCRIPT,
      scriptArgs: ["hang"],
      outDir: out,
      // long enough for the script (with the probe preloaded) to start and print on a loaded
      // machine: 2 s once stopped it before its first line
      timeoutS: 8,
    });
    assert.ok(r.timedOut);
    assert.equal(r.code, 143, "killed by SIGTERM");
    assert.ok(performance.now() - t0 < 40_000);
    assert.ok(r.tail.includes("hanging"), r.tail.join("\n"));
    assert.match(describeExit(r), /was stopped at the time limit of 8 s \(--run-timeout\)/);
  });
});
