/**
 * A rank's state page: a small file in the run directory that holds the rank's latest RankState
 * (JSON), replaced at every collective enter and exit. The store record goes out through the
 * connection's writer, which needs the event loop to turn; a loop without `await` that then blocks
 * in a native collective (or is stopped by a signal) would leave the launcher an older collective.
 * The page needs no turn: the launcher on the same node reads it and uses whichever of page and
 * store record is newer (launch/attempt.ts). The file is mapped into the rank's memory (shared), so
 * an update is a few stores, no system call, and the page outlives the rank.
 *
 * The page's bytes: a 24-byte ASCII header `DTSP1 <length> <checksum>\n` (8 hex digits each: the
 * record's length in bytes and its FNV-1a hash), then the record; zeros after it. A reader that
 * reads while the rank stores sees a header and a record that do not agree, and reads again.
 */
import { MappedFile } from "../../ffi/mapped_file.ts";

/** The page of `rank` in `runDir`. */
export function statePagePath(runDir: string, rank: number): string {
  return `${runDir}/rank-${rank}.state`;
}

const MAGIC = "DTSP1 ";
const HEADER_BYTES = 24;
/** the page's size: a record is ~300 bytes; a longer one grows the page */
const PAGE_BYTES = 4096;
/** reads of a page that a rank is storing into at that moment, before it counts as torn */
const READ_TRIES = 5;

/** FNV-1a (32 bits) of `bytes[from, to)`. */
function fnv1a(bytes: Uint8Array, from: number, to: number): number {
  let h = 0x811c9dc5;
  for (let i = from; i < to; i++) h = Math.imul(h ^ bytes[i]!, 0x01000193);
  return h >>> 0;
}

const HEX = new TextEncoder().encode("0123456789abcdef");

/** Writes `v` (32 bits) as 8 hex digits at `bytes[at]`. */
function putHex(bytes: Uint8Array, at: number, v: number): void {
  for (let i = 7; i >= 0; i--, v >>>= 4) bytes[at + i] = HEX[v & 15]!;
}

/** The header of a record of `length` bytes (already in place after it) into `bytes`. */
function writeHeader(bytes: Uint8Array, length: number): void {
  for (let i = 0; i < MAGIC.length; i++) bytes[i] = MAGIC.charCodeAt(i);
  putHex(bytes, 6, length);
  bytes[14] = 0x20;
  putHex(bytes, 15, fnv1a(bytes, HEADER_BYTES, HEADER_BYTES + length));
  bytes[23] = 0x0a;
}

/** A page of `size` bytes that holds no record yet. */
function emptyPage(size: number): Uint8Array<ArrayBuffer> {
  const bytes = new Uint8Array(size);
  writeHeader(bytes, 0);
  return bytes;
}

/** Writes a rank's state page; each write replaces the whole record. */
export class StatePage {
  readonly #path: string;
  readonly #encoder = new TextEncoder();
  /** the mapping, or null when the file could not be mapped (then `#file` writes `#bytes`) */
  #map: MappedFile | null;
  readonly #file: Deno.FsFile | null;
  #bytes: Uint8Array;
  #closed = false;

  private constructor(path: string, map: MappedFile | null, file: Deno.FsFile | null) {
    this.#path = path;
    this.#map = map;
    this.#file = file;
    this.#bytes = map ? map.bytes : emptyPage(PAGE_BYTES);
    this.#flush(HEADER_BYTES);
  }

  /** Without a mapping, writes the page's first `end` bytes to the file. */
  #flush(end: number): void {
    if (!this.#file) return;
    try {
      this.#file.seekSync(0, Deno.SeekMode.Start);
      const out = this.#bytes.subarray(0, end);
      let off = 0;
      while (off < out.length) off += this.#file.writeSync(out.subarray(off));
    } catch { /* the run directory is gone: the store record still goes out */ }
  }

  /**
   * Opens (creating or emptying) the page, mapped; written with a system call per update where
   * the file cannot be mapped; null when it cannot be written at all (no page then).
   */
  static open(path: string): StatePage | null {
    const map = MappedFile.create(path, emptyPage(PAGE_BYTES));
    if (!("error" in map)) return new StatePage(path, map, null);
    try {
      const file = Deno.openSync(path, { write: true, create: true, truncate: true, mode: 0o600 });
      return new StatePage(path, null, file);
    } catch {
      return null;
    }
  }

  /** Whether updates are stores into a mapping (no system call). */
  get mapped(): boolean {
    return this.#map !== null;
  }

