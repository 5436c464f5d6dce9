/**
 * The life of one collective call, the same for every backend: refuse a
 * closed or failed group, number the call, check its arguments and timeout
 * (a bad one aborts the whole group so the peers fail at once instead of
 * waiting for this rank), report it to the launcher on entry and exit (hang
 * report, state page), take the clock as "reduction wait", and hand the
 * backend's failure back with its kind. A backend supplies only what differs:
 * how to move the data and how to make its peers stop waiting.
 */
import { type CollectiveRecord, reportCollective } from "../control/phase.ts";
import { enter, leave } from "../../profile/profile.ts";
import type { BufferLike, ReduceOp } from "./collective_buffer.ts";
import {
  allGatherArgs,
  allReduceArgs,
  barrierArgs,
  broadcastArgs,
  type Collective,
  type CollectiveOp,
  reduceScatterArgs,
} from "./collective_args.ts";
import { type CallOptions, COMPLETED, type Work } from "../process_group.ts";

/** What a backend gives the runner. */
export interface CollectiveBackend {
  /** The group in "is closed" errors, e.g. "shared-memory process group /dtrain-…-pg". */
  readonly groupName: string;
  /** The group in GPU-memory refusals when it reads and writes buffers on the host; null when
   *  it takes memory of any device. */
  readonly hostOnly: string | null;
  /** Throws the group's earlier failure, if it has one (checked before anything else). */
  requireHealthy?(op: CollectiveOp): void;
  /** Checks of this backend's own beyond the common ones (collective_args.ts). */
  checkArgs?(c: Collective): void;
  /** This rank called with bad arguments (`reason` says which call and why): make every peer
   *  fail now instead of waiting for this rank until its timeout. */
  abortForBadArguments(reason: string): void;
  /**
   * Moves the data. Returns COMPLETED when the call is complete, or, only when `deferred`
   * (allReduceStart), a Work that completes it later.
   */
  perform(c: Collective, seq: number, timeoutMs: number, deferred: boolean): Work;
  /** The error the caller sees for `e`, thrown by perform(): with its failure kind, after
   *  making sure no peer waits for this rank. */
  failed(e: unknown, c: Collective, seq: number): Error;
}

/** Runs every collective of one group through its backend; see the module comment. */
export class CollectiveRunner {
  readonly #backend: CollectiveBackend;
  readonly #rank: number;
  readonly #size: number;
  readonly #timeoutMs: number;
  #seq = 0;
  #closed = false;

