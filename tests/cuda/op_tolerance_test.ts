/**
 * The op sweep's derived tolerances (scripts/gpu_check/tolerance.ts): a
 * product summed in another order with fused multiply-adds (what a GPU does)
 * passes its per-element bound, and one element moved past its bound fails,
 * through the sweep's own harness (runCase) with a stand-in "GPU" library
 * whose dt_gemm is replaced.
 */
import assert from "node:assert/strict";
import { Rng, runCase } from "../../scripts/gpu_check/_harness.ts";
import { openLibrary } from "../../ffi/native.ts";
import { KERNEL_SYMBOLS } from "../../ffi/symbols.ts";
import { buildOpCases, EMULATED_SIZES } from "../../scripts/gpu_check/op_cases.ts";
import {
  elementwiseBound,
  gamma,
  sumBound,
  UNIT_ROUNDOFF,
  withinBounds,
} from "../../scripts/gpu_check/tolerance.ts";

const cpu = openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS);
/** The f32 GEMM cases of the emulated sizes, but for the few too large for a JavaScript product. */
const f32Gemms = buildOpCases({ rng: new Rng(7), cpu, sizes: EMULATED_SIZES })
  .filter((c) => c.op.startsWith("gemm ") && c.dtype === "f32" && c.bounds)
  .filter((c) => {
    const [m, n, k] = c.size.split(" ")[0]!.split("x").map(Number);
    const batch = Number(/ x(\d+)/.exec(c.op)?.[1] ?? 1);
    return m! * n! * k! * batch <= 4e6;
  });

type GemmArgs = [
  number,
  number,
  number,
  bigint,
  bigint,
  bigint,
  number,
  Deno.PointerValue,
  bigint,
  Deno.PointerValue,
  bigint,
  number,
  Deno.PointerValue,
  bigint,
  bigint,
  bigint,
  bigint,
  bigint,
  Deno.PointerValue,
];

const view = (p: Deno.PointerValue, n: number) =>
  n === 0
    ? new Float32Array(0)
    : new Float32Array(Deno.UnsafePointerView.getArrayBuffer(p!, n * 4));

/** The CPU library with dt_gemm replaced by `gemm`. */
function withGemm(gemm: (...a: GemmArgs) => number) {
  return {
    cpu,
    gpu: { ...cpu, symbols: { ...cpu.symbols, dt_gemm: gemm } },
    stream: null,
  } as never;
}

/** f32 GEMM as a GPU may do it: k in reverse order, each step one fused multiply-add. */
function reversedFmaGemm(...a: GemmArgs): number {
  const [, ta, tb, M_, N_, K_, alpha, pA, lda_, pB, ldb_, beta, pC, ldc_, batch_, sa_, sb_, sc_] =
    a;
  const [M, N, K, lda, ldb, ldc, batch, sa, sb, sc] = [
    M_,
    N_,
    K_,
    lda_,
    ldb_,
    ldc_,
    batch_,
    sa_,
    sb_,
    sc_,
  ]
    .map(Number);
  if (M * N * batch === 0) return 0;
  const A = view(pA, batch * sa), B = view(pB, batch * sb), C = view(pC, batch * sc);
  for (let z = 0; z < batch; z++) {
    for (let i = 0; i < M; i++) {
      for (let j = 0; j < N; j++) {
        let s = 0;
        for (let k = K - 1; k >= 0; k--) {
          const x = ta ? A[z * sa + k * lda + i]! : A[z * sa + i * lda + k]!;
          const y = tb ? B[z * sb + j * ldb + k]! : B[z * sb + k * ldb + j]!;
          s = Math.fround(x * y + s); // x*y is exact in a double: one rounding, as an FMA
        }
        const at = z * sc + i * ldc + j;
        C[at] = Math.fround(alpha * s + (beta !== 0 ? beta * C[at]! : 0));
      }
    }
  }
  return 0;
}

