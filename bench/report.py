#!/usr/bin/env python3
"""Every comparison of the project in one run, on a GPU machine:

    python3 bench/report.py OUT_DIR [--host target/release/host] [--force | --resume]

Needs a release build of the host (`cargo build --release -p host`, run from the repository root,
which has data/mnist), an NVIDIA GPU with nvidia-smi, and a python3 with PyTorch; JAX (with a
GPU) is optional: without it the JAX columns are left out, with a note. matplotlib draws the
plots and tqdm the progress bar where they are there (`pip install -r bench/requirements.txt`).

Runs the GEMM table, MNIST (loss curves and the modes at hidden 128, ours in fp16 and fp32
accumulation, PyTorch's modes including the torch.compile max-autotune one, and JAX's scan;
widths 128…8192; deeper models; the layered step alone at batch 128, 512 and 2048 against JAX's
scan at the same batch; the architecture matrix: older GPUs' paths emulated with --ptx
and --max-smem-kb, training and the host's GEMM choice against cuBLAS; init study; and scaling over GPUs against PyTorch DDP where there are
several GPUs), the regression sweep, Iris, cold and warm start (bench/cold_start.sh), and the
memory comparison; writes their CSVs and logs under OUT_DIR, the PNG plots (bench/plot.py) and
OUT_DIR/RESULTS.md with the date, GPU and versions. Every "×" there is against the fastest
framework mode (a PyTorch mode or JAX's scan) measured at that model in the same run.
The logs name commands portably (target/release/host, python3, OUT_DIR).

To publish it, replace the contents of docs/results/ with OUT_DIR (but its RESULTS.md) as
docs/results/NAME/ and write docs/RESULTS.md with
`python3 bench/results_md.py docs/results/NAME --images results/NAME/ --to docs/RESULTS.md`.
Refuses an existing OUT_DIR unless --force, or --resume: then the steps whose results are
already there are kept (a report cut short by a time limit is finished by running it again;
each step takes less than 10 minutes, so two or three commands of 10 minutes finish it, each
after the first with --resume). Takes about 17 minutes on an H200: the GEMM table (about 3
minutes), the width sweep (about 4), the MNIST step (about 2.5, most of it torch.compile's
autotuning) and the deeper models (about 2) take most of it; the layered step's eight runs and
JAX's at three batches add a few minutes, the host's GEMM choice on each architecture path
about one.
"""
import argparse, csv, datetime, re, shlex, shutil, site, subprocess, sys, sysconfig, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("out", metavar="OUT_DIR", help="folder for the CSVs, logs, plots and RESULTS.md (must not exist, but see --force and --resume)")
ap.add_argument("--host", default="target/release/host", help="the host binary (default: %(default)s, from `cargo build --release -p host`)")
ap.add_argument("--force", action="store_true", help="delete an existing OUT_DIR and run every step")
ap.add_argument("--resume", action="store_true", help="keep the steps an existing OUT_DIR has finished, run the others")
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


def portable(cmd):
    """cmd as a log names it: python3 for this interpreter, target/release/host for --host, and
    OUT_DIR for the output folder, not one machine's paths."""
    def one(arg):
        s = str(arg)
        if s == py:
            return "python3"
        if s == H:
            return "target/release/host"
        if s == str(out) or s.startswith(str(out) + "/"):
            return "OUT_DIR" + s[len(str(out)):]
        return s
    return shlex.join(one(x) for x in cmd)


# This machine's folders as the logs name them: the output folder (as an absolute path; a relative
# one is portable already), Python's packages and library (in the frameworks' tracebacks), and
# torch.compile's cache.
MACHINE_PATHS = [(str(out.resolve()), "OUT_DIR")] + [(p, "SITE_PACKAGES") for p in site.getsitepackages()] + [
    (sysconfig.get_paths()["stdlib"], "PYTHON_LIB")]


