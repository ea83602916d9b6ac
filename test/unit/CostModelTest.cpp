// The cost model's pieces against numbers computed here from the formulas' sources: NCCL's ring
// latency and bus bandwidth, the ring's bytes on the wire, the overlap window, the schedules'
// bubbles (Narayanan et al. 2021, Qi et al. 2024, DeepSeek-AI 2024) and in-flight micro-batches.

#include "placec/passes/CostModel.h"

#include "TestSupport.h"
#include "placec/passes/StepPlan.h"

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <tuple>

using namespace placec;
using namespace placec::cost;

namespace {

/// A cluster of 4 DGX H100 nodes from the h100_sxm preset.
const char *kH100 = R"(
cluster h100 { device = h100_sxm; nodes = 4; devices_per_node = 8; }
)";

TEST(CostModelTest, SentBytesOfRingCollectives) {
  // Ring all-reduce: 2(n − 1)/n of the buffer; all-gather and reduce-scatter (n − 1)/n.
  EXPECT_DOUBLE_EQ(getSentBytes(Collective::AllReduce, 8, 800), 2.0 * 7 / 8 * 800);
  EXPECT_DOUBLE_EQ(getSentBytes(Collective::AllGather, 8, 800), 7.0 / 8 * 800);
  EXPECT_DOUBLE_EQ(getSentBytes(Collective::ReduceScatter, 4, 800), 3.0 / 4 * 800);
  EXPECT_DOUBLE_EQ(getSentBytes(Collective::PointToPoint, 8, 800), 800);
}

TEST(CostModelTest, GroupShapeOnNodes) {
  // Eight ranks of stride 1 fill one node of 8; stride 8 puts each in its own node.
  GroupShape inside = getGroupShape({GroupAxis{1, 8}}, 8);
  EXPECT_EQ(inside.size, 8);
  EXPECT_TRUE(inside.isIntraNode());
  GroupShape across = getGroupShape({GroupAxis{8, 4}}, 8);
  EXPECT_EQ(across.size, 4);
  EXPECT_EQ(across.perNode, 1);
  EXPECT_EQ(across.getNodes(), 4);
  // [dp = 4 (stride 8), tp = 8 (stride 1)]: all 32 ranks, 8 in each of 4 nodes.
  GroupShape both = getGroupShape({GroupAxis{8, 4}, GroupAxis{1, 8}}, 8);
  EXPECT_EQ(both.size, 32);
  EXPECT_EQ(both.perNode, 8);
}

TEST(CostModelTest, PipelineSendsCrossNodesAsRankByRank) {
  // crossesNodes against the definition, rank by rank: some rank r of stage `stage` (the layers
  // axis's coordinate (r / stride) % stages) and its peer r + (peer − stage)·stride lie in
  // different nodes of `perNode` devices. Every mesh of up to 32 devices: the layers axis at
  // every position (stride the product of the axes inside it, stages · stride dividing the
  // devices), every pair of stages; and strides that leave a partial block.
  auto byRank = [](int64_t stride, int64_t stages, int stage, int peer, int64_t devices,
                   int64_t perNode) {
    int64_t offset = (static_cast<int64_t>(peer) - stage) * stride;
    for (int64_t rank = 0; rank < devices; ++rank)
      if ((rank / stride) % stages == stage && rank / perNode != (rank + offset) / perNode)
        return true;
    return false;
  };
  int checked = 0, crossing = 0;
  for (int64_t perNode : {1, 2, 3, 4, 8})
    for (int64_t nodes = 1; nodes <= 4; ++nodes) {
      int64_t devices = perNode * nodes;
      for (int64_t stages = 2; stages <= devices; ++stages)
        for (int64_t stride = 1; stride <= devices; ++stride) {
          if (devices % stride != 0 && stride * stages <= devices)
            continue;
          for (int stage = 0; stage < stages; ++stage)
            for (int peer = 0; peer < stages; ++peer) {
              bool expected = byRank(stride, stages, stage, peer, devices, perNode);
              ASSERT_EQ(crossesNodes(stride, stages, stage, peer, devices, perNode), expected)
                  << "stride " << stride << ", stages " << stages << ", stage " << stage
                  << ", peer " << peer << ", devices " << devices << ", per node " << perNode;
              ++checked;
              crossing += expected;
            }
        }
    }
  // Both answers occur often.
  EXPECT_GT(crossing, checked / 10);
  EXPECT_LT(crossing, checked * 9 / 10);
}

TEST(CostModelTest, NcclRingInsideANode) {
  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  const ir::Cluster &cluster = *compiled->program->findCluster("h100");
  CostModel model(cluster, ir::Precision::MixedBF16);
  // All-gather of 1 GB over the 8 GPUs of a node: NCCL's base latency 8.4 us, 7 NVLink steps of
  // 3.4 us, and 7/8 GB at 450 GB/s × 0.82 (nccl-tests' bus bandwidth on H100).
  double bytes = 1e9;
  double expected = 8.4e-6 + 7 * 3.4e-6 + 7.0 / 8 * bytes / (450e9 * 0.82);
  GroupShape node{8, 8};
  EXPECT_NEAR(model.getCollectiveSeconds(Collective::AllGather, node, bytes), expected,
              1e-9 * expected);
  // The all-reduce takes twice the steps and twice the bytes.
  double reduce = 8.4e-6 + 14 * 3.4e-6 + 2 * 7.0 / 8 * bytes / (450e9 * 0.82);
  EXPECT_NEAR(model.getCollectiveSeconds(Collective::AllReduce, node, bytes), reduce,
              1e-9 * reduce);
}

TEST(CostModelTest, TrainMetricsSynchronizeOverEveryRank) {
  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel model(*compiled->program->findCluster("h100"), ir::Precision::MixedBF16);
  // 16 ranks on 2 nodes of 8, two metrics of two scalar states each (Composer's language
  // metrics). Per state, torchmetrics' gather_all_tensors: a barrier, NCCL's tree all-reduce of
  // one element (8.4 us + 2·(7 NVLink steps × 3.4 us + 1 network step × 9.6 us)); 16 zeros_like
  // on the host at 10.9 us each; the ring all-gather of 16 elements (8.4 us + 14 × 3.4 us + 9.6
  // us = 65.6 us) beside 16 copies issued by the host (174.4 us, the longer); the stack and the
  // sum. The bytes (at most 128) add under a nanosecond.
  double barrier = 8.4e-6 + 2 * (7 * 3.4e-6 + 9.6e-6);
  double host = 10.9e-6;
  double perState = barrier + 16 * host + 16 * host + 2 * host;
  GroupShape world{16, 8};
  EXPECT_NEAR(model.getTrainMetricSyncSeconds(2, world), 4 * perState, 1e-8);
  // One metric synchronizes half as much; one rank or no metric, nothing.
  EXPECT_NEAR(model.getTrainMetricSyncSeconds(1, world), 2 * perState, 1e-8);
  EXPECT_EQ(model.getTrainMetricSyncSeconds(2, GroupShape{1, 8}), 0.0);
  EXPECT_EQ(model.getTrainMetricSyncSeconds(0, world), 0.0);
  // The host's operators grow with the ranks: 1,026 per state on 512 ranks against 34 on 16, so
  // the 512 ranks take more than 20 times as long (the barriers grow slower).
  EXPECT_GT(model.getTrainMetricSyncSeconds(2, GroupShape{512, 8}),
            20 * model.getTrainMetricSyncSeconds(2, world));
}

TEST(CostModelTest, GemmEfficiencyIsEachDevicesMamf) {
  // Bekman, "Machine Learning Engineering", compute/accelerator, the MAMF tables (commit 744d01e):
  // the best matmul TFLOP/s measured on each device, BF16 and FP8 (e4m3). A device's large-GEMM
  // rate, its efficiency times the preset's dense peak, is that measurement within 1 % (the
  // fractions are rounded to three digits; MI300X's preset peak is 1,307.4 where the table
  // divides by 1,300). The H200's BF16 is the H100 SXM's ("H200 is the same"); the A100 40 GB
  // and H100 PCIe have no measurement of their own and take their family's.
  struct Case {
    const char *device;
    double bf16Tflops, fp8Tflops; // 0: the device has no FP8.
  } cases[] = {{"a100_80gb", 271.2, 0},  {"h100_sxm", 794.5, 1402.6}, {"h200", 794.5, 1453.4},
               {"b200", 1745.0, 3432.5}, {"gb200", 1822.0, 3615.6},   {"b300", 1769.0, 3353.3},
               {"mi300x", 668.4, 0}};
  for (const Case &c : cases) {
    const ir::DevicePreset *device = ir::findDevicePreset(c.device);
    ASSERT_NE(device, nullptr) << c.device;
    GemmEfficiency efficiency = getGemmEfficiency(*device);
    double bf16 = efficiency.bf16 * device->peakBf16 / 1e12;
    EXPECT_NEAR(bf16, c.bf16Tflops, 0.01 * c.bf16Tflops) << c.device;
    if (c.fp8Tflops > 0) {
      double fp8 = efficiency.fp8 * device->peakFp8 / 1e12;
      EXPECT_NEAR(fp8, c.fp8Tflops, 0.01 * c.fp8Tflops) << c.device;
    }
  }
  // Without a measurement of its own a device takes its family's reference device's fractions.
  const FamilyConstants &hopper = getFamilyConstants(ir::DeviceFamily::Hopper);
  GemmEfficiency pcie = getGemmEfficiency(*ir::findDevicePreset("h100_pcie"));
  EXPECT_EQ(pcie.bf16, hopper.gemmEfficiency);
  EXPECT_EQ(pcie.fp8, hopper.fp8GemmEfficiency);
  const FamilyConstants &blackwell = getFamilyConstants(ir::DeviceFamily::Blackwell);
  GemmEfficiency gb300 = getGemmEfficiency(*ir::findDevicePreset("gb300"));
  EXPECT_EQ(gb300.bf16, blackwell.gemmEfficiency);
  EXPECT_EQ(gb300.fp8, blackwell.fp8GemmEfficiency);
  // And a product on the GB200 runs at its own measured rate, not the B200's fraction of the
  // GB200's higher peak: 16 waves of 256×128 tiles over 148 SMs at k = 8192 (m = 148·256·4,
  // n = 128·4) take 16·148·256·128·2·(8192 + kGemmTileOverheadK) FLOP at 2,500 TFLOP/s × 0.729 ×
  // kTrainingKernelEfficiency.
  auto compiled =
      unittest::compile("cluster nvl { device = gb200; nodes = 1; devices_per_node = 72; }");
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel model(*compiled->program->findCluster("nvl"), ir::Precision::MixedBF16);
  Gemm gemm;
  gemm.m = 148 * 256 * 4;
  gemm.n = 128 * 4;
  gemm.k = 8192;
  double expected = 16.0 * 148 * 256 * 128 * 2 * (8192 + kGemmTileOverheadK) /
                    (2500e12 * 0.729 * kTrainingKernelEfficiency);
  EXPECT_NEAR(model.getGemmSeconds(gemm), expected, 1e-9 * expected);
}

/// `placec fidelity --fit` times its rows with other values of the two fitted constants through
/// the cluster: every kernel the constants scale takes them, and nothing else changes.
TEST(CostModelTest, FittedConstantsOfTheCluster) {
  auto compiled =
      unittest::compile("cluster nvl { device = gb200; nodes = 1; devices_per_node = 72; }");
  ASSERT_TRUE(compiled->program) << compiled->messages;
  ir::Cluster cluster = *compiled->program->findCluster("nvl");
  cluster.fittedTileOverheadK = 100;
  cluster.fittedKernelEfficiency = 0.5;
  CostModel model(cluster, ir::Precision::MixedBF16);
  EXPECT_EQ(model.getTileOverheadK(), 100);
  EXPECT_EQ(model.getKernelEfficiency(), 0.5);
  // The product of the test above: 16 waves of 256×128 tiles over 148 SMs, k = 8192 + 100, at
  // the GB200's 2,500 TFLOP/s × 0.729 (its MAMF fraction) × 0.5.
  Gemm gemm;
  gemm.m = 148 * 256 * 4;
  gemm.n = 128 * 4;
  gemm.k = 8192;
  double expected = 16.0 * 148 * 256 * 128 * 2 * (8192 + 100) / (2500e12 * 0.729 * 0.5);
  EXPECT_NEAR(model.getGemmSeconds(gemm), expected, 1e-9 * expected);
  // A memory-bound kernel: 1 GB over the GB200's 8 TB/s × Blackwell's memory efficiency × 0.5.
  CostModel plain(*compiled->program->findCluster("nvl"), ir::Precision::MixedBF16);
  EXPECT_NEAR(model.getMemorySeconds(1e9),
              plain.getMemorySeconds(1e9) * kTrainingKernelEfficiency / 0.5, 1e-15);
  // The collectives do not depend on them.
  GroupShape group{8, 8};
  EXPECT_EQ(model.getCollectiveSeconds(Collective::AllReduce, group, 1e9),
            plain.getCollectiveSeconds(Collective::AllReduce, group, 1e9));
}

TEST(CostModelTest, FusedAttentionByKernel) {
  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel model(*compiled->program->findCluster("h100"), ir::Precision::MixedBF16);
  // FlashAttention-3 on H100 has one published point (Shah et al. 2024, Figures 5 and 6: causal,
  // d = 128, 8K: 602 and 559 TFLOP/s, 0.609 and 0.565 of 989.4), used for every shape: 32 heads
  // of 8192 causal queries and keys, 4·32·8192²·128/2 FLOP forward and 2.5 times that backward,
  // at that fraction × the training-kernel factor.
  AttentionCore core;
  core.batchHeads = 32;
  core.queries = core.keys = 8192;
  core.headDim = 128;
  core.kernel = ir::AttentionKind::Flash3;
  double forward = 4.0 * 32 * 8192 * 8192 * 128 / 2;
  double f = forward / (989.4e12 * 0.609 * kTrainingKernelEfficiency);
  EXPECT_NEAR(model.getAttentionSeconds(core), f, 1e-9 * f);
  core.backward = true;
  double b = 2.5 * forward / (989.4e12 * 0.565 * kTrainingKernelEfficiency);
  EXPECT_NEAR(model.getAttentionSeconds(core), b, 1e-9 * b);
  // FlashAttention-2 and cuDNN are timed by shape: against placec's kernel bench on an H100 SXM
  // (bench/gpu/results/h100-2026-11-27/kernels-hold.json; TFLOP/s forward and backward counting
  // the causal half), within 8 % at 8K and 2K keys (d 128) and at 1K keys with d 64, where the
  // one fraction of the peak used before was 6 % to 155 % too fast.
  struct Case {
    ir::AttentionKind kernel;
    double batchHeads, keys, headDim, forwardTflops, backwardTflops;
  } cases[] = {{ir::AttentionKind::Flash, 32, 8192, 128, 307.1, 275.7},
               {ir::AttentionKind::Flash, 256, 2048, 128, 280.0, 216.5},
               {ir::AttentionKind::Flash, 128, 1024, 64, 178.5, 131.5},
               {ir::AttentionKind::Cudnn, 32, 8192, 128, 536.5, 465.5},
               {ir::AttentionKind::Cudnn, 256, 2048, 128, 462.6, 373.6},
               {ir::AttentionKind::Cudnn, 128, 1024, 64, 284.2, 203.0}};
  for (const Case &c : cases) {
    core.kernel = c.kernel;
    core.batchHeads = c.batchHeads;
    core.queries = core.keys = c.keys;
    core.headDim = c.headDim;
    double flops = 4 * c.batchHeads * c.keys * c.keys * c.headDim / 2;
    std::string what = ir::toString(c.kernel).str() + " " + std::to_string(int(c.keys));
    core.backward = false;
    double kernelSeconds = model.getAttentionSeconds(core) * kTrainingKernelEfficiency;
    EXPECT_NEAR(kernelSeconds, flops / (c.forwardTflops * 1e12), 0.08 * kernelSeconds) << what;
    core.backward = true;
    kernelSeconds = model.getAttentionSeconds(core) * kTrainingKernelEfficiency;
    EXPECT_NEAR(kernelSeconds, 2.5 * flops / (c.backwardTflops * 1e12), 0.08 * kernelSeconds)
        << what;
  }
  // Which families run which kernel.
  EXPECT_TRUE(runsAttention(ir::DeviceFamily::Hopper, ir::AttentionKind::Flash3));
  EXPECT_FALSE(runsAttention(ir::DeviceFamily::Ampere, ir::AttentionKind::Flash3));
  EXPECT_FALSE(runsAttention(ir::DeviceFamily::Blackwell, ir::AttentionKind::Flash3));
  EXPECT_TRUE(runsAttention(ir::DeviceFamily::Ampere, ir::AttentionKind::Cudnn));
  EXPECT_FALSE(runsAttention(ir::DeviceFamily::Cdna3, ir::AttentionKind::Cudnn));
  EXPECT_TRUE(runsAttention(ir::DeviceFamily::Cdna3, ir::AttentionKind::Flash));
  EXPECT_FALSE(runsAttention(ir::DeviceFamily::Cdna4, ir::AttentionKind::Cudnn));
  EXPECT_FALSE(runsAttention(ir::DeviceFamily::Cdna4, ir::AttentionKind::Flash3));
  EXPECT_TRUE(runsAttention(ir::DeviceFamily::Cdna4, ir::AttentionKind::Flash));
}

TEST(CostModelTest, NcclRingAcrossNodesIsLimitedByTheNics) {
  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  const ir::Cluster &cluster = *compiled->program->findCluster("h100");
  CostModel model(cluster, ir::Precision::MixedBF16);
  // A reduce-scatter over one GPU of each of the 4 nodes: 3 network steps at the cluster's
  // latency, and 3/4 of the buffer through one NIC at inter_bandwidth × 0.95.
  double bytes = 4e8;
  double expected =
      8.4e-6 + 3 * cluster.latency + 3.0 / 4 * bytes / (cluster.interBandwidth * 0.95);
  EXPECT_NEAR(model.getCollectiveSeconds(Collective::ReduceScatter, GroupShape{4, 1}, bytes),
              expected, 1e-9 * expected);
  // With all 8 GPUs of each node in the group, 8 NICs carry the rings side by side, up to NVLink.
  double bus = std::min(450e9 * 0.82, 8 * cluster.interBandwidth * 0.95);
  double wide = 8.4e-6 + (31 - 3) * 3.4e-6 + 3 * cluster.latency + 31.0 / 32 * bytes / bus;
  EXPECT_NEAR(model.getCollectiveSeconds(Collective::ReduceScatter, GroupShape{32, 8}, bytes), wide,
              1e-9 * wide);
}

// DeepEP's and HybridEP's dispatch by node (DeepSeek-AI 2024, §3.2.2): a token crosses the network
// once to each other node holding one of its experts, and reaches each rank holding one once. The
// expected counts are computed here with Python's math.comb: 8 experts on 2 nodes, top 2:
// 1 − C(4, 2)/C(8, 2) = 22/28; DeepSeek-V3's 256 experts on 4 nodes, top 8:
// 3·(1 − C(192, 8)/C(256, 8)) = 2.71066; on 32 ranks, 32·(1 − C(248, 8)/C(256, 8)) = 7.26680.
TEST(CostModelTest, DispatchByNodeSendsATokenOncePerNode) {
  EXPECT_NEAR(getOtherHoldersPerToken(8, 2, 2), 22.0 / 28, 1e-12);
  EXPECT_NEAR(getOtherHoldersPerToken(256, 8, 4), 2.7106607291748848, 1e-9);
  EXPECT_EQ(getOtherHoldersPerToken(256, 8, 1), 0);
  EXPECT_NEAR(getHoldersReachedPerToken(256, 8, 32), 7.2667999173528806, 1e-9);
  EXPECT_NEAR(getHoldersReachedPerToken(256, 8, 4), 4.0 / 3 * 2.7106607291748848, 1e-9);
  // More experts than a node's share cannot miss it: top 8 of 8 experts on 2 nodes hits both.
  EXPECT_NEAR(getOtherHoldersPerToken(8, 8, 2), 1, 1e-12);
  // DeepSeek-V3's group-limited routing, 4 of 8 groups: on 4 nodes of 2 groups each,
  // 3·(1 − C(6, 4)/C(8, 4)) = 3·55/70; on 8 nodes of one group, 7·(1 − C(7, 4)/C(8, 4)) = 3.5; on
  // 16 nodes a group spans two, and the token's 8 experts are drawn from its groups' 128 over their
  // 8 nodes: 8·(1 − C(112, 8)/C(128, 8)) = 5.33936 reached, 15/16 of them others.
  EXPECT_NEAR(getOtherHoldersPerToken(256, 8, 4, 8, 4), 3.0 * 55 / 70, 1e-12);
  EXPECT_NEAR(getOtherHoldersPerToken(256, 8, 8, 8, 4), 3.5, 1e-12);
  EXPECT_NEAR(getHoldersReachedPerToken(256, 8, 16, 8, 4), 5.339356895383487, 1e-9);
  EXPECT_NEAR(getOtherHoldersPerToken(256, 8, 16, 8, 4), 5.339356895383487 * 15 / 16, 1e-9);
  // A gate that sends each token to one group of 8 consecutive experts (NeMo AutoModel's
  // FakeBalancedGate): Qwen3's 128 experts as 16 groups on 8 ranks, one rank a token; DeepSeek-V3's
  // 256 as 32 groups on 64 ranks, two.
  EXPECT_NEAR(getHoldersReachedPerToken(128, 8, 8, 16, 1), 1, 1e-12);
  EXPECT_NEAR(getHoldersReachedPerToken(256, 8, 64, 32, 1), 2, 1e-12);

  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  const ir::Cluster &cluster = *compiled->program->findCluster("h100");
  CostModel model(cluster, ir::Precision::MixedBF16);
  // 32 ranks on 4 nodes of 8, 1 GB of routed rows (top 8 of 256): over the NIC 2.71066/8 of the
  // buffer at inter_bandwidth × 0.95, over NVLink the 7.26680 ranks a token reaches but the
  // forwarding one's, 7/8 of them, as rows of the buffer's 8, at 450 GB/s × 0.68 (DeepEP's
  // efficiency on Hopper); the slower of the two after the all-to-all's latency (31 steps, 3 of
  // them between nodes).
  double bytes = 1e9;
  GroupShape group{32, 8};
  ir::MoeConfig moe;
  moe.experts = 256;
  moe.topK = 8;
  double latency = 8.4e-6 + 28 * 3.4e-6 + 3 * cluster.latency;
  double outside = 2.7106607291748848 / 8 * bytes / (cluster.interBandwidth * 0.95);
  double inside = 7.2667999173528806 * 7 / 8 / 8 * bytes / (450e9 * 0.68);
  double expected = latency + std::max(outside, inside);
  EXPECT_NEAR(model.getExpertExchangeSeconds(ir::ExpertDispatcher::DeepEP, group, bytes, moe),
              expected, 1e-9 * expected);
  // HybridEP's two stages in sequence: the NVLink forwarding after the network's delivery.
  double staged = latency + outside + inside;
  EXPECT_NEAR(model.getExpertExchangeSeconds(ir::ExpertDispatcher::HybridEP, group, bytes, moe),
              staged, 1e-9 * staged);
  // The all-to-all dispatcher sends each row to its expert's rank: 24/32 of the buffer over the
  // NIC.
  double allToAll = latency + 24.0 / 32 * bytes / (cluster.interBandwidth * 0.95);
  EXPECT_NEAR(model.getExpertExchangeSeconds(ir::ExpertDispatcher::AllToAll, group, bytes, moe),
              allToAll, 1e-9 * allToAll);
  // With group-limited routing the network part is the groups' nodes, 3·55/70 of 8 rows, and the
  // NVLink part the groups' 16 ranks, 16·(1 − C(120, 8)/C(128, 8)) = 6.59651 of them reached.
  ir::MoeConfig grouped = moe;
  grouped.routerGroups = 8;
  grouped.routerGroupTopK = 4;
  double limited = latency + std::max(3.0 * 55 / 70 / 8 * bytes / (cluster.interBandwidth * 0.95),
                                      6.596512811001903 * 7 / 8 / 8 * bytes / (450e9 * 0.68));
  EXPECT_NEAR(model.getExpertExchangeSeconds(ir::ExpertDispatcher::DeepEP, group, bytes, grouped),
              limited, 1e-9 * limited);
  // Inside a node the flex kernels send the 8·(1 − C(224, 8)/C(256, 8)) = 5.29465 ranks a token
  // reaches but its own, 7/8 of them, after NCCL's base latency; the all-to-all all 7/8 of the
  // rows at NCCL's 0.82.
  double intra = 8.4e-6 + 5.294652000382479 * 7 / 8 / 8 * bytes / (450e9 * 0.68);
  EXPECT_NEAR(
      model.getExpertExchangeSeconds(ir::ExpertDispatcher::DeepEP, GroupShape{8, 8}, bytes, moe),
      intra, 1e-9 * intra);
  EXPECT_NEAR(
      model.getExpertExchangeSeconds(ir::ExpertDispatcher::HybridEP, GroupShape{8, 8}, bytes, moe),
      intra, 1e-9 * intra);
  EXPECT_EQ(
      model.getExpertExchangeSeconds(ir::ExpertDispatcher::AllToAll, GroupShape{8, 8}, bytes, moe),
      model.getCollectiveSeconds(Collective::AllToAll, GroupShape{8, 8}, bytes));
}

// A rule's mean relative error against a backend benchmark's measured times, beside another
// rule's: each of placec's within `tolerance`.
struct BenchmarkErrors {
  double tolerance;
  double placec = 0, other = 0;
  int count = 0;
  void add(double predicted, double otherRule, double measured, int64_t ranks) {
    EXPECT_NEAR(predicted, measured, tolerance * measured) << ranks << " ranks";
    placec += std::abs(predicted - measured) / measured;
    other += std::abs(otherRule - measured) / measured;
    ++count;
  }
  double mean() const { return placec / count; }
  double otherMean() const { return other / count; }
};

// The flex dispatchers inside one NVLink domain against their own benchmarks
// (deepseek-ai/DeepEP): 4,096 tokens of hidden 7168 per rank, top 8, 8 experts per rank, uniform
// random routing, BF16. Their "algorithm bandwidth" counts every row a rank receives, its own
// included (tests/test_hybrid_ep.py, dispatched_hidden.numel(); tests/test_intranode.py,
// recv_x.numel()), so a call took those rows' bytes over it. HybridEP through its Torch API at 16
// SMs (hybrid-ep branch at 94a9f8f, docs/README_Hybrid-EP.md): 8 B200s, and 8 to 36 GB200s of one
// NVLink domain. placec's time, from which the efficiency was taken as the rows' average, lies
// within 12 % of each of the twelve; the all-to-all dispatcher's rule (all 8 rows of a token at
// NCCL's bus efficiency) is as close on 8 ranks and falls under as the domain grows.
TEST(CostModelTest, FlexDispatchInsideANodeAgainstItsBenchmarks) {
  const double tokens = 4096, row = 7168 * 2;
  struct Case {
    const char *cluster;
    int64_t ranks;
    double dispatch, combine; // GB/s of the README's tables.
  } cases[] = {
      {"cluster c { device = b200; nodes = 1; devices_per_node = 8; }", 8, 535.94, 530.86},
      {"cluster c { device = gb200; nodes = 1; devices_per_node = 8; }", 8, 550.10, 538.44},
      {"cluster c { device = gb200; nodes = 1; devices_per_node = 16; }", 16, 472.84, 474.48},
      {"cluster c { device = gb200; nodes = 1; devices_per_node = 24; }", 24, 441.89, 444.40},
      {"cluster c { device = gb200; nodes = 1; devices_per_node = 32; }", 32, 485.50, 423.19},
      {"cluster c { device = gb200; nodes = 1; devices_per_node = 36; }", 36, 469.96, 418.27},
  };
  BenchmarkErrors errors{0.12};
  for (const Case &c : cases) {
    auto compiled = unittest::compile(c.cluster);
    ASSERT_TRUE(compiled->program) << compiled->messages;
    CostModel model(*compiled->program->findCluster("c"), ir::Precision::MixedBF16);
    int64_t experts = 8 * c.ranks;
    // The ranks a token reaches: R·(1 − C(E − 8, 8)/C(E, 8)).
    double none = 1;
    for (int i = 0; i < 8; ++i)
      none *= static_cast<double>(experts - 8 - i) / static_cast<double>(experts - i);
    double received = static_cast<double>(c.ranks) * (1 - none) * tokens * row;
    ir::MoeConfig moe;
    moe.experts = experts;
    moe.topK = 8;
    GroupShape group{c.ranks, c.ranks};
    double bytes = tokens * 8 * row;
    double predicted =
        model.getExpertExchangeSeconds(ir::ExpertDispatcher::HybridEP, group, bytes, moe);
    double allToAll = model.getCollectiveSeconds(Collective::AllToAll, group, bytes);
    for (double bandwidth : {c.dispatch, c.combine})
      errors.add(predicted, allToAll, received / (bandwidth * 1e9), c.ranks);
  }
  EXPECT_LT(errors.mean(), 0.06);
  EXPECT_GT(errors.otherMean(), 2 * errors.mean());
  // DeepEP V1 on 8 H800s (docs/legacy.md on main: DeepSeek-V3's routing, top 8 in 4 of 8 groups
  // of 32 experts, one group a rank; FP8 dispatch at 153 GB/s, BF16 combine at 158 GB/s over
  // 200 GB/s of NVLink a direction): a token reaches its 4 groups' ranks.
  auto compiled = unittest::compile(
      "cluster c { device = h100_sxm; nodes = 1; devices_per_node = 8; intra_bandwidth = 200 GB/s; "
      "}");
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel model(*compiled->program->findCluster("c"), ir::Precision::MixedBF16);
  ir::MoeConfig moe;
  moe.experts = 256;
  moe.topK = 8;
  moe.routerGroups = 8;
  moe.routerGroupTopK = 4;
  double bytes = tokens * 8 * row;
  double predicted =
      model.getExpertExchangeSeconds(ir::ExpertDispatcher::DeepEP, GroupShape{8, 8}, bytes, moe);
  double combine = 4 * tokens * row / 158e9;
  EXPECT_NEAR(predicted, combine, 0.05 * combine);
}

