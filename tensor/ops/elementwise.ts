/**
 * Elementwise ops with autograd: add/sub/mul/div with PyTorch's broadcasting,
 * scale, relu, gelu (tanh approximation), dropout (seeded) and cast.
 * add/sub/mul/div and gelu take bf16/f16 operands as they are (no cast before
 * and after: the mixed-dtype kernels widen, compute in f32 and round once)
 * and give torch's result dtype: the operands' when they share a low
 * precision, else f32; the other ops compute in f32.
 */
import { backend } from "../backend.ts";
import { castTensor, empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32, requireFloat } from "./_util.ts";
import { type DType, DTYPE_CODE } from "../dtype.ts";
import { expand } from "./layout.ts";

const OP = { add: 0, sub: 1, mul: 2, div: 3 } as const;

/**
 * How `b` broadcasts into `a` (whose shape is the output's), as the (bn, inner)
 * pair of dt_binary: b's shape, right-aligned to a's, may have size-1 (or
 * missing) dims only as a leading block and a trailing block.
 */
export function broadcastPlan(
  op: string,
  a: readonly number[],
  b: readonly number[],
): { bn: number; inner: number } {
  const plan = bcastPlanOrNull(a, b);
  if (!plan) {
    throw new RangeError(
      `${op}: cannot broadcast shape [${b}] to [${a}] (supported: equal shapes, a trailing suffix such as a bias, or size-1 dims only at the ends)`,
    );
  }
  return plan;
}

function bcastPlanOrNull(
  a: readonly number[],
  b: readonly number[],
): { bn: number; inner: number } | null {
  if (b.length > a.length) return null;
  const off = a.length - b.length;
  const bd = (i: number) => (i < off ? 1 : b[i - off]!);
  // trailing dims where b is 1 (and a is not required to be)
  let hi = a.length;
  while (hi > 0 && bd(hi - 1) === 1 && a[hi - 1] !== 1) hi--;
  let lo = 0;
  while (lo < hi && bd(lo) === 1 && a[lo] !== 1) lo++;
  let bn = 1;
  for (let i = lo; i < hi; i++) {
    if (bd(i) !== a[i]) return null;
    bn *= a[i]!;
  }
  let inner = 1;
  for (let i = hi; i < a.length; i++) inner *= a[i]!;
  return { bn, inner };
}

function binary(op: keyof typeof OP, a0: Tensor, b0: Tensor): Tensor {
  requireFloat(op, a0);
  requireFloat(op, b0);
  if (a0.dtype !== "f32" || b0.dtype !== "f32") {
    const mixed = binaryMixed(op, a0, b0);
    if (mixed) return mixed;
  }
  let a = asF32(a0), b = asF32(b0);
  let swapped = false;
  if (b.numel > a.numel && (op === "add" || op === "mul")) {
    [a, b] = [b, a];
    swapped = true;
  }
  let plan = bcastPlanOrNull(a.shape, b.shape);
  if (!plan) {
    // General broadcasting: both operands repeated to the common shape (their
    // gradients sum back through expand).
    const shape = broadcastShapes(op, a0.shape, b0.shape);
    a = expand(a, shape);
    b = expand(b, shape);
    plan = { bn: a.numel, inner: 1 };
  }
  const { bn, inner } = plan;
  const out = empty(a.shape, "f32");
  const k = backend();
  const n = BigInt(a.numel);
  k.call.dt_binary(OP[op], out.ptr, a.ptr, b.ptr, n, BigInt(bn), BigInt(inner));
  if (needsGrad(a, b)) {
    const A = a, B = b;
    record(out, op, swapped ? [B, A] : [A, B], (g) => {
      let ga: Tensor | null = null, gb: Tensor | null = null;
      if (op === "add") {
        ga = g;
        gb = B.requiresGrad ? reduceTo(g, B, bn, inner) : null;
      } else if (op === "sub") {
        ga = g;
        if (B.requiresGrad) {
          const r = reduceTo(g, B, bn, inner);
          gb = empty(r.shape, "f32");
          k.call.dt_scale(gb.ptr, r.ptr, BigInt(r.numel), -1);
        }
      } else if (op === "mul") {
        if (A.requiresGrad) {
          ga = empty(A.shape, "f32");
          k.call.dt_binary(OP.mul, ga.ptr, g.ptr, B.ptr, n, BigInt(bn), BigInt(inner));
        }
        if (B.requiresGrad) {
          const prod = empty(A.shape, "f32");
          k.call.dt_binary(OP.mul, prod.ptr, g.ptr, A.ptr, n, n, 1n);
          gb = reduceTo(prod, B, bn, inner);
        }
      } else {
        // div: d(a/b)/da = 1/b, d(a/b)/db = -(a/b)/b = -out/b
        if (A.requiresGrad) {
          ga = empty(A.shape, "f32");
          k.call.dt_binary(OP.div, ga.ptr, g.ptr, B.ptr, n, BigInt(bn), BigInt(inner));
        }
        if (B.requiresGrad) {
          const t = empty(A.shape, "f32");
          k.call.dt_binary(OP.mul, t.ptr, g.ptr, out.ptr, n, n, 1n);
          k.call.dt_binary(OP.div, t.ptr, t.ptr, B.ptr, n, BigInt(bn), BigInt(inner));
          const r = reduceTo(t, B, bn, inner);
          gb = empty(r.shape, "f32");
          k.call.dt_scale(gb.ptr, r.ptr, BigInt(r.numel), -1);
        }
      }
      return swapped ? [gb, ga] : [ga, gb];
    });
  }
  return out;
}

