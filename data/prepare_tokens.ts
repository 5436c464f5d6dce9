/**
 * Text to nanoGPT's token files, streaming: DIR/train.bin and DIR/val.bin
 * (uint16 ids), the first 90 % of the input's bytes to train and the rest to
 * val, as nanoGPT's prepare.py splits. Input is read in chunks and encoded
 * at cuts where GPT-2's pre-tokenizer would split anyway, so an input larger
 * than memory gives the ids of encoding it whole.
 *
 * A document is one input file; inside a file, the text `<|endoftext|>` also
 * ends one. With gpt2, consecutive documents are separated by
 * `<|endoftext|>` (50256), none after the last (a single text prepares as
 * nanoGPT's shakespeare prepare.py: no separator). The bytes tokenizer
 * writes the input's bytes as they are (not decoded), files back to back,
 * split at exactly 90 % of them.
 */
import { join, relative } from "node:path";
import type { Tokenizer } from "./tokenizer.ts";

/** Share of the input's bytes that goes to train.bin (nanoGPT's 90/10). */
export const TRAIN_SHARE = 0.9;
/** Bytes read from the input at a time (and characters pending before a cut is looked for). */
export const READ_BYTES = 1 << 20;
/**
 * Characters of text without a safe cut kept pending before it is encoded
 * anyway (a 16 Mi-character run with no lone space or newline between words;
 * real text has one every few characters).
 */
const MAX_PENDING = 1 << 24;

/** Progress of a prepare run. */
export interface PrepareProgress {
  /** Input bytes read so far. */
  bytesRead: number;
  /** Input bytes in all. */
  totalBytes: number;
  /** Tokens written to train.bin so far. */
  trainTokens: number;
  /** Tokens written to val.bin so far. */
  valTokens: number;
}

/** What prepare wrote. */
export interface PrepareResult extends PrepareProgress {
  /** Input files read. */
  files: number;
  /** The path of train.bin. */
  trainPath: string;
  /** The path of val.bin. */
  valPath: string;
}

/** Input files of a path: the file, or every file under a folder in sorted path order. */
export function inputFiles(input: string): string[] {
  const info = Deno.statSync(input);
  if (info.isFile) return [input];
  if (!info.isDirectory) throw new RangeError(`${input} is neither a file nor a folder`);
  const out: string[] = [];
  const walk = (dir: string) => {
    const entries = [...Deno.readDirSync(dir)].sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const e of entries) {
      if (e.name.startsWith(".")) continue;
      const p = join(dir, e.name);
      if (e.isDirectory) walk(p);
      else if (e.isFile) out.push(p);
    }
  };
  walk(input);
  if (out.length === 0) throw new RangeError(`${input}: the folder holds no files`);
  return out.sort((a, b) => (relative(input, a) < relative(input, b) ? -1 : 1));
}

const isSpace = (c: string | undefined) => c !== undefined && /\s/u.test(c);

/**
 * The last position p in `text` where encoding text[:p] and text[p:] apart
 * gives the ids of encoding it whole, or 0: before a lone space or newline
 * that sits between two non-space characters. GPT-2's pattern ends a token
 * before such a character (no token spans it), and a match starting there
 * does not look back.
 */
export function lastSafeCut(text: string): number {
  for (let p = text.length - 2; p > 0; p--) {
    const c = text[p];
    if ((c === " " || c === "\n") && !isSpace(text[p - 1]) && !isSpace(text[p + 1])) {
      return p;
    }
  }
  return 0;
}

/** uint16 ids appended to a file in large writes. */
class IdWriter {
  readonly #file: Deno.FsFile;
  readonly #buf = new Uint16Array(1 << 18);
  #n = 0;
  count = 0;

  constructor(readonly path: string) {
    this.#file = Deno.openSync(path, { write: true, create: true, truncate: true });
  }

  push(ids: ArrayLike<number>): void {
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (id > 0xffff) throw new RangeError(`${this.path}: id ${id} does not fit uint16`);
      this.#buf[this.#n++] = id;
      if (this.#n === this.#buf.length) this.flush();
    }
    this.count += ids.length;
  }

  flush(): void {
    const bytes = new Uint8Array(this.#buf.buffer, 0, this.#n * 2);
    let at = 0;
    while (at < bytes.length) at += this.#file.writeSync(bytes.subarray(at));
    this.#n = 0;
  }

  close(): void {
    this.flush();
    this.#file.close();
  }
}

/** One split's encoder: pending text, encoded at safe cuts; separators between documents. */
class SplitEncoder {
  #pending = "";
  #docStarted = false;
  #docOpen = false;

