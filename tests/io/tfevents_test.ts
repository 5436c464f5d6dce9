/**
 * Tests of io/tfevents.ts: CRC32C against published vectors, the TFRecord
 * framing, and event files decoded by a reader that is not dtrain's code
 * (Google's protobuf runtime in Python, skipped with a reason when absent),
 * including a seeded fuzz of tags, texts, values and steps and the limits.
 */
import assert from "node:assert/strict";
import {
  crc32c,
  encodeEvent,
  EventFileWriter,
  FILE_VERSION,
  frameRecord,
  maskCrc,
  MAX_TAG_BYTES,
  MAX_TEXT_BYTES,
  type SummaryValue,
} from "../../io/tfevents.ts";
import {
  eventFiles,
  f32Hex,
  type PyEvent,
  readerMissing,
  readEvents,
  runReader,
} from "./_tfevents_reader.ts";

if (readerMissing) {
  console.warn(
    `tests/io/tfevents_test.ts: ${readerMissing}, so the protobuf reader tests are skipped`,
  );
}

const bytes = (...b: number[]) => new Uint8Array(b);
const range = (n: number, f: (i: number) => number) =>
  Uint8Array.from({ length: n }, (_, i) => f(i));

Deno.test("crc32c() matches the CRC-32C check value and the RFC 3720 (iSCSI) test vectors", () => {
  assert.equal(crc32c(new Uint8Array(0)), 0);
  assert.equal(crc32c(new TextEncoder().encode("123456789")), 0xe3069283);
  // RFC 3720 appendix B.4.
  assert.equal(crc32c(new Uint8Array(32)), 0x8a9136aa);
  assert.equal(crc32c(new Uint8Array(32).fill(0xff)), 0x62a8ab43);
  assert.equal(crc32c(range(32, (i) => i)), 0x46dd794e);
  assert.equal(crc32c(range(32, (i) => 31 - i)), 0x113fdb5c);
  const pdu = bytes(
    0x01,
    0xc0,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x14,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x04,
    0x00,
    0x00,
    0x00,
    0x00,
    0x14,
    0x00,
    0x00,
    0x00,
    0x18,
    0x28,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x02,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
  );
  assert.equal(crc32c(pdu), 0xd9963a56);
});

Deno.test("maskCrc() is TFRecord's rotate-and-add, and is undone by its inverse", () => {
  const unmask = (m: number) => {
    const r = (m - 0xa282ead8) >>> 0;
    return ((r >>> 17) | (r << 15)) >>> 0;
  };
  for (const crc of [0, 1, 0xffffffff, 0xe3069283, 0x80000000, 0x12345678]) {
    const m = maskCrc(crc);
    assert.ok(Number.isInteger(m) && m >= 0 && m < 2 ** 32);
    assert.equal(unmask(m), crc);
  }
  assert.notEqual(maskCrc(0xe3069283), 0xe3069283);
  // rotr(0x00000001, 15) = 0x00020000, + 0xa282ead8
  assert.equal(maskCrc(1), (0x00020000 + 0xa282ead8) >>> 0);
});

Deno.test("frameRecord() lays out length, masked length CRC, data, masked data CRC, little-endian", () => {
  const data = new TextEncoder().encode("hello");
  const r = frameRecord(data);
  assert.equal(r.length, 8 + 4 + 5 + 4);
  const v = new DataView(r.buffer);
  assert.equal(v.getBigUint64(0, true), 5n);
  assert.equal(v.getUint32(8, true), maskCrc(crc32c(r.subarray(0, 8))));
  assert.deepEqual(r.subarray(12, 17), data);
  assert.equal(v.getUint32(17, true), maskCrc(crc32c(data)));
});

Deno.test("encodeEvent() writes the proto3 wire format: wall_time (1, double), step (2, varint), summary (5)", () => {
  const e = encodeEvent(1.5, 3, { summary: [{ tag: "a", scalar: 1 }] });
  // 09 <double 1.5> 10 03 2a 0a 0a 08 0a 01 'a' 15 <float 1.0>
  assert.deepEqual(
    [...e],
    [
      0x09,
      0,
      0,
      0,
      0,
      0,
      0,
      0xf8,
      0x3f,
      0x10,
      3,
      0x2a,
      10,
      0x0a,
      8,
      0x0a,
      1,
      0x61,
      0x15,
      0,
      0,
      0x80,
      0x3f,
    ],
  );
  // A negative step is a ten-byte varint (int64 two's complement); step 0 is left out.
  assert.deepEqual([...encodeEvent(0, -1, { sessionStart: true })].slice(9, 20), [
    0x10,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0x01,
  ]);
  assert.equal(encodeEvent(0, 0, { sessionStart: true })[9], 0x3a, "field 7 follows wall_time");
});

