/**
 * The cases of the op sweep: every op of the kernel ABI (ffi/symbols.ts),
 * forward and backward, with fresh random inputs of several sizes, odd and
 * empty ones included, and the tolerance of each: per-element bounds derived
 * from the arithmetic for GEMMs (tolerance.ts) and for reductions, rows,
 * updates, epilogues, GELU, cross-entropy, f32 attention and layer norm
 * (op_bounds*.ts), 0 for ops that only move or select data or round once,
 * and a normwise relative error where docs/GPU.md says why none is derived
 * (convolution gradients, low-precision attention).
 * Two size sets: "gpu" for the device check on a
 * real GPU, "emulated" for the emulated device in CI, which is small but
 * still reaches more rows than its grid and more elements than one pass.
 */
import type { KernelSymbols } from "../../ffi/symbols.ts";
import type { NativeLibrary } from "../../ffi/native.ts";
import { type Arr, asNumbers, type Case, Rng, toBf16, toF16 } from "./_harness.ts";
import { gamma, gemmBounds } from "./tolerance.ts";
import {
  adamwBounds,
  axpyBounds,
  clipBounds,
  crossEntropyBwdBounds,
  crossEntropyFwdBounds,
  geluBwdBounds,
  geluFwdBounds,
  reduceBcastBounds,
  relativeTo,
  sgdBounds,
  softmaxBwdBounds,
  softmaxFwdRelative,
  sumsqBounds,
} from "./op_bounds.ts";
import {
  attentionCases,
  type AttentionShape,
  EMULATED_ATTENTION,
  GPU_ATTENTION,
} from "./op_cases_attention.ts";
import {
  EMULATED_GEMM_EX,
  gemmExCases,
  GPU_GEMM_EX,
  type LinearShape,
} from "./op_cases_gemm_ex.ts";
import { layerNormCases } from "./op_cases_layernorm.ts";
import { EMULATED_VEC_BROADCAST, EMULATED_VEC_SIZES, vecCases } from "./op_cases_vec.ts";
import {
  buildCnnOpCases,
  CNN_EMULATED_SIZES,
  CNN_GPU_SIZES,
  type CnnSizeSet,
} from "./op_cases_cnn.ts";

/** dtype codes of kernels/common/dt_common.h. */
export const DT = { F32: 0, BF16: 1, F16: 2, I32: 3, I64: 4, U8: 5 } as const;
/** normwise relative error allowed per kind of case (outputs with derived bounds ignore it). */
export const TOL = {
  gemm32: 1e-4,
  bf16: 1e-2,
  f16: 2e-3,
  /**
   * Bit-identical: ops that move data or round once per element (a single add, multiply, cast),
   * where IEEE arithmetic leaves a device no choice.
   */
  exact: 0,
  /**
   * Ops whose per-element formula chains several roundings through multiply-adds (axpy, an
   * optimizer's update, cross-entropy's exp): the GPU build contracts a*b + c into one FMA, which
   * removes or moves a rounding. Each of the two results is within γ_k of the exact value relative
   * to the terms' magnitudes, k the roundings per element (at most 32 here: exp's polynomial,
   * AdamW's moments, bias corrections and update), so they differ by at most 2γ_32 in f32.
   */
  contracted: 2 * gamma(32, "f32"),
} as const;

/** A GEMM case: row-major M x N x K with transposes, padding of the leading dimensions, batch. */
export interface GemmShape {
  M: number;
  N: number;
  K: number;
  ta: number;
  tb: number;
  batch?: number;
  pad?: number;
  alpha?: number;
  beta?: number;
}

/** The sizes of each family of cases. */
export interface SizeSet {
  elementwise: number[];
  /** [n, bn, inner] */
  broadcast: [number, number, number][];
  sumsq: number[];
  conversions: number[];
  /** [rows, cols, causal] */
  softmax: [number, number, number][];
  /** [rows, C] */
  layernorm: [number, number][];
  /** [rows, cols] */
  argmax: [number, number][];
  /** [n, V, C] */
  embedding: [number, number, number][];
  /** [rows, V] */
  crossentropy: [number, number][];
  /** [n, rowBytes, rowsIn] */
  gather: [number, number, number][];
  /** [rows, cols, start, len, elem_bytes] */
  cols: [number, number, number, number, number][];
  /** [A, B, C, D, elem_bytes] */
  transpose: [number, number, number, number, number][];
  gemm: GemmShape[];
  optim: number[];
  /** [B, T, H, D, causal] */
  attention: AttentionShape[];
  /** [M, N, K] of a linear layer (dt_gemm_ex) */
  gemmEx: LinearShape[];
  /** elementwise maps at offsets (op_cases_vec.ts): sizes, and [n, bn, inner] broadcasts */
  vec: number[];
  vecBroadcast: [number, number, number][];
  /** the convolutional-network and everyday ops (op_cases_cnn.ts) */
  cnn: CnnSizeSet;
}

const GEMMS: GemmShape[] = [
  { M: 1, N: 1, K: 1, ta: 0, tb: 0 },
  { M: 7, N: 13, K: 5, ta: 0, tb: 0 },
  { M: 65, N: 129, K: 257, ta: 1, tb: 0, pad: 3 },
  { M: 128, N: 2304, K: 768, ta: 0, tb: 1 },
  { M: 300, N: 50, K: 77, ta: 1, tb: 1, alpha: 0.5, beta: 0.75 },
  { M: 64, N: 64, K: 1024, ta: 0, tb: 1, batch: 12 },
  { M: 33, N: 17, K: 0, ta: 0, tb: 0, beta: 2 },
];

