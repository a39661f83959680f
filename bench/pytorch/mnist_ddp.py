#!/usr/bin/env python3
"""The PyTorch DDP baseline of `host mnist --gpus N`: the same model, init, optimiser and global
batch, split evenly over the ranks (rank r takes the r-th share of every shuffled batch), fp16
autocast, gradients all-reduced by DistributedDataParallel through NCCL. One process per GPU:

    torchrun --standalone --nproc_per_node 2 bench/pytorch/mnist_ddp.py --hidden 4096 --batch 512

Rank 0 prints a line per epoch and writes the CSV (system,mode,gpus,hidden,batch,epoch,
epoch_time_s,test_accuracy). The epoch time is wall time between synchronised ends of epochs.
"""
import argparse, os, sys, time
from pathlib import Path
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).parent))
from mnist_mlp import Mlp, load  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--hidden", default="4096")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=512, help="global batch, over every rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv")
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    if a.batch % world:
        sys.exit(f"--batch {a.batch} does not split evenly over {world} ranks")
    share = a.batch // world
    torch.manual_seed(a.seed)  # the same initial weights on every rank
    x, y, xt, yt = load(a.data, dev)
    sizes = [x.shape[1]] + [int(h) for h in a.hidden.split(",")] + [10]
    model = DDP(Mlp(sizes, "kaiming").to(dev), device_ids=[dev.index], gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    steps = x.shape[0] // a.batch

    def step(xb, yb):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss.detach()

    for _ in range(3):  # warm-up outside the timings (buckets, cuBLAS handles, NCCL channels)
        step(x[:share], y[:share])
    rows = ["system,mode,gpus,hidden,batch,epoch,epoch_time_s,test_accuracy"]
    g = torch.Generator(device=dev)
    for epoch in range(1, a.epochs + 1):
        g.manual_seed(a.seed * 1000 + epoch)  # the same order on every rank
        perm = torch.randperm(x.shape[0], device=dev, generator=g)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for k in range(steps):
            idx = perm[k * a.batch + rank * share:k * a.batch + (rank + 1) * share]
            step(x[idx], y[idx])
        torch.cuda.synchronize()
        dist.barrier()
        dt = time.perf_counter() - t0
        if rank == 0:
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                acc = (model.module(xt).argmax(1) == yt).float().mean().item()
            rows.append(f"pytorch,ddp_fp16,{world},{a.hidden},{a.batch},{epoch},{dt:.6f},{acc}")
            print(f"ddp {world} GPUs hidden {a.hidden} epoch {epoch}: test acc {100 * acc:.2f}% {dt:.4f} s", flush=True)
    if rank == 0 and a.csv:
        Path(a.csv).write_text("\n".join(rows) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
