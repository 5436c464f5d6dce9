/**
 * The NCCL process group of GPU ranks, behind the ProcessGroup API.
 *
 * - Start: rank 0's ncclUniqueId travels through the control store; each rank
 *   creates its communicator with ncclCommInitRankConfig(blocking = 0) from
 *   the main thread, the thread that chose the rank's GPU (NCCL takes the
 *   calling thread's current device), and polls ncclCommGetAsyncError up to
 *   the timeout, aborting the communicator when it runs out. Why not
 *   CUDA_VISIBLE_DEVICES per rank instead: it would hide the other GPUs from
 *   the rank (and from the user's script), change what device indices mean
 *   for it, and still leave a blocking init that nothing could bound or abort.
 * - Collectives run on a communication stream ordered after the compute
 *   stream by an event; on device memory the host does not wait: the compute
 *   stream waits for the collective's completion event (allReduceStart's
 *   Work.wait() likewise), so DDP's reductions overlap backward and the
 *   optimizer step follows them on the GPU. Host arrays are staged through
 *   device memory and copied back (the host waits then), and barrier() waits.
 * - A watchdog thread (nccl_watchdog.ts) enforces deadlines, NCCL's
 *   asynchronous errors and the launcher's abort record, aborting the
 *   communicator exactly once; the group reports its failure at the next
 *   call, at Work.wait(), and after any host wait for the device.
 */
import { type KernelCalls, kernelCalls } from "../../ffi/calls.ts";
import { cudaKernels, CudaRuntime } from "../../ffi/cuda.ts";
import { allocOrNull } from "../../ffi/value_calls.ts";
import {
  NCCL_DTYPE,
  NCCL_IN_PROGRESS,
  NCCL_OP,
  NCCL_SUCCESS,
  type NcclCalls,
  ncclCalls,
  ncclConfig,
  type NcclProgress,
} from "../../ffi/nccl.ts";
import { type CudaBackend, openCudaBackend, openedCudaBackend } from "../../tensor/cuda_backend.ts";
import { noteHostSync, onHostSync } from "../../tensor/host_sync.ts";
import { reportCollective } from "../control/phase.ts";
import type { ResolvedBuffer } from "./collective_buffer.ts";
import type { Collective } from "./collective_args.ts";
import { CollectiveRunner } from "./collective_runner.ts";
import { CollectiveGroup } from "./collective_group.ts";
import { getRankSettings, getWorld, storeToken } from "../control/env.ts";
import { attemptKeys } from "../control/store_keys.ts";
import { type FailureKind, failureKind, withFailureKind } from "../control/failure_kind.ts";
import { syncStore } from "../control/sync_store.ts";
import {
  describeCollective,
  FAIL,
  NcclWatchdog,
  SLOTS,
  TEARDOWN_TIMEOUT_MS,
  type Tracked,
} from "./nccl_watchdog.ts";
import { COMPLETED, type Work } from "../process_group.ts";
import { finishTeardown, teardownEnded } from "./nccl_teardown.ts";

