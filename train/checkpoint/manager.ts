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
 * A save writes every file into `.tmp-step-…-<pid>-<random>`, manifest.json
 * last, and the new pointer as `.tmp-latest-…`, then fsyncs them all and that
 * directory at once (parallel threads: the file system commits them together;
 * one by one where the CPU library cannot be opened), renames the directory to
 * `step-…`, fsyncs `<dir>`, renames the pointer over `latest` and fsyncs
 * `<dir>` again.
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
 * One process writes a directory at a time (rank 0 of one run): the first
 * save (or claim()) takes the folder's lock (folder_lock.ts), and a save from
 * any other live process is refused, naming the holder's run.
 *
 * An asynchronous save (`async: true`) writes by the same protocol, in the
 * same order, on a worker thread (background.ts, commit_worker.ts): save()
 * only encodes the payload into fresh buffers (a snapshot: the optimizer may
 * update the tensors in place right after) and returns; the next save waits
 * for the previous commit first (no queue), so at most one is in flight and
 * one snapshot is held. Its failure is thrown by the next save(), wait()
 * or close(); at process exit a commit in flight is finished, and a failure
 * nobody was told of is printed and makes the exit code 1.
 */
import { basename, join, resolve } from "node:path";
import { section } from "../../profile/profile.ts";
import type { StTensor } from "../../io/safetensors.ts";
import { type CheckpointIO, denoCheckpointIO, describeError } from "./io.ts";
import { type CheckpointTensors, readCheckpointDir } from "./format.ts";
import { nodeCrypto } from "../../os/node_builtin.ts";
import {
  asideStep,
  type Candidate,
  LATEST_FILE,
  parseStepDirName,
  readPointer,
  scanCandidates,
  stepDirName,
} from "./layout.ts";
import { checkRotationPolicy, type RotationPolicy } from "./rotation.ts";
import { commitCheckpoint, encodeCheckpoint, type SaveContext } from "./save.ts";
import { listCheckpoints, rotateCheckpoints } from "./prune.ts";
import { BackgroundCommitter, settleAllCommits } from "./background.ts";
import { Progress, type ProgressOptions } from "../../distributed/control/progress.ts";
import {
  CheckpointFolderBusy,
  type FolderHolder,
  type FolderLock,
  liveHolder,
  lockCheckpointFolder,
} from "./folder_lock.ts";

export type { CheckpointDirEntry, CheckpointIO } from "./io.ts";
export type { CheckpointTensors } from "./format.ts";
export { denoCheckpointIO } from "./io.ts";
export { LATEST_FILE } from "./layout.ts";
export { CheckpointFolderBusy, FOLDER_LOCK_FILE, type FolderHolder } from "./folder_lock.ts";

/** A checkpoint rank 0 has just committed (its rotation has not run yet). */
export interface SavedCheckpoint {
  dir: string;
  step: number;
}

/**
 * Called after every committed save, before rotation: a hook point for
 * tools (`dtrain check`'s probe keeps each checkpoint's files out of the
 * reach of rotation). For an asynchronous save, once its commit is durable
 * (on this thread: when the event loop next runs, or in the next
 * save/wait/close, whichever comes first), never when the snapshot is taken.
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
  /** The tensors by name. */
  tensors: Map<string, StTensor>;
  /** String metadata stored in the file's header. */
  metadata?: Record<string, string>;
}

/**
 * What a checkpoint holds: tensor files plus a JSON state (epoch, step, data
 * position, RNG states, scaler, schedule, config, world size, run id —
 * whatever the engine puts there).
 */
export interface CheckpointPayload {
  /** The optimizer step the checkpoint is taken after (names its folder). */
  step: number;
  /** The tensor files to write. */
  files: CheckpointFile[];
  /** Plain JSON only (checked on save), so that it loads back exactly. */
  state: Record<string, unknown>;
}

