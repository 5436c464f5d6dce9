/**
 * What a collective reads and writes: a low-level buffer (`{ptr, count,
 * dtype}` over native memory) or a typed array, checked and turned into one
 * shape with its byte size. Pointers of typed arrays are cached per array,
 * because Deno.UnsafePointer.of costs about as much as a small collective.
 */

/** Element types the collectives accept. f64 and u8 exist for metrics and
 *  raw bytes; avg needs a floating type. */
export type CollectiveDType = "f32" | "f64" | "bf16" | "f16" | "i32" | "i64" | "u8";

/** How allReduce and reduceScatter combine the ranks' values. avg is the sum
 *  divided by the world size (in the element type, as torch divides). */
export type ReduceOp = "sum" | "avg" | "max" | "min";

/** Native memory a collective works on: `count` elements of `dtype` at `ptr`
 *  (`ptr` may be null only when `count` is 0), in host memory ("cpu") or a
 *  GPU's ("cuda"). Without `device`, the memory is the group's own kind: host
 *  memory for the CPU groups, GPU memory for the NCCL group. */
export interface CollectiveBuffer {
  /** Address of the first element (null only when count is 0). */
  ptr: Deno.PointerObject | null;
  /** Number of elements. */
  count: number;
  /** Element type. */
  dtype: CollectiveDType;
  /** Whose memory `ptr` is: host ("cpu") or a GPU's ("cuda"); absent: the group's own kind. */
  device?: "cpu" | "cuda";
}

/** Typed arrays accepted in place of a CollectiveBuffer (bf16 only as a
 *  CollectiveBuffer: no typed array holds it). */
export type CollectiveArray =
  | Float32Array
  | Float64Array
  | Float16Array
  | Int32Array
  | BigInt64Array
  | Uint8Array;

/** The element types a group's allocShared makes arrays of, and their arrays. */
export interface SharedArrayTypes {
  /** 32-bit floats (the default) */
  f32: Float32Array;
  /** 64-bit floats */
  f64: Float64Array;
  /** 32-bit integers */
  i32: Int32Array;
  /** 64-bit integers */
  i64: BigInt64Array;
  /** bytes */
  u8: Uint8Array;
}

/** Anything a collective takes as data. */
export type BufferLike = CollectiveBuffer | CollectiveArray;

/** Bytes per element. */
export const DTYPE_BYTES: Readonly<Record<CollectiveDType, number>> = {
  f32: 4,
  f64: 8,
  bf16: 2,
  f16: 2,
  i32: 4,
  i64: 8,
  u8: 1,
};

const REDUCE_OPS: readonly ReduceOp[] = ["sum", "avg", "max", "min"];

/** A buffer after checking: pointer, count, dtype and size in bytes. */
export interface ResolvedBuffer {
  ptr: Deno.PointerValue;
  count: number;
  dtype: CollectiveDType;
  bytes: number;
  /** "cpu" for typed arrays; a CollectiveBuffer's `device`, or null when it left it to the group */
  device: "cpu" | "cuda" | null;
}

const pointerCache = new WeakMap<CollectiveArray, Deno.PointerValue>();

function arrayDType(a: CollectiveArray): CollectiveDType {
  if (a instanceof Float32Array) return "f32";
  if (a instanceof Float64Array) return "f64";
  if (a instanceof Float16Array) return "f16";
  if (a instanceof Int32Array) return "i32";
  if (a instanceof BigInt64Array) return "i64";
  return "u8";
}

function isCollectiveArray(b: unknown): b is CollectiveArray {
  // one builtin call answers for the usual {ptr, count, dtype} object
  if (!ArrayBuffer.isView(b)) return false;
  return b instanceof Float32Array || b instanceof Float64Array || b instanceof Float16Array ||
    b instanceof Int32Array || b instanceof BigInt64Array || b instanceof Uint8Array;
}

/**
 * Checks `b` and returns its pointer, count, dtype and bytes; `what` names it
 * in errors ("allReduce buf").
 *
 * @example
 * ```ts
 * const r = resolveBuffer(new Float32Array(10), "allReduce buf"); // r.bytes === 40
 * ```
 */
