/**
 * Batch normalisation with autograd, as torch.nn.functional.batch_norm, in
 * the steps a synchronised batch norm all-reduces between: per-channel sums
 * (and the element count), squared deviations from the mean, statistics and
 * running averages, the affine output; backward, the two per-channel sums and
 * the input gradient. Given an `allReduce`, the sums (f64) are combined
 * across ranks, which is SyncBatchNorm; the weight and bias gradients stay
 * local, as PyTorch's, for DDP to average.
 */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32, requireFloat } from "./_util.ts";
import { elementPtr } from "./_strided.ts";

/** f64 values in native memory that an all-reduce sums in place. */
export interface StatsBuffer {
  /** Address of the first value. */
  ptr: Deno.PointerObject;
  /** number of f64 values */
  count: number;
}

/** Options of batchNorm (PyTorch's names and defaults). */
export interface BatchNormOptions {
  /** Per-channel scale γ (null or absent: 1). */
  weight?: Tensor | null;
  /** Per-channel shift β (null or absent: 0). */
  bias?: Tensor | null;
  /** Batch statistics (and running-average updates) when true; the running statistics when false. Default false. */
  training?: boolean;
  /** Weight of the new batch in the running averages; null: the cumulative average over numBatchesTracked. Default 0.1. */
  momentum?: number | null;
  /** Added to the variance before the square root (default 1e-5). */
  eps?: number;
  /** The i64 counter of batches seen (BatchNorm's num_batches_tracked): incremented by a training step. */
  numBatchesTracked?: Tensor | null;
  /** Sums the f64 statistics across ranks in place (synchronised batch norm); absent: this process alone. */
  allReduce?: ((buf: StatsBuffer) => void) | null;
}

/** Scratch of n f64 values: an i64 tensor's 8-byte elements (tensors have no f64 dtype). */
function f64Scratch(n: number): Tensor {
  return empty([n], "i64");
}

const stats = (t: Tensor, count: number): StatsBuffer => ({ ptr: t.ptr, count });

/** The checked inputs of a batch norm and the statistics its output uses. */
interface BnForward {
  x: Tensor;
  weight: Tensor | null;
  bias: Tensor | null;
  /** N, C and the elements per (n, c) as the kernels take them */
  dims: [bigint, bigint, bigint];
  C: number;
  mean: Tensor;
  rstd: Tensor;
  /** the batch's sums and element count (training), for the backward; null: fixed statistics */
  acc: Tensor | null;
  allReduce: ((buf: StatsBuffer) => void) | null;
}

