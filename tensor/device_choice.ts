/**
 * Which device a run computes on: "cpu", "cuda", or "auto" — a GPU when the
 * CUDA backend can open one, else the CPU, said once. A machine without the
 * NVIDIA device node is answered in microseconds; only where a GPU may exist
 * are the CUDA libraries searched (tensor/cuda_backend.ts).
 */
import type { Device } from "./backend.ts";

/** What a user may ask for. */
export type DeviceRequest = "auto" | "cpu" | "cuda";

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
 * Resolves a request to a device; "cuda" that cannot work throws saying what
 * is missing, "auto" falls back to the CPU and calls `notice` once with why.
 */
export async function resolveDevice(
  request: string,
  notice: (line: string) => void = console.error,
): Promise<Device> {
  if (request === "cpu") return "cpu";
  if (request !== "auto" && request !== "cuda") {
    throw new TypeError(
      `Unknown device ${JSON.stringify(request)}: expected "auto", "cpu" or "cuda"`,
    );
  }
  if (request === "auto" && !nvidiaDeviceNode()) {
    notice("dtrain: no NVIDIA GPU on this machine (/dev/nvidiactl is absent); running on the CPU");
    return "cpu";
  }
  const { chooseDevice } = await import("./cuda_backend.ts");
  return chooseDevice(request, { notice });
}

/**
 * Makes the requested device (default: DTRAIN_DEVICE, which the launcher
 * sets from --device, else "auto") the one tensors are created on from now
 * on; call it before building the model. Returns the device chosen.
 */
export async function useDevice(
  request = Deno.env.get("DTRAIN_DEVICE") ?? "auto",
): Promise<Device> {
  const device = await resolveDevice(request);
  if (device === "cuda") {
    await import("./cuda_backend.ts"); // registers the CUDA backend
    const { setDevice } = await import("./backend.ts");
    setDevice("cuda");
  }
  return device;
}
