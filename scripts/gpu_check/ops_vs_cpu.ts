/**
 * gpu-check step 2: every op of the kernel ABI (ffi/symbols.ts), forward and
 * backward, on the GPU against the CPU library in one process, on fresh
 * random inputs of several sizes (the cases of op_cases.ts). Prints a row per
 * case, then the symbols no case covered; exits 1 on any failure.
 * DTRAIN_GPU_CHECK_SELF_TEST=1 runs the CPU library on both sides (every case
 * must then be exact), to check the cases without a GPU; DTRAIN_DEVICE=cuda-emu
 * runs them on the emulated GPU (at its smaller sizes). After a failing case
 * the device is asked for a small copy: a GPU whose context is broken (a
 * sticky CUDA error) fails every later call, so the sweep stops there and
 * names the first failing op instead of listing a hundred consequences.
 *
 *   deno run -A scripts/gpu_check/ops_vs_cpu.ts [--seed N]
 */
import { parseArgs } from "node:util";
import { CUDA_PENDING_SYMBOLS, KERNEL_SYMBOLS, type KernelSymbols } from "../../ffi/symbols.ts";
import { cString } from "../../ffi/native.ts";
import { checkFlavor, libraries, Rng, runCase, SELF_TEST } from "./_harness.ts";
import { runSweep } from "./sweep.ts";
import { checkDataErrors } from "./data_errors.ts";
import { buildOpCases, EMULATED_SIZES, GPU_SIZES } from "./op_cases.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: { seed: { type: "string", default: "1" } },
});
const n64 = BigInt;
const cases = buildOpCases({
  rng: new Rng(Number(values.seed)),
  cpu: libraries().cpu,
  sizes: checkFlavor() === "cuda-emu" ? EMULATED_SIZES : GPU_SIZES,
});

/** Whether the device still works: a small round trip through its memory. Null when it does, else why. */
function deviceBroken(): string | null {
  const { gpu, stream } = libraries();
  const k = gpu.symbols;
  const src = Uint8Array.of(1, 2, 3, 4), back = new Uint8Array(4);
  const p = k.dt_alloc(4n);
  if (p === null) return cString(k.dt_last_error());
  try {
    for (
      const st of [
        k.dt_memcpy(p, Deno.UnsafePointer.of(src), 4n, 1, stream),
        k.dt_memcpy(Deno.UnsafePointer.of(back), p, 4n, 2, stream),
      ]
    ) {
      if (st !== 0) return cString(k.dt_last_error());
    }
    return back.every((v, i) => v === src[i]) ? null : "a 4-byte round trip changed the bytes";
  } finally {
    k.dt_free(p);
  }
}

// ---- runtime symbols, and errors that the GPU must report like the CPU ---------------------
const RUNTIME: (keyof KernelSymbols)[] = [
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

function runtimeChecks(): { ok: boolean; detail: string } {
  const { cpu, gpu, stream } = libraries();
  const k = gpu.symbols;
  const problems: string[] = [];
  if (k.dt_abi_version() !== cpu.symbols.dt_abi_version()) problems.push("ABI versions differ");
  const name = cString(k.dt_backend_name());
  if (!SELF_TEST && !/^cuda sm_\d+/.test(name)) problems.push(`dt_backend_name() = ${name}`);
  if (cString(k.dt_build_hash()).length !== 16) {
    problems.push("dt_build_hash() is not a 16-digit hash");
  }
  if (k.dt_set_num_threads(4) !== 0 || k.dt_get_num_threads() !== 4) {
    problems.push("dt_set/get_num_threads");
  }
  // memcpy round trip h2d -> d2d -> d2h of an odd size
  const n = 100_003,
    src = Uint8Array.from({ length: n }, (_, i) => (i * 7) & 255),
    back = new Uint8Array(n);
  const a = k.dt_alloc(n64(n)), b = k.dt_alloc(n64(n));
  if (!a || !b) return { ok: false, detail: `dt_alloc: ${cString(k.dt_last_error())}` };
  try {
    const steps = [
      k.dt_memcpy(a, Deno.UnsafePointer.of(src), n64(n), 1, stream),
      k.dt_memcpy(b, a, n64(n), 3, stream),
      k.dt_memcpy(Deno.UnsafePointer.of(back), b, n64(n), 2, stream),
      k.dt_synchronize(stream),
    ];
    if (steps.some((s) => s !== 0)) {
      problems.push(`dt_memcpy/synchronize failed: ${cString(k.dt_last_error())}`);
    } else if (back.some((v, i) => v !== src[i])) {
      problems.push("memcpy round trip changed the bytes");
    }
  } finally {
    if (k.dt_free(a) !== 0 || k.dt_free(b) !== 0) {
      problems.push(`dt_free: ${cString(k.dt_last_error())}`);
    }
  }
  // bad indices and values: the same status and text as the CPU library (maybe deferred)
  problems.push(...checkDataErrors(cpu, gpu, stream));
  return { ok: problems.length === 0, detail: problems.join("; ") };
}

// ---- run and report -----------------------------------------------------------------------------
const sweep = runSweep(
  cases,
  (c) => runCase(c),
  SELF_TEST ? () => null : deviceBroken,
  console.log,
);
let failed = sweep.failed;
const covered = sweep.covered;
if (sweep.stoppedAt) {
  const c = sweep.stoppedAt.case;
  const at = `${c.op} ${c.dtype} ${c.size}`;
  console.log(
    `ops_vs_cpu: the device stopped working at ${at}, the first failing op (a sticky CUDA ` +
      `error: ${sweep.stoppedAt.why}); the sweep stops here`,
  );
  console.log(`SUMMARY sticky CUDA error at ${at}: ${sweep.stoppedAt.why}`);
  Deno.exit(1);
}
const rt = runtimeChecks();
console.log(
  `${"runtime + error texts".padEnd(40)} ${"-".padEnd(10)} ${"-".padEnd(24)} ${"-".padEnd(12)} ${
    "-".padEnd(8)
  } ${rt.ok ? "PASS" : `FAIL  ${rt.detail}`}`,
);
if (rt.ok) RUNTIME.forEach((s) => covered.add(s));
else failed++;
// Kernels the CUDA library does not have yet (their calls throw naming them) are not held against it.
const expected = Object.keys(KERNEL_SYMBOLS).filter((s) =>
  !CUDA_PENDING_SYMBOLS.has(s as keyof KernelSymbols)
);
const uncovered = expected.filter((s) => !covered.has(s));
if (uncovered.length) {
  failed++;
  console.log(`not verified on the GPU: ${uncovered.join(", ")}`);
}
if (CUDA_PENDING_SYMBOLS.size) {
  console.log(`not in the CUDA library yet: ${[...CUDA_PENDING_SYMBOLS].join(", ")}`);
}
const verdict =
  `${cases.length + 1} checks, ${failed} failed, ${
    expected.length - uncovered.length
  }/${expected.length} symbols verified` +
  (CUDA_PENDING_SYMBOLS.size ? ` (${CUDA_PENDING_SYMBOLS.size} not in the CUDA library yet)` : "");
console.log(`ops_vs_cpu: ${verdict}`);
console.log(`SUMMARY ${verdict}`);
Deno.exit(failed ? 1 : 0);
