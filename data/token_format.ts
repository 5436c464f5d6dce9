/**
 * Where the tokens of a token file sit and how each is stored, from its first
 * bytes and its size: nanoGPT's raw uint16 (`train.bin`), llm.c's 256 x int32
 * header (magic 20240520, version 1, token count) before uint16 tokens, and
 * NumPy `.npy` arrays of any numeric dtype in C order. Headers are parsed, not
 * trusted: every length is checked against the file size.
 */

/** llm.c's magic number, the header's first int32. */
export const LLMC_MAGIC = 20240520;
/** llm.c's token-file version this reader knows: uint16 tokens. */
export const LLMC_VERSION = 1;
/** Bytes of llm.c's header (256 int32). */
export const LLMC_HEADER_BYTES = 1024;
/** Bytes a reader needs at the start of a file to find its layout (more for a long .npy header). */
export const LAYOUT_PROBE_BYTES = LLMC_HEADER_BYTES;
/** Longest .npy header accepted (NumPy writes a few hundred bytes; this bounds a hostile one). */
export const NPY_MAX_HEADER_BYTES = 1 << 16;

/** How one token is stored. */
export interface TokenDType {
  /** "u" unsigned integer, "i" signed integer, "f" IEEE float */
  kind: "u" | "i" | "f";
  /** bytes per element: 1, 2, 4 or 8 (floats: 2, 4, 8) */
  size: 1 | 2 | 4 | 8;
  /** Byte order: true for little-endian. */
  littleEndian: boolean;
}

/** A token file format, or "auto": found from the file's first bytes and name. */
export type TokenFormat = "auto" | "nanogpt" | "llmc" | "npy";

/** The layout of one token file. */
export interface TokenLayout {
  /** The file's format. */
  format: "nanogpt" | "llmc" | "npy";
  /** byte offset of the first token */
  dataOffset: number;
  /** tokens in the file */
  count: number;
  /** How each token is stored. */
  dtype: TokenDType;
  /** the .npy array's shape (tokens are read in C order); [count] for the others */
  shape: number[];
}

/** A token file whose header or size is wrong; the message names the file and what was expected. */
export class TokenFileError extends Error {
  /** "TokenFileError". */
  override name = "TokenFileError";
}

const U16: TokenDType = { kind: "u", size: 2, littleEndian: true };
const NPY_MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY

function startsWith(head: Uint8Array, bytes: number[]): boolean {
  return bytes.every((b, i) => head[i] === b);
}

/** Whether the file starts like an llm.c token file (its first int32 is the magic). */
export function looksLikeLlmc(head: Uint8Array): boolean {
  if (head.length < 4) return false;
  return new DataView(head.buffer, head.byteOffset, 4).getInt32(0, true) === LLMC_MAGIC;
}

/** Whether the file starts with NumPy's magic string. */
export function looksLikeNpy(head: Uint8Array): boolean {
  return head.length >= NPY_MAGIC.length && startsWith(head, NPY_MAGIC);
}

/**
 * The layout of a token file from its first bytes (`head`, at least
 * LAYOUT_PROBE_BYTES or the whole file) and its size. A `.npy` name or magic
 * is NumPy's format; a first int32 equal to 20240520 is llm.c's (no GPT-2 id
 * is that large, so a raw uint16 file cannot start with it); anything else is
 * nanoGPT's raw uint16. A `format` other than "auto" is taken as given (a
 * wrong llm.c magic is then an error, not a raw file).
 */
export function parseTokenLayout(
  path: string,
  head: Uint8Array,
  fileSize: number,
  format: TokenFormat = "auto",
): TokenLayout {
  if (format === "npy") return parseNpyHeader(path, head, fileSize);
  if (format === "llmc") return parseLlmcHeader(path, head, fileSize);
  if (format === "auto" && (path.endsWith(".npy") || looksLikeNpy(head))) {
    return parseNpyHeader(path, head, fileSize);
  }
  if (format === "auto" && looksLikeLlmc(head)) return parseLlmcHeader(path, head, fileSize);
  if (fileSize % 2 !== 0) {
    throw new TokenFileError(
      `${path}: ${fileSize} bytes is not a whole number of uint16 tokens (nanoGPT's raw .bin ` +
        `format); an llm.c file starts with the int32 ${LLMC_MAGIC}, a .npy file with \\x93NUMPY`,
    );
  }
  return {
    format: "nanogpt",
    dataOffset: 0,
    count: fileSize / 2,
    dtype: U16,
    shape: [fileSize / 2],
  };
}

