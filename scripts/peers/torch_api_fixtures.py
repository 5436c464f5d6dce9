"""PyTorch reference fixtures for dtrain's PyTorch-API pieces: the optimizers
(Adam, Adadelta, Adagrad, RMSprop), the learning-rate schedulers, the loss
functions, the random constructors (rand, randn, randint) and len(DataLoader).

  /usr/bin/python3 scripts/peers/torch_api_fixtures.py [--out fixtures/torch_api]

Writes optimizers.json, lr_schedulers.json, losses.json, random.json and
loader_lengths.json (len(DataLoader) with and without a DistributedSampler)
and pixels.json (every byte value through ToTensor and Normalize). Every
float32 value is written as the exact decimal of its float (a JSON number
parses back to the same float32), so the checks compare against torch's bits;
the tolerances live beside the tests, which explain them. Everything runs on
the CPU, one thread, float32; the output is deterministic.
"""
import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)


def flat(t):
    """A tensor as a flat list of Python numbers (floats exact, ints as ints)."""
    t = t.detach().contiguous().reshape(-1)
    if t.dtype in (torch.int64, torch.int32, torch.bool, torch.uint8):
        return [int(v) for v in t.tolist()]
    return [float(v) for v in t.tolist()]


def tens(t):
    return {"shape": list(t.shape), "data": flat(t)}


# ---- optimizers ------------------------------------------------------------------------

OPTIMIZER_CASES = [
    # name, torch class, defaults given to the constructor, the second group's overrides
    ("adam_default", "Adam", {}, {}),
    ("adam_amsgrad_wd", "Adam", {"lr": 0.01, "betas": [0.8, 0.99], "weight_decay": 0.1,
                                 "amsgrad": True}, {"lr": 0.02, "weight_decay": 0.0}),
    ("adagrad_default", "Adagrad", {}, {}),
    ("adagrad_decay", "Adagrad", {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.1,
                                  "initial_accumulator_value": 0.1, "eps": 1e-8}, {"lr": 0.1}),
    ("rmsprop_default", "RMSprop", {}, {}),
    ("rmsprop_centered_momentum", "RMSprop", {"lr": 0.005, "alpha": 0.9, "momentum": 0.9,
                                              "centered": True, "weight_decay": 0.1},
     {"momentum": 0.5, "centered": False}),
    ("adadelta_default", "Adadelta", {}, {}),
    ("adadelta_tuned", "Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-5, "weight_decay": 0.1},
     {"lr": 0.25}),
]

OPT_STEPS = 6


def optimizer_case(name, cls, defaults, second):
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    shapes = [[3, 4], [5], [2, 3]]
    params = [torch.randn(s, generator=g).requires_grad_() for s in shapes]
    init = [p.detach().clone() for p in params]
    groups = [{"params": params[:2]}, {"params": params[2:], **second}]
    kw = dict(defaults)
    if "betas" in kw:
        kw["betas"] = tuple(kw["betas"])
    opt = getattr(torch.optim, cls)(groups, **kw)
    grads, after = [], []
    for _ in range(OPT_STEPS):
        step_grads = [torch.randn(s, generator=g) for s in shapes]
        for p, gr in zip(params, step_grads):
            p.grad = gr.clone()
        opt.step()
        grads.append([flat(x) for x in step_grads])
        after.append([flat(p) for p in params])
    sd = opt.state_dict()
    state = {}
    for idx, st in sd["state"].items():
        state[str(idx)] = {k: (float(v) if not torch.is_tensor(v) else
                               (float(v.item()) if v.numel() == 1 and v.dim() == 0 else flat(v)))
                           for k, v in st.items()}
    return {
        "name": name, "optimizer": cls, "defaults": defaults, "second_group": second,
        "shapes": shapes, "init": [flat(x) for x in init], "grads": grads, "after": after,
        "state": state,
        "param_groups": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in grp.items()}
                         for grp in sd["param_groups"]],
    }


