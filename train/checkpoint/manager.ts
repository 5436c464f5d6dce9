/**
 * Checkpoint storage: rank 0 writes each checkpoint atomically and rotates old
 * ones away; any rank loads the newest one that verifies, falling back past
 * corrupt or partial ones. What a checkpoint holds is the engine's choice.
 *
 * Layout of a checkpoint directory `<dir>`:
 *
 *     latest                  one line naming the current checkpoint: "step-00000042"
 *     step-00000042/          one checkpoint (the step with at least 8 digits)
 *       model.safetensors     each CheckpointFile as <name>.safetensors
 *       state.json            the JSON state
 *       manifest.json         written last: format, version, step, time, each file's bytes and sha256
 *     .tmp-…                  a save in progress, or one that was killed; removed by the next save
 *     .aside-step-…-<pid>-…   the old copy of a step being saved again; restored or removed by the next save
 *
 * A save writes every file into `.tmp-step-…-<pid>-<random>` (each fsynced),
 * manifest.json last, fsyncs that directory, writes the new pointer as
 * `.tmp-latest-…` (fsynced), renames the directory to `step-…`, fsyncs
 * `<dir>`, renames the pointer over `latest` and fsyncs `<dir>` again.
 * Replacing `latest` is the commit: loadLatest() tries what `latest` names
 * first. Where a kill can land, and what the next run sees:
 *
 * 1. Before the directory rename: only `.tmp-*` entries changed; load ignores
 *    them and the next save removes them.
 * 2. Saving a step that already exists moves the old `step-N` aside first;
 *    between that and the rename, `step-N` is missing and load falls back to
 *    the aside copy (same step, old content); the next save restores it.
 * 3. After the rename, before `latest` is replaced: `step-N` is complete.
 *    If `latest` names an earlier checkpoint, that one loads and the resumed
 *    run saves step N again, replacing it; if it already named step N (a
 *    replacement), the new content loads.
 * 4. After `latest` is replaced: the save is done. Rotation renames each
 *    victim to `.tmp-deleting-…` before deleting it, so a half-deleted
 *    checkpoint never looks like a checkpoint; the next save removes it.
 *
 * One process writes a directory at a time (rank 0 of one run).
 */
import { basename, join, resolve } from "node:path";
import { section } from "../../profile/profile.ts";
import type { StTensor } from "../../io/safetensors.ts";
import { type CheckpointIO, denoCheckpointIO, describeError } from "./io.ts";
import {
  type CheckpointTensors,
  parseManifest,
  readCheckpointDir,
  readManifestText,
} from "./format.ts";
import {
  asideStep,
  type Candidate,
  LATEST_FILE,
  parseStepDirName,
  readPointer,
  readRoot,
  scanCandidates,
  stepDirName,
  tempName,
} from "./layout.ts";
import { checkRotationPolicy, type RotationPolicy, stepsToDelete } from "./rotation.ts";
import { removeQuietly, type SaveContext, writeCheckpoint } from "./save.ts";
import { Progress, type ProgressOptions } from "../../distributed/control/progress.ts";

export type { CheckpointDirEntry, CheckpointIO } from "./io.ts";
export type { CheckpointTensors } from "./format.ts";
export { denoCheckpointIO } from "./io.ts";
export { LATEST_FILE } from "./layout.ts";

/** A checkpoint rank 0 has just committed (its rotation has not run yet). */
export interface SavedCheckpoint {
  dir: string;
  step: number;
}

/**
 * Called after every committed save, before rotation: a hook point for
 * tools (`dtrain check`'s probe keeps each checkpoint's files out of the
 * reach of rotation).
 */
export type CheckpointSavedHook = (saved: SavedCheckpoint) => void;

const savedHooks = new Set<CheckpointSavedHook>();

/** Adds a hook to every checkpoint save; returns the function that removes it. */
export function addCheckpointSavedHook(hook: CheckpointSavedHook): () => void {
  savedHooks.add(hook);
  return () => savedHooks.delete(hook);
}

/** One file of a checkpoint: a safetensors file of named tensors (raw little-endian bytes) with optional string metadata. */
export interface CheckpointFile {
  /** File name without extension ("model", "optimizer"); stored as `<name>.safetensors`. */
  name: string;
  tensors: Map<string, StTensor>;
  metadata?: Record<string, string>;
}

/**
 * What a checkpoint holds: tensor files plus a JSON state (epoch, step, data
 * position, RNG states, scaler, schedule, config, world size, run id —
 * whatever the engine puts there).
 */
