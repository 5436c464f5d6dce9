/** Reductions with autograd: sum and mean of all elements (f32 result, f64 accumulation). */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32 } from "./_util.ts";

/** Sum of all elements, as a 0-dim tensor. */
export function sum(x0: Tensor): Tensor {
  const x = asF32(x0);
  const out = empty([], "f32");
  const k = backend();
  k.call.dt_reduce_bcast(out.ptr, x.ptr, BigInt(x.numel), 1n, 1n);
  if (needsGrad(x)) {
    record(out, "sum", [x], (g) => [broadcastScalar(g, x.shape, 1)]);
  }
  return out;
}

/** Mean of all elements, as a 0-dim tensor. */
export function mean(x0: Tensor): Tensor {
  const x = asF32(x0);
  const out = empty([], "f32");
  const k = backend();
  k.call.dt_reduce_bcast(out.ptr, x.ptr, BigInt(x.numel), 1n, 1n);
  k.call.dt_scale(out.ptr, out.ptr, 1n, 1 / x.numel);
  if (needsGrad(x)) {
    record(out, "mean", [x], (g) => [broadcastScalar(g, x.shape, 1 / x.numel)]);
  }
  return out;
}

/** A tensor of `shape` whose every element is alpha * g (g has one element). */
function broadcastScalar(
  g: Tensor,
  shape: readonly number[],
  alpha: number,
): Tensor {
  const out = empty(shape, "f32");
  const k = backend();
  const n = BigInt(out.numel);
  // out = 0 * anything + g broadcast: fill with 0 then add g as a 1-element operand.
  k.call.dt_fill(out.ptr, 0, n, 0);
  k.call.dt_binary(0, out.ptr, out.ptr, g.ptr, n, 1n, 1n);
  if (alpha !== 1) {
    k.call.dt_scale(out.ptr, out.ptr, n, alpha);
  }
  return out;
}

/** Index of the first maximum along the last dim (i32, no gradient). */
export function argmax(x0: Tensor): Tensor {
  const x = asF32(x0);
  const cols = x.shape[x.shape.length - 1]!;
  const rows = x.numel / cols;
  const out = empty(x.shape.slice(0, -1), "i32");
  const k = backend();
  k.call.dt_argmax_rows(out.ptr, x.ptr, BigInt(rows), BigInt(cols));
  return out;
}