# ---- learning-rate schedulers ----------------------------------------------------------

SCHED_STEPS = 30


def sched_cases():
    S = torch.optim.lr_scheduler

    def make(opt_cls=torch.optim.SGD, **kw):
        p0, p1 = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
        return opt_cls([{"params": [p0]}, {"params": [p1], "lr": 0.05}], lr=0.1, **kw)

    cases = [
        ("step", {"kind": "StepLR", "step_size": 7, "gamma": 0.5},
         lambda o: S.StepLR(o, step_size=7, gamma=0.5)),
        ("multistep", {"kind": "MultiStepLR", "milestones": [3, 10, 10, 20], "gamma": 0.3},
         lambda o: S.MultiStepLR(o, milestones=[3, 10, 10, 20], gamma=0.3)),
        ("exponential", {"kind": "ExponentialLR", "gamma": 0.9},
         lambda o: S.ExponentialLR(o, gamma=0.9)),
        ("cosine", {"kind": "CosineAnnealingLR", "T_max": 12, "eta_min": 0.001},
         lambda o: S.CosineAnnealingLR(o, T_max=12, eta_min=0.001)),
        ("linear", {"kind": "LinearLR", "start_factor": 0.25, "end_factor": 0.9, "total_iters": 8},
         lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=8)),
        # the lambda the test writes the same way: 0.97 ** epoch / (1 + epoch // 10)
        ("lambda", {"kind": "LambdaLR", "lambda": "0.97 ** epoch / (1 + epoch // 10)"},
         lambda o: S.LambdaLR(o, lambda e: 0.97 ** e / (1 + e // 10))),
        ("onecycle_cos", {"kind": "OneCycleLR", "max_lr": [0.4, 0.2], "total_steps": 31},
         lambda o: S.OneCycleLR(o, max_lr=[0.4, 0.2], total_steps=31)),
        ("onecycle_linear_3phase", {"kind": "OneCycleLR", "max_lr": 0.3, "total_steps": 40,
                                    "pct_start": 0.25, "anneal_strategy": "linear",
                                    "three_phase": True, "div_factor": 10.0,
                                    "final_div_factor": 100.0},
         lambda o: S.OneCycleLR(o, max_lr=0.3, total_steps=40, pct_start=0.25,
                                anneal_strategy="linear", three_phase=True, div_factor=10.0,
                                final_div_factor=100.0)),
        ("sequential_warmup_cosine", {"kind": "SequentialLR", "milestones": [5],
                                      "schedulers": [
                                          {"kind": "LinearLR", "start_factor": 0.1,
                                           "total_iters": 5},
                                          {"kind": "CosineAnnealingLR", "T_max": 25}]},
         lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=5),
                                      S.CosineAnnealingLR(o, T_max=25)], milestones=[5])),
    ]
    out = []
    for name, spec, build in cases:
        for opt_name, opt_cls, kw in [("sgd", torch.optim.SGD, {"momentum": 0.9}),
                                      ("adam", torch.optim.Adam, {})]:
            if opt_name == "adam" and not name.startswith("onecycle"):
                continue
            opt = make(opt_cls, **kw)
            sched = build(opt)
            lrs = [list(sched.get_last_lr())]
            mom = [[grp["betas"][0] if "betas" in grp else grp["momentum"]
                    for grp in opt.param_groups]]
            for _ in range(SCHED_STEPS):
                opt.step()
                sched.step()
                lrs.append(list(sched.get_last_lr()))
                mom.append([grp["betas"][0] if "betas" in grp else grp["momentum"]
                            for grp in opt.param_groups])
            out.append({"name": f"{name}/{opt_name}", "optimizer": opt_name,
                        "spec": spec, "lrs": lrs, "momentum": mom})
    return out


# ---- losses ----------------------------------------------------------------------------

