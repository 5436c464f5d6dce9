/**
 * Running the user's script for one stage of `dtrain check`: alone (plain
 * `deno run`, a world of one) or under the launcher with N ranks, with the
 * probe's environment, its output kept in <stage folder>/output.log, a
 * wall-clock limit, and no process left behind.
 */
import { join } from "node:path";
import { ENV as WORLD_ENV } from "../distributed/control/env.ts";
import { signalExitCode } from "../os/exit_status.ts";
import { installLayout } from "../os/install_layout.ts";
import { CHECK_ENV } from "./env.ts";

/** This dtrain's files: the config every run uses, the command, the probe's preload. */
const LAYOUT = (() => {
  const layout = installLayout();
  if (!layout) throw new Error("dtrain check needs dtrain's own files on disk (a file: URL)");
  return layout;
})();
/** Output lines kept for the verdict when a run fails. */
const TAIL_LINES = 12;
/** Seconds the launcher gives its ranks after SIGTERM before SIGKILL (a check run has nothing to save). */
const GRACE_S = 5;

/** The variables that place a process in a launched world; a stage run must not inherit them from the check's caller. */
const INHERITED_WORLD = [
  WORLD_ENV.RANK,
  WORLD_ENV.LOCAL_RANK,
  WORLD_ENV.WORLD_SIZE,
  WORLD_ENV.LOCAL_WORLD_SIZE,
  WORLD_ENV.GROUP_RANK,
  WORLD_ENV.MASTER_ADDR,
  WORLD_ENV.MASTER_PORT,
  WORLD_ENV.RUN_ID,
  WORLD_ENV.RUN_DIR,
  WORLD_ENV.STORE_TOKEN,
  WORLD_ENV.NNODES,
  WORLD_ENV.RESTART_COUNT,
  WORLD_ENV.LAUNCHER_PID,
];

/** One run of the user's script. */
export interface RunSpec {
  /** folder name under the check folder ("sampler", "single", …) */
  name: string;
  /** how the run is described in the verdict, e.g. "launcher --nproc 2" */
  title: string;
  /** null: a single process without the launcher; otherwise the launcher's --nproc */
  nproc: number | null;
  /** the probe's variables for this run (DTRAIN_CHECK_OUT is added) */
  env: Record<string, string>;
}

/** What the check needs to start runs. */
export interface RunContext {
  script: string;
  scriptArgs: readonly string[];
  /** the check folder */
  outDir: string;
  /** wall-clock limit of one run, seconds */
  timeoutS: number;
  /** the environment runs start from (default: this process's) */
  baseEnv?: Record<string, string>;
}

/** How a run ended and where its files are. */
export interface RunResult {
  spec: RunSpec;
  /** <check folder>/<name> */
  dir: string;
  /** where the probe wrote rank-<r>.jsonl and kept checkpoints */
  probeDir: string;
  /** the launcher's run directory (also what a single process gets as DTRAIN_RUN_DIR, if any) */
  runDir: string;
  /** exit code (128 + signal number when killed) */
  code: number;
  /** true when the run was stopped at the time limit */
  timedOut: boolean;
  /** the time limit it ran under, seconds */
  limitS: number;
  /** <dir>/output.log: the run's stdout and stderr */
  logPath: string;
  /** its last lines */
  tail: string[];
}

/** The folders of a run, made before it starts (a resume run's run dir is filled in between). */
export function runFolders(
  outDir: string,
  name: string,
): { dir: string; probeDir: string; runDir: string } {
  const dir = join(outDir, name);
  return { dir, probeDir: join(dir, "probe"), runDir: join(dir, "run") };
}

/** The caller's environment without launch variables or an outer check's settings, plus `extra`. */
export function stageEnv(
  extra: Record<string, string>,
  base: Record<string, string> = Deno.env.toObject(),
): Record<string, string> {
  const env = { ...base };
  for (const name of INHERITED_WORLD) delete env[name];
  for (const name of Object.keys(env)) if (name.startsWith("DTRAIN_CHECK_")) delete env[name];
  // `dtrain check` type-checked the script once before its runs.
  return { ...env, DTRAIN_NO_CHECK: "1", ...extra };
}

