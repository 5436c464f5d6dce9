/**
 * Tests of the layout kernels (dt_slice_cols, dt_scatter_cols,
 * dt_transpose_0213): exact byte moves against index-by-index references,
 * for several element sizes, both transpose paths, and bad ranges.
 */
import assert from "node:assert/strict";
import { failsWith, K, n64, ok, ptr, Rng, withThreads } from "./_helpers.ts";

/** Random bytes (the kernels move bytes; the element size only sets the stride). */
function randomBytes(rng: Rng, n: number): Uint8Array<ArrayBuffer> {
  const a = new Uint8Array(n);
  for (let i = 0; i < n; i++) a[i] = rng.int(0, 256);
  return a;
}

/** Asserts two byte arrays are equal, naming the first differing byte. */
function assertBytes(actual: Uint8Array, expected: Uint8Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < actual.length; i++) {
    if (actual[i] !== expected[i]) {
      assert.fail(`${what}: byte ${i} is ${actual[i]}, expected ${expected[i]}`);
    }
  }
}

Deno.test("dt_slice_cols() and dt_scatter_cols() move column blocks and touch nothing else", () => {
  const rng = new Rng(1);
  // [rows, wide cols, start, len, elem bytes]: qkv split of gpt-mini, odd sizes, whole rows, byte elements
  const cases: [number, number, number, number, number][] = [
    [256, 192, 64, 64, 4],
    [3, 10, 7, 3, 2],
    [1000, 33, 0, 33, 8],
    [5, 9, 4, 0, 4],
    [4000, 300, 1, 150, 1],
    [7, 4, 2, 2, 12],
  ];
  for (const [rows, wide, start, len, eb] of cases) {
    const inp = randomBytes(rng, rows * wide * eb);
    const out = new Uint8Array(rows * len * eb);
    ok(
      K.dt_slice_cols(
        ptr(out),
        ptr(inp),
        n64(rows),
        n64(wide),
        n64(start),
        n64(len),
        n64(eb),
        null,
      ),
    );
    const expected = new Uint8Array(out.length);
    for (let r = 0; r < rows; r++) {
      expected.set(
        inp.subarray((r * wide + start) * eb, (r * wide + start + len) * eb),
        r * len * eb,
      );
    }
    assertBytes(out, expected, `slice ${rows}x${wide}[${start}:+${len}] x${eb}B`);

    const dst = randomBytes(rng, rows * wide * eb), before = dst.slice();
    ok(
      K.dt_scatter_cols(
        ptr(dst),
        ptr(out),
        n64(rows),
        n64(wide),
        n64(start),
        n64(len),
        n64(eb),
        null,
      ),
    );
    for (let r = 0; r < rows; r++) {
      before.set(out.subarray(r * len * eb, (r + 1) * len * eb), (r * wide + start) * eb);
    }
    assertBytes(dst, before, `scatter ${rows}x${wide}[${start}:+${len}] x${eb}B`);
  }
});

Deno.test("dt_slice_cols() and dt_scatter_cols() refuse column ranges outside the matrix", () => {
  const buf = new Uint8Array(64);
  failsWith(
    K.dt_slice_cols(ptr(buf), ptr(buf), 2n, 8n, 6n, 3n, 4n, null),
    "dt_slice_cols: columns [6, 6 + 3) are outside [0, 8)",
  );
  failsWith(
    K.dt_scatter_cols(ptr(buf), ptr(buf), 2n, 8n, -1n, 3n, 4n, null),
    "dt_scatter_cols: columns [-1, -1 + 3)",
  );
  failsWith(
    K.dt_slice_cols(ptr(buf), ptr(buf), 2n, 8n, 0n, 3n, 0n, null),
    "dt_slice_cols: elem_bytes=0 must be >= 1",
  );
  failsWith(
    K.dt_slice_cols(ptr(buf), ptr(buf), -2n, 8n, 0n, 3n, 4n, null),
    "dt_slice_cols: negative size (rows=-2",
  );
  failsWith(
    K.dt_slice_cols(ptr(buf), ptr(buf), 2n ** 40n, 2n ** 30n, 0n, 3n, 4n, null),
    "dt_slice_cols: size overflows",
  );
});

/** (A,B,C,D) -> (A,C,B,D), element by element. */
function transposeRef(
  inp: Uint8Array,
  A: number,
  B: number,
  C: number,
  D: number,
  eb: number,
): Uint8Array {
  const out = new Uint8Array(inp.length), row = D * eb;
  for (let a = 0; a < A; a++) {
    for (let b = 0; b < B; b++) {
      for (let c = 0; c < C; c++) {
        const src = ((a * B + b) * C + c) * row, dst = ((a * C + c) * B + b) * row;
        out.set(inp.subarray(src, src + row), dst);
      }
    }
  }
  return out;
}

Deno.test("dt_transpose_0213() swaps dims 1 and 2 for head split/merge and 2-D transposes", () => {
  const rng = new Rng(2);
  // [A, B, C, D, elem bytes]: attention (B,T,H,hd) -> (B,H,T,hd), a 2-D f32 transpose (tiled
  // path), 2-D with odd sizes and 2/8-byte elements, degenerate dims, 3-byte elements
  const cases: [number, number, number, number, number][] = [
    [4, 64, 4, 16, 4],
    [1, 256, 300, 1, 4],
    [1, 33, 70, 1, 2],
    [3, 17, 5, 1, 8],
    [2, 1, 9, 3, 4],
    [2, 9, 1, 3, 4],
    [2, 5, 7, 2, 3],
    [0, 5, 7, 2, 4],
  ];
  for (const [A, B, C, D, eb] of cases) {
    const inp = randomBytes(rng, A * B * C * D * eb);
    const out = new Uint8Array(inp.length);
    ok(K.dt_transpose_0213(ptr(out), ptr(inp), n64(A), n64(B), n64(C), n64(D), n64(eb), null));
    assertBytes(out, transposeRef(inp, A, B, C, D, eb), `transpose (${A},${B},${C},${D}) x${eb}B`);
  }
  const big = randomBytes(rng, 8 * 128 * 8 * 16 * 4);
  const one = new Uint8Array(big.length), four = new Uint8Array(big.length);
  withThreads(1, () => ok(K.dt_transpose_0213(ptr(one), ptr(big), 8n, 128n, 8n, 16n, 4n, null)));
  withThreads(4, () => ok(K.dt_transpose_0213(ptr(four), ptr(big), 8n, 128n, 8n, 16n, 4n, null)));
  assertBytes(four, one, "1 vs 4 threads");
  assertBytes(one, transposeRef(big, 8, 128, 8, 16, 4), "large transpose");
});

Deno.test("dt_transpose_0213() rejects negative dims, zero-byte elements and overflow", () => {
  const buf = new Uint8Array(16);
  failsWith(
    K.dt_transpose_0213(ptr(buf), ptr(buf), 1n, -2n, 2n, 1n, 4n, null),
    "dt_transpose_0213: negative dimension (1, -2, 2, 1)",
  );
  failsWith(
    K.dt_transpose_0213(ptr(buf), ptr(buf), 1n, 2n, 2n, 1n, 0n, null),
    "elem_bytes=0 must be >= 1",
  );
  failsWith(
    K.dt_transpose_0213(ptr(buf), ptr(buf), 2n ** 20n, 2n ** 20n, 2n ** 20n, 2n ** 10n, 4n, null),
    "size overflows",
  );
  failsWith(
    K.dt_transpose_0213(null, ptr(buf), 1n, 2n, 2n, 1n, 4n, null),
    "dt_transpose_0213: null pointer",
  );
});
