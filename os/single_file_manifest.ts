/**
 * The single file's manifest (every packed file with its size and sha256, and
 * each native library's build hash) and the check of an extraction folder
 * against it: one full sha256 pass right after unpacking, recorded in a stamp;
 * on every later start a stat of each file compared with the stamp, and a
 * full re-hash only of a file whose stat changed.
 */
import { createHash } from "node:crypto";
import { join } from "node:path";
import { installLayout } from "./install_layout.ts";

/** The manifest's name inside the extraction folder. */
export const MANIFEST_FILE = "manifest.json";
/** Written once every file matched its sha256; its absence means "not verified". */
export const STAMP_FILE = ".verified";

/** One packed file. */
export interface PackedFile {
  /** relative to the extraction folder, with "/" separators */
  path: string;
  bytes: number;
  sha256: string;
}

/** What the single file holds. */
export interface Manifest {
  format: 1;
  dtrainVersion: string;
  denoVersion: string;
  /** native library file name -> the build hash it was compiled with (dt_build_hash) */
  libraries: Record<string, string>;
  files: PackedFile[];
}

/** A file's stat as it was when its sha256 was checked. */
interface StampEntry {
  bytes: number;
  mtimeMs: number;
  ino: number;
}
type Stamp = Record<string, StampEntry>;

/** The sha256 of a file, read in 1 MiB pieces. */
export function sha256File(path: string): string {
  const hash = createHash("sha256");
  const file = Deno.openSync(path);
  try {
    const buf = new Uint8Array(1 << 20);
    for (let n = file.readSync(buf); n !== null; n = file.readSync(buf)) {
      hash.update(buf.subarray(0, n));
    }
  } finally {
    file.close();
  }
  return hash.digest("hex");
}

/** An extraction folder whose files do not match the manifest. */
export class DamagedExtractionError extends Error {
  /** the folder checked */
  readonly root: string;
  /** what is wrong, e.g. "lib/libdtrain_cpu.so has sha256 …, the manifest says …" */
  readonly what: string;
  constructor(root: string, what: string) {
    super(
      `The single file's extraction ${root} is damaged: ${what}. ` +
        `Delete ${root} and start dtrain again to unpack it afresh.`,
    );
    this.name = "DamagedExtractionError";
    this.root = root;
    this.what = what;
  }
}

function damaged(root: string, what: string): DamagedExtractionError {
  return new DamagedExtractionError(root, what);
}

function readJson(root: string, name: string): unknown {
  try {
    return JSON.parse(Deno.readTextFileSync(join(root, name)));
  } catch (e) {
    throw damaged(root, `cannot read ${name} (${(e as Error).message})`);
  }
}

/** Reads the manifest of an extraction folder. */
export function readManifest(root: string): Manifest {
  const m = readJson(root, MANIFEST_FILE) as Manifest;
  if (m?.format !== 1 || !Array.isArray(m.files)) {
    throw damaged(root, `${MANIFEST_FILE} is not a format-1 manifest`);
  }
  return m;
}

function stampOf(info: Deno.FileInfo): StampEntry {
  return { bytes: info.size, mtimeMs: info.mtime?.getTime() ?? 0, ino: info.ino ?? 0 };
}

function statFile(root: string, rel: string): Deno.FileInfo {
  try {
    return Deno.statSync(join(root, rel));
  } catch (e) {
    throw damaged(root, `${rel} is missing (${(e as Error).message})`);
  }
}

function checkContent(root: string, file: PackedFile, info: Deno.FileInfo): void {
  if (info.size !== file.bytes) {
    throw damaged(root, `${file.path} has ${info.size} bytes, the manifest says ${file.bytes}`);
  }
  const sum = sha256File(join(root, file.path));
  if (sum !== file.sha256) {
    throw damaged(root, `${file.path} has sha256 ${sum}, the manifest says ${file.sha256}`);
  }
}

/**
 * Hashes every file of the manifest and, when all match, writes the stamp
 * (under a temporary name, then renamed). Run once, right after unpacking
 * and before the folder is published.
 *
 * @example
 * ```ts
 * verifyExtraction("/home/me/.cache/dtrain/.unpack-x1y2"); // throws naming the first bad file
 * ```
 */
export function verifyExtraction(root: string): void {
  const manifest = readManifest(root);
  const stamp: Stamp = {};
  for (const file of manifest.files) {
    const info = statFile(root, file.path);
    checkContent(root, file, info);
    stamp[file.path] = stampOf(info);
  }
  const tmp = join(root, `${STAMP_FILE}.tmp-${Deno.pid}`);
  Deno.writeTextFileSync(tmp, JSON.stringify(stamp));
  Deno.renameSync(tmp, join(root, STAMP_FILE));
}

/** Stamps read by this process, by extraction folder (they never change once written). */
const stamps = new Map<string, Stamp>();

function readStamp(root: string): Stamp {
  let stamp = stamps.get(root);
  if (!stamp) {
    stamp = readJson(root, STAMP_FILE) as Stamp;
    stamps.set(root, stamp);
  }
  return stamp;
}

/**
 * The cheap check of one extracted file on every start: its stat must match
 * the stamp; a file whose stat changed is hashed again and must still match
 * the manifest.
 *
 * @example
 * ```ts
 * checkExtractedFile(root, "lib/libdtrain_cpu.so"); // throws when the library was altered
 * ```
 */
export function checkExtractedFile(root: string, rel: string): void {
  const entry = readStamp(root)[rel];
  if (!entry) throw damaged(root, `${rel} is not in its verification stamp ${STAMP_FILE}`);
  const info = statFile(root, rel);
  const now = stampOf(info);
  if (now.bytes === entry.bytes && now.mtimeMs === entry.mtimeMs && now.ino === entry.ino) return;
  const file = readManifest(root).files.find((f) => f.path === rel);
  if (!file) throw damaged(root, `${rel} is not in ${MANIFEST_FILE}`);
  checkContent(root, file, info);
}

/** checkExtractedFile() for every file of the manifest. */
export function checkExtraction(root: string): void {
  for (const file of readManifest(root).files) checkExtractedFile(root, file.path);
}

/**
 * What the single file's command entry (single_file/entry.ts) and every rank's
 * preloaded entry (launch/rank_main.ts) run before anything else: when this dtrain runs from an extraction folder,
 * checkExtraction() of it, or the reason printed and exit code 1. A checkout
 * has nothing to check.
 */
export function checkOwnExtractionOrExit(): void {
  const layout = installLayout();
  if (layout?.kind !== "single-file") return;
  try {
    checkExtraction(layout.root);
  } catch (e) {
    console.error(`dtrain: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
