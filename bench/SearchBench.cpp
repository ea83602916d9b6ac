// Google Benchmark timings of the strategy search (placec search): the exhaustive search of
// GPT-3 175B on 1,024 and 1,536 A100s, with and without the pruning, and of Llama 3 70B on 1,024
// H100s and Llama 3 405B on 16,384 H100s with BF16 and FP8 explored, and of a DeepSeek-V3-sized
// mixture of experts on 1,024 H100s (the exact path: every candidate lowered and analysed).
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

/// Llama 3 (Dubey et al. 2024, Table 3: 70B has 80 layers of 8,192 with 64 heads, 8 key/value
/// heads and an FFN of 28,672; 405B has 126 layers of 16,384 with 128 heads, 8 key/value heads
/// and an FFN of 53,248; vocabulary 128,256) on `nodes` nodes of 8 H100 SXM, 8,192-token
/// sequences, `globalBatch` sequences per step (2,048 for 405B: 16M tokens, the paper's batch in
/// its first stage of pre-training, §3.4.1).
std::string llamaProgram(bool big, int nodes, int globalBatch) {
  std::string model = big ? "layers = 126; hidden = 16384; heads = 128; kv_heads = 8; ffn = 53248;"
                          : "layers = 80; hidden = 8192; heads = 64; kv_heads = 8; ffn = 28672;";
  return "model llama3 : transformer {\n  " + model +
         " seq = 8192; vocab = 128256;\n  mlp = swiglu; norm = rmsnorm; bias = false; "
         "positions = rope; tied_embeddings = false;\n}\n"
         "cluster h100 { device = h100_sxm; nodes = " +
         std::to_string(nodes) +
         "; devices_per_node = 8; }\n"
         "run llama3 {\n  model = llama3; cluster = h100; strategy = fsdp(" +
         std::to_string(nodes * 8) +
         ");\n  micro_batch = 1; global_batch = " + std::to_string(globalBatch) + ";\n}\n";
}

/// DeepSeek-V3's shape (examples/moe.place, which cites its sources) on 128 nodes of 8 H100s,
/// global batch 8,192 sequences of 4,096 tokens in FP8.
std::string deepseekProgram() {
  return R"(
model deepseek_v3 : transformer {
  layers = 61; hidden = 7168; heads = 128; head_dim = 128; ffn = 18432;
  q_lora_rank = 1536; kv_lora_rank = 512; rope_head_dim = 64; v_head_dim = 128;
  seq = 4096; vocab = 129280; mlp = swiglu; norm = rmsnorm; bias = false; positions = rope;
  tied_embeddings = false; experts = 256; top_k = 8; expert_ffn = 2048; shared_experts = 1;
  dense_layers = 3; router = sigmoid; router_groups = 8; router_group_top_k = 4;
  aux_loss = 0.0001;
}
cluster h100_1024 { device = h100_sxm; nodes = 128; devices_per_node = 8; }
run deepseek_v3 {
  model = deepseek_v3; cluster = h100_1024; strategy = dp(1024);
  micro_batch = 1; global_batch = 8192; precision = mixed(fp8);
}
)";
}

/// `threads`: SearchOptions::threads (1: one thread, comparable with the earlier rows of
/// bench/README.md; 0: one per hardware thread, timed by the wall clock).
void BM_Search(benchmark::State &state, std::string text, bool prune, bool fp8, unsigned threads) {
  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  auto files =
      placec::parseProgram(llvm::MemoryBuffer::getMemBufferCopy(text, "search-bench.place"), diags);
  std::unique_ptr<placec::ir::Program> program =
      files.empty() ? nullptr : placec::buildProgram(files, diags);
  if (!program) {
    state.SkipWithError("the benchmark's program does not compile");
    return;
  }
  const placec::ir::Run &run = *program->runs.front();
  placec::search::SearchOptions options;
  options.pruneByLowerBound = prune;
  options.threads = threads;
  if (fp8)
    options.precisions = {placec::ir::Precision::MixedBF16, placec::ir::Precision::MixedFP8};
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

BENCHMARK_CAPTURE(BM_Search, gpt3_1024, gpt3Program(128), true, false, 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Search, gpt3_1024_unpruned, gpt3Program(128), false, false, 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Search, gpt3_1536, gpt3Program(192), true, false, 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Search, llama3_70b_1024_fp8, llamaProgram(false, 128, 1024), true, true, 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Search, llama3_405b_16384_fp8, llamaProgram(true, 2048, 2048), true, true, 1)
    ->Unit(benchmark::kMillisecond);
// The same searches on every hardware thread (placec search's default), by the wall clock.
BENCHMARK_CAPTURE(BM_Search, gpt3_1024_threads, gpt3Program(128), true, false, 0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Search, gpt3_1536_threads, gpt3Program(192), true, false, 0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Search, llama3_70b_1024_fp8_threads, llamaProgram(false, 128, 1024), true,
                  true, 0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Search, llama3_405b_16384_fp8_threads, llamaProgram(true, 2048, 2048), true,
                  true, 0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_CAPTURE(BM_Search, deepseek_v3_1024, deepseekProgram(), true, false, 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Search, deepseek_v3_1024_threads, deepseekProgram(), true, false, 0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

int main(int argc, char **argv) {
  // As `placec search` runs.
  placec::search::retainFreedMemory();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
