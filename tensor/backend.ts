/**
 * The device a process computes on and the kernel library behind it. The CPU
 * and CUDA libraries export the same symbols (ffi/symbols.ts), so the
 * backend is just which library was opened plus the stream argument.
 */
import { cpuKernels } from "../ffi/cpu.ts";
import type { KernelSymbols } from "../ffi/symbols.ts";
import { DtNativeError } from "../ffi/native.ts";
import type { NativeLibrary } from "../ffi/native.ts";

/** Where a tensor's memory lives. */
export type Device = "cpu" | "cuda";

/** An opened kernel library and the stream its calls go on. */
export interface Backend {
  readonly device: Device;
  readonly lib: NativeLibrary<KernelSymbols>;
  readonly k: NativeLibrary<KernelSymbols>["symbols"];
  /** Stream passed as the last argument of every kernel (null on the CPU). */
  readonly stream: Deno.PointerValue;
}

let current: Backend | undefined;
let cudaLoader: (() => Backend) | undefined;

/** Registers how to open the CUDA backend (done by the CUDA module). */
export function registerCudaBackend(open: () => Backend): void {
  cudaLoader = open;
}

/** The active backend (the CPU unless setDevice("cuda") was called). */
export function backend(): Backend {
  if (current) return current;
  const lib = cpuKernels();
  current = { device: "cpu", lib, k: lib.symbols, stream: null };
  return current;
}

/** Chooses the device for tensors created from now on. */
export function setDevice(device: Device): Backend {
  if (device === "cpu") {
    const lib = cpuKernels();
    current = { device: "cpu", lib, k: lib.symbols, stream: null };
  } else {
    if (!cudaLoader) {
      throw new Error(
        'Cannot use device "cuda": the CUDA backend is not available in this build (see `dtrain doctor`)',
      );
    }
    current = cudaLoader();
  }
  return current;
}

/** Throws the native error text when a kernel returned a non-zero status. */
export function check(status: number, symbol: string): void {
  if (status !== 0) {
    const b = backend();
    b.lib.check(status, symbol);
    throw new DtNativeError(b.device, symbol, status, "unknown error");
  }
}
