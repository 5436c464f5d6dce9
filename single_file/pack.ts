/**
 * Packing a staged single-file tree: its manifest (size and sha256 of every
 * file), the payload (a deterministic ustar archive, gzip -6: gzip is on
 * every Linux and in Deno's DecompressionStream, zstd is not), and the
 * self-extracting file (single_file/header.sh with its fields filled, then the payload).
 */
import { createHash } from "node:crypto";
import { join, relative } from "node:path";
import {
  type Manifest,
  MANIFEST_FILE,
  type PackedFile,
  sha256File,
} from "../os/single_file_manifest.ts";

function listFiles(dir: string, root = dir): string[] {
  const out: string[] = [];
  for (const e of Deno.readDirSync(dir)) {
    const path = join(dir, e.name);
    if (e.isDirectory) out.push(...listFiles(path, root));
    else if (e.isFile) out.push(relative(root, path));
    else throw new Error(`Cannot pack ${path}: only files and folders can be packed`);
  }
  return out.sort();
}

/**
 * Writes manifest.json for every file under `root` (except itself).
 *
 * @example
 * ```ts
 * writeManifest("/tmp/stage/root", { dtrainVersion: "0.1.0", denoVersion: "2.9.6", libraries: {} });
 * ```
 */
export function writeManifest(
  root: string,
  facts: Omit<Manifest, "format" | "files">,
): Manifest {
  const files: PackedFile[] = listFiles(root)
    .filter((p) => p !== MANIFEST_FILE)
    .map((path) => ({
      path,
      bytes: Deno.statSync(join(root, path)).size,
      sha256: sha256File(join(root, path)),
    }));
  const manifest: Manifest = { format: 1, ...facts, files };
  Deno.writeTextFileSync(join(root, MANIFEST_FILE), JSON.stringify(manifest, null, 2) + "\n");
  return manifest;
}

/** What packPayload() wrote. */
export interface Payload {
  path: string;
  bytes: number;
  sha256: string;
  /** bytes of the files inside */
  unpackedBytes: number;
}

/**
 * Archives `root` into `out` (tar | gzip -<level> -n). Names, owners and
 * times are fixed, so the same tree always gives the same bytes (and cache
 * folder). Level 6 is gzip's default; 1 packs ~3x faster, ~15% larger.
 */
export async function packPayload(root: string, out: string, level = 6): Promise<Payload> {
  if (!Number.isInteger(level) || level < 1 || level > 9) {
    throw new RangeError(`gzip level ${level}: expected a whole number from 1 to 9`);
  }
  const files = listFiles(root);
  const unpackedBytes = files.reduce((n, f) => n + Deno.statSync(join(root, f)).size, 0);
  const script =
    'tar --format=ustar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$1" -cf - . | gzip -"$3" -n > "$2"';
  const r = await new Deno.Command("sh", {
    args: ["-c", `set -e; ${script}`, "sh", root, out, String(level)],
    stdout: "inherit",
    stderr: "piped",
  }).output();
  if (!r.success) {
    throw new Error(
      `Cannot pack ${root} into ${out} (tar | gzip exited ${r.code}): ${
        new TextDecoder().decode(r.stderr).trim()
      }`,
    );
  }
  return { path: out, bytes: Deno.statSync(out).size, sha256: sha256File(out), unpackedBytes };
}

/** The fields of single_file/header.sh, as build_single.ts fills them. */
export interface HeaderFields {
  version: string;
  payloadId: string;
  unpackedMb: number;
}

/** Width of the offset field: the header's length must not depend on its value. */
const OFFSET_WIDTH = 12;

/**
 * single_file/header.sh with its fields filled in; the payload starts right after it
 * (`tail -c +<offset>` is 1-based, so offset = header bytes + 1).
 */
export function fillHeader(template: string, fields: HeaderFields): Uint8Array {
  const text = template
    .replaceAll("@VERSION@", fields.version)
    .replaceAll("@PAYLOAD_ID@", fields.payloadId)
    .replaceAll("@UNPACKED_MB@", String(fields.unpackedMb));
  const placeholder = "@OFFSET@";
  if (text.split(placeholder).length !== 2) {
    throw new Error(`single_file/header.sh must contain ${placeholder} exactly once`);
  }
  const length = new TextEncoder().encode(text.replace(placeholder, "x".repeat(OFFSET_WIDTH)))
    .length;
  const offset = String(length + 1).padEnd(OFFSET_WIDTH, " ");
  const header = new TextEncoder().encode(text.replace(placeholder, offset));
  if (header.length !== length) {
    throw new Error("single_file/header.sh: the offset field changed length");
  }
  return header;
}

/**
 * Writes header + payload to `out` (under a temporary name, then renamed),
 * executable; returns its size and sha256.
 */
export async function writeSelfExtracting(
  header: Uint8Array,
  payload: string,
  out: string,
): Promise<{ bytes: number; sha256: string }> {
  const tmp = `${out}.tmp-${Deno.pid}`;
  const file = await Deno.open(tmp, { write: true, create: true, truncate: true, mode: 0o755 });
  const hash = createHash("sha256");
  try {
    const write = async (bytes: Uint8Array) => {
      hash.update(bytes);
      for (let off = 0; off < bytes.length;) off += await file.write(bytes.subarray(off));
    };
    await write(header);
    const src = await Deno.open(payload);
    for await (const piece of src.readable) await write(piece);
  } finally {
    file.close();
  }
  Deno.chmodSync(tmp, 0o755);
  Deno.renameSync(tmp, out);
  return { bytes: Deno.statSync(out).size, sha256: hash.digest("hex") };
}
