/**
 * The CUDA backend: whether this process can compute on a GPU (and, if not,
 * exactly what is missing), and the opening of the GPU backend — one GPU per
 * local rank (LOCAL_RANK modulo the visible GPUs; CUDA_VISIBLE_DEVICES is
 * applied by the CUDA runtime itself) with the library's compute stream.
 * tensor/backend.ts opens it on setDevice("cuda").
 */
import type { Backend } from "./backend.ts";
import { kernelCalls } from "../ffi/calls.ts";
import { CUDA_LIBRARY_NAME, cudaKernels, CudaRuntime } from "../ffi/cuda.ts";
import { describeMissing, findCudaLibrary, type LibrarySearchOptions } from "../ffi/cuda_libs.ts";
import { findLibrary } from "../ffi/native.ts";

/** What was found, whether or not CUDA is usable. */
export interface CudaLibraries {
  /** libdtrain_cuda.so, or null when it is not built */
  kernels: string | null;
  driver: string | null;
  cublasLt: string | null;
  /** needed only by process groups of several GPU ranks */
  nccl: string | null;
  /** not needed (libdtrain_cuda.so links the runtime statically); reported for doctor */
  cudart: string | null;
}

/** A usable GPU setup. */
export interface CudaAvailable {
  ok: true;
  libraries: CudaLibraries;
  deviceCount: number;
  /** name of GPU 0 */
  deviceName: string;
  driverVersion: string;
  runtimeVersion: string;
}

/** An unusable one, with every reason. */
export interface CudaUnavailable {
  ok: false;
  /** names each missing piece and where it was looked for */
  reason: string;
  /** a few words per missing piece, for one-line notices */
  summary: string;
  libraries: CudaLibraries;
}

export type CudaAvailability = CudaAvailable | CudaUnavailable;

/** libdtrain_cuda.so's path, or why it was not found. */
function findKernels(): { path: string | null; why: string } {
  try {
    return { path: findLibrary(CUDA_LIBRARY_NAME), why: "" };
  } catch (e) {
    return { path: null, why: (e as Error).message };
  }
}

/** Searches the libraries and, when they are all there, asks the driver for GPUs. */
function probe(opts: LibrarySearchOptions): CudaAvailability {
  const driver = findCudaLibrary("driver", opts);
  const cublasLt = findCudaLibrary("cublasLt", opts);
  const kernels = findKernels();
  const libraries: CudaLibraries = {
    kernels: kernels.path,
    driver: driver.path,
    cublasLt: cublasLt.path,
    nccl: findCudaLibrary("nccl", opts).path,
    cudart: findCudaLibrary("cudart", opts).path,
  };
  const missing: string[] = [];
  const short: string[] = [];
  if (!kernels.path) {
    missing.push(
      `the CUDA kernel library is missing (${kernels.why}; it is built where nvcc is on PATH)`,
    );
    short.push(`${CUDA_LIBRARY_NAME} not built`);
  }
  if (!driver.path) {
    missing.push(`the NVIDIA driver is missing: ${describeMissing(driver)}`);
    short.push(`NVIDIA driver (${driver.files[0]}) not found`);
  }
  if (!cublasLt.path) {
    missing.push(`cuBLASLt is missing: ${describeMissing(cublasLt)}`);
    short.push(`cuBLASLt (${cublasLt.files[0]}) not found`);
  }
  if (missing.length) {
    return { ok: false, reason: missing.join("; "), summary: short.join(", "), libraries };
  }
  try {
    const rt = new CudaRuntime(cudaKernels(driver.path));
    const deviceCount = rt.deviceCount();
    if (deviceCount === 0) {
      const visible = Deno.env.get("CUDA_VISIBLE_DEVICES");
      const reason = `the driver sees no GPU${
        visible !== undefined ? ` (CUDA_VISIBLE_DEVICES=${visible})` : ""
      }`;
      return { ok: false, reason, summary: reason, libraries };
    }
    const { driver: driverVersion, runtime: runtimeVersion } = rt.versions();
    return {
      ok: true,
      libraries,
      deviceCount,
      deviceName: rt.deviceInfo(0).name,
      driverVersion,
      runtimeVersion,
    };
  } catch (e) {
    const reason = `no usable GPU: ${(e as Error).message}`;
    return { ok: false, reason, summary: reason.split("\n")[0]!.slice(0, 160), libraries };
  }
}

let cached: CudaAvailability | undefined;

/**
 * Whether this process can compute on a GPU; when not, `reason` names
 * everything that is missing (the kernel library, the driver, cuBLASLt, a
 * GPU) and where it was looked for. The answer for the default search is
 * cached; passing `opts` searches again.
 *
 * @example
 * ```ts
 * const a = cudaAvailability();
 * console.log(a.ok ? `GPU: ${a.deviceName}` : `no GPU: ${a.reason}`);
 * ```
 */
export function cudaAvailability(opts?: LibrarySearchOptions): CudaAvailability {
  if (opts) return probe(opts);
  cached ??= probe({});
  return cached;
}

let opened: Backend | undefined;

/**
 * Opens the GPU backend of this process (once): loads cuBLASLt from where it
 * was found, picks GPU LOCAL_RANK modulo the visible count, and returns the
 * backend whose kernels run on the library's compute stream.
 * DTRAIN_ALLOW_TF32=1 lets f32 GEMMs use TF32.
 */
export function openCudaBackend(): Backend {
  if (opened) return opened;
  const a = cudaAvailability();
  if (!a.ok) throw new Error(`Cannot use device "cuda": ${a.reason}`);
  const lib = cudaKernels(a.libraries.driver);
  const rt = new CudaRuntime(lib);
  const localRank = Number(Deno.env.get("LOCAL_RANK") ?? "0");
  if (!Number.isInteger(localRank) || localRank < 0) {
    throw new RangeError(`LOCAL_RANK=${Deno.env.get("LOCAL_RANK")} is not a non-negative integer`);
  }
  rt.setDevice(localRank % a.deviceCount); // first: everything after lives on this GPU
  rt.loadCublasLt(a.libraries.cublasLt);
  rt.allowTf32(Deno.env.get("DTRAIN_ALLOW_TF32") === "1");
  const stream = rt.computeStream();
  opened = { device: "cuda", lib, call: kernelCalls(lib, stream), stream };
  return opened;
}
