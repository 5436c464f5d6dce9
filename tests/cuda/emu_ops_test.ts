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
import { BUILD_DIR, buildNative } from "../../scripts/build_native.ts";
import { CUDA_PENDING_SYMBOLS, KERNEL_SYMBOLS } from "../../ffi/symbols.ts";
import { CUDA_EMU_LIBRARIES, CUDA_SYMBOLS, type CudaSymbols } from "../../ffi/cuda.ts";
import { cString, type NativeLibrary, openLibrary } from "../../ffi/native.ts";
import { type CaseLibraries, Rng, runCase } from "../../scripts/gpu_check/_harness.ts";
import { buildOpCases, EMULATED_SIZES } from "../../scripts/gpu_check/op_cases.ts";
import { checkDataErrors } from "../../scripts/gpu_check/data_errors.ts";
import { epilogueLaunches } from "../../scripts/gpu_check/op_cases_gemm_ex.ts";

import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do

let libs: CaseLibraries | undefined;
let emu: NativeLibrary<CudaSymbols> | undefined;

/** The CPU library and the emulated device (cuBLASLt stand-in loaded, compute stream). */
function emulated(): CaseLibraries {
  if (libs) return libs;
  buildNative({ quiet: true });
  const cpu = openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS, join(BUILD_DIR, "libdtrain_cpu.so"));
  const { kernels, cublasLt } = CUDA_EMU_LIBRARIES;
  const gpu = openLibrary(kernels, CUDA_SYMBOLS, join(BUILD_DIR, kernels));
  const version = new BigInt64Array(1);
  const path = new TextEncoder().encode(join(BUILD_DIR, cublasLt) + "\0");
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

/** The emulated runtime's count of host waits for the device (the instance the kernels use). */
let hostWaits: (() => bigint) | undefined;
function waitsOfDevice(): bigint {
  if (!hostWaits) {
    const rt = Deno.dlopen(join(BUILD_DIR, "libdtrain_cudart_emu.so"), {
      dt_emu_host_waits: { parameters: [], result: "u64" },
    });
    hostWaits = () => rt.symbols.dt_emu_host_waits();
  }
  return hostWaits();
}

for (const c of cases) {
  Deno.test(`emulated device: ${c.op} ${c.dtype} ${c.size} matches the CPU library`, () => {
    let waits = 0n;
    // the uploads before and the read-back after wait; the op itself never does
    const r = runCase(c, emulated(), (call) => {
      const before = waitsOfDevice();
      const st = call();
      waits = waitsOfDevice() - before;
      return st;
    });
    assert.ok(r.ok, `${c.op} ${c.dtype} ${c.size}: ${r.detail}`);
    assert.equal(waits, 0n, `${c.op} ${c.size}: the call waited for the device ${waits} time(s)`);
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
      "dt_deferred_error",
    ];
    const covered = new Set([...runtime, ...cases.flatMap((c) => c.symbols)]);
    // a kernel the CUDA library does not have yet (CUDA_PENDING_SYMBOLS) needs no case yet
    const pending = CUDA_PENDING_SYMBOLS as ReadonlySet<string>;
    assert.deepEqual(
      Object.keys(KERNEL_SYMBOLS).filter((s) => !covered.has(s) && !pending.has(s)),
      [],
    );
    // 2 multiprocessors: 64 blocks of 256 per grid-stride pass, 128 rows per row grid
    const S = EMULATED_SIZES;
    assert.ok(S.elementwise.some((n) => n > 64 * 256) && S.elementwise.includes(0));
    assert.ok(S.softmax.some(([rows]) => rows > 128) && S.layernorm.some(([rows]) => rows > 128));
    assert.ok(S.argmax.some(([rows]) => rows > 128) && S.crossentropy.some(([rows]) => rows > 128));
    // the warp-row paths at their limits: layer norm at 1024 columns (its backward's staging past
    // 48 KiB) with a last round of fewer rows than warps; cross-entropy at and past 4 KiB of logits
    assert.ok(S.layernorm.some(([rows, C]) => C === 1024 && rows % 8 !== 0));
    const V = S.crossentropy.map(([, v]) => v);
    assert.ok([1024, 1025, 2048, 2049].every((v) => V.includes(v)));
    assert.ok(cases.some((c) => c.dtype === "bf16") && cases.some((c) => c.dtype === "f16"));
    // the convolutional-network ops: past a grid-stride pass, past the 2048 rows of the
    // eight-thread row kernels, and empty
    const C = S.cnn;
    assert.ok(C.unary.some((n) => n > 64 * 256) && C.unary.includes(0));
    assert.ok(C.dims.some(([o, D, i]) => i === 1 && D > 8 && o > 2048));
    assert.ok(C.dims.some(([o, , i]) => i > 1 && o * i > 64 * 256));
    assert.ok(C.index.some(([o, , J, i]) => o * J * i > 64 * 256 && o * i === 1));
    assert.ok(C.index.some(([o, , , i]) => o * i > 64 * 256));
    assert.ok(
      C.bn.some(([N, C]) => N * C > 64 * 256) && C.bn.some(([N, C, HW]) => N * C * HW === 0),
    );
    // Winograd: a block past a grid-stride pass of (channel, tile) items, and an empty grid
    const tiles = (N: number, H: number, W: number, PH: number, PW: number) =>
      N * Math.ceil((H + 2 * PH - 2) / 2) * Math.ceil((W + 2 * PW - 2) / 2);
    assert.ok(C.winograd.some(([N, Ch, H, W, , PH, PW, block]) => {
      const T = tiles(N, H, W, PH, PW);
      return Ch * Math.min(block || T, T - Math.floor(T / 3)) > 64 * 256;
    }));
    assert.ok(C.winograd.some(([N]) => N === 0));
    // the fused batch norm, ReLU and pooling: past a pass, every vector width of the CPU, empty
    const outs = ([N, Ch, H, W]: number[]) => N! * Ch! * Math.floor(H! / 2) * Math.floor(W! / 2);
    assert.ok(C.bnPool.some((d) => outs(d) > 64 * 256) && C.bnPool.some((d) => outs(d) === 0));
    assert.ok([2, 5, 8].every((w) => C.bnPool.some(([, , , W]) => Math.floor(W / 2) >= w)));
    for (const sym of ["dt_strided_copy", "dt_gather_dim", "dt_index_select"]) {
      assert.ok(
        cases.some((c) => c.symbols.includes(sym as never) && /^bf16/.test(c.dtype)),
        sym,
      );
    }
  },
});

