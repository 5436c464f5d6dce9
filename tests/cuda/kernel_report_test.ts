/**
 * The kernel report's checks (scripts/kernel_report.ts): on the real build
 * when nvcc is installed — no sm_90 kernel spills or keeps local memory, the
 * tensor-core attention kernels hold mma instructions, the hot kernels reach
 * their occupancy floors — and, everywhere, the occupancy formula, the PTX
 * reader and each check on planted reports. The build's own ptxas report is
 * reused; PTX is compiled (sm_90 only) for just the files that hold hot
 * kernels, and cached in build/ptx/.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { BUILD_DIR, buildNative, hasCommand } from "../../scripts/build_native.ts";
import { HOT_FILES, kernelRows, ptxOf, reportProblems } from "../../scripts/kernel_report.ts";
import { occupancySm90, parsePtx } from "../../scripts/kernel_resources.ts";

const HAVE_NVCC = hasCommand("nvcc") && Deno.env.get("DTRAIN_CUDA") !== "0";
if (!HAVE_NVCC) {
  console.log(
    "tests/cuda/kernel_report_test.ts: nvcc is not on PATH (or DTRAIN_CUDA=0): only the planted reports run",
  );
}

Deno.test({
  name:
    "the built kernels: no spills, attention on tensor cores, hot kernels at their occupancy floors",
  ignore: !HAVE_NVCC,
  async fn() {
    buildNative({ quiet: true });
    const ptxas = Deno.readTextFileSync(join(BUILD_DIR, "libdtrain_cuda.so.ptxas.txt"));
    const rows = kernelRows(ptxas, await ptxOf(HOT_FILES));
    assert.ok(rows.length >= 30, `found ${rows.length} sm_90 kernels`);
    assert.deepEqual(reportProblems(rows), []);
  },
});

Deno.test("sm_90 occupancy: registers, shared memory and warps each limit it as the CUDA calculator does", () => {
  // 32 registers, 256 threads: 8 warps a block, 8 blocks fill 64 warps
  assert.deepEqual(occupancySm90(32, 256, 0), {
    blocks: 8,
    warps: 64,
    fraction: 1,
    limiter: "warps",
  });
  // 128 registers: 4096 a warp, 16 warps an SM, 4 blocks of 4
  assert.deepEqual(occupancySm90(128, 128, 0), {
    blocks: 4,
    warps: 16,
    fraction: 0.25,
    limiter: "registers",
  });
  // 246 registers round up to 248: 7936 a warp, 8 warps, 2 blocks of 4
  assert.deepEqual(occupancySm90(246, 128, 56320), {
    blocks: 2,
    warps: 8,
    fraction: 0.125,
    limiter: "registers",
  });
  // 100 KB + 1 KB reserved a block: 2 blocks in 228 KB
  assert.deepEqual(occupancySm90(32, 128, 102400), {
    blocks: 2,
    warps: 8,
    fraction: 0.125,
    limiter: "shared memory",
  });
  // tiny blocks: 32 blocks an SM at most
  assert.deepEqual(occupancySm90(16, 32, 0), {
    blocks: 32,
    warps: 32,
    fraction: 0.5,
    limiter: "blocks",
  });
});

const PTX = `
.visible .entry _Z3tcv(
.param .u64 p
)
.maxntid 128, 1, 1
{
\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
}
.visible .entry _Z6scalarv(
)
{
\tfma.rn.f32 %f1, %f2, %f3, %f4;
\t// mma.sync in a comment does not count
}
`;

Deno.test("parsePtx() reads each entry's __launch_bounds__ and tensor-core instructions", () => {
  const m = parsePtx(PTX);
  assert.deepEqual(m.get("_Z3tcv"), { maxThreads: 128, tensorCore: true });
  assert.deepEqual(m.get("_Z6scalarv"), { maxThreads: null, tensorCore: false });
});

/** A one-entry ptxas report. */
function ptxas(name: string, regs: number, spill = 0, stack = 0): string {
  return [
    `ptxas info    : Compiling entry function '${name}' for 'sm_90'`,
    `ptxas info    : Function properties for ${name}`,
    `    ${stack} bytes stack frame, ${spill} bytes spill stores, ${spill} bytes spill loads`,
    `ptxas info    : Used ${regs} registers, used 1 barriers, 0 bytes smem, 400 bytes cmem[0]`,
  ].join("\n");
}

