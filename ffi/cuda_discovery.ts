/**
 * GPU discovery: whether this process can compute on a GPU and, if not, exactly what is missing —
 * dtrain's CUDA kernel library, the NVIDIA driver, cuBLASLt of the runtime's major version, NCCL,
 * a visible GPU — and which GPU a local rank takes. Two flavours share everything but their
 * files: "cuda" (libdtrain_cuda.so, the driver, cuBLASLt, NCCL) and "cuda-emu", the emulated
 * device that runs the same CUDA sources on the CPU (kernels/cuda_emu, with stand-ins for
 * cuBLASLt and NCCL). The launcher, `dtrain doctor` and the CUDA backend (tensor/cuda_backend.ts,
 * which opens the GPU) all ask here; where each file is searched for is cuda_libs.ts.
 */
import { CUDA_EMU_LIBRARIES, CUDA_LIBRARY_NAME, cudaKernels, CudaRuntime } from "./cuda.ts";
import { describeMissing, findCudaLibrary, type LibrarySearchOptions } from "./cuda_libs.ts";
import { findLibrary, libraryDirs } from "./native.ts";

/** Which CUDA: a real GPU, or the emulated device (slow; for tests). */
export type CudaFlavor = "cuda" | "cuda-emu";

/** The emulated device's files, built beside the CPU library where g++ exists. */
export const EMULATED_FILES = {
  ...CUDA_EMU_LIBRARIES,
  /** its runtime (the others link it; reported as the real runtime is) */
  cudart: "libdtrain_cudart_emu.so",
} as const;

/** What was found, whether or not CUDA is usable. */
export interface CudaLibraries {
  /** libdtrain_cuda.so (or the emulated build), or null when it is not built */
  kernels: string | null;
  /** null for the emulated device, which needs none */
  driver: string | null;
  /** cuBLASLt, the matmul library (null when it is not found). */
  cublasLt: string | null;
  /** needed only by process groups of several GPU ranks */
  nccl: string | null;
  /** not needed (libdtrain_cuda.so links the runtime statically); reported for doctor */
  cudart: string | null;
}

/** A usable GPU setup. */
export interface CudaAvailable {
  /** Marks a usable setup. */
  ok: true;
  /** A real GPU ("cuda") or the emulated one ("cuda-emu"). */
  flavor: CudaFlavor;
  /** The libraries found. */
  libraries: CudaLibraries;
  /** Number of visible GPUs. */
  deviceCount: number;
  /** name of GPU 0 */
  deviceName: string;
  /** The CUDA driver's version, as the driver reports it. */
  driverVersion: string;
  /** The CUDA runtime's version the kernels were built with. */
  runtimeVersion: string;
}

/** An unusable one, with every reason. */
export interface CudaUnavailable {
  /** Marks an unusable setup. */
  ok: false;
  /** names each missing piece and where it was looked for */
  reason: string;
  /** a few words per missing piece, for one-line notices */
  summary: string;
  /** The libraries found (those missing are null). */
  libraries: CudaLibraries;
}

/**
 * Whether this machine can compute on a GPU (`ok`), with what was found or why not (`dtrain doctor`
 * prints it).
 */
export type CudaAvailability = CudaAvailable | CudaUnavailable;

/** A library of dtrain's own (ffi/native.ts search), or why it was not found. */
function findOwn(name: string): { path: string | null; why: string } {
  try {
    return { path: findLibrary(name), why: "" };
  } catch (e) {
    return { path: null, why: (e as Error).message };
  }
}

/** "13.0" -> 13 */
export function cudaMajor(version: string): number {
  return Number(version.split(".")[0]);
}

/**
 * cuBLASLt for the runtime's major version: libcublasLt.so.<major> first;
 * a cuBLASLt of another major version is reported as the mismatch it is.
 *
 * @example
 * ```ts
 * findCublasLt(13, {}).path; // "/usr/local/lib/python3.12/dist-packages/nvidia/cu13/lib/libcublasLt.so.13"
 * ```
 */
