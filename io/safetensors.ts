/**
 * Reads and writes the safetensors format over host memory. Parsing never
 * copies tensor data and rejects a malformed file with an Error naming it and
 * the problem, as strictly as the reference library (no gaps, overlaps, tails).
 */
import { describeJson, type JsonValue, parseStrictJson, previewJson } from "./_strict_json.ts";
import { quoted } from "./_untrusted_text.ts";
import {
  byteSizeOf,
  dtypeRank,
  isDim,
  isStDType,
  ST_DTYPES,
  type StDType,
  type StTensor,
} from "./st_tensor.ts";

export type { StDType, StTensor } from "./st_tensor.ts";
export {
  asBigInt64Array,
  asFloat32Array,
  asFloat64Array,
  asInt32Array,
  asUint16Array,
} from "./st_tensor.ts";

/** Largest header the reference library accepts (100 MB). */
export const MAX_HEADER_BYTES = 100_000_000;

/** What a safetensors file holds. */
export interface SafetensorsContents {
  /** Tensors in header order; each `data` is a view into the parsed buffer. */
  tensors: Map<string, StTensor>;
  /** The `__metadata__` string map ({} when absent). */
  metadata: Record<string, string>;
}

interface TensorEntry {
  name: string;
  dtype: StDType;
  shape: number[];
  begin: number;
  end: number;
}

type Fail = (problem: string) => never;

/**
 * Parses a safetensors file held in `bytes`. `source` (a path or label) is
 * named in every error.
 * @example
 * const { tensors, metadata } = parseSafetensors(Deno.readFileSync("model.safetensors"), "model.safetensors");
 */
export function parseSafetensors(bytes: Uint8Array, source = "<buffer>"): SafetensorsContents {
  const fail: Fail = (problem) => {
    throw new Error(`Invalid safetensors file ${source}: ${problem}`);
  };
  if (bytes.length < 8) {
    fail(`it is ${bytes.length} bytes long, shorter than the 8-byte header length field`);
  }
  const headerLength = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  if (headerLength > BigInt(MAX_HEADER_BYTES)) {
    fail(`header length ${headerLength} exceeds the ${MAX_HEADER_BYTES}-byte limit`);
  }
  const n = Number(headerLength);
  if (8 + n > bytes.length) {
    fail(`header length ${n} runs past the end of the ${bytes.length}-byte file`);
  }

  const header = parseHeader(bytes.subarray(8, 8 + n), fail);
  let metadata: Record<string, string> = {};
  const entries: TensorEntry[] = [];
  for (const [name, value] of header) {
    if (name === "__metadata__") metadata = readMetadata(value, fail);
    else entries.push(readTensorInfo(name, value, fail));
  }

  const dataStart = 8 + n;
  const dataLength = bytes.length - dataStart;
  checkLayout(entries, dataLength, fail);
  const tensors = new Map<string, StTensor>();
  for (const e of entries) {
    tensors.set(e.name, {
      dtype: e.dtype,
      shape: e.shape,
      data: bytes.subarray(dataStart + e.begin, dataStart + e.end),
    });
  }
  return { tensors, metadata };
}

function parseHeader(raw: Uint8Array, fail: Fail): Map<string, JsonValue> {
  let text = "";
  try {
    // ignoreBOM keeps a leading BOM in the text, so the JSON parse rejects it as the reference does.
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(raw);
  } catch {
    fail("header is not valid UTF-8");
  }
  let json: JsonValue = null;
  try {
    json = parseStrictJson(text);
  } catch (e) {
    fail(`header is not valid JSON: ${(e as Error).message}`);
  }
  if (!(json instanceof Map)) {
    return fail(`header is ${describeJson(json)}, expected a JSON object`);
  }
  return json;
}

function readMetadata(value: JsonValue, fail: Fail): Record<string, string> {
  if (value === null) return {}; // the reference library reads null as "no metadata"
  if (!(value instanceof Map)) {
    return fail(`__metadata__ is ${describeJson(value)}, expected an object of strings`);
  }
  const pairs: [string, string][] = [];
  for (const [key, v] of value) {
    if (typeof v !== "string") {
      fail(
        `__metadata__ value for key ${quoted(key)} is ${describeJson(v)}, expected a string`,
      );
    }
    pairs.push([key, v]);
  }
  return Object.fromEntries(pairs); // fromEntries defines own properties, even for "__proto__"
}

