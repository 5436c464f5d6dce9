/**
 * Tests of dt_gemm on the CPU against a float64 reference: all four transpose
 * combinations, alpha/beta, odd sizes, padded leading dimensions, strided
 * batches, bf16/f16 rounded once, the threaded path, every argument check, and
 * each kernel this CPU can run (DTRAIN_CPU_ISA, in child processes).
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { buildNative } from "../../scripts/build_native.ts";
import {
  assertSameBits,
  failsWith,
  GuardedMemory,
  isIsaChild,
  K,
  lastError,
  n64,
  ok,
  ptr,
  Rng,
  testUnderEachIsa,
  withThreads,
} from "./_helpers.ts";

buildNative({ quiet: true });

const DT = { F32: 0, BF16: 1, F16: 2 } as const;
type FloatDtype = (typeof DT)[keyof typeof DT];
const U = 2 ** -24; // unit roundoff of f32

/** One dt_gemm call: shapes, scalars, leading dimensions and batch strides (elements). */
interface Case {
  dtype: FloatDtype;
  transA: boolean;
  transB: boolean;
  M: number;
  N: number;
  K: number;
  alpha: number;
  beta: number;
  lda: number;
  ldb: number;
  ldc: number;
  batch: number;
  strideA: number;
  strideB: number;
  strideC: number;
}

/** A case with tight leading dimensions and strides, then `extra` applied. */
function makeCase(
  M: number,
  N: number,
  Kd: number,
  extra: Partial<Case> = {},
): Case {
  const transA = extra.transA ?? false, transB = extra.transB ?? false;
  const lda = extra.lda ?? (transA ? M : Kd),
    ldb = extra.ldb ?? (transB ? Kd : N),
    ldc = extra.ldc ?? N;
  return {
    dtype: DT.F32,
    alpha: 1,
    beta: 0,
    batch: 1,
    strideA: (transA ? Kd : M) * lda,
    strideB: (transB ? N : Kd) * ldb,
    strideC: M * ldc,
    ...extra,
    transA,
    transB,
    M,
    N,
    K: Kd,
    lda,
    ldb,
    ldc,
  };
}

/** Elements a buffer needs for `batch` matrices of rows x ld at `stride`. */
function extent(
  rows: number,
  ld: number,
  batch: number,
  stride: number,
): number {
  return rows === 0 || batch === 0 ? 0 : (batch - 1) * stride + rows * ld;
}

/** Storage of one operand: `fill()` for the rows x cols of each matrix, `pad` everywhere else. */
function operand(
  rows: number,
  cols: number,
  ld: number,
  c: Case,
  stride: number,
  fill: () => number,
  pad: number,
) {
  const data = new Float64Array(Math.max(1, extent(rows, ld, c.batch, stride)))
    .fill(pad);
  for (let b = 0; b < c.batch; b++) {
    for (let r = 0; r < rows; r++) {
      for (let j = 0; j < cols; j++) data[b * stride + r * ld + j] = fill();
    }
  }
  return data;
}

