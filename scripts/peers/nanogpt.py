"""PyTorch twin of examples/nanogpt.ts: nanoGPT's model.py and train.py loop on
the same token files, the same init and the same batches, printing each
step's loss as JSON lines so the two can be compared step by step.

  /usr/bin/python3 scripts/peers/nanogpt.py --data DIR --steps 5 [--batch 4 ...]

Same as nanoGPT: model (pre-LayerNorm blocks, fused qkv, MLP 4x, lm_head tied
to wte, bias switch, dropout 0), init (torch.manual_seed(seed) before the
model is built; N(0, 0.02), c_proj N(0, 0.02/sqrt(2 n_layer))), AdamW with
weight decay on 2-D parameters only and betas (0.9, 0.95), get_lr (linear
warmup, cosine decay to min_lr), gradient accumulation, clipping at
--grad-clip. Different from nanoGPT, as in dtrain: GELU uses the tanh
approximation (GPT-2's); the batches are drawn per (seed, rank, micro step)
by data/token_windows.ts's generator (token_windows.window_seed), not from the
global generator; f32 only.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from token_windows import window_seed  # noqa: E402

LLMC_MAGIC = 20240520


def open_tokens(path):
    """nanoGPT's raw uint16 file, or llm.c's (1024-byte header), as a memmap."""
    head = np.fromfile(path, dtype=np.int32, count=3)
    if len(head) == 3 and head[0] == LLMC_MAGIC:
        return np.memmap(path, dtype=np.uint16, mode="r", offset=1024, shape=(int(head[2]),))
    return np.memmap(path, dtype=np.uint16, mode="r")


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.n_head, self.n_embd = c.n_head, c.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm with an optional bias."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c.n_embd, c.bias)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c.n_embd, c.bias)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab, c.n_embd),
            wpe=nn.Embedding(c.block, c.n_embd),
            h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=LayerNorm(c.n_embd, c.bias),
        ))
        self.lm_head = nn.Linear(c.n_embd, c.vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(0, T, dtype=torch.long))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def get_lr(it, a):
    if it < a.warmup:
        return a.lr * (it + 1) / (a.warmup + 1)
    if it > a.decay_steps:
        return a.min_lr
    ratio = (it - a.warmup) / (a.decay_steps - a.warmup)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def get_batch(data, a, rank, micro):
    g = torch.Generator().manual_seed(window_seed(a.seed, rank, micro))
    ix = torch.randint(len(data) - a.block, (a.batch,), generator=g)
    x = torch.stack([torch.from_numpy(data[i:i + a.block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + a.block].astype(np.int64)) for i in ix])
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--bias", type=int, default=0)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--min-lr", type=float, default=None)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--decay-steps", type=int, default=None)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args()
    a.min_lr = a.lr / 10 if a.min_lr is None else a.min_lr
    a.decay_steps = a.steps if a.decay_steps is None else a.decay_steps
    torch.set_num_threads(1)
    train = open_tokens(os.path.join(a.data, "train.bin"))

    class C:
        pass

    c = C()
    c.vocab, c.block, c.n_layer, c.n_head, c.n_embd, c.bias = (
        a.vocab, a.block, a.layers, a.heads, a.width, bool(a.bias))
    torch.manual_seed(a.seed)
    model = GPT(c)
    params = [q for q in model.parameters() if q.requires_grad]
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95))
    for it in range(a.steps):
        lr = get_lr(it, a)
        for group in opt.param_groups:
            group["lr"] = lr
        total = 0.0
        for micro in range(a.accum):
            x, y = get_batch(train, a, 0, it * a.accum + micro)
            loss = model(x, y) / a.accum
            loss.backward()
            total += loss.item()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(json.dumps({"step": it, "loss": total, "lr": lr}), flush=True)


if __name__ == "__main__":
    main()