/** torch's result dtype of a binary op on two float dtypes. */
function promote(a: DType, b: DType): DType {
  return a === b ? a : "f32";
}

/** out (dtype od) = a op b[(i / inner) % bn], each operand in its own float dtype. */
function binaryEx(
  op: number,
  od: DType,
  a: Tensor,
  b: Tensor,
  n: number,
  bn: number,
  inner: number,
): Tensor {
  const out = empty(a.shape, od);
  backend().call.dt_binary_ex(
    op,
    out.ptr,
    DTYPE_CODE[od],
    a.ptr,
    DTYPE_CODE[a.dtype],
    b.ptr,
    DTYPE_CODE[b.dtype],
    BigInt(n),
    BigInt(bn),
    BigInt(inner),
  );
  return out;
}

/**
 * binary() when an operand is bf16/f16 and b broadcasts into a without a
 * copy: one mixed-dtype kernel, the result in torch's dtype. Gradients come
 * in the operands' dtypes (rounded once); those summed over broadcast dims
 * in f32. null: the general broadcast, which binary() does in f32.
 */
function binaryMixed(op: keyof typeof OP, a0: Tensor, b0: Tensor): Tensor | null {
  let a = a0, b = b0, swapped = false;
  if (b.numel > a.numel && (op === "add" || op === "mul")) {
    [a, b] = [b, a];
    swapped = true;
  }
  const plan = bcastPlanOrNull(a.shape, b.shape);
  if (!plan) return null;
  const { bn, inner } = plan;
  const n = a.numel, full = bn === n && inner === 1;
  const out = binaryEx(OP[op], promote(a.dtype, b.dtype), a, b, n, bn, inner);
  if (needsGrad(a, b)) {
    const A = a, B = b;
    const k = backend();
    /** g summed over B's broadcast dims, in f32 (g itself when B is full size). */
    const toB = (g: Tensor) =>
      full ? g : reduceTo(g.dtype === "f32" ? g : castTensor(g, "f32"), B, bn, inner);
    const negate = (t: Tensor) => {
      const f = t.dtype === "f32" ? t : castTensor(t, "f32");
      const r = empty(f.shape, "f32");
      k.call.dt_scale(r.ptr, f.ptr, BigInt(f.numel), -1);
      return r;
    };
    record(out, op, swapped ? [B, A] : [A, B], (g) => {
      let ga: Tensor | null = null, gb: Tensor | null = null;
      if (op === "add" || op === "sub") {
        ga = A.requiresGrad ? g : null;
        if (B.requiresGrad) gb = op === "add" ? toB(g) : negate(toB(g));
      } else if (op === "mul") {
        if (A.requiresGrad) ga = binaryEx(OP.mul, A.dtype, g, B, n, bn, inner);
        if (B.requiresGrad) gb = toB(binaryEx(OP.mul, full ? B.dtype : "f32", g, A, n, n, 1));
      } else {
        // div: d(a/b)/da = 1/b, d(a/b)/db = -(a/b)/b = -out/b
        if (A.requiresGrad) ga = binaryEx(OP.div, A.dtype, g, B, n, bn, inner);
        if (B.requiresGrad) {
          const t = binaryEx(OP.mul, "f32", g, out, n, n, 1);
          k.call.dt_binary_ex(
            OP.div,
            t.ptr,
            0,
            t.ptr,
            0,
            B.ptr,
            DTYPE_CODE[B.dtype],
            BigInt(n),
            BigInt(bn),
            BigInt(inner),
          );
          gb = negate(toB(t));
          if (full && B.dtype !== "f32") gb = castTensor(gb, B.dtype); // as mul's, in B's dtype
        }
      }
      return swapped ? [gb, ga] : [ga, gb];
    }, { lowPrecisionGrad: true });
  }
  return out;
}

/** Sums g over the broadcast dims of `b`. */
function reduceTo(g: Tensor, b: Tensor, bn: number, inner: number): Tensor {
  if (b.numel === g.numel) return g;
  const out = empty(b.shape, "f32");
  const k = backend();
  k.call.dt_reduce_bcast(out.ptr, g.ptr, BigInt(g.numel), BigInt(bn), BigInt(inner));
  return out;
}