// HybridEP across nodes against its own benchmark on H100s (deepseek-ai/DeepEP, hybrid-ep branch,
// docs/README_Hybrid-EP.md, "H100 Platform": 4,096 tokens of hidden 7168 in BF16 per rank, top 8,
// 8 experts per rank, uniform random routing, 16 SMs, through the Torch API). Its "algorithm
// bandwidth" counts each token once per node it reaches, its own included
// (tests/utils.py, count_rdma_send_from_routing_map), so a call took that count's bytes over the
// bandwidth. placec's time, the NVLink stage (the ranks a token reaches in each node but the
// forwarding one, at DeepEP's efficiency on Hopper) after the network's, lies within 17 % of the
// dispatch and the combine on 2, 4 and 8 nodes (9.2 % on average); the slower stage alone,
// DeepEP's rule, is 10 to 41 % under (24.6 %).
TEST(CostModelTest, HybridEpAcrossNodesAgainstItsBenchmark) {
  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel model(*compiled->program->findCluster("h100"), ir::Precision::MixedBF16);
  const double tokens = 4096, hidden = 7168 * 2, topK = 8;
  struct Case {
    int64_t ranks;
    double dispatch, combine; // GB/s of the README's table.
  } cases[] = {{16, 54.47, 53.35}, {32, 47.36, 52.53}, {64, 41.24, 46.57}};
  BenchmarkErrors errors{0.17};
  for (const Case &c : cases) {
    int64_t nodes = c.ranks / 8, experts = 8 * c.ranks;
    // The chance that a node's experts hold none of a token's 8: C(E − E/N, 8)/C(E, 8).
    double none = 1;
    for (int i = 0; i < 8; ++i)
      none *= static_cast<double>(experts - experts / nodes - i) / static_cast<double>(experts - i);
    double counted = static_cast<double>(nodes) * (1 - none) * tokens * hidden;
    ir::MoeConfig moe;
    moe.experts = experts;
    moe.topK = 8;
    double bytes = tokens * topK * hidden;
    GroupShape group{c.ranks, 8};
    double predicted =
        model.getExpertExchangeSeconds(ir::ExpertDispatcher::HybridEP, group, bytes, moe);
    double slower = model.getExpertExchangeSeconds(ir::ExpertDispatcher::DeepEP, group, bytes, moe);
    for (double bandwidth : {c.dispatch, c.combine})
      errors.add(predicted, slower, counted / (bandwidth * 1e9), c.ranks);
  }
  // DeepEP's rule, the slower stage alone, is farther from the six on average.
  EXPECT_LT(errors.mean(), 0.10);
  EXPECT_GT(errors.otherMean(), 0.2);
}

// The word embedding's copy on the head's stage: the [V, h] token embedding split by vocabulary
// rows over t tensor ranks (rounded up, as the split rounds), for tied embeddings or multi-token
// prediction; none for an untied model without modules or a model without embeddings. And the
// group of the first and the last stage: 4 stages outermost over 2 nodes of 4 devices with dp 2
// inside (stride 2): stages 0 and 3 are on nodes 0 and 1; over 1 node of 8, on the same one.
TEST(CostModelTest, EmbeddingCopyOfTheLastStage) {
  auto compiled = unittest::compile(
      "model tied : transformer { layers = 2; hidden = 64; heads = 4; seq = 32; vocab = 1001; }\n"
      "model untied : transformer { layers = 2; hidden = 64; heads = 4; seq = 32; vocab = 1001; "
      "tied_embeddings = false; }\n"
      "model mtp : transformer { layers = 2; hidden = 64; heads = 4; seq = 32; vocab = 1001; "
      "tied_embeddings = false; mtp_layers = 1; }\n"
      "model toy : mlp { layers = 2; width = 8; input = 4; output = 2; }\n");
  ASSERT_TRUE(compiled->program) << compiled->messages;
  const ir::Program &program = *compiled->program;
  EXPECT_EQ(getEmbeddingCopyParams(*program.findModel("tied"), 1), 1001 * 64);
  EXPECT_EQ(getEmbeddingCopyParams(*program.findModel("tied"), 4), (1001 * 64 + 3) / 4);
  EXPECT_EQ(getEmbeddingCopyParams(*program.findModel("untied"), 1), 0);
  EXPECT_EQ(getEmbeddingCopyParams(*program.findModel("mtp"), 2), 1001 * 64 / 2);
  EXPECT_EQ(getEmbeddingCopyParams(*program.findModel("toy"), 1), 0);

  GroupShape across = getStagePairShape(2, 4, 0, 3, 8, 4);
  EXPECT_EQ(across.size, 2);
  EXPECT_FALSE(across.isIntraNode());
  GroupShape inside = getStagePairShape(2, 4, 0, 3, 8, 8);
  EXPECT_EQ(inside.size, 2);
  EXPECT_TRUE(inside.isIntraNode());
}

TEST(CostModelTest, OverlapWindow) {
  double k = kOverlapComputeSlowdown;
  // Communication shorter than the compute beside it exposes X·κ/(1 + κ).
  EXPECT_NEAR(getOverlapExposedSeconds(1.0, 10.0), k / (1 + k), 1e-12);
  // Longer communication exposes its excess.
  EXPECT_NEAR(getOverlapExposedSeconds(10.0, 1.0), 9.0, 1e-12);
  EXPECT_DOUBLE_EQ(getOverlapExposedSeconds(0.0, 5.0), 0.0);
}

TEST(CostModelTest, ExpertOverlapPairsEachForwardWithAnotherMicrobatchsBackward) {
  double k = kOverlapComputeSlowdown, floor = k / (1 + k);
  // Without a pipeline Megatron-Core's combined 1F1B runs the first forward and the last backward
  // alone, and the m - 1 others in pairs: 1/m of the passes unpaired.
  EXPECT_DOUBLE_EQ(getExpertOverlapUnpairedShare(ir::Schedule::OneFOneB, 1, 0, 8, 1), 1.0 / 8);
  EXPECT_DOUBLE_EQ(getExpertOverlapUnpairedShare(ir::Schedule::OneFOneB, 1, 0, 1, 1), 1.0);
  // Interleaved over p = 8 stages with v = 4 chunks and m = 512: stage 0 warms up with
  // 2·7 + 3·8 + 1 = 39 of its 2,048 chunk forwards, the last stage with 3·8 + 1 = 25.
  EXPECT_DOUBLE_EQ(getExpertOverlapUnpairedShare(ir::Schedule::Interleaved, 8, 0, 512, 4),
                   39.0 / 2048);
  EXPECT_DOUBLE_EQ(getExpertOverlapUnpairedShare(ir::Schedule::Interleaved, 8, 7, 512, 4),
                   25.0 / 2048);
  // Fewer micro-batches than the warm-up: every pass alone.
  EXPECT_DOUBLE_EQ(getExpertOverlapUnpairedShare(ir::Schedule::Interleaved, 4, 0, 4, 2), 1.0);
  // DualPipeV over p = 4 ranks, m = 8 micro-batches, each rank 2m = 16 forward and 16 backward
  // chunk passes (deepseek-ai/DualPipe, dualpipev.py's steps). Rank 0: its main step runs
  // m - 2p + 0 + 1 = 1 iteration of two paired calls, its fifth p - 0 - 1 = 3 of one: 5 pairs,
  // 11 of 16 alone. Rank 3, the last: 8 - 8 + 3 + 1 = 4 iterations, 8 calls but the first of
  // them unpaired, and no fifth step: 7 pairs, 9 alone.
  EXPECT_DOUBLE_EQ(getExpertOverlapUnpairedShare(ir::Schedule::DualPipeV, 4, 0, 8, 2), 11.0 / 16);
  EXPECT_DOUBLE_EQ(getExpertOverlapUnpairedShare(ir::Schedule::DualPipeV, 4, 3, 8, 2), 9.0 / 16);
  // Many micro-batches: the main step dominates; rank 1 of 4 at m = 64: 64 - 8 + 1 + 1 = 58
  // iterations of two pairs and 2 of one, 118 pairs of 128.
  EXPECT_DOUBLE_EQ(getExpertOverlapUnpairedShare(ir::Schedule::DualPipeV, 4, 1, 64, 2),
                   1 - 118.0 / 128);
  // Megatron-Core's four windows (model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run):
  // the backward's combine gradient beside the forward's attention side, the forward's dispatch
  // beside the backward's routed experts, the backward's dispatch gradient beside the forward's
  // routed experts, the forward's combine beside the backward's attention side.
  // One MoE layer whose all-to-alls of 0.5 s each hide in every window: forward 10 s (experts
  // 4 s), backward 20 s (experts 8 s); each window exposes the slowdown floor.
  ExpertExchange hidden;
  hidden.forwardDispatch = hidden.forwardCombine = 0.5;
  hidden.backwardCombine = hidden.backwardDispatch = 0.5;
  hidden.forwardCompute = 10.0, hidden.forwardExperts = 4.0;
  hidden.backwardCompute = 20.0, hidden.backwardExperts = 8.0;
  // One whose compute is nearly all experts: all-to-alls of 1.5 s, forward 4 s (experts 3.5 s,
  // attention side 0.5 s), backward 8 s (experts 7 s, attention side 1 s). The combines expose
  // 1.5 − 0.5 = 1 s and 1.5 − 1 = 0.5 s, the dispatches the floor, although the whole 12 s of
  // compute is twice the 6 s of all-to-alls.
  ExpertExchange lopsided;
  lopsided.forwardDispatch = lopsided.forwardCombine = 1.5;
  lopsided.backwardCombine = lopsided.backwardDispatch = 1.5;
  lopsided.forwardCompute = 4.0, lopsided.forwardExperts = 3.5;
  lopsided.backwardCompute = 8.0, lopsided.backwardExperts = 7.0;
  // A dense layer: nothing to hide.
  ExpertExchange dense;
  dense.forwardCompute = 5.0, dense.backwardCompute = 9.0;
  ExpertExchange units[] = {hidden, lopsided, dense};
  double paired = 4 * 0.5 * floor + (1.0 + 0.5 + 2 * 1.5 * floor), alone = 2.0 + 6.0;
  EXPECT_NEAR(getExpertOverlapExposedSeconds(units, 0.5), 0.5 * paired + 0.5 * alone, 1e-12);
  // All alone: the all-to-alls in full; all paired: the windows alone.
  EXPECT_NEAR(getExpertOverlapExposedSeconds(units, 1.0), alone, 1e-12);
  EXPECT_NEAR(getExpertOverlapExposedSeconds(units, 0.0), paired, 1e-12);
}

TEST(CostModelTest, ExpertOverlapHoldsOneMoreLayerAndOneMoreWarmupChunk) {
  // Without a pipeline, 1F1B holds one micro-batch of the stage's 48 layers; paired, the
  // forward of layer i beside the backward of the other micro-batch's last held layer, 49.
  EXPECT_DOUBLE_EQ(getExpertOverlapInFlight(ir::Schedule::OneFOneB, 1, 1, 16, 1, 48), 49.0 / 48);
  // One micro-batch: nothing is paired.
  EXPECT_DOUBLE_EQ(getExpertOverlapInFlight(ir::Schedule::OneFOneB, 1, 1, 1, 1, 48), 1.0);
  // Interleaved, p = 4, v = 3, stage 0 of 12 layers (chunks of 4): Megatron-Core warms up with
  // 2·3 + 2·4 = 14 chunk forwards and holds 15 chunks, 60 layers, at its peak; under the overlap
  // 16 chunks and one layer paired, 65 layers.
  double scheduled = getInFlightMicrobatches(ir::Schedule::Interleaved, 4, 64, 3, 0);
  EXPECT_DOUBLE_EQ(scheduled * 12, 60.0);
  EXPECT_DOUBLE_EQ(
      getExpertOverlapInFlight(ir::Schedule::Interleaved, scheduled, 4, 64, 3, 12) * 12, 65.0);
  // Never more than every micro-batch of the step.
  EXPECT_DOUBLE_EQ(getExpertOverlapInFlight(ir::Schedule::Interleaved, 2, 4, 2, 2, 4), 2.0);
  // DualPipeV's 2p + 1 chunks (the DualPipe README's PP + 1) are the count of its schedule,
  // whose forward and backward chunks always run side by side: unchanged.
  double dual = getInFlightMicrobatches(ir::Schedule::DualPipeV, 4, 16, 2, 0);
  EXPECT_DOUBLE_EQ(dual, 4.5);
  EXPECT_DOUBLE_EQ(getExpertOverlapInFlight(ir::Schedule::DualPipeV, dual, 4, 16, 2, 8), 4.5);
}

/// A small swiglu transformer (hidden 256, 4 heads, sequence 128, vocabulary 512, FFN 1024).
ir::Model smallTransformer(int64_t layers) {
  ir::Model model;
  model.kind = ir::ModelKind::Transformer;
  ir::TransformerConfig &config = model.transformer;
  config.layers = layers;
  config.hidden = 256;
  config.heads = 4;
  config.seq = 128;
  config.vocab = 512;
  config.ffn = 1024;
  config.mlp = ir::MlpActivation::Swiglu;
  return model;
}

// The part of an MoE layer's compute between the dispatch and the combine: the routed experts'
// grouped products (swiglu: gate and up, n = 2·f_e, and down; each local expert's rows), the
// received rows' sort by local expert (the all-to-all dispatcher over 4 ranks of 16 experts), and
// the routed share of the MLP activation, whose bytes are the routed rows' T·k·f_e against the
// shared expert's T·f_s: 128·2·384 / (128·2·384 + 128·512) = 0.6. Not the router, the shared
// expert or the attention.
TEST(CostModelTest, RoutedExpertsRunBetweenTheDispatchAndTheCombine) {
  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel costModel(*compiled->program->findCluster("h100"), ir::Precision::MixedBF16);
  ir::Model model = smallTransformer(2);
  model.transformer.moe.experts = 16;
  model.transformer.moe.topK = 2;
  model.transformer.moe.expertFfn = 384;
  model.transformer.moe.sharedExperts = 1;
  model.transformer.moe.sharedExpertFfn = 512;
  Layout layout;
  layout.expert = 4;
  const double rows = 128 * 2, localExperts = 4, h = 256, fe = 384, e = 2;
  auto product = [&](double m, double n, double k) {
    Gemm gemm;
    gemm.m = m, gemm.n = n, gemm.k = k, gemm.batch = localExperts;
    return costModel.getGemmSeconds(gemm);
  };
  double perExpert = rows / localExperts, sort = 2 * 2 * rows * h * e;
  // A pass's routed part: its products, the sort, and 0.6 of its MLP activation.
  auto expectRouted = [&](PassKind pass, const std::string &activationName, double products) {
    Work work = getUnitWork(model, UnitKind::Layer, 0, pass, layout);
    double activation = 0;
    for (const MemoryOp &op : work.memory)
      if (op.name == activationName) {
        EXPECT_DOUBLE_EQ(op.routedShare, 0.6);
        activation = op.bytes * 0.6;
      }
    ASSERT_GT(activation, 0);
    EXPECT_NEAR(costModel.getRoutedExpertSeconds(work),
                products + costModel.getMemorySeconds(sort) +
                    costModel.getMemorySeconds(activation),
                1e-12);
  };
  expectRouted(PassKind::Forward, "mlp activation",
               product(perExpert, 2 * fe, h) + product(perExpert, h, fe));
  // The backward: each product's input gradient (m×k from m×n by n×k) and weight gradient.
  expectRouted(PassKind::Backward, "mlp activation backward",
               product(perExpert, h, 2 * fe) + product(h, 2 * fe, perExpert) +
                   product(perExpert, fe, h) + product(fe, h, perExpert));
  // A dense layer has none.
  ir::Model denseModel = smallTransformer(2);
  EXPECT_EQ(costModel.getRoutedExpertSeconds(
                getUnitWork(denseModel, UnitKind::Layer, 0, PassKind::Forward, Layout{})),
            0);
}

TEST(CostModelTest, AsyncTensorParallelOverlapsEachCollectiveWithItsProducts) {
  double k = kOverlapComputeSlowdown, floor = k / (1 + k);
  // Four equal collectives of 2 s: beside products of 1, 1, 10 and 10 s the first two expose
  // their excess, the last two the slowdown floor.
  TensorSlotSeconds slots{1.0, 1.0, 10.0, 10.0};
  EXPECT_NEAR(getTensorOverlapExposedSeconds(8.0, slots), 1.0 + 1.0 + 2 * 2 * floor, 1e-12);
  // Only the slots with products share the collectives.
  TensorSlotSeconds two{0.0, 3.0, 0.0, 3.0};
  EXPECT_NEAR(getTensorOverlapExposedSeconds(8.0, two), 2 * 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(getTensorOverlapExposedSeconds(8.0, TensorSlotSeconds{}), 0.0);
  // In a pass, a unit exposes at least that, although its whole compute (22 s) is longer than
  // the 8 s of collectives.
  PassUnit unit;
  unit.compute = 22.0;
  unit.tensorBeside = 8.0;
  unit.slots = slots;
  EXPECT_NEAR(getPassExposedSeconds(llvm::ArrayRef(&unit, 1)), 2.0 + 4 * floor, 1e-12);
  // Without slots the collectives overlap with the whole compute.
  unit.slots = {};
  EXPECT_NEAR(getPassExposedSeconds(llvm::ArrayRef(&unit, 1)), 8.0 * floor, 1e-12);
}

TEST(CostModelTest, StepCollectivesRunAsAPassBesideTheUnitsCompute) {
  double k = kOverlapComputeSlowdown, floor = k / (1 + k);
  // Three units of a forward with 10 s of compute each, their own gathers and ring steps counted
  // with every micro-batch: as the step's parameter all-gathers see them (dp_overlap = all), the
  // first unit's 4 s gather is waited for, the second's and third's (4 s and 12 s) run beside
  // the compute of the unit before: 4 + 4·κ/(1 + κ) + (12 − 10).
  std::vector<PassUnit> forward(3);
  for (PassUnit &unit : forward) {
    unit.compute = 10.0;
    unit.gather = 1.0;
    unit.beside = 3.0;
  }
  double gathers[3] = {4.0, 4.0, 12.0};
  std::vector<PassUnit> step;
  for (size_t i = 0; i < forward.size(); ++i)
    step.push_back(getStepPassUnit(forward[i], gathers[i], 0));
  EXPECT_DOUBLE_EQ(step[0].beside, 0.0);
  EXPECT_DOUBLE_EQ(step[0].reduce, 0.0);
  EXPECT_NEAR(getPassExposedSeconds(step), 4.0 + 4.0 * floor + 2.0, 1e-12);
  // The step's gradient reductions beside the last backward (dp_overlap = grads): the first two
  // units' 5 s beside the next unit's compute, the last unit's in full.
  std::vector<PassUnit> backward;
  for (const PassUnit &unit : forward)
    backward.push_back(getStepPassUnit(unit, 0, 5.0));
  EXPECT_NEAR(getPassExposedSeconds(backward), 2 * 5.0 * floor + 5.0, 1e-12);
}

TEST(CostModelTest, ProjectionsTakeTheirTensorSlots) {
  ir::Model model = smallTransformer(1);
  Layout layout;
  layout.tensor = 2;
  // Forward FLOPs of each slot: QKV 2·T·h·3h/t, output 2·T·h·h/t, gate and up 2·T·h·2f/t, down
  // 2·T·f/t·h (T = 128 tokens); the backward's input and weight gradients twice each.
  double T = 128, h = 256, f = 1024, t = 2;
  double expected[kTensorSlots] = {2 * T * h * 3 * h / t, 2 * T * h * h / t, 2 * T * h * 2 * f / t,
                                   2 * T * f / t * h};
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    Work work = getUnitWork(model, UnitKind::Layer, 0, pass, layout);
    double flops[kTensorSlots] = {};
    for (const Gemm &gemm : work.gemms)
      if (gemm.tensorSlot >= 0)
        flops[gemm.tensorSlot] += gemm.getFlops();
    double factor = pass == PassKind::Forward ? 1 : 2;
    for (int s = 0; s < kTensorSlots; ++s)
      EXPECT_NEAR(flops[s], factor * expected[s], 1e-9 * expected[s]) << "slot " << s;
  }
}

TEST(CostModelTest, KeptGatheredInputsAreTheTwoProductInputsWhole) {
  // sp_inputs = keep: QKV's input and the MLP's input (the norms' outputs, s·b·h·e bytes each)
  // are kept whole instead of split by t (Korthikanti et al. 2022, Table 2: 2sbh each of the 10
  // outside the tensor-parallel region), for fused and materialized attention alike; under
  // selective recomputation with fused attention, which recomputes them from the norms' inputs,
  // they are kept whole instead (s·b·h·e more than the norms' inputs split by t); under full
  // recomputation the recomputed layer holds them (the transient).
  ir::Model model = smallTransformer(2);
  double s = 128, b = 2, h = 256, t = 8;
  for (ir::AttentionKind attention : {ir::AttentionKind::Flash, ir::AttentionKind::Materialized}) {
    model.transformer.attention = attention;
    for (ir::ActivationMode mode :
         {ir::ActivationMode::Keep, ir::ActivationMode::RecomputeSelective,
          ir::ActivationMode::RecomputeFull}) {
      SCOPED_TRACE(static_cast<int>(attention) * 10 + static_cast<int>(mode));
      Layout regather;
      regather.microBatch = b;
      regather.tensor = static_cast<int64_t>(t);
      regather.sequenceParallel = true;
      regather.activations = mode;
      Layout keep = regather;
      keep.sequenceParallelInputs = ir::SequenceParallelInputs::Keep;
      double whole = 2 * (s * b * h * 2) * (1 - 1 / t);
      bool recomputed =
          mode == ir::ActivationMode::RecomputeSelective && attention == ir::AttentionKind::Flash;
      double stored = mode == ir::ActivationMode::RecomputeFull ? 0
                      : recomputed                              ? 2 * (s * b * h * 2)
                                                                : whole;
      EXPECT_NEAR(getLayerActivationBytes(model.transformer, keep) -
                      getLayerActivationBytes(model.transformer, regather),
                  stored, 1e-6);
      double transient = mode == ir::ActivationMode::RecomputeFull ? whole
                         : mode == ir::ActivationMode::Keep        ? 0
                                                                   : whole - stored;
      EXPECT_NEAR(getRecomputedLayerBytes(model, keep) - getRecomputedLayerBytes(model, regather),
                  transient, 1e-6);
      // Without sequence parallelism the setting means nothing.
      regather.sequenceParallel = keep.sequenceParallel = false;
      EXPECT_DOUBLE_EQ(getLayerActivationBytes(model.transformer, keep),
                       getLayerActivationBytes(model.transformer, regather));
    }
  }
}

TEST(CostModelTest, ColumnParallelSlotsAreTheColumnParallelProducts) {
  // Flat timing (no device preset): a product takes its FLOPs over peak × efficiency.
  ir::Cluster cluster;
  cluster.peakFlops = 100e12;
  cluster.efficiency = 0.5;
  CostModel model(cluster, ir::Precision::MixedBF16);
  ir::Model transformer = smallTransformer(1);
  Layout layout;
  layout.tensor = 2;
  Work backward = getUnitWork(transformer, UnitKind::Layer, 0, PassKind::Backward, layout);
  // The weight gradients of QKV (2·T·h·3h/t FLOPs) and of the MLP's gate and up (2·T·h·2f/t);
  // the row-parallel products' (attention output, down) reduce no input gradient.
  double T = 128, h = 256, f = 1024, t = 2, rate = 100e12 * 0.5;
  double qkv = 2 * T * h * 3 * h / t / rate, mlpIn = 2 * T * h * 2 * f / t / rate;
  TensorSlotSeconds weights = model.getColumnParallelSlotSeconds(backward, false, true);
  EXPECT_NEAR(weights[kSlotQkv], qkv, 1e-18);
  EXPECT_NEAR(weights[kSlotMlpIn], mlpIn, 1e-18);
  EXPECT_DOUBLE_EQ(weights[kSlotAttentionOutput], 0.0);
  EXPECT_DOUBLE_EQ(weights[kSlotMlpOut], 0.0);
  // Their input gradients, [T, 3h/t] × [3h/t, h] and [T, 2f/t] × [2f/t, h], have the same FLOPs;
  // both kinds together twice that.
  TensorSlotSeconds inputs = model.getColumnParallelSlotSeconds(backward, true, false);
  EXPECT_NEAR(inputs[kSlotQkv], qkv, 1e-18);
  EXPECT_NEAR(inputs[kSlotMlpIn], mlpIn, 1e-18);
  EXPECT_DOUBLE_EQ(inputs[kSlotAttentionOutput], 0.0);
  TensorSlotSeconds both = model.getColumnParallelSlotSeconds(backward, true, true);
  EXPECT_NEAR(both[kSlotQkv], 2 * qkv, 1e-18);
  EXPECT_NEAR(both[kSlotMlpIn], 2 * mlpIn, 1e-18);
  // A forward has neither.
  Work forward = getUnitWork(transformer, UnitKind::Layer, 0, PassKind::Forward, layout);
  for (double seconds : model.getColumnParallelSlotSeconds(forward, true, true))
    EXPECT_DOUBLE_EQ(seconds, 0.0);
}

TEST(CostModelTest, BubblesOfEverySchedule) {
  MicrobatchTimes times;
  times.forward = 3;  // F
  times.backward = 6; // the whole backward: B (input gradients, 4) + W (weight gradients, 2)
  times.weight = 2;   // W
  times.exposed = 1;  // pipeline communication per micro-batch
  int64_t p = 8, m = 32;
  StageMicrobatch stages[] = {{times, p}}; // p equal stages
  // 1F1B and GPipe: (p − 1)(F + B + comm) (Narayanan et al. 2021 §2.2).
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::OneFOneB, m, 1, stages), 7 * 10.0);
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::GPipe, m, 1, stages), 7 * 10.0);
  // Interleaved with v = 4: divided by v.
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::Interleaved, m, 4, stages), 7 * 10.0 / 4);
  // ZB-H1: (p − 1)(max(F, B, F + B − W) + comm), B the input-gradient pass: here Qi et al.'s
  // (p − 1)(F + B − W + comm) (2024 §2.1), W being the shortest (BubbleOfZeroBubbleH1 checks the
  // chains against the schedule).
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::ZeroBubble, m, 1, stages), 7 * (3 + 4 - 2 + 1.0));
  // ZB-V on half-stage chunks, F = 3/2 + 1/4 = 1.75, B = 4/2 + 1/4 = 2.25, W = 1 (as DualPipeV's
  // below): the longest of its chains (BubbleOfZeroBubbleV checks them against the schedule),
  // here 2(p − 1)(B − W) = 14·1.25; the others are B + 6W = 8.25, 7B = 15.75, F + 6W = 7.75,
  // 13F − 6B = 9.25, 13F + B − 14W = 11, 14F − 7B − W = 7.75 and 14F − 15W = 9.5.
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::ZeroBubbleV, m, 2, stages), 14 * 1.25);
  // DualPipeV on half-stage chunks, F = 3/2 + 1/4, B = 4/2 + 1/4, W = 2/2:
  // (p − 1)·max(0, B − W) + max((p − 2)·F + (p − 1)·B, 2(p − 1)·F) = 7·1.25 + max(6·1.75 +
  // 7·2.25, 14·1.75) (BubbleOfDualPipeV checks the form against the schedule).
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::DualPipeV, m, 2, stages),
                   7 * 1.25 + std::max(6 * 1.75 + 7 * 2.25, 14 * 1.75));
  // DualPipe: (p/2 − 1)(F&B + B − 3W + comm)/2 with F&B = F + B + W and B + W the whole
  // backward (DeepSeek-V3 report, Table 2, half-stage chunks).
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::DualPipe, m, 2, stages),
                   3 * ((3 + 6) + 6 - 6 + 1.0) / 2);
  // When the weight passes are longer than what they must hide (W = 3, B = 0 + 1/4), no
  // negative bubble: the forwards' chain (2p − 3)F − (p − 2)B = 13·1.75 − 6·0.25 is the longest
  // (F + 6W = 19.75, B + 6W = 18.25, 14F − 7B − W = 19.75 next).
  MicrobatchTimes heavy = times;
  heavy.weight = 6;
  StageMicrobatch heavyStages[] = {{heavy, p}};
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::ZeroBubbleV, m, 2, heavyStages),
                   13 * 1.75 - 6 * 0.25);
  // The same stages given one by one: the same bubble.
  std::vector<StageMicrobatch> each(static_cast<size_t>(p), {times, 1});
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::OneFOneB, m, 1, each), 7 * 10.0);
  // One stage: no pipeline.
  StageMicrobatch one[] = {{times, 1}};
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::OneFOneB, m, 1, one), 0.0);
}

