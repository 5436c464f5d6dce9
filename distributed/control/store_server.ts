/**
 * The control store's server, hosted by node 0's launcher: an authenticated TCP key-value store
 * (set, get with optional wait, wait for keys, atomic add, delete, list by prefix). A connection
 * that does not authenticate first, or sends a malformed or oversized frame, is closed and logged
 * (peer text escaped and capped; a flood of refusals summarised once per interval).
 */
import {
  BodyReader,
  encodeFrame,
  type Field,
  type Frame,
  FrameDecoder,
  MAX_AUTH_FRAME_BYTES,
  MAX_FRAME_BYTES,
  MAX_IDENTITY_BYTES,
  MAX_WAIT_KEYS,
  NO_REPLY,
  Op,
  ProtocolError,
  SerialWriter,
  Status,
  WAIT_FOREVER,
} from "./store_protocol.ts";
import { peerText, REFUSAL_INTERVAL_MS, RefusalLog } from "./store_refusals.ts";
import { constantTimeEqual, sha256 } from "./sha256.ts";

/** How a StoreServer listens and what it tolerates. */
export interface StoreServerOptions {
  /** Address to bind: "127.0.0.1" for one node, "0.0.0.0" for several. */
  hostname: string;
  /** 0 picks a free port. */
  port: number;
  /** The run's secret; clients must present it in their first frame. */
  token: string;
  /** Receives one line per refused or closed connection (default: stderr). */
  log?: (line: string) => void;
  /** Called when an authenticated connection ends, with its identity. */
  onDisconnect?: (identity: string) => void;
  /** A connection must authenticate within this many ms (default 10 s). */
  authTimeoutMs?: number;
  /** Total bytes of keys and values the store holds at most (default 1 GiB). */
  maxStoredBytes?: number;
  /** Responses queued for a peer that does not read them (default 64 MiB). */
  maxQueuedBytes?: number;
  /** Pending waits per connection (default 4096). */
  maxWaitsPerConnection?: number;
  /** Refused connections after the first are summarised once per this many ms (default 10 s; 0: a line each). */
  refusalIntervalMs?: number;
}

interface Entry {
  value: Uint8Array;
  /** performance.now() of the last write */
  at: number;
}

interface Waiter {
  remaining: Set<string>;
  fire(timedOut: boolean): void;
  timer: ReturnType<typeof setTimeout> | undefined;
}

const utf8 = new TextEncoder();
const MAX_CONNECTIONS = 4096;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** Tokens are compared as digests: equal lengths, so the comparison's time says nothing of the token. */
function digest(token: Uint8Array): Uint8Array {
  return sha256(token);
}

/** A running store. Create with `StoreServer.listen`; stop with `close()`. */
export class StoreServer {
  readonly #listener: Deno.TcpListener;
  readonly #tokenDigest: Uint8Array;
  readonly #opts:
    & Required<Omit<StoreServerOptions, "onDisconnect">>
    & Pick<StoreServerOptions, "onDisconnect">;
  readonly #entries = new Map<string, Entry>();
  readonly #waiters = new Map<string, Set<Waiter>>();
  readonly #conns = new Set<Deno.Conn>();
  readonly #refusals: RefusalLog;
  #storedBytes = 0;
  #closed = false;
  readonly #acceptLoop: Promise<void>;

