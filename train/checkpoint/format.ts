/**
 * The format of one checkpoint directory: its file names, the manifest that
 * is written last (format, version, step, each file's size and sha256), the
 * plain-JSON rule for the state, and the reader that verifies a directory
 * against its manifest before it parses anything.
 */
import { parseBoundedJson } from "../../io/json_bounds.ts";
import { nodeCrypto } from "../../os/node_builtin.ts";
import { join } from "node:path";
import { parseSafetensors, type StTensor } from "../../io/safetensors.ts";
import type { CheckpointIO } from "./io.ts";
import { stepDirName } from "./layout.ts";

/** Written last into a checkpoint; its presence and validity mark the checkpoint complete. */
export const MANIFEST_FILE = "manifest.json";
/** The JSON state (epoch, step, data position, RNG states, config, ...). */
export const STATE_FILE = "state.json";
/** Extension of every tensor file; a CheckpointFile named "model" is stored as model.safetensors. */
export const TENSOR_FILE_EXT = ".safetensors";
const MANIFEST_FORMAT = "dtrain-checkpoint";
const MANIFEST_VERSION = 1;
const FILE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$/;

/** One file as the manifest records it. */
export interface ManifestEntry {
  name: string;
  bytes: number;
  sha256: string;
}

/** The content of manifest.json. */
export interface Manifest {
  format: string;
  version: number;
  step: number;
  /** ISO-8601 time of the save (informational). */
  created: string;
  files: ManifestEntry[];
}

/** A parsed tensor file of a checkpoint. */
export interface CheckpointTensors {
  /** The tensors by name (views into the file's bytes). */
  tensors: Map<string, StTensor>;
  /** The file's string metadata. */
  metadata: Record<string, string>;
}

/** What a verified checkpoint directory holds. */
export interface CheckpointContents {
  step: number;
  /** Tensor files by name without the extension ("model", "optimizer"). */
  files: Map<string, CheckpointTensors>;
  state: Record<string, unknown>;
}

/** Throws unless `step` is a non-negative safe integer. */
export function checkStep(step: unknown): number {
  if (typeof step !== "number" || !Number.isSafeInteger(step) || step < 0) {
    throw new TypeError(`Checkpoint step must be a non-negative integer, got ${String(step)}`);
  }
  return step;
}

/** Throws unless `name` can name a file inside a checkpoint directory. */
export function checkFileName(name: string, what: string): void {
  if (typeof name !== "string" || !FILE_NAME.test(name)) {
    const quoted = JSON.stringify(name);
    throw new TypeError(
      `${what} ${quoted} is not a plain file name: expected 1-200 of [A-Za-z0-9_.-], not starting with "." or "-"`,
    );
  }
}

/** Lowercase hex sha256 of `bytes`. */
export function sha256Hex(bytes: Uint8Array): string {
  return nodeCrypto().createHash("sha256").update(bytes).digest("hex");
}

/** The manifest of `files` (each with its final bytes) for `step`, as the bytes of manifest.json. */
export function encodeManifest(
  step: number,
  files: { name: string; bytes: Uint8Array }[],
): Uint8Array {
  const manifest: Manifest = {
    format: MANIFEST_FORMAT,
    version: MANIFEST_VERSION,
    step,
    created: new Date().toISOString(),
    files: files.map((f) => ({ name: f.name, bytes: f.bytes.length, sha256: sha256Hex(f.bytes) })),
  };
  return new TextEncoder().encode(JSON.stringify(manifest, null, 2) + "\n");
}

/**
 * Parses manifest.json text. `expectedStep` (from the directory name) must
 * match when given. Throws an Error whose message is the problem alone; the
 * caller names the directory.
 */
export function parseManifest(text: string, expectedStep: number | null): Manifest {
  let json: unknown;
  try {
    json = parseBoundedJson(text, MANIFEST_FILE);
  } catch (e) {
    throw new Error(`${MANIFEST_FILE} is not valid JSON (${(e as Error).message})`);
  }
  const m = json as Partial<Manifest> | null;
  if (m === null || typeof m !== "object" || Array.isArray(m)) {
    throw new Error(`${MANIFEST_FILE} is not a JSON object`);
  }
  if (m.format !== MANIFEST_FORMAT) {
    throw new Error(
      `${MANIFEST_FILE} has format ${JSON.stringify(m.format)}, expected "${MANIFEST_FORMAT}"`,
    );
  }
  if (m.version !== MANIFEST_VERSION) {
    const version = JSON.stringify(m.version);
    throw new Error(
      `${MANIFEST_FILE} has version ${version}, but this dtrain reads version ${MANIFEST_VERSION}: ` +
        "load it with the dtrain that wrote it",
    );
  }
  const step = m.step;
  if (typeof step !== "number" || !Number.isSafeInteger(step) || step < 0) {
    throw new Error(
      `${MANIFEST_FILE} has step ${JSON.stringify(step)}, expected a non-negative integer`,
    );
  }
  if (expectedStep !== null && step !== expectedStep) {
    throw new Error(
      `${MANIFEST_FILE} records step ${step} but the directory is ${stepDirName(expectedStep)}`,
    );
  }
  if (!Array.isArray(m.files)) throw new Error(`${MANIFEST_FILE} has no "files" list`);
  const seen = new Set<string>();
  for (const [i, f] of m.files.entries()) checkManifestEntry(f, i, seen);
  if (!seen.has(STATE_FILE)) throw new Error(`${MANIFEST_FILE} does not list ${STATE_FILE}`);
  return { format: m.format, version: m.version, step, created: String(m.created), files: m.files };
}

