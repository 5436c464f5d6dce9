/**
 * `dtrain prepare --tokenizer gpt2|bytes INPUT DIR`: the command line of
 * prepareTokens, with a progress bar and throughput on stderr when stderr is
 * a terminal (and not --quiet), and one summary line on stdout.
 */
import { parseArgs } from "node:util";
import { type PrepareProgress, prepareTokens, TRAIN_SHARE } from "./prepare_tokens.ts";
import { tokenizerNamed } from "./tokenizer.ts";

/** `dtrain prepare --help`. */
export function prepareHelp(): string {
  return [
    "Usage: dtrain prepare [--tokenizer gpt2|bytes] [--quiet] INPUT DIR",
    "",
    `Writes DIR/train.bin and DIR/val.bin, nanoGPT's uint16 token files: the first ${
      TRAIN_SHARE * 100
    } % of`,
    "INPUT's bytes to train, the rest to val. INPUT is a text file or a folder of them (read in",
    "path order). A document is one file; the text <|endoftext|> inside a file also ends one. With",
    "gpt2, documents are separated by <|endoftext|> (50256). Streams: INPUT may exceed memory.",
    "",
    "  --tokenizer gpt2|bytes   GPT-2's BPE (tiktoken's gpt2 ranks, offline) or UTF-8 bytes (default: gpt2)",
    "  --quiet                  no progress bar and no summary line",
    "",
    "Exit status: 0 done; 2 a bad command line or an INPUT that does not exist; 1 any other error.",
  ].join("\n");
}

function fmtBytes(n: number): string {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : `${(n / 1e6).toFixed(1)} MB`;
}

/** One line of progress: a bar, the share done, MB/s and tokens so far. */
export function progressLine(p: PrepareProgress, seconds: number, width = 30): string {
  const share = p.totalBytes > 0 ? p.bytesRead / p.totalBytes : 1;
  const filled = Math.round(share * width);
  const rate = seconds > 0 ? p.bytesRead / 1e6 / seconds : 0;
  const tokens = p.trainTokens + p.valTokens;
  return `[${"#".repeat(filled)}${".".repeat(width - filled)}] ${
    (share * 100).toFixed(0).padStart(3)
  } % ` +
    `${fmtBytes(p.bytesRead)} of ${fmtBytes(p.totalBytes)}, ${rate.toFixed(1)} MB/s, ` +
    `${tokens.toLocaleString("en-US")} tokens`;
}

/** Runs the verb; resolves to the exit code. */
export async function prepareMain(args: string[]): Promise<number> {
  let values, positionals;
  try {
    ({ values, positionals } = parseArgs({
      args,
      options: {
        tokenizer: { type: "string", default: "gpt2" },
        quiet: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
      allowPositionals: true,
      strict: true,
    }));
  } catch (e) {
    console.error(`dtrain prepare: ${(e as Error).message}\n(see \`dtrain prepare --help\`)`);
    return 2;
  }
  if (values.help) {
    console.log(prepareHelp());
    return 0;
  }
  const usage = (why: string) => {
    console.error(`dtrain prepare: ${why}\n(see \`dtrain prepare --help\`)`);
    return 2;
  };
  if (positionals.length !== 2) {
    return usage(`expected INPUT and DIR, got ${positionals.length} argument(s)`);
  }
  const [input, dir] = positionals as [string, string];
  let tok;
  try {
    tok = await tokenizerNamed(values.tokenizer);
  } catch (e) {
    return usage(`--tokenizer: ${(e as Error).message}`);
  }
  try {
    Deno.statSync(input);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return usage(`INPUT ${input} does not exist`);
    throw e;
  }
  const bar = !values.quiet && Deno.stderr.isTerminal();
  const started = performance.now();
  let lastDraw = 0;
  const enc = new TextEncoder();
  const result = await prepareTokens(input, dir, tok, (p) => {
    const now = performance.now();
    if (!bar || (now - lastDraw < 200 && p.bytesRead < p.totalBytes)) return;
    lastDraw = now;
    Deno.stderr.writeSync(enc.encode(`\r${progressLine(p, (now - started) / 1000)}`));
  });
  const seconds = (performance.now() - started) / 1000;
  if (bar) Deno.stderr.writeSync(enc.encode(`\r${progressLine(result, seconds)}\n`));
  if (!values.quiet) {
    console.log(
      `prepare: ${result.trainPath} (${result.trainTokens} tokens) and ${result.valPath} ` +
        `(${result.valTokens} tokens), ${tok.name}, from ${result.files} file(s), ` +
        `${fmtBytes(result.totalBytes)} in ${seconds.toFixed(1)} s ` +
        `(${(result.totalBytes / 1e6 / Math.max(seconds, 1e-3)).toFixed(1)} MB/s)`,
    );
  }
  return 0;
}
