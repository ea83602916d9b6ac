// Unit tests for the analyses over a StepPlan against the published closed forms of
// REFERENCE-NUMBERS: ZeRO's model-state memory (Table 1) and communication volumes, hybrid
// sharding's cross-host traffic, Narayanan et al.'s FLOPs, Korthikanti et al.'s activation memory
// and tensor/sequence-parallel traffic, pipeline schedules and ZeRO-Offload's host traffic. Every
// expected value is computed here from the cited formula, never taken from placec's output.
#include "placec/passes/Analysis.h"

#include "fmt/format.h"
#include "placec/frontend/Frontend.h"
#include "placec/passes/CostModel.h"
#include "placec/passes/Passes.h"
#include "placec/passes/StepPlan.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

using namespace placec;
using analysis::CommEntry;
using analysis::LinkClass;
using analysis::RunAnalysis;
using plan::OpKind;
using plan::Phase;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// Relative comparison for values derived from closed forms (exact up to double rounding).
#define EXPECT_REL(actual, expected, tolerance)                                                    \
  EXPECT_NEAR((actual), (expected), std::abs(static_cast<double>(expected)) * (tolerance))

constexpr double kExact = 1e-12;

/// A program compiled from text and verified; each run lowered and analyzed on request. Runs are
/// declared `r_<name>` (names may not reuse the prelude's strategy names) and looked up by name.
class Session {
public:
  explicit Session(const std::string &text) : diags(sourceMgr), messageStream(messages) {
    diags.setOutput(messageStream);
    auto files =
        parseProgram(llvm::MemoryBuffer::getMemBufferCopy(text, "analysis-test.place"), diags);
    if (!files.empty())
      program = buildProgram(files, diags);
    if (program) {
      PassManager passes;
      VerifyOptions options;
      options.capacityIsError = false;
      passes.addPass(createVerifyPass(options));
      if (!passes.run(*program, diags))
        program.reset();
    }
  }

  bool ok() const { return program != nullptr; }
  const std::string &getMessages() const { return messages; }

  struct Result {
    std::unique_ptr<plan::StepPlan> plan;
    RunAnalysis analysis;
  };

  /// The plan and analysis of a run; null (with a test failure) when the run does not exist.
  const Result *get(const std::string &name) {
    auto it = results.find(name);
    if (it != results.end())
      return &it->second;
    const ir::Run *run = program ? program->findRun("r_" + name) : nullptr;
    if (!run) {
      ADD_FAILURE() << "no run '" << name << "'\n" << messages;
      return nullptr;
    }
    Result &result = results[name];
    result.plan = plan::lowerRun(*run);
    result.analysis = analysis::analyze(*result.plan);
    return &result;
  }

private:
  llvm::SourceMgr sourceMgr;
  DiagnosticEngine diags;
  std::string messages;
  llvm::raw_string_ostream messageStream;
  std::unique_ptr<ir::Program> program;
  std::map<std::string, Result> results;
};

#define ASSERT_SESSION(session) ASSERT_TRUE((session).ok()) << (session).getMessages()

/// A cluster of `nodes` × `perNode` A100-like devices.
std::string cluster(const std::string &name, int64_t nodes, int64_t perNode,
                    const std::string &links = "intra_bandwidth = 300 GB/s; "
                                               "inter_bandwidth = 25 GB/s; latency = 5 us;") {
  return "cluster " + name + " { nodes = " + std::to_string(nodes) +
         "; devices_per_node = " + std::to_string(perNode) +
         "; device_memory = 80 GiB; peak = 312 TFLOPS; host_bandwidth = 25 GB/s; " + links +
         " efficiency = 0.5; }\n";
}

/// A cluster of n devices, eight per node (fewer in one node when n < 8).
std::string clusterOf(const std::string &name, int64_t n) {
  return cluster(name, n >= 8 ? n / 8 : 1, n >= 8 ? 8 : n);
}

std::string run(const std::string &name, const std::string &model, const std::string &cluster,
                const std::string &strategy, int64_t microBatch, int64_t globalBatch,
                const std::string &precision = "mixed(bf16)") {
  return "run r_" + name + " { model = " + model + "; cluster = " + cluster +
         "; strategy = " + strategy + "; micro_batch = " + std::to_string(microBatch) +
         "; global_batch = " + std::to_string(globalBatch) + "; precision = " + precision +
         "; optimizer = adam; }\n";
}

double sumEntries(const RunAnalysis &analysis, const std::function<bool(const CommEntry &)> &pick,
                  double CommEntry::*field) {
  double total = 0;
  for (const CommEntry &entry : analysis.communication)
    if (pick(entry))
      total += entry.*field;
  return total;
}

bool isModelState(const CommEntry &entry) {
  return entry.state == ir::State::Params || entry.state == ir::State::Grads;
}

/// The one entry matching, or null with a failure.
const CommEntry *findEntry(const RunAnalysis &analysis, OpKind kind, ir::State state, Phase phase,
                           int stage = 0) {
  const CommEntry *found = nullptr;
  for (const CommEntry &entry : analysis.communication) {
    if (entry.collective != kind || entry.state != state || entry.phase != phase ||
        entry.stage != stage)
      continue;
    EXPECT_EQ(found, nullptr) << "two entries for " << plan::toString(kind).str();
    found = &entry;
  }
  EXPECT_NE(found, nullptr) << "no entry for " << plan::toString(kind).str() << " "
                            << ir::toString(state).str() << " " << plan::toString(phase).str();
  return found;
}

//===----------------------------------------------------------------------===//
// 1. Model-state memory: ZeRO, Rajbhandari et al. 2020, §5 and Table 1
//===----------------------------------------------------------------------===//

constexpr std::array<int64_t, 6> kTableDegrees = {1, 4, 16, 64, 256, 1024};

struct TableRow {
  const char *name; ///< How the model is written in Place.
  double psi;
  /// The paper rounds the 7.5B row and truncates the others.
  bool rounded;
  /// Per N (kTableDegrees): zero1, zero2, zero3 in GB (1e9 bytes), as printed.
  std::array<std::array<const char *, 3>, 6> cells;
};

const TableRow kTable1[] = {
    {"7.5B",
     7.5e9,
     true,
     {{{"120", "120", "120"},
       {"52.5", "41.3", "30"},
       {"35.6", "21.6", "7.5"},
       {"31.4", "16.6", "1.88"},
       {"30.4", "15.4", "0.47"},
       {"30.1", "15.1", "0.12"}}}},
    {"128B",
     128e9,
     false,
     {{{"2048", "2048", "2048"},
       {"896", "704", "512"},
       {"608", "368", "128"},
       {"536", "284", "32"},
       {"518", "263", "8"},
       {"513", "257", "2"}}}},
    {"1T",
     1e12,
     false,
     {{{"16000", "16000", "16000"},
       {"7000", "5500", "4000"},
       {"4750", "2875", "1000"},
       {"4187", "2218", "250"},
       {"4046", "2054", "62.5"},
       {"4011", "2013", "15.6"}}}},
};

/// ZeRO §5.1 with mixed-precision Adam (K = 12): P_os, P_os+g, P_os+g+p.
double zeroFormula(int stage, double psi, double n) {
  const double k = 12;
  switch (stage) {
  case 1:
    return 2 * psi + 2 * psi + k * psi / n;
  case 2:
    return 2 * psi + (2 + k) * psi / n;
  default:
    return (2 + 2 + k) * psi / n;
  }
}

/// The name of Table 1's run of model row r on N devices under ZeRO stage z.
std::string table1RunName(int z, size_t r, int64_t n) { return fmt::format("z{}_r{}_{}", z, r, n); }

/// Every Table 1 run: model row r, N, ZeRO stage z, named `z<z>_r<r>_<N>`.
std::string table1Program() {
  std::string text;
  for (size_t r = 0; r < std::size(kTable1); ++r)
    text += fmt::format("model m{} {{ params = {}; }}\n", r, kTable1[r].name);
  for (int64_t n : kTableDegrees)
    text += clusterOf(fmt::format("c{}", n), n);
  for (size_t r = 0; r < std::size(kTable1); ++r)
    for (int64_t n : kTableDegrees) {
      std::string model = fmt::format("m{}", r), cl = fmt::format("c{}", n);
      for (int z = 1; z <= 3; ++z)
        text += run(table1RunName(z, r, n), model, cl, fmt::format("zero{}(dp = {})", z, n), 1, n);
      text += run(fmt::format("dp_r{}_{}", r, n), model, cl, fmt::format("dp({})", n), 1, n);
    }
  return text;
}

TEST(AnalysisZeroTable1, PersistentStatesMatchFormulas) {
  Session session(table1Program());
  ASSERT_SESSION(session);
  int cells = 0;
  for (size_t r = 0; r < std::size(kTable1); ++r)
    for (int64_t n : kTableDegrees)
      for (int z = 1; z <= 3; ++z) {
        std::string name = table1RunName(z, r, n);
        SCOPED_TRACE(name);
        const Session::Result *result = session.get(name);
        ASSERT_NE(result, nullptr);
        const analysis::MemoryBreakdown &device = result->analysis.memory.device;
        double psi = kTable1[r].psi, nd = static_cast<double>(n);
        EXPECT_REL(device.getPersistent(), zeroFormula(z, psi, nd), kExact);
        // Each state on its own: 2Ψ params (÷N with P_p), 2Ψ grads (÷N with P_g), 12Ψ/N.
        EXPECT_REL(device.params, z == 3 ? 2 * psi / nd : 2 * psi, kExact);
        EXPECT_REL(device.grads, z >= 2 ? 2 * psi / nd : 2 * psi, kExact);
        EXPECT_REL(device.optimizer, 12 * psi / nd, kExact);
        // An abstract model says nothing about activations.
        EXPECT_FALSE(result->analysis.memory.activationsKnown);
        EXPECT_EQ(device.activations, 0);
        ++cells;
      }
  EXPECT_EQ(cells, 54);
}

TEST(AnalysisZeroTable1, MatchesPublishedTableWithinRounding) {
  Session session(table1Program());
  ASSERT_SESSION(session);
  for (size_t r = 0; r < std::size(kTable1); ++r)
    for (size_t i = 0; i < kTableDegrees.size(); ++i)
      for (int z = 1; z <= 3; ++z) {
        int64_t n = kTableDegrees[i];
        std::string name = table1RunName(z, r, n);
        SCOPED_TRACE(name);
        const Session::Result *result = session.get(name);
        ASSERT_NE(result, nullptr);
        std::string printed = kTable1[r].cells[i][z - 1];
        double shown = std::stod(printed);
        size_t dot = printed.find('.');
        int decimals = dot == std::string::npos ? 0 : static_cast<int>(printed.size() - dot - 1);
        double unit = std::pow(10.0, -decimals);
        double gb = result->analysis.memory.device.getPersistent() / 1e9;
        if (kTable1[r].rounded) {
          // Round half up: 41.25 → 41.3 and 1.875 → 1.88 sit on the boundary.
          EXPECT_LE(std::abs(gb - shown), unit / 2 * (1 + 1e-9)) << gb << " GB printed " << printed;
        } else {
          EXPECT_LE(shown, gb * (1 + 1e-12)) << gb << " GB printed " << printed;
          EXPECT_LT(gb, shown + unit) << gb << " GB printed " << printed;
        }
      }
}

