/**
 * The control store's wire format, shared by server (store_server.ts) and client (store.ts):
 * length-prefixed binary frames, their encoder and a streaming decoder, and every bound the
 * server enforces on untrusted input (a violation is a ProtocolError closing that connection).
 */

// Frame: u32 LE length of what follows, then u8 op (request) or status (response), u32 LE
// request id, then the body. Strings and byte strings in a body are a u32 LE length followed
// by the bytes; keys are UTF-8.

/** Largest frame (after the 4-byte length) either side accepts. */
export const MAX_FRAME_BYTES = 16 * 1024 * 1024;
/** Largest frame accepted before a connection has authenticated. */
export const MAX_AUTH_FRAME_BYTES = 4096;
/** Longest key, in UTF-8 bytes. */
export const MAX_KEY_BYTES = 4096;
/** Longest client identity ("rank 3", "launcher node 1"), in UTF-8 bytes. */
export const MAX_IDENTITY_BYTES = 256;
/** Most keys one WAIT may name. */
export const MAX_WAIT_KEYS = 4096;
/** A timeout of this many ms (or more) means "wait forever". */
export const WAIT_FOREVER = 0x7fff_ffff;

/** Request opcodes. */
export const Op = {
  AUTH: 1,
  SET: 2,
  GET: 3,
  WAIT: 4,
  ADD: 5,
  DELETE: 6,
  LIST: 7,
  PING: 8,
} as const;
export type OpCode = (typeof Op)[keyof typeof Op];

/** Set on a SET opcode: the server sends no response (fire-and-forget). */
export const NO_REPLY = 0x80;

/** Response statuses. */
export const Status = {
  OK: 0,
  NOT_FOUND: 1,
  TIMEOUT: 2,
  ERROR: 3,
} as const;
export type StatusCode = (typeof Status)[keyof typeof Status];

/** A frame that breaks the protocol; the reader closes the connection. */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

/** One decoded frame: the op or status byte, the request id and the body. */
export interface Frame {
  code: number;
  id: number;
  body: Uint8Array;
}

const HEADER_BYTES = 4;
const PREFIX_BYTES = 5; // code + id

/**
 * Splits a byte stream into frames. `push` may be given any chunking of the
 * stream; a declared length above the current limit is rejected before any
 * of the frame is buffered, so a peer cannot make the reader allocate more
 * than the limit.
 */
export class FrameDecoder {
  #buf = new Uint8Array(64 * 1024);
  #start = 0;
  #end = 0;
  /** The current frame size limit (raised after authentication). */
  maxFrameBytes: number;

  constructor(maxFrameBytes = MAX_FRAME_BYTES) {
    this.maxFrameBytes = maxFrameBytes;
  }

  /** Bytes received but not yet returned as frames. */
  get buffered(): number {
    return this.#end - this.#start;
  }

