/**
 * What the whole-run tests on the emulated GPU share: whether the emulated
 * device can be built here (g++), and launching `dtrain` runs of a script
 * with rank output parsed.
 */
import { hasCommand } from "../../scripts/build_native.ts";

/** The emulated device and the NCCL stand-in are built where g++ exists (DTRAIN_CUDA_EMU=0 skips them). */
export const HAVE_EMU = hasCommand("g++") && Deno.env.get("DTRAIN_CUDA_EMU") !== "0";
if (!HAVE_EMU) {
  console.warn(
    `emulated-GPU tests skipped: ${
      Deno.env.get("DTRAIN_CUDA_EMU") === "0"
        ? "DTRAIN_CUDA_EMU=0"
        : "g++ is not installed (Debian package g++)"
    }`,
  );
}

/** The JSON objects rank `rank` printed (the launcher prefixes its lines with "[r<rank>] "). */
export function rankJson(stdout: string, rank: number): Record<string, unknown>[] {
  const prefix = `[r${rank}] `;
  return stdout.split("\n")
    .filter((l) => l.startsWith(prefix + "{"))
    .map((l) => JSON.parse(l.slice(prefix.length)));
}

const REPO = new URL("../..", import.meta.url).pathname;

/**
 * Runs a repository script (`script`, relative to the repository root) in a
 * fresh Deno with the repository's config and `args` (e.g. "cuda-emu"), and
 * returns the JSON object on the last line of its stdout; fails, with both
 * outputs, when the script exits non-zero.
 */
// deno-lint-ignore no-explicit-any -- each test asserts on its own script's shape
export async function lastJsonOf(script: string, ...args: string[]): Promise<any> {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", `${REPO}deno.json`, `${REPO}${script}`, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(r.stdout);
  if (r.code !== 0) {
    throw new Error(
      `${script} ${args.join(" ")} exited ${r.code}:\n${text}${new TextDecoder().decode(r.stderr)}`,
    );
  }
  return JSON.parse(text.trim().split("\n").at(-1)!);
}
