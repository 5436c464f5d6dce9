/**
 * Reader for the IDX format of MNIST and Fashion-MNIST: a 4-byte magic
 * (0x00 0x00 type ndim), ndim big-endian u32 dims, then the elements. Files
 * may be gzip-compressed. Only unsigned-byte data (type 0x08) is accepted, and
 * every size is checked against the bytes present before anything is read.
 * readIdxCached keeps a decompressed copy, so a gzip file is inflated once.
 */
import { nodeCrypto } from "../os/node_builtin.ts";
import { basename, join, resolve } from "node:path";

/** One decoded IDX file: its dims and its elements in row-major order. */
export interface IdxArray {
  /** The sizes from the header, outermost first (e.g. [60000, 28, 28]). */
  dims: number[];
  /** The u8 elements; data.length is the product of dims. */
  data: Uint8Array;
}

/** Limits that keep a hostile or mislabelled file from exhausting memory. */
export interface IdxOptions {
  /** Largest element count (and decompressed size) accepted. Default IDX_MAX_BYTES. */
  maxBytes?: number;
  /** Told the decompressed bytes so far while a gzip file is decompressed. */
  onProgress?: (bytes: number) => void;
}

/** Default cap on an IDX file's size: 1 GiB, 20x the largest Fashion-MNIST file. */
export const IDX_MAX_BYTES = 1 << 30;

/** More dims than any real IDX file has; a larger count means a corrupt header. */
const MAX_NDIM = 16;

/** The element type codes of the IDX format, for error messages. */
const TYPE_NAMES: Record<number, string> = {
  0x08: "u8",
  0x09: "i8",
  0x0b: "i16",
  0x0c: "i32",
  0x0d: "f32",
  0x0e: "f64",
};

/** Feeding the decompressor in slices bounds how far the output can overshoot maxBytes. */
const GZIP_FEED_BYTES = 1 << 16;

const hex = (b: number): string => `0x${b.toString(16).padStart(2, "0")}`;

function fail(name: string, what: string): never {
  throw new Error(`Cannot read IDX file ${name}: ${what}`);
}

function maxBytesOf(opts: IdxOptions): number {
  const max = opts.maxBytes ?? IDX_MAX_BYTES;
  if (!Number.isSafeInteger(max) || max < 0) {
    throw new RangeError(`Invalid IDX maxBytes ${max}: expected a non-negative safe integer`);
  }
  return max;
}

/**
 * Parses the bytes of an uncompressed IDX file. `name` only labels errors.
 * The returned data is a view into `bytes` (no copy).
 *
 * @example
 * ```ts
 * const { dims, data } = parseIdx(new Uint8Array([0, 0, 8, 1, 0, 0, 0, 2, 7, 9]), "tiny");
 * // dims = [2], data = [7, 9]
 * ```
 */
