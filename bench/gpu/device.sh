#!/bin/bash
# Everything placec measures on one GPU machine, in one call (bench/README.md, "GPU"):
#   1. builds placert_cuda and the shipped generated programs (bench/gpu/run.py --build-only),
#   2. runs placert-cuda-kernel-test (every kernel against the CPU reference),
#   3. times the fused attention beside PyTorch's SDPA backends (bench/gpu/attention.py), and
#      beside each baseline FlashAttention.cu given (other versions of the kernels),
#   4. profiles the attention kernels under Nsight Compute (speed of light, warp states),
#   5. runs both bench configs with this tree's placert_cuda and, given baselines, with the first
#      baseline's library in its place,
#   6. times the kernels of a mixture of experts (bench/gpu/moe_kernels.py: the fidelity rows'
#      grouped expert products, the routing, attention over grouped keys and values),
#   7. runs bench/gpu/run.py in full (placert, PyTorch eager and torch.compile) until the deadline.
#
#   bench/gpu/device.sh [--baseline FlashAttention.cu]... [--seconds N]
#
# Results go to $OUT (or ./device-out): summary.txt, attention.json, moe-kernels.json,
# results.md/json and
# everything else in logs.tar.gz. Every stage has a deadline inside the N seconds (default 540), so
# that the files are written before a caller's limit.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/device-out}
BASELINES=()
SECONDS_TOTAL=540
while [ $# -gt 0 ]; do
  case "$1" in
  --baseline)
    [ -f "${2:-}" ] || { echo "device.sh: --baseline: no file '${2:-}'" >&2; exit 1; }
    BASELINES+=("$(realpath "$2")"); shift 2 ;;
  --seconds)
    [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "device.sh: --seconds: expected a positive number of seconds, got '${2:-}'" >&2; exit 1; }
    SECONDS_TOTAL=$2; shift 2 ;;
  *) echo "device.sh: unknown argument '$1'" >&2; exit 1 ;;
  esac
done
mkdir -p "$OUT"
WORK=${WORK:-/tmp/placec-device}
rm -rf "$WORK" && mkdir -p "$WORK"
START=$(date +%s)
DEADLINE=$((START + SECONDS_TOTAL))
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
left() { echo $((DEADLINE - $(date +%s))); }
# Seconds for the next stage: what is left, at most $1, at least 1 (timeout 0 would mean none).
cap() { local l=$(left) c=${1:-100000}; [ "$l" -lt "$c" ] && c=$l; [ "$c" -lt 1 ] && c=1; echo "$c"; }
stage() { summary "== $(date -u +%H:%M:%S) (+$(($(date +%s) - START)) s, $(left) s left) $*"; }
finish() {
  tar -czf "$OUT/logs.tar.gz" -C "$WORK" --exclude='*.so*' --exclude='*.o' --exclude=CMakeFiles \
    --exclude='*-bench' --exclude='placert-cuda-*-test' . 2>/dev/null
  cp "$WORK"/new/results.md "$WORK"/new/results.json "$OUT"/ 2>/dev/null
  stage "done"
}
trap finish EXIT

stage "machine"
summary "$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader 2>&1)"
summary "$(nvcc --version | tail -1); $(python3 -c 'import torch; print("torch", torch.__version__)' 2>&1)"

stage "1. build (run.py --build-only)"
timeout $(cap 240) python3 "$ROOT/bench/gpu/run.py" --out "$WORK/new" --build-only >"$WORK/build.log" 2>&1
summary "build exit $?"
NEW=$WORK/new/placert_cuda

# Each baseline's library and bench, built in the background while the kernel test runs.
OLD_PIDS=()
for i in "${!BASELINES[@]}"; do
  mkdir -p "$WORK/oldsrc-$i" && cp -r "$ROOT/runtime" "$WORK/oldsrc-$i/" &&
    cp "${BASELINES[$i]}" "$WORK/oldsrc-$i/runtime/cuda/FlashAttention.cu"
  (cmake -S "$WORK/oldsrc-$i/runtime/cuda" -B "$WORK/old-$i" -DCMAKE_BUILD_TYPE=Release \
    $(python3 -c "import sys; sys.path.insert(0, '$ROOT/bench/gpu'); import run; print(' '.join(run.cmake_args()[1:]))") \
    && cmake --build "$WORK/old-$i" -j 8 --target placert_cuda placert-cuda-attention-bench) \
    >"$WORK/build-old-$i.log" 2>&1 &
  OLD_PIDS+=($!)
