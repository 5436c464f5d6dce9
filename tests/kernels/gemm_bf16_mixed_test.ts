/**
 * dt_cpu_gemm_bf16_mixed: bf16 products of f32 or bf16 operands into an f32 or
 * bf16 C give the bits of casting the f32 operands to bf16 (dt_cast), dt_gemm
 * in bf16 and casting C to f32 — for every transpose, ragged sizes, several K
 * blocks, batches, beta, values that round to ties, NaN, infinities and tiny
 * ones. Where the CPU has no AVX512_BF16 it refuses, naming why.
 */
import assert from "node:assert/strict";
import { gemmBf16Mixed, gemmKernel, hasGemmBf16Mixed } from "../../ffi/cpu_extras.ts";
import { K, n64, ok, ptr, Rng } from "./_helpers.ts";

const F32 = 0, BF16 = 1;

interface Shape {
  transA: boolean;
  transB: boolean;
  M: number;
  N: number;
  K: number;
  batch: number;
  beta: number;
}

/** Random f32 values with every kind of awkward one mixed in. */
function values(n: number, rng: Rng): Float32Array<ArrayBuffer> {
  const out = new Float32Array(n);
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) {
    const r = rng.next();
    if (r < 0.01) out[i] = NaN;
    else if (r < 0.02) out[i] = rng.next() < 0.5 ? Infinity : -Infinity;
    else if (r < 0.04) bits[i] = Math.floor(rng.next() * 0x00800000); // f32 denormal
    else if (r < 0.06) bits[i] = 0x007fffff + (rng.next() < 0.5 ? 0 : 0x80000000); // rounds up to a normal bf16
    else if (r < 0.10) bits[i] = ((Math.floor(rng.next() * 0xffff) << 16) | 0x8000) >>> 0; // a tie
    else out[i] = rng.normal() * 4;
  }
  return out;
}

function toBf16(src: Float32Array<ArrayBuffer>): Uint16Array<ArrayBuffer> {
  const out = new Uint16Array(src.length);
  ok(K.dt_cast(ptr(out), BF16, ptr(src), F32, n64(src.length), null));
  return out;
}

function toF32(src: Uint16Array<ArrayBuffer>): Float32Array<ArrayBuffer> {
  const out = new Float32Array(src.length);
  ok(K.dt_cast(ptr(out), F32, ptr(src), BF16, n64(src.length), null));
  return out;
}

/** C through casts and dt_gemm(bf16), as the product would be written without the mixed call. */
function reference(
  s: Shape,
  a: Float32Array<ArrayBuffer>,
  b: Float32Array<ArrayBuffer>,
  c: Float32Array<ArrayBuffer>,
): Uint16Array<ArrayBuffer> {
  const cb = toBf16(c);
  ok(K.dt_gemm(
    BF16,
    s.transA ? 1 : 0,
    s.transB ? 1 : 0,
    n64(s.M),
    n64(s.N),
    n64(s.K),
    1,
    ptr(toBf16(a)),
    n64(s.transA ? s.M : s.K),
    ptr(toBf16(b)),
    n64(s.transB ? s.K : s.N),
    s.beta,
    ptr(cb),
    n64(s.N),
    n64(s.batch),
    n64(s.M * s.K),
    n64(s.K * s.N),
    n64(s.M * s.N),
    null,
  ));
  return cb;
}

function firstDiff(got: Uint16Array, want: Uint16Array): string | null {
  for (let i = 0; i < want.length; i++) {
    const g = got[i]!, w = want[i]!;
    const bothNaN = (g & 0x7fff) > 0x7f80 && (w & 0x7fff) > 0x7f80;
    if (g !== w && !bothNaN) {
      return `element ${i}: 0x${g.toString(16)} vs 0x${w.toString(16)} (${
        toF32(new Uint16Array([g]))[0]
      } vs ${toF32(new Uint16Array([w]))[0]})`;
    }
  }
  return null;
}

