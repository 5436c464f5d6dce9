/**
 * The CPU process group for ranks on one machine: a thin class over
 * libdtrain_shm.so (kernels/shm), which keeps the segment, the barriers and
 * the arithmetic. This file owns the handle and makes the native calls; the
 * collective runner checks the arguments and reports every call. It also
 * hands out arrays in the rank's shared region (allocShared), which an
 * allReduce reduces without copying them through the data buffers.
 */
import {
  DT_ERR_ARG,
  DT_ERR_SYS,
  DT_ERR_TIMEOUT,
  SHM_DTYPE_CODE,
  SHM_REDUCE_CODE,
  SHM_RESERVE_STEP,
  shmAbort,
  shmCalls,
  shmCloseLeaked,
  shmOpen,
} from "../../ffi/shm.ts";
import { cBytes, DtNativeError } from "../../ffi/native.ts";
import { type FailureKind, withFailureKind } from "../control/failure_kind.ts";
import type { Collective } from "./collective_args.ts";
import { type CollectiveBackend, CollectiveRunner } from "./collective_runner.ts";
import { CollectiveGroup } from "./collective_group.ts";
import type { ProcessGroupConfig } from "../pg_config.ts";
import { type CallOptions, COMPLETED, SharedReserveError, type Work } from "../process_group.ts";
import type { SharedArrayTypes } from "./collective_buffer.ts";

const SHARED_ARRAY: {
  [K in keyof SharedArrayTypes]: {
    new (b: ArrayBuffer): SharedArrayTypes[K];
    BYTES_PER_ELEMENT: number;
  };
} = {
  f32: Float32Array,
  f64: Float64Array,
  i32: Int32Array,
  i64: BigInt64Array,
  u8: Uint8Array,
};

/** Arrays in the shared region start on 64-byte boundaries (a cache line: the streaming
 *  stores of the reduction need them, and no two arrays share a line). */
const SHARED_ALIGN = 64;

/** Closes handles whose group was dropped without close(): a backstop only. */
const leaked = new FinalizationRegistry<Deno.PointerObject>((handle) => {
  shmCloseLeaked(handle);
});

/**
 * What a failed collective call tells the launcher: a wait past its deadline
 * is a timeout; a system error inside a collective means a peer closed, left
 * or aborted the group (the call makes no other system call that can fail),
 * a consequence of that peer's failure; anything else (a mismatch) is this
 * rank's own error.
 */
function shmFailureKind(e: unknown): FailureKind {
  if (!(e instanceof DtNativeError)) return "error";
  if (e.status === DT_ERR_TIMEOUT) return "timeout";
  return e.status === DT_ERR_SYS ? "peer" : "error";
}

/** How many groups this process has made of each segment name (ShmProcessGroup.open). */
const groupsMade = new Map<string, number>();

/** The shared-memory process group; create it with initProcessGroup(). */
export class ShmProcessGroup extends CollectiveGroup {
  readonly rank: number;
  readonly size: number;
  readonly backend = "shm" as const;
  /** The segment's name (unlinked once every rank attached). */
  readonly segmentName: string;
  /** Bytes of each data buffer, as rank 0 chose them. */
  readonly chunkBytes: number;
  /** Bytes of the whole segment. */
  readonly segmentBytes: number;
  /** Users such as DDP reserve a shared region on demand (reserveShared): no fixed one was
   *  asked for at open (DTRAIN_SHM_SHARED_BYTES unset). */
  readonly sharedOnDemand: boolean;
  /** The most bytes per rank reserveShared may reserve on this rank (null: no limit;
   *  DTRAIN_SHM_SHARED_LIMIT_BYTES). */
  readonly sharedLimitBytes: number | null;
  #sharedBytes: number;
  #timeoutMs: number;
  /** the region's address, once an array was made there; its first free byte */
  #shared: Deno.PointerObject | null = null;
  #sharedUsed = 0;
  readonly #handle: Deno.PointerObject;
  protected readonly runner: CollectiveRunner;

  private constructor(cfg: ProcessGroupConfig, handle: Deno.PointerObject, name: string) {
    super();
    this.rank = cfg.rank;
    this.size = cfg.size;
    this.segmentName = name;
    this.#handle = handle;
    const backend: CollectiveBackend = {
      groupName: `shared-memory process group ${name}`,
      hostOnly: "shared-memory process group",
      abortForBadArguments: (reason) => this.#abortForBadArguments(reason),
      perform: (c, _seq, timeoutMs) => this.#perform(c, timeoutMs),
      failed: shmFailure,
    };
    this.runner = new CollectiveRunner(backend, cfg.rank, cfg.size, cfg.timeoutMs);
    const info = new BigInt64Array(6);
    shmCalls().dt_shm_info(handle, info);
    this.chunkBytes = Number(info[2]);
    this.segmentBytes = Number(info[3]);
    const shared = new BigUint64Array(2);
    shmCalls().dt_shm_shared(handle, 0, shared);
    this.#sharedBytes = Number(shared[1]);
    this.sharedOnDemand = cfg.sharedOnDemand ?? false;
    this.sharedLimitBytes = cfg.sharedLimitBytes ?? null;
    this.#timeoutMs = cfg.timeoutMs;
    leaked.register(this, handle, this);
  }

