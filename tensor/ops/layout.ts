/**
 * Layout ops with autograd, each a copy into a new contiguous tensor through
 * one strided-copy kernel: permute and transpose of any dims, expand
 * (broadcast), constant pad (negative pads crop), narrow (a slice along any
 * dim), cat and stack. Views that copy nothing (flatten, unsqueeze, squeeze)
 * are reshapes. Inputs of any dtype; gradients are f32.
 */
import { backend } from "../backend.ts";
import { empty, full, numelOf, type Tensor, zeros } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { DTYPE_SIZE } from "../dtype.ts";
import { contiguousStrides, normDim } from "./_util.ts";
import { stridedCopy } from "./_strided.ts";
import { sumTo } from "./reduce.ts";
import { reshape } from "./shape.ts";

/** The raw permute of t into a new tensor (no autograd). */
function permuteCopy(t: Tensor, dims: readonly number[], dtype = t.dtype): Tensor {
  const shape = dims.map((d) => t.shape[d]!);
  const out = empty(shape, dtype);
  // Swapping two neighbouring dims is attention's head split: the tiled 0213 kernel.
  const swapAt = dims.findIndex((d, i) => d !== i);
  const isAdjacentSwap = swapAt >= 0 && dims[swapAt] === swapAt + 1 &&
    dims[swapAt + 1] === swapAt &&
    dims.every((d, i) => i === swapAt || i === swapAt + 1 || d === i);
  if (isAdjacentSwap) {
    const A = numelOf(t.shape.slice(0, swapAt)), D = numelOf(t.shape.slice(swapAt + 2));
    backend().call.dt_transpose_0213(
      out.ptr,
      t.ptr,
      BigInt(A),
      BigInt(t.shape[swapAt]!),
      BigInt(t.shape[swapAt + 1]!),
      BigInt(D),
      BigInt(DTYPE_SIZE[t.dtype]),
    );
  } else {
    const inStrides = contiguousStrides(t.shape);
    stridedCopy(out, 0, contiguousStrides(shape), t, 0, dims.map((d) => inStrides[d]!), shape);
  }
  return out;
}

/**
 * The tensor with its dims reordered: output dim i is input dim dims[i]
 * (torch.permute), as a contiguous copy.
 *
 * @example
 * ```ts
 * const nhwc = permute(nchw, [0, 2, 3, 1]);
 * ```
 */
export function permute(x: Tensor, dims: readonly number[]): Tensor {
  const nd = x.shape.length;
  const norm = dims.map((d) => normDim("permute", d, nd, x.shape));
  if (dims.length !== nd || new Set(norm).size !== nd) {
    throw new RangeError(
      `permute: [${dims}] is not a permutation of the ${nd} dims of [${x.shape}]`,
    );
  }
  if (norm.every((d, i) => d === i)) return x;
  const out = permuteCopy(x, norm);
  if (needsGrad(x)) {
    const inverse = new Array<number>(nd);
    norm.forEach((d, i) => (inverse[d] = i));
    record(out, "permute", [x], (g) => [permuteCopy(g, inverse)]);
  }
  return out;
}

/** The tensor with dims dim0 and dim1 swapped (torch.transpose), as a contiguous copy. */
export function transpose(x: Tensor, dim0: number, dim1: number): Tensor {
  const nd = x.shape.length;
  const a = normDim("transpose", dim0, nd, x.shape), b = normDim("transpose", dim1, nd, x.shape);
  const dims = [...Array(nd).keys()];
  [dims[a], dims[b]] = [b, a];
  return permute(x, dims);
}

/**
 * x repeated along its size-1 dims (and new leading dims) to `shape`, as
 * torch.Tensor.expand (-1 keeps a dim), copied. Its gradient sums back.
 */
export function expand(x: Tensor, shape: readonly number[]): Tensor {
  const off = shape.length - x.shape.length;
  const fail = () => {
    throw new RangeError(`expand: cannot expand [${x.shape}] to [${shape}]`);
  };
  if (off < 0) fail();
  const target = shape.map((s, i) => (s === -1 && i >= off ? x.shape[i - off]! : s));
  const inStrides = contiguousStrides(x.shape);
  const strides = target.map((s, i) => {
    if (!Number.isSafeInteger(s) || s < 0) fail();
    if (i < off) return 0;
    const xs = x.shape[i - off]!;
    if (xs === s) return inStrides[i - off]!;
    if (xs !== 1) fail();
    return 0;
  });
  if (off === 0 && target.every((s, i) => s === x.shape[i])) return x;
  const out = empty(target, x.dtype);
  stridedCopy(out, 0, contiguousStrides(target), x, 0, strides, target);
  if (needsGrad(x)) record(out, "expand", [x], (g) => [sumTo(g, x.shape)]);
  return out;
}