/** a + b, broadcast as in PyTorch (bias-style shapes without a copy; see broadcastPlan). */
export function add(a: Tensor, b: Tensor): Tensor {
  return binary("add", a, b);
}
/** a - b. (torch.sub, broadcast as add.) */
export function sub(a: Tensor, b: Tensor): Tensor {
  return binary("sub", a, b);
}
/** a * b (elementwise). (torch.mul, broadcast as add.) */
export function mul(a: Tensor, b: Tensor): Tensor {
  return binary("mul", a, b);
}
/** a / b (elementwise, IEEE division), as torch.div. */
export function div(a: Tensor, b: Tensor): Tensor {
  return binary("div", a, b);
}

/** The shape two shapes broadcast to (NumPy's rule), or a RangeError naming both. */
export function broadcastShapes(op: string, a: readonly number[], b: readonly number[]): number[] {
  const n = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const x = a[a.length - n + i] ?? 1, y = b[b.length - n + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) {
      throw new RangeError(
        `${op}: shapes [${a}] and [${b}] do not broadcast: size ${x} against ${y} in dim ${
          i - n
        } (counting from the end)`,
      );
    }
    out.push(x === 1 ? y : x);
  }
  return out;
}

/** alpha * x. (x * alpha in PyTorch.) */
export function scale(x0: Tensor, alpha: number): Tensor {
  const x = asF32(x0);
  const out = empty(x.shape, "f32");
  const k = backend();
  k.call.dt_scale(out.ptr, x.ptr, BigInt(x.numel), alpha);
  if (needsGrad(x)) {
    record(out, "scale", [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_scale(gx.ptr, g.ptr, BigInt(g.numel), alpha);
      return [gx];
    });
  }
  return out;
}

/** max(x, 0). (torch.relu.) */
export function relu(x0: Tensor): Tensor {
  const x = asF32(x0);
  const out = empty(x.shape, "f32");
  const k = backend();
  const n = BigInt(x.numel);
  k.call.dt_relu_fwd(out.ptr, x.ptr, n);
  if (needsGrad(x)) {
    record(out, "relu", [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_relu_bwd(gx.ptr, g.ptr, x.ptr, n);
      return [gx];
    });
  }
  return out;
}

/** GELU with the tanh approximation (torch's approximate="tanh"); bf16/f16 in, the same out. */
export function gelu(x0: Tensor): Tensor {
  if (x0.dtype === "bf16" || x0.dtype === "f16") return geluLow(x0);
  const x = asF32(x0);
  const out = empty(x.shape, "f32");
  const k = backend();
  const n = BigInt(x.numel);
  k.call.dt_gelu_fwd(out.ptr, x.ptr, n);
  if (needsGrad(x)) {
    record(out, "gelu", [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_gelu_bwd(gx.ptr, g.ptr, x.ptr, n);
      return [gx];
    });
  }
  return out;
}

/** gelu of bf16/f16 values, computed in f32 and rounded once (as torch's bf16 GELU). */
function geluLow(x: Tensor): Tensor {
  const out = empty(x.shape, x.dtype);
  const k = backend();
  const n = BigInt(x.numel), dt = DTYPE_CODE[x.dtype];
  k.call.dt_gelu_fwd_ex(out.ptr, x.ptr, n, dt);
  if (needsGrad(x)) {
    record(out, "gelu", [x], (g0) => {
      const g = g0.dtype === x.dtype ? g0 : castTensor(g0, x.dtype);
      const gx = empty(x.shape, x.dtype);
      k.call.dt_gelu_bwd_ex(gx.ptr, g.ptr, x.ptr, n, dt);
      return [gx];
    }, { lowPrecisionGrad: true });
  }
  return out;
}

/**
 * Inverted dropout: zeroes each element with probability p (the mask is a
 * hash of (seed, offset + index), so it is reproducible on any device) and
 * scales the rest by 1/(1-p).
 * As torch.nn.functional.dropout in training mode.
 */
export function dropout(
  x0: Tensor,
  p: number,
  seed: bigint,
  offset = 0n,
): Tensor {
  if (!(p >= 0 && p < 1)) {
    throw new RangeError(`dropout: p must be in [0, 1), got ${p}`);
  }
  requireFloat("dropout", x0);
  if (p === 0) return x0; // the identity, in the input's dtype (as torch's)
  const x = asF32(x0);
  const out = empty(x.shape, "f32");
  const k = backend();
  const n = BigInt(x.numel);
  k.call.dt_dropout_fwd(out.ptr, x.ptr, n, p, seed, offset);
  if (needsGrad(x)) {
    record(out, "dropout", [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_dropout_bwd(gx.ptr, g.ptr, n, p, seed, offset);
      return [gx];
    });
  }
  return out;
}

/** Converts to another dtype; differentiable between float types. (PyTorch's `x.to(dtype)`.) */
export function cast(x: Tensor, dtype: DType): Tensor {
  if (x.dtype === dtype) return x;
  const out = castTensor(x, dtype);
  if (needsGrad(x)) {
    record(
      out,
      "cast",
      [x],
      (g) => [g.dtype === "f32" ? g : castTensor(g, "f32")],
    );
  }
  return out;
}