/** bf16 bits of a value (float32 first, then round to nearest even), as c10::BFloat16. */
function toBf16(x: number): number {
  const u = new Uint32Array(new Float32Array([x]).buffer)[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  const upper = u >>> 16, lower = u & 0xffff;
  return (upper +
    (lower > 0x8000 || (lower === 0x8000 && (upper & 1) === 1) ? 1 : 0)) &
    0xffff;
}

function fromBf16(h: number): number {
  return new Float32Array(new Uint32Array([h << 16]).buffer)[0]!;
}

/** The native buffer for values of dtype; values are rounded to it (bf16/f16 by the rules above). */
function encode(
  values: Float64Array,
  dtype: FloatDtype,
): Float32Array<ArrayBuffer> | Uint16Array<ArrayBuffer> {
  if (dtype === DT.F32) return Float32Array.from(values);
  if (dtype === DT.F16) {
    return new Uint16Array(Float16Array.from(values).buffer);
  }
  return Uint16Array.from(values, toBf16);
}

/** The values of a native buffer of dtype, as float64. */
function decode(
  buf: Float32Array | Uint16Array,
  dtype: FloatDtype,
): Float64Array {
  if (dtype === DT.F32) return Float64Array.from(buf);
  if (dtype === DT.F16) {
    return Float64Array.from(
      new Float16Array(buf.buffer, buf.byteOffset, buf.length),
    );
  }
  return Float64Array.from(buf, fromBf16);
}

/** The inputs of a case, as the library sees them (already rounded to the dtype). */
interface Inputs {
  a: Float64Array;
  b: Float64Array;
  c0: Float64Array;
}

/** Padding of C holds this; it must survive every call. */
const C_SENTINEL = 12345.5;

/**
 * Random inputs for a case. Padding of A and B is NaN, so reading it would
 * show in C; C starts as `cInit()` (normal by default) with C_SENTINEL around it.
 */
function randomInputs(
  rng: Rng,
  c: Case,
  cInit: () => number = () => rng.normal(),
): Inputs {
  const normal = () => rng.normal();
  const round = (x: Float64Array) => decode(encode(x, c.dtype), c.dtype);
  const a = operand(
    c.transA ? c.K : c.M,
    c.transA ? c.M : c.K,
    c.lda,
    c,
    c.strideA,
    normal,
    NaN,
  );
  const b = operand(
    c.transB ? c.N : c.K,
    c.transB ? c.K : c.N,
    c.ldb,
    c,
    c.strideB,
    normal,
    NaN,
  );
  const c0 = operand(c.M, c.N, c.ldc, c, c.strideC, cInit, C_SENTINEL);
  return { a: round(a), b: round(b), c0: round(c0) };
}

/**
 * Runs dt_gemm on a case and returns C (all of its storage) as float64; with
 * `guard`, each operand ends right before an inaccessible page.
 */
function runGemm(c: Case, inp: Inputs, guard?: GuardedMemory): Float64Array {
  const a = encode(inp.a, c.dtype), b = encode(inp.b, c.dtype), out = encode(inp.c0, c.dtype);
  const placedC = guard?.place(out);
  ok(K.dt_gemm(
    c.dtype,
    c.transA ? 1 : 0,
    c.transB ? 1 : 0,
    n64(c.M),
    n64(c.N),
    n64(c.K),
    c.alpha,
    guard ? guard.place(a).ptr : ptr(a),
    n64(c.lda),
    guard ? guard.place(b).ptr : ptr(b),
    n64(c.ldb),
    c.beta,
    placedC ? placedC.ptr : ptr(out),
    n64(c.ldc),
    n64(c.batch),
    n64(c.strideA),
    n64(c.strideB),
    n64(c.strideC),
    null,
  ));
  if (placedC) new Uint8Array(out.buffer).set(placedC.bytes);
  return decode(out, c.dtype);
}

/** Exact-ish reference in float64: the value and the sum of magnitudes (for error bounds). */
function reference(
  c: Case,
  inp: Inputs,
): { value: Float64Array; magnitude: Float64Array } {
  const value = Float64Array.from(inp.c0),
    magnitude = new Float64Array(inp.c0.length);
  for (let bi = 0; bi < c.batch; bi++) {
    for (let i = 0; i < c.M; i++) {
      for (let j = 0; j < c.N; j++) {
        let s = 0, m = 0;
        for (let p = 0; p < c.K; p++) {
          const x = inp
            .a[bi * c.strideA + (c.transA ? p * c.lda + i : i * c.lda + p)]!;
          const y = inp
            .b[bi * c.strideB + (c.transB ? j * c.ldb + p : p * c.ldb + j)]!;
          s += x * y;
          m += Math.abs(x * y);
        }
        const at = bi * c.strideC + i * c.ldc + j, c0 = inp.c0[at]!;
        // beta == 0 means C is not read: a NaN there must not matter
        value[at] = c.alpha * s + (c.beta === 0 ? 0 : c.beta * c0);
        magnitude[at] = Math.abs(c.alpha) * m +
          (c.beta === 0 ? 0 : Math.abs(c.beta * c0));
      }
    }
  }
  return { value, magnitude };
}

function describe(c: Case): string {
  return `${["f32", "bf16", "f16"][c.dtype]} ${c.transA ? "T" : "N"}${c.transB ? "T" : "N"} ` +
    `M=${c.M} N=${c.N} K=${c.K} alpha=${c.alpha} beta=${c.beta} lda=${c.lda} ldb=${c.ldb} ldc=${c.ldc} ` +
    `batch=${c.batch} strides=${c.strideA},${c.strideB},${c.strideC}`;
}

/**
 * Compares C with the reference. An f32 sum of K products is within
 * (K + 1) * u * sum|terms| of the exact value, and alpha, beta and the K
 * blocks add a few roundings more: 2K + 8 bounds them all. bf16/f16 add one
 * rounding of the result (u = 2^-8 / 2^-11, and half the smallest f16
 * subnormal near zero). Padding of C must be left untouched.
 */
function check(
  c: Case,
  got: Float64Array,
  ref: { value: Float64Array; magnitude: Float64Array },
): void {
  const outU = c.dtype === DT.F32 ? 0 : c.dtype === DT.BF16 ? 2 ** -8 : 2 ** -11;
  const outAbs = c.dtype === DT.F16 ? 2 ** -25 : 0;
  for (let at = 0; at < got.length; at++) {
    const want = ref.value[at]!, have = got[at]!;
    const tol = (2 * c.K + 8) * U * ref.magnitude[at]! + outU * Math.abs(want) +
      outAbs + 1e-37;
    if (!(Math.abs(have - want) <= tol)) {
      assert.fail(
        `${describe(c)}: element ${at} is ${have}, expected ${want} (tolerance ${
          tol.toExponential(2)
        })`,
      );
    }
  }
}

function checkCase(rng: Rng, c: Case, cInit?: () => number): void {
  const inp = randomInputs(rng, c, cInit);
  check(c, runGemm(c, inp), reference(c, inp));
}

// Children of the last tests run this file again with one kernel forced; they
// skip the tests that do not depend on the kernel.
const child = isIsaChild;

const ODD = [1, 3, 17, 33, 65, 130];
const TRANS: [boolean, boolean][] = [[false, false], [false, true], [
  true,
  false,
], [true, true]];

Deno.test("dt_gemm() f32 matches a float64 reference for every transpose combination and odd sizes", () => {
  const rng = new Rng(1);
  for (const [transA, transB] of TRANS) {
    for (const M of ODD) {
      for (const N of [1, 2, 17, 33, 130]) {
        const Kd = ODD[(M + N) % ODD.length]!;
        checkCase(rng, makeCase(M, N, Kd, { transA, transB }));
      }
    }
  }
});

Deno.test("dt_gemm() f32 covers the model shapes, K blocks and the thin and wide edges", () => {
  const rng = new Rng(2);
  const shapes: [number, number, number, boolean, boolean][] = [
    [64, 256, 128, false, true], // Linear 128 -> 256 forward
    [64, 128, 256, false, false], // its dX
    [256, 128, 64, true, false], // its dW
    [64, 2, 256, false, true], // Linear 256 -> 2 forward
    [64, 256, 2, false, false], // its dX
    [2, 256, 64, true, false], // its dW
    [2, 256, 64, false, true],
    [4, 5, 300, false, true], // dot products with a masked K tail
    [7, 4100, 3, false, false], // more than one N block
    [300, 20, 600, false, false], // several M and K blocks (K split evenly)
    [20, 300, 520, true, true],
    [9, 600, 40, true, false], // a transposed A feeding many columns is packed
    [20, 530, 33, true, true],
  ];
  for (const [M, N, Kd, transA, transB] of shapes) {
    checkCase(rng, makeCase(M, N, Kd, { transA, transB }));
  }
});

Deno.test("dt_gemm() f32 with every K block of a row block in turn gives the bits of row blocks computed alone", () => {
  // With several A blocks (M > mc) and several K blocks whose packed B panels fit 512 KiB
  // together, each row block of C gains all its K blocks before the next row block (C stays in
  // L2). A product of 100 rows (one A block) runs the K blocks one after another over all its
  // rows: each element still gains the same blocks in the same order, so the same bits.
  const rng = new Rng(21);
  for (const [transA, transB] of TRANS) {
    const c = makeCase(400, 100, 600, { transA, transB, alpha: 0.5, beta: 1.5 });
    const inp = randomInputs(rng, c);
    const full = runGemm(c, inp);
    check(c, full, reference(c, inp));
    for (let r0 = 0; r0 < c.M; r0 += 100) {
      const part = makeCase(100, c.N, c.K, { transA, transB, alpha: 0.5, beta: 1.5 });
      const a = new Float64Array(100 * c.K);
      for (let i = 0; i < 100; i++) {
        for (let p = 0; p < c.K; p++) {
          a[transA ? p * 100 + i : i * c.K + p] = inp
            .a[transA ? p * c.lda + r0 + i : (r0 + i) * c.lda + p]!;
        }
      }
      const c0 = inp.c0.slice(r0 * c.ldc, (r0 + 100) * c.ldc);
      const got = runGemm(part, { a, b: inp.b, c0 });
      assertSameBits(
        full.subarray(r0 * c.ldc, (r0 + 100) * c.ldc),
        got,
        `${describe(c)} rows ${r0}..`,
      );
    }
  }
});

Deno.test("dt_gemm() thin products (M or N from 1 to 4) match the reference: K tails, every layout, beta accumulation", () => {
  // Classifier heads and their gradients: N (forward), K (dX) or M (dW) is tiny. With both
  // operands along K (NT) they are dot products vectorised over K, 8 lanes at a time, with a
  // masked tail; the other layouts run the micro-kernel on a mostly empty tile.
  const rng = new Rng(11);
  for (const [transA, transB] of TRANS) {
    for (const thin of [1, 2, 3, 4]) {
      for (const other of [1, 3, 5, 13, 64]) {
        for (const Kd of [1, 7, 8, 9, 300]) {
          for (const [alpha, beta] of [[1, 0], [1, 1], [-0.5, 2]]) {
            for (const [M, N] of [[other, thin], [thin, other]]) {
              const pad = { lda: (transA ? M! : Kd) + 1, ldb: (transB ? Kd : N!) + 2, ldc: N! + 3 };
              checkCase(
                rng,
                makeCase(M!, N!, Kd, { transA, transB, alpha: alpha!, beta: beta!, ...pad }),
              );
            }
          }
        }
      }
    }
  }
});

Deno.test("dt_gemm() gives a row the same bits wherever it falls in the micro-tiles (short tiles run a smaller body)", () => {
  // The kernel runs a tile of fewer rows than its height on a body of that size (the AVX2
  // kernel: 6, 4 or 2 rows); each must do the same operations per element as the full one.
  // Rows r0 .. r0 + m - 1 of a 13-row product, computed as a product of m rows, must give the
  // same bits. (NN and TN only: NT with M <= 4 is the dot-product path, summed in another order.)
  const rng = new Rng(12);
  const M = 13, N = 37;
  for (const transA of [false, true]) {
    for (const Kd of [5, 300]) { // one K block, and two (kc splits 300 evenly)
      for (const beta of [0, 1]) {
        const whole = makeCase(M, N, Kd, { transA, beta });
        const inp = randomInputs(rng, whole);
        const all = runGemm(whole, inp);
        for (let m = 1; m <= 6; m++) {
          for (let r0 = 0; r0 + m <= M; r0 += 3) {
            // the rows' slice of A (A^T: the same storage from column r0 on, lda = M) and of C
            const part = makeCase(m, N, Kd, { transA, beta, lda: whole.lda });
            const a = transA ? inp.a.subarray(r0) : inp.a.subarray(r0 * Kd, (r0 + m) * Kd);
            const c0 = inp.c0.subarray(r0 * N, (r0 + m) * N);
            const got = runGemm(part, { a, b: inp.b, c0 });
            assertSameBits(
              got,
              all.subarray(r0 * N, (r0 + m) * N),
              `rows ${r0}..${r0 + m - 1} of ${describe(whole)}`,
            );
          }
        }
      }
    }
  }
});

Deno.test("dt_gemm() applies alpha and beta, with padded leading dimensions left untouched", () => {
  const rng = new Rng(3);
  for (const [transA, transB] of TRANS) {
    for (const [alpha, beta] of [[1, 1], [-0.5, 0], [2.5, -1.5], [0.75, 1]]) {
      for (const [M, N, Kd] of [[17, 33, 65], [3, 2, 130], [65, 17, 1]]) {
        const pad = {
          lda: (transA ? M : Kd) + 3,
          ldb: (transB ? Kd : N) + 5,
          ldc: N + 2,
        };
        checkCase(
          rng,
          makeCase(M!, N!, Kd!, {
            transA,
            transB,
            alpha: alpha!,
            beta: beta!,
            ...pad,
          }),
        );
      }
    }
  }
});

Deno.test("dt_gemm() runs strided batches, including a shared B (stride 0) and gaps between matrices", () => {
  const rng = new Rng(4);
  for (const [transA, transB] of TRANS) {
    // gaps: strides larger than the matrices, with NaN in between that must not leak
    const gapped = makeCase(17, 33, 20, {
      transA,
      transB,
      batch: 3,
      beta: 0.5,
    });
    checkCase(rng, {
      ...gapped,
      strideA: gapped.strideA + 7,
      strideB: gapped.strideB + 11,
      strideC: gapped.strideC + 5,
    });
    checkCase(
      rng,
      makeCase(9, 40, 12, { transA, transB, batch: 4, strideB: 0 }),
    );
  }
  // the attention shapes: q @ k^T and att @ v over 3 heads
  checkCase(rng, makeCase(128, 128, 32, { transB: true, batch: 3 }));
  checkCase(rng, makeCase(128, 32, 128, { batch: 3 }));
});

/**
 * The same product with operand A or B stored the other way round (op(X) = X^T <-> X), NaN in
 * the padding and in new gaps between batches.
 */
function flip(c: Case, inp: Inputs, operand: "a" | "b"): { c: Case; inp: Inputs } {
  const isA = operand === "a";
  const rows = isA ? c.M : c.K, cols = isA ? c.K : c.N; // op(X) is rows x cols
  const trans = isA ? c.transA : c.transB;
  const ld0 = isA ? c.lda : c.ldb, stride0 = isA ? c.strideA : c.strideB, src = isA ? inp.a : inp.b;
  const ld = (trans ? cols : rows) + 2, stride = (trans ? rows : cols) * ld + 3;
  const x = new Float64Array(extent(trans ? rows : cols, ld, c.batch, stride)).fill(NaN);
  for (let bi = 0; bi < c.batch; bi++) {
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        const from = bi * stride0 + (trans ? j * ld0 + i : i * ld0 + j);
        x[bi * stride + (trans ? i * ld + j : j * ld + i)] = src[from]!;
      }
    }
  }
  return isA
    ? { c: { ...c, transA: !c.transA, lda: ld, strideA: stride }, inp: { ...inp, a: x } }
    : { c: { ...c, transB: !c.transB, ldb: ld, strideB: stride }, inp: { ...inp, b: x } };
}