/** Options of pad(). */
export interface PadOptions {
  /** The fill value (default 0). */
  value?: number;
  /** Only "constant" (PyTorch's default) is supported. */
  mode?: "constant";
}

/**
 * Pads the last dims with a constant, as torch.nn.functional.pad: `pads` is
 * (left, right) of the last dim, then (top, bottom) of the one before, and so
 * on; a negative pad removes elements.
 *
 * @example
 * ```ts
 * const y = pad(x, [1, 1, 2, 2]); // (N, C, H, W) -> (N, C, H + 4, W + 2), zeros around
 * ```
 */
export function pad(x: Tensor, pads: readonly number[], opts: PadOptions = {}): Tensor {
  const mode = opts.mode ?? "constant";
  if (mode !== "constant") {
    throw new RangeError(`pad: mode "${mode}" is not supported (only "constant")`);
  }
  const nd = x.shape.length;
  if (pads.length % 2 !== 0 || pads.length / 2 > nd || !pads.every(Number.isSafeInteger)) {
    throw new RangeError(
      `pad: expected an even number of integer pads, at most 2 per dim of [${x.shape}], got [${pads}]`,
    );
  }
  const lo = new Array<number>(nd).fill(0), hi = new Array<number>(nd).fill(0);
  for (let k = 0; k < pads.length / 2; k++) {
    lo[nd - 1 - k] = pads[2 * k]!;
    hi[nd - 1 - k] = pads[2 * k + 1]!;
  }
  const outShape = x.shape.map((s, d) => s + lo[d]! + hi[d]!);
  if (outShape.some((s) => s < 0)) {
    throw new RangeError(
      `pad: padding [${pads}] of [${x.shape}] gives the negative size [${outShape}]`,
    );
  }
  // The part of x that survives: from max(0, -lo) for len elements, placed at max(0, lo).
  const inStart = lo.map((l) => Math.max(0, -l)), outStart = lo.map((l) => Math.max(0, l));
  const len = x.shape.map((s, d) => Math.max(0, s - inStart[d]! - Math.max(0, -hi[d]!)));
  const inStrides = contiguousStrides(x.shape), outStrides = contiguousStrides(outShape);
  const offsetOf = (start: number[], strides: number[]) =>
    start.reduce((a, s, d) => a + s * strides[d]!, 0);
  const out = full(outShape, opts.value ?? 0, x.dtype);
  stridedCopy(
    out,
    offsetOf(outStart, outStrides),
    outStrides,
    x,
    offsetOf(inStart, inStrides),
    inStrides,
    len,
  );
  if (needsGrad(x)) {
    record(out, "pad", [x], (g) => {
      const gx = zeros(x.shape, "f32");
      stridedCopy(
        gx,
        offsetOf(inStart, inStrides),
        inStrides,
        g,
        offsetOf(outStart, outStrides),
        outStrides,
        len,
      );
      return [gx];
    });
  }
  return out;
}

/** Elements [start, start + length) of dim `dim` (torch.narrow), copied. */
export function narrow(x: Tensor, dim: number, start: number, length: number): Tensor {
  const d = normDim("narrow", dim, x.shape.length, x.shape);
  const size = x.shape[d]!;
  if (
    !Number.isSafeInteger(start) || !Number.isSafeInteger(length) || start < 0 || length < 0 ||
    start + length > size
  ) {
    throw new RangeError(
      `narrow: [${start}, ${start + length}) is outside dim ${dim} of [${x.shape}] (size ${size})`,
    );
  }
  const shape = x.shape.map((s, i) => (i === d ? length : s));
  const inStrides = contiguousStrides(x.shape);
  const out = empty(shape, x.dtype);
  stridedCopy(out, 0, contiguousStrides(shape), x, start * inStrides[d]!, inStrides, shape);
  if (needsGrad(x)) {
    record(out, "narrow", [x], (g) => {
      const gx = zeros(x.shape, "f32");
      stridedCopy(gx, start * inStrides[d]!, inStrides, g, 0, contiguousStrides(shape), shape);
      return [gx];
    });
  }
  return out;
}

