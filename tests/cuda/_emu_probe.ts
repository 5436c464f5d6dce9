/**
 * Builds a test-only CUDA source (a probe of the emulated device) against the emulated runtime,
 * once per source and test process, into a temporary folder removed at exit.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { BUILD_DIR, buildNative } from "../../scripts/build_native.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const built = new Map<string, string>();

/** The executable of `tests/cuda/<source>`, compiled by g++ with the emulator's headers. */
export function emuProbe(source: string): string {
  const done = built.get(source);
  if (done) return done;
  buildNative({ quiet: true });
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
      "-x",
      "c++",
      `${ROOT}tests/cuda/${source}`,
      "-x",
      "none",
      `-L${BUILD_DIR}`,
      "-ldtrain_cudart_emu",
      `-Wl,-rpath,${BUILD_DIR}`,
      "-o",
      out,
    ],
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  if (!r.success) assert.fail(`g++ ${source} failed:\n${new TextDecoder().decode(r.stderr)}`);
  built.set(source, out);
  return out;
}