Deno.test("tolerance: the bound formulas (γ_k, sums, element-wise) follow from the unit roundoff", () => {
  assert.equal(UNIT_ROUNDOFF.f32, 2 ** -24);
  assert.equal(gamma(0, "f32"), 0);
  const ku = 1000 * 2 ** -24;
  assert.ok(Math.abs(gamma(1000, "f32") / (ku / (1 - ku)) - 1) < 1e-12);
  assert.equal(gamma(2 ** 24, "f32"), Infinity);
  assert.throws(() => gamma(-1, "f32"), /k must be a count/);
  // twice γ_k Σ|t|, plus one rounding of each side into a narrower output format
  const s = sumBound(100, 10, "f32", "bf16");
  assert.ok(Math.abs(s - (2 * gamma(100, "f32") + 2 * 2 ** -8) * 10) < 1e-9);
  assert.ok(elementwiseBound(2, 1, "f32") < 1e-6);
});

Deno.test("tolerance: withinBounds passes agreeing NaNs, fails a one-sided NaN and an element past its bound", () => {
  assert.deepEqual(withinBounds([1, NaN, 3], [1, NaN, 3], [0, 0, 0]), {
    ok: true,
    worst: 0,
    at: -1,
  });
  assert.equal(withinBounds([1, NaN], [1, 2], [1, 1]).ok, false);
  assert.equal(withinBounds([1, 2], [1, NaN], [1, 1]).worst, Infinity);
  const r = withinBounds([1, 2.5, 3], [1, 2, 3], [0.1, 0.2, 0.1]);
  assert.equal(r.ok, false);
  assert.equal(r.at, 1);
  assert.ok(Math.abs(r.worst - 2.5) < 1e-12);
  assert.throws(() => withinBounds([1], [1, 2], [1, 1]), /1 results, 2 references, 2 bounds/);
});

Deno.test("op sweep: every f32 GEMM case passes another summation order with FMA, though its bits differ", () => {
  assert.ok(f32Gemms.length >= 5, `only ${f32Gemms.length} f32 GEMM cases`);
  let differed = 0;
  for (const c of f32Gemms) {
    const r = runCase(c, withGemm(reversedFmaGemm));
    assert.ok(r.ok, `${c.op} ${c.size}: ${r.detail}`);
    if (r.err > 0) differed++;
  }
  assert.ok(
    differed >= 3,
    `the reordered product matched the CPU's bits in all but ${differed} cases`,
  );
});

/** A "GPU" gemm that is the CPU's, then moves element `at` of C away from zero by `delta`. */
function perturbed(at: number, delta: number) {
  return withGemm((...a: GemmArgs) => {
    const st = cpu.symbols.dt_gemm(...a);
    const C = view(a[12], at + 1);
    C[at] = C[at]! + (C[at]! >= 0 ? 1 : -1) * delta;
    return st;
  });
}

Deno.test("op sweep: one GEMM element moved past its derived bound fails, naming it; within it passes", () => {
  const c = f32Gemms.find((c) => c.size === "65x129x257 ld+3")!;
  assert.ok(c, f32Gemms.map((c) => c.size).join(", "));
  const at = 5 * (129 + 3) + 7; // row 5, column 7 (the rows are padded by 3)
  const bound = c.bounds!(() => new Float32Array(0)).C![at]!; // (GEMM bounds read no results)
  assert.ok(bound > 0);
  const bad = runCase(c, perturbed(at, 2 * bound));
  assert.equal(bad.ok, false);
  assert.match(bad.detail, new RegExp(`^C\\[${at}\\]: .* times its bound`));
  assert.ok(bad.err > 1.5 && bad.err < 2.5, `${bad.err}`);
  const fine = runCase(c, perturbed(at, 0.5 * bound));
  assert.ok(fine.ok, fine.detail);
  // a padding column is never written: any change there is wrong
  const pad = runCase(c, perturbed(129 + 1, 1e-6));
  assert.equal(pad.ok, false);
});
