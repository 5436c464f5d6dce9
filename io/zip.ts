/**
 * A minimal, bounds-checked zip reader for torch.save archives: it finds the
 * central directory (zip64 included), checks every local header, and returns
 * stored (uncompressed) entries as views into the archive after a CRC-32
 * check. Compressed, encrypted and multi-disk archives are refused clearly.
 */
import { quoted } from "./_untrusted_text.ts";

/** One file of a zip archive, as its central directory and local header describe it. */
export interface ZipEntry {
  name: string;
  /** 0 = stored; anything else is compressed and cannot be read here. */
  method: number;
  flags: number;
  crc32: number;
  compressedSize: number;
  size: number;
  /** Offset of the local file header in the archive. */
  localHeaderOffset: number;
  /** Offset of the entry's first data byte in the archive. */
  dataOffset: number;
}

const SIG_LOCAL = 0x04034b50;
const SIG_CENTRAL = 0x02014b50;
const SIG_EOCD = 0x06054b50;
const SIG_ZIP64_LOCATOR = 0x07064b50;
const SIG_ZIP64_EOCD = 0x06064b50;
const EOCD_SIZE = 22;
const CENTRAL_SIZE = 46;
const LOCAL_SIZE = 30;
const MAX_COMMENT = 0xffff;

type Fail = (problem: string) => never;

/** Little-endian field reads that fail (instead of returning NaN or throwing RangeError) when out of bounds. */
class Reader {
  readonly view: DataView;
  constructor(readonly bytes: Uint8Array, readonly fail: Fail) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  need(at: number, length: number, what: string): void {
    if (at < 0 || at + length > this.bytes.length) {
      this.fail(
        `${what} at offset ${at} (${length} bytes) lies outside the ${this.bytes.length}-byte file`,
      );
    }
  }
  u16(at: number): number {
    return this.view.getUint16(at, true);
  }
  u32(at: number): number {
    return this.view.getUint32(at, true);
  }
  /** A u64 that must fit a safe integer (offsets and sizes of in-memory files always do). */
  u64(at: number, what: string): number {
    const v = this.view.getBigUint64(at, true);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) this.fail(`${what} ${v} is larger than any file`);
    return Number(v);
  }
}

interface Directory {
  count: number;
  offset: number;
  size: number;
  /** Where the end records begin: the central directory must end at or before it. */
  limit: number;
}

/**
 * Lists the entries of the zip archive in `bytes`, in central-directory
 * order, after checking that every header and every entry's data lie inside
 * the file. `source` is named in errors.
 */
export function readZipDirectory(bytes: Uint8Array, source = "<buffer>"): ZipEntry[] {
  const fail: Fail = (problem) => {
    throw new Error(`Invalid zip archive ${source}: ${problem}`);
  };
  const r = new Reader(bytes, fail);
  const dir = findDirectory(r);
  if (dir.count * CENTRAL_SIZE > dir.size) {
    fail(`the directory claims ${dir.count} entries but is only ${dir.size} bytes long`);
  }
  const entries: ZipEntry[] = [];
  const names = new Set<string>();
  let at = dir.offset;
  const end = dir.offset + dir.size;
  for (let i = 0; i < dir.count; i++) {
    const entry = readCentralEntry(r, at, end, i);
    if (names.has(entry.name)) fail(`entry name ${quoted(entry.name)} appears twice`);
    names.add(entry.name);
    checkLocalHeader(r, entry, dir.offset);
    entries.push(entry);
    at = nextCentral(r, at);
  }
  return entries;
}

