/**
 * The lock a live launcher holds on its run directory, so two runs never
 * share one (one resuming from the other's checkpoints, both appending to
 * metrics.jsonl). It is an flock on `dtrain.lock` (`dtrain-node<n>.lock` for
 * node n > 0): the operating system releases it when the launcher dies, even
 * by SIGKILL, so a lock left by a dead launcher is simply taken over.
 */
import { join } from "node:path";

/** What the lock file records about its holder. */
interface Holder {
  pid: number;
  host: string;
  startedAt: string;
  runId: string;
}

/** The lock file of node `nodeRank` in `runDir`. */
export function runLockPath(runDir: string, nodeRank: number): string {
  return join(runDir, nodeRank === 0 ? "dtrain.lock" : `dtrain-node${nodeRank}.lock`);
}

/** Another live launcher holds the run directory. */
export class RunDirBusy extends Error {
  override name = "RunDirBusy";
}

function readHolder(file: Deno.FsFile): Holder | null {
  try {
    file.seekSync(0, Deno.SeekMode.Start);
    const buf = new Uint8Array(4096);
    const n = file.readSync(buf) ?? 0;
    const h = JSON.parse(new TextDecoder().decode(buf.subarray(0, n)));
    return Number.isSafeInteger(h?.pid) ? h as Holder : null;
  } catch {
    return null;
  }
}

/** A held lock; release() (or the process's end) lets the next run in. */
export interface RunLock {
  /**
   * The previous holder when it died holding the lock (a launcher that ends
   * normally empties the file as it releases it).
   */
  readonly previous: Holder | null;
  release(): void;
}

/**
 * Takes the run directory's lock without waiting; throws RunDirBusy naming
 * the pid (and host) that holds it.
 */
export function lockRunDir(runDir: string, nodeRank: number, runId: string): RunLock {
  const path = runLockPath(runDir, nodeRank);
  const file = Deno.openSync(path, { read: true, write: true, create: true, mode: 0o644 });
  try {
    if (!file.tryLockSync(true)) {
      const h = readHolder(file);
      const who = h
        ? `pid ${h.pid} on ${h.host}, run ${h.runId}, since ${h.startedAt}`
        : "a process that has not written its pid yet";
      throw new RunDirBusy(
        `Run directory ${runDir} is in use by another dtrain launcher (${who}): ` +
          `wait for it to end, or choose another --run-dir`,
      );
    }
  } catch (e) {
    file.close();
    throw e;
  }
  const previous = readHolder(file);
  const me: Holder = {
    pid: Deno.pid,
    host: Deno.hostname(),
    startedAt: new Date().toISOString(),
    runId,
  };
  file.truncateSync(0);
  file.seekSync(0, Deno.SeekMode.Start);
  const bytes = new TextEncoder().encode(JSON.stringify(me) + "\n");
  for (let off = 0; off < bytes.length;) off += file.writeSync(bytes.subarray(off));
  let held = true;
  return {
    previous,
    release() {
      if (!held) return;
      held = false;
      try {
        file.truncateSync(0); // a clean end: the next holder takes over nothing
      } catch { /* the lock is released below all the same */ }
      file.close(); // closing the descriptor releases the flock
    },
  };
}