/** A checkpoint that was read back and verified. */
export interface LoadedCheckpoint {
  /** The checkpoint's directory. */
  dir: string;
  /** The optimizer step the checkpoint was taken after. */
  step: number;
  /** Tensor files by name ("model"); tensor data are views into the file's bytes. */
  files: Map<string, CheckpointTensors>;
  /** The JSON state it was saved with. */
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
  /**
   * Write checkpoints in the background (default false): save() snapshots the
   * payload and returns; a worker thread commits it by the same protocol. Off
   * by default because a plain save() promises that the checkpoint is on disk
   * when it returns (as torch.save does), which callers that copy or upload
   * it next rely on; loops that only need it durable eventually opt in, as
   * with PyTorch DCP's async_save. Uses the real file system (not `io`), and
   * prints no progress lines.
   */
  async?: boolean;
  /**
   * Who writes the folder, named in its lock (folder_lock.ts) for other runs
   * to see: the run id under the launcher. Default: "pid <this pid>".
   */
  owner?: string;
}

/** Options of one save. */
export interface SaveOptions {
  /** Overrides the manager's `async` for this save. */
  async?: boolean;
}

/**
 * Waits for every asynchronous checkpoint commit of this process and returns
 * the failures nobody was told of yet. For code about to call Deno.exit()
 * that wants the errors itself (the exit handler would only print them).
 */
export function waitForCheckpoints(): Error[] {
  return settleAllCommits();
}

/**
 * Saves, rotates, lists and loads the checkpoints in one directory.
 * By default a save returns once the checkpoint is on disk and `latest`
 * names it; with `async: true` it returns after taking a snapshot, and
 * wait() or close() says when (and whether) it is on disk.
 * @example
 * const checkpoints = new CheckpointManager("runs/a/checkpoints", { rank, keepLast: 3 });
 * const resumed = checkpoints.loadLatest(); // null on a fresh run
 * checkpoints.save({ step, files: [{ name: "model", tensors }], state: { epoch, step } });
 * @example
 * const checkpoints = new CheckpointManager("runs/a/checkpoints", { rank, async: true });
 * checkpoints.save(payload); // returns after the snapshot; training goes on
 * await checkpoints.wait(); // on disk, or the commit's error is thrown here
 */
export class CheckpointManager {
  /** The checkpoint directory (absolute). */
  readonly dir: string;
  readonly #rank: number;
  readonly #policy: RotationPolicy;
  readonly #ctx: SaveContext;
  readonly #progress: Pick<ProgressOptions, "print" | "now">;
  readonly #async: boolean;
  readonly #owner: string;
  #lock: FolderLock | null = null;
  #committer: BackgroundCommitter | null = null;