/** Checks the arguments as torch does and computes (training: and all-reduces) the statistics. */
function bnForward(
  op: string,
  x0: Tensor,
  runningMean: Tensor | null,
  runningVar: Tensor | null,
  opts: BatchNormOptions,
): BnForward {
  requireFloat(op, x0);
  if (x0.shape.length < 2) {
    throw new RangeError(
      `${op}: expected an input (N, C, ...) of at least 2 dims, got [${x0.shape}]`,
    );
  }
  const [N, C] = x0.shape as [number, number];
  const HW = x0.shape.slice(2).reduce((a, b) => a * b, 1);
  const training = opts.training ?? false;
  const eps = opts.eps ?? 1e-5;
  const momentum = opts.momentum === undefined ? 0.1 : opts.momentum;
  if (!(eps >= 0)) throw new RangeError(`${op}: eps must be >= 0, got ${eps}`);
  if (momentum !== null && !(momentum >= 0 && momentum <= 1)) {
    throw new RangeError(
      `${op}: momentum must be in [0, 1] or null (cumulative average), got ${momentum}`,
    );
  }
  for (
    const [name, t, dtype] of [
      ["runningMean", runningMean, "f32"],
      ["runningVar", runningVar, "f32"],
      ["weight", opts.weight, null],
      ["bias", opts.bias, null],
    ] as const
  ) {
    if (t && (t.numel !== C || (dtype && t.dtype !== dtype))) {
      throw new RangeError(
        `${op}: ${name} [${t.shape}] ${t.dtype} does not match the ${C} channels of the input [${x0.shape}]`,
      );
    }
  }
  if ((runningMean === null) !== (runningVar === null)) {
    throw new RangeError(`${op}: give both runningMean and runningVar, or neither`);
  }
  if (!training && !runningMean) {
    throw new RangeError(
      `${op}: evaluation (training: false) needs runningMean and runningVar`,
    );
  }
  const nbt = opts.numBatchesTracked ?? null;
  if (nbt && (nbt.dtype !== "i64" || nbt.numel !== 1)) {
    throw new RangeError(
      `${op}: numBatchesTracked must be one i64 element, got [${nbt.shape}] ${nbt.dtype}`,
    );
  }
  const allReduce = opts.allReduce ?? null;
  if (training && !allReduce && N * HW <= 1) {
    throw new RangeError(
      `${op}: expected more than 1 value per channel when training, got input of shape [${x0.shape}]`,
    );
  }
  const x = asF32(x0);
  const weight = opts.weight ? asF32(opts.weight) : null,
    bias = opts.bias ? asF32(opts.bias) : null;
  const k = backend();
  const [n, c, hw] = [BigInt(N), BigInt(C), BigInt(HW)];
  const mean = empty([C], "f32"), rstd = empty([C], "f32");
  let acc: Tensor | null = null;
  if (training) {
    acc = f64Scratch(C + 1);
    k.call.dt_bn_sum(acc.ptr, x.ptr, n, c, hw);
    allReduce?.(stats(acc, C + 1));
    const sq = f64Scratch(C);
    k.call.dt_bn_sqdev(sq.ptr, x.ptr, acc.ptr, n, c, hw);
    allReduce?.(stats(sq, C));
    k.call.dt_bn_finalize(
      mean.ptr,
      rstd.ptr,
      runningMean?.ptr ?? null,
      runningVar?.ptr ?? null,
      runningMean ? nbt?.ptr ?? null : null,
      acc.ptr,
      sq.ptr,
      c,
      eps,
      momentum ?? -1,
    );
    sq.dispose();
  } else {
    k.call.dt_bn_eval_stats(mean.ptr, rstd.ptr, runningMean!.ptr, runningVar!.ptr, c, eps);
  }
  return { x, weight, bias, dims: [n, c, hw], C, mean, rstd, acc, allReduce };
}

/** The input's (and weight's, bias's) gradients of a batch norm from its output's, g. */
function bnBackward(f: BnForward, g: Tensor): (Tensor | null)[] {
  const k = backend();
  const { x, weight, bias, mean, rstd, acc, C } = f;
  const [n, c, hw] = f.dims;
  const sums = f64Scratch(2 * C);
  const gw = weight?.requiresGrad ? empty([C], "f32") : null;
  const gb = bias?.requiresGrad ? empty([C], "f32") : null;
  k.call.dt_bn_bwd_reduce(
    sums.ptr,
    gw?.ptr ?? null,
    gb?.ptr ?? null,
    g.ptr,
    x.ptr,
    mean.ptr,
    rstd.ptr,
    n,
    c,
    hw,
  );
  let gx: Tensor | null = null;
  if (x.requiresGrad) {
    gx = empty(x.shape, "f32");
    if (acc) f.allReduce?.(stats(sums, 2 * C));
    k.call.dt_bn_bwd_apply(
      gx.ptr,
      g.ptr,
      x.ptr,
      mean.ptr,
      rstd.ptr,
      weight?.ptr ?? null,
      acc ? sums.ptr : null,
      acc ? elementPtr(acc, C) : null,
      n,
      c,
      hw,
    );
  }
  sums.dispose();
  const res: (Tensor | null)[] = [gx];
  if (weight) res.push(gw);
  if (bias) res.push(gb);
  return res;
}

