/**
 * The single file's command entry (bundled as js/dtrain.js): checks the
 * extraction folder against its verification stamp, then runs `dtrain`.
 */
import { exitOnStrayErrors, main } from "../cli.ts";
import { checkOwnExtractionOrExit } from "../os/single_file_manifest.ts";

checkOwnExtractionOrExit();
exitOnStrayErrors();
Deno.exit(await main(Deno.args));
