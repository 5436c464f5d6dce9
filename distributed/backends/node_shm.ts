/**
 * The shared-memory step of the Gloo group's hierarchical allReduce: one
 * segment per node joining that node's ranks, used without phase reports of
 * its own (the Gloo group reports the whole collective). Its error texts
 * number ranks within the node; they are rewritten to the job's ranks here
 * (texts this file hands to the segment say "job rank"), so a message never
 * blames the wrong rank.
 */
import { cBytes, DtNativeError } from "../../ffi/native.ts";
import {
  SHM_DTYPE_CODE,
  SHM_REDUCE_CODE,
  shmAbort,
  shmCalls,
  shmCloseLeaked,
  shmOpen,
} from "../../ffi/shm.ts";
import type { CollectiveDType, ReduceOp } from "./collective_buffer.ts";

/** Where the node's group sits in the job. */
export interface NodeShmSpec {
  /** /dev/shm name, unique per run, attempt, node and group */
  name: string;
  localRank: number;
  localSize: number;
  /** the job rank of local rank 0 (node × ranks per node) */
  firstRank: number;
  chunkBytes: number;
  spinUs: number;
  detail: boolean;
  timeoutMs: number;
}

/** Closes handles whose group was dropped without close(): a backstop only. */
const leaked = new FinalizationRegistry<Deno.PointerObject>((handle) => {
  shmCloseLeaked(handle);
});

/** A node's shared-memory group, as the Gloo group uses it. */
export class NodeShm {
  readonly #firstRank: number;
  #handle: Deno.PointerObject | null;

  private constructor(handle: Deno.PointerObject, firstRank: number) {
    this.#handle = handle;
    this.#firstRank = firstRank;
    leaked.register(this, handle, this);
  }

  /** Joins the node's segment; returns once every local rank has. */
  static open(spec: NodeShmSpec): NodeShm {
    const handle = inJobRanks(
      spec.firstRank,
      () => shmOpen({ ...spec, rank: spec.localRank, size: spec.localSize }),
    );
    return new NodeShm(handle, spec.firstRank);
  }

  /** out [count] = op over the node's ranks of block localRank of inp [localSize × count]. */
  reduceScatter(
    out: Deno.PointerValue,
    inp: Deno.PointerValue,
    count: number,
    dtype: CollectiveDType,
    op: ReduceOp,
    timeoutMs: number,
  ): void {
    const handle = this.#live();
    inJobRanks(this.#firstRank, () =>
      shmCalls().dt_shm_reduce_scatter(
        handle,
        out,
        inp,
        BigInt(count),
        SHM_DTYPE_CODE[dtype],
        SHM_REDUCE_CODE[op],
        BigInt(Math.ceil(timeoutMs)),
      ));
  }

  /** out [localSize × count] = every local rank's inp [count], in order. */
  allGather(
    out: Deno.PointerValue,
    inp: Deno.PointerValue,
    count: number,
    dtype: CollectiveDType,
    timeoutMs: number,
  ): void {
    const handle = this.#live();
    inJobRanks(this.#firstRank, () =>
      shmCalls().dt_shm_allgather(
        handle,
        out,
        inp,
        BigInt(count),
        SHM_DTYPE_CODE[dtype],
        BigInt(Math.ceil(timeoutMs)),
      ));
  }

  /** Fails the node's group for its other ranks; never throws. `reason`
   *  numbers ranks as the job does: they are marked "job rank" so that the
   *  renaming of local ranks leaves them alone. */
  abort(status: number, reason: string): void {
    if (!this.#handle) return;
    const marked = reason.replace(/(?<!job )\brank (\d+)\b/g, "job rank $1");
    shmAbort(this.#handle, status, cBytes(marked));
  }

  close(): void {
    const h = this.#handle;
    if (h === null) return;
    this.#handle = null;
    leaked.unregister(this);
    inJobRanks(this.#firstRank, () => shmCalls().dt_shm_close(h));
  }

  #live(): Deno.PointerObject {
    if (this.#handle === null) throw new Error("the node's shared-memory group is closed");
    return this.#handle;
  }
}

/** Runs a status-checked call; its DtNativeError is thrown again with the node's rank numbers
 *  renamed to the job's. */
function inJobRanks<T>(firstRank: number, call: () => T): T {
  try {
    return call();
  } catch (e) {
    if (!(e instanceof DtNativeError)) throw e;
    const text = e.text
      .replace(/(?<!job )\brank (\d+)\b/g, (_, r) => `rank ${firstRank + Number(r)}`);
    throw new DtNativeError(e.library, e.symbol, e.status, text);
  }
}
