"""PyTorch peer of dtrain's character-level GPT workload: the model, data and
recipe of scripts/peers/pytorch/w2_gpt.py (copied here so the repository stands
alone; keep the two in step), printing the loss of every step, so dtrain's
loss curve on the same setup can be laid over PyTorch's.

  OMP_NUM_THREADS=1 /usr/bin/python3 scripts/peers/char_gpt.py [--steps 200]
  torchrun --nproc_per_node 2 --standalone scripts/peers/char_gpt.py
(On Debian 12 use scripts/peers/pytorch/torchrun_fix.py in place of torchrun.)

Model: vocab 256, block 128, 4 layers, 4 heads, n_embd 128, pre-LayerNorm,
fused qkv Linear, GELU(tanh), MLP 4x, lm_head tied to the token embedding,
biases on, dropout 0; torch.manual_seed(1337) then nanoGPT init (N(0, 0.02),
residual projections c_proj N(0, 0.02/sqrt(2*n_layer))).
Data: every file of /usr/share/games/fortunes ($DTRAIN_CHAR_CORPUS overrides)
except *.dat and *.u8, sorted by name, concatenated as bytes; first
int(0.9 * size) bytes train, the rest held out. Rank r draws its windows with
torch.Generator().manual_seed(1000 + r): offsets
torch.randint(len(train) - 129, (batch,)), input bytes 0..127, target 1..128.
Recipe: batch 16 per rank, AdamW(lr=3e-4) with torch defaults otherwise, no
clipping, no schedule, fp32.

Prints JSON lines (rank 0 only): {"config": ...}, then {"step", "loss"} for
every step (loss = mean over ranks of each rank's batch loss), then
{"eval_loss"}: fp32 loss of the trained model on 64 held-out windows drawn
with seed 4242 (as w2_gpt.py), plus wall seconds.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

VOCAB, BLOCK, N_LAYER, N_HEAD, N_EMBD = 256, 128, 4, 4, 128
CORPUS_DIR = os.environ.get("DTRAIN_CHAR_CORPUS", "/usr/share/games/fortunes")


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        # A plain tensor, not a buffer, so DDP does not broadcast it every step.
        self.mask = torch.tril(torch.ones(BLOCK, BLOCK, dtype=torch.bool)).view(1, 1, BLOCK, BLOCK)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Embedding(BLOCK, N_EMBD)
        self.h = nn.ModuleList([Block() for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * N_LAYER))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.size()
        x = self.wte(idx) + self.wpe(torch.arange(0, T, dtype=torch.long))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def load_corpus():
    names = sorted(n for n in os.listdir(CORPUS_DIR)
                   if not n.endswith((".dat", ".u8"))
                   and os.path.isfile(os.path.join(CORPUS_DIR, n)))
    raw = b"".join(open(os.path.join(CORPUS_DIR, n), "rb").read() for n in names)
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.long)
    n = int(0.9 * len(data))
    return data[:n], data[n:], len(names)


def get_batch(data, batch, gen):
    ix = torch.randint(len(data) - (BLOCK + 1), (batch,), generator=gen)
    w = torch.stack([data[i:i + BLOCK + 1] for i in ix.tolist()])
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16, help="per rank")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if distributed:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", init_method="env://")
    else:
        rank, world = 0, 1
    torch.set_num_threads(args.threads or int(os.environ.get("OMP_NUM_THREADS", "1")))

    train, val, nfiles = load_corpus()
    torch.manual_seed(1337)
    raw_model = GPT()
    model = DDP(raw_model) if distributed else raw_model
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(1000 + rank)
    if rank == 0:
        print(json.dumps({"config": {
            "world_size": world, "threads": torch.get_num_threads(), "batch_per_rank": args.batch,
            "steps": args.steps, "corpus_bytes": len(train) + len(val), "corpus_files": nfiles,
            "params": sum(p.numel() for p in raw_model.parameters()), "torch": torch.__version__,
        }}), flush=True)

    t0 = time.time()
    for step in range(1, args.steps + 1):
        x, y = get_batch(train, args.batch, gen)
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        if distributed:
            dist.all_reduce(mean)
            mean /= world
        if rank == 0:
            print(json.dumps({"step": step, "loss": mean.item()}), flush=True)
    seconds = time.time() - t0

    if rank == 0:
        xs, ys = get_batch(val, 64, torch.Generator().manual_seed(4242))
        raw_model.eval()
        with torch.no_grad():
            eval_loss = sum(raw_model(xs[i:i + 16], ys[i:i + 16]).item() for i in range(0, 64, 16)) / 4
        print(json.dumps({"eval_loss": eval_loss, "train_seconds": seconds}), flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
