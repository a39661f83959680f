#!/usr/bin/env python3
"""Every comparison of the project in one run, on a GPU machine with PyTorch:

    python3 bench/report.py OUT_DIR [--host target/release/host] [--force]

Runs the GEMM table, MNIST (loss curves, widths 128…8192, the architecture matrix: older GPUs'
paths emulated with --ptx and --max-smem-kb, init study, and data-parallel scaling against
PyTorch DDP where there are several GPUs), the regression sweep, Iris, cold and warm start
(bench/cold_start.sh), and the memory comparison; writes their CSVs and logs under OUT_DIR, the PNG plots
(bench/plot.py, if matplotlib is there) and OUT_DIR/RESULTS.md with the date, GPU and versions.
To publish it, replace the contents of docs/results/ with OUT_DIR (but its RESULTS.md) as
docs/results/NAME/ and write docs/RESULTS.md with
`python3 bench/results_md.py docs/results/NAME --images results/NAME/ --to docs/RESULTS.md`.
Refuses an existing OUT_DIR unless --force, or --resume: then the steps whose results are
already there are kept (a report cut short by a time limit is finished by running it again).
Takes 9 to 12 minutes on an H200, most of it the GEMM table and the width sweep.
"""
import argparse, csv, datetime, re, shutil, subprocess, sys, time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--host", default="target/release/host")
ap.add_argument("--force", action="store_true", help="replace an existing output folder")
ap.add_argument("--resume", action="store_true", help="keep the steps an existing output folder has")
a = ap.parse_args()
out = Path(a.out)
if out.exists() and not a.resume:
    if not a.force:
        sys.exit(f"error: {out} exists; pass --force to replace it or --resume to finish it")
    shutil.rmtree(out)
out.mkdir(parents=True, exist_ok=True)
py = sys.executable
H = a.host

try:
    from tqdm import tqdm
except ImportError:
    tqdm = None


def run_logged(cmd, log, timeout=600):
    """Runs cmd (a list), appending its output to OUT/log; returns its exit status and output."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    text = r.stdout + r.stderr
    with open(out / log, "a") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\n{text}\n")
    return r.returncode, text


def sh(cmd, log, timeout=600, check=True):
    """Runs cmd (a list), appending its output to OUT/log; returns the output."""
    rc, text = run_logged(cmd, log, timeout)
    if check and rc != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{text[-2000:]}")
    return text


def mib(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else float("nan")


memory, inits = [], []
# PyTorch's modes in the MNIST steps: every report compares against the fastest one it measured.
PT_MODES = ["eager32", "fp16", "graph", "epoch"]


def step_info():
    sh([H, "info"], "info.txt")
    sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], "info.txt", check=False)
    sh([py, "-c", "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"], "info.txt")


def step_gemm():
    sh([H, "gemm", "--csv", out / "gemm.csv"], "gemm.log")


def step_mnist():
    t = sh([H, "mnist", "--metrics", out / "mnist128.csv"], "mnist.log")
    memory.append(("MNIST 784-128-10", "ours", mib(r"one arena of ([\d.]+) MiB", t)))
    rows = ["mode,hidden,epoch,step,loss,accuracy,time_s,epoch_time_s"]
    for mode in PT_MODES:
        t = sh([py, "bench/pytorch/mnist_mlp.py", "--mode", mode, "--csv", out / "pt.tmp"], "mnist.log")
        rows += (out / "pt.tmp").read_text().splitlines()[1:]
        if mode == "eager32":
            memory.append(("MNIST 784-128-10", "PyTorch eager32", mib(r"max_memory_allocated ([\d.]+) MiB", t)))
    (out / "pt.tmp").unlink()
    (out / "pytorch_mnist.csv").write_text("\n".join(rows) + "\n")


def step_widths():
    import os
    # fp16 is left out here to save time: the graph modes run the same fp16 step without its launches.
    env = {**os.environ, "EPOCHS": "2", "MODES": "eager32 graph epoch", "PYTHON": py}
    r = subprocess.run(["bench/mnist_widths.sh", out / "widths", H], capture_output=True, text=True, env=env, timeout=1200)
    (out / "widths.log").write_text(r.stdout + r.stderr)
    shutil.move(out / "widths" / "mnist_widths.csv", out / "mnist_widths.csv")
    shutil.rmtree(out / "widths")


# The paths of older GPUs on this one: the PTX an older GPU loads, and its shared memory per block
# (a T4's 64 KiB, an sm_86 card's 99, an A100's 163); the last is this GPU's own path.
ARCH_PATHS = [("sm_75 @ 64 KB", ["--ptx", "sm_75", "--max-smem-kb", "64"]),
              ("sm_80 @ 99 KB", ["--ptx", "sm_80", "--max-smem-kb", "99"]),
              ("sm_80 @ 163 KB", ["--ptx", "sm_80", "--max-smem-kb", "163"]),
              ("sm_90", [])]
ARCH_HIDDEN = [128, 512]
ARCH_EPOCHS = 10


def engine_of(header):
    """The engine the header line of `host mnist` names at its end: `persistent kernel (32
    blocks…)`, `CUDA graph (the persistent kernel does not apply: …)`, …"""
    m = re.search(r"(persistent kernel \(.*|CUDA graph.*|eager launches)$", header)
    return m.group(1) if m else "?"


def why_failed(text, rc):
    """The line of a failed run's output that says why: its last `error: …` (without that word),
    else its last line."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    errors = [re.sub(r"^error:\s*", "", l, flags=re.I) for l in lines if l.lower().startswith("error")]
    return (errors or lines or [f"exit status {rc}"])[-1]


