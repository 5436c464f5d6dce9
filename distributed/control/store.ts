/**
 * The control store's client: connects (retrying until a deadline, since
 * node 0's launcher may start after the others), authenticates with the
 * run's token, and sends pipelined requests whose answers may arrive in any
 * order. Used by ranks, launchers and the process groups' bootstrap.
 */
import {
  BodyReader,
  encodeFrame,
  type Field,
  FrameDecoder,
  NO_REPLY,
  Op,
  ProtocolError,
  SerialWriter,
  Status,
  toBytes,
  WAIT_FOREVER,
} from "./store_protocol.ts";
import { peerText } from "./store_refusals.ts";

/** Where the store is and how to prove membership of the run. */
export interface StoreConnectOptions {
  /** Host name or address of the store (node 0's MASTER_ADDR). */
  host: string;
  /** Its TCP port. */
  port: number;
  /** The run's secret (DTRAIN_STORE_TOKEN). */
  token: string;
  /** Keep retrying a refused or failed connection for this long (default 30 s). */
  timeoutMs?: number;
  /** Who is connecting, for the store's log ("rank 3"). */
  identity?: string;
  /** Called once, with the last error, when the store has not answered for a few seconds. */
  onRetry?: (lastError: string) => void;
}

/** One connection attempt is given up after this long (a host that drops packets never refuses). */
const CONNECT_ATTEMPT_MS = 5000;
/** After this long without success, onRetry is told (once). */
const RETRY_NOTICE_MS = 3000;

/** Deno.connect, given up after `ms` (a late connection is closed). */
function connectWithin(hostname: string, port: number, ms: number): Promise<Deno.TcpConn> {
  const attempt = Deno.connect({ hostname, port, transport: "tcp" });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      attempt.then((c) => c.close(), () => {});
      reject(new Deno.errors.TimedOut(`no answer from ${hostname}:${port} within ${ms} ms`));
    }, ms);
  });
  return Promise.race([attempt, late]).finally(() => clearTimeout(timer));
}

/** Errors that may pass if we wait: nobody listening yet, or no answer yet. */
function transient(e: unknown): boolean {
  return e instanceof Deno.errors.ConnectionRefused || e instanceof Deno.errors.TimedOut ||
    e instanceof Deno.errors.ConnectionReset || e instanceof Deno.errors.ConnectionAborted;
}

/** This machine's loopback addresses, where only a local fault can stop a connection. */
function isLoopback(host: string): boolean {
  return /^127\.\d+\.\d+\.\d+$/.test(host) || host === "::1" || host === "localhost";
}

function loopbackHint(e: unknown): string {
  return e instanceof Deno.errors.NetworkUnreachable || e instanceof Deno.errors.AddrNotAvailable
    ? " (the loopback interface seems to be down: `ip link set lo up` brings it up)"
    : "";
}

/** Why a store call failed. */
export type StoreErrorKind = "timeout" | "closed" | "refused" | "server" | "protocol" | "connect";

/** A failed store call; `kind` says how, `missingKeys` what a timed-out wait lacked. */
export class StoreError extends Error {
  readonly kind: StoreErrorKind;
  readonly missingKeys: readonly string[];
  constructor(kind: StoreErrorKind, message: string, missingKeys: readonly string[] = []) {
    super(message);
    this.name = "StoreError";
    this.kind = kind;
    this.missingKeys = missingKeys;
  }
}

/** One key of a `list()` answer. */
export interface StoreEntry {
  /** The key, without the store's namespace. */
  key: string;
  /** Its value. */
  value: Uint8Array;
  /** ms since the key was last written, by the store's clock */
  ageMs: number;
}

/** How a client's connection ended. */
export interface StoreCloseInfo {
  /** true when close() was called; false when the store went away */
  byClient: boolean;
  /** Why it ended, in words. */
  reason: string;
}

interface Pending {
  resolve(r: { status: number; body: Uint8Array }): void;
  reject(e: Error): void;
}

const utf8 = new TextDecoder();
const MAX_REQUEST_ID = 0xffff_ffff;

/**
 * An authenticated connection to the store. (The counterpart of a torch.distributed.TCPStore
 * client.)
 */
