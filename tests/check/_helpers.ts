/**
 * Helpers of the `dtrain check` tests: run the whole check on a script in a
 * temporary folder (removed afterwards; every run's processes have exited
 * when runCheck returns), find a row, and show the table in messages.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runCheck } from "../../check/run_check.ts";
import { formatTable, type Outcome, type Row } from "../../check/verdict.ts";

/** The repository root. */
export const REPO = fileURLToPath(new URL("../../", import.meta.url));

/** Runs `dtrain check` (2 ranks, 4 steps) on a script given relative to the repository; returns the rows. */
export async function checkScript(relPath: string, scriptArgs: string[] = []): Promise<Row[]> {
  const outDir = Deno.makeTempDirSync({ prefix: "dtrain-check-" });
  try {
    return await runCheck({
      script: join(REPO, relPath),
      scriptArgs,
      nproc: 2,
      steps: 4,
      outDir,
      timeoutS: 90,
      log: () => {},
    });
  } finally {
    Deno.removeSync(outDir, { recursive: true });
  }
}

/** The row of `stage` whose check starts with `check`; fails the test (showing the table) when absent. */
export function rowOf(rows: readonly Row[], stage: string, check: string): Row {
  const row = rows.find((r) => r.stage === stage && r.check.startsWith(check));
  assert.ok(row, `no row ${stage} / ${check} in\n${formatTable(rows)}`);
  return row;
}

/** "stage / check" of every row with the given outcome. */
export function withOutcome(rows: readonly Row[], outcome: Outcome): string[] {
  return rows.filter((r) => r.outcome === outcome).map((r) => `${r.stage} / ${r.check}`);
}

/** Asserts a row failed with a cause containing every fragment. */
export function assertFailsWith(
  rows: readonly Row[],
  stage: string,
  check: string,
  ...fragments: string[]
): void {
  const row = rowOf(rows, stage, check);
  assert.equal(row.outcome, "FAIL", `${stage} / ${check} should fail:\n${formatTable(rows)}`);
  for (const f of fragments) {
    assert.ok(row.cause?.includes(f), `cause of ${stage} / ${check} lacks "${f}": ${row.cause}`);
  }
}
