/**
 * fmaf32 against an exact reference: a*b + c computed in BigInt and rounded
 * to float32 by hand (round half to even), over random and hand-made cases.
 */
import assert from "node:assert/strict";
import { fmaf32 } from "../../random/float32_fma.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";

const f = Math.fround;

/** Exact float32 rounding of the rational `scaled / 2**300` (normal range only). */
function roundScaledToFloat32(scaled: bigint): number {
  if (scaled === 0n) return 0;
  const negative = scaled < 0n;
  let mag = negative ? -scaled : scaled;
  const bits = mag.toString(2).length;
  let exponent = -300;
  if (bits > 24) {
    const drop = BigInt(bits - 24);
    const kept = mag >> drop;
    const remainder = mag - (kept << drop);
    const half = 1n << (drop - 1n);
    const roundUp = remainder > half ||
      (remainder === half && (kept & 1n) === 1n);
    mag = kept + (roundUp ? 1n : 0n);
    exponent += Number(drop);
  }
  const value = Number(mag) * 2 ** exponent;
  return negative ? -value : value;
}

/** a*b + c for float32 a, b, c, exactly, then rounded once to float32. */
function referenceFma(a: number, b: number, c: number): number {
  const scaledProduct = BigInt(a * 2 ** 150) * BigInt(b * 2 ** 150);
  const scaledC = BigInt(c * 2 ** 150) * (1n << 150n);
  return roundScaledToFloat32(scaledProduct + scaledC);
}

Deno.test("fmaf32() rounds once where fround(a*b + c) rounds twice", () => {
  // a*b = 2**-24 - 2**-70, c = 1 + 2**-23: the exact sum lies just below the
  // midpoint 1 + 3*2**-24, but its float64 rounding lands on the midpoint.
  const a = f(1 + 2 ** -23);
  const b = f(2 ** -24 * (1 - 2 ** -23));
  const c = f(1 + 2 ** -23);
  assert.equal(
    f(a * b + c),
    1 + 2 ** -22,
    "double rounding ties to even, upwards",
  );
  assert.equal(fmaf32(a, b, c), 1 + 2 ** -23);
  assert.equal(referenceFma(a, b, c), 1 + 2 ** -23);
  // The mirrored case just above a midpoint that ties downward.
  assert.equal(fmaf32(-a, b, -c), -(1 + 2 ** -23));
  assert.equal(
    fmaf32(f(1 + 2 ** -23), f(2 ** -24 * (1 + 2 ** -23)), 1),
    1 + 2 ** -23,
  );
});

Deno.test("fmaf32() equals the exact reference on 20000 random float32 triples", () => {
  const g = new TorchGenerator(77);
  const randomFloat = () => {
    const [mantissa] = g.randFloat32(1);
    const exponent = (g.nextUint32() % 40) - 20;
    const sign = g.nextUint32() & 1 ? -1 : 1;
    return f(sign * (1 + mantissa!) * 2 ** exponent);
  };
  for (let i = 0; i < 20000; i++) {
    const a = randomFloat();
    const b = randomFloat();
    // Put c near -a*b half of the time so cancellation cases are covered too.
    const c = i % 2 ? randomFloat() : f(-(a * b) * (1 + 2 ** -20 * ((g.nextUint32() % 64) - 32)));
    const expected = referenceFma(a, b, c);
    assert.equal(fmaf32(a, b, c), expected, `fmaf32(${a}, ${b}, ${c})`);
  }
});
