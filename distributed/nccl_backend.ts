/**
 * The NCCL process group of GPU ranks, behind the ProcessGroup API: rank 0's
 * ncclUniqueId travels through the control store, collectives run on a
 * communication stream ordered after the compute stream with events, and
 * every wait polls ncclCommGetAsyncError and a deadline (NCCL has no timeout
 * of its own) and aborts the communicator on an error, a timeout or the
 * launcher's abort record, so that no rank hangs. Calls are reported to
 * distributed/control/phase.ts like those of the shared-memory backend.
 */
import { type KernelCalls, kernelCalls } from "../ffi/calls.ts";
import { cudaKernels, CudaRuntime } from "../ffi/cuda.ts";
import {
  NCCL_DTYPE,
  NCCL_IN_PROGRESS,
  NCCL_OP,
  NCCL_SUCCESS,
  type NcclLibrary,
  ncclLibrary,
} from "../ffi/nccl.ts";
import { DtNativeError } from "../ffi/native.ts";
import { openCudaBackend } from "../tensor/cuda_backend.ts";
import { reportCollective } from "./control/phase.ts";
import {
  type BufferLike,
  checkReduceDType,
  checkReduceOp,
  checkSizes,
  type ReduceOp,
  resolveBuffer,
  type ResolvedBuffer,
} from "./collective_buffer.ts";
import { getRankSettings, getWorld } from "./control/env.ts";
import { getStore, storeKey } from "./control/rank_runtime.ts";
import { attemptKeys } from "./control/store_keys.ts";
import { type FailureKind, withFailureKind } from "./control/failure_kind.ts";
import type { CallOptions, ProcessGroup } from "./process_group.ts";
import { COMPLETED, type Work } from "./work.ts";

