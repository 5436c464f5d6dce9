/**
 * Tests of dt_gemm_ex on the CPU against float64 references: C of f32 under
 * bf16/f16 operands, every epilogue (bias, bias + GELU keeping the
 * pre-activation, bias gradient over op(A) in both layouts), alpha and beta,
 * K = 0 and alpha = 0 (no product, the epilogue still applies), and the
 * argument checks.
 */
import assert from "node:assert/strict";
import { failsWith, K, n64, ok, ptr, Rng, testUnderEachIsa, withThreads } from "./_helpers.ts";

const DT = { f32: 0, bf16: 1, f16: 2 } as const;
const EPI = { none: 0, bias: 1, gelu: 2, bgrad: 3 } as const;
type Kind = keyof typeof DT;

const u32 = new Uint32Array(1), f32v = new Float32Array(u32.buffer);
function toBits(x: Float32Array, kind: Kind): Float32Array<ArrayBuffer> | Uint16Array<ArrayBuffer> {
  if (kind === "f32") return Float32Array.from(x);
  if (kind === "f16") return new Uint16Array(Float16Array.from(x).buffer);
  return Uint16Array.from(x, (v) => {
    f32v[0] = v;
    const u = u32[0]!;
    return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
  });
}
function values(a: Float32Array | Uint16Array, kind: Kind): Float64Array {
  if (kind === "f32") return Float64Array.from(a as Float32Array);
  if (kind === "f16") return Float64Array.from(new Float16Array(a.buffer, a.byteOffset, a.length));
  return Float64Array.from(a as Uint16Array, (h) => {
    u32[0] = h << 16;
    return f32v[0]!;
  });
}

const gelu = (x: number) =>
  0.5 * x * (1 + Math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));

interface Case {
  ab: Kind;
  c: Kind;
  ta: number;
  tb: number;
  M: number;
  N: number;
  K: number;
  alpha: number;
  beta: number;
  epi: keyof typeof EPI;
}

/** Runs a case; returns [C, bias, aux] as values and their float64 references. */
function run(t: Case, seed: number) {
  const rng = new Rng(seed);
  const { M, N, K: Kd } = t;
  const [ar, ac] = t.ta ? [Kd, M] : [M, Kd];
  const [br, bc] = t.tb ? [N, Kd] : [Kd, N];
  const A = toBits(rng.normals(ar * ac), t.ab), B = toBits(rng.normals(br * bc), t.ab);
  const C0 = toBits(rng.normals(M * N), t.c);
  const biasLen = t.epi === "bgrad" ? M : N;
  const bias = toBits(t.epi === "bgrad" ? new Float32Array(biasLen) : rng.normals(biasLen), t.c);
  const aux = toBits(new Float32Array(M * N), t.c);
  const C = C0.slice();
  ok(
    K.dt_gemm_ex(
      DT[t.ab],
      DT[t.c],
      t.ta,
      t.tb,
      n64(M),
      n64(N),
      n64(Kd),
      t.alpha,
      ptr(A),
      n64(ac),
      ptr(B),
      n64(bc),
      t.beta,
      ptr(C),
      n64(N),
      EPI[t.epi],
      t.epi === "none" ? null : ptr(bias),
      t.epi === "gelu" ? ptr(aux) : null,
      n64(N),
      null,
    ),
  );
  const a = values(A, t.ab), b = values(B, t.ab), c0 = values(C0, t.c), bv = values(bias, t.c);
  const opA = (i: number, k: number) => a[t.ta ? k * ac + i : i * ac + k]!;
  const opB = (k: number, j: number) => b[t.tb ? j * bc + k : k * bc + j]!;
  const refC = new Float64Array(M * N),
    refAux = new Float64Array(M * N),
    refBias = new Float64Array(M);
  for (let i = 0; i < M; i++) {
    for (let j = 0; j < N; j++) {
      let s = 0;
      for (let k = 0; k < Kd; k++) s += opA(i, k) * opB(k, j);
      let v = t.alpha * s + (t.beta ? t.beta * c0[i * N + j]! : 0);
      if (t.epi === "bias" || t.epi === "gelu") v += bv[j]!;
      refAux[i * N + j] = v;
      refC[i * N + j] = t.epi === "gelu" ? gelu(v) : v;
    }
    for (let k = 0; k < Kd; k++) refBias[i] += opA(i, k);
  }
  return {
    C: values(C, t.c),
    aux: values(aux, t.c),
    bias: values(bias, t.c),
    refC,
    refAux,
    refBias,
  };
}

