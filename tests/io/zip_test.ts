/**
 * Tests of io/zip.ts: torch.save's archive layout read from the fixtures,
 * zip64, the refusal of compressed/encrypted/corrupted entries, and one test
 * per structural defect.
 */
import assert from "node:assert/strict";
import { parseSafetensors } from "../../io/safetensors.ts";
import { crc32, readZipDirectory, readZipEntry } from "../../io/zip.ts";
import { readFixture } from "./_fixtures.ts";
import { buildZip } from "./_zip_writer.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const sameBytes = (a: Uint8Array, b: Uint8Array) =>
  a.length === b.length && a.every((x, i) => x === b[i]);

function assertInvalid(bytes: Uint8Array, pattern: RegExp): void {
  assert.throws(() => {
    for (const e of readZipDirectory(bytes, "bad.zip")) {
      readZipEntry(bytes, e, { source: "bad.zip" });
    }
  }, (e: unknown) => {
    assert.ok(e instanceof Error && e.constructor === Error, `expected a plain Error, got ${e}`);
    assert.match(e.message, /bad\.zip/);
    assert.match(e.message, pattern);
    return true;
  });
}

/** Two small stored files; returns the archive and a DataView on it. */
function twoFiles(): { zip: Uint8Array; view: DataView; eocd: number; directory: number } {
  const zip = buildZip([{ name: "a.bin", data: enc("0123456789") }, {
    name: "b.bin",
    data: enc("abcde"),
  }]);
  const view = new DataView(zip.buffer);
  const eocd = zip.length - 22;
  return { zip, view, eocd, directory: view.getUint32(eocd + 16, true) };
}

Deno.test("crc32() matches the standard check value", () => {
  assert.equal(crc32(enc("123456789")), 0xcbf43926);
  assert.equal(crc32(new Uint8Array(0)), 0);
});

Deno.test("readZipDirectory() lists ckpt_state_dict.pt as torch.save wrote it", () => {
  const bytes = readFixture("ckpt_state_dict.pt");
  const entries = readZipDirectory(bytes, "ckpt_state_dict.pt");
  assert.deepEqual(entries.map((e) => e.name), [
    "ckpt_state_dict/data.pkl",
    "ckpt_state_dict/data/0",
    "ckpt_state_dict/data/1",
    "ckpt_state_dict/data/2",
    "ckpt_state_dict/data/3",
    "ckpt_state_dict/version",
  ]);
  for (const e of entries) assert.equal(e.method, 0);
  const storages = entries.filter((e) => e.name.includes("/data/"));
  assert.deepEqual(storages.map((e) => e.size), [256 * 128 * 4, 256 * 4, 2 * 256 * 4, 2 * 4]);
  for (const e of storages) assert.equal(e.dataOffset % 64, 0, `${e.name} is not 64-byte aligned`);
  assert.equal(
    new TextDecoder().decode(readZipEntry(bytes, entries[5]!, { source: "ckpt_state_dict.pt" })),
    "3\n",
  );
  // Storage "0" is the first tensor saved, 0.weight: the same bytes as in the safetensors twin.
  const weight = readZipEntry(bytes, entries[1]!, { source: "ckpt_state_dict.pt" });
  assert.equal(weight.buffer, bytes.buffer, "entries are views, not copies");
  const twin = parseSafetensors(readFixture("ckpt_state_dict.safetensors")).tensors.get(
    "0.weight",
  )!;
  assert.ok(sameBytes(weight, twin.data));
});

Deno.test("readZipDirectory() reads zip64 archives through their extra fields", () => {
  const files = [{ name: "x/data.pkl", data: enc("pickle") }, {
    name: "x/data/0",
    data: new Uint8Array(100).fill(7),
  }];
  const zip = buildZip(files, { zip64: true });
  const entries = readZipDirectory(zip, "z64.zip");
  assert.deepEqual(entries.map((e) => [e.name, e.size]), [["x/data.pkl", 6], ["x/data/0", 100]]);
  assert.ok(sameBytes(readZipEntry(zip, entries[1]!, { source: "z64.zip" }), files[1]!.data));
});

Deno.test("readZipEntry() refuses compressed and encrypted entries with a clear message", () => {
  const zip = buildZip([{ name: "m/data.pkl", data: enc("xyz"), method: 8 }, {
    name: "e",
    data: enc("q"),
    flags: 1,
  }]);
  const [deflated, encrypted] = readZipDirectory(zip, "c.pt");
  assert.throws(
    () => readZipEntry(zip, deflated!, { source: "c.pt" }),
    /^Error: Cannot read entry "m\/data.pkl" of zip archive c\.pt: it is compressed \(method 8, deflate\); only stored \(uncompressed\) entries are supported/,
  );
  assert.throws(
    () => readZipEntry(zip, encrypted!, { source: "c.pt" }),
    /entry "e" of zip archive c\.pt: it is encrypted/,
  );
});

