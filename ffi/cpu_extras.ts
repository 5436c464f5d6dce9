/**
 * Host-only helpers of the CPU kernel library (build/libdtrain_cpu.so) that
 * are not part of the kernel ABI, since the CUDA library has no counterpart:
 * which GEMM kernel this CPU runs, and bf16 products of mixed f32/bf16
 * operands (kernels/cpu/gemm*.c). The generator's bulk draws and the
 * parallel fsync, the other dt_cpu_* extras, are ffi/cpu_random.ts and
 * ffi/cpu_files.ts. Opened on first use, separately
 * from the kernel table, so the ABI table of ffi/symbols.ts stays the same
 * for both libraries. Failures are DtNativeError, as every native call's.
 */
import { KERNEL_SYMBOLS } from "./symbols.ts";
import { type CheckedCalls, checkedCalls } from "./calls.ts";
import { CPU_RANDOM_SYMBOLS } from "./cpu_random.ts";
import { CPU_FILE_SYMBOLS } from "./cpu_files.ts";
import { cString, DtNativeError, type NativeLibrary, openLibrary } from "./native.ts";

const I32 = "i32" as const;
const I64 = "i64" as const;
const F32 = "f32" as const;
const P = "pointer" as const;
const STATUS = { result: "i32" } as const;

/** The GEMM extras of libdtrain_cpu.so. */
const CPU_GEMM_SYMBOLS = {
  /** (dtype): "avx512bf16", "avx512", "avx2" or "generic", as DTRAIN_CPU_ISA caps it; NULL on error. */
  dt_cpu_gemm_kernel: { parameters: [I32], result: "pointer" },
  /** dt_gemm in bf16 products with A, B and C each f32 or bf16 (a_dtype, b_dtype, c_dtype first,
   *  then dt_gemm's arguments without dtype and stream): f32 operands rounded while packed, an
   *  f32 C gets the bf16 result widened. Only where dt_cpu_gemm_kernel(bf16) is "avx512bf16". */
  dt_cpu_gemm_bf16_mixed: {
    // a, b, c dtypes; transA, transB; m, n, k; alpha, A, lda, B, ldb, beta, C, ldc; batch and
    // the three strides
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

/** The dt_cpu_* extras: exported by libdtrain_cpu.so only (the generator's, the GEMM's, the files'). */
export const CPU_EXTRA_SYMBOLS = {
  ...CPU_RANDOM_SYMBOLS,
  ...CPU_FILE_SYMBOLS,
  ...CPU_GEMM_SYMBOLS,
} as const satisfies Deno.ForeignLibraryInterface;

const TABLE = {
  dt_abi_version: KERNEL_SYMBOLS.dt_abi_version,
  dt_last_error: KERNEL_SYMBOLS.dt_last_error,
  ...CPU_GEMM_SYMBOLS,
} as const satisfies Deno.ForeignLibraryInterface;

const LIBRARY = "libdtrain_cpu.so";

interface GemmExtras {
  lib: NativeLibrary<typeof TABLE>;
  call: CheckedCalls<typeof TABLE, "dt_cpu_gemm_bf16_mixed">;
}

let extras: GemmExtras | undefined;

/** The GEMM extras, opened on first call; `what` names the caller in the error when they cannot be. */
function gemmExtras(what: string): GemmExtras {
  if (extras === undefined) {
    let lib: NativeLibrary<typeof TABLE>;
    try {
      lib = openLibrary(LIBRARY, TABLE);
    } catch (e) {
      throw new Error(`${what}: the CPU kernel library cannot be opened: ${(e as Error).message}`, {
        cause: e,
      });
    }
    extras = { lib, call: checkedCalls(lib, TABLE, ["dt_cpu_gemm_bf16_mixed"]) };
  }
  return extras;
}

/**
 * The GEMM kernel dt_gemm runs for `dtype` here ("avx512bf16" for bf16 on a
 * CPU with AVX512_BF16; "avx512", "avx2" or "generic"), after the
 * DTRAIN_CPU_ISA cap. Throws DtNativeError with the library's text on a bad cap.
 *
 * @example
 * ```ts
 * gemmKernel("bf16"); // "avx512bf16" on a CPU with AVX512_BF16
 * ```
 */
export function gemmKernel(dtype: "f32" | "bf16" | "f16"): string {
  const { lib } = gemmExtras("gemmKernel");
  const code = { f32: 0, bf16: 1, f16: 2 }[dtype];
  const name = lib.symbols.dt_cpu_gemm_kernel(code);
  if (name === null) {
    // A pointer result has no status: -1 stands for "NULL returned", the text says why.
    throw new DtNativeError(
      LIBRARY,
      "dt_cpu_gemm_kernel",
      -1,
      cString(lib.symbols.dt_last_error()),
    );
  }
  return cString(name);
}

let mixedBf16: boolean | undefined;

/**
 * Whether bf16 products can take f32 operands and give f32 results here
 * (gemmBf16Mixed): the CPU library runs bf16 through vdpbf16ps.
 */
export function hasGemmBf16Mixed(): boolean {
  if (mixedBf16 === undefined) {
    try {
      mixedBf16 = gemmKernel("bf16") === "avx512bf16";
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
 * hasGemmBf16Mixed(); throws DtNativeError with the library's text on failure.
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
  const { call } = gemmExtras("gemmBf16Mixed");
  const code = (o: MixedOperand) => (o.f32 ? 0 : 1);
  call.dt_cpu_gemm_bf16_mixed(
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
}
