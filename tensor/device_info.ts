/**
 * The active device as a training script sees it: `backend()` and
 * `setDevice()` of the public API return the device, its kind and index.
 * The kernel table behind it (tensor/backend.ts's `Backend`: the opened
 * library and its status-checked calls) stays internal to the library.
 */
import {
  backend as activeBackend,
  type Device,
  type DeviceKind,
  setDevice as openDevice,
} from "./backend.ts";

/** The device tensors are created on, as `backend()` and `setDevice()` report it. */
export interface BackendInfo {
  /** Where tensor memory lives: "cpu", or "cuda" (the emulated GPU's memory counts as "cuda"). */
  readonly device: Device;
  /** What computes: "cpu", "cuda", or "cuda-emu" (the emulated GPU). */
  readonly kind: DeviceKind;
  /** The GPU's index among the visible ones; -1 on the CPU. */
  readonly index: number;
}

/**
 * The device tensors are created on now: the CPU unless `setDevice` or
 * `useDevice` chose a GPU (a launched rank is already on the launcher's
 * `--device`). The counterpart of asking a PyTorch tensor's `.device`.
 *
 * @example
 * ```ts
 * import { backend } from "dtrain";
 * if (backend().kind === "cpu") console.log("computing on the CPU");
 * ```
 */
export function backend(): BackendInfo {
  return activeBackend();
}

/**
 * Chooses the device for tensors created from now on (PyTorch's
 * `torch.cuda.set_device` plus the default device). "cuda" opens this
 * rank's GPU, or throws naming what is missing (`dtrain doctor` says more);
 * "cuda-emu" opens the emulated GPU (a slow test device). Tensors made
 * before keep their device.
 *
 * @example
 * ```ts
 * import { setDevice } from "dtrain";
 * setDevice("cpu");
 * ```
 */
export function setDevice(device: Device | DeviceKind): BackendInfo {
  return openDevice(device);
}
