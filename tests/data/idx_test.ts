/**
 * The IDX reader: well-formed plain and gzip files decode to their dims and
 * bytes; every kind of damage (magic, type, dims, truncation, trailing bytes,
 * absurd sizes, corrupt or oversized gzip) is refused with an error naming the
 * file; and seeded random corruptions never produce anything else.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { decodeIdx, type IdxArray, parseIdx, readIdx, readIdxCached } from "../../data/idx.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";

/** An IDX file of u8 elements (or another type code) with the given dims and data. */
function idxBytes(dims: number[], data: Uint8Array, type = 0x08): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(4 + 4 * dims.length + data.length);
  const view = new DataView(out.buffer);
  out.set([0, 0, type, dims.length]);
  dims.forEach((d, i) => view.setUint32(4 + 4 * i, d, false));
  out.set(data, 4 + 4 * dims.length);
  return out;
}

async function gzip(bytes: Uint8Array<ArrayBuffer>): Promise<Uint8Array<ArrayBuffer>> {
  const stream = new Blob([bytes]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

const SAMPLE_DATA = Uint8Array.from({ length: 2 * 3 * 4 }, (_, i) => (i * 37) % 256);
const SAMPLE = idxBytes([2, 3, 4], SAMPLE_DATA);

/** Asserts `fn` rejects with an Error whose message names `name` and contains `fragment`. */
async function assertRejects(
  fn: () => unknown,
  name: string,
  fragment: string | RegExp,
): Promise<void> {
  await assert.rejects(async () => await fn(), (e: unknown) => {
    assert.ok(e instanceof Error, `expected an Error, got ${e}`);
    assert.ok(e.message.startsWith(`Cannot read IDX file ${name}:`), e.message);
    if (typeof fragment === "string") assert.ok(e.message.includes(fragment), e.message);
    else assert.match(e.message, fragment);
    return true;
  });
}

Deno.test("parseIdx() reads the dims and the row-major bytes of a well-formed file", () => {
  const { dims, data } = parseIdx(SAMPLE, "sample");
  assert.deepEqual(dims, [2, 3, 4]);
  assert.deepEqual([...data], [...SAMPLE_DATA]);
});

Deno.test("parseIdx() reads big-endian dims above 2**24", () => {
  const { dims, data } = parseIdx(idxBytes([0x01020304, 0], new Uint8Array()), "zero");
  assert.deepEqual(dims, [0x01020304, 0]);
  assert.equal(data.length, 0);
});

Deno.test("decodeIdx() gunzips gzip data, whatever the name, and passes plain data through", async () => {
  const fromGzip = await decodeIdx(await gzip(SAMPLE), "no-extension");
  assert.deepEqual(fromGzip.dims, [2, 3, 4]);
  assert.deepEqual([...fromGzip.data], [...SAMPLE_DATA]);
  const plain = await decodeIdx(SAMPLE, "plain.gz");
  assert.deepEqual([...plain.data], [...SAMPLE_DATA]);
});

Deno.test("parseIdx() refuses a bad magic, naming the bytes found", async () => {
  const bad = SAMPLE.slice();
  bad[1] = 0x08;
  await assertRejects(() => parseIdx(bad, "f.idx"), "f.idx", "bad magic 0x00 0x08 0x08 0x03");
});

Deno.test("parseIdx() refuses element types other than u8, naming the type", async () => {
  await assertRejects(
    () => parseIdx(idxBytes([1], new Uint8Array(4), 0x0d), "floats"),
    "floats",
    "element type 0x0d (f32) is not supported: expected 0x08 (u8)",
  );
  await assertRejects(
    () => parseIdx(idxBytes([1], new Uint8Array(1), 0x42), "odd"),
    "odd",
    "unknown element type 0x42",
  );
});

Deno.test("parseIdx() refuses 0 dims and more than 16", async () => {
  await assertRejects(() => parseIdx(idxBytes([], new Uint8Array()), "z"), "z", "declares 0 dims");
  const many = idxBytes(new Array(17).fill(1), new Uint8Array(1));
  await assertRejects(() => parseIdx(many, "m"), "m", "declares 17 dims: expected 1..16");
});

Deno.test("parseIdx() refuses a truncated magic, header or data", async () => {
  await assertRejects(() => parseIdx(SAMPLE.subarray(0, 3), "t"), "t", "3 bytes, the magic alone");
  await assertRejects(
    () => parseIdx(SAMPLE.subarray(0, 10), "t"),
    "t",
    "10 bytes, a header of 3 dims needs 16",
  );
  await assertRejects(
    () => parseIdx(SAMPLE.subarray(0, SAMPLE.length - 1), "t"),
    "t",
    "truncated: dims [2,3,4] need 24 data bytes, found 23",
  );
});

Deno.test("parseIdx() refuses trailing bytes after the data", async () => {
  const longer = new Uint8Array(SAMPLE.length + 5);
  longer.set(SAMPLE);
  await assertRejects(
    () => parseIdx(longer, "long"),
    "long",
    "need 24 data bytes, found 29 (5 extra)",
  );
});

Deno.test("parseIdx() refuses absurd dims before reading any data", async () => {
  const huge = idxBytes([0xffffffff, 0xffffffff, 0xffffffff], new Uint8Array(8));
  await assertRejects(() => parseIdx(huge, "huge"), "huge", "more than 1073741824 elements");
  await assertRejects(
    () => parseIdx(SAMPLE, "capped", { maxBytes: 23 }),
    "capped",
    "more than 23 elements (maxBytes)",
  );
});

Deno.test("decodeIdx() refuses corrupt and truncated gzip data", async () => {
  const packed = await gzip(SAMPLE);
  const cut = packed.subarray(0, packed.length - 6);
  await assertRejects(() => decodeIdx(cut, "cut.gz"), "cut.gz", "corrupt gzip data");
  const flipped = packed.slice();
  for (let i = 10; i < flipped.length - 8; i++) flipped[i]! ^= 0x5a;
  await assertRejects(() => decodeIdx(flipped, "flip.gz"), "flip.gz", "corrupt gzip data");
  // The process survives a corrupt stream: a good one still decodes afterwards.
  assert.deepEqual((await decodeIdx(packed, "good.gz")).dims, [2, 3, 4]);
});

Deno.test("decodeIdx() stops a gzip stream that inflates past maxBytes", async () => {
  const bomb = await gzip(idxBytes([1 << 22], new Uint8Array(1 << 22))); // 4 MiB of zeros, ~4 KiB packed
  assert.ok(bomb.length < 1 << 14, `bomb is ${bomb.length} bytes`);
  await assertRejects(
    () => decodeIdx(bomb, "bomb.gz", { maxBytes: 1 << 16 }),
    "bomb.gz",
    "decompresses to more than",
  );
});

Deno.test("readIdx() reads a file from disk and names a missing one", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-idx-" });
  try {
    const path = join(dir, "sample-idx3-ubyte.gz");
    Deno.writeFileSync(path, await gzip(SAMPLE));
    assert.deepEqual((await readIdx(path)).dims, [2, 3, 4]);
    const missing = join(dir, "absent");
    await assertRejects(() => readIdx(missing), missing, /No such file|not found/i);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("readIdxCached() inflates a gzip file once, and replaces a damaged or unwritable copy's use", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-idx-" });
  try {
    const path = join(dir, "sample-idx3-ubyte.gz");
    Deno.writeFileSync(path, await gzip(SAMPLE));
    const cache = join(dir, "cache");
    let inflated = 0;
    const warnings: string[] = [];
    const opts = { onProgress: () => inflated++, warn: (w: string) => warnings.push(w) };
    const first = await readIdxCached(path, cache, opts);
    assert.ok(inflated > 0);
    inflated = 0;
    const again = await readIdxCached(path, cache, opts);
    assert.equal(inflated, 0, "read from the copy");
    assert.deepEqual([again.dims, [...again.data]], [first.dims, [...first.data]]);
    const [copy] = [...Deno.readDirSync(cache)].map((e) => join(cache, e.name));
    Deno.writeFileSync(copy!, Deno.readFileSync(copy!).subarray(0, 20)); // truncated
    const repaired = await readIdxCached(path, cache, opts);
    assert.ok(inflated > 0);
    assert.match(warnings.join("\n"), /ignoring the cached copy .*truncated/);
    assert.deepEqual([...repaired.data], [...first.data]);
    assert.equal(Deno.statSync(copy!).size, SAMPLE.length, "rewritten whole");
    const blocked = join(dir, "file-not-folder");
    Deno.writeTextFileSync(blocked, "");
    const unwritable = await readIdxCached(path, blocked, opts);
    assert.deepEqual([...unwritable.data], [...first.data]);
    assert.match(warnings.at(-1)!, /cannot keep a decompressed copy .*set DTRAIN_CACHE/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

/** Checks the invariant of a successful decode: the data fills the declared dims. */
function assertConsistent(got: IdxArray, input: string): void {
  const count = got.dims.reduce((a, b) => a * b, 1);
  assert.equal(got.data.length, count, `${input}: ${got.data.length} bytes for dims [${got.dims}]`);
}

/** A seeded corruption of `base`: flipped bytes, a cut, or appended bytes. */
function corrupt(base: Uint8Array, gen: TorchGenerator): Uint8Array<ArrayBuffer> {
  const kind = gen.randint(0, 3);
  if (kind === 1) return base.slice(0, gen.randint(0, base.length));
  if (kind === 2) {
    const out = new Uint8Array(base.length + gen.randint(1, 9));
    out.set(base);
    return out;
  }
  const out = base.slice();
  const flips = gen.randint(1, 4);
  for (let f = 0; f < flips; f++) {
    // Header bytes are hit half the time: they hold most of the structure.
    const at = gen.randint(0, 2) === 0 ? gen.randint(0, 16) : gen.randint(0, out.length);
    out[at] = gen.randint(0, 256);
  }
  return out;
}

Deno.test("decodeIdx() either decodes seeded corruptions consistently or throws an Error naming the file", async () => {
  const gen = new TorchGenerator(20240);
  const packed = await gzip(SAMPLE);
  let rejected = 0, decoded = 0;
  for (let i = 0; i < 400; i++) {
    const name = `fuzz-${i}`;
    const input = corrupt(i % 4 === 3 ? packed : SAMPLE, gen);
    try {
      assertConsistent(await decodeIdx(input, name, { maxBytes: 1 << 16 }), name);
      decoded++;
    } catch (e) {
      assert.ok(e instanceof Error, `${name}: threw a non-Error ${e}`);
      assert.ok(e.message.startsWith(`Cannot read IDX file ${name}: `), `${name}: ${e.message}`);
      rejected++;
    }
  }
  // Both outcomes must occur, or the corruptions are not exercising the checks.
  assert.ok(rejected > 100 && decoded > 10, `rejected ${rejected}, decoded ${decoded}`);
});