/** llm.c's header: int32 magic, version, token count, 253 reserved; then count uint16 tokens. */
export function parseLlmcHeader(path: string, head: Uint8Array, fileSize: number): TokenLayout {
  if (fileSize < LLMC_HEADER_BYTES || head.length < LLMC_HEADER_BYTES) {
    throw new TokenFileError(
      `${path}: ${fileSize} bytes is shorter than llm.c's ${LLMC_HEADER_BYTES}-byte header`,
    );
  }
  const v = new DataView(head.buffer, head.byteOffset, LLMC_HEADER_BYTES);
  const magic = v.getInt32(0, true);
  const version = v.getInt32(4, true);
  const count = v.getInt32(8, true);
  if (magic !== LLMC_MAGIC) {
    throw new TokenFileError(
      `${path}: llm.c header magic is ${magic}, expected ${LLMC_MAGIC}`,
    );
  }
  if (version !== LLMC_VERSION) {
    throw new TokenFileError(
      `${path}: llm.c header version ${version} is not supported: this reader knows version ` +
        `${LLMC_VERSION} (uint16 GPT-2 tokens)`,
    );
  }
  const expected = LLMC_HEADER_BYTES + 2 * count;
  if (count < 0 || expected !== fileSize) {
    throw new TokenFileError(
      `${path}: llm.c header says ${count} tokens (${expected} bytes with the header), ` +
        `but the file has ${fileSize} bytes`,
    );
  }
  return { format: "llmc", dataOffset: LLMC_HEADER_BYTES, count, dtype: U16, shape: [count] };
}

/** Bytes of a .npy file's preamble and header: magic, version, length field, header text. */
export function npyHeaderEnd(path: string, head: Uint8Array): number {
  if (!looksLikeNpy(head)) {
    throw new TokenFileError(`${path}: not a .npy file (it does not start with \\x93NUMPY)`);
  }
  if (head.length < 10) throw new TokenFileError(`${path}: .npy preamble is cut short`);
  const major = head[6]!;
  const v = new DataView(head.buffer, head.byteOffset, head.length);
  if (major === 1) return 10 + v.getUint16(8, true);
  if (major === 2 || major === 3) {
    if (head.length < 12) throw new TokenFileError(`${path}: .npy preamble is cut short`);
    const len = v.getUint32(8, true);
    if (len > NPY_MAX_HEADER_BYTES) {
      throw new TokenFileError(
        `${path}: .npy header of ${len} bytes is longer than the ${NPY_MAX_HEADER_BYTES} accepted`,
      );
    }
    return 12 + len;
  }
  throw new TokenFileError(
    `${path}: .npy format version ${major}.${head[7]} is not 1.x, 2.x or 3.x`,
  );
}

const DESCR = /^([<>|=])([uif])(\d+)$/;

function parseDescr(path: string, descr: string): TokenDType {
  const m = DESCR.exec(descr);
  const size = m ? Number(m[3]) : 0;
  const kind = m?.[2] as "u" | "i" | "f" | undefined;
  const sizes = kind === "f" ? [2, 4, 8] : [1, 2, 4, 8];
  if (!m || !kind || !sizes.includes(size)) {
    throw new TokenFileError(
      `${path}: .npy dtype ${JSON.stringify(descr)} is not a numeric dtype this reader knows ` +
        `(integers u1-u8, i1-i8; floats f2, f4, f8)`,
    );
  }
  if (size > 1 && m[1] === "|") {
    throw new TokenFileError(`${path}: .npy dtype ${JSON.stringify(descr)} has no byte order`);
  }
  return { kind, size: size as TokenDType["size"], littleEndian: m[1] !== ">" };
}

/**
 * The dict of a .npy header, e.g. `{'descr': '<u2', 'fortran_order': False,
 * 'shape': (1000,), }`: exactly the keys descr, fortran_order and shape.
 */
