/**
 * The single file's command entry (bundled as js/dtrain.js): checks the
 * extraction folder against its verification stamp, then runs `dtrain`.
 */
import { main } from "../cli.ts";
import { checkExtraction } from "./manifest.ts";
import { dtrainRuntime } from "../os/install_layout.ts";

const runtime = dtrainRuntime();
try {
  if (runtime?.kind === "single-file") checkExtraction(runtime.root);
} catch (e) {
  console.error(`dtrain: ${(e as Error).message}`);
  Deno.exit(1);
}
Deno.exit(await main(Deno.args));
