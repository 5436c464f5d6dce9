/**
 * Test helper: writes pickle bytes by hand, opcode by opcode or from JS
 * values, so tests can build torch-like pickles (strided tensors, forbidden
 * globals, malformed streams) without Python.
 */

/** A Python tuple for PickleWriter.value(). */
export class Tuple {
  constructor(readonly items: unknown[]) {}
}

/** A GLOBAL reference for PickleWriter.value(). */
export class Global {
  constructor(readonly module: string, readonly name: string) {}
}

/** Custom emission inside PickleWriter.value(). */
export type Emit = (w: PickleWriter) => void;

/** Appends pickle opcodes; `bytes()` returns the stream. */
export class PickleWriter {
  #out: number[] = [];

  raw(...bytes: number[]): this {
    for (const b of bytes) this.#out.push(b & 0xff);
    return this;
  }
  u16(n: number): this {
    return this.raw(n, n >>> 8);
  }
  u32(n: number): this {
    return this.raw(n, n >>> 8, n >>> 16, n >>> 24);
  }
  u64(n: bigint): this {
    for (let i = 0n; i < 8n; i++) this.raw(Number((n >> (8n * i)) & 0xffn));
    return this;
  }
  utf8(s: string): this {
    return this.raw(...new TextEncoder().encode(s));
  }

  proto(version = 2): this {
    return this.raw(0x80, version);
  }
  stop(): this {
    return this.raw(0x2e);
  }
  mark(): this {
    return this.raw(0x28);
  }
  global(module: string, name: string): this {
    return this.raw(0x63).utf8(`${module}\n${name}\n`);
  }
  str(s: string): this {
    const b = new TextEncoder().encode(s);
    return this.raw(0x58).u32(b.length).raw(...b);
  }
  int(n: number): this {
    if (Number.isInteger(n) && n >= 0 && n < 256) return this.raw(0x4b, n);
    if (Number.isInteger(n) && n >= 0 && n < 65536) return this.raw(0x4d).u16(n);
    if (Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31) return this.raw(0x4a).u32(n >>> 0);
    return this.long(BigInt(n));
  }
  /** LONG1 with the minimal two's-complement little-endian bytes. */
  long(v: bigint): this {
    const bytes: number[] = [];
    let x = v;
    while (v !== 0n) {
      const byte = Number(x & 0xffn);
      bytes.push(byte);
      x >>= 8n; // arithmetic shift: negative values end at -1
      const negative = (byte & 0x80) !== 0;
      if ((x === 0n && !negative) || (x === -1n && negative)) break;
    }
    return this.raw(0x8a, bytes.length, ...bytes);
  }
  float(x: number): this {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setFloat64(0, x, false);
    return this.raw(0x47, ...b);
  }
  binput(i: number): this {
    return i < 256 ? this.raw(0x71, i) : this.raw(0x72).u32(i);
  }
  binget(i: number): this {
    return i < 256 ? this.raw(0x68, i) : this.raw(0x6a).u32(i);
  }
  reduce(): this {
    return this.raw(0x52);
  }
  build(): this {
    return this.raw(0x62);
  }
  binpersid(): this {
    return this.raw(0x51);
  }

  /** Emits a JS value: null, booleans, numbers, bigints, strings, bytes, arrays (lists), Tuple, Map, Global, Emit. */
  value(v: unknown): this {
    if (v === null) return this.raw(0x4e);
    if (v === true) return this.raw(0x88);
    if (v === false) return this.raw(0x89);
    if (typeof v === "number") return Number.isInteger(v) ? this.int(v) : this.float(v);
    if (typeof v === "bigint") return this.long(v);
    if (typeof v === "string") return this.str(v);
    if (typeof v === "function") {
      (v as Emit)(this);
      return this;
    }
    if (v instanceof Uint8Array) return this.raw(0x42).u32(v.length).raw(...v);
    if (v instanceof Global) return this.global(v.module, v.name);
    if (v instanceof Tuple) {
      if (v.items.length === 0) return this.raw(0x29);
      this.mark();
      for (const x of v.items) this.value(x);
      return this.raw(0x74);
    }
    if (Array.isArray(v)) {
      this.raw(0x5d);
      if (v.length === 0) return this;
      this.mark();
      for (const x of v) this.value(x);
      return this.raw(0x65);
    }
    if (v instanceof Map) {
      this.raw(0x7d);
      if (v.size === 0) return this;
      this.mark();
      for (const [k, x] of v) this.value(k).value(x);
      return this.raw(0x75);
    }
    throw new TypeError(`PickleWriter cannot encode ${String(v)}`);
  }

  bytes(): Uint8Array<ArrayBuffer> {
    return new Uint8Array(this.#out);
  }
}

/** A whole pickle (PROTO 2 … STOP) of one value. */
export function pickleOf(v: unknown): Uint8Array<ArrayBuffer> {
  return new PickleWriter().proto(2).value(v).stop().bytes();
}

/** What torch.save writes for a tensor: _rebuild_tensor_v2 over a persistent storage id. */
export interface TensorSpec {
  storageType?: string;
  key: string;
  numel: number;
  offset?: number;
  size: number[];
  stride: number[];
  requiresGrad?: boolean;
  /** Legacy format ids carry a sixth field (view metadata, None). */
  legacy?: boolean;
}

/** An Emit for PickleWriter.value() that writes one tensor the way torch.save does. */
export function tensorOps(spec: TensorSpec): Emit {
  return (w) => {
    w.global("torch._utils", "_rebuild_tensor_v2").mark();
    const pid: unknown[] = [
      "storage",
      new Global("torch", spec.storageType ?? "FloatStorage"),
      spec.key,
      "cpu",
      spec.numel,
    ];
    if (spec.legacy) pid.push(null);
    w.value(new Tuple(pid)).binpersid();
    w.value(spec.offset ?? 0).value(new Tuple(spec.size)).value(new Tuple(spec.stride)).value(
      spec.requiresGrad ?? false,
    );
    w.global("collections", "OrderedDict").raw(0x29).reduce();
    w.raw(0x74).reduce();
  };
}

/** An Emit that writes `collections.OrderedDict()` filled with `entries`, like a state_dict. */
export function orderedDictOps(entries: [string, unknown][]): Emit {
  return (w) => {
    w.global("collections", "OrderedDict").raw(0x29).reduce();
    if (entries.length === 0) return;
    w.mark();
    for (const [k, v] of entries) w.value(k).value(v);
    w.raw(0x75);
  };
}
