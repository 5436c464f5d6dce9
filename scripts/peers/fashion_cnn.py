"""PyTorch peer of examples/fashion_cnn.ts: the same CNN, data order, optimizer
and schedule, so the two test accuracies can be set side by side.

  /usr/bin/python3 scripts/peers/fashion_cnn.py [--epochs 3] [--world 2] [--threads 1]

Recipe (the contract examples/fashion_cnn.ts follows):
  data     Fashion-MNIST as in scripts/peers/fashion_mnist.py (normalised
           pixels), reshaped to (N, 1, 28, 28).
  model    torch.manual_seed(0), then Sequential(Conv2d(1, 32, 3, padding=1),
           BatchNorm2d(32), ReLU, MaxPool2d(2), Conv2d(32, 64, 3, padding=1),
           BatchNorm2d(64), ReLU, MaxPool2d(2), Flatten, Linear(3136, 10)),
           PyTorch's default init.
  ranks    dtrain runs --world ranks with SyncBatchNorm and DDP. torch 1.13's
           SyncBatchNorm refuses CPU tensors, so this peer runs one process on
           the ranks' combined batch, which is the same computation: at step i
           it takes batch i of every rank's DistributedSampler(shuffle=True,
           seed=0, set_epoch(e)) — 64 samples each — concatenated in rank
           order; batch norm over the combined batch is SyncBatchNorm's
           statistics, and the mean loss over it is DDP's averaged gradient.
  optim    AdamW(lr=2e-3) (torch defaults otherwise), the learning rate
           following a cosine from 2e-3 to 0 over all steps of all epochs
           (dtrain's warmupCosineLr with no warmup), stepped after each step.
  loss     F.cross_entropy.
  eval     after each epoch, eval mode, accuracy (argmax) on all 10000 test images.

Prints one JSON line per epoch: {"epoch", "train_loss", "test_accuracy", "train_seconds"}.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from fashion_mnist import DEFAULT_DIR, load_split  # noqa: E402

BATCH_PER_RANK = 64
LR = 2e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.environ.get("DTRAIN_FASHION_MNIST", DEFAULT_DIR))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--world", type=int, default=2, help="ranks of the dtrain run being mirrored")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(args.threads)
    train_x, train_y = (torch.from_numpy(a) for a in load_split(args.dir, "train"))
    test_x, test_y = (torch.from_numpy(a) for a in load_split(args.dir, "test"))
    train_x, test_x = train_x.view(-1, 1, 28, 28), test_x.view(-1, 1, 28, 28)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
    samplers = [DistributedSampler(range(len(train_x)), num_replicas=args.world, rank=r, shuffle=True, seed=0)
                for r in range(args.world)]
    steps_per_epoch = math.ceil(len(samplers[0]) / BATCH_PER_RANK)
    total = steps_per_epoch * args.epochs
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    for epoch in range(args.epochs):
        for s in samplers:
            s.set_epoch(epoch)
        orders = [list(s) for s in samplers]
        model.train()
        t0 = time.perf_counter()
        loss_sum, seen = 0.0, 0
        for i in range(steps_per_epoch):
            idx = torch.tensor([j for o in orders for j in o[i * BATCH_PER_RANK:(i + 1) * BATCH_PER_RANK]])
            x, y = train_x[idx], train_y[idx]
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item() * len(idx)
            seen += len(idx)
        seconds = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
                          for i in range(0, len(test_x), 1000))
        print(json.dumps({"epoch": epoch, "train_loss": round(loss_sum / seen, 4),
                          "test_accuracy": round(correct / len(test_x), 4), "train_seconds": round(seconds, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
