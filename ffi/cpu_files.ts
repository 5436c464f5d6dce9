/**
 * Flushing several files and folders to disk at once, through the CPU kernel
 * library (build/libdtrain_cpu.so, kernels/cpu/fsync_batch.c): a host-only
 * dt_cpu_* symbol, not part of the kernel ABI. The checkpoint's commit uses it
 * (train/checkpoint/io.ts): a save's independent fsyncs then cost about one.
 *
 * @module
 */
import { type CheckedCalls, checkedCalls } from "./calls.ts";
import { cBytes, type NativeLibrary, openLibrary } from "./native.ts";
import { KERNEL_SYMBOLS } from "./symbols.ts";

/** The symbol, with its C parameters. */
export const CPU_FILE_SYMBOLS = {
  /** (paths: n NUL-terminated strings back to back, n ≤ 64): fsync each, in parallel threads. */
  dt_cpu_fsync_paths: { parameters: ["buffer", "i32"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

const TABLE = {
  dt_abi_version: KERNEL_SYMBOLS.dt_abi_version,
  dt_last_error: KERNEL_SYMBOLS.dt_last_error,
  ...CPU_FILE_SYMBOLS,
} as const satisfies Deno.ForeignLibraryInterface;

/** The most paths one call flushes. */
export const FSYNC_MAX_PATHS = 64;

let calls: CheckedCalls<typeof TABLE, "dt_cpu_fsync_paths"> | null | undefined;

/** Whether fsyncPaths() can run here (the CPU library opens). */
export function canFsyncPaths(): boolean {
  if (calls === undefined) {
    let lib: NativeLibrary<typeof TABLE> | null;
    try {
      lib = openLibrary("libdtrain_cpu.so", TABLE);
    } catch {
      lib = null;
    }
    calls = lib === null ? null : checkedCalls(lib, TABLE, ["dt_cpu_fsync_paths"]);
  }
  return calls !== null;
}

/**
 * Flushes every file and folder of `paths` to disk, all at once: when it returns each is durable
 * (in no particular order among themselves). Throws DtNativeError naming the first path that
 * failed and why; Error when the CPU library cannot be opened (see canFsyncPaths()).
 *
 * @example
 * ```ts
 * fsyncPaths(["ckpt/.tmp/model.safetensors", "ckpt/.tmp/manifest.json", "ckpt/.tmp"]);
 * ```
 */
export function fsyncPaths(paths: readonly string[]): void {
  if (!canFsyncPaths()) throw new Error("fsyncPaths: libdtrain_cpu.so cannot be opened here");
  for (let at = 0; at < paths.length; at += FSYNC_MAX_PATHS) {
    const part = paths.slice(at, at + FSYNC_MAX_PATHS).map(cBytes);
    const joined = new Uint8Array(part.reduce((n, b) => n + b.length, 0));
    let off = 0;
    for (const b of part) {
      joined.set(b, off);
      off += b.length;
    }
    calls!.dt_cpu_fsync_paths(joined, part.length);
  }
}
