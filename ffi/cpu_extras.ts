/**
 * Host-only helpers of the CPU kernel library (build/libdtrain_cpu.so) that
 * are not part of the kernel ABI, since they work on JavaScript memory and
 * the CUDA library has no counterpart: the bulk draws of PyTorch's CPU
 * generator (kernels/cpu/random.c), and which GEMM kernel this CPU runs
 * (kernels/cpu/gemm.c). Opened on first use, separately from the
 * kernel table, so the ABI table of ffi/symbols.ts stays the same for both
 * libraries.
 */
import { KERNEL_SYMBOLS } from "./symbols.ts";
import { type NativeLibrary, openLibrary } from "./native.ts";

const B = "buffer" as const;
const I32 = "i32" as const;
const I64 = "i64" as const;
const F32 = "f32" as const;
const P = "pointer" as const;
const STATUS = { result: "i32" } as const;

/** The dt_cpu_* extras: exported by libdtrain_cpu.so only. */
export const CPU_EXTRA_SYMBOLS = {
  /** (uint32 words[624], int32* index, float* out, n): out = the next n unit floats of MT19937. */
  dt_cpu_mt_unit: { parameters: [B, B, B, I64], ...STATUS },
  /** (words, index, out, n, float from, float span): torch's uniform_, fmaf(unit, span, from). */
  dt_cpu_mt_uniform: { parameters: [B, B, B, I64, F32, F32], ...STATUS },
  /** (words, index, int32* out, n): out = torch's randperm(n), drawing n - 1 words. */
  dt_cpu_randperm: { parameters: [B, B, B, I64], ...STATUS },
  /** (float* data, blocks, float mean, float std): torch's normal_fill_16_AVX2 over 16 x blocks uniforms. */
  dt_cpu_normal_fill16: { parameters: [B, I64, F32, F32], ...STATUS },
  /** (dtype): "avx512bf16", "avx512", "avx2" or "generic", as DTRAIN_CPU_ISA caps it; NULL on error. */
  dt_cpu_gemm_kernel: { parameters: [I32], result: "pointer" },
  /** dt_gemm in bf16 products with A, B and C each f32 or bf16 (a_dtype, b_dtype, c_dtype first,
   *  then dt_gemm's arguments without dtype and stream): f32 operands rounded while packed, an
   *  f32 C gets the bf16 result widened. Only where dt_cpu_gemm_kernel(bf16) is "avx512bf16". */
  dt_cpu_gemm_bf16_mixed: {
    parameters: [
      I32,
      I32,
      I32,
      I32,
      I32,
      I64,
      I64,
      I64,
      F32,
      P,
      I64,
      P,
      I64,
      F32,
      P,
      I64,
      I64,
      I64,
      I64,
      I64,
    ],
    ...STATUS,
  },
} as const satisfies Deno.ForeignLibraryInterface;

const TABLE = {
  dt_abi_version: KERNEL_SYMBOLS.dt_abi_version,
  dt_last_error: KERNEL_SYMBOLS.dt_last_error,
  ...CPU_EXTRA_SYMBOLS,
} as const satisfies Deno.ForeignLibraryInterface;

let extras: NativeLibrary<typeof TABLE> | null | undefined;

/**
 * The extras, or null where the CPU library cannot be opened (callers then
 * use their TypeScript reference code).
 */
export function cpuExtras(): NativeLibrary<typeof TABLE> | null {
  if (extras === undefined) {
    try {
      extras = openLibrary("libdtrain_cpu.so", TABLE);
    } catch {
      extras = null;
    }
  }
  return extras;
}

/**
 * The GEMM kernel dt_gemm runs for `dtype` here ("avx512bf16" for bf16 on a
 * CPU with AVX512_BF16; "avx512", "avx2" or "generic"), after the
 * DTRAIN_CPU_ISA cap. Throws with the library's text on a bad cap.
 *
 * @example
 * ```ts
 * gemmKernel("bf16"); // "avx512bf16" on a CPU with AVX512_BF16
 * ```
 */
export function gemmKernel(dtype: "f32" | "bf16" | "f16"): string {
  const lib = cpuExtras();
  if (!lib) throw new Error("gemmKernel: the CPU kernel library cannot be opened");
  const code = { f32: 0, bf16: 1, f16: 2 }[dtype];
  const name = lib.symbols.dt_cpu_gemm_kernel(code);
  if (name === null) {
    throw new Error(
      `dt_cpu_gemm_kernel: ${Deno.UnsafePointerView.getCString(lib.symbols.dt_last_error()!)}`,
    );
  }
  return Deno.UnsafePointerView.getCString(name);
}

let mixedBf16: boolean | undefined;

/**
 * Whether bf16 products can take f32 operands and give f32 results here
 * (gemmBf16Mixed): the CPU library runs bf16 through vdpbf16ps.
 */
export function hasGemmBf16Mixed(): boolean {
  if (mixedBf16 === undefined) {
    try {
      mixedBf16 = cpuExtras() !== null && gemmKernel("bf16") === "avx512bf16";
    } catch {
      mixedBf16 = false;
    }
  }
  return mixedBf16;
}

/** One operand of gemmBf16Mixed: its memory and whether it holds f32 (else bf16). */
export interface MixedOperand {
  ptr: Deno.PointerValue;
  f32: boolean;
}

/**
 * Row-major C = alpha op(A) op(B) + beta C computed in bf16 products, as
 * dt_gemm in bf16 after casting f32 operands to bf16 and casting the result
 * to f32 where C is f32 — the same bits, without those passes. Only where
 * hasGemmBf16Mixed(); throws with the library's text on failure.
 */
export function gemmBf16Mixed(
  transA: boolean,
  transB: boolean,
  m: number,
  n: number,
  k: number,
  a: MixedOperand,
  b: MixedOperand,
  c: MixedOperand,
  opts: {
    alpha?: number;
    beta?: number;
    batch?: number;
    strideA?: number;
    strideB?: number;
    strideC?: number;
  } = {},
): void {
  const lib = cpuExtras();
  if (!lib) throw new Error("gemmBf16Mixed: the CPU kernel library cannot be opened");
  const code = (o: MixedOperand) => (o.f32 ? 0 : 1);
  const status = lib.symbols.dt_cpu_gemm_bf16_mixed(
    code(a),
    code(b),
    code(c),
    transA ? 1 : 0,
    transB ? 1 : 0,
    BigInt(m),
    BigInt(n),
    BigInt(k),
    opts.alpha ?? 1,
    a.ptr,
    BigInt(transA ? m : k),
    b.ptr,
    BigInt(transB ? k : n),
    opts.beta ?? 0,
    c.ptr,
    BigInt(n),
    BigInt(opts.batch ?? 1),
    BigInt(opts.strideA ?? m * k),
    BigInt(opts.strideB ?? k * n),
    BigInt(opts.strideC ?? m * n),
  );
  if (status !== 0) {
    throw new Error(
      `dt_cpu_gemm_bf16_mixed: ${Deno.UnsafePointerView.getCString(lib.symbols.dt_last_error()!)}`,
    );
  }
}
