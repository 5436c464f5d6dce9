/**
 * The shared-memory segments of one launch attempt on this machine:
 * `/dev/shm/dtrain-<run id>-a<attempt>-*`. Ranks unlink them once every rank
 * has attached; a rank that dies during rendezvous leaves one behind, so the
 * launcher removes whatever is left when the attempt ends.
 */

/** Where POSIX shared-memory objects live on Linux. */
export const SHM_DIR = "/dev/shm";

/** The name prefix of attempt `attempt` of run `runId` (the "-a<k>-" part keeps "run-2" apart from "run"). */
export function segmentPrefix(runId: string, attempt: number): string {
  return `dtrain-${runId}-a${attempt}-`;
}

/** Names of the attempt's segments still in /dev/shm. */
export function attemptSegments(runId: string, attempt: number, dir = SHM_DIR): string[] {
  const prefix = segmentPrefix(runId, attempt);
  try {
    return [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n.startsWith(prefix));
  } catch {
    return []; // no /dev/shm: nothing can be left there
  }
}

/**
 * Removes the attempt's segments; returns the names removed and, for any
 * that could not be, why. Call it only once no rank of the attempt runs on
 * this machine.
 */
export function removeAttemptSegments(
  runId: string,
  attempt: number,
  dir = SHM_DIR,
): { removed: string[]; failed: string[] } {
  const removed: string[] = [], failed: string[] = [];
  for (const name of attemptSegments(runId, attempt, dir)) {
    try {
      Deno.removeSync(`${dir}/${name}`);
      removed.push(name);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) failed.push(`${name}: ${(e as Error).message}`);
    }
  }
  return { removed, failed };
}
