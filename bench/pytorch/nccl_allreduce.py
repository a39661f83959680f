#!/usr/bin/env python3
"""The collectives of a data-parallel MNIST step, alone, through NCCL (PyTorch's), one process
per GPU: the fp16 sum, in place, of the whole gradient of a 784-H-10 MLP, as `host mnist --gpus N`
makes it (all-reduce), and the pair a sharded update would make instead (reduce-scatter of the
gradient, then all-gather of the fp16 weights, each rank stepping its share between the two;
docs/parallel.md has why the host does not):

    torchrun --standalone --nproc_per_node 2 bench/pytorch/nccl_allreduce.py --hidden 4096 8192

Rank 0 prints one line per width and collective: the bytes summed and the median time, replayed
from a CUDA graph of 20 repetitions (as a captured step replays them), and the bus bandwidth
NCCL's own tests would report for an all-reduce (bytes · 2(N−1)/N over the time).
"""
import argparse, itertools, os, statistics
import torch
import torch.distributed as dist


def params(hidden):
    return 784 * hidden + hidden + hidden * 10 + 10


def reduce_scatter_all_gather(g, rank, world):
    share = g.numel() // world
    own = g[rank * share:(rank + 1) * share]
    dist.reduce_scatter_tensor(own, g)
    dist.all_gather_into_tensor(g, own)


COLLECTIVES = {
    "all-reduce": lambda g, rank, world: dist.all_reduce(g),
    "reduce-scatter+all-gather": reduce_scatter_all_gather,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    for h, (name, collective) in itertools.product(a.hidden, COLLECTIVES.items()):
        # Padded to equal shares of whole 64-element blocks, as a sharded update would pad it.
        n = -(-params(h) // (64 * world)) * 64 * world
        g = torch.randn(n, device=dev, dtype=torch.float16)
        for _ in range(5):
            collective(g, rank, world)
        graph, calls = torch.cuda.CUDAGraph(), 20
        with torch.cuda.graph(graph):
            for _ in range(calls):
                collective(g, rank, world)
        times = []
        for _ in range(a.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.barrier()
            torch.cuda.synchronize()
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / calls)
        us = statistics.median(times)
        size = g.numel() * g.element_size()
        if rank == 0:
            bus = size * 2 * (world - 1) / world / (us * 1e-6) / 1e9
            print(f"{name} {world} GPUs hidden {h}: {size / 1e6:.2f} MB fp16 in {us:.1f} us "
                  f"(bus {bus:.0f} GB/s)", flush=True)
        del graph  # its NCCL work is freed before the process group closes (else it can hang)
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
