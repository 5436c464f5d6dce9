/**
 * Token files read, not loaded: a TokenStream holds open file handles and
 * reads only the tokens a caller asks for, with a seek and a read per file
 * touched, so a rank's memory does not grow with the data. One file, or a
 * folder of shards (`name_000000.bin`, `name_000001.bin`, … in order), is one
 * stream of token ids.
 */
import { basename, join } from "node:path";
import {
  LAYOUT_PROBE_BYTES,
  NPY_MAX_HEADER_BYTES,
  npyHeaderEnd,
  parseTokenLayout,
  TokenFileError,
  type TokenFormat,
  type TokenLayout,
} from "./token_format.ts";

/** One opened token file. */
interface Part {
  path: string;
  file: Deno.FsFile;
  layout: TokenLayout;
  /** index of its first token in the stream */
  start: number;
}

/** A shard's name: `<prefix>_<digits>.bin` or `.npy` (llm.c writes six digits). */
const SHARD = /^(.+)_(\d+)\.(bin|npy)$/;

function readFully(file: Deno.FsFile, at: number, into: Uint8Array, path: string): void {
  file.seekSync(at, Deno.SeekMode.Start);
  let got = 0;
  while (got < into.length) {
    const n = file.readSync(into.subarray(got));
    if (n === null || n === 0) {
      throw new TokenFileError(
        `${path}: ends at byte ${at + got}, expected ${into.length - got} more`,
      );
    }
    got += n;
  }
}

function openPart(path: string, start: number, format: TokenFormat): Part {
  const file = Deno.openSync(path, { read: true });
  try {
    const size = file.statSync().size;
    let head = new Uint8Array(Math.min(size, LAYOUT_PROBE_BYTES));
    readFully(file, 0, head, path);
    if (path.endsWith(".npy") && head.length >= 12) {
      const end = npyHeaderEnd(path, head);
      if (end > head.length && end <= Math.min(size, NPY_MAX_HEADER_BYTES + 12)) {
        head = new Uint8Array(end);
        readFully(file, 0, head, path);
      }
    }
    return { path, file, layout: parseTokenLayout(path, head, size, format), start };
  } catch (e) {
    file.close();
    throw e;
  }
}

/** The shard files of a folder, in shard order; all must share one prefix. */
export function shardFiles(dir: string, prefixFilter?: (prefix: string) => boolean): string[] {
  const shards: { name: string; prefix: string; index: number }[] = [];
  for (const e of Deno.readDirSync(dir)) {
    const m = e.isFile ? SHARD.exec(e.name) : null;
    if (m && (!prefixFilter || prefixFilter(m[1]!))) {
      shards.push({ name: e.name, prefix: `${m[1]}.${m[3]}`, index: Number(m[2]) });
    }
  }
  if (shards.length === 0) {
    throw new TokenFileError(
      `${dir}: holds no token shards (files named like data_000000.bin or data_000000.npy)`,
    );
  }
  const prefixes = [...new Set(shards.map((s) => s.prefix))];
  if (prefixes.length > 1) {
    throw new TokenFileError(
      `${dir}: holds shards of ${prefixes.length} datasets (${prefixes.join(", ")}); ` +
        `open one by its split name or a folder of its own`,
    );
  }
  shards.sort((a, b) => a.index - b.index);
  for (let i = 1; i < shards.length; i++) {
    if (shards[i]!.index === shards[i - 1]!.index) {
      throw new TokenFileError(`${dir}: two shards have the number ${shards[i]!.index}`);
    }
  }
  return shards.map((s) => join(dir, s.name));
}

/** Whether a shard prefix names `split` as one of its `_`, `-` or `.` separated words. */
function namesSplit(prefix: string, split: string): boolean {
  return prefix.split(/[_.-]/).includes(split);
}

/** A sequence of token ids spread over one or more files, read on demand. */
export class TokenStream implements Disposable {
  readonly #parts: Part[];
  /** tokens in all files together */
  readonly length: number;

  private constructor(parts: Part[]) {
    this.#parts = parts;
    const last = parts.at(-1);
    this.length = last ? last.start + last.layout.count : 0;
  }

  /**
   * Opens a token file (nanoGPT's raw uint16 .bin, llm.c's .bin, or .npy) or
   * a folder of shards of one dataset. `format` (default "auto": from the
   * first bytes and the name) forces one format, so that an llm.c file with a
   * wrong magic is refused instead of read as raw uint16.
   *
   * @example
   * ```ts
   * using tokens = TokenStream.open("data/shakespeare/train.bin");
   * const first = tokens.read(0, 8); // Int32Array of 8 token ids
   * ```
   */
  static open(path: string, format: TokenFormat = "auto"): TokenStream {
    const paths = Deno.statSync(path).isDirectory ? shardFiles(path) : [path];
    return TokenStream.#openAll(paths, format);
  }

