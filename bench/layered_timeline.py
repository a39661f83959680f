#!/usr/bin/env python3
"""Per-kernel timeline of the layered step, on a GPU machine with Nsight Compute (`ncu`).

For each model: the step time of `host mnist --layered` (its epochs' median over the steps of an
epoch, the graph replayed as in training), then one traced run under `ncu`, which serialises
the kernels and times each alone, caches kept warm. Each step's kernels are those from one `gather_batch` to the
next; the table gives each kernel's median over the traced steps, its stream (the GPU's, or the
side stream that runs weight gradients beside the next product), and the sum of the GPU
stream's kernels against the step: what the launches and dependencies add.

    python3 bench/layered_timeline.py --host target/release/host --out timeline.md
    python3 bench/layered_timeline.py --models 784-128-10:128,784-4096-10:2048

Prints markdown; `--csv` also writes every kernel's median.
"""
import argparse
import csv
import io
import re
import statistics
import subprocess
import sys

MODELS = [
    "784-1024-1024-10:128",
    "784-256-256-256-10:128",
    "784-512-512-512-512-10:128",
    "784-128-10:128",
    "784-8192-10:128",
    "784-4096-10:512",
    "784-4096-10:2048",
]


def parse_model(spec):
    widths, batch = spec.split(":")
    sizes = [int(w) for w in widths.split("-")]
    return sizes[1:-1], int(batch)


def step_us(host, hidden, batch):
    """The layered step's time in µs: ms an epoch (median of epochs 2 on) over its steps."""
    args = [host, "mnist", "--layered", "--epochs", "4", "--batch", str(batch),
            "--hidden", ",".join(map(str, hidden))]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    steps = int(re.search(r"(\d+) steps/epoch", out).group(1))
    epochs = [float(m) for m in re.findall(r"test accuracy [\d.]+%\s+([\d.]+) s", out)]
    return 1e6 * statistics.median(epochs[1:]) / steps, steps


def traced(ncu, host, hidden, batch, skip, count):
    """Each launch's (kernel, stream, ns) under ncu, in launch order."""
    args = [ncu, "--clock-control", "none", "--cache-control", "none", "--csv",
            "--print-units", "base",
            "--metrics", "gpu__time_duration.sum", "--launch-skip", str(skip),
            "--launch-count", str(count), host, "mnist", "--layered", "--epochs", "1",
            "--batch", str(batch), "--hidden", ",".join(map(str, hidden))]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    start = out.index('"ID"')
    launches = []
    for row in csv.DictReader(io.StringIO(out[start:])):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            name = re.sub(r"\(.*", "", row["Kernel Name"]).strip()
            ns = float(row["Metric Value"].replace(",", ""))
            launches.append((name, row["Stream"], ns))
    return launches


def steps_of(launches):
    """The launches cut into steps at each `gather_batch`; whole steps only."""
    cuts = [i for i, (name, _, _) in enumerate(launches) if name == "gather_batch"]
    return [launches[a:b] for a, b in zip(cuts, cuts[1:])]


def table(spec, step, steps):
    """Markdown for one model: each kernel of a step with its median time and stream."""
    gpu_stream = steps[0][0][1]
    rows = []
    for i, (name, stream, _) in enumerate(steps[0]):
        times = [s[i][2] for s in steps if len(s) == len(steps[0])]
        rows.append((name, stream, statistics.median(times) / 1e3))
    on_gpu = sum(us for _, stream, us in rows if stream == gpu_stream)
    beside = sum(us for _, stream, us in rows if stream != gpu_stream)
    out = [f"### {spec.replace(':', ', batch ')}", "",
           f"step {step:.1f} µs (graph replay); the GPU stream's kernels alone {on_gpu:.1f} µs, "
           f"beside them {beside:.1f} µs; launches and waits {step - on_gpu:.1f} µs", "",
           "| # | kernel | stream | µs |", "| ---: | --- | --- | ---: |"]
    for i, (name, stream, us) in enumerate(rows):
        where = "GPU" if stream == gpu_stream else "beside"
        out.append(f"| {i} | `{name}` | {where} | {us:.2f} |")
    return "\n".join(out) + "\n", rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="target/release/host")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated 784-...-10:BATCH")
    ap.add_argument("--skip", type=int, default=400,
                    help="launches before the traced ones (at most 4 an epoch's step)")
    ap.add_argument("--count", type=int, default=120, help="launches traced")
    ap.add_argument("--out", help="also write the markdown here")
    ap.add_argument("--csv", help="also write each kernel's median here")
    a = ap.parse_args()
    text, flat = [], []
    for spec in a.models.split(","):
        hidden, batch = parse_model(spec)
        step, epoch_steps = step_us(a.host, hidden, batch)
        # Past the first few steps, within the first epoch however few steps it has.
        skip = min(a.skip, 4 * epoch_steps)
        steps = steps_of(traced(a.ncu, a.host, hidden, batch, skip, a.count))
        if not steps:
            sys.exit(f"{spec}: no whole step among the traced launches; raise --count")
        md, rows = table(spec, step, steps)
        print(md, flush=True)
        text.append(md)
        flat += [(spec, i, name, stream, us) for i, (name, stream, us) in enumerate(rows)]
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(text))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["model", "index", "kernel", "stream", "us"])
            w.writerows(flat)


if __name__ == "__main__":
    main()