TEST(AnalysisZeroTable1, DataParallelKeepsSixteenPsi) {
  Session session(table1Program());
  ASSERT_SESSION(session);
  for (size_t r = 0; r < std::size(kTable1); ++r)
    for (int64_t n : kTableDegrees) {
      std::string name = "dp_r" + std::to_string(r) + "_" + std::to_string(n);
      SCOPED_TRACE(name);
      const Session::Result *result = session.get(name);
      ASSERT_NE(result, nullptr);
      EXPECT_REL(result->analysis.memory.device.getPersistent(), 16 * kTable1[r].psi, kExact);
      // Nothing is gathered, nothing is transient.
      EXPECT_EQ(result->analysis.memory.device.transient, 0);
    }
}

TEST(AnalysisZeroTable1, FullPrecisionAndSgdBytesPerParameter) {
  // LANGUAGE.md §6: fp32 Adam keeps 4 + 4 + 8 bytes per parameter, mixed SGD with momentum 2 + 2
  // + 8 (fp32 master and momentum), ZeRO-3 divides all of them by N.
  Session session("model m { params = 1B; }\n" + clusterOf("c", 8) +
                  "run r_a { model = m; cluster = c; strategy = zero3(dp = 8); micro_batch = 1; "
                  "global_batch = 8; precision = fp32; optimizer = adam; }\n"
                  "run r_b { model = m; cluster = c; strategy = zero1(dp = 8); micro_batch = 1; "
                  "global_batch = 8; precision = mixed(fp16); optimizer = sgd(momentum = true); "
                  "}\n");
  ASSERT_SESSION(session);
  double psi = 1e9;
  EXPECT_REL(session.get("a")->analysis.memory.device.getPersistent(), 16 * psi / 8, kExact);
  EXPECT_REL(session.get("b")->analysis.memory.device.getPersistent(), 4 * psi + 8 * psi / 8,
             kExact);
}

//===----------------------------------------------------------------------===//
// 2. Communication per step: ZeRO §7
//===----------------------------------------------------------------------===//

constexpr double kCommPsi = 7.5e9;

std::string commProgram(const std::vector<int64_t> &degrees, int64_t accumulation = 1) {
  std::string text = "model m { params = 7.5B; }\n";
  for (int64_t n : degrees) {
    std::string cl = fmt::format("c{}", n), dp = fmt::format("(dp = {})", n),
                suffix = fmt::format("_{}", n);
    int64_t batch = n * accumulation;
    text += clusterOf(cl, n);
    text += run("dp" + suffix, "m", cl, "dp" + dp, 1, batch);
    for (int z = 1; z <= 3; ++z)
      text += run(fmt::format("zero{}{}", z, suffix), "m", cl, fmt::format("zero{}{}", z, dp), 1,
                  batch);
  }
  return text;
}

TEST(AnalysisZeroCommunication, SentBytesPerDevice) {
  // ZeRO §7.2.1 and §7.2.2: dp all-reduces 2Ψ elements; P_os and P_os+g reduce-scatter the
  // gradients and all-gather the parameters, 2Ψ; P_os+g+p all-gathers the parameters in the
  // forward and again in the backward and reduce-scatters the gradients, 3Ψ. Ring collectives
  // send (n−1)/n of that per device, 2 bytes per bf16 element.
  std::vector<int64_t> degrees = {2, 8, 64, 1024};
  Session session(commProgram(degrees));
  ASSERT_SESSION(session);
  const std::map<std::string, double> volume = {
      {"dp", 2}, {"zero1", 2}, {"zero2", 2}, {"zero3", 3}};
  for (int64_t n : degrees)
    for (const auto &[strategy, units] : volume) {
      std::string name = strategy + "_" + std::to_string(n);
      SCOPED_TRACE(name);
      const Session::Result *result = session.get(name);
      ASSERT_NE(result, nullptr);
      double nd = static_cast<double>(n);
      double expected = (nd - 1) / nd * units * kCommPsi * 2;
      EXPECT_REL(sumEntries(result->analysis, isModelState, &CommEntry::sentBytes), expected,
                 kExact);
      // Nothing else moves: an abstract model has no activation traffic.
      EXPECT_EQ(sumEntries(
                    result->analysis, [](const CommEntry &entry) { return !isModelState(entry); },
                    &CommEntry::sentBytes),
                0);
    }
}

TEST(AnalysisZeroCommunication, CollectivesAndMessageSizes) {
  Session session(commProgram({8}));
  ASSERT_SESSION(session);
  double model = kCommPsi * 2; // Ψ bf16 elements
  double ring = 7.0 / 8.0;

  // dp: one all-reduce of the whole 2Ψ-byte gradient buffer per step.
  const RunAnalysis &dp = session.get("dp_8")->analysis;
  ASSERT_EQ(dp.communication.size(), 1u);
  const CommEntry *allReduce = findEntry(dp, OpKind::AllReduce, ir::State::Grads, Phase::Step);
  ASSERT_NE(allReduce, nullptr);
  EXPECT_EQ(allReduce->count, 1);
  EXPECT_EQ(allReduce->messageBytes, model);
  EXPECT_EQ(allReduce->groupSize, 8);
  EXPECT_EQ(allReduce->axis, "dp");
  EXPECT_REL(allReduce->sentBytes, 2 * ring * model, kExact);

  // zero1: reduce-scatter of the accumulated gradients and all-gather of the updated params,
  // both once per step.
  const RunAnalysis &zero1 = session.get("zero1_8")->analysis;
  EXPECT_EQ(zero1.communication.size(), 2u);
  for (auto [kind, state] : {std::pair{OpKind::ReduceScatter, ir::State::Grads},
                             std::pair{OpKind::AllGather, ir::State::Params}}) {
    const CommEntry *entry = findEntry(zero1, kind, state, Phase::Step);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->count, 1);
    EXPECT_EQ(entry->messageBytes, model);
    EXPECT_REL(entry->sentBytes, ring * model, kExact);
  }

  // zero2: the gradients are reduce-scattered in the backward, params all-gathered after the
  // step.
  const RunAnalysis &zero2 = session.get("zero2_8")->analysis;
  EXPECT_EQ(zero2.communication.size(), 2u);
  const CommEntry *scatter2 =
      findEntry(zero2, OpKind::ReduceScatter, ir::State::Grads, Phase::Backward);
  const CommEntry *gather2 = findEntry(zero2, OpKind::AllGather, ir::State::Params, Phase::Step);
  ASSERT_TRUE(scatter2 && gather2);
  EXPECT_EQ(scatter2->messageBytes, model);
  EXPECT_EQ(gather2->messageBytes, model);

  // zero3: two all-gathers and one reduce-scatter, each of Ψ·2 bytes.
  const RunAnalysis &zero3 = session.get("zero3_8")->analysis;
  EXPECT_EQ(zero3.communication.size(), 3u);
  for (auto [kind, state, phase] :
       {std::tuple{OpKind::AllGather, ir::State::Params, Phase::Forward},
        std::tuple{OpKind::AllGather, ir::State::Params, Phase::Backward},
        std::tuple{OpKind::ReduceScatter, ir::State::Grads, Phase::Backward}}) {
    const CommEntry *entry = findEntry(zero3, kind, state, phase);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->count, 1);
    EXPECT_EQ(entry->messageBytes, model);
    EXPECT_EQ(entry->totalBytes, model);
    EXPECT_REL(entry->sentBytes, ring * model, kExact);
    EXPECT_EQ(entry->link, LinkClass::IntraNode); // one node of 8
  }
}

TEST(AnalysisZeroCommunication, EightfoldMemoryForOneAndAHalfCommunication) {
  // The headline at N = 8: ZeRO-3 against data parallelism, memory 16Ψ → 2Ψ (8×) for
  // communication 2Ψ → 3Ψ (1.5×).
  Session session(commProgram({8}));
  ASSERT_SESSION(session);
  const RunAnalysis &dp = session.get("dp_8")->analysis;
  const RunAnalysis &zero3 = session.get("zero3_8")->analysis;
  EXPECT_REL(dp.memory.device.getPersistent(), 16 * kCommPsi, kExact);
  EXPECT_REL(zero3.memory.device.getPersistent(), 2 * kCommPsi, kExact);
  EXPECT_REL(dp.memory.device.getPersistent() / zero3.memory.device.getPersistent(), 8.0, kExact);
  EXPECT_REL(sumEntries(zero3, isModelState, &CommEntry::sentBytes) /
                 sumEntries(dp, isModelState, &CommEntry::sentBytes),
             1.5, kExact);
}

TEST(AnalysisZeroCommunication, TransformerUnitsAddUpToTheModel) {
  // The same volumes when the plan moves a transformer unit by unit (tied embeddings included:
  // the embedding is gathered once per direction although the head uses it too).
  for (const char *tied : {"true", "false"}) {
    SCOPED_TRACE(std::string("tied_embeddings = ") + tied);
    Session session("model gpt : transformer { layers = 12; hidden = 768; heads = 12; seq = 1024; "
                    "vocab = 50257; tied_embeddings = " +
                    std::string(tied) + "; }\n" + clusterOf("c", 16) +
                    run("dp", "gpt", "c", "dp(16)", 1, 16) +
                    run("zero1", "gpt", "c", "zero1(dp = 16)", 1, 16) +
                    run("zero2", "gpt", "c", "zero2(dp = 16)", 1, 16) +
                    run("zero3", "gpt", "c", "zero3(dp = 16)", 1, 16));
    ASSERT_SESSION(session);
    double psi = static_cast<double>(session.get("dp")->plan->run->model->numParams);
    for (auto [name, units, memory] :
         {std::tuple{"dp", 2.0, 16 * psi}, std::tuple{"zero1", 2.0, zeroFormula(1, psi, 16)},
          std::tuple{"zero2", 2.0, zeroFormula(2, psi, 16)},
          std::tuple{"zero3", 3.0, zeroFormula(3, psi, 16)}}) {
      SCOPED_TRACE(name);
      const RunAnalysis &result = session.get(name)->analysis;
      EXPECT_REL(sumEntries(result, isModelState, &CommEntry::sentBytes),
                 15.0 / 16 * units * psi * 2, kExact);
      EXPECT_REL(result.memory.device.getPersistent(), memory, kExact);
    }
  }
}