/** Sizes of the device check on a real GPU (GPT-2 shapes included). */
export const GPU_SIZES: SizeSet = {
  elementwise: [1, 7, 1000, 65_537, 1_000_003],
  broadcast: [[1000 * 768, 768, 1], [64 * 33, 64, 33], [100_003, 1, 1], [12_345, 7, 10], [5, 5, 1]],
  sumsq: [1, 1001, 3_000_017],
  conversions: [1, 7, 100_003],
  softmax: [[1, 1, 0], [7, 33, 0], [96, 1024, 32], [5, 1025, 0], [64, 3000, 64], [4096, 768, 0], [
    33,
    1020,
    700,
  ]],
  // a warp per row: 768, 1024 (over 48 KiB of staged column sums), 1020 in f32; a block: 1025, 3000
  layernorm: [[1, 1], [7, 768], [33, 1025], [100, 3000], [4096, 768], [1000, 1024], [13, 1020]],
  argmax: [[1, 1], [7, 1000], [300, 50_257]],
  embedding: [[1, 1, 1], [1000, 50_257, 64], [4096, 1024, 768], [777, 13, 5]],
  // a warp per row up to 4 KiB of logits (1024 f32, 2048 bf16), a block per row past it
  crossentropy: [[1, 1], [7, 50_257], [1024, 1000], [64, 50_257], [4096, 2048], [9, 1025], [
    8192,
    33,
  ]],
  gather: [[1, 4, 1], [64, 4096, 300], [33, 3, 17], [1000, 1026, 50]],
  cols: [[7, 10, 3, 4, 4], [1000, 2304, 768, 768, 4], [33, 17, 5, 7, 2], [5, 9, 1, 3, 1]],
  transpose: [[2, 1024, 12, 64, 4], [1, 300, 257, 1, 4], [3, 5, 7, 3, 2], [2, 33, 65, 1, 8], [
    1,
    7,
    9,
    5,
    1,
  ], [4, 1, 6, 8, 4]],
  gemm: GEMMS,
  optim: [1, 1001, 1_000_003],
  attention: GPU_ATTENTION,
  gemmEx: GPU_GEMM_EX,
  vec: [3, 1_000_003],
  vecBroadcast: [[1000 * 768 + 768, 768, 1], [12_345, 7, 10]],
  cnn: CNN_GPU_SIZES,
};

/** Sizes for the emulated device in CI (DTRAIN_CUDA_EMU_SMS = 2: a grid-stride pass covers
 * 64 blocks x 256 = 16384 elements and a row grid 128 rows). Every family has an empty case,
 * sizes that are not multiples of a block, and one beyond the grid. */
export const EMULATED_SIZES: SizeSet = {
  elementwise: [0, 1, 7, 1000, 40_009],
  broadcast: [[77 * 300, 77, 1], [64 * 33, 64, 33], [20_003, 1, 1], [12_345, 7, 10], [5, 5, 1], [
    0,
    3,
    1,
  ]],
  sumsq: [0, 1, 1001, 140_001],
  conversions: [0, 1, 7, 20_011],
  // a warp per row (cols <= 1024, a multiple of 4): 64, 1024, 1020; a block per row: 33, 1025, 1028, 3000
  softmax: [[0, 5, 0], [1, 1, 0], [7, 33, 0], [130, 64, 32], [5, 1025, 0], [3, 3000, 3], [
    9,
    1024,
    0,
  ], [
    40,
    1020,
    700,
  ], [6, 1028, 0]],
  // a warp per row: 768, 64, 1024 (over 48 KiB staged; 300 rows: a last round of 4 warps), 1020
  // in f32 (bf16/f16: a block, 1020 % 8 != 0); a block per row: 1, 1025
  layernorm: [[0, 8], [1, 1], [7, 768], [33, 1025], [200, 64], [300, 1024], [13, 1020]],
  argmax: [[0, 5], [1, 1], [7, 1000], [150, 2001]],
  embedding: [[0, 5, 4], [1, 1, 1], [300, 50_257, 8], [600, 1024, 64], [777, 13, 5], [
    40_000,
    1000,
    3,
  ]],
  // a warp per row up to 4 KiB of logits: 100, 1000, 1024 and 33 (rows not 16-byte aligned; 2100
  // rows: past the 2048 a grid of warps covers in one pass), 2048 in bf16; a block: 1025, 2049
  crossentropy: [
    [0, 5],
    [1, 1],
    [7, 50_257],
    [200, 100],
    [64, 1000],
    [2100, 33],
    [5, 1024],
    [
      5,
      1025,
    ],
    [3, 2048],
    [3, 2049],
  ],
  gather: [[0, 4, 1], [1, 4, 1], [64, 4096, 300], [33, 3, 17], [200, 1026, 50]],
  cols: [[0, 10, 3, 4, 4], [7, 10, 3, 4, 4], [300, 230, 76, 77, 4], [33, 17, 5, 7, 2], [
    5,
    9,
    1,
    3,
    1,
  ]],
  transpose: [
    [2, 64, 12, 64, 4],
    [1, 300, 257, 1, 4],
    [3, 5, 7, 3, 2],
    [2, 33, 65, 1, 8],
    [
      1,
      7,
      9,
      5,
      1,
    ],
    [4, 1, 6, 8, 4],
    [0, 3, 3, 3, 4],
  ],
  gemm: [...GEMMS, { M: 0, N: 5, K: 3, ta: 0, tb: 0 }, {
    M: 5,
    N: 7,
    K: 3,
    ta: 0,
    tb: 0,
    batch: 0,
  }],
  optim: [0, 1, 1001, 40_009],
  attention: EMULATED_ATTENTION,
  gemmEx: EMULATED_GEMM_EX,
  vec: EMULATED_VEC_SIZES,
  vecBroadcast: EMULATED_VEC_BROADCAST,
  cnn: CNN_EMULATED_SIZES,
};

/**
 * Every case of the sweep, built from `rng` (references of backward cases come from `cpu`).
 *
 * @example
 * ```ts
 * const cases = buildOpCases({ rng: new Rng(1), cpu, sizes: EMULATED_SIZES });
 * ```
 */
