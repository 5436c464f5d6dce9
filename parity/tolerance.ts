/**
 * The tolerance rules of the repository's op fixtures (fixtures/README.md):
 * equal bits, or |dtrain - torch| <= ulps * 2^-24 * s per element, where s is
 * a stored scale (the sum of |terms| for sums of many terms) or |torch|.
 */
import type { ParityRow } from "./report.ts";
import { row } from "./report.ts";

/** A tolerance as the fixture JSON writes it. */
export interface FixtureTol {
  exact?: boolean;
  ulps?: number;
  /** key of the scale tensor; null: |reference| */
  scale?: string | null;
  why?: string;
}

const U = 2 ** -24;
/** The smallest normal f32: a scale never counts for less (a denormal reference is compared absolutely). */
const TINY = 2 ** -126;

/** Elements that differ in value (NaN equals NaN; -0 equals 0). */
export function mismatches(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
): { count: number; first: number } {
  if (a.length !== b.length) return { count: Math.max(a.length, b.length), first: -1 };
  let count = 0, first = -1;
  for (let i = 0; i < a.length; i++) {
    const same = a[i] === b[i] || (Number.isNaN(a[i]!) && Number.isNaN(b[i]!));
    if (!same) {
      count++;
      if (first < 0) first = i;
    }
  }
  return { count, first };
}

/**
 * The worst |a - b| / (2^-24 * s) over the elements (in ulps of the scale),
 * with where it happened; NaN on only one side, or a length mismatch, is Infinity.
 */
export function ulpsOfScale(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  scale: ArrayLike<number> | null,
): { err: number; at: number } {
  if (a.length !== b.length) return { err: Infinity, at: -1 };
  let err = 0, at = -1;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!, y = b[i]!;
    if (Number.isNaN(x) || Number.isNaN(y)) {
      if (Number.isNaN(x) !== Number.isNaN(y)) return { err: Infinity, at: i };
      continue;
    }
    if (x === y) continue;
    const s = Math.max(Math.abs(scale ? scale[i]! : y), TINY);
    const e = Math.abs(x - y) / (U * s);
    if (!(e <= err)) [err, at] = [e, i];
  }
  return { err, at };
}

/** One parity row comparing got with want under tol. */
export function tolRow(
  c: string,
  quantity: string,
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  tol: FixtureTol,
  scale: ArrayLike<number> | null,
): ParityRow {
  if (tol.exact) {
    const m = mismatches(got, want);
    const note = m.count ? `first at ${m.first}: ${got[m.first]} vs ${want[m.first]}` : undefined;
    return row(c, quantity, "mismatches", m.count, 0, note);
  }
  const { err, at } = ulpsOfScale(got, want, scale);
  const note = err > (tol.ulps ?? 0) && at >= 0 ? `at ${at}: ${got[at]} vs ${want[at]}` : undefined;
  return row(c, quantity, "ulps of scale", err, tol.ulps ?? 0, note);
}
