/**
 * `dtrain check` end to end on a correct Trainer script, through the
 * command line: every stage passes, the table and the closing line are
 * printed, exit code 0, and the verdict is kept in the check folder.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO } from "./_helpers.ts";

async function checkTrainerOk(env: Record<string, string> = {}) {
  const out = Deno.makeTempDirSync({ prefix: "dtrain-check-cli-" });
  try {
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      env,
      args: [
        "run",
        "-A",
        "--config",
        join(REPO, "deno.json"),
        join(REPO, "check/main.ts"),
        "tests/check/scripts/trainer_ok.ts",
        "--steps",
        "4",
        "--out",
        out,
        "--run-timeout",
        "90",
      ],
      cwd: REPO,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(stdout);
    assert.equal(code, 0, `${text}\n${new TextDecoder().decode(stderr)}`);
    const verdicts = text.split("\n").filter((l) =>
      /^(sampler|gradients|state) .*\s(PASS|FAIL|SKIP)$/.test(l)
    );
    assert.equal(verdicts.length, 12, text);
    assert.ok(verdicts.every((l) => l.endsWith("PASS")), text);
    for (
      const row of [
        "sampler    epoch 0 coverage",
        "gradients  world 2 vs single process",
        "state      resume on 2 ranks from step 2",
      ]
    ) {
      assert.ok(text.includes(row), `missing row "${row}" in\n${text}`);
    }
    assert.match(text, /\ndtrain check: PASS\n/);
    assert.ok(text.includes(out), "prints the check folder");
    const kept = Deno.readTextFileSync(join(out, "verdict.txt"));
    assert.ok(kept.endsWith("dtrain check: PASS\n"));
    for (const run of ["sampler", "single", "world-1", "world-2", "resume-2", "resume-single"]) {
      assert.ok(Deno.statSync(join(out, run, "output.log")).isFile, `${run} keeps its log`);
    }
  } finally {
    Deno.removeSync(out, { recursive: true });
  }
}

Deno.test("dtrain check passes a correct Trainer script in every stage and exits 0", async () => {
  await checkTrainerOk();
});

Deno.test("dtrain check passes the same Trainer script with ZeRO-2 (the probe takes the sharded norm)", async () => {
  await checkTrainerOk({ SHARD: "gradients" });
});
