/**
 * The NCCL watchdog's shared state (distributed/backends/nccl_watchdog.ts) without a
 * GPU: the first failure recorded wins (the watchdog thread and the main
 * thread may both fail the group), each failure maps to the kind the
 * launcher is told (a peer's failure is a consequence, a deadline a
 * timeout), and the lock admits one holder at a time.
 */
import assert from "node:assert/strict";
import {
  FAIL,
  failureKindOf,
  H,
  lockShared,
  REASON_BASE,
  recordFailure,
  SAB_BYTES,
  unlockShared,
} from "../../distributed/backends/nccl_watchdog.ts";

Deno.test("recordFailure() keeps the first failure, whoever records it later", () => {
  const sab = new SharedArrayBuffer(SAB_BYTES);
  const h = new Int32Array(sab, 0, 16);
  assert.equal(recordFailure(sab, FAIL.NCCL, 6, "allReduce #3 failed: remote error"), true);
  assert.equal(recordFailure(sab, FAIL.TIMEOUT, 0, "allReduce #3 timed out"), false);
  assert.equal(Atomics.load(h, H.STATE), 1);
  assert.equal(Atomics.load(h, H.KIND), FAIL.NCCL);
  assert.equal(Atomics.load(h, H.CODE), 6);
  const text = new TextDecoder().decode(
    new Uint8Array(sab, REASON_BASE, Atomics.load(h, H.REASON_LEN)),
  );
  assert.equal(text, "allReduce #3 failed: remote error");
});

Deno.test("failureKindOf(): remote errors and the launcher's stop are a peer's, deadlines timeouts", () => {
  assert.equal(failureKindOf(FAIL.NCCL, 6), "peer"); // ncclRemoteError
  assert.equal(failureKindOf(FAIL.NCCL, 5), "error"); // ncclInvalidUsage: this rank's own
  assert.equal(failureKindOf(FAIL.TIMEOUT, 0), "timeout");
  assert.equal(failureKindOf(FAIL.LAUNCHER, 0), "peer");
  assert.equal(failureKindOf(FAIL.OWN, 0), "error");
  assert.equal(failureKindOf(FAIL.CUDA, 0), "error");
});

Deno.test("the communicator's lock admits one holder; a waiter gets it when it is released", async () => {
  const sab = new SharedArrayBuffer(SAB_BYTES);
  const h = new Int32Array(sab, 0, 16);
  lockShared(h);
  assert.equal(Atomics.compareExchange(h, H.LOCK, 0, 1), 1, "a second holder got the lock");
  setTimeout(() => unlockShared(h), 20);
  await new Promise((r) => setTimeout(r, 40));
  lockShared(h); // released by then
  assert.equal(Atomics.load(h, H.LOCK), 1);
  unlockShared(h);
  assert.equal(Atomics.load(h, H.LOCK), 0);
});
