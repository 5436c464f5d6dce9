/**
 * initProcessGroup: builds the group this process belongs to from the
 * launcher's environment and the rank's device, choosing its backend (NCCL
 * for GPU ranks, shared memory for CPU ranks on one machine, Gloo for CPU
 * ranks on several machines, or a trivial group when the process runs alone),
 * and remembers it as the process's open group.
 *
 * @module
 */
import type { ProcessGroup } from "./process_group.ts";
import { type ProcessGroupOptions, resolveProcessGroupConfig } from "./pg_config.ts";
import { GlooProcessGroup } from "./backends/gloo_backend.ts";
import { ShmProcessGroup } from "./backends/shm_backend.ts";
import { NcclProcessGroup } from "./backends/nccl_backend.ts";
import { SingleProcessGroup } from "./backends/single_backend.ts";
import { backend } from "../tensor/backend.ts";
import { describeBackend } from "../tensor/device_choice.ts";
import { reportProcessGroup } from "./control/rank_runtime.ts";
import { section } from "../profile/profile.ts";

export type { ProcessGroupOptions } from "./pg_config.ts";

/**
 * Creates this process's group from the environment set by the launcher
 * (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, DTRAIN_RUN_ID) and the
 * rank's device (tensor/backend.ts; a launched rank computes on its GPU
 * unless the script chose the CPU). GPU ranks use NCCL on their GPUs. CPU
 * ranks on one machine share memory; CPU ranks on several machines
 * (DTRAIN_NNODES > 1) meet through the run's control store and use Gloo over
 * TCP (GLOO_SOCKET_IFNAME picks the interface), with shared memory within
 * each node where that is faster; DTRAIN_CPU_BACKEND=gloo forces Gloo on one
 * machine. Without a launcher, the group is this process alone and every
 * collective is an identity.
 *
 * @example
 * ```ts
 * using pg = initProcessGroup({ timeoutMs: 60_000 });
 * const grads = new Float32Array(1024);
 * pg.allReduce(grads, "avg");
 * pg.barrier("epoch-end");
 * ```
 */
export function initProcessGroup(options: ProcessGroupOptions = {}): ProcessGroup {
  const b = backend();
  const cfg = resolveProcessGroupConfig({ ...options, device: b.device });
  if (openGroup && cfg.size > 1) {
    // PyTorch refuses a second init_process_group too: two groups of the same ranks would share
    // the launcher's barriers and the failure notices, and a collective on one never matches
    // the other's.
    throw new Error(
      `initProcessGroup: this process already has an open process group (${openGroup.backend}, ` +
        `rank ${openGroup.rank} of ${openGroup.size}); use it (currentProcessGroup() returns ` +
        `it), or close() it first`,
    );
  }
  const kind = options.backend ??
    (cfg.size === 1 ? "single" : b.device === "cuda" ? "nccl" : cfg.backend);
  if (!["nccl", "shm", "gloo", "single"].includes(kind)) {
    throw new TypeError(
      `initProcessGroup: backend ${
        JSON.stringify(kind)
      } is not one of "nccl", "gloo", "shm", "single"`,
    );
  }
  if (kind === "nccl" && b.device !== "cuda") {
    throw new Error(
      `initProcessGroup({ backend: "nccl" }): this rank computes on the CPU; NCCL needs its GPU ` +
        `(start the run with --device cuda, or call useDevice("cuda") first)`,
    );
  }
  if (kind === "single" && cfg.size !== 1) {
    throw new RangeError(`initProcessGroup({ backend: "single" }) in a world of ${cfg.size} ranks`);
  }
  const pg: ProcessGroup = kind === "single"
    ? new SingleProcessGroup(cfg.timeoutMs, b.device)
    : section("rendezvous", () =>
      kind === "nccl"
        ? NcclProcessGroup.open({ rank: cfg.rank, size: cfg.size, timeoutMs: cfg.timeoutMs })
        : kind === "gloo"
        ? GlooProcessGroup.open(cfg)
        : ShmProcessGroup.open(cfg));
  reportProcessGroup({ backend: pg.backend, worldSize: pg.size, device: describeBackend(b) });
  if (pg.size > 1) trackOpen(pg);
  return pg;
}

/** The group of several ranks that initProcessGroup() made and nobody closed yet. */
let openGroup: ProcessGroup | null = null;

/** Remembers `pg` as this process's open group until its close(). */
function trackOpen(pg: ProcessGroup): void {
  openGroup = pg;
  const close = pg.close.bind(pg);
  pg.close = () => {
    if (openGroup === pg) openGroup = null;
    close();
  };
}

/**
 * The process group of several ranks that initProcessGroup() made in this
 * process and that is still open, or null (PyTorch's
 * `torch.distributed.is_initialized()` with the default group).
 */
export function currentProcessGroup(): ProcessGroup | null {
  return openGroup;
}
