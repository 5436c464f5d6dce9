/**
 * The elementwise cases of the op sweep at offsets: the GPU library reads and
 * writes 128 bits at a time where its pointers share a 16-byte phase (a
 * scalar head, float4 vectors, a scalar tail) and element by element where
 * they do not. Each case offsets out and the inputs by a few floats — all
 * alike (a head of 1 to 3), or differently (the scalar path) — at sizes that
 * are not multiples of 4; dt_binary's broadcast forms too (their multiply-and-
 * shift division). The elements around the written run must stay untouched.
 */
import { type Case, type Rng } from "./_harness.ts";
import { axpyBounds, geluBwdBounds, geluFwdBounds } from "./op_bounds.ts";

/** [out, a, b] offsets in floats: one shared phase with a head of 1, 2, 3; mixed phases. */
const OFFSETS: [number, number, number][] = [[1, 1, 1], [2, 2, 2], [3, 3, 3], [0, 1, 2], [1, 0, 0]];

/** Sizes: below one vector, odd, beyond the emulated grid's one pass. */
export const EMULATED_VEC_SIZES = [3, 4099, 40_009];
/** [n, bn, inner] broadcasts (a row bias, a column scale, a middle axis; divisors that are a
 *  power of two and a large prime, for the multiply-and-shift division). */
export const EMULATED_VEC_BROADCAST: [number, number, number][] = [
  [77 * 301, 77, 1],
  [65 * 33, 65, 33],
  [12_345, 7, 10],
  [3 * 65_536, 3, 65_536],
  [2 * 1_000_003 + 5, 2, 1_000_003],
];

/** The offset cases of every f32 map of the elementwise kernels and of the broadcasts. */
export function vecCases(
  rng: Rng,
  sizes: number[],
  broadcast: [number, number, number][],
): Case[] {
  const cases: Case[] = [];
  const n64 = BigInt;
  const at = (p: Deno.PointerValue, floats: number) =>
    floats === 0 || p === null ? p : Deno.UnsafePointer.offset(p, 4 * floats);
  for (const n of sizes) {
    for (const [oo, oa, ob] of OFFSETS) {
      const a = rng.normals(n + 3),
        b = Float32Array.from(rng.normals(n + 3), (v) => 0.5 + Math.abs(v));
      const init = rng.normals(n + 3);
      const size = `${n} @${oo},${oa},${ob}`;
      /** Per-element bounds of the written run out[oo, oo + n) (0 around it: left untouched). */
      const run = (written: Float64Array) => {
        const bound = new Float64Array(n + 3);
        bound.set(written, oo);
        return bound;
      };
      const aRun = a.subarray(oa, oa + n), bRun = b.subarray(ob, ob + n);
      const base = (
        op: string,
        symbol: Case["symbols"][number],
        tol: number,
        call: Case["call"],
        bounds?: () => Float64Array,
      ): Case => ({
        op: `${op} (offsets)`,
        symbols: [symbol],
        dtype: "f32",
        size,
        tol,
        ...(bounds ? { bounds: () => ({ out: bounds() }) } : {}),
        inputs: { a, b },
        inout: { out: [init, "f32"] },
        call,
      });
      cases.push(
        base(
          "binary add",
          "dt_binary",
          0,
          (k, p, s) =>
            k.dt_binary(0, at(p("out"), oo), at(p("a"), oa), at(p("b"), ob), n64(n), n64(n), 1n, s),
        ),
        base(
          "binary div",
          "dt_binary",
          0,
          (k, p, s) =>
            k.dt_binary(3, at(p("out"), oo), at(p("a"), oa), at(p("b"), ob), n64(n), n64(n), 1n, s),
        ),
        base(
          "scale",
          "dt_scale",
          0,
          (k, p, s) => k.dt_scale(at(p("out"), oo), at(p("a"), oa), n64(n), 0.7, s),
        ),
        base(
          "axpy",
          "dt_axpy",
          0,
          (k, p, s) => k.dt_axpy(at(p("out"), oo), at(p("a"), oa), n64(n), -1.3, s),
          () => run(axpyBounds(aRun, init.subarray(oo, oo + n), -1.3)),
        ),
        base(
          "relu fwd",
          "dt_relu_fwd",
          0,
          (k, p, s) => k.dt_relu_fwd(at(p("out"), oo), at(p("a"), oa), n64(n), s),
        ),
        base(
          "relu bwd",
          "dt_relu_bwd",
          0,
          (k, p, s) => k.dt_relu_bwd(at(p("out"), oo), at(p("b"), ob), at(p("a"), oa), n64(n), s),
        ),
        base(
          "gelu fwd",
          "dt_gelu_fwd",
          0,
          (k, p, s) => k.dt_gelu_fwd(at(p("out"), oo), at(p("a"), oa), n64(n), s),
          () => run(geluFwdBounds(aRun, "f32")),
        ),
        base(
          "gelu bwd",
          "dt_gelu_bwd",
          0,
          (k, p, s) => k.dt_gelu_bwd(at(p("out"), oo), at(p("b"), ob), at(p("a"), oa), n64(n), s),
          () => run(geluBwdBounds(aRun, bRun, "f32")),
        ),
        base(
          "dropout fwd",
          "dt_dropout_fwd",
          0,
          (k, p, s) => k.dt_dropout_fwd(at(p("out"), oo), at(p("a"), oa), n64(n), 0.25, 77n, 5n, s),
        ),
      );
    }
  }
  for (const [n, bn, inner] of broadcast) {
    for (const [oo, oa] of [[1, 1], [0, 0], [2, 1]] as const) {
      const a = rng.normals(n + 3), b = rng.normals(bn), init = rng.normals(n + 3);
      cases.push({
        op: "binary broadcast sub (offsets)",
        symbols: ["dt_binary"],
        dtype: "f32",
        size: `${n}/${bn}x${inner} @${oo},${oa}`,
        tol: 0,
        inputs: { a, b },
        inout: { out: [init, "f32"] },
        call: (k, p, s) =>
          k.dt_binary(1, at(p("out"), oo), at(p("a"), oa), p("b"), n64(n), n64(bn), n64(inner), s),
      });
    }
  }
  return cases;
}
