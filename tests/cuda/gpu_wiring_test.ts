/**
 * The GPU wiring that needs no GPU: which GPU each local rank gets (and the
 * refusal of a rank without one), GPU sharing's NCCL host identities, the
 * launcher's one line, --nproc bounds for cuda and cuda-emu, the loader
 * cache in the library search, and cuBLASLt matched to the CUDA runtime's
 * major version.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { cudaLibraryDirs, ldconfigDirs } from "../../ffi/cuda_libs.ts";
import { type CudaAvailability, findCublasLt, gpuForLocalRank } from "../../ffi/cuda_discovery.ts";
import { describePlan, planDevices, rankDeviceEnv } from "../../launch/device_plan.ts";
import { checkNproc, NprocLimitError } from "../../launch/nproc_limit.ts";

const TWO_GPUS: CudaAvailability = {
  ok: true,
  flavor: "cuda",
  libraries: { kernels: "/k", driver: "/d", cublasLt: "/c", nccl: "/n", cudart: null },
  deviceCount: 2,
  deviceName: "NVIDIA H200",
  driverVersion: "13.0",
  runtimeVersion: "13.0",
};

Deno.test("gpuForLocalRank() gives rank r GPU r, refuses a rank without one, shares only when asked", () => {
  assert.equal(gpuForLocalRank(0, 8, false), 0);
  assert.equal(gpuForLocalRank(7, 8, false), 7);
  assert.throws(
    () => gpuForLocalRank(2, 2, false),
    /^RangeError: Local rank 2 has no GPU of its own: this machine shows 2 GPU\(s\).*one per local rank; start at most 2 rank\(s\) per node \(--nproc 2\) or compute on the CPU/,
  );
  assert.equal(gpuForLocalRank(3, 2, true), 1);
});

Deno.test("the launcher's plan names each rank's GPU once, with global ranks on node 1", () => {
  const plan = planDevices("cuda", 2, TWO_GPUS, false, () => "NVIDIA H200");
  assert.deepEqual(plan.gpus, [0, 1]);
  assert.equal(
    describePlan(plan, 1, 2),
    "ranks compute on cuda: rank 2 → GPU 0, rank 3 → GPU 1 (NVIDIA H200)",
  );
  assert.deepEqual(rankDeviceEnv(plan, 1, "gpu-7"), {});
  assert.equal(describePlan(planDevices("cpu", 2, null, false, () => ""), 0, 2), null);
  assert.match(
    describePlan(
      planDevices("cuda-emu", 1, { ...TWO_GPUS, flavor: "cuda-emu" }, false, () => ""),
      0,
      1,
    )!,
    /^ranks compute on cuda-emu, the emulated GPU \(the CUDA code run on the CPU: slow, a test device\): rank 0 → GPU 0$/,
  );
});

Deno.test("GPU sharing: ranks beyond the GPUs share them, each with its own NCCL host identity", () => {
  const plan = planDevices("cuda", 3, { ...TWO_GPUS }, true, (g) => `GPU-${g}`);
  assert.deepEqual(plan.gpus, [0, 1, 0]);
  assert.match(
    describePlan(plan, 0, 3)!,
    /rank 2 → GPU 0 .*GPU sharing is on \(DTRAIN_SHARE_GPUS=1\)/,
  );
  const ids = [0, 1, 2].map((l) => rankDeviceEnv(plan, l, "box").NCCL_HOSTID);
  assert.equal(new Set(ids).size, 3, `NCCL_HOSTID per rank: ${ids}`);
  // the emulated GPU's NCCL stand-in refuses shared devices as NCCL does, so it gets them too
  assert.equal(rankDeviceEnv({ ...plan, kind: "cuda-emu" }, 2, "box").NCCL_HOSTID, ids[2]);
});

Deno.test("--nproc is bounded by the GPUs for cuda and the emulated GPUs for cuda-emu, unless shared", () => {
  const cap = { cores: 2, oversubscribe: false };
  assert.throws(
    () => checkNproc(3, { ...cap, device: "cuda", gpus: 2 }),
    (e) => e instanceof NprocLimitError && /more than the 2 GPU\(s\) visible/.test(e.message),
  );
  assert.throws(
    () => checkNproc(9, { ...cap, device: "cuda-emu", gpus: 8 }),
    /--nproc 9 is more than the 8 emulated GPU\(s\)/,
  );
  checkNproc(8, { ...cap, device: "cuda-emu", gpus: 8 });
  checkNproc(4, { ...cap, device: "cuda", gpus: 1, shareGpus: true });
  assert.throws(
    () => checkNproc(2, { ...cap, device: "cuda", gpus: 0, shareGpus: true }),
    NprocLimitError,
  );
});

Deno.test("ldconfigDirs() reads the loader cache's folders, and the search adds them after the system's", () => {
  const text = `3 libs found in cache \`/etc/ld.so.cache'
\tlibnccl.so.2 (libc6,x86-64) => /opt/nccl/lib/libnccl.so.2
\tlibcuda.so.1 (libc6,x86-64) => /usr/lib64/libcuda.so.1
\tlibcudart.so.13 (libc6,x86-64) => /opt/nccl/lib/libcudart.so.13
`;
  assert.deepEqual(ldconfigDirs(text), ["/opt/nccl/lib", "/usr/lib64"]);
  const dirs = cudaLibraryDirs({
    env: () => undefined,
    systemDirs: ["/sys-a"],
    pythonPrefixes: [],
    ldconfig: () => text,
  });
  assert.deepEqual(dirs, ["/sys-a", "/opt/nccl/lib", "/usr/lib64"]);
});

Deno.test("findCublasLt() takes the runtime's major version and names a cuBLASLt of another one", () => {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-cublaslt-" });
  try {
    for (const f of ["old/libcublasLt.so.12", "new/libcublasLt.so.13"]) {
      Deno.mkdirSync(join(root, f, ".."), { recursive: true });
      Deno.writeFileSync(join(root, f), new Uint8Array(0));
    }
    const search = (dirs: string[]) => ({
      env: () => undefined,
      systemDirs: dirs.map((d) => join(root, d)),
      pythonPrefixes: [],
    });
    // a folder with the wrong major version comes first: the right one is still chosen
    assert.equal(
      findCublasLt(13, search(["old", "new"])).path,
      join(root, "new/libcublasLt.so.13"),
    );
    const only12 = findCublasLt(13, search(["old"]));
    assert.equal(only12.path, null);
    assert.match(
      only12.why,
      /cuBLASLt for CUDA 13 \(libcublasLt\.so\.13\) not found; .*old\/libcublasLt\.so\.12 is for another CUDA major version/,
    );
    assert.match(
      findCublasLt(13, search([])).why,
      /^cuBLASLt is missing: libcublasLt\.so\.13 \(or libcublasLt\.so\) not found/,
    );
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});