/** max |a - e| / max(|e|, 1) */
function err(a: ArrayLike<number>, e: ArrayLike<number>): number {
  let d = 0, s = 1;
  for (let i = 0; i < e.length; i++) {
    if (Number.isNaN(a[i]!)) return Infinity;
    d = Math.max(d, Math.abs(a[i]! - e[i]!));
    s = Math.max(s, Math.abs(e[i]!));
  }
  return d / s;
}

const tolOf = (c: Kind) => (c === "f32" ? 2e-6 : c === "bf16" ? 8e-3 : 1e-3);

const CASES: Case[] = [];
for (const ab of ["f32", "bf16", "f16"] as const) {
  for (const c of ab === "f32" ? (["f32"] as const) : ([ab, "f32"] as const)) {
    for (const epi of ["none", "bias", "gelu", "bgrad"] as const) {
      if (ab === c && epi === "none") continue; // that is dt_gemm
      for (const [ta, tb] of [[0, 1], [1, 0]]) {
        CASES.push({ ab, c, ta: ta!, tb: tb!, M: 13, N: 37, K: 21, alpha: 1, beta: 0, epi });
      }
    }
  }
}
// several K blocks of the bf16 kernels (an odd last one), partial tiles, an f32 C added to
for (const [ta, tb] of [[0, 1], [1, 0]]) {
  CASES.push({
    ab: "bf16",
    c: "f32",
    ta: ta!,
    tb: tb!,
    M: 29,
    N: 70,
    K: 1001,
    alpha: 1,
    beta: 1,
    epi: "none",
  });
  CASES.push({
    ab: "bf16",
    c: "bf16",
    ta: ta!,
    tb: tb!,
    M: 130,
    N: 45,
    K: 801,
    alpha: 1,
    beta: 0,
    epi: "gelu",
  });
}
CASES.push({
  ab: "bf16",
  c: "f32",
  ta: 1,
  tb: 0,
  M: 9,
  N: 5,
  K: 70,
  alpha: 0.5,
  beta: 1,
  epi: "bgrad",
});
CASES.push({
  ab: "bf16",
  c: "bf16",
  ta: 0,
  tb: 0,
  M: 4,
  N: 6,
  K: 3,
  alpha: 2,
  beta: 0.5,
  epi: "gelu",
});
CASES.push({
  ab: "f32",
  c: "f32",
  ta: 0,
  tb: 1,
  M: 5,
  N: 7,
  K: 0,
  alpha: 1,
  beta: 0.25,
  epi: "bias",
});
CASES.push({
  ab: "bf16",
  c: "f32",
  ta: 1,
  tb: 0,
  M: 6,
  N: 3,
  K: 4,
  alpha: 0,
  beta: 1,
  epi: "bgrad",
});

for (const [i, t] of CASES.entries()) {
  Deno.test(
    `dt_gemm_ex ${t.ab} -> C ${t.c}, ${t.epi}, ${t.ta ? "T" : "N"}${
      t.tb ? "T" : "N"
    } ${t.M}x${t.N}x${t.K}` +
      ` alpha ${t.alpha} beta ${t.beta}`,
    () => {
      const r = run(t, 100 + i);
      const tol = tolOf(t.c);
      assert.ok(err(r.C, r.refC) <= tol, `C: error ${err(r.C, r.refC)}`);
      if (t.epi === "gelu") {
        assert.ok(err(r.aux, r.refAux) <= tol, `aux: error ${err(r.aux, r.refAux)}`);
      }
      if (t.epi === "bgrad") {
        assert.ok(err(r.bias, r.refBias) <= tol, `bias gradient: ${err(r.bias, r.refBias)}`);
      }
    },
  );
}

