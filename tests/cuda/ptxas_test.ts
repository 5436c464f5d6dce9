/**
 * Every CUDA kernel, as ptxas compiles it for sm_90 (Hopper): no register
 * spills, no local stack frame, static shared memory within the 48 KB a block
 * gets without opting in. Read from the report of the build itself
 * (build/libdtrain_cuda.so.ptxas.txt, nvcc -Xptxas -v), so it costs no
 * compile of its own; ignored, saying why, where nvcc is not installed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { BUILD_DIR, buildNative, hasCommand } from "../../scripts/build_native.ts";
import { parsePtxas } from "../../scripts/kernel_resources.ts";

const HAVE_NVCC = hasCommand("nvcc") && Deno.env.get("DTRAIN_CUDA") !== "0";
if (!HAVE_NVCC) {
  console.log("tests/cuda/ptxas_test.ts: nvcc is not on PATH (or DTRAIN_CUDA=0): nothing to check");
}

Deno.test({
  name: "no sm_90 kernel spills registers, keeps a stack frame or exceeds 48 KB of shared memory",
  ignore: !HAVE_NVCC,
  fn() {
    buildNative({ quiet: true });
    const report = Deno.readTextFileSync(join(BUILD_DIR, "libdtrain_cuda.so.ptxas.txt"));
    const fns = parsePtxas(report).filter((f) => f.arch === "sm_90");
    assert.ok(fns.filter((f) => f.entry).length >= 30, `found ${fns.length} sm_90 functions`);
    const bad = fns.filter((f) => f.stack || f.spillStores || f.spillLoads || f.smem > 48 << 10)
      .map((f) =>
        `${f.name}: ${f.stack} bytes stack, ${f.spillStores}/${f.spillLoads} bytes spilled, ${f.smem} bytes smem`
      );
    assert.deepEqual(bad, []);
  },
});

Deno.test("parsePtxas() reads entries, stack frames, spills and shared memory", () => {
  const text = [
    "ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'",
    "ptxas info    : Function properties for _Z3fooPf",
    "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads",
    "ptxas info    : Used 40 registers, used 1 barriers, 264 bytes smem, 360 bytes cmem[0]",
    "ptxas info    : Compiling entry function '_Z3barv' for 'sm_80'",
    "ptxas info    : Function properties for _Z3barv",
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
  ].join("\n");
  assert.deepEqual(parsePtxas(text), [
    {
      name: "_Z3fooPf",
      arch: "sm_90",
      entry: true,
      registers: 40,
      stack: 16,
      spillStores: 8,
      spillLoads: 4,
      smem: 264,
    },
    {
      name: "_Z3barv",
      arch: "sm_80",
      entry: true,
      registers: 0,
      stack: 0,
      spillStores: 0,
      spillLoads: 0,
      smem: 0,
    },
  ]);
});
