/**
 * Token files: nanoGPT's raw uint16, llm.c's header (wrong magic, version and
 * length refused), .npy of every numeric dtype (header checked against the
 * size, Fortran order and odd dtypes refused), shard folders read as one
 * stream, and the header parsers fuzzed (each input either parses to a layout
 * that fits the file or is a TokenFileError, within bounded time).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { TokenStream } from "../../data/token_file.ts";
import {
  llmcHeader,
  npyHeader,
  parseTokenLayout,
  TokenFileError,
} from "../../data/token_format.ts";

function tmp(): string {
  return Deno.makeTempDirSync({ prefix: "dtrain-tokens-" });
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const u16 = (ids: number[]) => new Uint8Array(Uint16Array.from(ids).buffer);
const IDS = Array.from({ length: 1000 }, (_, i) => (i * 7919) % 50257);

Deno.test("nanoGPT raw uint16: every range reads back the ids written", () => {
  const dir = tmp();
  try {
    const path = join(dir, "train.bin");
    Deno.writeFileSync(path, u16(IDS));
    using s = TokenStream.open(path);
    assert.equal(s.length, IDS.length);
    assert.equal(s.files[0]!.format, "nanogpt");
    assert.deepEqual([...s.read(0, 10)], IDS.slice(0, 10));
    assert.deepEqual([...s.read(990, 10)], IDS.slice(990));
    assert.throws(() => s.read(995, 6), /cannot read 6 tokens at 995 of 1000/);
    Deno.writeFileSync(join(dir, "odd.bin"), new Uint8Array(7));
    assert.throws(() => TokenStream.open(join(dir, "odd.bin")), /7 bytes is not a whole number/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("llm.c: the header is found and checked; a wrong magic, version or length is refused", () => {
  const dir = tmp();
  try {
    const good = join(dir, "tiny_train.bin");
    Deno.writeFileSync(good, concat(llmcHeader(IDS.length), u16(IDS)));
    using s = TokenStream.open(good);
    assert.equal(s.files[0]!.format, "llmc");
    assert.equal(s.length, IDS.length);
    assert.deepEqual([...s.read(500, 5)], IDS.slice(500, 505));

    const version = join(dir, "v2.bin");
    Deno.writeFileSync(version, concat(llmcHeader(IDS.length, 2), u16(IDS)));
    assert.throws(() => TokenStream.open(version), /header version 2 is not supported/);
    const short = join(dir, "short.bin");
    Deno.writeFileSync(short, concat(llmcHeader(IDS.length + 1), u16(IDS)));
    assert.throws(
      () => TokenStream.open(short),
      /header says 1001 tokens \(3026 bytes with the header\), but the file has 3024 bytes/,
    );
    const magic = join(dir, "magic.bin");
    const h = llmcHeader(IDS.length);
    h[0]! ^= 1;
    Deno.writeFileSync(magic, concat(h, u16(IDS)));
    assert.throws(() => TokenStream.open(magic, "llmc"), /magic is 20240521, expected 20240520/);
    assert.throws(
      () => TokenStream.open(join(dir, "none.bin"), "llmc"),
      Deno.errors.NotFound,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

function npyFile(descr: string, shape: number[], data: Uint8Array): Uint8Array {
  return concat(npyHeader(descr, shape), data);
}

Deno.test(".npy: every numeric dtype and byte order reads as ids; the header is checked", () => {
  const dir = tmp();
  try {
    const ids = [0, 1, 255, 50256, 127, 3];
    const cases: [string, (v: DataView, i: number, x: number) => void, number][] = [
      ["|u1", (v, i, x) => v.setUint8(i, Math.min(x, 255)), 1],
      ["<u2", (v, i, x) => v.setUint16(i * 2, x, true), 2],
      [">u2", (v, i, x) => v.setUint16(i * 2, x, false), 2],
      ["<i4", (v, i, x) => v.setInt32(i * 4, x, true), 4],
      ["<u4", (v, i, x) => v.setUint32(i * 4, x, true), 4],
      ["<i8", (v, i, x) => v.setBigInt64(i * 8, BigInt(x), true), 8],
      [">u8", (v, i, x) => v.setBigUint64(i * 8, BigInt(x), false), 8],
      ["<f4", (v, i, x) => v.setFloat32(i * 4, x, true), 4],
      ["<f8", (v, i, x) => v.setFloat64(i * 8, x, true), 8],
      ["<f2", (v, i, x) => v.setFloat16(i * 2, Math.min(x, 2048), true), 2],
    ];
    for (const [descr, set, size] of cases) {
      const data = new Uint8Array(ids.length * size);
      const v = new DataView(data.buffer);
      ids.forEach((x, i) => set(v, i, x));
      const path = join(dir, `a.npy`);
      Deno.writeFileSync(path, npyFile(descr, [2, 3], data));
      using s = TokenStream.open(path);
      const want = ids.map((x) =>
        descr === "|u1" ? Math.min(x, 255) : descr === "<f2" ? Math.min(x, 2048) : x
      );
      assert.deepEqual([...s.read(0, 6)], want, descr);
    }
    const path = join(dir, "b.npy");
    Deno.writeFileSync(path, npyFile("<u2", [7], new Uint8Array(12)));
    assert.throws(
      () => TokenStream.open(path),
      /shape \(7\) of <u2 = 14 data bytes after a 128-byte header, but the file has 140 bytes/,
    );
    Deno.writeFileSync(path, npyFile("<c8", [1], new Uint8Array(8)));
    assert.throws(() => TokenStream.open(path), /dtype "<c8" is not a numeric dtype/);
    const h = npyHeader("<u2", [2, 3]);
    const at = new TextDecoder().decode(h.subarray(10)).indexOf("False") + 10;
    h.set(new TextEncoder().encode("True "), at);
    Deno.writeFileSync(path, concat(h, new Uint8Array(12)));
    assert.throws(() => TokenStream.open(path), /Fortran order/);
    const neg = new Uint8Array(8);
    new DataView(neg.buffer).setFloat32(4, 2.5, true);
    Deno.writeFileSync(path, npyFile("<f4", [2], neg));
    using f = TokenStream.open(path);
    assert.throws(() => f.read(0, 2), /token 1 is 2.5, not a token id/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("shards: a folder is one stream in shard order; splits and mixed folders", () => {
  const dir = tmp();
  try {
    const chunks = [IDS.slice(0, 300), IDS.slice(300, 301), IDS.slice(301)];
    // written out of order, and in two formats: the number orders them
    Deno.writeFileSync(
      join(dir, "web_train_000002.bin"),
      concat(llmcHeader(chunks[2]!.length), u16(chunks[2]!)),
    );
    Deno.writeFileSync(join(dir, "web_train_000000.bin"), u16(chunks[0]!));
    Deno.writeFileSync(join(dir, "web_train_000001.bin"), u16(chunks[1]!));
    Deno.writeFileSync(join(dir, "web_val_000000.bin"), u16([1, 2, 3]));
    assert.throws(
      () => TokenStream.open(dir),
      /shards of 2 datasets \(.*web_train.bin.*web_val.bin|web_val.bin.*web_train.bin/,
    );
    using train = TokenStream.openSplit(dir, "train");
    assert.equal(train.length, IDS.length);
    assert.deepEqual([...train.read(295, 10)], IDS.slice(295, 305));
    assert.deepEqual([...train.read(0, IDS.length)], IDS);
    using val = TokenStream.openSplit(dir, "val");
    assert.deepEqual([...val.read(0, 3)], [1, 2, 3]);
    assert.throws(
      () => TokenStream.openSplit(dir, "test"),
      /no test.bin, no test.npy and no shards/,
    );
    const own = join(dir, "only");
    Deno.mkdirSync(own);
    Deno.writeFileSync(join(own, "x_000000.npy"), npyFile("<u2", [3], u16([5, 6, 7])));
    Deno.writeFileSync(
      join(own, "x_000001.npy"),
      npyFile("<i4", [1], new Uint8Array(Int32Array.of(8).buffer)),
    );
    using s = TokenStream.open(own);
    assert.deepEqual([...s.read(1, 3)], [6, 7, 8]);
    // nanoGPT's layout wins over shards
    Deno.writeFileSync(join(dir, "train.bin"), u16([9, 9]));
    using nano = TokenStream.openSplit(dir, "train");
    assert.equal(nano.length, 2);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

/** A deterministic byte source for the fuzzer (xorshift32). */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>>= 0);
  };
}