function parseNpyDict(
  path: string,
  text: string,
): { descr: string; fortran: boolean; shape: number[] } {
  const bad = (why: string) =>
    new TokenFileError(`${path}: .npy header ${JSON.stringify(text.slice(0, 120))} ${why}`);
  const body = /^\{(.*)\}\s*$/s.exec(text.trim());
  if (!body) throw bad("is not a Python dict literal");
  const entry = /\s*'([a-z_]+)'\s*:\s*('[^']*'|True|False|\([^()]*\))\s*(,|$)/y;
  const found = new Map<string, string>();
  const src = body[1]!;
  let at = 0;
  while (at < src.length && src.slice(at).trim() !== "") {
    entry.lastIndex = at;
    const m = entry.exec(src);
    if (!m) throw bad(`cannot be read at character ${at + 1}`);
    if (found.has(m[1]!)) throw bad(`repeats the key '${m[1]}'`);
    found.set(m[1]!, m[2]!);
    at = entry.lastIndex;
  }
  for (const key of found.keys()) {
    if (!["descr", "fortran_order", "shape"].includes(key)) {
      throw bad(`has an unknown key '${key}'`);
    }
  }
  const descr = found.get("descr");
  const fortran = found.get("fortran_order");
  const shape = found.get("shape");
  if (!descr?.startsWith("'")) throw bad("has no 'descr' string");
  if (fortran !== "True" && fortran !== "False") throw bad("has no 'fortran_order' True/False");
  if (!shape?.startsWith("(")) throw bad("has no 'shape' tuple");
  const dims = shape.slice(1, -1).split(",").map((s) => s.trim());
  if (dims.at(-1) === "") dims.pop();
  if (!dims.every((d) => /^\d{1,16}$/.test(d))) {
    throw bad("has a shape that is not a tuple of integers");
  }
  return { descr: descr.slice(1, -1), fortran: fortran === "True", shape: dims.map(Number) };
}

/** A .npy file's header: C order, a numeric dtype, and shape x itemsize equal to the data's bytes. */
export function parseNpyHeader(path: string, head: Uint8Array, fileSize: number): TokenLayout {
  const end = npyHeaderEnd(path, head);
  if (end > head.length || end > fileSize) {
    throw new TokenFileError(
      `${path}: .npy header ends at byte ${end}, past the ${Math.min(head.length, fileSize)} read`,
    );
  }
  const start = head[6] === 1 ? 10 : 12;
  const text = new TextDecoder(head[6] === 3 ? "utf-8" : "latin1").decode(
    head.subarray(start, end),
  );
  const { descr, fortran, shape } = parseNpyDict(path, text);
  const dtype = parseDescr(path, descr);
  if (fortran && shape.filter((d) => d > 1).length > 1) {
    throw new TokenFileError(
      `${path}: .npy array of shape (${shape}) is in Fortran order; save it in C order ` +
        `(np.ascontiguousarray) so its tokens read as one stream`,
    );
  }
  const count = shape.reduce((a, b) => a * b, 1);
  const bytes = count * dtype.size;
  if (!Number.isSafeInteger(bytes) || end + bytes !== fileSize) {
    throw new TokenFileError(
      `${path}: .npy header says shape (${shape.join(", ")}) of ${descr} = ${bytes} data bytes ` +
        `after a ${end}-byte header, but the file has ${fileSize} bytes`,
    );
  }
  return { format: "npy", dataOffset: end, count, dtype, shape };
}

/** The .npy file NumPy's np.save writes for a 1-D array (header padded to 64 bytes). */
export function npyHeader(descr: string, shape: readonly number[]): Uint8Array {
  const dims = shape.length === 1 ? `${shape[0]},` : shape.join(", ");
  let dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${dims}), }`;
  const pad = 64 - ((10 + dict.length + 1) % 64);
  dict += " ".repeat(pad % 64) + "\n";
  const out = new Uint8Array(10 + dict.length);
  out.set(NPY_MAGIC);
  out[6] = 1;
  out[7] = 0;
  new DataView(out.buffer).setUint16(8, dict.length, true);
  out.set(new TextEncoder().encode(dict), 10);
  return out;
}

/** llm.c's 1024-byte header for `count` uint16 tokens. */
export function llmcHeader(count: number, version = LLMC_VERSION): Uint8Array {
  const out = new Uint8Array(LLMC_HEADER_BYTES);
  const v = new DataView(out.buffer);
  v.setInt32(0, LLMC_MAGIC, true);
  v.setInt32(4, version, true);
  v.setInt32(8, count, true);
  return out;
}