  /**
   * Checks the options; nothing touches the disk until the first save or load.
   * An async manager of rank 0 starts its worker thread here, and rank 0's
   * manager loads the digest code its saves use (node:crypto, ~11 ms of CPU):
   * its first save would otherwise pay that in the middle of training.
   */
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
    this.#async = opts.async ?? false;
    this.#owner = opts.owner ?? `pid ${Deno.pid}`;
    if (this.#async && opts.io !== undefined && opts.io !== denoCheckpointIO) {
      throw new TypeError(
        "CheckpointManager: async saves write from a worker thread through the real file " +
          "system, so they cannot use a custom io; pass async: false with it",
      );
    }
    if (this.#rank === 0) nodeCrypto();
    if (this.#async && this.#rank === 0) this.#background().prestart();
  }

  #background(): BackgroundCommitter {
    return this.#committer ??= new BackgroundCommitter({
      root: this.dir,
      fsync: this.#ctx.fsync,
      policy: this.#policy,
      warn: this.#ctx.warn,
      committed: (dir, step) => {
        for (const hook of savedHooks) hook({ dir, step });
      },
    });
  }

  /** Who this manager writes as (the owner named in the folder's lock). */
  get owner(): string {
    return this.#owner;
  }

  /**
   * Rank 0: takes the folder's lock (creating the folder) for as long as this
   * process lives, so no other live run can save or rotate here; returns the
   * run that held it before, if its lock file names one. Other ranks: null,
   * nothing taken. Throws CheckpointFolderBusy, naming the holder, when
   * another live process holds it. Called by the first save; call it earlier
   * to be refused before any work is done. Managers with an injected `io`
   * take no lock.
   */
  claim(doing = "save its checkpoints there"): FolderHolder | null {
    if (this.#rank !== 0) return null;
    if (this.#lock) return null;
    // A folder behind an injected io (tests' faults, another store) is not a folder to flock.
    if (this.#ctx.io !== denoCheckpointIO) return null;
    this.#lock = lockCheckpointFolder(this.dir, this.#owner, doing);
    return this.#lock.previous;
  }

  /**
   * The live process that holds this folder's lock, when it is not this
   * manager (another run's rank 0, or this run's when asked from another
   * rank), else null. Reads only.
   */
  liveWriter(): FolderHolder | null {
    if (this.#lock) return null;
    try {
      return liveHolder(this.dir);
    } catch {
      return null; // an unreadable lock file says nothing about a writer
    }
  }

  /**
   * Rank 0: writes `payload` atomically as `step-<step>` (replacing an
   * existing one of the same step), points `latest` at it, then rotates.
   * Returns its directory; other ranks write nothing and get null. Bad input
   * throws a TypeError before anything is written; a failed write throws an
   * Error naming the checkpoint, the file and the cause, and leaves every
   * earlier checkpoint and `latest` as they were.
   *
   * Asynchronous (the manager's `async` or `opts.async`): first waits for
   * the previous asynchronous commit and throws its failure, if any (this
   * payload is then not saved); then snapshots `payload` and returns the
   * directory the checkpoint will have once committed.
   */
  save(payload: CheckpointPayload, opts: SaveOptions = {}): string | null {
    return section("checkpoint", () => this.#save(payload, opts.async ?? this.#async));
  }

  /**
   * Resolves once no asynchronous commit is in flight (the last one durable,
   * `latest` naming it, rotation done); rejects with the failure of one that
   * was not reported yet. Without asynchronous saves, resolves at once.
   */
  wait(): Promise<void> {
    try {
      section("checkpoint", () => this.#settle());
      return Promise.resolve();
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Waits for the commit in flight (blocking), ends the background thread and
   * throws a failure not reported yet. The manager stays usable: a later
   * asynchronous save starts a new thread.
   */
  close(): void {
    const error = section("checkpoint", () => this.#committer?.close() ?? null);
    if (error) throw error;
  }

  #settle(): void {
    const c = this.#committer;
    if (c === null) return;
    c.settle();
    const error = c.takeError();
    if (error) throw error;
  }

  #save(payload: CheckpointPayload, async: boolean): string | null {
    if (this.#rank !== 0) return null;
    try {
      this.claim();
    } catch (e) {
      // Another live run's folder is refused here; a folder that cannot be made or opened is
      // the save's own error, reported by it with the checkpoint's name (and then it retries).
      if (e instanceof CheckpointFolderBusy) throw e;
    }
    this.#settle();
    if (async) {
      const encoded = encodeCheckpoint(payload);
      const dir = join(this.dir, stepDirName(encoded.step));
      this.#background().start(encoded, dir);
      return dir;
    }
    const progress = new Progress(`saving checkpoint ${stepDirName(payload.step)}`, {
      unit: "bytes",
      enabled: true,
      ...this.#progress,
    });
    const dir = commitCheckpoint({
      ...this.#ctx,
      progress: (stage, done, total) => {
        progress.total = total;
        progress.update(done, stage);
      },
    }, encodeCheckpoint(payload));
    progress.done();
    for (const hook of savedHooks) hook({ dir, step: payload.step });
    rotateCheckpoints(this.#ctx, this.#policy, payload.step);
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
    return listCheckpoints(this.#ctx);
  }
}
