/**
 * The doctor's judgement: from the gathered facts, what must be fixed before
 * the requested run can start ("fix") and what may hurt it ("warn"), each as
 * one line of advice. Pure, so every rule is tested with made-up facts.
 */
import type { DoctorFacts } from "./facts.ts";
import type { LibraryFacts } from "./native.ts";
import { SHM_MAX_RANKS, shmChunkProblem } from "./shm.ts";

/** One finding. */
export interface Problem {
  level: "fix" | "warn";
  text: string;
}

/** The outcome. */
export interface Verdict {
  /** no "fix" problem: the run can start */
  ready: boolean;
  /** the run would use GPUs (--device cuda, or auto with a usable GPU) */
  gpuRun: boolean;
  problems: Problem[];
}

/** Below this many open files a run is refused (a usual default, and enough for 100+ ranks). */
export const MIN_OPEN_FILES = 1024;
/** NCCL between GPUs of one machine uses /dev/shm; below this, warn. */
export const NCCL_SHM_WARN_BYTES = 2 ** 30;

/** "1.5 GiB", "64.0 MiB", "512 B" */
export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${n.toFixed(1)} ${units[u]}`;
}

function libraryProblem(lib: LibraryFacts, f: DoctorFacts, needed: string): Problem | null {
  if (lib.loaded) return null;
  const fromEnv = f.install.libDirOverride;
  const hint = f.install.layout === "single-file" && !fromEnv
    ? ` Delete ${f.install.root} and start the single file again to unpack it afresh.`
    : fromEnv && lib.path?.startsWith(fromEnv)
    ? ` It was taken from DTRAIN_LIB_DIR=${fromEnv}: fix that folder or unset the variable.`
    : "";
  return { level: "fix", text: `${lib.name} (${needed}): ${lib.error}${hint}` };
}

function shmProblems(f: DoctorFacts): Problem[] {
  const { nproc } = f.request;
  const { space, needBytes, chunkBytes, chunkError } = f.shm;
  if (nproc > SHM_MAX_RANKS) {
    return [{
      level: "fix",
      text: `a CPU process group takes at most ${SHM_MAX_RANKS} ranks on one machine, not ${nproc}`,
    }];
  }
  const chunk = chunkError ?? shmChunkProblem(nproc, chunkBytes);
  if (chunk) return [{ level: "fix", text: chunk }];
  const need = `a CPU run of ${nproc} ranks needs ${formatBytes(needBytes)} there ` +
    `(${nproc} ranks x 2 x ${formatBytes(chunkBytes)} buffers + control)`;
  if (!space.ok) {
    return [{
      level: "fix",
      text: `cannot read ${space.path} (${space.error}); ${need}. Mount a tmpfs at /dev/shm ` +
        `(docker run --shm-size=1g; Kubernetes: an emptyDir with medium Memory)`,
    }];
  }
  const smaller = "or start fewer ranks, or set a smaller DTRAIN_SHM_CHUNK_BYTES";
  if (space.totalBytes < needBytes) {
    return [{
      level: "fix",
      text: `${space.path} holds only ${formatBytes(space.totalBytes)}; ${need}. Enlarge it ` +
        `(docker run --shm-size=1g; Kubernetes: an emptyDir with medium Memory at /dev/shm; ` +
        `or mount -o remount,size=1g /dev/shm), ${smaller}`,
    }];
  }
  if (space.freeBytes < needBytes) {
    return [{
      level: "fix",
      text:
        `${space.path} has ${formatBytes(space.freeBytes)} free of ${
          formatBytes(space.totalBytes)
        }; ${need}. Other segments use the rest (ls -la ${space.path}; crashed runs leave ` +
        `dtrain-*-pg behind), ${smaller}`,
    }];
  }
  return [];
}

/**
 * With --params: whether DDP's gradient buckets get shared memory on a CPU run (they fit in
 * /dev/shm beside the group's segment, under DTRAIN_SHM_SHARED_LIMIT_BYTES, or in the fixed
 * region), and a line saying so; null without --params. When they do not fit the run still
 * starts: DDP keeps ordinary buckets, whose allReduce is slower.
 */
export function ddpShmVerdict(f: DoctorFacts): { fits: boolean; text: string } | null {
  const d = f.shm.ddp;
  if (!d) return null;
  const { nproc } = f.request;
  const per = formatBytes(d.bytesPerRank);
  const what = `DDP's gradient buckets for ${d.params} f32 parameters take ${per} per rank`;
  const slower = "DDP will keep ordinary buckets, whose allReduce copies through the group's " +
    "buffers (about half the bandwidth)";
  if (d.mode === "off") {
    return { fits: true, text: `${what}; DTRAIN_SHM_SHARED_BYTES=0 keeps them out of /dev/shm` };
  }
  if (d.mode === "fixed") {
    return d.fixedBytes >= d.bytesPerRank
      ? {
        fits: true,
        text: `${what}, in the DTRAIN_SHM_SHARED_BYTES region of ${formatBytes(d.fixedBytes)}`,
      }
      : {
        fits: false,
        text:
          `${what}, more than the DTRAIN_SHM_SHARED_BYTES region of ${
            formatBytes(d.fixedBytes)
          }: the buckets that do not fit stay ordinary (slower allReduce); unset ` +
          `DTRAIN_SHM_SHARED_BYTES (DDP then reserves what it needs) or raise it to ${d.bytesPerRank}`,
      };
  }
  if (d.limitBytes !== null && d.limitBytes < d.bytesPerRank) {
    return {
      fits: false,
      text: `${what}, more than DTRAIN_SHM_SHARED_LIMIT_BYTES=${d.limitBytes}: ${slower}; ` +
        `raise it to at least ${d.bytesPerRank} or unset it`,
    };
  }
  const total = nproc * d.bytesPerRank;
  const need = f.shm.needBytes + total;
  const sum = `${nproc} x ${per} = ${formatBytes(total)} in ${f.shm.space.path} besides the ` +
    `group's ${formatBytes(f.shm.needBytes)}`;
  if (!f.shm.space.ok || f.shm.space.freeBytes < need) {
    const free = f.shm.space.ok ? `${formatBytes(f.shm.space.freeBytes)} free` : "unreadable";
    return {
      fits: false,
      text: `${what}: ${sum}, but it has ${free}: ${slower}. Enlarge /dev/shm to at least ` +
        `${formatBytes(need)} (docker run --shm-size; mount -o remount,size=<bytes> /dev/shm)`,
    };
  }
  return { fits: true, text: `${what}: ${sum}; fits` };
}

