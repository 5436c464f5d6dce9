/**
 * What each rank must hold after a case of the collective matrix (_cases.ts),
 * computed from every rank's input as documented (reductions in rank order
 * 0..world-1, avg divides by world), and how a result is compared with it:
 * exactly, or — for float sums taken in another order, as Gloo's ring does —
 * within a bound reasoned from float rounding.
 */
import type { CollectiveDType } from "../../../distributed/process_group.ts";
import { BYTES, type CollectiveCase, makeInput } from "./_cases.ts";

export type Value = number | bigint;

/** The elements of `bytes` (little-endian, as this machine) as JS values. */
export function decode(dtype: CollectiveDType, bytes: Uint8Array): ArrayLike<Value> {
  const buf = bytes.slice().buffer; // aligned copy
  switch (dtype) {
    case "f32":
      return new Float32Array(buf);
    case "f64":
      return new Float64Array(buf);
    case "bf16":
      return Float32Array.from(
        new Uint16Array(buf),
        (h) => new Float32Array(new Uint32Array([h << 16]).buffer)[0]!,
      );
    case "f16":
      return new Float16Array(buf);
    case "i32":
      return new Int32Array(buf);
    case "i64":
      return new BigInt64Array(buf);
    case "u8":
      return new Uint8Array(buf);
  }
}

