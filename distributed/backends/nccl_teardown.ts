/**
 * Ending a nonblocking NCCL communicator (nccl_watchdog.ts and
 * its worker): with config.blocking = 0, ncclCommFinalize, ncclCommDestroy
 * and ncclCommAbort may answer ncclInProgress, and the communicator keeps
 * using its streams, buffers and peers' connections until
 * ncclCommGetAsyncError reports the end. Nothing the communicator may touch
 * is freed before that, so every teardown call goes through
 * `finishTeardown`, which polls.
 */

/** ncclResult_t ncclInProgress. */
const IN_PROGRESS = 7;

/** The NCCL calls a teardown needs (ffi/nccl.ts's library, or the watchdog worker's own). */
export interface TeardownSymbols {
  ncclCommGetAsyncError(comm: Deno.PointerValue, state: Int32Array): number;
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/**
 * `first` is what a teardown call of `comm` answered: when ncclInProgress,
 * polls ncclCommGetAsyncError until the communicator reports the end, at
 * most `timeoutMs`. Returns the final result: ncclSuccess, an error, or
 * ncclInProgress when the time ran out (then nothing it uses may be freed).
 * After a destroy or abort, the poll that reports the end was the
 * communicator's last call: it is gone.
 *
 * @example
 * ```ts
 * const r = finishTeardown(lib.symbols, comm, lib.symbols.ncclCommDestroy(comm), 30_000);
 * ```
 */
export function finishTeardown(
  nccl: TeardownSymbols,
  comm: Deno.PointerValue,
  first: number,
  timeoutMs: number,
): number {
  if (first !== IN_PROGRESS) return first;
  const state = new Int32Array(1);
  const deadline = Date.now() + timeoutMs;
  for (let polls = 0;; polls++) {
    const q = nccl.ncclCommGetAsyncError(comm, state);
    if (q !== 0) return q;
    if (state[0] !== IN_PROGRESS) return state[0]!;
    if (Date.now() > deadline) return IN_PROGRESS;
    // a teardown takes milliseconds: spin briefly, then sleep 1 ms at a time
    if (polls >= 100) Atomics.wait(sleeper, 0, 0, 1);
  }
}

/** Whether a teardown ended (anything but ncclInProgress): what it used may be freed. */
export function teardownEnded(result: number): boolean {
  return result !== IN_PROGRESS;
}
