// Unit tests for the StepPlan: the order of the ops each placement mode lowers to, the stage
// assignment of pipelines, and that every pipeline send has its matching receive.
#include "TestSupport.h"
#include "placec/frontend/Frontend.h"
#include "placec/passes/Analysis.h"
#include "placec/passes/Passes.h"
#include "placec/passes/StepPlan.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace placec;
using plan::OpKind;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

using unittest::Compiled;

std::unique_ptr<Compiled> compile(const std::string &text) {
  return unittest::compile(text, "plan-test.place");
}

const char *const kCluster = R"(
cluster node8 {
  nodes = 1; devices_per_node = 8; device_memory = 80 GiB; peak = 312 TFLOPS;
  intra_bandwidth = 300 GB/s; inter_bandwidth = 25 GB/s; host_bandwidth = 25 GB/s;
}
cluster pod64 {
  nodes = 8; devices_per_node = 8; device_memory = 80 GiB; peak = 312 TFLOPS;
  intra_bandwidth = 300 GB/s; inter_bandwidth = 25 GB/s; host_bandwidth = 25 GB/s;
}
model gpt : transformer { layers = 8; hidden = 512; heads = 8; seq = 256; vocab = 1024;
                          attention = materialized; }
model big { params = 1B; }
)";

/// A plan of the run `name` in `program` (the cluster and models above are declared).
class PlanFixture {
public:
  explicit PlanFixture(const std::string &text, const std::string &name = "r")
      : compiled(compile(std::string(kCluster) + text)) {
    if (!compiled->program)
      return;
    const ir::Run *run = compiled->program->findRun(name);
    if (run)
      plan = plan::lowerRun(*run);
  }
  std::unique_ptr<Compiled> compiled;
  std::unique_ptr<plan::StepPlan> plan;
};

#define ASSERT_PLAN(fixture) ASSERT_TRUE((fixture).plan) << (fixture).compiled->messages

/// The kinds of `ops`, in order, optionally only those of one unit.
std::vector<OpKind> kinds(const std::vector<plan::Op> &ops, int unit = -2) {
  std::vector<OpKind> result;
  for (const plan::Op &op : ops)
    if (unit == -2 || op.unit == unit)
      result.push_back(op.kind);
  return result;
}

std::string print(const plan::StepPlan &plan) {
  std::string text;
  llvm::raw_string_ostream os(text);
  plan::printPlan(plan, os);
  return text;
}

int findUnit(const plan::StepPlan &plan, const std::string &name) {
  for (size_t i = 0; i < plan.units.size(); ++i)
    if (plan.units[i].name == name)
      return static_cast<int>(i);
  return -1;
}

/// The index of mesh axis `name` of the plan's strategy.
unsigned axisIndex(const plan::StepPlan &plan, const std::string &name) {
  int index = plan.run->strategy->mesh.findAxis(name);
  EXPECT_GE(index, 0) << name;
  return static_cast<unsigned>(index);
}

std::string runText(const std::string &model, const std::string &cluster,
                    const std::string &strategy, int64_t microBatch, int64_t globalBatch,
                    const std::string &precision = "mixed(bf16)") {
  return "run r { model = " + model + "; cluster = " + cluster + "; strategy = " + strategy +
         "; micro_batch = " + std::to_string(microBatch) +
         "; global_batch = " + std::to_string(globalBatch) + "; precision = " + precision +
         "; optimizer = adam; }\n";
}

bool isLayerUnit(const plan::StepPlan &plan, int unit) {
  int layer = plan.units[unit].layer;
  return layer >= 0 && layer < plan.run->model->getNumLayers();
}

using Kinds = std::vector<OpKind>;
constexpr OpKind AG = OpKind::AllGather, RS = OpKind::ReduceScatter, AR = OpKind::AllReduce,
                 C = OpKind::Compute, F = OpKind::Free, U = OpKind::OptimizerUpdate,
                 H2D = OpKind::HostToDevice, D2H = OpKind::DeviceToHost;

//===----------------------------------------------------------------------===//
// Placement modes
//===----------------------------------------------------------------------===//

TEST(Plan, Zero3GathersAroundEachUse) {
  PlanFixture f(runText("gpt", "node8", "zero3(dp = 8)", 1, 16));
  ASSERT_PLAN(f);
  const plan::StepPlan &plan = *f.plan;
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_EQ(plan.microbatches, 2);
  const plan::StagePlan &stage = plan.stages[0];
  unsigned dp = axisIndex(plan, "dp");
  int layers = 0;
  for (unsigned u : stage.units) {
    int unit = static_cast<int>(u);
    EXPECT_EQ(kinds(stage.step, unit), (Kinds{U}));
    if (!isLayerUnit(plan, unit))
      continue;
    ++layers;
    SCOPED_TRACE(plan.units[u].name);
    EXPECT_EQ(kinds(stage.forward, unit), (Kinds{AG, C, F}));
    EXPECT_EQ(kinds(stage.backward, unit), (Kinds{AG, C, F, RS}));
    for (const auto *ops : {&stage.forward, &stage.backward})
      for (const plan::Op &op : *ops) {
        if (op.unit != unit)
          continue;
        EXPECT_TRUE(op.perMicrobatch);
        if (op.kind == C)
          continue;
        // The whole unit is gathered, freed and reduce-scattered.
        EXPECT_EQ(op.elements, plan.units[u].params);
        EXPECT_EQ(op.axes, op.kind == F ? plan::AxisList{} : plan::AxisList{dp});
        EXPECT_EQ(op.state, op.kind == RS ? ir::State::Grads : ir::State::Params);
        EXPECT_EQ(op.dtype, plan::DType::BF16);
      }
    for (const plan::Op &op : stage.step) {
      EXPECT_FALSE(op.perMicrobatch);
      EXPECT_EQ(op.phase, plan::Phase::Step);
      if (op.unit == unit) {
        EXPECT_EQ(op.elements, (plan.units[u].params + 7) / 8);
      }
    }
  }
  EXPECT_EQ(layers, 8);
  // Units in model order: embeddings, the layers, the head; the backward in reverse.
  ASSERT_EQ(stage.units.size(), 10u);
  EXPECT_EQ(plan.units[stage.units.front()].name, "embed");
  EXPECT_EQ(plan.units[stage.units.back()].name, "head");
  for (int l = 0; l < 8; ++l)
    EXPECT_EQ(plan.units[stage.units[l + 1]].name, "layer." + std::to_string(l));
  std::vector<int> backwardUnits;
  for (const plan::Op &op : stage.backward)
    if (op.kind == C)
      backwardUnits.push_back(op.unit);
  EXPECT_EQ(backwardUnits, std::vector<int>(stage.units.rbegin(), stage.units.rend()));
}

