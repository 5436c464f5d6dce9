"""PyTorch reference fixtures for dtrain's convolutional-network ops: every op's
forward output and gradients, a small CNN's training step, and SyncBatchNorm on
two ranks. dtrain's parity checks (parity/ops.ts, parity/cnn.ts,
parity/syncbn.ts; `deno task parity`) recompute them and compare within the
tolerances written next to each tensor.

  /usr/bin/python3 scripts/peers/ops_fixtures.py [--out fixtures] [--seed 0]

Writes ops.json + ops.safetensors, cnn.json + cnn.safetensors + cnn_init.pt,
syncbn.json + syncbn.safetensors into --out. Everything runs in float32 on one
thread (torch.set_num_threads(1)). Sizes are drawn from --seed too, and every
size, argument and key the checks need is in the JSON: readers must not
hard-code them.

Tolerances. Each compared tensor names a bound: |dtrain - torch| <= ulps * 2^-24
* s elementwise, where s is the tensor "scale" stored beside it (or |torch|
when there is none). For sums of K terms (convolution, pooling, reductions,
backward of gathers) s is the same computation on absolute values, and the
bound allows both implementations the worst-case error of a K-term float sum
(ulps = 2K + a few roundings): a wrong index or a missing term errs by a whole
term, far beyond it. Elementwise transcendental ops get a few ulps of |torch|
(both sides are within 1-2 ulps of the exact value). "exact" means equal bits
(data movement, max, comparisons, integer indices).

SyncBatchNorm: torch 1.13 refuses CPU tensors in nn.SyncBatchNorm, and its
batch_norm_stats / gather / elemt kernels exist only for CUDA. SyncBatchNorm is
defined as batch norm over the concatenation of the ranks' batches, so the
reference here is BatchNorm over torch.cat of both ranks' inputs: the output and
running statistics are those of the concatenated batch; each rank's input
gradient is the concatenated batch's gradient of sum_r <out_r, dy_r> at its
slice (what SyncBatchNorm's all-reduced backward computes); weight and bias
gradients are per rank (SyncBatchNorm leaves them local for DDP to average), got
by back-propagating one rank's dy with the other's set to zero.
"""
import argparse
import json
import os
import random
import struct

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)
U = 2.0 ** -24


class Writer:
    """Collects tensors under unique keys and writes one safetensors file."""

    def __init__(self):
        self.tensors = {}

    def add(self, key, t):
        assert key not in self.tensors, key
        self.tensors[key] = t.detach().contiguous().clone()
        return key

    def save(self, path):
        names = {torch.float32: "F32", torch.int64: "I64", torch.uint8: "U8"}
        order = sorted(self.tensors, key=lambda k: (-self.tensors[k].element_size(), k))
        header, offset, blobs = {}, 0, []
        for k in order:
            t = self.tensors[k]
            data = t.numpy().tobytes()
            header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
            blobs.append(data)
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for b in blobs:
                f.write(b)


def tol(ulps, scale=None, why=""):
    """A bound |a - b| <= ulps * 2^-24 * s (s: the scale key, else |reference|)."""
    return {"ulps": ulps, "scale": scale, "why": why}


EXACT = {"exact": True}


class OpCases:
    """Builds the op cases: inputs, outputs, upstream gradients and gradients."""

    def __init__(self, rng):
        self.rng = rng
        self.w = Writer()
        self.cases = []

    def randn(self, *shape, scale=1.0):
        return torch.randn(*shape) * scale

    def case(self, name, op, args, inputs, fn, out_tols, grad_tols, scale_fns=None, dy_scale=1.0):
        """Runs fn(**inputs) -> tensor or tuple; records outputs, a random dy for
        each float output, and the gradients of the float inputs that require
        grad. out_tols/grad_tols map names to tolerance dicts; scale_fns maps a
        name to a function(inputs, outs, dys, grads) returning its scale tensor."""
        c = {"name": name, "op": op, "args": args, "inputs": {}, "outputs": {}, "dy": {}, "grads": {}}
        leaves = {}
        for k, v in inputs.items():
            if isinstance(v, torch.Tensor) and v.dtype == torch.float32:
                v = v.detach().clone().requires_grad_(k in grad_tols)
            leaves[k] = v
            c["inputs"][k] = self.w.add(f"{name}/in/{k}", v)
        outs = fn(**leaves)
        if not isinstance(outs, dict):
            outs = {"out": outs}
        dys, float_outs = {}, []
        for k, v in outs.items():
            c["outputs"][k] = {"key": self.w.add(f"{name}/out/{k}", v), "tol": dict(out_tols[k])}
            if v.dtype == torch.float32 and v.requires_grad:
                dy = torch.randn(v.shape) * dy_scale
                dys[k] = dy
                c["dy"][k] = self.w.add(f"{name}/dy/{k}", dy)
                float_outs.append((v, dy))
        grads = {}
        if float_outs and grad_tols:
            want = [leaves[k] for k in grad_tols]
            gs = torch.autograd.grad([o for o, _ in float_outs], want, [d for _, d in float_outs], allow_unused=True)
            for k, g in zip(grad_tols, gs):
                grads[k] = torch.zeros_like(leaves[k]) if g is None else g
                c["grads"][k] = {"key": self.w.add(f"{name}/grad/{k}", grads[k]), "tol": dict(grad_tols[k])}
        for k, f in (scale_fns or {}).items():
            s = f({kk: vv.detach() if isinstance(vv, torch.Tensor) else vv for kk, vv in leaves.items()},
                  {kk: vv.detach() for kk, vv in outs.items()}, dys, grads).detach()
            key = self.w.add(f"{name}/scale/{k}", s)
            target = c["grads"][k[5:]] if k.startswith("grad_") else c["outputs"][k]
            target["tol"]["scale"] = key
        self.cases.append(c)


