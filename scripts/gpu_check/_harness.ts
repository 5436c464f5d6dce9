/**
 * The harness of scripts/gpu_check/ops_vs_cpu.ts: both kernel libraries in
 * one process, one case run on each from the same host data (the GPU's
 * outputs poisoned with NaN first), and the comparison: a normwise relative
 * error per output, where a NaN or a leftover poison value never passes.
 */
import { KERNEL_SYMBOLS, type KernelSymbols } from "../../ffi/symbols.ts";
import { cString, type NativeLibrary, openLibrary } from "../../ffi/native.ts";
import type { CudaFlavor } from "../../ffi/cuda_discovery.ts";
import { openCudaBackend } from "../../tensor/cuda_backend.ts";
import { withinBounds } from "./tolerance.ts";

export type Arr =
  | Float32Array
  | Float64Array
  | Int32Array
  | BigInt64Array
  | Uint16Array
  | Uint8Array;
export type Kernels = NativeLibrary<KernelSymbols>["symbols"];

/** How an output's numbers are read for comparison. */
export type Kind = "f32" | "f64" | "bf16" | "f16" | "int" | "bytes";

/** One comparison of an op on both libraries. */
export interface Case {
  /** row label, e.g. "gelu fwd" */
  op: string;
  /** the kernel symbols this case exercises (coverage is checked at the end) */
  symbols: (keyof KernelSymbols)[];
  /** dtype column of the report */
  dtype: string;
  /** "3x1025", ... */
  size: string;
  /** normwise relative error allowed (0: bit-identical); ignored for the outputs of `bounds` */
  tol: number;
  /**
   * Per-element bounds on |GPU - CPU| of some outputs, derived from the dtypes' unit roundoff and
   * the reduction sizes (tolerance.ts); for those outputs the error shown is the worst ratio of a
   * difference to its bound, and it passes up to 1. Called once, after the CPU ran, with the CPU's
   * results (`reference(name)`: an output's or in-out buffer's contents after the CPU's call).
   */
  bounds?: (reference: (name: string) => Arr) => Record<string, Float64Array>;
  /** read-only inputs */
  inputs?: Record<string, Arr>;
  /** written outputs (their contents are ignored: both sides start poisoned) */
  outputs?: Record<string, [Arr, Kind]>;
  /** read and written: both sides start from this data */
  inout?: Record<string, [Arr, Kind]>;
  /** the call, given a pointer for each named buffer (null for absent names) */
  call(k: Kernels, p: (name: string) => Deno.PointerValue, stream: Deno.PointerValue): number;
}

/** A case's outcome. */
export interface Outcome {
  ok: boolean;
  /** worst normwise relative error over the outputs */
  err: number;
  /** what failed, or "" */
  detail: string;
}

let cpu: NativeLibrary<KernelSymbols> | undefined;

/** With DTRAIN_GPU_CHECK_SELF_TEST=1 the CPU library stands in for the GPU one, so
 *  that the cases and the harness can be checked on a machine without a GPU. */
export const SELF_TEST = Deno.env.get("DTRAIN_GPU_CHECK_SELF_TEST") === "1";

/** The device the checks run on: DTRAIN_DEVICE=cuda-emu for the emulated GPU, else a real one. */
export function checkFlavor(): CudaFlavor {
  return Deno.env.get("DTRAIN_DEVICE") === "cuda-emu" ? "cuda-emu" : "cuda";
}

/** Both libraries: the CPU one, and the GPU backend (device, cuBLASLt, compute stream). */
export function libraries(): CaseLibraries {
  cpu ??= openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS);
  if (SELF_TEST) return { cpu, gpu: cpu, stream: null };
  const b = openCudaBackend(checkFlavor());
  return { cpu, gpu: b.lib, stream: b.stream };
}

function poisonOf(a: Arr, kind: Kind): Arr {
  const c = a.slice();
  if (c instanceof Float32Array || c instanceof Float64Array) c.fill(NaN);
  else if (c instanceof Uint16Array) c.fill(kind === "bf16" ? 0x7fc0 : 0x7e00);
  else if (c instanceof Int32Array) c.fill(0x7f7f7f7f);
  else if (c instanceof BigInt64Array) c.fill(0x7f7f7f7f7f7f7f7fn);
  else c.fill(0xa5);
  return c;
}