TEST(Plan, Zero3TiedEmbeddingStaysGatheredForTheHead) {
  // GPT's output layer is the embedding matrix: it stays gathered from the embedding's forward
  // through the head's, and is gathered with the head for the backward. Each unit is still
  // gathered exactly once per direction.
  PlanFixture f(runText("gpt", "node8", "zero3(dp = 8)", 1, 8));
  ASSERT_PLAN(f);
  const plan::StepPlan &plan = *f.plan;
  const plan::StagePlan &stage = plan.stages[0];
  int embed = findUnit(plan, "embed"), head = findUnit(plan, "head");
  std::vector<std::pair<OpKind, int>> forward, backward;
  for (const plan::Op &op : stage.forward)
    if (op.unit == embed || op.unit == head)
      forward.push_back({op.kind, op.unit});
  for (const plan::Op &op : stage.backward)
    if (op.unit == embed || op.unit == head)
      backward.push_back({op.kind, op.unit});
  EXPECT_EQ(forward, (std::vector<std::pair<OpKind, int>>{
                         {AG, embed}, {C, embed}, {AG, head}, {C, head}, {F, head}, {F, embed}}));
  EXPECT_EQ(backward, (std::vector<std::pair<OpKind, int>>{{AG, head},
                                                           {AG, embed},
                                                           {C, head},
                                                           {F, head},
                                                           {RS, head},
                                                           {C, embed},
                                                           {F, embed},
                                                           {RS, embed}}));
  // The embedding's Free in the forward comes after the head's compute.
  size_t headCompute = 0, embedFree = 0;
  for (size_t i = 0; i < stage.forward.size(); ++i) {
    if (stage.forward[i].kind == C && stage.forward[i].unit == head)
      headCompute = i;
    if (stage.forward[i].kind == F && stage.forward[i].unit == embed)
      embedFree = i;
  }
  EXPECT_LT(headCompute, embedFree);

  // Untied: the embedding and head follow the per-unit pattern.
  PlanFixture untied(
      "model gpt_untied : transformer { layers = 2; hidden = 512; heads = 8; seq = 256; "
      "vocab = 1024; tied_embeddings = false; }\n" +
      runText("gpt_untied", "node8", "zero3(dp = 8)", 1, 8));
  ASSERT_PLAN(untied);
  const plan::StagePlan &untiedStage = untied.plan->stages[0];
  for (unsigned u : untiedStage.units) {
    SCOPED_TRACE(untied.plan->units[u].name);
    EXPECT_EQ(kinds(untiedStage.forward, static_cast<int>(u)), (Kinds{AG, C, F}));
    EXPECT_EQ(kinds(untiedStage.backward, static_cast<int>(u)), (Kinds{AG, C, F, RS}));
  }
}

TEST(Plan, KeepAfterForwardSkipsTheSecondGather) {
  PlanFixture f("strategy s { mesh [dp = 8]; params = gather(dp, keep_after_forward = true); "
                "grads = shard(dp); optimizer = shard(dp); }\n" +
                runText("gpt", "node8", "s", 1, 8));
  ASSERT_PLAN(f);
  const plan::StagePlan &stage = f.plan->stages[0];
  for (unsigned u : stage.units) {
    SCOPED_TRACE(f.plan->units[u].name);
    EXPECT_EQ(kinds(stage.forward, static_cast<int>(u)), (Kinds{AG, C}));
    EXPECT_EQ(kinds(stage.backward, static_cast<int>(u)), (Kinds{C, F, RS}));
  }
}

TEST(Plan, Zero1ReducesAtTheStepAndGathersUpdatedParams) {
  PlanFixture f(runText("gpt", "node8", "zero1(dp = 8)", 1, 16));
  ASSERT_PLAN(f);
  const plan::StepPlan &plan = *f.plan;
  const plan::StagePlan &stage = plan.stages[0];
  unsigned dp = axisIndex(plan, "dp");
  for (unsigned u : stage.units) {
    int unit = static_cast<int>(u);
    SCOPED_TRACE(plan.units[u].name);
    EXPECT_EQ(kinds(stage.forward, unit), (Kinds{C}));
    EXPECT_EQ(kinds(stage.backward, unit), (Kinds{C}));
    EXPECT_EQ(kinds(stage.step, unit), (Kinds{RS, U, AG}));
    int64_t params = plan.units[u].params;
    for (const plan::Op &op : stage.step) {
      if (op.unit != unit)
        continue;
      EXPECT_FALSE(op.perMicrobatch);
      if (op.kind == U) {
        EXPECT_EQ(op.elements, (params + 7) / 8);
        EXPECT_EQ(op.dtype, plan::DType::FP32);
        continue;
      }
      EXPECT_EQ(op.axes, plan::AxisList{dp});
      EXPECT_EQ(op.elements, params);
      EXPECT_EQ(op.state, op.kind == RS ? ir::State::Grads : ir::State::Params);
    }
  }
}

