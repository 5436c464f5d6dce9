/**
 * The verdict of `dtrain check`: one row per check with what was measured,
 * PASS / FAIL / SKIP and, for a failure, the likely cause; the table that
 * prints them and the final line with the exit code.
 */

/** The three stages of the migration check, and `--exact`'s comparison of world sizes. */
export type Stage = "sampler" | "gradients" | "state" | "exact";

/** How one check came out; SKIP means it could not be measured (the reason says why) and does not fail the run. */
export type Outcome = "PASS" | "FAIL" | "SKIP";

/** One check of one stage. */
export interface Row {
  stage: Stage;
  /** what is checked, e.g. "epoch 0 coverage" */
  check: string;
  /** the numbers, e.g. "200/200 indices, 0 overlaps beyond 0 pad" */
  measured: string;
  outcome: Outcome;
  /** for FAIL and SKIP: what the evidence points to and what to do */
  cause?: string;
}

/** A passing row. */
export function pass(stage: Stage, check: string, measured: string): Row {
  return { stage, check, measured, outcome: "PASS" };
}

/** A failing row with its cause. */
export function fail(stage: Stage, check: string, measured: string, cause: string): Row {
  return { stage, check, measured, outcome: "FAIL", cause };
}

/** A row that could not be measured, with the reason. */
export function skip(stage: Stage, check: string, measured: string, cause: string): Row {
  return { stage, check, measured, outcome: "SKIP", cause };
}

/**
 * The verdict table: stage, check, measured numbers and outcome aligned in
 * columns, each failure's or skip's cause on the lines below its row.
 */
export function formatTable(rows: readonly Row[]): string {
  const w1 = Math.max(5, ...rows.map((r) => r.stage.length));
  const w2 = Math.max(5, ...rows.map((r) => r.check.length));
  const w3 = Math.max(8, ...rows.map((r) => r.measured.length));
  const line = (a: string, b: string, c: string, d: string) =>
    `${a.padEnd(w1)}  ${b.padEnd(w2)}  ${c.padEnd(w3)}  ${d}`.trimEnd();
  const out = [
    line("stage", "check", "measured", "verdict"),
    line("-".repeat(w1), "-".repeat(w2), "-".repeat(w3), "-------"),
  ];
  for (const r of rows) {
    out.push(line(r.stage, r.check, r.measured, r.outcome));
    if (r.cause) out.push(`${" ".repeat(w1 + 2)}-> ${r.cause}`);
  }
  return out.join("\n");
}

/** The closing line (`dtrain check: PASS` or `dtrain check: FAIL (n problems)`) and the exit code. */
export function summary(rows: readonly Row[]): { line: string; code: number } {
  const failed = rows.filter((r) => r.outcome === "FAIL").length;
  const skipped = rows.filter((r) => r.outcome === "SKIP").length;
  const skips = skipped ? ` (${skipped} ${skipped === 1 ? "check" : "checks"} skipped)` : "";
  if (failed === 0) return { line: `dtrain check: PASS${skips}`, code: 0 };
  return {
    line: `dtrain check: FAIL (${failed} ${failed === 1 ? "problem" : "problems"})${skips}`,
    code: 1,
  };
}
