/**
 * Ties a rank's life to its launcher's: asks Linux (prctl PR_SET_PDEATHSIG)
 * to SIGKILL this process when its parent dies, even if the launcher itself
 * is SIGKILLed and cannot stop its ranks. Called through libc's FFI
 * (ffi/libc.ts).
 */
import { setParentDeathSignal } from "../ffi/libc.ts";

const SIGKILL = 9;

/** What dieWithParent() achieved. */
export type ParentWatch =
  | { ok: true }
  | { ok: false; reason: string; parentGone: boolean };

/**
 * Arranges SIGKILL on the parent's death, then checks that the parent is
 * still `expectedParent` (it may have died before the request took effect).
 */
export function dieWithParent(expectedParent: number): ParentWatch {
  const r = setParentDeathSignal(SIGKILL);
  if ("error" in r) return { ok: false, parentGone: false, reason: r.error };
  if (r.parent !== expectedParent) {
    return {
      ok: false,
      parentGone: true,
      reason: `the launcher (pid ${expectedParent}) is gone; parent is now pid ${r.parent}`,
    };
  }
  return { ok: true };
}