TEST(Plan, Zero2ReduceScattersEveryMicrobatch) {
  PlanFixture f(runText("gpt", "node8", "zero2(dp = 8)", 1, 16));
  ASSERT_PLAN(f);
  const plan::StagePlan &stage = f.plan->stages[0];
  for (unsigned u : stage.units) {
    SCOPED_TRACE(f.plan->units[u].name);
    EXPECT_EQ(kinds(stage.forward, static_cast<int>(u)), (Kinds{C}));
    EXPECT_EQ(kinds(stage.backward, static_cast<int>(u)), (Kinds{C, RS}));
    EXPECT_EQ(kinds(stage.step, static_cast<int>(u)), (Kinds{U, AG}));
  }
}

TEST(Plan, DataParallelAllReducesAtTheStep) {
  PlanFixture f(runText("gpt", "node8", "dp(8)", 2, 64));
  ASSERT_PLAN(f);
  const plan::StepPlan &plan = *f.plan;
  EXPECT_EQ(plan.microbatches, 4);
  const plan::StagePlan &stage = plan.stages[0];
  for (unsigned u : stage.units) {
    int unit = static_cast<int>(u);
    SCOPED_TRACE(plan.units[u].name);
    EXPECT_EQ(kinds(stage.forward, unit), (Kinds{C}));
    EXPECT_EQ(kinds(stage.backward, unit), (Kinds{C}));
    EXPECT_EQ(kinds(stage.step, unit), (Kinds{AR, U}));
    EXPECT_EQ(stage.step[2 * u].elements, plan.units[u].params);
    EXPECT_EQ(stage.step[2 * u].state, ir::State::Grads);
    EXPECT_EQ(stage.step[2 * u + 1].elements, plan.units[u].params);
  }
}

TEST(Plan, HybridShardingGroups) {
  PlanFixture f(runText("gpt", "pod64", "hsdp(shard = 8, replicate = 8)", 1, 64));
  ASSERT_PLAN(f);
  const plan::StepPlan &plan = *f.plan;
  const plan::StagePlan &stage = plan.stages[0];
  unsigned shard = axisIndex(plan, "dp_shard"), replicate = axisIndex(plan, "dp_replicate");
  for (unsigned u : stage.units) {
    int unit = static_cast<int>(u);
    if (!isLayerUnit(plan, unit))
      continue;
    EXPECT_EQ(kinds(stage.forward, unit), (Kinds{AG, C, F}));
    EXPECT_EQ(kinds(stage.backward, unit), (Kinds{AG, C, F, RS}));
    EXPECT_EQ(kinds(stage.step, unit), (Kinds{AR, U}));
    for (const auto *ops : {&stage.forward, &stage.backward})
      for (const plan::Op &op : *ops)
        if (op.unit == unit && plan::isCollective(op.kind)) {
          EXPECT_EQ(op.axes, plan::AxisList{shard});
        }
    const plan::Op &allReduce = stage.step[2 * u];
    EXPECT_EQ(allReduce.axes, plan::AxisList{replicate});
    EXPECT_EQ(allReduce.elements, (plan.units[u].params + 7) / 8);
  }
}

TEST(Plan, Offload) {
  // ZeRO-Offload: each micro-batch's reduced gradient shard goes to the host, the host updates,
  // the updated shard comes back and is all-gathered.
  PlanFixture zero2("strategy s = zero2(dp = 8) * offload_optimizer;\n" +
                    runText("gpt", "node8", "s", 1, 8));
  ASSERT_PLAN(zero2);
  const plan::StagePlan &stage = zero2.plan->stages[0];
  for (unsigned u : stage.units) {
    int unit = static_cast<int>(u);
    SCOPED_TRACE(zero2.plan->units[u].name);
    EXPECT_EQ(kinds(stage.backward, unit), (Kinds{C, RS, D2H}));
    EXPECT_EQ(kinds(stage.step, unit), (Kinds{U, H2D, AG}));
  }
  // Replicated gradients are all-reduced on the device before they go to the host.
  PlanFixture dp("strategy s = dp(8) * offload_optimizer;\n" + runText("gpt", "node8", "s", 1, 8));
  ASSERT_PLAN(dp);
  const plan::StagePlan &dpStage = dp.plan->stages[0];
  for (unsigned u : dpStage.units) {
    SCOPED_TRACE(dp.plan->units[u].name);
    EXPECT_EQ(kinds(dpStage.backward, static_cast<int>(u)), (Kinds{C}));
    EXPECT_EQ(kinds(dpStage.step, static_cast<int>(u)), (Kinds{AR, D2H, U, H2D}));
  }
  // Offloaded params with ZeRO-3: the shard comes from the host before each gather, and the
  // updated shard goes back.
  PlanFixture params("strategy s = zero3(dp = 8) * offload_params;\n" +
                     runText("gpt", "node8", "s", 1, 8));
  ASSERT_PLAN(params);
  const plan::StepPlan &plan = *params.plan;
  const plan::StagePlan &paramsStage = plan.stages[0];
  for (unsigned u : paramsStage.units) {
    int unit = static_cast<int>(u);
    if (!isLayerUnit(plan, unit))
      continue;
    SCOPED_TRACE(plan.units[u].name);
    EXPECT_EQ(kinds(paramsStage.forward, unit), (Kinds{H2D, AG, C, F}));
    EXPECT_EQ(kinds(paramsStage.backward, unit), (Kinds{H2D, AG, C, F, RS}));
    EXPECT_EQ(kinds(paramsStage.step, unit), (Kinds{U, D2H}));
  }
}