/** What the host watches while it waits for a collective. */
export interface CompletionProbe {
  /** whether the collective's completion event has fired */
  done(): boolean;
  /** ncclCommGetAsyncError's result (0 success, 7 in progress, else an error) */
  asyncError(): number;
  /** NCCL's text for a result */
  errorText(result: number): string;
  /** ncclCommAbort: makes every pending operation of the communicator fail */
  abort(): void;
  /** ms clock */
  now(): number;
  /** lets time pass between polls (`polls` so far) */
  pause(polls: number): void;
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** ncclRemoteError: "a call failed possibly due to a network error or a remote process exiting". */
const NCCL_REMOTE_ERROR = 6;

function throwKind(e: Error, kind: FailureKind): never {
  throw withFailureKind(e, kind, { inCollective: true });
}

/** Spins for the first polls (small collectives end in microseconds), then sleeps 1 ms at a time. */
export function pauseBetweenPolls(polls: number): void {
  if (polls >= 2000) Atomics.wait(sleeper, 0, 0, 1);
}

/**
 * Waits on the host until the collective described by `what` completes
 * (barrier, and the group's close). NCCL has no timeout, so this polls: an
 * asynchronous NCCL error or the deadline aborts the communicator (peers
 * then fail instead of hanging) and throws.
 *
 * @example
 * ```ts
 * waitForCollective(probe, "barrier #12 (0 bytes) on rank 1 of 8", Date.now() + 60_000, 60_000);
 * ```
 */
export function waitForCollective(
  probe: CompletionProbe,
  what: string,
  deadline: number,
  timeoutMs: number,
): void {
  for (let polls = 0;; polls++) {
    if (probe.done()) return;
    const err = probe.asyncError();
    if (err !== NCCL_SUCCESS && err !== NCCL_IN_PROGRESS) {
      probe.abort();
      // ncclRemoteError: a peer exited or aborted its communicator, a consequence of its failure.
      return throwKind(
        new Error(
          `${what} failed: NCCL reported "${
            probe.errorText(err)
          }" (${err}); the communicator was aborted`,
        ),
        err === NCCL_REMOTE_ERROR ? "peer" : "error",
      );
    }
    if (probe.now() > deadline) {
      probe.abort();
      return throwKind(
        new Error(
          `${what} timed out after ${timeoutMs} ms (DTRAIN_TIMEOUT): some rank did not reach it; the communicator ` +
            `was aborted so that no rank hangs`,
        ),
        "timeout",
      );
    }
    probe.pause(polls);
  }
}

/** Options of NcclProcessGroup.open; the defaults come from the launcher's environment. */
export interface NcclGroupOptions {
  /** this rank and the world size (default: the launcher's RANK and WORLD_SIZE) */
  rank?: number;
  size?: number;
  /** default timeout of every call and of the communicator's start, ms (default: DTRAIN_TIMEOUT) */
  timeoutMs?: number;
  /** how often the watchdog looks at the collectives in flight, ms (default 10) */
  pollMs?: number;
}

/** A collective as #perform needs it: the buffers it reads and writes, and the NCCL call. */
interface Plan {
  /** read by the collective (staged to the GPU first when they are host memory) */
  inputs: ResolvedBuffer[];
  /** written by it (copied back when they are host memory) */
  outputs: ResolvedBuffer[];
  symbol: string;
  /** enqueues the call, given the device pointers of inputs then outputs (throws when NCCL fails) */
  enqueue(
    comm: Deno.PointerObject,
    ptrs: Deno.PointerValue[],
    stream: Deno.PointerObject,
  ): NcclProgress;
}

/** How #perform finishes a call. */
type Finish =
  /** the compute stream waits for the collective; the host does not */
  | "stream"
  /** the host waits (barrier) */
  | "host"
  /** nothing yet: the caller's Work orders the compute stream later */
  | "later";

let groups = 0; // groups opened by this process: every rank opens them in the same order

/** Polls of the watchdog, ms. */
const DEFAULT_POLL_MS = 10;

/** The NCCL process group; create it with initProcessGroup() on a GPU rank, or NcclProcessGroup.open(). */
export class NcclProcessGroup extends CollectiveGroup {
  readonly rank: number;
  readonly size: number;
  readonly backend = "nccl" as const;
  /** NCCL's version, e.g. "2.27.3" */
  readonly ncclVersion: string;
  /** the GPU of this rank (its index among the visible ones) */
  readonly gpu: number;
  readonly #nccl: NcclCalls;
  readonly #rt: CudaRuntime;
  readonly #compute: Deno.PointerObject;
  readonly #stream: Deno.PointerObject;
  /** Kernel calls on the communication stream (staging copies). */
  readonly #onStream: KernelCalls;
  readonly #ready: Deno.PointerObject;
  readonly #events: Deno.PointerObject[];
  readonly #watch: NcclWatchdog;
  readonly #timeoutMs: number;
  readonly #stopSyncHook: () => void;
  #staging: { ptr: Deno.PointerObject; bytes: number } | null = null;
  #barrierBuf: Deno.PointerObject | null = null;
  protected readonly runner: CollectiveRunner;