Deno.test("encodeEvent() refuses what TensorBoard could not show, naming it", () => {
  const ev = (v: SummaryValue, step = 1, wall = 1) => () =>
    encodeEvent(wall, step, { summary: [v] });
  assert.throws(ev({ tag: "", scalar: 1 }), /TensorBoard tag must not be empty/);
  assert.throws(
    ev({ tag: "a\ud800b", scalar: 1 }),
    /TensorBoard tag "a\\ud800b" holds a lone UTF-16 surrogate/,
  );
  assert.throws(
    ev({ tag: "é".repeat(MAX_TAG_BYTES / 2 + 1), scalar: 1 }),
    new RegExp(`is ${MAX_TAG_BYTES + 2} UTF-8 bytes; at most ${MAX_TAG_BYTES}`),
  );
  assert.throws(
    ev({ tag: "t", text: "x".repeat(MAX_TEXT_BYTES + 1) }),
    /text of TensorBoard tag "t" is \d+ UTF-8 bytes/,
  );
  assert.throws(ev({ tag: "t", text: "\udfff" }), /lone UTF-16 surrogate/);
  assert.throws(
    ev({ tag: "t", scalar: "1" as unknown as number }),
    /scalar "t" must be a number, got string/,
  );
  assert.throws(ev({ tag: 7 as unknown as string, scalar: 1 }), /tag must be a string, got number/);
  assert.throws(ev({ tag: "t", scalar: 1 }, 1.5), /step must be a safe integer, got 1.5/);
  assert.throws(ev({ tag: "t", scalar: 1 }, 2 ** 53), /step must be a safe integer/);
  assert.throws(ev({ tag: "t", scalar: 1 }, 1, NaN), /wall time must be a finite number/);
  // At the limits exactly, it writes.
  ev({ tag: "a".repeat(MAX_TAG_BYTES), text: "b".repeat(MAX_TEXT_BYTES) })();
});

