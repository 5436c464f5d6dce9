/**
 * The op sweep's cases for the convolutional-network and everyday-op kernels
 * (unary math, where, strided copy, reductions and softmax along a dim,
 * dimension-wise gathers and their backwards, im2col/col2im, direct
 * convolution, pooling, batch norm), forward and backward. Every one of them
 * is held to the CPU library's bits (tolerance 0) — the CUDA kernels keep the
 * CPU's order of operations — except pow by an exponent without a special
 * case, which is the device's powf on a GPU. Inputs of backward cases that a
 * forward produces (softmax outputs, max-pooling indices, batch statistics)
 * come from the CPU library.
 */
import type { KernelSymbols } from "../../ffi/symbols.ts";
import type { NativeLibrary } from "../../ffi/native.ts";
import { type Arr, type Case, type Kernels, type Rng, toBf16 } from "./_harness.ts";
import { gamma } from "./tolerance.ts";
import { relativeTo, termBounds } from "./op_bounds.ts";

/** A convolution's shape: N, C, H, W, Cout, groups, kernel, stride, padding, dilation. */
export interface ConvShape {
  N: number;
  C: number;
  H: number;
  W: number;
  Cout: number;
  groups: number;
  K: [number, number];
  S: [number, number];
  P: [number, number];
  D: [number, number];
}

/** A pooling's shape: planes, H, W, kernel, stride, padding, dilation (max only). */
export interface PoolShape {
  P: number;
  H: number;
  W: number;
  K: [number, number];
  S: [number, number];
  Pad: [number, number];
  D: [number, number];
}

/** The sizes of each family of these cases. */
export interface CnnSizeSet {
  unary: number[];
  /** [outer, D, inner] */
  dims: [number, number, number][];
  /** [outer, D, J, inner] */
  index: [number, number, number, number][];
  /** strided boxes: [sizes, permutation of the input's dims] */
  strided: [number[], number[]][];
  conv: ConvShape[];
  pool: PoolShape[];
  /** [P, H, W, OH, OW] */
  adaptive: [number, number, number, number, number][];
  /** [N, C, HW] */
  bn: [number, number, number][];
  /** batch norm, ReLU and 2x2 max pooling in one op: [N, C, H, W] */
  bnPool: [number, number, number, number][];
  /** Winograd F(2x2, 3x3): [N, C, H, W, Cout, PH, PW, tiles per block (0: all)] */
  winograd: [number, number, number, number, number, number, number, number][];
}

const conv = (
  N: number,
  C: number,
  H: number,
  W: number,
  Cout: number,
  groups: number,
  K: [number, number],
  S: [number, number] = [1, 1],
  P: [number, number] = [0, 0],
  D: [number, number] = [1, 1],
): ConvShape => ({ N, C, H, W, Cout, groups, K, S, P, D });

const pool = (
  P: number,
  H: number,
  W: number,
  K: [number, number],
  S: [number, number],
  Pad: [number, number] = [0, 0],
  D: [number, number] = [1, 1],
): PoolShape => ({ P, H, W, K, S, Pad, D });

/** Sizes of the device check on a real GPU. */
export const CNN_GPU_SIZES: CnnSizeSet = {
  unary: [1, 1000, 1_000_003],
  dims: [[1, 1, 1], [64, 50_257, 1], [32, 100, 3000], [4096, 9, 1], [3, 5000, 7]],
  index: [[64, 1000, 1, 1], [8, 300, 200, 64], [1, 50_000, 4096, 1], [500, 7, 9, 33]],
  strided: [[[64, 128, 768], [0, 2, 1]], [[8, 12, 512, 64], [0, 2, 1, 3]], [[1000, 1000], [1, 0]]],
  conv: [
    conv(64, 3, 32, 32, 32, 1, [3, 3], [1, 1], [1, 1]),
    conv(32, 4, 28, 28, 64, 1, [3, 3], [1, 1], [1, 1]),
    conv(16, 16, 31, 29, 16, 16, [5, 5], [2, 2], [2, 2]),
  ],
  pool: [pool(64 * 32, 28, 28, [2, 2], [2, 2]), pool(500, 55, 55, [3, 3], [2, 2], [1, 1])],
  adaptive: [[2048, 7, 7, 1, 1], [100, 30, 31, 7, 7]],
  bn: [[64, 32, 784], [256, 512, 49], [3, 7, 100_003]],
  bnPool: [[64, 32, 28, 28], [64, 64, 14, 14], [7, 5, 33, 17]],
  winograd: [[64, 32, 14, 14, 64, 1, 1, 0], [32, 64, 56, 56, 64, 1, 1, 5000], [
    3,
    5,
    31,
    17,
    7,
    0,
    2,
    0,
  ]],
};

/** Sizes for the emulated device in CI (2 multiprocessors: a grid-stride pass covers 16384
 *  threads, so 2048 rows of eight threads): every family has an empty case, odd sizes and
 *  one past a grid-stride pass. */