  private constructor(
    rank: number,
    size: number,
    gpu: CudaBackend,
    nccl: NcclCalls,
    comm: Deno.PointerObject,
    timeoutMs: number,
    pollMs: number,
  ) {
    super();
    this.rank = rank;
    this.size = size;
    this.gpu = gpu.index;
    this.ncclVersion = nccl.version;
    this.#nccl = nccl;
    this.#timeoutMs = timeoutMs;
    const kernels = cudaKernels();
    this.#rt = new CudaRuntime(kernels);
    this.#compute = this.#rt.computeStream();
    this.#stream = this.#rt.createStream();
    this.#onStream = kernelCalls(kernels, this.#stream);
    this.#ready = this.#rt.createEvent();
    this.#events = Array.from({ length: SLOTS }, () => this.#rt.createEvent());
    const world = getWorld();
    const token = storeToken();
    this.#watch = new NcclWatchdog(nccl, comm, this.#events, {
      cudaPath: kernels.path,
      rank,
      size,
      pollMs,
      store: world.isLauncher && token !== null && size > 1
        ? {
          host: world.masterAddr,
          port: world.masterPort,
          token,
          identity: `rank ${rank} (NCCL watchdog)`,
          abortKey: attemptKeys(getRankSettings().restartCount).abort,
        }
        : null,
    });
    this.runner = new CollectiveRunner(
      {
        groupName: `NCCL process group of rank ${rank}`,
        hostOnly: null,
        requireHealthy: (op) => this.#requireHealthy(op),
        abortForBadArguments: (reason) => {
          this.#watch.fail(FAIL.OWN, 0, reason);
          this.#watch.abortOnce();
        },
        perform: (c, seq, timeoutMs, deferred) => this.#perform(c, seq, timeoutMs, deferred),
        failed: (e, c, seq) => {
          if (!this.#watch.failure()) {
            const what = describeCollective(c.op, seq, c.bytes, this.rank, this.size);
            this.#watch.fail(FAIL.OWN, 0, `${what} failed: ${(e as Error).message}`);
            this.#watch.abortOnce();
          }
          return e as Error;
        },
      },
      rank,
      size,
      timeoutMs,
    );
    // A collective that failed while the host waited for the device is reported by that wait.
    this.#stopSyncHook = onHostSync(() => {
      const f = this.#watch.failure();
      if (f && !this.runner.closed) throw this.#failedEarlier("the device", f);
    });
  }

  /**
   * Joins the NCCL communicator of this launch on this rank's GPU (the
   * backend's: GPU LOCAL_RANK), exchanging rank 0's unique id through the
   * control store; returns once every rank has joined, at most the timeout.
   *
   * @example
   * ```ts
   * using pg = NcclProcessGroup.open({ timeoutMs: 60_000 });
   * pg.allReduce({ ptr: grads.ptr, count: grads.numel, dtype: "f32" }, "avg");
   * ```
   */
  static open(opts: NcclGroupOptions = {}): NcclProcessGroup {
    const world = getWorld();
    const rank = opts.rank ?? world.rank;
    const size = opts.size ?? world.worldSize;
    const timeoutMs = opts.timeoutMs ?? getRankSettings().timeoutS * 1000;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`timeoutMs must be > 0, got ${timeoutMs}`);
    }
    // The rank's GPU, chosen (on this thread) before NCCL looks at the current device.
    const gpu = openedCudaBackend() ?? openCudaBackend();
    if (gpu.kind === "cuda-emu" && gpu.libraries.nccl === null) {
      throw new Error(
        "Cannot create the NCCL process group on the emulated device: its NCCL stand-in " +
          "(libdtrain_nccl_emu.so) is not built (g++ builds it: `deno task native`)",
      );
    }
    const nccl = ncclCalls(gpu.kind === "cuda-emu" ? gpu.libraries.nccl! : undefined);
    const gen = ++groups;
    const rec = { seq: 0, op: "barrier", bytes: 0, detail: `NCCL communicator ${gen} start` };
    reportCollective(rec, "enter");
    let comm: Deno.PointerObject;
    try {
      const id = new Uint8Array(128);
      if (rank === 0) nccl.ncclGetUniqueId(id);
      const keys = attemptKeys(getRankSettings().restartCount);
      const joined = keys.user(`nccl/${gen}/joined`);
      if (size > 1) {
        exchangeUniqueId(id, rank, keys.user(`nccl/${gen}/unique-id`), joined, timeoutMs);
      }
      comm = startCommunicator(nccl, id, rank, size, timeoutMs, size > 1 ? joined : null);
    } finally {
      reportCollective(rec, "exit");
    }
    return new NcclProcessGroup(
      rank,
      size,
      gpu,
      nccl,
      comm,
      timeoutMs,
      opts.pollMs ?? DEFAULT_POLL_MS,
    );
  }

  /**
   * Detaches from the group, once: after a failure (here or, through the
   * watchdog, anywhere) the communicator was or is now aborted, so peers
   * fail too; otherwise the collectives in flight finish (at most the
   * timeout) and it is destroyed. Never frees the communicator twice.
   */
  override close(): void {
    if (!this.runner.close()) return;
    this.#stopSyncHook();
    const deadline = Date.now() + this.#timeoutMs;
    for (let polls = 0; this.#watch.anyInFlight() && !this.#watch.failure(); polls++) {
      if (Date.now() > deadline) {
        this.#watch.fail(FAIL.TIMEOUT, 0, "collectives were still running when the group closed");
        break;
      }
      pauseBetweenPolls(polls);
    }
    this.#watch.stop(); // from here on this thread alone reaches the communicator
    const ended = this.#watch.failure() || this.#watch.anyInFlight()
      ? this.#watch.abortOnce()
      : teardownEnded(this.#watch.destroyOnce());
    // a communicator whose teardown never ended may still use them: leaked rather than freed
    if (!ended) return;
    for (const p of [this.#staging?.ptr, this.#barrierBuf]) {
      if (p) this.#onStream.dt_free(p);
    }
    for (const e of [...this.#events, this.#ready]) this.#rt.destroyEvent(e);
    this.#rt.destroyStream(this.#stream);
  }

  /** The buffers and the NCCL call of a checked collective. */
  #plan(c: Collective): Plan {
    const nccl = this.#nccl;
    const i = c.inp!, o = c.out!;
    switch (c.op) {
      case "allReduce": {
        const args = [BigInt(i.count), NCCL_DTYPE[i.dtype], NCCL_OP[c.reduceOp]] as const;
        return {
          inputs: [i],
          outputs: [o],
          symbol: "ncclAllReduce",
          enqueue: (c, p, s) => nccl.ncclAllReduce(p[0]!, p[1]!, ...args, c, s),
        };
      }
      case "broadcast": {
        const args = [BigInt(i.count), NCCL_DTYPE[i.dtype], c.root] as const;
        return {
          inputs: [i],
          outputs: [o],
          symbol: "ncclBroadcast",
          enqueue: (c, p, s) => nccl.ncclBroadcast(p[0]!, p[1]!, ...args, c, s),
        };
      }
      case "allGather": {
        const args = [BigInt(i.count), NCCL_DTYPE[i.dtype]] as const;
        return {
          inputs: [i],
          outputs: [o],
          symbol: "ncclAllGather",
          enqueue: (c, p, s) => nccl.ncclAllGather(p[0]!, p[1]!, ...args, c, s),
        };
      }
      case "reduceScatter": {
        const args = [BigInt(o.count), NCCL_DTYPE[o.dtype], NCCL_OP[c.reduceOp]] as const;
        return {
          inputs: [i],
          outputs: [o],
          symbol: "ncclReduceScatter",
          enqueue: (c, p, s) => nccl.ncclReduceScatter(p[0]!, p[1]!, ...args, c, s),
        };
      }
      case "barrier": {
        // a one-element allReduce of the group's own device memory
        this.#barrierBuf ??= this.#alloc(4);
        const b: ResolvedBuffer = {
          ptr: this.#barrierBuf,
          count: 1,
          dtype: "f32",
          bytes: 4,
          device: "cuda",
        };
        return {
          inputs: [b],
          outputs: [b],
          symbol: "ncclAllReduce",
          enqueue: (c, p, s) =>
            nccl.ncclAllReduce(p[0]!, p[1]!, 1n, NCCL_DTYPE.f32, NCCL_OP.sum, c, s),
        };
      }
    }
  }

  /** The error of a call on a group that failed before: the first failure, with its kind. */
  #failedEarlier(what: string, f: Error): Error {
    return withFailureKind(
      new Error(`${what}: the NCCL process group failed: ${f.message}`, { cause: f }),
      failureKind(f),
      { inCollective: true },
    );
  }

  #requireHealthy(what: string): void {
    const f = this.#watch.failure();
    if (f) throw this.#failedEarlier(what, f);
  }

  /**
   * Stages host memory, queues the call on the communication stream after the
   * compute stream's work, hands it to the watchdog and finishes it: a barrier
   * waits on the host; a deferred allReduce of device memory returns a Work
   * that orders the compute stream later; anything else orders the compute
   * stream after the collective now (host memory: the host waits for the copy back).
   */
  #perform(c: Collective, seq: number, timeoutMs: number, deferred: boolean): Work {
    const plan = this.#plan(c);
    const finish: Finish = c.op === "barrier" ? "host" : deferred ? "later" : "stream";
    const what = describeCollective(c.op, seq, c.bytes, this.rank, this.size);
    const deadline = Date.now() + timeoutMs;
    const { slot, event } = this.#watch.slot(deadline);
    let ptrs: Deno.PointerValue[] = [];
    this.#watch.withComm((comm) => {
      this.#rt.record(this.#ready, this.#compute);
      this.#rt.streamWait(this.#stream, this.#ready); // inputs written by the compute stream are ready
      ptrs = this.#stageInputs(plan);
      this.#enqueue(plan, comm, ptrs, deadline, what);
      this.#rt.record(event, this.#stream);
    });
    const tracked = this.#watch.track(slot, { seq, op: c.op, bytes: c.bytes, deadline, timeoutMs });
    const staged = [...plan.inputs, ...plan.outputs].some(isHost);
    if (staged) {
      this.#copyOutputsBack(plan, ptrs); // the host waits for the collective here
      noteHostSync(`nccl ${c.op}`);
      this.#requireHealthy(what);
    } else if (finish === "host") {
      this.#hostWait(tracked, what, deadline, timeoutMs);
      noteHostSync(`nccl ${c.op}`);
    } else if (finish === "stream") {
      this.#rt.streamWait(this.#compute, event); // later kernels see the result
    } else {
      return {
        wait: () => {
          this.#requireHealthy(what);
          // A slot reused since means the collective is long done: nothing to wait for.
          if (this.#watch.inFlight(tracked)) this.#rt.streamWait(this.#compute, tracked.event);
        },
      };
    }
    return COMPLETED;
  }

  /** Queues the NCCL call; a nonblocking communicator may answer "in progress" until it is queued
   * (an NCCL failure, then or while it is queued, throws DtNativeError naming the call). */
  #enqueue(
    plan: Plan,
    comm: Deno.PointerObject,
    ptrs: Deno.PointerValue[],
    deadline: number,
    what: string,
  ): void {
    let progress = plan.enqueue(comm, ptrs, this.#stream);
    for (let polls = 0; progress === "in-progress"; polls++) {
      progress = this.#nccl.asyncProgress(comm, plan.symbol);
      if (progress === "in-progress" && Date.now() > deadline) {
        throw new Error(`${what}: NCCL did not queue the call before the deadline`);
      }
      if (progress === "in-progress") pauseBetweenPolls(polls);
    }
  }

  /** The host waits for a tracked collective; the watchdog aborts it at its deadline or on an NCCL error. */
  #hostWait(t: Tracked, what: string, deadline: number, timeoutMs: number): void {
    try {
      waitForCollective(
        {
          done: () => !this.#watch.inFlight(t) || this.#rt.query(t.event),
          asyncError: () => {
            const f = this.#watch.failure();
            if (f) throw f;
            return this.#watch.withComm((comm) => this.#nccl.ncclCommGetAsyncError(comm));
          },
          errorText: (r) => this.#nccl.errorText(r),
          abort: () => {}, // the failure is recorded below, then the communicator aborted once
          now: () => Date.now(),
          pause: pauseBetweenPolls,
        },
        what,
        deadline,
        timeoutMs,
      );
    } catch (e) {
      const f = this.#watch.failure();
      if (f) throw this.#failedEarlier(what, f);
      const kind = failureKind(e);
      this.#watch.fail(kind === "timeout" ? FAIL.TIMEOUT : FAIL.NCCL, 0, (e as Error).message);
      this.#watch.abortOnce();
      throw e;
    }
  }

  /** Device pointers of the plan's buffers (inputs then outputs); host memory gets staging memory. */
  #stageInputs(plan: Plan): Deno.PointerValue[] {
    const all = [...plan.inputs, ...plan.outputs];
    const host = all.filter(isHost);
    if (host.length === 0) return all.map((b) => b.ptr);
    const total = host.reduce((n, b) => n + align256(b.bytes), 0);
    const base = this.#stagingArea(total);
    let offset = 0;
    const at = new Map<ResolvedBuffer, Deno.PointerValue>();
    for (const b of all) {
      if (!isHost(b) || at.has(b)) continue; // in place: one staging region
      const dev = Deno.UnsafePointer.offset(base, offset);
      at.set(b, dev);
      offset += align256(b.bytes);
      if (plan.inputs.includes(b) && b.bytes > 0) {
        this.#onStream.dt_memcpy(dev, b.ptr, BigInt(b.bytes), 1);
      }
    }
    return all.map((b) => at.get(b) ?? b.ptr);
  }

  /** Copies host outputs back (on the communication stream: returns once they are there). */
  #copyOutputsBack(plan: Plan, ptrs: Deno.PointerValue[]): void {
    plan.outputs.forEach((b, i) => {
      if (!isHost(b) || b.bytes === 0) return;
      const dev = ptrs[plan.inputs.length + i]!;
      this.#onStream.dt_memcpy(b.ptr, dev, BigInt(b.bytes), 2);
    });
  }

  #stagingArea(bytes: number): Deno.PointerObject {
    if (!this.#staging || this.#staging.bytes < bytes) {
      if (this.#staging) this.#onStream.dt_free(this.#staging.ptr);
      this.#staging = null;
      this.#staging = { ptr: this.#alloc(bytes), bytes };
    }
    return this.#staging.ptr;
  }

  #alloc(bytes: number): Deno.PointerObject {
    const p = allocOrNull(cudaKernels(), bytes);
    if (p === null) {
      throw new Error(
        `NCCL process group: cannot allocate ${bytes} bytes: ${this.#rt.lastError()}`,
      );
    }
    return p;
  }
}

