/**
 * gpu-check step 1b: what dtrain finds on this machine — the libraries and
 * where they are, the GPU, driver and runtime versions, cuBLASLt's version
 * and NCCL's — or exactly what is missing. Exits 1 when CUDA is not usable.
 *
 *   deno run -A scripts/gpu_check/env.ts
 */
import { cudaAvailability, openCudaBackend } from "../../tensor/cuda_backend.ts";
import { cudaKernels, CudaRuntime } from "../../ffi/cuda.ts";
import { ncclLibrary } from "../../ffi/nccl.ts";
import { cString } from "../../ffi/native.ts";

const a = cudaAvailability();
for (const [role, path] of Object.entries(a.libraries)) {
  console.log(`${role.padEnd(9)} ${path ?? "(not found)"}`);
}
if (!a.ok) {
  console.log(`CUDA is not usable: ${a.reason}`);
  Deno.exit(1);
}
const b = openCudaBackend();
const rt = new CudaRuntime(cudaKernels());
const cublasLt = rt.loadCublasLt(a.libraries.cublasLt);
const info = rt.deviceInfo(0);
const mem = rt.memInfo();
console.log(`backend   ${cString(b.lib.symbols.dt_backend_name())}`);
console.log(
  `GPU 0     ${info.name}, sm_${info.capability.join("")}, ${info.multiprocessors} SMs, ` +
    `${(info.totalBytes / 2 ** 30).toFixed(1)} GiB (${
      (mem.freeBytes / 2 ** 30).toFixed(1)
    } free), L2 ${(info.l2Bytes / 2 ** 20).toFixed(0)} MiB`,
);
console.log(
  `versions  driver ${a.driverVersion}, runtime ${a.runtimeVersion} (static), cuBLASLt ${cublasLt}`,
);
try {
  const n = ncclLibrary();
  console.log(`NCCL      ${n.version} (${n.path})`);
} catch (e) {
  console.log(`NCCL      not usable: ${(e as Error).message}`);
}
console.log(
  `RESULT ${JSON.stringify({ gpu: info.name, driver: a.driverVersion, gpus: a.deviceCount })}`,
);
