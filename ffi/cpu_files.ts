/**
 * Flushing several files and folders to disk at once, through the CPU kernel
 * library (build/libdtrain_cpu.so, kernels/cpu/fsync_batch.c): a host-only
 * dt_cpu_* symbol, not part of the kernel ABI. The checkpoint's commit uses it
 * (train/checkpoint/io.ts): a save's independent fsyncs then cost about one.
 *
 * @module
 */
import { cBytes, type NativeLibrary, openLibrary } from "./native.ts";
import { KERNEL_SYMBOLS } from "./symbols.ts";

const LIBRARY = "libdtrain_cpu.so";

/** The file extras of libdtrain_cpu.so (dt_cpu_*: listed in ffi/cpu_extras.ts's CPU_EXTRA_SYMBOLS). */
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

let lib: NativeLibrary<typeof TABLE> | null | undefined;

/**
 * Whether fsyncPaths() can run here: the CPU library opens (ABI checked) and has the symbol. A
 * library that cannot only means one fsync after another for the checkpoint's commit.
 */
export function canFsyncPaths(): boolean {
  if (lib === undefined) {
    try {
      lib = openLibrary(LIBRARY, TABLE);
      void lib.symbols.dt_cpu_fsync_paths; // bound here: a missing symbol throws now, not mid-save
    } catch {
      lib = null;
    }
  }
  return lib !== null;
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
    lib!.check(lib!.symbols.dt_cpu_fsync_paths(joined, part.length), "dt_cpu_fsync_paths");
  }
}
