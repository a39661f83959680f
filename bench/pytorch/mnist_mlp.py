#!/usr/bin/env python3
"""The PyTorch baseline of `host mnist` and `host iris` (`--dataset iris`): same data, model, init, optimiser and batch order policy
(per-epoch shuffle on the GPU, last partial batch dropped), in one of several modes.

    python3 bench/pytorch/mnist_mlp.py --mode eager32 --hidden 128 --epochs 10 --csv out.csv

Modes: eager32 (fp32), fp16 (autocast), compile (torch.compile max-autotune, fullgraph),
graph (fp16 autocast step captured in a CUDA graph, replayed once per step), epoch (every step
of an epoch, batch gathering included, captured in one CUDA graph, replayed once per epoch).
The CSV has the columns of `host mnist --metrics` plus mode, hidden (a deeper model's widths
joined by `-`: 512-256) and epoch_time_s.
"""
import argparse, gzip, struct, time
from pathlib import Path
import sys
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for curves.py
import curves
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.1307, 0.3081


def idx(path):
    raw = gzip.open(path).read() if str(path).endswith(".gz") else open(path, "rb").read()
    dims = raw[3]
    sizes = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(sizes)


def load_iris(path, seed, dev):
    """Stratified 80/20 split by seed and standardisation by the training split, as `host iris`
    does (with PyTorch's generator, so the split itself differs)."""
    import csv
    species = ["setosa", "versicolor", "virginica"]
    rows = list(csv.reader(open(path)))[1:]
    x = torch.tensor([[float(v) for v in r[:4]] for r in rows])
    y = torch.tensor([species.index(r[4]) for r in rows])
    g = torch.Generator().manual_seed(seed)
    tr, te = [], []
    for c in range(3):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        k = (len(idx) * 4 + 4) // 5
        tr.append(idx[:k]); te.append(idx[k:])
    tr, te = torch.cat(tr), torch.cat(te)
    m, s = x[tr].mean(0), x[tr].std(0, unbiased=False)
    xs = (x - m) / s
    return xs[tr].to(dev), y[tr].to(dev), xs[te].to(dev), y[te].to(dev)


def load(data, dev):
    d = Path(data)
    x = idx(d / "train-images-idx3-ubyte.gz").reshape(60000, -1).to(dev).float().div(255).sub(MEAN).div(STD)
    y = idx(d / "train-labels-idx1-ubyte.gz").to(dev).long()
    xt = idx(d / "t10k-images-idx3-ubyte.gz").reshape(10000, -1).to(dev).float().div(255).sub(MEAN).div(STD)
    yt = idx(d / "t10k-labels-idx1-ubyte.gz").to(dev).long()
    return x, y, xt, yt


def capture(body, warm_up):
    """A CUDA graph of body() and what that call returned. warm_up() runs first, a few times on a
    side stream, so that the graph records the steady state: the gradients and SGD's momentum
    buffers exist (a step that created them would be recorded as creating them on every replay),
    and autograd and the allocator have done their first-call setup."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            warm_up()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        result = body()
    return g, result


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
    ap.add_argument("--dataset", default="mnist", choices=["mnist", "iris"])
    ap.add_argument("--data", default=None, help="data/mnist, or data/iris/iris.csv")
    ap.add_argument("--hidden", default=None, help="128 (MNIST) or 5 (Iris)")
    ap.add_argument("--epochs", type=int, default=None, help="10 (MNIST) or 100 (Iris)")
    ap.add_argument("--batch", type=int, default=None, help="128 (MNIST) or 16 (Iris)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--init", default="kaiming", choices=["kaiming", "xavier", "normal"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="eager32", choices=["eager32", "fp16", "compile", "graph", "epoch"])
    ap.add_argument("--csv")
    a = ap.parse_args()
    iris = a.dataset == "iris"
    a.hidden = a.hidden or ("5" if iris else "128")
    a.epochs = a.epochs if a.epochs is not None else (100 if iris else 10)
    a.batch = a.batch or (16 if iris else 128)
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    if iris:
        x, y, xt, yt = load_iris(a.data or "data/iris/iris.csv", a.seed, dev)
    else:
        x, y, xt, yt = load(a.data or "data/mnist", dev)
    torch.cuda.reset_peak_memory_stats()
    sizes = [x.shape[1]] + [int(h) for h in a.hidden.split(",")] + [int(y.max()) + 1]
    model = Mlp(sizes, a.init).to(dev)
    initial = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    steps = x.shape[0] // a.batch
    half = a.mode in ("fp16", "graph", "compile", "epoch")
    xb = torch.empty(a.batch, x.shape[1], device=dev)
    yb = torch.empty(a.batch, dtype=torch.long, device=dev)
    # Each epoch's order and its steps' losses: refilled in place, as the epoch mode's graph
    # reads and writes these addresses.
    perm = torch.arange(x.shape[0], device=dev)
    losses = torch.empty(steps, device=dev)

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
        g, static_loss = capture(step, step)
        run = lambda: (g.replay(), static_loss)[1]
    elif a.mode == "epoch":
        def gather_and_step(k):
            # Batch k of the permutation into the step's inputs, in place, then the step of the
            # graph mode; its loss goes to the epoch's row of losses.
            idx_ = perm[k * a.batch:(k + 1) * a.batch]
            torch.index_select(x, 0, idx_, out=xb)
            torch.index_select(y, 0, idx_, out=yb)
            losses[k].copy_(step())

        # The warm-up trains on the first batch of perm (0, 1, …: no random draw, so the epochs
        # shuffle as in the other modes). Each captured step zeroes the gradients in place
        # (set_to_none=False) before its backward accumulates into them, and the SGD update
        # reads the momentum buffers the warm-up created, so steps chain inside one graph as
        # they do when replayed one by one.
        g, _ = capture(lambda: [gather_and_step(k) for k in range(steps)], lambda: gather_and_step(0))
    else:
        for _ in range(3):  # warm-up (and compilation) outside the timings
            xb.copy_(x[:a.batch]); yb.copy_(y[:a.batch]); run()
        torch.cuda.synchronize()

    # Warm-up and capture trained a few steps: start from the initial weights and an empty
    # momentum, in place (a captured graph keeps these tensors' addresses).
    with torch.no_grad():
        for p, s in zip(model.parameters(), initial):
            p.copy_(s)
        for st in opt.state.values():
            if st.get("momentum_buffer") is not None:
                st["momentum_buffer"].zero_()

    def train_epoch():
        if a.mode == "epoch":
            g.replay()
            return
        for k in range(steps):
            idx_ = perm[k * a.batch:(k + 1) * a.batch]
            xb.copy_(x[idx_]); yb.copy_(y[idx_])
            losses[k] = run()

    rows = [curves.HEADER]
    name = a.hidden.replace(",", "-")  # a deeper model's widths, without the CSV's separator
    t_all = 0.0
    for epoch in range(1, a.epochs + 1):
        perm.copy_(torch.randperm(x.shape[0], device=dev))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_epoch()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        t_all += dt
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=half):
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        ls = losses.tolist()
        curves.record_epoch(rows, a.mode, name, epoch, ls, acc, t_all, dt)
    print(f"max_memory_allocated {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB "
          f"(data set on the GPU included; first step loss {rows[1].split(',')[4]})", flush=True)
    curves.write(a.csv, rows)


if __name__ == "__main__":
    main()