def loss_cases():
    g = torch.Generator().manual_seed(1234)
    cases = []

    def case(name, fn, inputs, kwargs, grad_of):
        """fn(**inputs, **kwargs); gradients of the inputs named in grad_of, with a
        random upstream gradient for unreduced outputs."""
        ins = {k: v.clone().requires_grad_(k in grad_of) for k, v in inputs.items()}
        out = fn(**ins, **kwargs)
        dy = torch.randn(out.shape, generator=g) if out.dim() > 0 else torch.tensor(1.0)
        out.backward(dy)
        cases.append({
            "name": name, "kwargs": kwargs,
            "inputs": {k: tens(v) for k, v in inputs.items()},
            "out": tens(out), "dy": tens(dy),
            "grads": {k: tens(ins[k].grad) for k in grad_of},
        })

    N, C = 6, 5
    logits = torch.randn(N, C, generator=g) * 2
    logp = F.log_softmax(logits, 1)
    target = torch.tensor([0, 3, 4, -100, 1, 3])
    weight = torch.rand(C, generator=g) + 0.5
    for red in ["none", "mean", "sum"]:
        case(f"nll/{red}", F.nll_loss, {"input": logp, "target": target},
             {"reduction": red}, ["input"])
        case(f"nll_weight/{red}", F.nll_loss, {"input": logp, "target": target, "weight": weight},
             {"reduction": red}, ["input"])
    logits3 = torch.randn(3, C, 4, generator=g)
    target3 = torch.randint(0, C, (3, 4), generator=g)
    target3[1, 2] = 2
    case("nll_3d/mean", F.nll_loss, {"input": F.log_softmax(logits3, 1), "target": target3},
         {"reduction": "mean", "ignore_index": 2}, ["input"])
    for red in ["none", "mean", "sum"]:
        case(f"ce/{red}", F.cross_entropy, {"input": logits, "target": target},
             {"reduction": red}, ["input"])
        case(f"ce_smooth_weight/{red}", F.cross_entropy,
             {"input": logits, "target": target, "weight": weight},
             {"reduction": red, "label_smoothing": 0.1}, ["input"])
        probs = F.softmax(torch.randn(N, C, generator=g), 1)
        case(f"ce_probs/{red}", F.cross_entropy, {"input": logits, "target": probs},
             {"reduction": red}, ["input"])
        case(f"ce_probs_smooth_weight/{red}", F.cross_entropy,
             {"input": logits, "target": probs, "weight": weight},
             {"reduction": red, "label_smoothing": 0.2}, ["input"])
    case("ce_3d_smooth/mean", F.cross_entropy, {"input": logits3, "target": target3},
         {"reduction": "mean", "label_smoothing": 0.15}, ["input"])
    x = torch.randn(4, 7, generator=g)
    y = torch.randn(4, 7, generator=g)
    y[0, :3] = x[0, :3] + torch.tensor([0.1, -0.3, 0.0])  # inside smooth L1's quadratic zone
    for red in ["none", "mean", "sum"]:
        case(f"mse/{red}", F.mse_loss, {"input": x, "target": y}, {"reduction": red},
             ["input", "target"])
        case(f"l1/{red}", F.l1_loss, {"input": x, "target": y}, {"reduction": red},
             ["input", "target"])
        for beta in [1.0, 0.5]:
            case(f"smooth_l1_b{beta}/{red}", F.smooth_l1_loss, {"input": x, "target": y},
                 {"reduction": red, "beta": beta}, ["input", "target"])
    z = torch.randn(4, 3, generator=g) * 3
    prob = torch.sigmoid(z)
    t = torch.rand(4, 3, generator=g)
    t[0] = torch.tensor([0.0, 1.0, 1.0])
    w = torch.rand(4, 3, generator=g) + 0.5
    pw = torch.tensor([0.5, 2.0, 3.0])
    for red in ["none", "mean", "sum"]:
        case(f"bce/{red}", F.binary_cross_entropy, {"input": prob, "target": t},
             {"reduction": red}, ["input"])
        case(f"bce_weight/{red}", F.binary_cross_entropy, {"input": prob, "target": t, "weight": w},
             {"reduction": red}, ["input"])
        case(f"bce_logits/{red}", F.binary_cross_entropy_with_logits, {"input": z, "target": t},
             {"reduction": red}, ["input"])
        case(f"bce_logits_weight_pos/{red}", F.binary_cross_entropy_with_logits,
             {"input": z, "target": t, "weight": w, "pos_weight": pw},
             {"reduction": red}, ["input"])
    return cases