/** `base` as `batch` matrices with gaps of [a, b, c] elements between them (NaN there must not leak). */
function withGaps(base: Case, batch: number, [ga, gb, gc]: [number, number, number]): Case {
  return {
    ...base,
    batch,
    strideA: base.strideA + ga,
    strideB: base.strideB + gb,
    strideC: base.strideC + gc,
  };
}

/**
 * Runs `c` on random inputs, checks it against the float64 reference, and asserts the bits of
 * the same product laid out as `other` makes it (a product that takes another kernel path).
 */
function checkSameBitsAs(
  rng: Rng,
  c: Case,
  other: (c: Case, inp: Inputs) => { c: Case; inp: Inputs },
): void {
  const inp = randomInputs(rng, c);
  const got = runGemm(c, inp);
  check(c, got, reference(c, inp));
  const o = other(c, inp);
  assertSameBits(got, runGemm(o.c, o.inp), `${describe(c)} against ${describe(o.c)}`);
}

Deno.test("dt_gemm() with a transposed A packed by the kernel on the way gives the bits of an A read in place", () => {
  // A transposed f32 A feeding at least 8 B slivers (N > 112 on AVX2), with rows longer than
  // an A block (lda > mc = 144) or more than 256 columns, is packed by the kernel of the first
  // sliver as it reads it (kernel_pack), the tail sliver of fewer than mr rows beforehand; the
  // other slivers read it packed. The kernel does the same operations per element whichever
  // way A comes, so the result must have the bits of the same product with A stored
  // untransposed (read in place). f32 only: bf16 and f16 are always packed ahead.
  // M: one tile, a tail of 1 row, more than one A block (mc = 144) with a full and a short
  // tail; N: 8 slivers, a partial last one, past the in-place limit; K: 1, around 16, 2 blocks.
  const rng = new Rng(13);
  const shapes: [number, number, number][] = [
    [6, 128, 16],
    [13, 130, 1],
    [17, 128, 15],
    [25, 300, 17],
    [150, 129, 33],
    [149, 144, 300],
  ];
  for (const [M, N, Kd] of shapes) {
    for (const transB of [false, true]) {
      for (const [beta, batch] of [[0, 1], [1, 2]]) {
        const base = makeCase(M, N, Kd, {
          transA: true,
          transB,
          beta: beta!,
          lda: M + 150,
          ldb: (transB ? Kd : N) + 1,
        });
        checkSameBitsAs(rng, withGaps(base, batch!, [7, 3, 2]), (c, inp) => flip(c, inp, "a"));
      }
    }
  }
});

