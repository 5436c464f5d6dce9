# PyTorch's gloo allReduce, one rank (started by scripts/bench_allreduce.ts and
# scripts/bench_gloo.ts with torchrun's environment): w3_allreduce.py's loop per
# size (warm-up, then timed calls after a barrier, each call's slowest rank),
# the result checked, then optionally the mean time of TINY back-to-back
# allReduces of one f32. Rank 0 prints one line:
#   BENCH {"sizes": [{"mib": M, "times": [s, ...]}, ...], "tinyUs": us or null}
# usage: gloo_allreduce.py SIZES_MIB(comma-separated) WARMUP ITERS [TINY]
import json, sys, time
import torch, torch.distributed as dist

sizes, warmup, iters = [int(s) for s in sys.argv[1].split(",")], int(sys.argv[2]), int(sys.argv[3])
tiny = int(sys.argv[4]) if len(sys.argv) > 4 else 0
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
out = []
for mib in sizes:
    t = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    times = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        times.append(time.perf_counter() - t0)
    gathered = [None] * world
    dist.all_gather_object(gathered, times)
    want = float(world) ** (warmup + iters)
    assert t[0].item() == want and t[-1].item() == want, "wrong all_reduce result"
    out.append({"mib": mib, "times": [max(ts) for ts in zip(*gathered)]})
tiny_us = None
if tiny > 0:
    one = torch.ones(1, dtype=torch.float32)
    for _ in range(50):
        dist.all_reduce(one)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(tiny):
        dist.all_reduce(one)
    tiny_us = (time.perf_counter() - t0) * 1e6 / tiny
dist.destroy_process_group()
if rank == 0:
    print("BENCH " + json.dumps({"sizes": out, "tinyUs": tiny_us}))
