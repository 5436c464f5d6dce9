/**
 * The command line: launcher option parsing (stopping at the script, values
 * checked with clear errors), the --help text, and cli.ts's verb dispatch.
 */
import assert from "node:assert/strict";
import {
  checkLogRanks,
  LAUNCH_OPTIONS,
  launchHelp,
  type LaunchOptions,
  parseLaunchArgs,
} from "../../launch/options.ts";
import { generalHelp, main, VERBS } from "../../cli.ts";

const noEnv = () => undefined;
const parse = (args: string[]) => parseLaunchArgs(args, noEnv) as LaunchOptions;

Deno.test("parseLaunchArgs() stops at the script and passes its arguments through untouched", () => {
  const o = parse([
    "--nproc",
    "4",
    "--hang-warn=2.5",
    "train.ts",
    "--lr",
    "0.1",
    "--nproc",
    "9",
    "-h",
  ]);
  assert.equal(o.nproc, 4);
  assert.equal(o.hangWarnS, 2.5);
  assert.equal(o.script, "train.ts");
  assert.deepEqual(o.scriptArgs, ["--lr", "0.1", "--nproc", "9", "-h"]);
  const dashed = parse(["--nproc", "2", "--", "--odd-name.ts", "x"]);
  assert.equal(dashed.script, "--odd-name.ts");
  assert.deepEqual(dashed.scriptArgs, ["x"]);
});

Deno.test("parseLaunchArgs() fills documented defaults", () => {
  const o = parse(["run.ts"]);
  assert.deepEqual(
    { ...o },
    {
      script: "run.ts",
      scriptArgs: [],
      nproc: 1,
      threads: null,
      nnodes: 1,
      nodeRank: 0,
      masterAddr: "127.0.0.1",
      masterPort: null,
      rdzvToken: null,
      rdzvTokenFile: null,
      rdzvTimeoutS: 600,
      hangWarnS: 60,
      timeoutS: 1800,
      maxRestarts: 0,
      graceS: 30,
      runDir: null,
      logRanks: "0",
      device: "auto",
      resume: null,
      oversubscribe: false,
      noCheck: false,
      allowConfigChange: false,
    },
  );
  assert.equal(parse(["--allow-config-change", "run.ts"]).allowConfigChange, true);
  assert.equal(parse(["--device", "cuda-emu", "run.ts"]).device, "cuda-emu");
  assert.equal(parse(["--resume", "runs/a", "run.ts"]).resume, "runs/a");
  assert.equal(parse(["--oversubscribe", "run.ts", "--oversubscribe"]).oversubscribe, true);
  assert.deepEqual(parse(["--oversubscribe", "run.ts", "--oversubscribe"]).scriptArgs, [
    "--oversubscribe",
  ]);
  assert.equal(parse(["--no-check", "run.ts", "--no-check"]).noCheck, true);
  assert.deepEqual(parse(["--no-check", "run.ts", "--no-check"]).scriptArgs, ["--no-check"]);
  const unchecked = parseLaunchArgs(["run.ts"], (n) => n === "DTRAIN_NO_CHECK" ? "1" : undefined);
  assert.equal((unchecked as LaunchOptions).noCheck, true);
  assert.throws(
    () => parse(["--device", "tpu", "run.ts"]),
    /--device tpu is not one of auto, cpu, cuda/,
  );
  assert.equal(
    (parseLaunchArgs(
      ["run.ts"],
      (n) => n === "DTRAIN_LOG_RANKS" ? "all" : undefined,
    ) as LaunchOptions).logRanks,
    "all",
  );
});