export function buildOpCases(
  opts: { rng: Rng; cpu: NativeLibrary<KernelSymbols>; sizes: SizeSet },
): Case[] {
  const { rng, cpu, sizes: S } = opts;
  const n64 = BigInt;
  const cases: Case[] = [];
  const add = (c: Case) => cases.push(c);
  const f32 = (n: number) => new Float32Array(n);

  // ---- elementwise ------------------------------------------------------------------------
  for (const n of S.elementwise) {
    const a = rng.normals(n), b = Float32Array.from(rng.normals(n), (v) => 0.5 + Math.abs(v));
    for (const op of [0, 1, 2, 3]) {
      add({
        op: `binary op ${op} same shape`,
        symbols: ["dt_binary"],
        dtype: "f32",
        size: `${n}`,
        tol: TOL.exact,
        inputs: { a, b },
        outputs: { out: [f32(n), "f32"] },
        call: (k, p, s) => k.dt_binary(op, p("out"), p("a"), p("b"), n64(n), n64(n), 1n, s),
      });
    }
    add({
      op: "scale",
      symbols: ["dt_scale"],
      dtype: "f32",
      size: `${n}`,
      tol: TOL.exact,
      inputs: { a },
      outputs: { out: [f32(n), "f32"] },
      call: (k, p, s) => k.dt_scale(p("out"), p("a"), n64(n), -1.7, s),
    });
    add({
      op: "axpy (in place)",
      symbols: ["dt_axpy"],
      dtype: "f32",
      size: `${n}`,
      tol: TOL.exact,
      bounds: () => ({ y: axpyBounds(a, b, 0.3) }),
      inputs: { x: a },
      inout: { y: [b, "f32"] },
      call: (k, p, s) => k.dt_axpy(p("y"), p("x"), n64(n), 0.3, s),
    });
    for (
      const [name, fwd, bwd] of [["relu", "dt_relu_fwd", "dt_relu_bwd"], [
        "gelu",
        "dt_gelu_fwd",
        "dt_gelu_bwd",
      ]] as const
    ) {
      add({
        op: `${name} fwd`,
        symbols: [fwd],
        dtype: "f32",
        size: `${n}`,
        tol: TOL.exact, // relu: a comparison and a select
        ...(name === "gelu" ? { bounds: () => ({ y: geluFwdBounds(a, "f32") }) } : {}),
        inputs: { x: a },
        outputs: { y: [f32(n), "f32"] },
        call: (k, p, s) => k[fwd](p("y"), p("x"), n64(n), s),
      });
      add({
        op: `${name} bwd`,
        symbols: [bwd],
        dtype: "f32",
        size: `${n}`,
        tol: TOL.exact,
        ...(name === "gelu" ? { bounds: () => ({ dx: geluBwdBounds(a, b, "f32") }) } : {}),
        inputs: { x: a, dy: b },
        outputs: { dx: [f32(n), "f32"] },
        call: (k, p, s) => k[bwd](p("dx"), p("dy"), p("x"), n64(n), s),
      });
    }
    for (const sym of ["dt_dropout_fwd", "dt_dropout_bwd"] as const) {
      add({
        op: sym === "dt_dropout_fwd" ? "dropout fwd" : "dropout bwd",
        symbols: [sym],
        dtype: "f32",
        size: `${n}`,
        tol: TOL.exact,
        inputs: { x: a },
        outputs: { y: [f32(n), "f32"] },
        call: (k, p, s) => k[sym](p("y"), p("x"), n64(n), 0.1, 1234n, 99n, s),
      });
    }
    add({
      op: "unscale_check",
      symbols: ["dt_unscale_check"],
      dtype: "f32",
      size: `${n}`,
      tol: TOL.exact,
      inout: { g: [a, "f32"], found: [new Float32Array([0]), "f32"] },
      call: (k, p, s) => k.dt_unscale_check(p("g"), n64(n), 1 / 1024, p("found"), s),
    });
  }
  // ---- mixed-dtype elementwise (bf16/f16 activations under autocast) -----------------------
  {
    type FD = "f32" | "bf16" | "f16";
    const code = { f32: DT.F32, bf16: DT.BF16, f16: DT.F16 } as const;
    const inDtype = (x: Float32Array, d: FD): Arr =>
      d === "f32" ? x : d === "bf16" ? toBf16(x) : toF16(x);
    const outArr = (n: number, d: FD): Arr => d === "f32" ? f32(n) : new Uint16Array(n);
    const mixes: [FD, FD, FD][] = [
      ["bf16", "bf16", "bf16"],
      ["f32", "bf16", "f32"],
      ["bf16", "f32", "f32"],
      ["f16", "f16", "f16"],
      ["f32", "f32", "bf16"],
      ["f32", "f32", "f32"],
    ];
    const forms: [number, number, number][] = [
      ...S.elementwise.map((n): [number, number, number] => [n, n, 1]),
      ...S.broadcast,
    ];
    forms.forEach(([n, bn, inner], i) => {
      const [ad, bd, od] = mixes[i % mixes.length]!;
      for (const [op, name] of [[0, "add"], [2, "mul"]] as const) {
        add({
          op: `binary_ex ${name} ${ad}+${bd}->${od}`,
          symbols: ["dt_binary_ex"],
          dtype: od,
          size: `${n}/${bn}x${inner}`,
          tol: TOL.exact,
          inputs: { a: inDtype(rng.normals(n), ad), b: inDtype(rng.normals(bn), bd) },
          outputs: { out: [outArr(n, od), od] },
          call: (k, p, s) =>
            k.dt_binary_ex(
              op,
              p("out"),
              code[od],
              p("a"),
              code[ad],
              p("b"),
              code[bd],
              n64(n),
              n64(bn),
              n64(inner),
              s,
            ),
        });
      }
    });
    for (const n of S.elementwise) {
      for (const d of ["bf16", "f16", "f32"] as const) {
        const x = inDtype(rng.normals(n, 2), d), dy = inDtype(rng.normals(n), d);
        const xs = asNumbers(x, d), dys = asNumbers(dy, d);
        add({
          op: "gelu_ex fwd",
          symbols: ["dt_gelu_fwd_ex"],
          dtype: d,
          size: `${n}`,
          tol: TOL.exact,
          bounds: () => ({ y: geluFwdBounds(xs, d) }),
          inputs: { x },
          outputs: { y: [outArr(n, d), d] },
          call: (k, p, s) => k.dt_gelu_fwd_ex(p("y"), p("x"), n64(n), code[d], s),
        });
        add({
          op: "gelu_ex bwd",
          symbols: ["dt_gelu_bwd_ex"],
          dtype: d,
          size: `${n}`,
          tol: TOL.exact,
          bounds: () => ({ dx: geluBwdBounds(xs, dys, d) }),
          inputs: { x, dy },
          outputs: { dx: [outArr(n, d), d] },
          call: (k, p, s) => k.dt_gelu_bwd_ex(p("dx"), p("dy"), p("x"), n64(n), code[d], s),
        });
      }
    }
  }
  {
    const n = 4099, g = rng.normals(n);
    g[4000] = Infinity;
    add({
      op: "unscale_check with an inf",
      symbols: ["dt_unscale_check"],
      dtype: "f32",
      size: `${n}`,
      tol: TOL.exact,
      inout: { g: [g, "f32"], found: [new Float32Array([0]), "f32"] },
      call: (k, p, s) => k.dt_unscale_check(p("g"), n64(n), 0.5, p("found"), s),
    });
  }
  // broadcast forms of dt_binary and their gradient dt_reduce_bcast: [n, bn, inner]
  for (const [n, bn, inner] of S.broadcast) {
    const a = rng.normals(n), b = rng.normals(bn);
    add({
      op: "binary broadcast (mul)",
      symbols: ["dt_binary"],
      dtype: "f32",
      size: `${n}/${bn}x${inner}`,
      tol: TOL.exact,
      inputs: { a, b },
      outputs: { out: [f32(n), "f32"] },
      call: (k, p, s) => k.dt_binary(2, p("out"), p("a"), p("b"), n64(n), n64(bn), n64(inner), s),
    });
    add({
      op: "reduce_bcast (broadcast grad)",
      symbols: ["dt_reduce_bcast"],
      dtype: "f32",
      size: `${n}/${bn}x${inner}`,
      tol: TOL.exact,
      bounds: () => ({ out: reduceBcastBounds(a, bn, inner) }),
      inputs: { a },
      outputs: { out: [f32(bn), "f32"] },
      call: (k, p, s) => k.dt_reduce_bcast(p("out"), p("a"), n64(n), n64(bn), n64(inner), s),
    });
  }
  for (const n of S.sumsq) {
    const x = rng.normals(n);
    add({
      op: "sumsq",
      symbols: ["dt_sumsq"],
      dtype: "f64",
      size: `${n}`,
      tol: TOL.exact,
      bounds: () => ({ out: sumsqBounds([x]) }),
      inputs: { x },
      outputs: { out: [new Float64Array(1), "f64"] },
      call: (k, p, s) => k.dt_sumsq(p("out"), p("x"), n64(n), s),
    });
  }
  // many tensors in one reduction (empty ones among them), and clipping built on it
  {
    const sizes = [...S.sumsq, 3, 0, 77];
    const names = sizes.map((_, i) => `g${i}`);
    const grads = Object.fromEntries(names.map((g, i) => [g, rng.normals(sizes[i]!, 0.5)]));
    /** Host arrays of the tensors' addresses (device ones on the GPU) and counts. */
    const table = (p: (name: string) => Deno.PointerValue) => {
      const ptrs = BigUint64Array.from(names, (g) => BigInt(Deno.UnsafePointer.value(p(g))));
      const counts = BigInt64Array.from(sizes, BigInt);
      return [Deno.UnsafePointer.of(ptrs), Deno.UnsafePointer.of(counts)] as const;
    };
    const total = sizes.reduce((a, b) => a + b, 0);
    add({
      op: "sumsq_many",
      symbols: ["dt_sumsq_many"],
      dtype: "f64",
      size: `${sizes.length} tensors, ${total}`,
      tol: TOL.exact,
      bounds: () => ({ out: sumsqBounds(names.map((g) => grads[g]!)) }),
      inputs: grads,
      outputs: { out: [new Float64Array(sizes.length), "f64"] },
      call: (k, p, s) => k.dt_sumsq_many(p("out"), ...table(p), n64(sizes.length), s),
    });
    for (const maxNorm of [Infinity, 1e6, 0.5]) {
      add({
        op: `clip_grad_norm max_norm=${maxNorm}`,
        symbols: ["dt_clip_grad_norm"],
        dtype: "f32",
        size: `${sizes.length} tensors, ${total}`,
        tol: TOL.exact,
        bounds: (ref) => {
          const rel = clipBounds(names.map((g) => grads[g]!));
          return {
            total: relativeTo(ref("total") as Float32Array, rel.total),
            sumsq: sumsqBounds(names.map((g) => grads[g]!)),
            ...Object.fromEntries(
              names.map((g) => [g, relativeTo(ref(g) as Float32Array, rel.grad)]),
            ),
          };
        },
        inout: Object.fromEntries(names.map((g) => [g, [grads[g]!, "f32"]])) as Record<
          string,
          [Arr, "f32"]
        >,
        outputs: { total: [f32(1), "f32"], sumsq: [new Float64Array(sizes.length), "f64"] },
        call: (k, p, s) =>
          k.dt_clip_grad_norm(p("total"), p("sumsq"), ...table(p), n64(sizes.length), maxNorm, s),
      });
    }
  }

  // ---- conversions ------------------------------------------------------------------------
  for (const n of S.conversions) {
    for (
      const [dtype, arr, kind, value] of [
        [DT.F32, f32(n), "f32", 0.1],
        [DT.BF16, new Uint16Array(n), "bf16", 0.1],
        [DT.F16, new Uint16Array(n), "f16", 0.1],
        [DT.I32, new Int32Array(n), "int", -7],
        [DT.I64, new BigInt64Array(n), "int", 3e12],
        [DT.U8, new Uint8Array(n), "bytes", 200],
      ] as const
    ) {
      add({
        op: `fill ${kind}`,
        symbols: ["dt_fill"],
        dtype: kind,
        size: `${n}`,
        tol: TOL.exact,
        outputs: { out: [arr, kind] },
        call: (k, p, s) => k.dt_fill(p("out"), dtype, n64(n), value, s),
      });
    }
    const x = rng.normals(n, 100);
    const casts: [string, number, Arr, number, [Arr, "f32" | "bf16" | "f16" | "int" | "bytes"]][] =
      [
        ["f32->bf16", DT.F32, x, DT.BF16, [new Uint16Array(n), "bf16"]],
        ["f32->f16", DT.F32, x, DT.F16, [new Uint16Array(n), "f16"]],
        ["bf16->f32", DT.BF16, toBf16(x), DT.F32, [f32(n), "f32"]],
        ["f16->f32", DT.F16, toF16(x), DT.F32, [f32(n), "f32"]],
        ["f32->i32", DT.F32, x, DT.I32, [new Int32Array(n), "int"]],
        ["i32->f32", DT.I32, rng.ints(n, -1e6, 1e6), DT.F32, [f32(n), "f32"]],
        ["i64->i32", DT.I64, BigInt64Array.from(rng.ints(n, -1e9, 1e9), BigInt), DT.I32, [
          new Int32Array(n),
          "int",
        ]],
        ["u8->f32", DT.U8, Uint8Array.from(rng.ints(n, 0, 256)), DT.F32, [f32(n), "f32"]],
      ];
    for (const [label, inDt, inp, outDt, out] of casts) {
      add({
        op: `cast ${label}`,
        symbols: ["dt_cast"],
        dtype: label,
        size: `${n}`,
        tol: TOL.exact,
        inputs: { x: inp },
        outputs: { y: out },
        call: (k, p, s) => k.dt_cast(p("y"), outDt, p("x"), inDt, n64(n), s),
      });
    }
  }

  // ---- rows ---------------------------------------------------------------------------------
  for (const [rows, cols, causal] of S.softmax) {
    const x = rng.normals(rows * cols, 3), dy = rng.normals(rows * cols);
    const probs = cpuSoftmax(x, rows, cols, causal, 0.125);
    add({
      op: `softmax fwd${causal ? " causal" : ""}`,
      symbols: ["dt_softmax_fwd"],
      dtype: "f32",
      size: `${rows}x${cols}`,
      tol: TOL.exact,
      bounds: (ref) => ({
        y: relativeTo(ref("y") as Float32Array, softmaxFwdRelative(x, cols, 0.125)),
      }),
      inputs: { x },
      outputs: { y: [f32(rows * cols), "f32"] },
      call: (k, p, s) =>
        k.dt_softmax_fwd(p("y"), p("x"), n64(rows), n64(cols), n64(causal), 0.125, s),
    });
    add({
      op: "softmax bwd",
      symbols: ["dt_softmax_bwd"],
      dtype: "f32",
      size: `${rows}x${cols}`,
      tol: TOL.exact,
      bounds: () => ({ dx: softmaxBwdBounds(dy, probs, rows, cols, 0.125) }),
      inputs: { dy, y: probs },
      outputs: { dx: [f32(rows * cols), "f32"] },
      call: (k, p, s) => k.dt_softmax_bwd(p("dx"), p("dy"), p("y"), n64(rows), n64(cols), 0.125, s),
    });
    // Rows a warp takes when 16-byte aligned: at 4 floats in they still are, at 1 they fall back to
    // a block per row (CPU and device get the same offset pointers; the heads stay as initialised).
    if (rows === 0 || cols % 4 !== 0 || cols > 1024) continue;
    for (const off of [1, 4]) {
      // outputs start zeroed: values of a normal's size in the head would outweigh the rows' norm
      const n = rows * cols + off, init = new Float32Array(n);
      const at = (q: Deno.PointerValue) => q === null ? q : Deno.UnsafePointer.offset(q, 4 * off);
      const pad = (v: Float32Array) => {
        const out = rng.normals(n);
        out.set(v, off);
        return out;
      };
      const dyPad = pad(dy), yPad = pad(probs);
      add({
        op: `softmax fwd${causal ? " causal" : ""} (offset ${off})`,
        symbols: ["dt_softmax_fwd"],
        dtype: "f32",
        size: `${rows}x${cols}`,
        tol: TOL.exact,
        bounds: (ref) => ({
          y: relativeTo(ref("y") as Float32Array, softmaxFwdRelative(x, cols, 0.125)),
        }),
        inputs: { x: pad(x) },
        inout: { y: [init, "f32"] },
        call: (k, p, s) =>
          k.dt_softmax_fwd(at(p("y")), at(p("x")), n64(rows), n64(cols), n64(causal), 0.125, s),
      });
      add({
        op: `softmax bwd (offset ${off})`,
        symbols: ["dt_softmax_bwd"],
        dtype: "f32",
        size: `${rows}x${cols}`,
        tol: TOL.exact,
        bounds: () => ({ dx: softmaxBwdBounds(dyPad, yPad, rows, cols, 0.125, off) }),
        inputs: { dy: dyPad, y: yPad },
        inout: { dx: [init, "f32"] },
        call: (k, p, s) =>
          k.dt_softmax_bwd(at(p("dx")), at(p("dy")), at(p("y")), n64(rows), n64(cols), 0.125, s),
      });
    }
  }
  for (const c of layerNormCases(rng, cpu, S.layernorm)) add(c);
  for (const [rows, cols] of S.argmax) {
    const x = Float32Array.from(rng.normals(rows * cols), (v) => Math.round(v * 4) / 4); // ties
    x[Math.floor(x.length / 2)] = NaN; // the first NaN wins, as torch.argmax
    add({
      op: "argmax_rows (ties, a NaN)",
      symbols: ["dt_argmax_rows"],
      dtype: "i32",
      size: `${rows}x${cols}`,
      tol: TOL.exact,
      inputs: { x },
      outputs: { out: [new Int32Array(rows), "int"] },
      call: (k, p, s) => k.dt_argmax_rows(p("out"), p("x"), n64(rows), n64(cols), s),
    });
  }

  // ---- embedding, cross-entropy, gather ------------------------------------------------------
  for (const [n, V, C] of S.embedding) {
    const idx = rng.ints(n, 0, V), table = rng.normals(V * C), dy = rng.normals(n * C);
    add({
      op: "embedding fwd",
      symbols: ["dt_embedding_fwd"],
      dtype: "f32",
      size: `${n}/${V}x${C}`,
      tol: TOL.exact,
      inputs: { idx, table },
      outputs: { y: [f32(n * C), "f32"] },
      call: (k, p, s) =>
        k.dt_embedding_fwd(p("y"), p("idx"), p("table"), n64(n), n64(V), n64(C), s),
    });
    add({
      op: "embedding bwd (repeats, index order)",
      symbols: ["dt_embedding_bwd"],
      dtype: "f32",
      size: `${n}/${V}x${C}`,
      tol: TOL.exact,
      inputs: { idx, dy },
      outputs: { dt: [f32(V * C), "f32"] },
      call: (k, p, s) => k.dt_embedding_bwd(p("dt"), p("dy"), p("idx"), n64(n), n64(V), n64(C), s),
    });
  }
  for (const [rows, V] of S.crossentropy) {
    const logits32 = rng.normals(rows * V, 2), targets = rng.ints(rows, 0, V);
    if (rows > 1) targets[1] = -100; // an ignored row
    for (const [kind, code] of [["f32", DT.F32], ["bf16", DT.BF16]] as const) {
      if (kind === "bf16" && rows * V > 400_000) continue; // one large case per dtype is enough
      const logits = kind === "f32" ? logits32 : toBf16(logits32);
      const [lse, valid] = cpuClassifier(logits, code, targets, rows, V);
      const grad = (n: number): Arr => (kind === "f32" ? f32(n) : new Uint16Array(n));
      add({
        op: "crossentropy fwd",
        symbols: ["dt_crossentropy_fwd"],
        dtype: kind,
        size: `${rows}x${V}`,
        tol: TOL.exact, // the count of valid rows; loss and lse have derived bounds
        bounds: (ref) =>
          crossEntropyFwdBounds(asNumbers(logits, kind), targets, ref("lse") as Float32Array, [
            rows,
            V,
          ], -100),
        inputs: { logits, targets },
        outputs: { loss: [f32(1), "f32"], lse: [f32(rows), "f32"], valid: [f32(1), "f32"] },
        call: (k, p, s) =>
          k.dt_crossentropy_fwd(
            p("loss"),
            p("lse"),
            p("valid"),
            p("logits"),
            code,
            p("targets"),
            n64(rows),
            n64(V),
            -100n,
            s,
          ),
      });
      add({
        op: "crossentropy bwd",
        symbols: ["dt_crossentropy_bwd"],
        dtype: kind,
        size: `${rows}x${V}`,
        tol: TOL.exact,
        bounds: () => ({
          dx: crossEntropyBwdBounds(
            asNumbers(logits, kind),
            targets,
            lse,
            Math.fround(2.5 / valid[0]!),
            [rows, V],
            -100,
            kind,
          ),
        }),
        inputs: { logits, lse, valid, targets, dloss: new Float32Array([2.5]) },
        outputs: { dx: [grad(rows * V), kind] },
        call: (k, p, s) =>
          k.dt_crossentropy_bwd(
            p("dx"),
            p("logits"),
            p("lse"),
            p("valid"),
            p("targets"),
            p("dloss"),
            code,
            n64(rows),
            n64(V),
            -100n,
            s,
          ),
      });
    }
  }
  for (const [n, rowBytes, rowsIn] of S.gather) {
    const inp = Uint8Array.from({ length: rowsIn * rowBytes }, () => Math.floor(rng.next() * 256));
    add({
      op: "gather_rows",
      symbols: ["dt_gather_rows"],
      dtype: "bytes",
      size: `${n}x${rowBytes}B`,
      tol: TOL.exact,
      inputs: { inp, idx: rng.ints(n, 0, rowsIn) },
      outputs: { out: [new Uint8Array(n * rowBytes), "bytes"] },
      call: (k, p, s) => k.dt_gather_rows(p("out"), p("inp"), p("idx"), n64(n), n64(rowBytes), s),
    });
  }

  // ---- layout -----------------------------------------------------------------------------------
  for (const [rows, cols, start, len, eb] of S.cols) {
    const inp = Uint8Array.from({ length: rows * cols * eb }, () => Math.floor(rng.next() * 256));
    const dst = Uint8Array.from({ length: rows * cols * eb }, () => Math.floor(rng.next() * 256));
    const src = Uint8Array.from({ length: rows * len * eb }, () => Math.floor(rng.next() * 256));
    add({
      op: "slice_cols",
      symbols: ["dt_slice_cols"],
      dtype: `${eb}B`,
      size: `${rows}x${cols}[${start}+${len}]`,
      tol: TOL.exact,
      inputs: { inp },
      outputs: { out: [new Uint8Array(rows * len * eb), "bytes"] },
      call: (k, p, s) =>
        k.dt_slice_cols(p("out"), p("inp"), n64(rows), n64(cols), n64(start), n64(len), n64(eb), s),
    });
    add({
      op: "scatter_cols (others untouched)",
      symbols: ["dt_scatter_cols"],
      dtype: `${eb}B`,
      size: `${rows}x${cols}[${start}+${len}]`,
      tol: TOL.exact,
      inputs: { src },
      inout: { dst: [dst, "bytes"] },
      call: (k, p, s) =>
        k.dt_scatter_cols(
          p("dst"),
          p("src"),
          n64(rows),
          n64(cols),
          n64(start),
          n64(len),
          n64(eb),
          s,
        ),
    });
  }
  for (const [A, B, C, D, eb] of S.transpose) {
    const n = A * B * C * D * eb;
    add({
      op: "transpose_0213",
      symbols: ["dt_transpose_0213"],
      dtype: `${eb}B`,
      size: `${A}x${B}x${C}x${D}`,
      tol: TOL.exact,
      inputs: { inp: Uint8Array.from({ length: n }, () => Math.floor(rng.next() * 256)) },
      outputs: { out: [new Uint8Array(n), "bytes"] },
      call: (k, p, s) =>
        k.dt_transpose_0213(p("out"), p("inp"), n64(A), n64(B), n64(C), n64(D), n64(eb), s),
    });
  }

  for (const c of vecCases(rng, S.vec, S.vecBroadcast)) add(c);

  // ---- GEMM -----------------------------------------------------------------------------------
  for (const g of S.gemm) {
    for (const dtype of [DT.F32, DT.BF16, DT.F16]) add(gemmCase(g, dtype));
  }

  for (const c of gemmExCases(rng, S.gemmEx, cpu)) add(c);

  // ---- attention -------------------------------------------------------------------------------
  for (const c of attentionCases(rng, cpu, S.attention)) add(c);

  // ---- optimizers ------------------------------------------------------------------------------
  for (const n of S.optim) {
    for (const step of [1, 10]) {
      const g = rng.normals(n), p0 = rng.normals(n), m0 = rng.normals(n, 0.1);
      const v0 = Float32Array.from(rng.normals(n, 0.1), Math.abs);
      const hyper = { lr: 6e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, step };
      add({
        op: `adamw step ${step}`,
        symbols: ["dt_adamw"],
        dtype: "f32",
        size: `${n}`,
        tol: TOL.exact,
        bounds: (ref) => adamwBounds({ p: p0, g, m: m0, v: v0 }, ref("v") as Float32Array, hyper),
        inputs: { g },
        inout: { p: [p0, "f32"], m: [m0, "f32"], v: [v0, "f32"] },
        call: (k, p, s) =>
          k.dt_adamw(
            p("p"),
            p("g"),
            p("m"),
            p("v"),
            n64(n),
            6e-4,
            0.9,
            0.95,
            1e-8,
            0.1,
            n64(step),
            s,
          ),
      });
    }
    for (const [momentum, nesterov, first] of [[0, 0, 1], [0.9, 0, 1], [0.9, 1, 0]]) {
      const g = rng.normals(n), p0 = rng.normals(n), buf0 = rng.normals(n);
      const hyper = { lr: 0.01, momentum, dampening: 0, weightDecay: 1e-4 };
      add({
        op: `sgd m=${momentum} nesterov=${nesterov} first=${first}`,
        symbols: ["dt_sgd"],
        dtype: "f32",
        size: `${n}`,
        tol: TOL.exact,
        bounds: (ref) => {
          const b = sgdBounds({ p: p0, g, buf: buf0 }, ref("buf") as Float32Array, hyper);
          const out: Record<string, Float64Array> = { p: b.p };
          if (b.buf) out.buf = b.buf;
          return out;
        },
        inputs: { g },
        inout: { p: [p0, "f32"], buf: [buf0, "f32"] },
        call: (k, p, s) =>
          k.dt_sgd(p("p"), p("g"), p("buf"), n64(n), 0.01, momentum, 0, 1e-4, nesterov, first, s),
      });
    }
  }

  // every parameter in one launch: odd and empty tensors, one past a chunk, and more chunks
  // than the emulated grid (64 blocks) through 70 small tensors; each tensor its own step and
  // hyperparameters, so the table must pair them right. Same bits as the CPU library.
  {
    const sizes = [...S.optim, 0, 4096, 4097, 77, ...Array.from({ length: 70 }, (_, i) => 1 + i)];
    const num = sizes.length;
    const total = sizes.reduce((a, b) => a + b, 0);
    /** A host table of the named buffers' addresses (0 for an absent name). */
    const table = (p: (name: string) => Deno.PointerValue, prefix: string) =>
      Deno.UnsafePointer.of(
        BigUint64Array.from(sizes, (_, t) => BigInt(Deno.UnsafePointer.value(p(`${prefix}${t}`)))),
      );
    const counts = BigInt64Array.from(sizes, BigInt);
    const named = (prefix: string, make: (n: number) => Float32Array) =>
      Object.fromEntries(sizes.map((n, t) => [`${prefix}${t}`, make(n)]));
    const inout = (prefix: string, make: (n: number) => Float32Array) =>
      Object.fromEntries(sizes.map((n, t) => [`${prefix}${t}`, [make(n), "f32"] as [Arr, "f32"]]));
    const steps = BigInt64Array.from(sizes, (_, t) => BigInt(1 + (t % 4) * 3));
    const hyper = Float64Array.from(
      sizes.flatMap((_, t) => [[6e-4, 0.9, 0.95, 1e-8, 0.1], [1e-3, 0.8, 0.999, 1e-6, 0]][t % 2]!),
    );
    const adamGrads = named("g", (n) => rng.normals(n));
    const adamState = {
      ...inout("p", (n) => rng.normals(n)),
      ...inout("m", (n) => rng.normals(n, 0.1)),
      ...inout("v", (n) => Float32Array.from(rng.normals(n, 0.1), Math.abs)),
    };
    add({
      op: "adamw_many",
      symbols: ["dt_adamw_many"],
      dtype: "f32",
      size: `${num} tensors, ${total}`,
      tol: TOL.exact,
      // each tensor its own AdamW step (op_bounds.ts), with its own hyperparameters and step
      bounds: (ref) =>
        Object.fromEntries(sizes.flatMap((_, t) => {
          const [lr, beta1, beta2, eps, weightDecay] = hyper.slice(5 * t, 5 * t + 5);
          const b = adamwBounds(
            {
              p: adamState[`p${t}`]![0] as Float32Array,
              g: adamGrads[`g${t}`]!,
              m: adamState[`m${t}`]![0] as Float32Array,
              v: adamState[`v${t}`]![0] as Float32Array,
            },
            ref(`v${t}`) as Float32Array,
            {
              lr: lr!,
              beta1: beta1!,
              beta2: beta2!,
              eps: eps!,
              weightDecay: weightDecay!,
              step: Number(steps[t]),
            },
          );
          return [[`p${t}`, b.p], [`m${t}`, b.m], [`v${t}`, b.v]];
        })),
      inputs: adamGrads,
      inout: adamState,
      call: (k, p, s) =>
        k.dt_adamw_many(
          table(p, "p"),
          table(p, "g"),
          table(p, "m"),
          table(p, "v"),
          Deno.UnsafePointer.of(counts),
          Deno.UnsafePointer.of(steps),
          Deno.UnsafePointer.of(hyper),
          n64(num),
          s,
        ),
    });
    add({
      op: "zero_many",
      symbols: ["dt_zero_many"],
      dtype: "f32",
      size: `${num} tensors, ${total}`,
      tol: TOL.exact,
      inout: inout("p", (n) => rng.normals(n)),
      call: (k, p, s) => k.dt_zero_many(table(p, "p"), Deno.UnsafePointer.of(counts), n64(num), s),
    });
    // momentum 0 (no buffer), plain, dampened and Nesterov momentum, first steps among later ones
    const modes = [[0.1, 0, 0, 1e-4, 0], [0.01, 0.9, 0, 0, 0], [0.05, 0.9, 0.1, 1e-2, 0], [
      0.01,
      0.5,
      0,
      0,
      1,
    ]];
    const sgdHyper = Float64Array.from(sizes.flatMap((_, t) => modes[t % 4]!.slice(0, 4)));
    const flags = Int32Array.from(
      sizes.flatMap((_, t) => [modes[t % 4]![4]!, t % 3 === 0 ? 1 : 0]),
    );
    const hasBuf = (t: number) => modes[t % 4]![1] !== 0;
    const sgdGrads = named("g", (n) => rng.normals(n));
    const sgdState: Record<string, [Arr, "f32"]> = {
      ...inout("p", (n) => rng.normals(n)),
      ...Object.fromEntries(
        sizes.flatMap((n, t) =>
          hasBuf(t) ? [[`b${t}`, [rng.normals(n), "f32"] as [Arr, "f32"]]] : []
        ),
      ),
    };
    add({
      op: "sgd_many",
      symbols: ["dt_sgd_many"],
      dtype: "f32",
      size: `${num} tensors, ${total}`,
      tol: TOL.exact,
      // each tensor its own SGD step (op_bounds.ts), with its own mode
      bounds: (ref) =>
        Object.fromEntries(sizes.flatMap((_, t) => {
          const [lr, momentum, dampening, weightDecay] = modes[t % 4]!;
          const buf = hasBuf(t) ? sgdState[`b${t}`]![0] as Float32Array : null;
          const b = sgdBounds(
            { p: sgdState[`p${t}`]![0] as Float32Array, g: sgdGrads[`g${t}`]!, buf },
            buf ? ref(`b${t}`) as Float32Array : null,
            { lr: lr!, momentum: momentum!, dampening: dampening!, weightDecay: weightDecay! },
          );
          return b.buf ? [[`p${t}`, b.p], [`b${t}`, b.buf]] : [[`p${t}`, b.p]];
        })),
      inputs: sgdGrads,
      inout: sgdState,
      call: (k, p, s) =>
        k.dt_sgd_many(
          table(p, "p"),
          table(p, "g"),
          table(p, "b"),
          Deno.UnsafePointer.of(counts),
          Deno.UnsafePointer.of(sgdHyper),
          Deno.UnsafePointer.of(flags),
          n64(num),
          s,
        ),
    });
  }

  cases.push(...buildCnnOpCases({ rng, cpu, sizes: S.cnn }));
  return cases;

  function cpuSoftmax(
    x: Float32Array,
    rows: number,
    cols: number,
    causal: number,
    scale: number,
  ): Float32Array {
    const y = f32(rows * cols);
    cpu.check(
      cpu.symbols.dt_softmax_fwd(
        Deno.UnsafePointer.of(y),
        Deno.UnsafePointer.of(x),
        n64(rows),
        n64(cols),
        n64(causal),
        scale,
        null,
      ),
      "dt_softmax_fwd",
    );
    return y;
  }

  function cpuClassifier(
    logits: Arr,
    dtype: number,
    targets: Int32Array,
    rows: number,
    V: number,
  ): [Float32Array, Float32Array] {
    const loss = f32(1), lse = f32(rows), valid = f32(1);
    const P = (a: Arr) => Deno.UnsafePointer.of(a);
    cpu.check(
      cpu.symbols.dt_crossentropy_fwd(
        P(loss),
        P(lse),
        P(valid),
        P(logits),
        dtype,
        P(targets),
        n64(rows),
        n64(V),
        -100n,
        null,
      ),
      "dt_crossentropy_fwd",
    );
    return [lse, valid];
  }

  function gemmCase(g: GemmShape, dtype: number): Case {
    const batch = g.batch ?? 1, pad = g.pad ?? 0, alpha = g.alpha ?? 1, beta = g.beta ?? 0;
    const [ar, ac] = g.ta ? [g.K, g.M] : [g.M, g.K];
    const [br, bc] = g.tb ? [g.N, g.K] : [g.K, g.N];
    const lda = ac + pad, ldb = bc + pad, ldc = g.N + pad;
    const sa = ar * lda, sb = br * ldb, sc = g.M * ldc;
    const mk = (n: number) => {
      const x = rng.normals(n);
      return dtype === DT.F32 ? x : dtype === DT.BF16 ? toBf16(x) : toF16(x);
    };
    const kind = dtype === DT.F32 ? "f32" : dtype === DT.BF16 ? "bf16" : "f16";
    const A = mk(Math.max(1, batch * sa)), B = mk(Math.max(1, batch * sb));
    const C = mk(batch * sc);
    // f32 products accumulate in f32 (TF32's 10-bit mantissa where allowed); bf16/f16 in f32 too
    const acc = dtype === DT.F32 && Deno.env.get("DTRAIN_ALLOW_TF32") === "1" ? "tf32" : "f32";
    return {
      op: `gemm ${g.ta ? "T" : "N"}${g.tb ? "T" : "N"}${batch > 1 ? ` x${batch}` : ""}${
        beta ? ` a=${alpha} b=${beta}` : ""
      }`,
      symbols: ["dt_gemm"],
      dtype: kind,
      size: `${g.M}x${g.N}x${g.K}${pad ? ` ld+${pad}` : ""}`,
      tol: dtype === DT.F32 ? TOL.gemm32 : dtype === DT.BF16 ? TOL.bf16 : TOL.f16,
      // each element within K-term summation bounds of the CPU's: another order, FMA, split-K pass
      bounds: () => {
        // Σ_k |a_ik·b_kj| for every element: the CPU library's f32 GEMM of |A| and |B|
        const absOf = (x: Arr) => Float32Array.from(asNumbers(x, kind), Math.abs);
        const absA = absOf(A), absB = absOf(B), c = asNumbers(C, kind);
        const prods = new Float32Array(Math.max(1, g.M * g.N));
        const out = new Float64Array(batch * sc); // padding columns: untouched, so bound 0
        const P = (x: Float32Array) => Deno.UnsafePointer.of(x);
        for (let z = 0; z < batch; z++) {
          if (g.M * g.N === 0) break;
          cpu.check(
            cpu.symbols.dt_gemm(
              DT.F32,
              g.ta,
              g.tb,
              n64(g.M),
              n64(g.N),
              n64(g.K),
              1,
              P(absA.subarray(z * sa)),
              n64(lda),
              P(absB.subarray(z * sb)),
              n64(ldb),
              0,
              P(prods),
              n64(g.N),
              1n,
              0n,
              0n,
              0n,
              null,
            ),
            "dt_gemm (|A| |B|)",
          );
          const c0 = new Float64Array(g.M * g.N);
          for (let i = 0; i < g.M; i++) {
            for (let j = 0; j < g.N; j++) c0[i * g.N + j] = c[z * sc + i * ldc + j]!;
          }
          const bound = gemmBounds({ M: g.M, N: g.N, K: g.K, alpha, beta }, prods, c0, acc, kind);
          for (let i = 0; i < g.M; i++) {
            out.set(bound.subarray(i * g.N, (i + 1) * g.N), z * sc + i * ldc);
          }
        }
        return { C: out };
      },
      inputs: { A, B },
      // beta = 0 never reads C, so its NaN poison must not leak into the product; beta != 0 (or
      // padding columns, which stay untouched) start from data
      ...(beta === 0 && pad === 0
        ? { outputs: { C: [C, kind] as [Arr, typeof kind] } }
        : { inout: { C: [C, kind] as [Arr, typeof kind] } }),
      call: (k, p, s) =>
        k.dt_gemm(
          dtype,
          g.ta,
          g.tb,
          n64(g.M),
          n64(g.N),
          n64(g.K),
          alpha,
          p("A"),
          n64(lda),
          p("B"),
          n64(ldb),
          beta,
          p("C"),
          n64(ldc),
          n64(batch),
          n64(sa),
          n64(sb),
          n64(sc),
          s,
        ),
    };
  }
}
