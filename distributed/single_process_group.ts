/**
 * The process group of a process that runs alone (no launcher environment,
 * or WORLD_SIZE=1): every collective is an identity (allGather and
 * reduceScatter copy inp to out), so single-process code runs the same
 * calls, with the same argument checks and phase reports, as a distributed one.
 */
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
import type { CallOptions, ProcessGroup } from "./process_group.ts";
import { COMPLETED, type Work } from "./work.ts";

/** Copies `src` to `dst` (native memory; a no-op when they are the same). */
function copyBuffer(dst: ResolvedBuffer, src: ResolvedBuffer): void {
  if (src.bytes === 0 || dst.ptr === null || src.ptr === null) return;
  if (Deno.UnsafePointer.equals(dst.ptr, src.ptr)) return;
  const to = new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(dst.ptr, dst.bytes));
  to.set(new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(src.ptr, src.bytes)));
}

/** What a collective does to its data with one rank: nothing. */
const identity = () => {};

/** A world of one rank; create it with initProcessGroup(). */
export class SingleProcessGroup implements ProcessGroup {
  readonly rank = 0;
  readonly size = 1;
  readonly backend = "single" as const;
  #seq = 0;
  #closed = false;
  #timeoutMs: number;

  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  allReduce(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): void {
    this.#run("allReduce", undefined, opts, () => {
      const b = resolveBuffer(buf, "allReduce buf");
      checkReduceDType(checkReduceOp(op, "allReduce"), b.dtype, "allReduce");
      return [b.bytes, identity];
    });
  }

  /** allReduce, complete when it returns. */
  allReduceStart(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): Work {
    this.allReduce(buf, op, opts);
    return COMPLETED;
  }

  broadcast(buf: BufferLike, root: number, opts: CallOptions = {}): void {
    this.#run("broadcast", `root ${root}`, opts, () => {
      const b = resolveBuffer(buf, "broadcast buf");
      if (root !== 0) {
        throw new RangeError(`broadcast: root ${root} is not a rank of this group (size 1)`);
      }
      return [b.bytes, identity];
    });
  }

  allGather(out: BufferLike, inp: BufferLike, opts: CallOptions = {}): void {
    this.#run("allGather", undefined, opts, () => {
      const o = resolveBuffer(out, "allGather out");
      const i = resolveBuffer(inp, "allGather inp");
      checkSizes(o, i, 1, 1, "allGather");
      return [i.bytes, () => copyBuffer(o, i)];
    });
  }

  reduceScatter(
    out: BufferLike,
    inp: BufferLike,
    op: ReduceOp = "sum",
    opts: CallOptions = {},
  ): void {
    this.#run("reduceScatter", undefined, opts, () => {
      const o = resolveBuffer(out, "reduceScatter out");
      const i = resolveBuffer(inp, "reduceScatter inp");
      checkSizes(o, i, 1, 1, "reduceScatter");
      checkReduceDType(checkReduceOp(op, "reduceScatter"), o.dtype, "reduceScatter");
      return [o.bytes, () => copyBuffer(o, i)];
    });
  }

  barrier(name: string, opts: CallOptions = {}): void {
    this.#run("barrier", String(name), opts, () => [0, identity]);
  }

  close(): void {
    this.#closed = true;
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /** Checks the arguments (`prepare` returns the payload bytes and the
   *  work), reports the call, and does the work. */
  #run(
    op: string,
    detail: string | undefined,
    opts: CallOptions,
    prepare: () => [number, () => void],
  ): void {
    if (this.#closed) throw new Error(`${op}: process group is closed`);
    const timeoutMs = opts.timeoutMs ?? this.#timeoutMs;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`${op}: timeoutMs must be a positive number, got ${timeoutMs}`);
    }
    const [bytes, work] = prepare();
    const seq = ++this.#seq;
    const rec = detail === undefined ? { seq, op, bytes } : { seq, op, bytes, detail };
    reportCollective(rec, "enter");
    try {
      work();
    } finally {
      reportCollective(rec, "exit");
    }
  }
}
