/**
 * Shape ops with autograd: reshape/view (no copy), and slices and splits of
 * the last dim (the q, k, v split of attention). Permutes, pads, cat and
 * slices of any dim are in layout.ts.
 */
import { backend } from "../backend.ts";
import { empty, numelOf, type Tensor, zeros } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { DTYPE_SIZE } from "../dtype.ts";

/** Same elements, another shape (one dim may be -1). Shares memory. (torch.reshape.) */
export function reshape(x: Tensor, shape: readonly number[]): Tensor {
  const s = [...shape];
  const free = s.indexOf(-1);
  if (free >= 0) {
    const rest = numelOf(s.filter((_, i) => i !== free));
    if (rest === 0 || x.numel % rest !== 0) {
      throw new RangeError(
        `Cannot reshape tensor of shape [${x.shape}] to [${shape}]: ${x.numel} is not divisible by ${rest}`,
      );
    }
    s[free] = x.numel / rest;
  }
  const out = x.view(s);
  if (needsGrad(x)) record(out, "reshape", [x], (g) => [g.view(x.shape)]);
  return out;
}

/** Columns [start, start+len) of the last dim. */
export function sliceLast(x: Tensor, start: number, len: number): Tensor {
  const cols = x.shape[x.shape.length - 1]!;
  if (start < 0 || len < 0 || start + len > cols) {
    throw new RangeError(
      `sliceLast: columns [${start}, ${start + len}) are outside the last dim of [${x.shape}]`,
    );
  }
  const rows = x.numel / cols;
  const out = empty([...x.shape.slice(0, -1), len], x.dtype);
  const k = backend();
  const es = BigInt(DTYPE_SIZE[x.dtype]);
  k.call.dt_slice_cols(out.ptr, x.ptr, BigInt(rows), BigInt(cols), BigInt(start), BigInt(len), es);
  if (needsGrad(x)) {
    record(out, "slice", [x], (g) => {
      const gx = zeros(x.shape, "f32");
      k.call.dt_scatter_cols(
        gx.ptr,
        g.ptr,
        BigInt(rows),
        BigInt(cols),
        BigInt(start),
        BigInt(len),
        4n,
      );
      return [gx];
    });
  }
  return out;
}

/** torch.split(x, size, dim=-1): equal chunks of the last dim. */
export function splitLast(x: Tensor, size: number): Tensor[] {
  const cols = x.shape[x.shape.length - 1]!;
  if (size <= 0 || cols % size !== 0) {
    throw new RangeError(
      `splitLast: last dim ${cols} of [${x.shape}] is not a multiple of ${size}`,
    );
  }
  const parts: Tensor[] = [];
  for (let s = 0; s < cols; s += size) parts.push(sliceLast(x, s, size));
  return parts;
}
