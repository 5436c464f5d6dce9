/**
 * Device choice (tensor/device_choice.ts): "auto" falls back to the CPU with a
 * one-line notice when no GPU is usable, "cuda" throws naming what is
 * missing, "cpu" is always the CPU; and setDevice("cuda"), which opens the
 * CUDA backend, gives the same clear error. The machine-dependent cases run
 * where there is no usable GPU (as on the build machines).
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { type CudaAvailability, cudaAvailability } from "../../ffi/cuda_discovery.ts";
import { resolveDevice } from "../../tensor/device_choice.ts";
import { setDevice } from "../../tensor/backend.ts";

buildNative({ quiet: true });

const NOT_FOUND: CudaAvailability = {
  ok: false,
  reason: "the NVIDIA driver is missing: libcuda.so.1 (or libcuda.so) not found; looked in /x, /y",
  summary: "NVIDIA driver (libcuda.so.1) not found",
  libraries: {
    kernels: "/b/libdtrain_cuda.so",
    driver: null,
    cublasLt: null,
    nccl: null,
    cudart: null,
  },
};
const FOUND: CudaAvailability = {
  ok: true,
  flavor: "cuda",
  libraries: {
    kernels: "/b/k.so",
    driver: "/d/libcuda.so.1",
    cublasLt: "/c/libcublasLt.so.13",
    nccl: null,
    cudart: null,
  },
  deviceCount: 1,
  deviceName: "NVIDIA H200",
  driverVersion: "13.0",
  runtimeVersion: "13.0",
};

Deno.test("resolveDevice() falls back to the CPU for auto with one notice line, and throws for cuda", () => {
  const lines: string[] = [];
  assert.equal(
    resolveDevice("auto", { availability: NOT_FOUND, notice: (l) => lines.push(l) }),
    "cpu",
  );
  assert.equal(lines.length, 1);
  assert.equal(
    lines[0],
    "dtrain: no usable GPU (NVIDIA driver (libcuda.so.1) not found; `dtrain doctor` says more); running on the CPU",
  );
  assert.throws(
    () => resolveDevice("cuda", { availability: NOT_FOUND }),
    /^Error: Cannot use --device cuda: the NVIDIA driver is missing: libcuda\.so\.1 .* looked in \/x, \/y\. Run `dtrain doctor`/,
  );
});

Deno.test("resolveDevice() takes the GPU when one is usable, and cpu whatever the GPU", () => {
  const lines: string[] = [];
  assert.equal(
    resolveDevice("auto", { availability: FOUND, notice: (l) => lines.push(l) }),
    "cuda",
  );
  assert.equal(resolveDevice("cuda", { availability: FOUND }), "cuda");
  assert.equal(resolveDevice("cpu", { availability: NOT_FOUND }), "cpu");
  assert.deepEqual(lines, []);
  assert.throws(
    () => resolveDevice("gpu"),
    /Unknown device "gpu": expected "auto", "cpu", "cuda" or "cuda-emu"/,
  );
});

const MACHINE = cudaAvailability();

Deno.test({
  name: "on this machine without a usable GPU, auto falls back and cuda names each missing piece",
  ignore: MACHINE.ok,
  fn() {
    assert.ok(!MACHINE.ok);
    const lines: string[] = [];
    assert.equal(resolveDevice("auto", { notice: (l) => lines.push(l) }), "cpu");
    assert.equal(lines.length, 1);
    assert.ok(!lines[0]!.includes("\n"));
    let message = "";
    try {
      resolveDevice("cuda");
    } catch (e) {
      message = (e as Error).message;
    }
    assert.ok(message.startsWith("Cannot use --device cuda: "), message);
    if (!MACHINE.libraries.driver) {
      assert.match(
        message,
        /the NVIDIA driver is missing: libcuda\.so\.1 .*not found; looked in \//,
      );
    }
    if (!MACHINE.libraries.cublasLt) {
      assert.match(message, /cuBLASLt is missing: libcublasLt\.so\.13/);
    }
    if (!MACHINE.libraries.kernels) assert.match(message, /the CUDA kernel library is missing/);
  },
});

Deno.test({
  name: 'setDevice("cuda") without a usable GPU throws the reason from the CUDA backend',
  ignore: MACHINE.ok,
  fn() {
    assert.throws(() => setDevice("cuda"), /^Error: Cannot use device "cuda": /);
    assert.equal(setDevice("cpu").device, "cpu");
  },
});
