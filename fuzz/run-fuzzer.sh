#!/usr/bin/env bash
# Runs placec's libFuzzer targets for a bounded time each on a scratch copy of their seeds; exits
# non-zero and prints the saved input when one finds a crash, a leak, a timeout or an
# out-of-memory.
#
#   fuzz/run-fuzzer.sh [SECONDS [NAME...]]     (defaults: 60 seconds, every fuzzer)
#
# The fuzzers, their dictionaries and their seed folders are listed by the fuzz build in
# $FUZZ_BUILD_DIR/fuzz/fuzzers.txt (fuzz/CMakeLists.txt writes it; FUZZ_BUILD_DIR defaults to
# build-fuzz). Nothing is written into the source tree: each fuzzer's corpus, the inputs it finds
# and its logs live in a scratch folder (FUZZ_WORK_DIR/NAME, or a new one under TMPDIR), kept
# after a failure or when FUZZ_KEEP=1. With FUZZ_WORK_DIR a corpus grows across runs.
set -euo pipefail

seconds=${1:-60}
shift || true
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
list=$build/fuzz/fuzzers.txt

if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -lt 2 ]]; then
  echo "run-fuzzer.sh: error: SECONDS must be a whole number of at least 2, not '$seconds'" >&2
  exit 2
fi
if [[ ! -f "$list" ]]; then
  echo "run-fuzzer.sh: error: no $list; configure the fuzz build with 'make fuzz'" >&2
  exit 2
fi

declare -A executables dicts seedlists
names=()
while IFS=$'\t' read -r name executable dict seeds; do
  [[ -n "$name" ]] || continue
  names+=("$name")
  executables[$name]=$executable
  dicts[$name]=$dict
  seedlists[$name]=$seeds
done <"$list"
selected=("$@")
if [[ ${#selected[@]} -eq 0 ]]; then
  selected=("${names[@]}")
fi
for name in "${selected[@]}"; do
  if [[ -z "${executables[$name]:-}" ]]; then
    echo "run-fuzzer.sh: error: no fuzzer named '$name'; the fuzzers are: ${names[*]}" >&2
    exit 2
  fi
  if [[ ! -x "${executables[$name]}" ]]; then
    echo "run-fuzzer.sh: error: ${executables[$name]} is not built; build it with 'make fuzz'" >&2
    exit 2
  fi
done

# Leaks are errors; an input that takes 5 s or 2 GiB is a bug too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# A stat that libFuzzer prints with -print_final_stats=1, from a log.
stat() { grep -h -E "^stat::$1:" "$2" 2>/dev/null | awk '{print $2}' | tail -n 1; }

summary=()
failed=()
for name in "${selected[@]}"; do
  fuzzer=${executables[$name]}
  if [[ -n "${FUZZ_WORK_DIR:-}" ]]; then
    work=$FUZZ_WORK_DIR/$name
  else
    work=$(mktemp -d "${TMPDIR:-/tmp}/placec-fuzz-$name.XXXXXX")
  fi
  corpus=$work/corpus
  artifacts=$work/artifacts
  mkdir -p "$corpus" "$artifacts"

  # Seeds are copied under names made from their paths, so that equal file names do not collide.
  IFS=$'\t' read -r -a specs <<<"${seedlists[$name]}"
  for spec in "${specs[@]}"; do
    folder=${spec%%:*}
    pattern=${spec#*:}
    [[ -d "$root/$folder" ]] || continue
    while IFS= read -r -d '' file; do
      cp "$file" "$corpus/$(printf '%s' "${file#"$root"/}" | tr '/' '_')"
    done < <(find "$root/$folder" -type f -name "$pattern" -print0)
  done
  start=$(find "$corpus" -type f | wc -l)
  echo "run-fuzzer.sh: $name: $start inputs to start from, ${seconds}s, work folder $work"

  common=(-timeout=5 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1)
  if [[ "${dicts[$name]}" != "-" ]]; then
    common+=(-dict="${dicts[$name]}")
  fi
  # Three quarters of the time on inputs up to 4 KiB (many small mutations), the rest on inputs
  # up to 64 KiB (long token streams, deep nesting, large manifests), growing the same corpus.
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
    echo "run-fuzzer.sh: $name failed (exit $status); the end of its log:" >&2
    tail -n 40 "$log" >&2
    found=0
    for input in "$artifacts"/*; do
      [[ -e "$input" ]] || continue
      echo "run-fuzzer.sh: failing input: $input" >&2
      echo "  reproduce with: $fuzzer $input" >&2
      found=1
    done
    [[ $found -eq 1 ]] || echo "run-fuzzer.sh: no input was saved (see the logs in $work)" >&2
    failed+=("$name")
    continue
  fi

  executions=$(($(stat number_of_executed_units "$work/short.log") +
    $(stat number_of_executed_units "$work/long.log")))
  rss_short=$(stat peak_rss_mb "$work/short.log")
  rss_long=$(stat peak_rss_mb "$work/long.log")
  rss=$((rss_short > rss_long ? rss_short : rss_long))
  end=$(find "$corpus" -type f | wc -l)
  summary+=("| $name | $seconds | $executions | $start → $end | $rss MB |")
  echo "run-fuzzer.sh: $name: no failure in ${seconds}s: $executions executions, corpus" \
    "$start → $end inputs, peak RSS $rss MB"
  if [[ -z "${FUZZ_WORK_DIR:-}" && -z "${FUZZ_KEEP:-}" ]]; then
    rm -rf "$work"
  else
    echo "run-fuzzer.sh: kept $work"
  fi
done

if [[ ${#summary[@]} -gt 0 ]]; then
  echo "| fuzzer | seconds | executions | corpus (inputs, start → end) | peak RSS |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${summary[@]}"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run-fuzzer.sh: failed: ${failed[*]}" >&2
  exit 1
fi
