/**
 * The file operations a checkpoint save and load are made of, behind one small
 * interface so tests can inject faults (a full disk, a kill between two
 * operations); plus the real implementation over Deno's synchronous file API.
 */
import { canFsyncPaths, fsyncPaths } from "../../ffi/cpu_files.ts";

/** One entry of a directory listing. */
export interface CheckpointDirEntry {
  /** The entry's name within its folder. */
  name: string;
  /** Whether it is a folder. */
  isDirectory: boolean;
}

/**
 * Everything the checkpoint manager does to the file system. Errors are
 * thrown as the OS reports them (a `Deno.errors.*` or an Error with a `code`
 * such as "ENOSPC"); the manager adds what it was doing.
 */
export interface CheckpointIO {
  /** Creates `path` (which must not exist), writes all of `bytes`, and flushes the file to disk when `sync`. */
  writeFile(path: string, bytes: Uint8Array, sync: boolean): void;
  /** The whole content of the file at `path`. */
  readFile(path: string): Uint8Array;
  /** Creates the directory `path`; with `parents`, also missing parents, and an existing directory is fine. */
  mkdir(path: string, parents: boolean): void;
  /** Atomically renames `from` to `to` (same file system; a directory `to` must not exist). */
  rename(from: string, to: string): void;
  /** Deletes the file or the whole directory tree at `path`. */
  remove(path: string): void;
  /** The entries of directory `path`; throws Deno.errors.NotFound when it does not exist. */
  readDir(path: string): CheckpointDirEntry[];
  /** Flushes directory `path` itself (its entries: creations, renames) to disk. */
  fsyncDir(path: string): void;
  /**
   * Flushes every file and directory of `paths` to disk, all at once: when it returns each is
   * durable, in no particular order among themselves. Optional: without it a save flushes each
   * file as it writes it (writeFile's `sync`) and each directory after, one after another.
   */
  syncAll?(paths: string[]): void;
  /** Whether anything exists at `path`. */
  exists(path: string): boolean;
}

/**
 * The real file system through `Deno.*Sync`. `fsyncDir` opens the directory
 * read-only and fsyncs it, which is how POSIX makes a rename durable. `syncAll`
 * fsyncs its paths in parallel threads (ffi/cpu_files.ts), so the file system
 * commits them together; where the CPU library cannot be opened, one by one.
 * @example
 * const manager = new CheckpointManager("runs/a/checkpoints", { rank: 0, io: denoCheckpointIO });
 */
export const denoCheckpointIO: CheckpointIO = {
  writeFile(path, bytes, sync) {
    using file = Deno.openSync(path, { write: true, createNew: true });
    for (let done = 0; done < bytes.length;) done += file.writeSync(bytes.subarray(done));
    if (sync) file.syncSync();
  },
  readFile: (path) => Deno.readFileSync(path),
  mkdir: (path, parents) => Deno.mkdirSync(path, { recursive: parents }),
  rename: (from, to) => Deno.renameSync(from, to),
  remove: (path) => Deno.removeSync(path, { recursive: true }),
  readDir: (path) =>
    [...Deno.readDirSync(path)].map((e) => ({ name: e.name, isDirectory: e.isDirectory })),
  fsyncDir(path) {
    using dir = Deno.openSync(path, { read: true });
    dir.syncSync();
  },
  syncAll(paths) {
    if (canFsyncPaths()) return fsyncPaths(paths);
    for (const path of paths) {
      using f = Deno.openSync(path, { read: true });
      f.syncSync();
    }
  },
  exists(path) {
    try {
      Deno.lstatSync(path);
      return true;
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) return false;
      throw e;
    }
  },
};

/** The OS's text for a failure, e.g. "No space left on device (os error 28)". */
export function describeError(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
