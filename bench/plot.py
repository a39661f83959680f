#!/usr/bin/env python3
"""Plots of a results folder (CSV files written by the runs in docs/RESULTS.md), with matplotlib:

    python3 bench/plot.py [FOLDER]     (default: the report folder in docs/results)

writes mnist_loss.png (loss curves, ours, PyTorch and JAX, hidden 128), mnist_widths.png (time per
epoch against hidden width, with where our engine changes), mnist_depth.png (time per epoch of the
deeper models), regression_sweep.png (time against points), regression_ops.png (time per op of
one unfused epoch) and init.png (initial and final loss per initialisation), when their CSVs
exist. Legends stand outside the axes, off the data.
"""
import csv, sys
from collections import defaultdict
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")


def legend_outside(ax, **kw):
    """The legend to the right of the axes, where it hides no data (save() keeps it in the PNG)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0, frameon=False, **kw)


def framework_label(system, mode):
    if system == "jax":
        return f"JAX scan (unroll {mode[len('scan-u'):]})" if mode.startswith("scan-u") else f"JAX {mode}"
    return f"PyTorch {mode}"


def smooth(v, k=20):
    out, acc = [], 0.0
    for i, x in enumerate(v):
        acc += x
        if i >= k:
            acc -= v[i - k]
        out.append(acc / min(i + 1, k))
    return out


def loss_curves(d):
    ours = d / "mnist128.csv"
    if not ours.exists():
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    o = [r for r in rows(ours) if r["loss"]]
    ax.plot([int(r["step"]) for r in o], smooth([float(r["loss"]) for r in o]), label="ours (Rust kernels, fp16)", lw=1.5)
    by = defaultdict(list)
    for name, system in (("pytorch_mnist.csv", "pytorch"), ("jax_mnist.csv", "jax")):
        for r in (rows(d / name) if (d / name).exists() else []):
            if r["loss"] and r["hidden"] == "128":
                by[framework_label(system, r["mode"])].append((int(r["step"]), float(r["loss"])))
    for name, pts in sorted(by.items()):
        ax.plot([p[0] for p in pts], smooth([p[1] for p in pts]), label=name, lw=1, alpha=0.8)
    ax.set(xlabel="step (batch 128)", ylabel="training loss (moving average of 20 steps)", yscale="log",
           title="MNIST 784-128-10, SGD lr 0.05 momentum 0.9, Kaiming init")
    legend_outside(ax)
    save(fig, d / "mnist_loss.png")


def widths(d):
    p = d / "mnist_widths.csv"
    if not p.exists():
        return
    t = defaultdict(list)
    engine = {}  # our engine at each width, in a word or two
    for r in rows(p):
        h = int(r["hidden"])
        if r["system"] == "ours":
            e = r.get("engine") or ""
            engine[h] = "persistent kernel" if (e.startswith("persistent") or r["mode"] == "persistent") else "CUDA graph"
        if int(r["epoch"]) > 1:  # leave out warm-up and compilation
            t[(r["system"], r["mode"], h)].append(float(r["epoch_time_s"]))
    series = defaultdict(dict)
    for (sysname, mode, h), v in t.items():
        # JAX: one line, the faster unroll at each width
        name = "ours" if sysname == "ours" else "JAX scan (faster unroll)" if sysname == "jax" else f"PyTorch {mode}"
        ms = 1000 * sum(v) / len(v)
        series[name][h] = min(ms, series[name].get(h, ms))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, pts in sorted(series.items(), key=lambda kv: (kv[0] != "ours", kv[0])):
        hs = sorted(pts)
        ax.plot(hs, [pts[h] for h in hs], marker="o", label=name, lw=2 if name == "ours" else 1)
    hs = sorted(engine)
    for lo, hi in zip(hs, hs[1:]):
        if engine[lo] != engine[hi]:
            x = (lo * hi) ** 0.5
            ax.axvline(x, color="grey", ls=":", lw=1)
            # at the bottom, where the lines of the slower systems are not
            ax.annotate(f"our engine:\n{engine[lo]} → {engine[hi]}", (x, 0), xycoords=("data", "axes fraction"),
                        xytext=(-4, 4), textcoords="offset points", ha="right", va="bottom", fontsize=8, color="grey")
    ax.set(xscale="log", yscale="log", xlabel="hidden width", ylabel="ms per epoch (468 steps of 128)",
           title="MNIST MLP 784-H-10: time per epoch")
    ax.set_xticks(sorted({h for p in series.values() for h in p}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    legend_outside(ax)
    save(fig, d / "mnist_widths.png")


def depth(d):
    p = d / "depth.csv"
    if not p.exists():
        return
    def name(r):
        """The model, with its batch where it is not 128."""
        batch = r.get("batch", "128")
        return r["model"] if batch == "128" else f"{r['model']}, batch {batch}"

    t = defaultdict(lambda: defaultdict(list))  # model -> (system, mode) -> seconds
    for r in rows(p):
        if r["epoch"] and int(r["epoch"]) > 1:
            t[name(r)][(r["system"], r["mode"])].append(float(r["epoch_time_s"]))
    models = list(dict.fromkeys(name(r) for r in rows(p)))
    bars = defaultdict(dict)  # system's label -> model -> ms (its fastest mode)
    for m in models:
        best = {}
        for (system, mode), v in t[m].items():
            ms = 1000 * sorted(v)[len(v) // 2]
            name = "ours" if system == "ours" else "JAX scan (faster unroll)" if system == "jax" else f"PyTorch {mode}"
            best[name] = min(ms, best.get(name, ms))
        for name, ms in best.items():
            bars[name][m] = ms
    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = sorted(bars, key=lambda n: (n != "ours", n))
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        xs = [i + (k - (len(names) - 1) / 2) * width for i, m in enumerate(models) if m in bars[name]]
        ax.bar(xs, [bars[name][m] for m in models if m in bars[name]], width=width, label=name)
    ax.set(xticks=range(len(models)), yscale="log", ylabel="ms per epoch (median of epochs 2+)",
           title="MNIST, deeper models: time per epoch")
    ax.set_xticklabels(models, rotation=20, ha="right")
    legend_outside(ax)
    save(fig, d / "mnist_depth.png")


def regression(d):
    ours, torch = d / "regression_sweep.csv", d / "regression_torch.csv"
    if not ours.exists():
        return
    series = defaultdict(dict)
    roof = {}
    for r in rows(ours) + (rows(torch) if torch.exists() else []):
        series[r["variant"]][int(r["n"])] = float(r["total_ms"])
        if r["roofline_ms"]:
            roof[int(r["n"])] = float(r["roofline_ms"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, pts in series.items():
        ns = sorted(pts)
        ax.plot(ns, [pts[n] for n in ns], marker="o", label=name)
    ns = sorted(roof)
    ax.plot(ns, [roof[n] for n in ns], "k--", label="memory roofline")
    ax.set(xscale="log", yscale="log", xlabel="points", ylabel="ms for 200 epochs",
           title="Linear regression, full-batch gradient descent")
    legend_outside(ax)
    save(fig, d / "regression_sweep.png")


def regression_ops(d):
    import re
    p = d / "regression.log"
    if not p.exists():
        return
    m = re.search(r"per-op time of one unfused epoch: (.*)", p.read_text())
    if not m:
        return
    ops = [(name, float(ms)) for name, ms in re.findall(r"(\w+) ([\d.]+) ms", m.group(1))]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([o[0] for o in ops], [1000 * o[1] for o in ops])
    ax.set(ylabel="µs", title="One unfused epoch, 5M points: time per op")
    save(fig, d / "regression_ops.png")


def init_study(d):
    p = d / "init.csv"
    if not p.exists():
        return
    r = rows(p)
    datasets = [x for x in ["Iris", "MNIST"] if any(q["dataset"] == x for q in r)]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 4.2), squeeze=False)
    inits = ["normal", "xavier", "kaiming"]
    systems = ["ours", "PyTorch eager32"]
    for ax, ds in zip(axes[0], datasets):
        for k, (sysname, what) in enumerate([(s, w) for s in systems for w in ["initial_loss", "final_loss"]]):
            vals = [float(next(q[what] for q in r if q["dataset"] == ds and q["system"] == sysname and q["init"] == i)) for i in inits]
            ax.bar([x + 0.2 * k - 0.3 for x in range(3)], vals, width=0.2,
                   label=f"{sysname}: {'initial' if what == 'initial_loss' else 'final'}", hatch="" if what == "initial_loss" else "//")
        ax.set(xticks=range(3), xticklabels=inits, yscale="log", title=ds, ylabel="training loss")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0), ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Initial and final loss per initialisation")
    save(fig, d / "init.png")


if __name__ == "__main__":
    d = Path(sys.argv[1]) if len(sys.argv) > 1 else max(Path("docs/results").iterdir())
    loss_curves(d)
    widths(d)
    depth(d)
    regression(d)
    regression_ops(d)
    init_study(d)
    print("plots in", d)