export function parseIdx(bytes: Uint8Array, name: string, opts: IdxOptions = {}): IdxArray {
  const maxBytes = maxBytesOf(opts);
  if (bytes.length < 4) {
    fail(name, `truncated: ${bytes.length} bytes, the magic alone needs 4`);
  }
  const [zero0, zero1, type, ndim] = [bytes[0]!, bytes[1]!, bytes[2]!, bytes[3]!];
  if (zero0 !== 0 || zero1 !== 0) {
    fail(
      name,
      `bad magic ${hex(zero0)} ${hex(zero1)} ${hex(type)} ${hex(ndim)}: ` +
        `expected 0x00 0x00 <type> <ndim> (is it an IDX file? gzip data starts with 0x1f 0x8b)`,
    );
  }
  if (type !== 0x08) {
    const known = TYPE_NAMES[type];
    fail(
      name,
      known
        ? `element type ${hex(type)} (${known}) is not supported: expected 0x08 (u8)`
        : `unknown element type ${hex(type)}: expected 0x08 (u8)`,
    );
  }
  if (ndim < 1 || ndim > MAX_NDIM) {
    fail(name, `header declares ${ndim} dims: expected 1..${MAX_NDIM}`);
  }
  const headerBytes = 4 + 4 * ndim;
  if (bytes.length < headerBytes) {
    fail(name, `truncated: ${bytes.length} bytes, a header of ${ndim} dims needs ${headerBytes}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const dims: number[] = [];
  let count = 1;
  for (let d = 0; d < ndim; d++) {
    dims.push(view.getUint32(4 + 4 * d, false));
    count *= dims[d]!; // count <= maxBytes before this, so an overflow is caught right here
    if (count > maxBytes) {
      fail(name, `dims [${dims}...] describe more than ${maxBytes} elements (maxBytes)`);
    }
  }
  const present = bytes.length - headerBytes;
  if (present < count) {
    fail(name, `truncated: dims [${dims}] need ${count} data bytes, found ${present}`);
  }
  if (present > count) {
    fail(
      name,
      `dims [${dims}] need ${count} data bytes, found ${present} (${present - count} extra)`,
    );
  }
  return { dims, data: bytes.subarray(headerBytes) };
}

/** Whether `bytes` starts with the gzip magic 0x1f 0x8b. */
export function isGzip(bytes: Uint8Array): boolean {
  return bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b;
}

/**
 * Decompresses gzip data, refusing output larger than `maxBytes`.
 * DecompressionStream rather than node:zlib's gunzipSync: in Deno 2.9.6 a
 * gunzipSync that failed on corrupt data makes the *next* call raise an
 * uncaught error that ends the process.
 */
async function gunzip(
  bytes: Uint8Array,
  name: string,
  maxBytes: number,
  onProgress?: (bytes: number) => void,
): Promise<Uint8Array> {
  const stream = new DecompressionStream("gzip");
  const writer = stream.writable.getWriter();
  const feeding = (async () => {
    for (let at = 0; at < bytes.length; at += GZIP_FEED_BYTES) {
      await writer.write(bytes.slice(at, at + GZIP_FEED_BYTES)); // a copy: the stream wants an ArrayBuffer view
    }
    await writer.close();
  })();
  feeding.catch(() => {}); // its failure is the reader's failure, reported below
  const reader = stream.readable.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    let next: ReadableStreamReadResult<Uint8Array>;
    try {
      next = await reader.read();
    } catch (e) {
      fail(name, `corrupt gzip data (${e instanceof Error ? e.message : String(e)})`);
    }
    if (next.done) break;
    total += next.value.length;
    onProgress?.(total);
    if (total > maxBytes) {
      await reader.cancel();
      fail(name, `gzip data decompresses to more than ${maxBytes} bytes (maxBytes)`);
    }
    chunks.push(next.value);
  }
  const out = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}

/**
 * Decodes the bytes of an IDX file, gunzipping them first when they start with
 * the gzip magic (whatever the file is called). `name` only labels errors.
 *
 * @example
 * ```ts
 * const labels = await decodeIdx(Deno.readFileSync("t10k-labels-idx1-ubyte.gz"), "t10k-labels");
 * ```
 */
export async function decodeIdx(
  bytes: Uint8Array,
  name: string,
  opts: IdxOptions = {},
): Promise<IdxArray> {
  const maxBytes = maxBytesOf(opts);
  // The header adds at most 4 + 4 * MAX_NDIM bytes to maxBytes elements.
  const raw = isGzip(bytes)
    ? await gunzip(bytes, name, maxBytes + 4 + 4 * MAX_NDIM, opts.onProgress)
    : bytes;
  return parseIdx(raw, name, opts);
}

/**
 * Reads and decodes an IDX file (plain or gzip-compressed) from disk.
 *
 * @example
 * ```ts
 * const { dims, data } = await readIdx("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
 * // dims = [10000, 28, 28]
 * ```
 */
export async function readIdx(path: string, opts: IdxOptions = {}): Promise<IdxArray> {
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch (e) {
    throw new Error(
      `Cannot read IDX file ${path}: ${e instanceof Error ? e.message : String(e)}`,
      { cause: e },
    );
  }
  return decodeIdx(bytes, path, opts);
}

/** Where a decompressed copy of `path` is kept: named by its path, size and modification time. */
function cachedName(path: string, info: Deno.FileInfo): string {
  const key = `${resolve(path)}\u0000${info.size}\u0000${info.mtime?.getTime() ?? 0}`;
  const hash = nodeCrypto().createHash("sha256").update(key).digest("hex").slice(0, 16);
  return `${basename(path).replace(/\.gz$/, "")}-${hash}.idx`;
}

/**
 * readIdx() that decompresses a gzip file once: the decompressed IDX bytes
 * are kept in `cacheDir` (named by the file's path, size and modification
 * time, written atomically so concurrent ranks never read half a file), and
 * later calls read them back, checked by parseIdx like any IDX file. A cache
 * that cannot be written is skipped with a warning; plain files are read
 * directly.
 */
export async function readIdxCached(
  path: string,
  cacheDir: string,
  opts: IdxOptions & { warn?: (message: string) => void } = {},
): Promise<IdxArray> {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch (e) {
    throw new Error(`Cannot read IDX file ${path}: ${(e as Error).message}`, { cause: e });
  }
  if (!path.endsWith(".gz")) return readIdx(path, opts);
  const cached = join(cacheDir, cachedName(path, info));
  try {
    return parseIdx(Deno.readFileSync(cached), cached, opts);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) {
      (opts.warn ?? console.warn)(
        `dtrain: ignoring the cached copy ${cached}: ${(e as Error).message}`,
      );
    }
  }
  const parsed = await readIdx(path, opts);
  try {
    Deno.mkdirSync(cacheDir, { recursive: true });
    const tmp = `${cached}.tmp-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
    const header = 4 + 4 * parsed.dims.length;
    const whole = new Uint8Array(header + parsed.data.length);
    const view = new DataView(whole.buffer);
    whole.set([0, 0, 0x08, parsed.dims.length]);
    parsed.dims.forEach((d, i) => view.setUint32(4 + 4 * i, d, false));
    whole.set(parsed.data, header);
    try {
      Deno.writeFileSync(tmp, whole);
      Deno.renameSync(tmp, cached);
    } finally {
      try {
        Deno.removeSync(tmp);
      } catch { /* renamed */ }
    }
  } catch (e) {
    (opts.warn ?? console.warn)(
      `dtrain: cannot keep a decompressed copy of ${path} in ${cacheDir} (${
        (e as Error).message
      }); it is decompressed again next time (set DTRAIN_CACHE to a writable folder)`,
    );
  }
  return parsed;
}