/// The makespan of Megatron-LM's 1F1B schedule over stages with forward times f and backward
/// times b, communication free: each stage runs min(p − s − 1, m) warm-up forwards, then
/// alternates a forward and a backward, then drains its backwards; a forward waits for the
/// previous stage's forward of the same micro-batch, a backward for the next stage's backward
/// (Narayanan et al. 2021, §2.2, Figure 4). With weight-gradient passes w (b then the input
/// gradients alone), each is part of its backward; with `zeroBubble`, ZB-H1 as Qi et al. 2024
/// hand-schedule it (Figure 3; sail-sg/zero-bubble-pipeline-parallelism, efficiency.py,
/// get_hand_schedule with one warm-up forward per later stage): the weight passes run apart, each
/// after its backward, and stage s defers its first s to its end. An event simulation,
/// independent of the formula.
/// Plays each rank's passes of `order` in turn, as an event simulation: `step(r, pass, clock)`
/// runs the pass on rank r from its `clock`, advancing it, where the pass's input is ready, and
/// returns false where it is not yet. Returns the makespan; a rank left with passes stalled.
template <typename Pass, typename Step>
double playRanks(const std::vector<std::vector<Pass>> &order, Step step) {
  size_t p = order.size();
  std::vector<size_t> position(p, 0);
  std::vector<double> clock(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < p; ++r)
      for (; position[r] < order[r].size() &&
             step(static_cast<int>(r), order[r][position[r]], clock[r]);
           ++position[r])
        progress = true;
  }
  for (size_t r = 0; r < p; ++r)
    EXPECT_EQ(position[r], order[r].size()) << "rank " << r << " stalled";
  return *std::max_element(clock.begin(), clock.end());
}

enum OneFOneBKind { Backward, Forward, Weight };
struct OneFOneBStep {
  OneFOneBKind kind;
  int microbatch;
};

/// Each stage's passes in simulateOneFOneB's order.
std::vector<std::vector<OneFOneBStep>> getOneFOneBOrder(int p, int m, bool zeroBubble) {
  std::vector<std::vector<OneFOneBStep>> order(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    int warmup = std::min(p - s - 1, m), next = 0, back = 0;
    auto backward = [&] {
      order[s].push_back({Backward, back});
      if (zeroBubble && back >= s)
        order[s].push_back({Weight, back});
      ++back;
    };
    for (; next < warmup; ++next)
      order[s].push_back({Forward, next});
    for (; next < m; ++next) {
      order[s].push_back({Forward, next});
      backward();
    }
    while (back < m)
      backward();
    for (int i = 0; zeroBubble && i < std::min(s, m); ++i)
      order[s].push_back({Weight, i});
  }
  return order;
}

double simulateOneFOneB(const std::vector<double> &f, const std::vector<double> &b, int m,
                        const std::vector<double> &w = {}, bool zeroBubble = false) {
  int p = static_cast<int>(f.size());
  std::vector<std::vector<OneFOneBStep>> order = getOneFOneBOrder(p, m, zeroBubble);
  // done[stage][forward?][micro-batch]: when it finished, or -1.
  std::vector<std::vector<std::vector<double>>> done(
      static_cast<size_t>(p), std::vector<std::vector<double>>(2, std::vector<double>(m, -1)));
  return playRanks(order, [&](int s, const OneFOneBStep &step, double &clock) {
    if (step.kind == Weight) {
      clock += w.empty() ? 0.0 : w[s];
      return true;
    }
    bool forward = step.kind == Forward;
    double ready =
        forward ? (s == 0 ? 0 : done[s - 1][1][step.microbatch])
                : (s == p - 1 ? done[s][1][step.microbatch] : done[s + 1][0][step.microbatch]);
    if (ready < 0)
      return false;
    double weight = zeroBubble || w.empty() ? 0.0 : w[s];
    clock = std::max(clock, ready) + (forward ? f[s] : b[s] + weight);
    done[s][forward][step.microbatch] = clock;
    return true;
  });
}

/// What a V schedule's ranks hold at their peaks, in chunks: each rank's chunk forwards awaiting
/// their weight passes, and the first rank's second-chunk forwards (the head's) awaiting their
/// backward.
struct VHeld {
  std::vector<int> peak;
  int headPeak = 0;
  /// Given what a stage's micro-batch holds in flight (`perMicrobatch`), what one past its
  /// input-gradient pass holds more until its weight pass (`perDeferred`) and what the head's
  /// deferred weight pass holds (`perHead`), each rank's peak bytes (`bytes`), a chunk half a
  /// stage.
  double perMicrobatch = 1, perDeferred = 0, perHead = 0;
  std::vector<double> bytes;
  /// Tracks one rank's chunks: held whole, past their input gradient, the head's among those.
  struct Rank {
    const VHeld &held;
    double &peak;
    int whole = 0, deferred = 0, heads = 0;
    void add(int dWhole, int dDeferred, int dHeads) {
      whole += dWhole;
      deferred += dDeferred;
      heads += dHeads;
      peak = std::max(peak, (whole + deferred) * held.perMicrobatch / 2 +
                                deferred * held.perDeferred / 2 + heads * held.perHead);
    }
  };
};

/// The makespan of DualPipeV over p ranks (2p stages: rank r holds stage r and stage 2p − 1 − r),
/// every chunk pass a forward f, an input-gradient backward b and a weight-gradient pass w,
/// transfers free. Each rank runs the passes of deepseek-ai/DualPipe's DualPipeV.step
/// (dualpipe/dualpipev.py) in its order: its eight steps of forwards, overlapped forward and
/// backward pairs (f + b + w), backwards with the weight gradient deferred or not, and deferred
/// weight passes. A forward waits for the previous stage's forward of the micro-batch, a
/// backward for the next stage's backward (the last stage's for its own forward). An event
/// simulation, independent of the formula.
double simulateDualPipeV(int p, int m, double f, double b, double w, VHeld *held = nullptr) {
  enum Kind { Forward, Backward, Deferred, Weight, Pair };
  struct Pass {
    Kind kind;
    int phase = 0, other = 0; ///< Pair: forward of `phase` beside the backward of `other`.
  };
  int stages = 2 * p;
  std::vector<std::vector<Pass>> order(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    std::vector<Pass> &o = order[static_cast<size_t>(r)];
    for (int i = 0; i < 2 * (p - r - 1); ++i) // step 1
      o.push_back({Forward, 0});
    for (int i = 0; i < r + 1; ++i) { // step 2
      o.push_back({Forward, 0});
      o.push_back({Forward, 1});
    }
    for (int i = 0; i < p - r - 1; ++i) { // step 3, zero bubble
      o.push_back({Deferred, 1});
      o.push_back({Weight});
      o.push_back({Forward, 1});
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) { // step 4, the main step
      if (i == 0 && r == p - 1) {
        o.push_back({Forward, 0});
        o.push_back({Backward, 1});
      } else {
        o.push_back({Pair, 0, 1});
      }
      o.push_back({Pair, 1, 0});
    }
    for (int i = 0; i < p - r - 1; ++i) { // step 5
      o.push_back({Backward, 1});
      o.push_back({Pair, 1, 0});
    }
    bool deferred = false; // step 6: the second half with the weight passes deferred
    for (int i = 0, n = r + 1; i < n; ++i) {
      if (i == n / 2 && r % 2 == 1)
        deferred = true;
      o.push_back({deferred ? Deferred : Backward, 1});
      if (i == n / 2 && r % 2 == 0)
        deferred = true;
      o.push_back({deferred ? Deferred : Backward, 0});
    }
    for (int i = 0; i < p - r - 1; ++i) { // step 7
      o.push_back({Weight});
      o.push_back({Deferred, 0});
    }
    for (int i = 0; i < r + 1; ++i) // step 8
      o.push_back({Weight});
  }
  if (held) {
    held->peak.assign(static_cast<size_t>(p), 0);
    held->bytes.assign(static_cast<size_t>(p), 0);
    for (int r = 0; r < p; ++r) {
      // Bytes: a backward whose weight pass runs with it holds its operands until that ends; a
      // deferred one until a weight pass takes it, first in first out (DualPipe's
      // WeightGradStore).
      VHeld::Rank rank{*held, held->bytes[static_cast<size_t>(r)]};
      std::deque<int> queue;
      auto head = [&](int phase) { return r == 0 && phase == 1 ? 1 : 0; };
      for (const Pass &x : order[static_cast<size_t>(r)]) {
        if (x.kind == Forward || x.kind == Pair)
          rank.add(1, 0, 0);
        int backward = x.kind == Pair ? x.other : x.phase;
        if (x.kind == Backward || x.kind == Pair) {
          rank.add(-1, 1, head(backward));
          rank.add(0, -1, -head(backward));
        }
        if (x.kind == Deferred) {
          rank.add(-1, 1, head(x.phase));
          queue.push_back(x.phase);
        }
        if (x.kind == Weight) {
          rank.add(0, -1, -head(queue.front()));
          queue.pop_front();
        }
      }
    }
    for (int r = 0; r < p; ++r) {
      int chunks = 0, head = 0;
      auto count = [&](int delta) {
        chunks += delta;
        held->peak[r] = std::max(held->peak[r], chunks);
      };
      auto headCount = [&](int delta) {
        head += r == 0 ? delta : 0;
        held->headPeak = std::max(held->headPeak, head);
      };
      for (const Pass &x : order[static_cast<size_t>(r)]) {
        if (x.kind == Forward || x.kind == Pair) {
          count(1);
          if (x.phase == 1)
            headCount(1);
        }
        if (x.kind == Backward || x.kind == Weight || x.kind == Pair)
          count(-1);
        if ((x.kind == Backward || x.kind == Deferred) && x.phase == 1)
          headCount(-1);
        if (x.kind == Pair && x.other == 1)
          headCount(-1);
      }
    }
  }
  auto stageOf = [&](int r, int phase) { return phase == 0 ? r : stages - 1 - r; };
  // done[forward?][stage][micro-batch]: when it finished, or -1.
  std::vector<std::vector<std::vector<double>>> done(
      2, std::vector<std::vector<double>>(static_cast<size_t>(stages), std::vector<double>(m, -1)));
  std::vector<std::array<int, 4>> next(static_cast<size_t>(p), {0, 0, 0, 0}); // F0 F1 B0 B1
  auto ready = [&](int r, bool forward, int phase) {
    int mb = next[r][(forward ? 0 : 2) + phase], s = stageOf(r, phase);
    if (forward)
      return s == 0 ? 0.0 : done[1][s - 1][mb];
    return s == stages - 1 ? done[1][s][mb] : done[0][s + 1][mb];
  };
  auto finish = [&](int r, bool forward, int phase, double clock) {
    int &mb = next[r][(forward ? 0 : 2) + phase];
    done[forward ? 1 : 0][stageOf(r, phase)][mb++] = clock;
  };
  return playRanks(order, [&](int r, const Pass &pass, double &clock) {
    if (pass.kind == Weight) {
      clock += w;
    } else if (pass.kind == Pair) {
      double a = ready(r, true, pass.phase), c = ready(r, false, pass.other);
      if (a < 0 || c < 0)
        return false;
      clock = std::max({clock, a, c}) + f + b + w;
      finish(r, true, pass.phase, clock);
      finish(r, false, pass.other, clock);
    } else {
      bool forward = pass.kind == Forward;
      double a = ready(r, forward, pass.phase);
      if (a < 0)
        return false;
      clock = std::max(clock, a) + (forward ? f : pass.kind == Backward ? b + w : b);
      finish(r, forward, pass.phase, clock);
    }
    return true;
  });
}

/// The makespan of PyTorch's ScheduleZBVZeroBubble over p ranks (2p stages, rank r holding
/// stage r and stage 2p − 1 − r), every chunk pass a forward f, an input-gradient backward b and
/// a weight-gradient pass w, transfers free: each rank runs the passes of its
/// _calculate_single_rank_operations (torch/distributed/pipelining/schedules.py) in order, its
/// warm-up forwards, forward-backward-weight triples of phase 1, the steady state's forwards and
/// backwards of both phases, and the cool-down's backwards and weight passes. A forward waits
/// for the previous stage's forward, a backward for the next stage's backward (the last stage's
/// for its own forward), a weight pass for its backward. An event simulation, independent of the
/// formula.
double simulateZeroBubbleV(int p, int m, double f, double b, double w, VHeld *held = nullptr) {
  enum Kind { Forward, Input, Weight };
  struct Pass {
    Kind kind;
    int phase, microbatch;
  };
  int stages = 2 * p, n = std::max(2 * p - 1, m);
  std::vector<std::vector<Pass>> order(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    std::vector<Pass> all;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int i = 0; i < 2 * (p - r) - 1; ++i)
      all.push_back({Forward, 0, f0++});
    for (int i = 0; i < r; ++i) {
      all.push_back({Forward, 1, f1++});
      all.push_back({Forward, 0, f0++});
    }
    for (int i = 0; i < p - r; ++i) {
      all.push_back({Forward, 1, f1++});
      all.push_back({Input, 1, b1});
      all.push_back({Weight, 1, b1++});
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n)
        all.push_back({Forward, 0, f0++});
      all.push_back({Input, 0, b0});
      all.push_back({Weight, 0, b0++});
      all.push_back({Forward, 1, f1++});
      all.push_back({Input, 1, b1});
      all.push_back({Weight, 1, b1++});
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < r; ++i) {
      all.push_back({Input, 0, b0++});
      all.push_back({Input, 1, b1++});
    }
    for (int i = 0; i < p - r; ++i) {
      all.push_back({Input, 0, b0++});
      all.push_back({Weight, 0, w0++});
    }
    for (; w1 < b1; ++w1)
      all.push_back({Weight, 1, w1});
    for (; w0 < b0; ++w0)
      all.push_back({Weight, 0, w0});
    // The padding micro-batches beyond m are idle slots.
    for (const Pass &pass : all)
      if (pass.microbatch < m)
        order[static_cast<size_t>(r)].push_back(pass);
  }
  if (held) {
    held->peak.assign(static_cast<size_t>(p), 0);
    held->bytes.assign(static_cast<size_t>(p), 0);
    for (int r = 0; r < p; ++r) {
      VHeld::Rank rank{*held, held->bytes[static_cast<size_t>(r)]};
      for (const Pass &x : order[static_cast<size_t>(r)]) {
        int head = r == 0 && x.phase == 1 ? 1 : 0;
        if (x.kind == Forward)
          rank.add(1, 0, 0);
        else if (x.kind == Input)
          rank.add(-1, 1, head);
        else
          rank.add(0, -1, -head);
      }
    }
    for (int r = 0; r < p; ++r) {
      int chunks = 0, head = 0;
      for (const Pass &x : order[static_cast<size_t>(r)]) {
        chunks += x.kind == Forward ? 1 : x.kind == Weight ? -1 : 0;
        held->peak[r] = std::max(held->peak[r], chunks);
        if (r == 0 && x.phase == 1)
          head += x.kind == Forward ? 1 : x.kind == Input ? -1 : 0;
        held->headPeak = std::max(held->headPeak, head);
      }
    }
  }
  auto stageOf = [&](int r, int phase) { return phase == 0 ? r : stages - 1 - r; };
  // done[kind][stage][micro-batch]: when it finished, or -1.
  std::vector<std::vector<std::vector<double>>> done(
      3, std::vector<std::vector<double>>(static_cast<size_t>(stages), std::vector<double>(m, -1)));
  return playRanks(order, [&](int r, const Pass &pass, double &clock) {
    int s = stageOf(r, pass.phase), mb = pass.microbatch;
    double ready = pass.kind == Forward ? (s == 0 ? 0.0 : done[Forward][s - 1][mb])
                   : pass.kind == Input
                       ? (s == stages - 1 ? done[Forward][s][mb] : done[Input][s + 1][mb])
                       : done[Input][s][mb];
    if (ready < 0)
      return false;
    clock = std::max(clock, ready) + (pass.kind == Forward ? f : pass.kind == Input ? b : w);
    done[pass.kind][s][mb] = clock;
    return true;
  });
}

/// ZB-H1's makespan over p equal stages (simulateOneFOneB's hand schedule).
double simulateZeroBubbleH1(int p, int m, double f, double b, double w) {
  auto each = [p](double t) { return std::vector<double>(static_cast<size_t>(p), t); };
  return simulateOneFOneB(each(f), each(b), m, each(w), true);
}

/// Pass times of a schedule: forward, input-gradient backward, weight-gradient pass (of a chunk,
/// half a stage, in the V schedules).
struct PassTimes {
  double f, b, w;
};

/// Pass times that put each chain of the zero-bubble schedules' bubbles on the critical path:
/// the forward and input-gradient passes equal, either longer, the weight pass longer or shorter
/// than the input-gradient one, or none.
const PassTimes kPassTimes[] = {{1, 1, 1},       {1, 1, 0},       {1, 2, 1},       {2, 1, 1},
                                {1, 1, 2},       {0.8, 1.3, 0.4}, {1.3, 0.7, 0.9}, {1.2, 1.5, 0.5},
                                {2.5, 1.2, 0.2}, {0.6, 2.4, 1.1}, {3, 0.5, 2}};

/// getBubbleSeconds of `schedule` against `simulate(p, m, f, b, w)`'s makespan less a rank's
/// chunks·m passes of work, for every pass time of kPassTimes, odd and even rank counts and
/// micro-batch counts from `least(p)` up, the next by `stride(p)` (a stage's micro-batch is
/// `chunks` passes; no communication).
void expectBubbleOfSchedule(
    ir::Schedule schedule, int chunks, const std::function<int(int)> &least,
    const std::function<double(int, int, double, double, double)> &simulate,
    const std::function<int(int)> &stride = [](int) { return 1; }) {
  for (PassTimes c : kPassTimes)
    for (int p : {2, 3, 4, 8})
      for (int m : {least(p), least(p) + stride(p), 5 * p}) {
        double simulated = simulate(p, m, c.f, c.b, c.w) - chunks * m * (c.f + c.b + c.w);
        MicrobatchTimes times;
        times.forward = chunks * c.f;
        times.backward = chunks * (c.b + c.w);
        times.weight = chunks * c.w;
        StageMicrobatch stages[] = {{times, p}};
        EXPECT_NEAR(getBubbleSeconds(schedule, m, chunks, stages), simulated, 1e-9)
            << ir::toString(schedule).str() << ": p " << p << ", m " << m << ", F " << c.f << ", B "
            << c.b << ", W " << c.w;
      }
}

/// Megatron-Core's interleaved 1F1B over p ranks of v model chunks each (chunk c of rank r is
/// stage c·p + r of p·v), every chunk pass a forward f and a backward b, transfers free, in the
/// order of megatron/core/pipeline_parallel/schedules.py with micro-batch groups of p (its
/// default): virtual micro-batch k runs chunk (k mod p·v)/p of micro-batch (k/(p·v))·p + k mod p,
/// backwards through the chunks in reverse; rank r runs 2(p − r − 1) + (v − 1)·p warm-up forwards
/// (all m·v where they are more), then a forward and a backward alternating, then the cool-down.
/// PyTorch's ScheduleInterleaved1F1B warms up alike. A forward waits for the previous stage's
/// forward, a backward for the next stage's backward. An event simulation, independent of the
/// formulas.
struct InterleavedRun {
  double makespan = 0;
  std::vector<int> peakChunks; ///< each rank's most chunk forwards awaiting their backward
  int peakHeadChunks = 0;      ///< the last chunk's of the last rank (the head's)
};
InterleavedRun simulateInterleaved(int p, int v, int m, double f, double b, int group = 0) {
  struct Pass {
    bool forward;
    int chunk, microbatch;
  };
  int total = m * v, stages = p * v, n = group > 0 ? group : p;
  // Megatron-Core's get_schedule_table: each group of n micro-batches (the last one whatever is
  // left) runs through chunk 0, then chunk 1, and so on; the backwards take the chunks in
  // reverse.
  std::vector<std::pair<int, int>> table; // (micro-batch, chunk)
  for (int first = 0; first < m; first += n) {
    int end = first + n >= m ? m : first + n;
    for (int chunk = 0; chunk < v; ++chunk)
      for (int mb = first; mb < end; ++mb)
        table.emplace_back(mb, chunk);
  }
  std::vector<std::vector<Pass>> order(static_cast<size_t>(p));
  InterleavedRun run;
  run.peakChunks.assign(static_cast<size_t>(p), 0);
  for (int r = 0; r < p; ++r) {
    auto pass = [&](int k, bool forward) {
      auto [mb, chunk] = table[static_cast<size_t>(k)];
      return Pass{forward, forward ? chunk : v - 1 - chunk, mb};
    };
    int warmup = std::min(total, 2 * (p - r - 1) + (v - 1) * n);
    std::vector<Pass> &o = order[static_cast<size_t>(r)];
    for (int k = 0; k < warmup; ++k)
      o.push_back(pass(k, true));
    for (int k = warmup; k < total; ++k) {
      o.push_back(pass(k, true));
      o.push_back(pass(k - warmup, false));
    }
    for (int k = total - warmup; k < total; ++k)
      o.push_back(pass(k, false));
    int held = 0, head = 0;
    for (const Pass &x : o) {
      held += x.forward ? 1 : -1;
      run.peakChunks[static_cast<size_t>(r)] = std::max(run.peakChunks[r], held);
      if (r == p - 1 && x.chunk == v - 1) {
        head += x.forward ? 1 : -1;
        run.peakHeadChunks = std::max(run.peakHeadChunks, head);
      }
    }
  }
  // done[forward?][stage][micro-batch]: when it finished, or -1.
  std::vector<std::vector<std::vector<double>>> done(
      2, std::vector<std::vector<double>>(static_cast<size_t>(stages), std::vector<double>(m, -1)));
  run.makespan = playRanks(order, [&](int r, const Pass &x, double &clock) {
    int stage = x.chunk * p + r, mb = x.microbatch;
    double ready = x.forward ? (stage == 0 ? 0.0 : done[1][stage - 1][mb])
                             : (stage == stages - 1 ? done[1][stage][mb] : done[0][stage + 1][mb]);
    if (ready < 0)
      return false;
    clock = std::max(clock, ready) + (x.forward ? f : b);
    done[x.forward][stage][mb] = clock;
    return true;
  });
  return run;
}

TEST(CostModelTest, SmallestMicrobatchGroup) {
  // The least group isScheduleValid accepts for interleaving, found by trying every N from p to
  // m; the stages where they divide m; none below p. Megatron-Core's rule by hand: 10 over 4
  // stages in groups of 5 (4 leaves 2), 7 over 4 in one group of 7 (4, 5 and 6 leave 3, 2, 1),
  // 9 over 2 in groups of 2 (the last of 1 is short, so 3).
  EXPECT_EQ(getSmallestMicrobatchGroup(4, 10), 5);
  EXPECT_EQ(getSmallestMicrobatchGroup(4, 7), 7);
  EXPECT_EQ(getSmallestMicrobatchGroup(2, 9), 3);
  EXPECT_EQ(getSmallestMicrobatchGroup(4, 12), 4);
  EXPECT_EQ(getSmallestMicrobatchGroup(4, 3), 0);
  for (int64_t p = 2; p <= 8; ++p)
    for (int64_t m = 1; m <= 6 * p; ++m) {
      int64_t expected = 0;
      for (int64_t n = p; n <= m && !expected; ++n)
        if (isScheduleValid(ir::Schedule::Interleaved, p, m, 2, nullptr, n))
          expected = n;
      ASSERT_EQ(getSmallestMicrobatchGroup(p, m), expected) << "p " << p << ", m " << m;
      // Every other group the rule accepts holds at least as many micro-batches in flight on
      // every stage, and the bubble is the same.
      if (!expected)
        continue;
      std::vector<StageMicrobatch> stages = {{{1.0, 2.0, 0.5, 0.1}, p}};
      for (int64_t n = expected + 1; n <= m; ++n) {
        if (!isScheduleValid(ir::Schedule::Interleaved, p, m, 2, nullptr, n))
          continue;
        for (int stage = 0; stage < p; ++stage)
          EXPECT_LE(
              getInFlightMicrobatches(ir::Schedule::Interleaved, p, m, 2, stage, nullptr, expected),
              getInFlightMicrobatches(ir::Schedule::Interleaved, p, m, 2, stage, nullptr, n))
              << "p " << p << ", m " << m << ", group " << n << ", stage " << stage;
        EXPECT_DOUBLE_EQ(
            getBubbleSeconds(ir::Schedule::Interleaved, m, 2, stages, nullptr, expected),
            getBubbleSeconds(ir::Schedule::Interleaved, m, 2, stages, nullptr, n));
      }
    }
}

TEST(CostModelTest, InterleavedAgainstItsSchedule) {
  // The bubble, (p − 1)/v of a micro-batch's stage time, is exact for every m the rule accepts
  // (a multiple of p, m = p included), 2 to 4 chunks.
  for (int v : {2, 3, 4})
    expectBubbleOfSchedule(
        ir::Schedule::Interleaved, v, [](int p) { return p; },
        [v](int p, int m, double f, double b, double w) {
          return simulateInterleaved(p, v, m, f, b + w).makespan;
        },
        [](int p) { return p; });
  // Every stage's activations in flight, in micro-batches of the stage (a chunk is a v-th of it),
  // and the loss buffers of the head's chunk, held one at a time.
  for (int p : {2, 3, 4, 8})
    for (int v : {2, 3, 4})
      for (int m : {p, 2 * p, 5 * p}) {
        InterleavedRun run = simulateInterleaved(p, v, m, 1, 2);
        for (int s = 0; s < p; ++s)
          EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::Interleaved, p, m, v, s),
                           run.peakChunks[s] / static_cast<double>(v))
              << "p " << p << ", v " << v << ", m " << m << ", stage " << s;
        EXPECT_DOUBLE_EQ(getLossInFlightMicrobatches(ir::Schedule::Interleaved, p, m, v, p - 1),
                         run.peakHeadChunks);
      }
  // Micro-batch groups of N from p up (`group`, Megatron-Core's
  // --microbatch-group-size-per-vp-stage), over every m the rule accepts up to 3N + p, the last
  // group short of N included: the same bubble, (v − 1)·N warm-up chunks in flight, and the head's
  // loss buffers of two micro-batches where the last group is short.
  int checked = 0;
  for (int p : {2, 3, 4})
    for (int v : {2, 3})
      for (int n : {p, p + 1, 2 * p - 1, 2 * p})
        for (int m = n; m <= 3 * n + p; ++m) {
          if (!isScheduleValid(ir::Schedule::Interleaved, p, m, v, nullptr, n))
            continue;
          for (PassTimes c : kPassTimes) {
            double f = c.f, b = c.b + c.w;
            InterleavedRun run = simulateInterleaved(p, v, m, f, b, n);
            MicrobatchTimes times;
            times.forward = v * f;
            times.backward = v * b;
            times.weight = v * c.w;
            StageMicrobatch stages[] = {{times, p}};
            EXPECT_NEAR(getBubbleSeconds(ir::Schedule::Interleaved, m, v, stages, nullptr, n),
                        run.makespan - m * v * (f + b), 1e-9)
                << "p " << p << ", v " << v << ", N " << n << ", m " << m;
            ++checked;
          }
          InterleavedRun run = simulateInterleaved(p, v, m, 1, 2, n);
          for (int s = 0; s < p; ++s)
            EXPECT_DOUBLE_EQ(
                getInFlightMicrobatches(ir::Schedule::Interleaved, p, m, v, s, nullptr, n),
                run.peakChunks[s] / static_cast<double>(v))
                << "p " << p << ", v " << v << ", N " << n << ", m " << m << ", stage " << s;
          EXPECT_DOUBLE_EQ(
              getLossInFlightMicrobatches(ir::Schedule::Interleaved, p, m, v, p - 1, nullptr, n),
              run.peakHeadChunks)
              << "p " << p << ", v " << v << ", N " << n << ", m " << m;
        }
  EXPECT_GT(checked, 500);
  // The rule: N between p and m, the last group whole or at least p.
  EXPECT_FALSE(isScheduleValid(ir::Schedule::Interleaved, 4, 16, 2, nullptr, 3));
  EXPECT_FALSE(isScheduleValid(ir::Schedule::Interleaved, 4, 16, 2, nullptr, 17));
  EXPECT_FALSE(isScheduleValid(ir::Schedule::Interleaved, 4, 14, 2, nullptr, 6)); // 14 = 2·6 + 2
  EXPECT_TRUE(isScheduleValid(ir::Schedule::Interleaved, 4, 10, 2, nullptr, 6));  // 10 = 6 + 4
  EXPECT_FALSE(isScheduleValid(ir::Schedule::Interleaved, 4, 10, 2, nullptr, 4)); // 10 % p
}

