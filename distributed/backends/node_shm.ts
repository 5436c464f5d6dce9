/**
 * The shared-memory step of the Gloo group's hierarchical allReduce: one
 * segment per node joining that node's ranks, used without phase reports of
 * its own (the Gloo group reports the whole collective). Its error texts
 * number ranks within the node; they are rewritten to the job's ranks here
 * (texts this file hands to the segment say "job rank"), so a message never
 * blames the wrong rank.
 */
import { cString as readCString, DtNativeError } from "../../ffi/native.ts";
import { SHM_DTYPE_CODE, SHM_FLAG_DETAIL, SHM_REDUCE_CODE, shmLibrary } from "../../ffi/shm.ts";
import type { CollectiveDType, ReduceOp } from "./collective_buffer.ts";
import { cString } from "./gloo_native_group.ts";

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
  shmLibrary().symbols.dt_shm_close(handle);
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
    const lib = shmLibrary();
    const out = new BigUint64Array(1);
    const status = lib.symbols.dt_shm_open(
      cString(spec.name),
      spec.localRank,
      spec.localSize,
      BigInt(spec.chunkBytes),
      BigInt(Math.round(spec.spinUs * 1000)),
      spec.detail ? SHM_FLAG_DETAIL : 0,
      BigInt(Math.ceil(spec.timeoutMs)),
      out,
    );
    checkShm(status, "dt_shm_open", spec.firstRank);
    const handle = Deno.UnsafePointer.create(out[0]!);
    if (handle === null) throw new Error("dt_shm_open returned success but no handle");
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
    checkShm(
      shmLibrary().symbols.dt_shm_reduce_scatter(
        this.#live(),
        out,
        inp,
        BigInt(count),
        SHM_DTYPE_CODE[dtype],
        SHM_REDUCE_CODE[op],
        BigInt(Math.ceil(timeoutMs)),
      ),
      "dt_shm_reduce_scatter",
      this.#firstRank,
    );
  }

  /** out [localSize × count] = every local rank's inp [count], in order. */
  allGather(
    out: Deno.PointerValue,
    inp: Deno.PointerValue,
    count: number,
    dtype: CollectiveDType,
    timeoutMs: number,
  ): void {
    checkShm(
      shmLibrary().symbols.dt_shm_allgather(
        this.#live(),
        out,
        inp,
        BigInt(count),
        SHM_DTYPE_CODE[dtype],
        BigInt(Math.ceil(timeoutMs)),
      ),
      "dt_shm_allgather",
      this.#firstRank,
    );
  }

  /** Fails the node's group for its other ranks; never throws. `reason`
   *  numbers ranks as the job does: they are marked "job rank" so that the
   *  renaming of local ranks leaves them alone. */
  abort(status: number, reason: string): void {
    if (!this.#handle) return;
    const marked = reason.replace(/(?<!job )\brank (\d+)\b/g, "job rank $1");
    shmLibrary().symbols.dt_shm_abort(this.#handle, status, cString(marked));
  }

  close(): void {
    const h = this.#handle;
    if (h === null) return;
    this.#handle = null;
    leaked.unregister(this);
    checkShm(shmLibrary().symbols.dt_shm_close(h), "dt_shm_close", this.#firstRank);
  }

  #live(): Deno.PointerObject {
    if (this.#handle === null) throw new Error("the node's shared-memory group is closed");
    return this.#handle;
  }
}

/** Throws like the library's check, with the node's rank numbers renamed to the job's. */
function checkShm(status: number, symbol: string, firstRank: number): void {
  if (status === 0) return;
  const text = readCString(shmLibrary().symbols.dt_last_error())
    .replace(/(?<!job )\brank (\d+)\b/g, (_, r) => `rank ${firstRank + Number(r)}`);
  throw new DtNativeError("libdtrain_shm.so", symbol, status, text);
}
