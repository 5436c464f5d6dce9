/**
 * Tests of the index-driven kernels: dt_embedding_fwd/bwd (exact copies, and
 * a backward that adds in index order so repeated ids are deterministic) and
 * dt_gather_rows, with the refusal of out-of-range indices before any write.
 */
import assert from "node:assert/strict";
import {
  assertSameBits,
  failsWith,
  K,
  lastError,
  n64,
  ok,
  ptr,
  Rng,
  withThreads,
} from "./_helpers.ts";

Deno.test("dt_embedding_fwd() copies table rows by index", () => {
  const rng = new Rng(1);
  for (const [n, V, C] of [[1, 1, 1], [256, 256, 64], [1000, 7, 33], [4096, 50, 768]] as const) {
    const table = rng.normals(V * C), idx = rng.ints(n, 0, V);
    const out = new Float32Array(n * C);
    ok(K.dt_embedding_fwd(ptr(out), ptr(idx), ptr(table), n64(n), n64(V), n64(C), null));
    const expected = new Float32Array(n * C);
    for (let i = 0; i < n; i++) expected.set(table.subarray(idx[i]! * C, idx[i]! * C + C), i * C);
    assertSameBits(out, expected, `embedding ${n}x${V}x${C}`);
  }
});

Deno.test("dt_embedding_fwd() names an index outside [0, V) and writes nothing", () => {
  const table = new Float32Array(256 * 4), idx = new Int32Array(20).fill(3);
  idx[17] = 300;
  const out = new Float32Array(20 * 4).fill(5);
  failsWith(
    K.dt_embedding_fwd(ptr(out), ptr(idx), ptr(table), 20n, 256n, 4n, null),
    "dt_embedding_fwd: index 300 at position 17 is outside [0, 256)",
  );
  assert.equal(lastError(), "dt_embedding_fwd: index 300 at position 17 is outside [0, 256)");
  assert.ok(out.every((v) => v === 5), "output untouched");
  idx[17] = -1;
  failsWith(
    K.dt_embedding_fwd(ptr(out), ptr(idx), ptr(table), 20n, 256n, 4n, null),
    "index -1 at position 17",
  );
  failsWith(
    K.dt_embedding_fwd(ptr(out), ptr(idx), ptr(table), -1n, 256n, 4n, null),
    "negative size (n=-1",
  );
});

Deno.test("dt_embedding_bwd() adds gradient rows in index order, identically on any thread count", () => {
  const rng = new Rng(2);
  for (const [n, V, C] of [[1, 3, 2], [256, 256, 64], [5000, 10, 96], [2048, 300, 1000]] as const) {
    const dout = rng.normals(n * C), idx = rng.ints(n, 0, V);
    const run = () => {
      const dtable = new Float32Array(V * C).fill(NaN); // overwritten, never accumulated into
      ok(K.dt_embedding_bwd(ptr(dtable), ptr(dout), ptr(idx), n64(n), n64(V), n64(C), null));
      return dtable;
    };
    const one = withThreads(1, run), three = withThreads(3, run);
    assertSameBits(three, one, `${n}x${V}x${C}: 1 vs 3 threads`);
    // float32 additions in index order: the same sequence of roundings as torch's index_add_
    const expected = new Float32Array(V * C);
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < C; j++) {
        const k = idx[i]! * C + j;
        expected[k] = Math.fround(expected[k]! + dout[i * C + j]!);
      }
    }
    assertSameBits(one, expected, `embedding bwd ${n}x${V}x${C}`);
  }
});

Deno.test("dt_embedding_bwd() refuses a bad index before zeroing the table", () => {
  const dtable = new Float32Array(8).fill(2),
    dout = new Float32Array(6),
    idx = new Int32Array([0, 4, 1]);
  failsWith(
    K.dt_embedding_bwd(ptr(dtable), ptr(dout), ptr(idx), 3n, 4n, 2n, null),
    "dt_embedding_bwd: index 4 at position 1 is outside [0, 4)",
  );
  assert.ok(dtable.every((v) => v === 2));
});

Deno.test("dt_gather_rows() collates rows of any byte width", () => {
  const rng = new Rng(3);
  for (
    const [rows, rowBytes, n] of [
      [10, 4, 3],
      [256, 4, 300_000],
      [50, 8, 1000],
      [1024, 512, 64],
      [100, 7, 1000],
      [5, 0, 4],
    ] as const
  ) {
    const inp = new Uint8Array(rows * rowBytes).map(() => rng.int(0, 256));
    const idx = rng.ints(n, 0, rows), out = new Uint8Array(n * rowBytes);
    ok(K.dt_gather_rows(ptr(out), ptr(inp), ptr(idx), n64(n), n64(rowBytes), null));
    const expected = new Uint8Array(n * rowBytes);
    for (let i = 0; i < n; i++) {
      expected.set(inp.subarray(idx[i]! * rowBytes, (idx[i]! + 1) * rowBytes), i * rowBytes);
    }
    assert.deepEqual(out, expected, `gather ${n} of ${rows} rows x ${rowBytes}B`);
  }
  const out = new Uint8Array(8);
  failsWith(
    K.dt_gather_rows(ptr(out), ptr(out), ptr(new Int32Array([0, -3])), 2n, 4n, null),
    "dt_gather_rows: index -3 at position 1 is negative",
  );
  failsWith(K.dt_gather_rows(ptr(out), ptr(out), null, 2n, 4n, null), "dt_gather_rows: null idx");
});