Deno.test("dt_gemm() with a K of 1 to 4 and B along N (outer products) gives the bits of the micro-kernel", () => {
  // With AVX-512, K <= 4 and B not transposed is K outer products with C stored in one pass
  // (gemm_outer_avx512.c); B stored transposed goes through the packed micro-kernel (M and N
  // above the dot-product limit). Each element must get the same operations in the same
  // order: the same bits, for each A layout, beta, a partial last block of columns (N not a
  // multiple of 16, or of a block of 128 / 64), and batches with NaN in the gaps.
  const rng = new Rng(14);
  for (const Kd of [1, 2, 3, 4]) {
    for (const [M, N] of [[5, 5], [64, 256], [9, 129], [13, 300], [7, 17]]) {
      for (const transA of [false, true]) {
        for (const [alpha, beta, batch] of [[1, 0, 1], [1, 1, 2], [-0.5, 2, 1]]) {
          const base = makeCase(M!, N!, Kd, {
            transA,
            alpha: alpha!,
            beta: beta!,
            lda: (transA ? M! : Kd) + 1,
            ldc: N! + 3,
          });
          checkSameBitsAs(rng, withGaps(base, batch!, [5, 2, 4]), (c, inp) => flip(c, inp, "b"));
        }
      }
    }
  }
});

