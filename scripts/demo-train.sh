#!/usr/bin/env bash
# Compiles two runs, builds them against placert from the build tree (the generated projects find
# it next to the build's placec), trains each on 4 MPI ranks with --check, and prints the losses
# and the bytes each collective moved next to what `placec report` predicted: an mlp under ZeRO-3
# (examples/mlp-zero3.place) and a GPT under a 2-stage pipeline with tensor and sequence
# parallelism (examples/gpt-mini-3d.place).
# Usage: scripts/demo-train.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
[[ -d "$build" ]] && build="$(cd "$build" && pwd)"
if [[ ! -x "$build/tools/placec" || ! -f "$build/runtime/placertConfig.cmake" ]]; then
  echo "demo-train: build placec first: cmake -S $root -B $build && cmake --build $build -j2" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
demo() { # FILE RUN
  python3 "$root/test/e2e/run_e2e.py" --mode demo \
    --placec "$build/tools/placec" \
    --place "$root/examples/$1" --run "$2" --np 4 --steps 5 --work "$build/demo/$2"
}
demo mlp-zero3.place mlp_zero3
demo gpt-mini-3d.place gpt_mini_pp_sp