TEST(Plan, Recomputation) {
  PlanFixture full("strategy s = dp(8) * full;\nstrategy full { activations = recompute; }\n" +
                   runText("gpt", "node8", "s", 1, 8));
  ASSERT_PLAN(full);
  const plan::StepPlan &plan = *full.plan;
  const plan::StagePlan &stage = plan.stages[0];
  for (unsigned u : stage.units) {
    int unit = static_cast<int>(u);
    SCOPED_TRACE(plan.units[u].name);
    std::vector<plan::ComputeKind> computes;
    for (const plan::Op &op : stage.backward)
      if (op.unit == unit && op.kind == C)
        computes.push_back(op.compute);
    // Layers recompute their forward before their backward; the embedding's output is the
    // first layer's stored input, and the output layer is not recomputed (Megatron-LM).
    if (!isLayerUnit(plan, unit))
      EXPECT_EQ(computes, std::vector<plan::ComputeKind>{plan::ComputeKind::Backward});
    else
      EXPECT_EQ(computes, (std::vector<plan::ComputeKind>{plan::ComputeKind::Recompute,
                                                          plan::ComputeKind::Backward}));
  }

  PlanFixture selective(
      "strategy s = dp(8) * sel;\nstrategy sel { activations = recompute(selective); }\n" +
      runText("gpt", "node8", "s", 1, 8));
  ASSERT_PLAN(selective);
  const plan::StagePlan &selectiveStage = selective.plan->stages[0];
  double b = 1, s = 256, h = 512;
  for (unsigned u : selectiveStage.units) {
    int unit = static_cast<int>(u);
    int recomputes = 0;
    for (const plan::Op &op : selectiveStage.backward)
      if (op.unit == unit && op.kind == C && op.compute == plan::ComputeKind::Recompute) {
        ++recomputes;
        EXPECT_EQ(op.flops, 4 * b * s * s * h); // QKᵀ and the attention over V
      }
    EXPECT_EQ(recomputes, isLayerUnit(*selective.plan, unit) ? 1 : 0);
  }
}

TEST(Plan, MlpTensorParallelPairs) {
  // A column/row pair of linear layers reduces once after the row layer in the forward and once
  // at the column layer's input in the backward; a recomputed forward repeats the forward's.
  PlanFixture f("model toy : mlp { layers = 4; width = 256; input = 64; output = 16; }\n"
                "strategy s = tp(2) * dp(4) * full;\nstrategy full { activations = recompute; }\n" +
                runText("toy", "node8", "s", 1, 4));
  ASSERT_PLAN(f);
  const plan::StagePlan &stage = f.plan->stages[0];
  for (unsigned u : stage.units) {
    int layer = f.plan->units[u].layer;
    SCOPED_TRACE(layer);
    bool row = layer % 2 == 1;
    EXPECT_EQ(kinds(stage.forward, static_cast<int>(u)), row ? (Kinds{C, AR}) : (Kinds{C}));
    Kinds expectedBackward = row ? Kinds{C, AR, C} : Kinds{C, C, AR};
    EXPECT_EQ(kinds(stage.backward, static_cast<int>(u)), expectedBackward);
  }
}

//===----------------------------------------------------------------------===//
// Pipelines
//===----------------------------------------------------------------------===//

TEST(Plan, PipelineStageAssignment) {
  PlanFixture f("strategy s { mesh [pp = 4, dp = 2]; pipeline = 1f1b(microbatches = 8); }\n" +
                runText("gpt", "node8", "s", 1, 16));
  ASSERT_PLAN(f);
  const plan::StepPlan &plan = *f.plan;
  ASSERT_EQ(plan.stages.size(), 4u);
  EXPECT_EQ(plan.microbatches, 8);
  EXPECT_EQ(plan.schedule, ir::Schedule::OneFOneB);
  EXPECT_EQ(plan.units[findUnit(plan, "embed")].stage, 0);
  EXPECT_EQ(plan.units[findUnit(plan, "head")].stage, 3);
  for (int l = 0; l < 8; ++l)
    EXPECT_EQ(plan.units[findUnit(plan, "layer." + std::to_string(l))].stage, l / 2);
  for (const plan::StagePlan &stage : plan.stages) {
    int layers = 0, previous = -2;
    for (unsigned u : stage.units) {
      EXPECT_EQ(plan.units[u].stage, stage.stage);
      EXPECT_GT(plan.units[u].layer, previous); // model order
      previous = plan.units[u].layer;
      layers += isLayerUnit(plan, static_cast<int>(u));
    }
    EXPECT_EQ(layers, 2);
  }
}

TEST(Plan, InterleavedChunks) {
  for (auto [p, v] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{2, 4}}) {
    SCOPED_TRACE("p = " + std::to_string(p) + ", v = " + std::to_string(v));
    PlanFixture f("strategy s { mesh [pp = " + std::to_string(p) +
                  ", dp = " + std::to_string(8 / p) +
                  "]; pipeline = interleaved(microbatches = 8, chunks = " + std::to_string(v) +
                  "); }\n" + runText("gpt", "node8", "s", 1, 8 * (8 / p)));
    ASSERT_PLAN(f);
    const plan::StepPlan &plan = *f.plan;
    EXPECT_EQ(plan.chunks, v);
    int perChunk = 8 / (p * v);
    // Chunk c holds layers [c·8/(p·v), (c + 1)·8/(p·v)) and runs on stage c mod p.
    for (int l = 0; l < 8; ++l)
      EXPECT_EQ(plan.units[findUnit(plan, "layer." + std::to_string(l))].stage, (l / perChunk) % p)
          << "layer " << l;
    EXPECT_EQ(plan.units[findUnit(plan, "embed")].stage, 0);
    EXPECT_EQ(plan.units[findUnit(plan, "head")].stage, p - 1);
  }
}

