/**
 * What the status-checked call convention (ffi/calls.ts) costs per call:
 * nanoseconds of a raw FFI call with a hand-written status check against the
 * wrapper `backend().call.dt_*`, on kernels given empty work (n = 0, so the
 * call itself dominates), for 4, 5, 8 and 19 parameters. Every other wrapper
 * of the same arity is called first, so the closures' shared call sites have
 * seen several targets, as in a training step. A spread (`...args`) wrapper is
 * measured too: the shape the per-arity closures avoid.
 *
 *   deno run -A scripts/bench_ffi_call.ts [--calls 2000000] [--trials 7]
 */
import { parseArgs } from "node:util";
import { backend } from "../tensor/backend.ts";
import { KERNEL_STREAMED, KERNEL_SYMBOLS } from "../ffi/symbols.ts";

const args = parseArgs({
  options: {
    calls: { type: "string", default: "2000000" },
    trials: { type: "string", default: "7" },
  },
});
const CALLS = Number(args.values.calls), TRIALS = Number(args.values.trials);

const b = backend();
const raw = b.lib.symbols;
const call = b.call;
const buf = new Float32Array(64);
const p = Deno.UnsafePointer.of(buf);
const s = b.stream;

// Every streamed wrapper once with n = 0 where that is valid, to make the factories' call sites polymorphic.
for (const name of KERNEL_STREAMED) {
  const n = KERNEL_SYMBOLS[name].parameters.length - 1;
  const f = call[name] as unknown as (...a: unknown[]) => void;
  const fake = Array.from({ length: n }, (_, i) => {
    const t = KERNEL_SYMBOLS[name].parameters[i];
    return t === "pointer" ? p : t === "i64" ? 0n : 0;
  });
  try {
    for (let i = 0; i < 1000; i++) f(...fake);
  } catch { /* some kernels reject all-zero arguments; the call site still saw the target */ }
}

function fail(name: string, st: number): never {
  throw new Error(`${name} failed: ${st}`);
}

/** Best nanoseconds per call of `body` (which makes CALLS calls) over TRIALS trials. */
function time(body: () => void): number {
  body();
  let best = Infinity;
  for (let t = 0; t < TRIALS; t++) {
    const t0 = performance.now();
    body();
    best = Math.min(best, (performance.now() - t0) * 1e6 / CALLS);
  }
  return best;
}

// deno-lint-ignore no-explicit-any
const spread = (f: (...a: any[]) => number, name: string) => (...a: unknown[]) => {
  const r = f(...a, s);
  if (r !== 0) fail(name, r);
};
const spreadScale = spread(raw.dt_scale, "dt_scale");

const rows: [string, number, number, number | null][] = [];
rows.push([
  "dt_sumsq (4)",
  time(() => {
    for (let i = 0; i < CALLS; i++) {
      const r = raw.dt_sumsq(p, p, 0n, s);
      if (r !== 0) fail("dt_sumsq", r);
    }
  }),
  time(() => {
    for (let i = 0; i < CALLS; i++) call.dt_sumsq(p, p, 0n);
  }),
  null,
]);
rows.push([
  "dt_scale (5)",
  time(() => {
    for (let i = 0; i < CALLS; i++) {
      const r = raw.dt_scale(p, p, 0n, 1, s);
      if (r !== 0) fail("dt_scale", r);
    }
  }),
  time(() => {
    for (let i = 0; i < CALLS; i++) call.dt_scale(p, p, 0n, 1);
  }),
  time(() => {
    for (let i = 0; i < CALLS; i++) spreadScale(p, p, 0n, 1);
  }),
]);
rows.push([
  "dt_binary (8)",
  time(() => {
    for (let i = 0; i < CALLS; i++) {
      const r = raw.dt_binary(0, p, p, p, 0n, 1n, 1n, s);
      if (r !== 0) fail("dt_binary", r);
    }
  }),
  time(() => {
    for (let i = 0; i < CALLS; i++) call.dt_binary(0, p, p, p, 0n, 1n, 1n);
  }),
  null,
]);
rows.push([
  "dt_gemm (19)",
  time(() => {
    for (let i = 0; i < CALLS; i++) {
      const r = raw.dt_gemm(0, 0, 0, 0n, 0n, 0n, 1, p, 1n, p, 1n, 0, p, 1n, 1n, 0n, 0n, 0n, s);
      if (r !== 0) fail("dt_gemm", r);
    }
  }),
  time(() => {
    for (let i = 0; i < CALLS; i++) {
      call.dt_gemm(0, 0, 0, 0n, 0n, 0n, 1, p, 1n, p, 1n, 0, p, 1n, 1n, 0n, 0n, 0n);
    }
  }),
  null,
]);

console.log(`${CALLS} calls per trial, best of ${TRIALS}; ns per call`);
console.log("symbol (params) | raw + check | backend().call | difference | ...args spread");
console.log("--- | --- | --- | --- | ---");
for (const [name, r, w, sp] of rows) {
  console.log(
    `${name} | ${r.toFixed(1)} | ${w.toFixed(1)} | ${(w - r).toFixed(1)} | ${
      sp === null ? "" : sp.toFixed(1)
    }`,
  );
}
