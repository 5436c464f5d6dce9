/**
 * Tensor: a shape, a dtype and a device over native memory from the caching
 * allocator. Memory is owned explicitly: tensors created inside `scope()` are
 * freed when it ends (unless returned or kept), others live until dispose().
 * TypeScript never touches the elements: reads and writes copy through the
 * backend's dt_memcpy.
 */
import { backend, backendOf, type Device } from "./backend.ts";
import { noteHostSync } from "./host_sync.ts";
import { allocBlock, type Block, externalBlock, recountBlock, releaseBlock } from "./allocator.ts";
import type { MemoryKind } from "./memory_kinds.ts";
import { type DType, DTYPE_CODE, DTYPE_SIZE } from "./dtype.ts";
import type { Node } from "./autograd.ts";
import { formatTensor } from "./format.ts";
import { enter, leave } from "../profile/profile.ts";

/** Reference-counted memory shared by a tensor and its views (reshape). */
class Storage {
  refs = 1;
  /** Bumped by every write into existing memory (shared by views, as torch's _version). */
  version = 0;
  constructor(readonly block: Block) {}
  release(): void {
    if (--this.refs === 0) releaseBlock(this.block);
  }
}

/** Number of elements of a shape; throws on a negative or fractional dim. */
export function numelOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) {
    if (!Number.isSafeInteger(d) || d < 0) {
      throw new RangeError(
        `Invalid tensor shape [${shape}]: dimension ${d} is not a non-negative integer`,
      );
    }
    n *= d;
  }
  return n;
}

/** Where item() lands its element: one 8-byte buffer seen as each dtype, and its address. */
const ITEM = (() => {
  const buf = new ArrayBuffer(8);
  return {
    f32: new Float32Array(buf),
    i32: new Int32Array(buf),
    i64: new BigInt64Array(buf),
    u8: new Uint8Array(buf),
    at: Deno.UnsafePointer.of(buf),
  };
})();

/** Tensors created in the innermost open scope; disposed when it closes. */
const scopes: Set<Tensor>[] = [];

/**
 * A dense, contiguous, row-major n-dimensional array in native memory. The counterpart of
 * torch.Tensor: free its memory with dispose() or by creating it inside scope().
 */
export class Tensor {
  /** Size of each dim (PyTorch's `tensor.shape`). */
  readonly shape: readonly number[];
  /** Element type. */
  readonly dtype: DType;
  /** Where the memory lives: "cpu" or "cuda". */
  readonly device: Device;
  /** Number of elements (product of the shape). */
  readonly numel: number;
  #storage: Storage | null;
  /** Address of element 0 (fixed for the tensor's life; cached for FFI calls). */
  readonly ptr: Deno.PointerObject;
  /** Whether gradients flow to this tensor. */
  requiresGrad = false;
  /** Accumulated gradient of a leaf (parameters); null until the first backward. */
  grad: Tensor | null = null;
  /** The autograd node that produced this tensor, if any. */
  node: Node | null = null;

  /** @internal use empty(), zeros(), fromArray() or the ops. */
  constructor(
    shape: readonly number[],
    dtype: DType,
    storage: Storage,
    device: Device,
    ptr: Deno.PointerObject = storage.block.ptr,
  ) {
    this.shape = shape;
    this.dtype = dtype;
    this.device = device;
    this.numel = numelOf(shape);
    this.#storage = storage;
    this.ptr = ptr;
    scopes[scopes.length - 1]?.add(this);
  }

  /** Bytes of the tensor's elements. */
  get bytes(): number {
    return this.numel * DTYPE_SIZE[this.dtype];
  }

  /**
   * A counter of in-place writes into this tensor's memory (shared with its
   * views): copyFrom, copyFromArray, fill, optimizer steps, loading a state
   * dict, DDP's parameter broadcast. Caches derived from the values (the
   * weight casts of autocast) compare it. -1 once disposed.
   */
  get version(): number {
    return this.#storage?.version ?? -1;
  }