def arch_run(flags, hidden):
    """One `host mnist` run of the matrix: (ptx, engine, [(epoch, seconds, test accuracy)]),
    or a string saying why it did not run."""
    cmd = [H, "mnist", *flags, "--hidden", str(hidden), "--epochs", str(ARCH_EPOCHS)]
    try:
        # Long enough for the driver to compile an older PTX for this GPU on a cold cache.
        rc, text = run_logged(cmd, "arch_matrix.log", timeout=300)
    except subprocess.TimeoutExpired:
        return "timed out after 300 s"
    header = next((l for l in text.splitlines() if l.startswith("MNIST")), None)
    epochs = [(int(m.group(1)), float(m.group(3)), round(float(m.group(2)) / 100, 6)) for m in
              re.finditer(r"^epoch +(\d+) .*test accuracy ([\d.]+)% +([\d.]+) s", text, re.M)]
    if rc != 0 or header is None or not epochs:
        return why_failed(text, rc)
    ptx = re.search(r"\((sm_\d+) PTX", header)
    return ptx.group(1) if ptx else "?", engine_of(header), epochs


def step_arch_matrix():
    """Each older GPU's path through `host mnist` (its PTX, its shared memory per block) on this
    GPU; a path the binary or the GPU cannot take is a row that says why, not an abort."""
    own = re.search(r"shared memory:\s+(\d+) KiB", (out / "info.txt").read_text())
    with open(out / "arch_matrix.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "ptx", "smem_kb", "hidden", "engine", "epoch", "epoch_time_s", "test_accuracy", "skipped"])
        for name, flags in ARCH_PATHS:
            asked_ptx = flags[flags.index("--ptx") + 1] if "--ptx" in flags else ""
            smem = flags[flags.index("--max-smem-kb") + 1] if "--max-smem-kb" in flags else (own.group(1) if own else "")
            for hidden in ARCH_HIDDEN:
                r = arch_run(flags, hidden)
                if isinstance(r, str):
                    w.writerow([name, asked_ptx, smem, hidden, "", "", "", "", r])
                    continue
                ptx, engine, epochs = r
                for epoch, seconds, acc in epochs:
                    w.writerow([name, ptx, smem, hidden, engine, epoch, seconds, acc, ""])


def step_scaling():
    """Data-parallel scaling against PyTorch DDP, where the machine has several GPUs."""
    import os
    gpus = int(sh([py, "-c", "import torch; print(torch.cuda.device_count())"], "scaling.log").strip())
    if gpus < 2:
        return
    env = {**os.environ, "PYTHON": py}
    r = subprocess.run(["bench/mnist_scaling.sh", out / "scaling", H], capture_output=True, text=True, env=env, timeout=1200)
    with open(out / "scaling.log", "a") as f:
        f.write(r.stdout + r.stderr)
    shutil.move(out / "scaling" / "mnist_scaling.csv", out / "mnist_scaling.csv")
    shutil.rmtree(out / "scaling")


def step_cold_start():
    """Time to exit of short commands with an empty driver cache and a filled one."""
    sh(["bench/cold_start.sh", "--csv", out / "cold_start.csv", H], "cold_start.log", timeout=900)


def step_regression():
    sh([H, "regression", "--sweep", "--csv", out / "regression_sweep.csv"], "regression.log")
    sh([H, "regression", "--variant", "unfused", "--trace", out / "regression_trace.json"], "regression.log")
    sh([py, "bench/pytorch/regression.py", "--points", "1000000,5000000,10000000,50000000,100000000",
        "--devices", "cuda", "--csv", out / "rt_gpu.tmp"], "regression.log")
    sh([py, "bench/pytorch/regression.py", "--points", "1000000,5000000,10000000", "--devices", "cpu",
        "--csv", out / "rt_cpu.tmp"], "regression.log")
    lines = (out / "rt_gpu.tmp").read_text().splitlines() + (out / "rt_cpu.tmp").read_text().splitlines()[1:]
    (out / "regression_torch.csv").write_text("\n".join(lines) + "\n")
    (out / "rt_gpu.tmp").unlink()
    (out / "rt_cpu.tmp").unlink()


def step_iris():
    t = sh([H, "iris", "--metrics", out / "iris.csv"], "iris.log")
    memory.append(("Iris 4-5-3", "ours", mib(r"one arena of ([\d.]+) MiB", t)))
    t = sh([py, "bench/pytorch/mnist_mlp.py", "--dataset", "iris", "--csv", out / "pytorch_iris.csv"], "iris.log")
    memory.append(("Iris 4-5-3", "PyTorch eager32", mib(r"max_memory_allocated ([\d.]+) MiB", t)))


def initial_final(metrics):
    """First step's loss, mean loss of the last epoch's steps, and final test accuracy."""
    rows = list(csv.DictReader(open(metrics)))
    steps = [r for r in rows if r["loss"]]
    last = steps[-1]["epoch"]
    final = [float(r["loss"]) for r in steps if r["epoch"] == last]
    return steps[0]["loss"], sum(final) / len(final), [r for r in rows if r["accuracy"]][-1]["accuracy"]


def step_init():
    for ds, extra_ours, extra_pt in [("Iris", ["iris"], ["--dataset", "iris"]), ("MNIST", ["mnist", "--epochs", "1"], ["--epochs", "1"])]:
        for init in ["normal", "xavier", "kaiming"]:
            m = out / "init.tmp"
            t = sh([H, *extra_ours, "--init", init, "--metrics", m], "init.log")
            inits.append((ds, "ours", init, *initial_final(m)))
            sh([py, "bench/pytorch/mnist_mlp.py", *extra_pt, "--init", init, "--csv", m], "init.log")
            inits.append((ds, "PyTorch eager32", init, *initial_final(m)))
    (out / "init.tmp").unlink()
    with open(out / "init.csv", "w") as f:
        f.write("dataset,system,init,initial_loss,final_loss,test_accuracy\n")
        for r in inits:
            f.write(",".join(map(str, r)) + "\n")


def step_plots():
    r = subprocess.run([py, "bench/plot.py", out], capture_output=True, text=True)
    (out / "plots.log").write_text(r.stdout + r.stderr)


# The steps that measure peak memory: the model, and the log where the step leaves the host's
# run's figure and then PyTorch's eager32 one.
MEMORY_STEPS = {"MNIST curves": ("MNIST 784-128-10", "mnist.log"), "Iris": ("Iris 4-5-3", "iris.log")}


def memory_from_log(name):
    """The peak memory figures of a step that --resume keeps, read back from its log."""
    model, log = MEMORY_STEPS[name]
    text = (out / log).read_text()
    memory.append((model, "ours", mib(r"one arena of ([\d.]+) MiB", text)))
    memory.append((model, "PyTorch eager32", mib(r"max_memory_allocated ([\d.]+) MiB", text)))


# Each step, and the file whose presence means --resume keeps it (None: always run).
steps = [("info", step_info, "info.txt"), ("GEMM table", step_gemm, "gemm.csv"),
         ("MNIST curves", step_mnist, "pytorch_mnist.csv"), ("MNIST widths", step_widths, "mnist_widths.csv"),
         ("architecture matrix", step_arch_matrix, "arch_matrix.csv"), ("scaling", step_scaling, "scaling.log"),
         ("regression sweep", step_regression, "regression_torch.csv"), ("Iris", step_iris, "pytorch_iris.csv"),
         ("cold start", step_cold_start, "cold_start.csv"), ("init study", step_init, "init.csv"),
         ("plots", step_plots, None)]
kept = [name for name, _, done in steps if a.resume and done and (out / done).exists()]
for name in kept:
    if name in MEMORY_STEPS:
        memory_from_log(name)
steps = [(name, fn) for name, fn, _ in steps if name not in kept]
t0 = time.time()
bar = tqdm(total=len(steps), unit="step") if tqdm else None
for i, (name, fn) in enumerate(steps):
    if bar:
        bar.set_description(name)
    else:
        print(f"[{i + 1}/{len(steps)}] {name} ({time.time() - t0:.0f} s)", flush=True)
    fn()
    if bar:
        bar.update(1)
if bar:
    bar.close()
with open(out / "memory.csv", "w") as f:
    f.write("model,system,peak_device_mib\n")
    for r in sorted(memory, key=lambda r: r[0] != "MNIST 784-128-10"):
        f.write(f"{r[0]},{r[1]},{r[2]:.3f}\n")
subprocess.run([py, "bench/results_md.py", out], check=True)
print(f"report in {out} after {time.time() - t0:.0f} s")
