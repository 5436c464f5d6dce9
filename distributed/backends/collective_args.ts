/**
 * One collective call, checked: the buffers it reads and writes and the call
 * record the ranks compare (op, element type, elements per rank, reduce op,
 * root, barrier name). Every backend takes its calls in this shape, so the
 * argument checks and their texts are written once, here.
 */
import {
  type BufferLike,
  checkReduceDType,
  checkReduceOp,
  checkSizes,
  type CollectiveDType,
  type ReduceOp,
  requireHostBuffer,
  resolveBuffer,
  type ResolvedBuffer,
} from "./collective_buffer.ts";

/** The collectives of a ProcessGroup. */
export type CollectiveOp = "allReduce" | "broadcast" | "allGather" | "reduceScatter" | "barrier";

/** A checked call. Fields that an op lacks hold fixed values (root -1, reduce op "sum", name ""),
 *  so that two ranks' records compare field by field. */
export interface Collective {
  readonly op: CollectiveOp;
  /** the buffer read (allReduce and broadcast: their one buffer); null for a barrier */
  readonly inp: ResolvedBuffer | null;
  /** the buffer written; null for a barrier */
  readonly out: ResolvedBuffer | null;
  /** element type ("u8" for a barrier) */
  readonly dtype: CollectiveDType;
  /** elements per rank: allGather's inp, reduceScatter's out, 0 for a barrier */
  readonly count: number;
  readonly reduceOp: ReduceOp;
  /** broadcast's root, else -1 */
  readonly root: number;
  /** barrier's name, else "" */
  readonly name: string;
  /** payload bytes: count x element size, as the launcher's phase record reports them */
  readonly bytes: number;
  /** what the phase record shows besides op and size: broadcast's root, barrier's name */
  readonly detail: string | undefined;
}

/**
 * A buffer argument, checked; `hostOnly` names a group that reads and writes
 * buffers on the host (GPU memory is refused before any byte is touched), null
 * for one that takes memory of any device.
 */
function buffer(b: BufferLike, what: string, hostOnly: string | null): ResolvedBuffer {
  const r = resolveBuffer(b, what);
  if (hostOnly !== null) requireHostBuffer(r, what, hostOnly);
  return r;
}

/** allReduce(buf, op). */
export function allReduceArgs(buf: BufferLike, op: ReduceOp, hostOnly: string | null): Collective {
  const b = buffer(buf, "allReduce buf", hostOnly);
  checkReduceDType(checkReduceOp(op, "allReduce"), b.dtype, "allReduce");
  return {
    op: "allReduce",
    inp: b,
    out: b,
    dtype: b.dtype,
    count: b.count,
    reduceOp: op,
    root: -1,
    name: "",
    bytes: b.bytes,
    detail: undefined,
  };
}

/** broadcast(buf, root) in a group of `size` ranks. */
export function broadcastArgs(
  buf: BufferLike,
  root: number,
  size: number,
  hostOnly: string | null,
): Collective {
  const b = buffer(buf, "broadcast buf", hostOnly);
  if (!Number.isInteger(root) || root < 0 || root >= size) {
    throw new RangeError(`broadcast: root ${root} is not a rank of this group (size ${size})`);
  }
  return {
    op: "broadcast",
    inp: b,
    out: b,
    dtype: b.dtype,
    count: b.count,
    reduceOp: "sum",
    root,
    name: "",
    bytes: b.bytes,
    detail: `root ${root}`,
  };
}

/** allGather(out, inp) in a group of `size` ranks. */
export function allGatherArgs(
  out: BufferLike,
  inp: BufferLike,
  size: number,
  hostOnly: string | null,
): Collective {
  const o = buffer(out, "allGather out", hostOnly);
  const i = buffer(inp, "allGather inp", hostOnly);
  checkSizes(o, i, size, 1, "allGather");
  return {
    op: "allGather",
    inp: i,
    out: o,
    dtype: i.dtype,
    count: i.count,
    reduceOp: "sum",
    root: -1,
    name: "",
    bytes: i.bytes,
    detail: undefined,
  };
}

/** reduceScatter(out, inp, op) in a group of `size` ranks. */
export function reduceScatterArgs(
  out: BufferLike,
  inp: BufferLike,
  op: ReduceOp,
  size: number,
  hostOnly: string | null,
): Collective {
  const o = buffer(out, "reduceScatter out", hostOnly);
  const i = buffer(inp, "reduceScatter inp", hostOnly);
  checkSizes(o, i, 1, size, "reduceScatter");
  checkReduceDType(checkReduceOp(op, "reduceScatter"), o.dtype, "reduceScatter");
  return {
    op: "reduceScatter",
    inp: i,
    out: o,
    dtype: o.dtype,
    count: o.count,
    reduceOp: op,
    root: -1,
    name: "",
    bytes: o.bytes,
    detail: undefined,
  };
}

/** barrier(name). */
export function barrierArgs(name: string): Collective {
  const text = String(name);
  return {
    op: "barrier",
    inp: null,
    out: null,
    dtype: "u8",
    count: 0,
    reduceOp: "sum",
    root: -1,
    name: text,
    bytes: 0,
    detail: text,
  };
}