TEST(CostModelTest, BubbleOfZeroBubbleH1) {
  // getBubbleSeconds's ZB-H1 bubble against the simulated hand schedule, over pass times that
  // put each of its three chains on the critical path and m from p up. Qi et al.'s
  // (p − 1)(F + B − W) is the third chain alone: where the weight pass is the longest it goes
  // below the forwards' own way down, (p − 1)F.
  expectBubbleOfSchedule(
      ir::Schedule::ZeroBubble, 1, [](int p) { return p; }, simulateZeroBubbleH1);
  EXPECT_NEAR(simulateZeroBubbleH1(4, 8, 1, 1, 2) - 32, 3 * 1.0, 1e-9);
  // In flight: every stage holds p micro-batches from a forward to its weight pass (1F1B p − s
  // from a forward to its backward), the head's stage each loss one at a time.
  for (int p : {2, 3, 4, 8})
    for (int m : {p, 2 * p, 5 * p})
      for (bool zeroBubble : {false, true}) {
        ir::Schedule schedule = zeroBubble ? ir::Schedule::ZeroBubble : ir::Schedule::OneFOneB;
        std::vector<std::vector<OneFOneBStep>> order = getOneFOneBOrder(p, m, zeroBubble);
        for (int s = 0; s < p; ++s) {
          int held = 0, peak = 0, loss = 0, lossPeak = 0;
          for (const OneFOneBStep &step : order[s]) {
            held += step.kind == Forward                            ? 1
                    : step.kind == (zeroBubble ? Weight : Backward) ? -1
                                                                    : 0;
            loss += step.kind == Forward ? 1 : step.kind == Backward ? -1 : 0;
            peak = std::max(peak, held);
            lossPeak = std::max(lossPeak, loss);
          }
          EXPECT_DOUBLE_EQ(getInFlightMicrobatches(schedule, p, m, 1, s), peak)
              << ir::toString(schedule).str() << ": p " << p << ", m " << m << ", stage " << s;
          if (s == p - 1) {
            EXPECT_DOUBLE_EQ(getLossInFlightMicrobatches(schedule, p, m, 1, s), lossPeak);
          }
        }
      }
  // 1F1B is the same order with each weight pass in its backward: (p − 1)(F + B + W).
  expectBubbleOfSchedule(
      ir::Schedule::OneFOneB, 1, [](int p) { return p; },
      [](int p, int m, double f, double b, double w) {
        auto each = [p](double t) { return std::vector<double>(static_cast<size_t>(p), t); };
        return simulateOneFOneB(each(f), each(b), m, each(w));
      });
}

/// getInFlightMicrobatches and getLossInFlightMicrobatches of a V schedule against what
/// `play(p, m, held)`'s order holds (two chunks a stage), on every rank.
void expectVScheduleHolds(ir::Schedule schedule, const std::function<int(int)> &least,
                          const std::function<void(int, int, VHeld *)> &play) {
  for (int p : {2, 3, 4, 8})
    for (int m : {least(p), least(p) + 1, 5 * p}) {
      VHeld held;
      play(p, m, &held);
      for (int r = 0; r < p; ++r)
        EXPECT_DOUBLE_EQ(getInFlightMicrobatches(schedule, p, m, 2, r), held.peak[r] / 2.0)
            << ir::toString(schedule).str() << ": p " << p << ", m " << m << ", rank " << r;
      EXPECT_DOUBLE_EQ(getLossInFlightMicrobatches(schedule, p, m, 2, 0), held.headPeak)
          << ir::toString(schedule).str() << ": p " << p << ", m " << m;
    }
}

TEST(CostModelTest, BubbleOfZeroBubbleV) {
  // getBubbleSeconds's ZB-V bubble against the simulated schedule (the step less a rank's 2m
  // chunk passes), over chunk times that put each of its eight chains on the critical path, and
  // m from 2p − 1 up. Where F = B = W the bubble is (p − 1)F, the first forward's way to the
  // last rank, which Qi et al.'s (p − 1)(F + B − 2W) puts at zero.
  expectBubbleOfSchedule(
      ir::Schedule::ZeroBubbleV, 2, [](int p) { return 2 * p - 1; },
      [](int p, int m, double f, double b, double w) {
        return simulateZeroBubbleV(p, m, f, b, w);
      });
  EXPECT_NEAR(simulateZeroBubbleV(8, 16, 1, 1, 1) - 96, 7.0, 1e-9);
  // What its ranks hold: p micro-batches each from a forward to its weight pass, and the head's
  // loss one at a time.
  expectVScheduleHolds(
      ir::Schedule::ZeroBubbleV, [](int p) { return 2 * p - 1; },
      [](int p, int m, VHeld *held) { simulateZeroBubbleV(p, m, 1, 1, 1, held); });
}

TEST(CostModelTest, ZeroBubbleVChainsAreItsSteps) {
  // getZeroBubbleVChains against the simulated schedule: the longest chain is the step for
  // random chunk times (some of them 0, where chains tie) on both sides of 2p − 1 micro-batches.
  // From 2p − 1 on they are the eight chains of BubbleOfZeroBubbleV's closed form (the same
  // bubble), which need p ≥ 4 to be distinct; below, never more than thirteen
  // (ZeroBubbleVWithFewMicrobatches checks the bubble at the chosen times too).
  std::mt19937 random(20261206);
  std::uniform_real_distribution<double> time(0, 3);
  std::uniform_int_distribution<int> zero(0, 5);
  for (int p : {2, 3, 4, 6, 8, 12, 16})
    for (int m = 1; m <= 2 * p + 2; ++m) {
      auto chains = getZeroBubbleVChains(p, m);
      ASSERT_FALSE(chains.empty()) << "p " << p << ", m " << m;
      EXPECT_LE(chains.size(), 13u) << "p " << p << ", m " << m;
      if (m >= 2 * p - 1 && p >= 4) {
        EXPECT_EQ(chains.size(), 8u) << "p " << p << ", m " << m;
      }
      for (int sample = 0; sample < 40; ++sample) {
        double f = zero(random) ? time(random) : 0, b = zero(random) ? time(random) : 0,
               w = zero(random) ? time(random) : 0;
        double longest = 0;
        for (const ZeroBubbleVChain &chain : chains)
          longest = std::max(longest, static_cast<double>(chain.forward) * f +
                                          static_cast<double>(chain.input) * b +
                                          static_cast<double>(chain.weight) * w);
        double simulated = simulateZeroBubbleV(p, m, f, b, w);
        EXPECT_NEAR(longest, simulated, 1e-9 * std::max(1.0, simulated))
            << "p " << p << ", m " << m << ", F " << f << ", B " << b << ", W " << w;
        if (m >= 2 * p - 1) {
          MicrobatchTimes times;
          times.forward = 2 * f;
          times.backward = 2 * (b + w);
          times.weight = 2 * w;
          StageMicrobatch stages[] = {{times, p}};
          EXPECT_NEAR(getBubbleSeconds(ir::Schedule::ZeroBubbleV, m, 2, stages),
                      longest - 2 * m * (f + b + w), 1e-9 * std::max(1.0, simulated))
              << "p " << p << ", m " << m << ", F " << f << ", B " << b << ", W " << w;
        }
      }
    }
}

TEST(CostModelTest, BubbleOfDualPipeV) {
  // What its ranks hold: 2p + 1 chunks each (the DualPipe README's PP + 1), and the head's loss
  // one at a time.
  expectVScheduleHolds(
      ir::Schedule::DualPipeV, [](int p) { return 2 * p; },
      [](int p, int m, VHeld *held) { simulateDualPipeV(p, m, 1, 1, 1, held); });
  // getBubbleSeconds's DualPipeV bubble against the simulated schedule, the step less a rank's
  // 2m chunk passes of work, over chunk times that put each of its four chains on the critical
  // path, odd and even ranks and m from 2p up.
  expectBubbleOfSchedule(
      ir::Schedule::DualPipeV, 2, [](int p) { return 2 * p; },
      [](int p, int m, double f, double b, double w) { return simulateDualPipeV(p, m, f, b, w); });
  // The DualPipe README's (PP/2 − 1)(F&B + B − 3W), PP = 2p, F&B = F + B + W, B + W the whole
  // backward: the same where the forward and input-gradient chunks are equal and B ≥ W.
  EXPECT_NEAR(simulateDualPipeV(8, 16, 1, 1, 0.5) - 32 * 2.5, 7 * (2.5 + 1.5 - 1.5), 1e-9);
}

/// What a deferred micro-batch holds beyond its activations, and a deferred head's weight pass,
/// in units of a stage's micro-batch's activations: none (the count in flight alone), the operands
/// of recomputed layers (about 16 times a full recomputation's checkpoint, Qi et al. 2024, Table
/// 1), with a head, and a little.
const double kDeferredBytes[][2] = {{0, 0}, {15, 0}, {15, 3}, {0.5, 0.2}, {0, 4}};

TEST(CostModelTest, ZeroBubbleVWithFewMicrobatches) {
  // PyTorch orders fewer than 2p − 1 micro-batches as 2p − 1 and leaves the missing ones' passes
  // out (simulateZeroBubbleV pads them alike). For every m from 1 to 2p − 2: getBubbleSeconds
  // against the simulated step less a rank's 2m chunk passes, for every pass time of kPassTimes;
  // each rank's micro-batches in flight and the head's loss buffers against the order; and each
  // rank's peak bytes (getDeferredWeightPeaks, getHeldActivationBytes) for every kDeferredBytes.
  for (int p : {2, 3, 4, 5, 8})
    for (int m = 1; m < 2 * p - 1; ++m) {
      ASSERT_TRUE(isScheduleValid(ir::Schedule::ZeroBubbleV, p, m, 2));
      for (PassTimes c : kPassTimes) {
        MicrobatchTimes times;
        times.forward = 2 * c.f;
        times.backward = 2 * (c.b + c.w);
        times.weight = 2 * c.w;
        StageMicrobatch stages[] = {{times, p}};
        EXPECT_NEAR(getBubbleSeconds(ir::Schedule::ZeroBubbleV, m, 2, stages),
                    simulateZeroBubbleV(p, m, c.f, c.b, c.w) - 2 * m * (c.f + c.b + c.w), 1e-9)
            << "p " << p << ", m " << m << ", F " << c.f << ", B " << c.b << ", W " << c.w;
      }
      for (const auto &extra : kDeferredBytes) {
        VHeld held;
        held.perDeferred = extra[0];
        held.perHead = extra[1];
        simulateZeroBubbleV(p, m, 1, 1, 1, &held);
        for (int r = 0; r < p; ++r) {
          double inFlight = getInFlightMicrobatches(ir::Schedule::ZeroBubbleV, p, m, 2, r);
          EXPECT_DOUBLE_EQ(inFlight, held.peak[static_cast<size_t>(r)] / 2.0)
              << "p " << p << ", m " << m << ", rank " << r;
          auto peaks = getDeferredWeightPeaks(ir::Schedule::ZeroBubbleV, p, m, 2, r, r == 0, 0);
          EXPECT_DOUBLE_EQ(getHeldActivationBytes(peaks, inFlight, 1, extra[0], extra[1]),
                           held.bytes[static_cast<size_t>(r)])
              << "p " << p << ", m " << m << ", rank " << r << ", extra " << extra[0] << ", head "
              << extra[1];
        }
        EXPECT_DOUBLE_EQ(getLossInFlightMicrobatches(ir::Schedule::ZeroBubbleV, p, m, 2, 0),
                         held.headPeak)
            << "p " << p << ", m " << m;
      }
    }
  // One micro-batch goes down the 2p stages and back, and the first rank ends with both its
  // chunks' weight passes: 2p(F + B) + 2W, so the bubble is (2p − 2)(F + B).
  MicrobatchTimes one;
  one.forward = 2;
  one.backward = 4;
  one.weight = 2;
  StageMicrobatch stages[] = {{one, 4}};
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::ZeroBubbleV, 1, 2, stages), 6 * (1 + 1));
}

TEST(CostModelTest, WeightPassBytesAreTheProductsOperands) {
  // Qi et al. 2024, Table 1: a GPT layer's weight pass reads 32·s·b·h bytes, the inputs of its
  // four products (h, h, h and 4h, at 2 bytes: 14·s·b·h) and their output gradients (3h, h, 4h
  // and h: 18·s·b·h).
  ir::Model model = smallTransformer(1);
  ir::TransformerConfig &config = model.transformer;
  config.mlp = ir::MlpActivation::Gelu;
  config.attention = ir::AttentionKind::Materialized;
  Layout layout;
  layout.microBatch = 2;
  double sbh = 128.0 * 2 * 256;
  EXPECT_DOUBLE_EQ(getWeightPassBytes(model, UnitKind::Layer, 0, layout), 32 * sbh);
  // Split over t = 4 with sequence parallelism: the inputs (7h) and the column-parallel output
  // gradients (7h) over t, the row-parallel products' output gradients (h each) whole, at 2
  // bytes: 2·(7h/t + 7h/t + 2h) = (28/t + 4)·s·b·h.
  layout.tensor = 4;
  layout.sequenceParallel = true;
  EXPECT_DOUBLE_EQ(getWeightPassBytes(model, UnitKind::Layer, 0, layout), (28.0 / 4 + 4) * sbh);
  // sp_inputs = keep keeps the column-parallel inputs (h and h) gathered.
  layout.sequenceParallelInputs = ir::SequenceParallelInputs::Keep;
  EXPECT_DOUBLE_EQ(getWeightPassBytes(model, UnitKind::Layer, 0, layout),
                   (28.0 / 4 + 4 + 2 * 2 * (1 - 1.0 / 4)) * sbh);
  // SwiGLU of width f with separate projections: q, k and v read one input, and gate and up
  // another, each kept once: inputs h + h + h + f, output gradients 3h + h + 2f + h.
  layout = Layout();
  config.mlp = ir::MlpActivation::Swiglu;
  config.projections = ir::Projections::Separate;
  double f = 1024.0 / 256;
  EXPECT_DOUBLE_EQ(getWeightPassBytes(model, UnitKind::Layer, 0, layout) / (128 * 256.0),
                   2 * (3 + f + 5 + 2 * f));
  // Under full recomputation a deferred layer holds its operands beyond the checkpoint, 2·s·b·h;
  // under keep they are among its activations.
  layout.activations = ir::ActivationMode::RecomputeFull;
  EXPECT_DOUBLE_EQ(getDeferredWeightExtraBytes(model, 0, layout, false),
                   getWeightPassBytes(model, UnitKind::Layer, 0, layout) -
                       getLayerActivationBytes(config, layout));
  // With the autograd graph kept (PyTorch's), the same where the recomputed inputs outweigh the
  // checkpoint.
  EXPECT_DOUBLE_EQ(getDeferredWeightExtraBytes(model, 0, layout, true),
                   getDeferredWeightExtraBytes(model, 0, layout, false));
  layout.activations = ir::ActivationMode::Keep;
  config.attention = ir::AttentionKind::Materialized;
  config.mlp = ir::MlpActivation::Gelu;
  config.projections = ir::Projections::Fused;
  EXPECT_DOUBLE_EQ(getDeferredWeightExtraBytes(model, 0, layout, false), 0);
  // The graph kept holds every activation and the captured output gradients of the four
  // products beside them: 3h + h + 4h + h at 2 bytes, Qi et al.'s 18·s·b·h (b = 1 since the
  // layout was reset).
  double sh = 128.0 * 256;
  EXPECT_DOUBLE_EQ(getDeferredWeightExtraBytes(model, 0, layout, true), 18 * sh);
  WeightPassOperands operands = getWeightPassOperands(model, UnitKind::Layer, 0, layout);
  EXPECT_DOUBLE_EQ(operands.inputs, 14 * sh);
  EXPECT_DOUBLE_EQ(operands.gradients, 18 * sh);
  // Which schedules keep the graph: PyTorch's ZB-V alone.
  EXPECT_TRUE(keepsGraphForWeightPass(ir::Schedule::ZeroBubbleV));
  EXPECT_FALSE(keepsGraphForWeightPass(ir::Schedule::ZeroBubble));
  EXPECT_FALSE(keepsGraphForWeightPass(ir::Schedule::DualPipeV));
  // The head's: its input, h, and the logits' gradient, V.
  EXPECT_DOUBLE_EQ(getWeightPassBytes(model, UnitKind::Head, 0, layout), 2 * 128.0 * (256 + 512));
}

TEST(CostModelTest, DeferredWeightPeaks) {
  // getDeferredWeightPeaks and getHeldActivationBytes against the peaks of each zero-bubble
  // schedule's order, played pass by pass on every stage: the micro-batches held whole count
  // their activations, those past their input-gradient pass their weight passes' operands too,
  // and on the head's stage the head's.
  auto expected = [](ir::Schedule schedule, int p, int m, int stage, bool head, double perDeferred,
                     double perHead) {
    double inFlight = getInFlightMicrobatches(schedule, p, m,
                                              schedule == ir::Schedule::ZeroBubble ? 1 : 2, stage);
    auto peaks = getDeferredWeightPeaks(
        schedule, p, m, schedule == ir::Schedule::ZeroBubble ? 1 : 2, stage, head, 0);
    EXPECT_FALSE(peaks.empty());
    return getHeldActivationBytes(peaks, inFlight, 1, perDeferred, perHead);
  };
  for (const auto &extra : kDeferredBytes)
    for (int p : {2, 3, 4, 8}) {
      for (int m : {p, p + 1, 5 * p}) {
        // ZB-H1 (Qi et al.'s hand schedule), the head on the last stage.
        std::vector<std::vector<OneFOneBStep>> order = getOneFOneBOrder(p, m, true);
        for (int s = 0; s < p; ++s) {
          double whole = 0, deferred = 0, peak = 0;
          double head = s == p - 1 ? extra[1] : 0;
          for (const OneFOneBStep &step : order[s]) {
            whole += step.kind == Forward ? 1 : step.kind == Backward ? -1 : 0;
            deferred += step.kind == Backward ? 1 : step.kind == Weight ? -1 : 0;
            peak = std::max(peak, whole + deferred * (1 + extra[0]) + deferred * head);
          }
          EXPECT_DOUBLE_EQ(
              expected(ir::Schedule::ZeroBubble, p, m, s, s == p - 1, extra[0], extra[1]), peak)
              << "zero_bubble: p " << p << ", m " << m << ", stage " << s << ", extra " << extra[0]
              << ", head " << extra[1];
        }
      }
      for (ir::Schedule schedule : {ir::Schedule::ZeroBubbleV, ir::Schedule::DualPipeV}) {
        bool zbv = schedule == ir::Schedule::ZeroBubbleV;
        int least = zbv ? 2 * p - 1 : 2 * p;
        for (int m : {least, least + 1, 5 * p}) {
          VHeld held;
          held.perDeferred = extra[0];
          held.perHead = extra[1];
          if (zbv)
            simulateZeroBubbleV(p, m, 1, 1, 1, &held);
          else
            simulateDualPipeV(p, m, 1, 1, 1, &held);
          for (int r = 0; r < p; ++r)
            EXPECT_DOUBLE_EQ(expected(schedule, p, m, r, r == 0, extra[0], extra[1]),
                             held.bytes[static_cast<size_t>(r)])
                << ir::toString(schedule).str() << ": p " << p << ", m " << m << ", rank " << r
                << ", extra " << extra[0] << ", head " << extra[1];
        }
      }
    }
  // Without a pipeline, and under the schedules that run each weight pass in its backward: none.
  EXPECT_TRUE(getDeferredWeightPeaks(ir::Schedule::ZeroBubble, 1, 8, 1, 0, true, 0).empty());
  EXPECT_TRUE(getDeferredWeightPeaks(ir::Schedule::OneFOneB, 4, 8, 1, 0, true, 0).empty());
  EXPECT_TRUE(getDeferredWeightPeaks(ir::Schedule::Interleaved, 4, 8, 2, 0, true, 0).empty());
}

TEST(CostModelTest, BubbleOfUnevenStages) {
  // Stages of 1F1B with different times (the embedding on the first, the head on the last): the
  // step is m·t of the slowest stage plus the bubble. With the slowest stage last, the schedule's
  // simulated makespan is exactly m·t_last + Σ of the others' t; with it elsewhere, the bubble is
  // an upper bound, tighter than (p − 1)·t_max.
  struct Case {
    std::vector<double> f, b;
    int m;
  };
  std::vector<Case> cases = {
      {{1.0, 1.1, 0.9, 1.6}, {2.0, 2.1, 1.9, 3.2}, 8}, // head on the last stage
      {{1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.3}, {2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.6}, 3},
      {{1.2, 1.0, 1.0, 1.1}, {2.3, 2.0, 2.0, 2.2}, 1},            // one micro-batch
      {{1.6, 1.0, 1.1, 0.9}, {3.1, 2.0, 2.2, 1.8}, 8},            // the slowest first
      {{1.0, 1.7, 1.0, 1.0, 1.2}, {2.0, 3.3, 2.0, 2.0, 2.4}, 10}, // the slowest in the middle
  };
  for (const Case &c : cases) {
    size_t p = c.f.size();
    std::vector<StageMicrobatch> stages;
    size_t slowest = 0;
    for (size_t s = 0; s < p; ++s) {
      MicrobatchTimes times;
      times.forward = c.f[s];
      times.backward = c.b[s];
      stages.push_back({times, 1});
      if (c.f[s] + c.b[s] > c.f[slowest] + c.b[slowest])
        slowest = s;
    }
    double tMax = c.f[slowest] + c.b[slowest];
    double step = c.m * tMax + getBubbleSeconds(ir::Schedule::OneFOneB, c.m, 1, stages);
    double simulated = simulateOneFOneB(c.f, c.b, c.m);
    if (slowest == p - 1)
      EXPECT_NEAR(step, simulated, 1e-9) << "m = " << c.m;
    else
      EXPECT_GE(step, simulated - 1e-9) << "m = " << c.m;
    EXPECT_LE(step, (c.m + static_cast<double>(p) - 1) * tMax + 1e-9);
  }
  // ZB-H1 with the head on the last stage: the others' sums in the equal stages' chains,
  // max(ΣF, ΣB, ΣF + ΣB − ΣW), overstate the hand schedule's step, whose last stage fills its
  // own tail with the weight passes it defers, by up to 7 % where m = p and the head is half a
  // stage, less with more micro-batches.
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 8 * p})
      for (double head : {0.1, 0.25, 0.5}) {
        std::vector<double> f(p, 1.0), b(p, 1.3), w(p, 0.9);
        f.back() += head;
        b.back() += 1.1 * head;
        w.back() += head;
        std::vector<StageMicrobatch> stages;
        for (int s = 0; s < p; ++s) {
          MicrobatchTimes times;
          times.forward = f[s];
          times.backward = b[s] + w[s];
          times.weight = w[s];
          stages.push_back({times, 1});
        }
        double step = m * stages.back().times.getTotal() +
                      getBubbleSeconds(ir::Schedule::ZeroBubble, m, 1, stages);
        double simulated = simulateOneFOneB(f, b, m, w, true);
        EXPECT_GE(step, simulated - 1e-9) << "p " << p << ", m " << m << ", head " << head;
        EXPECT_LE(step, 1.07 * simulated) << "p " << p << ", m " << m << ", head " << head;
      }
  // Interleaving divides the other stages' sum by v.
  MicrobatchTimes light, heavy;
  light.forward = 1;
  light.backward = 2;
  heavy.forward = 2;
  heavy.backward = 4;
  StageMicrobatch uneven[] = {{light, 3}, {heavy, 1}};
  EXPECT_DOUBLE_EQ(getBubbleSeconds(ir::Schedule::Interleaved, 8, 2, uneven), 3 * 3.0 / 2);
  std::string formula;
  getBubbleSeconds(ir::Schedule::OneFOneB, 8, 1, uneven, &formula);
  EXPECT_NE(formula.find("the other stages' mean micro-batch"), std::string::npos) << formula;
}

TEST(CostModelTest, InFlightMicrobatches) {
  // 1F1B: stage s holds min(p − s, m); GPipe all m; ZB-V min(p, m) everywhere; DualPipeV
  // 2p + 1 chunks of half a stage (the DualPipe README's PP + 1 with PP = 2p stages: rank r runs
  // 2p − r − 1 forwards of phase 0 and r + 1 of phase 1 before its main step, which pairs one
  // more forward with a backward); DualPipe p + 1 chunks (DeepSeek-V3, Table 2).
  EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::OneFOneB, 8, 32, 1, 0), 8);
  EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::OneFOneB, 8, 32, 1, 5), 3);
  EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::OneFOneB, 8, 4, 1, 0), 4);
  EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::GPipe, 8, 32, 1, 3), 32);
  EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::ZeroBubbleV, 8, 32, 2, 7), 8);
  EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::DualPipeV, 8, 32, 2, 0), 8.5);
  EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::DualPipe, 8, 32, 2, 0), 4.5);
  // Interleaved, first stage: p·(1 + (p − 1)/(p·v)) (Korthikanti et al. 2022 §4.2.3;
  // InterleavedAgainstItsSchedule checks every stage).
  EXPECT_DOUBLE_EQ(getInFlightMicrobatches(ir::Schedule::Interleaved, 8, 32, 2, 0),
                   8 * (1 + 7.0 / 16));
}

TEST(CostModelTest, SchedulePreconditions) {
  EXPECT_TRUE(isScheduleValid(ir::Schedule::Interleaved, 4, 8, 2));
  EXPECT_FALSE(isScheduleValid(ir::Schedule::Interleaved, 4, 6, 2));
  EXPECT_FALSE(isScheduleValid(ir::Schedule::ZeroBubble, 8, 4, 1));
  // ZB-V: any m (PyTorch's ScheduleZBVZeroBubble orders fewer than 2p − 1 as 2p − 1 with the
  // missing ones' passes left out; ZeroBubbleVWithFewMicrobatches plays them).
  EXPECT_TRUE(isScheduleValid(ir::Schedule::ZeroBubbleV, 8, 1, 2));
  EXPECT_TRUE(isScheduleValid(ir::Schedule::ZeroBubbleV, 8, 14, 2));
  // DualPipeV: m ≥ 2p, any number of ranks (dualpipev.py asserts num_chunks >= num_ranks * 2);
  // DualPipe: an even number of ranks and of micro-batches, m ≥ 2p (dualpipe.py).
  EXPECT_FALSE(isScheduleValid(ir::Schedule::DualPipeV, 8, 15, 2));
  EXPECT_TRUE(isScheduleValid(ir::Schedule::DualPipeV, 7, 14, 2));
  EXPECT_TRUE(isScheduleValid(ir::Schedule::DualPipeV, 8, 16, 2));
  EXPECT_FALSE(isScheduleValid(ir::Schedule::DualPipe, 7, 28, 2));
  EXPECT_FALSE(isScheduleValid(ir::Schedule::DualPipe, 8, 17, 2));
  EXPECT_TRUE(isScheduleValid(ir::Schedule::DualPipe, 8, 16, 2));
}

// The routed rows of an MoE layer (GShard, Lepikhin et al. 2021, §2.2): a micro-batch of 2
// sequences of 1,024 tokens over cp = 2 leaves T = 1,024 tokens per device; 64 experts, top-4.
/// The MoE layer of the two tests below: 64 experts of width 256, top-4, hidden 512, 1,024 tokens.
ir::TransformerConfig moeShapeConfig() {
  ir::TransformerConfig config;
  config.layers = 2;
  config.hidden = 512;
  config.heads = 8;
  config.seq = 1024;
  config.vocab = 1000;
  config.moe.experts = 64;
  config.moe.topK = 4;
  config.moe.expertFfn = 256;
  return config;
}

/// A micro-batch of 2 over cp = 2 and ep = 8.
Layout moeShapeLayout() {
  Layout layout;
  layout.microBatch = 2;
  layout.context = 2;
  layout.expert = 8;
  return layout;
}

TEST(CostModelTest, MoeShapeDroplessAndPadded) {
  ir::TransformerConfig config = moeShapeConfig();
  Layout layout = moeShapeLayout();

  // Dropless: T·k = 4,096 rows sent; each of the 64/8 = 8 local experts computes
  // T·k·ep/E = 1024·4·8/64 = 512 rows.
  MoeShape dropless = getMoeShape(config, layout);
  EXPECT_DOUBLE_EQ(dropless.tokens, 1024);
  EXPECT_DOUBLE_EQ(dropless.dispatchRows, 4096);
  EXPECT_DOUBLE_EQ(dropless.localExperts, 8);
  EXPECT_DOUBLE_EQ(dropless.tokensPerExpert, 512);
  EXPECT_DOUBLE_EQ(dropless.capacity, 0);

  // An imbalance of 1.5 makes the busiest expert compute 768 rows; the bytes sent do not change.
  config.moe.imbalance = 1.5;
  EXPECT_DOUBLE_EQ(getMoeShape(config, layout).tokensPerExpert, 768);
  EXPECT_DOUBLE_EQ(getMoeShape(config, layout).dispatchRows, 4096);

  // Capacity factor 1.1: C = ⌈1.1·1024·4/64⌉ = ⌈70.4⌉ = 71 rows per expert per device, padded:
  // 64·71 = 4,544 rows sent, and each expert computes the 8 sources' 8·71 = 568 rows.
  config.moe.imbalance = 1;
  config.moe.capacityFactor = 1.1;
  MoeShape padded = getMoeShape(config, layout);
  EXPECT_DOUBLE_EQ(padded.capacity, 71);
  EXPECT_DOUBLE_EQ(padded.dispatchRows, 4544);
  EXPECT_DOUBLE_EQ(padded.tokensPerExpert, 568);
}