export class StoreClient {
  readonly #conn: Deno.Conn;
  readonly #writer: SerialWriter;
  readonly #pending = new Map<number, Pending>();
  readonly #where: string;
  #nextId = 1;
  #closeInfo: StoreCloseInfo | null = null;
  #unrefWhenIdle = false;
  #resolveClosed!: (info: StoreCloseInfo) => void;
  /** Resolves once the connection has ended, saying whether close() ended it. */
  readonly closed: Promise<StoreCloseInfo> = new Promise((r) => this.#resolveClosed = r);

  private constructor(conn: Deno.Conn, where: string) {
    this.#conn = conn;
    this.#writer = new SerialWriter(conn);
    this.#where = where;
    this.#readLoop();
  }

  /**
   * Connects and authenticates, retrying with back-off until `timeoutMs`.
   * A wrong token is not retried, and neither is an error that cannot pass
   * on its own: any failure other than "refused" or a timeout when the store
   * is on this machine's loopback (an interface that is down, say), so that
   * fails within seconds naming the address and the OS error. Each attempt
   * is cut off after CONNECT_ATTEMPT_MS.
   *
   * @example
   * ```ts
   * const store = await StoreClient.connect({ host: "127.0.0.1", port, token });
   * await store.set("greeting", "hello");
   * ```
   */
  static async connect(opts: StoreConnectOptions): Promise<StoreClient> {
    const where = `${opts.host}:${opts.port}`;
    const timeoutMs = opts.timeoutMs ?? 30_000;
    const start = Date.now();
    const deadline = start + timeoutMs;
    let delay = 50;
    let lastError = "";
    let told = false;
    for (;;) {
      const attemptMs = Math.max(1, Math.min(CONNECT_ATTEMPT_MS, deadline - Date.now()));
      let conn: Deno.TcpConn | null = null;
      try {
        conn = await connectWithin(opts.host, opts.port, attemptMs);
      } catch (e) {
        lastError = (e as Error).message;
        if (!transient(e) && isLoopback(opts.host)) {
          throw new StoreError(
            "connect",
            `Cannot connect to the dtrain store at ${where}: ${lastError}${loopbackHint(e)}`,
          );
        }
      }
      if (conn) {
        conn.setNoDelay(true);
        const client = new StoreClient(conn, where);
        let timer: ReturnType<typeof setTimeout> | undefined;
        try {
          const auth = client.#request(Op.AUTH, [
            { str: opts.token },
            { str: opts.identity ?? "client" },
          ]);
          const late = new Promise<never>((_, reject) => {
            timer = setTimeout(
              () => reject(new Error(`no answer to authentication within ${attemptMs} ms`)),
              attemptMs,
            );
          });
          await Promise.race([auth, late]);
          return client;
        } catch (e) {
          client.close();
          if (e instanceof StoreError && e.kind === "server") {
            throw new StoreError(
              "refused",
              `Cannot join the dtrain store at ${where}: ${e.message}`,
            );
          }
          lastError = (e as Error).message;
        } finally {
          clearTimeout(timer);
        }
      }
      if (Date.now() + delay > deadline) {
        throw new StoreError(
          "connect",
          `Cannot connect to the dtrain store at ${where} within ${timeoutMs} ms: ${lastError}`,
        );
      }
      if (!told && opts.onRetry && Date.now() - start >= RETRY_NOTICE_MS) {
        told = true;
        opts.onRetry(`${lastError}; retrying for up to ${Math.round(timeoutMs / 1000)} s`);
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 1000);
    }
  }

  /** Sets key to value (bytes, or a string stored as UTF-8). */
  async set(key: string, value: Uint8Array | string): Promise<void> {
    await this.#request(Op.SET, [{ str: key }, { bytes: toBytes(value) }]);
  }

  /**
   * Sets key to value without waiting for (or receiving) an answer. Frequent
   * status records use it; requests stay ordered, so a later awaited call
   * on this client also confirms the posted ones arrived.
   */
  post(key: string, value: Uint8Array | string): void {
    if (this.#closeInfo) return;
    const frame = encodeFrame(Op.SET | NO_REPLY, 0, [{ str: key }, { bytes: toBytes(value) }]);
    // A newer value of the key replaces one still waiting to be written (latest wins anyway).
    this.#writer.post(frame, key); // a failure shows as the close the read loop reports
  }

  /**
   * The value of key. Without `timeoutMs`, null when the key is absent; with
   * it, waits up to that long for the key to appear and then throws a
   * StoreError of kind "timeout".
   */
  async get(key: string, opts: { timeoutMs?: number } = {}): Promise<Uint8Array | null> {
    const wait = opts.timeoutMs === undefined ? 0 : clampTimeout(opts.timeoutMs, "get");
    // A timeout of 0 asks the store not to wait: null when absent, like no timeout.
    const r = await this.#request(Op.GET, [{ str: key }, { u32: wait }], [
      Status.NOT_FOUND,
      Status.TIMEOUT,
    ]);
    if (r.status === Status.NOT_FOUND) return null;
    if (r.status === Status.TIMEOUT) {
      throw new StoreError(
        "timeout",
        `Timed out after ${opts.timeoutMs} ms waiting for store key "${key}"`,
        [key],
      );
    }
    return new BodyReader(r.body).bytes("value");
  }

  /** Like get(), decoding the value as UTF-8. */
  async getText(key: string, opts: { timeoutMs?: number } = {}): Promise<string | null> {
    const v = await this.get(key, opts);
    return v === null ? null : utf8.decode(v);
  }

  /**
   * Resolves when every key exists; throws a StoreError of kind "timeout"
   * naming the missing keys after `timeoutMs` (default: wait forever).
   */
  async wait(keys: readonly string[], timeoutMs?: number): Promise<void> {
    const t = timeoutMs === undefined ? WAIT_FOREVER : clampTimeout(timeoutMs, "wait");
    const fields: Field[] = [{ u32: keys.length }, ...keys.map((k) => ({ str: k })), { u32: t }];
    const r = await this.#request(Op.WAIT, fields, [Status.TIMEOUT]);
    if (r.status === Status.TIMEOUT) {
      const br = new BodyReader(r.body);
      const n = br.u32("missing count");
      const missing = Array.from({ length: n }, () => br.key());
      const shown = missing.slice(0, 5).map((k) => `"${k}"`).join(", ") +
        (n > 5 ? `, … (${n} in all)` : "");
      throw new StoreError(
        "timeout",
        `Timed out after ${timeoutMs} ms waiting for store keys: missing ${shown}`,
        missing,
      );
    }
  }

  /** Atomically adds delta to the integer at key (absent = 0); returns the new value. */
  async add(key: string, delta: number): Promise<number> {
    if (!Number.isSafeInteger(delta)) {
      throw new RangeError(`Cannot add ${delta} to store key "${key}": not a safe integer`);
    }
    const r = await this.#request(Op.ADD, [{ str: key }, { i64: BigInt(delta) }]);
    const v = new BodyReader(r.body).i64("value");
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new RangeError(`Store key "${key}" holds ${v}, beyond the safe integer range`);
    }
    return Number(v);
  }

  /** Deletes key; returns whether it existed. */
  async delete(key: string): Promise<boolean> {
    const r = await this.#request(Op.DELETE, [{ str: key }]);
    return new BodyReader(r.body).u8("existed") === 1;
  }

  /** Every key that starts with prefix, with its value and age. */
  async list(prefix: string): Promise<StoreEntry[]> {
    const r = await this.#request(Op.LIST, [{ str: prefix }]);
    const br = new BodyReader(r.body);
    const n = br.u32("entry count");
    const out: StoreEntry[] = [];
    for (let i = 0; i < n; i++) {
      out.push({ key: br.key(), value: br.bytes("value"), ageMs: br.u32("age") });
    }
    return out;
  }

  /** Round trip to the store. */
  async ping(): Promise<void> {
    await this.#request(Op.PING, []);
  }

  /**
   * Lets the process exit while no request is pending (the connection keeps
   * the event loop alive only while an answer is awaited).
   */
  unrefWhenIdle(): void {
    this.#unrefWhenIdle = true;
    if (this.#pending.size === 0) this.#conn.unref();
  }

  /** Closes the connection; pending calls fail with kind "closed". */
  close(): void {
    this.#finish({ byClient: true, reason: "closed by the client" });
  }

  async #request(
    op: number,
    fields: Field[],
    allowed: readonly number[] = [],
  ): Promise<{ status: number; body: Uint8Array }> {
    if (this.#closeInfo) {
      throw new StoreError(
        "closed",
        `The dtrain store connection to ${this.#where} is closed: ${this.#closeInfo.reason}`,
      );
    }
    const id = this.#nextId;
    this.#nextId = id === MAX_REQUEST_ID ? 1 : id + 1;
    const frame = encodeFrame(op, id, fields);
    const answer = new Promise<{ status: number; body: Uint8Array }>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
    });
    if (this.#pending.size === 1) this.#conn.ref();
    this.#writer.send(frame).catch(() => {/* the read loop reports the close */});
    const r = await answer;
    if (r.status === Status.OK || allowed.includes(r.status)) return r;
    if (r.status === Status.ERROR) {
      let message: string;
      try {
        // Whatever answers on the store's port is not authenticated to us: escape its text.
        message = peerText(new BodyReader(r.body).string("message", 64 * 1024), 400);
      } catch {
        message = "(unreadable error text)";
      }
      throw new StoreError("server", message);
    }
    throw new StoreError("protocol", `Store answered status ${r.status} to op ${op}`);
  }

  async #readLoop(): Promise<void> {
    const decoder = new FrameDecoder();
    const buf = new Uint8Array(64 * 1024);
    let reason = "the store closed the connection";
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) break;
        decoder.push(buf.subarray(0, n));
        for (let f = decoder.next(); f !== null; f = decoder.next()) {
          const p = this.#pending.get(f.id);
          if (!p) throw new ProtocolError(`answer to unknown request ${f.id}`);
          this.#pending.delete(f.id);
          if (this.#pending.size === 0 && this.#unrefWhenIdle) this.#conn.unref();
          p.resolve({ status: f.code, body: f.body });
        }
      }
    } catch (e) {
      if (!this.#closeInfo) reason = `connection error: ${(e as Error).message}`;
    }
    this.#finish({ byClient: false, reason });
  }

  #finish(info: StoreCloseInfo): void {
    if (this.#closeInfo) return;
    this.#closeInfo = info;
    try {
      this.#conn.close();
    } catch { /* already closed */ }
    const err = new StoreError(
      "closed",
      `The dtrain store connection to ${this.#where} closed: ${info.reason}`,
    );
    for (const p of this.#pending.values()) p.reject(err);
    this.#pending.clear();
    this.#resolveClosed(info);
  }
}

function clampTimeout(ms: number, what: string): number {
  if (!Number.isFinite(ms) || ms < 0) {
    throw new RangeError(`Cannot ${what} with timeout ${ms} ms: expected a finite number >= 0`);
  }
  return Math.min(Math.round(ms), WAIT_FOREVER);
}
