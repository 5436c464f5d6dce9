"""gpu-check step 5, PyTorch side: the same GPT-2-124M-shaped training step as
scripts/gpu_check/bench_gpt.ts (nanoGPT's model, bf16 autocast, AdamW, random
tokens) in PyTorch eager mode (no torch.compile), for a side-by-side
tokens/s and MFU. Attention is F.scaled_dot_product_attention (flash) by
default, as nanoGPT uses it; --attn manual runs the explicit softmax path
that dtrain runs.

    python3 scripts/gpu_check/bench_gpt_torch.py [--batch 8] [--steps 10] [--attn sdpa|manual]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, attn):
        super().__init__()
        self.H, self.attn = H, attn
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C, attn):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, attn) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as nanoGPT

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--attn", choices=["sdpa", "manual"], default="sdpa")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    a = p.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    V, L, H, C = 50257, 12, 12, 768
    model = GPT(V, 1024, L, H, C, a.attn).to(dev)
    N = sum(t.numel() for t in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    tokens = torch.randint(0, V, (a.batch, a.seq + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.item()  # waits for the GPU, as dtrain's step does

    for _ in range(a.warmup):
        loss = step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    mean = sum(times) / len(times)
    tps = a.batch * a.seq / mean
    mfu = tps * (6 * N + 6 * L * C * a.seq) / (a.peak_tflops * 1e12)
    print(f"torch {torch.__version__} eager, attention {a.attn}: {N / 1e6:.1f}M parameters, batch {a.batch} x {a.seq}")
    print(f"steps: {a.steps}, mean {mean * 1000:.1f} ms, loss {loss:.4f}; tokens/s {tps:.0f}, MFU {100 * mfu:.1f}%")
    print("RESULT " + json.dumps({"impl": f"torch-{a.attn}", "tokens_per_s": tps, "mfu": mfu, "step_ms": mean * 1000,
                                  "loss": loss, "batch": a.batch, "seq": a.seq}))
    print(f"SUMMARY {tps:.0f} tokens/s, MFU {100 * mfu:.1f}%, {mean * 1000:.1f} ms/step "
          f"(torch {torch.__version__} eager, {a.attn} attention)")


if __name__ == "__main__":
    main()
