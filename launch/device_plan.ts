/**
 * Which device each local rank of this node computes on — the GPU each rank
 * will open (ffi/cuda_discovery.ts gpuForLocalRank: GPU LOCAL_RANK), worked
 * out once by the launcher so it can say so in one line — and the extra
 * environment a rank needs for it (GPU sharing's NCCL host identities).
 */
import type { DeviceKind } from "../tensor/backend.ts";
import { type CudaAvailability, gpuForLocalRank } from "../ffi/cuda_discovery.ts";
import { rankList } from "./hang_report.ts";

/** The devices of this node's ranks. */
export interface DevicePlan {
  kind: DeviceKind;
  /** the GPU of each local rank (empty on the CPU) */
  gpus: number[];
  /** the name of each of those GPUs ("" where unknown) */
  names: string[];
  /** DTRAIN_SHARE_GPUS=1: local ranks beyond the GPUs share them */
  share: boolean;
}

/**
 * Plans `nproc` local ranks on `kind`; `nameOf` names a GPU index (the
 * driver's name; "" when it cannot tell).
 *
 * @example
 * ```ts
 * planDevices("cuda", 2, availability, false, (i) => `GPU ${i}`).gpus; // [0, 1]
 * ```
 */
export function planDevices(
  kind: DeviceKind,
  nproc: number,
  availability: CudaAvailability | null,
  share: boolean,
  nameOf: (gpu: number) => string,
): DevicePlan {
  if (kind === "cpu" || !availability?.ok) return { kind, gpus: [], names: [], share };
  const gpus = Array.from(
    { length: nproc },
    (_, local) => gpuForLocalRank(local, availability.deviceCount, share),
  );
  return { kind, gpus, names: gpus.map(nameOf), share };
}

/**
 * The launcher's one line about a GPU plan (null on the CPU), with the
 * global rank numbers of node `node`.
 *
 * @example
 * ```ts
 * describePlan(plan, 0, 2);
 * // "ranks compute on cuda: rank 0 → GPU 0, rank 1 → GPU 1 (NVIDIA H200)"
 * ```
 */
export function describePlan(plan: DevicePlan, node: number, nproc: number): string | null {
  if (plan.kind === "cpu" || plan.gpus.length === 0) return null;
  const pairs = plan.gpus.map((g, local) => `rank ${node * nproc + local} → GPU ${g}`).join(", ");
  const names = [...new Set(plan.names.filter((n) => n !== ""))];
  const what = plan.kind === "cuda-emu"
    ? "cuda-emu, the emulated GPU (the CUDA code run on the CPU: slow, a test device)"
    : "cuda";
  const shared = plan.share && new Set(plan.gpus).size < plan.gpus.length
    ? `; GPU sharing is on (DTRAIN_SHARE_GPUS=1): ranks ${
      rankList(plan.gpus.map((_, local) => node * nproc + local))
    } give NCCL a host identity each, so it connects them through its network transport`
    : "";
  return `ranks compute on ${what}: ${pairs}${
    names.length ? ` (${names.join(", ")})` : ""
  }${shared}`;
}

/**
 * Extra environment of local rank `local`: under GPU sharing, an NCCL host
 * identity of its own (NCCL_HOSTID), since NCCL refuses two ranks of one
 * host on one GPU but connects "other hosts" through its network transport
 * (the emulated GPU's NCCL stand-in takes the identity as NCCL does).
 */
export function rankDeviceEnv(
  plan: DevicePlan,
  local: number,
  host: string,
): Record<string, string> {
  if (!plan.share || plan.kind === "cpu") return {};
  return { NCCL_HOSTID: `${host}-dtrain-rank${local}` };
}
