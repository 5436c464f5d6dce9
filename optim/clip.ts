/**
 * Gradient clipping to a global L2 norm, as torch.nn.utils.clip_grad_norm_
 * (1.13): total = ||(||g_i||_2)_i||_2 in f32, coef = min(max / (total + 1e-6), 1),
 * every gradient multiplied by coef. Also the f64 gradient norm used for
 * logging and for comparing runs. Every gradient goes through one native
 * call (dt_clip_grad_norm, dt_sumsq_many): one reduction, and on a GPU one
 * wait for the device, to read the norm back.
 */
import { backend } from "../tensor/backend.ts";
import type { Tensor } from "../tensor/tensor.ts";
import { allocBlock, releaseBlock } from "../tensor/allocator.ts";
import { noteHostSync } from "../tensor/host_sync.ts";
import { plainArithmetic } from "../tensor/plain_arithmetic.ts";
import { enter, leave, section } from "../profile/profile.ts";
import { address, count, HostTable } from "./tensor_table.ts";

/** The gradients' addresses and element counts, as the native calls take them (host arrays). */
function gradTable(grads: Tensor[]): { ptrs: BigUint64Array; counts: BigInt64Array } {
  const ptrs = new BigUint64Array(grads.length);
  const counts = new BigInt64Array(grads.length);
  grads.forEach((g, i) => {
    if (g.dtype !== "f32") {
      throw new TypeError(`clipping: gradient ${i} is ${g.dtype}; gradients must be f32`);
    }
    ptrs[i] = BigInt(Deno.UnsafePointer.value(g.ptr));
    counts[i] = BigInt(g.numel);
  });
  return { ptrs, counts };
}

/**
 * Runs `fill(ptr)`, which writes `bytes` bytes of results at ptr (device
 * memory on a GPU), and copies them into `out`: on a GPU the one wait of the
 * call (counted as `what`).
 */
function readResult(
  out: Float64Array | Float32Array,
  what: string,
  fill: (ptr: Deno.PointerValue) => void,
): void {
  const b = backend();
  if (b.device === "cpu") {
    fill(Deno.UnsafePointer.of(out));
    return;
  }
  // Device memory from the caching allocator: a cudaFree per call would synchronise the device.
  const dev = allocBlock(out.byteLength);
  try {
    fill(dev.ptr);
    b.call.dt_memcpy(Deno.UnsafePointer.of(out), dev.ptr, BigInt(out.byteLength), 2);
    noteHostSync(what);
  } finally {
    releaseBlock(dev);
  }
}

/** Sum of squares of a tensor's elements, accumulated in double. */
export function sumOfSquares(t: Tensor): number {
  const out = new Float64Array(1);
  readResult(out, "sumOfSquares", (p) => backend().call.dt_sumsq(p, t.ptr, BigInt(t.numel)));
  return out[0]!;
}

/**
 * sqrt(sum over grads of sum(g^2)) in double (the fixtures' grad_norms), in one reduction. (The
 * total norm torch.nn.utils.clip_grad_norm_ returns, without clipping.)
 */
export function gradNorm(params: Tensor[]): number {
  return section("optimizer", () => gradNormOf(params));
}

function gradNormOf(params: Tensor[]): number {
  const grads = params.map((p) => p.grad).filter((g): g is Tensor => g !== null);
  if (grads.length === 0) return 0;
  const { ptrs, counts } = gradTable(grads);
  const sumsq = new Float64Array(grads.length);
  readResult(sumsq, "gradNorm", (p) =>
    backend().call.dt_sumsq_many(
      p,
      Deno.UnsafePointer.of(ptrs),
      Deno.UnsafePointer.of(counts),
      BigInt(grads.length),
    ));
  let s = 0;
  for (const v of sumsq) s += v; // in parameter order, as the per-tensor loop did
  return Math.sqrt(s);
}

/**
 * Scales gradients so their global L2 norm is at most maxNorm; returns the
 * norm before clipping (f32, as torch returns it). Under plain arithmetic
 * (tensor/plain_arithmetic.ts) the norm is measured, not clipped.
 */
export function clipGradNorm(params: Tensor[], maxNorm: number): number {
  const prev = enter("optimizer");
  try {
    return clipInPlace(params, maxNorm);
  } finally {
    leave(prev);
  }
}

/** clipGradNorm's host table (the gradients' addresses and sizes), refilled every call. */
const clipTable = new HostTable(1, 0, 0);
/** clipGradNorm's result on the CPU: [total, padding], and its address. */
const clipTotal = new Float32Array(2);
const clipTotalAt = Deno.UnsafePointer.of(clipTotal);

function clipInPlace(params: Tensor[], maxNorm: number): number {
  if (!(maxNorm >= 0)) throw new RangeError(`clipGradNorm: maxNorm must be >= 0, got ${maxNorm}`);
  // The table is filled straight from the parameters (no intermediate lists: a step calls this once).
  let n = 0;
  for (const p of params) if (p.grad !== null) n++;
  if (n === 0) return 0;
  const T = clipTable.reserve(n);
  const ptrs = T.ptrs[0]!;
  let i = 0;
  for (const p of params) {
    const g = p.grad;
    if (g === null) continue;
    if (g.dtype !== "f32") {
      throw new TypeError(`clipping: gradient ${i} is ${g.dtype}; gradients must be f32`);
    }
    ptrs[i] = address(g);
    T.counts[i++] = count(g);
  }
  const max = plainArithmetic() ? Infinity : maxNorm; // +inf: the norm only
  const b = backend();
  const sumsq = allocBlock(8 * n);
  try {
    if (b.device === "cpu") {
      b.call.dt_clip_grad_norm(clipTotalAt, sumsq.ptr, T.at.ptrs[0]!, T.at.counts, BigInt(n), max);
      return clipTotal[0]!;
    }
    const total = new Float32Array(2); // [total, padding]: 8 bytes, one allocator block
    readResult(
      total,
      "clipGradNorm",
      (p) => b.call.dt_clip_grad_norm(p, sumsq.ptr, T.at.ptrs[0]!, T.at.counts, BigInt(n), max),
    );
    return total[0]!;
  } finally {
    releaseBlock(sumsq);
  }
}
