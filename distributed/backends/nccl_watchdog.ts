/**
 * The NCCL group's watchdog and the communicator's lock. NCCL has no timeout
 * and its collectives run on a stream, so the host does not wait for them:
 * a worker thread (nccl_watchdog_worker.ts) polls ncclCommGetAsyncError, the
 * completion event of every collective in flight against its deadline, and
 * the launcher's abort record, and aborts the communicator when one of them
 * goes wrong — also while this thread is blocked in a CUDA call waiting for
 * a collective that will never finish. Both threads reach the communicator
 * only under one lock in shared memory, and whoever releases it (abort or
 * destroy) does so exactly once.
 */
import type { Worker } from "node:worker_threads";
import { nodeWorkerThreads } from "../../os/node_builtin.ts";
import type { NcclCalls } from "../../ffi/nccl.ts";
import { workerModuleUrl } from "../../os/install_layout.ts";
import { type FailureKind, withFailureKind } from "../control/failure_kind.ts";
import { finishTeardown, teardownEnded } from "./nccl_teardown.ts";

/** How long a teardown call answering ncclInProgress is polled before it is given up on. */
export const TEARDOWN_TIMEOUT_MS = 30_000;

/** Int32 fields of the shared header. */
export const H = {
  /** 0 free, 1 held: only the holder calls NCCL on the communicator */
  LOCK: 0,
  /** 0 healthy, 1 failed (KIND, CODE and the reason text say why) */
  STATE: 1,
  /** 0 live, 1 aborted, 2 destroyed: the communicator is freed once */
  RELEASED: 2,
  /** 1: the worker should stop */
  STOP: 3,
  /** 1: the worker has stopped and will not touch the communicator again */
  STOPPED: 4,
  KIND: 5,
  CODE: 6,
  REASON_LEN: 7,
  /** bumped when the worker frees a slot (a thread waiting for one sleeps on it) */
  FREED: 8,
} as const;

/** Why the group failed. */
export const FAIL = { NCCL: 1, TIMEOUT: 2, LAUNCHER: 3, OWN: 4, CUDA: 5 } as const;

/** Collectives in flight at most (more wait for the oldest to finish). */
export const SLOTS = 128;
export const SLOT_BYTES = 48;
export const SLOT_BASE = 64;
/** Slot fields: byte offsets inside a slot. */
export const SLOT = {
  EVENT: 0, // i64: the completion event
  DEADLINE: 8, // i64: ms since the epoch
  BYTES: 16, // i64
  ACTIVE: 24, // i32: 1 while the collective may still be running
  SEQ: 28, // i32: the group's call number
  OP: 32, // i32: index into OPS
  TIMEOUT: 36, // i32: ms
} as const;
export const REASON_BASE = SLOT_BASE + SLOTS * SLOT_BYTES;
export const REASON_BYTES = 2048;
export const SAB_BYTES = REASON_BASE + REASON_BYTES;

/** The Int32 index of an i32 field of a slot. */
export function slotWord(slot: number, field: number): number {
  return (SLOT_BASE + slot * SLOT_BYTES + field) >> 2;
}

/** Collective names, by OP code. */
export const OPS = ["allReduce", "broadcast", "allGather", "reduceScatter", "barrier"] as const;

/** ncclRemoteError: a peer exited or aborted its communicator, a consequence of its failure. */
const NCCL_REMOTE_ERROR = 6;

/** What a collective in flight is, for messages: "allReduce #12 (4096 bytes) on rank 1 of 2". */
export function describeCollective(
  op: string,
  seq: number,
  bytes: number,
  rank: number,
  size: number,
): string {
  return `${op} #${seq} (${bytes} bytes) on rank ${rank} of ${size}`;
}

/** The failure kind the launcher is told for a failure recorded as `kind` with NCCL code `code`. */
export function failureKindOf(kind: number, code: number): FailureKind {
  if (kind === FAIL.TIMEOUT) return "timeout";
  if (kind === FAIL.LAUNCHER) return "peer";
  if (kind === FAIL.NCCL && code === NCCL_REMOTE_ERROR) return "peer";
  return "error";
}

/** Writes the first failure into the header (later ones are ignored); returns whether it was first. */
export function recordFailure(
  sab: SharedArrayBuffer,
  kind: number,
  code: number,
  text: string,
): boolean {
  const h = new Int32Array(sab, 0, 16);
  if (Atomics.compareExchange(h, H.STATE, 0, 2) !== 0) return false; // 2: being written
  const bytes = new TextEncoder().encode(text).subarray(0, REASON_BYTES);
  new Uint8Array(sab, REASON_BASE, REASON_BYTES).set(bytes);
  Atomics.store(h, H.REASON_LEN, bytes.length);
  Atomics.store(h, H.KIND, kind);
  Atomics.store(h, H.CODE, code);
  Atomics.store(h, H.STATE, 1);
  return true;
}