  constructor(readonly tok: Tokenizer, readonly out: IdWriter, readonly chunk: number) {}

  /** Starts a new document (a separator first when one came before). */
  newDocument(): void {
    this.flush();
    if (this.#docStarted && this.tok.eot !== null) this.#docOpen = true;
    this.#docStarted = true;
  }

  add(text: string): void {
    if (text === "") return;
    if (this.#docOpen) {
      this.out.push([this.tok.eot!]);
      this.#docOpen = false;
    }
    this.#pending += text;
    if (this.#pending.length < this.chunk) return;
    const cut = lastSafeCut(this.#pending);
    if (cut > 0) {
      this.out.push(this.tok.encode(this.#pending.slice(0, cut)));
      this.#pending = this.#pending.slice(cut);
    } else if (this.#pending.length > MAX_PENDING) {
      this.flush();
    }
  }

  flush(): void {
    if (this.#pending !== "") this.out.push(this.tok.encode(this.#pending));
    this.#pending = "";
  }
}

/**
 * Writes `dir`/train.bin, `dir`/val.bin and `dir`/meta.json (the tokenizer) from the text at `input` (a file
 * or a folder of files). `onProgress` is called after each chunk read.
 *
 * @example
 * ```ts
 * await prepareTokens("input.txt", "data/shakespeare", gpt2Tokenizer());
 * ```
 */
export async function prepareTokens(
  input: string,
  dir: string,
  tok: Tokenizer,
  onProgress?: (p: PrepareProgress) => void,
  /** bytes read at a time (tests use small ones to cut often) */
  chunkBytes: number = READ_BYTES,
): Promise<PrepareResult> {
  const files = inputFiles(input);
  const sizes = files.map((f) => Deno.statSync(f).size);
  const totalBytes = sizes.reduce((a, b) => a + b, 0);
  if (totalBytes === 0) throw new RangeError(`${input}: the input is empty`);
  const splitAt = Math.floor(totalBytes * TRAIN_SHARE);
  Deno.mkdirSync(dir, { recursive: true });
  const trainOut = new IdWriter(join(dir, "train.bin"));
  const valOut = new IdWriter(join(dir, "val.bin"));
  const progress: PrepareProgress = { bytesRead: 0, totalBytes, trainTokens: 0, valTokens: 0 };
  try {
    let enc = new SplitEncoder(tok, trainOut, chunkBytes);
    let inTrain = true;
    // bytes are written as read: not decoded, so any input (Latin-1, binary) keeps its bytes
    const raw = tok.name === "bytes";
    const buf = new Uint8Array(chunkBytes);
    for (const [f, path] of files.entries()) {
      const utf8 = new TextDecoder("utf-8", { fatal: false });
      using file = await Deno.open(path, { read: true });
      enc.newDocument();
      let fileAt = 0;
      for (;;) {
        const n = await file.read(buf);
        if (n === null) break;
        let chunk = buf.subarray(0, n);
        const chunkStart = progress.bytesRead;
        if (inTrain && chunkStart + n > splitAt) {
          // the split point, moved forward to a character's first byte (text tokenizers)
          let cut = Math.max(0, splitAt - chunkStart);
          while (!raw && cut < n && (chunk[cut]! & 0xc0) === 0x80) cut++;
          if (cut < n || fileAt + n >= sizes[f]!) {
            if (raw) trainOut.push(chunk.subarray(0, cut));
            else {
              enc.add(utf8.decode(chunk.subarray(0, cut), { stream: true }));
              enc.add(utf8.decode());
              enc.flush();
            }
            enc = new SplitEncoder(tok, valOut, chunkBytes);
            enc.newDocument();
            inTrain = false;
            chunk = chunk.subarray(cut);
          }
        }
        if (raw) (inTrain ? trainOut : valOut).push(chunk);
        else enc.add(utf8.decode(chunk, { stream: true }));
        fileAt += n;
        progress.bytesRead += n;
        progress.trainTokens = trainOut.count;
        progress.valTokens = valOut.count;
        onProgress?.({ ...progress });
      }
      enc.add(utf8.decode());
      enc.flush();
    }
  } finally {
    trainOut.close();
    valOut.close();
  }
  progress.trainTokens = trainOut.count;
  progress.valTokens = valOut.count;
  // what nanoGPT keeps in meta.pkl: how the ids decode (examples/nanogpt*.ts read it)
  Deno.writeTextFileSync(
    join(dir, "meta.json"),
    JSON.stringify({ tokenizer: tok.name, vocab_size: tok.vocabSize, eot: tok.eot }) + "\n",
  );
  return { ...progress, files: files.length, trainPath: trainOut.path, valPath: valOut.path };
}
