/**
 * `dtrain exec script [args…]`: runs a script as one plain process with
 * this dtrain's own Deno, its config (the script may import "dtrain") and
 * its native libraries (DTRAIN_LIB_DIR), without a launcher or a rank
 * bootstrap — for single-process tools and checks where no Deno is
 * installed (the single file carries one). Exit status and signals pass
 * through.
 */
import { resolve } from "node:path";
import { installLayout } from "../os/install_layout.ts";
import { waitForwardingSignals } from "../os/forward_signals.ts";
import { UsageError } from "./options.ts";

/** Usage of the verb. */
export const EXEC_HELP = `Usage: dtrain exec script.(ts|js) [script args…]

Runs the script in one process with this dtrain's Deno, its "dtrain" import map and its native
libraries: no launcher, no ranks. Useful where no Deno is installed (the single file carries one).`;

/**
 * Runs `args[0]` with the rest as its arguments; resolves to its exit code
 * (128+N when a signal ended it).
 *
 * @example
 * ```ts
 * Deno.exit(await execMain(["tools/inspect.ts", "--verbose"]));
 * ```
 */
export async function execMain(args: string[]): Promise<number> {
  const [script, ...rest] = args;
  if (script === undefined || script === "--help" || script === "-h") {
    console.log(EXEC_HELP);
    return script === undefined ? 2 : 0;
  }
  try {
    if (!Deno.statSync(script).isFile) throw new Error("not a file");
  } catch {
    throw new UsageError(`exec: no script at ${resolve(script)}`);
  }
  const layout = installLayout();
  if (!layout) throw new Error("exec: this dtrain was not loaded from files on disk");
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", layout.config, resolve(script), ...rest],
    env: { DTRAIN_LIB_DIR: Deno.env.get("DTRAIN_LIB_DIR") || layout.libDir },
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  return await waitForwardingSignals(child);
}
