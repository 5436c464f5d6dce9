/**
 * Reductions with autograd, over all elements or along dimensions with
 * PyTorch's keepdim: sum and mean (double accumulation, f32 result), max and
 * min (values and the first index of each extreme; a NaN wins), argmax and
 * argmin, and sumTo, which folds a broadcast gradient back to its shape.
 * Indices are i32 tensors (dtrain's index dtype; PyTorch returns int64).
 */
import { backend } from "../backend.ts";
import { castTensor, empty, full, type Tensor, zeros } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32, contiguousStrides, dimView, normDim } from "./_util.ts";
import { stridedCopy } from "./_strided.ts";

/** Options of the reductions along dimensions. */
export interface ReduceOptions {
  /** Keep each reduced dimension with size 1 (PyTorch's keepdim). Default false. */
  keepdim?: boolean;
}

const RED = { sum: 0, mean: 1, max: 2, min: 3 } as const;
const OP_DIV = 3; // dt_binary's DT_OP_DIV

/** The dims to reduce, normalised and sorted (all of them when dim is undefined). */
function reducedDims(op: string, x: Tensor, dim: number | readonly number[] | undefined): number[] {
  const nd = x.shape.length;
  if (dim === undefined) return [...Array(nd).keys()];
  const list = typeof dim === "number" ? [dim] : [...dim];
  const dims = list.map((d) => normDim(op, d, nd, x.shape)).sort((a, b) => a - b);
  for (let i = 1; i < dims.length; i++) {
    if (dims[i] === dims[i - 1]) {
      throw new RangeError(`${op}: dim ${dims[i]} appears more than once in [${list}]`);
    }
  }
  return dims;
}

/** The shape after reducing `dims` (kept as 1s with keepdim). */
function reducedShape(
  shape: readonly number[],
  dims: readonly number[],
  keepdim: boolean,
): number[] {
  const out: number[] = [];
  shape.forEach((s, i) => {
    if (!dims.includes(i)) out.push(s);
    else if (keepdim) out.push(1);
  });
  return out;
}

/**
 * Sums (or averages) x over `dims` with dt_reduce_dim: consecutive dims are
 * one (outer, D, inner) reduction, so a contiguous block is summed in one
 * pass; several blocks reduce from the last one back.
 */
function sumDims(
  x: Tensor,
  dims: readonly number[],
  mean: boolean,
): { out: Tensor; count: number } {
  const k = backend();
  let shape = [...x.shape];
  let cur = x;
  let count = 1;
  const groups: [number, number][] = []; // [first, last] runs of consecutive dims
  for (const d of dims) {
    const g = groups[groups.length - 1];
    if (g && g[1] === d - 1) g[1] = d;
    else groups.push([d, d]);
  }
  for (const g of groups) for (let d = g[0]; d <= g[1]; d++) count *= x.shape[d]!;
  for (let gi = groups.length - 1; gi >= 0; gi--) {
    const [first, last] = groups[gi]!;
    let outer = 1, D = 1, inner = 1;
    for (let i = 0; i < first; i++) outer *= shape[i]!;
    for (let i = first; i <= last; i++) D *= shape[i]!;
    for (let i = last + 1; i < shape.length; i++) inner *= shape[i]!;
    shape = [...shape.slice(0, first), 1, ...shape.slice(last + 1)];
    const out = empty(shape, "f32");
    const op = mean && groups.length === 1 ? RED.mean : RED.sum;
    k.call.dt_reduce_dim(op, out.ptr, null, cur.ptr, BigInt(outer), BigInt(D), BigInt(inner));
    if (cur !== x) cur.dispose();
    cur = out;
  }
  if (mean && groups.length > 1) divideInPlace(cur, count);
  return { out: cur, count };
}

/** t /= d elementwise, one IEEE division each (as torch divides a sum by its count). */
function divideInPlace(t: Tensor, d: number): void {
  const divisor = full([1], d);
  backend().call.dt_binary(OP_DIV, t.ptr, t.ptr, divisor.ptr, BigInt(t.numel), 1n, 1n);
  divisor.dispose();
}

