/**
 * The host tables of the one-launch optimizer steps (dt_adamw_many,
 * dt_sgd_many): the addresses, sizes and per-tensor scalars of every
 * parameter of one device, so a step is one native call (one kernel launch
 * on a GPU) whatever the number of parameters and groups.
 */
import type { Device } from "../tensor/backend.ts";
import type { Tensor } from "../tensor/tensor.ts";

/** Addresses and sizes as table entries, made once per tensor (a tensor's memory never moves). */
const entries = new WeakMap<Tensor, { address: bigint; count: bigint }>();

function entryOf(t: Tensor): { address: bigint; count: bigint } {
  let e = entries.get(t);
  if (!e) {
    e = { address: BigInt(Deno.UnsafePointer.value(t.ptr)), count: BigInt(t.numel) };
    entries.set(t, e);
  }
  return e;
}

/** A tensor's address as a table entry (0 for none). */
export function address(t: Tensor | null | undefined): bigint {
  return t ? entryOf(t).address : 0n;
}

/** A tensor's element count as a table entry. */
export function count(t: Tensor): bigint {
  return entryOf(t).count;
}

/**
 * Checks that `t`, the gradient or state of parameter `index` (or the
 * parameter itself), is f32 on the parameter's device with its size: what
 * the one-call steps update. Refuses anything else naming the parameter.
 */
export function checkStepTensor(
  who: string,
  p: Tensor,
  index: number,
  t: Tensor | null | undefined,
): void {
  if (!t) return;
  if (t.dtype !== "f32") {
    throw new TypeError(
      `${who}: parameter ${index} [${p.shape}] has ${
        t === p ? "" : "a gradient or state of "
      }dtype ${t.dtype}; the optimizer updates f32 tensors`,
    );
  }
  if (t.device !== p.device) {
    throw new TypeError(
      `${who}: parameter ${index} [${p.shape}] is on ${p.device} but its gradient or state is on ${t.device}`,
    );
  }
  if (t.numel !== p.numel) {
    throw new RangeError(
      `${who}: parameter ${index} [${p.shape}] has a gradient or state of ${t.numel} elements`,
    );
  }
}

/** The device of an item's parameter (byDevice's key for the optimizers' items). */
export const onDevice = (it: { p: Tensor }): Device => it.p.device;

/** The device of every item, or null when they are on several (or there are none). */
export function oneDevice<T>(items: T[], deviceOf: (item: T) => Device): Device | null {
  if (items.length === 0) return null;
  const first = deviceOf(items[0]!);
  for (const it of items) if (deviceOf(it) !== first) return null;
  return first;
}

/**
 * `items` split by device (`deviceOf`), one native call per device, in
 * order inside each device; one device (the usual case) without regrouping.
 */
export function byDevice<T>(items: T[], deviceOf: (item: T) => Device): Iterable<[Device, T[]]> {
  if (items.length === 0) return [];
  const first = deviceOf(items[0]!);
  let one = true;
  for (const it of items) if (deviceOf(it) !== first) one = false;
  if (one) return [[first, items]];
  const out = new Map<Device, T[]>();
  for (const it of items) {
    const list = out.get(deviceOf(it)) ?? [];
    list.push(it);
    out.set(deviceOf(it), list);
  }
  return out;
}

/**
 * Reusable host columns of a table (grown when a call has more tensors,
 * never shrunk): an optimizer refills them every step instead of allocating
 * typed arrays per step, which would grow the process's memory for nothing.
 */
export class HostTable {
  #rows = 0;
  /** tensor addresses, one column per pointer parameter */
  ptrs: BigUint64Array<ArrayBuffer>[] = [];
  /** element counts */
  counts: BigInt64Array<ArrayBuffer> = new BigInt64Array(0);
  /** per-tensor integers (AdamW: steps) */
  ints: BigInt64Array<ArrayBuffer> = new BigInt64Array(0);
  /** per-tensor scalars, f64PerRow each */
  f64: Float64Array<ArrayBuffer> = new Float64Array(0);
  /** per-tensor flags, i32PerRow each */
  i32: Int32Array<ArrayBuffer> = new Int32Array(0);

  constructor(
    readonly pointerColumns: number,
    readonly f64PerRow: number,
    readonly i32PerRow: number,
  ) {}

  /** Makes room for n tensors. */
  reserve(n: number): this {
    if (n <= this.#rows) return this;
    const rows = Math.max(n, 2 * this.#rows);
    this.ptrs = Array.from({ length: this.pointerColumns }, () => new BigUint64Array(rows));
    this.counts = new BigInt64Array(rows);
    this.ints = new BigInt64Array(rows);
    this.f64 = new Float64Array(rows * this.f64PerRow);
    this.i32 = new Int32Array(rows * this.i32PerRow);
    this.#rows = rows;
    this.at = {
      ptrs: this.ptrs.map((a) => Deno.UnsafePointer.of(a)),
      counts: Deno.UnsafePointer.of(this.counts),
      ints: Deno.UnsafePointer.of(this.ints),
      f64: Deno.UnsafePointer.of(this.f64),
      i32: Deno.UnsafePointer.of(this.i32),
    };
    return this;
  }

  /** The columns' addresses for the FFI call (taken once per growth, not per call). */
  at: {
    ptrs: Deno.PointerValue[];
    counts: Deno.PointerValue;
    ints: Deno.PointerValue;
    f64: Deno.PointerValue;
    i32: Deno.PointerValue;
  } = { ptrs: [], counts: null, ints: null, f64: null, i32: null };
}
