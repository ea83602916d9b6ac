// Google Benchmark timings of the reports: one run's analysis (lowerRun + analyze) on GPT-2 XL and
// GPT-3 175B, its text report and --explain, and a 1,000-run file (generated here in C++) through
// the analyses alone and through the whole of `placec report --format=json`; and the search for
// ZB-V's chains with few micro-batches.
#include "placec/backends/Report.h"
#include "placec/frontend/Frontend.h"
#include "placec/ir/Diagnostics.h"
#include "placec/passes/Analysis.h"
#include "placec/passes/CostModel.h"
#include "placec/passes/Passes.h"
#include "placec/passes/StepPlan.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <memory>
#include <string>
#include <vector>

namespace {

/// GPT-2 XL and GPT-3 175B, with the runs of examples/gpt2-xl.place and
/// examples/gpt3-175b-ptdp.place.
constexpr const char *kModels = R"(
model gpt2_xl : transformer { layers = 48; hidden = 1600; heads = 25; seq = 1024; vocab = 50257; }
model gpt3_175b : transformer { layers = 96; hidden = 12288; heads = 96; seq = 2048; vocab = 51200; }
cluster dgx_a100 {
  nodes = 8; devices_per_node = 8; device_memory = 80 GiB; peak = 312 TFLOPS;
  intra_bandwidth = 300 GB/s; inter_bandwidth = 25 GB/s; latency = 5 us;
}
cluster selene_384 {
  nodes = 48; devices_per_node = 8; device_memory = 80 GB; peak = 312 TFLOPS;
  intra_bandwidth = 300 GB/s; inter_bandwidth = 25 GB/s; latency = 5 us;
}
strategy ptdp { mesh [pp = 12, dp = 4, tp = 8]; pipeline = 1f1b(microbatches = 384);
                activations = recompute; }
run gpt2_zero3 { model = gpt2_xl; cluster = dgx_a100; strategy = zero3(dp = 64);
                 micro_batch = 4; global_batch = 512; }
run gpt3_1f1b { model = gpt3_175b; cluster = selene_384; strategy = ptdp;
                micro_batch = 1; global_batch = 1536; precision = mixed(fp16); }
)";

/// One model, one cluster, four strategy families and `runs` runs that vary the strategy, the
/// data-parallel degree's split and the batch: the shape of a sweep a user would write.
std::string generateRuns(int runs) {
  std::string text = R"(
model gpt_1_3b : transformer { layers = 24; hidden = 2048; heads = 16; seq = 2048; vocab = 50257; }
cluster a100_64 {
  nodes = 8; devices_per_node = 8; device_memory = 80 GiB; peak = 312 TFLOPS;
  intra_bandwidth = 300 GB/s; inter_bandwidth = 25 GB/s; host_bandwidth = 25 GB/s;
  latency = 5 us; host_memory = 1 TiB;
}
strategy s_dp = dp(dp = 64);
strategy s_zero1 = zero1(dp = 64);
strategy s_zero3 = zero3(dp = 64);
strategy s_hsdp = hsdp(shard = 8, replicate = 8);
)";
  const char *strategies[] = {"s_dp", "s_zero1", "s_zero3", "s_hsdp"};
  for (int i = 0; i < runs; ++i) {
    int microBatch = 1 + i % 4;
    int accumulation = 1 + (i / 4) % 8;
    text += fmt::format("run r{} {{ model = gpt_1_3b; cluster = a100_64; strategy = {}; "
                        "micro_batch = {}; global_batch = {}; }}\n",
                        i, strategies[i % 4], microBatch, microBatch * 64 * accumulation);
  }
  return text;
}

/// A program compiled and verified from text, kept with its sources.
struct Loaded {
  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags{sourceMgr};
  std::unique_ptr<placec::ir::Program> program;
};

std::unique_ptr<Loaded> load(const std::string &text, bool capacityIsError = false) {
  auto loaded = std::make_unique<Loaded>();
  loaded->diags.setQuiet(true);
  auto files = placec::parseProgram(llvm::MemoryBuffer::getMemBufferCopy(text, "bench.place"),
                                    loaded->diags);
  if (files.empty())
    return nullptr;
  loaded->program = placec::buildProgram(files, loaded->diags);
  placec::VerifyOptions options;
  options.capacityIsError = capacityIsError;
  if (!loaded->program || !placec::createVerifyPass(options)->run(*loaded->program, loaded->diags))
    return nullptr;
  return loaded;
}