Deno.test("readZipEntry() detects corrupted data through the CRC-32", () => {
  const zip = buildZip([{ name: "a", data: enc("hello"), crc: crc32(enc("hellO")) }]);
  const [entry] = readZipDirectory(zip, "crc.zip");
  assert.throws(
    () => readZipEntry(zip, entry!, { source: "crc.zip" }),
    /entry "a" of zip archive crc\.zip: CRC-32 mismatch \(file corrupted\)/,
  );
  assert.equal(
    new TextDecoder().decode(readZipEntry(zip, entry!, { source: "crc.zip", verifyCrc: false })),
    "hello",
  );
});

Deno.test("readZipDirectory() rejects truncated files and missing end records", () => {
  const { zip } = twoFiles();
  assertInvalid(
    zip.subarray(0, 21),
    /21 bytes long, too short for an end-of-central-directory record/,
  );
  assertInvalid(
    zip.subarray(0, zip.length - 1),
    /no end-of-central-directory record \(not a zip file, or truncated\)/,
  );
  assertInvalid(zip.subarray(0, 150).slice(), /no end-of-central-directory record/);
});

Deno.test("readZipDirectory() rejects directories that overrun, lie or span disks", () => {
  const cases: [string, (t: ReturnType<typeof twoFiles>) => void, RegExp][] = [
    [
      "count",
      (t) => t.view.setUint16(t.eocd + 10, 9, true),
      /multi-disk archives are not supported/,
    ],
    ["count both", (t) => {
      t.view.setUint16(t.eocd + 8, 9, true);
      t.view.setUint16(t.eocd + 10, 9, true);
    }, /claims 9 entries but is only 102 bytes long/],
    [
      "offset",
      (t) => t.view.setUint32(t.eocd + 16, t.directory + 200, true),
      /overruns the end records at offset/,
    ],
    ["disk", (t) => t.view.setUint16(t.eocd + 4, 1, true), /multi-disk archives are not supported/],
    [
      "central signature",
      (t) => t.view.setUint8(t.directory, 0),
      /central directory entry 0 at offset \d+ has a bad signature/,
    ],
    [
      "name length",
      (t) => t.view.setUint16(t.directory + 28, 5000, true),
      /central directory entry 0 runs past the directory's end/,
    ],
    [
      "local offset",
      (t) => t.view.setUint32(t.directory + 42, 10, true),
      /entry "a\.bin"'s local header at offset 10 has a bad signature/,
    ],
    [
      "local offset far",
      (t) => t.view.setUint32(t.directory + 42, 0xfffffff0, true),
      /local header at offset 4294967280 is not before the central directory/,
    ],
    ["local name", (t) => t.zip[30]++, /entry "a\.bin"'s local header names a different file/],
    ["data size", (t) => {
      t.view.setUint32(t.directory + 20, 1000, true);
      t.view.setUint32(t.directory + 24, 1000, true);
    }, /entry "a\.bin"'s data \(offset 64, 1000 bytes\) runs into the central directory/],
    [
      "sizes differ",
      (t) => t.view.setUint32(t.directory + 24, 3, true),
      /a stored entry must have equal sizes, got 10 and 3/,
    ],
    [
      "zip64 sentinel",
      (t) => t.view.setUint32(t.eocd + 12, 0xffffffff, true),
      /the zip64 end-of-directory locator is missing/,
    ],
    ["name utf-8", (t) => {
      t.zip[t.directory + 46] = 0xff;
    }, /the name of entry 0 is not valid UTF-8/],
  ];
  for (const [what, mutate, pattern] of cases) {
    const t = twoFiles();
    mutate(t);
    try {
      assertInvalid(t.zip, pattern);
    } catch (e) {
      throw new Error(`case "${what}": ${(e as Error).message}`);
    }
  }
  const dup = buildZip([{ name: "same", data: enc("1") }, { name: "same", data: enc("2") }]);
  assertInvalid(dup, /entry name "same" appears twice/);
});

Deno.test("readZipDirectory() checks zip64 records and extra fields", () => {
  const files = [{ name: "a", data: enc("xyz") }];
  const zip = buildZip(files, { zip64: true });
  const view = new DataView(zip.buffer);
  const locator = zip.length - 22 - 20;
  const record = Number(view.getBigUint64(locator + 8, true));
  const directory = Number(view.getBigUint64(record + 48, true));

  const badLocator = zip.slice();
  new DataView(badLocator.buffer).setBigUint64(locator + 8, 2n ** 60n, true);
  assertInvalid(badLocator, /zip64 end record offset 1152921504606846976 is larger than any file/);
  const badRecord = zip.slice();
  new DataView(badRecord.buffer).setUint32(record, 0, true);
  assertInvalid(badRecord, /no zip64 end-of-directory record at offset/);
  const noExtra = zip.slice();
  new DataView(noExtra.buffer).setUint16(directory + 46 + 1, 0x9999, true); // the extra field's id
  assertInvalid(noExtra, /entry "a" needs 64-bit sizes but has no zip64 extra field/);
  const shortExtra = zip.slice();
  new DataView(shortExtra.buffer).setUint16(directory + 46 + 1 + 2, 8, true); // declares 8 of its 24 bytes
  assertInvalid(shortExtra, /entry "a"'s zip64 extra field is too short for its compressed size/);
});
