/**
 * Tensor-core attention (kernels/cuda/attention_tc.cu) on the emulated device
 * against the CPU library, and the emulated instructions it runs on
 * (mma.m16n8k16 and cp.async, kernels/cuda_emu/emu_mma.h) against a plain
 * matrix product. Shapes: odd T, T past and short of the 64-row tiles, one
 * head and twelve, batch 1 and 2, head dims 64 and 128 and ones that pad
 * (40) or cannot use 16-byte copies (36), causal and full; bf16 everywhere,
 * f16 on every third shape. Tolerances: tests/cuda/_attention_tolerance.ts.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { BUILD_DIR, buildNative } from "../../scripts/build_native.ts";
import { KERNEL_SYMBOLS } from "../../ffi/symbols.ts";
import { CUDA_EMU_LIBRARIES, CUDA_SYMBOLS } from "../../ffi/cuda.ts";
import { openLibrary } from "../../ffi/native.ts";
import { type CaseLibraries, Rng, runCase, toBf16 } from "../../scripts/gpu_check/_harness.ts";
import { attentionCases, type AttentionShape } from "../../scripts/gpu_check/op_cases_attention.ts";
import { attentionTolerance } from "./_attention_tolerance.ts";

import { emuProbe } from "./_emu_probe.ts";
import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do
const test = (name: string, fn: () => void) => Deno.test({ name, ignore: !HAVE_EMU, fn });

let libs: CaseLibraries | undefined;
function emulated(): CaseLibraries {
  if (libs) return libs;
  buildNative({ quiet: true });
  const cpu = openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS, join(BUILD_DIR, "libdtrain_cpu.so"));
  const { kernels } = CUDA_EMU_LIBRARIES;
  const gpu = openLibrary(kernels, CUDA_SYMBOLS, join(BUILD_DIR, kernels));
  const out = new BigUint64Array(1);
  gpu.check(gpu.symbols.dt_cuda_compute_stream(out), "dt_cuda_compute_stream");
  libs = { cpu, gpu, stream: Deno.UnsafePointer.create(out[0]!) };
  return libs;
}

/** [B, T, H, D, causal]; f16 runs on indices 2, 5, 8 (attentionCases' rule). */
const SHAPES: AttentionShape[] = [
  [1, 67, 1, 64, 1], // odd T, one tile and a 3-row tail, one head, batch 1
  [2, 130, 3, 64, 1], // three query tiles, two batches, several heads
  [1, 97, 2, 64, 0], // full attention: every key tile for every query tile
  [1, 70, 12, 64, 1], // GPT-2's twelve heads
  [1, 45, 2, 128, 1], // head dim 128: 32-row key tiles
  [2, 33, 1, 128, 0],
  [1, 50, 2, 40, 1], // head dim padded to 64 (a k step of zeros)
  [1, 1, 1, 64, 1], // one row
  [1, 23, 1, 36, 1], // D % 8 != 0: element loads instead of cp.async
];

const cases = HAVE_EMU
  ? attentionCases(new Rng(11), emulated().cpu, SHAPES).filter((c) => c.dtype !== "f32")
  : [];

for (const c of cases) {
  test(`tensor-core attention ${c.op} ${c.dtype} ${c.size} matches the CPU library`, () => {
    const tol = attentionTolerance(c.dtype as "bf16" | "f16");
    const r = runCase({ ...c, tol }, emulated());
    assert.ok(r.ok, `${c.op} ${c.dtype} ${c.size}: ${r.detail}`);
  });
}

