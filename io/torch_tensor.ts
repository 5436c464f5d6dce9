/**
 * Turns torch storages plus (storage_offset, size, stride) into contiguous
 * StTensors. Contiguous tensors stay views of the storage bytes (so tied
 * tensors share them); strided ones are copied, within a byte budget so that
 * a hostile stride of 0 cannot make a small file allocate gigabytes.
 */
import { quoted } from "./_untrusted_text.ts";
import { byteSizeOf, dtypeSize, type StDType, type StTensor } from "./st_tensor.ts";

/** One storage of a checkpoint; `data` is filled once its bytes are located. */
export class TorchStorage {
  data: Uint8Array | undefined = undefined;
  constructor(
    readonly key: string,
    readonly dtype: StDType,
    readonly numel: number,
  ) {}
}

/** A tensor loaded from a torch checkpoint; `data` is contiguous. */
export class TorchTensor implements StTensor {
  data: Uint8Array = new Uint8Array(0);
  constructor(
    readonly dtype: StDType,
    readonly shape: number[],
    /** requires_grad as saved (true for a saved nn.Parameter). */
    public requiresGrad: boolean,
    /** Key of the storage it was cut from; tied tensors share it. */
    readonly storageKey: string,
  ) {}
}

interface Pending {
  tensor: TorchTensor;
  storage: TorchStorage;
  offset: number;
  stride: number[];
  contiguous: boolean;
}

/**
 * Collects tensors while a pickle is read and fills in their bytes when all
 * storages are available (the legacy format stores them after the pickle).
 */
export class TensorAssembler {
  #pending: Pending[] = [];
  #budget: number;

  constructor(readonly source: string, maxMaterializedBytes: number) {
    this.#budget = maxMaterializedBytes;
  }

  fail(problem: string): never {
    throw new Error(`Invalid torch checkpoint ${this.source}: ${problem}`);
  }

  /** Validates a tensor's view of `storage` and registers it; bytes come in finish(). */
  add(
    storage: TorchStorage,
    offset: number,
    size: number[],
    stride: number[],
    requiresGrad: boolean,
  ): TorchTensor {
    const label = `tensor of size [${size.join(",")}], stride [${
      stride.join(",")
    }], offset ${offset}`;
    if (size.length !== stride.length) this.fail(`${label}: size and stride differ in length`);
    let count = 1n;
    let lastIndex = BigInt(offset);
    for (let d = 0; d < size.length; d++) {
      count *= BigInt(size[d]!);
      lastIndex += BigInt(size[d]! - 1) * BigInt(stride[d]!);
    }
    if (count > 0n && lastIndex >= BigInt(storage.numel)) {
      this.fail(
        `${label} reads element ${lastIndex} of storage ${
          quoted(storage.key)
        }, which has ${storage.numel}`,
      );
    }
    if (count === 0n && offset > storage.numel) {
      this.fail(
        `${label} starts past the end of storage ${
          quoted(storage.key)
        } (${storage.numel} elements)`,
      );
    }
    const contiguous = isContiguous(size, stride);
    if (!contiguous) {
      const bytes = byteSizeOf(storage.dtype, size);
      if (bytes > BigInt(this.#budget)) {
        this.fail(
          `${label} would materialise ${bytes} bytes, over the remaining budget of ${this.#budget} ` +
            `(raise maxMaterializedBytes if this checkpoint really holds expanded tensors)`,
        );
      }
      this.#budget -= Number(bytes);
    }
    const tensor = new TorchTensor(storage.dtype, size, requiresGrad, storage.key);
    this.#pending.push({ tensor, storage, offset, stride, contiguous });
    return tensor;
  }

  /** Fills every registered tensor from its storage's bytes. */
  finish(): void {
    for (const { tensor, storage, offset, stride, contiguous } of this.#pending) {
      const data = storage.data;
      if (data === undefined) {
        this.fail(`storage ${quoted(storage.key)} is used by a tensor but its data is missing`);
      }
      const size = dtypeSize(storage.dtype);
      const numel = tensor.shape.reduce((a, b) => a * b, 1);
      tensor.data = contiguous
        ? data.subarray(offset * size, (offset + numel) * size)
        : gather(data, size, offset, tensor.shape, stride, numel);
    }
    this.#pending = [];
  }
}

/** torch's rule: strides are row-major, ignoring dimensions of size 1 (and any tensor with 0 elements). */
function isContiguous(size: number[], stride: number[]): boolean {
  if (size.includes(0)) return true;
  let expected = 1;
  for (let d = size.length - 1; d >= 0; d--) {
    if (size[d] === 1) continue;
    if (stride[d] !== expected) return false;
    expected *= size[d]!;
  }
  return true;
}

/** Copies a strided view into a new C-contiguous buffer (checkpoint loading, not a hot path). */
function gather(
  src: Uint8Array,
  elementSize: number,
  offset: number,
  size: number[],
  stride: number[],
  numel: number,
): Uint8Array {
  const out = new Uint8Array(numel * elementSize);
  if (numel === 0) return out;
  const rank = size.length;
  const index = new Array<number>(rank).fill(0);
  let from = offset;
  for (let i = 0; i < numel; i++) {
    const a = from * elementSize;
    const o = i * elementSize;
    for (let b = 0; b < elementSize; b++) out[o + b] = src[a + b]!;
    // Advance the multi-index like an odometer, last dimension fastest.
    for (let d = rank - 1; d >= 0; d--) {
      const next = index[d]! + 1;
      from += stride[d]!;
      if (next < size[d]!) {
        index[d] = next;
        break;
      }
      from -= stride[d]! * size[d]!;
      index[d] = 0;
    }
  }
  return out;
}
