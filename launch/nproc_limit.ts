/**
 * How many ranks one node may start, checked before anything starts: a CPU
 * run is held to a few ranks per core (more only with --oversubscribe) and
 * never beyond what the shared-memory process group takes; a GPU run to one
 * rank per visible GPU (NCCL refuses two ranks on one device), unless GPU
 * sharing (DTRAIN_SHARE_GPUS=1, a test mode) is on.
 */
import { SHM_MAX_RANKS } from "./doctor/shm.ts";
import { UsageError } from "./options.ts";

/** CPU ranks allowed per core without --oversubscribe. */
export const RANKS_PER_CORE = 4;

/** What the limit depends on. */
export interface NodeCapacity {
  device: "cpu" | "cuda" | "cuda-emu";
  /** logical cores of this machine */
  cores: number;
  /** GPUs visible to this process (CUDA runs; the emulated device's for cuda-emu) */
  gpus?: number;
  /** DTRAIN_SHARE_GPUS=1: ranks beyond the GPUs share them */
  shareGpus?: boolean;
  /** --oversubscribe: more CPU ranks than RANKS_PER_CORE × cores */
  oversubscribe: boolean;
}

/** --nproc asks for more ranks than this node can run (a usage error: exit 2). */
export class NprocLimitError extends UsageError {
  override name = "NprocLimitError";
}

/** Throws an NprocLimitError saying why `nproc` ranks cannot run on this node, and what can. */
export function checkNproc(nproc: number, cap: NodeCapacity): void {
  if (cap.device !== "cpu") {
    const gpus = cap.gpus ?? 0;
    if (nproc > gpus && !(cap.shareGpus && gpus > 0)) {
      const visible = Deno.env.get("CUDA_VISIBLE_DEVICES");
      const which = cap.device === "cuda-emu"
        ? "emulated GPU(s)"
        : "GPU(s) visible on this machine";
      throw new NprocLimitError(
        `--nproc ${nproc} is more than the ${gpus} ${which}` +
          `${visible !== undefined ? ` (CUDA_VISIBLE_DEVICES=${visible})` : ""}: a GPU run ` +
          `starts one rank per GPU (NCCL cannot put two ranks on one device); use --nproc ${gpus} ` +
          `or --device cpu`,
      );
    }
    return;
  }
  if (nproc > SHM_MAX_RANKS) {
    throw new NprocLimitError(
      `--nproc ${nproc} is more than a CPU process group takes: at most ${SHM_MAX_RANKS} ranks ` +
        `on one machine`,
    );
  }
  const cores = Math.max(1, cap.cores);
  const sane = RANKS_PER_CORE * cores;
  if (nproc > sane && !cap.oversubscribe) {
    throw new NprocLimitError(
      `--nproc ${nproc} is more than this machine can run: at most ${sane} CPU ranks ` +
        `(${RANKS_PER_CORE} per core on ${cores} core(s)); --oversubscribe allows up to ` +
        `${SHM_MAX_RANKS}, the CPU process group's limit`,
    );
  }
}
