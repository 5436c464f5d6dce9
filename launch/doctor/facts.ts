/**
 * Everything `dtrain doctor` looks at, gathered into one plain object: the
 * versions, how dtrain is installed, the native libraries, the CPU, memory,
 * /dev/shm against what the chosen ranks need, Gloo and its network interface
 * for runs across machines, the GPU stack and the limits.
 */
import pkg from "../../package.json" with { type: "json" };
import { resolveProcessGroupConfig } from "../../distributed/pg_config.ts";
import { checkExtraction } from "../../os/single_file_manifest.ts";
import { installLayout, SFX_FILE_ENV } from "../../os/install_layout.ts";
import { type GpuFacts, type LibraryFacts, probeCpuLibraries, probeGpu } from "./native.ts";
import { type GlooFacts, probeGloo } from "./gloo.ts";
import { ddpSharedBytes, shmSegmentBytes } from "./shm.ts";
import {
  type CpuFacts,
  type FsSpace,
  fsSpace,
  type LimitFacts,
  type MemoryFacts,
  readCpu,
  readLimits,
  readMemory,
} from "./system.ts";

/** The run the doctor checks for. */
export interface DoctorRequest {
  /** ranks on this machine */
  nproc: number;
  device: "auto" | "cpu" | "cuda";
  /** machines in the run (default 1) */
  nnodes?: number;
  /** node 0's address (default: this machine's host name) */
  masterAddr?: string | null;
  /** f32 parameters of the model DDP will train (--params): checks room for its shared buckets */
  params?: number | null;
}

/** DDP's shared gradient buckets for --params N parameters against /dev/shm. */
export interface DdpShmFacts {
  params: number;
  /** bytes per rank DDP reserves for them (ddpSharedBytes) */
  bytesPerRank: number;
  /** "on-demand": DDP reserves them when it starts (DTRAIN_SHM_SHARED_BYTES unset); "fixed": they
   *  go in the region of DTRAIN_SHM_SHARED_BYTES while they fit; "off": DTRAIN_SHM_SHARED_BYTES=0 */
  mode: "on-demand" | "fixed" | "off";
  /** the fixed region per rank (mode "fixed") */
  fixedBytes: number;
  /** DTRAIN_SHM_SHARED_LIMIT_BYTES, or null */
  limitBytes: number | null;
}

/** How dtrain is installed. */
export interface InstallFacts {
  version: string;
  layout: "checkout" | "single-file" | "unknown";
  /** the checkout, or the single file's extraction folder */
  root: string | null;
  /** the single file itself, when started from one */
  singleFile: string | null;
  /** a damaged extraction folder, else null */
  damage: string | null;
  /** DTRAIN_LIB_DIR, searched before dtrain's own libraries */
  libDirOverride: string | null;
}

/** /dev/shm against the shared-memory process group's needs. */
export interface ShmFacts {
  space: FsSpace;
  /** bytes of each rank's data buffers (DTRAIN_SHM_CHUNK_BYTES or the default) */
  chunkBytes: number;
  /** the segment of a CPU group of `nproc` ranks */
  needBytes: number;
  /** DTRAIN_SHM_CHUNK_BYTES was set but invalid */
  chunkError: string | null;
  /** with --params: DDP's shared buckets; else null */
  ddp: DdpShmFacts | null;
}

/** Everything the doctor reports. */
export interface DoctorFacts {
  request: DoctorRequest;
  install: InstallFacts;
  versions: { dtrain: string; deno: string; v8: string; typescript: string };
  libraries: LibraryFacts[];
  cpu: CpuFacts;
  memory: MemoryFacts;
  shm: ShmFacts;
  gloo: GlooFacts;
  gpu: GpuFacts;
  limits: LimitFacts;
}

function installFacts(): InstallFacts {
  const runtime = installLayout();
  const facts: InstallFacts = {
    version: pkg.version,
    layout: runtime?.kind ?? "unknown",
    root: runtime?.root ?? null,
    singleFile: null,
    damage: null,
    libDirOverride: Deno.env.get("DTRAIN_LIB_DIR") || null,
  };
  if (runtime?.kind === "single-file") {
    facts.singleFile = Deno.env.get(SFX_FILE_ENV) ?? null;
    try {
      checkExtraction(runtime.root);
    } catch (e) {
      facts.damage = (e as Error).message;
    }
  }
  return facts;
}

function shmFacts(nproc: number, shmPath: string, params: number | null): ShmFacts {
  let chunkBytes: number;
  let sharedBytes = 0;
  let onDemand = true;
  let limitBytes: number | null = null;
  let chunkError: string | null = null;
  try {
    const env = { DTRAIN_SHM_CHUNK_BYTES: Deno.env.get("DTRAIN_SHM_CHUNK_BYTES") };
    chunkBytes = resolveProcessGroupConfig({ env }).chunkBytes;
  } catch (e) {
    chunkError = (e as Error).message;
    chunkBytes = resolveProcessGroupConfig({ env: {} }).chunkBytes;
  }
  try {
    const env = {
      DTRAIN_SHM_SHARED_BYTES: Deno.env.get("DTRAIN_SHM_SHARED_BYTES"),
      DTRAIN_SHM_SHARED_LIMIT_BYTES: Deno.env.get("DTRAIN_SHM_SHARED_LIMIT_BYTES"),
    };
    const cfg = resolveProcessGroupConfig({ env });
    sharedBytes = cfg.sharedBytes ?? 0;
    onDemand = cfg.sharedOnDemand ?? false;
    limitBytes = cfg.sharedLimitBytes ?? null;
  } catch { /* a bad value is the process group's error to report; the segment then has none */ }
  return {
    space: fsSpace(shmPath),
    chunkBytes,
    needBytes: shmSegmentBytes(nproc, chunkBytes, sharedBytes),
    chunkError,
    ddp: params === null ? null : {
      params,
      bytesPerRank: ddpSharedBytes(params),
      mode: onDemand ? "on-demand" : sharedBytes > 0 ? "fixed" : "off",
      fixedBytes: sharedBytes,
      limitBytes,
    },
  };
}

/**
 * Gathers the facts for `request`. `shmPath` is where POSIX shared memory
 * lives (glibc's shm_open uses /dev/shm).
 *
 * @example
 * ```ts
 * const facts = gatherFacts({ nproc: 8, device: "auto" });
 * console.log(facts.shm.needBytes, facts.gpu.usable);
 * ```
 */
export function gatherFacts(request: DoctorRequest, shmPath = "/dev/shm"): DoctorFacts {
  return {
    request,
    install: installFacts(),
    versions: {
      dtrain: pkg.version,
      deno: Deno.version.deno,
      v8: Deno.version.v8,
      typescript: Deno.version.typescript,
    },
    libraries: probeCpuLibraries(),
    cpu: readCpu(),
    memory: readMemory(),
    shm: shmFacts(request.nproc, shmPath, request.params ?? null),
    gloo: probeGloo(request.nnodes ?? 1, request.nproc, request.masterAddr ?? null),
    gpu: probeGpu(),
    limits: readLimits(),
  };
}