// FP8 training keeps quantized copies of the weights that FP8 products read, the layers', and not
// of the embedding's or the output layer's, which run in BF16 (cost::quantizesParams). A Llama of
// 4 layers of 2·1024² + 2·1024·256 + 3·1024·2816 + 2·1024 parameters (Q = 45,096,960 in all) and
// an untied embedding and head of 2·32000·1024 + 1024 (P = 65,537,024), on B200s (no
// transposes): Transformer Engine's cache takes 2 + 1 bytes a layer parameter and 2 an embedding
// or head one; FP8 parameters alone (`params = fp8`) 1 and 2.
TEST(AnalysisFp8, OnlyTheLayersKeepQuantizedCopies) {
  Session session(
      "model llama : transformer { layers = 4; hidden = 1024; heads = 8; kv_heads = "
      "2; seq = 2048; vocab = 32000; ffn = 2816; mlp = swiglu; norm = rmsnorm; "
      "positions = rope; bias = false; tied_embeddings = false; attention = cudnn; "
      "}\n"
      "cluster b { device = b200; nodes = 1; devices_per_node = 8; }\n" +
      run("cache", "llama", "b", "zero1(dp = 8)", 1, 8, "mixed(fp8)") +
      run("alone", "llama", "b", "zero1(dp = 8)", 1, 8, "mixed(fp8, gather = fp8, params = fp8)") +
      run("bf16", "llama", "b", "zero1(dp = 8)", 1, 8));
  ASSERT_SESSION(session);
  const double layers = 4.0 * (2 * 1024 * 1024 + 2 * 1024 * 256 + 3 * 1024 * 2816 + 2 * 1024);
  const double plain = 2.0 * 32000 * 1024 + 1024;
  ASSERT_EQ(static_cast<double>(session.get("bf16")->plan->run->model->numParams), layers + plain);
  EXPECT_REL(session.get("bf16")->analysis.memory.device.params, 2 * (layers + plain), kExact);
  EXPECT_REL(session.get("cache")->analysis.memory.device.params, 3 * layers + 2 * plain, kExact);
  EXPECT_REL(session.get("alone")->analysis.memory.device.params, layers + 2 * plain, kExact);
  // The updated parameters' all-gather after the step moves them so: 7/8 of each device's whole.
  const CommEntry *gather =
      findEntry(session.get("alone")->analysis, OpKind::AllGather, ir::State::Params, Phase::Step);
  ASSERT_NE(gather, nullptr);
  EXPECT_REL(gather->sentBytes, 7.0 / 8 * (layers + 2 * plain), 1e-6);
}

TEST(AnalysisZeroCommunication, GradientAccumulation) {
  // With m micro-batches per step, sharded gradients are reduce-scattered after every
  // micro-batch (and ZeRO-3 gathers every micro-batch), while replicated gradients accumulate
  // and are reduced once (the pipeline-sharding rule's factor m).
  const int64_t m = 4;
  Session session(commProgram({8}, m));
  ASSERT_SESSION(session);
  double unitBytes = 7.0 / 8.0 * kCommPsi * 2;
  EXPECT_REL(sumEntries(session.get("dp_8")->analysis, isModelState, &CommEntry::sentBytes),
             2 * unitBytes, kExact);
  EXPECT_REL(sumEntries(session.get("zero1_8")->analysis, isModelState, &CommEntry::sentBytes),
             2 * unitBytes, kExact);
  EXPECT_REL(sumEntries(session.get("zero2_8")->analysis, isModelState, &CommEntry::sentBytes),
             (m + 1) * unitBytes, kExact);
  EXPECT_REL(sumEntries(session.get("zero3_8")->analysis, isModelState, &CommEntry::sentBytes),
             3 * m * unitBytes, kExact);
}

//===----------------------------------------------------------------------===//
// 3. Hybrid sharding (FSDP paper, §3.2)
//===----------------------------------------------------------------------===//

TEST(AnalysisHybridSharding, CrossHostTraffic) {
  // hsdp(shard = G, replicate = W/G) on W devices, G per host. placec's plan: the shard group
  // (dp_shard, innermost, G ranks of one host) all-gathers the params in the forward and the
  // backward and reduce-scatters the gradients; the replica group (dp_replicate, W/G ranks, one
  // per host) all-reduces each rank's 1/G gradient shard once per step. Only the last crosses
  // hosts: a ring all-reduce of M/G bytes over W/G ranks sends 2·(M/G)·(W/G − 1)/(W/G)
  // = 2M(W − G)/(G·W) per device. The FSDP paper's 2M(W − 1)/(G·W) applies the ring factor of the
  // whole world, (W − 1)/W, to the shard; placec's is the factor of the group that actually
  // runs the all-reduce, so it is smaller by (W − G)/(W − 1) (docs/plan.md). Data parallelism
  // all-reduces M over all W ranks: 2M(W − 1)/W, every hop counted as cross-host.
  const double psi = 1e9, bytesModel = 2 * psi; // M: the bf16 model
  for (auto [w, g] : {std::pair<int64_t, int64_t>{64, 8}, {16, 8}, {64, 4}, {256, 8}}) {
    SCOPED_TRACE("W = " + std::to_string(w) + ", G = " + std::to_string(g));
    Session session(
        "model m { params = 1B; }\n" + cluster("c", w / 8, 8) +
        run("hsdp", "m", "c",
            "hsdp(shard = " + std::to_string(g) + ", replicate = " + std::to_string(w / g) + ")", 1,
            w) +
        run("dp", "m", "c", "dp(" + std::to_string(w) + ")", 1, w));
    ASSERT_SESSION(session);
    double W = static_cast<double>(w), G = static_cast<double>(g);
    auto onLink = [](LinkClass link) {
      return [link](const CommEntry &entry) { return entry.link == link; };
    };
    const RunAnalysis &hsdp = session.get("hsdp")->analysis;
    double inter = sumEntries(hsdp, onLink(LinkClass::InterNode), &CommEntry::sentBytes);
    EXPECT_REL(inter, 2 * bytesModel * (W - G) / (G * W), kExact);
    double published = 2 * bytesModel * (W - 1) / (G * W);
    EXPECT_REL(inter, published * (W - G) / (W - 1), kExact);
    EXPECT_LE(inter, published);
    // Inside the host: three collectives of the whole model over G ranks.
    EXPECT_REL(sumEntries(hsdp, onLink(LinkClass::IntraNode), &CommEntry::sentBytes),
               3 * (G - 1) / G * bytesModel, kExact);
    const CommEntry *allReduce = findEntry(hsdp, OpKind::AllReduce, ir::State::Grads, Phase::Step);
    ASSERT_NE(allReduce, nullptr);
    EXPECT_EQ(allReduce->axis, "dp_replicate");
    EXPECT_EQ(allReduce->groupSize, w / g);
    EXPECT_EQ(allReduce->link, LinkClass::InterNode);
    EXPECT_REL(allReduce->messageBytes, bytesModel / G, kExact);

    const RunAnalysis &dp = session.get("dp")->analysis;
    EXPECT_REL(sumEntries(dp, onLink(LinkClass::InterNode), &CommEntry::sentBytes),
               2 * bytesModel * (W - 1) / W, kExact);
    // Per device, ZeRO-3 memory over the shard group only.
    EXPECT_REL(hsdp.memory.device.getPersistent(), 16 * psi / G, kExact);
  }
}

//===----------------------------------------------------------------------===//
// 4. FLOPs (Narayanan et al. 2021, §5.1)
//===----------------------------------------------------------------------===//

struct GptShape {
  int64_t layers, hidden, heads, seq, vocab;
};

/// A GPT model whose attention scores are materialized, as Narayanan et al. 2021 and
/// Korthikanti et al. 2022 count them.
std::string transformer(const std::string &name, const GptShape &shape,
                        const std::string &extra = "") {
  return "model " + name + " : transformer { layers = " + std::to_string(shape.layers) +
         "; hidden = " + std::to_string(shape.hidden) + "; heads = " + std::to_string(shape.heads) +
         "; seq = " + std::to_string(shape.seq) + "; vocab = " + std::to_string(shape.vocab) +
         "; attention = materialized; " + extra + "}\n";
}

/// Narayanan et al. 2021, eq. 3: factor·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), with factor 96 the
/// FLOPs of a step with full recomputation (the logits' 6·B·s·h·V included).
double narayananFlops(double factor, double batch, const GptShape &shape) {
  double s = static_cast<double>(shape.seq), l = static_cast<double>(shape.layers),
         h = static_cast<double>(shape.hidden), v = static_cast<double>(shape.vocab);
  return factor * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
}

/// The model FLOPs of a step without recomputation: three times the forward, 24·s·h² + 4·s²·h
/// per layer and 2·s·h·V for the logits per sample, i.e. 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))
/// (Korthikanti et al. 2022, §6: their model FLOPs). REFERENCE-NUMBERS's 72-variant keeps
/// V/(16·l·h) from the 96 formula, which counts the logits as 4.5·B·s·h·V instead of 6.
double modelFlops(double batch, const GptShape &shape) {
  double s = static_cast<double>(shape.seq), l = static_cast<double>(shape.layers),
         h = static_cast<double>(shape.hidden), v = static_cast<double>(shape.vocab);
  return 72 * batch * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h));
}

const GptShape kGpt1_7B = {24, 2304, 24, 2048, 51200};

std::string flopsProgram() {
  return transformer("gpt", kGpt1_7B) + clusterOf("c", 8) +
         "strategy full { activations = recompute; }\n"
         "strategy selective { activations = recompute(selective); }\n"
         "strategy dp8_full = dp(8) * full;\n"
         "strategy dp8_selective = dp(8) * selective;\n"
         "strategy dp4_tp2 = dp(4) * tp(2);\n"
         "strategy dp4_tp2_full = dp(4) * tp(2) * full;\n" +
         run("keep", "gpt", "c", "dp(8)", 4, 64) + run("full", "gpt", "c", "dp8_full", 4, 64) +
         run("selective", "gpt", "c", "dp8_selective", 4, 64) +
         run("tp", "gpt", "c", "dp4_tp2", 4, 64) +
         run("tp_full", "gpt", "c", "dp4_tp2_full", 4, 64);
}

/// The FLOPs every device computes in a step, from the plan's compute ops.
double planFlops(const plan::StepPlan &plan, bool withRecompute) {
  double perDevice = 0;
  for (const plan::StagePlan &stage : plan.stages)
    for (const auto *ops : {&stage.forward, &stage.backward})
      for (const plan::Op &op : *ops)
        if (op.kind == OpKind::Compute &&
            (withRecompute || op.compute != plan::ComputeKind::Recompute))
          perDevice += op.flops;
  return perDevice * static_cast<double>(plan.microbatches) *
         static_cast<double>(plan.run->strategy->mesh.getNumDevices()) /
         static_cast<double>(plan.stages.size());
}

TEST(AnalysisFlops, ModelFlopsClosedForm) {
  Session session(flopsProgram());
  ASSERT_SESSION(session);
  for (const char *name : {"keep", "full", "selective", "tp", "tp_full"}) {
    SCOPED_TRACE(name);
    const Session::Result *result = session.get(name);
    ASSERT_NE(result, nullptr);
    double expected = modelFlops(64, kGpt1_7B);
    // Model FLOPs do not count recomputation.
    EXPECT_REL(result->analysis.time.flopsPerStep, expected, kExact);
    // The plan's compute ops, without recomputation, add up to the same: 24·b·s·h² + 4·b·s²·h
    // per layer forward, the head's 2·b·s·h·V, each backward twice its forward, split over tp.
    EXPECT_REL(planFlops(*result->plan, false), expected, 1e-12);
  }
}

