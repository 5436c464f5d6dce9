/**
 * The byte-level corpus of the GPT workload, exactly as the PyTorch peer
 * (w2_gpt.py, scripts/peers/char_gpt.py) builds it, and its training samples:
 * windows of block + 1 bytes split into input and next-byte target, fetched by
 * offset or drawn at random offsets exactly like the peer's `get_batch`.
 */
import { join } from "node:path";
import type { TorchGenerator } from "../random/torch_generator.ts";
import { fromArray, type Tensor } from "../tensor/tensor.ts";
import type { Dataset } from "./dataset.ts";

/** Where Debian's package `fortunes` installs its text files. */
export const FORTUNES_DIR = "/usr/share/games/fortunes";
/** Share of the corpus used for training; the rest is held out (as the peer). */
export const TRAIN_FRACTION = 0.9;
/** Every byte value is a token. */
export const CHAR_VOCAB = 256;
/** The peer's context length: inputs and targets are 128 bytes long. */
export const CHAR_BLOCK = 128;

/** A corpus split into its training head and held-out tail. */
export interface CharCorpus {
  /** The first floor(0.9 * size) bytes. */
  train: Uint8Array;
  /** The remaining bytes. */
  val: Uint8Array;
  /** Number of files concatenated. */
  files: number;
  /** Their names, in the order concatenated. */
  names: string[];
}

/** Whether `name` names an index file of `fortune` (strfile's .dat) or a .u8 link, which the peer skips. */
function isIndexFile(name: string): boolean {
  return name.endsWith(".dat") || name.endsWith(".u8");
}

/** Whether `path` is a regular file, following symlinks like Python's os.path.isfile. */
function isRegularFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false; // a dangling link: isfile() is False too
  }
}

/**
 * Loads the corpus: every regular file in `dir` (default $DTRAIN_CHAR_CORPUS,
 * else /usr/share/games/fortunes) not ending in .dat or .u8, sorted by name
 * (code-unit order, equal to Python's sorted() for these ASCII names),
 * concatenated as bytes; the first floor(0.9 * size) bytes train, the rest is held out.
 *
 * @example
 * ```ts
 * const { train, val, files } = loadCharCorpus(); // 43 files, 2576674 bytes with fortunes 1:1.99.1-7.3
 * ```
 */
export function loadCharCorpus(dir?: string): CharCorpus {
  const folder = dir ?? Deno.env.get("DTRAIN_CHAR_CORPUS") ?? FORTUNES_DIR;
  let entries: Deno.DirEntry[];
  try {
    entries = [...Deno.readDirSync(folder)];
  } catch (e) {
    throw new Error(
      `Cannot load the character corpus from ${folder}: ${
        e instanceof Error ? e.message : String(e)
      }. Install the Debian package fortunes (apt-get install fortunes), ` +
        `or point DTRAIN_CHAR_CORPUS (or the dir argument) at a folder of text files`,
      { cause: e },
    );
  }
  const names = entries.map((e) => e.name)
    .filter((n) => !isIndexFile(n) && isRegularFile(join(folder, n)))
    .sort();
  const parts = names.map((n) => Deno.readFileSync(join(folder, n)));
  const size = parts.reduce((sum, p) => sum + p.length, 0);
  if (size === 0) {
    throw new Error(
      `Cannot load the character corpus from ${folder}: found ${names.length} text files ` +
        `holding 0 bytes (is the fortunes package installed?)`,
    );
  }
  const all = new Uint8Array(size);
  let offset = 0;
  for (const p of parts) {
    all.set(p, offset);
    offset += p.length;
  }
  const cut = Math.floor(TRAIN_FRACTION * size); // Python's int(0.9 * len(data))
  return { train: all.subarray(0, cut), val: all.subarray(cut), files: names.length, names };
}

/**
 * Next-byte prediction samples over a byte string: sample i is the window of
 * block + 1 bytes starting at offset i; its input is bytes 0..block-1 and its
 * target bytes 1..block (as i32 token ids). There are `data.length - block`
 * samples (every complete window).
 */
export class CharWindows implements Dataset {
  readonly length: number;
  /** The corpus widened once to i32, so each window is one typed-array copy. */
  readonly #tokens: Int32Array;

  /**
   * @param data the bytes (e.g. loadCharCorpus().train); copied
   * @param block input length T (default 128, the peer's)
   */
  /**
   * Windows of `block` + 1 bytes over `data`; throws when block is not a positive integer or data
   * is shorter than one window.
   */
  constructor(data: Uint8Array, readonly block: number = CHAR_BLOCK) {
    if (!Number.isSafeInteger(block) || block < 1) {
      throw new RangeError(`CharWindows: block must be a positive integer, got ${block}`);
    }
    if (data.length < block + 1) {
      throw new RangeError(
        `CharWindows: ${data.length} bytes hold no window of block + 1 = ${block + 1} bytes`,
      );
    }
    this.#tokens = new Int32Array(data.length);
    this.#tokens.set(data);
    this.length = data.length - block;
  }

  /**
   * The windows at byte offsets `indices`, as [x i32 (B, T), y i32 (B, T)] with
   * y[b, t] = x[b, t + 1] for t < T - 1: the same pair the peer's get_batch makes.
   */
  getBatch(indices: Int32Array): Tensor[] {
    const T = this.block;
    const x = new Int32Array(indices.length * T);
    const y = new Int32Array(indices.length * T);
    indices.forEach((offset, b) => {
      if (!Number.isInteger(offset) || offset < 0 || offset >= this.length) {
        throw new RangeError(
          `CharWindows: offset ${offset} (batch row ${b}) is outside [0, ${this.length}): ` +
            `a window needs ${T + 1} bytes of ${this.#tokens.length}`,
        );
      }
      x.set(this.#tokens.subarray(offset, offset + T), b * T);
      y.set(this.#tokens.subarray(offset + 1, offset + 1 + T), b * T);
    });
    return [
      fromArray(x, [indices.length, T], "i32"),
      fromArray(y, [indices.length, T], "i32"),
    ];
  }

  /**
   * `batch` window offsets drawn as the peer's
   * `torch.randint(len(data) - (block + 1), (batch,), generator=gen)`. Like
   * the peer, this never picks the last complete window (offset length - 1).
   */
  randomOffsets(gen: TorchGenerator, batch: number): Int32Array<ArrayBuffer> {
    if (!Number.isSafeInteger(batch) || batch < 0) {
      throw new RangeError(`CharWindows: batch must be a non-negative integer, got ${batch}`);
    }
    const high = this.#tokens.length - (this.block + 1);
    if (high < 1) {
      throw new RangeError(
        `CharWindows: cannot draw offsets from randint(0, ${high}): ` +
          `${this.#tokens.length} bytes need at least block + 2 = ${this.block + 2}`,
      );
    }
    return Int32Array.from({ length: batch }, () => gen.randint(0, high));
  }

  /**
   * A random batch as the peer's `get_batch(data, batch, gen)`: offsets from
   * randomOffsets(), windows from getBatch(). Returns [x, y], each i32 (batch, T).
   *
   * @example
   * ```ts
   * const windows = new CharWindows(loadCharCorpus().train);
   * const [x, y] = windows.randomWindowBatch(new TorchGenerator(1000), 16);
   * ```
   */
  randomWindowBatch(gen: TorchGenerator, batch: number): Tensor[] {
    return this.getBatch(this.randomOffsets(gen, batch));
  }
}