def vjp_abs(fn, inputs, wrt, dy):
    """The gradient of <fn(|inputs|), |dy|> with respect to input `wrt`: for an
    op linear in `wrt`, the sum of the magnitudes of every term of its gradient."""
    leaves = {k: (v.abs().requires_grad_(k == wrt) if isinstance(v, torch.Tensor) and v.dtype == torch.float32 else v)
              for k, v in inputs.items()}
    out = fn(**leaves)
    (g,) = torch.autograd.grad(out, [leaves[wrt]], dy.abs())
    return g


def vjp_at(fn, x, dy):
    """The gradient of <fn(x), dy> with respect to x (for piecewise-linear ops
    such as max pooling, with dy = |dy|: the sum of |terms| at the same picks)."""
    leaf = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(leaf), [leaf], dy)
    return g


def pair(v):
    return list(v) if isinstance(v, (list, tuple)) else [v, v]


def conv_cases(oc, rng):
    configs = [
        dict(stride=1, padding=1, dilation=1, groups=1, bias=True),
        dict(stride=2, padding=0, dilation=1, groups=1, bias=False),
        dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=1, bias=True),
        dict(stride=1, padding=2, dilation=2, groups=2, bias=True),
        dict(stride=1, padding=0, dilation=1, groups=4, bias=False),  # depthwise-like
    ]
    for i, cfg in enumerate(configs):
        g = cfg["groups"]
        N, Cin, Cout = rng.randint(1, 3), 4 * rng.randint(1, 2), 4 * rng.randint(1, 2)
        H, W = rng.randint(5, 9), rng.randint(5, 9)
        KH, KW = rng.choice([1, 3]), rng.choice([2, 3])
        args = {"stride": pair(cfg["stride"]), "padding": pair(cfg["padding"]), "dilation": pair(cfg["dilation"]),
                "groups": g}
        x = oc.randn(N, Cin, H, W)
        w = oc.randn(Cout, Cin // g, KH, KW, scale=0.3)
        inputs = {"x": x, "weight": w}
        if cfg["bias"]:
            inputs["bias"] = oc.randn(Cout)

        def fn(x, weight, bias=None):
            return F.conv2d(x, weight, bias, args["stride"], args["padding"], args["dilation"], g)

        K = Cin // g * KH * KW
        OH = (H + 2 * args["padding"][0] - args["dilation"][0] * (KH - 1) - 1) // args["stride"][0] + 1
        OW = (W + 2 * args["padding"][1] - args["dilation"][1] * (KW - 1) - 1) // args["stride"][1] + 1
        taps = Cout // g * KH * KW
        why = "sums of K products in f32, any order: each side within K ulps of the scale (the sum of |terms|)"
        grad_tols = {"x": tol(2 * taps + 2, why=why), "weight": tol(2 * N * OH * OW + 2, why=why)}
        scale_fns = {
            "out": lambda i, o, d, g_: fn(**{k: v.abs() for k, v in i.items()}),
            "grad_x": lambda i, o, d, g_: vjp_abs(fn, i, "x", d["out"]),
            "grad_weight": lambda i, o, d, g_: vjp_abs(fn, i, "weight", d["out"]),
        }
        if "bias" in inputs:
            grad_tols["bias"] = tol(2 * N * OH * OW + 2, why=why)
            scale_fns["grad_bias"] = lambda i, o, d, g_: vjp_abs(fn, i, "bias", d["out"])
        oc.case(f"conv2d_{i}", "conv2d", args, inputs, fn, {"out": tol(2 * K + 4, why=why)}, grad_tols, scale_fns)


def pool_cases(oc, rng):
    maxcfg = [
        dict(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False),
        dict(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True),
        dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1), ceil_mode=False),
        dict(kernel_size=3, stride=1, padding=1, dilation=1, ceil_mode=False),  # overlapping windows
    ]
    for i, cfg in enumerate(maxcfg):
        N, C, H, W = rng.randint(1, 3), rng.randint(2, 4), rng.randint(6, 10), rng.randint(6, 10)
        x = oc.randn(N, C, H, W)
        if i == 0:
            x[0, 0, 0, 0] = float("nan")  # a NaN takes over its window (and the gradient goes to it)
        args = {"kernel_size": pair(cfg["kernel_size"]), "stride": pair(cfg["stride"]),
                "padding": pair(cfg["padding"]), "dilation": pair(cfg["dilation"]), "ceil_mode": cfg["ceil_mode"]}

        def fn(x, a=args):
            return F.max_pool2d(x, a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"])

        kh, kw = args["kernel_size"]
        overlap = -(-kh // args["stride"][0]) * -(-kw // args["stride"][1])
        oc.case(f"max_pool2d_{i}", "max_pool2d", args, {"x": x}, fn, {"out": EXACT},
                {"x": tol(2 * overlap, why="a gradient adds the dy of every window whose max it is")},
                {"grad_x": lambda i_, o, d, g: vjp_at(fn, i_["x"], d["out"].abs())})
    avgcfg = [
        dict(kernel_size=2, stride=2, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=True, divisor_override=None),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False, divisor_override=None),
        dict(kernel_size=(3, 2), stride=1, padding=(1, 0), ceil_mode=False, count_include_pad=True,
             divisor_override=5),
    ]
    for i, cfg in enumerate(avgcfg):
        N, C, H, W = rng.randint(1, 3), rng.randint(2, 4), rng.randint(6, 10), rng.randint(6, 10)
        args = {"kernel_size": pair(cfg["kernel_size"]), "stride": pair(cfg["stride"]),
                "padding": pair(cfg["padding"]), "ceil_mode": cfg["ceil_mode"],
                "count_include_pad": cfg["count_include_pad"], "divisor_override": cfg["divisor_override"]}

        def fn(x, a=args):
            return F.avg_pool2d(x, a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"],
                                a["count_include_pad"], a["divisor_override"])

        kh, kw = args["kernel_size"]
        overlap = -(-kh // args["stride"][0]) * -(-kw // args["stride"][1])
        why = "a window's sum of K values, then one division"
        oc.case(f"avg_pool2d_{i}", "avg_pool2d", args, {"x": oc.randn(N, C, H, W)}, fn,
                {"out": tol(2 * kh * kw + 4, why=why)},
                {"x": tol(4 * overlap + 4, why="each input adds dy / divisor of its windows")},
                {"out": lambda i_, o, d, g: fn(i_["x"].abs()),
                 "grad_x": lambda i_, o, d, g: vjp_abs(fn, i_, "x", d["out"])})
    for i, (H, W, OH, OW) in enumerate([(8, 8, 1, 1), (7, 9, 3, 4), (5, 5, 5, 5), (6, 10, 4, 3)]):
        N, C = rng.randint(1, 3), rng.randint(2, 4)
        args = {"output_size": [OH, OW]}

        def fn(x, a=args):
            return F.adaptive_avg_pool2d(x, a["output_size"])

        kmax = (-(-H // OH) + 1) * (-(-W // OW) + 1)
        oc.case(f"adaptive_avg_pool2d_{i}", "adaptive_avg_pool2d", args, {"x": oc.randn(N, C, H, W)}, fn,
                {"out": tol(2 * kmax + 4, why="a window's sum, then two divisions")},
                {"x": tol(4 * kmax + 4, why="each input adds dy / window size of its windows")},
                {"out": lambda i_, o, d, g: fn(i_["x"].abs()),
                 "grad_x": lambda i_, o, d, g: vjp_abs(fn, i_, "x", d["out"])})


def batchnorm_cases(oc, rng):
    for i, (shape, affine, training) in enumerate([
        ((4, 3, 5, 5), True, True), ((2, 4, 3, 6), False, True), ((6, 5), True, True), ((3, 4, 7), True, True),
        ((4, 3, 5, 5), True, False),
    ]):
        C = shape[1]
        x = oc.randn(*shape) * 2 + 0.5
        rm, rv = oc.randn(C, scale=0.1), torch.rand(C) + 0.5
        momentum, eps = 0.1, 1e-5
        inputs = {"x": x, "running_mean": rm.clone(), "running_var": rv.clone()}
        if affine:
            inputs["weight"], inputs["bias"] = oc.randn(C) * 0.5 + 1, oc.randn(C, scale=0.5)
        args = {"training": training, "momentum": momentum, "eps": eps}
        dims = [0] + list(range(2, len(shape)))
        M = x.numel() // C

        def fn(x, running_mean, running_var, weight=None, bias=None):
            rm_, rv_ = running_mean.clone(), running_var.clone()
            out = F.batch_norm(x, rm_, rv_, weight, bias, training, momentum, eps)
            return {"out": out, "running_mean": rm_, "running_var": rv_}

        def stats(i_):
            xx = i_["x"].double()
            if training:
                mean, var = xx.mean(dims, keepdim=True), xx.var(dims, unbiased=False, keepdim=True)
            else:
                view = [1, C] + [1] * (len(shape) - 2)
                mean, var = i_["running_mean"].double().view(view), i_["running_var"].double().view(view)
            rstd = 1 / (var + eps).sqrt()
            view = [1, C] + [1] * (len(shape) - 2)
            w = i_["weight"].double().view(view).abs() if "weight" in i_ else torch.ones(view, dtype=torch.float64)
            b = i_["bias"].double().view(view).abs() if "bias" in i_ else torch.zeros(view, dtype=torch.float64)
            return xx, mean, rstd, w, b

        def out_scale(i_, o, d, g):
            xx, mean, rstd, w, b = stats(i_)
            return ((xx.abs() + mean.abs()) * rstd * w + b).float()

        def dx_scale(i_, o, d, g):
            xx, mean, rstd, w, b = stats(i_)
            dy = d["out"].double()
            xhat = (xx - mean) * rstd
            if not training:
                return (dy.abs() * rstd * w).float()
            return ((dy.abs() + dy.abs().mean(dims, keepdim=True)
                     + xhat.abs() * (dy * xhat).abs().mean(dims, keepdim=True)) * rstd * w).float()

        def dw_scale(i_, o, d, g):
            xx, mean, rstd, w, b = stats(i_)
            return (d["out"].double().abs() * ((xx.abs() + mean.abs()) * rstd)).sum(dims).float()

        why_out = "x*alpha+beta with alpha = rstd*w, beta = b - mean*alpha: a few roundings of each term"
        grad_tols = {"x": tol(32, why="dy - mean(dy) - xhat*mean(dy*xhat), the means in double")}
        scale_fns = {"out": out_scale, "grad_x": dx_scale}
        if affine:
            grad_tols["weight"] = tol(2 * M + 8, why="a sum of M products")
            grad_tols["bias"] = tol(2 * M + 2, why="a sum of M values")
            scale_fns["grad_weight"] = dw_scale
            scale_fns["grad_bias"] = lambda i_, o, d, g: d["out"].abs().sum(dims)
        if training:
            # the batch mean is a sum of M terms: its error is relative to mean(|x|), not to |mean|
            scale_fns["running_mean"] = lambda i_, o, d, g: (momentum * i_["x"].abs().mean(dims)
                                                              + (1 - momentum) * i_["running_mean"].abs())
        running = tol(2 * M + 8, why="momentum * stat + (1 - momentum) * running; a stat is a sum of M terms")
        oc.case(f"batch_norm_{i}", "batch_norm", args, inputs, fn,
                {"out": tol(16, why=why_out), "running_mean": running, "running_var": running}, grad_tols, scale_fns)


def shape_cases(oc, rng):
    x = oc.randn(2, 3, 4, 5)
    for i, (pad, value) in enumerate([([1, 2], 0.0), ([1, 0, 2, 3], -1.5), ([0, 1, 1, 0, 2, 1], 2.0),
                                      ([-1, 2, 1, -2], 0.0)]):
        args = {"pad": pad, "value": value}
        oc.case(f"pad_{i}", "pad", args, {"x": x}, lambda x, a=args: F.pad(x, a["pad"], "constant", a["value"]),
                {"out": EXACT}, {"x": EXACT})
    for i, dim in enumerate([0, 1, -1]):
        shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
        for k, s in enumerate(shapes):
            s[dim] = k + 1
        ins = {f"x{k}": oc.randn(*s) for k, s in enumerate(shapes)}
        args = {"dim": dim, "inputs": list(ins)}
        oc.case(f"cat_{i}", "cat", args, ins, lambda a=args, **kw: torch.cat([kw[k] for k in a["inputs"]], a["dim"]),
                {"out": EXACT}, {k: EXACT for k in ins})
    for i, dim in enumerate([0, 2, -1]):
        ins = {f"x{k}": oc.randn(3, 4) for k in range(3)}
        args = {"dim": dim, "inputs": list(ins)}
        oc.case(f"stack_{i}", "stack", args, ins,
                lambda a=args, **kw: torch.stack([kw[k] for k in a["inputs"]], a["dim"]),
                {"out": EXACT}, {k: EXACT for k in ins})
    for i, (d0, d1) in enumerate([(0, 1), (1, 3), (-1, -3), (2, 2)]):
        args = {"dim0": d0, "dim1": d1}
        oc.case(f"transpose_{i}", "transpose", args, {"x": x},
                lambda x, a=args: x.transpose(a["dim0"], a["dim1"]).contiguous(), {"out": EXACT}, {"x": EXACT})
    for i, dims in enumerate([[3, 1, 0, 2], [0, 2, 1, 3], [2, 3, 0, 1]]):
        args = {"dims": dims}
        oc.case(f"permute_{i}", "permute", args, {"x": x}, lambda x, a=args: x.permute(*a["dims"]).contiguous(),
                {"out": EXACT}, {"x": EXACT})


def reduce_cases(oc, rng):
    x = oc.randn(3, 4, 5)
    x2 = x.clone()
    x2[1, 2, 3] = float("nan")
    x2[0, :, 0] = 1.0  # ties: the first index wins
    for dim in [0, 1, 2, -1]:
        for keepdim in [False, True]:
            tag = f"{dim if dim >= 0 else 'm' + str(-dim)}_{int(keepdim)}"
            args = {"dim": dim, "keepdim": keepdim}
            D = x.shape[dim]
            for op in ["sum", "mean"]:
                def fn(x, a=args, op=op):
                    return getattr(x, op)(a["dim"], keepdim=a["keepdim"])
                oc.case(f"{op}_{tag}", op, args, {"x": x}, fn,
                        {"out": tol(2 * D + 2, why=f"a sum of {D} values")},
                        {"x": EXACT if op == "sum" else tol(2, why="dy / D")},
                        {"out": lambda i_, o, d, g, fn=fn: fn(i_["x"].abs())})
            for op in ["max", "min"]:
                def fn(x, a=args, op=op):
                    r = getattr(x, op)(a["dim"], keepdim=a["keepdim"])
                    return {"values": r.values, "indices": r.indices}
                oc.case(f"{op}_{tag}", op, args, {"x": x2}, fn, {"values": EXACT, "indices": EXACT}, {"x": EXACT})
            oc.case(f"argmax_{tag}", "argmax", args, {"x": x2},
                    lambda x, a=args: x.argmax(a["dim"], keepdim=a["keepdim"]), {"out": EXACT}, {})
    oc.case("sum_all", "sum", {}, {"x": x}, lambda x: x.sum(), {"out": tol(2 * x.numel() + 2, why="a sum")},
            {"x": EXACT}, {"out": lambda i_, o, d, g: i_["x"].abs().sum()})
    oc.case("argmax_all", "argmax", {}, {"x": x2}, lambda x: x.argmax(), {"out": EXACT}, {})


def unary_cases(oc, rng):
    n = 257
    xs = {
        "exp": torch.randn(n) * 4,
        "log": torch.rand(n) * 10 + 1e-3,
        "sigmoid": torch.randn(n) * 6,
        "tanh": torch.randn(n) * 3,
        "sqrt": torch.rand(n) * 100,
    }
    xs["log"][:4] = torch.tensor([1.0, 2.0 ** -130, 3.0e38, 0.5])
    xs["exp"][:3] = torch.tensor([-104.0, 88.0, 0.0])
    fns = {"exp": torch.exp, "log": torch.log, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "sqrt": torch.sqrt}
    grad_scale = {
        "exp": lambda x, y, dy: (dy * y).abs(),
        "log": lambda x, y, dy: (dy / x).abs(),
        "sigmoid": lambda x, y, dy: dy.abs() * ((1 - y).abs() + y.abs()) * y.abs(),
        "tanh": lambda x, y, dy: dy.abs() * (1 + y * y),
        "sqrt": lambda x, y, dy: (dy / (2 * y)).abs(),
    }
    for op, x in xs.items():
        oc.case(op, op, {}, {"x": x}, fns[op],
                {"out": tol(0.5 if op == "sqrt" else 4, why="both within 2 ulps of the exact value")},
                {"x": tol(8, why="dy times the derivative from the output, a few roundings")},
                {"grad_x": lambda i_, o, d, g, op=op: grad_scale[op](i_["x"], o["out"], d["out"])})
    for i, p in enumerate([2.0, 3.0, 0.5, -1.0, -0.5, -2.0, 1.7, 0.0, 1.0]):
        x = torch.rand(n) * 3 + 0.1
        args = {"exponent": p}
        oc.case(f"pow_{i}", "pow", args, {"x": x}, lambda x, a=args: torch.pow(x, a["exponent"]),
                {"out": tol(4, why="a product, sqrt or division (exact-ish), or powf within 1 ulp each side")},
                {"x": tol(12, why="dy * (p * x^(p-1))")})
    for i, (lo, hi) in enumerate([(-0.5, 0.7), (None, 0.2), (-0.3, None)]):
        x = torch.randn(n)
        x[0] = float("nan")
        args = {"min": lo, "max": hi}
        oc.case(f"clamp_{i}", "clamp", args, {"x": x}, lambda x, a=args: torch.clamp(x, a["min"], a["max"]),
                {"out": EXACT}, {"x": EXACT})
    for i, (sa, sb) in enumerate([((4, 5), (4, 5)), ((3, 4, 5), (5,)), ((3, 4, 5), (4, 1)), ((2, 3), (1,))]):
        a, b = torch.randn(*sa), torch.rand(*sb) + 0.5
        nb = a.numel() // b.numel()
        oc.case(f"div_{i}", "div", {}, {"a": a, "b": b}, lambda a, b: a / b,
                {"out": tol(0.5, why="one IEEE division")},
                {"a": tol(1, why="dy / b"),
                 "b": tol(2 * nb + 6, why=f"-dy * a / b^2 summed over {nb} broadcast elements")},
                {"grad_b": lambda i_, o, d, g: (d["out"] * i_["a"] / (i_["b"] * i_["b"])).abs()
                 .sum_to_size(i_["b"].shape)})


def select_cases(oc, rng):
    a, b = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    cond = torch.rand(3, 4, 5) > 0.5
    oc.case("where_0", "where", {}, {"cond": cond.to(torch.uint8), "a": a, "b": b},
            lambda cond, a, b: torch.where(cond.bool(), a, b), {"out": EXACT}, {"a": EXACT, "b": EXACT})
    for i, (mshape, value) in enumerate([((3, 4, 5), -1e9), ((4, 1), float("-inf")), ((5,), 0.25)]):
        mask = torch.rand(*mshape) > 0.5
        args = {"value": value}
        oc.case(f"masked_fill_{i}", "masked_fill", args, {"x": a, "mask": mask.to(torch.uint8)},
                lambda x, mask, a_=args: x.masked_fill(mask.bool(), a_["value"]), {"out": EXACT}, {"x": EXACT})
    x = torch.randn(4, 5, 6)
    for i, dim in enumerate([0, 1, 2, -1]):
        shape = list(x.shape)
        J = shape[dim] + 2
        shape[dim] = J
        idx = torch.randint(0, x.shape[dim], shape)
        args = {"dim": dim}
        oc.case(f"gather_{i}", "gather", args, {"x": x, "index": idx},
                lambda x, index, a=args: torch.gather(x, a["dim"], index), {"out": EXACT},
                {"x": tol(2 * J, why=f"up to {J} picks of one element add up")},
                {"grad_x": lambda i_, o, d, g, a=args: torch.zeros_like(i_["x"]).scatter_add_(
                    a["dim"], i_["index"], d["out"].abs())})
        idx1 = torch.randint(0, x.shape[dim], (J,))
        oc.case(f"index_select_{i}", "index_select", args, {"x": x, "index": idx1},
                lambda x, index, a=args: torch.index_select(x, a["dim"], index), {"out": EXACT},
                {"x": tol(2 * J, why=f"up to {J} picks of one slice add up")},
                {"grad_x": lambda i_, o, d, g, a=args: torch.zeros_like(i_["x"]).index_add_(
                    a["dim"], i_["index"], d["out"].abs())})


def softmax_cases(oc, rng):
    x = torch.randn(3, 4, 6) * 3
    for dim in [0, 1, 2, -1]:
        D = x.shape[dim]
        args = {"dim": dim}
        oc.case(f"softmax_{dim if dim >= 0 else 'm' + str(-dim)}", "softmax", args, {"x": x}, lambda x, a=args: F.softmax(x, a["dim"]),
                {"out": tol(8, why="exp (1-2 ulps), a sum in double or float, one product")},
                {"x": tol(2 * D + 8, why=f"(dy - sum of {D} dy*y) * y")},
                {"grad_x": lambda i_, o, d, g, a=args: (d["out"].abs() + (d["out"] * o["out"]).abs().sum(
                    a["dim"], keepdim=True)) * o["out"]})
        oc.case(f"log_softmax_{dim if dim >= 0 else 'm' + str(-dim)}", "log_softmax", args, {"x": x}, lambda x, a=args: F.log_softmax(x, a["dim"]),
                {"out": tol(2 * D + 8, why="(x - max) - log(sum): |x - max| and log(sum) rounded, and log(sum) "
                                           "off by the sum's relative error (D terms), an absolute error")},
                {"x": tol(2 * D + 8, why=f"dy - exp(y) * sum of {D} dy")},
                {"out": lambda i_, o, d, g, a=args: (i_["x"] - i_["x"].amax(a["dim"], keepdim=True)).abs()
                 + (o["out"] - i_["x"] + i_["x"].amax(a["dim"], keepdim=True)).abs() + 1,
                 "grad_x": lambda i_, o, d, g, a=args: d["out"].abs() + o["out"].exp() * d["out"].abs().sum(
                     a["dim"], keepdim=True)})


def json_safe(v):
    """v with non-finite floats as the strings "Infinity", "-Infinity", "NaN" (JSON has no such numbers)."""
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def write_ops(out_dir, seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    oc = OpCases(rng)
    for build in [conv_cases, pool_cases, batchnorm_cases, shape_cases, reduce_cases, unary_cases, select_cases,
                  softmax_cases]:
        build(oc, rng)
    oc.w.save(os.path.join(out_dir, "ops.safetensors"))
    meta = {"torch_version": torch.__version__, "seed": seed, "threads": torch.get_num_threads(),
            "description": "one case per op and argument set; see scripts/peers/ops_fixtures.py", "cases": oc.cases}
    with open(os.path.join(out_dir, "ops.json"), "w") as f:
        json.dump(json_safe(meta), f, indent=1, allow_nan=False)
    return len(oc.cases)


def cnn(c1, c2):
    """The CNN of the fixture, the benchmark and the Fashion-MNIST example."""
    return nn.Sequential(
        nn.Conv2d(1, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(c2 * 7 * 7, 10))


def write_cnn(out_dir, seed):
    rng = random.Random(seed + 1)
    torch.manual_seed(seed)
    c1, c2, B = 4 * rng.randint(1, 2), 8 * rng.randint(1, 2), rng.randint(6, 10)
    model = cnn(c1, c2)
    w = Writer()
    init = model.state_dict()
    torch.save(init, os.path.join(out_dir, "cnn_init.pt"))
    for k, v in init.items():
        w.add(f"init/{k}", v)
    x, y = torch.randn(B, 1, 28, 28), torch.randint(0, 10, (B,))
    x_eval = torch.randn(B, 1, 28, 28)
    w.add("x", x)
    w.add("y", y)
    w.add("x_eval", x_eval)
    lr, momentum = 0.1, 0.9
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    model.train()
    # A conv bias feeding a batch norm has a zero gradient up to rounding (the
    # norm removes the mean): its parity is measured against sum |dy| per
    # channel at the conv output, kept as gscale/<name>.
    conv_out_grads, hooks = {}, []

    def keep_output_grad(name):
        def hook(mod, inputs, output):
            output.register_hook(lambda g: conv_out_grads.__setitem__(name, g))
        return hook

    for name, m in model.named_children():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(keep_output_grad(name)))
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    w.add("logits", logits)
    w.add("loss", loss.reshape(()))
    for k, p in model.named_parameters():
        w.add(f"grad/{k}", p.grad)
    for name, g in conv_out_grads.items():
        w.add(f"gscale/{name}.bias", g.abs().sum((0, 2, 3)))
    for h in hooks:
        h.remove()
    opt.step()
    for k, v in model.state_dict().items():
        w.add(f"after/{k}", v)
    model.eval()
    with torch.no_grad():
        w.add("eval_logits", model(x_eval))
    w.save(os.path.join(out_dir, "cnn.safetensors"))
    meta = {
        "torch_version": torch.__version__, "seed": seed,
        "model": {"c1": c1, "c2": c2, "layers": "Conv2d(1,c1,3,padding=1) BatchNorm2d(c1) ReLU MaxPool2d(2) "
                  "Conv2d(c1,c2,3,padding=1) BatchNorm2d(c2) ReLU MaxPool2d(2) Flatten Linear(c2*49,10)"},
        "batch": B, "optimizer": {"name": "SGD", "lr": lr, "momentum": momentum},
        "steps": "train-mode forward of x, cross-entropy with y, backward, one SGD step, then eval-mode forward of "
                 "x_eval",
        "keys": {"init": "init/<name>", "grads": "grad/<name>", "after_step": "after/<name>",
                 "grad_scale": "gscale/<name>: sum |dy| of a gradient that cancels to ~0"},
        "param_names": [k for k, _ in model.named_parameters()],
        "state_names": list(model.state_dict()),
    }
    with open(os.path.join(out_dir, "cnn.json"), "w") as f:
        json.dump(meta, f, indent=1)


def write_syncbn(out_dir, seed):
    rng = random.Random(seed + 2)
    torch.manual_seed(seed + 2)
    C, H, W = rng.randint(3, 5), rng.randint(3, 5), rng.randint(3, 5)
    counts = [rng.randint(2, 4), rng.randint(5, 7)]  # unequal batches: counts are reduced too
    w = Writer()
    cases = []
    for ci, momentum in enumerate([0.1, None]):
        name = f"syncbn_{ci}"
        weight, bias = torch.randn(C) * 0.5 + 1, torch.randn(C) * 0.5
        rm, rv = torch.randn(C) * 0.1, torch.rand(C) + 0.5
        bn = nn.BatchNorm2d(C, momentum=momentum)
        with torch.no_grad():
            bn.weight.copy_(weight)
            bn.bias.copy_(bias)
            bn.running_mean.copy_(rm)
            bn.running_var.copy_(rv)
        for k, v in bn.state_dict().items():
            w.add(f"{name}/init/{k}", v)
        steps = []
        for s in range(2):
            xs = [torch.randn(n, C, H, W) * 1.5 + 0.3 for n in counts]
            dys = [torch.randn(n, C, H, W) for n in counts]
            leaves = [x.clone().requires_grad_(True) for x in xs]
            bn.train()
            out = bn(torch.cat(leaves))
            outs = torch.split(out, counts)
            step = {"x": [], "dy": [], "out": [], "grad_x": [], "grad_weight": [], "grad_bias": []}
            for r in range(2):
                step["x"].append(w.add(f"{name}/step{s}/x{r}", xs[r]))
                step["dy"].append(w.add(f"{name}/step{s}/dy{r}", dys[r]))
                step["out"].append(w.add(f"{name}/step{s}/out{r}", outs[r]))
            gx = torch.autograd.grad(out, leaves, torch.cat(dys), retain_graph=True)
            for r in range(2):
                step["grad_x"].append(w.add(f"{name}/step{s}/grad_x{r}", gx[r]))
                masked = torch.cat([d if q == r else torch.zeros_like(d) for q, d in enumerate(dys)])
                gw, gb = torch.autograd.grad(out, [bn.weight, bn.bias], masked, retain_graph=True)
                step["grad_weight"].append(w.add(f"{name}/step{s}/grad_weight{r}", gw))
                step["grad_bias"].append(w.add(f"{name}/step{s}/grad_bias{r}", gb))
            for k, v in bn.state_dict().items():
                w.add(f"{name}/step{s}/state/{k}", v)
            step["state"] = f"{name}/step{s}/state/"
            bn.eval()
            with torch.no_grad():
                step["eval_out"] = [w.add(f"{name}/step{s}/eval_out{r}", bn(xs[r])) for r in range(2)]
            steps.append(step)
        cases.append({"name": name, "momentum": momentum, "eps": bn.eps, "init": f"{name}/init/", "steps": steps})
    w.save(os.path.join(out_dir, "syncbn.safetensors"))
    meta = {"torch_version": torch.__version__, "seed": seed, "world_size": 2, "channels": C, "counts": counts,
            "reference": "BatchNorm2d over torch.cat of both ranks' batches (see scripts/peers/ops_fixtures.py)",
            "each_step": "train-mode forward of x_r on rank r, backward of dy_r, then eval-mode forward of x_r",
            "cases": cases}
    with open(os.path.join(out_dir, "syncbn.json"), "w") as f:
        json.dump(meta, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "fixtures"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    n = write_ops(a.out, a.seed)
    write_cnn(a.out, a.seed)
    write_syncbn(a.out, a.seed)
    print(json.dumps({"out": os.path.abspath(a.out), "op_cases": n, "torch_version": torch.__version__}))


if __name__ == "__main__":
    main()
