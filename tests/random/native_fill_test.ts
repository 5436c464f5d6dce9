/**
 * The native bulk draws (kernels/cpu/random.c) against the TypeScript
 * reference they replace: the same bits for MT19937 unit floats, uniform_
 * and the AVX2 Box-Muller, over many seeds, sizes, offsets and odd values
 * (both sides run here, so neither can drift from the other).
 */
import assert from "node:assert/strict";
import { Mt19937 } from "../../random/mt19937.ts";
import { normalFill16Avx2, normalFillBlocks } from "../../random/box_muller_avx2.ts";
import { fmaf32 } from "../../random/float32_fma.ts";
import { cpuRandomCalls } from "../../ffi/cpu_random.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";

const SEEDS = [0, 1, 42, 1337, 2 ** 31 - 1, 0xffffffff];
const f = Math.fround;

function bitsEqual(actual: Float32Array, expected: Float32Array, what: string): void {
  const a = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
  const e = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  for (let i = 0; i < e.length; i++) {
    if (a[i] !== e[i]) {
      assert.fail(
        `${what}: element ${i} is ${actual[i]} (0x${a[i]!.toString(16)}), expected ${
          expected[i]
        } (0x${e[i]!.toString(16)})`,
      );
    }
  }
}

Deno.test("the CPU library exports the native draws (else TorchGenerator silently runs the slow path)", () => {
  assert.ok(cpuRandomCalls() !== null, "libdtrain_cpu.so did not open");
});

Deno.test("Mt19937.fillUnit equals the word-by-word stream and leaves the engine where it would be", () => {
  for (const seed of SEEDS) {
    for (const n of [64, 623, 624, 625, 5000]) {
      for (const skip of [0, 1, 623, 624]) {
        const a = new Mt19937(seed), b = new Mt19937(seed);
        for (let i = 0; i < skip; i++) (a.nextU32(), b.nextU32());
        const got = new Float32Array(n + 3);
        a.fillUnit(got, 2, n + 2);
        const want = new Float32Array(n + 3);
        for (let i = 2; i < n + 2; i++) want[i] = (b.nextU32() & 0xffffff) * 2 ** -24;
        bitsEqual(got, want, `seed ${seed}, n ${n}, skip ${skip}`);
        assert.equal(
          a.nextU32(),
          b.nextU32(),
          `next word after seed ${seed}, n ${n}, skip ${skip}`,
        );
      }
    }
  }
});

Deno.test("Mt19937.fillUniform equals fmaf32(unit, span, from) for awkward bounds", () => {
  const bounds: [number, number][] = [[-1, 1], [0, 1], [-0.0883883461356163, 0.0883883461356163], [
    1e-30,
    3e-30,
  ], [-3e38, 3e38]];
  for (const seed of SEEDS) {
    for (const [lo, hi] of bounds) {
      const from = f(lo), span = f(f(hi) - from);
      const a = new Mt19937(seed), b = new Mt19937(seed);
      const got = new Float32Array(1000);
      a.fillUniform(got, from, span, fmaf32);
      const want = new Float32Array(1000);
      for (let i = 0; i < want.length; i++) {
        want[i] = fmaf32((b.nextU32() & 0xffffff) * 2 ** -24, span, from);
      }
      bitsEqual(got, want, `seed ${seed}, U(${lo}, ${hi})`);
      assert.equal(a.nextU32(), b.nextU32());
    }
  }
});

Deno.test("normalFillBlocks (native) equals normalFill16Avx2 on every lane, edge uniforms included", () => {
  const gen = new TorchGenerator(7);
  const blocks = 4096;
  const uniforms = gen.randFloat32(blocks * 16);
  // uniforms torch can produce at the ends of [0, 1), and values that hit the
  // octant boundaries of sincos and the sqrt(1/2) split of log
  const edges = [
    0,
    2 ** -24,
    1 - 2 ** -24,
    0.5,
    0.25,
    0.125,
    0.75,
    1 - Math.SQRT1_2,
    0.2928932,
    0.70710677,
  ];
  edges.forEach((v, i) => {
    uniforms[i] = f(v);
    uniforms[100 * 16 + 8 + (i % 8)] = f(v);
  });
  for (const [mean, std] of [[0, 1], [f(0.5), f(0.02)], [f(-3), f(7.5)]] as const) {
    const got = uniforms.slice(), want = uniforms.slice();
    normalFillBlocks(got, 0, blocks, mean, std);
    for (let b = 0; b < blocks; b++) normalFill16Avx2(want, b * 16, mean, std);
    bitsEqual(got, want, `N(${mean}, ${std})`);
  }
});

Deno.test("normal_ of a size that is not a multiple of 16 redraws the tail as the reference does", () => {
  for (const size of [16, 17, 31, 100, 1000, 4097]) {
    const got = new TorchGenerator(3).normal_(new Float32Array(size), 0, 1);
    // the reference: unit fill, Box-Muller per block, fresh draws for the last 16
    const mt = new Mt19937(3);
    const want = new Float32Array(size);
    for (let i = 0; i < size; i++) want[i] = (mt.nextU32() & 0xffffff) * 2 ** -24;
    for (let i = 0; i + 16 <= size; i += 16) normalFill16Avx2(want, i, 0, 1);
    if (size % 16) {
      for (let i = size - 16; i < size; i++) want[i] = (mt.nextU32() & 0xffffff) * 2 ** -24;
      normalFill16Avx2(want, size - 16, 0, 1);
    }
    bitsEqual(got, want, `size ${size}`);
  }
});

Deno.test("Mt19937.fillPermutation (native) equals torch's swap loop word by word, and leaves the engine where it would be", () => {
  for (const seed of SEEDS) {
    for (const n of [64, 65, 623, 624, 625, 1249, 10_000]) {
      for (const skip of [0, 1, 623, 624]) {
        const a = new Mt19937(seed), b = new Mt19937(seed);
        for (let i = 0; i < skip; i++) (a.nextU32(), b.nextU32());
        const got = new Int32Array(n);
        a.fillPermutation(got);
        const want = Int32Array.from({ length: n }, (_, i) => i);
        for (let i = 0; i < n - 1; i++) {
          const z = b.nextU32() % (n - i);
          [want[i], want[i + z]] = [want[i + z]!, want[i]!];
        }
        assert.deepEqual(got, want, `seed ${seed}, n ${n}, skip ${skip}`);
        assert.equal(
          a.nextU32(),
          b.nextU32(),
          `next word after seed ${seed}, n ${n}, skip ${skip}`,
        );
      }
    }
  }
});

Deno.test("TorchGenerator.randperm takes the native path and the short JS path alike", () => {
  // torch.randperm(n, generator=torch.Generator().manual_seed(42)) for n below and above the native threshold
  for (const n of [0, 1, 2, 10, 63, 64, 100]) {
    const r = new TorchGenerator(42).randperm(n);
    assert.deepEqual([...r].sort((x, y) => x - y), Array.from({ length: n }, (_, i) => i));
  }
  // torch 1.13: torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:12]
  assert.deepEqual([...new TorchGenerator(42).randperm(10)], [2, 6, 1, 8, 4, 5, 0, 9, 3, 7]);
  assert.deepEqual(
    [...new TorchGenerator(42).randperm(100).subarray(0, 12)],
    [42, 96, 62, 98, 46, 95, 60, 24, 78, 16, 68, 70],
  );
  assert.deepEqual(
    [...new TorchGenerator(3).randperm(1000).subarray(0, 12)],
    [986, 114, 871, 894, 140, 885, 232, 402, 837, 674, 854, 689],
  );
});
