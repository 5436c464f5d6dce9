/**
 * What the operating system gives a run, for `dtrain doctor`: CPU model,
 * features and cores, memory (and a cgroup limit), a file system's size and
 * free space (statvfs through libc), and the open-file and locked-memory
 * limits. File paths are parameters so tests can hand in their own.
 */
import { statvfsWords } from "../../ffi/libc.ts";

/** The CPU. */
export interface CpuFacts {
  model: string;
  /** the features dtrain's kernels dispatch on */
  features: { avx2: boolean; fma: boolean; avx512f: boolean };
  /** logical CPUs this process may run on */
  cores: number;
}

/**
 * Reads /proc/cpuinfo (the first processor's model and flags).
 *
 * @example
 * ```ts
 * readCpu().features.avx2; // true on any x86-64 server of the last decade
 * ```
 */
export function readCpu(cpuinfoPath = "/proc/cpuinfo"): CpuFacts {
  let text = "";
  try {
    text = Deno.readTextFileSync(cpuinfoPath);
  } catch { /* not Linux, or /proc hidden: report unknowns */ }
  const line = (key: string) =>
    new RegExp(`^${key}\\s*:\\s*(.*)$`, "m").exec(text)?.[1]?.trim() ?? "";
  const flags = new Set(line("flags").split(/\s+/));
  return {
    model: line("model name") || "unknown",
    features: { avx2: flags.has("avx2"), fma: flags.has("fma"), avx512f: flags.has("avx512f") },
    cores: navigator.hardwareConcurrency || 1,
  };
}

/** Memory, in bytes. */
export interface MemoryFacts {
  total: number;
  available: number;
  /** a cgroup (v2) memory.max below the machine's memory, else null */
  cgroupLimit: number | null;
}

/** Reads the machine's memory and this process's cgroup v2 limit. */
export function readMemory(cgroupMaxPath = "/sys/fs/cgroup/memory.max"): MemoryFacts {
  const info = Deno.systemMemoryInfo();
  let cgroupLimit: number | null = null;
  try {
    const raw = Deno.readTextFileSync(cgroupMaxPath).trim();
    if (/^\d+$/.test(raw) && Number(raw) < info.total) cgroupLimit = Number(raw);
  } catch { /* no cgroup v2 limit visible */ }
  return { total: info.total, available: info.available, cgroupLimit };
}

/** A file system's size, or why it could not be read. */
export type FsSpace =
  | { path: string; ok: true; totalBytes: number; freeBytes: number }
  | { path: string; ok: false; error: string };

/** struct statvfs on 64-bit Linux: f_bsize, f_frsize, f_blocks, f_bfree, f_bavail, ... (112 bytes). */
const STATVFS_BYTES = 112;

/**
 * statvfs(path) through libc: the size and the space free to unprivileged
 * users (f_bavail) of the file system holding `path`.
 *
 * @example
 * ```ts
 * const s = fsSpace("/dev/shm");
 * if (s.ok) console.log(s.freeBytes);
 * ```
 */
export function fsSpace(path: string): FsSpace {
  const out = new BigUint64Array(STATVFS_BYTES / 8);
  const r = statvfsWords(path, out);
  if (typeof r === "object") return { path, ok: false, error: r.error };
  if (r === "failed") {
    let why = "statvfs failed";
    try {
      Deno.statSync(path);
    } catch (e) {
      why = (e as Error).message;
    }
    return { path, ok: false, error: why };
  }
  const frsize = Number(out[1]!);
  return {
    path,
    ok: true,
    totalBytes: Number(out[2]!) * frsize,
    freeBytes: Number(out[4]!) * frsize,
  };
}

/** A resource limit: soft and hard, null meaning unlimited. */
export interface Limit {
  soft: number | null;
  hard: number | null;
}

/** The limits a run cares about. */
export interface LimitFacts {
  openFiles: Limit | null;
  lockedMemoryBytes: Limit | null;
}

/**
 * Parses the text of /proc/<pid>/limits.
 *
 * @example
 * ```ts
 * parseLimits("Max open files  1024  4096  files\n").openFiles; // { soft: 1024, hard: 4096 }
 * ```
 */
export function parseLimits(text: string): LimitFacts {
  const read = (label: string): Limit | null => {
    const m = new RegExp(`^${label}\\s+(\\S+)\\s+(\\S+)`, "m").exec(text);
    if (!m) return null;
    const num = (v: string) => (v === "unlimited" ? null : Number(v));
    return { soft: num(m[1]!), hard: num(m[2]!) };
  };
  return { openFiles: read("Max open files"), lockedMemoryBytes: read("Max locked memory") };
}

/** Reads this process's limits (children, such as the ranks, inherit them). */
export function readLimits(path = "/proc/self/limits"): LimitFacts {
  try {
    return parseLimits(Deno.readTextFileSync(path));
  } catch {
    return { openFiles: null, lockedMemoryBytes: null };
  }
}
