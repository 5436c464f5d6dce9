/**
 * dtrain's native side for `dtrain doctor`: each kernel library (where it was
 * found, whether it loads with every symbol, its build hash, the CPU code path
 * it chose) and the GPU stack (driver, runtime, GPUs, NCCL and the NCCL_*
 * settings), each probe turning a failure into text rather than an exception.
 */
import { KERNEL_SYMBOLS } from "../../ffi/symbols.ts";
import { SHM_SYMBOLS } from "../../ffi/shm.ts";
import { findLibrary, libraryDirs, type NativeLibrary, openLibrary } from "../../ffi/native.ts";
import { backendName, buildHash } from "../../ffi/value_calls.ts";
import { CUDA_LIBRARY_NAME, cudaKernels, CudaRuntime } from "../../ffi/cuda.ts";
import { nativeVersions } from "../../ffi/native_versions.ts";
import { cudaLibraryDirs } from "../../ffi/cuda_libs.ts";
import { cudaAvailability, type CudaLibraries } from "../../ffi/cuda_discovery.ts";

/** One kernel library as found (or not). */
export interface LibraryFacts {
  name: string;
  /** what a run uses it for */
  purpose: string;
  path: string | null;
  /** the folders searched */
  searched: string[];
  /** the build hash recorded beside the file (<name>.hash), if any */
  recordedHash: string | null;
  loaded: boolean;
  /** why it was not found or did not load */
  error: string | null;
  /** dt_build_hash() of the loaded library */
  buildHash: string | null;
  /** dt_backend_name(): the code path chosen, e.g. "cpu-avx2" */
  backend: string | null;
}

const PURPOSE: Record<string, string> = {
  "libdtrain_cpu.so": "CPU kernels (every run)",
  "libdtrain_shm.so": "CPU process group (runs of several ranks)",
  "libdtrain_gloo.so": "CPU process group across machines (runs of --nnodes > 1)",
  [CUDA_LIBRARY_NAME]: "GPU kernels",
};

function recordedHash(path: string): string | null {
  try {
    return Deno.readTextFileSync(`${path}.hash`).trim();
  } catch {
    return null;
  }
}

/** Finds and opens one library with its full symbol table; `describe` reads it once open. */
export function probeLibrary<S extends Deno.ForeignLibraryInterface>(
  name: string,
  symbols: S,
  describe: (lib: NativeLibrary<S>) => { buildHash: string; backend: string | null },
): LibraryFacts {
  const facts: LibraryFacts = {
    name,
    purpose: PURPOSE[name] ?? "",
    path: null,
    searched: libraryDirs(),
    recordedHash: null,
    loaded: false,
    error: null,
    buildHash: null,
    backend: null,
  };
  try {
    facts.path = findLibrary(name);
    facts.recordedHash = recordedHash(facts.path);
    // Never closed: a kernel library may have started its thread pool.
    const lib = openLibrary(name, symbols, facts.path);
    Object.assign(facts, describe(lib), { loaded: true });
  } catch (e) {
    facts.error = (e as Error).message;
  }
  return facts;
}

/** The CPU and shared-memory libraries, found and loaded. */
export function probeCpuLibraries(): LibraryFacts[] {
  return [
    probeLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS, (lib) => ({
      buildHash: buildHash(lib),
      backend: backendName(lib),
    })),
    probeLibrary("libdtrain_shm.so", SHM_SYMBOLS, (lib) => ({
      buildHash: buildHash(lib),
      backend: null,
    })),
  ];
}

/** The GPU stack. */
export interface GpuFacts {
  usable: boolean;
  /** why not, naming what is missing and where it was looked for */
  reason: string | null;
  /** the same in a few words per missing piece */
  summary: string | null;
  /** the folders searched for the NVIDIA libraries */
  searched: string[];
  libraries: CudaLibraries;
  /** libdtrain_cuda.so, as the other libraries are reported */
  kernels: LibraryFacts;
  driverVersion: string | null;
  runtimeVersion: string | null;
  deviceCount: number;
  deviceName: string | null;
  /** every visible GPU: "NVIDIA H200, sm_90, 139.8 GiB" (empty when the driver cannot say) */
  devices: string[];
  ncclVersion: string | null;
  ncclError: string | null;
  /** CUDA_VISIBLE_DEVICES and every NCCL_* variable set */
  settings: Record<string, string>;
}

/** One line per visible GPU; none when the driver cannot describe them. */
function describeDevices(driver: string | null, count: number): string[] {
  try {
    const rt = new CudaRuntime(cudaKernels(driver));
    return Array.from({ length: count }, (_, i) => {
      const d = rt.deviceInfo(i);
      const gib = (d.totalBytes / 2 ** 30).toFixed(1);
      return `${d.name}, sm_${d.capability[0]}${d.capability[1]}, ${gib} GiB`;
    });
  } catch {
    return [];
  }
}

/** Asks GPU discovery what this machine can use, and nativeVersions() for the versions. */
export function probeGpu(): GpuFacts {
  const a = cudaAvailability();
  const kernels: LibraryFacts = {
    name: CUDA_LIBRARY_NAME,
    purpose: PURPOSE[CUDA_LIBRARY_NAME]!,
    path: a.libraries.kernels,
    searched: libraryDirs(),
    recordedHash: a.libraries.kernels ? recordedHash(a.libraries.kernels) : null,
    loaded: a.ok,
    error: a.ok
      ? null
      : a.libraries.kernels
      ? `not loaded: the GPU stack is incomplete (${a.summary})`
      : `not found in ${
        libraryDirs().join(", ") || "(no folders)"
      }: it is built where nvcc is on PATH`,
    buildHash: null,
    backend: null,
  };
  // The versions as a run records them (run.json's `versions`), from the same answer.
  const native = nativeVersions({ gpu: "cuda" });
  if (a.ok) {
    kernels.buildHash = native.gpu!.kernels.version;
    kernels.backend = backendName(cudaKernels(a.libraries.driver));
  }
  const ncclVersion = native.nccl!.version;
  const ncclError = native.nccl!.error;
  const settings: Record<string, string> = {};
  for (const [k, v] of Object.entries(Deno.env.toObject()).sort()) {
    if (k.startsWith("NCCL_") || k === "CUDA_VISIBLE_DEVICES") settings[k] = v;
  }
  return {
    usable: a.ok,
    reason: a.ok ? null : a.reason,
    summary: a.ok ? null : a.summary,
    searched: cudaLibraryDirs(),
    libraries: a.libraries,
    kernels,
    driverVersion: a.ok ? a.driverVersion : null,
    runtimeVersion: a.ok ? a.runtimeVersion : null,
    deviceCount: a.ok ? a.deviceCount : 0,
    deviceName: a.ok ? a.deviceName : null,
    devices: a.ok ? describeDevices(a.libraries.driver, a.deviceCount) : [],
    ncclVersion,
    ncclError,
    settings,
  };
}