function gpuProblems(f: DoctorFacts): Problem[] {
  const { nproc } = f.request;
  const g = f.gpu;
  const out: Problem[] = [];
  if (!g.usable) {
    return [{ level: "fix", text: `--device cuda needs a usable GPU: ${g.reason}` }];
  }
  if (nproc > 1 && g.ncclError) out.push({ level: "fix", text: g.ncclError });
  if (nproc > g.deviceCount) {
    out.push({
      level: "fix",
      text:
        `${nproc} ranks on ${g.deviceCount} visible GPU(s): a GPU run starts one rank per GPU ` +
        `(NCCL refuses two ranks of a host on one device), so the launcher refuses --nproc ${nproc}; ` +
        `use --nproc ${g.deviceCount}`,
    });
  }
  if (nproc > 1 && f.shm.space.ok && f.shm.space.totalBytes < NCCL_SHM_WARN_BYTES) {
    out.push({
      level: "warn",
      text: `${f.shm.space.path} holds ${formatBytes(f.shm.space.totalBytes)}: NCCL moves data ` +
        `between GPUs of one machine through it, and Docker's 64 MiB default is a known cause of ` +
        `NCCL failures; give it at least 1 GiB (docker run --shm-size=1g)`,
    });
  }
  const lock = f.limits.lockedMemoryBytes;
  if (nproc > 1 && lock && lock.soft !== null) {
    out.push({
      level: "warn",
      text: `locked-memory limit ${formatBytes(lock.soft)}: NCCL over InfiniBand/RoCE ` +
        `registers memory and needs it unlimited (ulimit -l unlimited)`,
    });
  }
  return out;
}