// Megatron-Core's MoE parallel folding (--expert-tensor-parallel-size 1; Liu et al. 2025): with
// tp = 2 folded into ep = 8, the same micro-batch as above routes T = 2·1024/(2·2) = 512 tokens
// per device (its own sequence shard), T·k = 2,048 rows, to a group of 16 devices holding
// 64/16 = 4 whole experts each; each expert computes T·k·16/64 = 512 rows, as split. Split over
// tp = 2 instead, every tensor rank routes all 1,024 tokens to the 8 expert ranks.
TEST(CostModelTest, MoeShapeFolded) {
  ir::TransformerConfig config = moeShapeConfig();
  Layout layout = moeShapeLayout();
  layout.tensor = 2;
  layout.sequenceParallel = true;
  MoeShape split = getMoeShape(config, layout);
  EXPECT_DOUBLE_EQ(split.tokens, 1024);
  EXPECT_DOUBLE_EQ(split.group, 8);
  EXPECT_DOUBLE_EQ(split.localExperts, 8);
  layout.expertFold = true;
  MoeShape folded = getMoeShape(config, layout);
  EXPECT_DOUBLE_EQ(folded.tokens, 512);
  EXPECT_DOUBLE_EQ(folded.dispatchRows, 2048);
  EXPECT_DOUBLE_EQ(folded.group, 16);
  EXPECT_DOUBLE_EQ(folded.localExperts, 4);
  EXPECT_DOUBLE_EQ(folded.tokensPerExpert, 512);
}

// The sequence axes folded into the group (expert_context = fold): each context rank still routes
// its own b·s/cp = 2·1024/2 = 1,024 tokens (T·k = 4,096 rows), to a group of ep·cp = 16 devices of
// 64/16 = 4 experts, each computing T·k·16/64 = 1,024 rows; with the tensor axes folded as well
// (t = 2) the group is 32 devices of 2 experts, T = 512, and each expert computes 512·4·32/64.
TEST(CostModelTest, MoeShapeContextFolded) {
  ir::TransformerConfig config = moeShapeConfig();
  Layout layout = moeShapeLayout();
  layout.expertContextFold = true;
  MoeShape folded = getMoeShape(config, layout);
  EXPECT_DOUBLE_EQ(folded.tokens, 1024);
  EXPECT_DOUBLE_EQ(folded.dispatchRows, 4096);
  EXPECT_DOUBLE_EQ(folded.group, 16);
  EXPECT_DOUBLE_EQ(folded.localExperts, 4);
  EXPECT_DOUBLE_EQ(folded.tokensPerExpert, 1024);
  layout.tensor = 2;
  layout.sequenceParallel = true;
  layout.expertFold = true;
  MoeShape both = getMoeShape(config, layout);
  EXPECT_DOUBLE_EQ(both.tokens, 512);
  EXPECT_DOUBLE_EQ(both.group, 32);
  EXPECT_DOUBLE_EQ(both.localExperts, 2);
  EXPECT_DOUBLE_EQ(both.tokensPerExpert, 1024);
}

// Folded, a device's expert products do the FLOPs of the split ones (half the experts at twice
// the width) and its router scores half the tokens: a forward differs by the router's
// 2·h·E·(T/t − T) = 2·256·16·(64 − 128) FLOPs (smallTransformer: h 256, 128 tokens).
TEST(CostModelTest, FoldedExpertsDoTheSplitWorkButRouteTheirOwnTokens) {
  ir::Model model = smallTransformer(2);
  model.transformer.moe.experts = 16;
  model.transformer.moe.topK = 2;
  model.transformer.moe.expertFfn = 384;
  Layout layout;
  layout.expert = 4;
  layout.tensor = 2;
  layout.sequenceParallel = true;
  Work split = getUnitWork(model, UnitKind::Layer, 0, PassKind::Forward, layout);
  layout.expertFold = true;
  Work folded = getUnitWork(model, UnitKind::Layer, 0, PassKind::Forward, layout);
  double expected = 2.0 * 256 * 16 * (64 - 128);
  EXPECT_NEAR(folded.getFlops() - split.getFlops(), expected, 1e-9 * split.getFlops());
  // The grouped products: 16/(4·2) = 2 experts of 2·384 = 768 gate-and-up columns, against
  // 16/4 = 4 of 384.
  auto experts = [](const Work &work) {
    for (const Gemm &gemm : work.gemms)
      if (gemm.name == "experts gate and up")
        return std::pair{gemm.batch, gemm.n};
    return std::pair{0.0, 0.0};
  };
  EXPECT_EQ(experts(split), std::pair(4.0, 384.0));
  EXPECT_EQ(experts(folded), std::pair(2.0, 768.0));
}

// Megatron-Core's all-to-all dispatcher sorts the rows a device receives, grouped by source rank,
// into its local experts' order before the experts and back before the combine ("Permutation 2",
// sort_chunks_by_idxs in megatron/core/transformer/moe/token_dispatcher.py), one more read and
// write of the dispatch buffer each way: T·k rows of h, 2·2·(128·2)·256·2 B = 262,144 B in each
// pass for smallTransformer (h 256, 128 tokens, bf16) with top 2. Not with a single local expert
// (16 experts over ep = 16), without expert parallelism, or under the flex dispatcher, whose
// DeepEP and HybridEP backends permute once each way like the first permutation.
TEST(CostModelTest, AllToAllDispatcherSortsTheReceivedRowsByLocalExpert) {
  ir::Model model = smallTransformer(2);
  model.transformer.moe.experts = 16;
  model.transformer.moe.topK = 2;
  model.transformer.moe.expertFfn = 384;
  auto sortBytes = [&](const Layout &layout, PassKind pass) {
    double bytes = 0;
    for (const MemoryOp &op : getUnitWork(model, UnitKind::Layer, 0, pass, layout).memory)
      if (llvm::StringRef(op.name).starts_with("received rows sorted by local expert"))
        bytes += op.bytes;
    return bytes;
  };
  Layout layout;
  layout.expert = 4;
  const double expected = 2.0 * 2 * (128 * 2) * 256 * 2;
  EXPECT_DOUBLE_EQ(sortBytes(layout, PassKind::Forward), expected);
  EXPECT_DOUBLE_EQ(sortBytes(layout, PassKind::Backward), expected);
  for (ir::ExpertDispatcher flex : {ir::ExpertDispatcher::DeepEP, ir::ExpertDispatcher::HybridEP}) {
    layout.dispatcher = flex;
    EXPECT_DOUBLE_EQ(sortBytes(layout, PassKind::Forward), 0);
  }
  layout.dispatcher = ir::ExpertDispatcher::AllToAll;
  layout.expert = 16;
  EXPECT_DOUBLE_EQ(sortBytes(layout, PassKind::Forward), 0);
  layout.expert = 1;
  EXPECT_DOUBLE_EQ(sortBytes(layout, PassKind::Forward), 0);
}

// An MoE layer's FLOPs at even routing equal a dense layer's with the MLP replaced by top_k experts
// and the router: the difference in a forward is 2·T·h·E for the router plus
// 3 · 2·T·h·(k·f_e − f) for the swiglu products.
TEST(CostModelTest, MoeLayerFlops) {
  ir::Model model = smallTransformer(2);
  ir::TransformerConfig &config = model.transformer;
  config.moe.experts = 16;
  config.moe.topK = 2;
  config.moe.expertFfn = 384;
  config.moe.denseLayers = 1; // layer 0 dense, layer 1 MoE
  Layout layout;
  layout.expert = 4;
  double dense = getUnitWork(model, UnitKind::Layer, 0, PassKind::Forward, layout).getFlops();
  double moe = getUnitWork(model, UnitKind::Layer, 1, PassKind::Forward, layout).getFlops();
  double t = 128, h = 256;
  double expected = 2 * t * h * 16 + 3 * 2 * t * h * (2 * 384 - 1024);
  EXPECT_NEAR(moe - dense, expected, 1e-6 * std::abs(expected));
}

/// Eight layers, two dense and then an MoE layer every other layer (layers 2, 4, 6).
ir::Model mixedMoeTransformer() {
  ir::Model model = smallTransformer(8);
  ir::MoeConfig &moe = model.transformer.moe;
  moe.experts = 16;
  moe.topK = 2;
  moe.expertFfn = 384;
  moe.denseLayers = 2;
  moe.every = 2;
  return model;
}

// getUnitWorkClass says what getUnitWork reads of the layer, which the lowering relies on to
// compute each class's work once: with two dense layers and then an MoE layer every other layer
// (layers 2, 4, 6), the layers of one class have the same work in every pass, and the two classes
// differ (the experts' products and kernels against the MLP's).
TEST(CostModelTest, LayersOfOneWorkClassHaveTheSameWork) {
  ir::Model model = mixedMoeTransformer();
  Layout layout;
  layout.expert = 4;
  const bool moeLayers[] = {false, false, true, false, true, false, true, false};
  for (int64_t layer = 0; layer < 8; ++layer)
    EXPECT_EQ(getUnitWorkClass(model, UnitKind::Layer, layer), moeLayers[layer] ? 1 : 0) << layer;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward, PassKind::RecomputeFull,
                        PassKind::RecomputeSelective}) {
    Work dense = getUnitWork(model, UnitKind::Layer, 0, pass, layout);
    Work moe = getUnitWork(model, UnitKind::Layer, 2, pass, layout);
    EXPECT_TRUE(dense.getFlops() != moe.getFlops() ||
                dense.getMemoryBytes() != moe.getMemoryBytes())
        << static_cast<int>(pass);
    for (int64_t layer = 1; layer < 8; ++layer) {
      Work work = getUnitWork(model, UnitKind::Layer, layer, pass, layout);
      const Work &same = moeLayers[layer] ? moe : dense;
      EXPECT_EQ(work.getFlops(), same.getFlops()) << layer;
      EXPECT_EQ(work.getMemoryBytes(), same.getMemoryBytes()) << layer;
      ASSERT_EQ(work.gemms.size(), same.gemms.size()) << layer;
      for (size_t i = 0; i < work.gemms.size(); ++i)
        EXPECT_EQ(work.gemms[i].name, same.gemms[i].name) << layer;
    }
  }
  // The embedding and the head are one class each.
  EXPECT_EQ(getUnitWorkClass(model, UnitKind::Embedding, -1), 0);
  EXPECT_EQ(getUnitWorkClass(model, UnitKind::Head, 8), 0);
}

// The lowering computes each unit's collectives once per class of units too: every layer of a
// class has the same tensor-parallel, context-parallel and expert collectives as the class's
// first, in each pass and recomputation, under tensor, sequence, context and expert parallelism
// with the load-balancing loss.
TEST(CostModelTest, LayersOfOneWorkClassHaveTheSameCollectives) {
  ir::Model model = mixedMoeTransformer();
  model.transformer.moe.auxLoss = 0.01;
  plan::UnitLayout layout;
  layout.microBatch = 2;
  layout.tensor = 2;
  layout.sequenceParallel = true;
  layout.context = 2;
  layout.expert = 4;
  layout.samples = 8;
  layout.regather = true;
  layout.fp8 = true;
  auto same = [](const std::vector<plan::UnitCollective> &x,
                 const std::vector<plan::UnitCollective> &y) {
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].kind != y[i].kind || x[i].over != y[i].over || x[i].elements != y[i].elements ||
          llvm::StringRef(x[i].what) != y[i].what || x[i].inputGradient != y[i].inputGradient ||
          x[i].regather != y[i].regather || x[i].fp8 != y[i].fp8)
        return false;
    return true;
  };
  for (ir::ContextMethod method :
       {ir::ContextMethod::Ring, ir::ContextMethod::AllGather, ir::ContextMethod::AllToAll}) {
    layout.contextMethod = method;
    // The first layer of each class: 0 (dense) and 2 (MoE).
    auto first = [&](int64_t layer) {
      return getUnitWorkClass(model, UnitKind::Layer, layer) ? 2 : 0;
    };
    for (bool forward : {true, false}) {
      std::vector<plan::UnitCollective> dense =
          plan::getUnitCollectives(model, UnitKind::Layer, 0, forward, layout);
      std::vector<plan::UnitCollective> moe =
          plan::getUnitCollectives(model, UnitKind::Layer, 2, forward, layout);
      // The classes differ: the MoE layer has its all-to-alls.
      EXPECT_FALSE(same(dense, moe));
      for (int64_t layer = 1; layer < 8; ++layer)
        EXPECT_TRUE(
            same(plan::getUnitCollectives(model, UnitKind::Layer, layer, forward, layout),
                 plan::getUnitCollectives(model, UnitKind::Layer, first(layer), forward, layout)))
            << layer << " forward " << forward;
    }
    for (ir::ActivationMode mode :
         {ir::ActivationMode::RecomputeFull, ir::ActivationMode::RecomputeAttention})
      for (int64_t layer = 1; layer < 8; ++layer)
        EXPECT_TRUE(same(
            plan::getRecomputedCollectives(model, UnitKind::Layer, layer, mode, layout),
            plan::getRecomputedCollectives(model, UnitKind::Layer, first(layer), mode, layout)))
            << layer;
  }
}

// projections = separate in an MoE layer: the attention's q, k, v, the routed experts' gate and
// up and the shared experts' gate and up are three inputs, summed apart in the backward, even
// when the experts' rows equal the tokens (top-1 over 16 experts on 16 expert ranks: one local
// expert of T rows, the shape of the shared expert over T tokens).
TEST(CostModelTest, SeparateProjectionsOfAnMoeLayerSumEachInputApart) {
  ir::Model fused = smallTransformer(2);
  ir::TransformerConfig &config = fused.transformer;
  config.moe.experts = 16;
  config.moe.topK = 1;
  config.moe.expertFfn = 384;
  config.moe.sharedExperts = 1;
  config.moe.sharedExpertFfn = 512;
  config.moe.denseLayers = 1; // layer 0 dense, layer 1 MoE
  ir::Model separate = fused;
  separate.transformer.projections = ir::Projections::Separate;
  Layout layout;
  layout.expert = 16;
  double T = 128, h = 256, e = 2;
  ASSERT_DOUBLE_EQ(getMoeShape(config, layout).tokensPerExpert, T);
  ASSERT_DOUBLE_EQ(getMoeShape(config, layout).localExperts, 1);
  auto bytes = [&](const ir::Model &model, PassKind pass, const Layout &l) {
    return getUnitWork(model, UnitKind::Layer, 1, pass, l).getMemoryBytes();
  };
  // (3 + 1)·T·h·e for q, k, v and (2 + 1)·T·h·e for each of the two MLPs' gate and up.
  double sums = (4 + 3 + 3) * T * h * e;
  EXPECT_NEAR(bytes(separate, PassKind::Backward, layout) -
                  bytes(fused, PassKind::Backward, layout),
              sums, 1e-9 * sums);
  // Under FP8 each of the three inputs is cast once, as with fused products.
  Layout fp8 = layout;
  fp8.precision = ir::Precision::MixedFP8;
  EXPECT_NEAR(bytes(separate, PassKind::Forward, fp8), bytes(fused, PassKind::Forward, fp8),
              1e-9 * bytes(fused, PassKind::Forward, fp8));
}

/// Llama 3.1 8B's layer shape (Meta's published configuration: hidden 4096, 32 heads, 8 key/value
/// heads, FFN 14336, sequence 8192), flash attention, no biases.
ir::Model llama8bLayer() {
  ir::Model model = smallTransformer(1);
  ir::TransformerConfig &config = model.transformer;
  config.hidden = 4096;
  config.heads = 32;
  config.kvHeads = 8;
  config.seq = 8192;
  config.vocab = 128256;
  config.ffn = 14336;
  config.bias = false;
  config.positions = ir::PositionKind::Rope;
  return model;
}

TEST(CostModelTest, PerOpRecomputationKeepsTorchtitansTensors) {
  // torchtitan's "op" policy keeps, per layer: the checkpoint's input x [T, h], the outputs of
  // wq [T, a·d], wv [T, kv·d], the attention kernel (out [T, a·d] and the fp32 log-sum-exp
  // [a, T]), w1 [T, f] and w2 [T, h]; bf16 but the log-sum-exp. Counted here tensor by tensor.
  ir::Model model = llama8bLayer();
  double b = 2, s = 8192, T = b * s, h = 4096, a = 32, kv = 8, d = 128, f = 14336;
  Layout layout;
  layout.microBatch = b;
  layout.activations = ir::ActivationMode::RecomputeOps;
  double kept = 2 * (T * h + T * a * d + T * kv * d + T * a * d + T * f + T * h) + 4 * a * T;
  EXPECT_NEAR(getLayerActivationBytes(model.transformer, layout), kept, 1e-9 * kept);
  // Under tensor and sequence parallelism over t = 4 the column-split outputs and the input are
  // split by t, w2's output is the whole partial sum, and the two reduce-scatters' outputs
  // [T/t, h] are kept too.
  double t = 4;
  layout.tensor = 4;
  layout.sequenceParallel = true;
  double split = 2 * (T * h / t + T * a * d / t + T * kv * d / t + T * a * d / t + T * f / t +
                      T * h + 2 * T * h / t) +
                 4 * a * T / t;
  EXPECT_NEAR(getLayerActivationBytes(model.transformer, layout), split, 1e-9 * split);
}

TEST(CostModelTest, PerOpRecomputationRepeatsTheProductsItDoesNotKeep) {
  // wk, wo and w3 again: 2·T·h·(kv·d + a·d + f) FLOPs, and no attention core.
  ir::Model model = llama8bLayer();
  double T = 8192, h = 4096, kvd = 8 * 128, f = 14336;
  Layout layout;
  layout.activations = ir::ActivationMode::RecomputeOps;
  Work work = getUnitWork(model, UnitKind::Layer, 0, PassKind::RecomputeOps, layout);
  double expected = 2 * T * h * (kvd + h + f);
  EXPECT_NEAR(work.getFlops(), expected, 1e-9 * expected);
  EXPECT_TRUE(work.attention.empty());
  // A gelu MLP's second product feeds nothing the backward reads: wk and wo only.
  model.transformer.mlp = ir::MlpActivation::Gelu;
  work = getUnitWork(model, UnitKind::Layer, 0, PassKind::RecomputeOps, layout);
  EXPECT_NEAR(work.getFlops(), 2 * T * h * (kvd + h), 1e-9 * expected);
  EXPECT_EQ(getRecomputePass(ir::ActivationMode::RecomputeOps), PassKind::RecomputeOps);
  EXPECT_FALSE(getRecomputePass(ir::ActivationMode::Keep).has_value());
}

TEST(CostModelTest, UnfusedCrossEntropyBuffers) {
  // Fused: bf16 logits and an fp32 softmax, 6 B per logit. Unfused: in the backward the kept
  // fp32 log-softmax, its gradient and the copy's gradient, 12 B per logit (the forward's bf16
  // logits, fp32 copy and log-softmax are 10).
  ir::Model model = llama8bLayer();
  double logits = 8192.0 * 128256;
  Layout layout;
  EXPECT_NEAR(getHeadActivationBytes(model.transformer, layout), 6 * logits, 1e-9 * logits);
  layout.crossEntropy = ir::CrossEntropyKind::Unfused;
  EXPECT_NEAR(getHeadActivationBytes(model.transformer, layout), 12 * logits, 1e-9 * logits);
  layout.tensor = 2;
  EXPECT_NEAR(getHeadActivationBytes(model.transformer, layout), 6 * logits, 1e-9 * logits);
}

TEST(CostModelTest, ChunkedCrossEntropyKeepsOneSequencesLogits) {
  // Chunked: one sequence's bf16 logits at a time, the gradient written over them: 2·s·v/t bytes
  // whatever the micro-batch, where the fused loss holds 6 B per logit of the whole micro-batch.
  ir::Model model = llama8bLayer();
  double sequence = 8192.0 * 128256;
  Layout layout;
  layout.microBatch = 4;
  EXPECT_NEAR(getHeadActivationBytes(model.transformer, layout), 6 * 4 * sequence, 1e-9 * sequence);
  layout.crossEntropy = ir::CrossEntropyKind::Chunked;
  EXPECT_NEAR(getHeadActivationBytes(model.transformer, layout), 2 * sequence, 1e-9 * sequence);
  layout.tensor = 2;
  EXPECT_NEAR(getHeadActivationBytes(model.transformer, layout), sequence, 1e-9 * sequence);
}

/// One PyTorch kernel of an eager operator: the bytes it reads and writes per element.
struct EagerKernel {
  double read, written;
};
double sumKernels(std::initializer_list<EagerKernel> kernels) {
  double bytes = 0;
  for (const EagerKernel &kernel : kernels)
    bytes += kernel.read + kernel.written;
  return bytes;
}

TEST(CostModelTest, EagerKernelsMoveTheBytesOfEachOperator) {
  // torchtitan's modules at commit 9dec370 in bf16 (e = 2), each operator one kernel, listed
  // here one by one with what it reads and writes per element (fp32: 4 bytes).
  double e = 2;
  // RMSNorm: (x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight.
  double normForward = sumKernels({{e, 4},   // x.float()
                                   {4, 4},   // pow(2)
                                   {4, 0},   // mean over the row
                                   {4, 4},   // the product by the row's rsqrt
                                   {4, e},   // type_as(x)
                                   {e, e}}); // the product by the weight
  // Its autograd: MulBackward (weight) grad·weight, grad·normed and the weight's sum;
  // ToCopyBackward; MulBackward (rsqrt) grad·rsqrt, grad·x and its row sum; MeanBackward's
  // expanded division; pow_backward grad·(2·x.pow(1)): the copy, the scalar product, the product;
  // the two gradients of x added; ToCopyBackward of x.float().
  double normBackward = sumKernels({{e, e},
                                    {2 * e, e},
                                    {e, 0},
                                    {e, 4},
                                    {4, 4},
                                    {8, 4},
                                    {4, 0},
                                    {0, 4},
                                    {4, 4},
                                    {4, 4},
                                    {8, 4},
                                    {8, 4},
                                    {4, e}});
  // The rotary embedding: x.float(), the complex product, type_as; the backward the same three.
  double rotary = sumKernels({{e, 4}, {4, 4}, {4, e}});
  // swiglu: silu, then the product with w3's output; backward: the product's two gradients and
  // silu_backward.
  double swigluForward = sumKernels({{e, e}, {2 * e, e}});
  double swigluBackward = sumKernels({{2 * e, e}, {2 * e, e}, {2 * e, e}});

  ir::Model model = llama8bLayer();
  model.transformer.norm = ir::NormKind::RmsNorm;
  double T = 8192, h = 4096, a = 32, kv = 8, d = 128, f = 14336;
  Layout fused, eager;
  eager.kernels = ir::KernelMode::Eager;
  auto extra = [&](UnitKind unit, PassKind pass, Layout base) {
    Layout other = base;
    other.kernels = ir::KernelMode::Eager;
    return getUnitWork(model, unit, 0, pass, other).getMemoryBytes() -
           getUnitWork(model, unit, 0, pass, base).getMemoryBytes();
  };
  // Over the fused kernels (a norm 2e and 3e, the rotary embedding 2e each way, swiglu 3e and
  // 5e), plus K and V repeated from kv to a heads (kv·d read, a·d written) and summed back.
  double expand = 2 * T * (a + kv) * d * e;
  double forward = 2 * T * h * (normForward - 2 * e) + T * (a + kv) * d * (rotary - 2 * e) +
                   expand + T * f * (swigluForward - 3 * e);
  double backward = 2 * T * h * (normBackward - 3 * e) + T * (a + kv) * d * (rotary - 2 * e) +
                    expand + T * f * (swigluBackward - 5 * e);
  EXPECT_NEAR(extra(UnitKind::Layer, PassKind::Forward, fused), forward, 1e-9 * forward);
  EXPECT_NEAR(extra(UnitKind::Layer, PassKind::Backward, fused), backward, 1e-9 * backward);
  Layout perOp = fused;
  perOp.activations = ir::ActivationMode::RecomputeOps;
  EXPECT_NEAR(extra(UnitKind::Layer, PassKind::RecomputeOps, perOp), forward, 1e-9 * forward);
  EXPECT_NEAR(extra(UnitKind::Head, PassKind::Forward, fused), T * h * (normForward - 2 * e),
              1e-9 * forward);
  // LayerNorm is one kernel eager or not; without grouped heads nothing is repeated.
  model.transformer.norm = ir::NormKind::LayerNorm;
  model.transformer.kvHeads = 32;
  double noNorm = 2 * T * a * d * (rotary - 2 * e) + T * f * (swigluForward - 3 * e);
  EXPECT_NEAR(extra(UnitKind::Layer, PassKind::Forward, fused), noNorm, 1e-9 * noNorm);
  model.transformer.norm = ir::NormKind::RmsNorm;
  model.transformer.kvHeads = 8;

  // In fp32 the casts are no kernels: pow, mean, the rsqrt product and the weight's product
  // forward; the rotary embedding's complex product alone. Over the fused 2·4 and 2·4.
  Layout fp32 = fused;
  fp32.precision = ir::Precision::FP32;
  double fp32Forward = 2 * T * h * (sumKernels({{4, 4}, {4, 0}, {4, 4}, {4, 4}}) - 8) +
                       T * (a + kv) * d * (sumKernels({{4, 4}}) - 8) + 2 * T * (a + kv) * d * 4 +
                       T * f * 4 * (5 - 3);
  EXPECT_NEAR(extra(UnitKind::Layer, PassKind::Forward, fp32), fp32Forward, 1e-9 * fp32Forward);

  // Kept under `keep`: each RMSNorm's fp32 input copy (4 bytes) where the fused norm keeps
  // nothing more, K and V repeated to a heads where the fused kernel reads kv, silu's output.
  double keptExtra = 2 * T * h * 4 + 2 * T * (a - kv) * d * e + T * f * e;
  double kept = getLayerActivationBytes(model.transformer, eager) -
                getLayerActivationBytes(model.transformer, fused);
  EXPECT_NEAR(kept, keptExtra, 1e-9 * keptExtra);
  // Recomputed per op, the same tensors are kept eager or not.
  Layout eagerOp = perOp;
  eagerOp.kernels = ir::KernelMode::Eager;
  EXPECT_EQ(getLayerActivationBytes(model.transformer, eagerOp),
            getLayerActivationBytes(model.transformer, perOp));

  // What placec does not model eager is refused.
  EXPECT_TRUE(
      getEagerObstacle(model, ir::ActivationMode::RecomputeOps, ir::Precision::MixedBF16).empty());
  EXPECT_FALSE(
      getEagerObstacle(model, ir::ActivationMode::RecomputeSelective, ir::Precision::MixedBF16)
          .empty());
  EXPECT_FALSE(getEagerObstacle(model, ir::ActivationMode::Keep, ir::Precision::MixedFP8).empty());
}

TEST(CostModelTest, CheckpointedCoreAttentionRunsTheKernelAgainAndDropsWhatItAloneKeeps) {
  // recompute(attention), Megatron-Core's checkpoint of the core attention: its recompute pass is
  // the attention kernel's forward, nothing else; it keeps what keep keeps but the log-sum-exp
  // (4 bytes per head and token) and, under saved = fp8, the kernel's BF16 output, whose FP8 copy
  // the output projection keeps. Materialized, it is Korthikanti et al.'s selective set.
  ir::Model model = llama8bLayer();
  double T = 8192, a = 32, d = 128;
  Layout keep, core;
  core.activations = ir::ActivationMode::RecomputeAttention;
  ASSERT_EQ(getRecomputePass(core.activations), PassKind::RecomputeAttention);
  Work forward = getUnitWork(model, UnitKind::Layer, 0, PassKind::Forward, keep);
  Work again = getUnitWork(model, UnitKind::Layer, 0, PassKind::RecomputeAttention, core);
  EXPECT_TRUE(again.gemms.empty());
  EXPECT_TRUE(again.memory.empty());
  ASSERT_EQ(again.attention.size(), forward.attention.size());
  EXPECT_EQ(again.getFlops(), forward.attention.front().getFlops());
  double lse = T * a * 4;
  EXPECT_NEAR(getLayerActivationBytes(model.transformer, keep) -
                  getLayerActivationBytes(model.transformer, core),
              lse, 1e-9 * lse);
  Layout keepFp8 = keep, coreFp8 = core;
  for (Layout *layout : {&keepFp8, &coreFp8}) {
    layout->precision = ir::Precision::MixedFP8;
    layout->fp8Saved = true;
  }
  double output = T * a * d * 2;
  EXPECT_NEAR(getLayerActivationBytes(model.transformer, keepFp8) -
                  getLayerActivationBytes(model.transformer, coreFp8),
              lse + output, 1e-9 * (lse + output));
  model.transformer.attention = ir::AttentionKind::Materialized;
  Layout selective;
  selective.activations = ir::ActivationMode::RecomputeSelective;
  EXPECT_EQ(getLayerActivationBytes(model.transformer, core),
            getLayerActivationBytes(model.transformer, selective));
  EXPECT_EQ(
      getUnitWork(model, UnitKind::Layer, 0, PassKind::RecomputeAttention, core).getFlops(),
      getUnitWork(model, UnitKind::Layer, 0, PassKind::RecomputeSelective, selective).getFlops());
}