export interface CheckpointPayload {
  step: number;
  files: CheckpointFile[];
  /** Plain JSON only (checked on save), so that it loads back exactly. */
  state: Record<string, unknown>;
}

/** A checkpoint that was read back and verified. */
export interface LoadedCheckpoint {
  /** The checkpoint's directory. */
  dir: string;
  step: number;
  /** Tensor files by name ("model"); tensor data are views into the file's bytes. */
  files: Map<string, CheckpointTensors>;
  state: Record<string, unknown>;
  /** Newer checkpoints that loadLatest() passed over, and why; empty from load(). */
  skipped: { dir: string; reason: string }[];
}

/** Options of a CheckpointManager. */
export interface CheckpointManagerOptions {
  /** This process's rank; only rank 0 writes. */
  rank: number;
  /** Keep the newest this many checkpoints (default 3). */
  keepLast?: number;
  /** Also keep forever every checkpoint whose step is a multiple of this (null or absent: none). */
  keepEvery?: number | null;
  /** fsync files and directories (default true); off only where durability does not matter. */
  fsync?: boolean;
  /** Receives warnings (a corrupt checkpoint skipped, leftovers removed); default console.warn. */
  onWarning?: (message: string) => void;
  /** File operations; default the real file system. Tests inject faults here. */
  io?: CheckpointIO;
  /** A save longer than 2 s prints progress lines; where they go and the clock (tests). */
  progress?: Pick<ProgressOptions, "print" | "now">;
}

/**
 * Saves, rotates, lists and loads the checkpoints in one directory.
 * Synchronous: a save returns once the checkpoint is on disk and `latest`
 * names it.
 * @example
 * const checkpoints = new CheckpointManager("runs/a/checkpoints", { rank, keepLast: 3 });
 * const resumed = checkpoints.loadLatest(); // null on a fresh run
 * checkpoints.save({ step, files: [{ name: "model", tensors }], state: { epoch, step } });
 */
export class CheckpointManager {
  /** The checkpoint directory (absolute). */
  readonly dir: string;
  readonly #rank: number;
  readonly #policy: RotationPolicy;
  readonly #ctx: SaveContext;
  readonly #progress: Pick<ProgressOptions, "print" | "now">;

  /** Checks the options; nothing touches the disk until the first save or load. */
  constructor(dir: string, opts: CheckpointManagerOptions) {
    if (!Number.isSafeInteger(opts.rank) || opts.rank < 0) {
      throw new RangeError(
        `CheckpointManager rank must be a non-negative integer, got ${opts.rank}`,
      );
    }
    this.#policy = { keepLast: opts.keepLast ?? 3 };
    if (opts.keepEvery !== undefined && opts.keepEvery !== null) {
      this.#policy.keepEvery = opts.keepEvery;
    }
    checkRotationPolicy(this.#policy);
    this.dir = resolve(dir);
    this.#rank = opts.rank;
    this.#ctx = {
      root: this.dir,
      io: opts.io ?? denoCheckpointIO,
      fsync: opts.fsync ?? true,
      warn: opts.onWarning ?? ((message) => console.warn(message)),
    };
    this.#progress = opts.progress ?? {};
  }

