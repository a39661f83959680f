#!/usr/bin/env python3
"""The GEMM table with the clock and power each row ran at.

Runs `host gemm` with a long time budget per row (so the GPU settles at the clock and power it
holds under sustained load) while `nvidia-smi` samples the SM clock, the board power and the
clock event reasons, and prints every row with the mean clock and power over the middle of its
timing window, and its TFLOP/s per GHz: the throughput per clock cycle, which the roof rows
(registers only, no memory traffic) bound for any `mma.sync` kernel.

    python3 bench/gemm_power.py --host target/release/host -- --config tc80_128x128x64_64x64_s3 \\
        --sizes square4096,square8192

Arguments after `--` go to `host gemm`; `--time-ms` is added (default 3000 here). A row's clock
and power are the means over the middle 70% of the time between the line before it and its own
(its timing and its check); rows faster than 1 ms per replayed graph take less than the budget.
`--gpu` picks the GPU nvidia-smi samples (its index or PCI bus id: nvidia-smi's order can differ
from CUDA's, so pass the same GPU to `host gemm` with `--device`).
"""
import argparse
import csv
import datetime
import subprocess
import sys
import threading

# nvidia-smi's event reasons that lower the clock under load (bit masks).
REASONS = {0x4: "sw power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal",
           0x80: "hw power brake"}


def number(text, parse):
    """A field nvidia-smi may report as `[N/A]` (None then)."""
    try:
        return parse(text)
    except ValueError:
        return None


def sample(proc, out):
    """Appends (time, MHz, W, reasons) per nvidia-smi line until it exits; a field it cannot
    read is None."""
    for line in proc.stdout:
        f = [x.strip() for x in line.split(",")]
        if len(f) < 4:
            continue
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except ValueError:
            continue
        out.append((t, number(f[1], float), number(f[2], float), number(f[3], lambda x: int(x, 16))))


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def tflops(line):
    """TFLOP/s of a roof line or a table row, else None."""
    if line.startswith("roof:"):
        return float(line.rsplit(":", 1)[1].split()[0])
    cols = line.split()
    if len(cols) >= 9 and cols[5].replace(".", "", 1).isdigit():
        return float(cols[6])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="target/release/host", help="the host binary")
    ap.add_argument("--time-ms", type=int, default=3000, help="time budget per row")
    ap.add_argument("--gpu", default="0", help="nvidia-smi's index or PCI bus id of the GPU")
    ap.add_argument("--csv", help="also write the rows as CSV")
    ap.add_argument("gemm_args", nargs="*", help="arguments for `host gemm` (after --)")
    a = ap.parse_args()

    samples = []
    try:
        smi = subprocess.Popen(
            ["nvidia-smi", "-i", a.gpu, "--format=csv,noheader,nounits", "-lms", "20",
             "--query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError as e:
        sys.exit(f"cannot run nvidia-smi: {e}")
    reader = threading.Thread(target=sample, args=(smi, samples), daemon=True)
    reader.start()
    lines = [(datetime.datetime.now().timestamp(), None)]
    try:
        gemm = subprocess.Popen([a.host, "gemm", "--time-ms", str(a.time_ms), *a.gemm_args],
                                stdout=subprocess.PIPE, text=True)
        for line in gemm.stdout:
            lines.append((datetime.datetime.now().timestamp(), line.rstrip("\n")))
        gemm.wait()
    except OSError as e:
        sys.exit(f"cannot run {a.host}: {e}")
    finally:
        smi.kill()
        smi.wait()
        reader.join(timeout=5)
    if gemm.returncode != 0:
        sys.exit(f"host gemm failed (exit {gemm.returncode}); its output:\n"
                 + "\n".join(l for _, l in lines[1:]))
    if not samples:
        sys.exit(f"nvidia-smi gave no samples for GPU {a.gpu}")

    rows = []
    for (t0, _), (t, line) in zip(lines, lines[1:]):
        tf = tflops(line)
        if tf is None:
            print(line)
            continue
        # The row was timed (and checked) between the line before it and its own.
        lo, hi = t0 + 0.15 * (t - t0), t - 0.15 * (t - t0)
        w = [s for s in samples if lo <= s[0] <= hi]
        mhz, watts = mean(s[1] for s in w), mean(s[2] for s in w)
        if not mhz:
            print(f"{line}   (no clock samples)")
            continue
        bits = 0
        for s in w:
            bits |= s[3] or 0
        why = ", ".join(v for k, v in REASONS.items() if bits & k) or "-"
        per_ghz = tf / (mhz / 1000)
        power = f"{watts:4.0f} W" if watts is not None else "   ? W"
        rows.append((line, tf, mhz, watts, why, per_ghz))
        print(f"{line}   | {mhz:5.0f} MHz {power} {per_ghz:6.1f} TFLOP/s per GHz ({why})")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["row", "tflops", "sm_mhz", "watts", "clock_reasons", "tflops_per_ghz"])
            for line, tf, mhz, watts, why, per_ghz in rows:
                label = line.split(":")[1].strip() if line.startswith("roof:") else \
                    " ".join(line.split()[:2])
                w.writerow([label, tf, round(mhz), "" if watts is None else round(watts), why,
                            round(per_ghz, 1)])


if __name__ == "__main__":
    main()