TEST(CostModelTest, MegatronsLossesMoveTheBytesOfTheirKernels) {
  // Megatron-Core's vocabulary-parallel cross-entropy (megatron/core/tensor_parallel/
  // cross_entropy.py at core_r0.8.0) over bf16 logits (e = 2), per logit, each kernel's reads and
  // writes. Unfused: the fp32 copy, the maximum, the subtraction, the exponential, the sum and the
  // division in place; backward the product by the loss's gradient in place and the cast back.
  // Jit-fused (fused_cross_entropy.py): calculate_logits_max (the copy and its maximum in one
  // pass), calculate_predicted_logits (subtraction, exponential and sum), calculate_cross_entropy
  // _loss (the division); backward calculate_gradients (the product written back, the cast
  // written beside it). Transformer Engine's (transformer_engine/pytorch/cross_entropy.py): one
  // kernel each way, reading the logits and writing their gradient over them.
  double e = 2;
  double unfusedForward = sumKernels({{e, 4}, {4, 0}, {4, 4}, {4, 4}, {4, 0}, {4, 4}});
  double unfusedBackward = sumKernels({{4, 4}, {4, e}});
  double jitForward = sumKernels({{e, 4}, {4, 4}, {4, 4}});
  double jitBackward = sumKernels({{4, 4 + e}});
  double teForward = sumKernels({{e, e}}), teBackward = sumKernels({{e, e}});
  ir::Model model = llama8bLayer();
  double logits = 8192 * 128256.0;
  auto bytes = [&](ir::CrossEntropyKind kind, PassKind pass) {
    Layout layout;
    layout.crossEntropy = kind;
    return getUnitWork(model, UnitKind::Head, 0, pass, layout).getMemoryBytes();
  };
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    bool backward = pass == PassKind::Backward;
    double te = bytes(ir::CrossEntropyKind::Fused, pass);
    double unfused =
        (backward ? unfusedBackward : unfusedForward) - (backward ? teBackward : teForward);
    double jit = (backward ? jitBackward : jitForward) - (backward ? teBackward : teForward);
    EXPECT_NEAR(bytes(ir::CrossEntropyKind::VocabParallel, pass) - te, logits * unfused,
                1e-9 * logits * unfused);
    EXPECT_NEAR(bytes(ir::CrossEntropyKind::FusedVocabParallel, pass) - te, logits * jit,
                1e-9 * logits * jit);
  }
  // The jit-fused loss keeps what the fused one keeps: the fp32 softmax beside the logits.
  Layout te, jit;
  jit.crossEntropy = ir::CrossEntropyKind::FusedVocabParallel;
  EXPECT_EQ(getHeadActivationBytes(model.transformer, jit),
            getHeadActivationBytes(model.transformer, te));
}

TEST(CostModelTest, SquaredReluIsGelusShapeAndItsOwnEagerKernels) {
  // Squared ReLU (`mlp = relu2`) is a two-matrix MLP like GELU: the same products, the same kept
  // tensors and, fused (NeMo's and Megatron-LM's torch.compile'd squared_relu), one kernel each
  // way. Eager, torch.pow(F.relu(x), 2) is two kernels, and autograd runs pow_backward,
  // grad * (2 * r.pow(1)): the copy, the scalar product and the product, then relu's
  // threshold_backward; GELU is one kernel each way, eager or not.
  double e = 2;
  double relu2Forward = sumKernels({{e, e}, {e, e}});
  double relu2Backward = sumKernels({{e, e}, {e, e}, {2 * e, e}, {2 * e, e}});
  double geluForward = sumKernels({{e, e}}), geluBackward = sumKernels({{2 * e, e}});
  ir::Model gelu = llama8bLayer(), relu2 = llama8bLayer();
  gelu.transformer.mlp = ir::MlpActivation::Gelu;
  relu2.transformer.mlp = ir::MlpActivation::Relu2;
  double T = 8192, f = 14336;
  Layout fused, eager;
  eager.kernels = ir::KernelMode::Eager;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    for (const Layout &layout : {fused, eager}) {
      Work a = getUnitWork(gelu, UnitKind::Layer, 0, pass, layout);
      Work b = getUnitWork(relu2, UnitKind::Layer, 0, pass, layout);
      EXPECT_EQ(a.getFlops(), b.getFlops());
    }
    double delta = getUnitWork(relu2, UnitKind::Layer, 0, pass, fused).getMemoryBytes() -
                   getUnitWork(gelu, UnitKind::Layer, 0, pass, fused).getMemoryBytes();
    EXPECT_EQ(delta, 0);
  }
  double eagerForward =
      getUnitWork(relu2, UnitKind::Layer, 0, PassKind::Forward, eager).getMemoryBytes() -
      getUnitWork(gelu, UnitKind::Layer, 0, PassKind::Forward, eager).getMemoryBytes();
  double eagerBackward =
      getUnitWork(relu2, UnitKind::Layer, 0, PassKind::Backward, eager).getMemoryBytes() -
      getUnitWork(gelu, UnitKind::Layer, 0, PassKind::Backward, eager).getMemoryBytes();
  double forward = T * f * (relu2Forward - geluForward);
  double backward = T * f * (relu2Backward - geluBackward);
  EXPECT_NEAR(eagerForward, forward, 1e-9 * forward);
  EXPECT_NEAR(eagerBackward, backward, 1e-9 * backward);
  for (const Layout &layout : {fused, eager})
    EXPECT_EQ(getLayerActivationBytes(relu2.transformer, layout),
              getLayerActivationBytes(gelu.transformer, layout));
}

TEST(CostModelTest, UnpadPacksQkvAndPadsTheOutputPerDevice) {
  // unpad = true: per layer and token, the forward reads and writes Q, K and V (2e per element)
  // and zero-fills, reads and scatters the output (3e); the backward gathers the output's
  // gradient (2e) and zero-fills and scatters those of Q, K and V (3e); the padded output is kept
  // beside the packed one (e per element). Llama 3.1 8B's layer (a = 32, kv = 8, d = 128) on a
  // tensor-parallel rank of 2 and a context-parallel rank of 2: T = 8192/2 tokens, heads split by
  // 2, bf16.
  ir::Model plain = llama8bLayer();
  ir::Model packed = plain;
  packed.transformer.unpad = true;
  double T = 8192 / 2, t = 2, a = 32, kv = 8, d = 128, e = 2;
  double qkv = T * (a + 2 * kv) * d / t, output = T * a * d / t;
  Layout layout;
  layout.tensor = 2;
  layout.context = 2;
  layout.sequenceParallel = true;
  auto extra = [&](PassKind pass, const Layout &of) {
    return getUnitWork(packed, UnitKind::Layer, 0, pass, of).getMemoryBytes() -
           getUnitWork(plain, UnitKind::Layer, 0, pass, of).getMemoryBytes();
  };
  double forward = (2 * qkv + 3 * output) * e, backward = (3 * qkv + 2 * output) * e;
  EXPECT_NEAR(extra(PassKind::Forward, layout), forward, 1e-9 * forward);
  EXPECT_NEAR(extra(PassKind::Backward, layout), backward, 1e-9 * backward);
  // Full recomputation repeats the forward's copies; selective recomputation repeats the norms
  // and the MLP activation, not the attention's inputs.
  Layout full = layout;
  full.activations = ir::ActivationMode::RecomputeFull;
  EXPECT_NEAR(extra(PassKind::RecomputeFull, full), forward, 1e-9 * forward);
  Layout selective = layout;
  selective.activations = ir::ActivationMode::RecomputeSelective;
  EXPECT_EQ(extra(PassKind::RecomputeSelective, selective), 0);
  // The FLOPs do not change, and the second copy of the output is kept under keep and selective
  // recomputation, not under full recomputation (the layer's input only).
  EXPECT_EQ(getUnitWork(packed, UnitKind::Layer, 0, PassKind::Forward, layout).getFlops(),
            getUnitWork(plain, UnitKind::Layer, 0, PassKind::Forward, layout).getFlops());
  for (const Layout &of : {layout, selective}) {
    EXPECT_NEAR(getLayerActivationBytes(packed.transformer, of) -
                    getLayerActivationBytes(plain.transformer, of),
                output * e, 1e-9 * output * e);
  }
  EXPECT_EQ(getLayerActivationBytes(packed.transformer, full),
            getLayerActivationBytes(plain.transformer, full));
  EXPECT_FALSE(getOpRecomputeObstacle(packed).empty());
  EXPECT_TRUE(getOpRecomputeObstacle(plain).empty());
}

TEST(CostModelTest, TrainMetricsAreUnfusedCrossEntropiesAfterTheBackward) {
  // train_metrics = n: n cross-entropy forwards over an fp32 copy of the logits, (e + 16) bytes
  // per logit each (the cast e in, 4 out; the log-softmax 8 in, 4 out), in the head's backward;
  // the forward, the layers and the activations do not change. Llama 3.1 8B's head at T = 8192
  // tokens over a vocabulary of 128256 split by a tensor-parallel degree of 2, bf16.
  ir::Model model = llama8bLayer();
  double T = 8192, V = 128256.0 / 2, e = 2;
  Layout plain;
  plain.tensor = 2;
  Layout metrics = plain;
  metrics.trainMetrics = 3;
  auto bytes = [&](UnitKind unit, PassKind pass, const Layout &of) {
    return getUnitWork(model, unit, 0, pass, of).getMemoryBytes();
  };
  double added = 3 * T * V * (e + 16);
  EXPECT_NEAR(bytes(UnitKind::Head, PassKind::Backward, metrics) -
                  bytes(UnitKind::Head, PassKind::Backward, plain),
              added, 1e-9 * added);
  EXPECT_EQ(bytes(UnitKind::Head, PassKind::Forward, metrics),
            bytes(UnitKind::Head, PassKind::Forward, plain));
  EXPECT_EQ(bytes(UnitKind::Layer, PassKind::Backward, metrics),
            bytes(UnitKind::Layer, PassKind::Backward, plain));
  EXPECT_EQ(getHeadActivationBytes(model.transformer, metrics),
            getHeadActivationBytes(model.transformer, plain));
}

TEST(CostModelTest, ComplexRotaryRunsAsPyTorchKernelsUnderCompile) {
  // rope_complex = true under fused kernels: torch.compile leaves the complex product to PyTorch's
  // kernel, so the rotary embedding of Q and K moves what eager PyTorch moves: x.float() (e read,
  // 4 written), the product (4, 4), type_as (4, e) per element, forward and backward alike.
  // Llama 3.1 8B's layer, T = 8192 tokens, a = 32, kv = 8 heads of d = 128, bf16 (e = 2).
  ir::Model real = llama8bLayer();
  ir::Model complex = real;
  complex.transformer.ropeComplex = true;
  double T = 8192, a = 32, kv = 8, d = 128, e = 2;
  double eagerRotary = sumKernels({{e, 4}, {4, 4}, {4, e}});
  double fusedRotary = 2 * e;
  EXPECT_TRUE(rotatesComplex(complex.transformer, ir::KernelMode::Fused));
  EXPECT_FALSE(rotatesComplex(real.transformer, ir::KernelMode::Fused));
  EXPECT_TRUE(rotatesComplex(real.transformer, ir::KernelMode::Eager));
  double extra = T * (a + kv) * d * (eagerRotary - fusedRotary);
  Layout perOp;
  perOp.activations = ir::ActivationMode::RecomputeOps;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward, PassKind::RecomputeOps}) {
    Layout layout = pass == PassKind::RecomputeOps ? perOp : Layout();
    Work with = getUnitWork(complex, UnitKind::Layer, 0, pass, layout);
    Work without = getUnitWork(real, UnitKind::Layer, 0, pass, layout);
    EXPECT_NEAR(with.getMemoryBytes() - without.getMemoryBytes(), extra, 1e-9 * extra);
    EXPECT_EQ(with.getFlops(), without.getFlops());
    // The same kernels eager: rope_complex adds nothing there.
    Layout eager = layout;
    eager.kernels = ir::KernelMode::Eager;
    EXPECT_EQ(getUnitWork(complex, UnitKind::Layer, 0, pass, eager).getMemoryBytes(),
              getUnitWork(real, UnitKind::Layer, 0, pass, eager).getMemoryBytes());
  }
  // Nothing else changes: the activations kept and the head's work.
  EXPECT_EQ(getLayerActivationBytes(complex.transformer, Layout()),
            getLayerActivationBytes(real.transformer, Layout()));
  EXPECT_EQ(getUnitWork(complex, UnitKind::Head, 0, PassKind::Forward, Layout()).getMemoryBytes(),
            getUnitWork(real, UnitKind::Head, 0, PassKind::Forward, Layout()).getMemoryBytes());
  // Without a rotary embedding there is no complex product.
  complex.transformer.positions = ir::PositionKind::Learned;
  EXPECT_FALSE(rotatesComplex(complex.transformer, ir::KernelMode::Eager));
}

TEST(CostModelTest, SeparateProjectionsReadTheirInputEachAndSumTheirGradients) {
  // projections = separate (torchtitan's wq, wk, wv and w1, w3): the same FLOPs in more products,
  // each reading the layer's input; the backward sums the input gradients of the products that
  // share an input. Llama 3.1 8B's layer, T = 8192 tokens, h = 4096, f = 14336, bf16 (e = 2).
  ir::Model fused = llama8bLayer();
  ir::Model separate = fused;
  separate.transformer.projections = ir::Projections::Separate;
  double T = 8192, h = 4096, e = 2;
  Layout layout;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    Work a = getUnitWork(separate, UnitKind::Layer, 0, pass, layout);
    Work b = getUnitWork(fused, UnitKind::Layer, 0, pass, layout);
    EXPECT_NEAR(a.getFlops(), b.getFlops(), 1e-9 * b.getFlops());
    // Two products more in the forward (q, k, v for qkv; gate, up for gate and up), each with an
    // input and a weight gradient in the backward.
    EXPECT_EQ(a.gemms.size(), b.gemms.size() + (pass == PassKind::Forward ? 3 : 6));
  }
  Work forward = getUnitWork(separate, UnitKind::Layer, 0, PassKind::Forward, layout);
  for (const char *name : {"q", "k", "v", "mlp gate", "mlp up"})
    EXPECT_TRUE(llvm::any_of(forward.gemms, [&](const Gemm &gemm) { return gemm.name == name; }))
        << name;
  // Compiled: one kernel reads the three input gradients of q, k, v and writes their sum, one the
  // gate's and the up's: (3 + 1 + 2 + 1)·T·h·e bytes more than the fused projections move.
  double sums = (4 + 3) * T * h * e;
  EXPECT_NEAR(
      getUnitWork(separate, UnitKind::Layer, 0, PassKind::Backward, layout).getMemoryBytes() -
          getUnitWork(fused, UnitKind::Layer, 0, PassKind::Backward, layout).getMemoryBytes(),
      sums, 1e-9 * sums);
  EXPECT_EQ(getUnitWork(separate, UnitKind::Layer, 0, PassKind::Forward, layout).getMemoryBytes(),
            getUnitWork(fused, UnitKind::Layer, 0, PassKind::Forward, layout).getMemoryBytes());
  // Eager, autograd adds them in pairs as they arrive: (3·2 + 3·1)·T·h·e.
  Layout eager;
  eager.kernels = ir::KernelMode::Eager;
  double eagerSums = (6 + 3) * T * h * e;
  EXPECT_NEAR(
      getUnitWork(separate, UnitKind::Layer, 0, PassKind::Backward, eager).getMemoryBytes() -
          getUnitWork(fused, UnitKind::Layer, 0, PassKind::Backward, eager).getMemoryBytes(),
      eagerSums, 1e-9 * eagerSums);
  // Under FP8 each input is cast once, as with the fused products (torch.compile computes
  // torchao's identical casts of one input once), and each output gradient once.
  Layout fp8;
  fp8.precision = ir::Precision::MixedFP8;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    auto casts = [&](const ir::Model &model) {
      for (const MemoryOp &op : getUnitWork(model, UnitKind::Layer, 0, pass, fp8).memory)
        if (op.name.rfind("fp8 casts", 0) == 0)
          return op.bytes;
      return 0.0;
    };
    EXPECT_GT(casts(fused), 0);
    EXPECT_NEAR(casts(separate), casts(fused), 1e-9 * casts(fused));
  }
}

/// The bytes of a layer's FP8 (MXFP8, NVFP4) casts in one pass, 0 without them.
double getLayerCastBytes(const ir::Model &model, PassKind pass, const Layout &layout) {
  for (const MemoryOp &op : getUnitWork(model, UnitKind::Layer, 0, pass, layout).memory)
    if (op.name.find("casts of the") != std::string::npos)
      return op.bytes;
  return 0.0;
}

TEST(CostModelTest, BlockScaledCastsWriteBothCopiesWithTheirScales) {
  // Llama 3.1 8B's layer, one sequence of T = 8192 tokens, bf16 activations (e = 2). Its forward
  // products read four inputs, the QKV and MLP-input products the norms' outputs [T, h], the
  // attention output and the MLP's down product theirs: T·(3·h + f) elements. One scale per
  // tensor writes one byte per element; MXFP8 writes a copy along the rows and one along the
  // columns, each a byte and a 32nd of a one-byte scale (OCP MX v1.0, block size 32), NVFP4 each
  // half a byte and a 16th of a one-byte scale (arXiv:2509.25149, blocks of 16), after reading
  // the tensor once more for its amax (the per-tensor FP32 scale of NVFP4's two levels).
  ir::Model model = llama8bLayer();
  double T = 8192, h = 4096, f = 14336, e = 2;
  Layout tensor;
  tensor.precision = ir::Precision::MixedFP8;
  auto casts = [&](PassKind pass, const Layout &layout) {
    return getLayerCastBytes(model, pass, layout);
  };
  double inputs = T * (3 * h + f);
  EXPECT_NEAR(casts(PassKind::Forward, tensor), inputs * (e + 1), 1e-9 * inputs);
  // The backward's output gradients, whatever their count, the same way.
  double gradients = casts(PassKind::Backward, tensor) / (e + 1);
  EXPECT_GT(gradients, 0);
  for (auto [scaling, copy, reads] : {std::tuple{ir::Fp8Scaling::Mx, 1 + 1.0 / 32, 1.0},
                                      std::tuple{ir::Fp8Scaling::Nvfp4, 0.5 + 1.0 / 16, 2.0}}) {
    Layout blocks = tensor;
    blocks.fp8Scaling = scaling;
    EXPECT_NEAR(casts(PassKind::Forward, blocks), inputs * (reads * e + 2 * copy), 1e-9 * inputs);
    EXPECT_NEAR(casts(PassKind::Backward, blocks), gradients * (reads * e + 2 * copy),
                1e-9 * gradients);
    // The same products, block-scaled where they are FP8 with one scale per tensor, and NVFP4
    // under mixed(fp4) only.
    for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
      Work a = getUnitWork(model, UnitKind::Layer, 0, pass, tensor);
      Work b = getUnitWork(model, UnitKind::Layer, 0, pass, blocks);
      ASSERT_EQ(a.gemms.size(), b.gemms.size());
      for (size_t i = 0; i < a.gemms.size(); ++i) {
        EXPECT_EQ(b.gemms[i].mx, a.gemms[i].fp8) << b.gemms[i].name;
        EXPECT_EQ(b.gemms[i].fp4, a.gemms[i].fp8 && scaling == ir::Fp8Scaling::Nvfp4)
            << b.gemms[i].name;
      }
    }
  }
}

TEST(CostModelTest, CurrentScalingReadsEachCastInputTwice) {
  // Transformer Engine's current scaling computes a tensor's amax in a pass of its own and then
  // casts it: two reads of the bf16 tensor and one byte written per element (its documentation,
  // docs/features/low_precision_training/fp8_current_scaling). Llama 3.1 8B's layer at T = 8192
  // tokens: the forward casts the four products' inputs, T·(3·h + f) elements.
  ir::Model model = llama8bLayer();
  double T = 8192, h = 4096, f = 14336, e = 2;
  Layout tensor;
  tensor.precision = ir::Precision::MixedFP8;
  Layout current = tensor;
  current.fp8Scaling = ir::Fp8Scaling::Current;
  auto casts = [&](PassKind pass, const Layout &layout) {
    return getLayerCastBytes(model, pass, layout);
  };
  double inputs = T * (3 * h + f);
  EXPECT_NEAR(casts(PassKind::Forward, current), inputs * (2 * e + 1), 1e-9 * inputs);
  double gradients = casts(PassKind::Backward, tensor) / (e + 1);
  EXPECT_GT(gradients, 0);
  EXPECT_NEAR(casts(PassKind::Backward, current), gradients * (2 * e + 1), 1e-9 * gradients);
  // Nothing else in the layer changes: the products, and every other kernel's bytes.
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    Work a = getUnitWork(model, UnitKind::Layer, 0, pass, tensor);
    Work b = getUnitWork(model, UnitKind::Layer, 0, pass, current);
    EXPECT_EQ(a.gemms.size(), b.gemms.size());
    EXPECT_NEAR(b.getMemoryBytes() - a.getMemoryBytes(), casts(pass, current) - casts(pass, tensor),
                1e-9 * a.getMemoryBytes());
  }
}

TEST(CostModelTest, Mxfp8CastOnB200AgainstTransformerEnginesKernel) {
  // Transformer Engine's MXFP8 quantization of a bf16 8192×8192 tensor along its rows and its
  // columns ("both") took 52.34 us on a B200 (ROCm/TransformerEngine pull request 598, the B200
  // column of its single-kernel table, 2026-05-27). placec times such a cast as the bytes it moves,
  // 2 read and 2·(1 + 1/32) written per element, at its memory-bound rate: within 10 %.
  auto compiled =
      unittest::compile("cluster b { device = b200; nodes = 1; devices_per_node = 8; }");
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel model(*compiled->program->findCluster("b"), ir::Precision::MixedFP8);
  double elements = 8192.0 * 8192.0;
  double seconds = model.getMemorySeconds(elements * (2 + 2 * (1 + 1.0 / 32)));
  EXPECT_NEAR(seconds, 52.34e-6, 0.10 * 52.34e-6);
}

TEST(CostModelTest, Mxfp8ProductsAtTheMeasuredRatio) {
  // A compute-bound FP8 product on a B200 takes 7.161/6.812 as long with MXFP8 operands as with
  // one scale per tensor: Transformer Engine's measurement of a layer's twelve products on a B300,
  // quantized beforehand (docs/examples/gemm_profiling/gemm_profiling.rst at 8f2e635).
  auto compiled =
      unittest::compile("cluster b { device = b200; nodes = 1; devices_per_node = 8; }");
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel model(*compiled->program->findCluster("b"), ir::Precision::MixedFP8);
  Gemm tensor{"mlp up", 16384, 16384, 4096};
  tensor.fp8 = true;
  Gemm mx = tensor;
  mx.mx = true;
  EXPECT_NEAR(model.getGemmSeconds(mx) / model.getGemmSeconds(tensor), 7.161 / 6.812, 1e-12);
  // A BF16 product is not block-scaled, whatever the flag says.
  Gemm bf16 = tensor;
  bf16.fp8 = false;
  Gemm bf16Mx = bf16;
  bf16Mx.mx = true;
  EXPECT_EQ(model.getGemmSeconds(bf16Mx), model.getGemmSeconds(bf16));
}

TEST(CostModelTest, Nvfp4ProductsAtTheMeasuredRatio) {
  // A compute-bound NVFP4 product takes 3.764/6.812 of the time of the same product in FP8 with
  // one scale per tensor, and 3.764/7.161 of its time in MXFP8: Transformer Engine's measurement
  // of a layer's twelve products on a B300, quantized beforehand (docs/examples/gemm_profiling/
  // gemm_profiling.rst at 8f2e635). The same on a GB300 and a GB200, whatever their FP4 peaks (15
  // and 10 PFLOP/s against the same FP8 peak).
  for (const char *device : {"b300", "gb300", "gb200", "b200"}) {
    auto compiled = unittest::compile(std::string("cluster b { device = ") + device +
                                      "; nodes = 1; devices_per_node = 8; }");
    ASSERT_TRUE(compiled->program) << compiled->messages;
    CostModel model(*compiled->program->findCluster("b"), ir::Precision::MixedFP8);
    Gemm tensor{"mlp up", 65536, 65536, 8192};
    tensor.fp8 = true;
    Gemm mx = tensor;
    mx.mx = true;
    Gemm fp4 = mx;
    fp4.fp4 = true;
    EXPECT_NEAR(model.getGemmSeconds(fp4) / model.getGemmSeconds(tensor), 3.764 / 6.812, 1e-9)
        << device;
    EXPECT_NEAR(model.getGemmSeconds(fp4) / model.getGemmSeconds(mx), 3.764 / 7.161, 1e-9)
        << device;
  }
  // A memory-bound NVFP4 product reads half a byte per operand element: one wave of 148 tiles of
  // 128×128 with k = 128 (m = 148·128), its operands (m·k + k·n)/2 bytes and its bf16 result
  // 2·m·n, over the B200's 8 TB/s at its family's memory efficiency (0.85) and the training kernel
  // efficiency.
  auto compiled =
      unittest::compile("cluster b { device = b200; nodes = 1; devices_per_node = 8; }");
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel model(*compiled->program->findCluster("b"), ir::Precision::MixedFP8);
  double m = 148 * 128, n = 128, k = 128;
  Gemm thin{"thin", m, n, k};
  thin.fp8 = thin.mx = thin.fp4 = true;
  double bytes = (m * k + k * n) * 0.5 + m * n * 2;
  EXPECT_NEAR(model.getGemmSeconds(thin), bytes / (8e12 * 0.85 * kTrainingKernelEfficiency),
              1e-9 * model.getGemmSeconds(thin));
}

TEST(CostModelTest, WeightGradientsAccumulateIntoTheStoredGradient) {
  // Megatron-LM's gradient_accumulation_fusion adds a weight gradient into the main gradient in
  // the product's epilogue: its result is read and written in the gradients' type. PyTorch
  // (`params = fp32`) writes a fresh result in the compute type.
  auto bytesOf = [](ir::Precision precision, bool fp32Grads, bool fp32Params) {
    return getWeightGradientResultBytes(
        precision, ir::getStateBytes(precision, ir::OptimizerKind::Adam, fp32Grads, fp32Params),
        fp32Params);
  };
  EXPECT_EQ(bytesOf(ir::Precision::MixedBF16, false, false), 2 * 2);
  EXPECT_EQ(bytesOf(ir::Precision::MixedBF16, true, false), 2 * 4);
  EXPECT_EQ(bytesOf(ir::Precision::MixedFP8, false, false), 2 * 2);
  EXPECT_EQ(bytesOf(ir::Precision::FP32, false, false), 2 * 4);
  EXPECT_EQ(bytesOf(ir::Precision::MixedBF16, true, true), 2);
  // A short reduction is memory-bound on it: 16 experts' gate-and-up weight gradients over 128
  // tokens each on an H100 (m = 2880, n = 5760, k = 128): operands 16·(m·k + k·n)·2 bytes and
  // results 16·m·n·8 bytes (fp32 main gradients, read and written), over 3.35 TB/s at Hopper's
  // memory efficiency (0.85) and the training kernel efficiency. Written once in bf16 the same
  // product moves about a quarter of those bytes.
  auto compiled =
      unittest::compile("cluster h { device = h100_sxm; nodes = 1; devices_per_node = 8; }");
  ASSERT_TRUE(compiled->program) << compiled->messages;
  const ir::Cluster &cluster = *compiled->program->findCluster("h");
  CostModel fused(cluster, ir::Precision::MixedBF16, 8);
  CostModel plain(cluster, ir::Precision::MixedBF16);
  double m = 2880, n = 5760, k = 128;
  Gemm wgrad{"experts gate and up weight gradient", m, n, k, 16};
  wgrad.weightGradient = true;
  double bytes = 16 * ((m * k + k * n) * 2 + m * n * 8);
  double memory = bytes / (3.35e12 * 0.85 * kTrainingKernelEfficiency);
  EXPECT_NEAR(fused.getGemmSeconds(wgrad), memory, 1e-9 * memory);
  EXPECT_LT(plain.getGemmSeconds(wgrad), 0.8 * memory);
  // The other products' results are written once, whatever the gradients.
  Gemm forward = wgrad;
  forward.weightGradient = false;
  EXPECT_EQ(fused.getGemmSeconds(forward), plain.getGemmSeconds(forward));
}

