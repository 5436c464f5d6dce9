/**
 * Rows of a parity report (case, quantity, max error, tolerance, verdict) and
 * the error measures they use: max relative error per element, relative L2
 * error of a whole tensor, max absolute error.
 */

/** One compared quantity. */
export interface ParityRow {
  case: string;
  quantity: string;
  /** the error measure's value (NaN fails) */
  error: number;
  tolerance: number;
  /** what the error measures, e.g. "max rel", "rel L2", "max abs", "exact" */
  measure: string;
  /** an extra figure shown beside the error (e.g. the max abs error) */
  note?: string;
  pass: boolean;
}

/** Makes a row; NaN or an error above the tolerance fails. */
export function row(
  c: string,
  quantity: string,
  measure: string,
  error: number,
  tolerance: number,
  note?: string,
): ParityRow {
  const r: ParityRow = {
    case: c,
    quantity,
    measure,
    error,
    tolerance,
    pass: error <= tolerance,
  };
  if (note !== undefined) r.note = note;
  return r;
}

/** max_i |a_i - b_i| / max(|b_i|, floor) — floor keeps near-zero references from dominating. */
export function maxRelError(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  floor = 1e-30,
): number {
  if (a.length !== b.length) return NaN;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!) / Math.max(Math.abs(b[i]!), floor);
    if (!(d <= m)) m = d; // NaN propagates
  }
  return m;
}

/** ||a - b||_2 / ||b||_2. */
export function relL2Error(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return NaN;
  let num = 0, den = 0;
  for (let i = 0; i < a.length; i++) {
    const d = a[i]! - b[i]!;
    num += d * d;
    den += b[i]! * b[i]!;
  }
  return den === 0 ? Math.sqrt(num) : Math.sqrt(num / den);
}

/** max_i |a_i - b_i|. */
export function maxAbsError(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
): number {
  if (a.length !== b.length) return NaN;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    if (!(d <= m)) m = d;
  }
  return m;
}

/** Prints rows as an aligned table; returns the number of failures. */
export function printRows(
  rows: ParityRow[],
  log: (s: string) => void = console.log,
): number {
  const cells = rows.map((r) => [
    r.case,
    r.quantity,
    `${r.measure} ${r.error.toExponential(2)}`,
    r.tolerance.toExponential(1),
    (r.pass ? "PASS" : "FAIL") + (r.note ? `  (${r.note})` : ""),
  ]);
  const head = ["case", "quantity", "max error", "tolerance", "verdict"];
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const fmt = (c: string[]) => c.map((x, i) => x.padEnd(widths[i]!)).join("  ");
  log(fmt(head));
  for (const c of cells) log(fmt(c));
  const failed = rows.filter((r) => !r.pass).length;
  log(
    `parity: ${rows.length - failed} of ${rows.length} cases within tolerance, ${failed} outside`,
  );
  return failed;
}
