/**
 * Fault-injecting CheckpointIO implementations over the real file system: a
 * disk that fills up (ENOSPC after a byte budget or on the n-th operation),
 * and one that freezes at the n-th changing operation, as a kill -9 would.
 */
import { type CheckpointIO, denoCheckpointIO } from "../../../train/checkpoint/manager.ts";

/** The operations that change the disk, in the order a save may issue them. */
export type ChangingOp = "writeFile" | "mkdir" | "rename" | "remove" | "fsyncDir";

/** The error Deno throws for a full disk (measured: writing to /dev/full). */
export function noSpaceError(): Error {
  return Object.assign(new Error("No space left on device (os error 28)"), { code: "ENOSPC" });
}

/** Options of FullDiskIO. */
export interface FullDiskOptions {
  /** writeFile fails once this many bytes have been written in total (after writing what still fits). */
  byteBudget?: number;
  /** The `nth` (1-based) call of `op` fails with ENOSPC before doing anything. */
  failOn?: { op: ChangingOp; nth: number };
}

/** The real file system, except that it runs out of space as configured. */
export class FullDiskIO implements CheckpointIO {
  /** Calls so far per operation. */
  readonly calls: Record<ChangingOp, number> = {
    writeFile: 0,
    mkdir: 0,
    rename: 0,
    remove: 0,
    fsyncDir: 0,
  };
  /** Bytes written so far. */
  written = 0;
  readonly #opts: FullDiskOptions;

  constructor(opts: FullDiskOptions) {
    this.#opts = opts;
  }

  #count(op: ChangingOp): void {
    this.calls[op]++;
    const failOn = this.#opts.failOn;
    if (failOn?.op === op && failOn.nth === this.calls[op]) throw noSpaceError();
  }

  writeFile(path: string, bytes: Uint8Array, sync: boolean): void {
    this.#count("writeFile");
    const room = (this.#opts.byteBudget ?? Infinity) - this.written;
    if (bytes.length > room) {
      // A full disk still creates the file and stores what fits.
      const part = bytes.subarray(0, Math.max(0, room));
      denoCheckpointIO.writeFile(path, part, sync);
      this.written += part.length;
      throw noSpaceError();
    }
    denoCheckpointIO.writeFile(path, bytes, sync);
    this.written += bytes.length;
  }
  mkdir(path: string, parents: boolean): void {
    this.#count("mkdir");
    denoCheckpointIO.mkdir(path, parents);
  }
  rename(from: string, to: string): void {
    this.#count("rename");
    denoCheckpointIO.rename(from, to);
  }
  remove(path: string): void {
    this.#count("remove");
    denoCheckpointIO.remove(path);
  }
  fsyncDir(path: string): void {
    this.#count("fsyncDir");
    denoCheckpointIO.fsyncDir(path);
  }
  readFile = denoCheckpointIO.readFile;
  readDir = denoCheckpointIO.readDir;
  exists = denoCheckpointIO.exists;
}

/** Thrown by FrozenDiskIO at and after its crash point. */
export class SimulatedCrash extends Error {}

/**
 * Simulates a kill -9 at the `crashAt`-th (1-based) changing operation: that
 * operation changes nothing (a writeFile stores only the first half of its
 * bytes, a torn write) and neither does any later one; each throws
 * SimulatedCrash. So whatever the save does after the crash point (its
 * rollback included) leaves no trace on disk, as if the process had died
 * there. Reads keep working.
 */
export class FrozenDiskIO implements CheckpointIO {
  /** Changing operations attempted so far. */
  count = 0;
  /** The operation the crash hit ("rename a -> b"), or null while none has. */
  crashedAt: string | null = null;
  readonly #crashAt: number;

  constructor(crashAt: number) {
    this.#crashAt = crashAt;
  }

  #step(op: ChangingOp, detail: string, torn?: () => void): void {
    this.count++;
    if (this.crashedAt === null && this.count === this.#crashAt) {
      this.crashedAt = `${op} ${detail}`;
      torn?.();
    }
    if (this.crashedAt !== null) throw new SimulatedCrash(`simulated kill at ${this.crashedAt}`);
  }

  writeFile(path: string, bytes: Uint8Array, sync: boolean): void {
    this.#step(
      "writeFile",
      path,
      () => denoCheckpointIO.writeFile(path, bytes.subarray(0, bytes.length >> 1), false),
    );
    denoCheckpointIO.writeFile(path, bytes, sync);
  }
  mkdir(path: string, parents: boolean): void {
    this.#step("mkdir", path);
    denoCheckpointIO.mkdir(path, parents);
  }
  rename(from: string, to: string): void {
    this.#step("rename", `${from} -> ${to}`);
    denoCheckpointIO.rename(from, to);
  }
  remove(path: string): void {
    this.#step("remove", path);
    denoCheckpointIO.remove(path);
  }
  fsyncDir(path: string): void {
    this.#step("fsyncDir", path);
    denoCheckpointIO.fsyncDir(path);
  }
  readFile = denoCheckpointIO.readFile;
  readDir = denoCheckpointIO.readDir;
  exists = denoCheckpointIO.exists;
}