/** What the host watches while a collective is in flight. */
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
 * Waits until the collective described by `what` completes. NCCL has no
 * timeout, so this polls: an asynchronous NCCL error or the deadline aborts
 * the communicator (peers then fail instead of hanging) and throws.
 *
 * @example
 * ```ts
 * waitForCollective(probe, "allReduce #12 (4096 bytes) on rank 1 of 8", Date.now() + 60_000, 60_000);
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
  /** default timeout of every call and of the communicator's start, ms (default: DTRAIN_TIMEOUT) */
  timeoutMs?: number;
  /** how often the launcher's abort record is looked for between calls, ms (default 1000) */
  abortPollMs?: number;
}

/** A collective as #run needs it: the buffers it reads and writes, and the NCCL call. */
interface Plan {
  bytes: number;
  /** read by the collective (staged to the GPU first when they are host arrays) */
  inputs: ResolvedBuffer[];
  /** written by it (copied back when they are host arrays) */
  outputs: ResolvedBuffer[];
  symbol: string;
  /** enqueues the call, given the device pointers of inputs then outputs */
  enqueue(ptrs: Deno.PointerValue[], stream: Deno.PointerObject): number;
}

let groups = 0; // groups opened by this process: every rank opens them in the same order

/** The NCCL process group; create it with `await NcclProcessGroup.open()`. */
export class NcclProcessGroup implements Omit<ProcessGroup, "backend"> {
  readonly rank: number;
  readonly size: number;
  readonly backend = "nccl" as const;
  /** NCCL's version, e.g. "2.27.3" */
  readonly ncclVersion: string;
  readonly #lib: NcclLibrary;
  readonly #rt: CudaRuntime;
  readonly #compute: Deno.PointerObject;
  readonly #comm: Deno.PointerObject;
  readonly #stream: Deno.PointerObject;
  /** Kernel calls on the communication stream (staging copies). */
  readonly #onStream: KernelCalls;
  readonly #ready: Deno.PointerObject;
  readonly #done: Deno.PointerObject;
  readonly #timeoutMs: number;
  readonly #asyncError = new Int32Array(1);
  #staging: { ptr: Deno.PointerObject; bytes: number } | null = null;
  #barrierBuf: Deno.PointerObject | null = null;
  #abortWatch: ReturnType<typeof setInterval> | null = null;
  #failed: Error | null = null;
  #closed = false;
  #seq = 0;

  private constructor(
    rank: number,
    size: number,
    lib: NcclLibrary,
    rt: CudaRuntime,
    comm: Deno.PointerObject,
    timeoutMs: number,
  ) {
    this.rank = rank;
    this.size = size;
    this.ncclVersion = lib.version;
    this.#lib = lib;
    this.#rt = rt;
    this.#comm = comm;
    this.#timeoutMs = timeoutMs;
    this.#compute = rt.computeStream();
    this.#stream = rt.createStream();
    this.#onStream = kernelCalls(cudaKernels(), this.#stream);
    this.#ready = rt.createEvent();
    this.#done = rt.createEvent();
  }

  /**
   * Joins the NCCL communicator of this launch: opens this rank's GPU
   * (LOCAL_RANK), exchanges rank 0's unique id through the store and waits
   * for every rank, at most the timeout.
   *
   * @example
   * ```ts
   * using pg = await NcclProcessGroup.open();
   * pg.allReduce({ ptr: grads.ptr, count: grads.numel, dtype: "f32" }, "avg");
   * ```
   */
  static async open(opts: NcclGroupOptions = {}): Promise<NcclProcessGroup> {
    const world = getWorld();
    const settings = getRankSettings();
    const timeoutMs = opts.timeoutMs ?? settings.timeoutS * 1000;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`timeoutMs must be > 0, got ${timeoutMs}`);
    }
    openCudaBackend(); // the GPU of this local rank, chosen before NCCL looks at the current device
    const rt = new CudaRuntime(cudaKernels());
    const lib = ncclLibrary();
    const { rank, worldSize: size } = world;
    const gen = ++groups;
    const id = new Uint8Array(128);
    const rec = { seq: 0, op: "barrier", bytes: 0, detail: `NCCL communicator ${gen} start` };
    reportCollective(rec, "enter");
    let comm: Deno.PointerObject;
    try {
      if (rank === 0) lib.check(lib.symbols.ncclGetUniqueId(id), "ncclGetUniqueId");
      if (size > 1) await exchangeUniqueId(id, rank, gen, timeoutMs);
      comm = await initCommunicator(lib, id, rank, size, gen, timeoutMs);
    } finally {
      reportCollective(rec, "exit");
    }
    const pg = new NcclProcessGroup(rank, size, lib, rt, comm, timeoutMs);
    if (size > 1) pg.#watchForAbort(opts.abortPollMs ?? 1000);
    return pg;
  }

  allReduce(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): void {
    this.#run("allReduce", undefined, opts, () => this.#allReducePlan(buf, op), true);
  }

  /**
   * Starts an in-place allReduce of device memory on the communication
   * stream and returns at once, so the compute stream keeps working (DDP
   * buckets during backward); wait() polls for errors and the deadline, then
   * orders the compute stream after the result. A host array is reduced
   * before this returns (it is staged through device memory anyway).
   */
  allReduceStart(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): Work {
    if (!(typeof buf === "object" && buf !== null && "ptr" in buf)) {
      this.allReduce(buf, op, opts);
      return COMPLETED;
    }
    const event = this.#rt.createEvent();
    let finished = false;
    const started = this.#run(
      "allReduce",
      "async",
      opts,
      () => this.#allReducePlan(buf, op),
      false,
      event,
    );
    return {
      wait: () => {
        if (finished) return;
        finished = true;
        try {
          this.#finish(started, event);
        } finally {
          this.#rt.destroyEvent(event);
        }
      },
    };
  }

  broadcast(buf: BufferLike, root: number, opts: CallOptions = {}): void {
    this.#run("broadcast", `root ${root}`, opts, () => {
      const b = resolve(buf, "broadcast buf");
      if (!Number.isInteger(root) || root < 0 || root >= this.size) {
        throw new RangeError(
          `broadcast: root ${root} is not a rank of this group (size ${this.size})`,
        );
      }
      const args = [BigInt(b.count), NCCL_DTYPE[b.dtype], root] as const;
      return {
        bytes: b.bytes,
        inputs: [b],
        outputs: [b],
        symbol: "ncclBroadcast",
        enqueue: (p, s) => this.#lib.symbols.ncclBroadcast(p[0]!, p[1]!, ...args, this.#comm, s),
      };
    }, true);
  }

  allGather(out: BufferLike, inp: BufferLike, opts: CallOptions = {}): void {
    this.#run("allGather", undefined, opts, () => {
      const o = resolve(out, "allGather out");
      const i = resolve(inp, "allGather inp");
      checkSizes(o, i, this.size, 1, "allGather");
      const args = [BigInt(i.count), NCCL_DTYPE[i.dtype]] as const;
      return {
        bytes: i.bytes,
        inputs: [i],
        outputs: [o],
        symbol: "ncclAllGather",
        enqueue: (p, s) => this.#lib.symbols.ncclAllGather(p[0]!, p[1]!, ...args, this.#comm, s),
      };
    }, true);
  }

  reduceScatter(
    out: BufferLike,
    inp: BufferLike,
    op: ReduceOp = "sum",
    opts: CallOptions = {},
  ): void {
    this.#run("reduceScatter", undefined, opts, () => {
      const o = resolve(out, "reduceScatter out");
      const i = resolve(inp, "reduceScatter inp");
      checkSizes(o, i, 1, this.size, "reduceScatter");
      checkReduceDType(checkReduceOp(op, "reduceScatter"), o.dtype, "reduceScatter");
      const args = [BigInt(o.count), NCCL_DTYPE[o.dtype], NCCL_OP[op]] as const;
      return {
        bytes: o.bytes,
        inputs: [i],
        outputs: [o],
        symbol: "ncclReduceScatter",
        enqueue: (p, s) =>
          this.#lib.symbols.ncclReduceScatter(p[0]!, p[1]!, ...args, this.#comm, s),
      };
    }, true);
  }

  barrier(name: string, opts: CallOptions = {}): void {
    this.#run("barrier", String(name), opts, () => {
      this.#barrierBuf ??= this.#alloc(4);
      const b: ResolvedBuffer = { ptr: this.#barrierBuf, count: 1, dtype: "f32", bytes: 4 };
      return {
        bytes: 0,
        inputs: [b],
        outputs: [b],
        symbol: "ncclAllReduce",
        enqueue: (p, s) =>
          this.#lib.symbols.ncclAllReduce(
            p[0]!,
            p[1]!,
            1n,
            NCCL_DTYPE.f32,
            NCCL_OP.sum,
            this.#comm,
            s,
          ),
      };
    }, true);
  }

  /** Aborts the communicator when it failed (peers then fail too), else destroys it; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#abortWatch !== null) clearInterval(this.#abortWatch);
    if (this.#failed) {
      this.#lib.symbols.ncclCommAbort(this.#comm); // already aborted: a second abort is harmless
    } else {
      this.#lib.check(this.#lib.symbols.ncclCommDestroy(this.#comm), "ncclCommDestroy", this.#comm);
    }
    for (const p of [this.#staging?.ptr, this.#barrierBuf]) {
      if (p) this.#onStream.dt_free(p);
    }
    this.#rt.destroyEvent(this.#ready);
    this.#rt.destroyEvent(this.#done);
    this.#rt.destroyStream(this.#stream);
  }

  [Symbol.dispose](): void {
    this.close();
  }

  #allReducePlan(buf: BufferLike, op: ReduceOp): Plan {
    const b = resolve(buf, "allReduce buf");
    checkReduceDType(checkReduceOp(op, "allReduce"), b.dtype, "allReduce");
    const args = [BigInt(b.count), NCCL_DTYPE[b.dtype], NCCL_OP[op]] as const;
    return {
      bytes: b.bytes,
      inputs: [b],
      outputs: [b],
      symbol: "ncclAllReduce",
      enqueue: (p, s) => this.#lib.symbols.ncclAllReduce(p[0]!, p[1]!, ...args, this.#comm, s),
    };
  }

  /** State of one started collective, for #finish. */
  #describe(op: string, seq: number, bytes: number): string {
    return `${op} #${seq} (${bytes} bytes) on rank ${this.rank} of ${this.size}`;
  }

  /**
   * Checks the arguments, stages host arrays, enqueues the call after the
   * compute stream's work and records `done`; with `wait`, also waits and
   * copies host outputs back. An argument error aborts the communicator too,
   * since the peers would otherwise wait for this rank until their timeout.
   */
  #run(
    op: string,
    detail: string | undefined,
    opts: CallOptions,
    prepare: () => Plan,
    wait: boolean,
    done: Deno.PointerObject = this.#done,
  ): Started {
    if (this.#closed) throw new Error(`${op}: the NCCL process group is closed`);
    if (this.#failed) {
      throw new Error(`${op}: the NCCL process group failed earlier: ${this.#failed.message}`);
    }
    const seq = ++this.#seq;
    let plan: Plan, timeoutMs: number;
    try {
      plan = prepare();
      timeoutMs = opts.timeoutMs ?? this.#timeoutMs;
      if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
        throw new RangeError(`${op}: timeoutMs must be a positive number, got ${timeoutMs}`);
      }
    } catch (e) {
      this.#fail(
        new Error(
          `rank ${this.rank} called ${op} #${seq} with bad arguments: ${(e as Error).message}`,
        ),
      );
      throw e;
    }
    const rec = detail === undefined
      ? { seq, op, bytes: plan.bytes }
      : { seq, op, bytes: plan.bytes, detail };
    reportCollective(rec, "enter");
    const started: Started = {
      rec,
      plan,
      what: this.#describe(op, seq, plan.bytes),
      deadline: Date.now() + timeoutMs,
      timeoutMs,
      ptrs: [],
    };
    try {
      this.#rt.record(this.#ready, this.#compute);
      this.#rt.streamWait(this.#stream, this.#ready); // inputs written by the compute stream are ready
      started.ptrs = this.#stageInputs(plan);
      const result = plan.enqueue(started.ptrs, this.#stream);
      if (result !== NCCL_SUCCESS) {
        throw new DtNativeError(
          "nccl",
          plan.symbol,
          result,
          this.#lib.errorText(result, this.#comm),
        );
      }
      this.#rt.record(done, this.#stream);
    } catch (e) {
      reportCollective(rec, "exit");
      this.#fail(e as Error);
      throw e;
    }
    if (wait) this.#finish(started, done);
    return started;
  }

  /** Waits for a started collective, copies host outputs back, and orders the compute stream after it. */
  #finish(s: Started, done: Deno.PointerObject): void {
    try {
      if (this.#failed) {
        throw new Error(`${s.what}: the NCCL process group failed: ${this.#failed.message}`);
      }
      waitForCollective(this.#probe(done), s.what, s.deadline, s.timeoutMs);
      this.#copyOutputsBack(s.plan, s.ptrs);
      this.#rt.streamWait(this.#compute, done);
    } catch (e) {
      this.#fail(e as Error);
      throw e;
    } finally {
      reportCollective(s.rec, "exit");
    }
  }

  #probe(done: Deno.PointerObject): CompletionProbe {
    return {
      done: () => this.#rt.query(done),
      asyncError: () => {
        this.#lib.check(
          this.#lib.symbols.ncclCommGetAsyncError(this.#comm, this.#asyncError),
          "ncclCommGetAsyncError",
        );
        return this.#asyncError[0]!;
      },
      errorText: (r) => this.#lib.errorText(r, this.#comm),
      abort: () => this.#abort(),
      now: () => Date.now(),
      pause: pauseBetweenPolls,
    };
  }

  /** Device pointers of the plan's buffers (inputs then outputs); host arrays get staging memory. */
  #stageInputs(plan: Plan): Deno.PointerValue[] {
    const all = [...plan.inputs, ...plan.outputs];
    const host = all.filter((b) => isHostArray(b));
    if (host.length === 0) return all.map((b) => b.ptr);
    const total = host.reduce((n, b) => n + align256(b.bytes), 0);
    const base = this.#stagingArea(total);
    let offset = 0;
    const at = new Map<ResolvedBuffer, Deno.PointerValue>();
    for (const b of all) {
      if (!isHostArray(b)) continue;
      if (at.has(b)) continue; // in place: one staging region
      const dev = Deno.UnsafePointer.offset(base, offset);
      at.set(b, dev);
      offset += align256(b.bytes);
      if (plan.inputs.includes(b) && b.bytes > 0) {
        this.#onStream.dt_memcpy(dev, b.ptr, BigInt(b.bytes), 1);
      }
    }
    return all.map((b) => at.get(b) ?? b.ptr);
  }

  #copyOutputsBack(plan: Plan, ptrs: Deno.PointerValue[]): void {
    plan.outputs.forEach((b, i) => {
      if (!isHostArray(b) || b.bytes === 0) return;
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
    const p = cudaKernels().symbols.dt_alloc(BigInt(bytes));
    if (p === null) {
      throw new Error(
        `NCCL process group: cannot allocate ${bytes} bytes: ${this.#rt.lastError()}`,
      );
    }
    return p;
  }

  /** Aborts the communicator once; later calls fail at once with the first reason. */
  #fail(reason: Error): void {
    if (this.#failed) return;
    this.#failed = reason;
    this.#abort();
  }

  #aborted = false;
  #abort(): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#failed ??= new Error("the communicator was aborted");
    this.#lib.symbols.ncclCommAbort(this.#comm); // its own failure cannot be acted on: the group is gone either way
  }

  /**
   * Between calls, looks for the launcher's abort record (another rank
   * failed, or the run timed out) and aborts the communicator, so that this
   * rank's next call fails at once. The timer does not keep the process alive.
   */
  #watchForAbort(everyMs: number): void {
    const key = attemptKeys(getRankSettings().restartCount).abort;
    const store = getStore();
    let busy = false;
    const timer = setInterval(async () => {
      if (busy || this.#closed || this.#failed) return;
      busy = true;
      try {
        const record = await store.getText(key);
        if (record !== null) this.#fail(new Error(`the launcher is stopping the run: ${record}`));
      } catch {
        clearInterval(timer); // the store is gone: the launcher ends this process anyway
      } finally {
        busy = false;
      }
    }, everyMs);
    Deno.unrefTimer(timer);
    this.#abortWatch = timer;
  }
}