Deno.test("header parsers fuzzed: a layout that fits the file, or a TokenFileError", () => {
  const next = rng(20240520);
  const seeds = [
    concat(llmcHeader(100), u16(Array(100).fill(1))),
    npyFile("<u2", [100], new Uint8Array(200)),
    npyFile(">i8", [5, 4], new Uint8Array(160)),
  ];
  const started = performance.now();
  let parsed = 0;
  let refused = 0;
  for (let i = 0; i < 20_000; i++) {
    const base = seeds[i % seeds.length]!.slice(0, 1024 + (next() % 256));
    const head = base.slice();
    const flips = 1 + (next() % 8);
    for (let k = 0; k < flips; k++) {
      const at = next() % Math.min(head.length, i % 2 ? 16 : 128);
      head[at] = next() & 0xff;
    }
    const size = i % 3 === 0 ? next() % 4096 : seeds[i % seeds.length]!.length;
    for (const format of ["auto", "llmc", "npy"] as const) {
      try {
        const l = parseTokenLayout("fuzz.bin", head, size, format);
        assert.equal(
          l.dataOffset + l.count * l.dtype.size,
          size,
          `layout must fit the file (${i})`,
        );
        parsed++;
      } catch (e) {
        if (!(e instanceof TokenFileError)) throw e;
        assert.match(e.message, /^fuzz\.bin: /);
        refused++;
      }
    }
  }
  assert.ok(parsed > 100 && refused > 1000, `${parsed} parsed, ${refused} refused`);
  assert.ok(performance.now() - started < 60_000, "20 000 headers took over a minute");
});

