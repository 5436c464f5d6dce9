/**
 * Which device a run computes on: "cpu", "cuda", or "auto" — a GPU when the
 * CUDA backend can open one, else the CPU, said once. A machine without the
 * NVIDIA device node is answered in microseconds; only where a GPU may exist
 * are the CUDA libraries searched (tensor/cuda_backend.ts).
 */
import { type Device, setDevice } from "./backend.ts";
import { type CudaAvailability, cudaAvailability } from "./cuda_backend.ts";

/** What a user may ask for (the --device flag). */
export type DeviceRequest = "auto" | "cpu" | "cuda";

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
 * Resolves a request to a device: "cuda" that cannot work throws naming what
 * is missing; "auto" takes the GPU when it can and otherwise falls back to
 * the CPU, calling `notice` once with why.
 *
 * @example
 * ```ts
 * const device = resolveDevice(args.device ?? "auto", { notice: (l) => log.info(l) });
 * ```
 */
export function resolveDevice(request: string, opts: ResolveDeviceOptions = {}): Device {
  if (request === "cpu") return "cpu";
  if (request !== "auto" && request !== "cuda") {
    throw new TypeError(
      `Unknown device ${JSON.stringify(request)}: expected "auto", "cpu" or "cuda"`,
    );
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
 * on; call it before building the model. Returns the device chosen.
 */
export function useDevice(request = Deno.env.get("DTRAIN_DEVICE") ?? "auto"): Device {
  const device = resolveDevice(request);
  if (device === "cuda") setDevice("cuda");
  return device;
}
