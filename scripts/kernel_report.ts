/**
 * `deno task kernel-report`: every sm_90 kernel of libdtrain_cuda.so with what
 * it costs a multiprocessor — registers per thread, spilled bytes, local
 * memory (stack frame), static and dynamic shared memory, block size — the
 * theoretical occupancy on sm_90 those allow (scripts/kernel_resources.ts has
 * the formula) and whether its PTX holds tensor-core instructions. Then the
 * checks tests/cuda/kernel_report_test.ts runs in CI: no kernel spills or
 * keeps a stack frame, the attention kernels use tensor cores, and the hot
 * kernels reach their occupancy floors (HOT_KERNELS says why each).
 *
 * Registers, spills and static shared memory come from the build's own
 * `-Xptxas -v` report (build/libdtrain_cuda.so.ptxas.txt: no compile of its
 * own); PTX comes from `nvcc -ptx` for compute_90 per source file, cached in
 * build/ptx/ by a hash of the sources.
 *
 *   deno task kernel-report [--markdown] [--only SUBSTRING] [--files a.cu,b.cu] [--no-build]
 *
 * --no-build reads the ptxas report the last build left, even if sources changed since.
 *
 * Needs nvcc; exits 1 saying so without it, and 1 when a check fails.
 */
import { createHash } from "node:crypto";
import { join } from "node:path";
import { BUILD_DIR, buildNative, hasCommand } from "./build_native.ts";
import {
  demangle,
  type Occupancy,
  occupancySm90,
  parsePtx,
  parsePtxas,
  type PtxEntry,
  SM90,
} from "./kernel_resources.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const CUDA_DIR = join(ROOT, "kernels/cuda");

/** Threads per block of kernels that declare no __launch_bounds__: the library's DT_BLOCK. */
export const DEFAULT_BLOCK = 256;

/**
 * Dynamic shared memory of the kernels that take it, by demangled-name
 * pattern: kernels/cuda/attention_tc.cu's dt_tc_smem_ (padded rows of
 * DMAX + 8 elements; fwd: 64 query rows + two K and two V tiles of BN rows;
 * dq: query and dO rows + the tiles; dkv: K and V rows + the tiles + two
 * lse/delta rows of BN floats; BN = 64 for DMAX 64, 32 for 128); and
 * kernels/cuda/layernorm.cu's backward warp rows, which stage 2C floats per
 * warp (8 warps) when the parameter gradients are wanted: shown at GPT-2's
 * C = 768 (48 KiB; C = 1024 takes 64 KiB, 3 blocks per SM).
 */
export const DYNAMIC_SMEM: [RegExp, number][] = [
  [/dt_attention_tc_fwd_k_<\d, 64>/, (64 + 4 * 64) * 72 * 2],
  [/dt_attention_tc_fwd_k_<\d, 128>/, (64 + 4 * 32) * 136 * 2],
  [/dt_attention_tc_dq_k_<\d, 64>/, (128 + 4 * 64) * 72 * 2],
  [/dt_attention_tc_dq_k_<\d, 128>/, (128 + 4 * 32) * 136 * 2],
  [/dt_attention_tc_dkv_k_<\d, 64>/, (128 + 4 * 64) * 72 * 2 + 4 * 64 * 4],
  [/dt_attention_tc_dkv_k_<\d, 128>/, (128 + 4 * 32) * 136 * 2 + 4 * 32 * 4],
  [/dt_layernorm_bwd_warp_k_</, 8 * 2 * 768 * 4],
];

/**
 * Kernels on a GPT-2 training step's hot path and the occupancy each must
 * reach on sm_90 (fraction of 64 warps).
 * - Tensor-core attention: 1/8 (8 warps, two 4-warp blocks): FlashAttention-2
 *   runs at this level too — its warps keep 16 x D accumulators in registers
 *   and hide mma and exp latency by independent work within the warp; two
 *   warps per scheduler are what lets one's loads overlap the other's math.
 * - Memory-bound row and fold kernels (layer norm, its parameter-gradient
 *   fold, cross-entropy, softmax, the bias-gradient sums, AdamW): 1/2. By
 *   Little's law an H100 needs about 3.35 TB/s x ~0.6 us = 2 MB in flight, 15 KB
 *   per SM: 1024 threads with a 16-byte load each, i.e. 32 of 64 warps.
 */
