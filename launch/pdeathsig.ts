/**
 * Ties a rank's life to its launcher's: asks Linux (prctl PR_SET_PDEATHSIG)
 * to SIGKILL this process when its parent dies, even if the launcher itself
 * is SIGKILLed and cannot stop its ranks. Called through libc's FFI.
 */

const PR_SET_PDEATHSIG = 1;
const SIGKILL = 9n;

/** What dieWithParent() achieved. */
export type ParentWatch =
  | { ok: true }
  | { ok: false; reason: string; parentGone: boolean };

/**
 * Arranges SIGKILL on the parent's death, then checks that the parent is
 * still `expectedParent` (it may have died before the request took effect).
 */
export function dieWithParent(expectedParent: number): ParentWatch {
  let libc: Deno.DynamicLibrary<{
    prctl: { parameters: ["i32", "u64", "u64", "u64", "u64"]; result: "i32" };
    getppid: { parameters: []; result: "i32" };
  }>;
  try {
    libc = Deno.dlopen("libc.so.6", {
      prctl: { parameters: ["i32", "u64", "u64", "u64", "u64"], result: "i32" },
      getppid: { parameters: [], result: "i32" },
    });
  } catch (e) {
    return {
      ok: false,
      parentGone: false,
      reason: `cannot open libc.so.6 for prctl: ${(e as Error).message}`,
    };
  }
  try {
    if (libc.symbols.prctl(PR_SET_PDEATHSIG, SIGKILL, 0n, 0n, 0n) !== 0) {
      return { ok: false, parentGone: false, reason: "prctl(PR_SET_PDEATHSIG) failed" };
    }
    const parent = libc.symbols.getppid();
    if (parent !== expectedParent) {
      return {
        ok: false,
        parentGone: true,
        reason: `the launcher (pid ${expectedParent}) is gone; parent is now pid ${parent}`,
      };
    }
    return { ok: true };
  } finally {
    libc.close();
  }
}