/** Takes the lock, waiting (the other side holds it only around NCCL calls). */
export function lockShared(h: Int32Array): void {
  for (let spins = 0; Atomics.compareExchange(h, H.LOCK, 0, 1) !== 0; spins++) {
    if (spins > 100) Atomics.wait(h, H.LOCK, 1, 10);
  }
}

export function unlockShared(h: Int32Array): void {
  Atomics.store(h, H.LOCK, 0);
  Atomics.notify(h, H.LOCK);
}

/** What the worker is given. */
export interface WatchdogInit {
  sab: SharedArrayBuffer;
  ncclPath: string;
  cudaPath: string;
  comm: bigint;
  rank: number;
  size: number;
  pollMs: number;
  /** the launcher's abort record, read every second; null outside a launched job */
  store: { host: string; port: number; token: string; identity: string; abortKey: string } | null;
}

/** One collective handed to the watchdog. */
export interface Tracked {
  slot: number;
  seq: number;
  event: Deno.PointerObject;
}

/** The main thread's side of the watchdog of one communicator. */
export class NcclWatchdog {
  readonly #sab = new SharedArrayBuffer(SAB_BYTES);
  readonly #h = new Int32Array(this.#sab, 0, 16);
  readonly #words = new Int32Array(this.#sab);
  readonly #view = new DataView(this.#sab);
  readonly #nccl: NcclCalls;
  readonly #comm: Deno.PointerObject;
  readonly #events: Deno.PointerObject[];
  #worker: Worker | null;
  #next = 0;

