"""gpu-check step 6, PyTorch side: the attention of scripts/gpu_check/bench_attention.ts
(causal, bf16, batch 8 x 1024 tokens, 12 heads of 64, forward + backward) with
torch.nn.functional.scaled_dot_product_attention as nanoGPT calls it: q, k and v
split from one (B, T, 3C) tensor and viewed as (B, H, T, D). Prints a RESULT line
(JSON: milliseconds per forward + backward, TFLOP/s counted as FlashAttention counts
them) and a SUMMARY line.

    python3 scripts/gpu_check/bench_attention_torch.py [--batch 8] [--seq 1024] [--iters 20]
"""
import argparse
import json

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--head-dim", type=int, default=64)
p.add_argument("--iters", type=int, default=20)
p.add_argument("--warmup", type=int, default=3)
a = p.parse_args()
B, T, H, D = a.batch, a.seq, a.heads, a.head_dim
C = H * D
dev = torch.device("cuda")
torch.manual_seed(0)
qkv = torch.randn(B, T, 3 * C, device=dev, dtype=torch.bfloat16, requires_grad=True)
dout = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16)


def fwd_bwd():
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (x.view(B, T, H, D).transpose(1, 2) for x in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    qkv.grad = None
    y.backward(dout)


for _ in range(a.warmup):
    fwd_bwd()
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(a.iters):
    fwd_bwd()
end.record()
torch.cuda.synchronize()
ms = start.elapsed_time(end) / a.iters
tflops = 3.5 * (4 * B * H * T * T * D) / 2 / (ms / 1000) / 1e12
print(f"bench_attention_torch: {torch.cuda.get_device_name()}, torch {torch.__version__}, B {B} T {T} H {H} D {D}")
result = {"impl": "torch-sdpa", "ms": ms, "tflops": tflops, "B": B, "T": T, "H": H, "D": D}
print("RESULT " + json.dumps(result, separators=(",", ":")))  # run.sh reads "ms":<number>
print(f"SUMMARY torch SDPA fwd+bwd {ms:.3f} ms ({tflops:.1f} TFLOP/s)")
