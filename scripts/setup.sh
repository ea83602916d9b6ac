#!/usr/bin/env bash
# Installs the Debian 12 packages placec needs to build and test; fast and silent when all are there.
set -euo pipefail

# Build, test, benchmark and fuzz dependencies (docs/building.md explains each).
packages=(
  # Compilers and build tools.
  g++ make cmake ninja-build pkg-config git python3
  # Parser generator and runtime.
  antlr4 libantlr4-runtime-dev uuid-dev
  # LLVM Support, FileCheck and lit; LLVM 19 needs zstd.
  llvm-19-dev llvm-19-tools libzstd-dev
  # Formatting, the TOML reader of torchtitan job configs, tests and benchmarks.
  libfmt-dev libtomlplusplus-dev libgtest-dev libbenchmark-dev
  # Runtime: MPI collectives and launcher, CPU BLAS.
  libopenmpi-dev openmpi-bin libopenblas-dev
  # clang for the fuzzer build, its sanitizer and libFuzzer runtimes, and a pinned clang-format.
  clang-19 libclang-rt-19-dev clang-format-19
  # Headless browser for the HTML report's test (ctest -L browser).
  chromium
  # make package: dpkg-shlibdeps finds the packages of the libraries placec links; CPack runs file.
  dpkg-dev file
)

die() {
  echo "setup.sh: error: $*" >&2
  exit 1
}

if [[ ! -r /etc/debian_version ]] || ! command -v apt-get >/dev/null 2>&1; then
  die "this script installs Debian packages with apt-get; on other systems install the" \
    "equivalents of: ${packages[*]}"
fi

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$package" 2>/dev/null || true)
  if [[ "$status" != ii* ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 ||
    die "not root and sudo is not installed; as root run: apt-get install ${missing[*]}"
  sudo=(sudo)
fi

echo "setup.sh: installing ${missing[*]}"
"${sudo[@]}" apt-get -q update ||
  die "apt-get update failed (is the network or the package mirror reachable?)"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get -q install -y --no-install-recommends "${missing[@]}" ||
  die "apt-get install failed for: ${missing[*]}"

# Check that what the build looks for is really there now.
for tool in /usr/bin/antlr4 /usr/lib/llvm-19/bin/FileCheck /usr/lib/llvm-19/build/utils/lit/lit.py \
  /usr/bin/clang++-19 /usr/bin/clang-format-19 /usr/bin/chromium; do
  [[ -e "$tool" ]] || die "$tool is missing after the install"
done
echo "setup.sh: done"