Deno.test("dt_gemm_ex refuses what it does not take, naming it", () => {
  const F = new Float32Array(64);
  const p = ptr(F);
  const call = (
    ab: number,
    c: number,
    epi: number,
    bias: Deno.PointerValue,
    aux: Deno.PointerValue,
    ldaux = 4n,
  ) =>
    K.dt_gemm_ex(ab, c, 0, 0, 2n, 4n, 3n, 1, p, 3n, p, 4n, 0, p, 4n, epi, bias, aux, ldaux, null);
  failsWith(
    call(1, 2, 0, null, null),
    "C of f16 with bf16 operands is not supported: expected bf16 or f32",
  );
  failsWith(call(0, 1, 0, null, null), "C of bf16 with f32 operands");
  failsWith(call(0, 0, 7, null, null), "epilogue 7");
  failsWith(call(0, 0, 1, null, null), "epilogue 1 needs a bias vector");
  failsWith(call(0, 0, 2, p, null), "needs aux");
  failsWith(call(0, 0, 2, p, p, 3n), "ldaux = 3 is too small");
  ok(call(0, 0, 3, p, null));
});

/** bf16 bits of f32 values (round to nearest even; the inputs here are finite). */
function roundBf16(x: Float32Array): Uint16Array<ArrayBuffer> {
  return toBits(x, "bf16") as Uint16Array<ArrayBuffer>;
}

// A bf16 C with a bias or bias + GELU epilogue: with AVX512_BF16 the kernel adds the bias
// (and keeps the pre-activation) as it stores each tile; everywhere the bits must be those of
// the f32 product (dt_gemm_ex into an f32 C) plus the bias in f32, then dt_gelu_fwd, each
// rounded once. Partial 12 x 32 tiles, several K blocks (K > 512), more rows than one
// A block (M > 144), each layout, one and two threads.
for (
  const [M, N, Kd, ta, tb] of [
    [37, 70, 800, 0, 1],
    [300, 33, 129, 0, 0],
    [13, 40, 5, 1, 0],
    [1, 1, 1, 1, 1],
    [64, 512, 128, 0, 1],
  ] as const
) {
  for (const epi of ["bias", "gelu"] as const) {
    Deno.test(`dt_gemm_ex bf16 -> bf16 ${epi} ${M}x${N}x${Kd} ${ta ? "T" : "N"}${tb ? "T" : "N"}: the bits of the f32 product, then the epilogue`, () => {
      const rng = new Rng(M + N + Kd);
      const [ar, ac] = ta ? [Kd, M] : [M, Kd];
      const [br, bc] = tb ? [N, Kd] : [Kd, N];
      const A = roundBf16(rng.normals(ar * ac)), B = roundBf16(rng.normals(br * bc));
      const bias = roundBf16(rng.normals(N));
      // the f32 product of the same operands (no epilogue)
      const prod = new Float32Array(M * N);
      ok(
        K.dt_gemm_ex(
          1,
          0,
          ta,
          tb,
          n64(M),
          n64(N),
          n64(Kd),
          0.75,
          ptr(A),
          n64(ac),
          ptr(B),
          n64(bc),
          0,
          ptr(prod),
          n64(N),
          0,
          null,
          null,
          0n,
          null,
        ),
      );
      const bv = values(bias, "bf16");
      const pre = Float32Array.from(prod, (p, i) => Math.fround(p + bv[i % N]!));
      const act = new Float32Array(M * N);
      ok(K.dt_gelu_fwd(ptr(act), ptr(pre), n64(M * N), null));
      const wantC = roundBf16(epi === "gelu" ? act : pre), wantAux = roundBf16(pre);
      for (const threads of [1, 2]) {
        const C = new Uint16Array(M * N), aux = new Uint16Array(M * N);
        withThreads(
          threads,
          () =>
            ok(
              K.dt_gemm_ex(
                1,
                1,
                ta,
                tb,
                n64(M),
                n64(N),
                n64(Kd),
                0.75,
                ptr(A),
                n64(ac),
                ptr(B),
                n64(bc),
                0,
                ptr(C),
                n64(N),
                EPI[epi],
                ptr(bias),
                epi === "gelu" ? ptr(aux) : null,
                n64(N),
                null,
              ),
            ),
        );
        assert.deepEqual(C, wantC, `C on ${threads} thread(s)`);
        if (epi === "gelu") assert.deepEqual(aux, wantAux, `aux on ${threads} thread(s)`);
      }
    });
  }
}