export const HOT_KERNELS: { pattern: RegExp; min: number; tensorCore: boolean; why: string }[] = [
  {
    pattern: /\bdt_attention_tc_(fwd|dq|dkv)_k_</,
    min: 1 / 8,
    tensorCore: true,
    why: "tensor-core attention: 2 blocks of 4 warps",
  },
  {
    pattern:
      /\bdt_(layernorm_(fwd|bwd)(_warp)?_k_|layernorm_(fold|fold_rows)_k_|ce_(fwd|bwd)_k_|softmax_(fwd|bwd)(_warp)?_k_|gemm_bgrad_(cols|fold)_k_|adamw_many_k_)/,
    min: 1 / 2,
    tensorCore: false,
    why: "memory-bound: 32 warps keep 15 KB per SM in flight",
  },
];

/** The sources that hold the hot kernels: the PTX the CI check compiles. */
export const HOT_FILES = [
  "attention_tc.cu",
  "layernorm.cu",
  "loss.cu",
  "rows.cu",
  "gemm_epilogue.cu",
  "optim.cu",
];

/** One kernel row of the report. */
export interface KernelRow {
  name: string;
  mangled: string;
  registers: number;
  spillBytes: number;
  stack: number;
  staticSmem: number;
  dynamicSmem: number;
  threads: number;
  /** the block size is DEFAULT_BLOCK, assumed (no __launch_bounds__) */
  assumedBlock: boolean;
  occupancy: Occupancy;
  /** null: no PTX was read for this kernel */
  tensorCore: boolean | null;
}

/** The rows for a ptxas report and the PTX entries found (sm_90 entries only). */
export function kernelRows(ptxasText: string, ptx: Map<string, PtxEntry>): KernelRow[] {
  const fns = parsePtxas(ptxasText).filter((f) => f.arch === "sm_90" && f.entry);
  const names = demangle(fns.map((f) => f.name));
  return fns.map((f, i) => {
    const name = names[i]!;
    const p = ptx.get(f.name);
    const threads = p?.maxThreads ?? DEFAULT_BLOCK;
    const dynamicSmem = DYNAMIC_SMEM.find(([re]) => re.test(name))?.[1] ?? 0;
    return {
      name,
      mangled: f.name,
      registers: f.registers,
      spillBytes: f.spillStores + f.spillLoads,
      stack: f.stack,
      staticSmem: f.smem,
      dynamicSmem,
      threads,
      assumedBlock: p?.maxThreads == null,
      occupancy: occupancySm90(f.registers, threads, f.smem + dynamicSmem),
      tensorCore: p ? p.tensorCore : null,
    };
  });
}

/** What the CI checks find wrong with the rows ([] when all is well). */
export function reportProblems(rows: KernelRow[]): string[] {
  const bad: string[] = [];
  for (const r of rows) {
    if (r.spillBytes || r.stack) {
      bad.push(
        `${r.name}: ${r.spillBytes} bytes spilled, ${r.stack} bytes of stack (local memory)`,
      );
    }
    const hot = HOT_KERNELS.find((h) => h.pattern.test(r.name));
    if (!hot) continue;
    if (hot.tensorCore && r.tensorCore !== true) {
      bad.push(
        `${r.name}: no tensor-core instruction in its PTX${
          r.tensorCore === null ? " (PTX not read)" : ""
        }`,
      );
    }
    if (r.occupancy.fraction < hot.min) {
      bad.push(
        `${r.name}: occupancy ${pct(r.occupancy.fraction)} < ${pct(hot.min)} (${hot.why}; ` +
          `limited by ${r.occupancy.limiter})`,
      );
    }
  }
  for (const h of HOT_KERNELS.filter((h) => h.tensorCore)) {
    if (!rows.some((r) => h.pattern.test(r.name))) {
      bad.push(`no kernel matches ${h.pattern}: ${h.why}`);
    }
  }
  return bad;
}

const pct = (f: number) => `${(100 * f).toFixed(1)}%`;

/** A hash of every CUDA and common source: PTX is recompiled when any changes. */
function sourcesHash(): string {
  const h = createHash("sha256");
  for (const dir of ["kernels/common", "kernels/cuda"]) {
    const files = [...Deno.readDirSync(join(ROOT, dir))].map((e) => e.name).sort();
    for (const f of files) {
      h.update(f);
      h.update(Deno.readFileSync(join(ROOT, dir, f)));
    }
  }
  return h.digest("hex").slice(0, 16);
}