Deno.test("dt_gemm() with an M of 1 to 4 and B along N (rows in registers) gives the bits of the micro-kernel", () => {
  // With AVX-512, M <= 4 and B not transposed sums C's rows in registers over K blocks
  // (gemm_outer_avx512.c); with both A and B transposed the same product goes through the
  // micro-kernel (the dot products take A along K only). Each element must get the same
  // operations: the same bits, over one and several K blocks (300 and 600 split into blocks of
  // 150 and 200), beta, partial column blocks and batches with NaN in the gaps.
  const rng = new Rng(15);
  for (const M of [1, 2, 3, 4]) {
    for (const [N, Kd] of [[17, 5], [256, 64], [129, 300], [300, 33], [40, 600]]) {
      for (const transA of [false, true]) {
        for (const [alpha, beta, batch] of [[1, 0, 1], [1, 1, 2], [-0.5, 2, 1]]) {
          const base = makeCase(M, N!, Kd!, {
            transA,
            alpha: alpha!,
            beta: beta!,
            lda: (transA ? M : Kd!) + 1,
            ldc: N! + 3,
          });
          // A and B both transposed: the micro-kernel (the dot products take A along K only)
          checkSameBitsAs(rng, withGaps(base, batch!, [5, 2, 4]), (c, inp) => {
            const at = c.transA ? { c, inp } : flip(c, inp, "a");
            return flip(at.c, at.inp, "b");
          });
        }
      }
    }
  }
});