def portable_text(text):
    """A program's output with this machine's paths replaced by the names above."""
    for path, name in MACHINE_PATHS:
        text = text.replace(path, name)
    return re.sub(r"/tmp/torchinductor_\w+", "INDUCTOR_CACHE", text)


def run_logged(cmd, log, timeout=600):
    """Runs cmd (a list), appending its output to OUT/log; returns its exit status and output."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    text = r.stdout + r.stderr
    with open(out / log, "a") as f:
        f.write(f"$ {portable(cmd)}\n{portable_text(text)}\n")
    return r.returncode, text


def sh(cmd, log, timeout=600, check=True):
    """Runs cmd (a list), appending its output to OUT/log; returns the output."""
    rc, text = run_logged(cmd, log, timeout)
    if check and rc != 0:
        raise RuntimeError(f"{portable(cmd)} failed:\n{text[-2000:]}")
    return text


def try_logged(cmd, log, timeout):
    """run_logged, with a timeout as a failure (its exit status 124) rather than an exception."""
    try:
        return run_logged(cmd, log, timeout)
    except subprocess.TimeoutExpired:
        with open(out / log, "a") as f:
            f.write(f"$ {portable(cmd)}\ntimed out after {timeout} s\n\n")
        return 124, f"timed out after {timeout} s"


def fresh(*names):
    """Removes what an earlier, cut-short run of a step left in OUT (its logs), so that a step
    --resume runs again starts from nothing."""
    for n in names:
        (out / n).unlink(missing_ok=True)


_jax = []


def have_jax():
    """Whether this python3 imports JAX and JAX sees a GPU (asked once a run); if not, the JAX
    runs are left out and info.txt says why."""
    if not _jax:
        r = subprocess.run([py, "-c", "import jax; print(jax.__version__, jax.default_backend())"],
                           capture_output=True, text=True)
        words = r.stdout.split()
        _jax.append(r.returncode == 0 and words[-1:] == ["gpu"])
        if not _jax[0]:
            why = "no GPU backend" if r.returncode == 0 else (r.stderr.strip().splitlines() or ["import failed"])[-1]
            print(f"JAX left out: {why}", file=sys.stderr)
    return _jax[0]


def mib(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else float("nan")


memory, inits = [], []
# PyTorch's modes at hidden 128 (compile: torch.compile max-autotune, as the seed study ran it);
# the width sweep runs those of them that can be the fastest without a long compilation (eager32
# and fp16 never are: their times are in the MNIST table).
PT_MODES = ["eager32", "fp16", "compile", "graph", "epoch"]
WIDTH_PT_MODES = ["graph", "epoch"]
JAX_UNROLLS = "1,4"  # scan's unroll factors; each model keeps its fastest
JAX_TIMEOUT = 600


def step_info():
    sh([H, "info"], "info.txt")
    sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], "info.txt", check=False)
    sh([py, "-c", "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"], "info.txt")
    # `jax VERSION BACKEND`, or `jax: not installed`: results_md.py notes missing JAX columns.
    sh([py, "-c", "import importlib.util as u; print('jax: not installed') if u.find_spec('jax') is None else "
                  "(lambda j: print('jax', j.__version__, j.default_backend()))(__import__('jax'))"], "info.txt", check=False)


def step_gemm():
    fresh("gemm.log")
    sh([H, "gemm", "--csv", out / "gemm.csv"], "gemm.log")


def step_mnist():
    """Hidden 128, 10 epochs: ours (its loss curve; then with fp32 accumulation), every PyTorch
    mode, JAX's scan at each unroll."""
    fresh("mnist.log", "jax_mnist.csv")
    t = sh([H, "mnist", "--metrics", out / "mnist128.csv"], "mnist.log")
    memory.append(("MNIST 784-128-10", "ours", mib(r"one arena of ([\d.]+) MiB", t)))
    sh([H, "mnist", "--accum", "f32"], "mnist.log")
    if have_jax():
        # Optional: a failure leaves its output in the log and JAX out of the tables.
        try_logged([py, "bench/jax/mnist_scan.py", "--hidden", "128", "--unroll", JAX_UNROLLS, "--csv", out / "jax_mnist.csv"],
                   "mnist.log", JAX_TIMEOUT)
    rows = ["mode,hidden,epoch,step,loss,accuracy,time_s,epoch_time_s"]
    for mode in PT_MODES:
        # A mode that fails here (torch.compile without a working Triton, say) is left out.
        (out / "pt.tmp").unlink(missing_ok=True)
        rc, t = try_logged([py, "bench/pytorch/mnist_mlp.py", "--mode", mode, "--csv", out / "pt.tmp"], "mnist.log", 600)
        if rc == 0 and (out / "pt.tmp").exists():
            rows += (out / "pt.tmp").read_text().splitlines()[1:]
        if mode == "eager32":
            memory.append(("MNIST 784-128-10", "PyTorch eager32", mib(r"max_memory_allocated ([\d.]+) MiB", t)))
    (out / "pt.tmp").unlink(missing_ok=True)
    (out / "pytorch_mnist.csv").write_text("\n".join(rows) + "\n")


