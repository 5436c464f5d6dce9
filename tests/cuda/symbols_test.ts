/**
 * The CUDA library against the kernel ABI, without a GPU: where nvcc is
 * present it is built (through buildNative) and its exported symbols must be
 * exactly ffi/symbols.ts plus the dt_cuda_* extras of ffi/cuda.ts, while the
 * CPU library exports exactly the kernel ABI; Deno opens it with that table.
 * The emulated device's library (g++) must export exactly the same set, and
 * exactly what libdtrain_cuda.so exports where both are built. Without a
 * compiler the checks that need it are ignored, saying why.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { BUILD_DIR, buildNative, hasCommand } from "../../scripts/build_native.ts";
import { CUDA_PENDING_SYMBOLS, KERNEL_SYMBOLS } from "../../ffi/symbols.ts";
import { CUDA_EXTRA_SYMBOLS, CUDA_LIBRARY_NAME, CUDA_SYMBOLS } from "../../ffi/cuda.ts";
import { ABI_VERSION, cString, openLibrary } from "../../ffi/native.ts";
import { CPU_EXTRA_SYMBOLS } from "../../ffi/cpu_extras.ts";

const HAVE_NVCC = hasCommand("nvcc") && Deno.env.get("DTRAIN_CUDA") !== "0";
import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do
const EMU_LIBRARY = "libdtrain_cuda_emu.so";
if (!HAVE_EMU) {
  console.log(
    "tests/cuda/symbols_test.ts: g++ is not on PATH (or DTRAIN_CUDA_EMU=0), so the emulated device is not " +
      "built and its symbol checks are ignored",
  );
}
if (!HAVE_NVCC) {
  console.log(
    "tests/cuda/symbols_test.ts: nvcc is not on PATH (or DTRAIN_CUDA=0), so the CUDA library is not built " +
      "and its symbol checks are ignored",
  );
}

buildNative({ quiet: true });

/** The names of the dynamic symbols that a library defines (nm -D --defined-only). */
function exportedSymbols(path: string): string[] {
  const r = new Deno.Command("nm", {
    args: ["-D", "--defined-only", path],
    stdout: "piped",
    stderr: "piped",
  })
    .outputSync();
  if (!r.success) assert.fail(`nm -D ${path} failed: ${new TextDecoder().decode(r.stderr)}`);
  return new TextDecoder().decode(r.stdout).split("\n")
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f.length === 3)
    .map((f) => f[2]!)
    .sort();
}

/** Fails naming the symbols missing from, and unexpected in, `actual`. */
function assertExactly(actual: string[], expected: string[], what: string): void {
  const missing = expected.filter((s) => !actual.includes(s));
  const unexpected = actual.filter((s) => !expected.includes(s));
  if (missing.length || unexpected.length) {
    assert.fail(
      `${what}: missing [${missing.join(", ")}], unexpected [${unexpected.join(", ")}]`,
    );
  }
}

const ABI = Object.keys(KERNEL_SYMBOLS).sort();
const EXTRAS = Object.keys(CUDA_EXTRA_SYMBOLS).sort();

Deno.test("libdtrain_cpu.so exports exactly the kernel ABI of ffi/symbols.ts plus its dt_cpu_* extras", () => {
  const extras = Object.keys(CPU_EXTRA_SYMBOLS);
  assert.ok(extras.every((s) => s.startsWith("dt_cpu_") && !(s in KERNEL_SYMBOLS)));
  assertExactly(
    exportedSymbols(join(BUILD_DIR, "libdtrain_cpu.so")),
    [...ABI, ...extras].sort(),
    "libdtrain_cpu.so",
  );
});

Deno.test("the dt_cuda_* extras are named dt_cuda_* and are not part of the kernel ABI", () => {
  assert.ok(EXTRAS.length > 0);
  for (const name of EXTRAS) {
    assert.match(name, /^dt_cuda_/);
    assert.ok(!(name in KERNEL_SYMBOLS), `${name} is also in ffi/symbols.ts`);
  }
});

Deno.test({
  name: "libdtrain_cuda.so exports exactly the kernel ABI plus the declared dt_cuda_* extras",
  ignore: !HAVE_NVCC,
  fn() {
    const actual = exportedSymbols(join(BUILD_DIR, CUDA_LIBRARY_NAME));
    // CUDA_PENDING_SYMBOLS are the kernels it does not have yet (declared optional).
    assertExactly(
      actual.filter((s) => !s.startsWith("dt_cuda_")),
      ABI.filter((s) => !CUDA_PENDING_SYMBOLS.has(s as keyof typeof KERNEL_SYMBOLS)),
      "kernel ABI of libdtrain_cuda.so",
    );
    assertExactly(
      actual.filter((s) => s.startsWith("dt_cuda_")),
      EXTRAS,
      "dt_cuda_* extras of libdtrain_cuda.so",
    );
  },
});

Deno.test({
  name: "libdtrain_cuda_emu.so exports exactly the kernel ABI plus the declared dt_cuda_* extras",
  ignore: !HAVE_EMU,
  fn() {
    const actual = exportedSymbols(join(BUILD_DIR, EMU_LIBRARY));
    // built from the same .cu sources: without the CUDA_PENDING_SYMBOLS kernels too
    const abi = ABI.filter((s) => !CUDA_PENDING_SYMBOLS.has(s as keyof typeof KERNEL_SYMBOLS));
    assertExactly(actual, [...abi, ...EXTRAS].sort(), EMU_LIBRARY);
  },
});

Deno.test({
  name: "libdtrain_cuda_emu.so exports exactly what libdtrain_cuda.so exports",
  ignore: !HAVE_EMU || !HAVE_NVCC,
  fn() {
    assertExactly(
      exportedSymbols(join(BUILD_DIR, EMU_LIBRARY)),
      exportedSymbols(join(BUILD_DIR, CUDA_LIBRARY_NAME)),
      `${EMU_LIBRARY} against ${CUDA_LIBRARY_NAME}`,
    );
  },
});

Deno.test({
  name: "libdtrain_cuda_emu.so opens with the full table and names the emulated device",
  ignore: !HAVE_EMU,
  fn() {
    const lib = openLibrary(EMU_LIBRARY, CUDA_SYMBOLS, join(BUILD_DIR, EMU_LIBRARY));
    try {
      assert.equal(lib.symbols.dt_abi_version(), ABI_VERSION);
      const hash = Deno.readTextFileSync(join(BUILD_DIR, `${EMU_LIBRARY}.hash`)).trim();
      assert.equal(cString(lib.symbols.dt_build_hash()), hash);
      assert.match(cString(lib.symbols.dt_backend_name()), /^cuda sm_90 \(dtrain emulated GPU \d+/);
    } finally {
      lib.close();
    }
  },
});

Deno.test({
  name:
    "libdtrain_cuda.so opens with the full symbol table and reports its ABI version and build hash",
  ignore: !HAVE_NVCC,
  fn() {
    // Nothing here touches the GPU, so it runs without a driver too.
    const lib = openLibrary(CUDA_LIBRARY_NAME, CUDA_SYMBOLS, join(BUILD_DIR, CUDA_LIBRARY_NAME));
    try {
      assert.equal(lib.symbols.dt_abi_version(), ABI_VERSION);
      const hash = Deno.readTextFileSync(join(BUILD_DIR, `${CUDA_LIBRARY_NAME}.hash`)).trim();
      assert.equal(cString(lib.symbols.dt_build_hash()), hash);
      assert.equal(lib.symbols.dt_get_num_threads(), 1);
    } finally {
      lib.close();
    }
  },
});
