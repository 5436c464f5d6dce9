/**
 * Tests of the dimension-wise index kernels on (outer, D, inner) views:
 * dt_gather_dim and dt_index_select copy exactly what an index-by-index
 * reference does, their backwards add repeated picks in j order (the same
 * bits on any thread count), and a bad index is refused before any write.
 */
import assert from "node:assert/strict";
import { assertSameBits, failsWith, K, n64, ok, ptr, Rng, withThreads } from "./_helpers.ts";

const SHAPES: [number, number, number, number][] = [[1, 5, 3, 1], [3, 4, 7, 5], [2, 9, 2, 600], [
  40,
  3,
  3,
  1,
]];

Deno.test("dt_gather_dim() and dt_scatter_add_dim() follow an index-by-index reference", () => {
  const rng = new Rng(1);
  for (const [o, d, j, i] of SHAPES) {
    const x = rng.normals(o * d * i), idx = rng.ints(o * j * i, 0, d), dy = rng.normals(o * j * i);
    const out = new Float32Array(o * j * i).fill(NaN);
    ok(K.dt_gather_dim(ptr(out), ptr(x), ptr(idx), n64(o), n64(d), n64(j), n64(i), 4n, null));
    const want = new Float32Array(out.length), dx = new Float32Array(x.length);
    for (let a = 0; a < o; a++) {
      for (let b = 0; b < j; b++) {
        for (let c = 0; c < i; c++) {
          const k = (a * j + b) * i + c, src = (a * d + idx[k]!) * i + c;
          want[k] = x[src]!;
          dx[src] = Math.fround(dx[src]! + dy[k]!);
        }
      }
    }
    assertSameBits(out, want, `gather [${o}, ${d}, ${j}, ${i}]`);
    const got = new Float32Array(x.length).fill(NaN);
    ok(K.dt_scatter_add_dim(ptr(got), ptr(dy), ptr(idx), n64(o), n64(d), n64(j), n64(i), null));
    assertSameBits(got, dx, `scatter_add [${o}, ${d}, ${j}, ${i}]`);
  }
});

Deno.test("dt_index_select() and dt_index_add() follow an index-by-index reference", () => {
  const rng = new Rng(2);
  for (const [o, d, j, i] of SHAPES) {
    const x = rng.normals(o * d * i), idx = rng.ints(j, 0, d), dy = rng.normals(o * j * i);
    const out = new Float32Array(o * j * i).fill(NaN);
    ok(K.dt_index_select(ptr(out), ptr(x), ptr(idx), n64(o), n64(d), n64(j), n64(i), 4n, null));
    const want = new Float32Array(out.length), dx = new Float32Array(x.length);
    for (let a = 0; a < o; a++) {
      for (let b = 0; b < j; b++) {
        for (let c = 0; c < i; c++) {
          const k = (a * j + b) * i + c, src = (a * d + idx[b]!) * i + c;
          want[k] = x[src]!;
          dx[src] = Math.fround(dx[src]! + dy[k]!);
        }
      }
    }
    assertSameBits(out, want, `index_select [${o}, ${d}, ${j}, ${i}]`);
    const got = new Float32Array(x.length).fill(NaN);
    ok(K.dt_index_add(ptr(got), ptr(dy), ptr(idx), n64(o), n64(d), n64(j), n64(i), null));
    assertSameBits(got, dx, `index_add [${o}, ${d}, ${j}, ${i}]`);
  }
});

Deno.test("dt_gather_dim() copies elements of any size (i64 indices, u8 masks)", () => {
  const x = BigInt64Array.of(10n, 20n, 30n),
    idx = Int32Array.of(2, 2, 0),
    out = new BigInt64Array(3);
  ok(K.dt_gather_dim(ptr(out), ptr(x), ptr(idx), 1n, 3n, 3n, 1n, 8n, null));
  assert.deepEqual([...out], [30n, 30n, 10n]);
});

Deno.test("dt_scatter_add_dim() and dt_index_add() give the same bits on 1 and 2 threads", () => {
  const rng = new Rng(3);
  const [o, d, j, i] = [8, 50, 400, 300];
  const dy = rng.normals(o * j * i), idx = rng.ints(o * j * i, 0, d), idx1 = rng.ints(j, 0, d);
  const run = (fn: (g: Float32Array<ArrayBuffer>) => number) => {
    const g = new Float32Array(o * d * i);
    ok(fn(g));
    return g;
  };
  for (
    const fn of [
      (g: Float32Array<ArrayBuffer>) =>
        K.dt_scatter_add_dim(ptr(g), ptr(dy), ptr(idx), n64(o), n64(d), n64(j), n64(i), null),
      (g: Float32Array<ArrayBuffer>) =>
        K.dt_index_add(ptr(g), ptr(dy), ptr(idx1), n64(o), n64(d), n64(j), n64(i), null),
    ]
  ) {
    assertSameBits(withThreads(2, () => run(fn)), withThreads(1, () => run(fn)), "threads");
  }
});

Deno.test("index kernels name the first index outside [0, D) and write nothing", () => {
  const x = new Float32Array(12),
    idx = Int32Array.of(0, 1, 3, -1),
    out = new Float32Array(4).fill(5);
  failsWith(
    K.dt_gather_dim(ptr(out), ptr(x), ptr(idx), 1n, 3n, 4n, 1n, 4n, null),
    "dt_gather_dim: index 3 at position 2 is outside [0, 3)",
  );
  failsWith(
    K.dt_index_select(ptr(out), ptr(x), ptr(idx), 1n, 3n, 4n, 1n, 4n, null),
    "dt_index_select: index 3 at position 2 is outside [0, 3)",
  );
  assertSameBits(out, [5, 5, 5, 5], "untouched");
  const g = new Float32Array(3).fill(5);
  failsWith(
    K.dt_index_add(ptr(g), ptr(out), ptr(idx), 1n, 3n, 4n, 1n, null),
    "dt_index_add: index 3 at position 2",
  );
  failsWith(
    K.dt_scatter_add_dim(ptr(g), ptr(out), ptr(idx), 1n, 0n, 4n, 1n, null),
    "empty dimension",
  );
  assertSameBits(g, [5, 5, 5], "untouched");
  failsWith(K.dt_gather_dim(ptr(out), ptr(x), null, 1n, 3n, 4n, 1n, 4n, null), "null idx");
  failsWith(K.dt_gather_dim(ptr(out), ptr(x), ptr(idx), 1n, 3n, 4n, 1n, 0n, null), "elem_bytes=0");
});
