/**
 * Selection ops with autograd: where and maskedFill (masks are u8 tensors,
 * broadcast as in PyTorch), gather and indexSelect along any dim (indices
 * i32, or i64 converted and range-checked), whose gradients add repeated
 * picks in index order.
 */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { DTYPE_SIZE } from "../dtype.ts";
import { asF32, dimView, normDim, requireFloat } from "./_util.ts";
import { broadcastShapes } from "./elementwise.ts";
import { expand } from "./layout.ts";
import { asIndices } from "./nn.ts";

function requireMask(op: string, m: Tensor): void {
  if (m.dtype !== "u8") {
    throw new TypeError(
      `${op}: the condition must be a u8 (boolean) tensor, got ${m.dtype} of shape [${m.shape}]`,
    );
  }
}

/**
 * Elementwise choice (torch.where): a where cond is nonzero, else b. cond is
 * u8; a and b are tensors or numbers; all three broadcast together.
 *
 * @example
 * ```ts
 * const y = where(mask, x, 0); // x where mask, 0 elsewhere
 * ```
 */
export function where(cond: Tensor, a: Tensor | number, b: Tensor | number): Tensor {
  requireMask("where", cond);
  let shape = [...cond.shape];
  for (const t of [a, b]) {
    if (typeof t !== "number") {
      requireFloat("where", t);
      shape = broadcastShapes("where", shape, t.shape);
    }
  }
  const c = expand(cond, shape);
  const A = typeof a === "number" ? null : expand(asF32(a), shape);
  const B = typeof b === "number" ? null : expand(asF32(b), shape);
  const out = empty(shape, "f32");
  const k = backend();
  const n = BigInt(out.numel);
  k.call.dt_where(
    out.ptr,
    c.ptr,
    A?.ptr ?? null,
    B?.ptr ?? null,
    n,
    typeof a === "number" ? a : 0,
    typeof b === "number" ? b : 0,
  );
  // A and B may be one tensor (where(c, x, x)): each position gets its own gradient.
  const picks = ([[A, true], [B, false]] as const).filter(([t]) => t !== null) as [
    Tensor,
    boolean,
  ][];
  const inputs = picks.map(([t]) => t);
  if (needsGrad(...inputs)) {
    record(out, "where", inputs, (g) =>
      picks.map(([t, isA]) => {
        if (!t.requiresGrad) return null;
        const gt = empty(shape, "f32");
        if (isA) k.call.dt_where(gt.ptr, c.ptr, g.ptr, null, n, 0, 0);
        else k.call.dt_where(gt.ptr, c.ptr, null, g.ptr, n, 0, 0);
        return gt;
      }));
  }
  return out;
}

/** x with `value` wherever mask (u8, broadcast to x's shape) is nonzero (torch.Tensor.masked_fill). */
export function maskedFill(x: Tensor, mask: Tensor, value: number): Tensor {
  requireMask("maskedFill", mask);
  requireFloat("maskedFill", x);
  const shape = broadcastShapes("maskedFill", x.shape, mask.shape);
  if (shape.length !== x.shape.length || shape.some((s, i) => s !== x.shape[i])) {
    throw new RangeError(
      `maskedFill: the mask [${mask.shape}] does not broadcast to the input's shape [${x.shape}]`,
    );
  }
  return where(mask, value, x);
}

/** Checks an index tensor's dims against x for gather. */
function gatherShape(x: Tensor, d: number, index: Tensor): void {
  const ok = index.shape.length === x.shape.length &&
    index.shape.every((s, i) => i === d || s === x.shape[i]);
  if (!ok) {
    throw new RangeError(
      `gather: index [${index.shape}] must have the dims of the input [${x.shape}], equal in every dim but ${d}`,
    );
  }
}

/**
 * out[..., j, ...] = x[..., index[..., j, ...], ...] along `dim`
 * (torch.gather); index has x's sizes except along dim.
 *
 * @example
 * ```ts
 * const picked = gather(logProbs, 1, unsqueeze(targets, 1)); // (N, 1)
 * ```
 */
export function gather(x: Tensor, dim: number, index: Tensor): Tensor {
  const d = normDim("gather", dim, x.shape.length, x.shape);
  gatherShape(x, d, index);
  const idx = asIndices(index);
  const { outer, D, inner } = dimView(x.shape, d);
  const J = index.shape[d]!;
  const out = empty(index.shape, x.dtype);
  const k = backend();
  k.call.dt_gather_dim(
    out.ptr,
    x.ptr,
    idx.ptr,
    BigInt(outer),
    BigInt(D),
    BigInt(J),
    BigInt(inner),
    BigInt(DTYPE_SIZE[x.dtype]),
  );
  if (needsGrad(x)) {
    record(out, "gather", [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_scatter_add_dim(
        gx.ptr,
        g.ptr,
        idx.ptr,
        BigInt(outer),
        BigInt(D),
        BigInt(J),
        BigInt(inner),
      );
      return [gx];
    });
  }
  return out;
}

/** The slices of x along `dim` that a 1-D index names, in its order (torch.index_select). */
export function indexSelect(x: Tensor, dim: number, index: Tensor): Tensor {
  const d = normDim("indexSelect", dim, x.shape.length, x.shape);
  if (index.shape.length > 1) {
    throw new RangeError(`indexSelect: index must be 1-D, got [${index.shape}]`);
  }
  const idx = asIndices(index);
  const { outer, D, inner } = dimView(x.shape, d);
  const J = idx.numel;
  const out = empty(x.shape.map((s, i) => (i === d ? J : s)), x.dtype);
  const k = backend();
  k.call.dt_index_select(
    out.ptr,
    x.ptr,
    idx.ptr,
    BigInt(outer),
    BigInt(D),
    BigInt(J),
    BigInt(inner),
    BigInt(DTYPE_SIZE[x.dtype]),
  );
  if (needsGrad(x)) {
    record(out, "indexSelect", [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_index_add(
        gx.ptr,
        g.ptr,
        idx.ptr,
        BigInt(outer),
        BigInt(D),
        BigInt(J),
        BigInt(inner),
      );
      return [gx];
    });
  }
  return out;
}
