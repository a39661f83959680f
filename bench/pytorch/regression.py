#!/usr/bin/env python3
"""The PyTorch baseline of `host regression`: y = w·x + b, x evenly spaced over [0, 10), Gaussian
noise, random 80/20 split, MSE, full-batch SGD (lr 0.01) from w=0.83, b=0.7645, with autograd,
on the CPU and on the GPU. Writes the CSV columns of `host regression --csv`.

    python3 bench/pytorch/regression.py --points 1000000,5000000 --csv torch.csv
"""
import argparse, time
import torch


def run(n, epochs, lr, w_true, b_true, noise, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.arange(n, dtype=torch.float64).div(n).mul(10).float()
    y = w_true * x + b_true + noise * torch.randn(n, generator=g)
    perm = torch.randperm(n, generator=g)
    n_train = n * 4 // 5
    xt, yt = x[perm[:n_train]].to(device), y[perm[:n_train]].to(device)
    xv, yv = x[perm[n_train:]].to(device), y[perm[n_train:]].to(device)
    w = torch.tensor(0.83, device=device, requires_grad=True)
    b = torch.tensor(0.7645, device=device, requires_grad=True)
    opt = torch.optim.SGD([w, b], lr=lr)

    def epoch():
        opt.zero_grad()
        loss = ((w * xt + b - yt) ** 2).mean()
        loss.backward()
        opt.step()

    epoch()  # warm-up (kernel selection, allocator)
    with torch.no_grad():
        w.fill_(0.83); b.fill_(0.7645)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(epochs):
        epoch()
    if device == "cuda":
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1000
    with torch.no_grad():
        tl = ((w * xt + b - yt) ** 2).mean().item()
        vl = ((w * xv + b - yv) ** 2).mean().item()
    return ms, w.item(), b.item(), tl, vl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="5000000")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--w", type=float, default=2.0)
    ap.add_argument("--b", type=float, default=1.0)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--csv")
    a = ap.parse_args()
    rows = ["n,variant,total_ms,ms_per_epoch,w,b,train_loss,test_loss,roofline_ms"]
    for n in [int(p) for p in a.points.split(",")]:
        for dev in a.devices.split(","):
            ms, w, b, tl, vl = run(n, a.epochs, a.lr, a.w, a.b, a.noise, a.seed, dev)
            name = "torch_gpu" if dev == "cuda" else "torch_cpu"
            print(f"{n:>10} {name:<10} {ms:10.1f} ms  w {w:.6f} b {b:.6f} train {tl:.6f} test {vl:.6f}", flush=True)
            rows.append(f"{n},{name},{ms:.4f},{ms / a.epochs:.6f},{w},{b},{tl:.6f},{vl:.6f},")
    if a.csv:
        open(a.csv, "w").write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
