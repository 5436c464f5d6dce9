/**
 * Tests of dt_fill and dt_cast: every dtype, round-to-nearest-even for bf16
 * and f16 (checked bit for bit against independent TypeScript roundings), and
 * the refusals for values a destination cannot hold.
 */
import assert from "node:assert/strict";
import { assertSameBits, failsWith, K, n64, ok, ptr, Rng, SIZES } from "./_helpers.ts";

const DT = { F32: 0, BF16: 1, F16: 2, I32: 3, I64: 4, U8: 5 } as const;

/** bf16 bits of a float32 value, round to nearest even, NaN kept quiet (c10::BFloat16). */
function toBf16(x: number): number {
  const u = new Uint32Array(new Float32Array([x]).buffer)[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  const upper = u >>> 16, lower = u & 0xffff;
  const up = lower > 0x8000 || (lower === 0x8000 && (upper & 1) === 1);
  return (upper + (up ? 1 : 0)) & 0xffff;
}

/** f16 bits of float32 values via the engine's own Float16Array (round to nearest even). */
function toF16(x: ArrayLike<number>): Uint16Array {
  return new Uint16Array(Float16Array.from(x).buffer);
}

/** A float32 array with the awkward values: zeros, infinities, NaN, ties, subnormals, extremes. */
function specialsAnd(rng: Rng, n: number): Float32Array<ArrayBuffer> {
  const specials = [
    0,
    -0,
    Infinity,
    -Infinity,
    NaN,
    1,
    -1,
    65504,
    65520,
    65519.99,
    1e-8,
    5.960464477539063e-8,
    2.98e-8,
    6.1e-5,
    3.3895313892515355e38,
    1 + 2 ** -8,
    1 + 3 * 2 ** -8,
    1 + 2 ** -11,
    1 + 3 * 2 ** -11,
    1e-40,
    -1e-45,
  ];
  const a = rng.normals(n + specials.length, 100);
  for (let i = 0; i < n; i += 3) a[i] = a[i]! * 10 ** rng.int(-12, 12); // wide exponent range
  a.set(specials, n);
  return a;
}

Deno.test("dt_cast() f32 -> bf16 and f32 -> f16 round to nearest even", () => {
  const rng = new Rng(1);
  for (const n of SIZES) {
    const x = specialsAnd(rng, n);
    const bf = new Uint16Array(x.length), hf = new Uint16Array(x.length);
    ok(K.dt_cast(ptr(bf), DT.BF16, ptr(x), DT.F32, n64(x.length), null));
    ok(K.dt_cast(ptr(hf), DT.F16, ptr(x), DT.F32, n64(x.length), null));
    assertSameBits(bf, x.map(toBf16), `bf16 n=${n}`);
    // NaN payloads may differ between implementations; compare NaN-ness there.
    const expected = toF16(x), got = hf;
    for (let i = 0; i < x.length; i++) {
      if (Number.isNaN(x[i])) {
        assert.ok((got[i]! & 0x7c00) === 0x7c00 && (got[i]! & 0x3ff) !== 0, `f16 NaN at ${i}`);
      } else if (got[i] !== expected[i]) {
        assert.fail(
          `f16 of ${x[i]} is 0x${got[i]!.toString(16)}, expected 0x${expected[i]!.toString(16)}`,
        );
      }
    }
  }
});

Deno.test("dt_cast() bf16/f16 -> f32 is exact for every 16-bit pattern", () => {
  const all = new Uint16Array(65536).map((_, i) => i);
  const viaBf = new Float32Array(65536), viaHf = new Float32Array(65536);
  ok(K.dt_cast(ptr(viaBf), DT.F32, ptr(all), DT.BF16, 65536n, null));
  ok(K.dt_cast(ptr(viaHf), DT.F32, ptr(all), DT.F16, 65536n, null));
  const bfExpected = new Float32Array(new Uint32Array(all.length).map((_, i) => i << 16).buffer);
  assertSameBits(viaBf, bfExpected, "bf16 -> f32");
  const hfExpected = Float32Array.from(new Float16Array(all.buffer));
  for (let i = 0; i < 65536; i++) {
    if (Number.isNaN(hfExpected[i])) {
      assert.ok(Number.isNaN(viaHf[i]), `f16 NaN 0x${i.toString(16)}`);
    } else if (!Object.is(viaHf[i], hfExpected[i])) {
      assert.fail(`f16 0x${i.toString(16)} -> ${viaHf[i]}, expected ${hfExpected[i]}`);
    }
  }
});

Deno.test("dt_cast() converts between integer and float dtypes with truncation", () => {
  const i64 = new BigInt64Array([0n, -5n, 2147483647n, -2147483648n, 16777217n, 255n]);
  const i32 = new Int32Array(6), f32 = new Float32Array(6), back = new BigInt64Array(6);
  ok(K.dt_cast(ptr(i32), DT.I32, ptr(i64), DT.I64, 6n, null));
  assert.deepEqual(Array.from(i32), [0, -5, 2147483647, -2147483648, 16777217, 255]);
  ok(K.dt_cast(ptr(back), DT.I64, ptr(i32), DT.I32, 6n, null));
  assert.deepEqual(back, i64);
  ok(K.dt_cast(ptr(f32), DT.F32, ptr(i64), DT.I64, 6n, null));
  assertSameBits(
    f32,
    Array.from(i64, (v) => Math.fround(Number(v))),
    "i64 -> f32 rounds to nearest even",
  );
  const floats = new Float32Array([2.9, -2.9, 0.5, -0.5, 1e9, -2147483648]);
  ok(K.dt_cast(ptr(i32), DT.I32, ptr(floats), DT.F32, 6n, null));
  assert.deepEqual(Array.from(i32), [2, -2, 0, 0, 1e9, -2147483648]);
  const bytes = new Uint8Array(6);
  ok(K.dt_cast(ptr(bytes), DT.U8, ptr(new Int32Array([0, 1, 128, 255, 7, 9])), DT.I32, 6n, null));
  assert.deepEqual(Array.from(bytes), [0, 1, 128, 255, 7, 9]);
  const same = new Float32Array(6);
  ok(K.dt_cast(ptr(same), DT.F32, ptr(floats), DT.F32, 6n, null));
  assertSameBits(same, floats, "same dtype is a copy");
});

Deno.test("dt_cast() names the first value the destination cannot hold and writes nothing", () => {
  const i64 = new BigInt64Array([1n, 2n, 3000000000n, -3000000000n]);
  const out = new Int32Array(4).fill(-7);
  failsWith(
    K.dt_cast(ptr(out), DT.I32, ptr(i64), DT.I64, 4n, null),
    "dt_cast: i64 value 3000000000 at index 2 is outside the i32 range",
  );
  assert.deepEqual(Array.from(out), [-7, -7, -7, -7]);
  failsWith(
    K.dt_cast(ptr(out), DT.I32, ptr(new Float32Array([1, NaN])), DT.F32, 2n, null),
    "dt_cast: f32 value nan at index 1 does not fit in i32",
  );
  failsWith(
    K.dt_cast(ptr(out), DT.U8, ptr(new Int32Array([256])), DT.I32, 1n, null),
    "i32 value 256 at index 0 is outside the u8 range",
  );
  failsWith(K.dt_cast(ptr(out), 9, ptr(out), DT.I32, 1n, null), "dt_cast: unknown output dtype 9");
  failsWith(K.dt_cast(ptr(out), DT.I32, ptr(out), -1, 1n, null), "dt_cast: unknown input dtype -1");
  failsWith(
    K.dt_cast(ptr(out), DT.I32, ptr(out), DT.I32, -1n, null),
    "dt_cast: negative size n=-1",
  );
});

Deno.test("dt_fill() stores the value converted to each dtype", () => {
  for (const n of [1, 13, 100_000]) {
    const f = new Float32Array(n), bf = new Uint16Array(n), hf = new Uint16Array(n);
    ok(K.dt_fill(ptr(f), DT.F32, n64(n), 0.1, null));
    assert.ok(f.every((v) => v === Math.fround(0.1)));
    ok(K.dt_fill(ptr(bf), DT.BF16, n64(n), 0.1, null));
    assert.ok(bf.every((v) => v === toBf16(0.1)));
    ok(K.dt_fill(ptr(hf), DT.F16, n64(n), -3.3, null));
    assert.ok(hf.every((v) => v === toF16([Math.fround(-3.3)])[0]));
    const i32 = new Int32Array(n), i64 = new BigInt64Array(n), u8 = new Uint8Array(n);
    ok(K.dt_fill(ptr(i32), DT.I32, n64(n), -7.9, null));
    assert.ok(i32.every((v) => v === -7));
    ok(K.dt_fill(ptr(i64), DT.I64, n64(n), 2 ** 40, null));
    assert.ok(i64.every((v) => v === 2n ** 40n));
    ok(K.dt_fill(ptr(u8), DT.U8, n64(n), 255, null));
    assert.ok(u8.every((v) => v === 255));
  }
});

Deno.test("dt_fill() rejects values that do not fit, unknown dtypes and bad sizes", () => {
  const out = new Int32Array(4).fill(5);
  failsWith(
    K.dt_fill(ptr(out), DT.I32, 4n, 3e9, null),
    "dt_fill: value 3000000000 does not fit in i32",
  );
  failsWith(K.dt_fill(ptr(out), DT.U8, 4n, -1, null), "does not fit in u8");
  failsWith(K.dt_fill(ptr(out), DT.I64, 4n, NaN, null), "dt_fill: value nan does not fit in i64");
  assert.deepEqual(Array.from(out), [5, 5, 5, 5]);
  failsWith(K.dt_fill(ptr(out), 42, 4n, 0, null), "dt_fill: unknown dtype 42");
  failsWith(K.dt_fill(ptr(out), DT.F32, -2n, 0, null), "dt_fill: negative size n=-2");
  failsWith(K.dt_fill(null, DT.F32, 2n, 0, null), "dt_fill: null pointer");
});
