#!/usr/bin/env bash
# Wall-clock time to exit of short commands with an empty driver cache (cold: every PTX the
# binary loads is JIT-compiled) and a filled one (warm), on a GPU machine, from the repository
# root (host mnist reads data/mnist):
#   bench/cold_start.sh [--csv FILE] [HOST_BINARY...]     (default target/release/host)
# Cold runs set CUDA_CACHE_DISABLE=1. Warm runs use a fresh CUDA_CACHE_PATH filled by one
# untimed run of the same command, so the caller's own cache is neither read nor changed.
# REPEAT (default 3) timed runs per cell; the table gives their median, min and max. Pass a
# binary built without ptxas (PTXAS= cargo build --release) and one built with it to compare
# the driver's JIT compile against the embedded cubins.
set -euo pipefail
csv=""
if [ "${1:-}" = "--csv" ]; then csv=${2:?--csv needs a file}; shift 2; fi
[ $# -gt 0 ] || set -- target/release/host
repeat=${REPEAT:-3}
commands=("info" "mnist --epochs 1" "iris --epochs 1" "regression --epochs 1 --points 100000")

# Seconds one run of "$@" takes to exit; its output is discarded, a failure stops the script.
time_run() {
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$@" >/dev/null 2>&1; then echo "failed: $*" >&2; exit 1; fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}'
}

# median min max of the numbers on stdin, one per line
summary() {
  sort -g | awk '{v[NR] = $1} END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.2f %.2f %.2f\n", m, v[1], v[NR]}'
}

rows=()
for host in "$@"; do
  [ -x "$host" ] || { echo "no executable $host" >&2; exit 1; }
  warm_cache=$(mktemp -d)
  module=$(CUDA_CACHE_PATH=$warm_cache "$host" info | sed -n 's/^module: *//p')
  for cmd in "${commands[@]}"; do
    read -r -a args <<<"$cmd"
    cold=$(for _ in $(seq "$repeat"); do CUDA_CACHE_DISABLE=1 time_run "$host" "${args[@]}"; done | summary)
    CUDA_CACHE_PATH=$warm_cache time_run "$host" "${args[@]}" >/dev/null # fills the cache
    warm=$(for _ in $(seq "$repeat"); do CUDA_CACHE_PATH=$warm_cache time_run "$host" "${args[@]}"; done | summary)
    # The binary by its file name alone: where it was built or copied to says nothing of it.
    name=$(basename "$host")
    rows+=("$name|${module:--}|$cmd|cold|$cold" "$name|${module:--}|$cmd|warm|$warm")
    echo "done: $name $cmd" >&2
  done
  rm -rf "$warm_cache"
done

printf '%-28s %-40s %-42s %-5s %8s %8s %8s\n' binary module command cache median_s min_s max_s
for r in "${rows[@]}"; do
  IFS='|' read -r host module cmd cache stats <<<"$r"
  read -r med lo hi <<<"$stats"
  printf '%-28s %-40s %-42s %-5s %8s %8s %8s\n' "$host" "$module" "host $cmd" "$cache" "$med" "$lo" "$hi"
done
if [ -n "$csv" ]; then
  echo "binary,module,command,cache,runs,median_s,min_s,max_s" >"$csv"
  for r in "${rows[@]}"; do
    IFS='|' read -r host module cmd cache stats <<<"$r"
    read -r med lo hi <<<"$stats"
    echo "$host,$module,host $cmd,$cache,$repeat,$med,$lo,$hi" >>"$csv"
  done
  echo "wrote $csv" >&2
fi