TEST(CostModelTest, RepeatedKeysAndValuesAreCopiedAndKept) {
  // kv_repeat = true under fused kernels (torch.compile, which materializes repeat_kv's output for
  // scaled_dot_product_attention): Llama 3.1 8B's layer, one sequence of T = 8192 tokens in bf16
  // (e = 2), a = 32 query heads, kv = 8 key/value heads of d = 128.
  ir::Model grouped = llama8bLayer();
  ir::Model repeated = grouped;
  repeated.transformer.kvRepeat = true;
  double T = 8192, a = 32, kv = 8, d = 128, e = 2;
  EXPECT_TRUE(repeatsKv(repeated.transformer, ir::KernelMode::Fused));
  EXPECT_FALSE(repeatsKv(grouped.transformer, ir::KernelMode::Fused));
  EXPECT_TRUE(repeatsKv(grouped.transformer, ir::KernelMode::Eager));
  EXPECT_EQ(getAttentionKvHeads(repeated.transformer, ir::KernelMode::Fused), 32);
  EXPECT_EQ(getAttentionKvHeads(grouped.transformer, ir::KernelMode::Fused), 8);

  // The copies: forward, K and V each read at kv·d and written at a·d per token; backward, their
  // a·d gradients read and the kv·d sums written. Nothing else moves.
  Layout keep;
  double copies = 2 * T * (kv + a) * d * e;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    Work with = getUnitWork(repeated, UnitKind::Layer, 0, pass, keep);
    Work without = getUnitWork(grouped, UnitKind::Layer, 0, pass, keep);
    EXPECT_NEAR(with.getMemoryBytes() - without.getMemoryBytes(), copies, 1e-9 * copies);
    EXPECT_EQ(with.getFlops(), without.getFlops());
    const char *name =
        pass == PassKind::Forward ? "grouped K/V repeated" : "grouped K/V gradients summed";
    EXPECT_TRUE(llvm::any_of(with.memory, [&](const MemoryOp &op) { return op.name == name; }))
        << name;
  }
  // recompute(op) repeats the copy with the rest of the attention block's inputs.
  Layout perOp;
  perOp.activations = ir::ActivationMode::RecomputeOps;
  EXPECT_NEAR(
      getUnitWork(repeated, UnitKind::Layer, 0, PassKind::RecomputeOps, perOp).getMemoryBytes() -
          getUnitWork(grouped, UnitKind::Layer, 0, PassKind::RecomputeOps, perOp).getMemoryBytes(),
      2 * T * (kv + a) * d * e, 1e-9 * copies);

  // Kept: the attention kernel's K and V at a heads each where the grouped kernel keeps them at
  // kv, T·(a − kv)·d elements more of each.
  double keptMore = 2 * T * (a - kv) * d * e;
  auto keptDifference = [&](const Layout &layout) {
    return getLayerActivationBytes(repeated.transformer, layout) -
           getLayerActivationBytes(grouped.transformer, layout);
  };
  EXPECT_NEAR(keptDifference(keep), keptMore, 1e-9 * keptMore);
  // recompute(selective) recomputes the norms and the MLP activation, not the attention's inputs.
  Layout selective;
  selective.activations = ir::ActivationMode::RecomputeSelective;
  EXPECT_NEAR(keptDifference(selective), keptMore, 1e-9 * keptMore);
  // Split by t = 4 with the heads, under sequence parallelism or not.
  Layout split = keep;
  split.tensor = 4;
  split.sequenceParallel = true;
  EXPECT_NEAR(keptDifference(split), keptMore / 4, 1e-9 * keptMore);
  // Full recomputation keeps the layer input alone; per op keeps its list of products' outputs.
  // Either way the recomputed layer's repeated K and V are alive through its backward.
  Layout full;
  full.activations = ir::ActivationMode::RecomputeFull;
  for (const Layout &layout : {full, perOp}) {
    EXPECT_EQ(keptDifference(layout), 0);
    double transient =
        getRecomputedLayerBytes(repeated, layout) - getRecomputedLayerBytes(grouped, layout);
    EXPECT_NEAR(transient, keptMore, 1e-9 * keptMore);
  }
  EXPECT_EQ(getRecomputedLayerBytes(repeated, keep), 0);
  EXPECT_NEAR(getRecomputedLayerBytes(repeated, selective) -
                  getRecomputedLayerBytes(grouped, selective),
              0, 1e-9 * keptMore);

  // Eager PyTorch repeats them already: kv_repeat adds nothing there.
  Layout eager;
  eager.kernels = ir::KernelMode::Eager;
  EXPECT_EQ(getLayerActivationBytes(repeated.transformer, eager),
            getLayerActivationBytes(grouped.transformer, eager));
  EXPECT_EQ(getUnitWork(repeated, UnitKind::Layer, 0, PassKind::Forward, eager).getMemoryBytes(),
            getUnitWork(grouped, UnitKind::Layer, 0, PassKind::Forward, eager).getMemoryBytes());
  // With as many key/value heads as query heads there is nothing to repeat.
  ir::Model multiHead = repeated;
  multiHead.transformer.kvHeads = 32;
  ir::Model multiHeadGrouped = multiHead;
  multiHeadGrouped.transformer.kvRepeat = false;
  EXPECT_FALSE(repeatsKv(multiHead.transformer, ir::KernelMode::Eager));
  EXPECT_EQ(getLayerActivationBytes(multiHead.transformer, keep),
            getLayerActivationBytes(multiHeadGrouped.transformer, keep));
  EXPECT_EQ(
      getUnitWork(multiHead, UnitKind::Layer, 0, PassKind::Backward, keep).getMemoryBytes(),
      getUnitWork(multiHeadGrouped, UnitKind::Layer, 0, PassKind::Backward, keep).getMemoryBytes());
}

// Under context parallelism a rank's attention runs as kernels over blocks of the keys: the ring's
// cp steps (Transformer Engine's and PyTorch's), PyTorch's loop over the all-gathered chunks; each
// pays the kernel's per-query overhead, and the blocks' outputs are merged. Counted here by hand
// from the implementations (CostModel.cpp, contextMergeElements), then against placec's ring bench
// on an H100.
TEST(CostModelTest, ContextParallelAttentionRunsAKernelPerBlockAndMergesIt) {
  using ir::ContextMerge;
  using ir::ContextMethod;
  EXPECT_EQ(getContextAttentionCalls(1, ContextMethod::Ring, ContextMerge::Fused), 1);
  EXPECT_EQ(getContextAttentionCalls(4, ContextMethod::Ring, ContextMerge::Fused), 4);
  EXPECT_EQ(getContextAttentionCalls(4, ContextMethod::Ring, ContextMerge::Eager), 4);
  EXPECT_EQ(getContextAttentionCalls(4, ContextMethod::AllGather, ContextMerge::Fused), 1);
  EXPECT_EQ(getContextAttentionCalls(4, ContextMethod::AllGather, ContextMerge::Eager), 4);
  EXPECT_EQ(getContextAttentionCalls(4, ContextMethod::AllToAll, ContextMerge::Fused), 1);

  // Llama 3.1 8B's layer over cp = 2: L = 4096 local tokens, 32 query heads and 8 key/value heads
  // of d = 128 in bf16. O and Q are L·32·128 elements, K and V together L·8·256.
  ir::Model model = llama8bLayer();
  double L = 4096, e = 2, O = L * 32 * 128, Q = O, KV = L * 8 * 256;
  auto merged = [](const Work &work) {
    double bytes = 0;
    for (const MemoryOp &op : work.memory)
      if (op.name.find("context-parallel") != std::string::npos)
        bytes += op.bytes;
    return bytes;
  };
  Layout layout;
  layout.context = 2;
  struct Case {
    ContextMethod method;
    ContextMerge merge;
    double calls, forward, backward;
  } cases[] = {
      // Transformer Engine's ring: K and V into the ring's buffer (2·KV), the output zeroed (O)
      // and corrected by each of the 2 steps (3·O each); backward K and V into the buffer and
      // the first step's dQ, dK, dV copied (2 accesses), the second's added (3).
      {ContextMethod::Ring, ContextMerge::Fused, 2, 2 * KV + 7 * O, 2 * KV + 5 * (Q + KV)},
      // Its all-gather: one kernel per chunk of queries, nothing merged.
      {ContextMethod::AllGather, ContextMerge::Fused, 1, 0, 0},
      // PyTorch's, either exchange: one concatenation of K and V (2·KV), the first block's output
      // cast to fp32 (3·O), the second merged in fp32 (15·O), the result cast back (3·O);
      // backward, the fp32 accumulators zeroed (2·Q + 2·KV), each block's gradients added (5·Q +
      // 5·KV) and the fp32 dK, dV concatenated to pass on (4·KV), one concatenation of K and V
      // (2·KV), the gradients cast back (3·Q + 3·KV).
      {ContextMethod::Ring, ContextMerge::Eager, 2, 2 * KV + 21 * O,
       (2 + 10 + 3) * Q + (2 + 18 + 2 + 3) * KV},
      {ContextMethod::AllGather, ContextMerge::Eager, 2, 2 * KV + 21 * O,
       (2 + 10 + 3) * Q + (2 + 18 + 2 + 3) * KV},
      // Ulysses: whole sequences of fewer heads, one kernel.
      {ContextMethod::AllToAll, ContextMerge::Fused, 1, 0, 0}};
  for (const Case &c : cases) {
    layout.contextMethod = c.method;
    layout.contextMerge = c.merge;
    std::string what = ir::toString(c.method).str() + " " + ir::toString(c.merge).str();
    for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
      Work work = getUnitWork(model, UnitKind::Layer, 0, pass, layout);
      ASSERT_EQ(work.attention.size(), 1u) << what;
      EXPECT_EQ(work.attention[0].calls, c.calls) << what;
      double expected = e * (pass == PassKind::Forward ? c.forward : c.backward);
      EXPECT_NEAR(merged(work), expected, 1e-9 * expected + 1e-9) << what;
    }
  }

  // placec's ring bench (bench/README.md, "One context-parallel rank's attention"): one rank of
  // PyTorch's load-balanced ring on an H100 SXM, 32,768 local tokens, 32 heads of 128 with K and V
  // repeated to them, FlashAttention-2. Measured, the c kernels over one kernel of the same FLOPs
  // (the middle of each range), and what the eager merges, accumulations and copies add (the whole
  // rank less the c kernels, ms).
  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel costs(*compiled->program->findCluster("h100"), ir::Precision::MixedBF16);
  struct Measured {
    int64_t cp;
    double forwardRatio, backwardRatio, forwardMerges, backwardMerges;
  } measured[] = {{2, 51.5 / 50.8, 138.45 / 137.8, 54.5 - 51.5, 146.1 - 138.45},
                  {4, 102.7 / 100.7, 277.45 / 272.5, 111.05 - 102.7, 294.35 - 277.45},
                  {8, 206.4 / 201.8, 557.05 / 543.8, 223.6 - 206.4, 592.15 - 557.05}};
  ir::Model bench = llama8bLayer();
  bench.transformer.kvRepeat = true;
  layout.contextMethod = ContextMethod::AllGather;
  layout.contextMerge = ContextMerge::Eager;
  for (const Measured &m : measured) {
    bench.transformer.seq = 32768 * m.cp;
    layout.context = m.cp;
    for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
      bool forward = pass == PassKind::Forward;
      Work work = getUnitWork(bench, UnitKind::Layer, 0, pass, layout);
      ASSERT_EQ(work.attention.size(), 1u);
      AttentionCore one = work.attention[0];
      EXPECT_EQ(one.calls, m.cp);
      double blocks = costs.getAttentionSeconds(one);
      one.calls = 1;
      // The key overhead paid cp times: within 1.5 points of the measured ratio.
      EXPECT_NEAR(blocks / costs.getAttentionSeconds(one),
                  forward ? m.forwardRatio : m.backwardRatio, 0.015)
          << "cp " << m.cp << (forward ? " forward" : " backward");
      // The merges' bytes at HBM speed: within 30 % of what the bench measured them to add
      // (4 to 26 % under it, most in the backward at cp 4 and 8).
      double ms = 1e3 * costs.getMemorySeconds(merged(work));
      double target = forward ? m.forwardMerges : m.backwardMerges;
      EXPECT_NEAR(ms, target, 0.3 * target)
          << "cp " << m.cp << (forward ? " forward" : " backward");
    }
  }
}

TEST(CostModelTest, RecomputedLayerIsAliveThroughItsBackward) {
  // Llama 3.1 8B, b = 2: without recomputation a layer keeps, tensor by tensor, its two norms'
  // inputs and outputs [T, h], Q, K, V, the attention output, w1's and w3's outputs and their
  // product [T, f] in bf16, and the fp32 log-sum-exp [a, T].
  ir::Model model = llama8bLayer();
  double T = 2 * 8192, h = 4096, a = 32, kv = 8, d = 128, f = 14336;
  double all = 2 * (4 * T * h + T * (a + 2 * kv) * d + T * a * d + 3 * T * f) + 4 * a * T;
  Layout layout;
  layout.microBatch = 2;
  EXPECT_EQ(getRecomputedLayerBytes(model, layout), 0);
  // Full recomputation keeps the layer's input, and materializes the rest again.
  layout.activations = ir::ActivationMode::RecomputeFull;
  EXPECT_NEAR(getRecomputedLayerBytes(model, layout), all - 2 * T * h, 1e-9 * all);
  // Per op (which keeps the outputs of wq, wv, the attention kernel, w1 and w2 with the input,
  // PerOpRecomputationKeepsTorchtitansTensors) the recomputation materializes the two norms'
  // outputs and the second norm's input [T, h], Q after the rotary embedding [T, a·d], K
  // [T, kv·d], w3's output and the gated product [T, f].
  layout.activations = ir::ActivationMode::RecomputeOps;
  double perOp = 2 * (T * h + T * a * d + T * kv * d + T * a * d + T * f + T * h) + 4 * a * T;
  double recomputed = 2 * (3 * T * h + T * a * d + T * kv * d + 2 * T * f);
  EXPECT_NEAR(getRecomputedLayerBytes(model, layout), recomputed, 1e-9 * all);
  // It is transient memory of a stage with layers, once whatever the micro-batches in flight.
  StageStates states;
  states.layers = 1;
  states.layerActivationBytes = perOp;
  states.inFlight = 3;
  states.recomputedLayer = recomputed;
  StageMemoryResult memory = getStageMemory(states, ir::StateBytes{2, 2, 12});
  EXPECT_NEAR(memory.device.transient, recomputed, 1e-9 * all);
  EXPECT_NEAR(memory.device.peak, 3 * perOp + recomputed, 1e-9 * all);
}

TEST(CostModelTest, Fp32ParametersAreCastOnEveryUse) {
  // mixed(bf16, params = fp32), PyTorch's mixed precision over fp32 modules, on Llama 3.1 8B's
  // layer (e = 2): the weights of its products, W = h·a·d (Q) + 2·h·kv·d (K, V) + a·d·h (output)
  // + 3·h·f (swiglu's gate, up and down).
  ir::Model model = llama8bLayer();
  const ir::TransformerConfig &config = model.transformer;
  double h = 4096, a = 32, kv = 8, d = 128, f = 14336, e = 2;
  ASSERT_EQ(config.mlp, ir::MlpActivation::Swiglu);
  double W = h * a * d + 2 * h * kv * d + a * d * h + 3 * h * f;
  Layout plain, autocast, fsdp, eager, plainEager;
  autocast.fp32Params = true;
  fsdp = autocast;
  fsdp.paramsGathered = true;
  plainEager.kernels = ir::KernelMode::Eager;
  eager = plainEager;
  eager.fp32Params = true;
  auto extra = [&](const Layout &with, const Layout &without, PassKind pass) {
    Work a = getUnitWork(model, UnitKind::Layer, 0, pass, with);
    Work b = getUnitWork(model, UnitKind::Layer, 0, pass, without);
    EXPECT_EQ(a.getFlops(), b.getFlops());
    return a.getMemoryBytes() - b.getMemoryBytes();
  };
  double cast = (4 + e) * W; // fp32 read, e written (or e read, fp32 written)
  // Not gathered (autocast over the fp32 modules), the residual stream is fp32: per element of
  // the [T, h] stream (T = 8192 tokens), against the e-byte stream of `plain`, with LayerNorm.
  // Compiled: each norm reads 4 and writes e, its output cast fused in (6 against 2e = 4); each
  // residual addition reads 4 + e and writes 4 (10 against 3e = 6); backward, each norm reads 4
  // and an e-byte gradient and writes 4 (10 against 3e = 6), each addition's gradient sum reads
  // and writes 4 and writes an e-byte copy for the branch (10 against 2e = 4).
  double stream = 8192 * h;
  double compiledForward = stream * (2 * (6 - 4) + 2 * (10 - 6));
  double compiledBackward = stream * (2 * (10 - 6) + 2 * (10 - 4));
  // Eager: the norms read and write 4 (8 against 4), each norm's output is cast to e (4 + e),
  // the additions as compiled; backward, the norms read two and write one at 4 (12 against 6),
  // four casts of 4 + e (the norm outputs' gradients back to fp32, the stream's gradient to e
  // for each branch), the gradient sums at 4 (8 against 2e).
  double eagerForward = stream * (2 * (8 - 4) + 2 * (4 + e) + 2 * (10 - 6));
  double eagerBackward = stream * (2 * (12 - 6) + 4 * (4 + e) + 2 * (8 - 4));
  // A forward casts the weights unless they are gathered (FSDP casts the shard before the
  // all-gather); full recomputation casts them again.
  EXPECT_NEAR(extra(autocast, plain, PassKind::Forward), cast + compiledForward, 1e-9 * cast);
  EXPECT_NEAR(extra(autocast, plain, PassKind::RecomputeFull), cast + compiledForward, 1e-9 * cast);
  EXPECT_NEAR(extra(fsdp, plain, PassKind::Forward), 0, 1e-9 * cast);
  EXPECT_NEAR(extra(eager, plainEager, PassKind::Forward), cast + eagerForward, 1e-9 * cast);
  // A backward casts the weight gradients to fp32; compiled without gather it casts the weights
  // again, eager it kept their casts.
  EXPECT_NEAR(extra(fsdp, plain, PassKind::Backward), cast, 1e-9 * cast);
  EXPECT_NEAR(extra(autocast, plain, PassKind::Backward), 2 * cast + compiledBackward, 1e-9 * cast);
  EXPECT_NEAR(extra(eager, plainEager, PassKind::Backward), cast + eagerBackward, 1e-9 * cast);
  // What eager autograd keeps: the e-byte casts of W, once per layer; and, not gathered, the two
  // norms' inputs in fp32 (2·(4 − e) more per stream element); nothing more gathered.
  EXPECT_NEAR(getLayerActivationBytes(config, eager) - getLayerActivationBytes(config, plainEager),
              e * W + 2 * (4 - e) * stream, 1e-9 * W);
  EXPECT_NEAR(getLayerActivationBytes(config, autocast) - getLayerActivationBytes(config, plain),
              2 * (4 - e) * stream, 1e-9 * W);
  EXPECT_NEAR(getLayerActivationBytes(config, fsdp) - getLayerActivationBytes(config, plain), 0,
              1e-9 * W);
  // The stream's bytes: fp32 only for fp32 parameters used without a gather; fp32 runs are 4
  // either way.
  EXPECT_EQ(getStreamBytes(ir::Precision::MixedBF16, true, false), 4);
  EXPECT_EQ(getStreamBytes(ir::Precision::MixedFP16, true, false), 4);
  EXPECT_EQ(getStreamBytes(ir::Precision::MixedFP8, true, false), 4);
  EXPECT_EQ(getStreamBytes(ir::Precision::MixedBF16, true, true), 2);
  EXPECT_EQ(getStreamBytes(ir::Precision::MixedBF16, false, false), 2);
  EXPECT_EQ(getStreamBytes(ir::Precision::FP32, false, true), 4);
  // Under full recomputation the checkpoint, the layer's input, is fp32.
  Layout full = plain, autocastFull = autocast;
  full.activations = autocastFull.activations = ir::ActivationMode::RecomputeFull;
  EXPECT_NEAR(getLayerActivationBytes(config, autocastFull) - getLayerActivationBytes(config, full),
              (4 - e) * stream, 1e-9 * W);

  // The step: four micro-batches add three times into 1e9 stored fp32 gradients, 12 bytes each at
  // the H100's HBM bandwidth × the memory and training-kernel efficiencies; Adam over fp32
  // parameters reads and writes them, momentum and variance (2·(4 + 8)) and reads the gradient
  // (4): 28 bytes, where mixed precision's master copy makes 2·12 + 2 + 2 = 28 with bf16
  // gradients as well.
  auto compiled = unittest::compile(kH100);
  ASSERT_TRUE(compiled->program) << compiled->messages;
  CostModel costModel(*compiled->program->findCluster("h100"), ir::Precision::MixedBF16);
  double second = costModel.getMemorySeconds(1e9);
  EXPECT_NEAR(costModel.getGradientAccumulationSeconds(1e9, 4), 3 * 12 * second, 1e-9);
  EXPECT_EQ(costModel.getGradientAccumulationSeconds(1e9, 1), 0);
  ir::StateBytes fp32Params =
      ir::getStateBytes(ir::Precision::MixedBF16, ir::OptimizerKind::Adam, true, true);
  EXPECT_NEAR(costModel.getOptimizerSeconds(1e9, fp32Params), 28 * second, 1e-9);
  ir::StateBytes master =
      ir::getStateBytes(ir::Precision::MixedBF16, ir::OptimizerKind::Adam, false, false);
  EXPECT_NEAR(costModel.getOptimizerSeconds(1e9, master), 28 * second, 1e-9);
}

TEST(CostModelTest, Fp32ParametersOfAnMlpAreCastOnEveryUse) {
  // The mlp model's layers under params = fp32: layer 0 is column-parallel (in × out/t weights),
  // layer 1 row-parallel (in/t × out), each cast like a transformer's products.
  ir::Model model;
  model.kind = ir::ModelKind::Mlp;
  model.mlp.layers = 3;
  model.mlp.input = 512;
  model.mlp.width = 2048;
  model.mlp.output = 256;
  double t = 4, e = 2;
  Layout plain, autocast, fsdp, eager, plainEager;
  plain.tensor = 4;
  plain.microBatch = 8;
  autocast = plain;
  autocast.fp32Params = true;
  fsdp = autocast;
  fsdp.paramsGathered = true;
  plainEager = plain;
  plainEager.kernels = ir::KernelMode::Eager;
  eager = plainEager;
  eager.fp32Params = true;
  auto extra = [&](int64_t layer, const Layout &with, const Layout &without, PassKind pass) {
    Work a = getUnitWork(model, UnitKind::MlpLayer, layer, pass, with);
    Work b = getUnitWork(model, UnitKind::MlpLayer, layer, pass, without);
    EXPECT_EQ(a.getFlops(), b.getFlops());
    return a.getMemoryBytes() - b.getMemoryBytes();
  };
  const double weights[] = {512 * 2048 / t, 2048 / t * 2048, 2048 * 256 / t};
  for (int64_t layer = 0; layer < 3; ++layer) {
    SCOPED_TRACE(layer);
    double cast = (4 + e) * weights[layer];
    EXPECT_NEAR(extra(layer, autocast, plain, PassKind::Forward), cast, 1e-9 * cast);
    EXPECT_NEAR(extra(layer, autocast, plain, PassKind::RecomputeFull), cast, 1e-9 * cast);
    EXPECT_NEAR(extra(layer, fsdp, plain, PassKind::Forward), 0, 1e-9 * cast);
    EXPECT_NEAR(extra(layer, fsdp, plain, PassKind::Backward), cast, 1e-9 * cast);
    EXPECT_NEAR(extra(layer, autocast, plain, PassKind::Backward), 2 * cast, 1e-9 * cast);
    EXPECT_NEAR(extra(layer, eager, plainEager, PassKind::Backward), cast, 1e-9 * cast);
  }
}

TEST(CostModelTest, SlidingWindowAttendsTheKeysInsideIt) {
  // Query i (from 1) of a causal window of w keys attends min(i, w) of them; summed here key by
  // key over 8192 queries and compared with getAttendedKeys' closed form (continuous, as the
  // causal half s/2 is, hence within 1/s).
  AttentionCore core;
  core.batchHeads = 32;
  core.queries = core.keys = 8192;
  core.headDim = 128;
  for (double window : {1.0, 512.0, 4096.0, 8191.0}) {
    double attended = 0;
    for (int i = 1; i <= 8192; ++i)
      attended += std::min<double>(i, window);
    core.window = window;
    EXPECT_NEAR(core.getAttendedKeys() * core.queries, attended, attended / 8192) << window;
    EXPECT_NEAR(core.getFlops(), 4.0 * 32 * 128 * attended, 4.0 * 32 * 128 * attended / 8192)
        << window;
  }
  // A window of the whole sequence or more is the causal half; without the mask (model FLOPs)
  // a query attends the window's keys.
  core.window = 0;
  double causal = core.getFlops();
  core.window = 8192;
  EXPECT_EQ(core.getFlops(), causal);
  core.window = 100000;
  EXPECT_EQ(core.getFlops(), causal);
  core.causal = false;
  core.window = 1024;
  EXPECT_EQ(core.getAttendedKeys(), 1024);
}

TEST(CostModelTest, SlidingWindowChangesOnlyTheFusedAttentionCore) {
  // Llama 3.1 8B's layer at 8K tokens with a 2K window: every product and memory-bound kernel is
  // the unwindowed layer's, and the fused core's FLOPs are its own at the window (the whole
  // causal prefix: 4·a·s·(s/2)·d; the window: 4·a·s·(w − w²/2s)·d, per sample).
  ir::Model full = llama8bLayer();
  ir::Model windowed = full;
  windowed.transformer.window = 2048;
  Layout layout;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    Work a = getUnitWork(full, UnitKind::Layer, 0, pass, layout);
    Work b = getUnitWork(windowed, UnitKind::Layer, 0, pass, layout);
    ASSERT_EQ(a.gemms.size(), b.gemms.size());
    for (size_t i = 0; i < a.gemms.size(); ++i)
      EXPECT_EQ(a.gemms[i].getFlops(), b.gemms[i].getFlops()) << a.gemms[i].name;
    EXPECT_EQ(a.getMemoryBytes(), b.getMemoryBytes());
    ASSERT_EQ(b.attention.size(), 1u);
    double scale = pass == PassKind::Backward ? 2.5 : 1;
    double s = 8192, w = 2048;
    EXPECT_DOUBLE_EQ(a.attention[0].getFlops(), scale * 4 * 32 * s * (s / 2) * 128);
    EXPECT_DOUBLE_EQ(b.attention[0].getFlops(), scale * 4 * 32 * s * (w - w * w / (2 * s)) * 128);
  }
  // The model FLOPs count s × w scores per head where full attention counts s × s: per sample
  // and layer 4·a·s·(s − w)·d fewer forward FLOPs, three times that with the backward.
  double difference = getModelFlops(full, 1) - getModelFlops(windowed, 1);
  EXPECT_DOUBLE_EQ(difference, 3.0 * 4 * 32 * 8192 * (8192 - 2048) * 128);
  // Materialized attention computes the whole s×s scores and masks them (Hugging Face's eager
  // attention): the window changes nothing there.
  full.transformer.attention = windowed.transformer.attention = ir::AttentionKind::Materialized;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward})
    EXPECT_EQ(getUnitWork(full, UnitKind::Layer, 0, pass, layout).getFlops(),
              getUnitWork(windowed, UnitKind::Layer, 0, pass, layout).getFlops());
}

