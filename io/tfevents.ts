/**
 * TensorBoard event files (`events.out.tfevents.*`): TFRecord framing (u64
 * length, masked CRC32C of the length, data, masked CRC32C of the data)
 * around hand-encoded Event and Summary protobufs, for scalars, text and
 * session starts. No dependencies, so it travels in the single file.
 */

// Field numbers of the published protos (tensorboard/compat/proto/event.proto,
// summary.proto, tensor.proto, tensor_shape.proto, types.proto; identical to
// tensorflow/core/util/event.proto and tensorflow/core/framework/*.proto).
const EVENT = { wallTime: 1, step: 2, fileVersion: 3, summary: 5, sessionLog: 7 } as const;
const SUMMARY = { value: 1 } as const;
const VALUE = { tag: 1, simpleValue: 2, tensor: 8, metadata: 9 } as const;
const METADATA = { pluginData: 1, dataClass: 4 } as const;
const PLUGIN_DATA = { pluginName: 1 } as const;
const TENSOR = { dtype: 1, tensorShape: 2, stringVal: 8 } as const;
const SESSION_LOG = { status: 1 } as const;
/** DataType.DT_STRING, DataClass.DATA_CLASS_TENSOR, SessionLog.START */
const DT_STRING = 7, DATA_CLASS_TENSOR = 2, SESSION_START = 1;
const WIRE = { varint: 0, fixed64: 1, bytes: 2, fixed32: 5 } as const;

/** The file_version of the first record; TensorBoard accepts every "brain.Event:" version. */
export const FILE_VERSION = "brain.Event:2";
/** Longest tag accepted, in UTF-8 bytes (TensorBoard shows tags as headings; longer is a mistake). */
export const MAX_TAG_BYTES = 1024;
/** Longest text summary accepted, in UTF-8 bytes (TensorBoard loads whole text records into the page). */
export const MAX_TEXT_BYTES = 4 << 20;

// ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78) --------------------------------

/** The byte table, built on first use: a run that writes no TensorBoard events (most) never pays for it. */
let crcTable: Uint32Array | null = null;

function crc32cTable(): Uint32Array {
  if (crcTable) return crcTable;
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  return crcTable = t;
}

/**
 * The CRC32C (Castagnoli) of `bytes`, as used by TFRecord, iSCSI and ext4.
 *
 * @example
 * ```ts
 * crc32c(new TextEncoder().encode("123456789")); // → 0xe3069283
 * ```
 */
export function crc32c(bytes: Uint8Array): number {
  let c = 0xffffffff;
  const table = crc32cTable();
  for (let i = 0; i < bytes.length; i++) c = table[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC: rotate right by 15 and add 0xa282ead8 (so CRCs of CRCs stay well mixed). */
export function maskCrc(crc: number): number {
  return ((((crc >>> 15) | (crc << 17)) >>> 0) + 0xa282ead8) >>> 0;
}

/** One TFRecord: u64 length, masked CRC32C of those 8 bytes, data, masked CRC32C of data (little-endian). */
export function frameRecord(data: Uint8Array): Uint8Array {
  const out = new Uint8Array(16 + data.length);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(data.length), true);
  view.setUint32(8, maskCrc(crc32c(out.subarray(0, 8))), true);
  out.set(data, 12);
  view.setUint32(12 + data.length, maskCrc(crc32c(data)), true);
  return out;
}

// ---- protobuf wire encoding --------------------------------------------------------------

/** An append-only protobuf message encoder (fields must be added in field-number order). */
class ProtoWriter {
  #buf = new Uint8Array(256);
  #view = new DataView(this.#buf.buffer);
  #len = 0;

  #reserve(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#len + n));
    next.set(this.#buf.subarray(0, this.#len));
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }

  /** A varint of a safe integer; a negative one is its 64-bit two's complement (ten bytes). */
  #varint(v: number): void {
    this.#reserve(10);
    if (v < 0) {
      let x = BigInt.asUintN(64, BigInt(v));
      while (x > 0x7fn) {
        this.#buf[this.#len++] = Number(x & 0x7fn) | 0x80;
        x >>= 7n;
      }
      this.#buf[this.#len++] = Number(x);
      return;
    }
    while (v > 0x7f) {
      this.#buf[this.#len++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
    this.#buf[this.#len++] = v;
  }

  #key(field: number, wire: number): void {
    this.#varint((field << 3) | wire);
  }

  /** int64 / enum field (negative numbers take ten bytes, as protobuf writes them). */
  int(field: number, v: number): this {
    this.#key(field, WIRE.varint);
    this.#varint(v);
    return this;
  }

  double(field: number, v: number): this {
    this.#key(field, WIRE.fixed64);
    this.#reserve(8);
    this.#view.setFloat64(this.#len, v, true);
    this.#len += 8;
    return this;
  }

  float(field: number, v: number): this {
    this.#key(field, WIRE.fixed32);
    this.#reserve(4);
    this.#view.setFloat32(this.#len, v, true);
    this.#len += 4;
    return this;
  }

  /** bytes, string (already UTF-8) or embedded message field. */
  bytes(field: number, b: Uint8Array): this {
    this.#key(field, WIRE.bytes);
    this.#varint(b.length);
    this.#reserve(b.length);
    this.#buf.set(b, this.#len);
    this.#len += b.length;
    return this;
  }

  /**
   * A Summary.Value holding a scalar, as embedded message `field`, written in
   * place: {tag (1): tag, simple_value (2): v}.
   */
  scalarValue(field: number, tag: Uint8Array, v: number): this {
    this.#key(field, WIRE.bytes);
    this.#varint(1 + varintSize(tag.length) + tag.length + 5);
    this.bytes(VALUE.tag, tag);
    return this.float(VALUE.simpleValue, v);
  }

  finish(): Uint8Array {
    return this.#buf.slice(0, this.#len);
  }
}

