/**
 * The collective test matrix shared by the rank script (which runs it) and
 * the test (which checks it): every op x dtype x size, and the deterministic
 * inputs each rank feeds into each case. Inputs depend only on (rank, case,
 * element), so the test can recompute them and the expected results itself.
 */
import type { CollectiveDType, ReduceOp } from "../../../distributed/process_group.ts";

/** One collective call of the matrix. */
export interface CollectiveCase {
  op: "allReduce" | "broadcast" | "allGather" | "reduceScatter";
  dtype: CollectiveDType;
  /** allReduce / reduceScatter */
  redop?: ReduceOp;
  /** broadcast */
  root?: number;
  /** elements of buf (allReduce, broadcast), of inp (allGather), of out (reduceScatter) */
  count: number;
  /** put NaNs among the inputs */
  nan?: boolean;
}

export const DTYPES: readonly CollectiveDType[] = ["f32", "f64", "bf16", "f16", "i32", "i64", "u8"];
const FLOATS: readonly CollectiveDType[] = ["f32", "f64", "bf16", "f16"];
export const BYTES: Record<CollectiveDType, number> = {
  f32: 4,
  f64: 8,
  bf16: 2,
  f16: 2,
  i32: 4,
  i64: 8,
  u8: 1,
};

/** Every op x dtype x size for a world of `world` ranks (`dtypes`: a subset). */
export function buildCases(
  world: number,
  sizes: readonly number[],
  dtypes: readonly CollectiveDType[] = DTYPES,
  allReduceOnly = false,
): CollectiveCase[] {
  if (allReduceOnly) {
    return dtypes.flatMap((dtype) =>
      sizes.flatMap((count) =>
        (["sum", "avg", "max"] as const).map((redop) => ({
          op: "allReduce" as const,
          dtype,
          redop,
          count,
        }))
      )
    );
  }
  const cases: CollectiveCase[] = [];
  for (const dtype of dtypes) {
    const redops: ReduceOp[] = FLOATS.includes(dtype)
      ? ["sum", "avg", "max", "min"]
      : ["sum", "max", "min"];
    for (const count of sizes) {
      for (const redop of redops) cases.push({ op: "allReduce", dtype, redop, count });
      for (const redop of redops) cases.push({ op: "reduceScatter", dtype, redop, count });
      cases.push({ op: "broadcast", dtype, root: world - 1, count });
      cases.push({ op: "allGather", dtype, count });
    }
  }
  for (const dtype of (["f32", "f64"] as const).filter((d) => dtypes.includes(d))) {
    for (const redop of ["max", "min", "sum"] as const) {
      cases.push({ op: "allReduce", dtype, redop, count: 37, nan: true });
    }
  }
  if (dtypes.includes("f32")) cases.push({ op: "broadcast", dtype: "f32", root: 0, count: 1000 });
  return cases;
}

/** Elements each rank contributes to case `c` (its input length). */
export function inputCount(c: CollectiveCase, world: number): number {
  return c.op === "reduceScatter" ? c.count * world : c.count;
}

/** Elements of each rank's result. */
export function outputCount(c: CollectiveCase, world: number): number {
  return c.op === "allGather" ? c.count * world : c.count;
}

/** 32 well-mixed bits of (a, b, c) (a murmur3-style finaliser). */
function mix(a: number, b: number, c: number): number {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 0x632be5ab, 0xc2b2ae35) ^
    Math.imul(c + 1, 0x27d4eb2f);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** A float of varied magnitude and sign, so that summation order shows in the bits. */
function floatValue(h: number): number {
  return ((h % 20001) - 10000) / 64 * 2 ** (((h >>> 20) % 9) - 4);
}

/** The raw bytes rank `rank` feeds into case number `index`. */
export function makeInput(
  c: CollectiveCase,
  index: number,
  rank: number,
  world: number,
): Uint8Array {
  const n = inputCount(c, world);
  const bytes = new Uint8Array(n * BYTES[c.dtype]);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < n; i++) {
    const h = mix(rank, index, i);
    const nan = c.nan === true && (h % 5 === 0);
    const v = nan ? NaN : floatValue(h);
    switch (c.dtype) {
      case "f32":
        view.setFloat32(i * 4, v, true);
        break;
      case "f64":
        view.setFloat64(i * 8, v + (mix(rank, index, i + 7919) / 2 ** 32) * 1e-9, true);
        break;
      case "bf16": {
        const f = new Float32Array([v]);
        view.setUint16(i * 2, new Uint32Array(f.buffer)[0]! >>> 16, true); // truncation: exact bf16 inputs
        break;
      }
      case "f16":
        view.setFloat16(i * 2, v / 8, true);
        break;
      case "i32":
        view.setInt32(i * 4, h | 0, true); // full range: sums wrap around
        break;
      case "i64":
        view.setBigInt64(
          i * 8,
          (BigInt(h) << 32n | BigInt(mix(rank, index, i + 104729))) - (1n << 63n),
          true,
        );
        break;
      case "u8":
        view.setUint8(i, h & 255);
        break;
    }
  }
  return bytes;
}

/** "allReduce(sum) f32 x 1000" */
export function caseName(c: CollectiveCase): string {
  const how = c.redop ?? (c.root !== undefined ? `root ${c.root}` : "");
  return `${c.op}(${how}) ${c.dtype} x ${c.count}${c.nan ? " with NaN" : ""}`;
}