/// Every Send on stage s to t has a matching Recv on t from s, in the same phase, with the same
/// elements, in the same order.
void expectSendsPairWithRecvs(const plan::StepPlan &plan, int64_t expectedSends) {
  using Key = std::tuple<int, int, plan::Phase>;
  std::map<Key, std::vector<std::pair<int64_t, int>>> sends, recvs;
  int64_t count = 0;
  for (const plan::StagePlan &stage : plan.stages)
    for (const auto *ops : {&stage.forward, &stage.backward, &stage.step})
      for (const plan::Op &op : *ops) {
        if (op.kind != OpKind::Send && op.kind != OpKind::Recv)
          continue;
        EXPECT_GE(op.peerStage, 0);
        EXPECT_NE(op.peerStage, stage.stage);
        EXPECT_EQ(op.state, ir::State::Activations);
        EXPECT_TRUE(op.perMicrobatch);
        EXPECT_NE(op.phase, plan::Phase::Step);
        if (op.kind == OpKind::Send) {
          sends[{stage.stage, op.peerStage, op.phase}].push_back({op.elements, 0});
          ++count;
        } else {
          recvs[{op.peerStage, stage.stage, op.phase}].push_back({op.elements, 0});
        }
      }
  EXPECT_EQ(sends, recvs);
  EXPECT_EQ(count, expectedSends);
  // Forward activations go to the next stage (wrapping to stage 0 between interleaved chunks),
  // their gradients come back.
  int64_t p = static_cast<int64_t>(plan.stages.size());
  for (const auto &[key, list] : sends) {
    auto [from, to, phase] = key;
    EXPECT_EQ(to, phase == plan::Phase::Forward ? (from + 1) % p : (from + p - 1) % p);
  }
}

TEST(Plan, SendsPairWithRecvs) {
  struct Case {
    std::string mesh, pipeline, extra;
    int64_t p, v;
  };
  for (const Case &c :
       {Case{"pp = 4, dp = 2", "1f1b(microbatches = 4)", "", 4, 1},
        Case{"pp = 8", "gpipe(microbatches = 4)", "", 8, 1},
        Case{"pp = 2, dp = 4", "interleaved(microbatches = 4, chunks = 2)", "", 2, 2},
        Case{"pp = 2, tp = 4", "interleaved(microbatches = 4, chunks = 4)",
             "activations = shard(tp);", 2, 4},
        // 8 layers with the embedding and the loss counted: 10 chunks of one layer, the first
        // holding the embedding alone and the last the output layer alone (Llama 3 405B's
        // layout), whose boundaries send like the others.
        Case{"pp = 2, dp = 4",
             "interleaved(microbatches = 4, chunks = 5, embedding_layer = true, loss_layer = true)",
             "", 2, 5}}) {
    SCOPED_TRACE(c.mesh + " " + c.pipeline);
    int64_t batch = c.mesh == "pp = 4, dp = 2" ? 2 : c.mesh == "pp = 2, dp = 4" ? 4 : 1;
    PlanFixture f("strategy s { mesh [" + c.mesh + "]; pipeline = " + c.pipeline + "; " + c.extra +
                  " }\n" + runText("gpt", "node8", "s", 2, 2 * 4 * batch));
    ASSERT_PLAN(f);
    // One send per chunk boundary each way: p·v − 1 boundaries.
    expectSendsPairWithRecvs(*f.plan, 2 * (c.p * c.v - 1));
    // b·s·h elements, split over tp with sequence parallelism.
    int64_t elements = c.extra.empty() ? 2 * 256 * 512 : 2 * 256 * 512 / 4;
    for (const plan::StagePlan &stage : f.plan->stages)
      for (const plan::Op &op : stage.forward)
        if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
          EXPECT_EQ(op.elements, elements);
        }
  }
}

TEST(Plan, RecvPrecedesTheChunkAndSendFollowsIt) {
  PlanFixture f("strategy s { mesh [pp = 4, dp = 2]; pipeline = 1f1b(microbatches = 4); }\n" +
                runText("gpt", "node8", "s", 1, 8));
  ASSERT_PLAN(f);
  for (const plan::StagePlan &stage : f.plan->stages) {
    SCOPED_TRACE(stage.stage);
    bool first = stage.stage == 0, last = stage.stage == 3;
    // Forward: receive, compute the stage's units, send; backward: the mirror image.
    Kinds forward = kinds(stage.forward), backward = kinds(stage.backward);
    EXPECT_EQ(forward.front(), first ? C : OpKind::Recv);
    EXPECT_EQ(forward.back(), last ? C : OpKind::Send);
    EXPECT_EQ(backward.front(), last ? C : OpKind::Recv);
    EXPECT_EQ(backward.back(), first ? C : OpKind::Send);
  }
}

TEST(Plan, Dtypes) {
  for (auto [precision, dtype] :
       {std::pair{"fp32", plan::DType::FP32}, std::pair{"mixed(fp16)", plan::DType::FP16},
        std::pair{"mixed(bf16)", plan::DType::BF16}}) {
    SCOPED_TRACE(precision);
    PlanFixture f(runText("gpt", "node8", "zero3(dp = 8)", 1, 8, precision));
    ASSERT_PLAN(f);
    EXPECT_EQ(f.plan->paramType, dtype);
    EXPECT_EQ(f.plan->gradType, dtype);
    EXPECT_EQ(f.plan->activationType, dtype);
    for (const plan::Op &op : f.plan->stages[0].backward)
      if (op.kind != C) {
        EXPECT_EQ(op.dtype, dtype);
      }
    for (const plan::Op &op : f.plan->stages[0].step)
      EXPECT_EQ(op.dtype, plan::DType::FP32); // the optimizer's own state
  }
}