  /** Appends received bytes. */
  push(chunk: Uint8Array): void {
    const need = this.#end - this.#start + chunk.length;
    if (this.#end + chunk.length > this.#buf.length) {
      if (need <= this.#buf.length) {
        this.#buf.copyWithin(0, this.#start, this.#end);
      } else {
        let size = this.#buf.length;
        while (size < need) size *= 2;
        const next = new Uint8Array(size);
        next.set(this.#buf.subarray(this.#start, this.#end));
        this.#buf = next;
      }
      this.#end -= this.#start;
      this.#start = 0;
    }
    this.#buf.set(chunk, this.#end);
    this.#end += chunk.length;
  }

  /** The next complete frame, or null when more bytes are needed. */
  next(): Frame | null {
    const avail = this.#end - this.#start;
    if (avail < HEADER_BYTES) return null;
    const view = new DataView(this.#buf.buffer, this.#buf.byteOffset + this.#start);
    const len = view.getUint32(0, true);
    if (len < PREFIX_BYTES) {
      throw new ProtocolError(`frame length ${len} is below the minimum ${PREFIX_BYTES}`);
    }
    if (len > this.maxFrameBytes) {
      throw new ProtocolError(
        `frame length ${len} exceeds the limit of ${this.maxFrameBytes} bytes`,
      );
    }
    if (avail < HEADER_BYTES + len) return null;
    const code = view.getUint8(4);
    const id = view.getUint32(5, true);
    const from = this.#start + HEADER_BYTES + PREFIX_BYTES;
    const to = this.#start + HEADER_BYTES + len;
    const body = this.#buf.slice(from, to);
    this.#start = to;
    if (this.#start === this.#end) this.#start = this.#end = 0;
    return { code, id, body };
  }
}

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

/** Reads the fields of a frame body, checking every length against what is left. */
export class BodyReader {
  #view: DataView;
  #bytes: Uint8Array;
  #pos = 0;

  constructor(body: Uint8Array) {
    this.#bytes = body;
    this.#view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  }

  #need(n: number, what: string): void {
    if (this.#pos + n > this.#bytes.length) {
      throw new ProtocolError(
        `truncated ${what}: needs ${n} bytes, ${this.#bytes.length - this.#pos} left in the frame`,
      );
    }
  }

  u8(what: string): number {
    this.#need(1, what);
    return this.#view.getUint8(this.#pos++);
  }

  u32(what: string): number {
    this.#need(4, what);
    const v = this.#view.getUint32(this.#pos, true);
    this.#pos += 4;
    return v;
  }

  i64(what: string): bigint {
    this.#need(8, what);
    const v = this.#view.getBigInt64(this.#pos, true);
    this.#pos += 8;
    return v;
  }

  bytes(what: string, max = MAX_FRAME_BYTES): Uint8Array {
    const n = this.u32(`${what} length`);
    if (n > max) throw new ProtocolError(`${what} length ${n} exceeds the limit of ${max} bytes`);
    this.#need(n, what);
    const out = this.#bytes.slice(this.#pos, this.#pos + n);
    this.#pos += n;
    return out;
  }

  string(what: string, max: number): string {
    const raw = this.bytes(what, max);
    try {
      return utf8Strict.decode(raw);
    } catch {
      throw new ProtocolError(`${what} is not valid UTF-8`);
    }
  }

  key(what = "key"): string {
    return this.string(what, MAX_KEY_BYTES);
  }

  /** Throws unless the whole body was consumed. */
  end(what: string): void {
    if (this.#pos !== this.#bytes.length) {
      throw new ProtocolError(
        `${this.#bytes.length - this.#pos} unexpected trailing bytes in ${what}`,
      );
    }
  }
}

/** A field of a frame body, in the order it is written. */
export type Field =
  | { u8: number }
  | { u32: number }
  | { i64: bigint }
  | { bytes: Uint8Array }
  | { str: string };

function fieldSize(f: Field): number {
  if ("u8" in f) return 1;
  if ("u32" in f) return 4;
  if ("i64" in f) return 8;
  if ("bytes" in f) return 4 + f.bytes.length;
  return 4 + utf8.encode(f.str).length;
}

/** Encodes one frame: header, code, id and the given body fields. */
export function encodeFrame(code: number, id: number, fields: readonly Field[] = []): Uint8Array {
  const encoded = fields.map((f): Field => "str" in f ? { bytes: utf8.encode(f.str) } : f);
  const len = PREFIX_BYTES + encoded.reduce((n, f) => n + fieldSize(f), 0);
  if (len > MAX_FRAME_BYTES) {
    throw new RangeError(
      `Cannot encode a store frame of ${len} bytes: the limit is ${MAX_FRAME_BYTES}`,
    );
  }
  const out = new Uint8Array(HEADER_BYTES + len);
  const view = new DataView(out.buffer);
  view.setUint32(0, len, true);
  view.setUint8(4, code);
  view.setUint32(5, id, true);
  let pos = HEADER_BYTES + PREFIX_BYTES;
  for (const f of encoded) {
    if ("u8" in f) view.setUint8(pos++, f.u8);
    else if ("u32" in f) {
      view.setUint32(pos, f.u32, true);
      pos += 4;
    } else if ("i64" in f) {
      view.setBigInt64(pos, f.i64, true);
      pos += 8;
    } else if ("bytes" in f) {
      view.setUint32(pos, f.bytes.length, true);
      out.set(f.bytes, pos + 4);
      pos += 4 + f.bytes.length;
    }
  }
  return out;
}

/**
 * Writes frames to a connection one after another (Deno's write may accept
 * only part of a buffer, and two interleaved partial writes would corrupt
 * both frames). When nothing is queued the write starts synchronously,
 * inside `send`, so a status record reaches the socket even if the caller
 * then blocks the event loop in a long synchronous call.
 */
export class SerialWriter {
  readonly #conn: Deno.Conn;
  readonly #queue: Uint8Array[] = [];
  #queuedBytes = 0;
  #failed: Error | null = null;
  #idle: Promise<void> = Promise.resolve();
  /** the `supersedes` key the last queued frame was sent with */
  #tailKey: string | undefined;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** Bytes accepted by send() and not yet written. */
  get queuedBytes(): number {
    return this.#queuedBytes;
  }

  /** Queues a frame; rejects when the connection fails. */
  send(frame: Uint8Array): Promise<void> {
    if (this.#failed) return Promise.reject(this.#failed);
    this.#push(frame, undefined);
    return this.#idle;
  }

  /**
   * Queues a fire-and-forget frame (a failure shows as the connection's close,
   * not here) without making a promise: a loop that posts a record at every
   * collective and never yields to the event loop must not pile up promise
   * reactions. A frame posted for `key` while the last queued frame is one of
   * that key not yet being written replaces it — the newer value makes the
   * older pointless — so such a loop holds one pending record, not one per
   * collective.
   */
  post(frame: Uint8Array, key: string): void {
    if (this.#failed) return;
    const last = this.#queue.length - 1;
    if (last >= 1 && this.#tailKey === key) {
      this.#queuedBytes += frame.length - this.#queue[last]!.length;
      this.#queue[last] = frame;
      return;
    }
    this.#push(frame, key);
  }

  #push(frame: Uint8Array, key: string | undefined): void {
    this.#tailKey = key;
    this.#queue.push(frame);
    this.#queuedBytes += frame.length;
    if (this.#queue.length === 1) {
      this.#idle = this.#drain();
      this.#idle.catch(() => {/* each send() caller, or the connection's close, reports it */});
    }
  }

  /** Resolves when everything queued so far is written (or failed). */
  flushed(): Promise<void> {
    return this.#idle.catch(() => {});
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0) {
      const frame = this.#queue[0]!;
      try {
        let off = 0;
        while (off < frame.length) off += await this.#conn.write(frame.subarray(off));
      } catch (e) {
        this.#failed = e as Error;
        this.#queue.length = 0;
        this.#queuedBytes = 0;
        throw e;
      }
      this.#queue.shift();
      this.#queuedBytes -= frame.length;
    }
  }
}

/** UTF-8 bytes of a string value, or the bytes themselves. */
export function toBytes(value: Uint8Array | string): Uint8Array {
  return typeof value === "string" ? utf8.encode(value) : value;
}