/** A CPU run across machines: Gloo must load and bind an interface the other machines can reach. */
function glooProblems(f: DoctorFacts): Problem[] {
  const g = f.gloo;
  const nnodes = f.request.nnodes ?? 1;
  if (!g.library.loaded) {
    const lib = libraryProblem(g.library, f, `needed by a CPU run across ${nnodes} machines`);
    return [{
      level: "fix",
      text:
        `${
          lib?.text ?? g.library.error
        }; install Debian's libgloo0 (apt-get install libgloo0), or ` +
        `use the single file, which carries it; build the library with libgloo-dev installed`,
    }];
  }
  if (!g.device) {
    return [{ level: "fix", text: `Gloo cannot open a TCP device: ${g.error}` }];
  }
  if (g.loopback && nnodes > 1) {
    return [{
      level: "warn",
      text:
        `Gloo would bind ${g.iface} ${g.addr}, which other machines cannot reach: give every node ` +
        `--master-addr <node 0's address>, or set GLOO_SOCKET_IFNAME to the interface between the machines`,
    }];
  }
  return [];
}

/**
 * Judges the facts.
 *
 * @example
 * ```ts
 * const v = judge(gatherFacts({ nproc: 8, device: "auto" }));
 * for (const p of v.problems) console.log(`- ${p.level}: ${p.text}`);
 * ```
 */
export function judge(f: DoctorFacts): Verdict {
  const { nproc, device } = f.request;
  const gpuRun = device === "cuda" || (device === "auto" && f.gpu.usable);
  const problems: Problem[] = [];
  if (f.install.damage) problems.push({ level: "fix", text: f.install.damage });
  const [cpuLib, shmLib] = f.libraries;
  const cpuProblem = cpuLib && libraryProblem(cpuLib, f, "needed by every run");
  if (cpuProblem) problems.push(cpuProblem);
  if (gpuRun) {
    problems.push(...gpuProblems(f));
  } else if (nproc > 1) {
    const shm = shmLib && libraryProblem(shmLib, f, `needed by a CPU run of ${nproc} ranks`);
    if (shm) problems.push(shm);
    const segment = shmProblems(f);
    problems.push(...segment);
    const ddp = ddpShmVerdict(f);
    if (segment.length === 0 && f.gloo.backend !== "gloo" && ddp && !ddp.fits) {
      problems.push({ level: "warn", text: ddp.text });
    }
  }
  if (!gpuRun && f.gloo.backend === "gloo") problems.push(...glooProblems(f));
  const files = f.limits.openFiles;
  const minFiles = Math.max(MIN_OPEN_FILES, 64 + 8 * nproc);
  if (files && files.soft !== null && files.soft < minFiles) {
    problems.push({
      level: "fix",
      text: `open-file limit ${files.soft} is below ${minFiles}: raise it with ulimit -n ${
        files.hard === null ? 65536 : Math.min(65536, files.hard)
      } (hard limit ${files.hard ?? "unlimited"}), or LimitNOFILE= in a systemd unit`,
    });
  }
  if (!gpuRun && !f.cpu.features.avx2) {
    problems.push({
      level: "warn",
      text: "this CPU has no AVX2: the CPU kernels take their generic, slower path",
    });
  }
  for (const lib of [...f.libraries, f.gpu.kernels]) {
    if (lib.buildHash && lib.recordedHash && lib.buildHash !== lib.recordedHash) {
      problems.push({
        level: "warn",
        text:
          `${lib.path} reports build ${lib.buildHash} but ${lib.name}.hash says ${lib.recordedHash}: ` +
          `it was replaced after its build; rebuild with deno task native --force`,
      });
    }
  }
  return { ready: !problems.some((p) => p.level === "fix"), gpuRun, problems };
}