// Under sequence parallelism the forward gathers a layer's QKV input and a dense layer's MLP
// input quantized, as Transformer Engine all-gathers them: per-tensor FP8 one byte an element,
// MXFP8 with a one-byte scale per 32 elements, NVFP4 half a byte with a one-byte scale per 16
// (OCP MX v1.0 §5; arXiv:2509.25149 §2). The other forward gathers stay BF16. The backward
// gathers the output gradients of the attention's output projection and of the MLP's second
// product quantized as well (transformer_engine/pytorch/module/base.py, grad_output_preprocess):
// one copy with one scale per tensor, the row-wise and the column-wise copies of the block-scaled
// recipes, the row-wise alone under userbuffers (`async_tp = true`).
TEST(Plan, QuantizedGathersCarryTheirScales) {
  struct Case {
    const char *precision;
    plan::DType dtype;
    double bytes;
    const char *async;
    int64_t gradientCopies;
  };
  for (const Case &c :
       {Case{"mixed(fp8)", plan::DType::FP8, 1.0, "false", 1},
        Case{"mixed(fp8)", plan::DType::FP8, 1.0, "true", 1},
        Case{"mixed(fp8, scaling = mx, saved = fp8)", plan::DType::MXFP8, 33 / 32.0, "false", 2},
        Case{"mixed(fp8, scaling = mx, saved = fp8)", plan::DType::MXFP8, 33 / 32.0, "true", 1},
        Case{"mixed(fp4)", plan::DType::NVFP4, 9 / 16.0, "false", 2}}) {
    SCOPED_TRACE(std::string(c.precision) + ", async_tp = " + c.async);
    PlanFixture f("cluster b200x8 { device = b200; nodes = 1; devices_per_node = 8; }\n"
                  "model gptf : transformer { layers = 8; hidden = 512; heads = 8; seq = 256; "
                  "vocab = 1024; attention = cudnn; }\n"
                  "strategy s { mesh [dp = 4, tp = 2]; activations = shard(tp); async_tp = " +
                  std::string(c.async) + "; }\n" +
                  runText("gptf", "b200x8", "s", 2, 8, c.precision));
    ASSERT_PLAN(f);
    EXPECT_DOUBLE_EQ(plan::getSize(c.dtype), c.bytes);
    // Per layer forward: the QKV input and the MLP input, b·s·h = 2·256·512 elements each.
    int64_t tokens = 2 * 256 * 512;
    int quantized = 0, other = 0;
    for (const plan::Op &op : f.plan->stages[0].forward) {
      if (op.kind != AG || op.state != ir::State::Activations)
        continue;
      if (op.dtype == c.dtype && isLayerUnit(*f.plan, op.unit)) {
        ++quantized;
        EXPECT_EQ(op.elements, tokens);
      } else {
        ++other;
        EXPECT_EQ(op.dtype, plan::DType::BF16);
      }
    }
    EXPECT_EQ(quantized, 2 * 8);
    EXPECT_GT(other, 0); // the output layer's input stays BF16
    // Per layer backward: the two output gradients, and the two inputs again for the weight
    // gradients (one copy each).
    int gradients = 0, regathers = 0;
    for (const plan::Op &op : f.plan->stages[0].backward) {
      if (op.kind != AG || op.state != ir::State::Activations || !isLayerUnit(*f.plan, op.unit))
        continue;
      EXPECT_EQ(op.dtype, c.dtype);
      ++(op.regather ? regathers : gradients);
      EXPECT_EQ(op.elements, (op.regather ? 1 : c.gradientCopies) * tokens);
    }
    EXPECT_EQ(gradients, 2 * 8);
    EXPECT_EQ(regathers, 2 * 8);
    // --explain's total of every row of the communication table is the table's, also where a
    // row mixes types (the layers' quantized gathers beside the embedding's BF16 gradient's).
    analysis::AnalysisOptions options;
    options.explain = true;
    analysis::RunAnalysis analysis = analysis::analyze(*f.plan, options);
    ASSERT_TRUE(analysis.explanation);
    ASSERT_EQ(analysis.explanation->communication.size(), analysis.communication.size());
    bool mixed = false;
    for (size_t i = 0; i < analysis.communication.size(); ++i) {
      const auto &lines = analysis.explanation->communication[i].lines;
      auto total =
          llvm::find_if(lines, [](const cost::Explanation &e) { return e.figure == "total"; });
      ASSERT_NE(total, lines.end());
      EXPECT_NEAR(total->value, analysis.communication[i].totalBytes,
                  1e-9 * analysis.communication[i].totalBytes);
      mixed |= total->formula.find("(bf16)") != std::string::npos &&
               total->formula.find(plan::toString(c.dtype).str()) != std::string::npos;
    }
    EXPECT_TRUE(mixed);
  }
}