TEST(CostModelTest, FullEveryAlternatesWindowedAndFullLayers) {
  // full_every = 4 over 8 layers of a mixture of experts (MoE layers 2, 4 and 6): the layers
  // numbered from 1 that 4 divides, indices 3 and 7, attend the whole prefix (Megatron-Core's
  // is_layer_window_attention), the others the window. Each layer's work is that of the same
  // layer in the model without the window (3, 7) or with it everywhere (the others), and its
  // class tells both apart from the MoE bit.
  ir::Model pattern = mixedMoeTransformer();
  pattern.transformer.seq = 512;
  pattern.transformer.window = 128;
  pattern.transformer.fullEvery = 4;
  ir::Model everywhere = pattern, nowhere = pattern;
  everywhere.transformer.fullEvery = 0;
  nowhere.transformer.window = 0;
  nowhere.transformer.fullEvery = 0;
  Layout layout;
  layout.expert = 4;
  std::set<int64_t> classes;
  for (int64_t layer = 0; layer < 8; ++layer) {
    bool full = layer == 3 || layer == 7;
    EXPECT_EQ(pattern.transformer.isWindowedLayer(layer), !full) << layer;
    const ir::Model &same = full ? nowhere : everywhere;
    for (PassKind pass : {PassKind::Forward, PassKind::Backward})
      EXPECT_EQ(getUnitWork(pattern, UnitKind::Layer, layer, pass, layout).getFlops(),
                getUnitWork(same, UnitKind::Layer, layer, pass, layout).getFlops())
          << layer;
    classes.insert(getUnitWorkClass(pattern, UnitKind::Layer, layer));
  }
  // Dense windowed, MoE windowed and dense full (layers 3 and 7): three classes.
  EXPECT_EQ(classes.size(), 3u);
  // The windowed layers attend fewer keys than the full ones.
  EXPECT_LT(getUnitWork(pattern, UnitKind::Layer, 0, PassKind::Forward, layout).getFlops(),
            getUnitWork(pattern, UnitKind::Layer, 3, PassKind::Forward, layout).getFlops());

  // Dense, the model FLOPs are those of the windowed model plus, for each full layer, one
  // layer's difference between the two: a quarter of the way from the one to the other.
  ir::Model dense = llama8bLayer();
  dense.transformer.layers = 12;
  dense.transformer.window = 2048;
  ir::Model denseEverywhere = dense, denseNowhere = dense;
  denseNowhere.transformer.window = 0;
  dense.transformer.fullEvery = 4;
  double low = getModelFlops(denseEverywhere, 1), high = getModelFlops(denseNowhere, 1);
  EXPECT_NEAR(getModelFlops(dense, 1), low + 0.25 * (high - low), 1e-12 * high);
  // A pattern of more layers than the model has leaves the window everywhere.
  dense.transformer.fullEvery = 13;
  EXPECT_FALSE(dense.transformer.hasFullAttentionLayers());
  EXPECT_EQ(getModelFlops(dense, 1), low);
}

TEST(CostModelTest, PostNormsNormalizeEachBlocksOutput) {
  // post_norm = true (Gemma 2 and 3): four norms a layer where there were two. Each pass's norm
  // kernels move twice the bytes (the same per norm), and each layer keeps the two blocks'
  // outputs, the post-norms' inputs: 2 tensors of s·b·h at 2 bytes, split by t under sequence
  // parallelism, whatever the activation mode but full recomputation (which keeps the layer's
  // input alone). recompute(op), defined for two norms, does not apply.
  ir::Model plain = llama8bLayer();
  ir::Model post = plain;
  post.transformer.postNorm = true;
  auto bytesOf = [](const Work &work, llvm::StringRef name) {
    double bytes = 0;
    for (const MemoryOp &op : work.memory)
      if (op.name == name)
        bytes += op.bytes;
    return bytes;
  };
  Layout layout;
  for (auto [pass, name] :
       {std::pair{PassKind::Forward, "norms"}, std::pair{PassKind::Backward, "norms backward"}}) {
    Work a = getUnitWork(plain, UnitKind::Layer, 0, pass, layout);
    Work b = getUnitWork(post, UnitKind::Layer, 0, pass, layout);
    EXPECT_GT(bytesOf(a, name), 0);
    EXPECT_DOUBLE_EQ(bytesOf(b, name), 2 * bytesOf(a, name));
    EXPECT_DOUBLE_EQ(b.getMemoryBytes() - a.getMemoryBytes(), bytesOf(a, name));
    EXPECT_EQ(a.getFlops(), b.getFlops());
  }
  double sbh = 8192.0 * 4096;
  for (auto [tensor, sp] : {std::pair{1, false}, std::pair{2, true}, std::pair{4, false}}) {
    layout.tensor = tensor;
    layout.sequenceParallel = sp;
    for (ir::AttentionKind kernel : {ir::AttentionKind::Flash, ir::AttentionKind::Materialized})
      for (ir::ActivationMode mode :
           {ir::ActivationMode::Keep, ir::ActivationMode::RecomputeSelective,
            ir::ActivationMode::RecomputeAttention, ir::ActivationMode::RecomputeFull}) {
        plain.transformer.attention = post.transformer.attention = kernel;
        layout.activations = mode;
        double extra = mode == ir::ActivationMode::RecomputeFull ? 0 : 2 * 2 * sbh / (sp ? 2 : 1);
        EXPECT_DOUBLE_EQ(getLayerActivationBytes(post.transformer, layout) -
                             getLayerActivationBytes(plain.transformer, layout),
                         extra)
            << tensor << " " << static_cast<int>(kernel) << " " << static_cast<int>(mode);
      }
  }
  plain.transformer.attention = post.transformer.attention = ir::AttentionKind::Flash;
  EXPECT_TRUE(getOpRecomputeObstacle(plain).empty());
  EXPECT_FALSE(getOpRecomputeObstacle(post).empty());
}

} // namespace

namespace {

// DeepSeek-V3's attention (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §4.2; widths from
// deepseek-ai/DeepSeek-V3 config.json): 128 heads, q_lora_rank 1536, kv_lora_rank 512, heads of
// 128 + 64 rotary, values of 128, on a one-layer dense model of hidden 7168.
ir::Model latentLayer() {
  ir::Model model = smallTransformer(1);
  ir::TransformerConfig &config = model.transformer;
  config.hidden = 7168;
  config.heads = 128;
  config.headDim = 128;
  config.seq = 4096;
  config.vocab = 129280;
  config.ffn = 18432;
  config.mlp = ir::MlpActivation::Swiglu;
  config.norm = ir::NormKind::RmsNorm;
  config.bias = false;
  config.positions = ir::PositionKind::Rope;
  config.kvLoraRank = 512;
  config.qLoraRank = 1536;
  config.ropeHeadDim = 64;
  config.valueHeadDim = 128;
  model.tensors = ir::buildTransformerTensors(config);
  return model;
}

} // namespace

TEST(CostModelTest, LatentAttentionProjectsThroughItsLatents) {
  ir::Model model = latentLayer();
  const double h = 7168, a = 128, d = 128, r = 64, dv = 128, rq = 1536, rkv = 512;
  // Its attention's parameters, projection by projection (DeepSeek-V2 §2.1: W_DQ, W_UQ with the
  // rotary W_QR, W_DKV with the shared rotary key W_KR, W_UK and W_UV, W_O) and the latents'
  // norms: 187,107,328 a layer.
  double attention =
      h * rq + rq + rq * a * (d + r) + h * (rkv + r) + rkv + rkv * a * (d + dv) + a * dv * h;
  EXPECT_EQ(attention, 187107328);
  int64_t attentionParams = 0;
  for (const ir::Tensor &tensor : model.tensors)
    if (llvm::StringRef(tensor.name).contains(".attn."))
      attentionParams += tensor.numElements;
  EXPECT_EQ(attentionParams, 187107328);

  // The forward's products on one device, b = 1 and s = 4096 tokens: per token 2·(k·n) FLOPs of
  // each projection, plus the attention core's QKᵀ over heads of d + r and PV over values of dv,
  // causal (half the keys).
  Layout layout;
  double tokens = 4096;
  double mlp = 3 * h * 18432;
  double projections = h * rq + rq * a * (d + r) + h * (rkv + r) + rkv * a * (d + dv) + a * dv * h;
  double core = 2 * a * tokens * 0.5 * ((d + r) + dv);
  Work forward = getUnitWork(model, UnitKind::Layer, 0, PassKind::Forward, layout);
  EXPECT_NEAR(forward.getFlops(), tokens * (2 * (projections + mlp) + core), 1);

  // Under tensor parallelism over t = 4 with sequence parallelism: the down-projections run on
  // each rank's s/t tokens with their whole weights (replicated), the up-projections and the
  // output on every token with a/t of the heads; the core over a/t heads.
  layout.tensor = 4;
  layout.sequenceParallel = true;
  Work split = getUnitWork(model, UnitKind::Layer, 0, PassKind::Forward, layout);
  double perRank = (tokens / 4) * (h * rq + h * (rkv + r)) +
                   tokens * (rq * a * (d + r) + rkv * a * (d + dv) + a * dv * h) / 4;
  EXPECT_NEAR(split.getFlops(), 2 * perRank + tokens * 2 * mlp / 4 + core / 4 * tokens, 1);

  // The attention block's tensor-parallel input collective moves the latents (r_q + r_kv + r per
  // token), not the hidden state: the forward's first all-gather under sequence parallelism and
  // the backward's last reduction; the output's collectives stay [tokens, h].
  plan::UnitLayout units;
  units.tensor = 4;
  units.sequenceParallel = true;
  units.regather = true;
  std::vector<plan::UnitCollective> fwd =
      plan::getUnitCollectives(model, UnitKind::Layer, 0, /*forwardPass=*/true, units);
  ASSERT_EQ(fwd.size(), 4u);
  EXPECT_EQ(fwd[0].kind, plan::OpKind::AllGather);
  EXPECT_EQ(fwd[0].elements, 4096 * (1536 + 512 + 64));
  EXPECT_EQ(fwd[1].elements, 4096 * 7168);
  EXPECT_EQ(fwd[2].elements, 4096 * 7168);
  std::vector<plan::UnitCollective> bwd =
      plan::getUnitCollectives(model, UnitKind::Layer, 0, /*forwardPass=*/false, units);
  ASSERT_FALSE(bwd.empty());
  EXPECT_EQ(bwd.back().kind, plan::OpKind::ReduceScatter);
  EXPECT_EQ(bwd.back().elements, 4096 * (1536 + 512 + 64));
  // Its regather for the up-projections' weight gradients is of the latents too.
  EXPECT_TRUE(bwd[bwd.size() - 2].regather);
  EXPECT_EQ(bwd[bwd.size() - 2].elements, 4096 * (1536 + 512 + 64));
  units.sequenceParallel = false;
  units.regather = false;
  bwd = plan::getUnitCollectives(model, UnitKind::Layer, 0, /*forwardPass=*/false, units);
  ASSERT_EQ(bwd.size(), 2u);
  EXPECT_EQ(bwd[0].elements, 4096 * 7168);
  EXPECT_EQ(bwd[1].elements, 4096 * (1536 + 512 + 64));
  fwd = plan::getUnitCollectives(model, UnitKind::Layer, 0, /*forwardPass=*/true, units);
  ASSERT_EQ(fwd.size(), 2u);
  EXPECT_EQ(fwd[0].elements, 4096 * 7168);

  // Ring context parallelism passes K (heads of d + r) and V (heads of dv) of the local tokens.
  units.context = 2;
  units.tensor = 1;
  fwd = plan::getUnitCollectives(model, UnitKind::Layer, 0, /*forwardPass=*/true, units);
  ASSERT_EQ(fwd.size(), 1u);
  EXPECT_EQ(fwd[0].kind, plan::OpKind::RingStep);
  EXPECT_EQ(fwd[0].elements, 2048 * 128 * (192 + 128));
}

TEST(CostModelTest, LatentAttentionKeepsItsLatentsAndWiderHeads) {
  // What a layer keeps under `keep` with fused attention, tensor by tensor (2 bytes each but the
  // fp32 log-sum-exp), t = 1: the two norms' inputs and outputs (4·h), the latents' norms'
  // inputs and outputs (2·(r_q + r_kv)), Q and K of a·(d + r), V and the output of a·dv, the
  // log-sum-exp (4 bytes per head), swiglu's gate, up and product (3·f).
  ir::Model model = latentLayer();
  Layout layout;
  double T = 4096, h = 7168, a = 128, qk = 192, dv = 128, f = 18432;
  double kept = 2 * T * (4 * h + 2 * (1536 + 512) + 2 * a * qk + 2 * a * dv + 3 * f) + 4 * a * T;
  EXPECT_NEAR(getLayerActivationBytes(model.transformer, layout), kept, 1e-9 * kept);
  // recompute(selective) recomputes the norms' outputs, the latents' too, and swiglu's product.
  layout.activations = ir::ActivationMode::RecomputeSelective;
  double selective = kept - 2 * T * (2 * h + 1536 + 512 + f);
  EXPECT_NEAR(getLayerActivationBytes(model.transformer, layout), selective, 1e-9 * kept);
  // Under tensor parallelism over t = 4 with sequence parallelism, what sits outside the
  // tensor-parallel region (the stream's norms' inputs and outputs, the latents and their norms'
  // outputs, computed on each rank's own tokens) is split by the sequence, the heads' tensors by
  // the heads: everything by 4 but the log-sum-exp's heads too.
  layout.activations = ir::ActivationMode::Keep;
  layout.tensor = 4;
  layout.sequenceParallel = true;
  EXPECT_NEAR(getLayerActivationBytes(model.transformer, layout), kept / 4, 1e-9 * kept);
  // sp_inputs = keep: the products' inputs kept gathered, the latents' norms' outputs among them
  // (2 bytes each), the rest as before.
  layout.sequenceParallelInputs = ir::SequenceParallelInputs::Keep;
  double gathered = 2 * T * (2 * h + 1536 + 512);
  EXPECT_NEAR(getLayerActivationBytes(model.transformer, layout),
              kept / 4 + gathered * (1 - 1.0 / 4), 1e-9 * kept);
  layout = Layout();
  // recompute(op) and eager kernels are defined for multi-head and grouped-query attention.
  EXPECT_FALSE(getOpRecomputeObstacle(model).empty());
  EXPECT_FALSE(getEagerObstacle(model, ir::ActivationMode::Keep, ir::Precision::MixedBF16).empty());
}

TEST(CostModelTest, SinksAndRouterBiasAreParametersOnly) {
  // Attention sinks (one learned logit per head, gpt-oss) add `heads` parameters a layer, split
  // with the heads over the tensor axes, and a router bias one per expert a MoE layer; neither
  // changes a pass's products, FLOPs or kept activations (the sink is one more logit in each
  // softmax row of thousands).
  ir::Model plain = llama8bLayer();
  plain.transformer.moe.experts = 8;
  plain.transformer.moe.topK = 2;
  plain.transformer.moe.expertFfn = 14336;
  plain.tensors = ir::buildTransformerTensors(plain.transformer);
  ir::Model sinks = plain;
  sinks.transformer.sinks = true;
  sinks.transformer.moe.routerBias = true;
  sinks.tensors = ir::buildTransformerTensors(sinks.transformer);
  EXPECT_EQ(sinks.getTensorParams() - plain.getTensorParams(), 32 + 8);
  Layout layout;
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    Work a = getUnitWork(plain, UnitKind::Layer, 0, pass, layout);
    Work b = getUnitWork(sinks, UnitKind::Layer, 0, pass, layout);
    EXPECT_EQ(a.getFlops(), b.getFlops());
    EXPECT_EQ(a.getMemoryBytes(), b.getMemoryBytes());
  }
  EXPECT_EQ(getLayerActivationBytes(plain.transformer, layout, nullptr, true),
            getLayerActivationBytes(sinks.transformer, layout, nullptr, true));
}

namespace {
/// Four layers (layer 0 dense, then MoE layers of 16 experts of 384, top-2), a 64-token window
/// with every second layer full, and `mtp` multi-token prediction modules.
ir::Model mtpTransformer(int64_t mtp) {
  ir::Model model = smallTransformer(4);
  ir::TransformerConfig &config = model.transformer;
  config.norm = ir::NormKind::RmsNorm;
  config.bias = false;
  config.window = 64;
  config.fullEvery = 2;
  config.moe.experts = 16;
  config.moe.topK = 2;
  config.moe.expertFfn = 384;
  config.moe.denseLayers = 1;
  config.mtpLayers = mtp;
  model.tensors = ir::buildTransformerTensors(config);
  model.numParams = model.getTensorParams();
  return model;
}
} // namespace

TEST(CostModelTest, MultiTokenPredictionIsALayerAProjectionAndALoss) {
  ir::Model plain = mtpTransformer(0), model = mtpTransformer(2);
  const double h = 256, E = 16, fe = 384, T = 128, V = 512;
  // Each module (DeepSeek-V3 §2.2, Megatron-Core's MultiTokenPredictionLayer): a layer of the
  // last layer's kind (MoE: attention 4·h², two norms, the router E·h, the experts E·3·h·fe), its
  // three norms (enorm, hnorm, final norm) and its projection from 2·h to h.
  double layer = 4 * h * h + 2 * h + E * h + E * 3 * h * fe;
  double module = layer + 3 * h + 2 * h * h;
  EXPECT_EQ(static_cast<double>(model.getMtpParams()), 2 * module);
  EXPECT_EQ(static_cast<double>(model.numParams - plain.numParams), 2 * module);
  EXPECT_EQ(model.getHeadParams(), plain.getHeadParams());
  EXPECT_EQ(model.getHeadLayer(), 6);
  // The modules take the last layer's kind (MoE) and number their layers from 1 for the window:
  // the first attends the window (as layer 0), the second the whole prefix (as layer 1).
  EXPECT_EQ(getUnitWorkClass(model, UnitKind::Layer, 4),
            getUnitWorkClass(model, UnitKind::Layer, 2) | 4);
  EXPECT_EQ(getUnitWorkClass(model, UnitKind::Layer, 5),
            getUnitWorkClass(model, UnitKind::Layer, 3) | 4);
  EXPECT_NE(getUnitWorkClass(model, UnitKind::Layer, 2),
            getUnitWorkClass(model, UnitKind::Layer, 3));

  // A module's forward is its layer's, the projection's 2·T·h·2h FLOPs, and the memory-bound
  // work: the shifted tokens' lookup (2·T·h·2 B), three norms (each 2·2 B per element read and
  // written) and the concatenation of the two normalized inputs (both read, 2·h written: 4·T·h·2
  // B).
  Layout layout;
  layout.expert = 4;
  Work layer2 = getUnitWork(model, UnitKind::Layer, 2, PassKind::Forward, layout);
  Work module0 = getUnitWork(model, UnitKind::Layer, 4, PassKind::Forward, layout);
  EXPECT_NEAR(module0.getFlops() - layer2.getFlops(), 2 * T * h * 2 * h, 1e-6);
  EXPECT_NEAR(module0.getMemoryBytes() - layer2.getMemoryBytes(), T * h * (4 + 3 * 4 + 8), 1e-6);
  // Backward: the projection's input and weight gradients.
  Work back2 = getUnitWork(model, UnitKind::Layer, 2, PassKind::Backward, layout);
  Work back0 = getUnitWork(model, UnitKind::Layer, 4, PassKind::Backward, layout);
  EXPECT_NEAR(back0.getFlops() - back2.getFlops(), 2 * 2 * T * h * 2 * h, 1e-6);
  // The head runs the output layer once more per module, forward and backward.
  for (PassKind pass : {PassKind::Forward, PassKind::Backward}) {
    double with = getUnitWork(model, UnitKind::Head, 6, pass, layout).getFlops();
    double without = getUnitWork(plain, UnitKind::Head, 4, pass, layout).getFlops();
    EXPECT_NEAR(with, 3 * without, 1e-6 * with);
    EXPECT_NEAR(without, (pass == PassKind::Forward ? 1 : 2) * 2 * T * V * h, 1e-6);
  }

  // Model FLOPs: three times the forward of the two modules' layers, projections and logits more.
  // Their layers are those of a six-layer model's layers 4 (windowed) and 5 (full attention).
  Layout one;
  ir::Model six = smallTransformer(6);
  six.transformer = plain.transformer;
  six.transformer.layers = 6;
  six.tensors = ir::buildTransformerTensors(six.transformer);
  double layers = getModelFlops(six, 8) - getModelFlops(plain, 8);
  EXPECT_NEAR(getModelFlops(model, 8) - getModelFlops(plain, 8),
              layers + 3 * 8 * 2 * (2 * T * h * 2 * h + 2 * T * V * h),
              1e-9 * getModelFlops(model, 8));

  // What a module keeps beyond its layer: the three norms' inputs (2 B), the projection's input of
  // 2·h and the output layer's input (2 B each), 12·T·h B; split over t = 2 under sequence
  // parallelism; under full recomputation its second input, 2·T·h B. The head keeps one loss's
  // buffers per module more.
  EXPECT_DOUBLE_EQ(getMtpActivationBytes(model.transformer, one), 12 * T * h);
  Layout sp = one;
  sp.tensor = 2;
  sp.sequenceParallel = true;
  EXPECT_DOUBLE_EQ(getMtpActivationBytes(model.transformer, sp), 12 * T * h / 2);
  Layout full = one;
  full.activations = ir::ActivationMode::RecomputeFull;
  EXPECT_DOUBLE_EQ(getMtpActivationBytes(model.transformer, full), 2 * T * h);
  EXPECT_DOUBLE_EQ(getHeadActivationBytes(model.transformer, one),
                   3 * getHeadActivationBytes(plain.transformer, one));
  EXPECT_DOUBLE_EQ(getHeadActivationBytes(plain.transformer, one), T * V * (2 + 4));

  // Tensor-parallel collectives with sequence parallelism: the layer's, and before them the
  // shifted tokens' embedding (reduce-scatter of T·h), the projection's input gathered (2·T·h)
  // and its output gathered (T·h); in the backward after the layer's, the output gradient
  // gathered, the input gathered again and its gradient reduced (2·T·h), the embedding's gradient
  // gathered. The head's, once per loss.
  plan::UnitLayout units;
  units.tensor = 2;
  units.sequenceParallel = true;
  units.regather = true;
  std::vector<plan::UnitCollective> layerFwd =
      plan::getUnitCollectives(model, UnitKind::Layer, 2, true, units);
  std::vector<plan::UnitCollective> moduleFwd =
      plan::getUnitCollectives(model, UnitKind::Layer, 4, true, units);
  ASSERT_EQ(moduleFwd.size(), layerFwd.size() + 3);
  EXPECT_EQ(moduleFwd[0].kind, plan::OpKind::ReduceScatter);
  EXPECT_EQ(moduleFwd[0].elements, 128 * 256);
  EXPECT_EQ(moduleFwd[1].kind, plan::OpKind::AllGather);
  EXPECT_EQ(moduleFwd[1].elements, 2 * 128 * 256);
  EXPECT_EQ(moduleFwd[2].kind, plan::OpKind::AllGather);
  EXPECT_EQ(moduleFwd[2].elements, 128 * 256);
  std::vector<plan::UnitCollective> layerBwd =
      plan::getUnitCollectives(model, UnitKind::Layer, 2, false, units);
  std::vector<plan::UnitCollective> moduleBwd =
      plan::getUnitCollectives(model, UnitKind::Layer, 4, false, units);
  ASSERT_EQ(moduleBwd.size(), layerBwd.size() + 4);
  size_t n = layerBwd.size();
  EXPECT_EQ(moduleBwd[n].kind, plan::OpKind::AllGather);
  EXPECT_TRUE(moduleBwd[n + 1].regather);
  EXPECT_EQ(moduleBwd[n + 1].elements, 2 * 128 * 256);
  EXPECT_EQ(moduleBwd[n + 2].kind, plan::OpKind::ReduceScatter);
  EXPECT_TRUE(moduleBwd[n + 2].inputGradient);
  EXPECT_EQ(moduleBwd[n + 2].elements, 2 * 128 * 256);
  EXPECT_EQ(moduleBwd[n + 3].kind, plan::OpKind::AllGather);
  for (bool forward : {true, false})
    EXPECT_EQ(plan::getUnitCollectives(model, UnitKind::Head, 6, forward, units).size(),
              3 * plan::getUnitCollectives(plain, UnitKind::Head, 4, forward, units).size());

  // recompute(op) and eager kernels are torchtitan's and PyTorch's reference modules, which have
  // no multi-token prediction.
  ir::Model dense = smallTransformer(2);
  dense.transformer.bias = false;
  dense.transformer.mtpLayers = 1;
  EXPECT_NE(getOpRecomputeObstacle(dense).find("mtp_layers"), std::string::npos);
  EXPECT_NE(getEagerObstacle(dense, ir::ActivationMode::Keep, ir::Precision::MixedBF16)
                .find("mtp_layers"),
            std::string::npos);
}

// Megatron-Core's selective recomputation of its modules (recompute(core_attn, moe_act, …)): each
// module drops from a layer's kept activations what its recomputation gives back, and the
// recomputation repeats that work, by DeepSeek-V3's shapes (b = 1, s = 4096, one device).
TEST(CostModelTest, MegatronCoreModulesDropWhatTheyRecompute) {
  const double h = 7168, a = 128, d = 128, r = 64, dv = 128, rq = 1536, rkv = 512, f = 18432,
               fe = 2048, k = 8, s = 4096;
  ir::Model model = latentLayer();
  model.transformer.layers = 2;
  model.transformer.moe.experts = 256;
  model.transformer.moe.topK = 8;
  model.transformer.moe.expertFfn = 2048;
  model.transformer.moe.denseLayers = 1;
  model.tensors = ir::buildTransformerTensors(model.transformer);
  Layout keep;
  auto with = [&](unsigned modules) {
    Layout layout;
    layout.activations = ir::ActivationMode::RecomputeModules;
    layout.recomputeModules = modules;
    return layout;
  };
  auto bytes = [&](const Layout &layout, bool moe) {
    return getLayerActivationBytes(model.transformer, layout, nullptr, moe);
  };
  // core_attn: the kernel's log-sum-exp, 4 bytes per head and token.
  EXPECT_NEAR(bytes(keep, true) - bytes(with(ir::kRecomputeCoreAttention), true), 4 * a * s, 1e-3);
  // layernorm: the outputs of the two norms of their own (latent attention's before its
  // down-projections, the MoE layer's before its router), 2 bytes each; in the dense layer the
  // latent attention's only.
  EXPECT_NEAR(bytes(keep, true) - bytes(with(ir::kRecomputeLayernorm), true), 2 * 2 * h * s, 1e-3);
  EXPECT_NEAR(bytes(keep, false) - bytes(with(ir::kRecomputeLayernorm), false), 2 * h * s, 1e-3);
  // moe_act: the experts' activation output, 2 bytes of fe for each of the k routed rows.
  EXPECT_NEAR(bytes(keep, true) - bytes(with(ir::kRecomputeMoeActivation), true), 2 * fe * k * s,
              1e-3);
  // mla_up_proj: Q and K of a·(d + r) and V of a·dv, 2 bytes each.
  EXPECT_NEAR(bytes(keep, true) - bytes(with(ir::kRecomputeMlaUpProjection), true),
              2 * (2 * a * (d + r) + a * dv) * s, 1e-3);
  // mlp: a dense layer's MLP input (its norm's output) and intermediates (gate, up and their
  // product), nothing of an MoE layer.
  EXPECT_NEAR(bytes(keep, false) - bytes(with(ir::kRecomputeMlp), false), 2 * (h + 3 * f) * s,
              1e-3);
  EXPECT_DOUBLE_EQ(bytes(keep, true), bytes(with(ir::kRecomputeMlp), true));

  // The recomputation repeats: mla_up_proj the two up-projections (2·s·(a·(d + r)·rq +
  // a·(d + dv)·rkv) FLOPs) and the rotary embedding; mlp a dense layer's products (2·s·3·h·f) with
  // its norm and activation; core_attn the attention kernel; moe_act and layernorm memory-bound
  // kernels only.
  auto work = [&](unsigned modules, int64_t layer) {
    return getUnitWork(model, UnitKind::Layer, layer, PassKind::RecomputeModules, with(modules));
  };
  Work up = work(ir::kRecomputeMlaUpProjection, 1);
  EXPECT_NEAR(up.getFlops(), 2 * s * (a * (d + r) * rq + a * (d + dv) * rkv), 1);
  EXPECT_EQ(up.gemms.size(), 2u);
  EXPECT_GT(up.getMemoryBytes(), 0);
  EXPECT_NEAR(work(ir::kRecomputeMlp, 0).getFlops(), 2 * s * 3 * h * f, 1);
  EXPECT_TRUE(work(ir::kRecomputeMlp, 1).empty());
  Work act = work(ir::kRecomputeMoeActivation, 1);
  EXPECT_EQ(act.getFlops(), 0);
  // The fused SwiGLU reads gate and up and writes their product: 3 tensors of fe per routed row.
  EXPECT_NEAR(act.getMemoryBytes(), 3 * 2 * fe * k * s, 1e-3);
  EXPECT_TRUE(work(ir::kRecomputeMoeActivation, 0).empty());
  EXPECT_EQ(work(ir::kRecomputeCoreAttention, 1).attention.size(), 1u);
  Work norms = work(ir::kRecomputeLayernorm, 1);
  EXPECT_EQ(norms.getFlops(), 0);
  // Two norms, each reading and writing 2 bytes per element.
  EXPECT_NEAR(norms.getMemoryBytes(), 2 * 2 * 2 * h * s, 1e-3);

  // The modules apply where the model has them.
  EXPECT_EQ(getModuleRecomputeObstacle(model, ir::kRecomputeMlaUpProjection | ir::kRecomputeMlp |
                                                  ir::kRecomputeMoeActivation |
                                                  ir::kRecomputeLayernorm),
            "");
  ir::Model dense = llama8bLayer();
  EXPECT_NE(getModuleRecomputeObstacle(dense, ir::kRecomputeMoeActivation).find("no MoE"),
            std::string::npos);
  EXPECT_NE(getModuleRecomputeObstacle(dense, ir::kRecomputeMlaUpProjection).find("kv_lora_rank"),
            std::string::npos);
  EXPECT_NE(getModuleRecomputeObstacle(dense, ir::kRecomputeLayernorm).find("fused"),
            std::string::npos);
  EXPECT_EQ(getModuleRecomputeObstacle(dense, ir::kRecomputeMlp | ir::kRecomputeCoreAttention), "");
}