/**
 * Normalises x (N, C, ...) per channel C: (x - mean) / sqrt(var + eps) *
 * weight + bias, with the batch's statistics in training (updating the
 * running ones) or the running ones otherwise.
 *
 * @example
 * ```ts
 * const y = batchNorm(x, runningMean, runningVar, { weight, bias, training: true });
 * ```
 */
export function batchNorm(
  x0: Tensor,
  runningMean: Tensor | null,
  runningVar: Tensor | null,
  opts: BatchNormOptions = {},
): Tensor {
  const f = bnForward("batchNorm", x0, runningMean, runningVar, opts);
  const { x, weight, bias } = f;
  const out = empty(x.shape, "f32");
  backend().call.dt_bn_apply(
    out.ptr,
    x.ptr,
    f.mean.ptr,
    f.rstd.ptr,
    weight?.ptr ?? null,
    bias?.ptr ?? null,
    ...f.dims,
  );
  const inputs = [x, weight, bias].filter((t): t is Tensor => t !== null);
  if (needsGrad(...inputs)) record(out, "batchNorm", inputs, (g) => bnBackward(f, g));
  else f.acc?.dispose();
  return out;
}

/**
 * relu(batchNorm(x)) followed by 2x2 max pooling at stride 2 — the block of a
 * small CNN — in one pass over x, with the bits of the three ops in turn
 * (outputs, gradients, running statistics): x (N, C, H, W) with H, W >= 2,
 * output (N, C, H/2, W/2) (floor). The intermediate tensors are never made:
 * the backward takes ReLU's mask from the pooled output (an element's
 * gradient passes where its window's maximum is > 0), then batch norm's.
 *
 * @example
 * ```ts
 * const y = batchNormReluMaxPool2d(x, runningMean, runningVar, { weight, bias, training: true });
 * ```
 */
export function batchNormReluMaxPool2d(
  x0: Tensor,
  runningMean: Tensor | null,
  runningVar: Tensor | null,
  opts: BatchNormOptions = {},
): Tensor {
  const op = "batchNormReluMaxPool2d";
  if (x0.shape.length !== 4 || x0.shape[2]! < 2 || x0.shape[3]! < 2) {
    throw new RangeError(`${op}: expected an input (N, C, H, W) with H, W >= 2, got [${x0.shape}]`);
  }
  const f = bnForward(op, x0, runningMean, runningVar, opts);
  const { x, weight, bias } = f;
  const [N, C, H, W] = x.shape as [number, number, number, number];
  const [OH, OW] = [Math.floor(H / 2), Math.floor(W / 2)];
  const out = empty([N, C, OH, OW], "f32"), idx = empty([N, C, OH, OW], "i32");
  const k = backend();
  k.call.dt_bn_relu_maxpool2x2_fwd(
    out.ptr,
    idx.ptr,
    x.ptr,
    f.mean.ptr,
    f.rstd.ptr,
    weight?.ptr ?? null,
    bias?.ptr ?? null,
    BigInt(N),
    BigInt(C),
    BigInt(H),
    BigInt(W),
  );
  const inputs = [x, weight, bias].filter((t): t is Tensor => t !== null);
  if (!needsGrad(...inputs)) {
    idx.dispose();
    f.acc?.dispose();
    return out;
  }
  record(out, op, inputs, (g) => {
    // ReLU's gradient at the pooled outputs (each is its window's ReLU output), then max
    // pooling's: the gradient of batch norm's output, as the three ops would give it
    const gm = empty(out.shape, "f32"), gy = empty(x.shape, "f32");
    k.call.dt_relu_bwd(gm.ptr, g.ptr, out.ptr, BigInt(out.numel));
    const geom = BigInt64Array.from([N * C, H, W, 2, 2, 2, 2, 0, 0, 1, 1, OH, OW], BigInt);
    k.call.dt_maxpool2d_bwd(gy.ptr, gm.ptr, idx.ptr, geom);
    gm.dispose();
    const grads = bnBackward(f, gy);
    gy.dispose();
    return grads;
  });
  return out;
}
