/**
 * Test helper: writes stored zip archives like torch.save does (data aligned
 * to 64 bytes through an "FB" extra field), optionally in zip64 form or with
 * deliberate defects, plus legacy-format torch files.
 */
import { crc32 } from "../../io/zip.ts";
import { pickleOf } from "./_pickle_writer.ts";

/** One file to put in an archive. */
export interface ZipFileSpec {
  name: string;
  data: Uint8Array;
  /** Compression method to claim (default 0, stored); the data is written as given. */
  method?: number;
  /** CRC-32 to write instead of the real one. */
  crc?: number;
  /** General-purpose flags (bit 0 = encrypted). */
  flags?: number;
}

/** A growable little-endian byte buffer. */
class Sink {
  #buf = new Uint8Array(1024);
  length = 0;
  #reserve(n: number): void {
    if (this.length + n <= this.#buf.length) return;
    const bigger = new Uint8Array(Math.max(this.#buf.length * 2, this.length + n));
    bigger.set(this.#buf.subarray(0, this.length));
    this.#buf = bigger;
  }
  u8(...v: number[]): this {
    this.#reserve(v.length);
    for (const b of v) this.#buf[this.length++] = b & 0xff;
    return this;
  }
  u16(n: number): this {
    return this.u8(n, n >>> 8);
  }
  u32(n: number): this {
    return this.u8(n, n >>> 8, n >>> 16, n >>> 24);
  }
  u64(n: number): this {
    return this.u32(n % 2 ** 32).u32(Math.floor(n / 2 ** 32));
  }
  put(data: Uint8Array): this {
    this.#reserve(data.length);
    this.#buf.set(data, this.length);
    this.length += data.length;
    return this;
  }
  bytes(): Uint8Array<ArrayBuffer> {
    return this.#buf.slice(0, this.length);
  }
}

/**
 * Builds a zip archive of stored entries whose data start at multiples of
 * `align`. With `zip64`, sizes and offsets go through zip64 records only.
 */
export function buildZip(
  files: ZipFileSpec[],
  options: { zip64?: boolean; align?: number } = {},
): Uint8Array<ArrayBuffer> {
  const align = options.align ?? 64;
  const zip64 = options.zip64 ?? false;
  const out = new Sink();
  const offsets: number[] = [];
  for (const f of files) {
    const name = new TextEncoder().encode(f.name);
    offsets.push(out.length);
    const pad = (align - ((out.length + 30 + name.length + 4) % align)) % align;
    out.u32(0x04034b50).u16(zip64 ? 45 : 20).u16(f.flags ?? 0).u16(f.method ?? 0).u16(0).u16(0)
      .u32(f.crc ?? crc32(f.data)).u32(f.data.length).u32(f.data.length)
      .u16(name.length).u16(4 + pad).put(name).u16(0x4246).u16(pad).put(new Uint8Array(pad)).put(
        f.data,
      );
  }
  const directory = out.length;
  files.forEach((f, i) => {
    const name = new TextEncoder().encode(f.name);
    const big = zip64 ? 0xffffffff : -1;
    out.u32(0x02014b50).u16(zip64 ? 45 : 20).u16(zip64 ? 45 : 20).u16(f.flags ?? 0).u16(
      f.method ?? 0,
    ).u16(0).u16(0)
      .u32(f.crc ?? crc32(f.data))
      .u32(zip64 ? big : f.data.length).u32(zip64 ? big : f.data.length)
      .u16(name.length).u16(zip64 ? 28 : 0).u16(0).u16(0).u16(0).u32(0)
      .u32(zip64 ? big : offsets[i]!).put(name);
    if (zip64) out.u16(0x0001).u16(24).u64(f.data.length).u64(f.data.length).u64(offsets[i]!);
  });
  const directorySize = out.length - directory;
  if (zip64) {
    const record = out.length;
    out.u32(0x06064b50).u64(44).u16(45).u16(45).u32(0).u32(0)
      .u64(files.length).u64(files.length).u64(directorySize).u64(directory);
    out.u32(0x07064b50).u32(0).u64(record).u32(1);
    out.u32(0x06054b50).u16(0).u16(0).u16(0xffff).u16(0xffff).u32(0xffffffff).u32(0xffffffff).u16(
      0,
    );
  } else {
    out.u32(0x06054b50).u16(0).u16(0).u16(files.length).u16(files.length).u32(directorySize).u32(
      directory,
    ).u16(0);
  }
  return out.bytes();
}

/** A torch.save-style zip: `<archive>/data.pkl`, `<archive>/data/<key>` per storage, `<archive>/version`. */
export function buildTorchZip(
  archive: string,
  pickle: Uint8Array,
  storages: [string, Uint8Array][],
  options: { zip64?: boolean } = {},
): Uint8Array<ArrayBuffer> {
  return buildZip([
    { name: `${archive}/data.pkl`, data: pickle },
    ...storages.map(([key, data]) => ({ name: `${archive}/data/${key}`, data })),
    { name: `${archive}/version`, data: new TextEncoder().encode("3\n") },
  ], options);
}

/** Sys-info header of the legacy format. */
const SYS_INFO = new Map<string, unknown>([
  ["protocol_version", 1001],
  ["little_endian", true],
  ["type_sizes", new Map([["short", 2], ["int", 4], ["long", 4]])],
]);

/**
 * A legacy-format torch file: magic, protocol, sys info, the object pickle,
 * the key list, then per storage an int64 element count and its bytes.
 */
export function buildLegacy(
  objectPickle: Uint8Array,
  storages: { key: string; count: number; data: Uint8Array }[],
  options: { sysInfo?: Map<string, unknown>; magic?: bigint } = {},
): Uint8Array<ArrayBuffer> {
  const out = new Sink()
    .put(pickleOf(options.magic ?? 0x1950a86a20f9469cfc6cn))
    .put(pickleOf(1001))
    .put(pickleOf(options.sysInfo ?? SYS_INFO))
    .put(objectPickle)
    .put(pickleOf(storages.map((s) => s.key)));
  for (const s of storages) out.u64(s.count).put(s.data);
  return out.bytes();
}
