/**
 * gpu-check step 1: what dtrain finds on this machine — the device it would
 * use, every library and where it was found (or every folder searched), the
 * GPUs, driver, runtime, cuBLASLt and NCCL versions — or exactly what is
 * missing. Always exits 0 once it has said so; its last lines are
 * `SUMMARY <one line>` and `GPU_OK 1|0` for run.sh. DTRAIN_DEVICE=cuda-emu
 * describes the emulated GPU instead.
 *
 *   deno run -A scripts/gpu_check/env.ts
 */
import { cudaAvailability } from "../../ffi/cuda_discovery.ts";
import { openCudaBackend } from "../../tensor/cuda_backend.ts";
import { cudaKernels, CudaRuntime } from "../../ffi/cuda.ts";
import { cudaLibraryDirs } from "../../ffi/cuda_libs.ts";
import { ncclLibrary } from "../../ffi/nccl.ts";
import { cString } from "../../ffi/native.ts";
import { checkFlavor } from "./_harness.ts";

const flavor = checkFlavor();
const a = cudaAvailability(undefined, flavor);
console.log(
  `device    ${flavor}${flavor === "cuda-emu" ? " (the emulated GPU: a test device)" : ""}`,
);
for (const [role, path] of Object.entries(a.libraries)) {
  console.log(`${role.padEnd(9)} ${path ?? "(not found)"}`);
}
if (flavor === "cuda") {
  const dirs = cudaLibraryDirs();
  console.log(`searched  ${dirs.length} folders: ${dirs.join(", ")}`);
}

/** nvidia-smi's answer to a query, or null where it is missing. */
function smi(query: string): string | null {
  try {
    const r = new Deno.Command("nvidia-smi", {
      args: [`--query-gpu=${query}`, "--format=csv,noheader"],
      stdout: "piped",
      stderr: "null",
    }).outputSync();
    return r.success ? new TextDecoder().decode(r.stdout).trim() : null;
  } catch {
    return null;
  }
}

if (!a.ok) {
  console.log(`CUDA is not usable: ${a.reason}`);
  const gpus = flavor === "cuda" ? smi("name,driver_version") : null;
  if (gpus) console.log(`nvidia-smi sees: ${gpus.replaceAll("\n", "; ")}`);
  console.log(`SUMMARY no usable GPU: ${a.summary}`);
  console.log("GPU_OK 0");
  Deno.exit(0);
}
const b = openCudaBackend(flavor);
const rt = new CudaRuntime(cudaKernels());
const lt = rt.loadCublasLt(a.libraries.cublasLt);
const ltText = `${Math.floor(lt / 10000)}.${Math.floor((lt % 10000) / 100)}.${lt % 100}`;
const gpus: string[] = [];
for (let i = 0; i < a.deviceCount; i++) {
  const d = rt.deviceInfo(i);
  const line = `${d.name}, sm_${d.capability.join("")}, ${d.multiprocessors} SMs, ` +
    `${(d.totalBytes / 2 ** 30).toFixed(1)} GiB, L2 ${(d.l2Bytes / 2 ** 20).toFixed(0)} MiB`;
  console.log(`GPU ${i}     ${line}`);
  gpus.push(d.name);
}
const mem = rt.memInfo();
console.log(`free      ${(mem.freeBytes / 2 ** 30).toFixed(1)} GiB on GPU ${b.index}`);
console.log(
  `backend   ${cString(b.lib.symbols.dt_backend_name())}, build ${
    cString(b.lib.symbols.dt_build_hash())
  }`,
);
const driverRelease = flavor === "cuda" ? smi("driver_version")?.split("\n")[0] ?? null : null;
console.log(
  `versions  driver ${a.driverVersion}${driverRelease ? ` (${driverRelease})` : ""}, runtime ` +
    `${a.runtimeVersion} (static), cuBLASLt ${ltText}`,
);
let nccl = "NCCL not usable";
try {
  const n = ncclLibrary(
    undefined,
    flavor === "cuda-emu" ? a.libraries.nccl ?? undefined : undefined,
  );
  nccl = `NCCL ${n.version}`;
  console.log(`NCCL      ${n.version} (${n.path})`);
} catch (e) {
  console.log(`NCCL      not usable: ${(e as Error).message}`);
}
console.log(
  `RESULT ${JSON.stringify({ gpu: gpus[0], driver: a.driverVersion, gpus: a.deviceCount })}`,
);
console.log(
  `SUMMARY ${gpus[0]} x${a.deviceCount}, driver ${driverRelease ?? a.driverVersion}, CUDA ` +
    `${a.runtimeVersion}, cuBLASLt ${ltText}, ${nccl}`,
);
console.log("GPU_OK 1");
