/**
 * The shared-memory process group's results: every op x dtype x size (0,
 * smaller than the world, not divisible by it, many buffers long) run by 2, 3
 * and 4 rank processes, compared with results computed here from the same
 * inputs, and compared bit for bit across ranks.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import type { CollectiveDType } from "../../distributed/process_group.ts";
import {
  buildCases,
  BYTES,
  caseName,
  type CollectiveCase,
  makeInput,
  outputCount,
} from "./scripts/_cases.ts";
import { shmEntries, uniqueRunId, withRanks } from "./scripts/_ranks.ts";

type Value = number | bigint;

/** The elements of `bytes` (little-endian, as this machine) as JS values. */
function decode(dtype: CollectiveDType, bytes: Uint8Array): ArrayLike<Value> {
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
function expected(c: CollectiveCase, index: number, world: number): Uint8Array[] {
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
function firstDifference(dtype: CollectiveDType, got: Uint8Array, want: Uint8Array): string | null {
  if (got.length !== want.length) return `length ${got.length} != ${want.length}`;
  const g = decode(dtype, got), w = decode(dtype, want);
  for (let i = 0; i < g.length; i++) {
    const same = Object.is(g[i], w[i]) || (Number.isNaN(g[i]) && Number.isNaN(w[i]));
    if (!same) return `element ${i}: got ${g[i]}, expected ${w[i]}`;
  }
  return null;
}

async function runMatrix(
  world: number,
  sizes: number[],
  env: Record<string, string>,
  dtypes?: CollectiveDType[],
): Promise<void> {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-pg-" });
  const runId = uniqueRunId(`matrix${world}`);
  try {
    const caseEnv = {
      CASE_SIZES: sizes.join(","),
      ...(dtypes ? { CASE_DTYPES: dtypes.join(",") } : {}),
      ...env,
    };
    await withRanks(
      { world, runId, env: () => caseEnv, args: (r) => ["matrix", join(dir, `rank${r}.bin`)] },
      async (procs) => {
        for (const p of procs) assert.equal((await p.next("done")).event, "done");
      },
    );
    assert.deepEqual(shmEntries(runId), [], "segment left in /dev/shm");
    const cases = buildCases(world, sizes, dtypes, env.CASE_ALLREDUCE_ONLY === "1");
    const results = Array.from(
      { length: world },
      (_, r) => Deno.readFileSync(join(dir, `rank${r}.bin`)),
    );
    const offsets = new Array<number>(world).fill(0);
    const failures: string[] = [];
    cases.forEach((c, index) => {
      const size = outputCount(c, world) * BYTES[c.dtype];
      const got = results.map((res, r) => res.subarray(offsets[r]!, offsets[r]! += size));
      const want = expected(c, index, world);
      for (let r = 0; r < world; r++) {
        const diff = firstDifference(c.dtype, got[r]!, want[r]!);
        if (diff) failures.push(`${caseName(c)} on rank ${r} of ${world}: ${diff}`);
      }
      if (c.op !== "reduceScatter") {
        for (let r = 1; r < world; r++) {
          if (!got[r]!.every((b, i) => b === got[0]![i])) {
            failures.push(`${caseName(c)}: rank ${r} bits differ from rank 0`);
          }
        }
      }
    });
    results.forEach((res, r) =>
      assert.equal(offsets[r], res.length, `rank ${r} wrote extra bytes`)
    );
    assert.deepEqual(
      failures.slice(0, 10),
      [],
      `${failures.length} of ${cases.length * world} results are wrong`,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

Deno.test("allReduce/reduceScatter/broadcast/allGather match independent results for every op, dtype and size, 3 ranks", async () => {
  // 4 KiB buffers: 3001 elements take several buffers, 1000 f32 does not divide by 3
  await runMatrix(3, [0, 1, 2, 1000, 3001], { DTRAIN_SHM_CHUNK_BYTES: "4096" });
});

Deno.test("collectives match independent results with 2 ranks and with 4 ranks", async () => {
  await runMatrix(2, [0, 5, 2049], { DTRAIN_SHM_CHUNK_BYTES: "1024" });
  await runMatrix(4, [3, 1001], { DTRAIN_SHM_CHUNK_BYTES: "4096" }, ["f32", "i64", "bf16"]);
});

Deno.test("collectives larger than the default 1 MiB buffer match independent results, 2 ranks", async () => {
  await runMatrix(2, [270_001], {}, ["f32"]); // 1 MiB = 262144 f32
});

Deno.test("allReduce of messages written with streaming stores (>= 4 MiB) at unaligned addresses matches, 2 and 3 ranks", async () => {
  // 1,048,603 f32 is just over 4 MiB: the f32 sum/avg path streams into the caller's buffer,
  // whose start is 4 bytes past a 64-byte boundary here, and whose length leaves a ragged tail
  const env = { CASE_OFFSET: "4", CASE_ALLREDUCE_ONLY: "1" };
  await runMatrix(2, [1_048_603], env, ["f32"]);
  await runMatrix(3, [1_048_603], env, ["f32"]);
});