// f32 operands and C with a bias or bias + GELU epilogue: however the epilogue is applied, the
// bits must be those of the plain product (dt_gemm, beta applied to C) plus the bias in f32,
// then dt_gelu_fwd. Several K blocks (K > 256, odd), more
// rows than one A block (M > 144), partial 6 x 16 tiles, transposed A read in place and packed
// (N <= 256 and N > 256), the dot-product path (M or N <= 4), beta 0 and 1, one and two threads.
for (
  const [M, N, Kd, ta, tb, beta] of [
    [37, 70, 600, 0, 1, 0],
    [300, 33, 129, 0, 0, 1],
    [13, 40, 5, 1, 0, 0],
    [50, 300, 513, 1, 0, 1],
    [3, 45, 70, 0, 1, 0],
    [40, 2, 33, 1, 1, 1],
    [1, 1, 1, 0, 0, 0],
    [64, 512, 128, 0, 1, 0],
  ] as const
) {
  for (const epi of ["bias", "gelu"] as const) {
    Deno.test(`dt_gemm_ex f32 -> f32 ${epi} ${M}x${N}x${Kd} ${ta ? "T" : "N"}${tb ? "T" : "N"} beta ${beta}: the bits of the product, then the epilogue`, () => {
      const rng = new Rng(7 * M + N + Kd);
      const [ar, ac] = ta ? [Kd, M] : [M, Kd];
      const [br, bc] = tb ? [N, Kd] : [Kd, N];
      const A = rng.normals(ar * ac), B = rng.normals(br * bc), bias = rng.normals(N);
      const C0 = rng.normals(M * N);
      const prod = C0.slice();
      ok(
        K.dt_gemm(
          0,
          ta,
          tb,
          n64(M),
          n64(N),
          n64(Kd),
          0.75,
          ptr(A),
          n64(ac),
          ptr(B),
          n64(bc),
          beta,
          ptr(prod),
          n64(N),
          1n,
          0n,
          0n,
          0n,
          null,
        ),
      );
      const pre = Float32Array.from(prod, (p, i) => Math.fround(p + bias[i % N]!));
      const act = new Float32Array(M * N);
      ok(K.dt_gelu_fwd(ptr(act), ptr(pre), n64(M * N), null));
      const wantC = epi === "gelu" ? act : pre;
      for (const threads of [1, 2]) {
        const C = C0.slice(), aux = new Float32Array(M * N);
        withThreads(threads, () =>
          ok(
            K.dt_gemm_ex(
              0,
              0,
              ta,
              tb,
              n64(M),
              n64(N),
              n64(Kd),
              0.75,
              ptr(A),
              n64(ac),
              ptr(B),
              n64(bc),
              beta,
              ptr(C),
              n64(N),
              EPI[epi],
              ptr(bias),
              epi === "gelu" ? ptr(aux) : null,
              n64(N),
              null,
            ),
          ));
        assert.deepEqual(C, wantC, `C on ${threads} thread(s)`);
        if (epi === "gelu") assert.deepEqual(aux, pre, `aux on ${threads} thread(s)`);
      }
    });
  }
}

// The file again with one kernel forced (DTRAIN_CPU_ISA).
testUnderEachIsa("dt_gemm_ex", import.meta.url);