export function findCublasLt(
  runtimeMajor: number,
  opts: LibrarySearchOptions,
): { path: string | null; why: string } {
  const wanted = [`libcublasLt.so.${runtimeMajor}`, "libcublasLt.so"];
  const exact = findCudaLibrary("cublasLt", opts, wanted);
  if (exact.path) return { path: exact.path, why: "" };
  const other = findCudaLibrary("cublasLt", opts);
  if (other.path) {
    return {
      path: null,
      why: `cuBLASLt for CUDA ${runtimeMajor} (libcublasLt.so.${runtimeMajor}) not found; ` +
        `${other.path} is for another CUDA major version, and the CUDA library was built with ` +
        `CUDA ${runtimeMajor} (pip install nvidia-cublas for CUDA ${runtimeMajor}, or add its lib folder to LD_LIBRARY_PATH)`,
    };
  }
  return { path: null, why: `cuBLASLt is missing: ${describeMissing(exact)}` };
}

/** Searches the libraries and, when they are all there, asks the driver for GPUs. */
function probe(opts: LibrarySearchOptions): CudaAvailability {
  const driver = findCudaLibrary("driver", opts);
  const kernels = findOwn(CUDA_LIBRARY_NAME);
  const libraries: CudaLibraries = {
    kernels: kernels.path,
    driver: driver.path,
    cublasLt: null,
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
  if (missing.length) {
    const cublasLt = findCudaLibrary("cublasLt", opts);
    libraries.cublasLt = cublasLt.path;
    if (!cublasLt.path) {
      missing.push(`cuBLASLt is missing: ${describeMissing(cublasLt)}`);
      short.push(`cuBLASLt (${cublasLt.files[0]}) not found`);
    }
    return { ok: false, reason: missing.join("; "), summary: short.join(", "), libraries };
  }
  try {
    const rt = new CudaRuntime(cudaKernels(driver.path));
    const { driver: driverVersion, runtime: runtimeVersion } = rt.versions();
    const lt = findCublasLt(cudaMajor(runtimeVersion), opts);
    libraries.cublasLt = lt.path;
    if (!lt.path) {
      return { ok: false, reason: lt.why, summary: lt.why.split(";")[0]!, libraries };
    }
    const deviceCount = rt.deviceCount();
    if (deviceCount === 0) {
      const visible = Deno.env.get("CUDA_VISIBLE_DEVICES");
      const reason = `the driver sees no GPU${
        visible !== undefined ? ` (CUDA_VISIBLE_DEVICES=${visible})` : ""
      }`;
      return { ok: false, reason, summary: reason, libraries };
    }
    return {
      ok: true,
      flavor: "cuda",
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

/**
 * The NCCL stand-in's file: DTRAIN_NCCL_EMU_LIB names another build of it
 * (the lifecycle tests' AddressSanitizer one, loaded with libasan preloaded).
 */
function emulatedNccl(): { path: string | null; why: string } {
  const file = Deno.env.get("DTRAIN_NCCL_EMU_LIB");
  if (file) return { path: file, why: "" };
  return findOwn(EMULATED_FILES.nccl);
}

/**
 * The emulated device's kernel library: the sanitizer build when
 * DTRAIN_EMU_RACECHECK=1 or DTRAIN_EMU_MEMCHECK=1 asks for racecheck or
 * memcheck (docs/GPU.md), else the plain one.
 */
export function emulatedKernelsFile(
  get: (n: string) => string | undefined = (n) => Deno.env.get(n),
): string {
  const sanitize = get("DTRAIN_EMU_RACECHECK") === "1" || get("DTRAIN_EMU_MEMCHECK") === "1";
  return sanitize ? EMULATED_FILES.kernelsSanitize : EMULATED_FILES.kernels;
}

/** The emulated device: its libraries in dtrain's library folders, then its devices. */
function probeEmulated(): CudaAvailability {
  const kernels = findOwn(emulatedKernelsFile());
  const cublasLt = findOwn(EMULATED_FILES.cublasLt);
  const libraries: CudaLibraries = {
    kernels: kernels.path,
    driver: null,
    cublasLt: cublasLt.path,
    nccl: emulatedNccl().path,
    cudart: findOwn(EMULATED_FILES.cudart).path,
  };
  const absent = [
    [emulatedKernelsFile(), kernels.path],
    [EMULATED_FILES.cublasLt, cublasLt.path],
  ].filter(([, p]) => p === null).map(([n]) => n);
  if (absent.length) {
    const where = libraryDirs().join(", ") || "(no folders)";
    return {
      ok: false,
      reason: `the emulated CUDA device is not built: ${absent.join(", ")} not found in ${where} ` +
        `(g++ builds it: \`deno task native\` in a dtrain checkout${
          emulatedKernelsFile() === EMULATED_FILES.kernels
            ? ""
            : ", with `--for cuda-emu-sanitize` for the sanitizers"
        })`,
      summary: `emulated CUDA device not built`,
      libraries,
    };
  }
  try {
    const rt = new CudaRuntime(cudaKernels(null, kernels.path!));
    const { driver: driverVersion, runtime: runtimeVersion } = rt.versions();
    const deviceCount = rt.deviceCount();
    if (deviceCount === 0) {
      const reason = `the emulated device shows no GPU (CUDA_VISIBLE_DEVICES=${
        Deno.env.get("CUDA_VISIBLE_DEVICES") ?? ""
      })`;
      return { ok: false, reason, summary: reason, libraries };
    }
    return {
      ok: true,
      flavor: "cuda-emu",
      libraries,
      deviceCount,
      deviceName: rt.deviceInfo(0).name,
      driverVersion,
      runtimeVersion,
    };
  } catch (e) {
    const reason = `the emulated CUDA device does not start: ${(e as Error).message}`;
    return { ok: false, reason, summary: reason.slice(0, 160), libraries };
  }
}

const cached = new Map<CudaFlavor, CudaAvailability>();

/**
 * Whether this process can compute on a GPU of `flavor` (default: a real
 * one); when not, `reason` names everything that is missing (the kernel
 * library, the driver, cuBLASLt for the runtime's CUDA version, a GPU) and
 * where it was looked for. The answer for the default search is cached;
 * passing `opts` searches again.
 *
 * @example
 * ```ts
 * const a = cudaAvailability();
 * console.log(a.ok ? `GPU: ${a.deviceName}` : `no GPU: ${a.reason}`);
 * ```
 */
export function cudaAvailability(
  opts?: LibrarySearchOptions,
  flavor: CudaFlavor = "cuda",
): CudaAvailability {
  if (flavor === "cuda-emu") {
    let a = cached.get(flavor);
    if (!a) cached.set(flavor, a = probeEmulated());
    return a;
  }
  if (opts) return probe(opts);
  let a = cached.get(flavor);
  if (!a) cached.set(flavor, a = probe({}));
  return a;
}

/** DTRAIN_SHARE_GPUS=1: ranks beyond the visible GPUs share them (a test mode; see the launcher). */
export function gpuSharing(
  get: (n: string) => string | undefined = (n) => Deno.env.get(n),
): boolean {
  return get("DTRAIN_SHARE_GPUS") === "1";
}

/**
 * The GPU of local rank `localRank` among `count` visible ones: the rank's
 * own, GPU LOCAL_RANK. A rank without one is refused (NCCL cannot put two
 * ranks of a communicator on one device), unless GPU sharing is on, where it
 * takes LOCAL_RANK modulo the count.
 *
 * @example
 * ```ts
 * gpuForLocalRank(3, 8, false); // 3
 * ```
 */
export function gpuForLocalRank(localRank: number, count: number, share: boolean): number {
  if (localRank < count) return localRank;
  if (share) return localRank % count;
  const visible = Deno.env.get("CUDA_VISIBLE_DEVICES");
  throw new RangeError(
    `Local rank ${localRank} has no GPU of its own: this machine shows ${count} GPU(s)` +
      `${visible !== undefined ? ` (CUDA_VISIBLE_DEVICES=${visible})` : ""}, one per local rank; ` +
      `start at most ${count} rank(s) per node (--nproc ${count}) or compute on the CPU (--device cpu)`,
  );
}
