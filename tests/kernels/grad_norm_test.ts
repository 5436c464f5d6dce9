/**
 * Tests of the many-tensor reductions of the CPU library: dt_sumsq_many (every
 * gradient's sum of squares in one call) gives dt_sumsq's bits per tensor, and
 * dt_clip_grad_norm reproduces torch 1.13's clip_grad_norm_ as optim/clip.ts
 * computes it, bit for bit; dt_deferred_error has nothing to report on the
 * CPU, where data errors come from the call itself.
 */
import assert from "node:assert/strict";
import { failsWith, K, n64, ok, ptr, Rng, withThreads } from "./_helpers.ts";

/** Host arrays of the tensors' addresses and sizes, as the ABI takes them. */
function table(
  ts: Float32Array<ArrayBuffer>[],
): [BigUint64Array<ArrayBuffer>, BigInt64Array<ArrayBuffer>] {
  return [
    BigUint64Array.from(ts, (t) => BigInt(Deno.UnsafePointer.value(ptr(t)))),
    BigInt64Array.from(ts, (t) => BigInt(t.length)),
  ];
}

function sumsq(t: Float32Array<ArrayBuffer>): number {
  const out = new Float64Array(1);
  ok(K.dt_sumsq(ptr(out), ptr(t), n64(t.length), null));
  return out[0]!;
}

/** optim/clip.ts's arithmetic (before this call existed): the reference. */
function clipReference(
  ts: Float32Array<ArrayBuffer>[],
  maxNorm: number,
): { total: number; scaled: Float32Array<ArrayBuffer>[] } {
  let totalSq = 0;
  for (const t of ts) {
    const n = Math.fround(Math.sqrt(sumsq(t)));
    totalSq = Math.fround(totalSq + Math.fround(n * n));
  }
  const total = Math.fround(Math.sqrt(totalSq));
  if (maxNorm === Infinity) return { total, scaled: ts.map((t) => t.slice()) };
  const coef = Math.min(Math.fround(maxNorm / Math.fround(total + 1e-6)), 1);
  const scaled = ts.map((t) => {
    const out = new Float32Array(t.length);
    ok(K.dt_scale(ptr(out), ptr(t), n64(t.length), coef, null));
    return out;
  });
  return { total, scaled };
}

const sizes = [70_001, 0, 1, 1023, 16_385, 3];

Deno.test("dt_sumsq_many() gives each tensor dt_sumsq's bits, on any thread count", () => {
  const rng = new Rng(5);
  const ts = sizes.map((n) => rng.normals(n));
  const want = Float64Array.from(ts, sumsq);
  for (const threads of [1, 3]) {
    withThreads(threads, () => {
      const out = new Float64Array(ts.length).fill(NaN);
      const [ptrs, counts] = table(ts);
      ok(K.dt_sumsq_many(ptr(out), ptr(ptrs), ptr(counts), n64(ts.length), null));
      assert.deepEqual([...out], [...want]);
    });
  }
  ok(K.dt_sumsq_many(null, null, null, 0n, null)); // no tensors: nothing to do
});

Deno.test("dt_clip_grad_norm() is clip_grad_norm_ as optim/clip.ts computes it, bit for bit", () => {
  const rng = new Rng(6);
  for (const [scale, maxNorm] of [[1, 1.0], [0.001, 1.0], [1, Infinity], [3, 0], [1, 1e30]]) {
    const ts = sizes.map((n) => rng.normals(n, scale));
    const ref = clipReference(ts, maxNorm);
    const wantSq = ts.map(sumsq); // of the gradients before scaling
    const total = new Float32Array(1), sq = new Float64Array(ts.length);
    const [ptrs, counts] = table(ts);
    ok(
      K.dt_clip_grad_norm(
        ptr(total),
        ptr(sq),
        ptr(ptrs),
        ptr(counts),
        n64(ts.length),
        maxNorm,
        null,
      ),
    );
    assert.equal(total[0], ref.total, `total for scale ${scale}, max_norm ${maxNorm}`);
    assert.deepEqual([...sq], wantSq);
    ts.forEach((t, i) => assert.deepEqual(t, ref.scaled[i], `tensor ${i}, max_norm ${maxNorm}`));
  }
});

Deno.test("dt_clip_grad_norm() of no tensors is a norm of 0", () => {
  const total = new Float32Array([NaN]);
  ok(K.dt_clip_grad_norm(ptr(total), null, null, null, 0n, 1, null));
  assert.equal(total[0], 0);
});

Deno.test("the many-tensor calls refuse bad tensor lists and a negative max_norm", () => {
  const t = new Float32Array(4), out = new Float64Array(2), total = new Float32Array(1);
  const ptrs = new BigUint64Array([BigInt(Deno.UnsafePointer.value(ptr(t))), 0n]);
  failsWith(
    K.dt_sumsq_many(ptr(out), ptr(ptrs), ptr(new BigInt64Array([4n, 5n])), 2n, null),
    "dt_sumsq_many: tensor 1 of 5 elements is a null pointer",
  );
  failsWith(
    K.dt_sumsq_many(ptr(out), ptr(ptrs), ptr(new BigInt64Array([-1n, 0n])), 2n, null),
    "dt_sumsq_many: tensor 0 has a negative size -1",
  );
  failsWith(K.dt_sumsq_many(ptr(out), null, null, 2n, null), "dt_sumsq_many: null tensor list");
  failsWith(
    K.dt_sumsq_many(ptr(out), null, null, -1n, null),
    "dt_sumsq_many: negative tensor count -1",
  );
  failsWith(
    K.dt_clip_grad_norm(
      ptr(total),
      ptr(out),
      ptr(ptrs),
      ptr(new BigInt64Array([4n, 0n])),
      2n,
      -1,
      null,
    ),
    "dt_clip_grad_norm: max_norm=-1 must be >= 0",
  );
  failsWith(
    K.dt_clip_grad_norm(
      ptr(total),
      ptr(out),
      ptr(ptrs),
      ptr(new BigInt64Array([4n, 0n])),
      2n,
      NaN,
      null,
    ),
    "dt_clip_grad_norm: max_norm=nan must be >= 0",
  );
});

Deno.test("dt_deferred_error() has nothing to report on the CPU: data errors come from the call", () => {
  const out = new Float32Array(2);
  failsWith(
    K.dt_embedding_fwd(
      ptr(out),
      ptr(new Int32Array([9])),
      ptr(new Float32Array(4)),
      1n,
      2n,
      2n,
      null,
    ),
    "dt_embedding_fwd: index 9 at position 0 is outside [0, 2)",
  );
  ok(K.dt_deferred_error(null));
});