function check(s: Shape, seed: number): void {
  const rng = new Rng(seed);
  const a = values(s.batch * s.M * s.K, rng), b = values(s.batch * s.K * s.N, rng);
  // C's old values matter only with beta; bf16-exact, so an f32 C and a bf16 C hold the same ones
  const c = toF32(toBf16(values(s.batch * s.M * s.N, rng)));
  const want = reference(s, a, b, c);
  const name = `${s.transA ? "T" : "N"}${
    s.transB ? "T" : "N"
  } ${s.M}x${s.N}x${s.K} batch ${s.batch} beta ${s.beta}`;
  const opts = { beta: s.beta, batch: s.batch };
  for (const aF32 of [true, false]) {
    for (const bF32 of [true, false]) {
      for (const cF32 of [true, false]) {
        const A = aF32 ? a : toBf16(a), B = bF32 ? b : toBf16(b);
        const C = cF32 ? c.slice() : toBf16(c);
        gemmBf16Mixed(
          s.transA,
          s.transB,
          s.M,
          s.N,
          s.K,
          { ptr: ptr(A), f32: aF32 },
          { ptr: ptr(B), f32: bF32 },
          { ptr: ptr(C), f32: cF32 },
          opts,
        );
        const got = cF32 ? toBf16(C as Float32Array<ArrayBuffer>) : C as Uint16Array;
        if (cF32) {
          // an f32 C holds bf16 values exactly: widening what was rounded loses nothing
          assert.deepEqual(
            toF32(got as Uint16Array<ArrayBuffer>),
            C,
            `${name}: C is not bf16-exact`,
          );
        }
        const diff = firstDiff(got, want);
        assert.equal(
          diff,
          null,
          `${name}, A ${aF32 ? "f32" : "bf16"}, B ${bF32 ? "f32" : "bf16"}, ` +
            `C ${cF32 ? "f32" : "bf16"}: ${diff}`,
        );
      }
    }
  }
}

const bf16Dot = gemmKernel("bf16") === "avx512bf16";

Deno.test({
  name:
    "dt_cpu_gemm_bf16_mixed gives the bits of casts around a bf16 dt_gemm, every layout and edge",
  ignore: !bf16Dot,
  fn() {
    assert.equal(hasGemmBf16Mixed(), true);
    let seed = 1;
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        // ragged tiles (12 x 32), odd K, K over one block (512), a batch, beta
        check({ transA, transB, M: 13, N: 33, K: 7, batch: 1, beta: 0 }, seed++);
        check({ transA, transB, M: 50, N: 70, K: 801, batch: 1, beta: 0 }, seed++);
        check({ transA, transB, M: 150, N: 40, K: 64, batch: 3, beta: 1 }, seed++);
        check({ transA, transB, M: 1, N: 1, K: 1, batch: 1, beta: 0.5 }, seed++);
      }
    }
  },
});

Deno.test({
  name: "dt_cpu_gemm_bf16_mixed with K = 0 scales C by beta, rounded to bf16",
  ignore: !bf16Dot,
  fn() {
    check({ transA: false, transB: false, M: 5, N: 6, K: 0, batch: 1, beta: 0.3 }, 99);
  },
});

Deno.test("dt_cpu_gemm_bf16_mixed refuses bad dtypes, and CPUs without AVX512_BF16", () => {
  const a = new Float32Array(4), c = new Float32Array(4);
  assert.throws(
    () =>
      gemmBf16Mixed(false, false, 2, 2, 2, { ptr: ptr(a), f32: true }, { ptr: ptr(a), f32: true }, {
        ptr: ptr(c),
        f32: true,
      }, { strideA: -1 }),
    bf16Dot ? /strideA = -1 is negative/ : /no AVX512_BF16 kernel|strideA/,
  );
  if (!bf16Dot) {
    assert.equal(hasGemmBf16Mixed(), false);
    assert.throws(
      () =>
        gemmBf16Mixed(
          false,
          false,
          2,
          2,
          2,
          { ptr: ptr(a), f32: true },
          { ptr: ptr(a), f32: true },
          {
            ptr: ptr(c),
            f32: true,
          },
        ),
      /no AVX512_BF16 kernel/,
    );
  }
});