/** M, N, K of products with every kind of edge: partial tiles, dot products, K tails, a packed A. */
const EDGE_SHAPES: [number, number, number][] = [
  [1, 1, 1],
  [3, 17, 33],
  [2, 130, 7],
  [17, 3, 65],
  [33, 65, 5],
  [7, 35, 300],
  [5, 530, 9],
  [151, 130, 17], // A^T packed on the way (lda > mc): a second block of a full tile and 1 row
  [9, 131, 2], // K outer products (AVX-512, B along N): a partial last block
  [3, 40, 4],
  [2, 131, 70], // C's rows in registers (AVX-512, M <= 4, B along N): a partial last block
];

Deno.test("dt_gemm() reads nothing past the end of A, B or C (guard pages)", () => {
  // Edges are where a kernel could over-read: partial micro-tiles, B rows read
  // in place, masked K tails of the dot products, the last row of each operand.
  const rng = new Rng(10);
  using guard = new GuardedMemory();
  for (const dtype of [DT.F32, DT.BF16, DT.F16]) {
    for (const [transA, transB] of TRANS) {
      for (const [M, N, Kd] of EDGE_SHAPES) {
        const c = makeCase(M, N, Kd, { dtype, transA, transB, beta: 1 });
        const inp = randomInputs(rng, c);
        check(c, runGemm(c, inp, guard), reference(c, inp));
      }
    }
  }
});

Deno.test("dt_gemm() with beta = 0 never reads C: NaN there does not leak", () => {
  const rng = new Rng(5);
  for (const dtype of [DT.F32, DT.BF16, DT.F16]) {
    for (const [transA, transB] of TRANS) {
      for (const [M, N, Kd] of [[33, 17, 9], [2, 40, 7], [40, 2, 300]]) {
        const c = makeCase(M!, N!, Kd!, {
          dtype,
          transA,
          transB,
          beta: 0,
          alpha: 1.5,
        });
        const inp = randomInputs(rng, c, () => NaN);
        const got = runGemm(c, inp);
        assert.ok(
          got.every((v) => !Number.isNaN(v)),
          `${describe(c)}: NaN leaked from C`,
        );
        check(c, got, reference(c, inp));
      }
    }
  }
});

Deno.test("dt_gemm() with K = 0 or alpha = 0 scales C by beta and reads neither A nor B", () => {
  const rng = new Rng(6);
  for (const dtype of [DT.F32, DT.BF16, DT.F16]) {
    for (const beta of [0, 1, -2]) {
      const c = makeCase(5, 7, 3, { dtype, alpha: 0, beta });
      const inp = randomInputs(rng, c);
      inp.a.fill(NaN); // alpha = 0: A and B are not read (as in BLAS), so NaN stays out
      inp.b.fill(NaN);
      check(c, runGemm(c, inp), reference({ ...c, K: 0 }, inp));
      const k0 = makeCase(5, 7, 0, { dtype, alpha: 1, beta });
      const inp0 = randomInputs(rng, k0);
      check(k0, runGemm(k0, inp0), reference(k0, inp0));
    }
  }
});

Deno.test("dt_gemm() with M, N or batch = 0 touches nothing", () => {
  // null pointers everywhere: any access would crash the test process
  for (const [M, N, batch] of [[0, 5, 1], [5, 0, 1], [5, 5, 0]]) {
    ok(
      K.dt_gemm(
        DT.F32,
        0,
        0,
        n64(M!),
        n64(N!),
        4n,
        1,
        null,
        4n,
        null,
        n64(N!),
        0,
        null,
        n64(N!),
        n64(batch!),
        0n,
        0n,
        0n,
        null,
      ),
    );
  }
});

Deno.test("dt_gemm() bf16 and f16 match the reference with one rounding of the result", () => {
  const rng = new Rng(7);
  for (const dtype of [DT.BF16, DT.F16]) {
    for (const [transA, transB] of TRANS) {
      for (
        const [M, N, Kd] of [[1, 1, 1], [17, 33, 65], [3, 130, 17], [
          33,
          2,
          300,
        ]]
      ) {
        checkCase(
          rng,
          makeCase(M!, N!, Kd!, {
            dtype,
            transA,
            transB,
            alpha: 0.5,
            beta: 1.5,
            ldc: N! + 1,
          }),
        );
      }
    }
    // more than one f32 scratch tile (240 rows) and a batch
    checkCase(rng, makeCase(250, 20, 5, { dtype, batch: 2, beta: -1 }));
    // odd K over three K blocks, ragged row and column tiles, padded leading dimensions
    for (const [transA, transB] of TRANS) {
      checkCase(
        rng,
        makeCase(25, 97, 769, {
          dtype,
          transA,
          transB,
          lda: (transA ? 25 : 769) + 3,
          ldb: (transB ? 769 : 97) + 5,
        }),
      );
    }
  }
});