function readTensorInfo(name: string, value: JsonValue, fail: Fail): TensorEntry {
  const label = `tensor ${quoted(name)}`;
  if (!(value instanceof Map)) {
    return fail(`${label} is ${describeJson(value)}, expected {dtype, shape, data_offsets}`);
  }
  const field = (key: string): JsonValue => {
    const v = value.get(key);
    return v === undefined ? fail(`${label} has no "${key}"`) : v;
  };
  const dtype = field("dtype");
  if (!isStDType(dtype)) {
    return fail(
      `${label} has unknown dtype ${previewJson(dtype)}; expected one of ${ST_DTYPES.join(", ")}`,
    );
  }
  const shape = field("shape");
  if (!Array.isArray(shape) || !shape.every(isDim)) {
    return fail(`${label} shape ${previewJson(shape)} is not a list of non-negative integers`);
  }
  const offsets = field("data_offsets");
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isDim)) {
    return fail(
      `${label} data_offsets ${
        previewJson(offsets)
      } is not [begin, end] with non-negative integers`,
    );
  }
  const [begin, end] = offsets as [number, number];
  if (end < begin) fail(`${label} data_offsets [${begin}, ${end}] end before they begin`);
  return { name, dtype, shape: shape as number[], begin, end };
}

/** Tensors must tile the data section exactly: no gaps, no overlaps, nothing after the last. */
function checkLayout(entries: TensorEntry[], dataLength: number, fail: Fail): void {
  const byOffset = [...entries].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let expected = 0;
  for (const e of byOffset) {
    const label = `tensor ${quoted(e.name)} (data_offsets [${e.begin}, ${e.end}])`;
    if (e.end > dataLength) {
      fail(`${label} runs past the ${dataLength}-byte data section (truncated file?)`);
    }
    if (e.begin < expected) {
      fail(`${label} overlaps the previous tensor, which ends at ${expected}`);
    }
    if (e.begin > expected) {
      fail(
        `${label} leaves a gap of ${
          e.begin - expected
        } bytes after offset ${expected}; the format forbids holes`,
      );
    }
    const want = byteSizeOf(e.dtype, e.shape);
    if (BigInt(e.end - e.begin) !== want) {
      fail(
        `${label} holds ${e.end - e.begin} bytes but ${e.dtype} × [${
          e.shape.join(",")
        }] needs ${want}`,
      );
    }
    expected = e.end;
  }
  if (expected !== dataLength) {
    fail(
      `${
        dataLength - expected
      } bytes follow the last tensor (data ends at ${expected}); the format forbids trailing data`,
    );
  }
}

/** A serialized header (length field included) and the tensors in file order. */
interface PreparedFile {
  header: Uint8Array;
  ordered: StTensor[];
  totalBytes: number;
}

function prepare(
  tensors: Iterable<readonly [string, StTensor]>,
  metadata: Record<string, string> | undefined,
): PreparedFile {
  const list: [string, StTensor][] = [];
  const seen = new Set<string>();
  for (const [name, t] of tensors) {
    if (typeof name !== "string") {
      throw new TypeError(`Tensor names must be strings, got ${typeof name}`);
    }
    if (name === "__metadata__") {
      throw new TypeError(`"__metadata__" is reserved and cannot name a tensor`);
    }
    if (seen.has(name)) throw new TypeError(`Duplicate tensor name ${quoted(name)}`);
    seen.add(name);
    checkTensor(name, t);
    list.push([name, t]);
  }
  // The reference library's order: dtype rank descending (so element size descending), then name by code point.
  list.sort(([an, a], [bn, b]) =>
    dtypeRank(b.dtype) - dtypeRank(a.dtype) || compareCodePoints(an, bn)
  );

  const parts: string[] = [];
  const metaPairs = Object.entries(metadata ?? {});
  if (metaPairs.length > 0) {
    for (const [k, v] of metaPairs) {
      if (typeof v !== "string") {
        throw new TypeError(
          `Metadata value for ${JSON.stringify(k)} is a ${typeof v}, expected a string`,
        );
      }
    }
    parts.push(
      `"__metadata__":{${
        metaPairs.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",")
      }}`,
    );
  }
  let offset = 0;
  for (const [name, t] of list) {
    const end = offset + t.data.byteLength;
    parts.push(
      `${JSON.stringify(name)}:{"dtype":"${t.dtype}","shape":[${
        t.shape.join(",")
      }],"data_offsets":[${offset},${end}]}`,
    );
    offset = end;
  }
  const json = new TextEncoder().encode(`{${parts.join(",")}}`);
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded > MAX_HEADER_BYTES) {
    throw new RangeError(`Header of ${padded} bytes exceeds the ${MAX_HEADER_BYTES}-byte limit`);
  }
  const header = new Uint8Array(8 + padded).fill(0x20, 8 + json.length);
  new DataView(header.buffer).setBigUint64(0, BigInt(padded), true);
  header.set(json, 8);
  return { header, ordered: list.map(([, t]) => t), totalBytes: header.length + offset };
}

