/**
 * How a tensor prints: PyTorch's `str(tensor)` for the values (4 decimals,
 * one width per tensor, scientific notation when magnitudes spread, lines of
 * 80 characters, and past 1000 elements only the first and last 3 entries of
 * each dimension), followed by what dtrain always shows: shape, dtype, device
 * and the autograd state. A summarised tensor copies only what it prints.
 */
import { backend } from "./backend.ts";
import { DTYPE_SIZE } from "./dtype.ts";
import type { Tensor } from "./tensor.ts";

/** PyTorch's print options (torch.set_printoptions defaults). */
const PRECISION = 4;
const THRESHOLD = 1000;
const EDGE_ITEMS = 3;
const LINE_WIDTH = 80;
const PREFIX = "tensor(";

/** A printed element: a JS number, or an exact integer for i64. */
type Value = number | bigint;

/**
 * The text of `t` as `console.log(t)` and `String(t)` show it, e.g.
 * `tensor([[ 0.1000, -2.0000]], shape=[1, 2], dtype=f32, device=cpu)`.
 */
export function formatTensor(t: Tensor): string {
  const suffix = describe(t);
  if (t.disposed) return `${PREFIX}<disposed>, ${suffix})`;
  if (t.numel === 0) return `${PREFIX}[], ${suffix})`;
  const summarize = t.numel > THRESHOLD;
  const data = readPrinted(t, summarize);
  const fmt = new Formatter(
    data.values,
    t.dtype === "f32" || t.dtype === "bf16" || t.dtype === "f16",
  );
  const body = t.shape.length === 0
    ? fmt.format(data.values[0]!).trim()
    : nested(data, 0, 0, PREFIX.length, summarize, fmt);
  return `${PREFIX}${body}, ${suffix})`;
}

function describe(t: Tensor): string {
  const parts = [`shape=[${t.shape.join(", ")}]`, `dtype=${t.dtype}`, `device=${t.device}`];
  if (t.node) parts.push(`gradFn=${t.node.name}`);
  else if (t.requiresGrad) parts.push("requiresGrad=true");
  return parts.join(", ");
}

/** Which indices of a dimension of size n are printed. */
function shownIndices(n: number, summarize: boolean): number[] {
  if (summarize && n > 2 * EDGE_ITEMS) {
    return [...range(0, EDGE_ITEMS), ...range(n - EDGE_ITEMS, n)];
  }
  return range(0, n);
}

function range(a: number, b: number): number[] {
  return Array.from({ length: Math.max(0, b - a) }, (_, i) => a + i);
}

/** The printed elements in row-major order of the printed sub-grid. */
interface Printed {
  values: Value[];
  /** per dimension, the indices kept */
  kept: number[][];
}

function readPrinted(t: Tensor, summarize: boolean): Printed {
  const kept = t.shape.map((n) => shownIndices(n, summarize));
  if (!summarize) return { values: decode(t.dtype, t.toBytes()), kept };
  // Copy each kept run of the last dimension: at most 6^(ndim-1) * 2 small copies.
  const strides = t.shape.map((_, d) => t.shape.slice(d + 1).reduce((a, b) => a * b, 1));
  const size = DTYPE_SIZE[t.dtype];
  const values: Value[] = [];
  const last = t.shape.length - 1;
  const runs = (kept[last] ?? [0]).reduce<number[][]>((acc, i) => {
    const run = acc.at(-1);
    if (run && run.at(-1)! + 1 === i) run.push(i);
    else acc.push([i]);
    return acc;
  }, []);
  const b = backend();
  const visit = (d: number, offset: number) => {
    if (d < last) {
      for (const i of kept[d]!) visit(d + 1, offset + i * strides[d]!);
      return;
    }
    for (const run of runs) {
      const host = new Uint8Array(run.length * size);
      const src = Deno.UnsafePointer.offset(t.ptr, (offset + run[0]!) * size) as Deno.PointerObject;
      b.call.dt_memcpy(Deno.UnsafePointer.of(host), src, BigInt(host.length), 2);
      b.call.dt_synchronize();
      values.push(...decode(t.dtype, host));
    }
  };
  visit(0, 0);
  return { values, kept };
}

/** Elements of raw little-endian bytes as numbers (i64 as bigint, so it prints exactly). */
function decode(dtype: Tensor["dtype"], bytes: Uint8Array): Value[] {
  const buf = bytes.slice().buffer;
  switch (dtype) {
    case "f32":
      return [...new Float32Array(buf)];
    case "i32":
      return [...new Int32Array(buf)];
    case "i64":
      return [...new BigInt64Array(buf)];
    case "u8":
      return [...new Uint8Array(buf)];
    case "bf16": {
      const bits = new Uint16Array(buf);
      const f = new Float32Array(bits.length);
      new Uint32Array(f.buffer).set(Uint32Array.from(bits, (h) => h << 16));
      return [...f];
    }
    case "f16":
      return [...new Uint16Array(buf)].map(halfToNumber);
  }
}

