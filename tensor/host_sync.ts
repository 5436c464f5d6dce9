/**
 * The host's waits for the device, counted: every place where TypeScript
 * makes the host wait for queued device work (reading a tensor back, a
 * process group waiting for a collective) reports itself here, so a test can
 * hold a training step to its explicit synchronisations, and listeners (a
 * process group's failure check) run right after each wait.
 */

const byWhat = new Map<string, number>();
let total = 0;
const listeners = new Set<(what: string) => void>();

/**
 * Records one host wait of kind `what` that has just ended, then runs the
 * listeners (which may throw: a collective that failed while the host
 * waited is reported by the read that waited for it).
 */
export function noteHostSync(what: string): void {
  total++;
  byWhat.set(what, (byWhat.get(what) ?? 0) + 1);
  for (const l of listeners) l(what);
}

/**
 * Host waits so far in this process, in total and by kind.
 *
 * @example
 * ```ts
 * const before = hostSyncCounts().total;
 * loss.item();
 * hostSyncCounts().total - before; // 1
 * ```
 */
export function hostSyncCounts(): { total: number; byWhat: Record<string, number> } {
  return { total, byWhat: Object.fromEntries(byWhat) };
}

/** Runs `fn` after every host wait; returns the function that removes it. */
export function onHostSync(fn: (what: string) => void): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}