const u32 = new Uint32Array(1), f32 = new Float32Array(u32.buffer);

/** The values of an array of `kind` as numbers (bf16/f16 bits decoded). */
export function asNumbers(a: Arr, kind: Kind): ArrayLike<number> {
  return values(a, kind);
}

/** The values of an output as numbers. */
function values(a: Arr, kind: Kind): ArrayLike<number> {
  if (kind === "bf16") {
    return Array.from(a as Uint16Array, (h) => {
      u32[0] = h << 16;
      return f32[0]!;
    });
  }
  if (kind === "f16") return new Float16Array((a as Uint16Array).buffer, a.byteOffset, a.length);
  if (a instanceof BigInt64Array) return Array.from(a, Number);
  return a as ArrayLike<number>;
}

/** Whether element i of a and b has the same bytes. */
function sameBits(a: Arr, b: Arr, i: number): boolean {
  const n = a.BYTES_PER_ELEMENT;
  const x = new Uint8Array(a.buffer, a.byteOffset + i * n, n);
  const y = new Uint8Array(b.buffer, b.byteOffset + i * n, n);
  return x.every((v, k) => v === y[k]);
}

/** Normwise relative error max|g - c| / max|c|; Infinity on a NaN the CPU does not
 * have, or on an output element still holding its poison (never written). A NaN
 * the CPU has too (a loss over no valid row) passes when the GPU wrote it. */
function compare(
  gpu: Arr,
  cpuOut: Arr,
  kind: Kind,
  poison: Arr | null,
): { err: number; at: number } {
  const g = values(gpu, kind), c = values(cpuOut, kind);
  if (kind === "int" || kind === "bytes") {
    // an output still holding its poison was never written: that fails even when the CPU agrees
    const unwritten = poison ? values(poison, kind) : null;
    for (let i = 0; i < g.length; i++) {
      if (g[i] !== c[i] || (unwritten && g[i] === unwritten[i] && kind === "int")) {
        return { err: Infinity, at: i };
      }
    }
    return { err: 0, at: -1 };
  }
  let scale = 0, worst = 0, at = -1;
  for (let i = 0; i < c.length; i++) {
    const bothNaN = Number.isNaN(g[i]!) && Number.isNaN(c[i]!);
    if (bothNaN && poison && sameBits(gpu, poison, i)) return { err: Infinity, at: i };
    if (!bothNaN && (Number.isNaN(g[i]!) || Number.isNaN(c[i]!))) return { err: Infinity, at: i };
    if (Number.isFinite(c[i]!)) scale = Math.max(scale, Math.abs(c[i]!));
  }
  for (let i = 0; i < c.length; i++) {
    if (g[i] === c[i] || (Number.isNaN(g[i]!) && Number.isNaN(c[i]!))) continue;
    const d = Math.abs(g[i]! - c[i]!);
    if (!(d <= worst)) [worst, at] = [d, i];
  }
  return { err: worst === 0 ? 0 : worst / (scale || 1e-30), at };
}

/** The two libraries a case compares, and the device library's stream. */
export interface CaseLibraries {
  cpu: NativeLibrary<KernelSymbols>;
  gpu: NativeLibrary<KernelSymbols>;
  stream: Deno.PointerValue;
}

/** Runs the case on the CPU (host arrays) and the GPU (device copies), and compares;
 *  `around`, when given, makes the device call (after the uploads, before the read-back). */
