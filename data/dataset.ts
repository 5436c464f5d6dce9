/**
 * Datasets: a length and a batched fetch that turns a list of indices into
 * batch tensors. Fetching whole batches (not single samples) keeps element
 * copies in native code. TensorDataset holds its columns in native host
 * memory and gathers rows with one kernel call per column, which can also
 * run on a background thread (the DataLoader's prefetch).
 */
import { cpuCalls, gatherRowsInBackground } from "../ffi/cpu.ts";
import { backend } from "../tensor/backend.ts";
import { type DType, DTYPE_SIZE } from "../tensor/dtype.ts";
import { empty, type Tensor } from "../tensor/tensor.ts";

/** A map-style dataset fetched a batch at a time. */
export interface Dataset {
  /** Number of samples. */
  readonly length: number;
  /** The samples at `indices`, stacked along a new first dim (one tensor per field). */
  getBatch(indices: Int32Array): Tensor[];
  /** The same, prepared off the JS thread when the dataset can (optional). */
  getBatchAsync?(indices: Int32Array): Promise<Tensor[]>;
  /**
   * Whether getBatchAsync does any work off the JS thread for batches of up
   * to `batchSize` samples (optional; absent: assume it does). When it does
   * not, the DataLoader calls getBatch as each batch is needed instead of
   * preparing batches ahead on the same thread, which only adds promises.
   */
  fetchesInBackground?(batchSize: number): boolean;
}

/** One column of a TensorDataset: per-sample shape and host data for every sample. */
export interface Column {
  /** Every sample's values, sample after sample (length = samples × product of sampleShape). */
  data: Float32Array | Int32Array;
  /** shape of one sample (e.g. [128] for features, [] for a label) */
  sampleShape: number[];
  /**
   * The dataset may keep `data` itself instead of a copy (the caller gives
   * the array up and must not change it); saves a copy of a large dataset.
   */
  owned?: boolean;
}

/** Batches smaller than this are gathered on the calling thread. */
const BACKGROUND_MIN_BYTES = 1 << 20;

/**
 * Columns of equal length held in native host memory, gathered row by row in C.
 * (torch.utils.data.TensorDataset.)
 */
