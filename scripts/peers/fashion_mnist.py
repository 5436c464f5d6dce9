"""PyTorch peer of dtrain's Fashion-MNIST workload: the recipe below is the
contract that dtrain's Fashion-MNIST example mirrors step for step.

  /usr/bin/python3 scripts/peers/fashion_mnist.py [--epochs 3] [--threads 1]
  torchrun --nproc_per_node 2 --standalone scripts/peers/fashion_mnist.py
(On Debian 12 the stock torchrun dies at start; run scripts/peers/pytorch/
torchrun_fix.py with the same arguments instead.)

Recipe:
  data     the four IDX files of Debian's dataset-fashion-mnist
           ($DTRAIN_FASHION_MNIST, else /usr/share/datasets/fashion-mnist;
           plain or .gz). Pixel p (0..255) -> (p / 255 - 0.2860) / 0.3530 in
           float32 (each operation rounded to float32: the training set's
           mean and std, measured 0.28604 / 0.35302). Labels 0..9.
  model    torch.manual_seed(0), then nn.Sequential(Linear(784, 256), ReLU,
           Linear(256, 256), ReLU, Linear(256, 10)) with PyTorch's default
           init (kaiming-uniform(a=sqrt(5)) weights, U(+-1/sqrt(fan_in))
           biases), drawn in module order from the default generator.
  loss     F.cross_entropy (mean over the batch).
  optim    AdamW(lr=1e-3), torch defaults otherwise (betas (0.9, 0.999),
           eps 1e-8, weight_decay 0.01); no schedule, no clipping.
  order    DistributedSampler(num_replicas=world, rank=rank, shuffle=True,
           seed=0, drop_last=False), set_epoch(e) for epoch e = 0, 1, 2; each
           rank takes batches of --batch (128) consecutive sampler indices, the
           last one smaller. DDP averages gradients, so a step sees
           128 * world samples.
  epochs   3.
  eval     after each epoch, rank 0: accuracy (argmax of logits) on all 10000
           test images.

Prints JSON lines (rank 0 only): one {"config": ...} line, then per epoch
{"epoch", "train_loss", "test_accuracy", "samples_per_s", "train_seconds"}.
train_loss = sum over batches of every rank of (batch mean loss * batch size)
/ samples trained that epoch (padding included). samples_per_s = samples
trained by all ranks that epoch / wall seconds of rank 0's training loop
(evaluation excluded).

The data helpers import only numpy, so tests can compare dtrain's loader with
load_split() without importing torch.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = np.float32(0.2860), np.float32(0.3530)
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx_u8(base):
    """dims and u8 data of the IDX file base or base.gz."""
    path = base if os.path.isfile(base) else base + ".gz"
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not a u8 IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: dims {dims} need {int(np.prod(dims))} bytes, found {data.size}")
    return dims, data.reshape(dims)


def load_split(directory, split):
    """(images float32 [N, 784] normalised as in the recipe, labels int64 [N])."""
    images_file, labels_file = FILES[split]
    _, images = read_idx_u8(os.path.join(directory, images_file))
    _, labels = read_idx_u8(os.path.join(directory, labels_file))
    x = (images.reshape(len(images), -1).astype(np.float32) / np.float32(255) - MEAN) / STD
    assert x.dtype == np.float32
    return x, labels.astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.environ.get("DTRAIN_FASHION_MNIST", DEFAULT_DIR))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128, help="per rank")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if distributed:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", init_method="env://")
    else:
        rank, world = 0, 1
    torch.set_num_threads(args.threads or int(os.environ.get("OMP_NUM_THREADS", "1")))

    train_x, train_y = (torch.from_numpy(a) for a in load_split(args.dir, "train"))
    test_x, test_y = (torch.from_numpy(a) for a in load_split(args.dir, "test"))

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    model = DDP(net) if distributed else net
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # The sampler only needs len(dataset); explicit replicas/rank also work without a process group.
    sampler = DistributedSampler(range(len(train_x)), num_replicas=world, rank=rank, shuffle=True, seed=0)

    if rank == 0:
        print(json.dumps({"config": {
            "world_size": world, "threads": torch.get_num_threads(), "batch_per_rank": args.batch,
            "epochs": args.epochs, "lr": args.lr, "train": len(train_x), "test": len(test_x),
            "torch": torch.__version__,
        }}), flush=True)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), dtype=torch.long)
        model.train()
        if distributed:
            dist.barrier()
        t0 = time.time()
        loss_sum = torch.zeros(2, dtype=torch.float64)  # (sum of loss * batch size, samples)
        for at in range(0, len(order), args.batch):
            idx = order[at:at + args.batch]
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += torch.tensor([loss.item() * len(idx), len(idx)], dtype=torch.float64)
        if distributed:
            dist.all_reduce(loss_sum)
        seconds = time.time() - t0
        if rank == 0:
            net.eval()
            with torch.no_grad():
                correct = sum(int((net(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
                              for i in range(0, len(test_x), 1000))
            print(json.dumps({
                "epoch": epoch + 1,
                "train_loss": loss_sum[0].item() / loss_sum[1].item(),
                "test_accuracy": correct / len(test_x),
                "samples_per_s": loss_sum[1].item() / seconds,
                "train_seconds": seconds,
            }), flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
