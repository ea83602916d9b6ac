// The framework bridges' refusals (bridge::getExportRefusals, bridge::getBridgeVerdicts), which
// the search asks for from several threads at once.
#include "placec/backends/Export.h"

#include "TestSupport.h"

#include <gtest/gtest.h>
#include <thread>
#include <vector>

using namespace placec;

namespace {

// Grouped-query attention with a sliding window, split over two context-parallel ranks by
// Ulysses's all-to-all with only the optimizer sharded over them: Megatron-LM takes it (its
// distributed optimizer), torchtitan does not (it shards everything with FSDP over those ranks).
const char *kProgram = R"(
model swa : transformer {
  layers = 4; hidden = 1024; heads = 16; kv_heads = 4; ffn = 4096; seq = 8192; vocab = 32000;
  mlp = swiglu; norm = rmsnorm; bias = false; positions = rope; window = 128; attention = cudnn;
}
cluster h100_2 { device = h100_sxm; nodes = 1; devices_per_node = 2; }
strategy ulysses { mesh [cp = 2]; optimizer = shard(cp); context = all_to_all; }
run r { model = swa; cluster = h100_2; strategy = ulysses; micro_batch = 1; global_batch = 2; }
)";

TEST(ExportTest, RefusalsNameWhatTheFrameworkCannotSay) {
  auto compiled = unittest::compile(kProgram);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  const ir::Run &run = *compiled->program->runs.front();
  EXPECT_TRUE(bridge::getExportRefusals(run, bridge::Target::Megatron).empty());
  std::vector<std::string> titan = bridge::getExportRefusals(run, bridge::Target::Torchtitan);
  ASSERT_FALSE(titan.empty());
  EXPECT_NE(titan.front().find("not FSDP-sharded"), std::string::npos) << titan.front();
}

// Every thread gets the verdicts one thread gets. The refusals are collected while the
// configuration is written to a stream that is thrown away; a stream shared by the threads (as
// llvm::nulls() is) would have them write into one buffer at once, which AddressSanitizer reports
// as a heap-buffer-overflow.
TEST(ExportTest, VerdictsFromManyThreadsAgree) {
  auto compiled = unittest::compile(kProgram);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  const ir::Run &run = *compiled->program->runs.front();
  std::vector<search::BridgeVerdict> expected = bridge::getBridgeVerdicts(run, "");
  ASSERT_EQ(expected.size(), 3u);
  constexpr int kThreads = 8, kRounds = 40;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        std::vector<search::BridgeVerdict> verdicts = bridge::getBridgeVerdicts(run, "");
        bool same = verdicts.size() == expected.size();
        for (size_t v = 0; same && v < verdicts.size(); ++v)
          same = verdicts[v].target == expected[v].target &&
                 verdicts[v].refusal == expected[v].refusal;
        mismatches[t] += same ? 0 : 1;
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

} // namespace
