/**
 * The lock of a checkpoint folder: the process that writes and rotates the
 * folder (rank 0 of one run) holds an flock on `<dir>/dtrain-checkpoints.lock`
 * for as long as it lives, naming its run in the file. A second live run that
 * points at the same folder is refused (it would adopt the other's state and
 * the two would delete each other's checkpoints in rotation); a reader can ask
 * whether a live run other than its own is writing a folder. The operating
 * system drops the lock when its holder dies, even by SIGKILL.
 */
import { join } from "node:path";

/** The lock file's name inside a checkpoint folder (no save or rotation ever touches it). */
export const FOLDER_LOCK_FILE = "dtrain-checkpoints.lock";

/** Who holds (or last held) a checkpoint folder. */
export interface FolderHolder {
  /** the run id of the holder (DTRAIN_RUN_ID), or "pid <pid>" outside the launcher */
  owner: string;
  /** the holding process */
  pid: number;
  /** the machine it runs on */
  host: string;
  /** when it took the lock (ISO 8601) */
  since: string;
}

/** Another live run writes the checkpoint folder. */
export class CheckpointFolderBusy extends Error {
  override name = "CheckpointFolderBusy";
  constructor(readonly dir: string, readonly holder: FolderHolder | null, doing: string) {
    super(
      `Checkpoint folder ${dir} is being written by another live run (${
        describeHolder(holder)
      }), ` +
        `so this run cannot ${doing}: two runs sharing a checkpoint folder would adopt each ` +
        `other's state and delete each other's checkpoints. Give this run its own ` +
        `checkpoint.dir (or --run-dir), or wait for that run to end`,
    );
  }
}

/** One line naming a holder. */
export function describeHolder(h: FolderHolder | null): string {
  return h
    ? `run ${h.owner}, pid ${h.pid} on ${h.host}, since ${h.since}`
    : "a process that has not written its name yet";
}

function readHolder(file: Deno.FsFile): FolderHolder | null {
  try {
    file.seekSync(0, Deno.SeekMode.Start);
    const buf = new Uint8Array(4096);
    const n = file.readSync(buf) ?? 0;
    const h = JSON.parse(new TextDecoder().decode(buf.subarray(0, n)));
    return typeof h?.owner === "string" && Number.isSafeInteger(h?.pid) ? h as FolderHolder : null;
  } catch {
    return null;
  }
}

function openLockFile(dir: string, create: boolean): Deno.FsFile | null {
  try {
    // A reader opens it read-only (a flock needs no write access): a read-only folder can be probed.
    return Deno.openSync(join(dir, FOLDER_LOCK_FILE), {
      read: true,
      write: create,
      create,
      mode: 0o644,
    });
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
    throw new Error(
      `Cannot open the lock of checkpoint folder ${dir}: ${(e as Error).message}`,
      { cause: e },
    );
  }
}

/** A checkpoint folder held by this process; released when the process ends, or by release(). */
export interface FolderLock {
  readonly dir: string;
  /** the run that held the folder before (its lock file still names it), or null */
  readonly previous: FolderHolder | null;
  release(): void;
}

/**
 * The folders this process holds, by real path: one process is one run, so
 * a second manager of a folder in the same process (a second Trainer, a
 * script's own manager) shares the lock instead of being refused by it.
 */
const heldHere = new Map<string, FolderLock>();

function realPath(dir: string): string {
  try {
    return Deno.realPathSync(dir);
  } catch {
    return dir;
  }
}

/**
 * Takes the folder's lock for `owner`, creating the folder; throws
 * CheckpointFolderBusy naming the live holder when another process has it.
 * `doing` completes "this run cannot …" in that error.
 */
export function lockCheckpointFolder(dir: string, owner: string, doing: string): FolderLock {
  Deno.mkdirSync(dir, { recursive: true });
  const key = realPath(dir);
  const mine = heldHere.get(key);
  if (mine) return { dir, previous: null, release() {} };
  const file = openLockFile(dir, true)!;
  try {
    if (!file.tryLockSync(true)) throw new CheckpointFolderBusy(dir, readHolder(file), doing);
  } catch (e) {
    file.close();
    throw e;
  }
  const previous = readHolder(file);
  const me: FolderHolder = {
    owner,
    pid: Deno.pid,
    host: Deno.hostname(),
    since: new Date().toISOString(),
  };
  const bytes = new TextEncoder().encode(JSON.stringify(me) + "\n");
  try {
    file.truncateSync(0);
    file.seekSync(0, Deno.SeekMode.Start);
    for (let off = 0; off < bytes.length;) off += file.writeSync(bytes.subarray(off));
  } catch {
    // A full disk: the lock is held all the same, only unnamed (the save reports the disk).
  }
  let held = true;
  const lock: FolderLock = {
    dir,
    previous,
    release() {
      if (!held) return;
      held = false;
      heldHere.delete(key);
      file.close(); // closing the descriptor releases the flock; the file keeps the last owner's name
    },
  };
  heldHere.set(key, lock);
  return lock;
}

/**
 * The live holder of `dir`'s lock other than this process, or null when none
 * holds it (no lock file, or a lock its holder's death released). Reads
 * without writing.
 */
export function liveHolder(dir: string): FolderHolder | null {
  if (heldHere.has(realPath(dir))) return null; // this process: not another run
  const file = openLockFile(dir, false);
  if (file === null) return null;
  try {
    // A shared lock is refused only while some process holds the exclusive one.
    if (file.tryLockSync(false)) {
      file.unlockSync();
      return null;
    }
    return readHolder(file) ?? { owner: "(unknown)", pid: 0, host: "?", since: "?" };
  } finally {
    file.close();
  }
}

/** The run that last held `dir`'s lock (alive or not), or null when none ever did. */
export function lastHolder(dir: string): FolderHolder | null {
  const file = openLockFile(dir, false);
  if (file === null) return null;
  try {
    return readHolder(file);
  } finally {
    file.close();
  }
}
