/**
 * The NCCL group's watchdog thread (see nccl_watchdog.ts): every few
 * milliseconds, under the communicator's lock, it asks NCCL for an
 * asynchronous error and each collective in flight whether its completion
 * event fired or its deadline passed; every second it looks for the
 * launcher's abort record. On any of them it records the failure and aborts
 * the communicator (once), which makes the collectives in flight end, so a
 * host blocked waiting for the device wakes up and the rank fails instead of
 * hanging.
 */
import { parentPort } from "node:worker_threads";
import { StoreClient } from "../control/store.ts";
import {
  describeCollective,
  FAIL,
  H,
  lockShared,
  OPS,
  recordFailure,
  SLOT,
  SLOT_BASE,
  SLOT_BYTES,
  SLOTS,
  slotWord,
  TEARDOWN_TIMEOUT_MS,
  unlockShared,
  type WatchdogInit,
} from "./nccl_watchdog.ts";
import { finishTeardown } from "./nccl_teardown.ts";
import { NCCL_IN_PROGRESS, NCCL_SUCCESS, ncclCalls } from "../../ffi/nccl.ts";
import { cudaKernels, CudaRuntime } from "../../ffi/cuda.ts";
import { DtNativeError } from "../../ffi/native.ts";

/** How often the launcher's abort record is read. */
const ABORT_POLL_MS = 1000;

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function watch(init: WatchdogInit): Promise<void> {
  const h = new Int32Array(init.sab, 0, 16);
  const words = new Int32Array(init.sab);
  const view = new DataView(init.sab);
  // This thread's own handles of the main thread's libraries (FFI handles do not cross threads).
  const nccl = ncclCalls(init.ncclPath);
  const cuda = new CudaRuntime(cudaKernels(undefined, init.cudaPath));
  const comm = Deno.UnsafePointer.create(init.comm)!;

  const slotText = (i: number) => {
    const base = SLOT_BASE + i * SLOT_BYTES;
    return describeCollective(
      OPS[Atomics.load(words, slotWord(i, SLOT.OP))] ?? "collective",
      Atomics.load(words, slotWord(i, SLOT.SEQ)),
      Number(view.getBigInt64(base + SLOT.BYTES, true)),
      init.rank,
      init.size,
    );
  };
  /** The oldest collective in flight (lowest sequence number), for messages. */
  const oldest = () => {
    let best = -1;
    for (let i = 0; i < SLOTS; i++) {
      if (Atomics.load(words, slotWord(i, SLOT.ACTIVE)) !== 1) continue;
      if (best < 0 || words[slotWord(i, SLOT.SEQ)]! < words[slotWord(best, SLOT.SEQ)]!) best = i;
    }
    return best;
  };
  /** Records why and aborts the communicator (once: RELEASED is set under the lock). */
  const failAndAbort = (kind: number, code: number, text: string) => {
    recordFailure(init.sab, kind, code, text);
    if (Atomics.compareExchange(h, H.RELEASED, 0, 1) === 0) {
      // under the lock to its end: the main thread frees the streams and buffers only after it
      finishTeardown(nccl, comm, nccl.abort(comm), TEARDOWN_TIMEOUT_MS);
    }
  };

  /** One look at the communicator and its collectives; called with the lock held. */
  const poll = () => {
    if (Atomics.load(h, H.RELEASED) !== 0) return;
    // never throws: a failure here is recorded and acted on, and the watch goes on
    const err = nccl.pollAsyncError(comm);
    if (err !== NCCL_SUCCESS && err !== NCCL_IN_PROGRESS) {
      const i = oldest();
      const what = i >= 0
        ? slotText(i)
        : `the NCCL communicator of rank ${init.rank} of ${init.size}`;
      const text = nccl.errorText(err, comm);
      return failAndAbort(
        FAIL.NCCL,
        err,
        `${what} failed: NCCL reported "${text}" (${err}); the communicator was aborted`,
      );
    }
    const now = Date.now();
    for (let i = 0; i < SLOTS; i++) {
      if (Atomics.load(words, slotWord(i, SLOT.ACTIVE)) !== 1) continue;
      const base = SLOT_BASE + i * SLOT_BYTES;
      const event = Deno.UnsafePointer.create(view.getBigInt64(base + SLOT.EVENT, true));
      let done: boolean;
      try {
        done = cuda.query(event!);
      } catch (e) {
        const text = e instanceof DtNativeError ? e.text : (e as Error).message;
        return failAndAbort(
          FAIL.CUDA,
          0,
          `${slotText(i)} failed: the GPU reported "${text}"; the communicator was aborted`,
        );
      }
      if (done) {
        Atomics.store(words, slotWord(i, SLOT.ACTIVE), 0);
        Atomics.add(h, H.FREED, 1);
        Atomics.notify(h, H.FREED);
        continue;
      }
      if (now > Number(view.getBigInt64(base + SLOT.DEADLINE, true))) {
        const ms = Atomics.load(words, slotWord(i, SLOT.TIMEOUT));
        return failAndAbort(
          FAIL.TIMEOUT,
          0,
          `${slotText(i)} timed out after ${ms} ms (DTRAIN_TIMEOUT): some rank did not reach it; ` +
            `the communicator was aborted so that no rank hangs`,
        );
      }
    }
  };

  let store = null as StoreClient | null;
  let abortSeen: string | null = null;
  let reading = false;
  let lastRead = 0;
  const readAbortRecord = async () => {
    if (!init.store || reading) return;
    reading = true;
    try {
      store ??= await StoreClient.connect({
        host: init.store.host,
        port: init.store.port,
        token: init.store.token,
        identity: init.store.identity,
        timeoutMs: 10_000,
      });
      abortSeen = await store.getText(init.store.abortKey);
    } catch {
      init.store = null; // the store is gone: the launcher ends this process anyway
    } finally {
      reading = false;
    }
  };

  try {
    while (Atomics.load(h, H.STOP) === 0) {
      if (Atomics.compareExchange(h, H.LOCK, 0, 1) === 0) {
        try {
          if (abortSeen !== null && Atomics.load(h, H.RELEASED) === 0) {
            failAndAbort(FAIL.LAUNCHER, 0, `the launcher is stopping the run: ${abortSeen}`);
          }
          poll();
        } finally {
          unlockShared(h);
        }
      }
      if (Date.now() - lastRead >= ABORT_POLL_MS && Atomics.load(h, H.RELEASED) === 0) {
        lastRead = Date.now();
        readAbortRecord(); // in the background: the polls go on meanwhile
      }
      await sleep(init.pollMs);
    }
  } finally {
    lockShared(h); // the main thread may be reading the communicator's state; leave in between calls
    Atomics.store(h, H.STOPPED, 1);
    Atomics.notify(h, H.STOPPED);
    unlockShared(h);
    store?.close();
  }
}

// This module runs as a node:worker_threads worker (see nccl_watchdog.ts): one message starts it.
parentPort?.once("message", (init: WatchdogInit) => {
  watch(init).finally(() => parentPort?.close());
});
