/**
 * `dtrain rerun <run-dir>`: relaunches a recorded run with the same script
 * (refused when its sha256 changed, unless --force), arguments, launcher
 * options — hence config, seed and world size — from the same working
 * directory, into a new run directory. It runs exactly the file it verified:
 * a record whose command line names another script than the one hashed is
 * refused, the launch gets the verified file's real path, and the launcher
 * checks the hash again just before it starts the ranks.
 */
import { parseArgs } from "node:util";
import { basename, isAbsolute, join, resolve } from "node:path";
import { parseJsonFile, RUN_FILES, RunRecordSchema } from "../run_record/format.ts";
import { sha256File } from "../run_record/record.ts";
import { parseLaunchArgs } from "../launch/options.ts";

const HELP = `usage: dtrain rerun <run-dir> [--force] [--run-dir DIR]

Relaunches the run recorded in <run-dir>/run.json: the same launch command
(script, script arguments, --nproc, --nnodes, …) from the same working
directory, into a new run directory (default runs/<time>-rerun-<name>).
The script's sha256 must match the recorded one; --force reruns anyway.
The command line must name the recorded script; the launch runs that file.
Exit status: the relaunched run's, or 2 when the rerun is refused.`;

/** What the launcher must find before it starts a rerun's ranks. */
export interface RerunExpectation {
  /** the sha256 of the script that rerun verified */
  scriptSha256: string;
}

/** The launcher, given a command line without the leading "dtrain". */
export type Launch = (argv: string[], expect?: RerunExpectation) => Promise<number>;

/** The exit status of every refusal (the status of all dtrain errors). */
const REFUSED = 2;

/** The real path of `path`, or its absolute form when it does not exist. */
function realPath(path: string): string {
  try {
    return Deno.realPathSync(path);
  } catch {
    return resolve(path);
  }
}

/**
 * The recorded launch command with the new run directory and with its script
 * replaced by `script` (the verified real path); throws when the command does
 * not parse or names another file than `script`.
 */
export function verifiedArgv(
  recorded: readonly string[],
  newRunDir: string,
  cwd: string,
  script: string,
): string[] {
  const argv = rerunArgv(recorded, newRunDir);
  let opts;
  try {
    opts = parseLaunchArgs(argv, () => undefined);
  } catch (e) {
    throw new Error(`its recorded command line does not parse: ${(e as Error).message}`);
  }
  if (opts === "help") throw new Error("its recorded command line asks for --help");
  const named = realPath(resolve(cwd, opts.script));
  if (named !== script) {
    throw new Error(
      `its recorded command line launches ${named}, but the script it recorded (and whose ` +
        `sha256 was checked) is ${script}: the record contradicts itself`,
    );
  }
  const at = argv.length - opts.scriptArgs.length - 1;
  return [...argv.slice(0, at), script, ...argv.slice(at + 1)];
}

/** Options of the launch command that take a value (so their values are skipped when editing argv). */
const RUN_DIR_FLAG = "--run-dir";

/** The recorded command line without its program name and with a new run directory. */
export function rerunArgv(recorded: readonly string[], newRunDir: string): string[] {
  const args = recorded.slice(1);
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === RUN_DIR_FLAG) {
      i++; // drop its value too
      continue;
    }
    if (a.startsWith(RUN_DIR_FLAG + "=")) continue;
    out.push(a);
  }
  // Options end at the script path; --run-dir goes in front of everything.
  return [RUN_DIR_FLAG, newRunDir, ...(out[0] === "run" ? out.slice(1) : out)];
}

/** Runs `dtrain rerun`; resolves to the exit code. */
export async function rerunMain(args: string[], launch: Launch): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      options: {
        force: { type: "boolean" },
        "run-dir": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      allowPositionals: true,
    });
  } catch (e) {
    console.error(`dtrain rerun: ${(e as Error).message}\n${HELP}`);
    return 2;
  }
  if (parsed.values.help) {
    console.log(HELP);
    return 0;
  }
  const dir = parsed.positionals[0];
  if (!dir || parsed.positionals.length > 1) {
    console.error(HELP);
    return 2;
  }
  const path = join(dir, RUN_FILES.run);
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (e) {
    console.error(`dtrain rerun: cannot read ${path}: ${(e as Error).message}`);
    return 2;
  }
  let record;
  try {
    record = parseJsonFile(RunRecordSchema, text, path);
  } catch (e) {
    console.error(`dtrain rerun: ${(e as Error).message}`);
    return REFUSED;
  }
  const cwd = record.command.cwd;
  const script = realPath(
    isAbsolute(record.script.path) ? record.script.path : join(cwd, record.script.path),
  );
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  const newDir = parsed.values["run-dir"] ?? join(cwd, "runs", `${stamp}-rerun-${basename(dir)}`);
  let argv: string[];
  try {
    argv = verifiedArgv(record.command.argv, newDir, cwd, script);
  } catch (e) {
    console.error(`dtrain rerun: refusing ${path}: ${(e as Error).message}`);
    return REFUSED;
  }
  let hash: string;
  try {
    hash = await sha256File(script);
  } catch (e) {
    console.error(
      `dtrain rerun: the recorded script ${script} cannot be read: ${(e as Error).message}`,
    );
    return REFUSED;
  }
  if (hash !== record.script.sha256) {
    const msg =
      `the script ${script} changed since the run (sha256 ${
        record.script.sha256.slice(0, 12)
      }… then, ` +
      `${hash.slice(0, 12)}… now)`;
    if (!parsed.values.force) {
      console.error(`dtrain rerun: ${msg}; rerun with --force to use it anyway`);
      return REFUSED;
    }
    console.error(`dtrain rerun: warning: ${msg}; rerunning anyway (--force)`);
  }
  console.error(`dtrain rerun: relaunching ${record.runId} from ${cwd} into ${newDir}`);
  Deno.chdir(cwd);
  return await launch(argv, { scriptSha256: hash });
}