/** Whether a buffer is host memory (typed arrays, or `device: "cpu"`): staged through the GPU. */
function isHost(b: ResolvedBuffer): boolean {
  return b.device === "cpu";
}

function align256(n: number): number {
  return Math.ceil(n / 256) * 256;
}

/**
 * Publishes (rank 0) or fetches (the others) the communicator's unique id
 * through the store, each rank counting itself in `joined` (for the message
 * of a start that times out).
 */
function exchangeUniqueId(
  id: Uint8Array,
  rank: number,
  key: string,
  joined: string,
  timeoutMs: number,
): void {
  if (rank === 0) {
    syncStore([{ op: "set", key, value: id }, { op: "add", key: joined, amount: 1 }], timeoutMs);
    return;
  }
  const [, value] = syncStore(
    [{ op: "add", key: joined, amount: 1 }, { op: "get", key, timeoutMs }],
    timeoutMs,
  );
  if (!(value instanceof Uint8Array) || value.length !== 128) {
    throw new Error(
      `NCCL unique id from rank 0 (store key ${key}) has ${
        value instanceof Uint8Array ? value.length : 0
      } bytes, expected 128`,
    );
  }
  id.set(value);
}

/** Aborts a communicator that did not start, polling an abort in progress to its end. */
function abortStarting(nccl: NcclCalls, comm: Deno.PointerObject): void {
  finishTeardown(nccl, comm, nccl.abort(comm), TEARDOWN_TIMEOUT_MS);
}

