/**
 * The CPU kernel library (build/libdtrain_cpu.so, built from kernels/cpu):
 * opened once, on first use, with the kernel ABI plus a nonblocking binding
 * of dt_gather_rows (the data loader's prefetch runs it on Deno's FFI thread
 * pool).
 */
import { KERNEL_SYMBOLS } from "./symbols.ts";
import { DtNativeError, type NativeLibrary, openLibrary } from "./native.ts";
import { type KernelCalls, kernelCalls } from "./calls.ts";

/** The CPU library's table: the kernel ABI and the extra binding of one of its symbols. */
export const CPU_SYMBOLS = {
  ...KERNEL_SYMBOLS,
  /** dt_gather_rows, run on Deno's FFI thread pool: the call returns a Promise of its status. */
  dt_gather_rows_nonblocking: {
    ...KERNEL_SYMBOLS.dt_gather_rows,
    name: "dt_gather_rows",
    nonblocking: true,
  },
} as const satisfies Deno.ForeignLibraryInterface;
export type CpuSymbols = typeof CPU_SYMBOLS;

let cpu: NativeLibrary<CpuSymbols> | undefined;

/** The CPU kernel library, opened on first call. */
export function cpuKernels(): NativeLibrary<CpuSymbols> {
  cpu ??= openLibrary("libdtrain_cpu.so", CPU_SYMBOLS);
  return cpu;
}

let calls: KernelCalls | undefined;

/** The CPU library's status-checked kernel calls (whatever device tensors live on). */
export function cpuCalls(): KernelCalls {
  calls ??= kernelCalls(cpuKernels(), null);
  return calls;
}

/**
 * dt_gather_rows(out, inp, idx, n, rowBytes) on a background thread. The
 * call's error text stays in that thread's dt_last_error(), so a failure
 * names the status only (the caller checks indices before, so one means a
 * bug).
 */
export async function gatherRowsInBackground(
  out: Deno.PointerValue,
  inp: Deno.PointerValue,
  idx: Deno.PointerValue,
  n: bigint,
  rowBytes: bigint,
): Promise<void> {
  const status = await cpuKernels().symbols.dt_gather_rows_nonblocking(
    out,
    inp,
    idx,
    n,
    rowBytes,
    null,
  );
  if (status !== 0) {
    throw new DtNativeError(
      "libdtrain_cpu.so",
      "dt_gather_rows",
      status,
      "(on a background thread, whose error text is not readable from here)",
    );
  }
}