  /** Joins the group described by `cfg`; returns once every rank has joined. */
  static open(cfg: ProcessGroupConfig): ShmProcessGroup {
    // Each launch attempt gets its own segment: a restart never meets a crashed attempt's leftovers.
    const attempt = Deno.env.get("DTRAIN_RESTART_COUNT") ?? "0";
    const base = `/dtrain-${cfg.runId}-a${attempt}-pg`;
    // And each group of the attempt its own name: a group made again after close() (every rank
    // makes the same groups in the same order, so the counts agree) must not share the first
    // one's. A rank still leaving the first rendezvous unlinks that name; had the new segment
    // taken it, its peer would never find the new one.
    const made = (groupsMade.get(base) ?? 0) + 1;
    groupsMade.set(base, made);
    const name = made === 1 ? base : `${base}${made}`;
    const handle = shmOpen({ ...cfg, name });
    return new ShmProcessGroup(cfg, handle, name);
  }

  /** Bytes of this rank's shared region (0: none; see allocShared and reserveShared). */
  get sharedBytes(): number {
    return this.#sharedBytes;
  }

  /** Bytes of the shared region not handed out yet. */
  get sharedBytesLeft(): number {
    return this.sharedBytes - this.#sharedUsed;
  }

  /**
   * A zeroed array of `count` elements of `dtype` in this rank's shared region
   * (sized by the group's sharedBytes, DTRAIN_SHM_SHARED_BYTES): an allReduce
   * of it, when every rank's buffer is such an array, reads and writes the
   * ranks' arrays directly, one pass over the memory instead of the data
   * buffers' three (messages of one barrier, 512 KiB on 2 ranks, keep that
   * path). Every rank must then pass such an array: one that passes an
   * ordinary array instead fails with a collective mismatch. Space is never
   * given back before the process exits (allocate long-lived buffers, such as
   * gradient buckets, once), and the array stays readable after close().
   *
   * @example
   * ```ts
   * const grads = pg.allocShared(1 << 22); // 16 MiB of f32 on every rank
   * pg.allReduce(grads, "avg");
   * ```
   */
  allocShared<K extends keyof SharedArrayTypes = "f32">(
    count: number,
    dtype: K = "f32" as K,
  ): SharedArrayTypes[K] {
    const make = SHARED_ARRAY[dtype];
    if (make === undefined) {
      throw new TypeError(
        `allocShared: dtype ${JSON.stringify(dtype)} is not one of ${
          Object.keys(SHARED_ARRAY).join(", ")
        }`,
      );
    }
    if (!Number.isSafeInteger(count) || count < 0) {
      throw new RangeError(`allocShared: count ${count} is not a non-negative integer`);
    }
    if (this.runner.closed) throw new Error(`allocShared: ${this.segmentName} is closed`);
    const bytes = count * make.BYTES_PER_ELEMENT;
    const at = Math.ceil(this.#sharedUsed / SHARED_ALIGN) * SHARED_ALIGN;
    if (at + bytes > this.sharedBytes) {
      throw new RangeError(
        `allocShared: ${bytes} bytes do not fit in this rank's shared region (${this.sharedBytes} bytes, ` +
          `${
            Math.max(0, this.sharedBytes - at)
          } left): reserve one with reserveShared(), or set DTRAIN_SHM_SHARED_BYTES (or ` +
          `initProcessGroup's sharedBytes) to a larger multiple of 4096`,
      );
    }
    if (this.#shared === null) {
      // from here on the region outlives close(): the arrays must never point at unmapped memory
      const out = new BigUint64Array(2);
      shmCalls().dt_shm_shared(this.#handle, 1, out);
      this.#shared = Deno.UnsafePointer.create(out[0]!);
    }
    this.#sharedUsed = at + bytes;
    const view = new Deno.UnsafePointerView(this.#shared!);
    return new make(bytes === 0 ? new ArrayBuffer(0) : view.getArrayBuffer(bytes, at));
  }

  /**
   * Collective: reserves a shared region of `bytes` per rank (rounded up to 4096) for
   * allocShared, after open, on a group that has none yet; every rank must call it with the
   * same bytes. Each rank makes its region in /dev/shm (every page reserved now, so a full
   * /dev/shm fails here, not with a SIGBUS later) and maps its peers'; no name is left in
   * /dev/shm afterwards. When any rank cannot (more than its sharedLimitBytes, no room in
   * /dev/shm), every rank throws the same SharedReserveError naming that rank, and the group
   * stays usable (with no region).
   *
   * @example
   * ```ts
   * pg.reserveShared(64 << 20); // on every rank
   * const grads = pg.allocShared(16 << 20); // 64 MiB of f32, reduced in place
   * ```
   */
  reserveShared(bytes: number, opts: CallOptions = {}): void {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) {
      throw new RangeError(`reserveShared: ${bytes} bytes is not a positive integer`);
    }
    if (this.runner.closed) throw new Error(`reserveShared: ${this.segmentName} is closed`);
    const timeoutMs = opts.timeoutMs ?? this.#timeoutMs;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`reserveShared: timeoutMs must be a positive number, got ${timeoutMs}`);
    }
    const rounded = Math.ceil(bytes / 4096) * 4096;
    const out = new BigInt64Array(3);
    // the library numbers it as a collective (its messages say "#n"), unless it refuses at once
    if (this.#sharedBytes === 0) this.runner.countOutsideCall();
    try {
      shmCalls().dt_shm_reserve(
        this.#handle,
        BigInt(rounded),
        BigInt(this.sharedLimitBytes ?? -1),
        BigInt(Math.ceil(timeoutMs)),
        out,
      );
    } catch (e) {
      const failed = Number(out[0]);
      if (failed < 0) {
        throw e instanceof DtNativeError && e.status !== DT_ERR_ARG ? shmFailure(e) : e;
      }
      const step = SHM_RESERVE_STEP[Number(out[1])] ?? "unknown";
      throw new SharedReserveError(
        `reserveShared(${rounded} bytes per rank) failed on rank ${failed}: ${
          e instanceof DtNativeError ? e.text : (e as Error).message
        }`,
        failed,
        step,
        rounded,
      );
    }
    const shared = new BigUint64Array(2);
    shmCalls().dt_shm_shared(this.#handle, 0, shared);
    this.#sharedBytes = Number(shared[1]);
  }

  /**
   * Gives back the memory of the whole pages of `arr`, an array from allocShared that is no
   * longer needed (madvise MADV_REMOVE: the pages leave /dev/shm and every rank's RSS). The array
   * stays usable: it reads as zeros (on every rank) and takes memory again where written. Not
   * collective. Returns the bytes given back (pages only partly covered by `arr` stay).
   */
  releaseShared(arr: ArrayBufferView): number {
    if (this.runner.closed) throw new Error(`releaseShared: ${this.segmentName} is closed`);
    const at = arr.byteLength === 0 ? null : Deno.UnsafePointer.of(arr);
    const base = this.#shared === null ? 0n : Deno.UnsafePointer.value(this.#shared);
    const offset = at === null ? -1n : BigInt(Deno.UnsafePointer.value(at)) - BigInt(base);
    if (
      at === null || this.#shared === null || offset < 0n ||
      offset + BigInt(arr.byteLength) > BigInt(this.#sharedUsed)
    ) {
      if (arr.byteLength === 0) return 0;
      throw new RangeError("releaseShared: the array was not made by this group's allocShared");
    }
    const out = new BigInt64Array(1);
    shmCalls().dt_shm_release(this.#handle, offset, BigInt(arr.byteLength), out);
    return Number(out[0]);
  }

  override close(): void {
    if (!this.runner.close()) return;
    const handle = this.#handle;
    leaked.unregister(this);
    shmCalls().dt_shm_close(handle);
  }

  /** An argument error aborts the group, so the peers stop waiting for this rank instead of
   *  timing out. */
  #abortForBadArguments(reason: string): void {
    shmAbort(this.#handle, DT_ERR_ARG, cBytes(reason));
  }

  /** One native call; the library compares the ranks' calls at its first barrier and watches
   *  the deadline, the abort word and dead peers. */
  #perform(c: Collective, timeoutMs: number): Work {
    const handle = this.#handle;
    const lib = shmCalls();
    const t = BigInt(Math.ceil(timeoutMs));
    switch (c.op) {
      case "allReduce": {
        const b = c.inp!;
        lib.dt_shm_allreduce(
          handle,
          b.ptr,
          BigInt(b.count),
          SHM_DTYPE_CODE[b.dtype],
          SHM_REDUCE_CODE[c.reduceOp],
          t,
        );
        break;
      }
      case "broadcast": {
        const b = c.inp!;
        const args = [b.ptr, BigInt(b.count), SHM_DTYPE_CODE[b.dtype], c.root] as const;
        lib.dt_shm_broadcast(handle, ...args, t);
        break;
      }
      case "allGather": {
        const o = c.out!, i = c.inp!;
        const args = [o.ptr, i.ptr, BigInt(i.count), SHM_DTYPE_CODE[i.dtype]] as const;
        lib.dt_shm_allgather(handle, ...args, t);
        break;
      }
      case "reduceScatter": {
        const o = c.out!, i = c.inp!;
        const args = [
          o.ptr,
          i.ptr,
          BigInt(o.count),
          SHM_DTYPE_CODE[o.dtype],
          SHM_REDUCE_CODE[c.reduceOp],
        ] as const;
        lib.dt_shm_reduce_scatter(handle, ...args, t);
        break;
      }
      case "barrier": {
        const cname = cBytes(c.name);
        lib.dt_shm_barrier(handle, cname, t);
        break;
      }
    }
    return COMPLETED;
  }
}

/** A failed call's error with its kind (the native library already aborted the group). */
function shmFailure(e: unknown): Error {
  return withFailureKind(e as Error, shmFailureKind(e), { inCollective: true });
}