test("the tolerance catches a key tile the kernel would drop", () => {
  // keys 64..127 of a 130-row sequence zeroed on the device side only: what a
  // kernel that skipped or misloaded the second key tile would compute
  const T = 130, C = 64, L = emulated();
  const qkv = toBf16(new Rng(5).normals(T * 3 * C));
  const dropped = qkv.slice();
  for (let t = 64; t < 128; t++) dropped.fill(0, t * 3 * C + C, t * 3 * C + 2 * C);
  const cpuOut = new Uint16Array(T * C), lse = new Float32Array(T);
  const P = Deno.UnsafePointer.of;
  L.cpu.check(
    L.cpu.symbols.dt_attention_fwd(
      P(cpuOut),
      P(lse),
      P(qkv),
      1,
      1n,
      BigInt(T),
      1n,
      BigInt(C),
      1,
      1 / 8,
      null,
    ),
    "dt_attention_fwd",
  );
  const tol = attentionTolerance("bf16");
  assert.ok(
    normwise(bf16ToF32(runGpuFwd(L, qkv)), bf16ToF32(cpuOut)) <= tol,
    "the intact input passes",
  );
  const err = normwise(bf16ToF32(runGpuFwd(L, dropped)), bf16ToF32(cpuOut));
  assert.ok(
    err > 10 * tol,
    `a dropped key tile moves the output by ${err}, not clearly past ${tol}`,
  );
});

/** The emulated device's forward output for one head of 130 rows, head dim 64. */
function runGpuFwd(L: CaseLibraries, qkv: Uint16Array): Uint16Array {
  const k = L.gpu.symbols, n64 = BigInt;
  const out = new Uint16Array(130 * 64);
  const dq = k.dt_alloc(n64(qkv.byteLength)), dout = k.dt_alloc(n64(out.byteLength));
  const dl = k.dt_alloc(n64(130 * 4));
  try {
    L.gpu.check(
      k.dt_memcpy(dq, Deno.UnsafePointer.of(qkv), n64(qkv.byteLength), 1, L.stream),
      "dt_memcpy",
    );
    L.gpu.check(
      k.dt_attention_fwd(dout, dl, dq, 1, 1n, 130n, 1n, 64n, 1, 1 / 8, L.stream),
      "dt_attention_fwd",
    );
    L.gpu.check(
      k.dt_memcpy(Deno.UnsafePointer.of(out), dout, n64(out.byteLength), 2, L.stream),
      "dt_memcpy",
    );
    L.gpu.check(k.dt_synchronize(L.stream), "dt_synchronize");
  } finally {
    for (const p of [dq, dout, dl]) k.dt_free(p);
  }
  return out;
}

function bf16ToF32(a: Uint16Array): Float32Array {
  const u = new Uint32Array(a.length);
  for (let i = 0; i < a.length; i++) u[i] = a[i]! << 16;
  return new Float32Array(u.buffer);
}

function normwise(a: Float32Array, b: Float32Array): number {
  let num = 0, den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num / den);
}

// ---- the emulated instructions -------------------------------------------------------------

/** The probe, built once. */
const probePath = () => emuProbe("emu_mma_probe.cu");

function run(scenario: string): string {
  const r = new Deno.Command(probePath(), { args: [scenario], stdout: "piped", stderr: "piped" })
    .outputSync();
  const out = new TextDecoder().decode(r.stdout).trim();
  assert.equal(
    r.code,
    0,
    `${scenario}: exit ${r.code}: ${out} ${new TextDecoder().decode(r.stderr)}`,
  );
  return out;
}

/** The max relative error a probe line reports. */
function mmaError(line: string): number {
  const m = line.match(/max error (\S+)$/);
  assert.ok(m, `unexpected probe output: ${line}`);
  return Number(m[1]);
}

test("emulated mma.m16n8k16 (bf16, f16) with the PTX ISA's fragment layout is a matrix product", () => {
  // operands exact in f32 products; one rounding of the f32 result: 2^-24 relative
  for (const dt of ["bf16", "f16"]) {
    const err = mmaError(run(`mma-${dt}`));
    assert.ok(err < 2 ** -22, `mma ${dt}: error ${err}`);
  }
});

test("a B fragment loaded in the wrong layout gives a wrong product", () => {
  assert.ok(mmaError(run("mma-wrong-layout")) > 0.1);
});

test("mma.sync from a partial warp fails the launch, naming the missing lanes", () => {
  assert.match(
    run("mma-partial-warp"),
    /launch failed: cudaErrorLaunchFailure.*mma_k.*lanes 0xffff0000/,
  );
});

test("emulated cp.async lands a group only when a wait lets it, and zero-fills a 0-byte source", () => {
  assert.equal(
    run("cp-async"),
    "cp.async: before ffffffff after1 11111111 ffffffff after0 55555555 zero 00000000",
  );
});
