/**
 * The single file's rank bootstrap (bundled as js/rank_main.js, preloaded
 * into every rank): checks the extraction folder against its verification
 * stamp (a file altered after the command started is refused before any
 * native library loads), then runs launch/rank_main.ts.
 */
import { checkOwnExtractionOrExit } from "./manifest.ts";

checkOwnExtractionOrExit();
await import("../launch/rank_main.ts");