  private constructor(listener: Deno.TcpListener, opts: StoreServerOptions) {
    this.#listener = listener;
    this.#tokenDigest = digest(utf8.encode(opts.token));
    this.#opts = {
      log: (line) => console.error(line),
      authTimeoutMs: 10_000,
      maxStoredBytes: 1024 ** 3,
      maxQueuedBytes: 64 * 1024 ** 2,
      maxWaitsPerConnection: 4096,
      refusalIntervalMs: REFUSAL_INTERVAL_MS,
      ...opts,
    };
    this.#refusals = new RefusalLog(this.#opts.log, this.#opts.refusalIntervalMs);
    this.#acceptLoop = this.#accept();
  }

  /**
   * Starts a store on `hostname:port`.
   *
   * @example
   * ```ts
   * const server = StoreServer.listen({ hostname: "127.0.0.1", port: 0, token });
   * console.log(server.port);
   * ```
   */
  static listen(opts: StoreServerOptions): StoreServer {
    if (opts.token.length === 0) {
      throw new TypeError("Cannot start a store without a token: the token is empty");
    }
    const listener = Deno.listen({ hostname: opts.hostname, port: opts.port, transport: "tcp" });
    return new StoreServer(listener, opts);
  }

  /** The port the store listens on. */
  get port(): number {
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  /** Stops accepting, closes every connection and cancels every wait. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#listener.close();
    for (const conn of this.#conns) closeQuietly(conn);
    for (const set of this.#waiters.values()) {
      for (const w of set) clearTimeout(w.timer);
    }
    this.#waiters.clear();
    await this.#acceptLoop;
    this.#refusals.close();
  }

  async #accept(): Promise<void> {
    while (!this.#closed) {
      let conn: Deno.TcpConn;
      try {
        conn = await this.#listener.accept();
      } catch (e) {
        if (this.#closed || e instanceof Deno.errors.BadResource) return;
        this.#opts.log(`store: accept failed: ${(e as Error).message}`);
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
      if (this.#conns.size >= MAX_CONNECTIONS) {
        this.#refusals.refused(
          peerOf(conn),
          "too many connections",
          `${MAX_CONNECTIONS} connections already open`,
        );
        closeQuietly(conn);
        continue;
      }
      conn.setNoDelay(true);
      this.#conns.add(conn);
      this.#serve(conn).catch((e) =>
        this.#opts.log(`store: connection error: ${peerText((e as Error).message, 200)}`)
      )
        .finally(() => this.#conns.delete(conn));
    }
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    const peer = peerOf(conn);
    const session = new Session(conn, this.#opts.maxQueuedBytes);
    const decoder = new FrameDecoder(MAX_AUTH_FRAME_BYTES);
    let identity: string | null = null;
    const authTimer = setTimeout(() => {
      if (identity === null) {
        this.#refusals.refused(
          peer,
          "no authentication",
          `no authentication within ${this.#opts.authTimeoutMs} ms`,
        );
        session.close();
      }
    }, this.#opts.authTimeoutMs);
    const buf = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        let n: number | null;
        try {
          n = await conn.read(buf);
        } catch {
          n = null; // reset by peer, or closed by us
        }
        if (n === null || session.closed) break;
        decoder.push(buf.subarray(0, n));
        for (let frame = decoder.next(); frame !== null; frame = decoder.next()) {
          if (identity === null) {
            identity = this.#authenticate(frame, session, peer);
            if (identity === null) return;
            clearTimeout(authTimer);
            decoder.maxFrameBytes = MAX_FRAME_BYTES;
          } else {
            this.#handle(frame, session);
          }
          if (session.closed) return;
        }
      }
    } catch (e) {
      const reason = e instanceof ProtocolError
        ? `malformed frame: ${peerText(e.message, 200)}`
        : `internal error: ${peerText((e as Error).message, 200)}`;
      if (identity === null) {
        this.#refusals.refused(peer, "malformed frame before authentication", reason);
      } else {
        this.#opts.log(`store: closed connection from ${peer} (${peerText(identity)}): ${reason}`);
      }
    } finally {
      clearTimeout(authTimer);
      session.close();
      for (const w of session.waiters) this.#dropWaiter(w);
      if (identity !== null && !this.#closed) this.#opts.onDisconnect?.(identity);
    }
  }

  /** Returns the client's identity, or null after refusing it. */
  #authenticate(frame: Frame, session: Session, peer: string): string | null {
    const refuse = (reason: string, kind = reason) => {
      this.#refusals.refused(peer, kind, reason);
      session.send(
        encodeFrame(Status.ERROR, frame.id, [{ str: `store refused the connection: ${reason}` }]),
      );
      session.close();
      return null;
    };
    if (frame.code !== Op.AUTH) {
      return refuse(
        `first frame is op ${frame.code}, expected AUTH (${Op.AUTH})`,
        "not AUTH first",
      );
    }
    let token: Uint8Array, identity: string;
    try {
      const r = new BodyReader(frame.body);
      token = r.bytes("token", MAX_AUTH_FRAME_BYTES);
      identity = r.string("identity", MAX_IDENTITY_BYTES);
      r.end("AUTH");
    } catch (e) {
      return refuse(
        `malformed AUTH frame: ${peerText((e as Error).message, 200)}`,
        "malformed AUTH",
      );
    }
    if (!constantTimeEqual(digest(token), this.#tokenDigest)) {
      // The identity is the peer's own claim: escaped, and capped well below its protocol limit.
      return refuse(`wrong token (client says it is "${peerText(identity)}")`, "wrong token");
    }
    session.send(encodeFrame(Status.OK, frame.id));
    return identity;
  }

  #handle(frame: Frame, s: Session): void {
    const r = new BodyReader(frame.body);
    const id = frame.id;
    const reply = (status: number, fields: Field[] = []) => s.send(encodeFrame(status, id, fields));
    const error = (message: string) => reply(Status.ERROR, [{ str: message }]);
    switch (frame.code) {
      case Op.SET:
      case Op.SET | NO_REPLY: {
        const key = r.key();
        const value = r.bytes("value");
        r.end("SET");
        const failure = this.#put(key, value);
        if (frame.code === Op.SET) {
          if (failure) error(failure);
          else reply(Status.OK);
        }
        return;
      }
      case Op.GET: {
        const key = r.key();
        const timeoutMs = r.u32("timeout");
        r.end("GET");
        const now = this.#entries.get(key);
        if (now) return reply(Status.OK, [{ bytes: now.value }]);
        if (timeoutMs === 0) return reply(Status.NOT_FOUND);
        return this.#wait(s, [key], timeoutMs, (timedOut) => {
          const e = this.#entries.get(key);
          if (timedOut || !e) reply(Status.TIMEOUT, [{ u32: 1 }, { str: key }]);
          else reply(Status.OK, [{ bytes: e.value }]);
        }, error);
      }
      case Op.WAIT: {
        const n = r.u32("key count");
        if (n > MAX_WAIT_KEYS) {
          throw new ProtocolError(`WAIT names ${n} keys, the limit is ${MAX_WAIT_KEYS}`);
        }
        const keys: string[] = [];
        for (let i = 0; i < n; i++) keys.push(r.key());
        const timeoutMs = r.u32("timeout");
        r.end("WAIT");
        const missing = keys.filter((k) => !this.#entries.has(k));
        if (missing.length === 0) return reply(Status.OK);
        if (timeoutMs === 0) {
          return reply(Status.TIMEOUT, [
            { u32: missing.length },
            ...missing.map((k) => ({ str: k })),
          ]);
        }
        return this.#wait(s, missing, timeoutMs, (timedOut) => {
          if (!timedOut) return reply(Status.OK);
          const still = keys.filter((k) => !this.#entries.has(k));
          reply(Status.TIMEOUT, [{ u32: still.length }, ...still.map((k) => ({ str: k }))]);
        }, error);
      }
      case Op.ADD: {
        const key = r.key();
        const delta = r.i64("delta");
        r.end("ADD");
        const old = this.#entries.get(key);
        let base = 0n;
        if (old) {
          const text = new TextDecoder().decode(old.value);
          if (!/^-?\d{1,19}$/.test(text)) {
            return error(`Cannot add to key "${key}": its value is not an integer`);
          }
          base = BigInt(text);
        }
        const next = base + delta;
        if (next < INT64_MIN || next > INT64_MAX) {
          return error(`Cannot add ${delta} to key "${key}": the result overflows int64`);
        }
        const failure = this.#put(key, utf8.encode(next.toString()));
        return failure ? error(failure) : reply(Status.OK, [{ i64: next }]);
      }
      case Op.DELETE: {
        const key = r.key();
        r.end("DELETE");
        const old = this.#entries.get(key);
        if (old) {
          this.#storedBytes -= key.length + old.value.length;
          this.#entries.delete(key);
        }
        return reply(Status.OK, [{ u8: old ? 1 : 0 }]);
      }
      case Op.LIST: {
        const prefix = r.key("prefix");
        r.end("LIST");
        const now = performance.now();
        const fields: Field[] = [];
        let bytes = 0;
        for (const [key, e] of this.#entries) {
          if (!key.startsWith(prefix)) continue;
          bytes += 12 + key.length * 3 + e.value.length;
          if (bytes > MAX_FRAME_BYTES - 64) {
            return error(
              `Cannot list prefix "${prefix}": the answer exceeds ${MAX_FRAME_BYTES} bytes`,
            );
          }
          fields.push({ str: key }, { bytes: e.value }, {
            u32: Math.min(0xffff_ffff, Math.round(now - e.at)),
          });
        }
        return reply(Status.OK, [{ u32: fields.length / 3 }, ...fields]);
      }
      case Op.PING:
        r.end("PING");
        return reply(Status.OK);
      default:
        throw new ProtocolError(`unknown op ${frame.code}`);
    }
  }

  /** Stores key=value and wakes its waiters; returns an error text when full. */
  #put(key: string, value: Uint8Array): string | null {
    const old = this.#entries.get(key);
    const delta = value.length - (old ? old.value.length : -key.length);
    if (this.#storedBytes + delta > this.#opts.maxStoredBytes) {
      return `Cannot set key "${key}": the store is full (${this.#storedBytes} of ${this.#opts.maxStoredBytes} bytes used)`;
    }
    this.#storedBytes += delta;
    this.#entries.set(key, { value, at: performance.now() });
    const set = this.#waiters.get(key);
    if (set) {
      this.#waiters.delete(key);
      for (const w of set) {
        w.remaining.delete(key);
        if (w.remaining.size === 0) w.fire(false);
      }
    }
    return null;
  }

  #wait(
    s: Session,
    keys: string[],
    timeoutMs: number,
    done: (timedOut: boolean) => void,
    error: (message: string) => void,
  ): void {
    if (s.waiters.size >= this.#opts.maxWaitsPerConnection) {
      return error(
        `Cannot wait: this connection already has ${s.waiters.size} pending waits (limit ${this.#opts.maxWaitsPerConnection})`,
      );
    }
    const w: Waiter = {
      remaining: new Set(keys),
      timer: undefined,
      fire: (timedOut) => {
        this.#dropWaiter(w);
        s.waiters.delete(w);
        if (!s.closed) done(timedOut);
      },
    };
    if (timeoutMs < WAIT_FOREVER) w.timer = setTimeout(() => w.fire(true), timeoutMs);
    s.waiters.add(w);
    for (const k of w.remaining) {
      let set = this.#waiters.get(k);
      if (!set) this.#waiters.set(k, set = new Set());
      set.add(w);
    }
  }

  #dropWaiter(w: Waiter): void {
    clearTimeout(w.timer);
    for (const k of w.remaining) {
      const set = this.#waiters.get(k);
      set?.delete(w);
      if (set?.size === 0) this.#waiters.delete(k);
    }
  }
}