TEST(AnalysisFlops, ComputeTimeFollowsPlanFlops) {
  // Without a device preset and with `efficiency` written, compute runs at peak × efficiency.
  Session session(flopsProgram());
  ASSERT_SESSION(session);
  double flopRate = 312e12 * 0.5;
  for (const char *name : {"keep", "tp", "full"}) {
    SCOPED_TRACE(name);
    const Session::Result *result = session.get(name);
    ASSERT_NE(result, nullptr);
    const analysis::TimeReport &time = result->analysis.time;
    EXPECT_TRUE(time.known);
    EXPECT_REL(time.computeSeconds * flopRate * 8, planFlops(*result->plan, true), 1e-12);
    EXPECT_REL(time.mfu, time.flopsPerStep / (time.stepSeconds * 8 * 312e12), 1e-12);
    EXPECT_REL(time.tokensPerSecond, 64.0 * 2048 / time.stepSeconds, 1e-12);
    EXPECT_GE(time.stepSeconds, time.computeSeconds);
  }
}

TEST(AnalysisFlops, FullRecomputationCounts96) {
  // Narayanan et al. 2021, eq. 3: with full recomputation a step computes
  // 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs (every layer's forward repeated; the output
  // layer is not recomputed).
  Session session(flopsProgram());
  ASSERT_SESSION(session);
  for (auto [keep, full] : {std::pair{"keep", "full"}, std::pair{"tp", "tp_full"}}) {
    SCOPED_TRACE(full);
    const Session::Result *keepResult = session.get(keep), *fullResult = session.get(full);
    ASSERT_TRUE(keepResult && fullResult);
    EXPECT_REL(planFlops(*fullResult->plan, true), narayananFlops(96, 64, kGpt1_7B), 1e-12);
    EXPECT_REL(fullResult->analysis.time.computeSeconds / keepResult->analysis.time.computeSeconds,
               narayananFlops(96, 64, kGpt1_7B) / modelFlops(64, kGpt1_7B), 1e-12);
    // MFU counts model FLOPs only, so recomputation lowers it.
    EXPECT_LT(fullResult->analysis.time.mfu, keepResult->analysis.time.mfu);
  }
}

TEST(AnalysisFlops, SelectiveRecomputationRepeatsAttentionCore) {
  // Korthikanti et al. 2022, §5: selective recomputation repeats QKᵀ and the attention over V,
  // 4·b·s²·h FLOPs per layer, i.e. 4·B·s²·l·h per step.
  Session session(flopsProgram());
  ASSERT_SESSION(session);
  double s = 2048, l = 24, h = 2304;
  double extra = session.get("selective")->analysis.time.computeSeconds -
                 session.get("keep")->analysis.time.computeSeconds;
  EXPECT_REL(extra * 312e12 * 0.5 * 8, 4 * 64 * s * s * l * h, 1e-9);
}

TEST(PipelineLayout, CountedEmbeddingAndLossFollowMegatronCoresSplit) {
  // Megatron-Core's get_num_layers_to_build with --account-for-embedding-in-pipeline-split and
  // --account-for-loss-in-pipeline-split, written out: (layers + counted) / (p·v) per chunk,
  // one fewer in the first virtual chunk of the first stage and in the last of the last stage;
  // chunk c (0 … p·v − 1) is virtual stage c / p of pipeline rank c mod p.
  auto megatron = [](int64_t layers, int64_t p, int64_t v, bool embedding, bool loss) {
    int64_t perChunk = (layers + embedding + loss) / (p * v);
    std::vector<int64_t> chunks;
    for (int64_t vp = 0; vp < v; ++vp)
      for (int64_t rank = 0; rank < p; ++rank)
        chunks.push_back(perChunk - (embedding && rank == 0 && vp == 0 ? 1 : 0) -
                         (loss && rank == p - 1 && vp == v - 1 ? 1 : 0));
    return chunks;
  };
  struct Case {
    int64_t layers, stages, chunks;
    bool embedding, loss;
  };
  // Llama 3.1 405B's 126 layers over 8 × 8 (Megatron-Bridge's H100 recipe), one-chunk 1F1B,
  // and only one of the two.
  for (const Case &c : {Case{126, 8, 8, true, true}, Case{30, 4, 1, true, true},
                        Case{15, 4, 1, false, true}, Case{15, 4, 1, true, false}}) {
    ir::Pipeline pipeline;
    pipeline.schedule = c.chunks > 1 ? ir::Schedule::Interleaved : ir::Schedule::OneFOneB;
    pipeline.chunks = c.chunks;
    pipeline.embeddingLayer = c.embedding;
    pipeline.lossLayer = c.loss;
    plan::PipelineLayout layout = plan::getPipelineLayout(c.layers, c.stages, &pipeline);
    std::vector<int64_t> expected = megatron(c.layers, c.stages, c.chunks, c.embedding, c.loss);
    std::vector<int64_t> actual(expected.size(), 0);
    ASSERT_EQ(layout.chunkOfLayer.size(), static_cast<size_t>(c.layers));
    for (int chunk : layout.chunkOfLayer)
      ++actual[chunk];
    EXPECT_EQ(actual, expected) << c.layers << " layers over " << c.stages << " × " << c.chunks;
    // Layers run in chunk order, and each stage holds the sum of its chunks.
    EXPECT_TRUE(std::is_sorted(layout.chunkOfLayer.begin(), layout.chunkOfLayer.end()));
    for (int64_t stage = 0; stage < c.stages; ++stage) {
      int64_t sum = 0;
      for (int64_t vp = 0; vp < c.chunks; ++vp)
        sum += expected[vp * c.stages + stage];
      EXPECT_EQ(layout.layersOfStage[stage], sum);
    }
  }
}

TEST(AnalysisFlops, BlockRecomputationRecomputesTheFirstLayersOfEachChunk) {
  // recompute(layers = 3), Megatron-LM's block method: GPT 1.7B's 24 layers over 2 stages × 3
  // interleaved chunks of 4 layers; each chunk recomputes its first 3 (stage 0 holds chunks 0, 2,
  // 4: layers 0-3, 8-11, 16-19), so 18 of the 24 layers are recomputed and 6 keep everything.
  const std::string mesh = "mesh [pp = 2, dp = 4]; pipeline = interleaved(microbatches = 8, "
                           "chunks = 3); ";
  Session session(transformer("gpt", kGpt1_7B) + clusterOf("c", 8) + "strategy block3 { " + mesh +
                  "activations = recompute(layers = 3); }\n" + "strategy every { " + mesh +
                  "activations = recompute; }\n" + "strategy none { " + mesh +
                  "activations = keep; }\n" + run("block", "gpt", "c", "block3", 1, 32) +
                  run("full", "gpt", "c", "every", 1, 32) + run("keep", "gpt", "c", "none", 1, 32));
  ASSERT_SESSION(session);
  const Session::Result *block = session.get("block"), *full = session.get("full"),
                        *keep = session.get("keep");
  ASSERT_TRUE(block && full && keep);
  std::vector<int> recomputed;
  for (const plan::Unit &unit : block->plan->units)
    if (unit.recomputed)
      recomputed.push_back(unit.layer);
  EXPECT_EQ(recomputed,
            (std::vector<int>{0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 22}));

  // FLOPs: the model's (72·B·s·l·h²·(…), no recomputation) plus 18/24 of what full
  // recomputation repeats (Narayanan et al. 2021, eq. 3: 96·… with every layer's forward again).
  double model = modelFlops(32, kGpt1_7B), all = narayananFlops(96, 32, kGpt1_7B);
  EXPECT_REL(planFlops(*block->plan, true), model + 18.0 / 24.0 * (all - model), 1e-12);
  EXPECT_REL(planFlops(*full->plan, true), all, 1e-12);

  // Memory of stage 0: 9 layers keep their input, 2·s·b·h bytes (Korthikanti et al. 2022,
  // Table 2, full recomputation), 3 keep what `keep` keeps, times the interleaved schedule's
  // micro-batches in flight, min(p, m)·(1 + (p − 1)/(p·v)) = 2·(1 + 1/6).
  const double s = 2048, h = 2304, inFlight = 2 * (1 + 1.0 / 6);
  double keepLayer = keep->analysis.memory.stages[0].device.activations / (12 * inFlight);
  EXPECT_REL(full->analysis.memory.stages[0].device.activations, 12 * 2 * s * h * inFlight, kExact);
  EXPECT_REL(block->analysis.memory.stages[0].device.activations,
             (9 * 2 * s * h + 3 * keepLayer) * inFlight, kExact);
  // One recomputed layer at a time holds its activations again through its backward: the same
  // transient as under full recomputation.
  EXPECT_REL(block->analysis.memory.stages[0].device.transient,
             full->analysis.memory.stages[0].device.transient, kExact);
  EXPECT_LT(block->analysis.memory.stages[0].device.peak,
            keep->analysis.memory.stages[0].device.peak);
  EXPECT_GT(block->analysis.memory.stages[0].device.peak,
            full->analysis.memory.stages[0].device.peak);
}

//===----------------------------------------------------------------------===//
// 4b. Overlapped communication (Lee et al. 2025)
//===----------------------------------------------------------------------===//

/// Lee et al. 2025 (arXiv:2507.03114), §1: compute overlapped with communication is 18.9%
/// slower on average. A window of `compute` seconds of compute beside `comm` seconds of
/// communication then lasts max(comm, compute + comm · κ/(1 + κ)).
double overlapWindow(double comm, double compute) {
  const double kappa = 0.189;
  return comm <= 0 ? compute : std::max(comm, compute + comm * kappa / (1 + kappa));
}

/// GPT 1.7B with ZeRO-3 and with data parallelism over 8 devices, on one node (300 GB/s, 5 us)
/// and on 8 nodes of one device behind a 1 GB/s link; 4 micro-batches of 2 sequences per device.
std::string overlapProgram() {
  return transformer("gpt", kGpt1_7B) + clusterOf("fast", 8) +
         cluster("slow", 8, 1, "intra_bandwidth = 300 GB/s; inter_bandwidth = 1 GB/s;") +
         run("zero3_fast", "gpt", "fast", "zero3(dp = 8)", 2, 64) +
         run("zero3_slow", "gpt", "slow", "zero3(dp = 8)", 2, 64) +
         run("dp_fast", "gpt", "fast", "dp(8)", 2, 64) +
         run("dp_slow", "gpt", "slow", "dp(8)", 2, 64);
}

