/**
 * Tests of dt_strided_copy, the layout kernel behind permute, expand, pad and
 * slices: every permutation of a 4-D tensor against an index-by-index
 * reference (rows, tiled and element paths), broadcasts with stride 0, writes
 * into a strided interior, element sizes 1 to 8, thread-count invariance and
 * the argument checks.
 */
import assert from "node:assert/strict";
import { assertSameBits, failsWith, K, ok, ptr, Rng, withThreads } from "./_helpers.ts";

const i64 = (a: number[]) => BigInt64Array.from(a.map(BigInt));

/** Row-major element strides of a shape. */
function stridesOf(shape: number[]): number[] {
  const s = new Array<number>(shape.length).fill(1);
  for (let d = shape.length - 2; d >= 0; d--) s[d] = s[d + 1]! * shape[d + 1]!;
  return s;
}

/** Reference: for each index tuple of sizes, out[sum t*os] = inp[sum t*is]. */
function refCopy(
  out: Float32Array,
  inp: Float32Array,
  sizes: number[],
  os: number[],
  is: number[],
): void {
  const n = sizes.reduce((a, b) => a * b, 1);
  for (let i = 0; i < n; i++) {
    let rem = i, o = 0, p = 0;
    for (let d = sizes.length - 1; d >= 0; d--) {
      const k = rem % sizes[d]!;
      rem = Math.floor(rem / sizes[d]!);
      o += k * os[d]!;
      p += k * is[d]!;
    }
    out[o] = inp[p]!;
  }
}

function permutations(n: number): number[][] {
  if (n === 1) return [[0]];
  const out: number[][] = [];
  for (const p of permutations(n - 1)) {
    for (let k = 0; k <= p.length; k++) out.push([...p.slice(0, k), n - 1, ...p.slice(k)]);
  }
  return out;
}

/** out = inp permuted by perm (out dim d is inp dim perm[d]), as permute() calls the kernel. */
function permute(
  inp: Float32Array<ArrayBuffer>,
  shape: number[],
  perm: number[],
): Float32Array<ArrayBuffer> {
  const outShape = perm.map((p) => shape[p]!);
  const inStr = stridesOf(shape);
  const out = new Float32Array(inp.length).fill(NaN);
  ok(K.dt_strided_copy(
    ptr(out),
    ptr(inp),
    perm.length,
    i64(outShape),
    i64(stridesOf(outShape)),
    i64(perm.map((p) => inStr[p]!)),
    4n,
    null,
  ));
  return out;
}

Deno.test("dt_strided_copy() permutes a 4-D tensor every way like an index-by-index copy", () => {
  const rng = new Rng(1);
  for (const shape of [[2, 3, 4, 5], [1, 40, 33, 2], [3, 64, 1, 48]]) {
    const inp = rng.normals(shape.reduce((a, b) => a * b, 1));
    for (const perm of permutations(4)) {
      const outShape = perm.map((p) => shape[p]!);
      const want = new Float32Array(inp.length);
      const inStr = stridesOf(shape);
      refCopy(want, inp, outShape, stridesOf(outShape), perm.map((p) => inStr[p]!));
      assertSameBits(permute(inp, shape, perm), want, `shape [${shape}] perm [${perm}]`);
    }
  }
});

Deno.test("dt_strided_copy() transposes a large plane in tiles, the same on 1 and 2 threads", () => {
  const rng = new Rng(2);
  const shape = [3, 517, 389];
  const inp = rng.normals(shape.reduce((a, b) => a * b, 1));
  const one = withThreads(1, () => permute(inp, shape, [0, 2, 1]));
  const two = withThreads(2, () => permute(inp, shape, [0, 2, 1]));
  assertSameBits(two, one, "threads");
  for (const [a, b, c] of [[0, 0, 0], [2, 516, 388], [1, 100, 7]] as const) {
    assert.equal(one[(a * 389 + c) * 517 + b], inp[(a * 517 + b) * 389 + c]);
  }
});

Deno.test("dt_strided_copy() broadcasts with input stride 0 (expand)", () => {
  const row = Float32Array.of(1, 2, 3);
  const out = new Float32Array(12);
  ok(K.dt_strided_copy(ptr(out), ptr(row), 2, i64([4, 3]), i64([3, 1]), i64([0, 1]), 4n, null));
  assertSameBits(out, [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3], "rows");
  const col = Float32Array.of(7, 8);
  const out2 = new Float32Array(6);
  ok(K.dt_strided_copy(ptr(out2), ptr(col), 2, i64([2, 3]), i64([3, 1]), i64([1, 0]), 4n, null));
  assertSameBits(out2, [7, 7, 7, 8, 8, 8], "columns");
});

