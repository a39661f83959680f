#!/usr/bin/env bash
# Time per epoch against hidden width, ours and PyTorch's modes, on a GPU machine:
#   bench/mnist_widths.sh OUT_DIR [HOST_BINARY]
# Writes OUT_DIR/mnist_widths.csv (system,mode,hidden,epoch,epoch_time_s,test_accuracy).
set -euo pipefail
out=${1:?output directory}; host=${2:-target/release/host}
widths=${WIDTHS:-"128 256 512 1024 2048 4096 8192"}
epochs=${EPOCHS:-3}
mkdir -p "$out"
csv="$out/mnist_widths.csv"
echo "system,mode,hidden,epoch,epoch_time_s,test_accuracy" > "$csv"
for h in $widths; do
  # mode: the engine the header line names (the persistent kernel where it applies, else the
  # layered kernels replayed as a CUDA graph); `persistent kernel (N blocks` may be followed by
  # more words before its closing parenthesis
  "$host" mnist --hidden "$h" --epochs "$epochs" --metrics "$out/ours_$h.tmp" 2>/dev/null \
    | awk -v h="$h" '/^MNIST/ {m = ($0 ~ /persistent kernel \(/) ? "persistent" : "graph"}
                     /^epoch/ {gsub("%","",$11); print "ours," m "," h "," $2 "," $12 "," $11/100}' >> "$csv"
  rm -f "$out/ours_$h.tmp"
  for mode in ${MODES:-eager32 fp16 graph epoch}; do
    timeout "${PT_TIMEOUT:-300}" "${PYTHON:-python3}" bench/pytorch/mnist_mlp.py --mode "$mode" --hidden "$h" --epochs "$epochs" --csv "$out/pt.tmp" >/dev/null 2>&1 || { echo "pytorch $mode $h failed or timed out" >&2; continue; }
    awk -F, -v h="$h" -v m="$mode" 'NR > 1 && $8 != "" {print "pytorch," m "," h "," $3 "," $8 "," $6}' "$out/pt.tmp" >> "$csv"
    rm -f "$out/pt.tmp"
  done
  echo "width $h done" >&2
done
