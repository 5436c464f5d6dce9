/**
 * Builds a test-only CUDA source (a probe of the emulated device) against the emulated runtime,
 * once per source and test process, into a temporary folder removed at exit.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  BUILD_DIR,
  buildNative,
  EMU_SANITIZE_FLAGS,
  EMU_SANITIZE_LIBS,
} from "../../scripts/build_native.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const built = new Map<string, string>();

/** What the sanitizer build of the kernels compiles with, and the hooks that report each access. */
function sanitizeArgs(): string[] {
  return [
    ...EMU_SANITIZE_FLAGS,
    `-I${ROOT}kernels/cuda_emu`,
    `${ROOT}kernels/cuda_emu_sanitize/access_hooks.cpp`,
  ];
}

/**
 * The executable of `tests/cuda/<source>`, compiled by g++ with the emulator's
 * headers; `sanitize`: with the sanitizer build's instrumentation, so that
 * DTRAIN_EMU_RACECHECK / DTRAIN_EMU_MEMCHECK see its kernels' accesses.
 */
export function emuProbe(source: string, opts: { sanitize?: boolean } = {}): string {
  const key = `${source}${opts.sanitize ? " sanitize" : ""}`;
  const done = built.get(key);
  if (done) return done;
  buildNative({ quiet: true, parts: ["cuda-emu"] });
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-emu-probe-" });
  addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
  const out = join(dir, "probe");
  const r = new Deno.Command("g++", {
    args: [
      "-std=gnu++20",
      "-O1",
      "-pthread",
      `-I${ROOT}kernels/cuda_emu/include`,
      `-I${ROOT}kernels/common`,
      `-I${ROOT}kernels/cuda`,
      ...(opts.sanitize ? sanitizeArgs() : []),
      "-x",
      "c++",
      `${ROOT}tests/cuda/${source}`,
      "-x",
      "none",
      `-L${BUILD_DIR}`,
      "-ldtrain_cudart_emu",
      `-Wl,-rpath,${BUILD_DIR}`,
      ...(opts.sanitize ? EMU_SANITIZE_LIBS : []),
      "-o",
      out,
    ],
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  if (!r.success) assert.fail(`g++ ${source} failed:\n${new TextDecoder().decode(r.stderr)}`);
  built.set(key, out);
  return out;
}
