/**
 * The bulk draws of PyTorch's CPU generator in the CPU kernel library
 * (build/libdtrain_cpu.so, kernels/cpu/random.c): host-only dt_cpu_* symbols
 * that work on JavaScript memory, so they are not part of the kernel ABI that
 * the CUDA library shares. random/ calls them through cpuRandomCalls(), status
 * checked like every other native call.
 *
 * @module
 */
import { type CheckedCalls, checkedCalls } from "./calls.ts";
import { type NativeLibrary, openLibrary } from "./native.ts";
import { KERNEL_SYMBOLS } from "./symbols.ts";

const B = "buffer" as const;
const I64 = "i64" as const;
const F32 = "f32" as const;
const STATUS = { result: "i32" } as const;

/** The generator's dt_cpu_* symbols, with their C parameters. */
export const CPU_RANDOM_SYMBOLS = {
  /** (uint32 words[624], int32* index, float* out, n): out = the next n unit floats of MT19937. */
  dt_cpu_mt_unit: { parameters: [B, B, B, I64], ...STATUS },
  /** (words, index, out, n, float from, float span): torch's uniform_, fmaf(unit, span, from). */
  dt_cpu_mt_uniform: { parameters: [B, B, B, I64, F32, F32], ...STATUS },
  /** (words, index, int32* out, n): out = torch's randperm(n), drawing n - 1 words. */
  dt_cpu_randperm: { parameters: [B, B, B, I64], ...STATUS },
  /** (float* data, blocks, float mean, float std): torch's normal_fill_16_AVX2 over 16 x blocks uniforms. */
  dt_cpu_normal_fill16: { parameters: [B, I64, F32, F32], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;

const TABLE = {
  dt_abi_version: KERNEL_SYMBOLS.dt_abi_version,
  dt_last_error: KERNEL_SYMBOLS.dt_last_error,
  ...CPU_RANDOM_SYMBOLS,
} as const satisfies Deno.ForeignLibraryInterface;

/** The generator's calls, status-checked (ffi/calls.ts): they throw DtNativeError. */
export type CpuRandomCalls = CheckedCalls<typeof TABLE, keyof typeof CPU_RANDOM_SYMBOLS>;

let calls: CpuRandomCalls | null | undefined;

/**
 * The generator's status-checked calls, or null where the CPU library cannot
 * be opened (random/ then runs its TypeScript reference code, the same bits).
 */
export function cpuRandomCalls(): CpuRandomCalls | null {
  if (calls === undefined) {
    let lib: NativeLibrary<typeof TABLE> | null = null;
    try {
      lib = openLibrary("libdtrain_cpu.so", TABLE);
    } catch {
      lib = null;
    }
    calls = lib === null ? null : checkedCalls(
      lib,
      TABLE,
      Object.keys(CPU_RANDOM_SYMBOLS) as (keyof typeof CPU_RANDOM_SYMBOLS)[],
    );
  }
  return calls;
}
