/**
 * The layer-norm cases of the op sweep (dt_layernorm_fwd/bwd): f32 with and
 * without the affine parameters, low-precision rows (bf16 in and out with a
 * residual added and the sum kept; f16 in with an f32 residual and f32 out),
 * and backward overwriting or adding into dinp and the parameter gradients,
 * and from rows at offset pointers (the warp-per-row kernels need 16-byte
 * aligned rows; others fall back to a block per row).
 * Backward's saved statistics come from the CPU library's forward.
 */
import type { KernelSymbols } from "../../ffi/symbols.ts";
import type { NativeLibrary } from "../../ffi/native.ts";
import { type Arr, asNumbers, type Case, type Kind, type Rng, toBf16, toF16 } from "./_harness.ts";
import { gamma, UNIT_ROUNDOFF } from "./tolerance.ts";
import { layerNormDxBounds, layerNormFwdBounds } from "./op_bounds_layernorm.ts";
import { outRounding } from "./op_bounds.ts";

const DT = { f32: 0, bf16: 1, f16: 2 } as const;
type Float = keyof typeof DT;
/** normwise error allowed besides the derived bounds: none (outputs without bounds are exact) */
const TOL = { exact: 0 } as const;

/** Forward and backward cases for each [rows, C]. */
export function layerNormCases(
  rng: Rng,
  cpu: NativeLibrary<KernelSymbols>,
  shapes: [number, number][],
): Case[] {
  const cases: Case[] = [];
  const n64 = BigInt;
  const round = (x: Float32Array, kind: Float): Arr =>
    kind === "f32" ? x : kind === "bf16" ? toBf16(x) : toF16(x);
  const buf = (
    kind: Float,
    n: number,
  ): [Arr, Kind] => [kind === "f32" ? new Float32Array(n) : new Uint16Array(n), kind];
  for (const [rows, C] of shapes) {
    const n = rows * C, size = `${rows}x${C}`;
    const w = rng.normals(C), b = rng.normals(C);
    // f32, with and without the affine parameters (the plain layer norm)
    const x = Float32Array.from(rng.normals(n), (v) => 2 + 3 * v);
    const dy = rng.normals(n);
    const [mean, rstd] = moments(cpu, x, "f32", rows, C, w, b);
    for (const affine of [true, false]) {
      const tag = affine ? "" : " (no affine)";
      cases.push({
        op: `layernorm fwd${tag}`,
        symbols: ["dt_layernorm_fwd"],
        dtype: "f32",
        size,
        tol: TOL.exact,
        bounds: () =>
          layerNormFwdBounds(x, affine ? w : null, affine ? b : null, mean, rstd, [rows, C]),
        inputs: affine ? { x, w, b } : { x },
        outputs: { y: buf("f32", n), mean: buf("f32", rows), rstd: buf("f32", rows) },
        call: (k, p, s) =>
          k.dt_layernorm_fwd(
            p("y"),
            p("mean"),
            p("rstd"),
            p("x"),
            p("w"),
            p("b"),
            n64(rows),
            n64(C),
            1e-5,
            0,
            0,
            null,
            0,
            null,
            s,
          ),
      });
      cases.push({
        op: `layernorm bwd${tag}`,
        symbols: ["dt_layernorm_bwd"],
        dtype: "f32",
        size,
        tol: TOL.exact,
        inputs: affine ? { dy, x, w, mean, rstd } : { dy, x, mean, rstd },
        outputs: affine
          ? { dx: buf("f32", n), dw: buf("f32", C), db: buf("f32", C) }
          : { dx: buf("f32", n) },
        bounds: () => ({
          ...(affine ? paramBounds(dy, x, "f32", mean, rstd, rows, C) : {}),
          dx: layerNormDxBounds(dy, x, affine ? w : null, mean, rstd, [rows, C]),
        }),
        call: (k, p, s) =>
          k.dt_layernorm_bwd(
            p("dx"),
            p("dw"),
            p("db"),
            p("dy"),
            p("x"),
            p("w"),
            p("mean"),
            p("rstd"),
            n64(rows),
            n64(C),
            0,
            0,
            0,
            0,
            s,
          ),
      });
    }
    // the residual stream: sum = inp + res (in inp's dtype), y = norm(sum); and f16 rows into f32
    for (const [inp, res, out] of [["bf16", "bf16", "bf16"], ["f16", "f32", "f32"]] as const) {
      const xi = round(Float32Array.from(rng.normals(n), (v) => 1 + 2 * v), inp);
      const ri = round(rng.normals(n), res);
      const keepSum = inp === "bf16";
      // the row both libraries normalise: inp + res in f32, rounded into inp's dtype
      const summed = () => {
        const xv = asNumbers(xi, inp), rv = asNumbers(ri, res);
        const f = Float32Array.from({ length: n }, (_, i) => xv[i]! + rv[i]!);
        return Float32Array.from(asNumbers(round(f, inp), inp));
      };
      cases.push({
        op: `layernorm fwd + residual${keepSum ? ", sum kept" : ""} (res ${res}, out ${out})`,
        symbols: ["dt_layernorm_fwd"],
        dtype: inp,
        size,
        tol: TOL.exact, // the sum kept: one IEEE add and one rounding, the same bits on both sides
        // y, mean, rstd: the f32 rows' bounds of the rounded sum, and y's rounding into its dtype
        bounds: (ref) => {
          const f = layerNormFwdBounds(
            summed(),
            w,
            b,
            ref("mean") as Float32Array,
            ref("rstd") as Float32Array,
            [rows, C],
          );
          const yRef = asNumbers(ref("y"), out);
          const y = Float64Array.from(f.y, (d, i) => d + outRounding(Math.abs(yRef[i]!) + d, out));
          return { y, mean: f.mean, rstd: f.rstd };
        },
        inputs: { x: xi, r: ri, w, b },
        outputs: {
          y: buf(out, n),
          mean: buf("f32", rows),
          rstd: buf("f32", rows),
          ...(keepSum ? { sum: buf(inp, n) } : {}),
        },
        call: (k, p, s) =>
          k.dt_layernorm_fwd(
            p("y"),
            p("mean"),
            p("rstd"),
            p("x"),
            p("w"),
            p("b"),
            n64(rows),
            n64(C),
            1e-5,
            DT[out],
            DT[inp],
            p("r"),
            DT[res],
            p("sum"),
            s,
          ),
      });
    }
    // backward in low precision, adding into dinp (flag 1) and the parameter gradients (flag 2)
    for (const [kind, flags] of [["bf16", 3], ["f16", 1]] as const) {
      const xl = round(Float32Array.from(rng.normals(n), (v) => 2 + 3 * v), kind);
      const dyl = round(rng.normals(n), kind);
      const [ml, rl] = moments(cpu, xl, kind, rows, C, w, b);
      const dx0 = round(rng.normals(n), kind);
      const dw0 = rng.normals(C), db0 = rng.normals(C);
      cases.push({
        op: `layernorm bwd, adds (flags ${flags})`,
        symbols: ["dt_layernorm_bwd"],
        dtype: kind,
        size,
        inputs: { dy: dyl, x: xl, w, mean: ml, rstd: rl },
        inout: flags & 2
          ? { dx: [dx0, kind], dw: [dw0, "f32"], db: [db0, "f32"] }
          : { dx: [dx0, kind] },
        tol: TOL.exact,
        // dx: the f32 rows' bound, the add into the old dx (one f32 rounding) and the rounding of
        // the sum into the dtype
        bounds: (ref) => {
          const f32 = (v: Arr) => Float32Array.from(asNumbers(v, kind));
          const dxF = layerNormDxBounds(f32(dyl), f32(xl), w, ml, rl, [rows, C]);
          const old = asNumbers(dx0, kind), got = asNumbers(ref("dx"), kind);
          const dx = Float64Array.from(dxF, (d, i) => {
            const added = d + 2 * UNIT_ROUNDOFF.f32 * (Math.abs(old[i]!) + Math.abs(got[i]!));
            return added + outRounding(Math.abs(got[i]!) + added, kind);
          });
          return {
            dx,
            ...(flags & 2 ? paramBounds(dyl, xl, kind, ml, rl, rows, C, { dw: dw0, db: db0 }) : {}),
          };
        },
        call: (k, p, s) =>
          k.dt_layernorm_bwd(
            p("dx"),
            p("dw"),
            p("db"),
            p("dy"),
            p("x"),
            p("w"),
            p("mean"),
            p("rstd"),
            n64(rows),
            n64(C),
            DT[kind],
            DT[kind],
            DT[kind],
            flags,
            s,
          ),
      });
    }
    // Rows a warp takes when 16-byte aligned: 4 floats in they still are, 1 float in they fall
    // back to a block per row (CPU and device get the same offset pointers; heads stay zero)
    if (rows === 0 || C % 4 !== 0 || C > 1024) continue;
    for (const off of [1, 4]) {
      const at = (q: Deno.PointerValue) => q === null ? q : Deno.UnsafePointer.offset(q, 4 * off);
      const pad = (v: Float32Array) => {
        const out = new Float32Array(n + off);
        out.set(v, off);
        return out;
      };
      cases.push({
        op: `layernorm bwd (offset ${off})`,
        symbols: ["dt_layernorm_bwd"],
        dtype: "f32",
        size,
        tol: TOL.exact,
        inputs: { dy: pad(dy), x: pad(x), w, mean, rstd },
        inout: { dx: [new Float32Array(n + off), "f32"] },
        outputs: { dw: buf("f32", C), db: buf("f32", C) },
        bounds: () => ({
          ...paramBounds(dy, x, "f32", mean, rstd, rows, C),
          dx: layerNormDxBounds(dy, x, w, mean, rstd, [rows, C], off),
        }),
        call: (k, p, s) =>
          k.dt_layernorm_bwd(
            at(p("dx")),
            p("dw"),
            p("db"),
            at(p("dy")),
            at(p("x")),
            p("w"),
            p("mean"),
            p("rstd"),
            n64(rows),
            n64(C),
            0,
            0,
            0,
            0,
            s,
          ),
      });
    }
  }
  return cases;
}