Deno.test("dt_strided_copy() writes into the interior of a larger tensor (pad) and reads one out (slice)", () => {
  const inp = Float32Array.from({ length: 2 * 3 }, (_, i) => i + 1); // (2, 3)
  const out = new Float32Array(4 * 6).fill(0); // (4, 6), inp at rows 1.., cols 2..
  const interior = Deno.UnsafePointer.offset(ptr(out)!, (1 * 6 + 2) * 4);
  ok(K.dt_strided_copy(interior, ptr(inp), 2, i64([2, 3]), i64([6, 1]), i64([3, 1]), 4n, null));
  assertSameBits(
    out,
    [0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0],
    "pad",
  );
  const back = new Float32Array(6);
  ok(K.dt_strided_copy(ptr(back), interior, 2, i64([2, 3]), i64([3, 1]), i64([6, 1]), 4n, null));
  assertSameBits(back, inp, "slice");
});

Deno.test("dt_strided_copy() moves elements of 1, 2 and 8 bytes", () => {
  const u8 = Uint8Array.from({ length: 24 }, (_, i) => i);
  const out8 = new Uint8Array(24);
  ok(K.dt_strided_copy(ptr(out8), ptr(u8), 2, i64([6, 4]), i64([1, 6]), i64([4, 1]), 1n, null));
  for (let r = 0; r < 6; r++) {
    for (let c = 0; c < 4; c++) assert.equal(out8[c * 6 + r], u8[r * 4 + c]);
  }
  const i16 = Uint16Array.from({ length: 24 }, (_, i) => 1000 + i), out16 = new Uint16Array(24);
  ok(K.dt_strided_copy(ptr(out16), ptr(i16), 2, i64([6, 4]), i64([1, 6]), i64([4, 1]), 2n, null));
  assert.equal(out16[1 * 6 + 5], i16[5 * 4 + 1]);
  const big = BigInt64Array.from({ length: 24 }, (_, i) => BigInt(i) << 40n),
    out64 = new BigInt64Array(24);
  ok(K.dt_strided_copy(ptr(out64), ptr(big), 2, i64([6, 4]), i64([1, 6]), i64([4, 1]), 8n, null));
  assert.equal(out64[3 * 6 + 2], big[2 * 4 + 3]);
});

Deno.test("dt_strided_copy() copies a 0-dim element and nothing for an empty box", () => {
  const a = Float32Array.of(3.5), b = new Float32Array(1);
  ok(K.dt_strided_copy(ptr(b), ptr(a), 0, null, null, null, 4n, null));
  assert.equal(b[0], 3.5);
  ok(K.dt_strided_copy(null, null, 2, i64([0, 5]), i64([5, 1]), i64([5, 1]), 4n, null));
});

Deno.test("dt_strided_copy() refuses bad ranks, sizes, strides and element sizes", () => {
  const x = new Float32Array(8);
  const s = i64([2, 4]);
  failsWith(K.dt_strided_copy(ptr(x), ptr(x), 17, s, s, s, 4n, null), "ndim=17 must be in [0, 16]");
  failsWith(
    K.dt_strided_copy(ptr(x), ptr(x), 2, i64([2, -4]), s, s, 4n, null),
    "size -4 of dim 1 is negative",
  );
  failsWith(
    K.dt_strided_copy(ptr(x), ptr(x), 2, s, i64([4, -1]), s, 4n, null),
    "negative stride in dim 1",
  );
  failsWith(K.dt_strided_copy(ptr(x), ptr(x), 2, s, s, s, 0n, null), "elem_bytes=0");
  failsWith(
    K.dt_strided_copy(null, ptr(x), 2, s, i64([4, 1]), i64([4, 1]), 4n, null),
    "null pointer",
  );
  failsWith(
    K.dt_strided_copy(
      ptr(x),
      ptr(x),
      2,
      i64([2 ** 40, 2 ** 40]),
      i64([1, 1]),
      i64([1, 1]),
      4n,
      null,
    ),
    "overflows",
  );
});