export const CNN_EMULATED_SIZES: CnnSizeSet = {
  unary: [0, 7, 20_011],
  dims: [
    [0, 5, 3],
    [3, 0, 1],
    [7, 1, 1],
    [5, 9, 1],
    [3, 37, 1],
    [2100, 13, 1],
    [2, 1500, 1],
    [4, 6, 33],
    [3, 5, 6000],
  ],
  index: [[0, 4, 3, 2], [3, 5, 0, 2], [6, 9, 4, 5], [1, 30, 17_000, 1], [2, 6, 3, 9000]],
  strided: [
    [[0, 3], [1, 0]],
    [[], []],
    [[5, 7, 9], [2, 0, 1]],
    [[150, 130], [1, 0]],
    [[3, 4, 5, 6], [0, 2, 1, 3]],
  ],
  conv: [
    conv(0, 2, 5, 5, 3, 1, [3, 3], [1, 1], [1, 1]),
    conv(2, 3, 9, 8, 5, 1, [3, 3], [1, 1], [1, 1]),
    conv(3, 4, 7, 10, 6, 2, [3, 2], [2, 3], [1, 0], [2, 1]),
    conv(2, 1, 12, 11, 4, 1, [5, 5], [1, 1], [2, 2]),
    conv(5, 2, 9, 9, 7, 1, [3, 3], [1, 2], [2, 1]),
    conv(9, 3, 50, 40, 3, 3, [3, 3], [1, 1], [1, 1]),
  ],
  pool: [
    pool(0, 4, 4, [2, 2], [2, 2]),
    pool(6, 9, 7, [2, 2], [2, 2]),
    pool(5, 14, 15, [2, 2], [2, 2]),
    pool(3, 10, 9, [2, 2], [2, 2]),
    pool(5, 11, 10, [3, 3], [2, 2], [1, 1]),
    pool(4, 13, 12, [3, 2], [1, 2], [1, 1], [2, 1]),
    pool(30, 70, 40, [2, 2], [2, 2]),
  ],
  adaptive: [[0, 4, 4, 2, 2], [6, 9, 7, 3, 3], [4, 5, 6, 7, 9], [3, 13, 11, 1, 1], [
    40,
    30,
    30,
    4,
    5,
  ]],
  bn: [[0, 3, 4], [2, 0, 5], [3, 2, 0], [4, 3, 37], [200, 100, 3], [3, 2, 20_000]],
  bnPool: [[0, 2, 4, 4], [2, 3, 5, 7], [3, 4, 10, 12], [20, 30, 16, 18]],
  winograd: [
    [0, 3, 5, 5, 2, 1, 1, 0],
    [2, 3, 6, 5, 4, 1, 1, 0],
    [3, 2, 9, 7, 5, 0, 2, 7],
    [1, 4, 3, 3, 3, 2, 0, 0],
    [6, 64, 20, 18, 9, 1, 1, 300],
  ],
};

const n64 = BigInt;
const f32 = (n: number) => new Float32Array(n);
const i64 = (a: number[]) => BigInt64Array.from(a, BigInt);
/** A NaN whose payload no poison value has, so a copy of it reads as written. */
const setNaN = (a: Float32Array, i: number) =>
  new Uint32Array(a.buffer, a.byteOffset)[i] = 0x7fc0_0123;
const outSize = (n: number, k: number, s: number, p: number, d: number) =>
  Math.max(0, Math.floor((n + 2 * p - d * (k - 1) - 1) / s) + 1);

/**
 * Every case of these families, built from `rng` (inputs of backward cases from `cpu`).
 *
 * @example
 * ```ts
 * const cases = buildCnnOpCases({ rng: new Rng(1), cpu, sizes: CNN_EMULATED_SIZES });
 * ```
 */
