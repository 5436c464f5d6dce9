/**
 * The atomic write of one checkpoint (the protocol and crash windows are
 * described in manager.ts): temporary directory, manifest last, renames,
 * the `latest` pointer; the rollback after a failed write; and the removal of
 * what interrupted saves left behind.
 */
import { basename, join } from "node:path";
import { serializeSafetensors, type StTensor } from "../../io/safetensors.ts";
import { type CheckpointIO, describeError } from "./io.ts";
import {
  checkFileName,
  checkPlainJson,
  checkStep,
  encodeManifest,
  MANIFEST_FILE,
  STATE_FILE,
  TENSOR_FILE_EXT,
} from "./format.ts";
import {
  asideName,
  asideStep,
  isLeftover,
  LATEST_FILE,
  type Pointer,
  readPointer,
  stepDirName,
  tempName,
  writerMayBeActive,
  writerPid,
} from "./layout.ts";

/** Where and how a save writes. */
export interface SaveContext {
  root: string;
  io: CheckpointIO;
  fsync: boolean;
  warn: (message: string) => void;
  /** told before each file is written: what, and the bytes written so far of the total */
  progress?: (stage: string, done: number, total: number) => void;
}

/** What a save is given: tensor files (name without extension), a plain-JSON state and the step. */
export interface SaveInput {
  step: number;
  files: { name: string; tensors: Map<string, StTensor>; metadata?: Record<string, string> }[];
  state: Record<string, unknown>;
}

interface Paths {
  finalDir: string;
  tmpDir: string;
  tmpPointer: string;
  aside: string;
}

/**
 * Writes `input` as `<root>/step-<step>` and points `latest` at it. Throws
 * TypeError for bad input before touching the disk; any file-system failure
 * is rolled back and rethrown as an Error naming the checkpoint, the stage
 * and the cause. Returns the checkpoint's directory.
 */
export function writeCheckpoint(ctx: SaveContext, input: SaveInput): string {
  return commitCheckpoint(ctx, encodeCheckpoint(input));
}

/**
 * A checkpoint encoded for writing: its files' final bytes, in their own
 * buffers (copies of the tensors, so later in-place updates cannot change
 * what is written). The snapshot an asynchronous save hands to its worker.
 */
export interface EncodedCheckpoint {
  step: number;
  /** file names with extension, tensor files first and state.json last */
  files: { name: string; bytes: Uint8Array }[];
}

/** Checks and encodes `input` (TypeError on bad input); touches no file. */
export function encodeCheckpoint(input: SaveInput): EncodedCheckpoint {
  return { step: checkStep(input.step), files: encodeFiles(input) };
}

/**
 * Writes an encoded checkpoint by the protocol in manager.ts, hashing each
 * file for the manifest; failures as writeCheckpoint's.
 */
export function commitCheckpoint(ctx: SaveContext, encoded: EncodedCheckpoint): string {
  const { step, files } = encoded;
  const { io, root } = ctx;
  const name = stepDirName(step);
  const paths: Paths = {
    finalDir: join(root, name),
    tmpDir: join(root, tempName(name)),
    tmpPointer: join(root, tempName(LATEST_FILE)),
    aside: join(root, asideName(name)),
  };
  const syncDir = (path: string) => ctx.fsync && io.fsyncDir(path);
  // With syncAll the new files, their directory and the new pointer are flushed together, once all
  // are written (the file system commits them in one go); without it, each as it is written.
  // Either way all of them are durable before the first rename.
  const together = ctx.fsync && io.syncAll !== undefined;
  const syncEach = ctx.fsync && !together;
  const done = { movedAside: false, renamed: false };
  let previous: Pointer = { kind: "missing" };
  let stage = `creating ${root}`;
  try {
    io.mkdir(root, true);
    stage = `reading ${LATEST_FILE}`;
    previous = readPointer(io, root);
    stage = "cleaning up after interrupted saves";
    cleanLeftovers(ctx);
    stage = `creating ${basename(paths.tmpDir)}`;
    io.mkdir(paths.tmpDir, false);
    const total = files.reduce((a, f) => a + f.bytes.length, 0);
    let written = 0;
    for (const f of files) {
      stage = `writing ${f.name}`;
      ctx.progress?.(stage, written, total);
      io.writeFile(join(paths.tmpDir, f.name), f.bytes, syncEach);
      written += f.bytes.length;
    }
    ctx.progress?.("committing", written, total);
    stage = `writing ${MANIFEST_FILE}`;
    io.writeFile(join(paths.tmpDir, MANIFEST_FILE), encodeManifest(step, files), syncEach);
    if (syncEach) {
      stage = `syncing ${basename(paths.tmpDir)}`;
      syncDir(paths.tmpDir);
    }
    stage = `writing the new ${LATEST_FILE} pointer`;
    io.writeFile(paths.tmpPointer, new TextEncoder().encode(`${name}\n`), syncEach);
    if (together) {
      stage = `syncing ${basename(paths.tmpDir)}, its files and the new ${LATEST_FILE} pointer`;
      io.syncAll!([
        ...files.map((f) => join(paths.tmpDir, f.name)),
        join(paths.tmpDir, MANIFEST_FILE),
        paths.tmpDir,
        paths.tmpPointer,
      ]);
    }
    if (io.exists(paths.finalDir)) {
      stage = `moving the existing ${name} aside`;
      io.rename(paths.finalDir, paths.aside);
      done.movedAside = true;
    }
    stage = `renaming ${basename(paths.tmpDir)} to ${name}`;
    io.rename(paths.tmpDir, paths.finalDir);
    done.renamed = true;
    stage = `syncing ${root}`;
    syncDir(root);
    stage = `replacing ${LATEST_FILE}`;
    io.rename(paths.tmpPointer, join(root, LATEST_FILE));
  } catch (e) {
    const undo = rollBack(ctx, done, paths);
    const cleanup = undo.length === 0
      ? ""
      : ` Cleaning up also failed (${undo.join("; ")}); the next save removes what is left.`;
    throw new Error(
      `Cannot save checkpoint ${name} in ${root}: ${stage} failed: ${describeError(e)}. ` +
        `${describePrevious(previous)}; the training state in memory is unchanged, ` +
        `so training can go on and save again.${cleanup}`,
      { cause: e },
    );
  }
  try {
    syncDir(root);
  } catch (e) {
    const cause = describeError(e);
    throw new Error(
      `Checkpoint ${name} was written in ${root} and ${LATEST_FILE} names it, but syncing the directory failed: ` +
        `${cause}. A power loss could still undo this save; the earlier checkpoints are untouched.`,
      { cause: e },
    );
  }
  if (done.movedAside) removeQuietly(ctx, paths.aside, `the replaced copy of ${name}`);
  return paths.finalDir;
}