/** f32 -> bf16 bits, round to nearest even, NaN kept quiet. */
function bf16Bits(x: number): number {
  const u = new Uint32Array(new Float32Array([x]).buffer)[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return (u >>> 16) | 0x40;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

function encode(dtype: CollectiveDType, values: Value[]): Uint8Array {
  switch (dtype) {
    case "f32":
      return new Uint8Array(Float32Array.from(values as number[]).buffer);
    case "f64":
      return new Uint8Array(Float64Array.from(values as number[]).buffer);
    case "bf16":
      return new Uint8Array(Uint16Array.from(values as number[], bf16Bits).buffer);
    case "f16":
      return new Uint8Array(Float16Array.from(values as number[]).buffer);
    case "i32":
      return new Uint8Array(Int32Array.from(values as number[]).buffer);
    case "i64":
      return new Uint8Array(BigInt64Array.from(values as bigint[]).buffer);
    case "u8":
      return Uint8Array.from(values as number[]);
  }
}

/** How one more rank's value x joins the running value a, as documented:
 *  f32 arithmetic for f32, bf16 and f16 (rounded once at the end), f64 for
 *  f64; integer sums wrap; max and min propagate NaN. */
function combiner(dtype: CollectiveDType, op: string): (a: Value, x: Value) => Value {
  const nan = (x: Value) => typeof x === "number" && Number.isNaN(x);
  if (op === "max") return (a, x) => (x > a || nan(x) ? x : a);
  if (op === "min") return (a, x) => (x < a || nan(x) ? x : a);
  switch (dtype) {
    case "i64":
      return (a, x) => BigInt.asIntN(64, (a as bigint) + (x as bigint));
    case "i32":
      return (a, x) => ((a as number) + (x as number)) | 0;
    case "u8":
      return (a, x) => ((a as number) + (x as number)) & 255;
    case "f64":
      return (a, x) => (a as number) + (x as number);
    default:
      return (a, x) => Math.fround((a as number) + (x as number));
  }
}

/** What each rank must hold after case `c`, computed from every rank's input:
 *  reductions combine the ranks in order 0..world-1; avg divides the sum by world. */
export function expected(c: CollectiveCase, index: number, world: number): Uint8Array[] {
  const inputs = Array.from({ length: world }, (_, q) => makeInput(c, index, q, world));
  const everyRank = (b: Uint8Array) => new Array<Uint8Array>(world).fill(b);
  if (c.op === "broadcast") return everyRank(inputs[c.root!]!);
  if (c.op === "allGather") {
    const out = new Uint8Array(inputs.reduce((n, b) => n + b.length, 0));
    inputs.forEach((b, q) => out.set(b, q * b.length));
    return everyRank(out);
  }
  // the reduction of whole inputs; reduceScatter gives rank r its block r
  const values = inputs.map((b) => decode(c.dtype, b));
  const combine = combiner(c.dtype, c.redop!);
  const divide = c.dtype === "f64"
    ? (v: number) => v / world
    : (v: number) => Math.fround(v / world);
  const n = values[0]!.length;
  const out: Value[] = new Array(n);
  for (let i = 0; i < n; i++) {
    let acc = values[0]![i]!;
    for (let q = 1; q < world; q++) acc = combine(acc, values[q]![i]!);
    out[i] = c.redop === "avg" ? divide(acc as number) : acc;
  }
  const all = encode(c.dtype, out);
  if (c.op === "allReduce") return everyRank(all);
  const block = c.count * BYTES[c.dtype];
  return Array.from({ length: world }, (_, r) => all.subarray(r * block, (r + 1) * block));
}

/** Element-wise equality that treats any two NaNs as equal and -0 != +0. */
export function firstDifference(
  dtype: CollectiveDType,
  got: Uint8Array,
  want: Uint8Array,
): string | null {
  if (got.length !== want.length) return `length ${got.length} != ${want.length}`;
  const g = decode(dtype, got), w = decode(dtype, want);
  for (let i = 0; i < g.length; i++) {
    const same = Object.is(g[i], w[i]) || (Number.isNaN(g[i]) && Number.isNaN(w[i]));
    if (!same) return `element ${i}: got ${g[i]}, expected ${w[i]}`;
  }
  return null;
}

/** Unit roundoff of the arithmetic a float sum is taken in (bf16 and f16 sum in f32). */
function roundoff(dtype: CollectiveDType): number {
  return dtype === "f64" ? 2 ** -53 : 2 ** -24;
}

/** The spacing of 16-bit floats at |v| (bf16: 8 significant bits, f16: 11). */
function ulp16(dtype: CollectiveDType, v: number): number {
  const bits = dtype === "bf16" ? 8 : 11;
  const e = Math.max(Math.floor(Math.log2(Math.abs(v) || 2 ** -24)), dtype === "f16" ? -14 : -126);
  return 2 ** (e - bits + 1);
}

/**
 * Like firstDifference, but a float sum or avg may differ from the rank-order
 * result by what another summation order can change: each of the world-1
 * additions rounds by at most u·Σ|x| (u the unit roundoff), so two orders
 * differ by at most 2(world-1)·u·Σ|x|, divided by world for avg, plus the
 * rounding of the divide and, for bf16 and f16, one spacing of the 16-bit
 * format from the final rounding. Integers, max, min, broadcast and
 * allGather must match exactly.
 */
export function firstDifferenceInAnyOrder(
  c: CollectiveCase,
  index: number,
  world: number,
  got: Uint8Array,
  want: Uint8Array,
  rank: number,
): string | null {
  const floats = ["f32", "f64", "bf16", "f16"].includes(c.dtype);
  if (!floats || (c.redop !== "sum" && c.redop !== "avg")) {
    return firstDifference(c.dtype, got, want);
  }
  if (got.length !== want.length) return `length ${got.length} != ${want.length}`;
  const inputs = Array.from(
    { length: world },
    (_, q) => decode(c.dtype, makeInput(c, index, q, world)) as ArrayLike<number>,
  );
  const g = decode(c.dtype, got) as ArrayLike<number>,
    w = decode(c.dtype, want) as ArrayLike<number>;
  const offset = c.op === "reduceScatter" ? rank * c.count : 0;
  const u = roundoff(c.dtype);
  for (let i = 0; i < g.length; i++) {
    let abs = 0;
    for (const x of inputs) abs += Math.abs(x[offset + i]!);
    const want = w[i]!, have = g[i]!;
    if (Number.isNaN(want) || Number.isNaN(have)) {
      if (Number.isNaN(want) && Number.isNaN(have)) continue;
      return `element ${i}: got ${have}, expected ${want}`;
    }
    let tol = (2 * (world - 1) * u * abs) / (c.redop === "avg" ? world : 1) +
      2 * u * Math.abs(want);
    if (c.dtype === "bf16" || c.dtype === "f16") {
      tol += ulp16(c.dtype, Math.max(Math.abs(want), Math.abs(have)));
    }
    if (Math.abs(have - want) > tol) {
      return `element ${i}: got ${have}, expected ${want} within ${tol} (sum of |inputs| ${abs})`;
    }
  }
  return null;
}