// The distributed optimizer all-gathers the updated parameters in their type, in FP8 under
// `gather = fp8`, and NVFP4 parameters (`params = fp4`) as their packed E2M1 values, half a byte
// each (Megatron-Core's packed parameter buffer), after an all-reduce of their blocks' amaxes.
// Only the layers' parameters are quantized: the embedding and the output layer, which
// Megatron-Core runs outside Transformer Engine, are gathered in BF16.
TEST(Plan, ParameterGathersMoveThePackedNvfp4Values) {
  struct Case {
    const char *precision;
    plan::DType dtype;
    double bytes;
  };
  for (const Case &c :
       {Case{"mixed(bf16)", plan::DType::BF16, 2}, Case{"mixed(fp4)", plan::DType::BF16, 2},
        Case{"mixed(fp4, params = fp4)", plan::DType::FP4, 0.5},
        Case{"mixed(fp8, gather = fp8, params = fp8)", plan::DType::FP8, 1}}) {
    SCOPED_TRACE(c.precision);
    PlanFixture f("cluster b200x8 { device = b200; nodes = 1; devices_per_node = 8; }\n"
                  "model gptf : transformer { layers = 8; hidden = 512; heads = 8; seq = 256; "
                  "vocab = 1024; attention = cudnn; }\n" +
                  runText("gptf", "b200x8", "zero1(dp = 8)", 1, 8, c.precision));
    ASSERT_PLAN(f);
    EXPECT_EQ(f.plan->gatherType, c.dtype);
    EXPECT_DOUBLE_EQ(plan::getSize(c.dtype), c.bytes);
    int layers = 0, others = 0, amaxReductions = 0;
    for (const plan::Op &op : f.plan->stages[0].step) {
      if (op.kind == AG && op.state == ir::State::Params) {
        bool layer = isLayerUnit(*f.plan, op.unit);
        ++(layer ? layers : others);
        EXPECT_EQ(op.dtype, layer ? c.dtype : plan::DType::BF16) << f.plan->units[op.unit].name;
      }
      // NVFP4 parameters alone: before the gathers, one all-reduce (max) of the fp32 amaxes of
      // the layers' 16×16 blocks over the optimizer's axis: 8 layers of 12·512² + 13·512 =
      // 3,152,384 parameters, 12,314 blocks each.
      if (op.kind == OpKind::AllReduce && op.state == ir::State::Params) {
        ++amaxReductions;
        EXPECT_EQ(op.dtype, plan::DType::FP32);
        EXPECT_EQ(op.elements, 8 * 12314);
        EXPECT_EQ(op.axes.size(), 1u);
      }
    }
    EXPECT_EQ(layers, 8);
    EXPECT_EQ(others, 2); // the embedding and the head
    EXPECT_EQ(amaxReductions, c.dtype == plan::DType::FP4 ? 1 : 0);
  }
}

// In an MoE layer only the attention's output gradient is gathered quantized: the MLP block's
// gather moves the dispatcher's BF16 rows.
TEST(Plan, MoeLayersGatherTheAttentionGradientQuantized) {
  PlanFixture f("cluster b200x8 { device = b200; nodes = 1; devices_per_node = 8; }\n"
                "model moe : transformer { layers = 4; hidden = 512; heads = 8; seq = 256; "
                "vocab = 1024; attention = cudnn; experts = 8; top_k = 2; }\n"
                "strategy s { mesh [dp = 4, tp = 2]; activations = shard(tp); }\n" +
                runText("moe", "b200x8", "s", 2, 8, "mixed(fp8)"));
  ASSERT_PLAN(f);
  std::map<plan::DType, int> gradients;
  for (const plan::Op &op : f.plan->stages[0].backward)
    if (op.kind == AG && op.state == ir::State::Activations && !op.regather &&
        isLayerUnit(*f.plan, op.unit))
      ++gradients[op.dtype];
  EXPECT_EQ(gradients[plan::DType::FP8], 4);
  EXPECT_EQ(gradients[plan::DType::BF16], 4);
}

TEST(Plan, AbstractModelIsOneUnitPerStage) {
  PlanFixture f(runText("big", "node8", "zero3(dp = 8)", 1, 8));
  ASSERT_PLAN(f);
  ASSERT_EQ(f.plan->units.size(), 1u);
  EXPECT_EQ(f.plan->units[0].name, "model");
  EXPECT_EQ(f.plan->units[0].params, 1000000000);
  const plan::StagePlan &stage = f.plan->stages[0];
  EXPECT_EQ(kinds(stage.forward), (Kinds{AG, C, F}));
  EXPECT_EQ(kinds(stage.backward), (Kinds{AG, C, F, RS}));
  EXPECT_EQ(kinds(stage.step), (Kinds{U}));
}

//===----------------------------------------------------------------------===//
// Context parallelism
//===----------------------------------------------------------------------===//

/// The elements of the first op of `kind` over the mesh axis `axis` in the forward of the first
/// layer, or -1.
int64_t firstExchange(const PlanFixture &f, OpKind kind, const std::string &axis) {
  const plan::StepPlan &plan = *f.plan;
  unsigned index = static_cast<unsigned>(plan.run->strategy->mesh.findAxis(axis));
  for (const plan::Op &op : plan.stages[0].forward)
    if (op.kind == kind && isLayerUnit(plan, op.unit) && op.axes == plan::AxisList{index})
      return op.elements;
  return -1;
}