/**
 * Per-column bounds on |GPU - CPU| of the weight and bias gradients (dw, db), derived rather than
 * picked. Both libraries form each term the same way — dout exactly, dout·x̂ as
 * dout·((x - mean)·rstd) in three f32 roundings with no add an FMA could fuse — so the terms agree
 * bit for bit; each library adds the `rows` terms of a column in double in its own order (within
 * γ_rows·Σ|t| of the exact sum), rounds once to f32 (u·Σ|t|) and, adding into the old gradient,
 * rounds once more (u·(Σ|t| + |old|)). Twice that bounds the difference; one column off by more
 * fails, where a normwise tolerance lets one wrong column among hundreds through.
 */
function paramBounds(
  dy: Arr,
  x: Arr,
  kind: Float,
  mean: Float32Array,
  rstd: Float32Array,
  rows: number,
  C: number,
  old?: { dw: Float32Array; db: Float32Array },
): Record<string, Float64Array> {
  const dyv = asNumbers(dy, kind), xv = asNumbers(x, kind), f = Math.fround;
  const absW = new Float64Array(C), absB = new Float64Array(C);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < C; j++) {
      const d = dyv[r * C + j]!;
      absW[j]! += Math.abs(f(d * f(f(xv[r * C + j]! - mean[r]!) * rstd[r]!)));
      absB[j]! += Math.abs(d);
    }
  }
  const g = gamma(rows, "f64"), u = UNIT_ROUNDOFF.f32, tiny = 2 * 2 ** -126;
  const bound = (abs: Float64Array, prev?: Float32Array) =>
    abs.map((a, j) =>
      2 * (g * a + u * a * (1 + g) + (prev ? u * (a * (1 + u) + Math.abs(prev[j]!)) : 0)) + tiny
    );
  return { dw: bound(absW, old?.dw), db: bound(absB, old?.db) };
}

/** The CPU library's saved mean and rstd of rows x of `kind`. */
function moments(
  cpu: NativeLibrary<KernelSymbols>,
  x: Arr,
  kind: Float,
  rows: number,
  C: number,
  w: Float32Array,
  b: Float32Array,
): [Float32Array, Float32Array] {
  const y = new Float32Array(rows * C),
    mean = new Float32Array(rows),
    rstd = new Float32Array(rows);
  const P = (a: Arr) => Deno.UnsafePointer.of(a);
  cpu.check(
    cpu.symbols.dt_layernorm_fwd(
      P(y),
      P(mean),
      P(rstd),
      P(x),
      P(w),
      P(b),
      BigInt(rows),
      BigInt(C),
      1e-5,
      DT.f32,
      DT[kind],
      null,
      0,
      null,
      null,
    ),
    "dt_layernorm_fwd",
  );
  return [mean, rstd];
}
