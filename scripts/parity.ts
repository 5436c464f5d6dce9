/**
 * `deno task parity [folder] [--only toy,gpt,sampler,checkpoint,ops,cnn,syncbn] [--device D]`:
 * runs every comparison a PyTorch fixture folder supports (default:
 * DTRAIN_FIXTURES or the repository's fixtures/pytorch) on device D (cpu, cuda,
 * cuda-emu; default DTRAIN_DEVICE, else the CPU) and prints a row per case —
 * case, quantity, max error, tolerance, PASS/FAIL — exiting 1 on any FAIL.
 * The tolerances are the same on every device.
 */
import { parseArgs } from "node:util";
import { defaultFixtureDir } from "../parity/fixtures.ts";
import { groupsSkippedOnDevice, type ParityGroup, parityRows } from "../parity/run.ts";
import { printRows } from "../parity/report.ts";
import { buildNative } from "./build_native.ts";
import { describeBackend, useDevice } from "../tensor/device_choice.ts";
import { installLayout } from "../os/install_layout.ts";

/**
 * Runs the comparisons of the command line `args`; resolves to the exit
 * code (0 when every row passes). Its last line, `SUMMARY …`, is what the
 * device check's table shows.
 *
 * @example
 * ```ts
 * Deno.exit(await parityMain(["fixtures/pytorch", "--device", "cuda"]));
 * ```
 */
export async function parityMain(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      only: { type: "string" },
      device: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(
      "usage: deno task parity [fixture-folder] [--only toy,gpt,sampler,checkpoint,ops,cnn,syncbn] " +
        "[--device cpu|cuda|cuda-emu]",
    );
    return 0;
  }
  if (!installLayout() || installLayout()!.kind === "checkout") buildNative({ quiet: true });
  const device = values.device ?? Deno.env.get("DTRAIN_DEVICE");
  if (device) console.log(`device: ${useDevice(device)} (${describeBackend()})`);
  const dir = positionals[0] ?? defaultFixtureDir();
  const groups = values.only?.split(",").map((s) => s.trim()) as
    | ParityGroup[]
    | undefined;
  const skipped = groupsSkippedOnDevice();
  if (skipped) console.log(`skipped on this device: ${skipped.groups.join(", ")}: ${skipped.why}`);
  const rows = await parityRows(dir, groups);
  if (rows.length === 0) {
    console.error(`No parity fixtures found in ${dir}`);
    console.log(`SUMMARY no parity fixtures found in ${dir}`);
    return 1;
  }
  const failed = printRows(rows);
  const worst = rows.filter((r) => !r.pass).map((r) => `${r.case} ${r.quantity}`).slice(0, 3);
  console.log(
    `SUMMARY ${
      rows.length - failed
    } of ${rows.length} cases within tolerance on ${describeBackend()}` +
      (worst.length ? `; failing: ${worst.join(", ")}` : "") +
      (skipped ? `; not on this device yet: ${skipped.groups.join(", ")}` : ""),
  );
  return failed > 0 ? 1 : 0;
}

if (import.meta.main) Deno.exit(await parityMain(Deno.args));
