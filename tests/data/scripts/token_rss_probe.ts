/**
 * Reads random windows from a token file (argv: path, batches) and prints, as
 * JSON, the peak resident memory (VmHWM) after opening it and after reading;
 * with "--hold MiB" it also keeps that much memory touched, which shows the
 * measurement sees growth.
 */
import { TokenStream } from "../../../data/token_file.ts";
import { RandomWindows } from "../../../data/token_windows.ts";
import { scope } from "../../../tensor/tensor.ts";

function peakKiB(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(Deno.readTextFileSync("/proc/self/status"));
  if (!m) throw new Error("no VmHWM in /proc/self/status");
  return Number(m[1]);
}

const [path, batches, flag, mib] = Deno.args;
using tokens = TokenStream.open(path!);
const windows = new RandomWindows(tokens, { block: 1024, batch: 16, seed: 7, rank: 0 });
const opened = peakKiB();
let held: Uint8Array | null = null;
if (flag === "--hold") held = new Uint8Array(Number(mib) << 20).fill(1);
let sum = 0;
for (let step = 0; step < Number(batches); step++) {
  scope(() => {
    const [x] = windows.batch(step);
    sum += x!.shape[0]!;
  });
}
console.log(
  JSON.stringify({ tokens: tokens.length, opened, read: peakKiB(), sum, held: held?.length ?? 0 }),
);
