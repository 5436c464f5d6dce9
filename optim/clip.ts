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
import {
  noteNumericsOverride,
  type NumericsPolicy,
  numericsPolicy,
} from "../tensor/numerics_policy.ts";
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
 * norm before clipping (f32, as torch returns it). Under a numerics policy
 * with clipping off (`opts.numerics`, else the process's policy:
 * tensor/numerics_policy.ts) the norm is measured, not clipped, and the log
 * says so once.
 */
export function clipGradNorm(
  params: Tensor[],
  maxNorm: number,
  opts: { numerics?: NumericsPolicy } = {},
): number {
  const prev = enter("optimizer");
  try {
    if (!(maxNorm >= 0)) throw new RangeError(`clipGradNorm: maxNorm must be >= 0, got ${maxNorm}`);
    const policy = opts.numerics ?? numericsPolicy();
    if (!policy.clipping) {
      noteNumericsOverride(
        "clipping",
        `clipping is off: clipGradNorm(maxNorm ${maxNorm}) measures the norm and does not clip`,
        policy,
      );
    }
    return clipInPlace(params, policy.clipping ? maxNorm : Infinity);
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
  const max = maxNorm; // +inf: the norm only
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

/**
 * Sums of squares across ranks: `sumsq` holds one double per parameter
 * (zero where this rank has no share of it); the callback sums it over the
 * ranks in place. Each entry is nonzero on one rank only, so the sum is exact.
 */
export type ShardSumReducer = (sumsq: Float64Array) => void;

/**
 * The per-parameter sums of squares of the shard's gradients, summed over
 * ranks by `reduce`: every parameter's entry as if one rank held every
 * gradient (0 for a parameter without one). One read on a GPU.
 */
function shardedSumsq(
  params: Tensor[],
  inShard: (p: Tensor) => boolean,
  reduce: ShardSumReducer,
): Float64Array {
  const all = new Float64Array(params.length);
  const mine: number[] = [];
  const grads: Tensor[] = [];
  params.forEach((p, i) => {
    if (p.grad !== null && inShard(p)) {
      mine.push(i);
      grads.push(p.grad);
    }
  });
  if (grads.length > 0) {
    const { ptrs, counts } = gradTable(grads);
    const own = new Float64Array(grads.length);
    readResult(own, "shardedGradNorm", (p) =>
      backend().call.dt_sumsq_many(
        p,
        Deno.UnsafePointer.of(ptrs),
        Deno.UnsafePointer.of(counts),
        BigInt(grads.length),
      ));
    mine.forEach((i, k) => all[i] = own[k]!);
  }
  reduce(all);
  return all;
}

/** kernels/common/clip.h's dt_clip_total_f, in the same roundings. */
function clipTotalOf(sumsq: Float64Array): number {
  let totalSq = 0;
  for (const v of sumsq) {
    const n = Math.fround(Math.sqrt(v));
    totalSq = Math.fround(totalSq + Math.fround(n * n));
  }
  return Math.fround(Math.sqrt(totalSq));
}

/** kernels/common/clip.h's dt_clip_coef_f. */
function clipCoefOf(maxNorm: number, total: number): number {
  const coef = Math.fround(maxNorm / Math.fround(total + 1e-6));
  return coef < 1 ? coef : 1;
}

/**
 * clipGradNorm when each rank holds the gradients of its share of the
 * parameters (a sharded optimizer, distributed/zero.ts): the global norm
 * from every rank's per-parameter sums, then the shard's gradients scaled.
 * The same bits as clipGradNorm over every gradient on one rank: the sums
 * are the same per-tensor sums, combined in parameter order by clip.h's
 * arithmetic, and a parameter absent everywhere adds an exact zero.
 */
export function clipGradNormSharded(
  params: Tensor[],
  inShard: (p: Tensor) => boolean,
  maxNorm: number,
  reduce: ShardSumReducer,
  opts: { numerics?: NumericsPolicy } = {},
): number {
  if (!(maxNorm >= 0)) throw new RangeError(`clipGradNorm: maxNorm must be >= 0, got ${maxNorm}`);
  const prev = enter("optimizer");
  try {
    const total = clipTotalOf(shardedSumsq(params, inShard, reduce));
    const policy = opts.numerics ?? numericsPolicy();
    if (!policy.clipping) {
      noteNumericsOverride(
        "clipping",
        `clipping is off: clipGradNorm(maxNorm ${maxNorm}) measures the norm and does not clip`,
        policy,
      );
      return total; // the norm only
    }
    const coef = clipCoefOf(maxNorm, total);
    const b = backend();
    for (const p of params) {
      const g = p.grad;
      if (g === null || !inShard(p)) continue;
      b.call.dt_scale(g.ptr, g.ptr, BigInt(g.numel), coef);
      g.markModified();
    }
    return total;
  } finally {
    leave(prev);
  }
}

/** gradNorm (f64, for logging) over a sharded optimizer's gradients: the same bits as gradNorm. */
export function gradNormSharded(
  params: Tensor[],
  inShard: (p: Tensor) => boolean,
  reduce: ShardSumReducer,
): number {
  return section("optimizer", () => {
    let s = 0;
    for (const v of shardedSumsq(params, inShard, reduce)) s += v;
    return Math.sqrt(s);
  });
}