  /**
   * Starts watching `comm`; `events` (SLOTS of them, owned by the caller and
   * destroyed only after stop()) mark the completion of tracked collectives.
   */
  constructor(
    nccl: NcclCalls,
    comm: Deno.PointerObject,
    events: Deno.PointerObject[],
    init: Omit<WatchdogInit, "sab" | "comm" | "ncclPath">,
  ) {
    if (events.length !== SLOTS) throw new RangeError(`the watchdog needs ${SLOTS} events`);
    this.#nccl = nccl;
    this.#comm = comm;
    this.#events = events;
    this.#events.forEach((e, i) =>
      this.#view.setBigInt64(
        SLOT_BASE + i * SLOT_BYTES + SLOT.EVENT,
        BigInt(Deno.UnsafePointer.value(e)),
        true,
      )
    );
    // node:worker_threads for unref(): a group the script never closes must not keep its
    // process alive (a web Worker would, forever, since the watchdog never ends on its own)
    this.#worker = new (nodeWorkerThreads().Worker)(
      workerModuleUrl("ncclWatchdog", new URL("./nccl_watchdog_worker.ts", import.meta.url)),
    );
    const msg: WatchdogInit = {
      ...init,
      sab: this.#sab,
      comm: BigInt(Deno.UnsafePointer.value(comm)),
      ncclPath: nccl.path,
    };
    this.#worker.postMessage(msg);
    this.#worker.unref();
  }

  /** The recorded failure as an Error marked with its kind, or null while healthy. */
  failure(): Error | null {
    if (Atomics.load(this.#h, H.STATE) !== 1) return null;
    const len = Atomics.load(this.#h, H.REASON_LEN);
    const text = new TextDecoder().decode(new Uint8Array(this.#sab, REASON_BASE, len));
    const kind = Atomics.load(this.#h, H.KIND);
    return withFailureKind(new Error(text), failureKindOf(kind, Atomics.load(this.#h, H.CODE)), {
      inCollective: kind !== FAIL.OWN,
    });
  }

  /** Records this thread's own reason for failing (the first failure wins). */
  fail(kind: number, code: number, text: string): void {
    recordFailure(this.#sab, kind, code, text);
  }

  /** Whether the communicator was aborted or destroyed. */
  get released(): boolean {
    return Atomics.load(this.#h, H.RELEASED) !== 0;
  }

  /**
   * Runs `fn` (which calls NCCL with the communicator) under the lock; throws
   * the group's failure instead when the communicator is already released.
   */
  withComm<T>(fn: (comm: Deno.PointerObject) => T): T {
    lockShared(this.#h);
    try {
      if (Atomics.load(this.#h, H.RELEASED) !== 0) {
        throw this.failure() ?? new Error("the NCCL communicator was released");
      }
      return fn(this.#comm);
    } finally {
      unlockShared(this.#h);
    }
  }

  /**
   * Aborts the communicator unless it was released already: exactly once, whoever asks; polls an
   * abort that answers ncclInProgress to its end (at most `timeoutMs`). Returns whether the
   * communicator is done with its streams and buffers (false only when the abort outlived the time).
   */
  abortOnce(timeoutMs = TEARDOWN_TIMEOUT_MS): boolean {
    lockShared(this.#h);
    try {
      if (Atomics.compareExchange(this.#h, H.RELEASED, 0, 1) !== 0) return true;
      const n = this.#nccl;
      // its own failure cannot be acted on: the group is gone either way
      return teardownEnded(finishTeardown(n, this.#comm, n.abort(this.#comm), timeoutMs));
    } finally {
      unlockShared(this.#h);
    }
  }

  /**
   * Ends the communicator unless it was released already: ncclCommFinalize (where NCCL has it)
   * polled to its end, then ncclCommDestroy polled to its end, each at most `timeoutMs`; a
   * finalize that fails or outlives the time is followed by an abort instead. Returns NCCL's
   * result (0 when nothing was done; ncclInProgress when the communicator may still use its
   * streams and buffers).
   */
  destroyOnce(timeoutMs = TEARDOWN_TIMEOUT_MS): number {
    lockShared(this.#h);
    try {
      if (Atomics.compareExchange(this.#h, H.RELEASED, 0, 2) !== 0) return 0;
      const n = this.#nccl;
      const finalized = n.finalize(this.#comm); // null: this NCCL has no ncclCommFinalize
      if (finalized !== null) {
        const f = finishTeardown(n, this.#comm, finalized, timeoutMs);
        if (f !== 0) {
          const a = finishTeardown(n, this.#comm, n.abort(this.#comm), timeoutMs);
          return teardownEnded(a) ? f : a;
        }
      }
      return finishTeardown(n, this.#comm, n.destroy(this.#comm), timeoutMs);
    } finally {
      unlockShared(this.#h);
    }
  }

  /**
   * A free slot for a new collective: its completion event (to be recorded
   * once the collective is queued) and its number. Waits for the oldest
   * collective when SLOTS are in flight, at most until `deadline`.
   */
  slot(deadline: number): { slot: number; event: Deno.PointerObject } {
    for (;;) {
      for (let k = 0; k < SLOTS; k++) {
        const i = (this.#next + k) % SLOTS;
        if (this.#i32(i, SLOT.ACTIVE) === 0) {
          this.#next = (i + 1) % SLOTS;
          return { slot: i, event: this.#events[i]! };
        }
      }
      const failed = this.failure();
      if (failed) throw failed;
      if (Date.now() > deadline) {
        throw new Error(`${SLOTS} NCCL collectives are still in flight after their deadline`);
      }
      const seen = Atomics.load(this.#h, H.FREED);
      Atomics.wait(this.#h, H.FREED, seen, 10);
    }
  }

  /** Hands a queued collective (its event recorded) to the watchdog. */
  track(
    slot: number,
    c: {
      seq: number;
      op: (typeof OPS)[number];
      bytes: number;
      deadline: number;
      timeoutMs: number;
    },
  ): Tracked {
    const base = SLOT_BASE + slot * SLOT_BYTES;
    this.#view.setBigInt64(base + SLOT.DEADLINE, BigInt(Math.round(c.deadline)), true);
    this.#view.setBigInt64(base + SLOT.BYTES, BigInt(c.bytes), true);
    this.#setI32(slot, SLOT.SEQ, c.seq);
    this.#setI32(slot, SLOT.OP, OPS.indexOf(c.op));
    this.#setI32(slot, SLOT.TIMEOUT, Math.min(c.timeoutMs, 2 ** 31 - 1));
    this.#setI32(slot, SLOT.ACTIVE, 1); // last: the worker reads the slot only once active
    return { slot, seq: c.seq, event: this.#events[slot]! };
  }

  /** Whether a tracked collective may still be running (its slot holds it and is active). */
  inFlight(t: Tracked): boolean {
    return this.#i32(t.slot, SLOT.ACTIVE) === 1 && this.#i32(t.slot, SLOT.SEQ) === t.seq;
  }

  /** Whether any tracked collective may still be running. */
  anyInFlight(): boolean {
    for (let i = 0; i < SLOTS; i++) if (this.#i32(i, SLOT.ACTIVE) === 1) return true;
    return false;
  }

  /** Stops the worker and waits until it has let go of the communicator (bounded). */
  stop(): void {
    if (!this.#worker) return;
    Atomics.store(this.#h, H.STOP, 1);
    const deadline = Date.now() + 5000;
    while (Atomics.load(this.#h, H.STOPPED) === 0 && Date.now() < deadline) {
      Atomics.wait(this.#h, H.STOPPED, 0, 50);
    }
    // A worker that never started (or is stuck) is ended here; it takes the lock for every NCCL call,
    // and the caller takes the lock next, so it cannot be inside one.
    lockShared(this.#h);
    this.#worker.terminate();
    unlockShared(this.#h);
    this.#worker = null;
  }

  #i32(slot: number, field: number): number {
    return Atomics.load(this.#words, slotWord(slot, field));
  }

  #setI32(slot: number, field: number, v: number): void {
    Atomics.store(this.#words, slotWord(slot, field), v);
  }
}