/**
 * The tensors joined along `dim` (torch.cat): equal shapes but for that dim,
 * one dtype.
 */
export function cat(xs: readonly Tensor[], dim = 0): Tensor {
  if (xs.length === 0) throw new RangeError("cat: expected at least one tensor");
  const first = xs[0]!;
  const nd = first.shape.length;
  const d = normDim("cat", dim, nd, first.shape);
  xs.forEach((t, i) => {
    const same = t.shape.length === nd && t.shape.every((s, j) => j === d || s === first.shape[j]);
    if (!same || t.dtype !== first.dtype) {
      throw new RangeError(
        `cat: tensor ${i} is [${t.shape}] ${t.dtype}, tensor 0 is [${first.shape}] ${first.dtype}: ` +
          `all must have one dtype and equal sizes except in dim ${d}`,
      );
    }
  });
  const shape = [...first.shape];
  shape[d] = xs.reduce((a, t) => a + t.shape[d]!, 0);
  const out = empty(shape, first.dtype);
  const outStrides = contiguousStrides(shape);
  const offsets: number[] = [];
  let at = 0;
  for (const t of xs) {
    offsets.push(at);
    stridedCopy(out, at * outStrides[d]!, outStrides, t, 0, contiguousStrides(t.shape), t.shape);
    at += t.shape[d]!;
  }
  if (needsGrad(...xs)) {
    record(out, "cat", [...xs], (g) =>
      xs.map((t, i) => {
        if (!t.requiresGrad) return null;
        const gt = empty(t.shape, "f32");
        stridedCopy(
          gt,
          0,
          contiguousStrides(t.shape),
          g,
          offsets[i]! * outStrides[d]!,
          outStrides,
          t.shape,
        );
        return gt;
      }));
  }
  return out;
}

/** The tensors (all one shape) stacked along a new dim `dim` (torch.stack). */
export function stack(xs: readonly Tensor[], dim = 0): Tensor {
  if (xs.length === 0) throw new RangeError("stack: expected at least one tensor");
  const nd = xs[0]!.shape.length;
  const d = normDim("stack", dim, nd + 1, xs[0]!.shape);
  xs.forEach((t, i) => {
    if (t.shape.length !== nd || t.shape.some((s, j) => s !== xs[0]!.shape[j])) {
      throw new RangeError(
        `stack: tensor ${i} is [${t.shape}], tensor 0 is [${xs[0]!.shape}]: expected equal shapes`,
      );
    }
  });
  return cat(xs.map((t) => unsqueeze(t, d)), d);
}

/** A view with a size-1 dim inserted at `dim` (torch.unsqueeze). */
export function unsqueeze(x: Tensor, dim: number): Tensor {
  const d = normDim("unsqueeze", dim, x.shape.length + 1, x.shape);
  return reshape(x, [...x.shape.slice(0, d), 1, ...x.shape.slice(d)]);
}

/** A view without size-1 dims: all of them, or only `dim` when it has size 1 (torch.squeeze). */
export function squeeze(x: Tensor, dim?: number): Tensor {
  if (dim === undefined) return reshape(x, x.shape.filter((s) => s !== 1));
  const d = normDim("squeeze", dim, Math.max(x.shape.length, 1), x.shape);
  if (x.shape[d] !== 1) return x;
  return reshape(x, x.shape.filter((_, i) => i !== d));
}

/** A view with dims startDim..endDim merged into one (torch.flatten). */
export function flatten(x: Tensor, startDim = 0, endDim = -1): Tensor {
  if (x.shape.length === 0) return reshape(x, [1]);
  const s = normDim("flatten", startDim, x.shape.length, x.shape);
  const e = normDim("flatten", endDim, x.shape.length, x.shape);
  if (s > e) throw new RangeError(`flatten: startDim ${startDim} comes after endDim ${endDim}`);
  return reshape(x, [
    ...x.shape.slice(0, s),
    numelOf(x.shape.slice(s, e + 1)),
    ...x.shape.slice(e + 1),
  ]);
}
