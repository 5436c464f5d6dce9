/**
 * A tensor as checkpoint readers and writers see it (dtype name, shape, raw
 * little-endian C-contiguous bytes), the dtype table, and typed-array views
 * over such bytes: in place when aligned, copied otherwise.
 */

/** The safetensors dtype names this project reads and writes. */
export type StDType =
  | "BOOL"
  | "U8"
  | "I8"
  | "F8_E5M2"
  | "F8_E4M3"
  | "I16"
  | "U16"
  | "F16"
  | "BF16"
  | "I32"
  | "U32"
  | "F32"
  | "F64"
  | "I64"
  | "U64";

/** A host tensor: `data` holds exactly `dtypeSize(dtype) × product(shape)` bytes. */
export interface StTensor {
  /** Element type by its safetensors name. */
  dtype: StDType;
  /** Size of each dim. */
  shape: number[];
  /** Raw little-endian bytes, C-contiguous; often a view into a file's buffer. */
  data: Uint8Array;
}

/**
 * Element size in bytes, in the reference safetensors library's dtype order
 * (increasing alignment). Writers lay tensors out by descending position in
 * this order, then by name, which puts every tensor at an aligned offset.
 */
const DTYPE_SIZES: ReadonlyMap<string, number> = new Map([
  ["BOOL", 1],
  ["U8", 1],
  ["I8", 1],
  ["F8_E5M2", 1],
  ["F8_E4M3", 1],
  ["I16", 2],
  ["U16", 2],
  ["F16", 2],
  ["BF16", 2],
  ["I32", 4],
  ["U32", 4],
  ["F32", 4],
  ["F64", 8],
  ["I64", 8],
  ["U64", 8],
]);
const DTYPE_RANKS: ReadonlyMap<string, number> = new Map(
  [...DTYPE_SIZES.keys()].map((name, rank) => [name, rank]),
);

/** Every supported dtype name, in the reference library's order. */
export const ST_DTYPES: readonly StDType[] = [...DTYPE_SIZES.keys()] as StDType[];

/** True when `name` is a supported dtype (own names only, never "constructor" etc.). */
export function isStDType(name: unknown): name is StDType {
  return typeof name === "string" && DTYPE_SIZES.has(name);
}

/**
 * Bytes per element of `dtype`.
 * @example dtypeSize("BF16") // 2
 */
export function dtypeSize(dtype: StDType): number {
  const size = DTYPE_SIZES.get(dtype);
  if (size === undefined) {
    throw new TypeError(`Unknown dtype "${dtype}": expected one of ${ST_DTYPES.join(", ")}`);
  }
  return size;
}

/** Position of `dtype` in the reference library's order (larger = written first). */
export function dtypeRank(dtype: StDType): number {
  return DTYPE_RANKS.get(dtype) ?? -1;
}

/** True when `dim` is a valid dimension size: a non-negative safe integer. */
export function isDim(dim: unknown): dim is number {
  return typeof dim === "number" && Number.isSafeInteger(dim) && dim >= 0;
}

/**
 * Byte size of a tensor of `dtype` and `shape`, computed in BigInt so that a
 * hostile shape cannot overflow. Dimensions must already satisfy isDim().
 */
export function byteSizeOf(dtype: StDType, shape: readonly number[]): bigint {
  let n = BigInt(dtypeSize(dtype));
  for (const dim of shape) n *= BigInt(dim);
  return n;
}

/**
 * True when `value` looks like an StTensor whose byte count matches its
 * dtype and shape (duck-typed, so tensors from any reader qualify).
 */
export function isStTensor(value: unknown): value is StTensor {
  if (typeof value !== "object" || value === null) return false;
  const t = value as Partial<StTensor>;
  return isStDType(t.dtype) && Array.isArray(t.shape) && t.shape.every(isDim) &&
    t.data instanceof Uint8Array && BigInt(t.data.byteLength) === byteSizeOf(t.dtype, t.shape);
}

const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

type TypedArrayOf<T> = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): T;
  new (length: number): T;
  readonly BYTES_PER_ELEMENT: number;
};

