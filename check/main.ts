/**
 * `dtrain check script.ts --nproc N`: the staged single-process → DDP
 * migration check, run on the user's own script. Parses the command line,
 * runs the stages (check/run_check.ts) and prints the verdict table.
 *
 * The protocol. Every run of the script gets DTRAIN_CHECK_OUT=<folder>, so
 * the probe (check/probe.ts) — installed on the library's hook points by the
 * rank bootstrap, or preloaded into a run without the launcher — records,
 * per rank, each DistributedSampler pass, each backward's loss and the
 * parameters it saw, each optimizer step's gradient norm and each checkpoint.
 *
 * 1. sampler — `launcher --nproc N` with DTRAIN_CHECK_STAGE=sampler: each
 *    DataLoader pass yields its first batch only, so the epoch loop runs one
 *    step per epoch (a script may use a batch in setup), and each rank ends
 *    at the pass after a sampler's second pass that training used (a
 *    backward followed it; a setup pass or a peek at a batch does not
 *    count). Checked for the sampler training used most: the ranks report
 *    the same dataset length and numReplicas = N; per epoch the union of the
 *    ranks' indices covers the dataset, repeats only as torch's padding
 *    (≤ N-1 repeats of the start of the order) or omits only dropLast's
 *    trim (≤ N-1); and the order changes between the two epochs. Any other
 *    sampler (an evaluation's) is checked for its coverage.
 * 2. gradients — K steps (DTRAIN_CHECK_MAX_STEPS=K stops a Trainer; the probe
 *    ends any other loop at its (K+1)-th optimizer step, DTRAIN_CHECK_STOP_AFTER)
 *    with DTRAIN_CHECK_PLAIN=1 (no autocast, loss scaling, clipping or
 *    dropout, whose masks cannot match between one process and N: the
 *    probe sets the plain numerics policy, and a Trainer's config's
 *    `numerics` section says so), three
 *    times: (a) a single process without the launcher, (b) `launcher
 *    --nproc 1`, (c) `launcher --nproc N`. A step's loss is the sum of the
 *    backward losses since the previous step, averaged over ranks; its
 *    gradient norm is the probe's f64 norm before the update. (b) and (c)
 *    must agree with (a) within a relative 1e-4 (f32 reduction order moves
 *    them by ~1e-6), and in (c) every rank must hold the same parameters and
 *    gradient norm at every step. The probe also records each step's samples
 *    (the DataLoader batches its backward passes used), learning rate and
 *    digests of the generator's and the optimizer's state, so a failure names
 *    what was measured to differ.
 * 3. state — run (c) also checkpoints every step (DTRAIN_CHECK_CKPT_EVERY=1;
 *    a loop of its own saves when it likes), and the probe hard-links each
 *    checkpoint aside. The checkpoint of step j = ⌊K/2⌋ (else the latest one
 *    before it, else before K) must load with its hashes verified, hold
 *    model keys without "module.", and hold bit for bit the parameters rank
 *    0 used at step j+1. Then it is put into fresh run directories (same
 *    place relative to the run directory, `latest` naming it) and the script
 *    runs again: with the launcher on N ranks, steps j+1..K must repeat run
 *    (c) bit for bit; as a single process given DTRAIN_RUN_DIR (a world of
 *    one, so the Trainer builds no DDP wrapper and loads strictly into the
 *    plain model), its parameters after the load must equal the saved ones
 *    and its losses match within 1e-4. Checkpoints saved outside the run
 *    directory cannot be staged: the resume checks are skipped then.
 */
import { parseArgs } from "node:util";
import { join, resolve } from "node:path";
import { runCheck } from "./run_check.ts";
import { checkScriptTypes } from "./type_check.ts";
import { installLayout } from "../os/install_layout.ts";
import { formatTable, summary } from "./verdict.ts";
import { exactWorldSizes, runExactCheck } from "./exact_check.ts";

const DEFAULTS = { nproc: 2, steps: 5, timeoutS: 300 };

