/**
 * The device a process computes on and the kernel library behind it. The CPU
 * and CUDA libraries export the same symbols (ffi/symbols.ts), so the
 * backend is just which library was opened plus the stream argument, which
 * its status-checked calls append.
 */
import { cpuCalls, cpuKernels } from "../ffi/cpu.ts";
import type { KernelSymbols } from "../ffi/symbols.ts";
import { type KernelCalls, kernelCalls } from "../ffi/calls.ts";
import type { NativeLibrary } from "../ffi/native.ts";

/** Where a tensor's memory lives. */
export type Device = "cpu" | "cuda";

/** An opened kernel library and the stream its calls go on. */
export interface Backend {
  readonly device: Device;
  /** The library; its raw `symbols` only for calls that return a value (dt_alloc, dt_last_error). */
  readonly lib: NativeLibrary<KernelSymbols>;
  /**
   * Every dt_status kernel, stream appended, throwing DtNativeError naming
   * the symbol on failure: `backend().call.dt_scale(out, inp, n, alpha)`.
   */
  readonly call: KernelCalls;
  /** Stream passed as the last argument of every kernel (null on the CPU). */
  readonly stream: Deno.PointerValue;
}

/** The backend of an opened kernel library whose calls go on `stream`. */
export function makeBackend(
  device: Device,
  lib: NativeLibrary<KernelSymbols>,
  stream: Deno.PointerValue,
): Backend {
  return { device, lib, call: kernelCalls(lib, stream), stream };
}

let cpuBackend: Backend | undefined;

function openCpuBackend(): Backend {
  cpuBackend ??= { device: "cpu", lib: cpuKernels(), call: cpuCalls(), stream: null };
  return cpuBackend;
}

let current: Backend | undefined;
let cudaLoader: (() => Backend) | undefined;

/** Registers how to open the CUDA backend (done by the CUDA module). */
export function registerCudaBackend(open: () => Backend): void {
  cudaLoader = open;
}

/** The active backend (the CPU unless setDevice("cuda") was called). */
export function backend(): Backend {
  current ??= openCpuBackend();
  return current;
}

/** Chooses the device for tensors created from now on. */
export function setDevice(device: Device): Backend {
  if (device === "cpu") {
    current = openCpuBackend();
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