function checkTensor(name: string, t: StTensor): void {
  const label = `Tensor ${quoted(name)}`;
  if (!isStDType(t.dtype)) {
    throw new TypeError(
      `${label} has unknown dtype "${t.dtype}"; expected one of ${ST_DTYPES.join(", ")}`,
    );
  }
  if (!Array.isArray(t.shape) || !t.shape.every(isDim)) {
    throw new TypeError(`${label} shape [${t.shape}] is not a list of non-negative integers`);
  }
  if (!(t.data instanceof Uint8Array)) throw new TypeError(`${label} data must be a Uint8Array`);
  const want = byteSizeOf(t.dtype, t.shape);
  if (BigInt(t.data.byteLength) !== want) {
    throw new RangeError(
      `${label} has ${t.data.byteLength} bytes but ${t.dtype} × [${
        t.shape.join(",")
      }] needs ${want}`,
    );
  }
}

/** Orders strings by Unicode code point (UTF-8 byte order), as Rust and Python sort. */
function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n;) {
    const ca = a.codePointAt(i)!;
    const cb = b.codePointAt(i)!;
    if (ca !== cb) return ca - cb;
    i += ca > 0xffff ? 2 : 1;
  }
  return a.length - b.length;
}

/**
 * Serializes tensors (and optional string metadata, omitted when empty) to
 * safetensors bytes, laid out as the reference library does: header padded
 * with spaces to a multiple of 8, `__metadata__` first, tensors by dtype
 * (largest element first) then name. A parsed file serializes back to the
 * same bytes when its metadata keys keep their order.
 * @example
 * const bytes = serializeSafetensors(new Map([["w", tensorFromArray(new Float32Array([1, 2]), [2])]]));
 */
export function serializeSafetensors(
  tensors: Iterable<readonly [string, StTensor]>,
  metadata?: Record<string, string>,
): Uint8Array {
  const { header, ordered, totalBytes } = prepare(tensors, metadata);
  const out = new Uint8Array(totalBytes);
  out.set(header);
  let at = header.length;
  for (const t of ordered) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  return out;
}

/** Reads and parses the safetensors file at `path` (errors name the path). */
export function readSafetensorsFile(path: string): SafetensorsContents {
  return parseSafetensors(Deno.readFileSync(path), path);
}

/**
 * Writes tensors to `path` as safetensors, streaming each tensor's bytes
 * instead of building the whole file in memory. A plain write: atomic
 * replacement is the checkpoint writer's job.
 */
export async function writeSafetensorsFile(
  path: string,
  tensors: Iterable<readonly [string, StTensor]>,
  metadata?: Record<string, string>,
): Promise<void> {
  const { header, ordered } = prepare(tensors, metadata);
  using file = await Deno.open(path, { write: true, create: true, truncate: true });
  await writeAll(file, header);
  for (const t of ordered) await writeAll(file, t.data);
}

async function writeAll(file: Deno.FsFile, data: Uint8Array): Promise<void> {
  for (let done = 0; done < data.length;) done += await file.write(data.subarray(done));
}