const utf8 = new TextEncoder();

/** Bytes of the varint of a non-negative safe integer. */
function varintSize(n: number): number {
  let size = 1;
  for (; n > 0x7f; size++) n = Math.floor(n / 128);
  return size;
}

// ---- events ------------------------------------------------------------------------------

/** One value of a summary: a scalar (stored as float32, like PyTorch's SummaryWriter) or a text. */
export type SummaryValue = { tag: string; scalar: number } | { tag: string; text: string };

/** What one event holds besides its time and step: exactly one of these. */
export type EventBody =
  | { fileVersion: string }
  | { summary: readonly SummaryValue[] }
  /** a session (re)start at `step`: TensorBoard drops earlier data at steps >= step */
  | { sessionStart: true };

/**
 * Checks a tag or text: a string of well-formed Unicode within `max` UTF-8
 * bytes. `what` names it in errors (a tag is quoted there, a text is not).
 */
function checkedUtf8(s: unknown, what: string, max: number): Uint8Array {
  if (typeof s !== "string") throw new TypeError(`${what} must be a string, got ${typeof s}`);
  if (!s.isWellFormed()) {
    throw new TypeError(`${what} holds a lone UTF-16 surrogate (not valid Unicode)`);
  }
  const b = utf8.encode(s);
  if (b.length > max) throw new RangeError(`${what} is ${b.length} UTF-8 bytes; at most ${max}`);
  return b;
}

function preview(s: string): string {
  return JSON.stringify(s.length > 40 ? `${s.slice(0, 40)}…` : s);
}

/** Checked tags by their text: a run logs the same few tags every step. */
const tagCache = new Map<string, Uint8Array>();
const TAG_CACHE_SIZE = 4096;

function tagBytes(tag: unknown): Uint8Array {
  const cached = typeof tag === "string" ? tagCache.get(tag) : undefined;
  if (cached !== undefined) return cached;
  const what = typeof tag === "string" ? `TensorBoard tag ${preview(tag)}` : "TensorBoard tag";
  const b = checkedUtf8(tag, what, MAX_TAG_BYTES);
  if (b.length === 0) throw new RangeError("TensorBoard tag must not be empty");
  if (tagCache.size >= TAG_CACHE_SIZE) tagCache.clear();
  tagCache.set(tag as string, b);
  return b;
}

/** Writes summary value `v` as field `field` of `w`. */
function writeValue(w: ProtoWriter, field: number, v: SummaryValue): void {
  const tag = tagBytes(v.tag);
  if ("scalar" in v) {
    if (typeof v.scalar !== "number") {
      throw new TypeError(
        `TensorBoard scalar ${preview(v.tag)} must be a number, got ${typeof v.scalar}`,
      );
    }
    w.scalarValue(field, tag, v.scalar);
    return;
  }
  // A rank-0 DT_STRING tensor with the text plugin's metadata, as TensorBoard's own
  // text summary writes it (the plugin's content, TextPluginData{version: 0}, is empty).
  const text = checkedUtf8(v.text, `text of TensorBoard tag ${preview(v.tag)}`, MAX_TEXT_BYTES);
  const tensor = new ProtoWriter()
    .int(TENSOR.dtype, DT_STRING)
    .bytes(TENSOR.tensorShape, new Uint8Array(0))
    .bytes(TENSOR.stringVal, text)
    .finish();
  const plugin = new ProtoWriter().bytes(PLUGIN_DATA.pluginName, utf8.encode("text")).finish();
  const metadata = new ProtoWriter()
    .bytes(METADATA.pluginData, plugin)
    .int(METADATA.dataClass, DATA_CLASS_TENSOR)
    .finish();
  const value = new ProtoWriter()
    .bytes(VALUE.tag, tag)
    .bytes(VALUE.tensor, tensor)
    .bytes(VALUE.metadata, metadata)
    .finish();
  w.bytes(field, value);
}