Deno.test("dt_gemm() bf16 and f16 results are the exact sums rounded once, across K blocks", () => {
  // Small non-negative integers: every partial sum is exact in f32, so the only
  // rounding allowed is the final one to bf16/f16. Rounding after each K block
  // (K = 600 spans several) would show up as a difference.
  const rng = new Rng(8);
  for (const dtype of [DT.BF16, DT.F16]) {
    for (const [transA, transB] of TRANS) {
      const c = makeCase(9, 19, 600, { dtype, transA, transB, beta: 1 });
      const int = () => rng.int(0, 9);
      const base = randomInputs(rng, c, int);
      const inp = {
        a: base.a.map((v) => (Number.isNaN(v) ? v : int())),
        b: base.b.map((v) => (Number.isNaN(v) ? v : int())),
        c0: base.c0,
      };
      const want = decode(encode(reference(c, inp).value, dtype), dtype);
      assertSameBits(runGemm(c, inp), want, describe(c));
    }
  }
});

Deno.test({
  name: "dt_gemm() gives the same bits with 2 threads as with 1, for every split",
  ignore: child,
}, () => {
  const rng = new Rng(9);
  // Each product has at least 2 x 8e6 flops (DT_GEMM_FLOPS_PER_THREAD in
  // gemm.c), so that it is worth a second thread and really is split.
  const cases = [
    makeCase(96, 200, 500), // one matrix, split along M
    makeCase(40, 50, 1400, { batch: 3, transB: true }), // 3 tiles for 2 threads: split again
    makeCase(5, 1000, 1700, { transA: true }), // too few rows: split along N
    makeCase(3, 2000, 1400, { transB: true }), // dot products, split along N
    makeCase(128, 32, 128, { batch: 16 }), // batches shared out
    makeCase(500, 70, 240, { dtype: DT.BF16, beta: 1 }), // several bf16 scratch tiles
    makeCase(300, 64, 440, { dtype: DT.F16, transA: true, transB: true }),
  ];
  for (const c of cases) {
    const inp = randomInputs(rng, c);
    const one = withThreads(1, () => runGemm(c, inp));
    const two = withThreads(2, () => runGemm(c, inp));
    assertSameBits(two, one, describe(c));
    check(c, two, reference(c, inp));
  }
});

/** The arguments of dt_gemm that the argument checks look at. */
interface GemmArgs {
  dtype: number;
  transA: number;
  transB: number;
  M: bigint;
  N: bigint;
  K: bigint;
  A: Deno.PointerValue;
  lda: bigint;
  B: Deno.PointerValue;
  ldb: bigint;
  C: Deno.PointerValue;
  ldc: bigint;
  batch: bigint;
  strideA: bigint;
  strideB: bigint;
  strideC: bigint;
}

/** dt_gemm with valid arguments (a 4 x 5 x 6 f32 product), `over` replaced. */
function callWith(over: Partial<GemmArgs>): number {
  const a = new Float32Array(64),
    b = new Float32Array(64),
    c = new Float32Array(64);
  const g: GemmArgs = {
    dtype: DT.F32,
    transA: 0,
    transB: 0,
    M: 4n,
    N: 5n,
    K: 6n,
    A: ptr(a),
    lda: 6n,
    B: ptr(b),
    ldb: 5n,
    C: ptr(c),
    ldc: 5n,
    batch: 1n,
    strideA: 0n,
    strideB: 0n,
    strideC: 0n,
    ...over,
  };
  return K.dt_gemm(
    g.dtype,
    g.transA,
    g.transB,
    g.M,
    g.N,
    g.K,
    1,
    g.A,
    g.lda,
    g.B,
    g.ldb,
    0,
    g.C,
    g.ldc,
    g.batch,
    g.strideA,
    g.strideB,
    g.strideC,
    null,
  );
}

