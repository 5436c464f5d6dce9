/**
 * nativeVersions(): which native libraries this process computes with, which versions, found
 * where — the one answer the launcher writes into run.json's `versions` and `dtrain doctor`
 * prints. dtrain's own libraries answer with their build hash (dt_build_hash), NCCL and Gloo with
 * their own versions, the GPU stack as GPU discovery (cuda_discovery.ts) found it. Nothing here
 * throws: a library that is missing or does not load is reported with why.
 */
import { buildHash } from "./value_calls.ts";
import { cpuKernels } from "./cpu.ts";
import { cudaKernels } from "./cuda.ts";
import { ncclLibrary } from "./nccl.ts";
import { glooBuildInfo, glooLibrary } from "./gloo.ts";
import { cudaAvailability, type CudaFlavor } from "./cuda_discovery.ts";

/** One library: where it was found and its version, or why neither is known. */
export interface LibraryVersion {
  /** the file it was loaded from; null when it was not found or did not load */
  path: string | null;
  /** dtrain's build hash for its own libraries, the library's own version for the others */
  version: string | null;
  /** why the version is not known (not found, does not load); null when it is */
  error: string | null;
}

/** The GPU stack of one flavour, as discovery found it. */
export interface GpuStackVersions {
  /** a real GPU ("cuda") or the emulated device ("cuda-emu") */
  flavor: CudaFlavor;
  /** libdtrain_cuda.so (or the emulated build) and its build hash */
  kernels: LibraryVersion;
  /** the CUDA runtime the kernels were built with; null when the stack is not usable */
  runtime: string | null;
  /** the CUDA driver's version; null when the stack is not usable */
  driver: string | null;
  /** the cuBLASLt file that matmuls use */
  cublasLt: string | null;
  /** why the stack is not usable (everything missing, and where it was looked for); else null */
  error: string | null;
}

/** The native side of this process. */
export interface NativeVersions {
  /** libdtrain_cpu.so: every run computes with it */
  cpu: LibraryVersion;
  /** the GPU stack, when asked for (`gpu` of the request) */
  gpu?: GpuStackVersions;
  /** NCCL (the stand-in on the emulated device), when the GPU stack was asked for */
  nccl?: LibraryVersion;
  /** libdtrain_gloo.so, when asked for; `glooVersion` is the libgloo it was built against */
  gloo?: LibraryVersion & { glooVersion: string | null };
}

/** What nativeVersions() looks at besides the CPU library. */
export interface NativeVersionsRequest {
  /** the GPU flavour to describe (and its NCCL); none when left out */
  gpu?: CudaFlavor;
  /** describe the Gloo library (CPU ranks across machines) */
  gloo?: boolean;
}

/** `read()` as a LibraryVersion, its exception as the error. */
function libraryVersion(read: () => { path: string; version: string }): LibraryVersion {
  try {
    const { path, version } = read();
    return { path, version, error: null };
  } catch (e) {
    return { path: null, version: null, error: (e as Error).message };
  }
}

/** The GPU stack of `flavor`: discovery's answer, the kernels' build hash, and NCCL. */
function gpuStack(flavor: CudaFlavor): { gpu: GpuStackVersions; nccl: LibraryVersion } {
  const a = cudaAvailability(undefined, flavor);
  const kernels: LibraryVersion = a.ok
    ? libraryVersion(() => {
      // The library discovery found (for the emulated device, its own build of it).
      const lib = flavor === "cuda-emu"
        ? cudaKernels(null, a.libraries.kernels!)
        : cudaKernels(a.libraries.driver);
      return { path: lib.path, version: buildHash(lib) };
    })
    : { path: a.libraries.kernels, version: null, error: a.reason };
  const nccl = libraryVersion(() => {
    const n = ncclLibrary(
      undefined,
      flavor === "cuda-emu" && a.libraries.nccl ? a.libraries.nccl : undefined,
    );
    return { path: n.path, version: n.version };
  });
  return {
    gpu: {
      flavor,
      kernels,
      runtime: a.ok ? a.runtimeVersion : null,
      driver: a.ok ? a.driverVersion : null,
      cublasLt: a.libraries.cublasLt,
      error: a.ok ? null : a.reason,
    },
    nccl,
  };
}

/**
 * Which native libraries this process computes with, their versions and where they were found:
 * the CPU library always, the GPU stack of `request.gpu` with its NCCL, and the Gloo library when
 * `request.gloo`. Opening a library to read its version is what a run does anyway; nothing throws.
 *
 * @example
 * ```ts
 * const v = nativeVersions({ gpu: "cuda" });
 * console.log(v.cpu.version, v.gpu?.runtime ?? v.gpu?.error, v.nccl?.version);
 * ```
 */
export function nativeVersions(request: NativeVersionsRequest = {}): NativeVersions {
  const out: NativeVersions = {
    cpu: libraryVersion(() => {
      const lib = cpuKernels();
      return { path: lib.path, version: buildHash(lib) };
    }),
  };
  if (request.gpu) Object.assign(out, gpuStack(request.gpu));
  if (request.gloo) {
    let glooVersion: string | null = null;
    const lib = libraryVersion(() => {
      const info = glooBuildInfo();
      glooVersion = info.version;
      return { path: glooLibrary().path, version: info.buildHash };
    });
    out.gloo = { ...lib, glooVersion };
  }
  return out;
}