function findDirectory(r: Reader): Directory {
  const len = r.bytes.length;
  if (len < EOCD_SIZE) {
    r.fail(`it is ${len} bytes long, too short for an end-of-central-directory record`);
  }
  let eocd = -1;
  for (let at = len - EOCD_SIZE; at >= Math.max(0, len - EOCD_SIZE - MAX_COMMENT); at--) {
    if (r.u32(at) === SIG_EOCD && at + EOCD_SIZE + r.u16(at + 20) <= len) {
      eocd = at;
      break;
    }
  }
  if (eocd < 0) r.fail("no end-of-central-directory record (not a zip file, or truncated)");
  const disk = r.u16(eocd + 4);
  const dirDisk = r.u16(eocd + 6);
  const onDisk = r.u16(eocd + 8);
  let count = r.u16(eocd + 10);
  let size = r.u32(eocd + 12);
  let offset = r.u32(eocd + 16);
  let limit = eocd;
  if (count === 0xffff || onDisk === 0xffff || size === 0xffffffff || offset === 0xffffffff) {
    // Sentinel values: the real numbers are in the zip64 end record, found through its locator.
    const locator = eocd - 20;
    r.need(locator, 20, "zip64 end-of-directory locator");
    if (r.u32(locator) !== SIG_ZIP64_LOCATOR) {
      r.fail("the zip64 end-of-directory locator is missing");
    }
    const record = r.u64(locator + 8, "zip64 end record offset");
    r.need(record, 56, "zip64 end-of-directory record");
    if (r.u32(record) !== SIG_ZIP64_EOCD) {
      r.fail(`no zip64 end-of-directory record at offset ${record}`);
    }
    if (r.u32(record + 16) !== 0 || r.u32(record + 20) !== 0) {
      r.fail("multi-disk archives are not supported");
    }
    const onDisk64 = r.u64(record + 24, "zip64 entry count");
    count = r.u64(record + 32, "zip64 entry count");
    if (onDisk64 !== count) r.fail("multi-disk archives are not supported");
    size = r.u64(record + 40, "zip64 directory size");
    offset = r.u64(record + 48, "zip64 directory offset");
    limit = record;
  } else if (disk !== 0 || dirDisk !== 0 || onDisk !== count) {
    r.fail("multi-disk archives are not supported");
  }
  if (offset + size > limit) {
    r.fail(
      `the central directory (offset ${offset}, ${size} bytes) overruns the end records at offset ${limit}`,
    );
  }
  return { count, offset, size, limit };
}

function nextCentral(r: Reader, at: number): number {
  return at + CENTRAL_SIZE + r.u16(at + 28) + r.u16(at + 30) + r.u16(at + 32);
}

function readCentralEntry(r: Reader, at: number, end: number, index: number): ZipEntry {
  if (at + CENTRAL_SIZE > end) {
    r.fail(`central directory entry ${index} runs past the directory's end`);
  }
  if (r.u32(at) !== SIG_CENTRAL) {
    r.fail(`central directory entry ${index} at offset ${at} has a bad signature`);
  }
  const nameLength = r.u16(at + 28);
  const extraLength = r.u16(at + 30);
  if (nextCentral(r, at) > end) {
    r.fail(`central directory entry ${index} runs past the directory's end`);
  }
  const nameBytes = r.bytes.subarray(at + CENTRAL_SIZE, at + CENTRAL_SIZE + nameLength);
  let name = "";
  try {
    name = new TextDecoder("utf-8", { fatal: true }).decode(nameBytes);
  } catch {
    r.fail(`the name of entry ${index} is not valid UTF-8`);
  }
  const entry: ZipEntry = {
    name,
    method: r.u16(at + 10),
    flags: r.u16(at + 8),
    crc32: r.u32(at + 16),
    compressedSize: r.u32(at + 20),
    size: r.u32(at + 24),
    localHeaderOffset: r.u32(at + 42),
    dataOffset: 0,
  };
  if (r.u16(at + 34) !== 0 && r.u16(at + 34) !== 0xffff) {
    r.fail("multi-disk archives are not supported");
  }
  applyZip64Extra(r, entry, at + CENTRAL_SIZE + nameLength, extraLength);
  return entry;
}

/** Replaces 0xFFFFFFFF sizes and offsets by the 64-bit values of the zip64 extra field (id 0x0001). */
function applyZip64Extra(r: Reader, entry: ZipEntry, start: number, length: number): void {
  const wants = {
    size: entry.size === 0xffffffff,
    compressedSize: entry.compressedSize === 0xffffffff,
    localHeaderOffset: entry.localHeaderOffset === 0xffffffff,
  };
  if (!wants.size && !wants.compressedSize && !wants.localHeaderOffset) return;
  const label = `entry ${quoted(entry.name)}`;
  for (let at = start; at + 4 <= start + length;) {
    const id = r.u16(at);
    const size = r.u16(at + 2);
    if (at + 4 + size > start + length) break;
    if (id === 0x0001) {
      let p = at + 4;
      const take = (what: string): number => {
        if (p + 8 > at + 4 + size) {
          r.fail(`${label}'s zip64 extra field is too short for its ${what}`);
        }
        const v = r.u64(p, `${label}'s zip64 ${what}`);
        p += 8;
        return v;
      };
      // The fields appear in this fixed order, each only when its 32-bit slot holds the sentinel.
      if (wants.size) entry.size = take("size");
      if (wants.compressedSize) entry.compressedSize = take("compressed size");
      if (wants.localHeaderOffset) entry.localHeaderOffset = take("local header offset");
      return;
    }
    at += 4 + size;
  }
  r.fail(`${label} needs 64-bit sizes but has no zip64 extra field`);
}