  constructor(backend: CollectiveBackend, rank: number, size: number, timeoutMs: number) {
    this.#backend = backend;
    this.#rank = rank;
    this.#size = size;
    this.#timeoutMs = timeoutMs;
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Marks the group closed; true the first time (the backend then releases what it holds). */
  close(): boolean {
    if (this.#closed) return false;
    this.#closed = true;
    return true;
  }

  /**
   * Numbers a collective the backend runs outside these entry points (the shared-memory group's
   * reserveShared, which its library numbers as a collective too), so the numbers in this
   * runner's reports keep matching the library's messages.
   */
  countOutsideCall(): void {
    this.#seq++;
  }

  // Each entry point is written out, without closures: a DDP step calls allReduce once per
  // bucket, and the closures and argument lists of a general path would cost more than the checks.

  allReduce(buf: BufferLike, op: ReduceOp, opts: CallOptions): void {
    this.#allReduce(buf, op, opts, false);
  }

  allReduceStart(buf: BufferLike, op: ReduceOp, opts: CallOptions): Work {
    return this.#allReduce(buf, op, opts, true);
  }

  broadcast(buf: BufferLike, root: number, opts: CallOptions): void {
    const seq = this.#begin("broadcast");
    let c: Collective, timeoutMs: number;
    try {
      c = broadcastArgs(buf, root, this.#size, this.#backend.hostOnly);
      timeoutMs = this.#prepare(c, opts);
    } catch (e) {
      throw this.#badArguments("broadcast", seq, e);
    }
    this.#perform(c, seq, timeoutMs, false);
  }

  allGather(out: BufferLike, inp: BufferLike, opts: CallOptions): void {
    const seq = this.#begin("allGather");
    let c: Collective, timeoutMs: number;
    try {
      c = allGatherArgs(out, inp, this.#size, this.#backend.hostOnly);
      timeoutMs = this.#prepare(c, opts);
    } catch (e) {
      throw this.#badArguments("allGather", seq, e);
    }
    this.#perform(c, seq, timeoutMs, false);
  }

  reduceScatter(out: BufferLike, inp: BufferLike, op: ReduceOp, opts: CallOptions): void {
    const seq = this.#begin("reduceScatter");
    let c: Collective, timeoutMs: number;
    try {
      c = reduceScatterArgs(out, inp, op, this.#size, this.#backend.hostOnly);
      timeoutMs = this.#prepare(c, opts);
    } catch (e) {
      throw this.#badArguments("reduceScatter", seq, e);
    }
    this.#perform(c, seq, timeoutMs, false);
  }

  barrier(name: string, opts: CallOptions): void {
    const seq = this.#begin("barrier");
    let c: Collective, timeoutMs: number;
    try {
      c = barrierArgs(name);
      timeoutMs = this.#prepare(c, opts);
    } catch (e) {
      throw this.#badArguments("barrier", seq, e);
    }
    this.#perform(c, seq, timeoutMs, false);
  }

  #allReduce(buf: BufferLike, op: ReduceOp, opts: CallOptions, deferred: boolean): Work {
    const seq = this.#begin("allReduce");
    let c: Collective, timeoutMs: number;
    try {
      c = allReduceArgs(buf, op, this.#backend.hostOnly);
      timeoutMs = this.#prepare(c, opts);
    } catch (e) {
      throw this.#badArguments("allReduce", seq, e);
    }
    return this.#perform(c, seq, timeoutMs, deferred);
  }

  /** Refuses a closed or failed group; numbers the call. */
  #begin(op: CollectiveOp): number {
    if (this.#closed) throw new Error(`${op}: the ${this.#backend.groupName} is closed`);
    this.#backend.requireHealthy?.(op);
    return ++this.#seq;
  }

  /** The backend's own argument checks, and the call's timeout: its own or the group's. */
  #prepare(c: Collective, opts: CallOptions): number {
    this.#backend.checkArgs?.(c);
    const timeoutMs = opts.timeoutMs ?? this.#timeoutMs;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`${c.op}: timeoutMs must be a positive number, got ${timeoutMs}`);
    }
    return timeoutMs;
  }

  /** A bad argument aborts the group, so the peers stop waiting for this rank; returns `e`. */
  #badArguments(op: CollectiveOp, seq: number, e: unknown): unknown {
    this.#backend.abortForBadArguments(
      `rank ${this.#rank} called ${op} #${seq} with bad arguments: ${(e as Error).message}`,
    );
    return e;
  }

  /** Reports the call, runs it as "reduction wait" (in a world of several ranks: one rank's
   *  identities wait for nobody), and reports its end (a deferred one's at its Work's wait()). */
  #perform(c: Collective, seq: number, timeoutMs: number, deferred: boolean): Work {
    const rec: CollectiveRecord = c.detail === undefined
      ? { seq, op: c.op, bytes: c.bytes }
      : { seq, op: c.op, bytes: c.bytes, detail: c.detail };
    reportCollective(rec, "enter");
    const waits = this.#size > 1;
    const prev = waits ? enter("reduction wait") : null;
    let work: Work;
    try {
      work = this.#backend.perform(c, seq, timeoutMs, deferred);
    } catch (e) {
      const err = this.#backend.failed(e, c, seq);
      if (waits) leave(prev);
      reportCollective(rec, "exit");
      throw err;
    }
    if (waits) leave(prev);
    if (work === COMPLETED) {
      reportCollective(rec, "exit");
      return COMPLETED;
    }
    return new DeferredWork(work, rec);
  }
}

/** A started collective whose end the launcher hears of when it is waited for. */
class DeferredWork implements Work {
  #work: Work | null;
  readonly #rec: CollectiveRecord;

  constructor(work: Work, rec: CollectiveRecord) {
    this.#work = work;
    this.#rec = rec;
  }

  wait(): void {
    const work = this.#work;
    if (work === null) return;
    this.#work = null;
    try {
      work.wait();
    } finally {
      reportCollective(this.#rec, "exit");
    }
  }
}
