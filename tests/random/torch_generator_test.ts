/**
 * TorchGenerator against torch's own outputs (randperm.json), plus state
 * save/restore, seeding rules, the normal_ tail and small-size paths, and
 * argument validation.
 */
import assert from "node:assert/strict";
import { TorchGenerator, type TorchGeneratorState } from "../../random/torch_generator.ts";
import { checkRandpermFixtures } from "../../parity/sampler.ts";
import { fixturesDir, readJsonFixture } from "./_fixtures.ts";

interface GeneratorCase {
  seed: number;
  mt19937_u32: number[];
  randint_0_2147483647: number[];
  rand_float32: number[];
}
interface RandpermFixture {
  randperm: { n: number; seed: number; perm: number[] }[];
  generator: GeneratorCase[];
}
const fixture = readJsonFixture<RandpermFixture>("randperm.json");

Deno.test("nextUint32() equals torch's raw MT19937 outputs for every fixture seed", () => {
  assert.ok(fixture.generator.length > 0);
  for (const c of fixture.generator) {
    const g = new TorchGenerator(c.seed);
    const actual = c.mt19937_u32.map(() => g.nextUint32());
    assert.deepEqual(actual, c.mt19937_u32, `seed ${c.seed}`);
  }
});

Deno.test("randint(0, 2**31 - 1) and randFloat32() match torch for every fixture seed", () => {
  for (const c of fixture.generator) {
    const g = new TorchGenerator(c.seed);
    assert.deepEqual(
      c.randint_0_2147483647.map(() => g.randint(0, 2 ** 31 - 1)),
      c.randint_0_2147483647,
      `randint, seed ${c.seed}`,
    );
    const floats = new TorchGenerator(c.seed).randFloat32(
      c.rand_float32.length,
    );
    assert.deepEqual(
      Array.from(floats),
      c.rand_float32,
      `rand, seed ${c.seed}`,
    );
  }
});

Deno.test("randperm() matches torch for every fixture case", () => {
  assert.ok(fixture.randperm.length > 0);
  for (const { n, seed, perm } of fixture.randperm) {
    const actual = new TorchGenerator(seed).randperm(n);
    assert.deepEqual(
      Array.from(actual),
      perm,
      `randperm(${n}) with seed ${seed}`,
    );
  }
});

Deno.test("checkRandpermFixtures() passes every row, including exact full-range int64 draws", () => {
  const rows = checkRandpermFixtures(fixturesDir());
  const failed = rows.filter((r) => !r.pass);
  assert.deepEqual(failed, []);
  // One row per randperm case, and four streams per generator seed.
  assert.equal(
    rows.length,
    fixture.randperm.length + 4 * fixture.generator.length,
  );
  assert.ok(rows.some((r) => r.case.endsWith("full_range_int64")));
});

Deno.test("randperm(1e6) is a permutation and finishes in a liveness bound", () => {
  // A generous bound (typical: ~30 ms) that only catches an accidentally quadratic algorithm;
  // speed itself is not a test's business, and other test files share this process's CPU.
  const t0 = performance.now();
  const perm = new TorchGenerator(0).randperm(1_000_000);
  const ms = performance.now() - t0;
  const seen = new Uint8Array(perm.length);
  for (const v of perm) seen[v] = 1;
  assert.equal(seen.indexOf(0), -1, "every value 0..n-1 appears");
  assert.ok(ms < 5000, `randperm(1e6) took ${ms.toFixed(0)} ms`);
});

Deno.test("getState()/setState() through JSON continue the identical stream", () => {
  const g = new TorchGenerator(1234);
  g.randperm(1000); // mid-way through the 624-word block
  g.normal_(new Float32Array(3), 0, 1); // leaves a cached Box-Muller sample
  const saved: TorchGeneratorState = JSON.parse(JSON.stringify(g.getState()));
  assert.notEqual(saved.nextDoubleNormal, null);

  const restored = new TorchGenerator(999);
  restored.setState(saved);
  assert.equal(restored.initialSeed(), 1234n);
  assert.deepEqual(
    restored.normal_(new Float32Array(5), 0, 1),
    g.normal_(new Float32Array(5), 0, 1),
  );
  assert.deepEqual(restored.randperm(5000), g.randperm(5000));
  assert.deepEqual(
    restored.normal_(new Float32Array(50), 1, 2),
    g.normal_(new Float32Array(50), 1, 2),
  );
  for (let i = 0; i < 2000; i++) assert.equal(restored.nextUint32(), g.nextUint32());
});

Deno.test("setState() rejects malformed states with a message naming the field", () => {
  const good = new TorchGenerator(5).getState();
  const g = new TorchGenerator(0);
  assert.throws(
    () => g.setState({ ...good, words: good.words.slice(1) }),
    /expected 624 words, got 623/,
  );
  assert.throws(
    () => g.setState({ ...good, index: 625 }),
    /index 625 is outside \[0, 624\]/,
  );
  const badWord = [...good.words];
  badWord[7] = -1;
  assert.throws(() => g.setState({ ...good, words: badWord }), /word 7 is -1/);
  assert.throws(
    () => g.setState({ ...good, seed: "abc" }),
    /seed abc is not a decimal uint64/,
  );
  assert.throws(
    () => g.setState({ ...good, nextDoubleNormal: NaN }),
    /nextDoubleNormal NaN/,
  );
  // A failed restore leaves the generator untouched.
  assert.equal(g.nextUint32(), new TorchGenerator(0).nextUint32());
});