Deno.test({
  name:
    "bad indices and casts: the device call succeeds and dt_deferred_error says what the CPU said",
  ignore: !HAVE_EMU,
  fn() {
    const { cpu, gpu, stream } = emulated();
    assert.deepEqual(checkDataErrors(cpu, gpu, stream), []);
  },
});

Deno.test({
  name: "index checks, embedding backward, integer casts and clipping never wait for the device",
  ignore: !HAVE_EMU,
  fn() {
    const { gpu, stream } = emulated();
    const k = gpu.symbols;
    // the same instance of the emulated runtime that libdtrain_cuda_emu.so uses
    const rt = Deno.dlopen(join(BUILD_DIR, "libdtrain_cudart_emu.so"), {
      dt_emu_host_waits: { parameters: [], result: "u64" },
    });
    const dev = (bytes: number) => k.dt_alloc(BigInt(bytes))!;
    const idx = dev(64 * 4), table = dev(50 * 8 * 4), rows = dev(64 * 8 * 4), t2 = dev(50 * 8 * 4);
    const logits = dev(64 * 50 * 4), probs = dev(64 * 50 * 4), one = dev(4), ints = dev(64 * 4);
    const lse = dev(64 * 4), valid = dev(4);
    const up = (d: Deno.PointerObject, a: ArrayBufferView<ArrayBuffer>) =>
      gpu.check(
        k.dt_memcpy(d, Deno.UnsafePointer.of(a), BigInt(a.byteLength), 1, stream),
        "dt_memcpy",
      );
    up(idx, Int32Array.from({ length: 64 }, (_, i) => (i * 7) % 50));
    up(one, new Float32Array([1]));
    const sums = dev(3 * 8), total = dev(4);
    const ptrs = new BigUint64Array(
      [table, rows, logits].map((p) => BigInt(Deno.UnsafePointer.value(p))),
    );
    const counts = new BigInt64Array([400n, 512n, 3200n]);
    const p = Deno.UnsafePointer.of;
    try {
      gpu.check(k.dt_synchronize(stream), "dt_synchronize");
      const calls: [string, () => number][] = [
        ["dt_cast f32 -> i32", () => k.dt_cast(ints, 3, one, 0, 1n, stream)],
        ["dt_embedding_fwd", () => k.dt_embedding_fwd(rows, idx, table, 64n, 50n, 8n, stream)],
        ["dt_embedding_bwd", () => k.dt_embedding_bwd(t2, rows, idx, 64n, 50n, 8n, stream)],
        ["dt_gather_rows", () => k.dt_gather_rows(rows, table, idx, 64n, 32n, stream)],
        [
          "dt_crossentropy_fwd",
          () => k.dt_crossentropy_fwd(one, lse, valid, logits, 0, idx, 64n, 50n, -100n, stream),
        ],
        [
          "dt_crossentropy_bwd",
          () =>
            k.dt_crossentropy_bwd(probs, logits, lse, valid, idx, one, 0, 64n, 50n, -100n, stream),
        ],
        ["dt_sumsq_many", () => k.dt_sumsq_many(sums, p(ptrs), p(counts), 3n, stream)],
        [
          "dt_clip_grad_norm",
          () => k.dt_clip_grad_norm(total, sums, p(ptrs), p(counts), 3n, 1.0, stream),
        ],
      ];
      for (const [name, call] of calls) {
        const before = rt.symbols.dt_emu_host_waits();
        gpu.check(call(), name);
        assert.equal(rt.symbols.dt_emu_host_waits(), before, `${name} waited for the device`);
      }
      // the step's explicit synchronisation: the deferred check does wait
      const before = rt.symbols.dt_emu_host_waits();
      gpu.check(k.dt_deferred_error(stream), "dt_deferred_error");
      assert.ok(rt.symbols.dt_emu_host_waits() > before, "dt_deferred_error read nothing back");
    } finally {
      for (const d of [idx, table, rows, t2, logits, probs, one, ints, sums, total, lse, valid]) {
        k.dt_free(d);
      }
      rt.close();
    }
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

Deno.test({
  name:
    "cuBLASLt fuses the bias + GELU epilogue where it can; dt_gemm_ex's own kernel runs where it cannot",
  ignore: !HAVE_EMU,
  fn() {
    emulated();
    // aux leading dimension 40 (a multiple of 8): one matmul, no kernel of our own
    assert.deepEqual(epilogueLaunches(emu!, libs!.stream, 16, 40, 8), { launches: 0, matmuls: 1 });
    // 37: cuBLASLt has no algorithm; a product into f32 scratch, then the epilogue kernel
    assert.deepEqual(epilogueLaunches(emu!, libs!.stream, 16, 37, 8), { launches: 1, matmuls: 1 });
  },
});
