/**
 * What a CUDA kernel costs a multiprocessor, read without a GPU: the
 * registers, spills, stack and static shared memory ptxas reports
 * (`nvcc -Xptxas -v`, kept by the build in build/libdtrain_cuda.so.ptxas.txt),
 * the block size and tensor-core instructions of its PTX, and the theoretical
 * occupancy these give on sm_90 (H100/H200). Used by scripts/kernel_report.ts
 * (`deno task kernel-report`) and tests/cuda/kernel_report_test.ts.
 */

/** One function as ptxas reports it. */
export interface PtxasFunction {
  name: string;
  arch: string;
  entry: boolean;
  registers: number;
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
        registers: 0,
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
    m = line.match(/Used (\d+) registers/);
    if (m && current) {
      current.registers = +m[1]!;
      const s = line.match(/(\d+) bytes smem/);
      if (s) current.smem = +s[1]!;
    }
  }
  return out;
}

/** What the PTX of one entry says: its declared block size and tensor-core use. */
export interface PtxEntry {
  /** threads per block from `.maxntid` (__launch_bounds__), or null */
  maxThreads: number | null;
  /** the entry holds a tensor-core instruction (mma, wgmma) */
  tensorCore: boolean;
}

/** The entries of a PTX file by mangled name. */
export function parsePtx(text: string): Map<string, PtxEntry> {
  const out = new Map<string, PtxEntry>();
  const starts = [...text.matchAll(/\.entry\s+([\w$]+)\s*\(/g)];
  for (const [i, m] of starts.entries()) {
    const body = text.slice(m.index!, i + 1 < starts.length ? starts[i + 1]!.index! : text.length);
    const ntid = body.match(/\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)/);
    out.set(m[1]!, {
      maxThreads: ntid ? +ntid[1]! * +ntid[2]! * +ntid[3]! : null,
      tensorCore: /^\s*(wgmma\.|mma\.sync)/m.test(body),
    });
  }
  return out;
}

/** The multiprocessor of compute capability 9.0 (CUDA occupancy calculator's table). */
export const SM90 = {
  maxWarps: 64,
  maxBlocks: 32,
  registers: 65536,
  /** registers are allocated per warp in units of 256 */
  regUnit: 256,
  sharedBytes: 233472, // 228 KB
  /** the runtime reserves 1 KB of shared memory per block */
  sharedReserved: 1024,
  sharedUnit: 128,
} as const;

/** Theoretical occupancy of a kernel on sm_90, and what limits it. */
export interface Occupancy {
  blocks: number;
  warps: number;
  /** resident warps / 64 */
  fraction: number;
  limiter: "registers" | "shared memory" | "warps" | "blocks";
}

/**
 * blocks/SM = min(⌊⌊65536 / regsPerWarp⌋ / warpsPerBlock⌋,
 *                 ⌊233472 / ⌈smem + 1024⌉₁₂₈⌋, ⌊64 / warpsPerBlock⌋, 32),
 * regsPerWarp = ⌈32 · registers⌉₂₅₆, warpsPerBlock = ⌈threads / 32⌉;
 * occupancy = blocks · warpsPerBlock / 64.
 */
export function occupancySm90(registers: number, threads: number, sharedBytes: number): Occupancy {
  const up = (x: number, unit: number) => Math.ceil(x / unit) * unit;
  const warps = Math.ceil(threads / 32);
  const regsPerWarp = up(Math.max(registers, 1) * 32, SM90.regUnit);
  // on a tie the hardware's fixed limits are named first: nothing the kernel could spend less of
  const limits: [Occupancy["limiter"], number][] = [
    ["warps", Math.floor(SM90.maxWarps / warps)],
    ["blocks", SM90.maxBlocks],
    ["registers", Math.floor(Math.floor(SM90.registers / regsPerWarp) / warps)],
    [
      "shared memory",
      Math.floor(SM90.sharedBytes / up(sharedBytes + SM90.sharedReserved, SM90.sharedUnit)),
    ],
  ];
  const [limiter, blocks] = limits.reduce((a, b) => (b[1] < a[1] ? b : a));
  return { blocks, warps: blocks * warps, fraction: (blocks * warps) / SM90.maxWarps, limiter };
}

/** Demangled names (c++filt, when installed), in order; the names themselves otherwise. */
export function demangle(names: string[]): string[] {
  if (names.length === 0) return [];
  try {
    const r = new Deno.Command("c++filt", { args: names, stdout: "piped", stderr: "null" })
      .outputSync();
    const out = new TextDecoder().decode(r.stdout).trimEnd().split("\n");
    return r.success && out.length === names.length ? out : names;
  } catch {
    return names;
  }
}
