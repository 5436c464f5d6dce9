/**
 * Ending a nonblocking NCCL communicator (nccl_watchdog.ts and
 * its worker): with config.blocking = 0, ncclCommFinalize, ncclCommDestroy
 * and ncclCommAbort may answer ncclInProgress, and the communicator keeps
 * using its streams, buffers and peers' connections until
 * ncclCommGetAsyncError reports the end. Nothing the communicator may touch
 * is freed before that, so every teardown call goes through
 * `finishTeardown`, which polls.
 */

import { NCCL_IN_PROGRESS, type NcclCalls } from "../../ffi/nccl.ts";

/** The NCCL call a teardown polls (ffi/nccl.ts's calls, or the watchdog worker's own). */
export type TeardownCalls = Pick<NcclCalls, "pollAsyncError">;

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/**
 * `first` is what a teardown call of `comm` answered (NcclCalls' abort,
 * finalize or destroy, which never throw): when ncclInProgress, polls
 * ncclCommGetAsyncError (pollAsyncError, which never throws either) until the communicator reports the end, at
 * most `timeoutMs`. Returns the final result: ncclSuccess, an error, or
 * ncclInProgress when the time ran out (then nothing it uses may be freed).
 * After a destroy or abort, the poll that reports the end was the
 * communicator's last call: it is gone.
 *
 * @example
 * ```ts
 * const r = finishTeardown(nccl, comm, nccl.destroy(comm), 30_000);
 * ```
 */
export function finishTeardown(
  nccl: TeardownCalls,
  comm: Deno.PointerObject,
  first: number,
  timeoutMs: number,
): number {
  if (first !== NCCL_IN_PROGRESS) return first;
  const deadline = Date.now() + timeoutMs;
  for (let polls = 0;; polls++) {
    const r = nccl.pollAsyncError(comm); // the query's own failure, else the communicator's state
    if (r !== NCCL_IN_PROGRESS) return r;
    if (Date.now() > deadline) return NCCL_IN_PROGRESS;
    // a teardown takes milliseconds: spin briefly, then sleep 1 ms at a time
    if (polls >= 100) Atomics.wait(sleeper, 0, 0, 1);
  }
}

/** Whether a teardown ended (anything but ncclInProgress): what it used may be freed. */
export function teardownEnded(result: number): boolean {
  return result !== NCCL_IN_PROGRESS;
}