function checkManifestEntry(f: Partial<ManifestEntry> | null, i: number, seen: Set<string>): void {
  const where = `${MANIFEST_FILE} files[${i}]`;
  if (f === null || typeof f !== "object") throw new Error(`${where} is not an object`);
  if (typeof f.name !== "string" || !FILE_NAME.test(f.name) || f.name === MANIFEST_FILE) {
    throw new Error(`${where} names ${JSON.stringify(f.name)}, which is not a plain file name`);
  }
  if (f.name !== STATE_FILE && !f.name.endsWith(TENSOR_FILE_EXT)) {
    throw new Error(
      `${where} names ${f.name}, expected ${STATE_FILE} or a *${TENSOR_FILE_EXT} file`,
    );
  }
  if (seen.has(f.name)) throw new Error(`${where} lists ${f.name} twice`);
  seen.add(f.name);
  if (typeof f.bytes !== "number" || !Number.isSafeInteger(f.bytes) || f.bytes < 0) {
    throw new Error(
      `${where} (${f.name}) has size ${JSON.stringify(f.bytes)}, expected a byte count`,
    );
  }
  if (typeof f.sha256 !== "string" || !/^[0-9a-f]{64}$/.test(f.sha256)) {
    const sha = JSON.stringify(f.sha256);
    throw new Error(`${where} (${f.name}) has sha256 ${sha}, expected 64 lowercase hex digits`);
  }
}

/**
 * Reads the checkpoint in `dir` and verifies it: the manifest, every listed
 * file's size and sha256, then each file's own format. Throws an Error whose
 * message is the problem alone (the caller names the directory).
 */
export function readCheckpointDir(
  io: CheckpointIO,
  dir: string,
  expectedStep: number | null,
): CheckpointContents {
  const manifest = parseManifest(readManifestText(io, dir), expectedStep);
  const files = new Map<string, CheckpointTensors>();
  let state: Record<string, unknown> = {};
  for (const entry of manifest.files) {
    const bytes = readListedFile(io, join(dir, entry.name), entry.name);
    if (bytes.length !== entry.bytes) {
      throw new Error(
        `${entry.name} is ${bytes.length} bytes but ${MANIFEST_FILE} records ${entry.bytes} (truncated or overwritten after the save)`,
      );
    }
    const sha = sha256Hex(bytes);
    if (sha !== entry.sha256) {
      const [got, want] = [sha.slice(0, 16), entry.sha256.slice(0, 16)];
      throw new Error(
        `${entry.name} has sha256 ${got}… but ${MANIFEST_FILE} records ${want}… (its content changed after the save)`,
      );
    }
    if (entry.name === STATE_FILE) {
      state = parseState(bytes);
    } else {
      files.set(entry.name.slice(0, -TENSOR_FILE_EXT.length), parseSafetensors(bytes, entry.name));
    }
  }
  return { step: manifest.step, files, state };
}

/** The manifest's text; its absence means the save never finished. */
export function readManifestText(io: CheckpointIO, dir: string): string {
  let bytes: Uint8Array;
  try {
    bytes = io.readFile(join(dir, MANIFEST_FILE));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      throw new Error(
        io.exists(dir)
          ? `it has no ${MANIFEST_FILE}: the save did not finish, or this is not a dtrain checkpoint`
          : "the directory does not exist",
      );
    }
    throw new Error(`cannot read ${MANIFEST_FILE}: ${(e as Error).message}`);
  }
  return new TextDecoder().decode(bytes);
}

function readListedFile(io: CheckpointIO, path: string, name: string): Uint8Array {
  try {
    return io.readFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      throw new Error(`${name}, listed in ${MANIFEST_FILE}, is missing`);
    }
    throw new Error(`cannot read ${name}: ${(e as Error).message}`);
  }
}

function parseState(bytes: Uint8Array): Record<string, unknown> {
  let state: unknown;
  try {
    state = parseBoundedJson(new TextDecoder("utf-8", { fatal: true }).decode(bytes), STATE_FILE);
  } catch (e) {
    throw new Error(`${STATE_FILE} is not valid UTF-8 JSON (${(e as Error).message})`);
  }
  if (state === null || typeof state !== "object" || Array.isArray(state)) {
    throw new Error(`${STATE_FILE} is not a JSON object`);
  }
  return state as Record<string, unknown>;
}

/**
 * Throws a TypeError naming the first value of `value` that JSON would not
 * bring back unchanged (NaN, a bigint, undefined, a Map, a typed array, a
 * cycle): a checkpoint's state must load back exactly.
 */
export function checkPlainJson(value: unknown, path = "state", parents: object[] = []): void {
  const fail = (what: string): never => {
    throw new TypeError(
      `Checkpoint ${path} is ${what}; the state must be plain JSON (finite numbers, strings, booleans, null, arrays, plain objects) so that it loads back exactly. Encode it first (a bigint as a decimal string, tensor data as a checkpoint file)`,
    );
  };
  if (value === null || typeof value === "string" || typeof value === "boolean") return;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) fail(String(value));
    return;
  }
  if (value === undefined) return fail("undefined");
  if (typeof value !== "object") return fail(`a ${typeof value}`);
  if (parents.includes(value)) fail("a reference to one of its own parents (a cycle)");
  const inner = [...parents, value];
  if (Array.isArray(value)) {
    // An index loop, not forEach: a hole would become null in JSON.
    for (let i = 0; i < value.length; i++) checkPlainJson(value[i], `${path}[${i}]`, inner);
    return;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    fail(`a ${value.constructor?.name ?? "non-plain object"}`);
  }
  for (const [k, v] of Object.entries(value)) checkPlainJson(v, `${path}.${k}`, inner);
}