  /**
   * Replaces the page's record with `json`; synchronous, ~1 µs with the record's serialising when
   * mapped (scripts/bench_state_page.ts).
   */
  write(json: string): void {
    if (this.#closed) return;
    // a record is ASCII JSON, at most 3 bytes per UTF-16 unit otherwise
    if (HEADER_BYTES + json.length * 3 > this.#bytes.length) this.#grow(json.length * 3);
    const { written } = this.#encoder.encodeInto(json, this.#bytes.subarray(HEADER_BYTES));
    // The record first, the header that vouches for it last: a reader in between sees a mismatch
    // (the magic in front is in place from the page's opening on).
    writeHeader(this.#bytes, written);
    this.#flush(HEADER_BYTES + written);
  }

  /**
   * A record longer than the page: a page (and mapping) of twice the size it needs, holding the
   * last record until the new one is in place.
   */
  #grow(recordBytes: number): void {
    const grown = new Uint8Array(2 * (HEADER_BYTES + recordBytes));
    grown.set(this.#bytes);
    if (this.#map) {
      const map = MappedFile.create(this.#path, grown);
      this.#map.close();
      if ("error" in map) {
        // no larger page: stop writing it (the store record still goes out)
        this.#map = null;
        this.#closed = true;
      } else {
        this.#map = map;
        this.#bytes = map.bytes;
        return;
      }
    }
    this.#bytes = grown;
  }

  /** Stops writing; the file keeps the last record. */
  close(): void {
    this.#closed = true;
    this.#map?.close();
    try {
      this.#file?.close();
    } catch { /* already closed */ }
  }
}

/** A page's record, or why the bytes are not one (`torn`: header and record disagree). */
export function parseStatePage(
  bytes: Uint8Array,
): { record: Uint8Array } | { error: string; torn?: true } {
  if (bytes.length < HEADER_BYTES) {
    return {
      error: `a state page is at least ${HEADER_BYTES} bytes; this one has ${bytes.length}`,
    };
  }
  const header = String.fromCharCode(...bytes.subarray(0, HEADER_BYTES));
  const m = /^DTSP1 ([0-9a-f]{8}) ([0-9a-f]{8})\n$/.exec(header);
  if (!m) {
    return bytes.subarray(0, HEADER_BYTES).every((b) => b === 0)
      ? { error: "the state page was never written" }
      : { error: `not a state page (it starts ${JSON.stringify(header.slice(0, 8))})` };
  }
  const length = parseInt(m[1]!, 16), sum = parseInt(m[2]!, 16);
  if (length === 0) return { error: "the state page holds no record yet" };
  const end = HEADER_BYTES + length;
  if (end > bytes.length) {
    return {
      error: `the state page's record has ${length} bytes but the page only ${
        bytes.length - HEADER_BYTES
      }`,
      torn: true,
    };
  }
  if (fnv1a(bytes, HEADER_BYTES, end) !== sum) {
    return { error: "the state page's record does not match its checksum", torn: true };
  }
  return { record: bytes.slice(HEADER_BYTES, end) };
}

/**
 * Reads a page as the store would hand the record back: its bytes and its age (the writer's clock
 * is this node's clock, so `Date.now() - sentAt` is the age), or why there is none. A torn read
 * (the rank was storing a record) is read again, up to READ_TRIES times.
 */
export function readStatePageResult(
  path: string,
  read: (path: string) => Uint8Array = Deno.readFileSync,
): { value: Uint8Array; ageMs: number } | { error: string } {
  let parsed: ReturnType<typeof parseStatePage> = { error: "not read" };
  for (let i = 0; i < READ_TRIES; i++) {
    let bytes: Uint8Array;
    try {
      bytes = read(path);
    } catch (e) {
      return { error: `cannot read ${path}: ${(e as Error).message}` };
    }
    parsed = parseStatePage(bytes);
    if (!("torn" in parsed)) break;
  }
  if ("error" in parsed) return { error: `${path}: ${parsed.error}` };
  try {
    const s = JSON.parse(new TextDecoder().decode(parsed.record));
    if (typeof s?.sentAt !== "number") return { error: `${path}: the record has no sentAt` };
    return { value: parsed.record, ageMs: Math.max(0, Date.now() - s.sentAt) };
  } catch {
    return { error: `${path}: the record is not JSON` };
  }
}

/** readStatePageResult, null when there is no valid record (absent, never written, torn). */
export function readStatePage(path: string): { value: Uint8Array; ageMs: number } | null {
  const r = readStatePageResult(path);
  return "error" in r ? null : r;
}