export function resolveBuffer(b: BufferLike, what: string): ResolvedBuffer {
  if (isCollectiveArray(b)) {
    let ptr = pointerCache.get(b);
    if (ptr === undefined) {
      ptr = b.length === 0 ? null : Deno.UnsafePointer.of(b);
      pointerCache.set(b, ptr);
    }
    const dtype = arrayDType(b);
    return { ptr, count: b.length, dtype, bytes: b.byteLength, device: "cpu" };
  }
  if (b === null || typeof b !== "object" || !("count" in b) || !("dtype" in b) || !("ptr" in b)) {
    throw new TypeError(
      `${what} must be a typed array (Float32Array, Float64Array, Float16Array, Int32Array, BigInt64Array, ` +
        `Uint8Array) or {ptr, count, dtype}, got ${Object.prototype.toString.call(b)}`,
    );
  }
  const bytesPer = DTYPE_BYTES[b.dtype];
  if (bytesPer === undefined) {
    throw new TypeError(
      `${what} has dtype "${b.dtype}": expected one of ${Object.keys(DTYPE_BYTES).join(", ")}`,
    );
  }
  if (!Number.isSafeInteger(b.count) || b.count < 0) {
    throw new RangeError(`${what} has count ${b.count}: expected a non-negative integer`);
  }
  if (b.ptr === null && b.count > 0) {
    throw new TypeError(`${what} has a null pointer but count ${b.count}`);
  }
  const device = b.device ?? null;
  if (device !== null && device !== "cpu" && device !== "cuda") {
    throw new TypeError(`${what} has device ${JSON.stringify(device)}: expected "cpu" or "cuda"`);
  }
  return { ptr: b.ptr, count: b.count, dtype: b.dtype, bytes: b.count * bytesPer, device };
}

/**
 * Throws unless the buffer is host memory, for a group that reads and writes
 * buffers on the host (`group` names it): GPU memory must never be touched
 * there (on a GPU that is a crash, not an error).
 */
export function requireHostBuffer(b: ResolvedBuffer, what: string, group: string): void {
  if (b.device !== "cuda") return;
  throw new TypeError(
    `${what} is GPU memory, but the ${group} reads and writes buffers on the host: GPU ranks ` +
      `reduce through NCCL (initProcessGroup() on a rank whose device is CUDA returns it), or copy ` +
      `the data to the host first (toArray)`,
  );
}

/** Throws unless `op` is a ReduceOp. */
export function checkReduceOp(op: unknown, what: string): ReduceOp {
  if (op !== "sum" && op !== "avg" && op !== "max" && op !== "min") {
    throw new TypeError(
      `${what}: reduce op ${JSON.stringify(op)} is not one of ${REDUCE_OPS.join(", ")}`,
    );
  }
  return op as ReduceOp;
}

/** Throws unless avg is applied to a floating dtype. */
export function checkReduceDType(op: ReduceOp, dtype: CollectiveDType, what: string): void {
  if (op === "avg" && dtype !== "f32" && dtype !== "f64" && dtype !== "bf16" && dtype !== "f16") {
    throw new TypeError(`${what}: avg needs a floating dtype (f32, f64, bf16, f16), got ${dtype}`);
  }
}

/** Throws unless out and inp have the same dtype and out.count == factor x inp.count. */
export function checkSizes(
  out: ResolvedBuffer,
  inp: ResolvedBuffer,
  outPerInp: number,
  inpPerOut: number,
  what: string,
): void {
  if (out.dtype !== inp.dtype) {
    throw new TypeError(`${what}: out is ${out.dtype} but inp is ${inp.dtype}; they must match`);
  }
  if (out.count * inpPerOut !== inp.count * outPerInp) {
    const expected = inpPerOut === 1
      ? `out = ${outPerInp} x inp = ${outPerInp * inp.count} elements`
      : `inp = ${inpPerOut} x out = ${inpPerOut * out.count} elements`;
    throw new RangeError(
      `${what}: out has ${out.count} and inp ${inp.count} elements: expected ${expected}`,
    );
  }
}
