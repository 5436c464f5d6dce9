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

const HAVE_NVCC = hasCommand("nvcc") && Deno.env.get("DTRAIN_CUDA") !== "0";
if (!HAVE_NVCC) {
  console.log("tests/cuda/ptxas_test.ts: nvcc is not on PATH (or DTRAIN_CUDA=0): nothing to check");
}

/** One function as ptxas reports it. */
export interface PtxasFunction {
  name: string;
  arch: string;
  entry: boolean;
  stack: number;
  spillStores: number;
  spillLoads: number;
  smem: number;
}

/** The functions of a `-Xptxas -v` report. */
export function parsePtxas(text: string): PtxasFunction[] {
  const out: PtxasFunction[] = [];
  let arch = "", entry = "", current: PtxasFunction | null = null;
  for (const line of text.split("\n")) {
    let m = line.match(/Compiling entry function '([^']+)' for '(sm_\d+)'/);
    if (m) {
      [entry, arch] = [m[1]!, m[2]!];
      continue;
    }
    m = line.match(/Compiling function '([^']+)' for '(sm_\d+)'/) ??
      line.match(/Function properties for (\S+)/);
    if (m && line.includes("Compiling function")) arch = m[2]!;
    if (m && line.includes("Function properties for")) {
      current = {
        name: m[1]!,
        arch,
        entry: m[1] === entry,
        stack: 0,
        spillStores: 0,
        spillLoads: 0,
        smem: 0,
      };
      out.push(current);
      continue;
    }
    m = line.match(/(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads/);
    if (m && current) {
      [current.stack, current.spillStores, current.spillLoads] = [+m[1]!, +m[2]!, +m[3]!];
      continue;
    }
    m = line.match(/Used \d+ registers.*?(\d+) bytes smem/);
    if (m && current) current.smem = +m[1]!;
  }
  return out;
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
      stack: 16,
      spillStores: 8,
      spillLoads: 4,
      smem: 264,
    },
    {
      name: "_Z3barv",
      arch: "sm_80",
      entry: true,
      stack: 0,
      spillStores: 0,
      spillLoads: 0,
      smem: 0,
    },
  ]);
});