export class TensorDataset implements Dataset {
  readonly length: number;
  readonly #columns: {
    host: Uint8Array;
    ptr: Deno.PointerObject;
    rowBytes: number;
    /** rowBytes as the kernel takes it */
    rowBytesBig: bigint;
    shape: number[];
    dtype: DType;
  }[];

  /**
   * A dataset of the given columns (torch.utils.data.TensorDataset); throws when there are none or
   * their sample counts differ.
   */
  constructor(...columns: Column[]) {
    if (columns.length === 0) {
      throw new RangeError("TensorDataset needs at least one column");
    }
    const lengths = columns.map((c) =>
      c.data.length / Math.max(1, c.sampleShape.reduce((a, b) => a * b, 1))
    );
    this.length = lengths[0]!;
    if (lengths.some((l) => l !== this.length || !Number.isInteger(l))) {
      throw new RangeError(
        `TensorDataset: columns hold different numbers of samples: ${lengths.join(", ")}`,
      );
    }
    this.#columns = columns.map((c) => {
      const dtype: DType = c.data instanceof Float32Array ? "f32" : "i32";
      // A private copy, so the caller may reuse its array (unless it gave it up); its address is stable.
      const bytes = new Uint8Array(c.data.buffer, c.data.byteOffset, c.data.byteLength);
      const host = c.owned ? bytes : new Uint8Array(c.data.byteLength);
      if (!c.owned) host.set(bytes);
      const per = c.sampleShape.reduce((a, b) => a * b, 1);
      return {
        host,
        ptr: Deno.UnsafePointer.of(host)!,
        rowBytes: per * DTYPE_SIZE[dtype],
        rowBytesBig: BigInt(per * DTYPE_SIZE[dtype]),
        shape: c.sampleShape,
        dtype,
      };
    });
  }

  getBatch(indices: Int32Array): Tensor[] {
    this.#checkIndices(indices);
    const idxPtr = Deno.UnsafePointer.of(indices);
    const gather = cpuCalls().dt_gather_rows;
    const onCpu = backend().device === "cpu";
    const n = BigInt(indices.length);
    const out: Tensor[] = [];
    for (const c of this.#columns) {
      const t = empty(
        c.shape.length === 0 ? [indices.length] : [indices.length, ...c.shape],
        c.dtype,
      );
      if (onCpu) {
        gather(t.ptr, c.ptr, idxPtr, n, c.rowBytesBig);
      } else {
        const staging = new Uint8Array(indices.length * c.rowBytes);
        gather(Deno.UnsafePointer.of(staging), c.ptr, idxPtr, n, c.rowBytesBig);
        t.copyFromArray(staging);
      }
      out.push(t);
    }
    return out;
  }

  fetchesInBackground(batchSize: number): boolean {
    // A hop to the FFI thread pool costs ~60 µs: only worth it for batches that take longer to copy.
    const bytes = this.#columns.reduce((a, c) => a + c.rowBytes, 0) * batchSize;
    return backend().device === "cpu" && bytes >= BACKGROUND_MIN_BYTES;
  }

  async getBatchAsync(indices: Int32Array): Promise<Tensor[]> {
    if (!this.fetchesInBackground(indices.length)) return this.getBatch(indices);
    this.#checkIndices(indices);
    const idx = indices.slice(); // owned by the background call until it resolves
    const idxPtr = Deno.UnsafePointer.of(idx);
    const outs = this.#columns.map((c) => empty([indices.length, ...c.shape], c.dtype).keep());
    try {
      await Promise.all(
        this.#columns.map((c, i) =>
          gatherRowsInBackground(
            outs[i]!.ptr,
            c.ptr,
            idxPtr,
            BigInt(idx.length),
            BigInt(c.rowBytes),
          )
        ),
      );
    } catch (e) {
      for (const o of outs) o.dispose();
      throw e;
    }
    void idx; // keep the index array alive until here
    return outs;
  }

  #checkIndices(indices: Int32Array): void {
    // The kernel cannot see the dataset length: every index is checked here.
    if (indices.length > 0) {
      let lo = indices[0]!, hi = lo;
      for (let k = 1; k < indices.length; k++) {
        const i = indices[k]!;
        if (i < lo) lo = i;
        else if (i > hi) hi = i;
      }
      if (lo < 0 || hi >= this.length) {
        throw new RangeError(
          `TensorDataset: index ${lo < 0 ? lo : hi} is outside [0, ${this.length})`,
        );
      }
    }
  }
}

/**
 * The samples of `dataset` at `indices`, as a dataset of its own
 * (torch.utils.data.Subset): sample i is dataset[indices[i]].
 *
 * @example
 * ```ts
 * const small = new Subset(train, Int32Array.from({ length: 2048 }, (_, i) => i)); // the first 2048
 * ```
 */
export class Subset implements Dataset {
  readonly length: number;
  readonly #indices: Int32Array;

  /** The samples of `dataset` at `indices`; throws naming an index out of range. */
  constructor(readonly dataset: Dataset, indices: Int32Array | readonly number[]) {
    this.#indices = Int32Array.from(indices);
    this.length = this.#indices.length;
    for (const i of this.#indices) {
      if (i < 0 || i >= dataset.length) {
        throw new RangeError(`Subset: index ${i} is outside the dataset's [0, ${dataset.length})`);
      }
    }
  }

  getBatch(indices: Int32Array): Tensor[] {
    return this.dataset.getBatch(this.#map(indices));
  }

  getBatchAsync(indices: Int32Array): Promise<Tensor[]> {
    const mapped = this.#map(indices);
    return this.dataset.getBatchAsync?.(mapped) ?? Promise.resolve(this.dataset.getBatch(mapped));
  }

  fetchesInBackground(batchSize: number): boolean {
    const d = this.dataset;
    return d.getBatchAsync !== undefined && (d.fetchesInBackground?.(batchSize) ?? true);
  }

  #map(indices: Int32Array): Int32Array {
    return indices.map((i) => {
      if (i < 0 || i >= this.length) {
        throw new RangeError(`Subset: index ${i} is outside [0, ${this.length})`);
      }
      return this.#indices[i]!;
    });
  }
}