TEST(Plan, ContextParallelismExchangesTheKeysAndValuesTheAttentionReceives) {
  // b = 2 sequences of s = 256 tokens over cp = 4 context ranks and t = 2 tensor ranks; 8 query
  // heads and 2 key/value heads of d = 512/8 = 64. The all-gather's buffer is K and V of the
  // local b·s/cp tokens over the t-split heads, from every context rank: 2·(b·s/cp)·heads·d/t·cp
  // where the attention receives K and V repeated to every query head (kv_repeat = true, or
  // eager PyTorch), 2·(b·s/cp)·kv_heads·d/t·cp where it receives them grouped.
  const int64_t b = 2, s = 256, cp = 4, t = 2, heads = 8, kvHeads = 2, d = 64;
  auto program = [](const std::string &repeat, const std::string &kernels,
                    const std::string &method) {
    return "model gqa : transformer { layers = 2; hidden = 512; heads = 8; kv_heads = 2; "
           "seq = 256; vocab = 1024; mlp = swiglu; norm = rmsnorm; bias = false; "
           "positions = rope; tied_embeddings = false;" +
           repeat +
           " }\n"
           "strategy s { mesh [cp = 4, tp = 2]; context = " +
           method +
           "; }\n"
           "run r { model = gqa; cluster = node8; strategy = s; micro_batch = 2; "
           "global_batch = 2; precision = mixed(bf16); optimizer = adam;" +
           kernels + " }\n";
  };
  PlanFixture grouped(program("", "", "all_gather"));
  PlanFixture repeated(program(" kv_repeat = true;", "", "all_gather"));
  PlanFixture eager(program("", " kernels = eager;", "all_gather"));
  ASSERT_PLAN(grouped);
  ASSERT_PLAN(repeated);
  ASSERT_PLAN(eager);
  const int64_t local = b * s / cp;
  EXPECT_EQ(firstExchange(grouped, AG, "cp"), 2 * local * kvHeads * d / t * cp);
  EXPECT_EQ(firstExchange(repeated, AG, "cp"), 2 * local * heads * d / t * cp);
  EXPECT_EQ(firstExchange(eager, AG, "cp"), 2 * local * heads * d / t * cp);
  // The ring passes the same block on, one rank's at a time.
  PlanFixture ringGrouped(program("", "", "ring"));
  PlanFixture ringRepeated(program(" kv_repeat = true;", "", "ring"));
  ASSERT_PLAN(ringGrouped);
  ASSERT_PLAN(ringRepeated);
  EXPECT_EQ(firstExchange(ringGrouped, OpKind::RingStep, "cp"), 2 * local * kvHeads * d / t);
  EXPECT_EQ(firstExchange(ringRepeated, OpKind::RingStep, "cp"), 2 * local * heads * d / t);
  // A pass's cp − 1 steps are one op that stands for them all (Op::repeat): forward, the block;
  // backward, the block and its gradients, then the gradients home once. The printed plan, the
  // report's calls and bytes and the generated program still count cp − 1 steps a pass.
  const int64_t block = 2 * local * kvHeads * d / t, layers = 2;
  const plan::StagePlan &stage = ringGrouped.plan->stages[0];
  auto ringSteps = [](const std::vector<plan::Op> &ops) {
    std::vector<std::pair<int64_t, int64_t>> steps;
    for (const plan::Op &op : ops)
      if (op.kind == OpKind::RingStep)
        steps.emplace_back(op.elements, op.repeat);
    return steps;
  };
  using Steps = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(ringSteps(stage.forward), (Steps{{block, cp - 1}, {block, cp - 1}}));
  EXPECT_EQ(ringSteps(stage.backward),
            (Steps{{2 * block, cp - 1}, {block, 1}, {2 * block, cp - 1}, {block, 1}}));
  std::string printed = print(*ringGrouped.plan);
  size_t lines = 0;
  for (size_t at = printed.find("ring-step"); at != std::string::npos;
       at = printed.find("ring-step", at + 1))
    ++lines;
  EXPECT_EQ(lines, static_cast<size_t>(layers * ((cp - 1) + (cp - 1) + 1)));
  analysis::RunAnalysis ringAnalysis = analysis::analyze(*ringGrouped.plan);
  int64_t forwardCalls = 0, backwardCalls = 0;
  double forwardBytes = 0, backwardBytes = 0;
  for (const analysis::CommEntry &entry : ringAnalysis.communication) {
    if (entry.collective != OpKind::RingStep)
      continue;
    (entry.phase == plan::Phase::Forward ? forwardCalls : backwardCalls) += entry.count;
    (entry.phase == plan::Phase::Forward ? forwardBytes : backwardBytes) += entry.totalBytes;
  }
  // One micro-batch of bf16 (2 bytes an element).
  EXPECT_EQ(forwardCalls, layers * (cp - 1));
  EXPECT_EQ(backwardCalls, layers * cp);
  EXPECT_DOUBLE_EQ(forwardBytes, 2.0 * layers * (cp - 1) * block);
  EXPECT_DOUBLE_EQ(backwardBytes, 2.0 * layers * ((cp - 1) * 2 * block + block));
  // Ulysses's all-to-all of Q, K and V: repeated, the 2 key/value heads need not divide among
  // the t·cp = 8 ranks (each gets whole repeated heads), and Q, K and V are heads wide each.
  PlanFixture ulysses(program(" kv_repeat = true;", "", "all_to_all"));
  ASSERT_PLAN(ulysses);
  EXPECT_EQ(firstExchange(ulysses, OpKind::AllToAll, "cp"), local * (heads + 2 * heads) * d / t);
  PlanFixture ulyssesGrouped(program("", "", "all_to_all"));
  EXPECT_FALSE(ulyssesGrouped.plan);
  // With as many key/value heads as query heads there is nothing to repeat.
  PlanFixture multiHead(
      "model mha : transformer { layers = 2; hidden = 512; heads = 8; seq = 256; vocab = 1024; "
      "kv_repeat = true; }\n"
      "strategy s { mesh [cp = 4, tp = 2]; context = all_gather; }\n" +
      runText("mha", "node8", "s", 2, 2));
  ASSERT_PLAN(multiHead);
  EXPECT_EQ(firstExchange(multiHead, AG, "cp"), 2 * local * heads * d / t * cp);
}

TEST(Plan, Printer) {
  PlanFixture f(runText("gpt", "node8", "zero3(dp = 8)", 1, 8));
  ASSERT_PLAN(f);
  std::string text = print(*f.plan);
  for (const char *line :
       {"plan r {", "micro-batches per step: 1", "dtypes: params bf16, grads bf16", "  stage 0 {",
        "units: embed layer.0", "for each micro-batch: forward {",
        "all-gather layer.0 params over dp elements=3152384 bf16",
        "compute backward layer.7 grads flops=", "reduce-scatter layer.0 grads over dp",
        "once per step {", "optimizer-update head optimizer elements=128 fp32"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

} // namespace