/** A collective between #run and #finish. */
interface Started {
  rec: { seq: number; op: string; bytes: number; detail?: string };
  plan: Plan;
  what: string;
  deadline: number;
  timeoutMs: number;
  ptrs: Deno.PointerValue[];
}

const hostArrays = new WeakSet<ResolvedBuffer>();

/** Whether a resolved buffer came from a typed array (host memory) rather than {ptr, count, dtype}. */
function isHostArray(b: ResolvedBuffer): boolean {
  return hostArrays.has(b);
}

function align256(n: number): number {
  return Math.ceil(n / 256) * 256;
}

/** Publishes (rank 0) or fetches (the others) the communicator's unique id through the store. */
async function exchangeUniqueId(
  id: Uint8Array,
  rank: number,
  gen: number,
  timeoutMs: number,
): Promise<void> {
  const store = getStore();
  const key = storeKey(`nccl/${gen}/unique-id`);
  if (rank === 0) {
    await store.set(key, id);
    return;
  }
  const value = await store.get(key, { timeoutMs });
  if (value === null || value.length !== 128) {
    throw new Error(
      `NCCL unique id from rank 0 (store key ${key}) has ${value?.length ?? 0} bytes, expected 128`,
    );
  }
  id.set(value);
}

/** ncclCommInitRank on Deno's thread pool, raced against the timeout. */
async function initCommunicator(
  lib: NcclLibrary,
  id: Uint8Array,
  rank: number,
  size: number,
  gen: number,
  timeoutMs: number,
): Promise<Deno.PointerObject> {
  const out = new BigUint64Array(1);
  const joined = size > 1 ? storeKey(`nccl/${gen}/joined`) : "";
  if (size > 1) await getStore().add(joined, 1);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((resolve) =>
    timer = setTimeout(() => resolve("timeout"), timeoutMs)
  );
  const result = await Promise.race([lib.symbols.ncclCommInitRank(out, size, id, rank), timeout]);
  clearTimeout(timer);
  if (result === "timeout") {
    const arrived = size > 1 ? await getStore().getText(joined).catch(() => null) : "1";
    throw new Error(
      `NCCL communicator start on rank ${rank} of ${size} did not finish within ${timeoutMs} ms ` +
        `(${
          arrived ?? "?"
        } of ${size} ranks reached it): a rank is missing or the network between GPUs is ` +
        `blocked (NCCL_DEBUG=INFO shows where)`,
    );
  }
  lib.check(result, "ncclCommInitRank");
  const comm = Deno.UnsafePointer.create(out[0]!);
  if (comm === null) {
    throw new Error("ncclCommInitRank reported success but returned no communicator");
  }
  return comm;
}

/** resolveBuffer that remembers which buffers are host typed arrays (they need staging). */
function resolve(b: BufferLike, what: string): ResolvedBuffer {
  const r = resolveBuffer(b, what);
  if (ArrayBuffer.isView(b)) hostArrays.add(r);
  return r;
}