/// lowerRun + analyze for one run: the work behind one column of `placec report`.
void BM_AnalyzeRun(benchmark::State &state, const char *runName) {
  std::unique_ptr<Loaded> loaded = load(kModels);
  const placec::ir::Run *run = loaded ? loaded->program->findRun(runName) : nullptr;
  if (!run) {
    state.SkipWithError("the benchmark program does not compile");
    return;
  }
  for (auto _ : state) {
    std::unique_ptr<placec::plan::StepPlan> plan = placec::plan::lowerRun(*run);
    placec::analysis::RunAnalysis analysis = placec::analysis::analyze(*plan);
    benchmark::DoNotOptimize(analysis.memory.device.peak);
  }
}

/// The text report of one analyzed run, with or without --explain (the analysis excluded).
void BM_TextReport(benchmark::State &state, const char *runName, bool explain) {
  std::unique_ptr<Loaded> loaded = load(kModels);
  const placec::ir::Run *run = loaded ? loaded->program->findRun(runName) : nullptr;
  if (!run) {
    state.SkipWithError("the benchmark program does not compile");
    return;
  }
  std::vector<placec::report::RunReport> reports;
  reports.push_back(placec::report::analyzeRun(*run));
  placec::report::ReportOptions options;
  options.explain = explain;
  options.inputName = "bench.place";
  for (auto _ : state) {
    std::string text;
    llvm::raw_string_ostream os(text);
    placec::report::printTextReport(reports, {}, options, os);
    benchmark::DoNotOptimize(text.data());
  }
}

/// lowerRun + analyze over every run of a 1,000-run file (loaded once).
void BM_AnalyzeAllRuns(benchmark::State &state) {
  std::unique_ptr<Loaded> loaded = load(generateRuns(static_cast<int>(state.range(0))));
  if (!loaded) {
    state.SkipWithError("the generated program does not compile");
    return;
  }
  for (auto _ : state) {
    for (const std::unique_ptr<placec::ir::Run> &run : loaded->program->runs) {
      std::unique_ptr<placec::plan::StepPlan> plan = placec::plan::lowerRun(*run);
      placec::analysis::RunAnalysis analysis = placec::analysis::analyze(*plan);
      benchmark::DoNotOptimize(analysis.memory.device.peak);
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

/// What `placec report FILE --format=json` does on a 1,000-run file: parse, build, verify,
/// analyze every run, collect diagnostics and write the JSON (to memory).
void BM_ReportAllRunsJson(benchmark::State &state) {
  std::string text = generateRuns(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    std::unique_ptr<Loaded> loaded = load(text);
    if (!loaded) {
      state.SkipWithError("the generated program does not compile");
      break;
    }
    std::vector<placec::report::RunReport> reports;
    for (const std::unique_ptr<placec::ir::Run> &run : loaded->program->runs)
      reports.push_back(placec::report::analyzeRun(*run));
    std::vector<placec::report::ReportDiagnostic> diagnostics =
        placec::report::collectDiagnostics(loaded->diags);
    placec::report::attachDiagnostics(reports, diagnostics, loaded->diags);
    placec::report::ReportOptions options;
    options.format = placec::report::Format::Json;
    options.inputName = "bench.place";
    std::string json;
    llvm::raw_string_ostream os(json);
    placec::report::printJsonReport(reports, diagnostics, options, os);
    benchmark::DoNotOptimize(json.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

} // namespace

BENCHMARK_CAPTURE(BM_AnalyzeRun, gpt2_zero3, "gpt2_zero3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_AnalyzeRun, gpt3_1f1b, "gpt3_1f1b")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TextReport, gpt2_zero3, "gpt2_zero3", false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TextReport, gpt2_zero3_explain, "gpt2_zero3", true)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AnalyzeAllRuns)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReportAllRunsJson)->Arg(1000)->Unit(benchmark::kMillisecond);

/// ZB-V's chains for few micro-batches (cost::findZeroBubbleVChains), found afresh each time as
/// the first plan of a process with these stages and micro-batches finds them: p stages and
/// 2p − 2 micro-batches, the most below 2p − 1.
void BM_ZeroBubbleVChains(benchmark::State &state) {
  int64_t p = state.range(0);
  for (auto _ : state)
    benchmark::DoNotOptimize(placec::cost::findZeroBubbleVChains(p, 2 * p - 2));
}

BENCHMARK(BM_ZeroBubbleVChains)->Arg(8)->Arg(32)->Arg(128)->Arg(256)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