  /**
   * Records that the memory was written in place by a caller other than the
   * tensor's own methods (a raw kernel call, a collective into `ptr`), so
   * nothing derived from the old values is used again.
   */
  markModified(): this {
    this.assertLive("markModified");
    this.#storage!.version++;
    return this;
  }

  /** True once dispose() ran. */
  get disposed(): boolean {
    return this.#storage === null;
  }

  /** Frees the memory now (views keep it alive until they are disposed too). */
  dispose(): void {
    if (this.#storage === null) return;
    this.#storage.release();
    this.#storage = null;
    this.node = null;
    scopes[scopes.length - 1]?.delete(this);
  }

  /**
   * Counts this tensor's memory as `kind` in the memory report
   * (tensor/memory_kinds.ts): a module's parameters are weights.
   */
  countAs(kind: MemoryKind): this {
    this.assertLive("countAs");
    recountBlock(this.#storage!.block, kind);
    return this;
  }

  /** Takes the tensor out of the current scope so it survives scope exit. */
  keep(): this {
    for (const s of scopes) s.delete(this);
    return this;
  }

  /** A tensor sharing this one's memory with another shape of the same size. */
  view(shape: readonly number[]): Tensor {
    this.assertLive("view");
    const n = numelOf(shape);
    if (n !== this.numel) {
      throw new RangeError(
        `Cannot view tensor of shape [${this.shape}] as [${shape}]: element count ${this.numel} != ${n}`,
      );
    }
    this.#storage!.refs++;
    return new Tensor([...shape], this.dtype, this.#storage!, this.device, this.ptr);
  }

  /**
   * A tensor over `numelOf(shape)` elements of this one's memory starting at
   * element `offset` (e.g. one parameter's gradient inside a flat bucket).
   */
  subview(offset: number, shape: readonly number[]): Tensor {
    this.assertLive("subview");
    const n = numelOf(shape);
    if (!Number.isSafeInteger(offset) || offset < 0 || offset + n > this.numel) {
      throw new RangeError(
        `Cannot take [${shape}] at element ${offset} of tensor [${this.shape}]: it ends past element ${this.numel}`,
      );
    }
    this.#storage!.refs++;
    const ptr = Deno.UnsafePointer.offset(
      this.ptr,
      offset * DTYPE_SIZE[this.dtype],
    ) as Deno.PointerObject;
    return new Tensor([...shape], this.dtype, this.#storage!, this.device, ptr);
  }

  /** Copies the elements out to a new typed array (f32/bf16/f16 as Float32Array). */
  toArray(): Float32Array | Int32Array | BigInt64Array | Uint8Array {
    this.assertLive("toArray");
    if (this.dtype === "bf16" || this.dtype === "f16") {
      const f32 = castTensor(this, "f32");
      try {
        return f32.toArray();
      } finally {
        f32.dispose();
      }
    }
    const out = this.dtype === "f32"
      ? new Float32Array(this.numel)
      : this.dtype === "i32"
      ? new Int32Array(this.numel)
      : this.dtype === "i64"
      ? new BigInt64Array(this.numel)
      : new Uint8Array(this.numel);
    if (this.numel > 0) this.#readInto(out, "toArray");
    return out;
  }

  /** Copies the bytes out into `out`: the host waits for the device (counted, tensor/host_sync.ts). */
  #readInto(out: ArrayBufferView, what: string): void {
    this.#readTo(Deno.UnsafePointer.of(out as BufferSource), what);
  }

  #readTo(at: Deno.PointerValue, what: string): void {
    const b = backendOf(this.device);
    // a copy into host memory returns once the data is there (dt_memcpy waits for the stream)
    b.call.dt_memcpy(at, this.ptr, BigInt(this.bytes), 2);
    // a bad index or cast value the device found since the last read is reported here
    b.call.dt_deferred_error();
    if (b.device !== "cpu") noteHostSync(what);
  }

  /** The raw bytes of the tensor (a copy). */
  toBytes(): Uint8Array {
    this.assertLive("toBytes");
    const out = new Uint8Array(this.bytes);
    if (out.length > 0) this.#readInto(out, "toBytes");
    return out;
  }

  /** The value of a one-element tensor. */
  item(): number {
    if (this.numel !== 1) {
      throw new RangeError(
        `item() needs a tensor with one element, got shape [${this.shape}]`,
      );
    }
    if (this.dtype === "bf16" || this.dtype === "f16") {
      return this.toArray()[0] as number;
    }
    // Read into one reused 8-byte buffer (a training step reads its loss every step).
    this.assertLive("toArray");
    this.#readTo(ITEM.at, "toArray");
    switch (this.dtype) {
      case "f32":
        return ITEM.f32[0]!;
      case "i32":
        return ITEM.i32[0]!;
      case "i64":
        return Number(ITEM.i64[0]!);
      default:
        return ITEM.u8[0]!;
    }
  }

  /** Overwrites the elements from a typed array of the same byte length. */
  copyFromArray(data: ArrayBufferView): this {
    this.assertLive("copyFromArray");
    if (data.byteLength !== this.bytes) {
      throw new RangeError(
        `Cannot copy ${data.byteLength} bytes into tensor of shape [${this.shape}] ${this.dtype} (${this.bytes} bytes)`,
      );
    }
    if (this.bytes > 0) {
      // A copy from pageable host memory has taken the data when it returns (CUDA stages it):
      // no wait for the device, and `data` may change at once.
      const src = Deno.UnsafePointer.of(data as unknown as BufferSource);
      backendOf(this.device).call.dt_memcpy(this.ptr, src, BigInt(this.bytes), 1);
    }
    return this.markModified();
  }

  /** Overwrites the elements with another tensor's (same shape and dtype). */
  copyFrom(src: Tensor): this {
    this.assertLive("copyFrom");
    if (src.numel !== this.numel || src.dtype !== this.dtype) {
      throw new RangeError(
        `Cannot copy tensor [${src.shape}] ${src.dtype} into [${this.shape}] ${this.dtype}`,
      );
    }
    if (src.device !== this.device) {
      throw new TypeError(
        `Cannot copy a ${src.device} tensor into a ${this.device} tensor with copyFrom: ` +
          `read it back (toArray) and copyFromArray into the other device's tensor`,
      );
    }
    backendOf(this.device).call.dt_memcpy(this.ptr, src.ptr, BigInt(this.bytes), 3);
    return this.markModified();
  }

  /** Sets every element to `value`. */
  fill(value: number): this {
    this.assertLive("fill");
    backendOf(this.device).call.dt_fill(
      this.ptr,
      DTYPE_CODE[this.dtype],
      BigInt(this.numel),
      value,
    );
    return this.markModified();
  }

  /** Throws when the tensor was disposed. */
  assertLive(op: string): void {
    if (this.#storage === null) {
      throw new Error(
        `${op}: tensor of shape [${this.shape}] was already disposed`,
      );
    }
  }

  /**
   * The values as PyTorch prints them, then shape, dtype, device and the
   * autograd state: `tensor([1.5000, 2.0000], shape=[2], dtype=f32, device=cpu)`.
   * Past 1000 elements only the first and last 3 of each dimension are read.
   */
  toString(): string {
    return formatTensor(this);
  }

  /** What `console.log(tensor)` shows in Deno: the same as toString(). */
  [Symbol.for("Deno.customInspect")](): string {
    return formatTensor(this);
  }

  /** What node:util's inspect shows: the same as toString(). */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return formatTensor(this);
  }
}

/** An uninitialised tensor. (torch.empty; default dtype f32.) */
export function empty(shape: readonly number[], dtype: DType = "f32"): Tensor {
  const n = numelOf(shape);
  const b = backend();
  return new Tensor(
    [...shape],
    dtype,
    new Storage(allocBlock(n * DTYPE_SIZE[dtype])),
    b.device,
  );
}

/**
 * A CPU tensor over host memory that its owner allocated and keeps alive for the tensor's life
 * (a process group's shared region: DDP's gradient buckets in ProcessGroup.allocShared arrays).
 * Disposing it never frees or reuses the memory. No copy: writes through the tensor land there.
 */
export function tensorOverHostMemory(
  ptr: Deno.PointerObject,
  shape: readonly number[],
  dtype: DType = "f32",
): Tensor {
  if (backend().device !== "cpu") {
    throw new Error(`tensorOverHostMemory: the active device is ${backend().device}, not the CPU`);
  }
  const bytes = numelOf(shape) * DTYPE_SIZE[dtype];
  return new Tensor([...shape], dtype, new Storage(externalBlock(ptr, bytes)), "cpu");
}

/** A tensor of zeros. (torch.zeros; default dtype f32.) */
export function zeros(shape: readonly number[], dtype: DType = "f32"): Tensor {
  return empty(shape, dtype).fill(0);
}

/** A tensor filled with `value`. (torch.full; default dtype f32.) */
export function full(
  shape: readonly number[],
  value: number,
  dtype: DType = "f32",
): Tensor {
  return empty(shape, dtype).fill(value);
}

/**
 * A tensor with the contents of a typed array (copied). (torch.tensor; a number[] becomes f32, the
 * shape defaults to 1-D.)
 */
export function fromArray(
  data: Float32Array | Int32Array | BigInt64Array | Uint8Array | number[],
  shape?: readonly number[],
  dtype?: DType,
): Tensor {
  const arr = Array.isArray(data) ? Float32Array.from(data) : data;
  const dt: DType = dtype ??
    (arr instanceof Float32Array
      ? "f32"
      : arr instanceof Int32Array
      ? "i32"
      : arr instanceof BigInt64Array
      ? "i64"
      : "u8");
  const sh = shape ?? [arr.length];
  const t = empty(sh, dt);
  if (arr.byteLength !== t.bytes) {
    t.dispose();
    throw new RangeError(
      `fromArray: ${arr.length} elements of ${arr.constructor.name} do not fill shape [${sh}] of ${dt}`,
    );
  }
  return t.copyFromArray(arr);
}

/**
 * Converts a tensor's elements to another dtype (no autograd; see ops for the differentiable cast).
 * (PyTorch's `t.to(dtype)` outside autograd.)
 */
export function castTensor(t: Tensor, dtype: DType): Tensor {
  const out = empty(t.shape, dtype);
  const b = backend();
  b.call.dt_cast(out.ptr, DTYPE_CODE[dtype], t.ptr, DTYPE_CODE[t.dtype], BigInt(t.numel));
  return out;
}

/**
 * Runs fn with a new scope: every tensor created inside and not returned (or
 * kept with keep()) is disposed when fn returns or throws. Returned tensors
 * (directly, or inside an array or plain object) move to the enclosing scope.
 *
 * @example
 * ```ts
 * import { fromArray, mul, scope, sum } from "dtrain";
 * const x = fromArray([1, 2, 3]);
 * const total = scope(() => sum(mul(x, x))); // the product is freed here; the sum is returned
 * total.item(); // 14
 * total.dispose();
 * ```
 */
export function scope<T>(fn: () => T): T {
  const mine = new Set<Tensor>();
  scopes.push(mine);
  let result: T;
  try {
    result = fn();
  } catch (e) {
    scopes.pop();
    for (const t of mine) t.dispose();
    throw e;
  }
  scopes.pop();
  const prev = enter("bookkeeping");
  const survivors = new Set<Tensor>();
  collectTensors(result, survivors);
  for (const t of mine) if (!survivors.has(t)) t.dispose();
  const outer = scopes[scopes.length - 1];
  if (outer) { for (const t of survivors) if (mine.has(t)) outer.add(t); }
  leave(prev);
  return result;
}

function collectTensors(v: unknown, into: Set<Tensor>): void {
  if (v instanceof Tensor) into.add(v);
  else if (Array.isArray(v)) { for (const x of v) collectTensors(x, into); }
  else if (
    v !== null && typeof v === "object" &&
    Object.getPrototypeOf(v) === Object.prototype
  ) {
    for (const x of Object.values(v)) collectTensors(x, into);
  }
}
