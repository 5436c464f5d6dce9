/**
 * Tokenizers for text data: GPT-2's byte-pair encoding (js-tiktoken's `gpt2`
 * ranks, shipped inside the package, so nothing is fetched at run time) and
 * raw UTF-8 bytes. The GPT-2 ranks (half a megabyte of JavaScript) are
 * imported on first use, not by every process that imports the library.
 */
import type { Tiktoken } from "js-tiktoken/lite";

/** GPT-2's `<|endoftext|>` id. */
export const GPT2_EOT = 50256;
/** GPT-2's vocabulary size (50257; nanoGPT pads its embedding to 50304). */
export const GPT2_VOCAB = 50257;
/** The text of GPT-2's document separator. */
export const EOT_TEXT = "<|endoftext|>";

/** Text to token ids and back. */
export interface Tokenizer {
  /** "gpt2" (GPT-2's BPE) or "bytes" (UTF-8 bytes as ids). */
  readonly name: "gpt2" | "bytes";
  /** ids are below this */
  readonly vocabSize: number;
  /** the document separator's id, or null (bytes have none) */
  readonly eot: number | null;
  /** ids of `text`; the text `<|endoftext|>` becomes the separator's id (gpt2) */
  encode(text: string): number[];
  /** the text of `ids` (bytes that are not UTF-8 become U+FFFD) */
  decode(ids: ArrayLike<number>): string;
}

let gpt2: Promise<(text: string) => number[]> | null = null;
let gpt2Decoder: Tiktoken | null = null;

/** Pieces remembered before the cache is emptied (bounds its memory to some 100 MB). */
const CACHE_PIECES = 1 << 20;

/**
 * js-tiktoken's encode with a cache of the pre-tokenizer's pieces: each
 * piece's ids are the library's, computed once. A call of the library costs
 * ~150 us of set-up (it compiles its Unicode pattern each time), so the
 * pieces not yet cached are encoded in one call, joined by `<|endoftext|>`:
 * the library encodes the text between special tokens separately, so the
 * ids come back per piece, split at 50256. The ids equal the library's
 * encode of the whole text (tested).
 */
function cachedEncoder(enc: Tiktoken, pattern: string): (text: string) => number[] {
  const re = new RegExp(pattern, "gu");
  const cache = new Map<string, number[]>();
  return (text) => {
    const segments = text.split(EOT_TEXT).map((seg) => Array.from(seg.matchAll(re), (m) => m[0]));
    const misses = [...new Set(segments.flat().filter((p) => !cache.has(p)))];
    if (misses.length > 0) {
      const ids = enc.encode(misses.join(EOT_TEXT), [EOT_TEXT], []);
      let k = 0;
      let cur: number[] = [];
      for (const id of ids) {
        if (id !== GPT2_EOT) cur.push(id);
        else {
          cache.set(misses[k++]!, cur);
          cur = [];
        }
      }
      cache.set(misses[k++]!, cur);
      if (k !== misses.length) {
        throw new Error(`gpt2 encode: ${misses.length} pieces came back as ${k}`);
      }
    }
    const out: number[] = [];
    segments.forEach((pieces, i) => {
      if (i > 0) out.push(GPT2_EOT);
      for (const p of pieces) for (const id of cache.get(p)!) out.push(id);
    });
    if (cache.size > CACHE_PIECES) cache.clear();
    return out;
  };
}

/**
 * GPT-2's tokenizer, as tiktoken's `gpt2` encoding (what nanoGPT's prepare.py uses).
 *
 * @example
 * ```ts
 * (await gpt2Tokenizer()).encode("hello world"); // [31373, 995]
 * ```
 */
export async function gpt2Tokenizer(): Promise<Tokenizer> {
  gpt2 ??= (async () => {
    const [{ Tiktoken }, ranks] = await Promise.all([
      import("js-tiktoken/lite"),
      import("js-tiktoken/ranks/gpt2"),
    ]);
    gpt2Decoder = new Tiktoken(ranks.default);
    return cachedEncoder(gpt2Decoder, ranks.default.pat_str);
  })();
  const encode = await gpt2;
  const dec = gpt2Decoder!;
  return {
    name: "gpt2",
    vocabSize: GPT2_VOCAB,
    eot: GPT2_EOT,
    encode,
    decode: (ids) => dec.decode(Array.from(ids)),
  };
}

/** UTF-8 bytes as ids 0 … 255 (the character-level models' vocabulary). */
export function bytesTokenizer(): Tokenizer {
  return {
    name: "bytes",
    vocabSize: 256,
    eot: null,
    encode: (text) => Array.from(new TextEncoder().encode(text)),
    decode: (ids) => new TextDecoder().decode(Uint8Array.from(ids)),
  };
}

/** The tokenizer of a name given on a command line. */
export function tokenizerNamed(name: string): Promise<Tokenizer> {
  if (name === "gpt2") return gpt2Tokenizer();
  if (name === "bytes") return Promise.resolve(bytesTokenizer());
  throw new RangeError(`unknown tokenizer ${JSON.stringify(name)}: expected gpt2 or bytes`);
}