/** One connection's outgoing side: answers written in order, bounded. */
class Session {
  readonly waiters = new Set<Waiter>();
  /** No more answers are accepted; those already queued are still written. */
  closed = false;
  readonly #conn: Deno.Conn;
  readonly #writer: SerialWriter;
  readonly #maxQueued: number;

  constructor(conn: Deno.Conn, maxQueued: number) {
    this.#conn = conn;
    this.#writer = new SerialWriter(conn);
    this.#maxQueued = maxQueued;
  }

  send(frame: Uint8Array): void {
    if (this.closed) return;
    if (this.#writer.queuedBytes + frame.length > this.#maxQueued) {
      // The peer does not read its answers; drop it rather than buffer without bound.
      this.close({ now: true });
      return;
    }
    this.#writer.send(frame).catch(() => this.close({ now: true }));
  }

  /** Closes the connection, by default after the answers already queued. */
  close(opts: { now?: boolean } = {}): void {
    const wasClosed = this.closed;
    this.closed = true;
    if (opts.now) closeQuietly(this.#conn);
    else if (!wasClosed) this.#writer.flushed().then(() => closeQuietly(this.#conn));
  }
}

function peerOf(conn: Deno.Conn): string {
  const a = conn.remoteAddr as Deno.NetAddr;
  return `${a.hostname}:${a.port}`;
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch { /* already closed */ }
}
