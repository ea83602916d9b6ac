#!/usr/bin/env bash
# Runs the front-end fuzzer for a bounded time on a scratch copy of the seed corpus; exits non-zero
# and prints the saved input when it finds a crash, a leak, a timeout or an out-of-memory.
#
#   fuzz/run-fuzzer.sh [SECONDS [FUZZER]]      (defaults: 60, build-fuzz/fuzz/placec-frontend-fuzzer)
#
# Seeds: fuzz/corpus, examples/*.place and every .place file under test/lit. Nothing is written
# into the source tree: the corpus, the inputs it finds and the log live in a scratch folder
# (FUZZ_WORK_DIR, or a new one under TMPDIR), kept after a failure or when FUZZ_KEEP=1.
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fuzzer=${2:-$root/build-fuzz/fuzz/placec-frontend-fuzzer}

if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -lt 2 ]]; then
  echo "run-fuzzer.sh: error: SECONDS must be a whole number of at least 2, not '$seconds'" >&2
  exit 2
fi
if [[ ! -x "$fuzzer" ]]; then
  echo "run-fuzzer.sh: error: no fuzzer at $fuzzer; build it with 'make fuzz'" >&2
  exit 2
fi

work=${FUZZ_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/placec-fuzz.XXXXXX")}
corpus=$work/corpus
artifacts=$work/artifacts
mkdir -p "$corpus" "$artifacts"

# Seeds are copied under names made from their paths, so that equal file names do not collide.
seed() {
  local file=$1 name
  name=$(printf '%s' "${file#"$root"/}" | tr '/' '_')
  cp "$file" "$corpus/$name"
}
num_seeds=0
while IFS= read -r -d '' file; do
  seed "$file"
  num_seeds=$((num_seeds + 1))
done < <(find "$root/fuzz/corpus" "$root/examples" "$root/test/lit" -type f -name '*.place' \
  -print0 2>/dev/null)
echo "run-fuzzer.sh: $num_seeds seeds, ${seconds}s, work folder $work"

# Leaks are errors; an input that takes 5 s or 2 GiB is a bug too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
common=(-timeout=5 -rss_limit_mb=2048 -dict="$root/fuzz/place.dict"
  -artifact_prefix="$artifacts/" -print_final_stats=1)

# Three quarters of the time on inputs up to 4 KiB (many small mutations), the rest on inputs up
# to 64 KiB (long token streams, deep nesting, many declarations), both growing the same corpus.
short=$((seconds * 3 / 4))
long=$((seconds - short))
status=0
log=$work/short.log
"$fuzzer" "${common[@]}" -max_len=4096 -max_total_time="$short" "$corpus" >"$log" 2>&1 ||
  status=$?
if [[ $status -eq 0 ]]; then
  log=$work/long.log
  "$fuzzer" "${common[@]}" -max_len=65536 -max_total_time="$long" "$corpus" >"$log" 2>&1 ||
    status=$?
fi

if [[ $status -ne 0 ]]; then
  echo "run-fuzzer.sh: the fuzzer failed (exit $status); the end of its log:" >&2
  tail -n 40 "$log" >&2
  found=0
  for input in "$artifacts"/*; do
    [[ -e "$input" ]] || continue
    echo "run-fuzzer.sh: failing input: $input" >&2
    echo "  reproduce with: $fuzzer $input" >&2
    found=1
  done
  [[ $found -eq 1 ]] || echo "run-fuzzer.sh: no input was saved (see the logs in $work)" >&2
  exit 1
fi

echo "run-fuzzer.sh: no failure in ${seconds}s; corpus of $(find "$corpus" -type f | wc -l) inputs"
for phase in short long; do
  echo "  $phase inputs: $(grep -h -E '^stat::(number_of_executed_units|peak_rss_mb)' \
    "$work/$phase.log" | tr -s ' \n' ' ')"
done
if [[ -z "${FUZZ_WORK_DIR:-}" && -z "${FUZZ_KEEP:-}" ]]; then
  rm -rf "$work"
else
  echo "run-fuzzer.sh: kept $work"
fi
