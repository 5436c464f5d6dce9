/**
 * A streaming reader of the ustar archives scripts/build_single.ts packs
 * (regular files and folders only), so the `deno compile` build can unpack
 * its payload without tar on the target machine. Entry names that would
 * land outside the destination are refused.
 */

/** One archive member; `data` must be consumed before the next entry is read. */
export interface TarEntry {
  /** relative path, without a leading "./" */
  name: string;
  type: "file" | "dir";
  /** permission bits */
  mode: number;
  size: number;
  /** the content, in pieces (empty for folders) */
  data: AsyncIterable<Uint8Array>;
}

const BLOCK = 512;

/** Hands out exact byte counts from a stream of arbitrary pieces. */
class ByteReader {
  #it: AsyncIterator<Uint8Array>;
  #pending: Uint8Array = new Uint8Array(0);
  constructor(stream: AsyncIterable<Uint8Array>) {
    this.#it = stream[Symbol.asyncIterator]();
  }

  /** Up to `max` bytes (fewer only at the end), or null at the end. */
  async next(max: number): Promise<Uint8Array | null> {
    while (this.#pending.length === 0) {
      const r = await this.#it.next();
      if (r.done) return null;
      this.#pending = r.value;
    }
    const out = this.#pending.subarray(0, max);
    this.#pending = this.#pending.subarray(out.length);
    return out;
  }

  /** Exactly `n` bytes, or an error naming what was cut short. */
  async exactly(n: number, what: string): Promise<Uint8Array> {
    const out = new Uint8Array(n);
    for (let got = 0; got < n;) {
      const piece = await this.next(n - got);
      if (piece === null) throw new Error(`Tar archive ends inside ${what}`);
      out.set(piece, got);
      got += piece.length;
    }
    return out;
  }

  /** `n` bytes as pieces, without collecting them. */
  async *pieces(n: number, what: string): AsyncGenerator<Uint8Array> {
    for (let left = n; left > 0;) {
      const piece = await this.next(left);
      if (piece === null) throw new Error(`Tar archive ends inside ${what}`);
      left -= piece.length;
      yield piece;
    }
  }
}

const decoder = new TextDecoder();

function field(h: Uint8Array, start: number, len: number): string {
  const bytes = h.subarray(start, start + len);
  const end = bytes.indexOf(0);
  return decoder.decode(end < 0 ? bytes : bytes.subarray(0, end));
}

function octal(h: Uint8Array, start: number, len: number, what: string): number {
  const text = field(h, start, len).trim();
  if (!/^[0-7]+$/.test(text)) throw new Error(`Tar header has a bad ${what} field: "${text}"`);
  return parseInt(text, 8);
}

/** The member's path, checked to stay inside the destination. */
function memberName(h: Uint8Array): string {
  const prefix = field(h, 345, 155);
  const raw = (prefix ? `${prefix}/` : "") + field(h, 0, 100);
  const parts = raw.split("/").filter((p) => p !== "" && p !== ".");
  if (raw.startsWith("/") || parts.includes("..")) {
    throw new Error(`Tar archive member "${raw}" would be written outside the destination`);
  }
  return parts.join("/");
}

function checksumOk(h: Uint8Array): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i]!;
  return sum === octal(h, 148, 8, "checksum");
}

/**
 * The entries of a ustar archive, in order.
 *
 * @example
 * ```ts
 * const file = await Deno.open("payload.tar");
 * for await (const e of readTar(file.readable)) {
 *   console.log(e.type, e.name, e.size);
 *   for await (const _ of e.data); // skip the content
 * }
 * ```
 */
export async function* readTar(stream: AsyncIterable<Uint8Array>): AsyncGenerator<TarEntry> {
  const reader = new ByteReader(stream);
  for (;;) {
    const first = await reader.next(BLOCK);
    if (first === null) throw new Error("Tar archive ends without its end-of-archive blocks");
    const header = first.length === BLOCK
      ? first
      : new Uint8Array([...first, ...await reader.exactly(BLOCK - first.length, "a header")]);
    if (header.every((b) => b === 0)) return; // end of archive
    if (!checksumOk(header)) {
      throw new Error("Tar header checksum mismatch: the archive is damaged");
    }
    const name = memberName(header);
    const size = octal(header, 124, 12, "size");
    const flag = String.fromCharCode(header[156]!);
    const mode = octal(header, 100, 8, "mode") & 0o7777;
    if (flag !== "0" && flag !== "\0" && flag !== "5") {
      throw new Error(
        `Tar archive member "${name}" has type '${flag}': only files and folders are supported`,
      );
    }
    const type = flag === "5" ? "dir" : "file";
    let left = size; // what the caller has not taken yet
    const data = (async function* () {
      for await (const piece of reader.pieces(size, `"${name}"`)) {
        left -= piece.length;
        yield piece;
      }
    })();
    yield { name, type, mode, size, data };
    for await (const _ of reader.pieces(left, `"${name}"`)) { /* skip what the caller left */ }
    const pad = (BLOCK - (size % BLOCK)) % BLOCK;
    if (pad) await reader.exactly(pad, `the padding of "${name}"`);
  }
}