function checkLocalHeader(r: Reader, entry: ZipEntry, directoryOffset: number): void {
  const at = entry.localHeaderOffset;
  const label = `entry ${quoted(entry.name)}`;
  if (at + LOCAL_SIZE > directoryOffset) {
    r.fail(`${label}'s local header at offset ${at} is not before the central directory`);
  }
  if (r.u32(at) !== SIG_LOCAL) {
    r.fail(`${label}'s local header at offset ${at} has a bad signature`);
  }
  const nameLength = r.u16(at + 26);
  const extraLength = r.u16(at + 28);
  const nameStart = at + LOCAL_SIZE;
  entry.dataOffset = nameStart + nameLength + extraLength;
  const central = new TextEncoder().encode(entry.name);
  const local = r.bytes.subarray(nameStart, Math.min(nameStart + nameLength, directoryOffset));
  if (local.length !== central.length || local.some((b, i) => b !== central[i])) {
    r.fail(`${label}'s local header names a different file`);
  }
  if (entry.dataOffset + entry.compressedSize > directoryOffset) {
    r.fail(
      `${label}'s data (offset ${entry.dataOffset}, ${entry.compressedSize} bytes) runs into the central directory at ${directoryOffset}`,
    );
  }
}

/** Options of readZipEntry. */
export interface ReadEntryOptions {
  /** Archive name for error messages. */
  source?: string;
  /** Check the CRC-32 of the data (default true), as torch's reader does. */
  verifyCrc?: boolean;
}

/**
 * The bytes of a stored `entry` of the archive `bytes`, as a view (no copy).
 * Throws for compressed or encrypted entries and for a CRC mismatch.
 * @example
 * for (const e of readZipDirectory(bytes, "model.pt")) readZipEntry(bytes, e, { source: "model.pt" });
 */
export function readZipEntry(
  bytes: Uint8Array,
  entry: ZipEntry,
  options: ReadEntryOptions = {},
): Uint8Array {
  const source = options.source ?? "<buffer>";
  const label = `Cannot read entry ${quoted(entry.name)} of zip archive ${source}`;
  if (entry.flags & 1) throw new Error(`${label}: it is encrypted`);
  if (entry.method !== 0) {
    throw new Error(
      `${label}: it is compressed (method ${entry.method}${
        entry.method === 8 ? ", deflate" : ""
      }); ` +
        `only stored (uncompressed) entries are supported, as torch.save writes them`,
    );
  }
  if (entry.compressedSize !== entry.size) {
    throw new Error(
      `${label}: a stored entry must have equal sizes, got ${entry.compressedSize} and ${entry.size}`,
    );
  }
  if (entry.dataOffset < 0 || entry.dataOffset + entry.size > bytes.length) {
    throw new Error(
      `${label}: its data (offset ${entry.dataOffset}, ${entry.size} bytes) lies outside the file`,
    );
  }
  const data = bytes.subarray(entry.dataOffset, entry.dataOffset + entry.size);
  if ((options.verifyCrc ?? true) && crc32(data) !== entry.crc32) {
    throw new Error(`${label}: CRC-32 mismatch (file corrupted)`);
  }
  return data;
}

/**
 * CRC-32 tables for slicing-by-8: table k advances a byte through k further zero bytes. Built on
 * first use: every rank loads this module (checkpoints are zip files), and building them cost a few
 * ms of each rank's start-up, in code the runtime has not optimised yet.
 */
let crcTables: Int32Array | null = null;

function crc32Tables(): Int32Array {
  if (crcTables) return crcTables;
  const t = new Int32Array(8 * 256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c;
  }
  for (let n = 0; n < 256; n++) {
    for (let k = 1; k < 8; k++) {
      t[k * 256 + n] = (t[(k - 1) * 256 + n]! >>> 8) ^ t[t[(k - 1) * 256 + n]! & 0xff]!;
    }
  }
  return crcTables = t;
}

/** The zip/PNG CRC-32 of `data` (slicing-by-8: eight bytes per step, several times faster than a byte loop). */
export function crc32(data: Uint8Array): number {
  const t = crc32Tables();
  let c = -1;
  let i = 0;
  for (const end8 = data.length - 7; i < end8; i += 8) {
    c ^= data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24);
    c = t[1792 + (c & 0xff)]! ^ t[1536 + ((c >>> 8) & 0xff)]! ^ t[1280 + ((c >>> 16) & 0xff)]! ^
      t[1024 + (c >>> 24)]! ^
      t[768 + data[i + 4]!]! ^ t[512 + data[i + 5]!]! ^ t[256 + data[i + 6]!]! ^ t[data[i + 7]!]!;
  }
  for (; i < data.length; i++) c = t[(c ^ data[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}
