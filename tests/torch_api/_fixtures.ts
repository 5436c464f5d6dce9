/**
 * Reads the PyTorch fixtures of the optimizers, schedulers, losses and everyday ops (fixtures/torch_api/*.json,
 * written by scripts/peers/torch_api_fixtures.py): float32 values are stored as
 * the exact decimals of their floats, so Math.fround gives torch's bits back.
 */

/** A fixture file parsed. */
export function readPiecesFixture<T>(name: string): T {
  const url = new URL(`../../fixtures/torch_api/${name}`, import.meta.url);
  return JSON.parse(Deno.readTextFileSync(url)) as T;
}

/** A tensor as the fixtures store it. */
export interface FixtureTensor {
  shape: number[];
  data: number[];
}

/**
 * The largest |actual - expected| / bound over the elements, with bound =
 * atol + rtol * |expected| (<= 1 passes); NaNs must match NaNs.
 */
export function worstRatio(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  rtol: number,
  atol: number,
): { ratio: number; at: number } {
  if (actual.length !== expected.length) {
    throw new Error(`length ${actual.length} != expected ${expected.length}`);
  }
  let ratio = 0, at = -1;
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i]!, e = expected[i]!;
    if (Number.isNaN(e) || Number.isNaN(a)) {
      if (Number.isNaN(e) !== Number.isNaN(a)) return { ratio: Infinity, at: i };
      continue;
    }
    if (a === e) continue;
    const r = Math.abs(a - e) / (atol + rtol * Math.abs(e));
    if (!(r <= ratio)) {
      ratio = r;
      at = i;
    }
  }
  return { ratio, at };
}

/** Throws naming `what` and the worst element unless every element is within the bound. */
export function assertClose(
  what: string,
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  rtol: number,
  atol: number,
): void {
  const { ratio, at } = worstRatio(actual, expected, rtol, atol);
  if (ratio > 1) {
    throw new Error(
      `${what}: element ${at} is ${actual[at]}, torch has ${expected[at]} ` +
        `(${ratio.toFixed(2)}x the bound ${atol} + ${rtol}·|torch|)`,
    );
  }
}
