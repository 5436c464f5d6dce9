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
import { castTensor, empty, type Tensor } from "../tensor.ts";
import { ADDED_TO_LEAF, type InputGrad, leafGradSink, needsGrad, record } from "../autograd.ts";
import { type DType, DTYPE_CODE } from "../dtype.ts";
import { matmulLowPrecision } from "../matmul_precision.ts";
import { castOperand } from "../weight_cast.ts";
import { requireFloat } from "./_util.ts";
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

/** Products record low-precision gradients as they are (autograd widens them where needed). */
const LOW_GRAD = { lowPrecisionGrad: true } as const;

/**
 * Matrix product. a: (..., M, K); b: (K, N) shared by every batch, or
 * (..., K, N) with the same batch dims as a. transB: b is given as (..., N, K).
 * As torch.matmul for these shapes.
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

/** Options of linear(). */
export interface LinearOptions {
  /** "gelu": gelu(x W^T + b) (tanh approximation) in one product, the pre-activation kept for backward */
  activation?: "gelu";
}

const EPI = { none: 0, bias: 1, gelu: 2, bgrad: 3 } as const;

/**
 * torch.nn.functional.linear: x @ weight^T + bias (x: (..., in), weight:
 * (out, in)), optionally followed by GELU, as one product with the bias (and
 * GELU) applied before a single rounding of each output (dt_gemm_ex's
 * epilogues, cuBLASLt's on the GPU). Under autocast the operands are the
 * low precision's — a parameter through autocast's weight cast cache
 * (tensor/weight_cast.ts) — and so is the output. In backward the weight
 * gradient is accumulated in f32 straight into the parameter's .grad by its
 * GEMM, with the bias gradient from the same call.
 */