TEST(AnalysisTime, GathersAndReductionsOverlapTheNeighbouringUnit) {
  // ZeRO-3 without a pipeline or tensor parallelism: every communication is a parameter gather
  // or a gradient reduce-scatter. With two gathered units (the one computing and the next), the
  // gather of unit j + 1 runs beside unit j's compute, the reduce-scatter of unit j − 1 beside
  // unit j's backward; a pass's first gather and last reduce-scatter have nothing beside them.
  Session session(overlapProgram());
  ASSERT_SESSION(session);
  const double n = 8, b = 2, s = 2048, h = 2304, vocab = 51200, rate = 312e12 * 0.5;
  for (auto [name, beta, alpha] :
       {std::tuple{"zero3_fast", 300e9, 5e-6}, std::tuple{"zero3_slow", 1e9, 0.0}}) {
    SCOPED_TRACE(name);
    const Session::Result *result = session.get(name);
    ASSERT_NE(result, nullptr);
    const plan::StepPlan &plan = *result->plan;
    double m = static_cast<double>(plan.microbatches);
    ASSERT_EQ(m, 4);
    ASSERT_EQ(plan.units.size(), 26u); // embed, 24 layers, head
    // Per unit, in forward order: ring all-gather or reduce-scatter of its bf16 parameters
    // (n − 1)·α + (n − 1)/n · bytes/β; forward compute 24·b·s·h² + 4·b·s²·h per layer,
    // 2·b·s·h·V for the head, none for the embedding; the backward twice the forward.
    std::vector<double> comm, forward;
    for (const plan::Unit &unit : plan.units) {
      comm.push_back((n - 1) * alpha + (n - 1) / n * 2 * static_cast<double>(unit.params) / beta);
      bool layer = unit.layer >= 0 && unit.layer < 24, head = unit.layer >= 24;
      forward.push_back((layer  ? 24 * b * s * h * h + 4 * b * s * s * h
                         : head ? 2 * b * s * h * vocab
                                : 0) /
                        rate);
    }
    size_t k = comm.size();
    // The backward visits unit k − 1 (the head) first. GPT ties the output layer to the
    // embedding, so the head's backward gathers the embedding too (it stays gathered until the
    // embedding's backward). It ends with the embedding's reduce-scatter.
    double forwardPass = comm[0], backwardPass = comm[k - 1] + comm[0] + comm[0];
    for (size_t j = 0; j < k; ++j) {
      forwardPass += overlapWindow(j + 1 < k ? comm[j + 1] : 0, forward[j]);
      // Beside unit j's backward: the gather of unit j − 1 and the reduce-scatter of unit j + 1.
      backwardPass +=
          overlapWindow((j > 1 ? comm[j - 1] : 0) + (j + 1 < k ? comm[j + 1] : 0), 2 * forward[j]);
    }
    const analysis::TimeReport &time = result->analysis.time;
    EXPECT_REL(time.stepSeconds, m * (forwardPass + backwardPass), 1e-12);
    double compute = 0;
    for (double seconds : forward)
      compute += 3 * seconds;
    EXPECT_REL(time.computeSeconds, m * compute, 1e-12);
    EXPECT_REL(time.exposedCommSeconds, m * (forwardPass + backwardPass - compute), 1e-9);
    // The layers' traffic is the bulk: hidden by NVLink (at 18.9% of the compute's speed), not
    // by a 1 GB/s link.
    double layerComm = comm[1], layerForward = forward[1];
    if (std::string(name) == "zero3_fast")
      EXPECT_LT(2 * layerComm, 2 * layerForward);
    else
      EXPECT_GT(layerComm, layerForward * 1.189);
  }
}

TEST(AnalysisTime, StepReductionOverlapsTheLastBackward) {
  // Data parallelism: each unit's gradients are all-reduced once per step, as soon as the last
  // micro-batch's backward has produced them, beside the backward of the unit after it; the
  // first unit's (the embedding's) reduction ends the step.
  Session session(overlapProgram());
  ASSERT_SESSION(session);
  const double n = 8, b = 2, s = 2048, h = 2304, vocab = 51200, rate = 312e12 * 0.5;
  const double kappa = 0.189;
  for (auto [name, beta, alpha] :
       {std::tuple{"dp_fast", 300e9, 5e-6}, std::tuple{"dp_slow", 1e9, 0.0}}) {
    SCOPED_TRACE(name);
    const Session::Result *result = session.get(name);
    ASSERT_NE(result, nullptr);
    const plan::StepPlan &plan = *result->plan;
    double m = static_cast<double>(plan.microbatches);
    // Units in backward order: the head, the layers from the last, the embedding; each unit's
    // ring all-reduce 2(n − 1)·α + 2(n − 1)/n · bytes/β and its backward compute.
    std::vector<double> reduce, backward;
    double forward = 0;
    for (size_t j = plan.units.size(); j-- > 0;) {
      const plan::Unit &unit = plan.units[j];
      reduce.push_back(2 * (n - 1) * alpha +
                       2 * (n - 1) / n * 2 * static_cast<double>(unit.params) / beta);
      bool layer = unit.layer >= 0 && unit.layer < 24, head = unit.layer >= 24;
      double unitForward = (layer  ? 24 * b * s * h * h + 4 * b * s * s * h
                            : head ? 2 * b * s * h * vocab
                                   : 0) /
                           rate;
      forward += unitForward;
      backward.push_back(2 * unitForward);
    }
    double last = 0;
    for (size_t j = 0; j < backward.size(); ++j) {
      double beside = j > 0 ? reduce[j - 1] : 0;
      last += backward[j] +
              (beside > 0 ? std::max(beside - backward[j], beside * kappa / (1 + kappa)) : 0);
    }
    last += reduce.back();
    double totalBackward = 0;
    for (double seconds : backward)
      totalBackward += seconds;
    const RunAnalysis &analysis = result->analysis;
    EXPECT_REL(analysis.time.stepSeconds, (m - 1) * (forward + totalBackward) + forward + last,
               1e-12);
  }
}

//===----------------------------------------------------------------------===//
// 5. Activation memory per layer (Korthikanti et al. 2022, Table 2)
//===----------------------------------------------------------------------===//

struct ActivationCase {
  const char *name;
  GptShape shape;
  double attentionTerm; ///< 5·a·s/h, given by REFERENCE-NUMBERS as a check.
  double savedFraction; ///< What selective recomputation saves, rounded.
};

const ActivationCase kActivationCases[] = {
    {"gpt3", {96, 12288, 96, 2048, 51200}, 80, 0.70},
    {"mtnlg", {105, 20480, 128, 2048, 51200}, 64, 0.65},
};

std::string activationProgram(const ActivationCase &model) {
  return transformer("m", model.shape) + cluster("one", 1, 1) + cluster("node", 1, 8) +
         "strategy full { activations = recompute; }\n"
         "strategy selective { activations = recompute(selective); }\n"
         "strategy single = dp(1);\n"
         "strategy single_selective = dp(1) * selective;\n"
         "strategy single_full = dp(1) * full;\n"
         "strategy tp8 = tp(8);\n"
         "strategy sp8 = sp(8);\n"
         "strategy tp8_selective = tp(8) * selective;\n"
         "strategy sp8_selective = sp(8) * selective;\n"
         "strategy tp8_full = tp(8) * full;\n" +
         run("none", "m", "one", "single", 2, 2) +
         run("none_selective", "m", "one", "single_selective", 2, 2) +
         run("none_full", "m", "one", "single_full", 2, 2) + run("tp", "m", "node", "tp8", 2, 2) +
         run("tp_sp", "m", "node", "sp8", 2, 2) +
         run("tp_selective", "m", "node", "tp8_selective", 2, 2) +
         run("tp_sp_selective", "m", "node", "sp8_selective", 2, 2) +
         run("tp_full", "m", "node", "tp8_full", 2, 2);
}

/// Activation bytes per layer of one micro-batch, from the analysis: the stage's activations
/// over its layers (one stage here, one micro-batch in flight).
double perLayer(const Session::Result &result) {
  EXPECT_EQ(result.plan->stages.size(), 1u);
  EXPECT_TRUE(result.analysis.memory.activationsKnown);
  return result.analysis.memory.device.activations /
         static_cast<double>(result.plan->run->model->getNumLayers());
}

TEST(AnalysisActivations, Table2Rows) {
  for (const ActivationCase &model : kActivationCases) {
    SCOPED_TRACE(model.name);
    Session session(activationProgram(model));
    ASSERT_SESSION(session);
    double s = static_cast<double>(model.shape.seq), h = static_cast<double>(model.shape.hidden),
           a = static_cast<double>(model.shape.heads), b = 2, t = 8;
    double sbh = s * b * h;
    EXPECT_EQ(5 * a * s / h, model.attentionTerm);
    const std::map<std::string, double> rows = {
        {"none", sbh * (34 + 5 * a * s / h)},
        {"none_selective", sbh * 34},
        {"tp", sbh * (10 + 24 / t + 5 * a * s / (h * t))},
        {"tp_sp", sbh * (34 / t + 5 * a * s / (h * t))},
        {"tp_selective", sbh * (10 + 24 / t)},
        {"tp_sp_selective", sbh * 34 / t},
        {"none_full", 2 * sbh},
        {"tp_full", 2 * sbh},
    };
    for (const auto &[name, expected] : rows) {
      SCOPED_TRACE(name);
      const Session::Result *result = session.get(name);
      ASSERT_NE(result, nullptr);
      EXPECT_REL(perLayer(*result), expected, kExact);
    }
  }
}

TEST(AnalysisActivations, SelectiveRecomputationSavings) {
  // GPT-3: 5as/h = 80 of 34 + 80 per s·b·h, so selective recomputation removes 80/114 ≈ 70 %;
  // MT-NLG: 64/98 ≈ 65 %. The same fraction with tensor and sequence parallelism.
  for (const ActivationCase &model : kActivationCases) {
    SCOPED_TRACE(model.name);
    Session session(activationProgram(model));
    ASSERT_SESSION(session);
    double fraction = model.attentionTerm / (34 + model.attentionTerm);
    for (auto [keep, selective] :
         {std::pair{"none", "none_selective"}, std::pair{"tp_sp", "tp_sp_selective"}}) {
      double before = perLayer(*session.get(keep)), after = perLayer(*session.get(selective));
      EXPECT_REL(1 - after / before, fraction, 1e-12);
      EXPECT_NEAR(1 - after / before, model.savedFraction, 0.005);
    }
  }
}

TEST(AnalysisActivations, AbstractModelActivationsUnknown) {
  Session session("model m { params = 1B; }\n" + clusterOf("c", 8) +
                  run("r", "m", "c", "zero3(dp = 8)", 1, 8));
  ASSERT_SESSION(session);
  const RunAnalysis &result = session.get("r")->analysis;
  EXPECT_FALSE(result.memory.activationsKnown);
  EXPECT_FALSE(result.time.known);
}

//===----------------------------------------------------------------------===//
// 6. Pipelines (Narayanan et al. 2021 §2.2; Korthikanti et al. 2022 §4.2.3)
//===----------------------------------------------------------------------===//

const GptShape kPipeModel = {48, 512, 8, 256, 1024};

/// s·b·h·(34 + 5as/h) for micro-batch b: one layer's activations without parallelism.
double pipeLayerBytes(double b) {
  double s = 256, h = 512, a = 8;
  return s * b * h * (34 + 5 * a * s / h);
}

std::string
pipelineProgram(const std::string &links = "intra_bandwidth = 300 GB/s; "
                                           "inter_bandwidth = 25 GB/s; latency = 5 us;") {
  std::string text = transformer("m", kPipeModel);
  for (int64_t p : {2, 4, 8})
    text += cluster(fmt::format("c{}", p), 1, p, links);
  auto add = [&](const std::string &name, int64_t p, const std::string &schedule, int64_t m) {
    text += "strategy s_" + name + " { mesh [pp = " + std::to_string(p) +
            "]; pipeline = " + schedule + "; }\n";
    text += run(name, "m", fmt::format("c{}", p), "s_" + name, 2, 2 * m);
  };
  for (int64_t p : {2, 4, 8}) {
    std::string ps = std::to_string(p);
    add("f1b_p" + ps + "_m16", p, "1f1b(microbatches = 16)", 16);
    add("f1b_p" + ps + "_m" + ps, p, "1f1b(microbatches = " + ps + ")", p);
    add("gpipe_p" + ps, p, "gpipe(microbatches = 8)", 8);
    add("inter_p" + ps, p, "interleaved(microbatches = 16, chunks = 2)", 16);
    add("inter3_p" + ps, p, "interleaved(microbatches = 16, chunks = 3)", 16);
  }
  add("f1b_p8_m2", 8, "1f1b(microbatches = 2)", 2);
  add("f1b_p8_m4", 8, "1f1b(microbatches = 4)", 4);
  return text;
}

