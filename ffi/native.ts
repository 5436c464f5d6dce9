/**
 * Loads a native library of dtrain and turns its status codes into
 * exceptions. One function searches DTRAIN_LIB_DIR, then the library folder
 * of this install (a checkout's build/, the single file's lib/), and its
 * failure lists every path tried and the command that builds the library.
 * (The single file's extracted files are verified before anything loads, by
 * single_file/entry.ts for the command and launch/rank_main.ts for a rank.)
 */
import { join } from "node:path";
import { installLayout } from "../os/install_layout.ts";

/** Must equal DT_ABI_VERSION in kernels/common/dt_common.h. */
export const ABI_VERSION = 4;

/** An error reported by a native library, carrying its own text. */
export class DtNativeError extends Error {
  readonly status: number;
  readonly library: string;
  readonly symbol: string;
  /** The library's own text (what the message quotes after the symbol and status). */
  readonly text: string;
  constructor(library: string, symbol: string, status: number, text: string) {
    super(
      `${symbol} failed (${library}, status ${status}): ${nativeErrorText(library, status, text)}`,
    );
    this.name = "DtNativeError";
    this.status = status;
    this.library = library;
    this.symbol = symbol;
    this.text = text;
  }
}

/**
 * The text a failing native call carries, never blank and never with C's
 * "(null)" (what printf writes for a NULL string): either means the library
 * failed without saying why, a bug in it, and the message says so instead of
 * passing the gap or the "(null)" on to the user.
 */
export function nativeErrorText(library: string, status: number, text: string): string {
  const missing = `[${library} gave no text for this part: a bug in ${library}]`;
  if (text.trim() === "") {
    return `no error text (${library} returned status ${status} without one: a bug in ${library})`;
  }
  return text.replaceAll("(null)", missing);
}

/**
 * Folders searched for native libraries, in order: DTRAIN_LIB_DIR, then the
 * build/ folder of this checkout or, when running from the single file, the
 * lib/ folder of its extraction cache.
 */
export function libraryDirs(): string[] {
  const dirs: string[] = [];
  const env = Deno.env.get("DTRAIN_LIB_DIR");
  if (env) dirs.push(env);
  const layout = installLayout();
  if (layout) dirs.push(layout.libDir);
  return dirs;
}

/** Finds `name` in libraryDirs() or throws an error that lists where it looked. */
export function findLibrary(name: string): string {
  const tried: string[] = [];
  for (const dir of libraryDirs()) {
    const path = join(dir, name);
    tried.push(path);
    let found = false;
    try {
      found = Deno.statSync(path).isFile;
    } catch { /* try the next folder */ }
    if (found) return path;
  }
  throw new Error(
    `Cannot find native library ${name}: looked in ${tried.join(", ") || "(no folders)"}. ` +
      `Build it with \`deno task native\` in a dtrain checkout, or set DTRAIN_LIB_DIR to the folder that holds it.`,
  );
}

/** Reads a NUL-terminated C string returned by a native call. */
export function cString(ptr: Deno.PointerValue): string {
  return ptr === null ? "" : Deno.UnsafePointerView.getCString(ptr);
}

/** An opened library with status checking (ffi/calls.ts builds wrappers on it). */
export interface NativeLibrary<S extends Deno.ForeignLibraryInterface> {
  readonly path: string;
  readonly symbols: Deno.DynamicLibrary<S>["symbols"];
  /** Throws DtNativeError for `symbol` with the library's text for this thread's last error. */
  fail(symbol: string, status: number): never;
  /** Throws as `fail` does when status != 0 (for calls whose symbol is chosen at run time). */
  check(status: number, symbol: string): void;
  close(): void;
}

/** A library's symbols, each bound on first use, and the handles that binding opened. */
interface LazySymbols<S extends Deno.ForeignLibraryInterface> {
  symbols: Deno.DynamicLibrary<S>["symbols"];
  close(): void;
}

/**
 * The symbols of the library at `path`, each bound the first time it is read. Deno.dlopen builds
 * a call stub for every function it binds, ~0.15 ms each, which made binding the CPU library's
 * whole table 10-20 ms of every process start although a run calls a few dozen of its kernels.
 * Every required symbol is still looked up here, at once, as a static (an address lookup without
 * a stub), so a library that lacks one is refused when it is opened, as before, not at the first
 * call. A bound symbol is the function Deno.dlopen makes, as fast to call as before.
 */
function bindOnFirstUse<S extends Deno.ForeignLibraryInterface>(
  path: string,
  table: S,
): LazySymbols<S> {
  const lookups: Record<string, Deno.ForeignStatic> = {};
  for (const [key, def] of Object.entries(table)) {
    if (!("optional" in def && def.optional)) {
      lookups[key] = { name: "name" in def && def.name ? def.name : key, type: "pointer" };
    }
  }
  const handles: Deno.DynamicLibrary<Deno.ForeignLibraryInterface>[] = [
    Deno.dlopen(path, lookups),
  ];
  const symbols: Record<string, unknown> = {};
  for (const key of Object.keys(table)) {
    // Once bound (or assigned), a plain writable property, as in the table Deno.dlopen returns.
    const settle = (value: unknown) =>
      Object.defineProperty(symbols, key, {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    Object.defineProperty(symbols, key, {
      configurable: true,
      enumerable: true,
      get() {
        const one = Deno.dlopen(path, { [key]: table[key]! });
        handles.push(one);
        const value = one.symbols[key];
        settle(value);
        return value;
      },
      set: settle,
    });
  }
  return {
    symbols: symbols as Deno.DynamicLibrary<S>["symbols"],
    close: () => {
      for (const h of handles.splice(0)) h.close();
    },
  };
}

/** Opens `name` with `symbols`, verifying dt_abi_version() when it exists. */
export function openLibrary<S extends Deno.ForeignLibraryInterface>(
  name: string,
  symbols: S,
  path = findLibrary(name),
): NativeLibrary<S> {
  let lib: LazySymbols<S>;
  try {
    lib = bindOnFirstUse(path, symbols);
  } catch (e) {
    throw new Error(
      `Cannot load native library ${path}: ${(e as Error).message}. ` +
        `Rebuild it with \`deno task native --force\`.`,
      { cause: e },
    );
  }
  // deno-lint-ignore no-explicit-any
  const sym = lib.symbols as any;
  if ("dt_abi_version" in symbols) {
    const v = sym.dt_abi_version() as number;
    if (v !== ABI_VERSION) {
      lib.close();
      throw new Error(
        `Native library ${path} has ABI version ${v}, this dtrain needs ${ABI_VERSION}: ` +
          `rebuild it with \`deno task native --force\`.`,
      );
    }
  }
  const lastError = "dt_last_error" in symbols
    ? () => cString(sym.dt_last_error())
    : () => "(no error text)";
  const fail = (symbol: string, status: number): never => {
    throw new DtNativeError(name, symbol, status, lastError());
  };
  return {
    path,
    symbols: lib.symbols,
    fail,
    check(status: number, symbol: string) {
      if (status !== 0) fail(symbol, status);
    },
    close: () => lib.close(),
  };
}

/** A NUL-terminated UTF-8 copy of s for a `const char*` parameter (an inner NUL becomes a space). */
export function cBytes(s: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(s.replaceAll("\0", " ") + "\0") as Uint8Array<ArrayBuffer>;
}