/** g (x's shape with `dims` kept as 1s) repeated along those dims to x's shape, divided by `divisor`. */
function expandBack(
  g: Tensor,
  shape: readonly number[],
  dims: readonly number[],
  divisor: number,
): Tensor {
  const kept = shape.map((s, i) => (dims.includes(i) ? 1 : s));
  const strides = contiguousStrides(kept).map((s, i) => (dims.includes(i) ? 0 : s));
  const out = empty(shape, "f32");
  stridedCopy(out, 0, contiguousStrides(shape), g, 0, strides, shape);
  if (divisor !== 1) divideInPlace(out, divisor);
  return out;
}

function sumOrMean(
  op: "sum" | "mean",
  x0: Tensor,
  dim: number | readonly number[] | undefined,
  opts: ReduceOptions,
) {
  // a mask or integer tensor sums as a count (torch sums bools and ints; exact in f32 below 2^24)
  const integer = x0.dtype === "u8" || x0.dtype === "i32" || x0.dtype === "i64";
  if (integer && op === "mean") {
    throw new TypeError(
      `mean: expected a floating-point tensor, got ${x0.dtype} (cast it first, as torch requires)`,
    );
  }
  const x = integer ? castTensor(x0, "f32") : asF32(x0);
  const dims = reducedDims(op, x, dim);
  const keepdim = opts.keepdim ?? false;
  const outShape = reducedShape(x.shape, dims, keepdim);
  let out: Tensor, count: number;
  if (dims.length === 0) {
    // nothing to reduce: a copy (torch's sum over an empty dim list of a 0-dim tensor)
    out = empty(x.shape, "f32").copyFrom(x);
    count = 1;
  } else {
    const r = sumDims(x, dims, op === "mean");
    out = r.out.view(outShape);
    r.out.dispose();
    count = r.count;
  }
  if (needsGrad(x)) {
    record(out, op, [x], (g) => [expandBack(g, x.shape, dims, op === "mean" ? count : 1)]);
  }
  return out;
}

/**
 * Sum of the elements: of all of them (a 0-dim tensor), or along `dim` (a
 * dim or a list of dims), as torch.sum(x, dim, keepdim). A u8 mask or an
 * integer tensor gives its sum as an f32 count (exact below 2^24).
 */
export function sum(x: Tensor, dim?: number | readonly number[], opts: ReduceOptions = {}): Tensor {
  return sumOrMean("sum", x, dim, opts);
}

/** Mean of the elements, over all of them or along `dim`, as torch.mean. */
export function mean(
  x: Tensor,
  dim?: number | readonly number[],
  opts: ReduceOptions = {},
): Tensor {
  return sumOrMean("mean", x, dim, opts);
}

/** Values and (i32) indices of a max or min along a dim. */
export interface ValuesIndices {
  /** The largest (or smallest) values. */
  values: Tensor;
  /** Their indices along the reduced dim (i32). */
  indices: Tensor;
}

function extreme(
  op: "max" | "min",
  x0: Tensor,
  dim: number | undefined,
  opts: ReduceOptions,
): ValuesIndices {
  const x = asF32(x0);
  const flat = dim === undefined;
  const d = flat ? 0 : normDim(op, dim, Math.max(x.shape.length, 1), x.shape);
  const { outer, D, inner } = flat || x.shape.length === 0
    ? { outer: 1, D: x.numel, inner: 1 }
    : dimView(x.shape, d);
  if (D === 0) {
    throw new RangeError(
      `${op}: the reduced dimension of [${x.shape}] is empty; a ${op} of nothing has no value`,
    );
  }
  const outShape = flat || x.shape.length === 0
    ? []
    : reducedShape(x.shape, [d], opts.keepdim ?? false);
  const values = empty(outShape, "f32"), indices = empty(outShape, "i32");
  backend().call.dt_reduce_dim(
    RED[op],
    values.ptr,
    indices.ptr,
    x.ptr,
    BigInt(outer),
    BigInt(D),
    BigInt(inner),
  );
  if (needsGrad(x)) {
    record(values, op, [x], (g) => {
      const gx = empty(x.shape, "f32");
      backend().call.dt_scatter_add_dim(
        gx.ptr,
        g.ptr,
        indices.ptr,
        BigInt(outer),
        BigInt(D),
        1n,
        BigInt(inner),
      );
      return [gx];
    });
  }
  return { values, indices };
}