Deno.test("EventFileWriter names files events.out.tfevents.<time>.<host>.<pid>.<n>, each new one sorting last", () => {
  const dir = Deno.makeTempDirSync();
  try {
    const a = new EventFileWriter(`${dir}/tb`, { now: () => 1700000000.25 });
    const b = new EventFileWriter(`${dir}/tb`, { now: () => 1700000000.75 });
    a.close();
    b.close();
    assert.match(
      a.path,
      new RegExp(`/tb/events\\.out\\.tfevents\\.1700000000\\.[\\w-]+\\.${Deno.pid}\\.0$`),
    );
    assert.match(b.path, /\.1700000001\.[\w-]+\.\d+\.0$/, "a later second than the file before it");
    assert.deepEqual(eventFiles(`${dir}/tb`), [a.path, b.path]);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test({
  name:
    "event files decode with Google's protobuf runtime: framing, both CRCs, fields, text plugin, session start",
  ignore: readerMissing !== null,
  async fn() {
    const dir = Deno.makeTempDirSync();
    try {
      let t = 1700000000;
      const w = new EventFileWriter(dir, { now: () => (t += 0.5) });
      w.add(1, {
        summary: [{ tag: "train/loss", scalar: 2.5 }, { tag: "train/lr", scalar: 1e-3 }],
      });
      w.add(2, {
        summary: [{ tag: "zero", scalar: 0 }, { tag: "nan", scalar: NaN }, {
          tag: "big",
          scalar: 1e39,
        }],
      });
      w.add(3, { summary: [{ tag: "config", text: '    {"lr": 0.001}\n<script>é😀' }] });
      w.add(4, { sessionStart: true });
      w.close();
      const [events] = Object.values(await readEvents([w.path])) as [PyEvent[]];
      assert.deepEqual(events.map((e) => [e.what, e.step, e.wall_time]), [
        ["file_version", "0", 1700000000.5],
        ["summary", "1", 1700000001],
        ["summary", "2", 1700000001.5],
        ["summary", "3", 1700000002],
        ["session_log", "4", 1700000002.5],
      ]);
      assert.equal(events[0]!.file_version, FILE_VERSION);
      assert.deepEqual(events[1]!.values, [
        { tag: "train/loss", kind: "simple_value", f32: f32Hex(2.5) },
        { tag: "train/lr", kind: "simple_value", f32: f32Hex(1e-3) },
      ]);
      assert.deepEqual(events[2]!.values!.map((v) => v.f32), [f32Hex(0), "0000c07f", "0000807f"]);
      assert.deepEqual(events[3]!.values, [{
        tag: "config",
        kind: "tensor",
        dtype: 7, // DT_STRING
        shape: [],
        has_shape: true,
        strings: ['    {"lr": 0.001}\n<script>é😀'],
        plugin: "text",
        plugin_content: "",
        data_class: 2, // DATA_CLASS_TENSOR
      }]);
      assert.equal(events[4]!.status, 1, "SessionLog.START");
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "the protobuf reader refuses a bad length CRC, a bad data CRC, a truncated record and an unknown field",
  ignore: readerMissing !== null,
  async fn() {
    const dir = Deno.makeTempDirSync();
    try {
      const w = new EventFileWriter(dir);
      w.add(7, { summary: [{ tag: "loss", scalar: 1 }] });
      w.close();
      const good = Deno.readFileSync(w.path);
      const first = 16 + new DataView(good.buffer).getUint32(0, true);
      const variant = async (name: string, b: Uint8Array) => {
        Deno.writeFileSync(`${dir}/${name}`, b);
        return await runReader([`${dir}/${name}`]);
      };
      assert.ok((await variant("good", good)).ok);
      const flip = (at: number) => {
        const b = good.slice();
        b[at]! ^= 1;
        return b;
      };
      assert.match(
        (await variant("len", flip(first + 8))).stderr,
        /record 1 .*masked CRC32C of the length/,
      );
      assert.match(
        (await variant("data", flip(good.length - 1))).stderr,
        /record 1 .*masked CRC32C of the data/,
      );
      assert.match(
        (await variant("cut", good.subarray(0, good.length - 2))).stderr,
        /runs past the end/,
      );
      // A field the published protos do not have (number 15), framed with correct CRCs.
      const extra = new Uint8Array([...encodeEvent(1, 7, { sessionStart: true }), 0x78, 0x01]);
      assert.match(
        (await variant("unknown", frameRecord(extra))).stderr,
        /does not re-serialise to its bytes/,
      );
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});

/** A small seeded generator (mulberry32), so a failing fuzz case can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const SEED = Number(Deno.env.get("DTRAIN_FUZZ_SEED") ?? 20240611);

/** Strings of awkward characters: quotes, escapes, controls, NUL, markup, astral, combining marks. */
function fuzzString(r: () => number, maxLen: number): string {
  const pieces = [
    "a",
    "/",
    "\\",
    '"',
    "'",
    "\n",
    "\t",
    "\0",
    "\x7f",
    "<",
    "&",
    "é",
    "😀",
    "\u0301",
    "\ufeff",
    " ",
    "%s",
  ];
  let s = "";
  const len = Math.floor(r() * maxLen);
  while (s.length < len) {
    // A random code point outside the surrogates, or one of the awkward pieces.
    const cp = Math.floor(r() * 0x10ffff) + 1;
    s += r() < 0.3 && (cp < 0xd800 || cp > 0xdfff)
      ? String.fromCodePoint(cp)
      : pieces[Math.floor(r() * pieces.length)];
  }
  return s;
}

function fuzzNumber(r: () => number): number {
  const special = [
    0,
    -0,
    NaN,
    Infinity,
    -Infinity,
    1e-45,
    3.4028235e38,
    3.5e38,
    -1e39,
    5e-324,
    2 ** 24 + 1,
  ];
  if (r() < 0.3) return special[Math.floor(r() * special.length)]!;
  return (r() - 0.5) * 10 ** Math.floor(r() * 80 - 40);
}

Deno.test({
  name:
    "fuzz: 400 random events (awkward tags and texts, special floats, int64 steps) decode exactly",
  ignore: readerMissing !== null,
  async fn() {
    const r = rng(SEED);
    const dir = Deno.makeTempDirSync();
    try {
      const w = new EventFileWriter(dir);
      const expected: Array<{ step: number; body: SummaryValue[] | "start" }> = [];
      for (let i = 0; i < 400; i++) {
        const step = r() < 0.1 ? -Math.floor(r() * 2 ** 53) : Math.floor(r() * 2 ** (r() * 53));
        if (r() < 0.05) {
          w.add(step, { sessionStart: true });
          expected.push({ step, body: "start" });
          continue;
        }
        const values: SummaryValue[] = Array.from({ length: 1 + Math.floor(r() * 4) }, () => {
          let tag = fuzzString(r, 60);
          if (tag === "") tag = "t";
          return r() < 0.8 ? { tag, scalar: fuzzNumber(r) } : { tag, text: fuzzString(r, 3000) };
        });
        w.add(step, { summary: values });
        expected.push({ step, body: values });
      }
      w.close();
      const [events] = Object.values(await readEvents([w.path])) as [PyEvent[]];
      assert.equal(events.length, expected.length + 1);
      expected.forEach((x, i) => {
        const e = events[i + 1]!;
        const where = `case ${i} (DTRAIN_FUZZ_SEED=${SEED})`;
        assert.equal(e.step, String(x.step), where);
        if (x.body === "start") return assert.equal(e.what, "session_log", where);
        assert.equal(e.what, "summary", where);
        assert.deepEqual(
          e.values!.map((v) => [v.tag, v.kind === "simple_value" ? v.f32 : v.strings]),
          x.body.map((v) => [v.tag, "scalar" in v ? f32Hex(v.scalar) : [v.text]]),
          where,
        );
      });
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});