def step_widths():
    import os
    env = {**os.environ, "EPOCHS": "2", "MODES": " ".join(WIDTH_PT_MODES), "PYTHON": py,
           "JAX_UNROLL": JAX_UNROLLS if have_jax() else "", "JAX_TIMEOUT": str(JAX_TIMEOUT)}
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
ARCH_HIDDEN = ["128", "512", "128,128"]
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


def ours_run(args, log, timeout=300):
    """One `host mnist ARGS` run: (its header line, [(epoch, seconds, test accuracy)]), or a
    string saying why it did not run."""
    try:
        rc, text = run_logged([H, "mnist", *args], log, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s"
    header = next((l for l in text.splitlines() if l.startswith("MNIST")), None)
    epochs = [(int(m.group(1)), float(m.group(3)), round(float(m.group(2)) / 100, 6)) for m in
              re.finditer(r"^epoch +(\d+) .*test accuracy ([\d.]+)% +([\d.]+) s", text, re.M)]
    if rc != 0 or header is None or not epochs:
        return why_failed(text, rc)
    return header, epochs


def arch_run(flags, hidden):
    """One `host mnist` run of the matrix: (ptx, engine, [(epoch, seconds, test accuracy)]),
    or a string saying why it did not run."""
    # Long enough for the driver to compile an older PTX for this GPU on a cold cache.
    r = ours_run([*flags, "--hidden", hidden, "--epochs", str(ARCH_EPOCHS)], "arch_matrix.log")
    if isinstance(r, str):
        return r
    header, epochs = r
    ptx = re.search(r"\((sm_\d+) PTX", header)
    return ptx.group(1) if ptx else "?", engine_of(header), epochs


# Deeper models: ours, JAX's scan and PyTorch's fastest mode at hidden 128, 10 epochs each, at
# batch 128; then some at a larger batch, against JAX's scan at the same batch.
DEPTH_MODELS = ["128,128", "256,256,256", "512,256", "1024,1024", "128,128,128,128", "512,512,512,512"]
DEPTH_LARGER_BATCH = [("128,128", 256)]
DEPTH_EPOCHS = 10


def fastest_pytorch_mode():
    """PyTorch's fastest mode at hidden 128 in this run (lowest median of epochs 2+ in
    pytorch_mnist.csv); epoch if there is none."""
    import statistics
    t = {}
    p = out / "pytorch_mnist.csv"
    for r in (csv.DictReader(open(p)) if p.exists() else []):
        if r["epoch_time_s"] and int(r["epoch"]) > 1:
            t.setdefault(r["mode"], []).append(float(r["epoch_time_s"]))
    return min(t, key=lambda m: statistics.median(t[m])) if t else "epoch"


def framework_rows(system, mode, cmd, tmp, timeout, models, batch, log="depth.log"):
    """The per-epoch rows (system, mode, model, batch, engine, epoch, seconds, accuracy, skipped)
    of a baseline run of these models at this batch that writes mnist_mlp.py's CSV to tmp (its
    output in log), or (if it failed) one row per model saying why."""
    tmp.unlink(missing_ok=True)
    try:
        rc, text = run_logged(cmd, log, timeout=timeout)
        why = why_failed(text, rc) if rc != 0 or not tmp.exists() else ""
    except subprocess.TimeoutExpired:
        why = f"timed out after {timeout} s"
    if why:
        return [[system, mode, "784-" + h.replace(",", "-") + "-10", batch, "", "", "", "", why] for h in models]
    rows = [[system, r["mode"], f"784-{r['hidden']}-10", batch, "", r["epoch"], r["epoch_time_s"], r["accuracy"], ""]
            for r in csv.DictReader(open(tmp)) if r["epoch_time_s"]]
    tmp.unlink()
    return rows


def step_depth():
    """Deeper models (`--hidden` with several widths): ours (its engine from its header line),
    JAX's scan at each unroll, PyTorch's fastest mode at hidden 128 (batch 128 only); a run
    that fails is a row that says why."""
    fresh("depth.log")
    rows = []
    for hidden, batch in [(h, 128) for h in DEPTH_MODELS] + DEPTH_LARGER_BATCH:
        model = "784-" + hidden.replace(",", "-") + "-10"
        r = ours_run(["--hidden", hidden, "--batch", str(batch), "--epochs", str(DEPTH_EPOCHS)], "depth.log")
        if isinstance(r, str):
            rows.append(["ours", "", model, batch, "", "", "", "", r])
            continue
        header, epochs = r
        rows += [["ours", "", model, batch, engine_of(header), e, sec, acc, ""] for e, sec, acc in epochs]
    batched = [(DEPTH_MODELS, 128)] + [([h], b) for h, b in DEPTH_LARGER_BATCH]
    if have_jax():
        for models, batch in batched:
            cmd = [py, "bench/jax/mnist_scan.py", "--hidden", *models, "--batch", str(batch), "--unroll", JAX_UNROLLS,
                   "--epochs", str(DEPTH_EPOCHS), "--csv", out / "jax.tmp"]
            rows += framework_rows("jax", "", cmd, out / "jax.tmp", JAX_TIMEOUT, models, batch)
    mode = fastest_pytorch_mode()
    for hidden in DEPTH_MODELS:
        cmd = [py, "bench/pytorch/mnist_mlp.py", "--mode", mode, "--hidden", hidden, "--epochs", str(DEPTH_EPOCHS),
               "--csv", out / "pt.tmp"]
        rows += framework_rows("pytorch", mode, cmd, out / "pt.tmp", 300, [hidden], 128)
    with open(out / "depth.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["system", "mode", "model", "batch", "engine", "epoch", "epoch_time_s", "test_accuracy", "skipped"])
        w.writerows(rows)


# The layered step alone: `--layered` even where the persistent kernel would run, so that what
# is measured is the floor itself, against JAX's scan at the same batch.
LAYERED_ROWS = [("1024,1024", 128), ("256,256,256", 128), ("512,512,512,512", 128), ("128", 128),
                ("8192", 128), ("4096", 128), ("4096", 512), ("4096", 2048)]
LAYERED_EPOCHS = 5


def step_layered():
    """Ours with `--layered` at each (model, batch) of LAYERED_ROWS, and JAX's scan at each
    unroll at the same batch; a run that fails is a row that says why."""
    fresh("layered.log")
    rows = []
    for hidden, batch in LAYERED_ROWS:
        model = "784-" + hidden.replace(",", "-") + "-10"
        r = ours_run(["--layered", "--hidden", hidden, "--batch", str(batch), "--epochs", str(LAYERED_EPOCHS)],
                     "layered.log")
        if isinstance(r, str):
            rows.append(["ours", "", model, batch, "", "", "", "", r])
            continue
        header, epochs = r
        rows += [["ours", "", model, batch, engine_of(header), e, sec, acc, ""] for e, sec, acc in epochs]
    if have_jax():
        for batch in dict.fromkeys(b for _, b in LAYERED_ROWS):
            models = [h for h, b in LAYERED_ROWS if b == batch]
            cmd = [py, "bench/jax/mnist_scan.py", "--hidden", *models, "--batch", str(batch), "--unroll", JAX_UNROLLS,
                   "--epochs", str(LAYERED_EPOCHS), "--csv", out / "jax.tmp"]
            rows += framework_rows("jax", "", cmd, out / "jax.tmp", JAX_TIMEOUT, models, batch, "layered.log")
    with open(out / "layered.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["system", "mode", "model", "batch", "engine", "epoch", "epoch_time_s", "test_accuracy", "skipped"])
        w.writerows(rows)


def step_arch_matrix():
    """Each older GPU's path through `host mnist` (its PTX, its shared memory per block) on this
    GPU; a path the binary or the GPU cannot take is a row that says why, not an abort."""
    fresh("arch_matrix.log")
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


# The sizes of the architecture paths' GEMM table: squares, and the MLP's products at hidden 128
# and 4096.
ARCH_GEMM_SIZES = ",".join(["square1024", "square4096", "square8192"] +
                           [f"mlp{h}.{p}" for h in (128, 4096) for p in ("fwd1", "fwd2", "dx2", "dw2", "dw1")])


def step_arch_gemm():
    """`host gemm --choice` on each path of the architecture matrix: the row the host picks there
    for each size, against cuBLAS. A path that does not run leaves its reason in the log."""
    fresh("arch_gemm.log")
    tmp = out / "gemm.tmp"
    with open(out / "arch_gemm.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "shape", "m", "n", "k", "version", "time_ms", "pct_cublas_f16", "correct"])
        for name, flags in ARCH_PATHS:
            tmp.unlink(missing_ok=True)
            # A wrong result fails the command after the CSV is written: its row says so.
            try_logged([H, "gemm", *flags, "--choice", "--sizes", ARCH_GEMM_SIZES, "--time-ms", "50", "--csv", tmp],
                       "arch_gemm.log", 600)
            for r in csv.DictReader(open(tmp)) if tmp.exists() else []:
                if r["chosen"] == "true":
                    w.writerow([name, *(r[c] for c in ("shape", "m", "n", "k", "version", "time_ms", "pct_cublas_f16", "correct"))])
    tmp.unlink(missing_ok=True)


def step_scaling():
    """Scaling over GPUs against PyTorch DDP, where the machine has several GPUs."""
    import os
    gpus = int(sh([py, "-c", "import torch; print(torch.cuda.device_count())"], "scaling.log").strip())
    if gpus < 2:
        return
    env = {**os.environ, "PYTHON": py}
    r = subprocess.run(["bench/mnist_scaling.sh", out / "scaling", H], capture_output=True, text=True, env=env, timeout=1200)
    with open(out / "scaling.log", "a") as f:
        f.write(r.stdout + r.stderr)
    for name in ("mnist_scaling.csv", "allreduce.csv"):
        if (out / "scaling" / name).exists():
            shutil.move(out / "scaling" / name, out / name)
    shutil.rmtree(out / "scaling")


def step_cold_start():
    """Time to exit of short commands with an empty driver cache and a filled one."""
    fresh("cold_start.log")
    sh(["bench/cold_start.sh", "--csv", out / "cold_start.csv", H], "cold_start.log", timeout=900)


def step_regression():
    fresh("regression.log")
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
    fresh("iris.log")
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
    fresh("init.log")
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
    fresh("plots.log")
    run_logged([py, "bench/plot.py", out], "plots.log")


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
         ("deeper models", step_depth, "depth.csv"), ("layered step", step_layered, "layered.csv"),
         ("architecture matrix", step_arch_matrix, "arch_matrix.csv"), ("GEMM by architecture", step_arch_gemm, "arch_gemm.csv"),
         ("scaling", step_scaling, "scaling.log"),
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
