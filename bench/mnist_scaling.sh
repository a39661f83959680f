#!/usr/bin/env bash
# Scaling over GPUs, ours (`host mnist --gpus N`) against PyTorch DDP (torchrun), and the
# gradient sum alone (`host allreduce`), on a machine with several GPUs:
#   bench/mnist_scaling.sh OUT_DIR [HOST_BINARY]
# Writes OUT_DIR/mnist_scaling.csv (system,mode,gpus,hidden,batch,epoch,epoch_time_s,test_accuracy)
# and OUT_DIR/allreduce.csv (host allreduce's columns, every GPU count above 1).
# GPUS (default: 1, 2, 4, … up to the GPUs present), WIDTHS (4096 8192), BATCHES (global batches:
# 512 2048), EPOCHS (3), SYSTEMS (ours pytorch) override the sweep.
set -euo pipefail
out=${1:?output directory}; host=${2:-target/release/host}
py=${PYTHON:-python3}
present=$("$py" -c 'import torch; print(torch.cuda.device_count())')
gpus=${GPUS:-$(g=1; while [ $g -le "$present" ]; do printf "%s " $g; g=$((g * 2)); done)}
widths=${WIDTHS:-"4096 8192"}; batches=${BATCHES:-"512 2048"}; epochs=${EPOCHS:-3}
systems=${SYSTEMS:-"ours pytorch"}
has() { [[ " $systems " == *" $1 "* ]]; }
mkdir -p "$out"
# The GPUs and their links, for the log.
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c >&2
nvidia-smi topo -m >&2 || true
csv="$out/mnist_scaling.csv"
echo "system,mode,gpus,hidden,batch,epoch,epoch_time_s,test_accuracy" > "$csv"
for batch in $batches; do
for h in $widths; do
  for g in $gpus; do
    # mode: the engine the header line names
    has ours && "$host" mnist --hidden "$h" --batch "$batch" --epochs "$epochs" --gpus "$g" 2>&1 \
      | awk -v h="$h" -v g="$g" -v b="$batch" '/^MNIST/ {m = ($0 ~ /persistent kernel \(/) ? "persistent" : "graph"}
                       /^epoch/ {gsub("%","",$11); print "ours," m "," g "," h "," b "," $2 "," $12 "," $11/100}' >> "$csv"
    has pytorch && { "$py" -m torch.distributed.run --standalone --nproc_per_node "$g" bench/pytorch/mnist_ddp.py \
      --hidden "$h" --batch "$batch" --epochs "$epochs" --csv "$out/ddp.tmp" > /dev/null 2>&1 \
      && tail -n +2 "$out/ddp.tmp" >> "$csv" || echo "pytorch ddp on $g GPUs at hidden $h, batch $batch failed" >&2; }
    rm -f "$out/ddp.tmp"
    echo "hidden $h, batch $batch on $g GPUs done" >&2
  done
done
done
has ours || exit 0
sums="$out/allreduce.csv"; rm -f "$sums"
for g in $gpus; do
  [ "$g" -ge 2 ] || continue
  "$host" allreduce --gpus "$g" --hidden "${widths// /,}" --csv "$out/allreduce.tmp" >&2
  if [ -f "$sums" ]; then tail -n +2 "$out/allreduce.tmp" >> "$sums"; rm "$out/allreduce.tmp"
  else mv "$out/allreduce.tmp" "$sums"; fi
done