/** `dtrain check --help`. */
export function checkHelp(): string {
  return `Usage: dtrain check [options] script.ts [-- script args…]

Runs the staged single-process → DDP migration check on a training script and prints a verdict
table (one row per check, with the measured numbers); exits 0 when nothing failed, 1 otherwise.

Stages (each run of the script is recorded by the check's probe, DTRAIN_CHECK_OUT):
  1 sampler    launcher --nproc N, one batch per loader pass (DTRAIN_CHECK_STAGE=sampler; each rank
               stops after 2 passes that training used; setup passes and peeks do not count): ranks
               agree on the dataset; every epoch covers it with no overlap or omission beyond torch's
               padding (or dropLast); the order changes per epoch; an evaluation's sampler covers its set.
  2 gradients  K steps with autocast, loss scaling, clipping and dropout off (DTRAIN_CHECK_PLAIN=1), as (a) one
               process, (b) launcher --nproc 1, (c) launcher --nproc N with B/N per rank: step losses
               and gradient norms of (b) and (c) agree with (a) within 1e-4 relative (f32 reduction
               order differences are ~1e-6); (c)'s ranks hold identical parameters at every step. A
               failure names what was measured: the samples of a step, its rate, the random state.
  3 state      (c) checkpoints every step (DTRAIN_CHECK_CKPT_EVERY=1): the checkpoint of step ⌊K/2⌋
               verifies, has no "module." keys and holds the trained parameters bit for bit; resumed
               from it, N ranks repeat steps ⌊K/2⌋+1..K bit for bit, and one process (given
               DTRAIN_RUN_DIR, a plain model) loads it exactly and agrees within 1e-4.
  A Trainer stops after K steps by itself (DTRAIN_CHECK_MAX_STEPS); the probe ends a loop of your own
  at its (K+1)-th optimizer step. Such a loop is checked in stage 3 if it saves with a
  CheckpointManager under the run directory (getWorld().runDir) and resumes from its latest checkpoint.

Options:
  --nproc N            ranks of the distributed runs, at least 2 (default: ${DEFAULTS.nproc})
  --steps K            optimizer steps compared in stages 2 and 3, at least 2 (default: ${DEFAULTS.steps})
  --out DIR            folder for every run's logs, probe records and run directory
                       (default: runs/check-<UTC time>)
  --run-timeout SECS   wall-clock limit of each run of the script (default: ${DEFAULTS.timeoutS})
  --exact              instead of the stages: run the script with exact mode switched on, as one
                       process and at world sizes 1, 2, 4, … up to --nproc (a power of two; default
                       ${DEFAULTS.nproc}), with the numerics it asks for (autocast, loss scaling,
                       clipping, dropout on), hash every parameter, gradient, buffer and optimizer-state
                       tensor at each of K steps, and say "identical" (exit 0) or the first step and
                       tensor where two runs' bits part (exit 1)
  -h, --help           this text`;
}

/** The parsed command line of `dtrain check`. */
export interface CheckArgs {
  script: string;
  scriptArgs: string[];
  nproc: number;
  steps: number;
  outDir: string;
  timeoutS: number;
  /** `--exact`: compare world sizes bit for bit in exact mode instead of the staged check */
  exact: boolean;
}

function intOption(name: string, raw: string | undefined, fallback: number, min: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < min) {
    throw new RangeError(`--${name} must be an integer >= ${min}, got "${raw}"`);
  }
  return n;
}

/** The UTC time as the default folder name uses it: 20251129-093000. */
function stamp(now = new Date()): string {
  return now.toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
}

/**
 * Parses `dtrain check` arguments (options before or after the script; the
 * script's own arguments after `--`). Returns "help" for --help; throws a
 * RangeError naming the bad option.
 */
