/**
 * What every rank process preloads (`deno run --preload`, before the user's script): when dtrain
 * runs from the single file, its extraction folder is checked against the verification stamp first
 * (a file altered after the command started is refused before any native library loads); then the
 * rank bootstrap (rank_bootstrap.ts) runs. Both are imported dynamically, so nothing of the
 * bootstrap is evaluated before the check, and a checkout loads no hashing code.
 */
import { installLayout } from "../os/install_layout.ts";

if (installLayout()?.kind === "single-file") {
  (await import("../os/single_file_manifest.ts")).checkOwnExtractionOrExit();
}
await import("./rank_bootstrap.ts");
