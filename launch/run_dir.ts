/**
 * The run directory: its id and default name (`runs/<UTC time>-<script>-<hex>`),
 * and `launch.json`, the launcher's record of what it started and how it
 * ended (run.json, the full rerun record, is written by later code; this
 * keeps its place).
 */
import { basename, extname, join, resolve } from "node:path";

/**
 * A run id: UTC start time, the script's name and 4 random hex digits, e.g.
 * `20251129-093000-train-3fa2`. The suffix keeps ids unique on a machine
 * (two runs of one script in the same second, from different folders), since
 * machine-wide resources such as shared-memory segments are named after it.
 */
export function makeRunId(script: string, now = new Date()): string {
  const t = now.toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  const name = basename(script, extname(script)).replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 100) ||
    "script";
  const suffix = Array.from(
    crypto.getRandomValues(new Uint8Array(2)),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("");
  return `${t}-${name}-${suffix}`;
}

/**
 * Creates the run directory. With no explicit path, node 0 takes
 * `runs/<runId>` and adds `-2`, `-3`, … if another run already has that
 * name; the returned id matches the directory. Other nodes (or an explicit
 * --run-dir) use the given path as is, creating it if needed.
 */
export function createRunDir(
  opts: { runDir: string | null; runId: string; exclusive: boolean; cwd?: string },
): { dir: string; runId: string; created: boolean } {
  if (opts.runDir !== null) {
    const dir = resolve(opts.cwd ?? ".", opts.runDir);
    return { dir, runId: opts.runId, created: mkdirNew(dir) };
  }
  const parent = resolve(opts.cwd ?? ".", "runs");
  Deno.mkdirSync(parent, { recursive: true });
  if (!opts.exclusive) {
    const dir = join(parent, opts.runId);
    return { dir, runId: opts.runId, created: mkdirNew(dir) };
  }
  for (let n = 1;; n++) {
    const runId = n === 1 ? opts.runId : `${opts.runId}-${n}`;
    const dir = join(parent, runId);
    try {
      Deno.mkdirSync(dir);
      return { dir, runId, created: true };
    } catch (e) {
      if (!(e instanceof Deno.errors.AlreadyExists)) throw e;
    }
  }
}

/** Creates `dir` (and its parents); returns whether it did not exist before. */
function mkdirNew(dir: string): boolean {
  try {
    Deno.statSync(dir);
    return false;
  } catch {
    Deno.mkdirSync(dir, { recursive: true });
    return true;
  }
}

/**
 * Removes a run directory this launch created when nothing ran in it: only
 * its lock file may be there, and anything else keeps the directory.
 */
export function removeEmptyRunDir(dir: string): void {
  try {
    for (const e of Deno.readDirSync(dir)) {
      if (!/^dtrain(-node\d+)?\.lock$/.test(e.name)) return;
      Deno.removeSync(join(dir, e.name));
    }
    Deno.removeSync(dir);
  } catch { /* already gone, or someone else's now */ }
}

/** What launch.json holds. */
export interface LaunchRecord {
  runId: string;
  command: string[];
  script: string;
  scriptArgs: string[];
  nproc: number;
  nnodes: number;
  nodeRank: number;
  startedAt: string;
  endedAt: string | null;
  /** null while running */
  exitCode: number | null;
  /** launch attempts made (1 + restarts) */
  attempts: number;
  /** one line on how the run ended */
  outcome: string | null;
}

/** The command line with the value of --rdzv-token replaced, since it is the run's secret. */
export function redactToken(argv: readonly string[]): string[] {
  return argv.map((a, i) => {
    if (a.startsWith("--rdzv-token=")) return "--rdzv-token=<redacted>";
    return argv[i - 1] === "--rdzv-token" ? "<redacted>" : a;
  });
}

/** launch.json for node 0, launch-node<n>.json for the others (they may share a file system). */
export function launchRecordPath(dir: string, nodeRank: number): string {
  return join(dir, nodeRank === 0 ? "launch.json" : `launch-node${nodeRank}.json`);
}

/** Writes the record atomically (temp file, then rename). */
export function writeLaunchRecord(path: string, record: LaunchRecord): void {
  const tmp = `${path}.tmp-${Deno.pid}`;
  Deno.writeTextFileSync(tmp, JSON.stringify(record, null, 2) + "\n");
  Deno.renameSync(tmp, path);
}