Deno.test("parseLaunchArgs() rejects bad values with errors that name the option", () => {
  const cases: [string[], RegExp][] = [
    [["--nproc", "0", "a.ts"], /--nproc must be an integer >= 1, got "0"/],
    [["--nproc", "1.5", "a.ts"], /--nproc must be an integer >= 1, got "1.5"/],
    [["--timeout=-3", "a.ts"], /--timeout must be a number of seconds > 0, got "-3"/],
    [["--timeout", "-3", "a.ts"], /Option '--timeout' argument is ambiguous/],
    [["--grace", "soon", "a.ts"], /--grace must be a number of seconds > 0, got "soon"/],
    [["--master-port", "70000", "a.ts"], /--master-port 70000 is not a TCP port/],
    [
      ["--nnodes", "2", "--node-rank", "2", "--rdzv-token", "x".repeat(20), "a.ts"],
      /--node-rank 2 must be below --nnodes 2/,
    ],
    [
      ["--nnodes", "2", "a.ts"],
      /--nnodes > 1 needs the run's shared secret on every node: --rdzv-token-file FILE/,
    ],
    [["--rdzv-token", "a", "--rdzv-token-file", "b", "a.ts"], /not both/],
    [["--log-ranks", "some", "a.ts"], /--log-ranks must be "all" or a comma list of ranks/],
    [["--bogus", "a.ts"], /Unknown option '--bogus'/],
    [["--nproc", "2"], /No script given/],
    [[], /No script given/],
  ];
  for (const [args, message] of cases) {
    assert.throws(() => parseLaunchArgs(args, noEnv), message, args.join(" "));
  }
  assert.equal(checkLogRanks("0,2,10"), "0,2,10");
});

Deno.test('parseLaunchArgs() returns "help" for --help before the script only', () => {
  assert.equal(parseLaunchArgs(["--nproc", "2", "--help"], noEnv), "help");
  assert.equal(parseLaunchArgs(["-h"], noEnv), "help");
  assert.notEqual(parseLaunchArgs(["a.ts", "--help"], noEnv), "help");
});

Deno.test("launchHelp() lists every option under its topic with its default", () => {
  const help = launchHelp();
  for (const topic of ["Processes:", "Nodes and rendezvous:", "Failures and hangs:", "Output:"]) {
    assert.ok(help.includes(topic), topic);
  }
  for (const o of LAUNCH_OPTIONS) {
    assert.match(
      help,
      new RegExp(
        `--${o.name}${o.value ? " \\S+" : ""} .*\\(default: ${
          o.defaultText.replace(/[()$<>÷]/g, ".")
        }\\)`,
      ),
    );
  }
  assert.ok(help.indexOf("--nproc") < help.indexOf("Nodes and rendezvous:"));
  assert.ok(help.indexOf("--hang-warn") > help.indexOf("Failures and hangs:"));
});

Deno.test("cli main() dispatches verbs, prints help and version, and returns usage errors as 2", async () => {
  assert.ok(Object.hasOwn(VERBS, "run"));
  assert.match(generalHelp(), /^\s+run\s+start N rank processes/m);
  const lines: string[] = [];
  const log = console.log, error = console.error;
  console.log = (...a: unknown[]) => lines.push(a.join(" "));
  console.error = (...a: unknown[]) => lines.push(a.join(" "));
  try {
    assert.equal(await main(["--version"]), 0);
    assert.match(lines.pop()!, /^dtrain \d+\.\d+\.\d+ \(deno /);
    assert.equal(await main(["--help"]), 0);
    assert.match(lines.pop()!, /Verbs:/);
    assert.equal(await main(["run", "--help"]), 0);
    assert.match(lines.pop()!, /^Usage: dtrain \[run\]/);
    assert.equal(await main(["--nproc", "0", "a.ts"]), 2);
    assert.match(lines.pop()!, /--nproc must be an integer >= 1/);
    assert.equal(await main(["run", "--nproc", "x", "a.ts"]), 2);
    assert.equal(
      await main(["does_not_exist.ts"]),
      2,
      "a script that is not there is a bad command line",
    );
    assert.match(lines.pop()!, /Cannot launch does_not_exist\.ts: no such file/);
  } finally {
    console.log = log;
    console.error = error;
  }
});
