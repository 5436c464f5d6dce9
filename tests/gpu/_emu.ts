/**
 * What the whole-run tests on the emulated GPU share: whether the emulated
 * device can be built here (g++), and launching `dtrain` runs of a script
 * with rank output parsed.
 */
import { hasCommand } from "../../scripts/build_native.ts";

/** The emulated device and the NCCL stand-in are built where g++ exists (DTRAIN_CUDA_EMU=0 skips them). */
export const HAVE_EMU = hasCommand("g++") && Deno.env.get("DTRAIN_CUDA_EMU") !== "0";

/** The JSON objects rank `rank` printed (the launcher prefixes its lines with "[r<rank>] "). */
export function rankJson(stdout: string, rank: number): Record<string, unknown>[] {
  const prefix = `[r${rank}] `;
  return stdout.split("\n")
    .filter((l) => l.startsWith(prefix + "{"))
    .map((l) => JSON.parse(l.slice(prefix.length)));
}