TEST(AnalysisPipeline, OneFOneBFirstStageHoldsOneMicrobatchOfAllLayers) {
  Session session(pipelineProgram());
  ASSERT_SESSION(session);
  double all = 48 * pipeLayerBytes(2);
  for (int64_t p : {2, 4, 8})
    for (const std::string &m : {std::string("16"), std::to_string(p)}) {
      std::string name = "f1b_p" + std::to_string(p) + "_m" + m;
      SCOPED_TRACE(name);
      const Session::Result *result = session.get(name);
      ASSERT_NE(result, nullptr);
      ASSERT_EQ(result->analysis.memory.stages.size(), static_cast<size_t>(p));
      EXPECT_REL(result->analysis.memory.stages[0].device.activations, all, kExact);
      // Stage s holds p − s micro-batches of L/p layers.
      for (int64_t s = 0; s < p; ++s)
        EXPECT_REL(result->analysis.memory.stages[s].device.activations,
                   static_cast<double>(p - s) * 48 / static_cast<double>(p) * pipeLayerBytes(2),
                   kExact);
    }
}

TEST(AnalysisPipeline, FewerMicrobatchesThanStages) {
  Session session(pipelineProgram());
  ASSERT_SESSION(session);
  for (int64_t m : {2, 4}) {
    SCOPED_TRACE(m);
    const Session::Result *result = session.get("f1b_p8_m" + std::to_string(m));
    ASSERT_NE(result, nullptr);
    EXPECT_REL(result->analysis.memory.stages[0].device.activations,
               48 * pipeLayerBytes(2) * static_cast<double>(m) / 8, kExact);
  }
}

TEST(AnalysisPipeline, InterleavedAndGPipe) {
  Session session(pipelineProgram());
  ASSERT_SESSION(session);
  for (int64_t p : {2, 4, 8}) {
    double pd = static_cast<double>(p);
    SCOPED_TRACE(p);
    for (auto [prefix, v] : {std::pair{"inter_p", 2.0}, std::pair{"inter3_p", 3.0}}) {
      const Session::Result *result = session.get(prefix + std::to_string(p));
      ASSERT_NE(result, nullptr);
      EXPECT_REL(result->analysis.memory.stages[0].device.activations,
                 48 * pipeLayerBytes(2) * (1 + (pd - 1) / (pd * v)), kExact);
    }
    // GPipe keeps every micro-batch's activations of the stage's L/p layers.
    const Session::Result *gpipe = session.get("gpipe_p" + std::to_string(p));
    ASSERT_NE(gpipe, nullptr);
    for (const analysis::StageMemory &stage : gpipe->analysis.memory.stages)
      EXPECT_REL(stage.device.activations, 8 * 48 / pd * pipeLayerBytes(2), kExact);
  }
}

TEST(AnalysisPipeline, BubbleFraction) {
  // (p − 1)/m of the ideal step for 1F1B and GPipe, (p − 1)/(m·v) interleaved, on equal stages.
  // Here the last stage also holds the head, so the others, which fill and drain the pipeline,
  // are lighter than the slowest stage: the bubble (their micro-batches, point-to-point sends
  // included) is under (p − 1)/(m·v) of the slowest stage's compute plus exposed communication,
  // by at most the head's share of a stage (under 15 % for 6 to 24 layers of this model and its
  // 1,024-entry vocabulary); equal stages are exact (CostModelTest.BubblesOfEverySchedule).
  for (bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast links" : "A100 links");
    Session session(fast ? pipelineProgram("intra_bandwidth = 1000000 TB/s; "
                                           "inter_bandwidth = 1000000 TB/s;")
                         : pipelineProgram());
    ASSERT_SESSION(session);
    for (int64_t p : {2, 4, 8}) {
      double pd = static_cast<double>(p);
      for (auto [name, m, v] : {std::tuple{"f1b_p" + std::to_string(p) + "_m16", 16.0, 1.0},
                                std::tuple{"gpipe_p" + std::to_string(p), 8.0, 1.0},
                                std::tuple{"inter_p" + std::to_string(p), 16.0, 2.0},
                                std::tuple{"inter3_p" + std::to_string(p), 16.0, 3.0}}) {
        SCOPED_TRACE(name);
        const Session::Result *result = session.get(name);
        ASSERT_NE(result, nullptr);
        const analysis::TimeReport &time = result->analysis.time;
        double expected = (pd - 1) / (m * v);
        double fraction = time.bubbleSeconds / (time.computeSeconds + time.exposedCommSeconds);
        EXPECT_LT(fraction, expected * (1 - 1e-6));
        EXPECT_GT(fraction, expected * 0.85);
        if (fast) {
          EXPECT_LT(time.bubbleSeconds / time.computeSeconds, expected * (1 - 1e-6));
          EXPECT_GT(time.bubbleSeconds / time.computeSeconds, expected * 0.85);
        }
        EXPECT_REL(time.stepSeconds,
                   time.computeSeconds + time.exposedCommSeconds + time.bubbleSeconds, 1e-12);
      }
    }
  }
}

TEST(AnalysisPipeline, BoundaryTraffic) {
  // b·s·h activation elements per micro-batch per stage boundary, each direction.
  Session session(pipelineProgram());
  ASSERT_SESSION(session);
  double message = 2.0 * 256 * 512 * 2; // b·s·h bf16 elements
  for (int64_t p : {2, 4, 8}) {
    for (auto [name, m, v] : {std::tuple{"f1b_p" + std::to_string(p) + "_m16", 16, 1},
                              std::tuple{"inter_p" + std::to_string(p), 16, 2},
                              std::tuple{"inter3_p" + std::to_string(p), 16, 3}}) {
      SCOPED_TRACE(name);
      const Session::Result *result = session.get(name);
      ASSERT_NE(result, nullptr);
      int64_t boundaries = p * v - 1;
      std::map<std::pair<int, Phase>, int64_t> calls;
      for (const CommEntry &entry : result->analysis.communication) {
        // The tied embedding's gradient all-reduce at the step (TiedEmbeddingCopyOnTheLastStage).
        if (entry.phase == Phase::Step)
          continue;
        ASSERT_EQ(entry.collective, OpKind::Send);
        EXPECT_EQ(entry.state, ir::State::Activations);
        EXPECT_EQ(entry.messageBytes, message);
        EXPECT_EQ(entry.sentBytes, message * static_cast<double>(entry.count));
        EXPECT_EQ(entry.axis, "pp");
        EXPECT_EQ(entry.link, LinkClass::IntraNode);
        calls[{entry.stage, entry.phase}] += entry.count;
      }
      int64_t forward = 0, backward = 0;
      for (const auto &[key, count] : calls)
        (key.second == Phase::Forward ? forward : backward) += count;
      EXPECT_EQ(forward, boundaries * m);
      EXPECT_EQ(backward, boundaries * m);
      if (v == 1)
        for (int64_t s = 0; s < p; ++s) {
          EXPECT_EQ((calls[{static_cast<int>(s), Phase::Forward}]), s + 1 < p ? m : 0);
          EXPECT_EQ((calls[{static_cast<int>(s), Phase::Backward}]), s > 0 ? m : 0);
        }
    }
  }
}

TEST(AnalysisPipeline, TiedEmbeddingCopyOnTheLastStage) {
  // Tied embeddings under pipeline parallelism: the last stage holds a copy of the word
  // embedding for its output layer (Megatron-Core's setup_embeddings_and_output_layer), with
  // gradients and optimizer states, and the step all-reduces the copy's gradient with the first
  // stage's (finalize_model_grads). So the last stage holds what an untied model's does, whose
  // output layer is a [V, h] matrix of its own; multi-token prediction modules need the copy
  // whether the embeddings are tied or not. V-shaped schedules put the head on the first stage,
  // beside the embedding: no copy.
  const GptShape &shape = kPipeModel;
  double v = static_cast<double>(shape.vocab), h = static_cast<double>(shape.hidden),
         s = static_cast<double>(shape.seq), l = static_cast<double>(shape.layers);
  std::string text = transformer("tied", shape) +
                     transformer("untied", shape, "tied_embeddings = false; ") +
                     transformer("mtp", shape, "tied_embeddings = false; mtp_layers = 1; ") +
                     cluster("one", 1, 4) + cluster("two", 2, 2);
  text += "strategy p4 { mesh [pp = 4]; pipeline = 1f1b(microbatches = 4); }\n"
          "strategy v4 { mesh [pp = 4]; pipeline = zbv(microbatches = 8); }\n";
  for (const char *model : {"tied", "untied", "mtp"})
    for (const char *where : {"one", "two"})
      text += run(fmt::format("{}_{}", model, where), model, where, "p4", 1, 4);
  text += run("tied_v", "tied", "one", "v4", 1, 8);
  Session session(text);
  ASSERT_SESSION(session);
  // GPT layers 12h² + 13h, the head's final norm 2h, the embedding (V + s)·h; bf16 params.
  double layerParams = 12 * h * h + 13 * h;
  auto params = [&](const std::string &name, size_t stage) {
    return session.get(name)->analysis.memory.stages.at(stage).device.params / 2;
  };
  EXPECT_REL(params("tied_one", 3), l / 4 * layerParams + 2 * h + v * h, kExact);
  EXPECT_REL(params("tied_one", 0), l / 4 * layerParams + (v + s) * h, kExact);
  EXPECT_REL(params("tied_one", 1), l / 4 * layerParams, kExact);
  EXPECT_REL(params("untied_one", 3), params("tied_one", 3), kExact);
  EXPECT_GT(params("mtp_one", 3), params("untied_one", 3) + v * h);

  // The all-reduce: stages 0 and 3 only, once per step, the [V, h] gradient in bf16 between two
  // ranks, across nodes when the two stages are on different nodes.
  for (const char *name : {"tied_one", "tied_two", "mtp_one", "untied_one", "tied_v"}) {
    SCOPED_TRACE(name);
    bool copies = std::string(name) != "untied_one" && std::string(name) != "tied_v";
    std::set<int> stages;
    for (const CommEntry &entry : session.get(name)->analysis.communication) {
      if (entry.phase != Phase::Step)
        continue;
      EXPECT_EQ(entry.collective, OpKind::AllReduce);
      EXPECT_EQ(entry.state, ir::State::Grads);
      EXPECT_EQ(entry.axis, "pp");
      EXPECT_EQ(entry.groupSize, 2);
      EXPECT_EQ(entry.count, 1);
      EXPECT_EQ(entry.messageBytes, v * h * 2);
      EXPECT_EQ(entry.link,
                std::string(name) == "tied_two" ? LinkClass::InterNode : LinkClass::IntraNode);
      stages.insert(entry.stage);
    }
    std::set<int> expected;
    if (copies)
      expected = {0, 3};
    EXPECT_EQ(stages, expected);
  }
  // Exposed: it follows the data-parallel reductions, after the last backward. Two stages on
  // two nodes, both with the all-reduce over the 25 GB/s link: the step is longer by at least
  // its bandwidth term.
  Session pair(transformer("tied", shape) +
               transformer("untied", shape, "tied_embeddings = false; ") + cluster("c", 2, 1) +
               "strategy p2 { mesh [pp = 2]; pipeline = 1f1b(microbatches = 4); }\n" +
               run("tied", "tied", "c", "p2", 1, 4) + run("untied", "untied", "c", "p2", 1, 4));
  ASSERT_SESSION(pair);
  EXPECT_GT(pair.get("tied")->analysis.time.stepSeconds,
            pair.get("untied")->analysis.time.stepSeconds + v * h * 2 / 25e9);
}

