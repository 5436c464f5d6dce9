/**
 * Hostile inputs for the fuzz cases: a seeded generator, byte-level mutations
 * biased to a region, random and text-edited safetensors headers, and random
 * pickle opcode streams with just enough structure to reach deep branches.
 */
import { byteSizeOf, isDim, isStDType, ST_DTYPES } from "../../io/st_tensor.ts";
import { Global, PickleWriter, tensorOps, Tuple } from "./_pickle_writer.ts";

/** Small, fast seeded generator (mulberry32). */
export class Rng {
  #s: number;
  constructor(seed: number) {
    this.#s = seed >>> 0;
  }
  u32(): number {
    let t = (this.#s = (this.#s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }
  int(n: number): number {
    return n <= 0 ? 0 : this.u32() % n;
  }
  chance(p: number): boolean {
    return this.u32() / 2 ** 32 < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
}

/** The random stream of case `index` under `seed`: any case can be replayed alone. */
export function caseRng(seed: number, index: number): Rng {
  return new Rng(Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(index + 1, 0xc2b2ae35));
}

/** Boundary values for integer fields (lengths, offsets, counts). */
const INTERESTING = [
  0,
  1,
  2,
  7,
  8,
  0x7f,
  0x80,
  0xff,
  0x100,
  0xffff,
  0x10000,
  0x7fffffff,
  0x80000000,
  0xffffffff,
];

/** Applies 1–4 byte-level mutations, biased to the region [focusStart, focusEnd). */
export function mutate(
  rng: Rng,
  base: Uint8Array,
  focusStart = 0,
  focusEnd = base.length,
): Uint8Array {
  let bytes = base.slice();
  const pos = () => {
    const lo = Math.min(focusStart, bytes.length);
    const hi = Math.min(focusEnd, bytes.length);
    return rng.chance(0.8) && hi > lo ? lo + rng.int(hi - lo) : rng.int(bytes.length);
  };
  for (let m = 1 + rng.int(4); m > 0 && bytes.length > 0; m--) {
    switch (rng.int(7)) {
      case 0: { // bit flips
        for (let k = 1 + rng.int(3); k > 0; k--) {
          const p = pos();
          bytes[p]! ^= 1 << rng.int(8);
        }
        break;
      }
      case 1: // random byte
        bytes[pos()] = rng.int(256);
        break;
      case 2: { // interesting little-endian integer
        const p = pos();
        const v = rng.chance(0.2) ? bytes.length + rng.int(3) - 1 : rng.pick(INTERESTING);
        const width = rng.pick([1, 2, 4, 8]);
        for (let b = 0; b < width && p + b < bytes.length; b++) {
          bytes[p + b] = b < 4 ? (v >>> (8 * b)) & 0xff : 0;
        }
        break;
      }
      case 3: // truncation
        bytes = bytes.slice(0, rng.int(bytes.length + 1));
        break;
      case 4: { // extension
        const extra = new Uint8Array(1 + rng.int(16)).map(() => rng.int(256));
        const grown = new Uint8Array(bytes.length + extra.length);
        grown.set(bytes);
        grown.set(extra, bytes.length);
        bytes = grown;
        break;
      }
      case 5: { // copy a chunk over another place
        const from = pos();
        const to = pos();
        const n = Math.min(1 + rng.int(16), bytes.length - Math.max(from, to));
        bytes.copyWithin(to, from, from + n);
        break;
      }
      default: { // delete a small range (shifts everything after it)
        const p = pos();
        const n = Math.min(1 + rng.int(4), bytes.length - p);
        const shorter = new Uint8Array(bytes.length - n);
        shorter.set(bytes.subarray(0, p));
        shorter.set(bytes.subarray(p + n), p);
        bytes = shorter;
      }
    }
  }
  return bytes;
}

// ---- safetensors ----

/** Where a safetensors file's data section starts per its length field (clamped to the file). */
export function headerEnd(bytes: Uint8Array): number {
  if (bytes.length < 8) return bytes.length;
  const n = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  return n > BigInt(bytes.length) ? bytes.length : 8 + Number(n);
}

/** A file around `header` (space-padded), usually with the right length field, then `dataLength` bytes. */
function fileWithHeader(header: string, dataLength: number, rng: Rng): Uint8Array {
  const json = new TextEncoder().encode(header + " ".repeat(rng.int(8)));
  const out = new Uint8Array(8 + json.length + Math.max(0, dataLength)).fill(0xa5, 8 + json.length);
  const declared = rng.chance(0.85) ? json.length : Math.max(0, json.length + rng.int(9) - 4);
  new DataView(out.buffer).setBigUint64(0, BigInt(declared), true);
  out.set(json, 8);
  return out;
}

/** A header written from random, partly invalid entries: duplicates, bad dtypes, shapes and offsets. */
export function randomHeaderFile(rng: Rng): Uint8Array {
  const parts: string[] = [];
  let offset = 0;
  for (let n = rng.int(5); n > 0; n--) {
    const name = rng.pick([
      "a",
      "b",
      "c",
      "d",
      "w",
      "v",
      "__metadata__",
      "x.y",
      "",
      "__proto__",
      "é",
    ]);
    const dtype = rng.chance(0.85)
      ? rng.pick(ST_DTYPES)
      : rng.pick<unknown>(["F17", 3, null, "f32", "constructor", ["F32"]]);
    const shape = rng.chance(0.8)
      ? Array.from({ length: rng.int(4) }, () => rng.pick([0, 1, 2, 3, 5, 7]))
      : rng.pick<unknown>([[-1], [1.5], ["2"], [2 ** 53], [1e20], 3, null, [[2]], [
        2 ** 52,
        2 ** 52,
      ], [2 ** 31, 2 ** 31, 8]]);
    const valid = isStDType(dtype) && Array.isArray(shape) && shape.every(isDim);
    const nbytes = valid ? Number(byteSizeOf(dtype, shape as number[]) % 2n ** 20n) : rng.int(64);
    const offsets = rng.chance(0.7) ? [offset, offset + nbytes] : rng.pick<unknown>([
      [offset, offset + nbytes + rng.int(9) - 4],
      [offset + 4, offset + 4 + nbytes],
      [0, nbytes],
      [offset + nbytes, offset],
      [offset],
      [2 ** 53, 2 ** 53 + 1],
      [-1, 3],
      "x",
      [offset, 1e300],
    ]);
    const info: Record<string, unknown> = { dtype, shape, data_offsets: offsets };
    if (rng.chance(0.1)) delete info[rng.pick(["dtype", "shape", "data_offsets"])];
    if (rng.chance(0.05)) info.extra = [1, { deep: true }];
    const value = name === "__metadata__" && rng.chance(0.7)
      ? rng.pick<unknown>([{ k: "v" }, { k: 3 }, null, [], "x", { a: "1", b: "2" }])
      : rng.chance(0.05)
      ? rng.pick<unknown>([null, 1, "s", []])
      : info;
    parts.push(`${JSON.stringify(name)}:${JSON.stringify(value)}`);
    if (
      Array.isArray(offsets) && typeof offsets[1] === "number" &&
      Number.isSafeInteger(offsets[1]) && offsets[1] >= offset
    ) {
      offset = offsets[1];
    }
  }
  const dataLength = rng.chance(0.7) ? offset : offset + rng.int(17) - 8;
  return fileWithHeader(`{${parts.join(",")}}`, Math.min(dataLength, 1 << 20), rng);
}

/** A fixture header edited as text: characters inserted, deleted or replaced, numbers changed. */
export function textEditedFile(rng: Rng, base: Uint8Array): Uint8Array {
  const end = headerEnd(base);
  let text = new TextDecoder().decode(base.subarray(8, end));
  for (let k = 1 + rng.int(3); k > 0; k--) {
    const p = rng.int(text.length + 1);
    const c = rng.pick([
      ...'{}[],:"\\0123456789-.eE ',
      "\u0000",
      "\u00e9",
      "\ud800",
      "null",
      "true",
      '"__metadata__"',
    ]);
    switch (rng.int(4)) {
      case 0:
        text = text.slice(0, p) + c + text.slice(p);
        break;
      case 1:
        text = text.slice(0, p) + text.slice(p + 1 + rng.int(3));
        break;
      case 2:
        text = text.slice(0, p) + c + text.slice(p + 1);
        break;
      default:
        text = text.replace(
          /\d+/g,
          (d) => (rng.chance(0.1) ? String(Number(d) + rng.int(17) - 8) : d),
        );
    }
  }
  return fileWithHeader(text, base.length - end, rng);
}

// ---- pickle ----

/** Names a random pickle references: the whole allow-list plus refused ones. */
const GLOBALS: [string, string][] = [
  ["collections", "OrderedDict"],
  ["torch._utils", "_rebuild_tensor_v2"],
  ["torch._utils", "_rebuild_parameter"],
  ["torch", "FloatStorage"],
  ["torch", "LongStorage"],
  ["torch", "BFloat16Storage"],
  ["os", "system"],
  ["builtins", "eval"],
  ["torch", "Tensor"],
];

/** A random stream of plausible opcodes: enough structure to reach deep branches, enough noise to break them. */
export function randomPickle(rng: Rng): Uint8Array {
  const w = new PickleWriter();
  if (rng.chance(0.9)) w.proto(rng.chance(0.05) ? 9 : rng.pick([2, 4, 5]));
  for (let n = 1 + rng.int(40); n > 0; n--) {
    switch (rng.int(16)) {
      case 0:
        w.value(
          rng.pick<unknown>([0, 255, 70000, -5, 2 ** 40, -(2n ** 70n), 1.5, null, true, false]),
        );
        break;
      case 1:
        w.value(rng.pick(["", "a", "storage", "cpu", "0", "1", "é"]));
        break;
      case 2:
        w.raw(rng.pick([0x29, 0x5d, 0x7d, 0x28, 0x28])); // empty containers and MARK
        break;
      case 3:
        w.raw(rng.pick([0x74, 0x85, 0x86, 0x87, 0x6c, 0x64])); // build tuples, lists, dicts
        break;
      case 4:
        w.raw(rng.pick([0x61, 0x65, 0x73, 0x75])); // APPEND(S), SETITEM(S)
        break;
      case 5:
        rng.chance(0.5) ? w.binput(rng.int(4)) : w.binget(rng.int(4));
        break;
      case 6:
        w.raw(rng.pick([0x94, 0x32, 0x30, 0x31])); // MEMOIZE, DUP, POP, POP_MARK
        break;
      case 7: {
        const [m, name] = rng.pick(GLOBALS);
        if (rng.chance(0.7)) w.global(m, name);
        else w.str(m).str(name).raw(0x93);
        break;
      }
      case 8:
        w.raw(rng.pick([0x52, 0x62, 0x51])); // REDUCE, BUILD, BINPERSID
        break;
      case 9:
        w.value(
          new Tuple([
            "storage",
            new Global("torch", rng.pick(["FloatStorage", "LongStorage"])),
            rng.pick(["0", "1", "9"]),
            "cpu",
            rng.pick([0, 2, 6, 2 ** 40]),
          ]),
        );
        break;
      case 10:
      case 11: {
        const size = Array.from(
          { length: rng.int(4) },
          () => rng.pick([0, 1, 2, 3, 6, 1e9, 2 ** 31]),
        );
        const stride = rng.chance(0.9)
          ? size.map(() => rng.pick([0, 1, 2, 3, 2 ** 40]))
          : Array.from({ length: rng.int(4) }, () => rng.int(4));
        const fp = rng.chance(0.7);
        w.value(tensorOps({
          key: fp ? "0" : "1",
          storageType: fp ? "FloatStorage" : "LongStorage",
          numel: rng.chance(0.9) ? (fp ? 6 : 2) : rng.int(10),
          offset: rng.pick([0, 1, 3, 5, 6, 7]),
          size,
          stride,
        }));
        break;
      }
      case 12:
        w.raw(0x95).u64(BigInt(rng.pick([0, 3, 1000, 2 ** 40]))); // FRAME
        break;
      case 13:
        w.raw(rng.int(256)); // any byte, known or not
        break;
      case 14:
        w.raw(rng.pick([0x8a, 0x8b, 0x58, 0x8c, 0x8d, 0x42, 0x43, 0x8e])).u32(
          rng.pick([0, 1, 3, 0xffffffff]),
        ); // lengths
        break;
      default:
        w.raw(0x4e);
    }
  }
  if (rng.chance(0.9)) w.stop();
  return w.bytes();
}