export function linear(
  x: Tensor,
  weight: Tensor,
  bias?: Tensor | null,
  opts: LinearOptions = {},
): Tensor {
  requireFloat("linear", x);
  requireFloat("linear", weight);
  if (
    weight.shape.length !== 2 || x.shape.length < 1 ||
    x.shape[x.shape.length - 1] !== weight.shape[1]
  ) {
    throw new RangeError(
      `linear: input [${x.shape}] does not match weight [${weight.shape}] (in_features ${
        weight.shape[1]
      })`,
    );
  }
  const N = weight.shape[0]!, K = weight.shape[1]!, M = x.numel / K;
  if (bias && (bias.numel !== N || bias.shape.length !== 1)) {
    throw new RangeError(`linear: bias [${bias.shape}] does not match ${N} out_features`);
  }
  if (opts.activation !== undefined && opts.activation !== "gelu") {
    throw new RangeError(`linear: activation ${JSON.stringify(opts.activation)} is not "gelu"`);
  }
  const gelu = opts.activation === "gelu";
  const dt: DType = matmulLowPrecision() ?? "f32";
  const code = DTYPE_CODE[dt];
  const xl = x.dtype === dt ? x : castTensor(x, dt);
  const wl = weight.dtype === dt ? weight : castOperand(weight, dt);
  const bl = bias ? (bias.dtype === dt ? bias : castOperand(bias, dt)) : null;
  if (gelu && !bl) {
    // the fused epilogue adds a bias: a zero one when there is none
    return linear(x, weight, zerosBias(N, dt), opts);
  }
  const out = empty([...x.shape.slice(0, -1), N], dt);
  const pre = gelu ? empty(out.shape, dt) : null;
  const k = backend();
  const m = BigInt(M), n = BigInt(N), kk = BigInt(K);
  const epi = gelu ? EPI.gelu : bl ? EPI.bias : EPI.none;
  k.call.dt_gemm_ex(
    code,
    code,
    0,
    1,
    m,
    n,
    kk,
    1,
    xl.ptr,
    kk,
    wl.ptr,
    kk,
    0,
    out.ptr,
    n,
    epi,
    bl?.ptr ?? null,
    pre?.ptr ?? null,
    n,
  );
  const inputs = bias ? [x, weight, bias] : [x, weight];
  if (!needsGrad(...inputs)) {
    pre?.dispose();
    return out;
  }
  record(out, gelu ? "linear+gelu" : "linear", inputs, (g0) => {
    // the gradient of the product's output (before GELU)
    let g = g0.dtype === dt ? g0 : castTensor(g0, dt);
    if (pre) g = geluGrad(g, pre);
    const grads: InputGrad[] = [null, null, null];
    if (x.requiresGrad) {
      // dx = g W: straight into x's dtype when that is f32 or the product's
      const cdt: DType = x.dtype === dt || x.dtype === "f32" ? x.dtype : dt;
      const gx = empty(x.shape, cdt);
      k.call.dt_gemm_ex(
        code,
        DTYPE_CODE[cdt],
        0,
        0,
        m,
        kk,
        n,
        1,
        g.ptr,
        n,
        wl.ptr,
        kk,
        0,
        gx.ptr,
        kk,
        EPI.none,
        null,
        null,
        0n,
      );
      grads[0] = cdt === x.dtype ? gx : castTensor(gx, x.dtype);
    }
    const wantW = weight.requiresGrad, wantB = bias?.requiresGrad ?? false;
    if (dt === "f16" && (wantW || wantB)) {
      // f16 keeps torch's rounding of the parameter gradients into f16, where a
      // GradScaler expects an overflow to show as inf
      const gw = empty(weight.shape, "f16"), gb = wantB ? empty([N], "f16") : null;
      k.call.dt_gemm_ex(
        code,
        code,
        1,
        0,
        n,
        kk,
        m,
        1,
        g.ptr,
        n,
        xl.ptr,
        kk,
        0,
        gw.ptr,
        kk,
        wantB ? EPI.bgrad : EPI.none,
        gb?.ptr ?? null,
        null,
        0n,
      );
      if (wantW) grads[1] = castTensor(gw, "f32");
      if (gb) grads[2] = castTensor(gb, "f32");
      return bias ? grads : grads.slice(0, 2);
    }
    // the bias gradient (f32, N): straight into a fresh .grad, else returned to be added
    let bSink: Tensor | null = null;
    if (wantB) {
      const s = leafGradSink(bias!);
      if (s?.fresh) {
        bSink = s.grad;
        grads[2] = ADDED_TO_LEAF;
      } else {
        bSink = empty([N], "f32");
        grads[2] = bSink;
      }
    }
    if (wantW) {
      // dW (+)= g^T x in f32, with the bias gradient from the same call
      const s = leafGradSink(weight);
      const gw = s ? s.grad : empty(weight.shape, "f32");
      const beta = s && !s.fresh ? 1 : 0;
      k.call.dt_gemm_ex(
        code,
        DTYPE_CODE.f32,
        1,
        0,
        n,
        kk,
        m,
        1,
        g.ptr,
        n,
        xl.ptr,
        kk,
        beta,
        gw.ptr,
        kk,
        wantB ? EPI.bgrad : EPI.none,
        bSink?.ptr ?? null,
        null,
        0n,
      );
      grads[1] = s ? ADDED_TO_LEAF : gw;
    } else if (wantB) {
      // the bias gradient alone: a product with no columns keeps only op(A)'s row sums
      k.call.dt_gemm_ex(
        code,
        DTYPE_CODE.f32,
        1,
        0,
        n,
        0n,
        m,
        1,
        g.ptr,
        n,
        xl.ptr,
        1n,
        0,
        null,
        1n,
        EPI.bgrad,
        bSink!.ptr,
        null,
        0n,
      );
    }
    return bias ? grads : grads.slice(0, 2);
  }, LOW_GRAD);
  return out;
}

/** A zero bias of n elements in dtype (for a GELU epilogue without a bias of its own). */
function zerosBias(n: number, dtype: DType): Tensor {
  return empty([n], dtype).fill(0);
}

/** dout * gelu'(pre), in pre's dtype. */
function geluGrad(g0: Tensor, pre: Tensor): Tensor {
  const k = backend();
  const n = BigInt(pre.numel);
  const g = g0.dtype === pre.dtype ? g0 : castTensor(g0, pre.dtype);
  const out = empty(pre.shape, pre.dtype);
  if (pre.dtype === "f32") k.call.dt_gelu_bwd(out.ptr, g.ptr, pre.ptr, n);
  else k.call.dt_gelu_bwd_ex(out.ptr, g.ptr, pre.ptr, n, DTYPE_CODE[pre.dtype]); // in f32, rounded once
  return out;
}
