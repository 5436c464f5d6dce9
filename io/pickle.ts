/**
 * A restricted unpickler for the binary opcodes (protocols 2–5) torch.save
 * writes: GLOBAL asks the caller's allow-list, REDUCE calls only what it
 * returned, every read is bounds-checked and the work is linear in the input:
 * memo entries are shared references, never copies, and the elements put
 * into containers are counted against a cap.
 */

import { OPCODE_NAMES, REFUSED_OPCODES } from "./_pickle_opcodes.ts";

/** A callable that an allow-list hands out for GLOBAL; REDUCE can call nothing else. */
export class PyCallable {
  constructor(
    /** "module.name", for messages. */
    readonly qualifiedName: string,
    /** Runs the call with REDUCE's argument tuple. */
    readonly call: (args: readonly unknown[]) => unknown,
  ) {}
}

/** Hooks and limits of one unpickling run. */
export interface UnpickleOptions {
  /** File or entry name for error messages. */
  source?: string;
  /** Byte offset at which the pickle starts (default 0). */
  start?: number;
  /** Resolves GLOBAL and STACK_GLOBAL. Throw to refuse; the returned value is pushed as-is. */
  findGlobal: (module: string, name: string) => unknown;
  /** Resolves BINPERSID; without it a persistent id is an error. */
  persistentLoad?: (pid: unknown) => unknown;
  /** Applies BUILD's state to `target`; without it BUILD is an error. */
  build?: (target: unknown, state: unknown) => void;
  /** Most elements all lists, tuples and dicts may hold together (default MAX_ELEMENTS). */
  maxElements?: number;
}

/** Default cap on container elements: far above any state dict, far below memory exhaustion. */
export const MAX_ELEMENTS = 1 << 24;

/** The unpickled value and the offset just after its STOP opcode. */
export interface UnpickleResult {
  value: unknown;
  end: number;
}

const MAX_PROTOCOL = 5;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Unpickles one value from `bytes` starting at `options.start`. Python values
 * become: None → null, bool → boolean, int → number (bigint beyond 2^53),
 * float → number, str → string, bytes → Uint8Array, list → Array, tuple →
 * frozen Array, dict → Map (keys keep their Python types).
 * @example
 * const { value } = unpickle(bytes, { findGlobal: (m, n) => { throw new Error(`no ${m}.${n}`); } });
 */
export function unpickle(bytes: Uint8Array, options: UnpickleOptions): UnpickleResult {
  return new Unpickler(bytes, options).run();
}

/** Describes a value the way Python would name its type, for error messages. */
export function describePy(value: unknown): string {
  if (value === null) return "None";
  if (typeof value === "boolean") return "a bool";
  if (typeof value === "number" || typeof value === "bigint") {
    return Number.isInteger(value) || typeof value === "bigint" ? "an int" : "a float";
  }
  if (typeof value === "string") return "a str";
  if (value instanceof Uint8Array) return "bytes";
  if (Array.isArray(value)) return Object.isFrozen(value) ? "a tuple" : "a list";
  if (value instanceof Map) return "a dict";
  if (value instanceof PyCallable) return `the function ${value.qualifiedName}`;
  return `a ${(value as object).constructor?.name ?? "object"}`;
}

class Unpickler {
  pos: number;
  opStart = 0;
  opName = "";
  stack: unknown[] = [];
  metastack: unknown[][] = [];
  memo = new Map<number, unknown>();
  readonly view: DataView;
  readonly source: string;
  /** Container elements still allowed. */
  elementsLeft: number;

  constructor(readonly bytes: Uint8Array, readonly options: UnpickleOptions) {
    this.pos = options.start ?? 0;
    this.elementsLeft = options.maxElements ?? MAX_ELEMENTS;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.source = options.source ?? "<buffer>";
  }

  fail(problem: string): never {
    throw new Error(
      `Invalid pickle in ${this.source} at byte ${this.opStart} (${this.opName}): ${problem}`,
    );
  }

  /** Reserves `n` argument bytes and returns where they start. */
  take(n: number): number {
    if (n > this.bytes.length - this.pos) {
      this.fail(`truncated: needs ${n} more bytes, ${this.bytes.length - this.pos} left`);
    }
    const at = this.pos;
    this.pos += n;
    return at;
  }
  u8(): number {
    return this.bytes[this.take(1)]!;
  }
  u16(): number {
    return this.view.getUint16(this.take(2), true);
  }
  u32(): number {
    return this.view.getUint32(this.take(4), true);
  }
  i32(): number {
    return this.view.getInt32(this.take(4), true);
  }
  /** A u64 length, which must fit in what is left of the input. */
  length64(): number {
    const v = this.view.getBigUint64(this.take(8), true);
    if (v > BigInt(this.bytes.length - this.pos)) {
      this.fail(`length ${v} exceeds the ${this.bytes.length - this.pos} bytes left`);
    }
    return Number(v);
  }
  raw(n: number): Uint8Array {
    const at = this.take(n);
    return this.bytes.subarray(at, at + n);
  }
  text(n: number): string {
    const raw = this.raw(n);
    try {
      return utf8.decode(raw);
    } catch {
      return this.fail("string is not valid UTF-8");
    }
  }
  line(): string {
    const nl = this.bytes.indexOf(0x0a, this.pos);
    if (nl < 0) this.fail("truncated: unterminated line");
    return this.text(nl - this.pos + 1).slice(0, -1);
  }

