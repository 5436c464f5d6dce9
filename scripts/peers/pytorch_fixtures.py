"""Makes the PyTorch reference fixtures of fixtures/pytorch/ (their README.md is the full
description of every file): DistributedSampler and randperm cases, the toy MLP trained five
ways and under 2-rank DDP (gloo), the GPT-mini's init, gradients and 10 AdamW steps, and
torch.save checkpoints with safetensors twins, then manifest.json.

  /usr/bin/python3 scripts/peers/pytorch_fixtures.py --out DIR [--seed-offset N] [--only a,b]
  /usr/bin/python3 scripts/peers/pytorch_fixtures.py --compare DIR_A DIR_B

Needs Debian's python3-torch (1.13) and numpy. Everything runs on one thread (the bits of a
matmul depend on the thread count). --seed-offset N adds N to every seed (another set made the
same way, for verification; the tests read seeds and sizes from the files). --only limits the
groups: sampler, randperm, toy, ddp, gpt, ckpt (the manifest is always rewritten). --compare
checks two fixture folders for the same content: every JSON value and every tensor equal (the
legacy .pt file's bytes change on every run; its tensors are compared through torch.load).
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse
import hashlib
import json
import math
import socket
import struct
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
TORCH_VERSION = torch.__version__


# ---- writing files -------------------------------------------------------------------------

ST_DTYPES = {torch.float32: ("F32", 4), torch.int64: ("I64", 8)}


def write_safetensors(path, tensors, metadata=None):
    """safetensors with the layout of the README: tensors by descending element size, then
    name; JSON header (metadata first) padded with spaces to a multiple of 8."""
    items = sorted(tensors.items(), key=lambda kv: (-ST_DTYPES[kv[1].dtype][1], kv[0]))
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in items:
        t = t.detach().contiguous()
        data = t.numpy().tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        dtype = {"F32": torch.float32, "I64": torch.int64}[e["dtype"]]
        buf = bytearray(raw[8 + n + b:8 + n + end])
        out[name] = torch.frombuffer(buf, dtype=dtype).reshape(e["shape"]) if buf else \
            torch.empty(e["shape"], dtype=dtype)
    return out, meta


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


# ---- 1. sampler.json, 2. randperm.json -----------------------------------------------------

def make_sampler(out, off):
    from torch.utils.data import DistributedSampler
    lines = []
    for n in (1, 7, 10, 1000, 10001):
        for ws in (1, 2, 3, 8):
            for seed in ((42,) if n == 10001 else (0, 42)):
                for epoch in ((0, 1) if n == 10001 else (0, 1, 7)):
                    for shuffle in (True, False):
                        for drop_last in (True, False):
                            indices = []
                            for r in range(ws):
                                s = DistributedSampler(range(n), num_replicas=ws, rank=r, shuffle=shuffle,
                                                       seed=seed + off, drop_last=drop_last)
                                s.set_epoch(epoch)
                                indices.append(list(iter(s)))
                            case = {"n": n, "num_replicas": ws, "seed": seed + off, "epoch": epoch,
                                    "shuffle": shuffle, "drop_last": drop_last, "num_samples": s.num_samples,
                                    "total_size": s.total_size, "indices": indices}
                            lines.append("  " + json.dumps(case, separators=(",", ":")))
    head = {"torch_version": TORCH_VERSION,
            "description": "torch.utils.data.DistributedSampler(range(n), num_replicas, rank, shuffle, seed, "
                           "drop_last) after set_epoch(epoch); indices[r] = list(iter(sampler)) for rank r"}
    text = "{\n" + "".join(f" {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items())
    text += ' "cases": [\n' + ",\n".join(lines) + "\n ]\n}\n"
    with open(os.path.join(out, "sampler.json"), "w") as f:
        f.write(text)


def make_randperm(out, off):
    seeds = [s + off for s in (0, 1, 42, 12345)]
    perms = [{"n": n, "seed": s, "perm": torch.randperm(n, generator=torch.Generator().manual_seed(s)).tolist()}
             for s in seeds for n in (1, 2, 5, 10, 100, 1000, 10001)]
    gens = []
    for s in seeds:
        g = torch.Generator().manual_seed(s)
        full = torch.empty(10, dtype=torch.int64).random_(-2 ** 63, None, generator=g).tolist()
        u32 = []
        for v in full:
            u = v & 0xFFFFFFFFFFFFFFFF
            u32 += [u >> 32, u & 0xFFFFFFFF]
        g = torch.Generator().manual_seed(s)
        randint = torch.randint(0, 2 ** 31 - 1, (20,), generator=g).tolist()
        g = torch.Generator().manual_seed(s)
        rand = torch.rand(20, generator=g).tolist()
        gens.append({"seed": s, "mt19937_u32": u32, "full_range_int64": full,
                     "randint_0_2147483647": randint, "rand_float32": rand})
    write_json(os.path.join(out, "randperm.json"),
               {"torch_version": TORCH_VERSION, "randperm": perms, "generator": gens})


# ---- 3. the toy MLP ------------------------------------------------------------------------

def toy_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 2))


def toy_data(seed):
    torch.manual_seed(seed)
    X = torch.randn(1024, 128)
    y = torch.randint(0, 2, (1024,))
    return X, y


def grad_norm64(model):
    return math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()))


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_toy(variant, init, X, y, steps=32, on_step=None):
    """One variant of README section 3 from the init weights; returns (model, record)."""
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 2))
    model.load_state_dict(init)
    model.train()
    if variant == "b":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    rec = {"losses": [], "grad_norms": []}
    if variant == "c":
        rec["clip_grad_norm_returned"] = []
    if variant == "d":
        rec["micro_losses"] = []
    for s in range(steps):
        b = s % 16
        xb, yb = X[64 * b:64 * b + 64], y[64 * b:64 * b + 64]
        opt.zero_grad()
        if variant == "d":
            micro, total = [], 0.0
            for m in range(4):
                loss_m = loss_fn(model(xb[16 * m:16 * m + 16]), yb[16 * m:16 * m + 16])
                (loss_m / 4).backward()
                micro.append(loss_m.item())
                total += (loss_m / 4).item()
            rec["micro_losses"].append(micro)
            rec["losses"].append(total)
        elif variant == "e":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(xb), yb)
            loss.backward()
            rec["losses"].append(loss.item())
        else:
            loss = loss_fn(model(xb), yb)
            loss.backward()
            rec["losses"].append(loss.item())
        rec["grad_norms"].append(grad_norm64(model))
        if variant == "c":
            rec["clip_grad_norm_returned"].append(
                float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        if on_step is not None:
            on_step(s, model, opt)
        opt.step()
    return model, rec, opt


TOY_DESC = {
    "a": "AdamW(lr=1e-3) defaults",
    "b": "SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)",
    "c": "AdamW(lr=1e-3) + clip_grad_norm_(params, 1.0) before each step",
    "d": "AdamW(lr=1e-3), 4 micro-batches of 16 per step, each loss / 4",
    "e": "AdamW(lr=1e-3), forward + loss under torch.autocast('cpu', dtype=torch.bfloat16)",
}


def max_abs(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def make_toy(out, off):
    init_seed, data_seed = 1 + off, 0 + off
    init = state(toy_model(init_seed))
    X, y = toy_data(data_seed)
    write_safetensors(os.path.join(out, "toy_mlp_init.safetensors"), init)
    write_safetensors(os.path.join(out, "toy_mlp_data.safetensors"), {"X": X, "y": y})
    variants, finals = {}, {}
    for v in "abcde":
        extra = {}

        def first_step(s, model, opt, extra=extra):
            if s == 0:
                extra["grads"] = {n: p.grad.detach().clone() for n, p in model.named_parameters()}

        model, rec, opt = train_toy(v, init, X, y, on_step=first_step if v == "a" else None)
        finals[v] = state(model)
        variants[v] = {"desc": TOY_DESC[v], **rec}
        write_safetensors(os.path.join(out, f"toy_mlp_{v}_final.safetensors"), finals[v])
        if v == "a":
            write_safetensors(os.path.join(out, "toy_mlp_a_step1_grads.safetensors"), extra["grads"])
            one, _, _ = train_toy("a", init, X, y, steps=1)
            write_safetensors(os.path.join(out, "toy_mlp_a_step1.safetensors"), state(one))
    la = variants["a"]["losses"]
    summary = {
        "max_abs_loss_diff_e_vs_a": max(abs(p - q) for p, q in zip(variants["e"]["losses"], la)),
        "max_abs_weight_diff_e_vs_a": max_abs(finals["e"], finals["a"]),
        "max_abs_loss_diff_d_vs_a": max(abs(p - q) for p, q in zip(variants["d"]["losses"], la)),
        "max_abs_weight_diff_d_vs_a": max_abs(finals["d"], finals["a"]),
    }
    write_json(os.path.join(out, "toy_mlp.json"), {
        "torch_version": TORCH_VERSION, "init_seed": init_seed, "data_seed": data_seed, "samples": 1024,
        "batch_size": 64, "steps": 32, "variants": variants, "summary": summary})


# ---- 4. the toy MLP under DDP (2 gloo ranks) -----------------------------------------------

def ddp_worker(rank, world, port, off, result_path):
    torch.set_num_threads(1)
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = toy_model(1 + off)
    init = state(model)
    X, y = toy_data(0 + off)
    ddp = DistributedDataParallel(model)
    ds = TensorDataset(X, y)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(ds, batch_size=32, sampler=sampler)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    # the single-process twin of variant a, run in lockstep
    twin = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 2))
    twin.load_state_dict(init)
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    losses, per_step, first_batch, grad_diff1, step = [], [], None, None, 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if first_batch is None:
                first_batch = list(sampler)[:32]
            opt.zero_grad()
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            losses.append(loss.item())
            b = step % 16
            twin_opt.zero_grad()
            loss_fn(twin(X[64 * b:64 * b + 64]), y[64 * b:64 * b + 64]).backward()
            if step == 0:
                grad_diff1 = max(float((p.grad - q.grad).abs().max())
                                 for p, q in zip(ddp.module.parameters(), twin.parameters()))
            opt.step()
            twin_opt.step()
            per_step.append(max_abs(state(ddp.module), state(twin)))
            step += 1
    final = state(ddp.module)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"losses": losses, "first": first_batch, "final": final})
    if rank == 0:
        torch.save({"ranks": gathered, "twin": state(twin), "per_step": per_step, "grad_diff1": grad_diff1},
                   result_path)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ddp(out, off):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ddp.pt")
        mp.spawn(ddp_worker, args=(2, free_port(), off, path), nprocs=2, join=True)
        r = torch.load(path)
    ranks = r["ranks"]
    final0, twin = ranks[0]["final"], r["twin"]
    a_final, _ = read_safetensors(os.path.join(out, "toy_mlp_a_final.safetensors"))
    a_losses = json.load(open(os.path.join(out, "toy_mlp.json")))["variants"]["a"]["losses"]
    mean = [(p + q) / 2 for p, q in zip(ranks[0]["losses"], ranks[1]["losses"])]
    assert max_abs(twin, a_final) == 0, "the lockstep twin must match toy_mlp_a_final bit for bit"
    write_safetensors(os.path.join(out, "toy_mlp_ddp_final.safetensors"), final0)
    write_json(os.path.join(out, "toy_mlp_ddp.json"), {
        "torch_version": TORCH_VERSION, "world_size": 2, "backend": "gloo", "per_rank_batch": 32, "epochs": 2,
        "steps": 32,
        "rank_losses": [ranks[0]["losses"], ranks[1]["losses"]],
        "global_losses_mean_of_ranks": mean,
        "first_batch_indices": [ranks[0]["first"], ranks[1]["first"]],
        "max_abs_diff_rank0_vs_rank1_final": max_abs(final0, ranks[1]["final"]),
        "max_abs_diff_vs_single_process_a_final": max_abs(final0, a_final),
        "max_abs_diff_vs_single_process_a_final_per_tensor":
            {k: float((final0[k] - a_final[k]).abs().max()) for k in sorted(final0)},
        "max_abs_diff_vs_single_process_a_per_step": r["per_step"],
        "max_abs_grad_diff_vs_single_process_a_step1": r["grad_diff1"],
        # the largest difference relative to the largest weight
        "max_rel_diff_vs_single_process_a_final": max_abs(final0, a_final) / max(float(a_final[k].abs().max()) for k in a_final),
        "max_abs_diff_global_loss_vs_single_process_a": max(abs(p - q) for p, q in zip(mean, a_losses)),
    })


# ---- 5. GPT-mini ---------------------------------------------------------------------------

CFG = {"vocab_size": 256, "block_size": 64, "n_layer": 2, "n_head": 4, "n_embd": 64, "bias": True,
       "dropout": 0.0, "layernorm_eps": 1e-05, "gelu": "tanh", "tied_lm_head": True}


class LayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        C, T = CFG["n_embd"], CFG["block_size"]
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.size()
        H = CFG["n_head"]
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        C = CFG["n_embd"]
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        C = CFG["n_embd"]
        self.ln_1 = LayerNorm(C)
        self.attn = CausalSelfAttention()
        self.ln_2 = LayerNorm(C)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        V, T, C = CFG["vocab_size"], CFG["block_size"], CFG["n_embd"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
            h=nn.ModuleList([Block() for _ in range(CFG["n_layer"])]), ln_f=LayerNorm(C)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * CFG["n_layer"]))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss


def gpt_mini(off):
    torch.manual_seed(2 + off)
    model = GPT()
    torch.manual_seed(3 + off)
    tokens = torch.randint(0, 256, (4, 65))
    return model, tokens[:, :64].contiguous(), tokens[:, 1:].contiguous()


def make_gpt(out, off):
    model, x, y = gpt_mini(off)
    model.train()
    named = dict(model.named_parameters())
    params = {n: p.detach().clone() for n, p in named.items()}
    write_safetensors(os.path.join(out, "gpt_mini_params.safetensors"), params)
    logits, loss = model(x, y)
    loss.backward()
    write_safetensors(os.path.join(out, "gpt_mini_io.safetensors"), {"x": x, "y": y, "logits": logits.detach()})
    write_safetensors(os.path.join(out, "gpt_mini_grads.safetensors"), {n: p.grad.clone() for n, p in named.items()})
    gnorm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in named.values()))
    # oneDNN off: torch 1.13 sends bf16 matmuls to oneDNN only on CPUs with AVX-512 (BW, VL, DQ),
    # whose sums round differently from its own bf16 GEMM, so the value would depend on the machine
    # that made it (5.562043190 against 5.562042713 on a Zen 5); with it off, every machine agrees.
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), torch.backends.mkldnn.flags(enabled=False):
        _, loss_bf16 = model(x, y)
    adamw = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        _, l = model(x, y)
        l.backward()
        losses.append(l.item())
        opt.step()
    _, after = model(x, y)
    write_safetensors(os.path.join(out, "gpt_mini_final.safetensors"),
                      {n: p.detach().clone() for n, p in model.named_parameters()})
    write_json(os.path.join(out, "gpt_mini.json"), {
        "torch_version": TORCH_VERSION, "config": CFG, "build_seed": 2 + off, "data_seed": 3 + off, "B": 4,
        "T": 64, "param_names": list(named), "n_params": sum(p.numel() for p in named.values()),
        "loss": loss.item(), "grad_norm": gnorm, "loss_autocast_bf16": loss_bf16.item(), "adamw": adamw,
        "train_losses": losses, "loss_after_training": after.item()})


# ---- 6. checkpoints ------------------------------------------------------------------------

def make_ckpt(out, off):
    init, _ = read_safetensors(os.path.join(out, "toy_mlp_init.safetensors"))
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 2))
    model.load_state_dict(init)
    sd = model.state_dict()
    torch.save(sd, os.path.join(out, "ckpt_state_dict.pt"))
    write_safetensors(os.path.join(out, "ckpt_state_dict.safetensors"), state(model))
    torch.save(sd, os.path.join(out, "ckpt_state_dict_legacy.pt"), _use_new_zipfile_serialization=False)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        torch.save(ddp.state_dict(), os.path.join(out, "ckpt_ddp_state_dict.pt"))
        write_safetensors(os.path.join(out, "ckpt_ddp_state_dict.safetensors"),
                          {k: v.detach().clone() for k, v in ddp.state_dict().items()})
        dist.destroy_process_group()
    X, y = toy_data(0 + off)
    trained, _, opt = train_toy("a", init, X, y, steps=3)
    full = {"epoch": 3, "model_state_dict": trained.state_dict(), "optimizer_state_dict": opt.state_dict()}
    torch.save(full, os.path.join(out, "ckpt_full.pt"))
    flat = {f"model_state_dict.{k}": v.detach().clone() for k, v in trained.state_dict().items()}
    osd = opt.state_dict()
    for i, st in osd["state"].items():
        for k, v in st.items():
            flat[f"optimizer_state_dict.state.{i}.{k}"] = v.detach().clone()
    groups = json.dumps([{k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(g.items())}
                         for g in osd["param_groups"]])
    write_safetensors(os.path.join(out, "ckpt_full.safetensors"), flat,
                      metadata={"epoch": "3", "param_groups": groups})
    gpt, _, _ = gpt_mini(off)
    torch.save(gpt.state_dict(), os.path.join(out, "ckpt_gpt_mini_state_dict.pt"))


# ---- 7. manifest, and comparing two sets ---------------------------------------------------

LEGACY = "ckpt_state_dict_legacy.pt"


def make_manifest(out):
    files = []
    for name in sorted(os.listdir(out)):
        if name == "manifest.json":
            continue
        with open(os.path.join(out, name), "rb") as f:
            data = f.read()
        files.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    write_json(os.path.join(out, "manifest.json"), {
        "torch_version": TORCH_VERSION,
        "deterministic_exceptions": {LEGACY: "legacy torch.save format names storages by their memory address "
                                             "(str(storage._cdata)); bytes and sha256 change every run, the tensors do not"},
        "files": files})


def tensors_of(path):
    if path.endswith(".safetensors"):
        return read_safetensors(path)
    obj = torch.load(path)

    def flat(prefix, o, acc):
        if isinstance(o, dict):
            for k, v in o.items():
                flat(f"{prefix}{k}.", v, acc)
        elif isinstance(o, torch.Tensor):
            acc[prefix[:-1]] = o
        else:
            acc[prefix[:-1]] = o
        return acc
    return flat("", obj, {}), None


def compare(a_dir, b_dir):
    """Every file of a_dir against b_dir: JSON values equal, tensors equal bit for bit."""
    problems = []
    for name in sorted(os.listdir(a_dir)):
        if name in ("manifest.json", "README.md"):
            continue
        a, b = os.path.join(a_dir, name), os.path.join(b_dir, name)
        if not os.path.exists(b):
            problems.append(f"{name}: missing in {b_dir}")
            continue
        if name.endswith(".json"):
            ja, jb = json.load(open(a)), json.load(open(b))
            ja.pop("description", None), jb.pop("description", None)
            if ja != jb:
                keys = sorted(k for k in set(ja) | set(jb) if ja.get(k) != jb.get(k))
                problems.append(f"{name}: values differ under {keys}")
            continue
        ta, ma = tensors_of(a)
        tb, mb = tensors_of(b)
        if sorted(ta) != sorted(tb) or ma != mb:
            problems.append(f"{name}: names or metadata differ")
            continue
        for k in ta:
            va, vb = ta[k], tb[k]
            same = (va.dtype == vb.dtype and va.shape == vb.shape and torch.equal(va, vb)) \
                if isinstance(va, torch.Tensor) else va == vb
            if not same:
                problems.append(f"{name}: {k} differs")
        if name != LEGACY and open(a, "rb").read() != open(b, "rb").read():
            problems.append(f"{name}: same tensors, different bytes")
    return problems


GROUPS = {"sampler": make_sampler, "randperm": make_randperm, "toy": make_toy, "ddp": make_ddp,
          "gpt": make_gpt, "ckpt": make_ckpt}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--only", default=",".join(GROUPS))
    ap.add_argument("--compare", nargs=2, metavar="DIR")
    args = ap.parse_args()
    if args.compare:
        problems = compare(*args.compare)
        for p in problems:
            print(p)
        print(f"{len(problems)} difference(s)")
        sys.exit(1 if problems else 0)
    if not args.out:
        ap.error("--out DIR is required (or --compare DIR_A DIR_B)")
    os.makedirs(args.out, exist_ok=True)
    for g in args.only.split(","):
        if g not in GROUPS:
            ap.error(f"--only {g}: not one of {', '.join(GROUPS)}")
        print(f"pytorch_fixtures: {g}", flush=True)
        GROUPS[g](args.out, args.seed_offset)
    make_manifest(args.out)


if __name__ == "__main__":
    main()
