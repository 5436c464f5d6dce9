/**
 * Run by the single file's start-up right after unpacking, before the folder
 * is published (bundled as js/verify.js): hashes every file against the
 * manifest and writes the verification stamp.
 *
 *   deno run -A --no-config js/verify.js <unpacked folder> <the single file>
 */
import { DamagedExtractionError, verifyExtraction } from "../os/single_file_manifest.ts";

const [root, single] = Deno.args;
if (!root) {
  console.error("usage: verify.js <unpacked folder> [<the single file>]");
  Deno.exit(2);
}
try {
  verifyExtraction(root);
} catch (e) {
  const detail = e instanceof DamagedExtractionError ? e.what : (e as Error).message;
  console.error(
    `dtrain: the single file ${single ?? ""} is damaged: its unpacked contents do not match ` +
      `its manifest (${detail}). Copy the file again from where it was built.`,
  );
  Deno.exit(1);
}
