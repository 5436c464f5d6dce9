/**
 * The op sweep's loop (ops_vs_cpu.ts): runs each case, prints its row, and
 * after a failing case asks whether the device still works; a GPU whose
 * context is broken (a sticky CUDA error) fails every later call, so the
 * sweep stops at the first failing op and names it, instead of listing a
 * hundred consequences.
 */
import type { Case, Outcome } from "./_harness.ts";

/** How the sweep ended. */
export interface SweepResult {
  failed: number;
  /** kernel symbols of the cases that passed */
  covered: Set<string>;
  /** the case after which the device stopped working, and why; null when it never did */
  stoppedAt: { case: Case; why: string } | null;
}

/**
 * Runs `cases` with `run` (an exception counts as a failure), printing a row
 * each; after a failure, `broken()` says why the device no longer works, or
 * null when it still does (then the sweep goes on).
 *
 * @example
 * ```ts
 * const r = runSweep(cases, (c) => runCase(c), deviceBroken, console.log);
 * ```
 */
export function runSweep(
  cases: readonly Case[],
  run: (c: Case) => Outcome,
  broken: () => string | null,
  print: (line: string) => void,
): SweepResult {
  let failed = 0;
  const covered = new Set<string>();
  print(
    `${"op".padEnd(40)} ${"dtype".padEnd(10)} ${"size".padEnd(24)} ${"max rel err".padEnd(12)} ${
      "tol".padEnd(8)
    } result`,
  );
  for (const c of cases) {
    const t0 = performance.now();
    let r: Outcome;
    try {
      r = run(c);
    } catch (e) {
      r = { ok: false, err: Infinity, detail: (e as Error).message };
    }
    if (r.ok) c.symbols.forEach((s) => covered.add(s));
    else failed++;
    const ms = (performance.now() - t0).toFixed(0);
    print(
      `${c.op.padEnd(40)} ${c.dtype.padEnd(10)} ${c.size.padEnd(24)} ${
        r.err.toExponential(2).padEnd(12)
      } ${(c.bounds ? "derived" : String(c.tol)).padEnd(8)} ${r.ok ? "PASS" : "FAIL"} ${ms}ms${
        r.ok ? "" : `  ${r.detail}`
      }`,
    );
    if (!r.ok) {
      const why = broken();
      if (why !== null) return { failed, covered, stoppedAt: { case: c, why } };
    }
  }
  return { failed, covered, stoppedAt: null };
}
