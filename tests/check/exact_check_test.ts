/**
 * `dtrain check --exact` on real runs of tests/check/scripts/exact_*.ts: a
 * clean toy MLP loop, a Trainer and a GPT-mini with dropout say identical; a learning rate
 * scaled by the world size and a loss normalised by a rank-local statistic
 * are caught at the right step and tensor; a run that crashes, a script
 * that never steps and step counts that differ are reported as such.
 * The checks of the bounds, and of the scaled rate (which differs in any
 * mode), also run where exact mode is switched off.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { type ExactVerdict, runExactCheck } from "../../check/exact_check.ts";
import { formatTable } from "../../check/verdict.ts";
import { REPO } from "./_helpers.ts";

/** Runs the exact check (one process, world 1 and 2, or up to nproc; 3 steps) in a temporary folder it removes. */
async function exactCheck(
  script: string,
  scriptArgs: string[],
  opts: { nproc?: number; exactMode?: boolean } = {},
): Promise<ExactVerdict & { table: string }> {
  const outDir = Deno.makeTempDirSync({ prefix: "dtrain-check-exact-" });
  try {
    const v = await runExactCheck({
      script: join(REPO, "tests/check/scripts", script),
      scriptArgs,
      nproc: opts.nproc ?? 2,
      steps: 3,
      outDir,
      timeoutS: 120,
      exactMode: opts.exactMode ?? true,
      log: () => {},
    });
    return { ...v, table: `${formatTable(v.rows)}\n${v.line}` };
  } finally {
    Deno.removeSync(outDir, { recursive: true });
  }
}

Deno.test("check --exact: a learning rate scaled by the world size parts at step 1's rate, then the first weight", async () => {
  for (const exactMode of [true, false]) {
    const v = await exactCheck("exact_mlp.ts", ["--plant", "lr-times-world"], { exactMode });
    assert.equal(v.code, 1, v.table);
    assert.equal(
      v.line,
      "dtrain check --exact: DIFFERENT — step 1: hyperparameter lr of group 0 in step 1 differs — " +
        "0.01 (single process) vs 0.02 (world 2); the first tensor to differ: " +
        (exactMode ? "parameter 0.weight after step 1" : "gradient of 0.weight in step 1"),
      v.table,
    );
  }
});

Deno.test("check --exact: a run that crashes, no step, and step counts that differ are reported", async () => {
  const crash = await exactCheck("exact_mlp.ts", ["--crash-at-world", "2"], { exactMode: false });
  assert.equal(crash.code, 1, crash.table);
  assert.equal(
    crash.line,
    "dtrain check --exact: FAIL — world 2 did not finish: Error: planted crash at world size 2",
    crash.table,
  );
  assert.match(
    crash.table,
    /the run \(world 2\) exited with code 1: Error: planted crash at world size 2; see /,
  );

  // exact mode refuses a global batch of 12 (not a multiple of 8 shards): the same refusal is told once
  const refused = await exactCheck("exact_mlp.ts", ["--batch", "12"]);
  assert.equal(refused.code, 1, refused.table);
  assert.match(
    refused.line,
    /^dtrain check --exact: FAIL — single process, world 1 did not finish: RangeError: exact mode: a local batch of 12 rows does not split into this rank's 8 canonical shards.*; world 2 did not finish: RangeError: exact mode: a local batch of 6 rows/,
  );

  const idle = await exactCheck("exact_mlp.ts", ["--steps-at-world", "1:0"], {
    nproc: 1,
    exactMode: false,
  });
  assert.equal(idle.code, 1, idle.table);
  assert.match(idle.table, /world 1 ran +0 optimizer steps +FAIL\n.*made no optimizer step/);

  // the single process stops after 2 steps; world 1 goes on: 2 steps agree, then the counts part
  const short = await exactCheck("exact_mlp.ts", ["--steps-at-world", "alone:2"], {
    nproc: 1,
    exactMode: false,
  });
  assert.equal(short.code, 1, short.table);
  assert.match(
    short.line,
    /single process made 2 optimizer steps, world 1 3; the steps both made hold the same bits$/,
  );
});

Deno.test("check --exact: a clean loop, a Trainer and GPT-mini with dropout (and bf16) are identical up to world 4", async () => {
  const cases: [string, string[], number][] = [
    ["exact_mlp.ts", [], 2],
    ["exact_trainer.ts", [], 2],
    ["exact_gpt.ts", [], 4], // dropout 0.1, AdamW, clipping
    ["exact_gpt.ts", ["--bf16"], 2], // and bf16 autocast
  ];
  for (const [script, args, nproc] of cases) {
    const v = await exactCheck(script, args, { nproc });
    assert.equal(v.code, 0, v.table);
    const worlds = nproc === 4 ? "world 1, world 2, world 4" : "world 1, world 2";
    assert.equal(
      v.line,
      `dtrain check --exact: identical — single process, ${worlds} hold the same bits at every one of 3 steps`,
      v.table,
    );
  }
});

Deno.test("check --exact: a loss normalised by a rank-local statistic parts at step 1's first gradient", async () => {
  const v = await exactCheck("exact_mlp.ts", ["--plant", "rank-local-loss"]);
  assert.equal(v.code, 1, v.table);
  assert.match(
    v.line,
    /^dtrain check --exact: DIFFERENT — step 1: gradient of 0\.weight in step 1 differs — \w+ \(single process\) vs \w+ \(world 2\)$/,
  );
});
