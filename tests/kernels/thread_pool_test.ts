/**
 * The CPU library's thread pool (kernels/cpu/runtime.c): a job's chunks are
 * claimed by whichever thread is running (the caller included), so results
 * must not depend on which thread ran which chunk or how many were awake.
 * Hundreds of back-to-back jobs on more threads than this machine has cores
 * (workers often not yet running when their job starts, or waking after it
 * ended) give the one-thread bits every time, and a sum with per-chunk
 * partials folds them in chunk order whoever computed them.
 */
import assert from "node:assert/strict";
import { K, n64, ok, ptr, Rng, withThreads } from "./_helpers.ts";

/** Fails at the first element whose bits differ. */
function sameBits(a: Float32Array<ArrayBuffer>, b: Float32Array<ArrayBuffer>, what: string): void {
  const x = new Uint32Array(a.buffer), y = new Uint32Array(b.buffer);
  for (let i = 0; i < x.length; i++) {
    if (x[i] !== y[i]) assert.fail(`${what}: element ${i} is ${a[i]}, one thread gave ${b[i]}`);
  }
}

const SIZES = [16_385, 32_768, 65_537, 100_003];
/** Inputs per size: p, g, m, v (v non-negative), drawn once. */
const INPUTS = (() => {
  const rng = new Rng(21);
  return SIZES.map((n) => {
    const v = rng.normals(n, 0.001).map(Math.abs);
    return [rng.normals(n), rng.normals(n, 0.1), rng.normals(n, 0.01), v];
  });
})();

/** One AdamW step (dt_adamw) of job j's inputs, as p, m and v after it. */
function adamwJob(j: number): Float32Array<ArrayBuffer>[] {
  const [p, g, m, v] = INPUTS[j % SIZES.length]!.map((a) => a.slice());
  ok(
    K.dt_adamw(
      ptr(p!),
      ptr(g!),
      ptr(m!),
      ptr(v!),
      n64(p!.length),
      1e-3,
      0.9,
      0.999,
      1e-8,
      0.01,
      n64(1 + (j % 7)),
      null,
    ),
  );
  return [p!, m!, v!];
}

Deno.test("thread pool: back-to-back jobs on more threads than cores give the one-thread bits", () => {
  const jobs = 120;
  const want = withThreads(1, () => Array.from({ length: jobs }, (_, j) => adamwJob(j)));
  for (const threads of [2, 5, 8]) {
    withThreads(threads, () => {
      for (let j = 0; j < jobs; j++) {
        adamwJob(j).forEach((a, k) =>
          sameBits(a, want[j]![k]!, `${threads} threads, job ${j}, array ${k}`)
        );
      }
    });
  }
});

Deno.test("thread pool: a sum of per-chunk partials is folded in chunk order whoever ran the chunks", () => {
  const rng = new Rng(4);
  const x = rng.normals(1 << 20);
  const sum = () => {
    const out = new Float64Array(1);
    ok(K.dt_sumsq(ptr(out), ptr(x), n64(x.length), null));
    return out[0]!;
  };
  const want = withThreads(1, sum);
  for (const threads of [2, 3, 8]) {
    withThreads(threads, () => {
      for (let i = 0; i < 50; i++) assert.equal(sum(), want, `${threads} threads, call ${i}`);
    });
  }
});
