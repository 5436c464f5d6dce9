/**
 * Every op of the kernel ABI, forward and backward, on the emulated CUDA
 * device against the CPU library, in CI with no GPU: the cases of the GPU
 * device check (scripts/gpu_check/op_cases.ts) at the emulated size set,
 * which has empty tensors, sizes that are not multiples of the block, rows
 * beyond the grid and elements beyond one grid-stride pass (the device has 2
 * multiprocessors), bf16 and f16. The CUDA sources run as written, through
 * the emulator's fibers, and GEMMs through gemm.cu's cuBLASLt descriptors.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { BUILD_DIR, buildNative, hasCommand } from "../../scripts/build_native.ts";
import { KERNEL_SYMBOLS } from "../../ffi/symbols.ts";
import { CUDA_SYMBOLS, type CudaSymbols } from "../../ffi/cuda.ts";
import { cString, type NativeLibrary, openLibrary } from "../../ffi/native.ts";
import { type CaseLibraries, Rng, runCase } from "../../scripts/gpu_check/_harness.ts";
import { buildOpCases, EMULATED_SIZES } from "../../scripts/gpu_check/op_cases.ts";

const HAVE_EMU = hasCommand("g++") && Deno.env.get("DTRAIN_CUDA_EMU") !== "0";

let libs: CaseLibraries | undefined;
let emu: NativeLibrary<CudaSymbols> | undefined;

/** The CPU library and the emulated device (cuBLASLt stand-in loaded, compute stream). */
function emulated(): CaseLibraries {
  if (libs) return libs;
  buildNative({ quiet: true });
  const cpu = openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS, join(BUILD_DIR, "libdtrain_cpu.so"));
  const gpu = openLibrary(
    "libdtrain_cuda_emu.so",
    CUDA_SYMBOLS,
    join(BUILD_DIR, "libdtrain_cuda_emu.so"),
  );
  const version = new BigInt64Array(1);
  const path = new TextEncoder().encode(join(BUILD_DIR, "libdtrain_cublaslt_emu.so") + "\0");
  gpu.check(gpu.symbols.dt_cuda_load_cublaslt(path, version), "dt_cuda_load_cublaslt");
  const out = new BigUint64Array(1);
  gpu.check(gpu.symbols.dt_cuda_compute_stream(out), "dt_cuda_compute_stream");
  libs = { cpu, gpu, stream: Deno.UnsafePointer.create(out[0]!) };
  emu = gpu;
  return libs;
}

const cases = HAVE_EMU
  ? buildOpCases({ rng: new Rng(7), cpu: emulated().cpu, sizes: EMULATED_SIZES })
  : [];

for (const c of cases) {
  Deno.test(`emulated device: ${c.op} ${c.dtype} ${c.size} matches the CPU library`, () => {
    const r = runCase(c, emulated());
    assert.ok(r.ok, `${c.op} ${c.dtype} ${c.size}: ${r.detail}`);
  });
}

Deno.test({
  name: "the emulated sweep covers every kernel op and reaches the grid limits",
  ignore: !HAVE_EMU,
  fn() {
    const runtime = [
      "dt_abi_version",
      "dt_last_error",
      "dt_backend_name",
      "dt_build_hash",
      "dt_set_num_threads",
      "dt_get_num_threads",
      "dt_alloc",
      "dt_free",
      "dt_memcpy",
      "dt_synchronize",
    ];
    const covered = new Set([...runtime, ...cases.flatMap((c) => c.symbols)]);
    assert.deepEqual(Object.keys(KERNEL_SYMBOLS).filter((s) => !covered.has(s)), []);
    // 2 multiprocessors: 64 blocks of 256 per grid-stride pass, 128 rows per row grid
    const S = EMULATED_SIZES;
    assert.ok(S.elementwise.some((n) => n > 64 * 256) && S.elementwise.includes(0));
    assert.ok(S.softmax.some(([rows]) => rows > 128) && S.layernorm.some(([rows]) => rows > 128));
    assert.ok(S.argmax.some(([rows]) => rows > 128) && S.crossentropy.some(([rows]) => rows > 128));
    assert.ok(cases.some((c) => c.dtype === "bf16") && cases.some((c) => c.dtype === "f16"));
  },
});

Deno.test({
  name: "the emulated device runs on the compute stream of GPU 0 with 2 multiprocessors",
  ignore: !HAVE_EMU,
  fn() {
    emulated();
    const gpu = emu!;
    assert.equal(gpu.symbols.dt_cuda_get_device(), 0);
    const info = new BigInt64Array(6), name = new Uint8Array(256);
    gpu.check(gpu.symbols.dt_cuda_device_info(0, name, 256n, info), "dt_cuda_device_info");
    assert.equal(Number(info[2]), 2);
    assert.match(cString(gpu.symbols.dt_backend_name()), /^cuda sm_90 \(dtrain emulated GPU 0/);
  },
});