Deno.test({
  name: "dt_gemm() rejects bad arguments with DT_ERR_ARG naming the argument and its value",
  ignore: child,
}, () => {
  assert.equal(callWith({}), 0, `valid call failed: ${lastError()}`);
  const bad: [Partial<GemmArgs>, string][] = [
    [
      { dtype: 3 },
      "dtype 3 is not supported: expected DT_F32 (0), DT_BF16 (1) or DT_F16 (2)",
    ],
    [{ dtype: -1 }, "dtype -1 is not supported"],
    [{ transA: 2 }, "transA = 2: expected 0 or 1"],
    [{ transB: -1 }, "transB = -1: expected 0 or 1"],
    [{ M: -1n }, "M = -1 is negative"],
    [{ N: -2n }, "N = -2 is negative"],
    [{ K: -3n }, "K = -3 is negative"],
    [{ batch: -1n }, "batch = -1 is negative"],
    [
      { lda: 5n },
      "lda = 5 is too small for A (transA = 0) stored as 4 x 6: expected lda >= 6",
    ],
    [
      { transA: 1, lda: 3n },
      "lda = 3 is too small for A (transA = 1) stored as 6 x 4: expected lda >= 4",
    ],
    [
      { ldb: 4n },
      "ldb = 4 is too small for B (transB = 0) stored as 6 x 5: expected ldb >= 5",
    ],
    [
      { transB: 1, ldb: 5n },
      "ldb = 5 is too small for B (transB = 1) stored as 5 x 6: expected ldb >= 6",
    ],
    [
      { ldc: 4n },
      "ldc = 4 is too small for C stored as 4 x 5: expected ldc >= 5",
    ],
    [{ strideA: -1n }, "strideA = -1 is negative"],
    [{ strideB: -7n }, "strideB = -7 is negative"],
    [{ strideC: -1n }, "strideC = -1 is negative"],
    [
      { batch: 2n, strideC: 19n },
      "strideC = 19 makes the 4 x 5 outputs (ldc 5) of consecutive batches overlap: expected strideC >= 20",
    ],
    [{ C: null }, "C is NULL"],
    [{ A: null }, "A is NULL"],
    [{ B: null }, "B is NULL"],
    [
      { M: 1n << 40n, lda: 1n << 30n, A: null },
      "spans more than 2^63 bytes",
    ],
    [{ batch: 1n << 40n, strideB: 1n << 40n }, "spans more than 2^63 bytes"],
  ];
  for (const [over, text] of bad) failsWith(callWith(over), text);
});

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Runs deno with args and extra environment; returns its exit code and output. */
async function runDeno(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; output: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    env,
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  const text = new TextDecoder();
  return {
    code: out.code,
    output: text.decode(out.stdout) + text.decode(out.stderr),
  };
}

// avx512: bf16 converted to f32 for the f32 kernel, where the default may use vdpbf16ps
testUnderEachIsa("dt_gemm()", import.meta.url);

Deno.test({
  name: "dt_gemm() refuses an unknown DTRAIN_CPU_ISA by name",
  ignore: child,
  fn: async () => {
    const script = `import { cpuKernels } from ${
      JSON.stringify(new URL("../../ffi/cpu.ts", import.meta.url).href)
    };
      import { cString } from ${
      JSON.stringify(new URL("../../ffi/native.ts", import.meta.url).href)
    };
      const k = cpuKernels().symbols, a = new Float32Array(4), p = Deno.UnsafePointer.of(a);
      const st = k.dt_gemm(0, 0, 0, 2n, 2n, 1n, 1, p, 1n, p, 2n, 0, p, 2n, 1n, 0n, 0n, 0n, null);
      console.log(st, cString(k.dt_last_error()));`;
    const r = await runDeno(["eval", "--ext=ts", script], {
      DTRAIN_CPU_ISA: "sse9",
    });
    assert.equal(r.code, 0, r.output);
    assert.match(
      r.output,
      /^1 dt_gemm: DTRAIN_CPU_ISA=sse9 is not supported: expected avx512bf16, avx512, avx2 or generic/,
    );
  },
});

/** The CPU's feature flags (Linux), for what dt_gemm may choose. */
function cpuFlags(): Set<string> {
  const info = Deno.readTextFileSync("/proc/cpuinfo");
  return new Set(/^flags\s*:\s*(.*)$/m.exec(info)?.[1]?.split(/\s+/) ?? []);
}

Deno.test({
  name:
    "dt_gemm() picks vdpbf16ps for bf16 only where the CPU has AVX512_BF16 and DTRAIN_CPU_ISA allows it",
  ignore: child,
  fn: async () => {
    const flags = cpuFlags();
    const avx512 = flags.has("avx512f") && flags.has("avx2") && flags.has("fma");
    const bf16 = avx512 && flags.has("avx512bw") && flags.has("avx512vl") &&
      flags.has("avx512_bf16");
    const avx2 = flags.has("avx2") && flags.has("fma");
    const f32Best = avx512 ? "avx512" : avx2 ? "avx2" : "generic";
    const expected: [string | undefined, string, string][] = [
      [undefined, bf16 ? "avx512bf16" : f32Best, f32Best],
      ["avx512bf16", bf16 ? "avx512bf16" : f32Best, f32Best],
      [
        "avx512",
        avx512 ? "avx512" : avx2 ? "avx2" : "generic",
        avx512 ? "avx512" : avx2 ? "avx2" : "generic",
      ],
      ["avx2", avx2 ? "avx2" : "generic", avx2 ? "avx2" : "generic"],
      ["generic", "generic", "generic"],
    ];
    const script = `import { gemmKernel } from ${
      JSON.stringify(new URL("../../ffi/cpu_extras.ts", import.meta.url).href)
    };
      console.log(gemmKernel("bf16"), gemmKernel("f32"), gemmKernel("f16"));`;
    for (const [cap, wantBf16, wantF32] of expected) {
      const r = await runDeno(["eval", "--ext=ts", script], cap ? { DTRAIN_CPU_ISA: cap } : {});
      assert.equal(r.code, 0, r.output);
      assert.equal(r.output.trim(), `${wantBf16} ${wantF32} ${wantF32}`, `DTRAIN_CPU_ISA=${cap}`);
    }
  },
});