function typedView<T>(
  t: StTensor,
  ctor: TypedArrayOf<T>,
  dtypes: readonly StDType[],
  what: string,
): T {
  if (!dtypes.includes(t.dtype)) {
    throw new TypeError(
      `Cannot view a tensor of dtype ${t.dtype} as ${what}: expected dtype ${dtypes.join(" or ")}`,
    );
  }
  if (!HOST_IS_LITTLE_ENDIAN) {
    throw new Error(`Cannot view tensor bytes as ${what}: this host is big-endian`);
  }
  const size = ctor.BYTES_PER_ELEMENT;
  if (t.data.byteLength % size !== 0) {
    throw new RangeError(
      `Cannot view ${t.data.byteLength} bytes as ${what}: not a multiple of ${size}`,
    );
  }
  const length = t.data.byteLength / size;
  if (t.data.byteOffset % size === 0) return new ctor(t.data.buffer, t.data.byteOffset, length);
  // Misaligned (e.g. a legacy torch file): copy into a fresh, aligned buffer.
  const copy = new Uint8Array(t.data.byteLength);
  copy.set(t.data);
  return new ctor(copy.buffer, 0, length);
}

/** The data of an F32 tensor as a Float32Array (a view when aligned, else a copy). */
export function asFloat32Array(t: StTensor): Float32Array {
  return typedView(t, Float32Array, ["F32"], "Float32Array");
}

/** The data of an F64 tensor as a Float64Array (a view when aligned, else a copy). */
export function asFloat64Array(t: StTensor): Float64Array {
  return typedView(t, Float64Array, ["F64"], "Float64Array");
}

/** The data of an I32 tensor as an Int32Array (a view when aligned, else a copy). */
export function asInt32Array(t: StTensor): Int32Array {
  return typedView(t, Int32Array, ["I32"], "Int32Array");
}

/** The data of an I64 tensor as a BigInt64Array (a view when aligned, else a copy). */
export function asBigInt64Array(t: StTensor): BigInt64Array {
  return typedView(t, BigInt64Array, ["I64"], "BigInt64Array");
}

/** The raw 16-bit patterns of an F16 or BF16 tensor (a view when aligned, else a copy). */
export function asUint16Array(t: StTensor): Uint16Array {
  return typedView(t, Uint16Array, ["F16", "BF16", "U16"], "Uint16Array");
}

/** The dtype a typed array holds, by its constructor (Uint16Array is taken as U16). */
const DTYPE_OF_ARRAY: ReadonlyMap<unknown, StDType> = new Map<unknown, StDType>([
  [Float32Array, "F32"],
  [Float64Array, "F64"],
  [Int32Array, "I32"],
  [Uint32Array, "U32"],
  [BigInt64Array, "I64"],
  [BigUint64Array, "U64"],
  [Int16Array, "I16"],
  [Uint16Array, "U16"],
  [Int8Array, "I8"],
  [Uint8Array, "U8"],
]);

/**
 * Wraps a typed array as an StTensor of `shape` without copying. The dtype
 * follows the array type unless `options.dtype` says otherwise (e.g. "BF16"
 * for a Uint16Array of bfloat16 bits, "BOOL" for a Uint8Array).
 * @example tensorFromArray(new Float32Array([1, 2, 3, 4]), [2, 2]) // F32 [2, 2]
 */
export function tensorFromArray(
  values: ArrayBufferView,
  shape: number[],
  options: { dtype?: StDType } = {},
): StTensor {
  const dtype = options.dtype ?? DTYPE_OF_ARRAY.get(values.constructor);
  if (dtype === undefined) {
    throw new TypeError(
      `Cannot tell the dtype of a ${values.constructor.name}: pass options.dtype`,
    );
  }
  const data = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  if (!shape.every((d) => isDim(d))) {
    throw new RangeError(
      `Cannot make a ${dtype} tensor of shape [${
        shape.join(",")
      }]: dimensions must be non-negative integers`,
    );
  }
  const want = byteSizeOf(dtype, shape);
  if (BigInt(data.byteLength) !== want) {
    throw new RangeError(
      `Cannot make a ${dtype} tensor of shape [${
        shape.join(",")
      }] from ${data.byteLength} bytes: expected ${want}`,
    );
  }
  return { dtype, shape, data };
}
