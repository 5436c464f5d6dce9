/**
 * Every command-line refusal of every verb exits 2 (the code `dtrain --help`
 * documents for a bad command line and for errors), never 1 or another code
 * that means an answer (diff's "the runs differ", a rank's exit code); the
 * refusal prints one line that names what was wrong. Walks each verb's bad
 * flags and bad inputs through cli.ts's main(), in this process (nothing is
 * started), and runs one stray error through the real command.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { main, VERBS } from "../../cli.ts";
import { baseSpec, withTempDir, writeRun } from "../run_record/_fixtures.ts";
import { REPO } from "./launch_helpers.ts";

/** Runs main(argv) with console output captured. */
async function run(argv: string[]): Promise<{ code: number; err: string }> {
  const lines: string[] = [];
  const log = console.log, error = console.error, warn = console.warn;
  console.log = () => {};
  console.error = console.warn = (...a: unknown[]) => lines.push(a.join(" "));
  try {
    return { code: await main(argv), err: lines.join("\n") };
  } finally {
    console.log = log;
    console.error = error;
    console.warn = warn;
  }
}

/** The refusals of each verb: argv (after "dtrain") and what the message must say. */
function cases(dir: string): Record<string, [string[], RegExp][]> {
  const script = join(dir, "a.ts");
  Deno.writeTextFileSync(script, "console.log('never run');\n");
  const openToken = join(dir, "token-644");
  Deno.writeTextFileSync(openToken, "0123456789abcdef0123456789abcdef\n");
  Deno.chmodSync(openToken, 0o644);
  const shortTokenFile = join(dir, "token-short");
  Deno.writeTextFileSync(shortTokenFile, "short\n");
  Deno.chmodSync(shortTokenFile, 0o600);
  const good = writeRun(dir, "good", baseSpec());
  const noRecord = join(dir, "empty");
  Deno.mkdirSync(noRecord);
  const corrupt = join(dir, "corrupt");
  Deno.mkdirSync(corrupt);
  Deno.writeTextFileSync(join(corrupt, "run.json"), "{ not json");
  const launcher: [string[], RegExp][] = [
    [["--nproc", "0", script], /--nproc must be an integer >= 1/],
    [["--nproc", "x", script], /--nproc must be an integer/],
    [["--no-such-flag", script], /Unknown option '--no-such-flag'/],
    [["--nproc", "1"], /No script given/],
    [["--timeout", "0", script], /--timeout must be a number of seconds > 0/],
    [["--master-port", "70000", script], /is not a TCP port/],
    [["--device", "tpu", script], /--device tpu is not one of/],
    [["--log-ranks", "some", script], /--log-ranks must be "all"/],
    [["--nnodes", "2", "--node-rank", "2", script], /--node-rank 2 must be below --nnodes 2/],
    [["--nnodes", "2", script], /needs the run's shared secret/],
    [
      ["--rdzv-token", "0123456789abcdef", "--rdzv-token-file", openToken, script],
      /not both/,
    ],
    [["--no-check", "--rdzv-token", "short", script], /has 5 characters, at least 16/],
    [["--no-check", "--rdzv-token", "0123456789 abcdef", script], /contains whitespace/],
    [["--no-check", "--rdzv-token-file", shortTokenFile, script], /has 5 characters/],
    [["--no-check", "--rdzv-token-file", openToken, script], /its mode is 0644/],
    [["--no-check", "--rdzv-token-file", join(dir, "none"), script], /Cannot read the rendezvous/],
    [["--no-check", join(dir, "missing.ts")], /Cannot launch .*missing\.ts: no such file/],
    [["--no-check", dir], /is not a file/],
    [["--no-check", "--resume", join(dir, "nowhere"), script], /--resume .*: no such folder/],
    [["--no-check", "--device", "cpu", "--nproc", "100000", script], /--nproc 100000/],
  ];
  return {
    "(default)": launcher,
    run: launcher.map(([argv, msg]) => [["run", ...argv], msg]),
    diff: [
      [["diff", "--no-such-flag", good, good], /Unknown option/],
      [["diff", good], /expected two run directories, got 1/],
      [["diff", good, good, "--loss-tol", "abc"], /--loss-tol must be a number/],
      [["diff", good, noRecord], /is not a dtrain run directory/],
      [["diff", good, corrupt], /run\.json:1: not valid JSON/],
    ],
    rerun: [
      [["rerun", "--no-such-flag", good], /Unknown option/],
      [["rerun"], /usage: dtrain rerun/],
      [["rerun", good, good], /usage: dtrain rerun/],
      [["rerun", noRecord], /cannot read .*run\.json/],
      [["rerun", corrupt], /run\.json:1: not valid JSON/],
    ],
    report: [
      [["report", "--no-such-flag", good], /Unknown option/],
      [["report", good, "--smoothing", "2"], /--smoothing must be a number/],
      [["report", noRecord], /is not a dtrain run directory/],
    ],
    check: [
      [["check", "--no-such-flag", script], /Unknown option|unknown/i],
      [["check", "--nproc", "zero", script], /--nproc/],
      [["check", join(dir, "missing.ts")], /cannot read the script/],
    ],
    doctor: [
      [["doctor", "--no-such-flag"], /Unknown option/],
      [["doctor", "--nnodes", "0"], /--nnodes 0: expected a whole number >= 1/],
    ],
    prepare: [
      [["prepare"], /expected INPUT and DIR, got 0 argument/],
      [["prepare", "--no-such-flag", script, dir], /Unknown option '--no-such-flag'/],
      [["prepare", "--tokenizer", "foo", script, dir], /unknown tokenizer "foo"/],
      [["prepare", join(dir, "none.txt"), dir], /INPUT .*none\.txt does not exist/],
    ],
    exec: [
      [["exec"], /^$/], // prints its usage on stdout, and exits 2 as for a bad command line
      [["exec", join(dir, "missing.ts")], /exec: no script at/],
    ],
  };
}

Deno.test("every verb's command-line refusals exit 2 with a message naming the problem", async () => {
  await withTempDir(async (dir) => {
    const all = cases(dir);
    for (const verb of Object.keys(VERBS)) {
      assert.ok(all[verb]?.length, `the walk has refusal cases for the verb ${verb}`);
    }
    const wrong: string[] = [];
    for (const [verb, list] of Object.entries(all)) {
      for (const [argv, message] of list) {
        const r = await run(argv);
        if (r.code !== 2 || !message.test(r.err)) {
          wrong.push(`${verb}: dtrain ${argv.join(" ")} → exit ${r.code}: ${r.err.slice(0, 300)}`);
        }
      }
    }
    assert.deepEqual(
      wrong,
      [],
      `refusals that did not exit 2 with their message:\n${wrong.join("\n")}`,
    );
  });
});

Deno.test("an error no verb expected (a stack overflow, a stray rejection) exits 2, never diff's 'differ' (1)", async () => {
  await withTempDir(async (dir) => {
    // A verb whose main throws something it did not plan for.
    VERBS["test-throws"] = {
      summary: "",
      main: () => {
        const down = (n: number): number => down(n + 1) + 1;
        return Promise.resolve(down(0));
      },
    };
    try {
      const r = await run(["test-throws"]);
      assert.equal(r.code, 2, r.err);
      assert.match(r.err, /^dtrain: Maximum call stack size exceeded/);
    } finally {
      delete VERBS["test-throws"];
    }
    // The real command: a rejection nobody awaits, raised from inside a verb, ends it with 2 too.
    const stray = join(dir, "stray.ts");
    Deno.writeTextFileSync(
      stray,
      `import { exitOnStrayErrors } from ${JSON.stringify(join(REPO, "cli.ts"))};
exitOnStrayErrors();
Promise.reject(new Error("nobody awaited me"));
await new Promise((r) => setTimeout(r, 5000));
Deno.exit(0);
`,
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--config", join(REPO, "deno.json"), stray],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const err = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 2, err);
    assert.match(err, /dtrain: unexpected error: nobody awaited me/);
  });
});