function halfToNumber(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** PyTorch's _Formatter: one width for every element, fixed, integer or scientific notation. */
class Formatter {
  readonly #floating: boolean;
  #intMode = true;
  #sciMode = false;
  #width = 1;

  constructor(values: Value[], floating: boolean) {
    this.#floating = floating;
    if (!floating) {
      for (const v of values) this.#width = Math.max(this.#width, String(v).length);
      return;
    }
    const finite = (values as number[]).filter((v) => Number.isFinite(v) && v !== 0);
    if (finite.length === 0) return;
    const abs = finite.map(Math.abs);
    const min = Math.min(...abs), max = Math.max(...abs);
    this.#intMode = finite.every((v) => v === Math.ceil(v));
    const spread = max / min > 1000 || max > 1e8;
    this.#sciMode = this.#intMode ? spread : spread || min < 1e-4;
    for (const v of finite) {
      const text = this.#sciMode
        ? pyExp(v, PRECISION)
        : this.#intMode
        ? `${pyFixed(v, 0)}.`
        : pyFixed(v, PRECISION);
      this.#width = Math.max(this.#width, text.length);
    }
  }

  get width(): number {
    return this.#width;
  }

  format(v: Value): string {
    let text: string;
    if (!this.#floating) text = String(v);
    else {
      const x = v as number;
      if (this.#sciMode) text = pyExp(x, PRECISION);
      else if (this.#intMode) text = Number.isFinite(x) ? `${pyFixed(x, 0)}.` : pyFixed(x, 0);
      else text = pyFixed(x, PRECISION);
    }
    return text.padStart(this.#width);
  }
}

/** The nested-bracket text of the sub-grid under dimension `d` starting at printed element `at`. */
function nested(
  p: Printed,
  d: number,
  at: number,
  indent: number,
  summarize: boolean,
  fmt: Formatter,
): string {
  const ndim = p.kept.length;
  const count = p.kept[d]!.length;
  const cut = summarize && p.kept[d]!.length === 2 * EDGE_ITEMS &&
    p.kept[d]![EDGE_ITEMS]! - p.kept[d]![EDGE_ITEMS - 1]! > 1;
  const inner = p.kept.slice(d + 1).reduce((a, k) => a * k.length, 1);
  if (d === ndim - 1) {
    const items = p.values.slice(at, at + count).map((v) => fmt.format(v));
    if (cut) items.splice(EDGE_ITEMS, 0, " ...");
    const perLine = Math.max(1, Math.floor((LINE_WIDTH - indent) / (fmt.width + 2)));
    const lines: string[] = [];
    for (let i = 0; i < items.length; i += perLine) {
      lines.push(items.slice(i, i + perLine).join(", "));
    }
    return `[${lines.join(`,\n${" ".repeat(indent + 1)}`)}]`;
  }
  const slices = range(0, count).map((i) =>
    nested(p, d + 1, at + i * inner, indent + 1, summarize, fmt)
  );
  if (cut) slices.splice(EDGE_ITEMS, 0, "...");
  return `[${slices.join(`,${"\n".repeat(ndim - d - 1)}${" ".repeat(indent + 1)}`)}]`;
}

// ---- Python's float formatting ('{:.Nf}' and '{:.Ne}'): exact, ties to even ----

/** Mantissa and exponent of a finite double: |x| = m * 2^e exactly. */
function decompose(x: number): { m: bigint; e: number } {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, Math.abs(x));
  const bits = view.getBigUint64(0);
  const rawExp = Number((bits >> 52n) & 0x7ffn);
  const frac = bits & ((1n << 52n) - 1n);
  return rawExp === 0 ? { m: frac, e: -1074 } : { m: frac | (1n << 52n), e: rawExp - 1075 };
}

/** num/den rounded to an integer, ties to even (num, den > 0). */
function roundHalfEven(num: bigint, den: bigint): bigint {
  const q = num / den, r2 = 2n * (num % den);
  if (r2 > den || (r2 === den && q % 2n === 1n)) return q + 1n;
  return q;
}

function nonFinite(x: number): string | null {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  return null;
}

/** Python's `'{:.{digits}f}'.format(x)`. */
export function pyFixed(x: number, digits: number): string {
  const special = nonFinite(x);
  if (special !== null) return special;
  const { m, e } = decompose(x);
  const scale = 10n ** BigInt(digits);
  const n = e >= 0 ? m * scale * (1n << BigInt(e)) : roundHalfEven(m * scale, 1n << BigInt(-e));
  const s = n.toString().padStart(digits + 1, "0");
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  return digits === 0 ? sign + s : `${sign}${s.slice(0, -digits)}.${s.slice(-digits)}`;
}

/** Python's `'{:.{digits}e}'.format(x)`: d.ddddE±XX with at least two exponent digits. */
export function pyExp(x: number, digits: number): string {
  const special = nonFinite(x);
  if (special !== null) return special;
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  if (x === 0) return `${sign}${(0).toFixed(digits)}e+00`;
  const { m, e } = decompose(x);
  let k = Math.floor(Math.log10(Math.abs(x)));
  for (;;) {
    // n = round(|x| * 10^(digits - k)), exactly.
    const shift = digits - k;
    let num = m, den = 1n;
    if (e >= 0) num <<= BigInt(e);
    else den <<= BigInt(-e);
    if (shift >= 0) num *= 10n ** BigInt(shift);
    else den *= 10n ** BigInt(-shift);
    const n = roundHalfEven(num, den);
    const lo = 10n ** BigInt(digits), hi = lo * 10n;
    if (n >= hi) {
      k++;
      continue;
    }
    if (n < lo) {
      k--;
      continue;
    }
    const s = n.toString();
    const mant = digits === 0 ? s : `${s[0]}.${s.slice(1)}`;
    const exp = `${k < 0 ? "-" : "+"}${String(Math.abs(k)).padStart(2, "0")}`;
    return `${sign}${mant}e${exp}`;
  }
}
