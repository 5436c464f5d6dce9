/**
 * `dtrain diff <run-a> <run-b>`: reads two run directories and prints what
 * differs as ranked hypotheses (compare.ts), each with its evidence and a
 * check. Exit 0 when the runs agree, 1 when they differ, 2 on bad input.
 */
import { parseArgs } from "node:util";
import { compareRuns, type Comparison } from "./compare.ts";
import { readRunDir, type RunDir } from "../run_record/format.ts";

/** The relative loss tolerance used when --loss-tol is not given. */
export const DEFAULT_LOSS_TOL = 1e-6;

const USAGE = `usage: dtrain diff <run-a> <run-b> [--loss-tol ${DEFAULT_LOSS_TOL}]

Lists what differs between two run directories (script, seed, config, world
size, data order, environment, versions, losses), most likely cause first.
  --loss-tol X   relative tolerance for losses, |a-b| / max(|a|,|b|) (default ${DEFAULT_LOSS_TOL})
Exit status: 0 the runs agree, 1 they differ, 2 bad arguments or run directory.`;

/** The text `dtrain diff` prints for a comparison of run dirs `a` and `b`. */
export function formatComparison(a: string, b: string, c: Comparison): string {
  const lines = [`dtrain diff: a = ${a}, b = ${b}`];
  if (c.findings.length === 0) {
    lines.push(`runs agree (compared: ${c.compared.join(", ")})`);
  } else {
    const n = c.findings.length;
    lines.push(`${n} difference${n === 1 ? "" : "s"}, most likely cause first:`);
    c.findings.forEach((f, i) => {
      lines.push(`${i + 1}. ${f.headline}`);
      for (const e of f.evidence) lines.push(`   ${e}`);
      lines.push(`   check: ${f.check}`);
    });
  }
  if (c.notes.length > 0) lines.push("notes:", ...c.notes.map((n) => `  - ${n}`));
  return lines.join("\n");
}

/**
 * Runs `dtrain diff` with the arguments after the verb; resolves to the
 * exit code. `print` receives the report (stdout) and `printError` usage
 * and input errors (stderr).
 *
 * @example
 * ```ts
 * Deno.exit(await diffMain(["runs/a", "runs/b", "--loss-tol", "1e-5"]));
 * ```
 */
export function diffMain(
  args: string[],
  print: (text: string) => void = console.log,
  printError: (text: string) => void = console.error,
): Promise<number> {
  // Synchronous inside; the Promise is the shape every dtrain verb has.
  return Promise.resolve(diff(args, print, printError));
}

function diff(
  args: string[],
  print: (text: string) => void,
  printError: (text: string) => void,
): number {
  let values, positionals;
  try {
    ({ values, positionals } = parseArgs({
      args,
      options: { "loss-tol": { type: "string" }, help: { type: "boolean", short: "h" } },
      allowPositionals: true,
    }));
  } catch (e) {
    printError(`dtrain diff: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    print(USAGE);
    return 0;
  }
  if (positionals.length !== 2) {
    printError(`dtrain diff: expected two run directories, got ${positionals.length}\n${USAGE}`);
    return 2;
  }
  const raw = values["loss-tol"];
  const lossTol = raw === undefined ? DEFAULT_LOSS_TOL : Number(raw);
  if (raw !== undefined && (raw.trim() === "" || !Number.isFinite(lossTol) || lossTol < 0)) {
    printError(`dtrain diff: --loss-tol must be a number >= 0, got ${JSON.stringify(raw)}`);
    return 2;
  }
  const [pa, pb] = positionals as [string, string];
  let a: RunDir, b: RunDir;
  try {
    a = readRunDir(pa);
    b = readRunDir(pb);
  } catch (e) {
    printError(`dtrain diff: ${(e as Error).message}`);
    return 2;
  }
  const c = compareRuns(a, b, { lossTol });
  print(formatComparison(pa, pb, c));
  return c.findings.length === 0 ? 0 : 1;
}