/** The PTX (compute_90) of kernels/cuda/<file>, compiled or taken from the cache. */
export async function ptxOf(
  files: string[],
  log = (_: string) => {},
): Promise<Map<string, PtxEntry>> {
  const dir = join(BUILD_DIR, "ptx");
  Deno.mkdirSync(dir, { recursive: true });
  const hash = sourcesHash();
  const out = new Map<string, PtxEntry>();
  const queue = [...files];
  const worker = async () => {
    for (let f = queue.shift(); f; f = queue.shift()) {
      const path = join(dir, `${f}.${hash}.ptx`);
      let text: string;
      try {
        text = Deno.readTextFileSync(path);
      } catch {
        log(`kernel-report: nvcc -ptx ${f}`);
        const tmp = `${path}.tmp-${Deno.pid}`;
        const r = await new Deno.Command("nvcc", {
          args: [
            "-ptx",
            "-O3",
            "-std=c++17",
            "-arch=compute_90",
            `-I${ROOT}kernels/common`,
            "-o",
            tmp,
            join(CUDA_DIR, f),
          ],
          stdout: "piped",
          stderr: "piped",
        }).output();
        if (!r.success) {
          throw new Error(`nvcc -ptx ${f} failed:\n${new TextDecoder().decode(r.stderr)}`);
        }
        Deno.renameSync(tmp, path);
        text = Deno.readTextFileSync(path);
      }
      for (const [k, v] of parsePtx(text)) out.set(k, v);
    }
  };
  await Promise.all([worker(), worker()]);
  return out;
}

/** The CUDA sources of the library. */
export function cudaSources(): string[] {
  return [...Deno.readDirSync(CUDA_DIR)].map((e) => e.name).filter((n) => n.endsWith(".cu")).sort();
}

/** The report as text (aligned columns) or a Markdown table. */
export function formatReport(rows: KernelRow[], markdown: boolean): string {
  const head = [
    "kernel",
    "regs",
    "spill B",
    "local B",
    "smem B",
    "dyn smem B",
    "block",
    "blocks/SM",
    "occupancy",
    "limit",
    "MMA",
  ];
  const body = rows.map((r) => [
    r.name.replace(/^void /, "").replace(/\(.*\)$/, ""),
    String(r.registers),
    String(r.spillBytes),
    String(r.stack),
    String(r.staticSmem),
    String(r.dynamicSmem),
    `${r.threads}${r.assumedBlock ? "*" : ""}`,
    String(r.occupancy.blocks),
    pct(r.occupancy.fraction),
    r.occupancy.limiter,
    r.tensorCore === null ? "?" : r.tensorCore ? "yes" : "no",
  ]);
  const notes = [
    `Theoretical occupancy on sm_90 (${SM90.registers} registers, ${SM90.sharedBytes} B shared memory, ` +
    `${SM90.maxWarps} warps, ${SM90.maxBlocks} blocks per SM):`,
    "  blocks/SM = min(floor(floor(65536 / ceil256(32 * regs)) / warps), " +
    "floor(233472 / ceil128(smem + dyn smem + 1024)), floor(64 / warps), 32)",
    "  occupancy = blocks/SM * warps / 64, warps = ceil(block / 32)",
    `  block: __launch_bounds__ from the PTX; * = none declared, ${DEFAULT_BLOCK} (DT_BLOCK) assumed.` +
    " MMA: mma.sync/wgmma in the kernel's PTX.",
  ];
  if (markdown) {
    const line = (c: string[]) => `| ${c.join(" | ")} |`;
    return [...notes, "", line(head), line(head.map(() => "---")), ...body.map(line)].join("\n");
  }
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (c: string[]) =>
    c.map((x, i) => (i === 0 ? x.padEnd(widths[i]!) : x.padStart(widths[i]!))).join("  ");
  return [...notes, "", line(head), ...body.map(line)].join("\n");
}

if (import.meta.main) {
  const args = Deno.args;
  const opt = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  if (!hasCommand("nvcc")) {
    console.error("kernel-report: nvcc is not on PATH: the report reads nvcc's and ptxas's output");
    Deno.exit(1);
  }
  if (!args.includes("--no-build")) buildNative({});
  const ptxas = Deno.readTextFileSync(join(BUILD_DIR, "libdtrain_cuda.so.ptxas.txt"));
  const files = opt("--files")?.split(",") ?? cudaSources();
  const ptx = await ptxOf(files, (m) => console.error(m));
  const only = opt("--only");
  const rows = kernelRows(ptxas, ptx).filter((r) => !only || r.name.includes(only));
  console.log(formatReport(rows, args.includes("--markdown")));
  const problems = reportProblems(rows);
  if (problems.length) {
    console.log(`\n${problems.length} problem(s):\n${problems.map((p) => `  ${p}`).join("\n")}`);
    Deno.exit(1);
  }
  console.log(
    `\n${rows.length} kernels: no spills, attention on tensor cores, hot kernels at their occupancy floors`,
  );
}
