/**
 * The one strided-copy call behind the layout ops (permute, expand, pad,
 * narrow, cat): a box of elements copied between two strided layouts by
 * dt_strided_copy, with element offsets into either tensor. No autograd here.
 */
import { backend } from "../backend.ts";
import type { Tensor } from "../tensor.ts";
import { DTYPE_SIZE } from "../dtype.ts";

/** A pointer `elements` elements past the start of t. */
export function elementPtr(t: Tensor, elements: number): Deno.PointerObject {
  if (elements === 0) return t.ptr;
  return Deno.UnsafePointer.offset(t.ptr, elements * DTYPE_SIZE[t.dtype]) as Deno.PointerObject;
}

/**
 * For every index tuple i < sizes: out[outOffset + sum i*outStrides] =
 * inp[inpOffset + sum i*inpStrides] (element units; inp and out share a dtype).
 */
export function stridedCopy(
  out: Tensor,
  outOffset: number,
  outStrides: readonly number[],
  inp: Tensor,
  inpOffset: number,
  inpStrides: readonly number[],
  sizes: readonly number[],
): void {
  if (sizes.some((s) => s === 0)) return;
  backend().call.dt_strided_copy(
    elementPtr(out, outOffset),
    elementPtr(inp, inpOffset),
    sizes.length,
    BigInt64Array.from(sizes, BigInt),
    BigInt64Array.from(outStrides, BigInt),
    BigInt64Array.from(inpStrides, BigInt),
    BigInt(DTYPE_SIZE[inp.dtype]),
  );
}
