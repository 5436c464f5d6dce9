/**
 * The process group of a process that runs alone (no launcher environment,
 * or WORLD_SIZE=1): every collective is an identity (allGather and
 * reduceScatter copy inp to out), so single-process code runs the same
 * calls, with the same argument checks and phase reports, as a distributed one.
 * GPU memory is copied by the GPU (on the compute stream), never touched by
 * the host; a copy between host and GPU memory is refused.
 */
import { reportCollective } from "../control/phase.ts";
import { backendOf, type Device } from "../../tensor/backend.ts";
import {
  type BufferLike,
  checkReduceDType,
  checkReduceOp,
  checkSizes,
  type ReduceOp,
  resolveBuffer,
  type ResolvedBuffer,
} from "./collective_buffer.ts";
import { type CallOptions, COMPLETED, type ProcessGroup, type Work } from "../process_group.ts";

/** Where a buffer is: its own `device`, else the group's. */
function placeOf(b: ResolvedBuffer, group: Device): Device {
  return b.device ?? group;
}

/** Throws unless out and inp are on one device (the copy is that device's). */
function checkSameDevice(o: ResolvedBuffer, i: ResolvedBuffer, group: Device, what: string): void {
  const [od, id] = [placeOf(o, group), placeOf(i, group)];
  if (od !== id) {
    throw new TypeError(
      `${what}: out is ${od === "cuda" ? "GPU" : "host"} memory but inp is ${
        id === "cuda" ? "GPU" : "host"
      } memory; a world of one copies inp to out, so both must be on one device`,
    );
  }
}

/** Copies `src` to `dst` (a no-op when they are the same): host memory by the host, GPU memory by the GPU. */
function copyBuffer(dst: ResolvedBuffer, src: ResolvedBuffer, group: Device): void {
  if (src.bytes === 0 || dst.ptr === null || src.ptr === null) return;
  if (Deno.UnsafePointer.equals(dst.ptr, src.ptr)) return;
  if (placeOf(src, group) === "cuda") {
    backendOf("cuda").call.dt_memcpy(dst.ptr, src.ptr, BigInt(src.bytes), 3); // device to device
    return;
  }
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
  /** The memory kind of buffers that do not say theirs: the process's device at creation. */
  readonly device: Device;
  #seq = 0;
  #closed = false;
  #timeoutMs: number;

  constructor(timeoutMs: number, device: Device = "cpu") {
    this.#timeoutMs = timeoutMs;
    this.device = device;
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
      checkSameDevice(o, i, this.device, "allGather");
      return [i.bytes, () => copyBuffer(o, i, this.device)];
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
      checkSameDevice(o, i, this.device, "reduceScatter");
      return [o.bytes, () => copyBuffer(o, i, this.device)];
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
