/**
 * The attention cases of the op sweep (dt_attention_fwd/bwd): causal and
 * full, sequence lengths that are not multiples of either library's tiles,
 * head dimensions of each kernel class (up to 32, 64, 128, 256) and odd ones,
 * f32, bf16 and f16. Backward's saved inputs (output, log-sum-exp) come from
 * the CPU library's forward, so each side starts from the same data.
 */
import type { KernelSymbols } from "../../ffi/symbols.ts";
import type { NativeLibrary } from "../../ffi/native.ts";
import { type Arr, type Case, type Kind, type Rng, toBf16, toF16 } from "./_harness.ts";
import { attentionBwdBounds, attentionFwdBounds } from "./op_bounds_attention.ts";

/** [B, T, H, D, causal] */
export type AttentionShape = [number, number, number, number, number];

/** Sizes for a real GPU: GPT-2's shape among them. */
export const GPU_ATTENTION: AttentionShape[] = [
  [1, 1, 1, 1, 1],
  [2, 1024, 12, 64, 1],
  [1, 333, 4, 128, 1],
  [2, 257, 3, 32, 0],
  [1, 200, 2, 256, 1],
  [3, 129, 5, 80, 1],
];

/** Sizes for the emulated device: every kernel class, tails of every tile, small enough for CI. */
export const EMULATED_ATTENTION: AttentionShape[] = [
  [0, 5, 2, 8, 1],
  [1, 1, 1, 1, 1],
  [1, 70, 1, 16, 1],
  [2, 37, 2, 32, 1],
  [1, 45, 1, 64, 0],
  [1, 33, 1, 128, 1],
  [1, 19, 1, 256, 1],
  [1, 21, 2, 48, 1],
];

const DTYPES = [["f32", 0], ["bf16", 1], ["f16", 2]] as const;
/** normwise relative error allowed: f32 has per-element bounds (op_bounds_attention.ts), this
 *  0 covers nothing; bf16/f16 run on tensor cores, 4 unit roundoffs (each side's output rounding,
 *  P and dS rounded before their products, one of headroom: tests/cuda/_attention_tolerance.ts
 *  derives it) */
const TOL = { f32: 0, bf16: 4 * 2 ** -8, f16: 4 * 2 ** -11 } as const;

/** Both attention kernels for each shape and dtype (f16 on the odd-sized shapes only, to keep CI short). */
export function attentionCases(
  rng: Rng,
  cpu: NativeLibrary<KernelSymbols>,
  shapes: AttentionShape[],
): Case[] {
  const cases: Case[] = [];
  const n64 = BigInt;
  for (const [si, [B, T, H, D, causal]] of shapes.entries()) {
    for (const [kind, code] of DTYPES) {
      if (kind === "f16" && si % 3 !== 2) continue;
      const C = H * D, scale = 1 / Math.sqrt(D);
      const round = (x: Float32Array): Arr =>
        kind === "f32" ? x : kind === "bf16" ? toBf16(x) : toF16(x);
      const outArr = (
        n: number,
      ): Arr => (kind === "f32" ? new Float32Array(n) : new Uint16Array(n));
      const qkv = round(rng.normals(B * T * 3 * C));
      const dout = round(rng.normals(B * T * C));
      const out = outArr(B * T * C), lse = new Float32Array(B * H * T);
      const P = Deno.UnsafePointer.of;
      cpu.check(
        cpu.symbols.dt_attention_fwd(
          P(out),
          P(lse),
          P(qkv),
          code,
          n64(B),
          n64(T),
          n64(H),
          n64(D),
          causal,
          scale,
          null,
        ),
        "dt_attention_fwd",
      );
      const size = `B${B} T${T} H${H} D${D}${causal ? " causal" : ""}`;
      const tol = TOL[kind];
      const dims = { B, T, H, D, causal, scale };
      const f32 = kind === "f32";
      cases.push({
        op: "attention fwd",
        symbols: ["dt_attention_fwd"],
        dtype: kind,
        size,
        tol,
        ...(f32
          ? {
            bounds: (ref: (name: string) => Arr) =>
              attentionFwdBounds(
                cpu,
                qkv as Float32Array,
                ref("out") as Float32Array,
                ref("lse") as Float32Array,
                dims,
              ),
          }
          : {}),
        inputs: { qkv },
        outputs: {
          out: [outArr(B * T * C), kind as Kind],
          lse: [new Float32Array(B * H * T), "f32"],
        },
        call: (k, p, s) =>
          k.dt_attention_fwd(
            p("out"),
            p("lse"),
            p("qkv"),
            code,
            n64(B),
            n64(T),
            n64(H),
            n64(D),
            causal,
            scale,
            s,
          ),
      });
      cases.push({
        op: "attention bwd",
        symbols: ["dt_attention_bwd"],
        dtype: kind,
        size,
        tol,
        ...(f32
          ? {
            bounds: () => ({
              dqkv: attentionBwdBounds(
                cpu,
                qkv as Float32Array,
                dout as Float32Array,
                out as Float32Array,
                lse,
                dims,
              ),
            }),
          }
          : {}),
        inputs: { dout, qkv, out, lse },
        outputs: { dqkv: [outArr(B * T * 3 * C), kind as Kind] },
        call: (k, p, s) =>
          k.dt_attention_bwd(
            p("dqkv"),
            p("dout"),
            p("qkv"),
            p("out"),
            p("lse"),
            code,
            n64(B),
            n64(T),
            n64(H),
            n64(D),
            causal,
            scale,
            s,
          ),
      });
    }
  }
  return cases;
}
