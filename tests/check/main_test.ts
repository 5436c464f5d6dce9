/** Tests of check/main.ts: the command line of `dtrain check` and its usage errors. */
import assert from "node:assert/strict";
import { resolve } from "node:path";
import { checkHelp, checkMain, parseCheckArgs } from "../../check/main.ts";

Deno.test("parseCheckArgs() takes options around the script and the script's own arguments after --", () => {
  const parsed = parseCheckArgs([
    "train.ts",
    "--nproc",
    "4",
    "--steps",
    "3",
    "--out",
    "x",
    "--",
    "--lr",
    "0.1",
  ]);
  assert.deepEqual(parsed, {
    script: "train.ts",
    scriptArgs: ["--lr", "0.1"],
    nproc: 4,
    steps: 3,
    outDir: resolve("x"),
    timeoutS: 300,
    exact: false,
  });
  const defaults = parseCheckArgs(["--run-timeout", "20", "train.ts"]);
  assert.ok(defaults !== "help");
  assert.deepEqual([defaults.nproc, defaults.steps, defaults.timeoutS], [2, 5, 20]);
  assert.match(defaults.outDir, /\/runs\/check-\d{8}-\d{6}$/);
  assert.equal(parseCheckArgs(["-h"]), "help");
});

Deno.test("parseCheckArgs() takes --exact with a power-of-two --nproc, 1 included", () => {
  const parsed = parseCheckArgs(["--exact", "train.ts", "--nproc", "4"]);
  assert.ok(parsed !== "help");
  assert.deepEqual([parsed.exact, parsed.nproc], [true, 4]);
  assert.match(parsed.outDir, /\/runs\/check-exact-\d{8}-\d{6}$/);
  const one = parseCheckArgs(["--exact", "train.ts", "--nproc", "1"]);
  assert.ok(one !== "help" && one.nproc === 1);
  assert.throws(
    () => parseCheckArgs(["--exact", "train.ts", "--nproc", "6"]),
    /--nproc with --exact must be a power of two \(world sizes 1, 2, 4, … up to it are compared\), got 6/,
  );
  // without --exact one rank is still too few: there is nothing to compare the single process with
  assert.throws(
    () => parseCheckArgs(["train.ts", "--nproc", "1"]),
    /--nproc must be an integer >= 2/,
  );
  assert.match(checkHelp(), /--exact {14}instead of the stages/);
});

Deno.test("parseCheckArgs() names what is wrong with a command line", () => {
  assert.throws(
    () => parseCheckArgs([]),
    /no training script given \(usage: dtrain check script\.ts --nproc N\)/,
  );
  assert.throws(
    () => parseCheckArgs(["a.ts", "b.ts"]),
    /one script expected, got 2 \(a\.ts b\.ts\); pass the script's own arguments after --/,
  );
  assert.throws(
    () => parseCheckArgs(["a.ts", "--nproc", "1"]),
    /--nproc must be an integer >= 2, got "1"/,
  );
  assert.throws(
    () => parseCheckArgs(["a.ts", "--steps", "two"]),
    /--steps must be an integer >= 2, got "two"/,
  );
  assert.throws(() => parseCheckArgs(["a.ts", "--bogus"]), /bogus/);
});

Deno.test("checkMain() exits 2 on a usage error or a missing script, 0 for --help", async () => {
  const errors: string[] = [];
  const logs: string[] = [];
  const [error, log] = [console.error, console.log];
  console.error = (m: string) => errors.push(m);
  console.log = (m: string) => logs.push(m);
  try {
    assert.equal(await checkMain(["--nproc", "0", "a.ts"]), 2);
    assert.equal(await checkMain(["no/such/script.ts"]), 2);
    assert.equal(await checkMain(["--help"]), 0);
  } finally {
    [console.error, console.log] = [error, log];
  }
  assert.match(errors[0]!, /^dtrain check: --nproc must be an integer >= 2/);
  assert.match(errors[1]!, /cannot read the script no\/such\/script\.ts/);
  assert.equal(logs[0], checkHelp());
  for (const stage of ["1 sampler", "2 gradients", "3 state"]) {
    assert.ok(checkHelp().includes(stage), stage);
  }
});
