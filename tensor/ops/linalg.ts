/**
 * Matrix products with autograd: matmul (2-D and batched), linear
 * (x @ W^T + b, as torch.nn.functional.linear) and the batched products of
 * attention. Under autocast, inputs are rounded to bf16/f16 (parameters once
 * per change, tensor/weight_cast.ts) and the product accumulates in f32, its
 * output rounded to the low precision; gradients come in the low precision
 * (f32 where a mixed CPU GEMM writes them so) and autograd widens them only
 * where an f32 op needs them.
 */
import { backend } from "../backend.ts";
import { castTensor, empty, full, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { type DType, DTYPE_CODE } from "../dtype.ts";
import { matmulLowPrecision } from "../matmul_precision.ts";
import { castOperand } from "../weight_cast.ts";
import { requireFloat } from "./_util.ts";
import { add } from "./elementwise.ts";
import { gemmBf16Mixed, hasGemmBf16Mixed, type MixedOperand } from "../../ffi/cpu_extras.ts";

/** Low-level GEMM on row-major matrices: C = alpha op(A) op(B) + beta C, batched. */
export function gemm(
  dtype: DType,
  transA: boolean,
  transB: boolean,
  m: number,
  n: number,
  k: number,
  a: Tensor,
  b: Tensor,
  c: Tensor,
  opts: {
    alpha?: number;
    beta?: number;
    batch?: number;
    strideA?: number;
    strideB?: number;
    strideC?: number;
  } = {},
): void {
  const K = backend();
  const lda = transA ? m : k, ldb = transB ? k : n;
  K.call.dt_gemm(
    DTYPE_CODE[dtype],
    transA ? 1 : 0,
    transB ? 1 : 0,
    BigInt(m),
    BigInt(n),
    BigInt(k),
    opts.alpha ?? 1,
    a.ptr,
    BigInt(lda),
    b.ptr,
    BigInt(ldb),
    opts.beta ?? 0,
    c.ptr,
    BigInt(n),
    BigInt(opts.batch ?? 1),
    BigInt(opts.strideA ?? m * k),
    BigInt(opts.strideB ?? k * n),
    BigInt(opts.strideC ?? m * n),
  );
}

/**
 * Whether this product runs in bf16 with its f32 operands rounded while the
 * GEMM packs them and its f32 gradients written by the GEMM itself (a CPU
 * with vdpbf16ps, dt_cpu_gemm_bf16_mixed): the bits of the casts it replaces,
 * without their passes over memory and temporaries. Decided in the forward
 * pass, for its backward too.
 */
function mixedBf16(...ts: Tensor[]): boolean {
  return matmulLowPrecision() === "bf16" && backend().device === "cpu" &&
    ts.every((t) => t.dtype === "f32" || t.dtype === "bf16") && hasGemmBf16Mixed();
}

const operand = (t: Tensor): MixedOperand => ({ ptr: t.ptr, f32: t.dtype === "f32" });

/** gemm(), or the mixed bf16 product of tensors of their own dtypes. */
function product(
  mixed: boolean,
  dt: DType,
  transA: boolean,
  transB: boolean,
  m: number,
  n: number,
  k: number,
  a: Tensor,
  b: Tensor,
  c: Tensor,
  opts: { alpha?: number; beta?: number; batch?: number } = {},
): void {
  if (mixed) gemmBf16Mixed(transA, transB, m, n, k, operand(a), operand(b), operand(c), opts);
  else gemm(dt, transA, transB, m, n, k, a, b, c, opts);
}

/** The dtype a product computes in, and its inputs converted to it. */
function productInputs(a: Tensor, b: Tensor): [DType, Tensor, Tensor] {
  const low = matmulLowPrecision();
  if (low) {
    return [
      low,
      a.dtype === low ? a : castOperand(a, low),
      b.dtype === low ? b : castOperand(b, low),
    ];
  }
  const fa = a.dtype === "f32" ? a : castTensor(a, "f32");
  const fb = b.dtype === "f32" ? b : castTensor(b, "f32");
  return ["f32", fa, fb];
}

/** A gradient in the dtype of the product's saved inputs. */
function gradIn(g: Tensor, dt: DType): Tensor {
  return g.dtype === dt ? g : castTensor(g, dt);
}

/** The f32 version of a product's gradient. */
function toF32(t: Tensor): Tensor {
  return t.dtype === "f32" ? t : castTensor(t, "f32");
}

/** Products record low-precision gradients as they are (autograd widens them where needed). */
const LOW_GRAD = { lowPrecisionGrad: true } as const;

/**
 * Matrix product. a: (..., M, K); b: (K, N) shared by every batch, or
 * (..., K, N) with the same batch dims as a. transB: b is given as (..., N, K).
 */
export function matmul(
  a0: Tensor,
  b0: Tensor,
  opts: { transB?: boolean; alpha?: number } = {},
): Tensor {
  requireFloat("matmul", a0);
  requireFloat("matmul", b0);
  const transB = opts.transB ?? false;
  const alpha = opts.alpha ?? 1;
  if (a0.shape.length < 2 || b0.shape.length < 2) {
    throw new RangeError(
      `matmul: both operands need at least 2 dims, got [${a0.shape}] and [${b0.shape}]`,
    );
  }
  const M = a0.shape[a0.shape.length - 2]!, K = a0.shape[a0.shape.length - 1]!;
  const bK = b0.shape[b0.shape.length - (transB ? 1 : 2)]!;
  const N = b0.shape[b0.shape.length - (transB ? 2 : 1)]!;
  if (bK !== K) {
    throw new RangeError(
      `matmul: inner dimensions differ: [${a0.shape}] @ [${b0.shape}]${
        transB ? "^T" : ""
      } (${K} != ${bK})`,
    );
  }
  const batchA = a0.numel / (M * K);
  const shared = b0.shape.length === 2;
  const batchB = b0.numel / (K * N);
  if (!shared && batchB !== batchA) {
    throw new RangeError(
      `matmul: batch dimensions differ: [${a0.shape}] @ [${b0.shape}]`,
    );
  }
  const mixed = mixedBf16(a0, b0);
  // as linear: operands the backward reads again are cast once, others rounded while packed
  const [dt, a, b]: [DType, Tensor, Tensor] = mixed && !needsGrad(a0, b0)
    ? ["bf16", a0, b0]
    : productInputs(a0, b0);
  // the gradients' dtype as the GEMMs write them: f32 straight away from a mixed product
  const gradDt: DType = mixed ? "f32" : dt;
  const mm = (
    tA: boolean,
    tB: boolean,
    m: number,
    n: number,
    k: number,
    x: Tensor,
    y: Tensor,
    z: Tensor,
    o: {
      alpha?: number;
      batch?: number;
    },
  ) => product(mixed, dt, tA, tB, m, n, k, x, y, z, o);
  const outShape = [...a0.shape.slice(0, -1), N];
  const out = empty(outShape, dt);
  if (shared) {
    // (batch*M, K) @ (K, N): one GEMM.
    mm(false, transB, batchA * M, N, K, a, b, out, { alpha });
  } else {
    mm(false, transB, M, N, K, a, b, out, { alpha, batch: batchA });
  }
  if (needsGrad(a0, b0)) {
    record(out, "matmul", [a0, b0], (g0) => {
      const g = gradIn(g0, dt);
      let ga: Tensor | null = null, gb: Tensor | null = null;
      if (a0.requiresGrad) {
        // dA = g @ op(B)^T : (.., M, N) x (N, K)
        ga = empty(a0.shape, gradDt);
        if (shared) {
          mm(false, !transB, batchA * M, K, N, g, b, ga, { alpha });
        } else mm(false, !transB, M, K, N, g, b, ga, { alpha, batch: batchA });
      }
      if (b0.requiresGrad) {
        gb = empty(b0.shape, gradDt);
        if (shared) {
          // dB = A^T g (K, N), or for transB: g^T A (N, K); rows of all batches summed by the GEMM.
          if (transB) {
            mm(true, false, N, K, batchA * M, g, a, gb, { alpha });
          } else mm(true, false, K, N, batchA * M, a, g, gb, { alpha });
        } else {
          if (transB) {
            mm(true, false, N, K, M, g, a, gb, { alpha, batch: batchA });
          } else mm(true, false, K, N, M, a, g, gb, { alpha, batch: batchA });
        }
      }
      // in the GEMM's dtype: a parameter adds it into its f32 grad, a low-precision
      // activation's op takes it as it is, anything else gets it widened (tensor/autograd.ts)
      return [ga, gb];
    }, LOW_GRAD);
  }
  return out;
}

/** torch.nn.functional.linear: x @ weight^T + bias. x: (..., in), weight: (out, in). */
export function linear(
  x: Tensor,
  weight: Tensor,
  bias?: Tensor | null,
): Tensor {
  if (
    weight.shape.length !== 2 || x.shape[x.shape.length - 1] !== weight.shape[1]
  ) {
    throw new RangeError(
      `linear: input [${x.shape}] does not match weight [${weight.shape}] (in_features ${
        weight.shape[1]
      })`,
    );
  }
  const low = matmulLowPrecision();
  if (low && bias) return linearLow(x, weight, bias, low);
  const y = matmul(x, weight, { transB: true });
  if (!bias) return y;
  return add(y, bias);
}

/**
 * linear under autocast, as torch's addmm: x, weight and bias rounded to the
 * low precision, the bias broadcast into the output, and one GEMM with beta =
 * 1 adding the product to it with f32 accumulation, rounded once. (The bias
 * goes in by a rank-1 GEMM, ones(M, 1) @ bias(1, N), which is exact.) The
 * bias gradient is the f32 sum of the output gradient over rows.
 */
function linearLow(x: Tensor, weight: Tensor, bias: Tensor, low: DType): Tensor {
  requireFloat("linear", x);
  const N = weight.shape[0]!, K = weight.shape[1]!, M = x.numel / K;
  const mixed = mixedBf16(x, weight, bias);
  const grad = needsGrad(x, weight, bias);
  // Operands the backward pass reads again are cast once; a product without a
  // backward (mixedBf16) rounds its f32 operands itself while packing.
  const direct = mixed && !grad;
  const xl = direct || x.dtype === low ? x : castOperand(x, low);
  const wl = direct || weight.dtype === low ? weight : castOperand(weight, low);
  const bl = direct || bias.dtype === low ? bias : castOperand(bias, low);
  const gradDt: DType = mixed ? "f32" : low;
  const out = empty([...x.shape.slice(0, -1), N], low);
  const ones = full([M, 1], 1, low);
  product(mixed, low, false, false, M, N, 1, ones, bl, out);
  ones.dispose();
  product(mixed, low, false, true, M, N, K, xl, wl, out, { beta: 1 });
  if (grad) {
    record(out, "linear", [x, weight, bias], (g0) => {
      // read by two products: cast once (their f32 results come from the GEMM)
      const g = gradIn(g0, low);
      let gx: Tensor | null = null, gw: Tensor | null = null, gb: Tensor | null = null;
      if (x.requiresGrad) {
        gx = empty(x.shape, gradDt);
        product(mixed, low, false, false, M, K, N, g, wl, gx); // (M, N) @ (N, K)
      }
      if (weight.requiresGrad) {
        gw = empty(weight.shape, gradDt);
        product(mixed, low, true, false, N, K, M, g, xl, gw); // (N, M) @ (M, K)
      }
      if (bias.requiresGrad) gb = sumRows(toF32(g0), M, N);
      return [gx, gw, gb]; // gx, gw as the GEMMs wrote them, as matmul's
    }, LOW_GRAD);
  }
  return out;
}

/** out[j] = sum over the M rows of g[i, j] (f64 accumulation), as add's bias gradient. */
function sumRows(g: Tensor, M: number, N: number): Tensor {
  const out = empty([N], "f32");
  backend().call.dt_reduce_bcast(out.ptr, g.ptr, BigInt(M * N), BigInt(N), 1n);
  return out;
}
