/**
 * Elementwise comparisons giving u8 (boolean) masks, as torch.eq, ne, lt, le,
 * gt, ge against a tensor (broadcast as in PyTorch) or a number, and
 * torch.maximum / minimum built on them. One native kernel (dt_compare,
 * kernels/common/compare.h) on every backend. IEEE semantics: NaN is unequal
 * to everything. Operands are compared as f32: bf16/f16 exactly, integer
 * tensors (i32, i64, u8: argmax results, class targets) exactly below 2^24.
 */
import { backend } from "../backend.ts";
import { castTensor, empty, type Tensor } from "../tensor.ts";
import { asF32 } from "./_util.ts";
import { broadcastShapes } from "./elementwise.ts";
import { expand } from "./layout.ts";
import { where } from "./select.ts";

const CMP = { eq: 0, ne: 1, lt: 2, le: 3, gt: 4, ge: 5, pickMax: 6, pickMin: 7 } as const;

/** x as f32 (a differentiable cast for floats, a plain one for integers). */
function asComparable(x: Tensor): Tensor {
  return x.dtype === "f32" || x.dtype === "bf16" || x.dtype === "f16"
    ? asF32(x)
    : castTensor(x, "f32");
}

function compare(op: keyof typeof CMP, a0: Tensor, b0: Tensor | number): Tensor {
  const a = asComparable(a0);
  const k = backend();
  if (typeof b0 === "number") {
    const out = empty(a.shape, "u8");
    k.call.dt_compare(CMP[op], out.ptr, a.ptr, null, BigInt(a.numel), b0);
    return out;
  }
  const b = asComparable(b0);
  const shape = broadcastShapes(op, a.shape, b.shape);
  const A = expand(a, shape), B = expand(b, shape);
  const out = empty(shape, "u8");
  k.call.dt_compare(CMP[op], out.ptr, A.ptr, B.ptr, BigInt(out.numel), 0);
  return out;
}

/**
 * a == b elementwise as a u8 mask (torch.eq); b a tensor (broadcast) or a number.
 *
 * @example
 * ```ts
 * const correct = sum(eq(argmax(logits, 1), targets)).item(); // accuracy count
 * ```
 */
export function eq(a: Tensor, b: Tensor | number): Tensor {
  return compare("eq", a, b);
}
/** a != b elementwise as a u8 mask (torch.ne); true where either is NaN. */
export function ne(a: Tensor, b: Tensor | number): Tensor {
  return compare("ne", a, b);
}
/** a < b elementwise as a u8 mask (torch.lt). */
export function lt(a: Tensor, b: Tensor | number): Tensor {
  return compare("lt", a, b);
}
/** a <= b elementwise as a u8 mask (torch.le). */
export function le(a: Tensor, b: Tensor | number): Tensor {
  return compare("le", a, b);
}
/** a > b elementwise as a u8 mask (torch.gt). */
export function gt(a: Tensor, b: Tensor | number): Tensor {
  return compare("gt", a, b);
}
/** a >= b elementwise as a u8 mask (torch.ge). */
export function ge(a: Tensor, b: Tensor | number): Tensor {
  return compare("ge", a, b);
}

/**
 * The larger of a and b elementwise (torch.maximum; NaN if either is NaN).
 * The gradient goes to the operand picked; on ties to b (torch splits it).
 */
export function maximum(a: Tensor, b: Tensor): Tensor {
  return where(compare("pickMax", a, b), a, b);
}

/** The smaller of a and b elementwise (torch.minimum; NaN if either is NaN). */
export function minimum(a: Tensor, b: Tensor): Tensor {
  return where(compare("pickMin", a, b), a, b);
}
