# Entry points for building, testing, benchmarking, fuzzing and formatting placec (docs/building.md).
#
#   make demo          set up, build, check the examples, report on the flagship and the ZeRO
#                      study, and train the compiled mlp run on 4 MPI ranks
#   make test          set up, format check, Release build + ctest, clang-19 build + ctest (no
#                      MPI end-to-end runs), sanitizer build + ctest; warnings are errors in all
#   make build         set up and build in build/ (BUILD_TYPE, default Release)
#   make package       build the Debian packages in build/ (CPack)
#   make bench         build and run the benchmarks
#   make fuzz          build the libFuzzer targets with clang-19 and run each for FUZZ_SECONDS
#   make format        reformat our sources in place
#   make format-check  fail when a source file is not formatted
#
# NO_SETUP=1 skips scripts/setup.sh (for machines where the packages come from elsewhere).

BUILD_DIR ?= build
BUILD_TYPE ?= Release
ASAN_BUILD_DIR ?= build-asan
CLANG_BUILD_DIR ?= build-clang
FUZZ_BUILD_DIR ?= build-fuzz
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FLAGSHIP ?= examples/gpt3-175b-ptdp.place
# The ZeRO 7.5B study reproduces ZeRO's Table 1, whose small-N runs do not fit a 32 GB device:
# `placec check` rejects them by design, so the demo reports on it instead of checking it.
OVER_CAPACITY_EXAMPLES = examples/zero-7.5b.place
FUZZ_SECONDS ?= 60
# The fuzzers `make fuzz` runs (names from fuzz/CMakeLists.txt); empty: all of them.
FUZZERS ?=
CMAKE_ARGS ?=

# Ninja when it is there (scripts/setup.sh installs it); evaluated when a recipe runs, so after
# setup. The generator of an existing build directory is kept.
GENERATOR = $(if $(shell command -v ninja 2>/dev/null),Ninja,Unix Makefiles)

# A pinned clang-format (package clang-format-19), so that formatting does not depend on which
# clang-format the machine happens to have.
CLANG_FORMAT ?= $(firstword $(wildcard /usr/bin/clang-format-19 /usr/lib/llvm-19/bin/clang-format))
# bench/gpu/generated holds placec's output as placec emits it, shipped for GPU machines that have
# no placec (test/lit/codegen/cuda-bench-shipped.test keeps it current): not reformatted.
FORMAT_DIRS := frontend ir passes backends tools include test/unit bench fuzz runtime
FORMAT_FILES = $(shell find $(wildcard $(FORMAT_DIRS)) -type f \( -name '*.cpp' -o -name '*.h' \) \
                 -not -path '*/build/*' -not -path '*/build-*/*' -not -path 'bench/gpu/generated/*' | LC_ALL=C sort)