Deno.test("manualSeed() keys MT19937 on the low 32 bits and wraps negative seeds like torch", () => {
  const stream = (g: TorchGenerator) => Array.from({ length: 8 }, () => g.nextUint32());
  assert.deepEqual(
    stream(new TorchGenerator(2 ** 32 + 7)),
    stream(new TorchGenerator(7)),
  );
  assert.equal(new TorchGenerator(2 ** 32 + 7).initialSeed(), 2n ** 32n + 7n);
  assert.equal(new TorchGenerator(-1).initialSeed(), 2n ** 64n - 1n);
  assert.deepEqual(
    stream(new TorchGenerator(-1)),
    stream(new TorchGenerator(0xffffffff)),
  );
  assert.notDeepEqual(
    stream(new TorchGenerator(1)),
    stream(new TorchGenerator(2)),
  );
  assert.throws(() => new TorchGenerator(0.5), /expected a safe integer/);
  assert.throws(() => new TorchGenerator(2n ** 64n), /\[-2\*\*63, 2\*\*64\)/);
});

Deno.test("nextUint64() joins two outputs high first; randint() uses it for ranges >= 2**32", () => {
  const raw = new TorchGenerator(3);
  const hi = raw.nextUint32();
  const lo = raw.nextUint32();
  assert.equal(
    new TorchGenerator(3).nextUint64(),
    (BigInt(hi) << 32n) | BigInt(lo),
  );
  const big = 2 ** 40 + 3;
  const expected = Number(new TorchGenerator(3).nextUint64() % BigInt(big)) - 5;
  assert.equal(new TorchGenerator(3).randint(-5, big - 5), expected);
});

Deno.test("uniform_() draws fma(x, hi - lo, lo) within [lo, hi)", () => {
  const g = new TorchGenerator(11);
  const raw = new TorchGenerator(11).randFloat32(1000);
  const out = g.uniform_(new Float32Array(1000), -0.25, 0.75);
  for (let i = 0; i < out.length; i++) {
    assert.ok(out[i]! >= -0.25 && out[i]! < 0.75);
    // With a span of exactly 1 the fused result is x + lo rounded once.
    assert.equal(out[i], Math.fround(raw[i]! - 0.25));
  }
});

Deno.test("normal_() on a length that is not a multiple of 16 redraws and re-transforms the last 16", () => {
  const out = new TorchGenerator(8).normal_(new Float32Array(20), 0.5, 2);
  const firstBlock = new TorchGenerator(8).normal_(
    new Float32Array(16),
    0.5,
    2,
  );
  assert.deepEqual(out.subarray(0, 4), firstBlock.subarray(0, 4));
  const advanced = new TorchGenerator(8);
  advanced.randFloat32(20);
  const tail = advanced.normal_(new Float32Array(16), 0.5, 2);
  assert.deepEqual(out.subarray(4), tail);
  // 20 uniforms for the fill, then 16 for the redrawn tail.
  const g = new TorchGenerator(8);
  g.normal_(new Float32Array(20), 0, 1);
  const skipped = new TorchGenerator(8);
  skipped.randFloat32(36);
  assert.equal(g.nextUint32(), skipped.nextUint32());
});

Deno.test("normal_() below 16 elements uses double Box-Muller pairs and caches the second sample", () => {
  const g = new TorchGenerator(21);
  const first = g.normal_(new Float32Array(1), 0, 1)[0]!;
  const afterPair = new TorchGenerator(21);
  afterPair.randFloat32(4); // one pair = two nextUint64() = four 32-bit outputs
  const peek = g.getState();
  const second = g.normal_(new Float32Array(1), 0, 1)[0]!; // served from the cache
  assert.deepEqual(g.getState().words, peek.words);
  assert.equal(g.getState().index, peek.index);
  assert.equal(g.nextUint32(), afterPair.nextUint32());
  // The pair is (r cos t, r sin t), so both come from one radius.
  assert.ok(
    Number.isFinite(first) && Number.isFinite(second) && first !== second,
  );
});

Deno.test("normal_() has the requested mean and standard deviation", () => {
  const out = new TorchGenerator(5).normal_(new Float32Array(100_000), 3, 0.5);
  let sum = 0;
  for (const v of out) sum += v;
  const mean = sum / out.length;
  let sq = 0;
  for (const v of out) sq += (v - mean) ** 2;
  const std = Math.sqrt(sq / out.length);
  assert.ok(Math.abs(mean - 3) < 0.01, `mean ${mean}`);
  assert.ok(Math.abs(std - 0.5) < 0.01, `std ${std}`);
});

Deno.test("generator methods reject bad arguments with what was expected", () => {
  const g = new TorchGenerator(0);
  assert.throws(
    () => g.randperm(-1),
    /randperm\(-1\): expected an integer n in \[0, 2147483647\]/,
  );
  assert.throws(() => g.randperm(2.5), /randperm\(2\.5\)/);
  assert.throws(
    () => g.randint(3, 3),
    /randint\(3, 3\): expected safe integers with lo < hi/,
  );
  assert.throws(
    () => g.uniform_(new Float32Array(2), 1, 0),
    /lo <= hi, got lo=1, hi=0/,
  );
  assert.throws(() => g.normal_(new Float32Array(2), 0, -1), /std >= 0/);
  assert.throws(() => g.randFloat32(-3), /non-negative integer/);
  assert.deepEqual(g.randperm(0), new Int32Array(0));
});
