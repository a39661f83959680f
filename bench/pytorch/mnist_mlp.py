#!/usr/bin/env python3
"""The PyTorch baseline of `host mnist`: same data, model, init, optimiser and batch order policy
(per-epoch shuffle on the GPU, last partial batch dropped), in one of several modes.

    python3 bench/pytorch/mnist_mlp.py --mode eager32 --hidden 128 --epochs 10 --csv out.csv

Modes: eager32 (fp32), fp16 (autocast), compile (torch.compile max-autotune, fullgraph),
graph (fp16 autocast step captured in a CUDA graph). The CSV has the columns of
`host mnist --metrics` plus mode, hidden and epoch_time_s.
"""
import argparse, gzip, struct, time
from pathlib import Path
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.1307, 0.3081


def idx(path):
    raw = gzip.open(path).read() if str(path).endswith(".gz") else open(path, "rb").read()
    dims = raw[3]
    sizes = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(sizes)


def load(data, dev):
    d = Path(data)
    x = idx(d / "train-images-idx3-ubyte.gz").reshape(60000, -1).to(dev).float().div(255).sub(MEAN).div(STD)
    y = idx(d / "train-labels-idx1-ubyte.gz").to(dev).long()
    xt = idx(d / "t10k-images-idx3-ubyte.gz").reshape(10000, -1).to(dev).float().div(255).sub(MEAN).div(STD)
    yt = idx(d / "t10k-labels-idx1-ubyte.gz").to(dev).long()
    return x, y, xt, yt


class Mlp(nn.Module):
    def __init__(self, sizes, init):
        super().__init__()
        self.n = len(sizes) - 1
        for i in range(self.n):
            lin = nn.Linear(sizes[i], sizes[i + 1])
            if init == "kaiming":
                nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
            elif init == "xavier":
                nn.init.xavier_uniform_(lin.weight)
            else:
                nn.init.normal_(lin.weight)
            nn.init.zeros_(lin.bias)
            setattr(self, f"fc{i + 1}", lin)  # the names `host mnist --save` writes

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, f"fc{i + 1}")(x)
            if i + 1 < self.n:
                x = F.relu(x)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--hidden", default="128")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--init", default="kaiming", choices=["kaiming", "xavier", "normal"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="eager32", choices=["eager32", "fp16", "compile", "graph"])
    ap.add_argument("--csv")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    x, y, xt, yt = load(a.data, dev)
    sizes = [784] + [int(h) for h in a.hidden.split(",")] + [10]
    model = Mlp(sizes, a.init).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    steps = x.shape[0] // a.batch
    half = a.mode in ("fp16", "graph", "compile")
    xb = torch.empty(a.batch, 784, device=dev)
    yb = torch.empty(a.batch, dtype=torch.long, device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=half):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss.detach()

    run = step
    if a.mode == "compile":
        compiled = torch.compile(model, mode="max-autotune", fullgraph=True)

        def run():
            # max-autotune replays CUDA graphs whose outputs are overwritten by the next step.
            torch.compiler.cudagraph_mark_step_begin()
            opt.zero_grad(set_to_none=True)  # gradients of the last replay are not touched again
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(compiled(xb), yb)
            loss.backward()
            opt.step()
            return loss.detach().clone()
    if a.mode == "graph":
        xb.copy_(x[:a.batch]); yb.copy_(y[:a.batch])
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_loss = step()
        run = lambda: (g.replay(), static_loss)[1]
    else:
        for _ in range(3):  # warm-up (and compilation) outside the timings
            xb.copy_(x[:a.batch]); yb.copy_(y[:a.batch]); run()
        torch.cuda.synchronize()

    rows = ["mode,hidden,epoch,step,loss,accuracy,time_s,epoch_time_s"]
    t_all = 0.0
    for epoch in range(1, a.epochs + 1):
        perm = torch.randperm(x.shape[0], device=dev)
        losses = torch.empty(steps, device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(steps):
            idx_ = perm[k * a.batch:(k + 1) * a.batch]
            xb.copy_(x[idx_]); yb.copy_(y[idx_])
            losses[k] = run()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        t_all += dt
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=half):
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        ls = losses.tolist()
        for k, l in enumerate(ls):
            rows.append(f"{a.mode},{a.hidden},{epoch},{(epoch - 1) * steps + k + 1},{l},,{t_all:.4f},")
        rows.append(f"{a.mode},{a.hidden},{epoch},{epoch * steps},,{acc},{t_all:.4f},{dt:.4f}")
        print(f"{a.mode} hidden {a.hidden} epoch {epoch}: loss {sum(ls) / steps:.4f} test acc {100 * acc:.2f}% {dt:.3f} s", flush=True)
    if a.csv:
        Path(a.csv).write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
