/**
 * Flushing several files and folders to disk at once, through the CPU kernel
 * library (build/libdtrain_cpu.so, kernels/cpu/fsync_batch.c): a host-only
 * dt_cpu_* symbol, not part of the kernel ABI. The checkpoint's commit uses it
 * (train/checkpoint/io.ts): a save's independent fsyncs then cost about one.
 *
 * @module
 */
import { cBytes, cString, DtNativeError, findLibrary } from "./native.ts";

const LIBRARY = "libdtrain_cpu.so";

/** The symbols, with their C parameters. */
export const CPU_FILE_SYMBOLS = {
  /** (paths: n NUL-terminated strings back to back, n ≤ 64): fsync each, in parallel threads. */
  dt_cpu_fsync_paths: { parameters: ["buffer", "i32"], result: "i32" },
  /** const char*: text of the last error on this thread. */
  dt_last_error: { parameters: [], result: "pointer" },
} as const satisfies Deno.ForeignLibraryInterface;

/** The most paths one call flushes. */
export const FSYNC_MAX_PATHS = 64;

let lib: Deno.DynamicLibrary<typeof CPU_FILE_SYMBOLS> | null | undefined;

/**
 * Whether fsyncPaths() can run here: the CPU library opens and has the symbol. Opened with one
 * Deno.dlopen of both symbols, not ffi/native.ts's openLibrary(), whose per-symbol binding and ABI
 * check cost ~2 ms the first time: this is called by a checkpoint save, often inside a training
 * loop, and a library without the symbol only means one fsync after another.
 */
export function canFsyncPaths(): boolean {
  if (lib === undefined) {
    try {
      lib = Deno.dlopen(findLibrary(LIBRARY), CPU_FILE_SYMBOLS);
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
    const status = lib!.symbols.dt_cpu_fsync_paths(joined, part.length);
    if (status !== 0) {
      throw new DtNativeError(
        LIBRARY,
        "dt_cpu_fsync_paths",
        status,
        cString(lib!.symbols.dt_last_error()),
      );
    }
  }
}
