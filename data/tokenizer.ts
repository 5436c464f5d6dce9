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

let gpt2: Promise<Tiktoken> | null = null;

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
    return new Tiktoken(ranks.default);
  })();
  const enc = await gpt2;
  return {
    name: "gpt2",
    vocabSize: GPT2_VOCAB,
    eot: GPT2_EOT,
    encode: (text) => enc.encode(text, [EOT_TEXT], []),
    decode: (ids) => enc.decode(Array.from(ids)),
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
