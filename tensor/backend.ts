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
import { openCudaBackend, openedCudaBackend } from "./cuda_backend.ts";

/** Where a tensor's memory lives. */
export type Device = "cpu" | "cuda";

/** What computes: the CPU, a GPU, or the emulated GPU (the CUDA path on the CPU, for tests). */
export type DeviceKind = "cpu" | "cuda" | "cuda-emu";

/** An opened kernel library and the stream its calls go on. */
export interface Backend {
  readonly device: Device;
  /** "cuda-emu" for the emulated device (its memory counts as "cuda" memory) */
  readonly kind: DeviceKind;
  /** the GPU's index among the visible ones; -1 on the CPU */
  readonly index: number;
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
  cpuBackend ??= {
    device: "cpu",
    kind: "cpu",
    index: -1,
    lib: cpuKernels(),
    call: cpuCalls(),
    stream: null,
  };
  return cpuBackend;
}

let current: Backend | undefined;

/** The active backend (the CPU unless setDevice("cuda") was called). */
export function backend(): Backend {
  current ??= openCpuBackend();
  return current;
}

/**
 * The backend that owns memory of `device`: the active one when it matches,
 * else the one opened earlier (a tensor made before a switch is still freed
 * by its own library). Throws when no backend of that device was opened.
 */
export function backendOf(device: Device): Backend {
  const b = backend();
  if (b.device === device) return b;
  if (device === "cpu") return openCpuBackend();
  const gpu = openedCudaBackend();
  if (gpu) return gpu;
  throw new Error(`No ${device} backend is open in this process`);
}

/**
 * Chooses the device for tensors created from now on. "cuda" opens this
 * rank's GPU, or throws naming what is missing (`dtrain doctor` says more);
 * "cuda-emu" opens the emulated GPU (a slow test device).
 */
export function setDevice(device: Device | DeviceKind): Backend {
  current = device === "cpu" ? openCpuBackend() : openCudaBackend(device);
  return current;
}