export function runCase(
  c: Case,
  libs: CaseLibraries = libraries(),
  around?: (deviceCall: () => number) => number,
): Outcome {
  const { cpu, gpu, stream } = libs;
  const names = new Map<string, { init: Arr; kind: Kind | null; poison: Arr | null }>();
  for (const [n, a] of Object.entries(c.inputs ?? {})) {
    names.set(n, { init: a, kind: null, poison: null });
  }
  for (const [n, [a, kind]] of Object.entries(c.outputs ?? {})) {
    names.set(n, { init: poisonOf(a, kind), kind, poison: poisonOf(a, kind) });
  }
  for (const [n, [a, kind]] of Object.entries(c.inout ?? {})) {
    names.set(n, { init: a, kind, poison: null });
  }

  // CPU: private copies of everything
  const host = new Map<string, Arr>();
  for (const [n, v] of names) host.set(n, v.init.slice());
  const cpuStatus = c.call(
    cpu.symbols,
    (n) => (host.has(n) ? Deno.UnsafePointer.of(host.get(n)!) : null),
    null,
  );
  if (cpuStatus !== 0) {
    return {
      ok: false,
      err: Infinity,
      detail: `CPU status ${cpuStatus}: ${cString(cpu.symbols.dt_last_error())}`,
    };
  }

  // GPU: device copies of the same initial contents (outputs poisoned)
  const k = gpu.symbols;
  const dev = new Map<string, Deno.PointerObject>();
  try {
    for (const [n, v] of names) {
      const p = k.dt_alloc(BigInt(Math.max(v.init.byteLength, 1)));
      if (p === null) {
        return { ok: false, err: Infinity, detail: `dt_alloc: ${cString(k.dt_last_error())}` };
      }
      dev.set(n, p);
      if (v.init.byteLength > 0) {
        gpu.check(
          k.dt_memcpy(p, Deno.UnsafePointer.of(v.init), BigInt(v.init.byteLength), 1, stream),
          "dt_memcpy",
        );
      }
    }
    const deviceCall = () => c.call(k, (n) => dev.get(n) ?? null, stream);
    const st = around ? around(deviceCall) : deviceCall();
    if (st !== 0) {
      return {
        ok: false,
        err: Infinity,
        detail: `GPU status ${st}: ${cString(k.dt_last_error())}`,
      };
    }
    gpu.check(k.dt_synchronize(stream), "dt_synchronize");
    let worst = 0;
    let bounds: Record<string, Float64Array> | undefined;
    for (const [n, v] of names) {
      if (v.kind === null) continue;
      const out = v.init.slice();
      if (out.byteLength > 0) {
        gpu.check(
          k.dt_memcpy(Deno.UnsafePointer.of(out), dev.get(n)!, BigInt(out.byteLength), 2, stream),
          "dt_memcpy",
        );
      }
      let { err, at } = compare(out, host.get(n)!, v.kind, v.poison);
      const bound = Number.isFinite(err)
        ? (bounds ??= c.bounds?.((name) => host.get(name)!) ?? {})[n]
        : undefined;
      const tol = bound ? 1 : c.tol;
      if (bound) {
        ({ worst: err, at } = withinBounds(
          values(out, v.kind),
          values(host.get(n)!, v.kind),
          bound,
        ));
      }
      if (!(err <= tol)) {
        const show = (a: Arr) => String(values(a, v.kind!)[at]);
        return {
          ok: false,
          err,
          detail: `${n}[${at}]: GPU ${show(out)}, CPU ${show(host.get(n)!)} (${
            bound
              ? `${err.toExponential(2)} times its bound ${bound[at]!.toExponential(2)}`
              : `error ${err.toExponential(2)} > ${c.tol}`
          })`,
        };
      }
      worst = Math.max(worst, err);
    }
    return { ok: true, err: worst, detail: "" };
  } finally {
    for (const p of dev.values()) k.dt_free(p);
  }
}

/** A seeded generator (mulberry32), so a failing case can be rerun. */
export class Rng {
  #s: number;
  constructor(seed: number) {
    this.#s = seed >>> 0;
  }
  next(): number {
    let t = (this.#s = (this.#s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  normal(): number {
    return Math.sqrt(-2 * Math.log(1 - this.next())) * Math.cos(2 * Math.PI * this.next());
  }
  normals(n: number, scale = 1): Float32Array {
    return Float32Array.from({ length: n }, () => this.normal() * scale);
  }
  ints(n: number, lo: number, hi: number): Int32Array {
    return Int32Array.from({ length: n }, () => lo + Math.floor(this.next() * (hi - lo)));
  }
}

/** f32 values rounded to bf16 (round to nearest even), as raw bits. */
export function toBf16(x: Float32Array): Uint16Array {
  const bits = new Uint32Array(x.buffer, x.byteOffset, x.length);
  return Uint16Array.from(bits, (u) => ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff);
}

/** f32 values rounded to f16, as raw bits. */
export function toF16(x: Float32Array): Uint16Array {
  const h = Float16Array.from(x);
  return new Uint16Array(h.buffer);
}