export function parseCheckArgs(args: readonly string[]): CheckArgs | "help" {
  const cut = args.indexOf("--");
  const own = cut < 0 ? [...args] : args.slice(0, cut);
  const scriptArgs = cut < 0 ? [] : args.slice(cut + 1);
  const { values, positionals } = parseArgs({
    args: own,
    allowPositionals: true,
    options: {
      nproc: { type: "string" },
      steps: { type: "string" },
      out: { type: "string" },
      "run-timeout": { type: "string" },
      exact: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) return "help";
  if (positionals.length !== 1) {
    throw new RangeError(
      positionals.length === 0
        ? "no training script given (usage: dtrain check script.ts --nproc N)"
        : `one script expected, got ${positionals.length} ` +
          `(${positionals.join(" ")}); pass the script's own arguments after --`,
    );
  }
  const exact = values.exact === true;
  const nproc = intOption("nproc", values.nproc, DEFAULTS.nproc, exact ? 1 : 2);
  if (exact) exactWorldSizes(nproc); // refuses an N that is not a power of two
  return {
    script: positionals[0]!,
    scriptArgs,
    nproc,
    exact,
    steps: intOption("steps", values.steps, DEFAULTS.steps, 2),
    outDir: resolve(values.out ?? join("runs", `check${exact ? "-exact" : ""}-${stamp()}`)),
    timeoutS: intOption("run-timeout", values["run-timeout"], DEFAULTS.timeoutS, 1),
  };
}

/**
 * `dtrain check`: runs the three stages on the script and prints the
 * verdict. Resolves to the exit code: 0 when no check failed, 1 when one
 * did, 2 for a usage error.
 *
 * @example
 * ```ts
 * Deno.exit(await checkMain(["examples/toy_classifier.ts", "--nproc", "2", "--steps", "4"]));
 * ```
 */
export async function checkMain(args: string[]): Promise<number> {
  let parsed: CheckArgs | "help";
  try {
    parsed = parseCheckArgs(args);
  } catch (e) {
    console.error(`dtrain check: ${(e as Error).message}\n(see \`dtrain check --help\`)`);
    return 2;
  }
  if (parsed === "help") {
    console.log(checkHelp());
    return 0;
  }
  try {
    Deno.statSync(parsed.script);
  } catch {
    console.error(`dtrain check: cannot read the script ${parsed.script}`);
    return 2;
  }
  // Type-checked once here (the stage runs then skip the launcher's check): a script with type
  // errors is a script to fix before its migration can be judged.
  const layout = installLayout();
  if (layout?.kind === "checkout" && Deno.env.get("DTRAIN_NO_CHECK") !== "1") {
    const types = await checkScriptTypes(parsed.script, {
      config: layout.config,
      onCheck: () => console.log(`dtrain check: type-checking ${parsed.script}`),
    });
    if (!types.ok) {
      console.error(
        `${types.output}\ndtrain check: ${parsed.script} does not type-check (the errors are above)`,
      );
      return 1;
    }
  }
  Deno.mkdirSync(parsed.outDir, { recursive: true });
  if (parsed.exact) return await exactMain(parsed);
  console.log(
    `dtrain check: ${parsed.script}, ${parsed.nproc} ranks, ${parsed.steps} steps; logs in ${parsed.outDir}`,
  );
  const rows = await runCheck({ ...parsed, log: (line) => console.log(line) });
  const table = formatTable(rows);
  const { line, code } = summary(rows);
  Deno.writeTextFileSync(join(parsed.outDir, "verdict.txt"), `${table}\n${line}\n`);
  console.log(`\n${table}\n\n${line}\nlogs, probe records and run directories: ${parsed.outDir}`);
  return code;
}

/** `dtrain check --exact`: the comparison of world sizes, its table and closing line. */
async function exactMain(parsed: CheckArgs): Promise<number> {
  const sizes = exactWorldSizes(parsed.nproc).join(", ");
  console.log(
    `dtrain check --exact: ${parsed.script}, one process and world sizes ${sizes}, ${parsed.steps} steps; ` +
      `logs in ${parsed.outDir}`,
  );
  const { rows, line, code } = await runExactCheck({ ...parsed, log: (l) => console.log(l) });
  const table = formatTable(rows);
  Deno.writeTextFileSync(join(parsed.outDir, "verdict.txt"), `${table}\n${line}\n`);
  console.log(`\n${table}\n\n${line}\nlogs and probe records: ${parsed.outDir}`);
  return code;
}

if (import.meta.main) Deno.exit(await checkMain(Deno.args));