TEST(AnalysisPipeline, BoundaryLinkClass) {
  // pp = 8 outermost over 2 nodes of 8 devices with dp = 2 inside: stages 0–3 on the first node,
  // 4–7 on the second. Only the boundary between stages 3 and 4 crosses nodes.
  Session session(transformer("m", kPipeModel) + cluster("c", 2, 8) +
                  "strategy s { mesh [pp = 8, dp = 2]; pipeline = 1f1b(microbatches = 8); }\n" +
                  run("r", "m", "c", "s", 1, 16));
  ASSERT_SESSION(session);
  for (const CommEntry &entry : session.get("r")->analysis.communication) {
    if (entry.collective != OpKind::Send)
      continue;
    bool crossing = (entry.phase == Phase::Forward && entry.stage == 3) ||
                    (entry.phase == Phase::Backward && entry.stage == 4);
    EXPECT_EQ(entry.link, crossing ? LinkClass::InterNode : LinkClass::IntraNode)
        << "stage " << entry.stage << " " << plan::toString(entry.phase).str();
  }
}

TEST(AnalysisPipeline, ScatteredSendsMoveOneTensorRankSlice) {
  // Narayanan et al. 2021, §4.1: with sends = scatter each of the t tensor-parallel ranks sends
  // b·s·h/t of the boundary and the receiver all-gathers the b·s·h over tp, in both directions.
  const int64_t p = 4, t = 2, m = 8, b = 2;
  std::string text = transformer("m", kPipeModel) + cluster("c", 1, 8);
  for (std::string sends : {"whole", "scatter"})
    text += "strategy s_" + sends + " { mesh [pp = 4, tp = 2]; pipeline = 1f1b(microbatches = 8, " +
            "sends = " + sends + "); }\n" + run(sends, "m", "c", "s_" + sends, b, b * m);
  Session session(text);
  ASSERT_SESSION(session);
  double boundary = static_cast<double>(b * 256 * 512) * 2; // b·s·h bf16 bytes
  struct Volume {
    double sent = 0, gathered = 0;
    int64_t sends = 0, gathers = 0;
  };
  auto volumeOf = [&](const std::string &name) {
    Volume volume;
    for (const CommEntry &entry : session.get(name)->analysis.communication) {
      if (entry.collective == OpKind::Send) {
        volume.sent += entry.totalBytes;
        volume.sends += entry.count;
      } else if (entry.collective == OpKind::AllGather && entry.state == ir::State::Activations) {
        volume.gathered += entry.totalBytes;
        volume.gathers += entry.count;
      }
    }
    return volume;
  };
  Volume whole = volumeOf("whole"), scatter = volumeOf("scatter");
  int64_t transfers = 2 * (p - 1) * m; // each boundary, forward and backward, every micro-batch
  EXPECT_EQ(whole.sends, transfers);
  EXPECT_EQ(scatter.sends, transfers);
  EXPECT_DOUBLE_EQ(whole.sent, static_cast<double>(transfers) * boundary);
  EXPECT_DOUBLE_EQ(scatter.sent, static_cast<double>(transfers) * boundary / t);
  // One gather of the whole boundary per receive, beside the cross-entropy's gathers that both
  // plans have.
  EXPECT_EQ(scatter.gathers - whole.gathers, transfers);
  EXPECT_DOUBLE_EQ(scatter.gathered - whole.gathered, static_cast<double>(transfers) * boundary);
  // In the plan every receive of a slice is followed by its gather over the tensor axis.
  const plan::StepPlan &plan = *session.get("scatter")->plan;
  for (const plan::StagePlan &stage : plan.stages)
    for (const std::vector<plan::Op> *ops : {&stage.forward, &stage.backward})
      for (size_t i = 0; i < ops->size(); ++i) {
        if ((*ops)[i].kind != OpKind::Recv)
          continue;
        EXPECT_EQ((*ops)[i].elements, b * 256 * 512 / t);
        ASSERT_LT(i + 1, ops->size());
        const plan::Op &gather = (*ops)[i + 1];
        EXPECT_EQ(gather.kind, OpKind::AllGather);
        EXPECT_EQ(gather.elements, b * 256 * 512);
        ASSERT_EQ(gather.axes.size(), 1u);
        EXPECT_EQ(plan.run->strategy->mesh.axes[gather.axes[0]].kind, ir::AxisKind::Tensor);
      }
}

//===----------------------------------------------------------------------===//
// 7. Tensor and sequence parallelism (Korthikanti et al. 2022, §4.2.2)
//===----------------------------------------------------------------------===//

const GptShape kTpModel = {4, 1024, 16, 512, 4096};

std::string tensorProgram() {
  return transformer("m", kTpModel) + cluster("c", 1, 8) +
         "strategy full { activations = recompute; }\n"
         "strategy tp_full = tp(8) * full;\n"
         "strategy sp_full = sp(8) * full;\n"
         "strategy kept { sp_inputs = keep; }\n"
         "strategy sp_keep = sp(8) * kept;\n"
         "strategy sp_keep_full = sp(8) * full * kept;\n" +
         run("tp", "m", "c", "tp(8)", 2, 6) + run("sp", "m", "c", "sp(8)", 2, 6) +
         run("tp_full", "m", "c", "tp_full", 2, 6) + run("sp_full", "m", "c", "sp_full", 2, 6) +
         run("sp_keep", "m", "c", "sp_keep", 2, 6) +
         run("sp_keep_full", "m", "c", "sp_keep_full", 2, 6);
}

/// Per layer unit: the tensor-parallel collectives of each kind in each phase.
std::map<std::pair<OpKind, Phase>, int> layerCollectives(const plan::StepPlan &plan, int unit) {
  std::map<std::pair<OpKind, Phase>, int> result;
  for (const plan::StagePlan &stage : plan.stages)
    for (const auto *ops : {&stage.forward, &stage.backward})
      for (const plan::Op &op : *ops)
        // Tensor-parallel traffic moves activations; gradient reductions are counted apart.
        if (op.unit == unit && plan::isCollective(op.kind) && op.state == ir::State::Activations) {
          EXPECT_EQ(op.elements, 2 * 512 * 1024); // b·s·h
          EXPECT_TRUE(op.perMicrobatch);
          ++result[{op.kind, op.phase}];
        }
  return result;
}

TEST(AnalysisTensorParallel, AllReducesPerLayer) {
  Session session(tensorProgram());
  ASSERT_SESSION(session);
  for (auto [name, backward] : {std::pair{"tp", 2}, std::pair{"tp_full", 4}}) {
    SCOPED_TRACE(name);
    const plan::StepPlan &plan = *session.get(name)->plan;
    for (unsigned u = 0; u < plan.units.size(); ++u) {
      if (plan.units[u].layer < 0 || plan.units[u].layer >= 4)
        continue;
      auto counts = layerCollectives(plan, static_cast<int>(u));
      EXPECT_EQ((counts[{OpKind::AllReduce, Phase::Forward}]), 2);
      EXPECT_EQ((counts[{OpKind::AllReduce, Phase::Backward}]), backward);
      EXPECT_EQ(counts.size(), 2u);
    }
  }
}

TEST(AnalysisTensorParallel, SequenceParallelVolume) {
  // Korthikanti et al. 2022, §4.2.2: each all-reduce of tensor parallelism becomes an all-gather
  // and a reduce-scatter (the same bytes), and a column-parallel product that stores its input's
  // sequence shard gathers it again in the backward ("an extra all-gather in the backward
  // pass"): QKV's and the MLP's per layer, the output layer's in the head. Under sp_inputs = keep
  // it keeps the gathered input and gathers nothing more.
  Session session(tensorProgram());
  ASSERT_SESSION(session);
  struct Case {
    const char *tp, *sp;
    bool full, regather;
  };
  for (Case c :
       {Case{"tp", "sp", false, true}, Case{"tp_full", "sp_full", true, true},
        Case{"tp", "sp_keep", false, false}, Case{"tp_full", "sp_keep_full", true, false}}) {
    SCOPED_TRACE(c.sp);
    const plan::StepPlan &plan = *session.get(c.sp)->plan;
    EXPECT_EQ(plan.regather, c.regather);
    // The backward's own pair of each block, the recomputed forward's under full recomputation,
    // and the second gathers.
    int pairs = c.full ? 4 : 2, again = c.regather ? 2 : 0;
    for (unsigned u = 0; u < plan.units.size(); ++u) {
      if (plan.units[u].layer < 0 || plan.units[u].layer >= 4)
        continue;
      auto counts = layerCollectives(plan, static_cast<int>(u));
      EXPECT_EQ((counts[{OpKind::AllGather, Phase::Forward}]), 2);
      EXPECT_EQ((counts[{OpKind::ReduceScatter, Phase::Forward}]), 2);
      EXPECT_EQ((counts[{OpKind::AllGather, Phase::Backward}]), pairs + again);
      EXPECT_EQ((counts[{OpKind::ReduceScatter, Phase::Backward}]), pairs);
      EXPECT_EQ(counts.size(), 4u);
    }
    // The whole step, embedding and head included. The embedding's forward all-reduce becomes a
    // reduce-scatter (and an all-gather in its backward), the head's backward all-reduce a
    // reduce-scatter (and an all-gather of its input in its forward): the same bytes on the wire
    // per device in every phase (full recomputation repeats the layers' forward, not the
    // head's), but for the second gathers of the backward, (t − 1)/t · 2·b·s·h bytes each, 2L + 1
    // per micro-batch.
    auto activationBytes = [&](const char *name, Phase phase) {
      return sumEntries(
          session.get(name)->analysis,
          [phase](const CommEntry &entry) {
            return entry.state == ir::State::Activations && entry.phase == phase;
          },
          &CommEntry::sentBytes);
    };
    const double m = 3, message = 2 * 512 * 1024 * 2, ring = 7.0 / 8, layers = 4;
    double regathered = c.regather ? m * (2 * layers + 1) * ring * message : 0;
    EXPECT_REL(activationBytes(c.sp, Phase::Forward), activationBytes(c.tp, Phase::Forward),
               kExact);
    EXPECT_REL(activationBytes(c.sp, Phase::Backward),
               activationBytes(c.tp, Phase::Backward) + regathered, kExact);
    // Per all-reduce of b·s·h: 2(t − 1)/t · 2·b·s·h bytes; 4L + 2 all-reduces per micro-batch
    // (two per layer each way, the embedding's forward, the head's backward), 6L + 2 under full
    // recomputation.
    // Plus, in each forward, the vocabulary-parallel cross-entropy's all-gather of 3 values per
    // token from each of the 8 ranks: 3·b·s·8·2 bytes (a recomputed head reuses them).
    double reductions = c.full ? 6 * layers + 2 : 4 * layers + 2;
    const double crossEntropy = 3 * 2 * 512 * 8 * 2;
    EXPECT_REL(activationBytes(c.tp, Phase::Forward) + activationBytes(c.tp, Phase::Backward),
               m * reductions * 2 * ring * message + m * ring * crossEntropy, kExact);
  }
}

