#!/usr/bin/env python3
"""The GEMM table with the clock and power each row ran at.

Runs `host gemm` with a long time budget per row (so the GPU settles at the clock and power it
holds under sustained load) while `nvidia-smi` samples the SM clock, the board power and the
clock event reasons, and prints every row with the mean clock and power over the middle of its
timing window, and its TFLOP/s per GHz: the throughput per clock cycle, which the roof rows
(registers only, no memory traffic) bound for any `mma.sync` kernel.

    python3 bench/gemm_power.py --host .gpu/bin/host -- --config tc80_128x128x64_64x64_s3 \\
        --sizes square4096,square8192

Arguments after `--` go to `host gemm`; `--time-ms` is added (default 3000 here).
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


def sample(proc, out):
    """Appends (time, MHz, W, reasons) per nvidia-smi line until it exits."""
    for line in proc.stdout:
        f = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, float(f[1]), float(f[2]), int(f[3], 16)))
        except (ValueError, IndexError):
            continue


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
    ap.add_argument("--host", default=".gpu/bin/host", help="the host binary")
    ap.add_argument("--time-ms", type=int, default=3000, help="time budget per row")
    ap.add_argument("--csv", help="also write the rows as CSV")
    ap.add_argument("gemm_args", nargs="*", help="arguments for `host gemm` (after --)")
    a = ap.parse_args()

    samples = []
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active",
         "--format=csv,noheader,nounits", "-lms", "20"],
        stdout=subprocess.PIPE, text=True)
    reader = threading.Thread(target=sample, args=(smi, samples), daemon=True)
    reader.start()
    lines = []
    gemm = subprocess.Popen([a.host, "gemm", "--time-ms", str(a.time_ms), *a.gemm_args],
                            stdout=subprocess.PIPE, text=True)
    for line in gemm.stdout:
        lines.append((datetime.datetime.now().timestamp(), line.rstrip("\n")))
    gemm.wait()
    smi.terminate()
    reader.join(timeout=5)
    if gemm.returncode != 0:
        sys.exit(f"host gemm failed (exit {gemm.returncode}); its output:\n"
                 + "\n".join(l for _, l in lines))
    if not samples:
        sys.exit("nvidia-smi gave no samples")

    budget = a.time_ms / 1000
    rows = []
    for t, line in lines:
        tf = tflops(line)
        if tf is None:
            print(line)
            continue
        # A row is printed once its timing (about `budget`) and its check are done.
        w = [s for s in samples if t - 0.85 * budget <= s[0] <= t - 0.15 * budget]
        if not w:
            print(f"{line}   (no clock samples)")
            continue
        mhz = sum(s[1] for s in w) / len(w)
        watts = sum(s[2] for s in w) / len(w)
        bits = 0
        for s in w:
            bits |= s[3]
        why = ", ".join(v for k, v in REASONS.items() if bits & k) or "-"
        per_ghz = tf / (mhz / 1000)
        rows.append((line, tf, mhz, watts, why, per_ghz))
        print(f"{line}   | {mhz:5.0f} MHz {watts:4.0f} W {per_ghz:6.1f} TFLOP/s per GHz ({why})")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["row", "tflops", "sm_mhz", "watts", "clock_reasons", "tflops_per_ghz"])
            for line, tf, mhz, watts, why, per_ghz in rows:
                label = line.split(":")[1].strip() if line.startswith("roof:") else \
                    " ".join(line.split()[:2])
                w.writerow([label, tf, round(mhz), round(watts), why, round(per_ghz, 1)])


if __name__ == "__main__":
    main()
