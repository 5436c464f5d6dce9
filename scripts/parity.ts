/**
 * `deno task parity [folder] [--only toy,gpt,sampler,checkpoint] [--device D]`:
 * runs every comparison a PyTorch fixture folder supports (default:
 * DTRAIN_FIXTURES or ../shared/fixtures/pytorch) on device D (cpu, cuda,
 * cuda-emu; default DTRAIN_DEVICE, else the CPU) and prints a row per case —
 * case, quantity, max error, tolerance, PASS/FAIL — exiting 1 on any FAIL.
 * The tolerances are the same on every device.
 */
import { parseArgs } from "node:util";
import { defaultFixtureDir } from "../parity/fixtures.ts";
import { type ParityGroup, parityRows } from "../parity/run.ts";
import { printRows } from "../parity/report.ts";
import { buildNative } from "./build_native.ts";
import { describeBackend, useDevice } from "../tensor/device_choice.ts";
import { installLayout } from "../os/install_layout.ts";

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    options: {
      only: { type: "string" },
      device: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(
      "usage: deno task parity [fixture-folder] [--only toy,gpt,sampler,checkpoint] [--device cpu|cuda|cuda-emu]",
    );
    Deno.exit(0);
  }
  if (!installLayout() || installLayout()!.kind === "checkout") buildNative({ quiet: true });
  const device = values.device ?? Deno.env.get("DTRAIN_DEVICE");
  if (device) console.log(`device: ${useDevice(device)} (${describeBackend()})`);
  const dir = positionals[0] ?? defaultFixtureDir();
  const groups = values.only?.split(",").map((s) => s.trim()) as
    | ParityGroup[]
    | undefined;
  const rows = await parityRows(dir, groups);
  if (rows.length === 0) {
    console.error(`No parity fixtures found in ${dir}`);
    Deno.exit(1);
  }
  const failed = printRows(rows);
  Deno.exit(failed > 0 ? 1 : 0);
}