/**
 * The protobuf bytes of one Event (before framing). `step` is an int64 and
 * must be a safe integer; `wallTime` is seconds since the epoch.
 *
 * @example
 * ```ts
 * encodeEvent(Date.now() / 1000, 12, { summary: [{ tag: "train/loss", scalar: 0.31 }] });
 * ```
 */
export function encodeEvent(wallTime: number, step: number, body: EventBody): Uint8Array {
  if (typeof wallTime !== "number" || !Number.isFinite(wallTime)) {
    throw new TypeError(`event wall time must be a finite number of seconds, got ${wallTime}`);
  }
  if (!Number.isSafeInteger(step)) {
    throw new RangeError(`event step must be a safe integer, got ${step}`);
  }
  const w = new ProtoWriter().double(EVENT.wallTime, wallTime);
  // proto3 leaves a zero step out; every reader takes the absent field as 0.
  if (step !== 0) w.int(EVENT.step, step);
  if ("fileVersion" in body) {
    return w.bytes(EVENT.fileVersion, utf8.encode(body.fileVersion)).finish();
  }
  if ("sessionStart" in body) {
    const log = new ProtoWriter().int(SESSION_LOG.status, SESSION_START).finish();
    return w.bytes(EVENT.sessionLog, log).finish();
  }
  const summary = new ProtoWriter();
  for (const v of body.summary) writeValue(summary, SUMMARY.value, v);
  return w.bytes(EVENT.summary, summary.finish()).finish();
}

// ---- the file writer ---------------------------------------------------------------------

/** Options of EventFileWriter. */
export interface EventFileWriterOptions {
  /** seconds since the epoch, for event wall times and the file name (default: the clock) */
  now?: () => number;
}

const NAME = /^events\.out\.tfevents\.(\d+)\./;

/**
 * Writes one `events.out.tfevents.<time>.<host>.<pid>.<n>` file in `dir`
 * (created if needed), starting with the file-version event. Every event is
 * written to the file when it is added, so a running TensorBoard sees it at
 * its next poll; a crash leaves at worst a truncated last record, which
 * TensorBoard skips. The name sorts after every event file already in `dir`,
 * because TensorBoard reads a folder's files in name order.
 *
 * @example
 * ```ts
 * const tb = new EventFileWriter("runs/x/tb");
 * tb.add(1, { summary: [{ tag: "train/loss", scalar: 2.3 }, { tag: "train/lr", scalar: 1e-3 }] });
 * tb.close();
 * ```
 */
export class EventFileWriter {
  readonly path: string;
  readonly #file: Deno.FsFile;
  readonly #now: () => number;

  constructor(dir: string, opts: EventFileWriterOptions = {}) {
    this.#now = opts.now ?? (() => Date.now() / 1000);
    Deno.mkdirSync(dir, { recursive: true });
    let latest = 0;
    for (const e of Deno.readDirSync(dir)) {
      const m = NAME.exec(e.name);
      if (m) latest = Math.max(latest, Number(m[1]));
    }
    const now = this.#now();
    [this.#file, this.path] = createEventFile(dir, Math.max(Math.floor(now), latest + 1));
    this.add(0, { fileVersion: FILE_VERSION }, now);
  }

  /** Writes one event (one record, one write) at `step`. */
  add(step: number, body: EventBody, wallTime = this.#now()): void {
    const record = frameRecord(encodeEvent(wallTime, step, body));
    for (let done = 0; done < record.length;) done += this.#file.writeSync(record.subarray(done));
  }

  /** Syncs the file to disk and closes it. */
  close(): void {
    try {
      this.#file.syncSync();
    } finally {
      this.#file.close();
    }
  }
}

/** Creates the next free `events.out.tfevents.<time>.<host>.<pid>.<n>` in `dir`. */
function createEventFile(dir: string, time: number): [Deno.FsFile, string] {
  const prefix = `events.out.tfevents.${
    String(time).padStart(10, "0")
  }.${safeHostname()}.${Deno.pid}`;
  for (let n = 0;; n++) {
    const path = `${dir}/${prefix}.${n}`;
    try {
      return [Deno.openSync(path, { write: true, createNew: true }), path];
    } catch (e) {
      if (!(e instanceof Deno.errors.AlreadyExists)) throw e;
    }
  }
}

/** This machine's name as a file-name part ("localhost" when it cannot be read). */
function safeHostname(): string {
  let h = "localhost";
  try {
    h = Deno.hostname();
  } catch { /* no permission: keep the default */ }
  return h.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64) || "localhost";
}