/**
 * ncclCommInitRankConfig(blocking = 0) on this thread, then polls
 * ncclCommGetAsyncError until the start ends; aborts the communicator when
 * it fails or outlives the timeout.
 */
function startCommunicator(
  nccl: NcclCalls,
  id: Uint8Array<ArrayBuffer>,
  rank: number,
  size: number,
  timeoutMs: number,
  joined: string | null,
): Deno.PointerObject {
  const out = new BigUint64Array(1);
  try {
    // "done" or "in-progress" alike: the poll below says when the start ended
    nccl.ncclCommInitRankConfig(out, size, id, rank, ncclConfig({ blocking: false }));
  } catch (e) {
    // NCCL's text (with the communicator's last error) is in the error already: free it now
    const failed = Deno.UnsafePointer.create(out[0]!);
    if (failed !== null) abortStarting(nccl, failed);
    throw e;
  }
  const comm = Deno.UnsafePointer.create(out[0]!);
  if (comm === null) throw new Error("ncclCommInitRankConfig returned no communicator");
  const deadline = Date.now() + timeoutMs;
  for (let polls = 0;; polls++) {
    try {
      if (nccl.asyncProgress(comm, "ncclCommInitRankConfig") === "done") return comm;
    } catch (e) {
      abortStarting(nccl, comm);
      throw e;
    }
    if (Date.now() > deadline) {
      abortStarting(nccl, comm); // the start ends (and frees) with it: nothing is left blocked
      let arrived = size > 1 ? "?" : "1";
      if (joined !== null) {
        try {
          const [v] = syncStore([{ op: "get", key: joined }], 5000);
          if (v instanceof Uint8Array) arrived = new TextDecoder().decode(v);
        } catch { /* the count is only for the message */ }
      }
      throw withFailureKind(
        new Error(
          `NCCL communicator start on rank ${rank} of ${size} did not finish within ${timeoutMs} ms ` +
            `(${arrived} of ${size} ranks reached it); the communicator was aborted: a rank is missing ` +
            `or the network between GPUs is blocked (NCCL_DEBUG=INFO shows where)`,
        ),
        "timeout",
        { inCollective: true },
      );
    }
    pauseBetweenPolls(polls);
  }
}
