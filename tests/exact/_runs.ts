/**
 * What the exact-mode tests share: a rank script run as a single process (no
 * launcher) and under `dtrain --nproc N`, every rank's JSON lines collected.
 */
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";

/** One JSON line a rank (or the single process, rank 0) printed. */
// deno-lint-ignore no-explicit-any -- each test asserts on its own script's shape
export type Line = Record<string, any>;

/** The JSON lines (objects) of a launcher's or a process's stdout, "[rN] " prefixes stripped. */
export function jsonLines(stdout: string): Line[] {
  return stdout.split("\n")
    .map((l) => l.replace(/^\[r\d+\] /, ""))
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l));
}

/** Runs `script` (relative to the repository) as one plain process; fails with its output. */
export async function single(script: string, env: Record<string, string> = {}): Promise<Line[]> {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", join(REPO, "deno.json"), join(REPO, script)],
    env: { DTRAIN_NO_CHECK: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const out = new TextDecoder().decode(r.stdout), err = new TextDecoder().decode(r.stderr);
  if (r.code !== 0) throw new Error(`${script} exited ${r.code}:\n${out}${err}`);
  return jsonLines(out);
}

/** Runs `script` on `nproc` CPU ranks under the launcher; every rank's lines. */
export async function launched(
  script: string,
  nproc: number,
  opts: { env?: Record<string, string>; device?: string; args?: string[]; timeoutMs?: number } = {},
): Promise<
  { lines: Line[]; stdout: string; stderr: string; code: number; records: Record<string, Line> }
> {
  const t = new TestRun();
  try {
    const r = await t.finish(
      t.launch([
        "--nproc",
        String(nproc),
        "--device",
        opts.device ?? "cpu",
        "--log-ranks",
        "all",
        join(REPO, script),
        ...(opts.args ?? []),
      ], { env: opts.env ?? {} }),
      opts.timeoutMs ?? 120_000,
    );
    return {
      lines: jsonLines(r.stdout),
      stdout: r.stdout,
      stderr: r.stderr,
      code: r.code,
      records: runRecords(join(t.dir, "runs")),
    };
  } finally {
    await t.cleanup();
  }
}

/** run.json and config.json of the one run under `runs` (those that exist), parsed. */
function runRecords(runs: string): Record<string, Line> {
  const out: Record<string, Line> = {};
  let dirs: string[] = [];
  try {
    dirs = [...Deno.readDirSync(runs)].filter((e) => e.isDirectory).map((e) => join(runs, e.name));
  } catch { /* no run directory */ }
  for (const d of dirs) {
    for (const f of ["run.json", "config.json"]) {
      try {
        out[f] = JSON.parse(Deno.readTextFileSync(join(d, f)));
      } catch { /* not written */ }
    }
  }
  return out;
}
