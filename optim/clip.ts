/**
 * Gradient clipping to a global L2 norm, as torch.nn.utils.clip_grad_norm_
 * (1.13): total = ||(||g_i||_2)_i||_2 in f32, coef = min(max / (total + 1e-6), 1),
 * every gradient multiplied by coef. Also the f64 gradient norm used for
 * logging and for comparing runs.
 */
import { backend } from "../tensor/backend.ts";
import type { Tensor } from "../tensor/tensor.ts";
import { allocBlock, releaseBlock } from "../tensor/allocator.ts";
import { plainArithmetic } from "../tensor/plain_arithmetic.ts";

const sumsqOut = new Float64Array(1);
const sumsqPtr = Deno.UnsafePointer.of(sumsqOut)!;

/** Sum of squares of a tensor's elements, accumulated in double. */
export function sumOfSquares(t: Tensor): number {
  const b = backend();
  if (b.device === "cpu") {
    b.call.dt_sumsq(sumsqPtr, t.ptr, BigInt(t.numel));
    return sumsqOut[0]!;
  }
  // Device memory from the caching allocator: a cudaFree per call would synchronise the device.
  const dev = allocBlock(8);
  try {
    b.call.dt_sumsq(dev.ptr, t.ptr, BigInt(t.numel));
    b.call.dt_memcpy(sumsqPtr, dev.ptr, 8n, 2);
    b.call.dt_synchronize();
  } finally {
    releaseBlock(dev);
  }
  return sumsqOut[0]!;
}

/** sqrt(sum over grads of sum(g^2)) in double (the fixtures' grad_norms). */
export function gradNorm(params: Tensor[]): number {
  let s = 0;
  for (const p of params) if (p.grad) s += sumOfSquares(p.grad);
  return Math.sqrt(s);
}

/**
 * Scales gradients so their global L2 norm is at most maxNorm; returns the
 * norm before clipping (f32, as torch returns it).
 */
export function clipGradNorm(params: Tensor[], maxNorm: number): number {
  const grads = params.map((p) => p.grad).filter((g): g is Tensor => g !== null);
  if (grads.length === 0) return 0;
  let totalSq = 0;
  for (const g of grads) {
    const n = Math.fround(Math.sqrt(sumOfSquares(g)));
    totalSq = Math.fround(totalSq + Math.fround(n * n));
  }
  const total = Math.fround(Math.sqrt(totalSq));
  if (plainArithmetic()) return total; // measured, not clipped (tensor/plain_arithmetic.ts)
  const coef = Math.min(Math.fround(maxNorm / Math.fround(total + 1e-6)), 1);
  const b = backend();
  for (const g of grads) {
    b.call.dt_scale(g.ptr, g.ptr, BigInt(g.numel), coef);
  }
  return total;
}
