/**
 * TensorBoard's smoothing of noisy curves: an exponential moving average
 * with debiasing, used by `dtrain report` both when it draws a page and,
 * as source text, inside the page when its smoothing control moves.
 */

/**
 * Smooths `ys` the way TensorBoard's scalar dashboard does: an exponential
 * moving average with weight `weight` in [0, 1), divided by 1 - weight^n so
 * the first points are not pulled towards 0. Non-finite values pass through
 * unchanged and do not enter the average; a constant series stays as it is.
 * Self-contained (it refers to nothing outside itself), because its source
 * text also runs in the report page.
 *
 * @example
 * ```ts
 * smoothEma([1, 0, 1], 0.5); // → [1, 0.3333333333333333, 0.7142857142857143]
 * ```
 */
export function smoothEma(ys: readonly number[], weight: number): number[] {
  let last = 0;
  let n = 0;
  const constant = ys.every((y) => y === ys[0]);
  return ys.map((y) => {
    if (constant || !Number.isFinite(y)) return y;
    last = last * weight + (1 - weight) * y;
    n++;
    return weight === 1 ? last : last / (1 - Math.pow(weight, n));
  });
}
