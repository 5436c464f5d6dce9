/**
 * Where the launcher's text goes: each rank's output split into lines,
 * prefixed with its rank on the terminal (`[r3] …`), filtered by
 * --log-ranks, and written in full to the rank's log file; and the
 * launcher's own messages (`[dtrain] …`), also kept in its log file.
 */

const utf8 = new TextEncoder();
/** A line longer than this is emitted in pieces rather than buffered. */
const MAX_LINE_CHARS = 64 * 1024;

function writeAllSync(w: { writeSync(p: Uint8Array): number }, bytes: Uint8Array): void {
  let off = 0;
  while (off < bytes.length) off += w.writeSync(bytes.subarray(off));
}

/** An append-only text file that never throws after opening (a full disk must not stop the launcher). */
export class LogFile {
  readonly path: string;
  #file: Deno.FsFile | null;

  constructor(path: string) {
    this.path = path;
    this.#file = Deno.openSync(path, { write: true, create: true, append: true });
  }

  write(text: string): void {
    if (!this.#file) return;
    try {
      writeAllSync(this.#file, utf8.encode(text));
    } catch {
      this.close();
    }
  }

  close(): void {
    try {
      this.#file?.close();
    } catch { /* already closed */ }
    this.#file = null;
  }
}

/** The launcher's terminal: whole lines to stdout or stderr, errors ignored (a closed pipe must not stop it). */
export const terminal = {
  out(text: string): void {
    try {
      writeAllSync(Deno.stdout, utf8.encode(text));
    } catch { /* stdout closed */ }
  },
  err(text: string): void {
    try {
      writeAllSync(Deno.stderr, utf8.encode(text));
    } catch { /* stderr closed */ }
  },
};

/** The launcher's own messages: `[dtrain] …` on stderr and in its log file. */
export class LauncherLog {
  #file: LogFile | null = null;
  readonly #prefix: string;

  constructor(prefix = "[dtrain]") {
    this.#prefix = prefix;
  }

  /** Starts copying messages to `path` (once the run directory exists). */
  attach(path: string): void {
    this.#file = new LogFile(path);
  }

  /** One message; each of its lines is prefixed. */
  info(message: string): void {
    const text = message.split("\n").map((l) => `${this.#prefix} ${l}\n`).join("");
    terminal.err(text);
    this.#file?.write(`${new Date().toISOString()} ${text}`);
  }

  close(): void {
    this.#file?.close();
  }
}

/** Which ranks' stdout the terminal shows (stderr is always shown). */
export function showsStdout(logRanks: string, rank: number): boolean {
  if (logRanks === "all") return true;
  return logRanks.split(",").map(Number).includes(rank);
}

/** Options of pumpLines(). */
export interface PumpOptions {
  rank: number;
  stream: "stdout" | "stderr";
  /** show on the launcher's terminal */
  show: boolean;
  log: LogFile;
  /** receives every complete line (e.g. to keep a stderr tail) */
  onLine?: (line: string) => void;
}

/** Copies a rank's output stream line by line to its log and, if shown, the terminal. */
export async function pumpLines(
  source: ReadableStream<Uint8Array>,
  opts: PumpOptions,
): Promise<void> {
  const prefix = `[r${opts.rank}] `;
  const emit = (line: string) => {
    opts.log.write(line + "\n");
    opts.onLine?.(line);
    if (!opts.show) return;
    if (opts.stream === "stdout") terminal.out(prefix + line + "\n");
    else terminal.err(prefix + line + "\n");
  };
  const decoder = new TextDecoder();
  let pending = "";
  try {
    for await (const chunk of source) {
      pending += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        emit(pending.slice(0, nl).replace(/\r$/, ""));
        pending = pending.slice(nl + 1);
      }
      while (pending.length > MAX_LINE_CHARS) {
        emit(pending.slice(0, MAX_LINE_CHARS));
        pending = pending.slice(MAX_LINE_CHARS);
      }
    }
  } catch { /* the pipe broke: keep what arrived */ }
  pending += decoder.decode();
  if (pending.length > 0) emit(pending);
}