// Under sequence parallelism the norms and row-parallel biases of a layer see only a slice of
// the sequence on each tensor-parallel rank, so gradient integrity needs their gradients summed
// over the tensor axis: per GPT layer ln1 and ln2 (weight and bias, 4h) and the two row-parallel
// biases (2h), 6h elements; the head's final norm 2h. Without sequence parallelism each rank sees
// the whole sequence and no such reduction exists.
TEST(AnalysisTensorParallel, SequenceParallelReducesReplicatedGradients) {
  Session session(tensorProgram());
  ASSERT_SESSION(session);
  const int64_t h = 1024;
  for (const char *name : {"tp", "sp"}) {
    SCOPED_TRACE(name);
    bool sp = std::string(name) == "sp";
    const plan::StepPlan &plan = *session.get(name)->plan;
    const ir::Mesh &mesh = plan.run->strategy->mesh;
    for (unsigned u = 0; u < plan.units.size(); ++u) {
      int reductions = 0;
      for (const plan::StagePlan &stage : plan.stages)
        for (const plan::Op &op : stage.backward) {
          if (op.unit != static_cast<int>(u) || op.kind != OpKind::AllReduce ||
              op.state != ir::State::Grads)
            continue;
          ++reductions;
          ASSERT_EQ(op.axes.size(), 1u);
          EXPECT_EQ(mesh.axes[op.axes[0]].kind, ir::AxisKind::Tensor);
          EXPECT_TRUE(op.perMicrobatch);
          int layer = plan.units[u].layer;
          EXPECT_EQ(op.elements, layer < 4 ? 6 * h : 2 * h) << plan.units[u].name;
        }
      bool expected = sp && plan.units[u].layer >= 0;
      EXPECT_EQ(reductions, expected ? 1 : 0) << plan.units[u].name;
    }
  }
}

TEST(AnalysisTensorParallel, ParameterSplit) {
  // Tensor parallelism divides every split tensor; ZeRO's bytes per parameter apply to what is
  // left per device.
  Session session(tensorProgram());
  ASSERT_SESSION(session);
  const Session::Result &result = *session.get("tp");
  int64_t split = 0, replicated = 0;
  for (const ir::Tensor &tensor : result.plan->run->model->tensors)
    (tensor.split == ir::TensorSplit::Replicated ? replicated : split) += tensor.numElements;
  double perDevice = static_cast<double>(split) / 8 + static_cast<double>(replicated);
  EXPECT_REL(result.analysis.memory.device.getPersistent(), 16 * perDevice, kExact);
}

//===----------------------------------------------------------------------===//
// 8. ZeRO-Offload (Ren et al. 2021)
//===----------------------------------------------------------------------===//

TEST(AnalysisParamGather, CopyOutCopiesEveryGatheredParameter) {
  // param_gather = copy_out (FSDP2): each all-gather of the parameters is followed by a copy of
  // the gathered bytes out of its buffer, read and written once on the compute stream. ZeRO-3 on
  // 8 H100s without recomputation gathers every unit before its forward and again before its
  // backward (untied embeddings): 2 gathers of P bf16 parameters per micro-batch, 4 micro-batches
  // per step. P for a Llama-shaped model: the embedding and the head (v·h each), the final norm
  // (h) and per layer Q and the output (2·h·h), K and V (2·h·kv·d), swiglu (3·h·f) and two norms.
  const double h = 1024, kv = 4, d = 64, f = 2816, v = 32000, layers = 8;
  const double layer = 2 * h * h + 2 * h * kv * d + 3 * h * f + 2 * h;
  const double P = 2 * v * h + h + layers * layer;
  std::string model = R"(
model llama_small : transformer {
  layers = 8; hidden = 1024; heads = 16; kv_heads = 4; ffn = 2816; seq = 2048; vocab = 32000;
  mlp = swiglu; norm = rmsnorm; bias = false; positions = rope; tied_embeddings = false;
}
cluster h100x8 { device = h100_sxm; nodes = 1; devices_per_node = 8; }
)";
  std::string runs;
  for (const char *gather : {"in_place", "copy_out"})
    runs += std::string("run r_") + gather +
            " { model = llama_small; cluster = h100x8; strategy = zero3(dp = 8); micro_batch = 1;"
            " global_batch = 32; precision = mixed(bf16, params = fp32); param_gather = " +
            gather + "; }\n";
  Session session(model + runs);
  ASSERT_SESSION(session);
  const auto *inPlace = session.get("in_place"), *copyOut = session.get("copy_out");
  ASSERT_TRUE(inPlace && copyOut);
  // One byte's time over the H100's HBM, from the same cost model (docs/plan.md, "Compute").
  const ir::Run &run = *copyOut->plan->run;
  cost::CostModel costModel(*run.cluster, run.precision);
  double perByte = costModel.getMemorySeconds(1);
  double copies = 4 * 2 * (2 * P * 2) * perByte; // micro-batches × gathers × read and written
  EXPECT_REL(copyOut->analysis.time.computeSeconds - inPlace->analysis.time.computeSeconds, copies,
             1e-9);
  EXPECT_REL(costModel.getGatherCopySeconds(P * 2), 2 * P * 2 * perByte, kExact);
  // The gathers themselves and the memory are the same.
  EXPECT_EQ(copyOut->analysis.memory.device.peak, inPlace->analysis.memory.device.peak);
  EXPECT_GT(copyOut->analysis.time.stepSeconds, inPlace->analysis.time.stepSeconds);
}

TEST(AnalysisOffload, HostLinkTraffic) {
  // ZeRO-Offload moves at least 4Ψ bytes per step over the host link, 2Ψ of fp16 gradients down
  // and 2Ψ of fp16 parameters up, and keeps the 2Ψ of fp16 parameters on the device.
  const double psi = 1e9;
  std::string text = "model m { params = 1B; }\n";
  for (int64_t n : {1, 4, 16}) {
    std::string ns = std::to_string(n);
    text += clusterOf("c" + ns, n);
    text += "strategy zo" + ns + " = zero2(dp = " + ns + ") * offload_optimizer;\n";
    text += "strategy do" + ns + " = dp(" + ns + ") * offload_optimizer;\n";
    text += run("zero2_" + ns, "m", "c" + ns, "zo" + ns, 1, n, "mixed(fp16)");
    text += run("dp_" + ns, "m", "c" + ns, "do" + ns, 1, n, "mixed(fp16)");
  }
  Session session(text);
  ASSERT_SESSION(session);
  auto hostBytes = [](const RunAnalysis &analysis, OpKind kind) {
    return sumEntries(
        analysis,
        [kind](const CommEntry &entry) {
          return entry.link == LinkClass::Host && entry.collective == kind;
        },
        &CommEntry::sentBytes);
  };
  for (int64_t n : {1, 4, 16}) {
    double nd = static_cast<double>(n);
    SCOPED_TRACE(n);
    // ZeRO-2 with the optimizer on the host: each device moves its 1/N shard each way; all
    // devices together 4Ψ, exactly the bound.
    const RunAnalysis &zero2 = session.get("zero2_" + std::to_string(n))->analysis;
    EXPECT_REL(hostBytes(zero2, OpKind::DeviceToHost), 2 * psi / nd, kExact);
    EXPECT_REL(hostBytes(zero2, OpKind::HostToDevice), 2 * psi / nd, kExact);
    EXPECT_REL(
        nd * (hostBytes(zero2, OpKind::DeviceToHost) + hostBytes(zero2, OpKind::HostToDevice)),
        4 * psi, kExact);
    EXPECT_REL(zero2.memory.device.params, 2 * psi, kExact);
    EXPECT_EQ(zero2.memory.device.grads, 0);
    EXPECT_EQ(zero2.memory.device.optimizer, 0);
    EXPECT_REL(zero2.memory.host.grads, 2 * psi / nd, kExact);
    EXPECT_REL(zero2.memory.host.optimizer, 12 * psi / nd, kExact);
    const CommEntry *down =
        findEntry(zero2, OpKind::DeviceToHost, ir::State::Grads, Phase::Backward);
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->axis, "host");

    // Replicated gradients are all-reduced on the device first, then the whole reduced
    // gradient goes down once per step: 2Ψ each way per device, more than 4Ψ in all.
    const RunAnalysis &dp = session.get("dp_" + std::to_string(n))->analysis;
    EXPECT_REL(hostBytes(dp, OpKind::DeviceToHost), 2 * psi, kExact);
    EXPECT_REL(hostBytes(dp, OpKind::HostToDevice), 2 * psi, kExact);
    EXPECT_GE(nd * (hostBytes(dp, OpKind::DeviceToHost) + hostBytes(dp, OpKind::HostToDevice)),
              4 * psi);
    EXPECT_NE(findEntry(dp, OpKind::DeviceToHost, ir::State::Grads, Phase::Step), nullptr);
    EXPECT_REL(dp.memory.device.params + dp.memory.device.grads, 4 * psi, kExact);
    EXPECT_EQ(dp.memory.device.optimizer, 0);
  }
}

// A mixture of experts whose first layers keep a dense MLP (DeepSeek-V3's dense_layers): its
// dense and MoE layers are timed each by their own work. Three models of 8 layers, the first 1, 2
// and 3 of them dense, on one device: each dense layer more replaces an MoE layer, so the compute
// grows by the same amount twice, the difference between the two layers' times, which is not
// zero (a dense MLP of 8192 against two routed experts of 512 per token).
TEST(AnalysisMoe, DenseAndMoeLayersAreTimedApart) {
  std::string text = "cluster one { device = h100_sxm; nodes = 1; devices_per_node = 1; }\n";
  for (int dense : {1, 2, 3})
    text += fmt::format(
        "model m{0} : transformer {{ layers = 8; hidden = 2048; heads = 16; seq = 2048; "
        "vocab = 32000; mlp = swiglu; bias = false; norm = rmsnorm; positions = rope; "
        "tied_embeddings = false; ffn = 8192; experts = 16; top_k = 2; expert_ffn = 512; "
        "dense_layers = {0}; }}\n"
        "run r_dense{0} {{ model = m{0}; cluster = one; strategy = dp(1); micro_batch = 1; "
        "global_batch = 1; }}\n",
        dense);
  Session session(text);
  ASSERT_SESSION(session);
  double compute[3];
  for (int dense : {1, 2, 3})
    compute[dense - 1] = session.get("dense" + std::to_string(dense))->analysis.time.computeSeconds;
  double step = compute[1] - compute[0];
  EXPECT_GT(step, 0.05 * compute[0]);
  EXPECT_REL(compute[2] - compute[1], step, 1e-9);
}

} // namespace