const PYTHON = "/usr/bin/python3";
const numpyMissing = (() => {
  try {
    const r = new Deno.Command(PYTHON, { args: ["-c", "import numpy"], stderr: "null" })
      .outputSync();
    return r.success ? null : "numpy is not importable by /usr/bin/python3";
  } catch {
    return "/usr/bin/python3 is missing";
  }
})();

Deno.test({
  name: `files NumPy writes (np.save, np.memmap, llm.c's write_datafile) read as NumPy reads them${
    numpyMissing ? ` (skipped: ${numpyMissing})` : ""
  }`,
  ignore: numpyMissing !== null,
  fn() {
    const dir = tmp();
    try {
      const script = `
import numpy as np, sys, os
d = sys.argv[1]
ids = (np.arange(5000, dtype=np.int64) * 7919) % 50257
np.save(os.path.join(d, "a.npy"), ids.reshape(50, 100))
np.save(os.path.join(d, "b.npy"), ids.astype(">u4"))
np.save(os.path.join(d, "c.npy"), ids.astype(np.float32))
ids.astype(np.uint16).tofile(os.path.join(d, "train.bin"))
header = np.zeros(256, dtype=np.int32); header[0] = 20240520; header[1] = 1; header[2] = len(ids)
with open(os.path.join(d, "llmc.bin"), "wb") as f:
    f.write(header.tobytes()); f.write(ids.astype(np.uint16).tobytes())
`;
      const r = new Deno.Command(PYTHON, { args: ["-c", script, dir] }).outputSync();
      assert.ok(r.success, new TextDecoder().decode(r.stderr));
      const want = Array.from({ length: 5000 }, (_, i) => (i * 7919) % 50257);
      for (const name of ["a.npy", "b.npy", "c.npy", "train.bin", "llmc.bin"]) {
        using s = TokenStream.open(join(dir, name));
        assert.deepEqual([...s.read(0, 5000)], want, name);
      }
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});
