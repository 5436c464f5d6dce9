/**
 * `deno task parity [folder] [--only toy,gpt,sampler,checkpoint,ops,cnn,syncbn]`: runs every
 * comparison a PyTorch fixture folder supports (default: DTRAIN_FIXTURES or
 * ../shared/fixtures/pytorch) and prints a row per case — case, quantity,
 * max error, tolerance, PASS/FAIL — exiting 1 on any FAIL.
 */
import { parseArgs } from "node:util";
import { defaultFixtureDir } from "../parity/fixtures.ts";
import { groupsSkippedOnDevice, type ParityGroup, parityRows } from "../parity/run.ts";
import { printRows } from "../parity/report.ts";
import { buildNative } from "./build_native.ts";
import { useDevice } from "../tensor/device_choice.ts";

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    options: {
      only: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(
      "usage: deno task parity [fixture-folder] [--only toy,gpt,sampler,checkpoint,ops,cnn,syncbn]",
    );
    Deno.exit(0);
  }
  buildNative({ quiet: true });
  // gpu-check runs the same comparisons on the GPU with DTRAIN_DEVICE=cuda.
  if (Deno.env.get("DTRAIN_DEVICE")) console.log(`device: ${useDevice()}`);
  const dir = positionals[0] ?? defaultFixtureDir();
  const groups = values.only?.split(",").map((s) => s.trim()) as
    | ParityGroup[]
    | undefined;
  const skipped = groupsSkippedOnDevice();
  if (skipped) console.log(`skipped on this device: ${skipped.groups.join(", ")}: ${skipped.why}`);
  const rows = await parityRows(dir, groups);
  if (rows.length === 0) {
    console.error(`No parity fixtures found in ${dir}`);
    Deno.exit(1);
  }
  const failed = printRows(rows);
  Deno.exit(failed > 0 ? 1 : 0);
}
