/**
 * The C library's calls dtrain makes (libc.so.6, opened for each call and
 * closed after it: they are rare): tying a rank to its launcher with
 * prctl(PR_SET_PDEATHSIG), ignoring signals once a rank's script is over,
 * and statvfs for `dtrain doctor` (ffi/mapped_file.ts maps files through the
 * same openLibc). Each answers a result or why it failed;
 * none throws.
 *
 * @module
 */

const LIBC = "libc.so.6";
const PR_SET_PDEATHSIG = 1;

const PRCTL_SYMBOLS = {
  prctl: { parameters: ["i32", "u64", "u64", "u64", "u64"], result: "i32" },
  getppid: { parameters: [], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

const SIGNAL_SYMBOLS = {
  signal: { parameters: ["i32", "pointer"], result: "pointer" },
} as const satisfies Deno.ForeignLibraryInterface;

/** signal(2)'s SIG_IGN and SIG_ERR handler values. */
const SIG_IGN = 1n, SIG_ERR = -1n;

const STATVFS_SYMBOLS = {
  statvfs: { parameters: ["buffer", "buffer"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

/** Opens libc with `symbols`, or gives the reason it cannot be opened (`forWhat`: the call). */
export function openLibc<S extends Deno.ForeignLibraryInterface>(
  symbols: S,
  forWhat?: string,
): Deno.DynamicLibrary<S> | { error: string } {
  try {
    return Deno.dlopen(LIBC, symbols);
  } catch (e) {
    const why = forWhat ? ` for ${forWhat}` : "";
    return { error: `cannot open ${LIBC}${why}: ${(e as Error).message}` };
  }
}

/**
 * prctl(PR_SET_PDEATHSIG, signal): the kernel sends `signal` to this process
 * when its parent thread dies. Answers the parent's pid read right after
 * (getppid), so the caller can tell whether the parent died before the
 * request took effect, or why the request failed.
 *
 * @example
 * ```ts
 * const r = setParentDeathSignal(9);
 * if ("parent" in r) console.log(`dies with pid ${r.parent}`);
 * ```
 */
export function setParentDeathSignal(signal: number): { parent: number } | { error: string } {
  const libc = openLibc(PRCTL_SYMBOLS, "prctl");
  if ("error" in libc) return libc;
  try {
    if (libc.symbols.prctl(PR_SET_PDEATHSIG, BigInt(signal), 0n, 0n, 0n) !== 0) {
      return { error: "prctl(PR_SET_PDEATHSIG) failed" };
    }
    return { parent: libc.symbols.getppid() };
  } finally {
    libc.close();
  }
}

/**
 * signal(n, SIG_IGN) for each of `signals` (by number): from then on the
 * kernel drops them, whatever listeners the runtime had. Answers the numbers
 * it could not ignore (empty when all took), or why libc could not be opened.
 *
 * @example
 * ```ts
 * ignoreSignals([15]); // SIGTERM no longer ends this process
 * ```
 */
export function ignoreSignals(
  signals: readonly number[],
): { failed: number[] } | { error: string } {
  const libc = openLibc(SIGNAL_SYMBOLS, "signal");
  if ("error" in libc) return libc;
  try {
    const ignore = Deno.UnsafePointer.create(SIG_IGN);
    const failed = signals.filter((n) => {
      const before = libc.symbols.signal(n, ignore); // null: the default action (SIG_DFL)
      return before !== null &&
        BigInt(Deno.UnsafePointer.value(before)) === BigInt.asUintN(64, SIG_ERR);
    });
    return { failed };
  } finally {
    libc.close();
  }
}

/**
 * statvfs(path) into `out` (struct statvfs as 64-bit words): "ok", "failed"
 * (the path's own error is the caller's to find), or why libc could not be
 * opened.
 */
export function statvfsWords(path: string, out: BigUint64Array<ArrayBuffer>): "ok" | "failed" | {
  error: string;
} {
  const libc = openLibc(STATVFS_SYMBOLS);
  if ("error" in libc) return libc;
  try {
    return libc.symbols.statvfs(new TextEncoder().encode(path + "\0"), out) === 0 ? "ok" : "failed";
  } finally {
    libc.close();
  }
}
