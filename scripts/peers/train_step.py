"""PyTorch peer of scripts/bench_train.ts: times single-process training steps
(forward + backward + AdamW) of the toy classifier, GPT-mini or the small CNN,
one thread.

  /usr/bin/python3 scripts/peers/train_step.py toy|gpt|gpt-bf16|cnn STEPS
(gpt-bf16: GPT-mini with the forward under torch.autocast("cpu", dtype=torch.bfloat16).)
Prints one JSON line: {"model", "steps", "seconds", "cpu_seconds",
"steps_per_s", "loss"} (cpu_seconds: this process's CPU time over the steps).
"""
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)


class Block(nn.Module):
    def __init__(self, C, H, T):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.H = H
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, H, T) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    which, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    low = which == "gpt-bf16"
    if which == "toy":
        model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 2))
        x, y = torch.randn(64, 128), torch.randint(0, 2, (64,))
        step_loss = lambda: F.cross_entropy(model(x), y)  # noqa: E731
    elif which == "cnn":
        model = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
        x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
        step_loss = lambda: F.cross_entropy(model(x), y)  # noqa: E731
    else:
        model = GPT(256, 128, 4, 4, 128)
        x = torch.randint(0, 256, (16, 128))
        y = torch.randint(0, 256, (16, 128))
        step_loss = lambda: model(x, y)  # noqa: E731
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            loss = step_loss()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        step()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        loss = step()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"model": which, "steps": steps, "seconds": dt, "cpu_seconds": cpu, "steps_per_s": steps / dt,
                      "loss": loss}))


main()