  /**
   * One split of a prepared dataset folder: `DIR/<split>.bin` (nanoGPT),
   * `DIR/<split>.npy`, else the shards in DIR whose name has `<split>` as a
   * word (llm.c's `fineweb_train_000001.bin`).
   */
  static openSplit(dir: string, split: string, format: TokenFormat = "auto"): TokenStream {
    for (const name of [`${split}.bin`, `${split}.npy`]) {
      try {
        if (Deno.statSync(join(dir, name)).isFile) return TokenStream.open(join(dir, name), format);
      } catch (e) {
        if (!(e instanceof Deno.errors.NotFound)) throw e;
      }
    }
    try {
      return TokenStream.#openAll(shardFiles(dir, (p) => namesSplit(p, split)), format);
    } catch (e) {
      if (!(e instanceof TokenFileError) || !/no token shards/.test(e.message)) throw e;
      throw new TokenFileError(
        `${dir}: has no ${split}.bin, no ${split}.npy and no shards named like *_${split}_000000.bin`,
      );
    }
  }

  static #openAll(paths: string[], format: TokenFormat): TokenStream {
    const parts: Part[] = [];
    try {
      let start = 0;
      for (const p of paths) {
        const part = openPart(p, start, format);
        parts.push(part);
        start += part.layout.count;
      }
    } catch (e) {
      for (const p of parts) p.file.close();
      throw e;
    }
    return new TokenStream(parts);
  }

  /** Each file's path, format and token count. */
  get files(): { path: string; format: TokenLayout["format"]; count: number }[] {
    return this.#parts.map((p) => ({
      path: p.path,
      format: p.layout.format,
      count: p.layout.count,
    }));
  }

  /**
   * Tokens [start, start + count) as int32 ids, into `out` at `outOffset`
   * (a new array when `out` is omitted). A range may span shards.
   */
  read(start: number, count: number, out?: Int32Array, outOffset = 0): Int32Array {
    if (
      !Number.isSafeInteger(start) || !Number.isSafeInteger(count) || start < 0 || count < 0 ||
      start + count > this.length
    ) {
      throw new RangeError(
        `TokenStream: cannot read ${count} tokens at ${start} of ${this.length}`,
      );
    }
    const dest = out ?? new Int32Array(count);
    if (outOffset + count > dest.length) {
      throw new RangeError(
        `TokenStream: ${count} tokens do not fit at ${outOffset} of ${dest.length}`,
      );
    }
    let at = start;
    let to = outOffset;
    let left = count;
    let i = this.#partAt(at);
    while (left > 0) {
      const part = this.#parts[i++]!;
      const local = at - part.start;
      const n = Math.min(left, part.layout.count - local);
      if (n > 0) this.#readPart(part, local, n, dest, to);
      at += n;
      to += n;
      left -= n;
    }
    return dest;
  }

  #partAt(token: number): number {
    let lo = 0;
    let hi = this.#parts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.#parts[mid]!.start <= token) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  #readPart(part: Part, local: number, n: number, dest: Int32Array, to: number): void {
    const { dtype, dataOffset } = part.layout;
    const bytes = new Uint8Array(n * dtype.size);
    readFully(part.file, dataOffset + local * dtype.size, bytes, part.path);
    const v = new DataView(bytes.buffer);
    const le = dtype.littleEndian;
    const get: (o: number) => number = dtype.kind === "u"
      ? [
        ,
        (o: number) => v.getUint8(o),
        (o: number) => v.getUint16(o, le),
        ,
        (o: number) => v.getUint32(o, le),
        ,
        ,
        ,
        (o: number) => Number(v.getBigUint64(o, le)),
      ][dtype.size]!
      : dtype.kind === "i"
      ? [
        ,
        (o: number) => v.getInt8(o),
        (o: number) => v.getInt16(o, le),
        ,
        (o: number) => v.getInt32(o, le),
        ,
        ,
        ,
        (o: number) => Number(v.getBigInt64(o, le)),
      ][dtype.size]!
      : [
        ,
        ,
        (o: number) => v.getFloat16(o, le),
        ,
        (o: number) => v.getFloat32(o, le),
        ,
        ,
        ,
        (o: number) => v.getFloat64(o, le),
      ][dtype.size]!;
    if (dtype.kind === "u" && dtype.size === 2 && le) {
      dest.set(new Uint16Array(bytes.buffer, 0, n), to); // the common case, no per-token call
      return;
    }
    for (let k = 0; k < n; k++) {
      const id = get(k * dtype.size);
      if (!Number.isInteger(id) || id < 0 || id > 0x7fffffff) {
        throw new TokenFileError(
          `${part.path}: token ${local + k} is ${id}, not a token id (an integer in 0 … 2^31-1)`,
        );
      }
      dest[to + k] = id;
    }
  }

  /** Closes every file. */
  close(): void {
    for (const p of this.#parts) {
      try {
        p.file.close();
      } catch (e) {
        if (!(e instanceof Deno.errors.BadResource)) throw e;
      }
    }
  }

  /** Closes the files (`using stream = TokenStream.open(…)`). */
  [Symbol.dispose](): void {
    this.close();
  }
}

/** The display name of a stream's files, for messages. */
export function describeStream(s: TokenStream): string {
  const f = s.files;
  return f.length === 1
    ? `${basename(f[0]!.path)} (${f[0]!.format}, ${s.length} tokens)`
    : `${f.length} shards (${s.length} tokens)`;
}