done

stage "2. kernel test"
timeout $(cap 120) "$NEW/placert-cuda-kernel-test" >"$WORK/kernel-test.log" 2>&1
KERNEL_RC=$?
summary "kernel test exit $KERNEL_RC: $(tail -1 "$WORK/kernel-test.log")"
grep -E "FAIL|fail" "$WORK/kernel-test.log" | head -20 | tee -a "$OUT/summary.txt"

OLD_BENCH=()
for i in "${!BASELINES[@]}"; do
  wait "${OLD_PIDS[$i]}"
  summary "baseline $i (${BASELINES[$i]}) build exit $?"
  [ -x "$WORK/old-$i/placert-cuda-attention-bench" ] &&
    OLD_BENCH+=(--baseline "$WORK/old-$i/placert-cuda-attention-bench")
done

stage "3. attention beside PyTorch"
timeout $(cap 120) python3 "$ROOT/bench/gpu/attention.py" \
  --placert "$NEW/placert-cuda-attention-bench" "${OLD_BENCH[@]}" \
  --json "$OUT/attention.json" 2>&1 | tee -a "$OUT/summary.txt"

stage "4. ncu on the attention kernels"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout $(cap 90) "$NCU" --clock-control none -k regex:flash \
    -c 3 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section LaunchStats "$NEW/placert-cuda-attention-bench" 4 2048 16 128 1 \
    >"$WORK/ncu-attention.txt" 2>&1
  summary "ncu exit $?"
  grep -E "flash|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall" \
    "$WORK/ncu-attention.txt" | head -60 >>"$OUT/summary.txt"
fi

stage "5. bench programs, this tree and the baseline"
for run in gpt350m_1gpu gpt1300m_1gpu; do
  binary=$WORK/new/gen/$run/build/$run
  [ -x "$binary" ] || { summary "$run: not built"; continue; }
  timeout $(cap 90) "$binary" --steps 10 --warmup 3 \
    --metrics "$WORK/$run-new.json" >"$WORK/$run-new.log" 2>&1
  summary "$run (this tree) exit $?: $(grep -E 'tokens/s' "$WORK/$run-new.log" | tail -2 | tr '\n' ' ')"
done
if [ "${#BASELINES[@]}" -gt 0 ] && [ -f "$WORK/old-0/libplacert_cuda.so.0.5.0" ]; then
  lib=$(ls "$NEW"/libplacert_cuda.so.*.*.* | head -1)
  cp "$lib" "$WORK/lib-new.so" && cp "$WORK/old-0/libplacert_cuda.so.0.5.0" "$lib"
  for run in gpt350m_1gpu gpt1300m_1gpu; do
    binary=$WORK/new/gen/$run/build/$run
    timeout $(cap 90) "$binary" --steps 10 --warmup 3 \
      --metrics "$WORK/$run-old.json" >"$WORK/$run-old.log" 2>&1
    summary "$run (baseline) exit $?: $(grep -E 'tokens/s' "$WORK/$run-old.log" | tail -2 | tr '\n' ' ')"
  done
  cp "$WORK/lib-new.so" "$lib"
fi

stage "6. kernels of a mixture of experts"
timeout $(cap 90) python3 "$ROOT/bench/gpu/moe_kernels.py" --shapes "$ROOT/bench/gpu/moe-shapes.json" \
  --out "$OUT" --budget 70 >"$WORK/moe-kernels.log" 2>&1
summary "moe_kernels.py exit $?"

stage "7. run.py in full (placert, PyTorch eager and compiled)"
if [ "$KERNEL_RC" = 0 ]; then
  timeout $(cap $(( $(left) - 15 ))) python3 "$ROOT/bench/gpu/run.py" --out "$WORK/new" --steps 10 \
    --warmup 3 >"$WORK/run.log" 2>&1
  summary "run.py exit $?"
  tail -8 "$WORK/run.log" >>"$OUT/summary.txt"
else
  summary "skipped: the kernel test failed"
fi
