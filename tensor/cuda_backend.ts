/**
 * The CUDA backend: the opening of the GPU backend — GPU LOCAL_RANK of this node
 * (CUDA_VISIBLE_DEVICES is applied by the CUDA runtime itself) with the library's compute stream,
 * on a real GPU ("cuda") or the emulated device ("cuda-emu"). Whether a GPU is there, and which
 * one a rank takes, is GPU discovery (ffi/cuda_discovery.ts). tensor/backend.ts opens it.
 */
import type { Backend } from "./backend.ts";
import { kernelCalls } from "../ffi/calls.ts";
import { countingCalls, setWorkReader } from "../profile/call_count.ts";
import { cudaKernels, CudaRuntime } from "../ffi/cuda.ts";
import { CUDA_LIBRARY_FILES } from "../ffi/cuda_libs.ts";
import {
  cudaAvailability,
  type CudaFlavor,
  type CudaLibraries,
  cudaMajor,
  gpuForLocalRank,
  gpuSharing,
} from "../ffi/cuda_discovery.ts";

/** This process's LOCAL_RANK (0 outside a launcher), checked. */
function localRank(): number {
  const raw = Deno.env.get("LOCAL_RANK") ?? "0";
  const r = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(r)) {
    throw new RangeError(`LOCAL_RANK=${raw} is not a non-negative integer`);
  }
  return r;
}

/** The opened GPU backend and what it runs on. */
export interface CudaBackend extends Backend {
  readonly device: "cuda";
  readonly kind: CudaFlavor;
  /** the GPU's index among the visible ones */
  readonly index: number;
  /** the files behind it (NCCL's is what process groups open) */
  readonly libraries: CudaLibraries;
  /** the GPU's name */
  readonly gpuName: string;
  /** Device work the CUDA library queued since it was loaded: kernel launches, cuBLASLt
   *  matmuls, memsets and device copies (always counted, at the cost of an atomic add each). */
  workCount(): { launches: number; matmuls: number; copies: number };
}

let opened: CudaBackend | undefined;

/** The GPU backend of this process when one was opened, else null. */
export function openedCudaBackend(): CudaBackend | null {
  return opened ?? null;
}

/**
 * Opens the GPU backend of this process (once): picks GPU LOCAL_RANK of the
 * visible ones (see gpuForLocalRank), loads cuBLASLt (whose major version
 * must be the CUDA runtime's), and returns the backend whose kernels run on
 * the library's compute stream. DTRAIN_ALLOW_TF32=1 lets f32 GEMMs use TF32.
 * "cuda-emu" opens the emulated device instead; a process uses one flavour.
 */
export function openCudaBackend(flavor: CudaFlavor = "cuda"): CudaBackend {
  if (opened) {
    if (opened.kind !== flavor) {
      throw new Error(
        `Cannot use device "${flavor}": this process already computes on "${opened.kind}"`,
      );
    }
    return opened;
  }
  const a = cudaAvailability(undefined, flavor);
  if (!a.ok) throw new Error(`Cannot use device "${flavor}": ${a.reason}`);
  const lib = flavor === "cuda-emu"
    ? cudaKernels(null, a.libraries.kernels!)
    : cudaKernels(a.libraries.driver);
  const rt = new CudaRuntime(lib);
  const index = gpuForLocalRank(localRank(), a.deviceCount, gpuSharing());
  rt.setDevice(index); // first: everything after lives on this GPU
  const ltVersion = rt.loadCublasLt(a.libraries.cublasLt);
  const ltMajor = Math.floor(ltVersion / 10000);
  if (ltMajor !== cudaMajor(a.runtimeVersion)) {
    throw new Error(
      `Cannot use device "${flavor}": ${a.libraries.cublasLt} is cuBLASLt ${ltMajor}, but the CUDA ` +
        `library was built with CUDA ${a.runtimeVersion}; cuBLASLt's major version must match ` +
        `(${CUDA_LIBRARY_FILES.cublasLt.join(", ")})`,
    );
  }
  rt.allowTf32(Deno.env.get("DTRAIN_ALLOW_TF32") === "1");
  const stream = rt.computeStream();
  if (countingCalls) {
    setWorkReader(() => {
      const w = rt.workCount();
      return [w.launches, w.matmuls, w.copies];
    });
  }
  opened = {
    device: "cuda",
    kind: flavor,
    index,
    libraries: a.libraries,
    gpuName: rt.deviceInfo(index).name,
    lib,
    call: kernelCalls(lib, stream),
    stream,
    workCount: () => rt.workCount(),
  };
  return opened;
}
