/**
 * The program `deno compile` turns into dist/dtrain when a Deno runtime
 * (denort) is at hand: it carries the self-extracting file's payload
 * (payload.tar.gz and payload.json beside this module, embedded with
 * --include), unpacks it as single_file/header.sh does, and runs dtrain from there,
 * passing its arguments, exit code and SIGINT/SIGTERM/SIGHUP through.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureUnpacked, type PayloadInfo } from "./unpack.ts";
import { SFX_FILE_ENV } from "../os/install_layout.ts";
import { waitForwardingSignals } from "../os/forward_signals.ts";

// Why a second runtime inside: ranks must run the user's TypeScript with
// `deno run --preload` (the script stays the main module) and a config that
// maps "dtrain"; a compiled binary can only run its own embedded program.

async function run(): Promise<number> {
  const here = (name: string) => fileURLToPath(new URL(name, import.meta.url));
  const info = JSON.parse(Deno.readTextFileSync(here("payload.json"))) as PayloadInfo;
  const self = Deno.execPath();
  let dir: string;
  try {
    dir = await ensureUnpacked(here("payload.tar.gz"), info, {
      env: (n) => Deno.env.get(n),
      single: self,
    });
  } catch (e) {
    console.error(`dtrain: ${(e as Error).message}`);
    return 1;
  }
  const child = new Deno.Command(join(dir, "bin", "deno"), {
    args: [
      "run",
      "-A",
      "--config",
      join(dir, "deno.json"),
      join(dir, "js", "dtrain.js"),
      ...Deno.args,
    ],
    env: { [SFX_FILE_ENV]: self, DENO_DIR: join(dir, "deno_dir"), DENO_NO_UPDATE_CHECK: "1" },
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  return await waitForwardingSignals(child);
}

Deno.exit(await run());