/** The files of `input` as bytes, tensor files first and state.json last. */
function encodeFiles(input: SaveInput): { name: string; bytes: Uint8Array }[] {
  if (!Array.isArray(input.files)) throw new TypeError("Checkpoint payload.files must be an array");
  const out: { name: string; bytes: Uint8Array }[] = [];
  const seen = new Set<string>();
  for (const f of input.files) {
    checkFileName(f.name, "Checkpoint file name");
    if (f.name.endsWith(TENSOR_FILE_EXT)) {
      const quoted = JSON.stringify(f.name);
      throw new TypeError(
        `Checkpoint file name ${quoted} must leave out "${TENSOR_FILE_EXT}": it is added on save`,
      );
    }
    if (seen.has(f.name)) {
      throw new TypeError(
        `Checkpoint file name ${JSON.stringify(f.name)} appears twice in the payload`,
      );
    }
    seen.add(f.name);
    let bytes: Uint8Array;
    try {
      bytes = serializeSafetensors(f.tensors, f.metadata);
    } catch (e) {
      throw new TypeError(`Cannot encode checkpoint file ${f.name}: ${describeError(e)}`, {
        cause: e,
      });
    }
    out.push({ name: f.name + TENSOR_FILE_EXT, bytes });
  }
  const state = input.state;
  if (state === null || typeof state !== "object" || Array.isArray(state)) {
    const got = Array.isArray(state) ? "an array" : String(state);
    throw new TypeError(`Checkpoint payload.state must be a JSON object, got ${got}`);
  }
  checkPlainJson(state);
  out.push({
    name: STATE_FILE,
    bytes: new TextEncoder().encode(JSON.stringify(state, null, 2) + "\n"),
  });
  return out;
}

/** Undoes a failed save's renames and removes its temporary files; returns what could not be undone. */
function rollBack(
  ctx: SaveContext,
  done: { movedAside: boolean; renamed: boolean },
  paths: Paths,
): string[] {
  const { io } = ctx;
  const problems: string[] = [];
  const attempt = (what: string, action: () => void) => {
    try {
      action();
    } catch (e) {
      problems.push(`${what}: ${describeError(e)}`);
    }
  };
  const name = basename(paths.finalDir);
  if (done.renamed) {
    attempt(`moving the new ${name} away`, () => io.rename(paths.finalDir, paths.tmpDir));
  }
  if (done.movedAside) {
    attempt(`restoring the old ${name}`, () => io.rename(paths.aside, paths.finalDir));
  }
  for (const path of [paths.tmpDir, paths.tmpPointer]) {
    attempt(`removing ${basename(path)}`, () => {
      if (io.exists(path)) io.remove(path);
    });
  }
  if ((done.renamed || done.movedAside) && ctx.fsync) {
    attempt(`syncing ${ctx.root}`, () => io.fsyncDir(ctx.root));
  }
  return problems;
}

function describePrevious(previous: Pointer): string {
  if (previous.kind === "ok") {
    return `The previous checkpoint ${previous.name} is intact and ${LATEST_FILE} still names it`;
  }
  return "The earlier checkpoints, if any, are intact";
}

/**
 * Removes the leftovers of interrupted saves (`.tmp-*` of this module's own
 * names) and settles aside copies: removed when their step's directory is in
 * place, otherwise renamed back to it (the save replacing it never finished).
 * A name whose writer (the pid in it) is still running is left alone: that
 * save may be in progress.
 */
export function cleanLeftovers(ctx: SaveContext): void {
  const entries = ctx.io.readDir(ctx.root);
  const names = new Set(entries.map((e) => e.name));
  for (const e of entries) {
    const path = join(ctx.root, e.name);
    const step = asideStep(e.name);
    const pid = writerPid(e.name);
    if (pid !== null && writerMayBeActive(pid)) continue;
    if (isLeftover(e.name)) {
      ctx.warn(`Removing ${path}, left by an interrupted checkpoint save`);
      removeQuietly(ctx, path, "a leftover of an interrupted save");
    } else if (step !== null && names.has(stepDirName(step))) {
      removeQuietly(ctx, path, `the replaced copy of ${stepDirName(step)}`);
    } else if (step !== null) {
      ctx.warn(
        `Restoring ${stepDirName(step)} from ${e.name}: a save replacing it was interrupted`,
      );
      ctx.io.rename(path, join(ctx.root, stepDirName(step)));
      names.add(stepDirName(step));
    }
  }
}

/** Removes `path`, warning instead of throwing: a leftover must not fail a save. */
export function removeQuietly(ctx: SaveContext, path: string, what: string): void {
  try {
    ctx.io.remove(path);
  } catch (e) {
    ctx.warn(`Could not remove ${what} at ${path}: ${describeError(e)}; the next save tries again`);
  }
}
