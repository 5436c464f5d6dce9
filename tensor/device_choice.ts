/**
 * Which device a run computes on: "cpu", "cuda", "cuda-emu" (the emulated
 * GPU: the whole CUDA path on the CPU, slowly, for tests), or "auto" — a GPU
 * when the CUDA backend can open one, else the CPU, said once. A machine
 * without the NVIDIA device node is answered in microseconds; only where a
 * GPU may exist are the CUDA libraries searched (ffi/cuda_discovery.ts).
 */
import { backend, type DeviceKind, setDevice } from "./backend.ts";
import { type CudaAvailability, cudaAvailability } from "../ffi/cuda_discovery.ts";
import type { BackendInfo } from "./device_info.ts";

/** What a user may ask for (the --device flag). */
export type DeviceRequest = "auto" | DeviceKind;

/** Every value --device takes. */
export const DEVICE_REQUESTS: readonly DeviceRequest[] = ["auto", "cpu", "cuda", "cuda-emu"];

/** Options of resolveDevice. */
export interface ResolveDeviceOptions {
  /** receives the one-line notice of an automatic fallback (default: console.error) */
  notice?: (line: string) => void;
  /** the availability to decide on (default: this machine's, searched on first need) */
  availability?: CudaAvailability;
}

/** True when this machine has the NVIDIA driver's control device. */
function nvidiaDeviceNode(): boolean {
  try {
    Deno.statSync("/dev/nvidiactl");
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves a request to a device: "cuda" or "cuda-emu" that cannot work
 * throws naming what is missing; "auto" takes the GPU when it can and
 * otherwise falls back to the CPU, calling `notice` once with why.
 *
 * @example
 * ```ts
 * const device = resolveDevice(args.device ?? "auto", { notice: (l) => log.info(l) });
 * ```
 */
export function resolveDevice(request: string, opts: ResolveDeviceOptions = {}): DeviceKind {
  if (request === "cpu") return "cpu";
  if (!(DEVICE_REQUESTS as readonly string[]).includes(request)) {
    throw new TypeError(
      `Unknown device ${JSON.stringify(request)}: expected "auto", "cpu", "cuda" or "cuda-emu"`,
    );
  }
  if (request === "cuda-emu") {
    const a = opts.availability ?? cudaAvailability(undefined, "cuda-emu");
    if (a.ok) return "cuda-emu";
    throw new Error(`Cannot use --device cuda-emu: ${a.reason}.`);
  }
  const notice = opts.notice ?? console.error;
  if (!opts.availability && request === "auto" && !nvidiaDeviceNode()) {
    notice("dtrain: no NVIDIA GPU on this machine (/dev/nvidiactl is absent); running on the CPU");
    return "cpu";
  }
  const a = opts.availability ?? cudaAvailability();
  if (a.ok) return "cuda";
  if (request === "cuda") {
    throw new Error(
      `Cannot use --device cuda: ${a.reason}. Run \`dtrain doctor\` for details, or use --device cpu.`,
    );
  }
  notice(`dtrain: no usable GPU (${a.summary}; \`dtrain doctor\` says more); running on the CPU`);
  return "cpu";
}

/**
 * Makes the requested device (default: DTRAIN_DEVICE, which the launcher
 * sets from --device, else "auto") the one tensors are created on from now
 * on, and returns it. A launched rank already computes on its device (the
 * rank bootstrap calls this before the script runs), so scripts need not;
 * `useDevice("cpu")` moves a script back to the CPU. On a GPU each rank gets
 * GPU LOCAL_RANK of its node.
 *
 * @example
 * ```ts
 * useDevice("cpu"); // this rank computes on the CPU whatever --device said
 * ```
 */
export function useDevice(request = Deno.env.get("DTRAIN_DEVICE") || "auto"): DeviceKind {
  const device = resolveDevice(request);
  setDevice(device);
  return device;
}

/** The active device in words: "cpu", "cuda:1" (GPU 1), "cuda-emu:0" (emulated GPU 0). */
export function describeBackend(b: BackendInfo = backend()): string {
  if (b.device === "cpu") return "cpu";
  return `${b.kind}:${b.index}`;
}