# ---- random constructors ---------------------------------------------------------------

def random_cases():
    out = []
    for seed in [0, 7, 123456789]:
        torch.manual_seed(seed)
        draws = [
            {"op": "rand", "shape": [3, 5], "values": flat(torch.rand(3, 5))},
            {"op": "randn", "shape": [40], "values": flat(torch.randn(40))},
            {"op": "randint", "low": 0, "high": 10, "shape": [7],
             "values": flat(torch.randint(0, 10, (7,)))},
            {"op": "randint", "low": -5, "high": 5, "shape": [3, 4],
             "values": flat(torch.randint(-5, 5, (3, 4)))},
            {"op": "rand", "shape": [17], "values": flat(torch.rand(17))},
            {"op": "randn", "shape": [2, 9], "values": flat(torch.randn(2, 9))},
        ]
        out.append({"seed": seed, "draws": draws})
    return out


# ---- len(DataLoader) ----------------------------------------------------------------

def loader_cases():
    from torch.utils.data import DataLoader, DistributedSampler
    out = []
    for n in [0, 1, 10, 17, 64]:
        for batch in [1, 3, 8]:
            for drop_last in [False, True]:
                out.append({"n": n, "batch_size": batch, "drop_last": drop_last, "sampler": None,
                            "len": len(DataLoader(range(n), batch_size=batch, drop_last=drop_last))})
                if n == 0:
                    continue
                for replicas, rank, sdrop in [(3, 0, False), (3, 2, True), (4, 1, False)]:
                    sampler = DistributedSampler(range(n), num_replicas=replicas, rank=rank,
                                                 drop_last=sdrop)
                    out.append({"n": n, "batch_size": batch, "drop_last": drop_last,
                                "sampler": {"num_replicas": replicas, "rank": rank,
                                            "drop_last": sdrop},
                                "len": len(DataLoader(range(n), batch_size=batch,
                                                      drop_last=drop_last, sampler=sampler))})
    return out


# ---- pixel normalisation (torchvision's ToTensor then Normalize, on every byte value) -

def pixel_cases():
    x = torch.arange(256, dtype=torch.uint8).float().div(255)  # ToTensor
    out = [{"normalize": None, "values": flat(x)}]
    for mean, std in [(0.286, 0.353), (0.5, 0.5), (0.1307, 0.3081)]:
        m = torch.as_tensor([mean], dtype=torch.float32)
        sd = torch.as_tensor([std], dtype=torch.float32)
        out.append({"normalize": {"mean": mean, "std": std},
                    "values": flat(x.clone().sub_(m).div_(sd))})  # Normalize's arithmetic
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="fixtures/torch_api")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    files = {
        "optimizers.json": {"torch": torch.__version__, "steps": OPT_STEPS,
                            "cases": [optimizer_case(*c) for c in OPTIMIZER_CASES]},
        "lr_schedulers.json": {"torch": torch.__version__, "steps": SCHED_STEPS,
                               "cases": sched_cases()},
        "losses.json": {"torch": torch.__version__, "cases": loss_cases()},
        "random.json": {"torch": torch.__version__, "cases": random_cases()},
        "loader_lengths.json": {"torch": torch.__version__, "cases": loader_cases()},
        "pixels.json": {"torch": torch.__version__, "cases": pixel_cases()},
    }
    for name, data in files.items():
        with open(os.path.join(a.out, name), "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {os.path.join(a.out, name)}")


if __name__ == "__main__":
    main()