/**
 * The largest element (a 0-dim tensor), or with `dim` the largest values
 * along it and the index of each (the first one among equals; a NaN is the
 * largest), as torch.max. The gradient goes to that index (torch spreads a
 * full reduction's gradient evenly over ties).
 */
export function max(x: Tensor): Tensor;
/**
 * The largest values along `dim` and the index of each (torch.max(x, dim)); `keepdim` keeps the
 * reduced dim as size 1.
 */
export function max(x: Tensor, dim: number, opts?: ReduceOptions): ValuesIndices;
export function max(x: Tensor, dim?: number, opts: ReduceOptions = {}): Tensor | ValuesIndices {
  const r = extreme("max", x, dim, opts);
  if (dim !== undefined) return r;
  if (!r.values.node) r.indices.dispose(); // else the backward reads them
  return r.values;
}

/** The smallest element, or the smallest values along `dim` with their indices, as torch.min. */
export function min(x: Tensor): Tensor;
/**
 * The smallest values along `dim` and the index of each (torch.min(x, dim)); `keepdim` keeps the
 * reduced dim as size 1.
 */
export function min(x: Tensor, dim: number, opts?: ReduceOptions): ValuesIndices;
export function min(x: Tensor, dim?: number, opts: ReduceOptions = {}): Tensor | ValuesIndices {
  const r = extreme("min", x, dim, opts);
  if (dim !== undefined) return r;
  if (!r.values.node) r.indices.dispose(); // else the backward reads them
  return r.values;
}

function argExtreme(
  op: "argmax" | "argmin",
  x0: Tensor,
  dim: number | undefined,
  opts: ReduceOptions,
): Tensor {
  const x = asF32(x0);
  const flat = dim === undefined || x.shape.length === 0;
  const d = flat ? 0 : normDim(op, dim, x.shape.length, x.shape);
  const { outer, D, inner } = flat ? { outer: 1, D: x.numel, inner: 1 } : dimView(x.shape, d);
  if (D === 0) throw new RangeError(`${op}: the reduced dimension of [${x.shape}] is empty`);
  const outShape = flat ? [] : reducedShape(x.shape, [d], opts.keepdim ?? false);
  const indices = empty(outShape, "i32");
  backend().call.dt_reduce_dim(
    op === "argmax" ? RED.max : RED.min,
    null,
    indices.ptr,
    x.ptr,
    BigInt(outer),
    BigInt(D),
    BigInt(inner),
  );
  return indices;
}

/**
 * Index (i32) of the first maximum: of the flattened tensor (a 0-dim tensor)
 * or along `dim`, as torch.argmax. No gradient.
 *
 * @example
 * ```ts
 * const predicted = argmax(logits, 1); // (N,) class indices of (N, classes) logits
 * ```
 */
export function argmax(x: Tensor, dim?: number, opts: ReduceOptions = {}): Tensor {
  return argExtreme("argmax", x, dim, opts);
}

/** Index (i32) of the first minimum, as torch.argmin. */
export function argmin(x: Tensor, dim?: number, opts: ReduceOptions = {}): Tensor {
  return argExtreme("argmin", x, dim, opts);
}

/**
 * g summed down to `shape` (right-aligned; dims where shape has 1 or nothing
 * are summed): the gradient of an operand that was broadcast to g's shape.
 */
export function sumTo(g: Tensor, shape: readonly number[]): Tensor {
  const off = g.shape.length - shape.length;
  if (off < 0) {
    throw new RangeError(`sumTo: cannot sum [${g.shape}] to the longer shape [${shape}]`);
  }
  const dims: number[] = [];
  g.shape.forEach((s, i) => {
    const t = i < off ? 1 : shape[i - off]!;
    if (t === 1 && s !== 1) dims.push(i);
    else if (t !== s) throw new RangeError(`sumTo: [${shape}] does not broadcast to [${g.shape}]`);
  });
  if (dims.length === 0) return g.numel === 0 ? zeros(shape) : g.view(shape);
  const { out } = sumDims(asF32(g), dims, false);
  const r = out.view(shape);
  out.dispose();
  return r;
}
