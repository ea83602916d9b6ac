// Google Benchmark timings of the strategy search (placec search): the exhaustive search of
// GPT-3 175B on 1,024 and 1,536 A100s, with and without the closed-form lower-bound pruning.
// Reports the space size and candidates per second as counters.
#include "placec/frontend/Frontend.h"
#include "placec/ir/Diagnostics.h"
#include "placec/passes/Passes.h"
#include "placec/passes/Search.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <benchmark/benchmark.h>
#include <memory>
#include <string>

namespace {

/// GPT-3 175B with a global batch of 1,536 on `nodes` nodes of 8 A100 80 GB.
std::string gpt3Program(int nodes) {
  return R"(
model gpt3_175b : transformer {
  layers = 96; hidden = 12288; heads = 96; seq = 2048; vocab = 51200;
}
cluster a100 {
  nodes = )" +
         std::to_string(nodes) + R"(; devices_per_node = 8; device_memory = 80 GB;
  peak = 312 TFLOPS; intra_bandwidth = 300 GB/s; inter_bandwidth = 25 GB/s;
  host_bandwidth = 25 GB/s; latency = 5 us;
}
run gpt3 {
  model = gpt3_175b; cluster = a100; strategy = zero3(dp = )" +
         std::to_string(nodes * 8) + R"();
  micro_batch = 1; global_batch = 1536; precision = mixed(bf16); optimizer = adam;
}
)";
}

void BM_Search(benchmark::State &state, int nodes, bool prune) {
  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  auto files = placec::parseProgram(
      llvm::MemoryBuffer::getMemBufferCopy(gpt3Program(nodes), "search-bench.place"), diags);
  std::unique_ptr<placec::ir::Program> program =
      files.empty() ? nullptr : placec::buildProgram(files, diags);
  if (!program) {
    state.SkipWithError("the benchmark's program does not compile");
    return;
  }
  const placec::ir::Run &run = *program->runs.front();
  placec::search::SearchOptions options;
  options.pruneByLowerBound = prune;
  uint64_t candidates = 0;
  for (auto _ : state) {
    placec::search::SearchResult result = placec::search::searchStrategies(run, options);
    candidates = result.spaceSize;
    benchmark::DoNotOptimize(result.top.data());
  }
  state.counters["space"] = static_cast<double>(candidates);
  state.counters["candidates/s"] =
      benchmark::Counter(static_cast<double>(candidates) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

} // namespace

BENCHMARK_CAPTURE(BM_Search, gpt3_1024, 128, true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Search, gpt3_1024_unpruned, 128, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Search, gpt3_1536, 192, true)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