EXAMPLES = $(wildcard examples/*.place)
PLACEC = $(BUILD_DIR)/tools/placec

SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

# Warnings are errors in every build `make test` (CI) makes; the options are off by default, so
# that a user's compiler never breaks a build. BUILD_ARGS are the main build's extra arguments.
WERROR_ARGS := -DPLACEC_WERROR=ON -DPLACERT_WERROR=ON
BUILD_ARGS ?=
test test-build: BUILD_ARGS += $(WERROR_ARGS)
# The clang build skips what it would only repeat: the MPI end-to-end runs and the package.
CLANG_CTEST_EXCLUDE := e2e|package

# Each target drives CMake's own parallelism; running targets side by side would race on setup.
.NOTPARALLEL:
.PHONY: all setup build demo test test-build test-clang test-asan package bench fuzz format \
        format-check

all: build

setup:
ifeq ($(NO_SETUP),)
	@bash scripts/setup.sh
endif

# $(call configure,DIR,EXTRA CMAKE ARGUMENTS)
configure = CMAKE_GENERATOR="$(GENERATOR)" cmake -S . -B $(1) $(2) $(CMAKE_ARGS)

build: setup
	$(call configure,$(BUILD_DIR),-DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(BUILD_ARGS))
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@if [ -z "$(EXAMPLES)" ]; then echo "make: no examples/*.place to check" >&2; exit 1; fi
	@set -e; for file in $(filter-out $(OVER_CAPACITY_EXAMPLES),$(EXAMPLES)); do \
	  echo "+ $(PLACEC) check $$file"; $(PLACEC) check $$file; \
	done
	@mkdir -p $(BUILD_DIR)/demo
	$(PLACEC) --emit=ir examples/gpt2-xl.place -o $(BUILD_DIR)/demo/gpt2-xl.ir
	@echo "(the IR of examples/gpt2-xl.place is in $(BUILD_DIR)/demo/gpt2-xl.ir; its parameter count:)"
	@grep -A5 '^  params = ' $(BUILD_DIR)/demo/gpt2-xl.ir
	$(PLACEC) report $(FLAGSHIP)
	$(PLACEC) report examples/zero-7.5b.place 2>/dev/null
	scripts/demo-train.sh $(BUILD_DIR)

test: setup format-check test-build test-clang test-asan

# Every test on the optimized (-O3) GCC build: optimization must not change a result.
test-build: build
	cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS)

# clang-19, Debug (assertions on): everything builds warning-free with the other compiler.
test-clang: setup
	$(call configure,$(CLANG_BUILD_DIR),-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
	  -DCMAKE_BUILD_TYPE=Debug $(WERROR_ARGS))
	cmake --build $(CLANG_BUILD_DIR) -j $(JOBS)
	cd $(CLANG_BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) \
	  -LE '$(CLANG_CTEST_EXCLUDE)'

# GCC with AddressSanitizer and UBSan (RelWithDebInfo, the CMake default).
test-asan: setup
	$(call configure,$(ASAN_BUILD_DIR),-DPLACEC_SANITIZE=ON $(WERROR_ARGS))
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && $(SANITIZER_ENV) ctest --output-on-failure --no-tests=error -j $(JOBS)

# The Debian packages (placec, and placec-cuda where placert_cuda was built) in $(BUILD_DIR).
package: build
	cmake --build $(BUILD_DIR) --target package

# Every benchmark executable in bench/ (Google Benchmark), one after the other.
bench: build
	@set -e; for bench in $(BUILD_DIR)/bench/placec-*-bench; do \
	  [ -x "$$bench" ] || { echo "make: no benchmarks built (is libbenchmark-dev installed?)" >&2; exit 1; }; \
	  echo "+ $$bench"; $$bench; \
	done

# The whole fuzz build uses clang-19 with sanitizers, so the libraries are instrumented too; its
# warnings are not errors (it hunts crashes; the test builds keep the code warning-clean).
fuzz: setup
	$(call configure,$(FUZZ_BUILD_DIR),-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
	  -DPLACEC_FUZZ=ON -DPLACEC_SANITIZE=ON)
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target placec-fuzzers
	FUZZ_BUILD_DIR=$(FUZZ_BUILD_DIR) fuzz/run-fuzzer.sh $(FUZZ_SECONDS) $(FUZZERS)

format:
	@test -n "$(CLANG_FORMAT)" || { echo "make: clang-format-19 not found; run scripts/setup.sh" >&2; exit 1; }
	$(if $(FORMAT_FILES),$(CLANG_FORMAT) -i $(FORMAT_FILES))

format-check:
	@test -n "$(CLANG_FORMAT)" || { echo "make: clang-format-19 not found; run scripts/setup.sh" >&2; exit 1; }
	@echo "+ $(CLANG_FORMAT) --dry-run -Werror ($(words $(FORMAT_FILES)) files)"
	@$(if $(FORMAT_FILES),$(CLANG_FORMAT) --dry-run -Werror $(FORMAT_FILES) || \
	  { echo "make: sources are not formatted; run 'make format'" >&2; exit 1; })