  /**
   * Rank 0: writes `payload` atomically as `step-<step>` (replacing an
   * existing one of the same step), points `latest` at it, then rotates.
   * Returns its directory; other ranks write nothing and get null. Bad input
   * throws a TypeError before anything is written; a failed write throws an
   * Error naming the checkpoint, the file and the cause, and leaves every
   * earlier checkpoint and `latest` as they were.
   */
  save(payload: CheckpointPayload): string | null {
    return section("checkpoint", () => this.#save(payload));
  }

  #save(payload: CheckpointPayload): string | null {
    if (this.#rank !== 0) return null;
    const progress = new Progress(`saving checkpoint ${stepDirName(payload.step)}`, {
      unit: "bytes",
      enabled: true,
      ...this.#progress,
    });
    const dir = writeCheckpoint({
      ...this.#ctx,
      progress: (stage, done, total) => {
        progress.total = total;
        progress.update(done, stage);
      },
    }, payload);
    progress.done();
    for (const hook of savedHooks) hook({ dir, step: payload.step });
    try {
      this.#rotate(payload.step);
    } catch (e) {
      // The save itself is done; a rotation that cannot even list the directory is retried next time.
      this.#ctx.warn(`Rotation after saving ${dir} failed: ${describeError(e)}`);
    }
    return dir;
  }

  /**
   * The checkpoint `latest` names, verified; when it is missing, partial or
   * corrupt, warns (naming each checkpoint and why) and returns the newest
   * older one that verifies. `accept` may check what was read (the state's
   * schema, say) and throw to have a checkpoint treated as corrupt too. Null
   * when the directory holds no checkpoint; throws when checkpoints exist but
   * none verifies, rather than silently starting over. Any rank can call it.
   */
  loadLatest(opts: { accept?: (loaded: LoadedCheckpoint) => void } = {}): LoadedCheckpoint | null {
    const { io, warn } = this.#ctx;
    const pointer = readPointer(io, this.dir);
    const candidates = scanCandidates(io, this.dir);
    if (pointer.kind === "missing" && candidates.length === 0) return null;
    const order: Candidate[] = [];
    let limit = Infinity;
    if (pointer.kind === "ok") {
      limit = pointer.step;
      order.push({ name: pointer.name, step: pointer.step, aside: false });
    } else {
      const why = pointer.kind === "missing" ? "is missing" : pointer.problem;
      const path = join(this.dir, LATEST_FILE);
      warn(`Checkpoint pointer ${path} ${why}; using the newest checkpoint that verifies`);
    }
    // Then older ones, newest first; newer ones than `latest` names only as a last resort (crash window 3).
    const rest = candidates.filter((c) => c.name !== order[0]?.name);
    order.push(...rest.filter((c) => c.step <= limit), ...rest.filter((c) => c.step > limit));
    const skipped: { dir: string; reason: string }[] = [];
    for (const c of order) {
      const dir = join(this.dir, c.name);
      try {
        const loaded = { dir, ...readCheckpointDir(io, dir, c.step), skipped };
        opts.accept?.(loaded);
        if (skipped.length > 0) {
          warn(`Resuming from checkpoint ${dir} (step ${loaded.step}) instead`);
        }
        return loaded;
      } catch (e) {
        skipped.push({ dir, reason: describeError(e) });
        warn(`Checkpoint ${dir} is unusable: ${describeError(e)}`);
      }
    }
    throw new Error(
      `No checkpoint in ${this.dir} verifies (${skipped.length} tried): ` +
        skipped.map((s) => `${basename(s.dir)}: ${s.reason}`).join("; ") +
        ". Move the directory away to start from scratch.",
    );
  }

  /**
   * Loads and verifies one checkpoint: `dir` is a name inside this manager's
   * directory ("step-00000042") or a path. Throws an Error naming the
   * checkpoint, the file and the problem.
   */
  load(dir: string): LoadedCheckpoint {
    const path = dir.includes("/") ? resolve(dir) : join(this.dir, dir);
    const name = basename(path);
    try {
      const contents = readCheckpointDir(
        this.#ctx.io,
        path,
        parseStepDirName(name) ?? asideStep(name),
      );
      return { dir: path, ...contents, skipped: [] };
    } catch (e) {
      throw new Error(`Cannot load checkpoint ${path}: ${describeError(e)}`, { cause: e });
    }
  }

  /**
   * The `step-*` directories by ascending step; `complete` when a valid
   * manifest.json is in place (cheap: file hashes are checked by load).
   */
  list(): { dir: string; step: number; complete: boolean }[] {
    return readRoot(this.#ctx.io, this.dir)
      .flatMap((e) => {
        const step = e.isDirectory ? parseStepDirName(e.name) : null;
        return step === null ? [] : [{ dir: join(this.dir, e.name), step }];
      })
      .sort((a, b) => a.step - b.step)
      .map(({ dir, step }) => ({ dir, step, complete: this.#hasManifest(dir, step) }));
  }

  #hasManifest(dir: string, step: number): boolean {
    try {
      parseManifest(readManifestText(this.#ctx.io, dir), step);
      return true;
    } catch {
      return false;
    }
  }

  /** Deletes what the policy drops, each renamed to a `.tmp-deleting-*` name first (crash window 4). */
  #rotate(justSaved: number): void {
    const complete = this.list().filter((c) => c.complete).map((c) => c.step);
    for (const step of stepsToDelete(complete, justSaved, this.#policy)) {
      const name = stepDirName(step);
      const trash = join(this.dir, tempName(`deleting-${name}`));
      try {
        this.#ctx.io.rename(join(this.dir, name), trash);
      } catch (e) {
        const path = join(this.dir, name);
        this.#ctx.warn(
          `Could not delete old checkpoint ${path}: ${describeError(e)}; ` +
            "the next rotation tries again",
        );
        continue;
      }
      removeQuietly(this.#ctx, trash, `old checkpoint ${name}`);
    }
  }
}