/**
 * Runs the script once as `spec` says and waits for it; past the time limit
 * it is stopped (SIGTERM, which the launcher forwards to its ranks, then
 * SIGKILL). Resolves when the process has exited and its output is logged.
 */
export async function runStage(spec: RunSpec, ctx: RunContext): Promise<RunResult> {
  const { dir, probeDir, runDir } = runFolders(ctx.outDir, spec.name);
  Deno.mkdirSync(probeDir, { recursive: true });
  // Alone, the script gets the probe preloaded; under the launcher, the rank bootstrap installs it.
  const args = spec.nproc === null
    ? [
      "run",
      "-A",
      "--config",
      LAYOUT.config,
      "--preload",
      LAYOUT.probeMain,
      ctx.script,
      ...ctx.scriptArgs,
    ]
    : [
      "run",
      "-A",
      "--config",
      LAYOUT.config,
      LAYOUT.cli,
      "--nproc",
      String(spec.nproc),
      "--run-dir",
      runDir,
      "--timeout",
      String(ctx.timeoutS),
      "--grace",
      String(GRACE_S),
      "--log-ranks",
      "all",
      ctx.script,
      ...ctx.scriptArgs,
    ];
  const env = stageEnv({ ...spec.env, [CHECK_ENV.OUT]: probeDir }, ctx.baseEnv);
  const logPath = join(dir, "output.log");
  const log = Deno.openSync(logPath, { write: true, create: true, truncate: true });
  const tail: string[] = [];
  const child = new Deno.Command(Deno.execPath(), {
    args,
    env,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let timedOut = false;
  let killer: ReturnType<typeof setTimeout> | undefined;
  const limit = setTimeout(() => {
    timedOut = true;
    signal(child, "SIGTERM");
    killer = setTimeout(() => signal(child, "SIGKILL"), (GRACE_S + 5) * 1000);
  }, ctx.timeoutS * 1000);
  try {
    const [status] = await Promise.all([
      child.status,
      copyLines(child.stdout, log, tail),
      copyLines(child.stderr, log, tail),
    ]);
    const code = status.signal ? signalExitCode(status.signal) : status.code;
    return { spec, dir, probeDir, runDir, code, timedOut, limitS: ctx.timeoutS, logPath, tail };
  } finally {
    clearTimeout(limit);
    clearTimeout(killer);
    signal(child, "SIGKILL"); // no-op once it exited; covers an exception while waiting
    log.close();
  }
}

function signal(child: Deno.ChildProcess, sig: Deno.Signal): void {
  try {
    child.kill(sig);
  } catch { /* already exited */ }
}

/** Appends a stream's lines to the log and keeps the last TAIL_LINES in `tail`. */
async function copyLines(
  stream: ReadableStream<Uint8Array>,
  log: Deno.FsFile,
  tail: string[],
): Promise<void> {
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let partial = "";
  const keep = (line: string) => {
    tail.push(line);
    if (tail.length > TAIL_LINES) tail.shift();
  };
  for await (const chunk of stream) {
    log.writeSync(chunk);
    const text = partial + decoder.decode(chunk, { stream: true });
    const lines = text.split("\n");
    partial = lines.pop()!;
    lines.forEach(keep);
  }
  if (partial) {
    keep(partial);
    log.writeSync(encoder.encode("\n"));
  }
}

/** One line saying how a failed run ended, for a FAIL row. */
export function describeExit(r: RunResult): string {
  const how = r.timedOut
    ? `was stopped at the time limit of ${r.limitS} s (--run-timeout)`
    : `exited with code ${r.code}`;
  const last = r.tail.filter((l) => l.trim() !== "").slice(-3).join(" | ");
  return `the run (${r.spec.title}) ${how}; see ${r.logPath}${last ? `: ${last}` : ""}`;
}
