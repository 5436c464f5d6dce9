/**
 * A rank's state page: a small file in the run directory that holds the rank's latest RankState
 * (JSON), rewritten in place with one synchronous write at every collective enter and exit. The
 * store record goes out through the connection's writer, which needs the event loop to turn; a loop
 * without `await` that then blocks in a native collective (or is stopped by a signal) would leave
 * the launcher an older collective. The page needs no turn: the launcher on the same node reads it
 * and uses whichever of page and store record is newer (launch/attempt.ts).
 */
/** The page of `rank` in `runDir`. */
export function statePagePath(runDir: string, rank: number): string {
  return `${runDir}/rank-${rank}.state`;
}

/** Writes a rank's state page; each write replaces the whole page. */
export class StatePage {
  readonly #file: Deno.FsFile;
  readonly #encoder = new TextEncoder();
  /** The page's bytes, reused by every write; as long as the longest record so far, so shorter
   * ones are padded with spaces and no old bytes remain. */
  #page = new Uint8Array(256);
  /** bytes of the last record: what a shorter next one must blank out */
  #used = 0;

  private constructor(file: Deno.FsFile) {
    this.#file = file;
  }

  /** Opens (creating or emptying) the page; null when it cannot be written (no page then). */
  static open(path: string): StatePage | null {
    try {
      return new StatePage(
        Deno.openSync(path, { write: true, create: true, truncate: true, mode: 0o600 }),
      );
    } catch {
      return null;
    }
  }

  /** Replaces the page with `json` (padded with spaces); synchronous, a few microseconds. */
  write(json: string): void {
    // a record is ASCII JSON, at most 3 bytes per UTF-16 unit otherwise
    if (json.length * 3 > this.#page.length) {
      const grown = new Uint8Array(json.length * 3);
      grown.set(this.#page);
      this.#page = grown;
    }
    const { written } = this.#encoder.encodeInto(json, this.#page);
    const used = Math.max(written, this.#used);
    this.#page.fill(0x20, written, used);
    this.#used = written;
    const out = this.#page.subarray(0, used);
    try {
      this.#file.seekSync(0, Deno.SeekMode.Start);
      let off = 0;
      while (off < out.length) off += this.#file.writeSync(out.subarray(off));
    } catch { /* the run directory is gone: the store record still goes out */ }
  }

  close(): void {
    try {
      this.#file.close();
    } catch { /* already closed */ }
  }
}

/**
 * Reads a page as the store would hand the record back: its bytes and its age (the writer's clock
 * is this node's clock, so `Date.now() - sentAt` is the age). Null when absent, torn or invalid.
 */
export function readStatePage(path: string): { value: Uint8Array; ageMs: number } | null {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch {
    return null;
  }
  try {
    const s = JSON.parse(text);
    if (typeof s?.sentAt !== "number") return null;
    return { value: new TextEncoder().encode(text), ageMs: Math.max(0, Date.now() - s.sentAt) };
  } catch {
    return null;
  }
}
