/**
 * The device a process computes on and the kernel library behind it. The CPU
 * and CUDA libraries export the same symbols (ffi/symbols.ts), so the
 * backend is just which library was opened plus the stream argument, which
 * its status-checked calls append.
 */
import { cpuCalls, cpuKernels } from "../ffi/cpu.ts";
import type { KernelSymbols } from "../ffi/symbols.ts";
import type { KernelCalls } from "../ffi/calls.ts";
import type { NativeLibrary } from "../ffi/native.ts";
import { openCudaBackend } from "./cuda_backend.ts";

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

let cpuBackend: Backend | undefined;

function openCpuBackend(): Backend {
  cpuBackend ??= { device: "cpu", lib: cpuKernels(), call: cpuCalls(), stream: null };
  return cpuBackend;
}

let current: Backend | undefined;

/** The active backend (the CPU unless setDevice("cuda") was called). */
export function backend(): Backend {
  current ??= openCpuBackend();
  return current;
}

/**
 * Chooses the device for tensors created from now on. "cuda" opens this
 * rank's GPU, or throws naming what is missing (`dtrain doctor` says more).
 */
export function setDevice(device: Device): Backend {
  current = device === "cpu" ? openCpuBackend() : openCudaBackend();
  return current;
}
