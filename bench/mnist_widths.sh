#!/usr/bin/env bash
# Time per epoch against hidden width, ours, PyTorch's modes and JAX's scan, on a GPU machine:
#   bench/mnist_widths.sh OUT_DIR [HOST_BINARY]
# Writes OUT_DIR/mnist_widths.csv (system,mode,hidden,epoch,epoch_time_s,test_accuracy,engine):
# system ours, pytorch or jax; ours' mode is its engine in a word (persistent or graph) and its
# engine the whole description the header line of `host mnist` gives; JAX's mode is scan-uN.
# WIDTHS (128 … 8192), EPOCHS (3), MODES (PyTorch's: eager32 fp16 graph epoch), JAX_UNROLL (scan
# unroll factors, a comma list: 1,4; empty: no JAX), PYTHON (python3) override the sweep. JAX runs
# only where it imports and sees a GPU; all widths in one process (bench/jax/mnist_scan.py).
set -euo pipefail
out=${1:?output directory}; host=${2:-target/release/host}
widths=${WIDTHS:-"128 256 512 1024 2048 4096 8192"}
epochs=${EPOCHS:-3}
py=${PYTHON:-python3}
mkdir -p "$out"
csv="$out/mnist_widths.csv"
echo "system,mode,hidden,epoch,epoch_time_s,test_accuracy,engine" > "$csv"
for h in $widths; do
  # mode: the engine the header line names (the persistent kernel where it applies, else the
  # layered kernels replayed as a CUDA graph); `persistent kernel (N blocks` may be followed by
  # more words before its closing parenthesis. engine: the header's text after its
  # accumulator, quoted (it has commas).
  "$host" mnist --hidden "$h" --epochs "$epochs" --metrics "$out/ours_$h.tmp" 2>/dev/null \
    | awk -v h="$h" '/^MNIST/ {m = ($0 ~ /persistent kernel \(/) ? "persistent" : "graph"
                               e = $0; sub(/.* accumulation, /, "", e); gsub(/"/, "\"\"", e)}
                     /^epoch/ {gsub("%","",$11); print "ours," m "," h "," $2 "," $12 "," $11/100 ",\"" e "\""}' >> "$csv"
  rm -f "$out/ours_$h.tmp"
  for mode in ${MODES:-eager32 fp16 graph epoch}; do
    timeout "${PT_TIMEOUT:-300}" "$py" bench/pytorch/mnist_mlp.py --mode "$mode" --hidden "$h" --epochs "$epochs" --csv "$out/pt.tmp" >/dev/null 2>&1 || { echo "pytorch $mode $h failed or timed out" >&2; continue; }
    awk -F, -v h="$h" -v m="$mode" 'NR > 1 && $8 != "" {print "pytorch," m "," h "," $3 "," $8 "," $6 ","}' "$out/pt.tmp" >> "$csv"
    rm -f "$out/pt.tmp"
  done
  echo "width $h done" >&2
done
unroll=${JAX_UNROLL-1,4}
if [ -z "$unroll" ]; then
  echo "JAX left out (JAX_UNROLL is empty)" >&2
elif ! "$py" -c 'import sys, jax; sys.exit(jax.default_backend() != "gpu")' >/dev/null 2>&1; then
  echo "JAX left out: $py cannot import jax, or jax sees no GPU" >&2
elif timeout "${JAX_TIMEOUT:-600}" "$py" bench/jax/mnist_scan.py --hidden $widths --unroll "$unroll" --epochs "$epochs" --csv "$out/jax.tmp" >&2; then
  awk -F, 'NR > 1 && $8 != "" {print "jax," $1 "," $2 "," $3 "," $8 "," $6 ","}' "$out/jax.tmp" >> "$csv"
  rm -f "$out/jax.tmp"
  echo "jax done" >&2
else
  echo "jax failed or timed out" >&2
fi
