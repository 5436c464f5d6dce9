/**
 * One lane-by-lane replica of torch 1.13's `normal_fill_16_AVX2`: the
 * Box-Muller transform of 16 uniforms into 16 normals, using the Cephes-style
 * `log256_ps` / `sincos256_ps` polynomials of `avx_mathfun.h` in float32.
 * torch's AVX2 kernels are compiled by GCC with FMA contraction, so each
 * `mul` whose only use is an `add`/`sub` becomes one fused, once-rounded step.
 */
import { fmaf32 } from "./float32_fma.ts";
import { cpuRandomCalls } from "../ffi/cpu_random.ts";

const f = Math.fround;

// Constants of avx_mathfun.h, each a C double literal narrowed to float.
const MIN_NORM_POS = f(1.1754943508222875e-38); // bits 0x00800000
const SQRTHF = f(0.707106781186547524);
const LOG_P = [
  7.0376836292e-2,
  -1.1514610310e-1,
  1.1676998740e-1,
  -1.2420140846e-1,
  1.4249322787e-1,
  -1.6668057665e-1,
  2.0000714765e-1,
  -2.4999993993e-1,
  3.3333331174e-1,
].map(f);
const LOG_Q1 = f(-2.12194440e-4);
const LOG_Q2 = f(0.693359375);
const MINUS_DP1 = f(-0.78515625);
const MINUS_DP2 = f(-2.4187564849853515625e-4);
const MINUS_DP3 = f(-3.77489497744594108e-8);
const SINCOF_P0 = f(-1.9515295891e-4);
const SINCOF_P1 = f(8.3321608736e-3);
const SINCOF_P2 = f(-1.6666654611e-1);
const COSCOF_P0 = f(2.443315711809948e-5);
const COSCOF_P1 = f(-1.388731625493765e-3);
const COSCOF_P2 = f(4.166664568298827e-2);
const FOPI = f(1.27323954473516); // 4 / pi
/** `_mm256_set1_ps(2.0f * c10::pi<double>)`: the double 2*pi narrowed to float. */
const TWO_PI = f(2 * Math.PI);

// Bit-level scratch for the exponent/mantissa split in log256Lane.
const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/** One lane of `log256_ps`: the natural log of float32 `input` (NaN for input <= 0). */
function log256Lane(input: number): number {
  if (!(input > 0)) return NaN; // the invalid_mask OR turns these lanes into NaN
  scratchF32[0] = Math.max(input, MIN_NORM_POS);
  const bits = scratchU32[0]!;
  // Keep the mantissa and give it the exponent of 0.5, so x is in [0.5, 1).
  scratchU32[0] = (bits & ~0x7f800000) | 0x3f000000;
  let x = scratchF32[0]!;
  let e = f(((bits >>> 23) - 0x7f) + 1);
  const belowSqrtHalf = x < SQRTHF;
  const tmp = belowSqrtHalf ? x : 0;
  x = f(x - 1);
  e = f(e - (belowSqrtHalf ? 1 : 0));
  x = f(x + tmp);
  const z = f(x * x);
  let y = LOG_P[0]!;
  for (let k = 1; k < LOG_P.length; k++) y = fmaf32(y, x, LOG_P[k]!);
  y = f(y * x);
  y = fmaf32(y, z, f(e * LOG_Q1)); // y*z fused into "+ e*q1"
  y = f(y - z * 0.5); // z*0.5 is exact, so fused or not gives the same bits
  x = f(x + y);
  return f(x + e * LOG_Q2); // e*q2 is exact (small integer times 355/512)
}

/** Results of sincos256Lane, kept in module scope to avoid an allocation per call. */
let laneSin = 0;
let laneCos = 0;

/** One lane of `sincos256_ps` for float32 `input`; results land in laneSin / laneCos. */
function sincos256Lane(input: number): void {
  const negative = input < 0 || Object.is(input, -0);
  let x = Math.abs(input);
  // j = (int(x * 4/pi) + 1) & ~1: the octant, rounded up to even.
  let j = (Math.trunc(f(x * FOPI)) + 1) & ~1;
  const y = f(j);
  const sinSwap = (j & 4) !== 0;
  const useSinPoly = (j & 2) === 0; // poly_mask: lanes where sine uses the sin polynomial
  // Extended-precision reduction x = ((x - y*DP1) - y*DP2) - y*DP3, each step fused.
  x = fmaf32(y, MINUS_DP1, x);
  x = fmaf32(y, MINUS_DP2, x);
  x = fmaf32(y, MINUS_DP3, x);
  j -= 2;
  const cosNegative = (~j & 4) !== 0;
  const sinNegative = negative !== sinSwap;

  const z = f(x * x);
  let c = fmaf32(COSCOF_P0, z, COSCOF_P1);
  c = fmaf32(c, z, COSCOF_P2);
  c = f(c * z);
  c = fmaf32(c, z, -(z * 0.5)); // second y*z fused into "- z*0.5"
  c = f(c + 1);

  let s = fmaf32(SINCOF_P0, z, SINCOF_P1);
  s = fmaf32(s, z, SINCOF_P2);
  s = f(s * z);
  s = fmaf32(s, x, x); // y2*x fused into "+ x"

  const sinValue = useSinPoly ? s : c;
  const cosValue = useSinPoly ? c : s;
  laneSin = sinNegative ? -sinValue : sinValue;
  laneCos = cosNegative ? -cosValue : cosValue;
}

/**
 * Replaces `data[offset .. offset+16)`, which holds 16 uniforms in [0, 1), by
 * 16 normals with mean `mean` and standard deviation `std` (both float32),
 * bit for bit as torch 1.13's AVX2 `normal_fill_16_AVX2`: lanes 0..7 give
 * `u1 = 1 - data[j]` and lanes 8..15 give `u2`; cos goes to j, sin to j + 8.
 *
 * @example
 * ```ts
 * const block = new Float32Array(16).fill(0.5);
 * normalFill16Avx2(block, 0, 0, 1);
 * ```
 */
export function normalFill16Avx2(
  data: Float32Array,
  offset: number,
  mean: number,
  std: number,
): void {
  for (let j = 0; j < 8; j++) {
    const u1 = f(1 - data[offset + j]!);
    const u2 = data[offset + j + 8]!;
    const radius = f(Math.sqrt(f(-2 * log256Lane(u1))));
    sincos256Lane(f(TWO_PI * u2));
    data[offset + j] = fmaf32(f(radius * laneCos), std, mean);
    data[offset + j + 8] = fmaf32(f(radius * laneSin), std, mean);
  }
}

/**
 * normalFill16Avx2 over `blocks` consecutive blocks of 16 from `offset`: in
 * native code (kernels/cpu/random.c, the same bits) when the CPU library is
 * there, else block by block here.
 */
export function normalFillBlocks(
  data: Float32Array,
  offset: number,
  blocks: number,
  mean: number,
  std: number,
): void {
  const native = blocks >= 4 ? cpuRandomCalls() : null;
  if (native) {
    native.dt_cpu_normal_fill16(
      data.subarray(offset, offset + 16 * blocks),
      BigInt(blocks),
      mean,
      std,
    );
    return;
  }
  for (let b = 0; b < blocks; b++) normalFill16Avx2(data, offset + 16 * b, mean, std);
}