// mangled names c++filt turns into the report's patterns
const ATT = "_Z22dt_attention_tc_fwd_k_ILi1ELi64EEvPtPfPKtiiiifi";
const LN = "_Z20dt_layernorm_fold_k_PfS_PKdlli";

Deno.test("reportProblems() flags a spill, attention without mma, and a hot kernel under its floor", () => {
  const tc = new Map([[ATT, { maxThreads: 128, tensorCore: true }]]);
  const clean = kernelRows([ptxas(ATT, 122), ptxas(LN, 32)].join("\n"), tc);
  assert.deepEqual(reportProblems(clean), []);

  const spilled = kernelRows([ptxas(ATT, 122), ptxas(LN, 32, 64, 64)].join("\n"), tc);
  assert.match(reportProblems(spilled).join("\n"), /dt_layernorm_fold_k_.*128 bytes spilled/);

  const scalar = kernelRows(
    ptxas(ATT, 122),
    new Map([[ATT, { maxThreads: 128, tensorCore: false }]]),
  );
  assert.match(
    reportProblems(scalar).join("\n"),
    /dt_attention_tc_fwd_k_.*no tensor-core instruction/,
  );

  // 255 registers at 256 threads: 8 warps an SM, under the row kernels' 50%
  const heavy = kernelRows([ptxas(ATT, 122), ptxas(LN, 255)].join("\n"), tc);
  assert.match(
    reportProblems(heavy).join("\n"),
    /dt_layernorm_fold_k_.*occupancy 12\.5% < 50\.0%.*registers/,
  );

  assert.match(
    reportProblems(kernelRows(ptxas(LN, 32), new Map())).join("\n"),
    /no kernel matches/,
  );
});

Deno.test("the warp-row kernels are hot kernels: the layer-norm backward counts its staged shared memory", () => {
  const LNW = "_Z24dt_layernorm_bwd_warp_k_ILi1EEvPvPdPKvS3_PKfS5_S5_lli";
  const CEW = "_Z12dt_ce_fwd_k_ILi1ELb1EEvPfS0_PKvPKilllPy";
  const ptx = new Map([
    [ATT, { maxThreads: 128, tensorCore: true }],
    [LNW, { maxThreads: 256, tensorCore: false }],
    [CEW, { maxThreads: 512, tensorCore: false }],
  ]);
  // as built: 64 registers and 48 KiB staged (C = 768): 4 blocks of 8 warps either way, 50%
  const built = kernelRows([ptxas(ATT, 122), ptxas(LNW, 64), ptxas(CEW, 40)].join("\n"), ptx);
  assert.deepEqual(reportProblems(built), []);
  const lnw = built.find((r) => r.name.includes("dt_layernorm_bwd_warp_k_<"))!;
  assert.equal(lnw.dynamicSmem, 8 * 2 * 768 * 4);
  assert.equal(lnw.occupancy.blocks, 4);
  // 72 registers: 3 blocks of the layer norm (37.5%), 1 block of 16 warps of cross-entropy (25%)
  const heavy = reportProblems(
    kernelRows([ptxas(ATT, 122), ptxas(LNW, 72), ptxas(CEW, 72)].join("\n"), ptx),
  ).join("\n");
  assert.match(heavy, /dt_layernorm_bwd_warp_k_<1>.*occupancy 37\.5% < 50\.0%/);
  assert.match(heavy, /dt_ce_fwd_k_<1, true>.*occupancy 25\.0% < 50\.0%/);
});