  push(v: unknown): void {
    this.stack.push(v);
  }
  /** Counts `n` elements going into containers; fails past the cap. */
  count(n: number): void {
    this.elementsLeft -= n;
    if (this.elementsLeft < 0) {
      const cap = this.options.maxElements ?? MAX_ELEMENTS;
      this.fail(`more than ${cap} elements in lists, tuples and dicts together (the limit)`);
    }
  }
  pop(): unknown {
    if (this.stack.length === 0) this.fail("stack underflow");
    return this.stack.pop();
  }
  top(): unknown {
    if (this.stack.length === 0) this.fail("stack underflow");
    return this.stack[this.stack.length - 1];
  }
  popMark(): unknown[] {
    const items = this.stack;
    const below = this.metastack.pop();
    if (below === undefined) this.fail("no MARK to pop to");
    this.stack = below;
    return items;
  }

  list(): unknown[] {
    const v = this.top();
    if (!Array.isArray(v) || Object.isFrozen(v)) this.fail(`cannot append to ${describePy(v)}`);
    return v;
  }
  dict(): Map<unknown, unknown> {
    const v = this.top();
    if (!(v instanceof Map)) this.fail(`cannot set an item on ${describePy(v)}`);
    return v;
  }
  setItems(map: Map<unknown, unknown>, items: unknown[]): void {
    if (items.length % 2 !== 0) {
      this.fail(`odd number of items (${items.length}) for key/value pairs`);
    }
    this.count(items.length / 2);
    for (let i = 0; i < items.length; i += 2) map.set(this.key(items[i]), items[i + 1]);
  }
  key(k: unknown): unknown {
    const ok = k === null || ["boolean", "number", "bigint", "string"].includes(typeof k) ||
      (Array.isArray(k) && Object.isFrozen(k)) || k instanceof Uint8Array;
    if (!ok) this.fail(`${describePy(k)} cannot be a dict key (unhashable)`);
    return k;
  }
  tuple(items: unknown[]): readonly unknown[] {
    this.count(items.length);
    return Object.freeze(items);
  }
  global(module: string, name: string): void {
    this.push(this.options.findGlobal(module, name));
  }
  long(raw: Uint8Array): number | bigint {
    if (raw.length === 0) return 0;
    let hex = "";
    for (let i = raw.length - 1; i >= 0; i--) hex += raw[i]!.toString(16).padStart(2, "0");
    let v = BigInt(`0x${hex}`);
    if (raw[raw.length - 1]! & 0x80) v -= 1n << BigInt(8 * raw.length); // two's complement
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)
      ? Number(v)
      : v;
  }
  memoGet(key: number): void {
    if (!this.memo.has(key)) this.fail(`memo key ${key} was never stored`);
    this.push(this.memo.get(key));
  }

  run(): UnpickleResult {
    const b = this.bytes;
    while (this.pos < b.length) {
      this.opStart = this.pos;
      const op = b[this.pos++]!;
      this.opName = OPCODE_NAMES[op] ?? `0x${op.toString(16).padStart(2, "0")}`;
      if (op === 0x2e) return { value: this.pop(), end: this.pos }; // STOP
      this.step(op);
    }
    this.opStart = this.pos;
    this.opName = "end of input";
    return this.fail("truncated: no STOP opcode");
  }

  step(op: number): void {
    switch (op) {
      case 0x80: { // PROTO
        const v = this.u8();
        if (v > MAX_PROTOCOL) this.fail(`unsupported pickle protocol ${v}`);
        return;
      }
      case 0x95: // FRAME: opcodes are read from the flat input, so only check the frame fits.
        this.length64();
        return;
      case 0x28: // MARK
        this.metastack.push(this.stack);
        this.stack = [];
        return;
      case 0x30: // POP
        if (this.stack.length > 0) this.stack.pop();
        else this.popMark();
        return;
      case 0x31: // POP_MARK
        this.popMark();
        return;
      case 0x32: // DUP
        return this.push(this.top());
      case 0x4e: // NONE
        return this.push(null);
      case 0x88: // NEWTRUE
        return this.push(true);
      case 0x89: // NEWFALSE
        return this.push(false);
      case 0x4a: // BININT
        return this.push(this.i32());
      case 0x4b: // BININT1
        return this.push(this.u8());
      case 0x4d: // BININT2
        return this.push(this.u16());
      case 0x8a: // LONG1
        return this.push(this.long(this.raw(this.u8())));
      case 0x8b: // LONG4
        return this.push(this.long(this.raw(this.u32())));
      case 0x47: // BINFLOAT (big-endian)
        return this.push(this.view.getFloat64(this.take(8), false));
      case 0x58: // BINUNICODE
        return this.push(this.text(this.u32()));
      case 0x8c: // SHORT_BINUNICODE
        return this.push(this.text(this.u8()));
      case 0x8d: // BINUNICODE8
        return this.push(this.text(this.length64()));
      case 0x54: { // BINSTRING (Python 2 str)
        const n = this.i32();
        if (n < 0) this.fail(`negative string length ${n}`);
        return this.push(this.text(n));
      }
      case 0x55: // SHORT_BINSTRING
        return this.push(this.text(this.u8()));
      case 0x42: // BINBYTES
        return this.push(this.raw(this.u32()).slice());
      case 0x43: // SHORT_BINBYTES
        return this.push(this.raw(this.u8()).slice());
      case 0x8e: // BINBYTES8
      case 0x96: // BYTEARRAY8
        return this.push(this.raw(this.length64()).slice());
      case 0x29: // EMPTY_TUPLE
        return this.push(this.tuple([]));
      case 0x74: // TUPLE
        return this.push(this.tuple(this.popMark()));
      case 0x85: // TUPLE1
        return this.push(this.tuple([this.pop()]));
      case 0x86: { // TUPLE2
        const b = this.pop();
        return this.push(this.tuple([this.pop(), b]));
      }
      case 0x87: { // TUPLE3
        const c = this.pop();
        const b = this.pop();
        return this.push(this.tuple([this.pop(), b, c]));
      }
      case 0x5d: // EMPTY_LIST
        return this.push([]);
      case 0x6c: { // LIST
        const items = this.popMark();
        this.count(items.length);
        return this.push(items);
      }
      case 0x61: { // APPEND
        const v = this.pop();
        this.list().push(v);
        this.count(1);
        return;
      }
      case 0x65: { // APPENDS
        const items = this.popMark();
        const list = this.list();
        this.count(items.length);
        for (const v of items) list.push(v);
        return;
      }
      case 0x7d: // EMPTY_DICT
        return this.push(new Map());
      case 0x64: { // DICT
        const map = new Map();
        this.setItems(map, this.popMark());
        return this.push(map);
      }
      case 0x73: { // SETITEM
        const v = this.pop();
        const k = this.pop();
        this.dict().set(this.key(k), v);
        this.count(1);
        return;
      }
      case 0x75: { // SETITEMS
        const items = this.popMark();
        this.setItems(this.dict(), items);
        return;
      }
      case 0x63: { // GLOBAL
        const module = this.line();
        return this.global(module, this.line());
      }
      case 0x93: { // STACK_GLOBAL
        const name = this.pop();
        const module = this.pop();
        if (typeof module !== "string" || typeof name !== "string") {
          this.fail(
            `module and name must be strings, got ${describePy(module)} and ${describePy(name)}`,
          );
        }
        return this.global(module, name);
      }
      case 0x52: { // REDUCE
        const args = this.pop();
        const fn = this.pop();
        if (!(fn instanceof PyCallable)) {
          this.fail(`only allowed functions can be called, not ${describePy(fn)}`);
        }
        if (!Array.isArray(args) || !Object.isFrozen(args)) {
          this.fail(`arguments must be a tuple, got ${describePy(args)}`);
        }
        return this.push(fn.call(args));
      }
      case 0x62: { // BUILD
        const state = this.pop();
        const target = this.top();
        if (!this.options.build) {
          this.fail(`setting the state of ${describePy(target)} is not allowed`);
        }
        this.options.build(target, state);
        return;
      }
      case 0x51: { // BINPERSID
        const pid = this.pop();
        if (!this.options.persistentLoad) {
          this.fail("persistent ids are not allowed in this pickle");
        }
        return this.push(this.options.persistentLoad(pid));
      }
      case 0x71: // BINPUT
        this.memo.set(this.u8(), this.top());
        return;
      case 0x72: // LONG_BINPUT
        this.memo.set(this.u32(), this.top());
        return;
      case 0x94: // MEMOIZE
        this.memo.set(this.memo.size, this.top());
        return;
      case 0x68: // BINGET
        return this.memoGet(this.u8());
      case 0x6a: // LONG_BINGET
        return this.memoGet(this.u32());
    }
    const name = OPCODE_NAMES[op];
    if (name === undefined) this.fail(`unknown opcode 0x${op.toString(16).padStart(2, "0")}`);
    this.fail(
      `unsupported opcode: ${
        REFUSED_OPCODES[name] ?? "text-mode (protocol 0/1) opcodes are not supported"
      }`,
    );
  }
}
