/**
 * Unpacking the payload in TypeScript, for the `deno compile` build (which
 * has no sh header): the same cache folder, temporary folder, sha256 check
 * and one-rename publication as single_file/header.sh, with the same error advice.
 */
import { join } from "node:path";
import { cacheFolder } from "../os/cache_folder.ts";
import { readTar } from "./tar_reader.ts";
import {
  DamagedExtractionError,
  STAMP_FILE,
  verifyExtraction,
} from "../os/single_file_manifest.ts";

/** What build_single.ts writes beside the payload. */
export interface PayloadInfo {
  /** "<dtrain version>-<first 16 hex of the payload's sha256>": the extraction folder's name */
  id: string;
  /** bytes of the unpacked files */
  unpackedBytes: number;
}

type Lookup = (name: string) => string | undefined;

/** The cache folder that holds extractions (os/cache_folder.ts). */
export { cacheFolder };

function whyFailed(e: unknown, cache: string, mb: number): Error {
  const text = (e as Error).message;
  const full = /No space|os error 28|quota|os error 122/i.test(text);
  const readOnly = /Read-only|os error 30|Permission denied|os error 13/i.test(text);
  const why = full
    ? `the cache folder ${cache} is full`
    : readOnly
    ? `cannot write to the cache folder ${cache} (read-only?)`
    : `cannot unpack into the cache folder ${cache}`;
  return new Error(
    `${why}: ${text}. Set DTRAIN_CACHE to a writable folder with ${mb} MB free (it is ${cache})`,
    { cause: e },
  );
}

async function unpackTo(payload: string, dest: string): Promise<void> {
  const file = await Deno.open(payload);
  const stream = file.readable.pipeThrough(new DecompressionStream("gzip"));
  for await (const entry of readTar(stream)) {
    const path = join(dest, entry.name);
    if (entry.type === "dir") {
      Deno.mkdirSync(path, { recursive: true, mode: 0o755 });
      continue;
    }
    const out = Deno.openSync(path, { write: true, createNew: true, mode: entry.mode || 0o644 });
    try {
      for await (const piece of entry.data) {
        for (let off = 0; off < piece.length;) off += out.writeSync(piece.subarray(off));
      }
    } finally {
      out.close();
    }
    Deno.chmodSync(path, entry.mode || 0o644); // the umask may have cut the exec bits
  }
}

/**
 * Returns the verified extraction folder of `payload`, unpacking it first
 * when no start has done so yet. Safe when several processes start at once:
 * each unpacks into its own temporary folder; the first rename wins and the
 * others discard theirs.
 *
 * @example
 * ```ts
 * const dir = await ensureUnpacked("payload.tar.gz", info, {
 *   env: (n) => Deno.env.get(n),
 *   single: Deno.execPath(),
 * });
 * ```
 */
export async function ensureUnpacked(
  payload: string,
  info: PayloadInfo,
  opts: { env: Lookup; single: string },
): Promise<string> {
  const { env, single } = opts;
  const cache = cacheFolder(env);
  const dir = join(cache, info.id);
  const verified = () => {
    try {
      return Deno.statSync(join(dir, STAMP_FILE)).isFile;
    } catch {
      return false;
    }
  };
  if (verified()) return dir;
  const mb = Math.ceil(info.unpackedBytes / 2 ** 20);
  let tmp: string;
  try {
    Deno.mkdirSync(cache, { recursive: true });
    tmp = Deno.makeTempDirSync({ dir: cache, prefix: ".unpack-" });
  } catch (e) {
    throw whyFailed(e, cache, mb);
  }
  try {
    try {
      await unpackTo(payload, tmp);
    } catch (e) {
      throw whyFailed(e, cache, mb);
    }
    try {
      verifyExtraction(tmp);
    } catch (e) {
      if (!(e instanceof DamagedExtractionError)) throw e;
      throw new Error(
        `the single file ${single} is damaged: its unpacked contents do not match its ` +
          `manifest (${e.what}). Copy the file again from where it was built.`,
      );
    }
    try {
      Deno.renameSync(tmp, dir);
    } catch (e) {
      // Another start published first (rename onto a non-empty folder fails): use its copy.
      if (!verified()) throw whyFailed(e, cache, mb);
    }
  } finally {
    try {
      Deno.removeSync(tmp, { recursive: true });
    } catch { /* published under its final name */ }
  }
  return dir;
}
