/**
 * The CPU kernel library (build/libdtrain_cpu.so, built from kernels/cpu):
 * opened once, on first use.
 */
import { KERNEL_SYMBOLS, type KernelSymbols } from "./symbols.ts";
import { type NativeLibrary, openLibrary } from "./native.ts";

let cpu: NativeLibrary<KernelSymbols> | undefined;

/** The CPU kernel library, opened on first call. */
export function cpuKernels(): NativeLibrary<KernelSymbols> {
  cpu ??= openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS);
  return cpu;
}