export function buildCnnOpCases(
  opts: { rng: Rng; cpu: NativeLibrary<KernelSymbols>; sizes: CnnSizeSet },
): Case[] {
  const { rng, cpu, sizes: S } = opts;
  const cases: Case[] = [];
  const add = (c: Case) => cases.push(c);
  const P = (a: Arr) => Deno.UnsafePointer.of(a);
  /** Runs a CPU call whose outputs feed a backward case. */
  const onCpu = (what: string, call: (k: Kernels) => number) => cpu.check(call(cpu.symbols), what);
  // exact: data movement and one rounding per element; contracted: formulas of multiply-adds,
  // which the GPU build may fuse into FMAs (the bound's derivation: TOL.contracted, op_cases.ts)
  const exact = 0;
  const contracted = 2 * gamma(32, "f32");

  // ---- unary math, where ------------------------------------------------------------------
  // [name, op, a, b, positive inputs, forward, backward]: exact (one IEEE operation: sqrt, a
  // product, a quotient, a select), or per-element bounds (unary.h, dt_math.h) of the reference
  // result and the inputs dy, y:
  // - dt_math.h's exp, log, tanh, and sigmoid's 1/(1 + exp(−x)), keep their fmaf steps but their
  //   other products may fuse on a GPU (docs/GPU_KERNELS.md): each side within 1 ulp (exp, log; 2
  //   roundings' worth, 1 more for sigmoid's sum and quotient) or 2 ulps (tanh: 3, with slack),
  //   relative to the result, twice;
  // - pow by an exponent without a special case (1.7; −0.5's backward takes x^−1.5) is the
  //   device's powf, within 2 ulps (CUDA's) of the CPU's (3 roundings' worth), the backward's
  //   a·powf and dy· two more;
  // - tanh's backward dy·(1 − y·y) may fuse into dy·fma(−y, y, 1): y·y's rounding, relative to
  //   |dy|·(1 + y²), not to the result (1 − y² cancels as |y| nears 1).
  type UnaryBound = (ref: ArrayLike<number>, dy: Float32Array, y: Float32Array) => Float64Array;
  const rel = (roundings: number): UnaryBound => (ref) =>
    relativeTo(ref, 2 * gamma(roundings, "f32"));
  const tanhGrad: UnaryBound = (_, dy, y) =>
    Float64Array.from(dy, (g, i) => 2 * gamma(3, "f32") * Math.abs(g) * (1 + y[i]! * y[i]!));
  const UNARY: [string, number, number, number, boolean, 0 | UnaryBound, 0 | UnaryBound][] = [
    ["exp", 0, 0, 0, false, rel(2), exact],
    ["log", 1, 0, 0, true, rel(2), exact],
    ["sigmoid", 2, 0, 0, false, rel(4), exact],
    ["tanh", 3, 0, 0, false, rel(4), tanhGrad],
    ["sqrt", 4, 0, 0, true, exact, exact],
    ["pow 2", 5, 2, 0, false, exact, exact],
    ["pow -0.5", 5, -0.5, 0, true, exact, rel(5)],
    ["pow 1.7", 5, 1.7, 0, true, rel(3), rel(5)],
    ["clamp [-0.5, 0.8]", 6, -0.5, 0.8, false, exact, exact],
    ["clamp [0, inf)", 6, 0, Infinity, false, exact, exact],
  ];
  for (const n of S.unary) {
    const z = rng.normals(n);
    const pos = Float32Array.from(z, (v) => 0.1 + Math.abs(v));
    const dy = rng.normals(n);
    for (const [name, op, a, b, positive, tolFwd, tolBwd] of UNARY) {
      const x = positive ? pos : z;
      const y = f32(n);
      if (n > 0) onCpu("dt_unary_fwd", (k) => k.dt_unary_fwd(op, P(y), P(x), n64(n), a, b, null));
      add({
        op: `unary ${name} fwd`,
        symbols: ["dt_unary_fwd"],
        dtype: "f32",
        size: `${n}`,
        tol: exact,
        ...(tolFwd ? { bounds: (ref) => ({ y: tolFwd(ref("y") as Float32Array, dy, y) }) } : {}),
        inputs: { x },
        outputs: { y: [f32(n), "f32"] },
        call: (k, p, s) => k.dt_unary_fwd(op, p("y"), p("x"), n64(n), a, b, s),
      });
      add({
        op: `unary ${name} bwd`,
        symbols: ["dt_unary_bwd"],
        dtype: "f32",
        size: `${n}`,
        tol: exact,
        ...(tolBwd ? { bounds: (ref) => ({ dx: tolBwd(ref("dx") as Float32Array, dy, y) }) } : {}),
        inputs: { dy, x, y },
        outputs: { dx: [f32(n), "f32"] },
        call: (k, p, s) => k.dt_unary_bwd(op, p("dx"), p("dy"), p("x"), p("y"), n64(n), a, b, s),
      });
    }
    const cond = Uint8Array.from({ length: n }, () => (rng.next() < 0.5 ? 1 : 0));
    for (const [an, bn] of [["a", "b"], ["a", null], [null, "b"], [null, null]] as const) {
      add({
        op: `where ${an ?? "1.5"} : ${bn ?? "-2"}`,
        symbols: ["dt_where"],
        dtype: "f32",
        size: `${n}`,
        tol: exact,
        inputs: { cond, a: z, b: dy },
        outputs: { out: [f32(n), "f32"] },
        call: (k, p, s) =>
          k.dt_where(p("out"), p("cond"), an ? p(an) : null, bn ? p(bn) : null, n64(n), 1.5, -2, s),
      });
    }
    // comparisons (0 eq .. 5 ge, 6/7 the maximum/minimum picks) of a against b, or a scalar,
    // with ties, NaNs and signed zeros planted in the operands
    const ca = Float32Array.from(z), cb = Float32Array.from(dy);
    for (let i = 0; i < n; i += 5) cb[i] = ca[i]!;
    for (let i = 1; i < n; i += 11) ca[i] = NaN;
    for (let i = 2; i < n; i += 13) [ca[i], cb[i]] = [-0, 0];
    for (let op = 0; op <= 7; op++) {
      for (const withB of [true, false]) {
        add({
          op: `compare ${op} ${withB ? "b" : "0.25"}`,
          symbols: ["dt_compare"],
          dtype: "f32",
          size: `${n}`,
          tol: exact,
          inputs: { a: ca, b: cb },
          outputs: { out: [new Uint8Array(n), "bytes"] },
          call: (k, p, s) =>
            k.dt_compare(op, p("out"), p("a"), withB ? p("b") : null, n64(n), 0.25, s),
        });
      }
    }
  }

  // ---- strided copy: a permutation of a contiguous input, and a broadcast of it --------------
  for (const [sizes, perm] of S.strided) {
    const n = sizes.reduce((a, b) => a * b, 1);
    const contiguous = (dims: number[]) => {
      const st = dims.map(() => 1);
      for (let d = dims.length - 2; d >= 0; d--) st[d] = st[d + 1]! * dims[d + 1]!;
      return st;
    };
    // out is contiguous over `sizes`; the input holds the same box with its dims permuted
    const inDims = perm.map((d) => sizes[d]!);
    const inStrides = contiguous(inDims);
    const readStrides = sizes.map((_, d) => inStrides[perm.indexOf(d)]!);
    for (const eb of [4, 2, 1, 8, 12]) {
      const inp = Uint8Array.from({ length: n * eb }, () => Math.floor(rng.next() * 256));
      add({
        op: `strided_copy permute [${perm}]`,
        symbols: ["dt_strided_copy"],
        dtype: eb === 2 ? "bf16/f16" : `${eb}B`,
        size: `[${sizes}]`,
        tol: exact,
        inputs: { inp },
        outputs: { out: [new Uint8Array(n * eb), "bytes"] },
        call: (k, p, s) =>
          k.dt_strided_copy(
            p("out"),
            p("inp"),
            sizes.length,
            i64(sizes),
            i64(contiguous(sizes)),
            i64(readStrides),
            n64(eb),
            s,
          ),
      });
    }
    if (sizes.length >= 2) {
      // the first dim broadcast (input stride 0), written into every other row of a bigger output
      const inp = rng.normals(Math.max(1, n / Math.max(1, sizes[0]!)));
      const outStrides = contiguous(sizes).map((v, d) => (d === 0 ? 2 * v : v));
      const span = sizes[0]! === 0 ? 0 : 2 * n;
      add({
        op: "strided_copy expand into a strided output (others untouched)",
        symbols: ["dt_strided_copy"],
        dtype: "f32",
        size: `[${sizes}]`,
        tol: exact,
        inputs: { inp },
        inout: { out: [rng.normals(Math.max(span, 1)), "f32"] },
        call: (k, p, s) =>
          k.dt_strided_copy(
            p("out"),
            p("inp"),
            sizes.length,
            i64(sizes),
            i64(outStrides),
            i64([0, ...contiguous(sizes.slice(1))]),
            4n,
            s,
          ),
      });
    }
  }

  // ---- reductions and softmax along a dim ------------------------------------------------------
  for (const [outer, D, inner] of S.dims) {
    const n = outer * D * inner, rows = outer * inner;
    const x = Float32Array.from(rng.normals(n), (v) => Math.round(v * 8) / 8); // ties
    const xn = x.slice();
    if (n > 2) setNaN(xn, Math.floor(n / 2)); // the first NaN wins max and min
    for (const [name, op] of [["sum", 0], ["mean", 1], ["max", 2], ["min", 3]] as const) {
      if (op >= 2 && D === 0) continue; // refused: no value
      const withIdx = op >= 2;
      // the mean of nothing is NaN, which the harness takes for never written unless the
      // output starts from data
      const empty = D === 0;
      add({
        op: `reduce_dim ${name}${withIdx ? " (ties, a NaN)" : ""}`,
        symbols: ["dt_reduce_dim"],
        dtype: "f32",
        size: `${outer}x${D}x${inner}`,
        tol: exact,
        inputs: { x: withIdx ? xn : rng.normals(n) },
        ...(withIdx
          ? { outputs: { out: [f32(rows), "f32"], idx: [new Int32Array(rows), "int"] } }
          : empty
          ? { inout: { out: [rng.normals(rows), "f32"] } }
          : { outputs: { out: [f32(rows), "f32"] } }),
        call: (k, p, s) =>
          k.dt_reduce_dim(op, p("out"), p("idx"), p("x"), n64(outer), n64(D), n64(inner), s),
      });
    }
    for (const isLog of [0, 1]) {
      const z = rng.normals(n, 3), dy = rng.normals(n);
      const y = f32(n);
      if (n > 0) {
        onCpu(
          "dt_softmax_dim_fwd",
          (k) => k.dt_softmax_dim_fwd(P(y), P(z), n64(outer), n64(D), n64(inner), isLog, null),
        );
      }
      const label = isLog ? "log_softmax_dim" : "softmax_dim";
      add({
        op: `${label} fwd`,
        symbols: ["dt_softmax_dim_fwd"],
        dtype: "f32",
        size: `${outer}x${D}x${inner}`,
        tol: exact,
        inputs: { z },
        outputs: { y: [f32(n), "f32"] },
        call: (k, p, s) =>
          k.dt_softmax_dim_fwd(p("y"), p("z"), n64(outer), n64(D), n64(inner), isLog, s),
      });
      add({
        op: `${label} bwd`,
        symbols: ["dt_softmax_dim_bwd"],
        dtype: "f32",
        size: `${outer}x${D}x${inner}`,
        tol: exact,
        inputs: { dy, y },
        outputs: { dx: [f32(n), "f32"] },
        call: (k, p, s) =>
          k.dt_softmax_dim_bwd(p("dx"), p("dy"), p("y"), n64(outer), n64(D), n64(inner), isLog, s),
      });
    }
  }

  // ---- gathers along a dim and their backwards ---------------------------------------------------
  for (const [outer, D, J, inner] of S.index) {
    const perElem = rng.ints(outer * J * inner, 0, Math.max(D, 1));
    const perJ = rng.ints(J, 0, Math.max(D, 1)); // repeats: several j add into one row
    for (const eb of [4, 2, 8, 1]) {
      const bytes = (m: number) =>
        eb === 2
          ? toBf16(rng.normals(m))
          : Uint8Array.from({ length: m * eb }, () => Math.floor(rng.next() * 256));
      const inp = bytes(outer * D * inner);
      const m = outer * J * inner;
      const out = (): [Arr, "bf16" | "bytes"] =>
        eb === 2 ? [new Uint16Array(m), "bf16"] : [new Uint8Array(m * eb), "bytes"];
      add({
        op: "gather_dim",
        symbols: ["dt_gather_dim"],
        dtype: eb === 2 ? "bf16" : `${eb}B`,
        size: `${outer}x${D}x${inner} [${J}]`,
        tol: exact,
        inputs: { inp, idx: perElem },
        outputs: { out: out() },
        call: (k, p, s) =>
          k.dt_gather_dim(
            p("out"),
            p("inp"),
            p("idx"),
            n64(outer),
            n64(D),
            n64(J),
            n64(inner),
            n64(eb),
            s,
          ),
      });
      add({
        op: "index_select",
        symbols: ["dt_index_select"],
        dtype: eb === 2 ? "bf16" : `${eb}B`,
        size: `${outer}x${D}x${inner} [${J}]`,
        tol: exact,
        inputs: { inp, idx: perJ },
        outputs: { out: out() },
        call: (k, p, s) =>
          k.dt_index_select(
            p("out"),
            p("inp"),
            p("idx"),
            n64(outer),
            n64(D),
            n64(J),
            n64(inner),
            n64(eb),
            s,
          ),
      });
    }
    const dout = rng.normals(outer * J * inner);
    for (const [sym, idx] of [["dt_scatter_add_dim", perElem], ["dt_index_add", perJ]] as const) {
      add({
        op: sym === "dt_index_add" ? "index_add (repeats, j order)" : "scatter_add_dim (j order)",
        symbols: [sym],
        dtype: "f32",
        size: `${outer}x${D}x${inner} [${J}]`,
        tol: exact,
        inputs: { dout, idx },
        outputs: { dinp: [f32(outer * D * inner), "f32"] },
        call: (k, p, s) =>
          k[sym](p("dinp"), p("dout"), p("idx"), n64(outer), n64(D), n64(J), n64(inner), s),
      });
    }
  }

  // ---- convolution -------------------------------------------------------------------------------
  for (const g of S.conv) {
    const OH = outSize(g.H, g.K[0], g.S[0], g.P[0], g.D[0]);
    const OW = outSize(g.W, g.K[1], g.S[1], g.P[1], g.D[1]);
    const geom = i64([g.N, g.C, g.H, g.W, ...g.K, ...g.S, ...g.P, ...g.D, OH, OW]);
    const size = `${g.N}x${g.C}x${g.H}x${g.W} k${g.K} s${g.S} p${g.P} d${g.D}${
      g.groups > 1 ? ` g${g.groups}` : ""
    }`;
    const x = rng.normals(g.N * g.C * g.H * g.W);
    const rows = g.C * g.K[0] * g.K[1], ld = g.N * OH * OW;
    add({
      op: "im2col",
      symbols: ["dt_im2col"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { x },
      outputs: { col: [f32(rows * ld), "f32"] },
      call: (k, p, s) => k.dt_im2col(p("col"), p("x"), geom, s),
    });
    add({
      op: "col2im (taps in order)",
      symbols: ["dt_col2im"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { col: rng.normals(rows * ld) },
      outputs: { dx: [f32(x.length), "f32"] },
      call: (k, p, s) => k.dt_col2im(p("dx"), p("col"), geom, s),
    });
    const taps = (g.C / g.groups) * g.K[0] * g.K[1];
    const w = rng.normals(g.Cout * taps, 0.3), bias = rng.normals(g.Cout);
    const dy = rng.normals(g.N * g.Cout * OH * OW);
    const [Cout, groups] = [n64(g.Cout), n64(g.groups)];
    // bounds (op_bounds.ts termBounds): the same convolution of |x|, |w| (and |dy|) on the CPU
    // gives each result's Σ|terms|; a forward sums `taps` products (and the bias), an input
    // gradient at most Cout/groups·K0·K1
    const abs = (v: Float32Array) => Float32Array.from(v, Math.abs);
    for (const withBias of [true, false]) {
      add({
        op: `conv2d_direct fwd${withBias ? "" : " (no bias)"}`,
        symbols: ["dt_conv2d_direct_fwd"],
        dtype: "f32",
        size,
        tol: exact,
        bounds: () => {
          const y = f32(dy.length);
          onCpu(
            "conv |x| |w|",
            (k) =>
              k.dt_conv2d_direct_fwd(
                P(y),
                P(abs(x)),
                P(abs(w)),
                withBias ? P(abs(bias)) : null,
                geom,
                Cout,
                groups,
                null,
              ),
          );
          return { y: termBounds(y, taps + (withBias ? 1 : 0)) };
        },
        inputs: withBias ? { x, w, bias } : { x, w },
        outputs: { y: [f32(dy.length), "f32"] },
        call: (k, p, s) =>
          k.dt_conv2d_direct_fwd(p("y"), p("x"), p("w"), p("bias"), geom, Cout, groups, s),
      });
      add({
        op: `conv2d_direct bwd weight${withBias ? " and bias" : ""}`,
        symbols: ["dt_conv2d_direct_bwd_weight"],
        dtype: "f32",
        size,
        // N·OH·OW terms per result (thousands), summed per image run and folded in image order on
        // both sides: a worst-case γ_n bound of that length is wider than a missing image, so it
        // keeps the normwise bound of FMA contraction along the same order
        tol: contracted,
        inputs: { dy, x },
        outputs: withBias ? { dw: [f32(w.length), "f32"], db: [f32(g.Cout), "f32"] } : {
          dw: [f32(w.length), "f32"],
        },
        call: (k, p, s) =>
          k.dt_conv2d_direct_bwd_weight(p("dw"), p("db"), p("dy"), p("x"), geom, Cout, groups, s),
      });
    }
    add({
      op: "conv2d_direct bwd input",
      symbols: ["dt_conv2d_direct_bwd_input"],
      dtype: "f32",
      size,
      tol: exact,
      bounds: () => {
        const dx = f32(x.length);
        onCpu(
          "conv input gradient |dy| |w|",
          (k) =>
            k.dt_conv2d_direct_bwd_input(P(dx), P(abs(dy)), P(abs(w)), geom, Cout, groups, null),
        );
        return { dx: termBounds(dx, (g.Cout / g.groups) * g.K[0] * g.K[1]) };
      },
      inputs: { dy, w },
      outputs: { dx: [f32(x.length), "f32"] },
      call: (k, p, s) =>
        k.dt_conv2d_direct_bwd_input(p("dx"), p("dy"), p("w"), geom, Cout, groups, s),
    });
  }

  // ---- pooling ------------------------------------------------------------------------------------
  for (const g of S.pool) {
    const OH = outSize(g.H, g.K[0], g.S[0], g.Pad[0], g.D[0]);
    const OW = outSize(g.W, g.K[1], g.S[1], g.Pad[1], g.D[1]);
    const geom = i64([g.P, g.H, g.W, ...g.K, ...g.S, ...g.Pad, ...g.D, OH, OW]);
    const size = `${g.P}x${g.H}x${g.W} k${g.K} s${g.S} p${g.Pad} d${g.D}`;
    const m = g.P * OH * OW;
    const x = Float32Array.from(rng.normals(g.P * g.H * g.W), (v) => Math.round(v * 4) / 4); // ties
    if (x.length > 5) setNaN(x, 5);
    const y = f32(m), idx = new Int32Array(m);
    if (m > 0) onCpu("dt_maxpool2d_fwd", (k) => k.dt_maxpool2d_fwd(P(y), P(idx), P(x), geom, null));
    add({
      op: "maxpool2d fwd (ties, a NaN)",
      symbols: ["dt_maxpool2d_fwd"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { x },
      outputs: { y: [f32(m), "f32"], idx: [new Int32Array(m), "int"] },
      call: (k, p, s) => k.dt_maxpool2d_fwd(p("y"), p("idx"), p("x"), geom, s),
    });
    const dy = rng.normals(m);
    add({
      op: "maxpool2d bwd",
      symbols: ["dt_maxpool2d_bwd"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { dy, idx },
      outputs: { dx: [f32(x.length), "f32"] },
      call: (k, p, s) => k.dt_maxpool2d_bwd(p("dx"), p("dy"), p("idx"), geom, s),
    });
    if (g.D[0] !== 1 || g.D[1] !== 1) continue; // average pooling does not dilate
    const xa = rng.normals(x.length);
    for (const [pad, div] of [[1, 0], [0, 0], [1, 3]] as const) {
      const label = `avgpool2d${pad ? "" : " (no padding counted)"}${div ? ` divisor ${div}` : ""}`;
      add({
        op: `${label} fwd`,
        symbols: ["dt_avgpool2d_fwd"],
        dtype: "f32",
        size,
        tol: exact,
        inputs: { x: xa },
        outputs: { y: [f32(m), "f32"] },
        call: (k, p, s) => k.dt_avgpool2d_fwd(p("y"), p("x"), geom, pad, n64(div), s),
      });
      add({
        op: `${label} bwd`,
        symbols: ["dt_avgpool2d_bwd"],
        dtype: "f32",
        size,
        tol: exact,
        inputs: { dy },
        outputs: { dx: [f32(x.length), "f32"] },
        call: (k, p, s) => k.dt_avgpool2d_bwd(p("dx"), p("dy"), geom, pad, n64(div), s),
      });
    }
  }
  for (const [Pl, H, W, OH, OW] of S.adaptive) {
    const size = `${Pl}x${H}x${W} -> ${OH}x${OW}`;
    const dims = [n64(Pl), n64(H), n64(W), n64(OH), n64(OW)] as const;
    add({
      op: "adaptive_avgpool2d fwd",
      symbols: ["dt_adaptive_avgpool2d_fwd"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { x: rng.normals(Pl * H * W) },
      outputs: { y: [f32(Pl * OH * OW), "f32"] },
      call: (k, p, s) => k.dt_adaptive_avgpool2d_fwd(p("y"), p("x"), ...dims, s),
    });
    add({
      op: "adaptive_avgpool2d bwd (overlapping windows)",
      symbols: ["dt_adaptive_avgpool2d_bwd"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { dy: rng.normals(Pl * OH * OW) },
      outputs: { dx: [f32(Pl * H * W), "f32"] },
      call: (k, p, s) => k.dt_adaptive_avgpool2d_bwd(p("dx"), p("dy"), ...dims, s),
    });
  }

  // ---- batch norm ---------------------------------------------------------------------------------
  for (const [N, C, HW] of S.bn) {
    const size = `${N}x${C}x${HW}`;
    const nn = [n64(N), n64(C), n64(HW)] as const;
    const x = Float32Array.from(rng.normals(N * C * HW), (v) => 3 + 2 * v);
    const dy = rng.normals(N * C * HW);
    const w = rng.normals(C), b = rng.normals(C);
    // the forward's statistics on the CPU, as the backward cases' inputs
    const acc = new Float64Array(C + 1), sq = new Float64Array(C);
    const mean = f32(C), rstd = f32(C), sums = new Float64Array(2 * C);
    onCpu("dt_bn_sum", (k) => k.dt_bn_sum(P(acc), P(x), ...nn, null));
    const counted = N * HW >= 1;
    if (counted && C > 0) {
      onCpu("dt_bn_sqdev", (k) => k.dt_bn_sqdev(P(sq), P(x), P(acc), ...nn, null));
      onCpu(
        "dt_bn_finalize",
        (k) =>
          k.dt_bn_finalize(
            P(mean),
            P(rstd),
            null,
            null,
            null,
            P(acc),
            P(sq),
            n64(C),
            1e-5,
            0.1,
            null,
          ),
      );
      onCpu(
        "dt_bn_bwd_reduce",
        (k) => k.dt_bn_bwd_reduce(P(sums), null, null, P(dy), P(x), P(mean), P(rstd), ...nn, null),
      );
    }
    const count = new Float64Array([acc[C]!]);
    add({
      op: "bn_sum",
      symbols: ["dt_bn_sum"],
      dtype: "f64",
      size,
      tol: exact,
      inputs: { x },
      outputs: { acc: [new Float64Array(C + 1), "f64"] },
      call: (k, p, s) => k.dt_bn_sum(p("acc"), p("x"), ...nn, s),
    });
    if (!counted) continue; // the element count is below 1: refused (tests/cuda/emu_ops_test.ts)
    add({
      op: "bn_sqdev",
      symbols: ["dt_bn_sqdev"],
      dtype: "f64",
      size,
      tol: contracted,
      inputs: { x, acc },
      outputs: { sq: [new Float64Array(C), "f64"] },
      call: (k, p, s) => k.dt_bn_sqdev(p("sq"), p("x"), p("acc"), ...nn, s),
    });
    // (C = 0 has no arrays to point to on the CPU: tests/kernels/batchnorm_test.ts has it)
    for (const momentum of C > 0 ? [0.1, -1] : []) {
      add({
        op: `bn_finalize momentum ${momentum === -1 ? "cumulative" : momentum}`,
        symbols: ["dt_bn_finalize"],
        dtype: "f32",
        size,
        tol: contracted,
        inputs: { acc, sq },
        outputs: { mean: [f32(C), "f32"], rstd: [f32(C), "f32"] },
        inout: {
          rm: [rng.normals(C), "f32"],
          rv: [Float32Array.from(rng.normals(C), Math.abs), "f32"],
          nb: [new BigInt64Array([3n]), "int"],
        },
        call: (k, p, s) =>
          k.dt_bn_finalize(
            p("mean"),
            p("rstd"),
            p("rm"),
            p("rv"),
            p("nb"),
            p("acc"),
            p("sq"),
            n64(C),
            1e-5,
            momentum,
            s,
          ),
      });
    }
    add({
      op: "bn_eval_stats",
      symbols: ["dt_bn_eval_stats"],
      dtype: "f32",
      size,
      tol: contracted,
      inputs: { rm: rng.normals(C), rv: Float32Array.from(rng.normals(C), Math.abs) },
      outputs: { mean: [f32(C), "f32"], rstd: [f32(C), "f32"] },
      call: (k, p, s) =>
        k.dt_bn_eval_stats(p("mean"), p("rstd"), p("rm"), p("rv"), n64(C), 1e-3, s),
    });
    for (const affine of [true, false]) {
      add({
        op: `bn_apply${affine ? "" : " (no affine)"}`,
        symbols: ["dt_bn_apply"],
        dtype: "f32",
        size,
        tol: contracted,
        inputs: affine ? { x, mean, rstd, w, b } : { x, mean, rstd },
        outputs: { y: [f32(x.length), "f32"] },
        call: (k, p, s) =>
          k.dt_bn_apply(p("y"), p("x"), p("mean"), p("rstd"), p("w"), p("b"), ...nn, s),
      });
    }
    add({
      op: "bn_bwd_reduce",
      symbols: ["dt_bn_bwd_reduce"],
      dtype: "f32",
      size,
      tol: contracted,
      inputs: { dy, x, mean, rstd },
      outputs: {
        sums: [new Float64Array(2 * C), "f64"],
        dw: [f32(C), "f32"],
        db: [f32(C), "f32"],
      },
      call: (k, p, s) =>
        k.dt_bn_bwd_reduce(
          p("sums"),
          p("dw"),
          p("db"),
          p("dy"),
          p("x"),
          p("mean"),
          p("rstd"),
          ...nn,
          s,
        ),
    });
    for (const training of [true, false]) {
      add({
        op: `bn_bwd_apply ${training ? "(batch statistics)" : "(fixed statistics)"}`,
        symbols: ["dt_bn_bwd_apply"],
        dtype: "f32",
        size,
        tol: contracted,
        inputs: training ? { dy, x, mean, rstd, w, sums, count } : { dy, x, mean, rstd, w },
        outputs: { dx: [f32(x.length), "f32"] },
        call: (k, p, s) =>
          k.dt_bn_bwd_apply(
            p("dx"),
            p("dy"),
            p("x"),
            p("mean"),
            p("rstd"),
            p("w"),
            p("sums"),
            p("count"),
            ...nn,
            s,
          ),
      });
    }
  }
  // ---- batch norm, ReLU and 2x2 max pooling in one op ------------------------------------------
  for (const [N, C, H, W] of S.bnPool) {
    const m = N * C * Math.floor(H / 2) * Math.floor(W / 2);
    const x = Float32Array.from(rng.normals(N * C * H * W), (v) => Math.round(v * 4) / 4); // ties
    if (x.length > 3) setNaN(x, 3);
    const mean = rng.normals(C, 0.3),
      rstd = Float32Array.from(rng.normals(C), (v) => 0.5 + Math.abs(v));
    for (const affine of [true, false]) {
      add({
        op: `bn_relu_maxpool2x2 fwd${affine ? "" : " (no affine)"} (ties, a NaN)`,
        symbols: ["dt_bn_relu_maxpool2x2_fwd"],
        dtype: "f32",
        size: `${N}x${C}x${H}x${W}`,
        tol: contracted,
        inputs: affine
          ? { x, mean, rstd, w: rng.normals(C), b: rng.normals(C) }
          : { x, mean, rstd },
        outputs: { y: [f32(m), "f32"], idx: [new Int32Array(m), "int"] },
        call: (k, p, s) =>
          k.dt_bn_relu_maxpool2x2_fwd(
            p("y"),
            p("idx"),
            p("x"),
            p("mean"),
            p("rstd"),
            p("w"),
            p("b"),
            n64(N),
            n64(C),
            n64(H),
            n64(W),
            s,
          ),
      });
    }
  }

  // ---- Winograd F(2x2, 3x3) transforms -------------------------------------------------------
  for (const [N, C, H, W, Cout, PH, PW, blockTiles] of S.winograd) {
    const OH = Math.max(0, H + 2 * PH - 2), OW = Math.max(0, W + 2 * PW - 2);
    const T = N * Math.ceil(OH / 2) * Math.ceil(OW / 2);
    const geom = i64([N, C, H, W, 3, 3, 1, 1, PH, PW, 1, 1, OH, OW]);
    // one block of the grid: from a third of the way, in a buffer wider than it (ld > nt)
    const t0 = blockTiles ? Math.min(Math.floor(T / 3), T) : 0;
    const nt = blockTiles ? Math.min(blockTiles, T - t0) : T, ld = nt + 3;
    const size = `${N}x${C}x${H}x${W} -> ${Cout} p${PH},${PW} tiles [${t0}, +${nt})`;
    const blk = [n64(t0), n64(nt), n64(ld)] as const;
    const x = rng.normals(N * C * H * W), dy = rng.normals(N * Cout * OH * OW);
    const w = rng.normals(Cout * C * 9), b = rng.normals(Cout);
    add({
      op: "winograd_weight",
      symbols: ["dt_winograd_weight"],
      dtype: "f32",
      size,
      tol: contracted,
      inputs: { w },
      outputs: { u: [f32(16 * Cout * C), "f32"] },
      call: (k, p, s) => k.dt_winograd_weight(p("u"), p("w"), n64(Cout), n64(C), s),
    });
    add({
      op: "winograd_weight_grad",
      symbols: ["dt_winograd_weight_grad"],
      dtype: "f32",
      size,
      tol: contracted,
      inputs: { m: rng.normals(16 * Cout * C) },
      outputs: { dw: [f32(Cout * C * 9), "f32"] },
      call: (k, p, s) => k.dt_winograd_weight_grad(p("dw"), p("m"), n64(Cout), n64(C), s),
    });
    // the columns past nt of each row are not written: they start from data
    add({
      op: "winograd_input (a block)",
      symbols: ["dt_winograd_input"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { x },
      inout: { v: [rng.normals(16 * C * ld), "f32"] },
      call: (k, p, s) => k.dt_winograd_input(p("v"), p("x"), geom, ...blk, s),
    });
    add({
      op: "winograd_input_grad (added, tile order)",
      symbols: ["dt_winograd_input_grad"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { dv: rng.normals(16 * C * ld) },
      inout: { dx: [rng.normals(x.length), "f32"] },
      call: (k, p, s) => k.dt_winograd_input_grad(p("dx"), p("dv"), geom, ...blk, s),
    });
    for (const withBias of [true, false]) {
      add({
        op: `winograd_output${withBias ? "" : " (no bias)"} (a block's outputs)`,
        symbols: ["dt_winograd_output"],
        dtype: "f32",
        size,
        tol: exact,
        inputs: withBias
          ? { m: rng.normals(16 * Cout * ld), b }
          : { m: rng.normals(16 * Cout * ld) },
        inout: { y: [rng.normals(dy.length), "f32"] },
        call: (k, p, s) => k.dt_winograd_output(p("y"), p("m"), p("b"), geom, n64(Cout), ...blk, s),
      });
    }
    add({
      op: "winograd_output_grad",
      symbols: ["dt_winograd_output_grad"],
      dtype: "f32",
      size,
      tol: exact,
      inputs: { dy },
      inout: { p: [rng.normals(16 * Cout * ld), "f32"] },
      call: (k, p, s) => k.dt_winograd_output_grad(p("p"), p("dy"), geom, n64(Cout), ...blk, s),
    });
  }
  return cases;
}
