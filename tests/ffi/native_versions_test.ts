/**
 * nativeVersions() (ffi/native_versions.ts) on the GPU stacks this machine has: the emulated
 * device's libraries with their build hashes, its runtime and the NCCL stand-in's version, found
 * where GPU discovery finds them; and, where no NVIDIA driver is installed, a real-GPU request
 * that answers why instead of throwing.
 */
import assert from "node:assert/strict";
import { nativeVersions } from "../../ffi/native_versions.ts";
import { cudaAvailability } from "../../ffi/cuda_discovery.ts";
import { HAVE_EMU } from "../gpu/_emu.ts";

/** The build hash the native build wrote beside a library. */
const recordedHash = (path: string) => Deno.readTextFileSync(`${path}.hash`).trim();

Deno.test({
  name: "nativeVersions() describes the emulated GPU stack as discovery found it",
  ignore: !HAVE_EMU,
  fn() {
    const a = cudaAvailability(undefined, "cuda-emu");
    assert.ok(a.ok, a.ok ? "" : a.reason);
    const n = nativeVersions({ gpu: "cuda-emu" });
    const gpu = n.gpu!;
    assert.equal(gpu.flavor, "cuda-emu");
    assert.equal(gpu.error, null);
    assert.equal(gpu.kernels.path, a.libraries.kernels);
    assert.equal(gpu.kernels.version, recordedHash(a.libraries.kernels!));
    assert.deepEqual([gpu.runtime, gpu.driver], [a.runtimeVersion, a.driverVersion]);
    assert.equal(gpu.cublasLt, a.libraries.cublasLt);
    assert.equal(n.nccl!.path, a.libraries.nccl);
    assert.match(n.nccl!.version ?? "", /^\d+\.\d+\.\d+$/, `NCCL stand-in: ${n.nccl!.error}`);
    assert.equal(n.cpu.version, recordedHash(n.cpu.path!));
  },
});

Deno.test({
  name: "nativeVersions() of a real GPU without a driver says why, and throws nothing",
  ignore: (() => {
    try {
      Deno.statSync("/dev/nvidiactl");
      return true; // a GPU machine: the other answer is right there
    } catch {
      return false;
    }
  })(),
  fn() {
    const a = cudaAvailability();
    assert.equal(a.ok, false, "a GPU stack without /dev/nvidiactl");
    const gpu = nativeVersions({ gpu: "cuda" }).gpu!;
    assert.deepEqual([gpu.runtime, gpu.driver, gpu.kernels.version], [null, null, null]);
    assert.equal(gpu.error, a.reason);
    assert.equal(gpu.kernels.error, a.reason);
  },
});
