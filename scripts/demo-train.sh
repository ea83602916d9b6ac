#!/usr/bin/env bash
# Compiles the flagship mlp run (examples/mlp-zero3.place), builds it against placert from the
# build tree, trains it on 4 MPI ranks with --check, and prints the losses and the bytes each
# collective moved next to what `placec report` predicted. Usage: scripts/demo-train.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
[[ -d "$build" ]] && build="$(cd "$build" && pwd)"
if [[ ! -x "$build/tools/placec" || ! -f "$build/runtime/placertConfig.cmake" ]]; then
  echo "demo-train: build placec first: cmake -S $root -B $build && cmake --build $build -j2" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec python3 "$root/test/e2e/run_e2e.py" --mode demo \
  --placec "$build/tools/placec" --placert-dir "$build/runtime" \
  --place "$root/examples/mlp-zero3.place" --run mlp_zero3 --np 4 --steps 5 \
  --work "$build/demo/mlp_zero3"
