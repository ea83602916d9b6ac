// The cost model (include/placec/passes/CostModel.h): the calibration constants of each device
// family with their sources, the work of each unit by GEMM shape and memory traffic, activation
// and state memory, NCCL-style collectives, overlap and pipeline bubbles.
#include "placec/passes/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

using namespace llvm;

namespace placec::cost {

//===----------------------------------------------------------------------===//
// Formatting for formulas
//===----------------------------------------------------------------------===//

std::string formatFormulaNumber(double value) {
  if (std::fabs(value) < 1e15 && value == std::round(value))
    return fmt::format("{}", static_cast<int64_t>(value));
  return fmt::format("{:.4g}", value);
}

std::string formatFormulaSeconds(double value) {
  if (value == 0)
    return "0 s";
  double magnitude = std::fabs(value);
  if (magnitude >= 1)
    return fmt::format("{:.3g} s", value);
  if (magnitude >= 1e-3)
    return fmt::format("{:.3g} ms", value * 1e3);
  if (magnitude >= 1e-6)
    return fmt::format("{:.3g} us", value * 1e6);
  return fmt::format("{:.3g} ns", value * 1e9);
}

namespace {

std::string num(double value) { return formatFormulaNumber(value); }
std::string fmtSeconds(double value) { return formatFormulaSeconds(value); }

/// `312 TFLOP/s`, `1.56 TB/s`, `25.0 GB/s`.
std::string fmtRate(double value, StringRef unit) {
  static const char *prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int index = 0;
  while (std::fabs(value) >= 1000 && index < 6) {
    value /= 1000;
    ++index;
  }
  return fmt::format("{:.3g} {}{}", value, prefixes[index], unit.str());
}

/// `12.6 GFLOP`, `3.00 MB`.
std::string fmtAmount(double value, StringRef unit) { return fmtRate(value, unit); }

} // namespace

//===----------------------------------------------------------------------===//
// Calibration constants
//===----------------------------------------------------------------------===//

const FamilyConstants &getFamilyConstants(ir::DeviceFamily family) {
  // Measured, not fitted to training runs (docs/plan.md, "Time", lists them):
  // - GEMM efficiency: the maximum achievable BF16 matmul FLOP/s over the dense peak, measured
  //   by a brute-force search over shapes with PyTorch/cuBLAS (Bekman, "Machine Learning
  //   Engineering", compute/accelerator, MAMF table): A100 SXM 271.2 of 312 (0.869), H100 SXM
  //   794.5 of 989 (0.803), B200 1745 of 2250 (0.776), MI300X 668.4 of 1300 (0.514), MI355X
  //   1565.0 of 2516.6 (0.622; the table's efficiency column divides by 2,300, the MI350X's
  //   peak, and gives 68.0 %: placec takes the measured rate over the MI355X's own); in FP8
  //   (e4m3) H100 SXM 1402.6 of 1979 (0.709), B200 3432.5 of 4500 (0.763); the devices with a
  //   measurement of their own besides these are in getGemmEfficiency. placec's kernel bench
  //   (bench/README.md, "Kernels") checked Hopper's on an H100 SXM at its 700 W limit: inside
  //   PyTorch training steps (GPT 1.3B; hidden 4096 at 16K tokens, bench/gpu/torch_gpt.py
  //   --profile) the products ran at 0.795 and 0.782 of the peak, where the same products run
  //   alone back to back for 0.6 s reach only about 0.70 (the card holds its power limit at
  //   1,350–1,425 MHz): the MAMF figure, not the sustained one, is what a step's products see.
  // - Intra-node bus efficiency: nccl-tests all-reduce bus bandwidth at large sizes over the
  //   per-direction link bandwidth: 8×A100 234.9 of 300 GB/s (0.78); 8×H200 ring (NVLS off)
  //   367 of 450 (0.82); the B200 and MI300X figures of the same source (845 of 900 with NVLS,
  //   312.9 of 448 over Infinity Fabric: 0.70).
  // - Inter-node bus efficiency: a ring all-reduce over 4 nodes of 8 B200 with 8×50 GB/s NICs
  //   each reaches 381.8 GB/s of bus bandwidth (0.95 of the node's NIC bandwidth), same source.
  // - The flex dispatchers' NVLink efficiency: the rows DeepEP's and HybridEP's dispatch and
  //   combine deliver to other ranks (a token once to each rank holding one of its experts) over
  //   the per-direction NVLink bandwidth, from the backends' own benchmarks (deepseek-ai/DeepEP;
  //   their "algorithm bandwidth" counts every received row, the rank's own included, so the
  //   other ranks' are (n − 1)/n of it). Hopper: DeepEP V1 on H800s, 8 ranks, DeepSeek-V3's
  //   routing, 153 and 158 GB/s (docs/legacy.md) of 200 GB/s: 0.68. Blackwell: HybridEP through
  //   its Torch API at 16 SMs, BF16 dispatch and combine, on 8 B200s and on 8 to 36 GB200s of one
  //   NVLink domain (hybrid-ep branch at 94a9f8f, docs/README_Hybrid-EP.md), 0.45 to 0.53 of
  //   900 GB/s, 0.50 on average; DeepEP on the same systems, 0.30 at 16 SMs and 0.41 at 24 on
  //   average, 0.36 at the 20 SMs Megatron-Core gives it by default (moe_flex_dispatcher_num_sms).
  //   HybridEP on Hopper, and Ampere and CDNA, have no measurement: DeepEP's on H800.
  // - Fused attention on Hopper: placec's kernel bench (above) times PyTorch's
  //   scaled_dot_product_attention with its FlashAttention-2 and cuDNN backends (cuDNN 9.19) on
  //   26 shapes each, causal and full, 1K to 32K keys, head dimensions 64, 112 and 128, forward
  //   and backward, each back to back for 0.6 s (`kernels.py --hold 0.6`; inside a training step
  //   the cuDNN kernels ran within 11 % of those rates). FusedAttentionConstants's formula fits
  //   them with a head-dimension overhead of 32 and (efficiency, key overhead) FlashAttention-2
  //   forward (0.430, 300), backward (0.395, 500), cuDNN forward (0.765, 380), backward (0.700,
  //   580): mean |error| 5.0, 3.6, 4.0 and 3.6 %. At head dimension 128 and 8K causal keys that
  //   is 0.32 / 0.28 of the peak for FlashAttention-2 (tritonbench measured 0.33 forward at 4.6K
  //   in pytorch/pytorch#142132), 0.56 / 0.49 for cuDNN; at 2K keys 0.27 / 0.21 and 0.45 / 0.36.
  //   bench/gpu/fit_attention.py does the fit and gives these constants back from the bench.
  // - Fused attention on Blackwell: NVIDIA's cudnn-frontend SDPA training benchmark on one B200
  //   (benchmark/sdpa_benchmark_training, sdpa_bf16_benchmark_results_NVIDIA_B200.csv at commit
  //   bb37575d; PyTorch NGC 25.09, cuDNN 9.13; Llama 3.1 405B's 128 query and 8 key/value heads,
  //   d 128, causal, 1K to 128K tokens; bench/gpu/results/b200-cudnn-frontend/sdpa-bf16.csv).
  //   The same fit over its 1K to 32K shapes, at Hopper's head-dimension overhead (the source has
  //   d 128 only), with the time each call's dispatch adds to the benchmark's record of it (it
  //   times every call alone between two CUDA events; a training step queues its kernels ahead
  //   and pays none of it; the fit finds 0 to 285 µs per backend and pass and leaves it out of
  //   the constants): FlashAttention-2 forward (0.235, 580), backward (0.190, 540), cuDNN forward
  //   (0.870, 1380), backward (0.680, 1520); mean |error| 1.3, 0.4, 2.6 and 7.2 % (cuDNN's
  //   backward at 2K keys, slower per FLOP than at 1K, is 33 % of it). At 8K causal keys that is
  //   0.16 / 0.13 of the B200's peak for FlashAttention-2 (recorded 0.17 / 0.13), 0.52 / 0.40 for
  //   cuDNN (recorded 0.52 / 0.42); Hopper's constants gave 0.56 / 0.49. Fitted without the
  //   dispatch, the 1K and 2K shapes, whose kernels take 0.1 to 0.3 ms, made the key overheads
  //   up to twice these (cuDNN's forward 0.995, 2820). The
  //   GB300 takes its own run of the same benchmark (getAttentionConstants).
  //   CDNA3 and CDNA4 take Hopper's FlashAttention-2 (no published measurement of their default
  //   kernels).
  // - FlashAttention-2 on A100: up to 73% of peak in the forward, about 63% in the backward
  //   (Dao 2023, "FlashAttention-2", §4.1), one fraction for every shape; cuDNN on Ampere takes
  //   FlashAttention-2's.
  // - FlashAttention-3 on H100 SXM5, BF16, head dimension 128, sequence 8K (Shah et al. 2024,
  //   "FlashAttention-3", Figure 5, causal forward, and Figure 6, backward): 602 and 559 TFLOP/s
  //   (0.609, 0.565), one fraction for every shape. It runs on Hopper only; MI300X has no cuDNN.
  // - Memory efficiency: the fraction of HBM bandwidth that streaming kernels reach, 0.85 on
  //   NVIDIA devices (STREAM-like copies reach 1.7–1.8 of 2.04 TB/s on A100 80GB; placec's
  //   kernel bench: a copy 2.97 of 3.35 TB/s on H100, 0.89), 0.80 on MI300X.
  static const FusedAttentionConstants ampereFlash = {0.70, 0.63, 0, 0, 0};
  static const FusedAttentionConstants hopperFlash = {0.430, 0.395, 300, 500, 32};
  static const FusedAttentionConstants hopperFlash3 = {0.609, 0.565, 0, 0, 0};
  static const FusedAttentionConstants hopperCudnn = {0.765, 0.700, 380, 580, 32};
  static const FusedAttentionConstants blackwellFlash = {0.235, 0.190, 580, 540, 32};
  static const FusedAttentionConstants blackwellCudnn = {0.870, 0.680, 1380, 1520, 32};
  static const FusedAttentionConstants none = {};
  static const FamilyConstants ampere = {
      /*gemmEfficiency=*/0.869,
      /*fp8GemmEfficiency=*/0, // No FP8 tensor cores.
      /*memoryEfficiency=*/0.85,
      /*flash2=*/ampereFlash,
      /*flash3=*/none,
      /*cudnn=*/ampereFlash,
      /*intraBusEfficiency=*/0.78,
      /*interBusEfficiency=*/0.95,
      /*deepEpNvlinkEfficiency=*/0.68,
      /*hybridEpNvlinkEfficiency=*/0.68,
  };
  static const FamilyConstants hopper = {
      /*gemmEfficiency=*/0.803,
      /*fp8GemmEfficiency=*/0.709,
      /*memoryEfficiency=*/0.85,
      /*flash2=*/hopperFlash,
      /*flash3=*/hopperFlash3,
      /*cudnn=*/hopperCudnn,
      /*intraBusEfficiency=*/0.82,
      /*interBusEfficiency=*/0.95,
      /*deepEpNvlinkEfficiency=*/0.68,
      /*hybridEpNvlinkEfficiency=*/0.68,
  };
  static const FamilyConstants blackwell = {
      /*gemmEfficiency=*/0.776,
      /*fp8GemmEfficiency=*/0.763,
      /*memoryEfficiency=*/0.85,
      /*flash2=*/blackwellFlash,
      /*flash3=*/none,
      /*cudnn=*/blackwellCudnn,
      /*intraBusEfficiency=*/0.82,
      /*interBusEfficiency=*/0.95,
      /*deepEpNvlinkEfficiency=*/0.36,
      /*hybridEpNvlinkEfficiency=*/0.50,
  };
  static const FamilyConstants cdna3 = {
      /*gemmEfficiency=*/0.514,
      /*fp8GemmEfficiency=*/0.514, // No FP8 measurement in the source: the BF16 fraction.
      /*memoryEfficiency=*/0.80,
      /*flash2=*/hopperFlash,
      /*flash3=*/none,
      /*cudnn=*/none,
      /*intraBusEfficiency=*/0.70,
      /*interBusEfficiency=*/0.95,
      /*deepEpNvlinkEfficiency=*/0.68,
      /*hybridEpNvlinkEfficiency=*/0.68,
  };
  // CDNA 4 (MI350X, MI355X) has measured GEMMs of its own and nothing else: the rest is CDNA 3's.
  // Its FP8 fraction is AMD's measurement of hipBLASLt on an MI355X (ROCm 7.1; ROCm blogs, "FP8
  // GEMM Optimization on AMD CDNA 4 Architecture", 2026-03-10, Table 5: E4M3 with BF16 output at
  // M = N = K = 8192, 3,130.21 TFLOP/s, 0.622 of the 5,033.2 peak; 2,750.42 at 4096), which is
  // its BF16 fraction too.
  static const FamilyConstants cdna4 = [] {
    FamilyConstants constants = cdna3;
    constants.gemmEfficiency = 0.622;
    constants.fp8GemmEfficiency = 0.622;
    return constants;
  }();
  switch (family) {
  case ir::DeviceFamily::Ampere:
    return ampere;
  case ir::DeviceFamily::Hopper:
    return hopper;
  case ir::DeviceFamily::Blackwell:
    return blackwell;
  case ir::DeviceFamily::Cdna3:
    return cdna3;
  case ir::DeviceFamily::Cdna4:
    return cdna4;
  }
  return ampere;
}

GemmEfficiency getGemmEfficiency(const ir::DevicePreset &device) {
  // Devices whose own MAMF measurement (same source as getFamilyConstants, at commit 744d01e of
  // August 2026) differs from their family's reference device:
  // - H200 SXM: FP8 1453.4 of 1979 (0.734); its BF16 is the H100 SXM's ("H200 is the same").
  // - GB200: BF16 1822.0 of 2500 (0.729), FP8 3615.6 of 5000 (0.723). The NVL72's GPU is the
  //   B200's with higher datasheet rates, which its products do not reach in proportion (1.04
  //   times the B200's measured BF16 rate and 1.05 times its FP8 rate, against 1.11 on paper).
  // - B300: BF16 1769.0 of 2250 (0.786), FP8 3353.3 of 4500 (0.745).
  // - MI325X: BF16 784.9 of 1307.4 (0.600, PyTorch's TunableOp on, at 1000 W); no FP8
  //   measurement, so its BF16 fraction, as for its family.
  // The GB300 has no measurement there and takes its family's, the B200's; the MI350X takes the
  // MI355X's fraction (the same die at a lower clock).
  struct Measured {
    StringRef device;
    double bf16, fp8; // 0: the family's.
  };
  static const Measured measured[] = {{"h200", 0, 0.734},
                                      {"gb200", 0.729, 0.723},
                                      {"b300", 0.786, 0.745},
                                      {"mi325x", 0.600, 0.600}};
  const FamilyConstants &family = getFamilyConstants(device.family);
  GemmEfficiency efficiency{family.gemmEfficiency, family.fp8GemmEfficiency};
  for (const Measured &entry : measured) {
    if (entry.device != device.name)
      continue;
    if (entry.bf16 > 0)
      efficiency.bf16 = entry.bf16;
    if (entry.fp8 > 0)
      efficiency.fp8 = entry.fp8;
  }
  return efficiency;
}

const FusedAttentionConstants &getAttentionConstants(const ir::DevicePreset &device,
                                                     ir::AttentionKind kernel) {
  // Devices whose own fused-attention measurement ran the software of their family's reference
  // measurement:
  // - GB300: the same cudnn-frontend SDPA training benchmark as the B200's (commit bb37575d,
  //   sdpa_bf16_benchmark_results_NVIDIA_GB300.csv; PyTorch NGC 25.09, cuDNN 9.13, as the B200's;
  //   bench/gpu/results/gb300-cudnn-frontend/sdpa-bf16.csv), fitted the same way, each call's
  //   dispatch apart (`bench/gpu/fit_attention.py --peak 2500 --head-overhead 32`, 1K to 32K
  //   keys; 100 to 145 µs a call): FlashAttention-2 forward (0.225, 320), backward (0.185, 480),
  //   cuDNN forward (0.930, 560), backward (0.705, 880); mean |error| 0.5, 0.4, 0.8 and 3.4 %. At
  //   8K causal keys its cuDNN kernels run at 1,636 / 1,161 TFLOP/s by these (1,496 / 1,130
  //   recorded with the dispatch), 1.40 / 1.30 times the B200's, where the peaks differ by 1.11
  //   (Blackwell Ultra doubles the exponential units the softmax runs on).
  // The GB200's run (cuDNN 9.17, four releases newer than the B200's) is not one of them.
  struct Measured {
    StringRef device;
    FusedAttentionConstants flash2, cudnn;
  };
  static const Measured measured[] = {
      {"gb300", {0.225, 0.185, 320, 480, 32}, {0.930, 0.705, 560, 880, 32}}};
  const FamilyConstants &family = getFamilyConstants(device.family);
  for (const Measured &entry : measured) {
    if (entry.device != device.name)
      continue;
    if (kernel == ir::AttentionKind::Cudnn)
      return entry.cudnn;
    if (kernel == ir::AttentionKind::Flash || kernel == ir::AttentionKind::Materialized)
      return entry.flash2;
  }
  switch (kernel) {
  case ir::AttentionKind::Flash3:
    return family.flash3;
  case ir::AttentionKind::Cudnn:
    return family.cudnn;
  case ir::AttentionKind::Flash:
  case ir::AttentionKind::Materialized:
    break;
  }
  return family.flash2;
}

const Fp8AttentionRatio *getFp8AttentionRatio(const ir::DevicePreset &device) {
  // NVIDIA cudnn-frontend's FP8 SDPA training benchmark (benchmark/sdpa_benchmark_training/
  // benchmark_fp8_sdpa.py; artifacts sdpa_fp8_benchmark_results_NVIDIA_{B200,GB300}.csv at commit
  // 0b1577c8, cuDNN 9.13.1, PyTorch NGC 25.09, the software of the BF16 measurements above;
  // bench/gpu/results/{b200,gb300}-cudnn-frontend/sdpa-fp8.csv): cuDNN's SDPA graph in FP8 (E4M3)
  // and in BF16 over Llama 3.1 405B's heads, causal, in one run. The time ratio FP8 / BF16 per
  // pass, the mean over its 4K to 32K-key shapes (where a training step's attention lies; the
  // 1K and 2K kernels are launch-bound): B200 forward 0.927, 0.921, 0.872, 0.850 (mean 0.893),
  // backward 0.857, 0.793, 0.784, 0.746 (0.795); GB300 forward 0.863, 0.827, 0.810, 0.801
  // (0.825), backward 0.815, 0.760, 0.739, 0.718 (0.758). Fitted alone against the FP8 peak
  // (`bench/gpu/fit_attention.py --fp8-peak`), the FP8 kernels run at 0.525 / 0.485 of the B200's
  // FP8 peak and 0.605 / 0.510 of the GB300's (key overheads 940 / 1560 and 420 / 1300), where
  // the same run's BF16 kernels fit placec's BF16 constants within 0.04 of each fraction: the
  // ratio carries the measurement onto the BF16 constants the rest of the model uses. The other
  // Blackwell devices take the B200's; nothing measured cuDNN's FP8 attention elsewhere.
  static const Fp8AttentionRatio blackwell = {0.893, 0.795};
  static const Fp8AttentionRatio gb300 = {0.825, 0.758};
  if (device.family != ir::DeviceFamily::Blackwell)
    return nullptr;
  return StringRef(device.name) == "gb300" ? &gb300 : &blackwell;
}

bool runsAttention(ir::DeviceFamily family, ir::AttentionKind kernel) {
  const FamilyConstants &constants = getFamilyConstants(family);
  switch (kernel) {
  case ir::AttentionKind::Flash3:
    return constants.flash3.forwardEfficiency > 0;
  case ir::AttentionKind::Cudnn:
    return constants.cudnn.forwardEfficiency > 0;
  case ir::AttentionKind::Flash:
  case ir::AttentionKind::Materialized:
    return true;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Work
//===----------------------------------------------------------------------===//

double AttentionCore::getAttendedKeys() const {
  bool windowed = window > 0 && window < keys;
  if (!causal)
    return windowed ? window : keys;
  // Σ over the queries of min(position, w), continuous as kCausalFraction is: s·w − w²/2.
  return windowed ? window - window * window / (2 * keys) : keys * kCausalFraction;
}

double AttentionCore::getFlops() const {
  // QKᵀ and PV: 2·q·k·d each per head over the keys each query attends (d the query/key and the
  // value head width); the backward's five products are 2.5 times that.
  double flops = 4 * batchHeads * queries * getAttendedKeys() * getMeanHeadDim();
  if (backward)
    flops *= kFusedAttentionBackwardRatio;
  return flops;
}

double Work::getFlops() const {
  double flops = 0;
  for (const Gemm &gemm : gemms)
    flops += gemm.getFlops();
  for (const AttentionCore &core : attention)
    flops += core.getFlops();
  return flops;
}

double Work::getMemoryBytes() const {
  double bytes = 0;
  for (const MemoryOp &op : memory)
    bytes += op.bytes;
  return bytes;
}

bool repeatsKv(const ir::TransformerConfig &config, ir::KernelMode kernels) {
  return (config.kvRepeat || kernels == ir::KernelMode::Eager) &&
         config.heads > config.getKvHeads();
}

int64_t getAttentionKvHeads(const ir::TransformerConfig &config, ir::KernelMode kernels) {
  return repeatsKv(config, kernels) ? config.heads : config.getKvHeads();
}

double getContextAttentionCalls(int64_t context, ir::ContextMethod method, ir::ContextMerge merge) {
  if (context <= 1 || method == ir::ContextMethod::AllToAll)
    return 1;
  if (method == ir::ContextMethod::AllGather && merge == ir::ContextMerge::Fused)
    return 1;
  return static_cast<double>(context);
}

bool rotatesComplex(const ir::TransformerConfig &config, ir::KernelMode kernels) {
  return config.positions == ir::PositionKind::Rope &&
         (config.ropeComplex || kernels == ir::KernelMode::Eager);
}

namespace {

/// The shapes of a transformer on one device, per micro-batch.
struct TransformerDims {
  double b, s, keys, tokens, h, a, kv, d, f, vocab, t, e;
  /// Sliding-window attention's window (ir::TransformerConfig::window); 0: none.
  double window = 0;
  bool sp, swiglu, relu2, rope, fp8;
  /// The rotary embedding is a complex product run as PyTorch's kernels (rotatesComplex).
  bool complexRotary = false;
  /// `projections = separate`: q, k, v and an MLP's gate and up are products of their own.
  bool separateProjections = false;
  /// Sequence parallelism with `sp_inputs = keep`: QKV's and the MLP's inputs kept gathered.
  bool keepInputs = false;
  /// `kernels = eager`, and whether the norms are RMSNorm (eager: fp32 operators) rather than
  /// LayerNorm (one kernel, eager or not).
  bool eager = false, rmsnorm = false;
  /// The attention kernel receives K and V repeated to every query head (repeatsKv).
  bool repeatKv = false;
  /// `params = fp32`, and the parameters gathered (Layout).
  bool fp32Params = false, paramsGathered = false;
  /// `mixed(fp8, saved = fp8)`: the FP8 products' inputs are kept as FP8 (Layout).
  bool fp8Saved = false;
  /// `scaling = mx` or `mixed(fp4)`: each tensor a product reads is block-scaled, MXFP8 with a
  /// one-byte scale per 32 elements or NVFP4 with one per 16 (Layout).
  bool mx = false;
  /// `mixed(fp4)`: the products run in NVFP4 (ir::Fp8Scaling::Nvfp4).
  bool fp4 = false;
  /// `scaling = current`: each FP8 cast computes its tensor's amax in a pass of its own (Layout).
  bool currentScaling = false;
  /// `attention = fp8`: cuDNN's FP8 attention over Q, K and V cast to FP8 (Layout).
  bool fp8Attention = false;
  /// Bytes per element of the copy a product keeps of its input: 1, or an MXFP8 or NVFP4 copy's.
  double fp8SavedBytes() const {
    return ir::getQuantizedBytesPerElement(fp4  ? ir::Fp8Scaling::Nvfp4
                                           : mx ? ir::Fp8Scaling::Mx
                                                : ir::Fp8Scaling::Tensor);
  }
  /// `unpad = true`: Q, K and V packed before the attention kernel, its output padded after.
  bool unpad = false;
  /// Context parallelism: the attention kernels a pass runs (getContextAttentionCalls; 1 without
  /// it) and whose implementation merges them (Layout).
  double attentionCalls = 1;
  ir::ContextMerge contextMerge = ir::ContextMerge::Fused;
  /// `post_norm = true`: a norm on each block's output too, four a layer.
  bool postNorm = false;
  /// `positions = alibi`: ALiBi's bias added to the attention scores.
  bool alibi = false;
  /// `embedding_norm = true`: a norm on the token embedding's output.
  bool embeddingNorm = false;
  /// The norms of a layer: two, or four with `post_norm`.
  double norms() const { return postNorm ? 4 : 2; }
  /// Multi-head latent attention (ir::TransformerConfig::isLatentAttention): the query latent's
  /// width (0: no query latent), the key/value latent's and the rotary part's of each query/key
  /// head. `dqk` and `dv` are the widths of a query/key head and of a value head (both d for
  /// multi-head and grouped-query attention).
  bool latent = false;
  double qRank = 0, kvRank = 0, ropeDim = 0, dqk = 0, dv = 0;
  /// Latent attention's tokens through its down-projections, which are replicated over the
  /// tensor axes: each rank's own under sequence parallelism, all of them otherwise.
  double latentTokens() const { return tokens / (sp ? t : 1); }
  /// Bytes per element of the residual stream (the embedding's output, every residual addition
  /// and the norms' inputs): e, or 4 under autocast over fp32 modules (autocastStream).
  double stream = 2;
  bool autocastStream() const { return stream > e; }
  ir::AttentionKind attention = ir::AttentionKind::Flash;
  bool materialized() const { return attention == ir::AttentionKind::Materialized; }
  /// An MoE layer: its routed experts (getMoeShape), their width, E, and the summed width of
  /// its shared experts.
  bool moe = false;
  MoeShape experts;
  double expertFfn = 0, numExperts = 0, sharedFfn = 0;
  /// The routed experts' tensor-parallel split: t, or 1 folded (Layout::expertFold).
  double et = 1;
  /// Elements of a [tokens, h] tensor outside the tensor-parallel region (norms, residuals):
  /// split over the tensor axes under sequence parallelism.
  double outside() const { return tokens * h / (sp ? t : 1); }
  double batchHeads() const { return b * a / t; }
  /// Q's, K's and V's widths together, per token (before the tensor-parallel split): a·d for Q,
  /// kv·d for K and kv·dv for V, with latent attention's widths where it has them.
  double qkvWidth() const { return (a + kv) * dqk + kv * dv; }
};

TransformerDims getDims(const ir::TransformerConfig &config, const Layout &layout) {
  TransformerDims dims;
  dims.b = layout.microBatch;
  double context = static_cast<double>(std::max<int64_t>(1, layout.context));
  dims.keys = static_cast<double>(config.seq);
  dims.window = static_cast<double>(config.window);
  dims.s = dims.keys / context;
  dims.tokens = dims.b * dims.s;
  dims.h = static_cast<double>(config.hidden);
  dims.a = static_cast<double>(config.heads);
  dims.kv = static_cast<double>(config.getKvHeads());
  dims.d = static_cast<double>(config.getHeadDim());
  dims.dqk = static_cast<double>(config.getQueryKeyHeadDim());
  dims.dv = static_cast<double>(config.getValueHeadDim());
  dims.latent = config.isLatentAttention();
  dims.qRank = static_cast<double>(config.qLoraRank);
  dims.kvRank = static_cast<double>(config.kvLoraRank);
  dims.ropeDim = static_cast<double>(config.ropeHeadDim);
  dims.f = static_cast<double>(config.ffn > 0 ? config.ffn : 4 * config.hidden);
  dims.vocab = static_cast<double>(config.vocab);
  dims.t = static_cast<double>(std::max<int64_t>(1, layout.tensor));
  dims.e = ir::getActivationBytes(layout.precision);
  dims.sp = layout.sequenceParallel && layout.tensor > 1;
  dims.keepInputs = dims.sp && layout.sequenceParallelInputs == ir::SequenceParallelInputs::Keep;
  dims.attention = config.attention;
  dims.swiglu = config.mlp == ir::MlpActivation::Swiglu;
  dims.relu2 = config.mlp == ir::MlpActivation::Relu2;
  dims.rope = config.positions == ir::PositionKind::Rope;
  dims.fp8 = layout.precision == ir::Precision::MixedFP8;
  dims.eager = layout.kernels == ir::KernelMode::Eager;
  dims.repeatKv = repeatsKv(config, layout.kernels);
  dims.complexRotary = rotatesComplex(config, layout.kernels);
  dims.separateProjections = config.projections == ir::Projections::Separate;
  dims.rmsnorm = config.norm == ir::NormKind::RmsNorm;
  dims.fp32Params = layout.fp32Params;
  dims.paramsGathered = layout.paramsGathered;
  dims.fp8Saved = dims.fp8 && layout.fp8Saved;
  dims.mx = dims.fp8 && ir::isBlockScaled(layout.fp8Scaling);
  dims.fp4 = dims.fp8 && layout.fp8Scaling == ir::Fp8Scaling::Nvfp4;
  dims.currentScaling = dims.fp8 && layout.fp8Scaling == ir::Fp8Scaling::Current;
  dims.fp8Attention = dims.fp8 && layout.fp8Attention;
  dims.unpad = config.unpad && !dims.materialized();
  dims.postNorm = config.postNorm;
  dims.alibi = config.positions == ir::PositionKind::Alibi;
  dims.embeddingNorm = config.embeddingNorm;
  dims.attentionCalls =
      getContextAttentionCalls(layout.context, layout.contextMethod, layout.contextMerge);
  dims.contextMerge = layout.contextMerge;
  dims.stream = getStreamBytes(layout.precision, layout.fp32Params, layout.paramsGathered);
  return dims;
}

/// The dimensions of layer `moeLayer` ? an MoE layer : a dense one.
TransformerDims getLayerDims(const ir::TransformerConfig &config, const Layout &layout,
                             bool moeLayer) {
  TransformerDims dims = getDims(config, layout);
  if (!moeLayer || !config.moe.isEnabled())
    return dims;
  const ir::MoeConfig &moe = config.moe;
  dims.moe = true;
  dims.experts = getMoeShape(config, layout);
  dims.et = layout.expertFold ? 1 : dims.t;
  dims.expertFfn = static_cast<double>(moe.expertFfn);
  dims.numExperts = static_cast<double>(moe.experts);
  dims.sharedFfn =
      static_cast<double>(moe.sharedExperts) * static_cast<double>(moe.sharedExpertFfn);
  return dims;
}

std::vector<Gemm> layerProjectionShapes(const TransformerDims &x);

/// The products of a layer's forward outside the attention core (in FP8 under mixed(fp8)).
std::vector<Gemm> layerProjections(const TransformerDims &x) {
  std::vector<Gemm> gemms = layerProjectionShapes(x);
  for (Gemm &gemm : gemms) {
    gemm.fp8 = x.fp8 && gemm.name != "router"; // The router stays in BF16 (Transformer Engine).
    gemm.mx = gemm.fp8 && x.mx;
    gemm.fp4 = gemm.fp8 && x.fp4;
  }
  return gemms;
}

/// Inputs that separate projections share (Gemm::input): the attention's and each MLP's.
enum SharedInput { kInputAttention, kInputMlp, kInputExperts, kInputSharedExperts };

/// A feed-forward block of `width` over `rows` tokens, `batch` of them (grouped experts), split
/// `split` ways by the tensor axes (t; folded routed experts 1, beside no tensor-parallel
/// collective: no tensor slot).
/// Under `projections = separate` a swiglu MLP's gate and up are two products of `input`.
void addMlpShapes(const TransformerDims &x, const std::string &name, SharedInput input, double rows,
                  double width, double batch, double split, std::vector<Gemm> &gemms) {
  bool folded = split < x.t;
  int in = folded ? -1 : kSlotMlpIn, out = folded ? -1 : kSlotMlpOut;
  if (x.swiglu && x.separateProjections) {
    for (const char *part : {" gate", " up"}) {
      gemms.push_back({name + part, rows, width / split, x.h, batch});
      gemms.back().tensorSlot = in;
      gemms.back().input = input;
    }
  } else if (x.swiglu) {
    gemms.push_back({name + " gate and up", rows, 2 * width / split, x.h, batch});
  } else {
    gemms.push_back({name + " up", rows, width / split, x.h, batch});
  }
  gemms.back().tensorSlot = in;
  gemms.push_back({name + " down", rows, x.h, width / split, batch});
  gemms.back().tensorSlot = out;
}

/// Multi-head latent attention's products before the attention core, as Megatron-Core runs them
/// (megatron/core/transformer/multi_latent_attention.py): the down-projections, replicated over
/// the tensor axes, of each rank's tokens (its sequence slice under sequence parallelism) into
/// the query latent and into the key/value latent with the shared rotary key; the up-projections,
/// column-parallel, of the gathered latents to the heads' queries and to their keys and values.
/// Without a query latent the queries are one column-parallel product of the hidden state.
void addLatentProjectionShapes(const TransformerDims &x, std::vector<Gemm> &gemms) {
  auto add = [&](const char *name, double m, double n, double k, int slot, int input) {
    gemms.push_back({name, m, n, k});
    gemms.back().tensorSlot = slot;
    gemms.back().input = input;
  };
  // The hidden state is read by both down-projections (or by q and the kv down-projection
  // without sequence parallelism, where q's input is not gathered).
  int shared = x.qRank > 0 || !x.sp ? kInputAttention : -1;
  if (x.qRank > 0) {
    add("q down", x.latentTokens(), x.qRank, x.h, -1, shared);
    add("q up", x.tokens, x.a * x.dqk / x.t, x.qRank, kSlotQkv, -1);
  } else {
    add("q", x.tokens, x.a * x.dqk / x.t, x.h, kSlotQkv, shared);
  }
  add("kv down", x.latentTokens(), x.kvRank + x.ropeDim, x.h, -1, shared);
  add("kv up", x.tokens, x.a * (x.d + x.dv) / x.t, x.kvRank, kSlotQkv, -1);
}

std::vector<Gemm> layerProjectionShapes(const TransformerDims &x) {
  std::vector<Gemm> gemms;
  if (x.latent) {
    addLatentProjectionShapes(x, gemms);
  } else if (x.separateProjections) {
    for (auto [name, heads] : {std::pair{"q", x.a}, {"k", x.kv}, {"v", x.kv}}) {
      gemms.push_back({name, x.tokens, heads * x.d / x.t, x.h});
      gemms.back().tensorSlot = kSlotQkv;
      gemms.back().input = kInputAttention;
    }
  } else {
    gemms.push_back({"qkv", x.tokens, (x.a + 2 * x.kv) * x.d / x.t, x.h});
    gemms.back().tensorSlot = kSlotQkv;
  }
  gemms.push_back({"attention output", x.tokens, x.h, x.a * x.dv / x.t});
  gemms.back().tensorSlot = kSlotAttentionOutput;
  if (!x.moe) {
    addMlpShapes(x, "mlp", kInputMlp, x.tokens, x.f, 1, x.t, gemms);
    return gemms;
  }
  // The routed experts as grouped GEMMs (one product per local expert over its rows), the
  // router's scores of every expert for the tokens this device routes, and the shared experts as
  // one MLP over every token.
  gemms.push_back({"router", x.experts.tokens, x.numExperts, x.h});
  size_t routed = gemms.size();
  addMlpShapes(x, "experts", kInputExperts, x.experts.tokensPerExpert, x.expertFfn,
               x.experts.localExperts, x.et, gemms);
  for (size_t i = routed; i < gemms.size(); ++i)
    gemms[i].routed = true;
  if (x.sharedFfn > 0)
    addMlpShapes(x, "shared experts", kInputSharedExperts, x.tokens, x.sharedFfn, 1, x.t, gemms);
  return gemms;
}

/// For each product of a forward, the backward's input gradient and weight gradient.
void addBackwardProducts(const std::vector<Gemm> &forward, std::vector<Gemm> &out) {
  for (const Gemm &gemm : forward) {
    out.push_back({gemm.name + " input gradient", gemm.m, gemm.k, gemm.n, gemm.batch,
                   /*weightGradient=*/false, gemm.fp8, gemm.mx, gemm.tensorSlot,
                   /*inputGradient=*/true, /*input=*/-1, gemm.fp4, gemm.routed});
    out.push_back({gemm.name + " weight gradient", gemm.k, gemm.n, gemm.m, gemm.batch,
                   /*weightGradient=*/true, gemm.fp8, gemm.mx, gemm.tensorSlot,
                   /*inputGradient=*/false, /*input=*/-1, gemm.fp4, gemm.routed});
  }
}

/// The materialized attention core: QKᵀ and PV over every head, the softmax and its dropout
/// in device memory (Korthikanti et al. 2022, §4.1). Under ALiBi the scores' product starts from
/// the bias: Megatron-DeepSpeed's ParallelAttention (bigscience-workshop/Megatron-DeepSpeed,
/// megatron/model/transformer.py) calls torch.baddbmm with the bias of one row per head as its
/// addend and beta 1, and PyTorch expands that addend into the whole output before the batched
/// product, which then reads it back as its C (aten/src/ATen/native/cuda/Blas.cpp,
/// baddbmm_out_cuda_impl): the scores written and read once more. The backward is unchanged
/// (the bias has no gradient).
void addMaterializedAttention(const TransformerDims &x, bool backward, Work &work) {
  double bh = x.batchHeads(), q = x.s, k = x.keys, d = x.d;
  double scores = bh * q * k;
  if (!backward) {
    if (x.alibi)
      work.memory.push_back(
          {"ALiBi bias expanded into the scores (QKᵀ's addend)", 2 * scores * x.e});
    work.gemms.push_back({"attention scores QKᵀ", q, k, d, bh});
    work.gemms.push_back({"attention values PV", q, d, k, bh});
    work.memory.push_back({"softmax", 2 * scores * x.e});
    work.memory.push_back({"attention dropout", scores * (2 * x.e + 1)});
    return;
  }
  work.gemms.push_back({"attention dV = Pᵀ·dO", k, d, q, bh});
  work.gemms.push_back({"attention dP = dO·Vᵀ", q, k, d, bh});
  work.gemms.push_back({"attention dQ = dS·K", q, d, k, bh});
  work.gemms.push_back({"attention dK = dSᵀ·Q", k, d, q, bh});
  work.memory.push_back({"softmax backward", 3 * scores * x.e});
  work.memory.push_back({"attention dropout backward", scores * (2 * x.e + 1)});
}

/// The memory-bound work around a context-parallel rank's attention kernels in one pass, in
/// elements of the activation type (ContextMerge): O, Q and KV are the rank's attention output,
/// queries, and keys and values as exchanged (getAttentionKvHeads), c the kernels
/// (getContextAttentionCalls).
///  - Transformer Engine's ring (transformer_engine/pytorch/attention/dot_product_attention/
///    context_parallel.py, AttnFuncWithCPAndKVP2P): forward, K and V concatenated into the ring's
///    first buffer (read and written, 2·KV), the output zero-filled (O) and, after the steps, each
///    step's output folded into it by its log-sum-exp (flash_attn_fwd_out_correction, jit-fused:
///    the step's output read, the running output read and written, 3·O a step); backward, K and V
///    copied into the buffer (2·KV), each step's dQ and dK/dV copied (the first) or added into
///    their accumulators (2 or 3 accesses each: (3c − 1)·(Q + KV)). Its all-gather runs one kernel
///    per chunk of queries over the keys it attends and merges nothing; the log-sum-exp
///    corrections ([b, heads, s] in fp64) are left out.
///  - PyTorch's context parallelism (torch/distributed/tensor/experimental/_attention.py,
///    _templated_ring_attention and _SDPAMerger; bench/gpu/ring_attention.py runs the same
///    operators): forward, K and V concatenated into the buffer passed on at each of c − 1 steps
///    (2·KV), the first block's output cast to fp32 (read O, write 2·O), each later one merged as
///    out − sigmoid(lse_b − lse)·(out − out_b) by three eager fp32 operators (5 + 4 + 6 = 15·O),
///    the result cast back (3·O); backward, the fp32 gradient accumulators zero-filled (2·Q +
///    2·KV), at each of c steps dQ, dK and dV added in fp32 (read 2 + 1, write 2: 5·Q + 5·KV) and
///    the fp32 dK/dV concatenated to pass on (4·KV), K and V concatenated at c − 1 steps (2·KV),
///    and the gradients cast back (3·Q + 3·KV).
double contextMergeElements(const TransformerDims &x, bool backward) {
  double c = x.attentionCalls;
  if (c <= 1)
    return 0;
  double headsPerRank = x.a / x.t;
  double o = x.tokens * headsPerRank * x.dv;
  double q = x.tokens * headsPerRank * x.dqk;
  double kv = x.tokens * ((x.repeatKv ? x.a : x.kv) / x.t) * (x.dqk + x.dv);
  if (x.contextMerge == ir::ContextMerge::Fused)
    return backward ? 2 * kv + (3 * c - 1) * (q + kv) : 2 * kv + (1 + 3 * c) * o;
  if (backward)
    return (5 + 5 * c) * q + (3 + 11 * c) * kv;
  return 2 * (c - 1) * kv + (6 + 15 * (c - 1)) * o;
}

AttentionCore fusedAttention(const TransformerDims &x, bool backward) {
  AttentionCore core;
  core.batchHeads = x.batchHeads();
  core.queries = x.s;
  core.keys = x.keys;
  core.headDim = x.dqk;
  core.valueDim = x.latent ? x.dv : 0;
  core.causal = true;
  core.window = x.window;
  core.backward = backward;
  core.kernel = x.attention;
  core.calls = x.attentionCalls;
  core.fp8 = x.fp8Attention;
  return core;
}

/// The fused attention kernel of a pass and, under context parallelism, the merges around its
/// blocks (contextMergeElements).
void addFusedAttention(const TransformerDims &x, bool backward, Work &work) {
  work.attention.push_back(fusedAttention(x, backward));
  // `attention = fp8` (Transformer Engine's DotProductAttention without fp8_mha): it casts its
  // Q, K and V to FP8 before the kernel and the output's gradient before the backward, each read
  // in the activation type (twice where the recipe scales by the tensor's own amax: current
  // scaling, and the block-scaled recipes, whose attention NVIDIA's recipes run with current
  // scaling, NVTE_DPA_FP8_RECIPE) and written as one byte, and turns the kernel's FP8 gradients of
  // Q, K and V back into the activation type (one byte read, e written); the output leaves the
  // kernel in the activation type (NVTE_DPA_FP8CS_O_in_F16).
  if (x.fp8Attention) {
    double qkv = x.tokens * x.qkvWidth() / x.t;
    double read = (x.currentScaling || x.mx ? 2 : 1) * x.e;
    if (backward)
      work.memory.push_back({"fp8 cast of the attention output's gradient, and Q, K and V's "
                             "gradients back from fp8",
                             x.tokens * x.a * x.dv / x.t * (read + 1) + qkv * (1 + x.e)});
    else
      work.memory.push_back({"fp8 casts of Q, K and V", qkv * (read + 1)});
  }
  if (double elements = contextMergeElements(x, backward); elements > 0)
    work.memory.push_back({x.contextMerge == ir::ContextMerge::Fused
                               ? (backward ? "context-parallel ring's gradient accumulations"
                                           : "context-parallel ring's output corrections")
                               : (backward ? "context-parallel gradient accumulations (fp32, eager)"
                                           : "context-parallel output merges (fp32, eager)"),
                           elements * x.e});
}

/// The products of a pass grouped by the input they read (Gemm::input): each group's first
/// product (a pointer into `products`, which must outlive the result) and how many read that
/// input. Under `projections = separate` q, k and v share one and
/// so do an MLP's gate and up; every other product reads its own.
std::vector<std::pair<const Gemm *, int>> groupBySharedInput(const std::vector<Gemm> &products) {
  std::vector<std::pair<const Gemm *, int>> groups;
  for (const Gemm &gemm : products) {
    auto shared = llvm::find_if(groups, [&](const std::pair<const Gemm *, int> &group) {
      return gemm.input >= 0 && group.first->input == gemm.input;
    });
    if (shared != groups.end())
      ++shared->second;
    else
      groups.push_back({&gemm, 1});
  }
  return groups;
}

/// Memory-bound kernels of a layer's forward outside the attention core.
/// FP8 casts of the products' inputs (forward) or output gradients (backward), with their
/// scaling maxima: read in the activation type, write one byte (Transformer Engine fuses the
/// cast with the norm before a product where it can; the count here is each cast once). Products
/// that read one input cast it once: torch.compile's graph computes torchao's identical casts of
/// it once (AOTAutograd's common-subexpression elimination). Under current scaling the amax is a
/// pass of its own before the cast, which reads the input a second time (Transformer Engine,
/// docs/features/low_precision_training/fp8_current_scaling: "Quantization is a memory-bound
/// operation that requires reading the tensor twice"). Under MXFP8 each cast writes two copies,
/// along the rows and along the columns, each with its block scales (Transformer Engine's MXFP8
/// quantization of a tensor for both of the products that read it). NVFP4 writes its two copies the
/// same way, after an amax pass of its own for the tensor's FP32 scale, the second level of its
/// scales (NVIDIA, arXiv:2509.25149, §2; Transformer Engine's gemm_profiling.rst lists the
/// "per-tensor amax passes: extra memory pass to compute scaling factors" among NVFP4's own costs).
void addFp8Casts(const TransformerDims &x, const std::vector<Gemm> &products, bool backward,
                 Work &work) {
  if (!x.fp8)
    return;
  double elements = 0;
  if (backward) {
    for (const Gemm &gemm : products)
      if (gemm.fp8)
        elements += gemm.m * gemm.n * gemm.batch;
  } else {
    for (const auto &[gemm, readers] : groupBySharedInput(products))
      if (gemm->fp8)
        elements += gemm->m * gemm->k * gemm->batch;
  }
  double written = x.mx ? 2 * x.fp8SavedBytes() : 1;
  bool amaxPass = x.currentScaling || x.fp4;
  double read = amaxPass ? 2 * x.e : x.e;
  const char *how = x.fp4              ? " (amax, then rows and columns)"
                    : x.mx             ? " (rows and columns)"
                    : x.currentScaling ? " (current scaling: amax and cast)"
                                       : "";
  work.memory.push_back({fmt::format("{} casts of the {}{}",
                                     x.fp4  ? "nvfp4"
                                     : x.mx ? "mxfp8"
                                            : "fp8",
                                     backward ? "gradients" : "inputs", how),
                         elements * (read + written)});
}

/// `mixed(…, params = fp32)` (PyTorch's mixed precision over fp32 modules): every use casts the
/// weights to the compute type. Per weight element (k·n of each product a pass runs, its
/// `batch` of them):
///  - a forward or recomputation over weights that are not gathered casts each, 4 bytes read and
///    e written (autocast's cast of each weight argument; aten/src/ATen/autocast_mode.h). When
///    gathered, FSDP2's MixedPrecisionPolicy casts the shard before the all-gather, 1/g of it,
///    which is left out;
///  - a backward casts each weight gradient to fp32, e read and 4 written (autograd's
///    ToCopyBackward under autocast; FSDP2's copy of the gradients into its fp32 reduce-scatter
///    buffer);
///  - compiled (`kernels = fused`), without gather, the backward casts the weights again:
///    AOTAutograd's min-cut partitioner recomputes cheap element-wise functions of a parameter
///    rather than saving their outputs. Eager autograd saves the copies instead (activation
///    memory, getLayerActivationBytes).
double getWeightElements(const std::vector<Gemm> &products) {
  double elements = 0;
  for (const Gemm &gemm : products)
    elements += gemm.k * gemm.n * gemm.batch;
  return elements;
}
/// The run's side of the casts: the compute type's bytes e, and the flags of Layout.
struct WeightCastLayout {
  double e;
  bool fp32Params, paramsGathered, eager;
};
void addWeightCasts(const WeightCastLayout &x, const std::vector<Gemm> &products, bool backward,
                    Work &work) {
  if (!x.fp32Params)
    return;
  double elements = getWeightElements(products);
  double cast = elements * (4 + x.e);
  if (!backward) {
    if (!x.paramsGathered)
      work.memory.push_back({"fp32 weights cast (params = fp32)", cast});
    return;
  }
  work.memory.push_back({"weight gradients cast to fp32 (params = fp32)", cast});
  if (!x.eager && !x.paramsGathered)
    work.memory.push_back({"fp32 weights cast again (params = fp32, compiled)", cast});
}
void addWeightCasts(const TransformerDims &x, const std::vector<Gemm> &products, bool backward,
                    Work &work) {
  addWeightCasts(WeightCastLayout{x.e, x.fp32Params, x.paramsGathered, x.eager}, products, backward,
                 work);
}

/// Bytes of one [rows, width/t] slab over a layer's routed experts (width whole folded).
double expertWidthBytes(const TransformerDims &x) {
  return x.experts.tokensPerExpert * x.experts.localExperts * x.expertFfn / x.et * x.e;
}

/// Bytes of one [rows, width/t] slab over the layer's feed-forward blocks: the dense MLP, or the
/// routed experts' rows and the shared experts'.
double mlpWidthBytes(const TransformerDims &x) {
  if (!x.moe)
    return x.tokens * x.f / x.t * x.e;
  return expertWidthBytes(x) + x.tokens * x.sharedFfn / x.t * x.e;
}

/// An MoE layer's routing: the router's softmax (or sigmoid) and top-k over fp32 scores, and the
/// permutation of the token rows into the dispatch buffer and back (the combine weighs and sums
/// them), each read and written once; under MoeShape::sortsByLocalExpert the received rows'
/// sort into local-expert order and back as well.
void addRouting(const TransformerDims &x, bool backward, Work &work) {
  if (!x.moe)
    return;
  double scores = x.experts.tokens * x.numExperts * 4;
  double rows = x.experts.dispatchRows * x.h * x.e;
  work.memory.push_back(
      {backward ? "router backward" : "router scores and top-k", (backward ? 3 : 2) * scores});
  work.memory.push_back(
      {backward ? "token permutation backward" : "token permutation", 2 * 2 * rows});
  if (x.experts.sortsByLocalExpert)
    work.memory.push_back({backward ? "received rows sorted by local expert backward"
                                    : "received rows sorted by local expert",
                           2 * 2 * rows, /*routedShare=*/1});
}

/// The forward's element-wise kernels, each read and written once: the two norms, the rotary
/// embedding of Q and K, the MLP activation (swiglu: gate and up in, product out), and one
/// residual addition (bias, dropout and add fused under materialized attention, with a one-byte
/// mask).
///
/// Under `kernels = eager` each operator of torchtitan's reference modules (commit 9dec370,
/// `models/norms.py` and `models/llama/model.py`) is one PyTorch kernel that reads its inputs and
/// writes its output, and autograd runs the derivative of each (PyTorch's
/// `tools/autograd/derivatives.yaml` and `FunctionsManual.cpp`); per element, with e bytes per
/// activation and 4 per fp32 value, row statistics left out:
///  - RMSNorm, `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight`:
///    forward float() e+4, pow 8, mean 4, the product by the row's rsqrt 8, type_as 4+e, the
///    weight 2e: 4e + 28. Backward: the weight's product 2e and its gradient 3e + a sum e, type_as
///    e+4, the rsqrt product 8 and its gradient 12 + a sum 4, the mean's expansion 4,
///    pow_backward `grad * (2 * x.pow(1))` 8 + 8 + 12, the two gradients of x added 12, float()
///    4+e: 8e + 76. A fused norm reads and writes once (2e), its backward reads two and writes one
///    (3e). LayerNorm is one kernel either way.
///  - The rotary embedding as a complex product, `view_as_complex(x.float()) * freqs_cis` cast
///    back: float() e+4, the product 8, type_as 4+e: 2e + 16, and the same in the backward. The
///    same kernels run compiled where the model says `rope_complex = true` (rotatesComplex):
///    TorchInductor falls back to PyTorch's kernel for the complex product, so the cast to fp32
///    before it and the cast back after it are kernels of their own as well.
///  Under fp32 activations the casts are no kernels: an RMSNorm moves 28 forward and 92 backward,
///  the rotary embedding 8 each way.
///  - swiglu, `silu(w1(x)) * w3(x)`: silu 2e, the product 3e (5e); backward: the product's two
///    gradients 3e each, silu_backward 3e (9e). A fused one moves 3e and 5e. GELU is one kernel.
///  - Grouped keys and values repeated to every head before the attention kernel (`repeat_kv`,
///    an expand that reshape copies): kv·d read and a·d written per token for K and for V, and
///    the backward sums the a·d gradients back to kv·d. Not eager-only: wherever repeatsKv holds
///    (`kv_repeat = true` too, compiled or not: scaled_dot_product_attention needs the repeated
///    tensor, so torch.compile materializes it as well).
/// The two casts to fp32 and back around an eager RMSNorm or rotary embedding, e+4 each way; none
/// when the activations are fp32 already (`x.float()` and `type_as` return their input).
///
/// Under autocast over fp32 modules (TransformerDims::stream 4) the norms read and write the fp32
/// stream: an eager RMSNorm is its fp32 operators without the two casts, a LayerNorm reads and
/// writes 4 bytes (its backward reads two, writes one). Each norm's output is cast to e for the
/// product it feeds (autocast casts a linear's input), a kernel of 4 + e eager, and the backward
/// casts that product's input gradient back (ToCopyBackward), e + 4; compiled, each cast is fused
/// into its norm, which then writes e (and its backward reads an e-byte gradient).
double eagerCastBytes(double e) { return e < 4 ? 2 * (e + 4) : 0; }
double normBytesPerElement(const TransformerDims &x, bool backward) {
  double s = x.stream;
  if (x.eager && x.rmsnorm)
    return eagerCastBytes(s) + (backward ? 6 * s + 68 : 2 * s + 20);
  if (x.autocastStream() && !x.eager)
    return backward ? 2 * s + x.e : s + x.e;
  return backward ? 3 * s : 2 * s;
}
/// One of eager autocast's casts between the fp32 stream and the products, per element of the
/// stream (0 when there are none): forward, a norm's output cast to e; backward, the product's
/// input gradient cast back to fp32, and the stream's gradient cast to e for the residual
/// branch's product (the addition's backward returns each input's gradient in that input's type).
double streamCastBytes(const TransformerDims &x) {
  return x.autocastStream() && x.eager ? x.stream + x.e : 0;
}
double rotaryBytesPerElement(const TransformerDims &x) {
  return x.complexRotary ? eagerCastBytes(x.e) + 8 : 2 * x.e;
}
/// Tensors of the MLP's width each MLP activation kernel reads or writes. GELU is one kernel each
/// way; so is squared ReLU fused (NeMo's and Megatron-LM's `squared_relu`, `torch.pow(F.relu(x),
/// 2)` under `torch.compile`: nemo/collections/nlp/modules/common/megatron/utils.py at v2.0.0rc0,
/// megatron/training/activations.py at core_r0.8.0). Eager, squared ReLU is relu then pow, 2 + 2,
/// and in the backward pow_backward's `grad * (2 * r.pow(1))` (a copy 2, the scaling 2, the
/// product 3) then relu's threshold_backward 3: 10.
double mlpActivationAccesses(const TransformerDims &x, bool backward) {
  if (x.relu2 && x.eager)
    return backward ? 10 : 4;
  if (!x.swiglu)
    return backward ? 3 : 2;
  if (x.eager)
    return backward ? 9 : 5;
  return backward ? 5 : 3;
}

/// A layer's norms, each over the stream: `count` of them (x.norms() in a forward; `post_norm`'s
/// norms of the blocks' outputs go to the residual additions, not to a product, so only the two
/// pre-norms' outputs are cast, and recomputed by recompute(selective)).
void addNorms(const TransformerDims &x, Work &work, double count) {
  work.memory.push_back({"norms", count * x.outside() * normBytesPerElement(x, false)});
  if (double cast = streamCastBytes(x))
    work.memory.push_back({"norm outputs cast (autocast)", 2 * x.outside() * cast});
}
/// The rotary embedding of Q and K, forward or backward (the same kernels each way). Under latent
/// attention, Megatron-Core's fused kernels (megatron/core/fusions/fused_mla_yarn_rope_apply.py):
/// the queries' rotary parts turned in place (a·r read and written), and the keys and values
/// written from the key/value up-projection's output and the shared rotary key (a·(d + dv) + r
/// read, a·(d + r) + a·dv written), per token over t.
void addRotary(const TransformerDims &x, bool backward, Work &work) {
  if (!x.rope)
    return;
  std::string name = x.latent          ? "rotary embedding (latent attention: Q in place, K and V)"
                     : x.complexRotary ? "rotary embedding (complex product)"
                                       : "rotary embedding";
  if (backward)
    name += " backward";
  double bytes =
      x.latent ? x.tokens *
                     ((2 * x.a * x.ropeDim + x.a * (x.d + x.dv) + x.a * (x.dqk + x.dv)) / x.t +
                      x.ropeDim) *
                     x.e
               : x.tokens * (x.a + x.kv) * x.d / x.t * rotaryBytesPerElement(x);
  work.memory.push_back({std::move(name), bytes});
}
/// Latent attention's norms of its latents (a fused kernel each way, as LayerNormLinear runs the
/// query's and the key/value's), over the tokens of its down-projections.
void addLatentNorms(const TransformerDims &x, bool backward, Work &work) {
  if (!x.latent)
    return;
  work.memory.push_back({backward ? "latent norms backward" : "latent norms",
                         (backward ? 3 : 2) * x.e * x.latentTokens() * (x.qRank + x.kvRank)});
}
void addKvExpansion(const TransformerDims &x, bool backward, Work &work) {
  if (x.repeatKv)
    work.memory.push_back({backward ? "grouped K/V gradients summed" : "grouped K/V repeated",
                           2 * x.tokens * (x.a + x.kv) * x.d / x.t * x.e});
}
/// `unpad = true` (flash-attn's bert_padding, as llm-foundry's MPT calls it): the forward gathers
/// Q, K and V into packed tensors (`index_first_axis`: a·d + 2·kv·d elements per token read and
/// written) and pads the kernel's output back (`pad_input`: a zero-filled tensor, then the
/// output's rows read and scattered into it, three a·d-wide passes); the backward gathers the
/// output's gradient (two passes) and zero-fills and scatters the gradients of Q, K and V (three
/// passes each). Per token, 5·e bytes for each element of Q, K, V and the output over both.
void addUnpad(const TransformerDims &x, bool backward, Work &work) {
  if (!x.unpad)
    return;
  double qkv = x.tokens * (x.a + 2 * x.kv) * x.d / x.t, output = x.tokens * x.a * x.d / x.t;
  if (backward)
    work.memory.push_back({"attention gradients padded (unpad)", (3 * qkv + 2 * output) * x.e});
  else
    work.memory.push_back({"attention inputs unpadded (unpad)", (2 * qkv + 3 * output) * x.e});
}
/// The routed experts' share of an MoE layer's MLP activation (its bytes over the shared
/// experts' too); 0 in a dense layer.
double routedActivationShare(const TransformerDims &x) {
  return x.moe ? expertWidthBytes(x) / mlpWidthBytes(x) : 0;
}
void addMlpActivation(const TransformerDims &x, Work &work) {
  work.memory.push_back({"mlp activation", mlpActivationAccesses(x, false) * mlpWidthBytes(x),
                         routedActivationShare(x)});
}
/// A residual addition reads the stream and the branch's e-byte output and writes the stream.
double residualBytes(const TransformerDims &x) {
  return (2 * x.stream + x.e) * x.outside() + (x.materialized() ? x.outside() : 0);
}

/// The casts of a layer's products (FP8 inputs or gradients, fp32 weights), when it has any.
void addProjectionCasts(const TransformerDims &x, bool backward, Work &work) {
  if (!x.fp8 && !x.fp32Params)
    return;
  std::vector<Gemm> products = layerProjections(x);
  addFp8Casts(x, products, backward, work);
  addWeightCasts(x, products, backward, work);
}

void addLayerElementwise(const TransformerDims &x, Work &work) {
  addProjectionCasts(x, /*backward=*/false, work);
  addRouting(x, /*backward=*/false, work);
  addNorms(x, work, x.norms());
  addLatentNorms(x, /*backward=*/false, work);
  addRotary(x, /*backward=*/false, work);
  addKvExpansion(x, /*backward=*/false, work);
  addUnpad(x, /*backward=*/false, work);
  addMlpActivation(x, work);
  work.memory.push_back({"residuals", 2 * residualBytes(x)});
}

/// `projections = separate`: autograd sums the input gradients of the products that read one
/// input (q, k, v; an MLP's gate and up), each an m×k tensor in e bytes. Compiled, one kernel
/// reads the n gradients and writes their sum ((n + 1)·m·k·e: TorchInductor fuses the additions,
/// and the matmuls' reshapes keep its mm-plus-mm pattern from matching); eager, autograd adds
/// them in pairs as they arrive (3·(n − 1)·m·k·e). Fused projections return one gradient.
void addInputGradientSums(const TransformerDims &x, const std::vector<Gemm> &products, Work &work) {
  if (!x.separateProjections)
    return;
  double bytes = 0;
  for (const auto &[gemm, readers] : groupBySharedInput(products))
    if (readers > 1)
      bytes +=
          (x.eager ? 3.0 * (readers - 1) : readers + 1.0) * gemm->m * gemm->k * gemm->batch * x.e;
  if (bytes > 0)
    work.memory.push_back({"input gradients summed (projections = separate)", bytes});
}

/// `products`: the layer's forward products (layerProjections), whose backward this is.
void addLayerElementwiseBackward(const TransformerDims &x, const std::vector<Gemm> &products,
                                 Work &work) {
  addProjectionCasts(x, /*backward=*/true, work);
  addInputGradientSums(x, products, work);
  addRouting(x, /*backward=*/true, work);
  work.memory.push_back({"norms backward", x.norms() * x.outside() * normBytesPerElement(x, true)});
  addLatentNorms(x, /*backward=*/true, work);
  if (double cast = streamCastBytes(x))
    work.memory.push_back({"stream gradients cast (autocast)", 4 * x.outside() * cast});
  addRotary(x, /*backward=*/true, work);
  addKvExpansion(x, /*backward=*/true, work);
  addUnpad(x, /*backward=*/true, work);
  work.memory.push_back({"mlp activation backward",
                         mlpActivationAccesses(x, true) * mlpWidthBytes(x),
                         routedActivationShare(x)});
  // Compiled autocast: the stream's gradient is also written in e for the branch's product.
  double branch = x.autocastStream() && !x.eager ? x.e : 0;
  work.memory.push_back({"residuals backward", 2 * ((2 * x.stream + branch) * x.outside() +
                                                    (x.materialized() ? x.outside() : 0))});
}

/// `recompute(op)`: PyTorch's selective activation checkpointing under torchtitan's "op" policy
/// (torchtitan `apply_ac`, December 2024) keeps the outputs of the attention kernel and of every
/// other `aten.mm` in forward order (wq 1, wk 2, wv 3, wo 4, w1 5, w3 6, w2 7), and recomputes
/// the rest before the layer's backward, stopping once every tensor the backward reads is back
/// (PyTorch's non-reentrant checkpoint stops early). The recomputed products are wk, wo and, for
/// swiglu, w3 (a gelu MLP's second product feeds no tensor the backward reads); with them the
/// norms, the rotary embedding, the MLP activation and the attention block's residual.
std::vector<Gemm> opRecomputedProducts(const TransformerDims &x) {
  std::vector<Gemm> gemms;
  gemms.push_back({"k", x.tokens, x.kv * x.d / x.t, x.h});
  gemms.back().tensorSlot = kSlotQkv;
  gemms.push_back({"attention output", x.tokens, x.h, x.a * x.d / x.t});
  gemms.back().tensorSlot = kSlotAttentionOutput;
  if (x.swiglu) {
    gemms.push_back({"mlp up", x.tokens, x.f / x.t, x.h});
    gemms.back().tensorSlot = kSlotMlpIn;
  }
  for (Gemm &gemm : gemms) {
    gemm.fp8 = x.fp8;
    gemm.mx = x.mx;
    gemm.fp4 = x.fp4;
  }
  return gemms;
}

void addOpRecompute(const TransformerDims &x, Work &work) {
  work.gemms = opRecomputedProducts(x);
  addFp8Casts(x, work.gemms, /*backward=*/false, work);
  addWeightCasts(x, work.gemms, /*backward=*/false, work);
  addNorms(x, work, 2);
  addRotary(x, /*backward=*/false, work);
  addKvExpansion(x, /*backward=*/false, work);
  addMlpActivation(x, work);
  work.memory.push_back({"residual", residualBytes(x)});
}

/// The bytes per logit of an unfused cross-entropy's forward (PyTorch's F.cross_entropy over fp32
/// logits), each kernel's reads and writes: the fp32 copy (e in, 4 out) and the log-softmax (its
/// two passes read 8, write 4); the loss's gather of one log-probability per row is negligible.
double unfusedCrossEntropyBytes(double e) { return e + 16; }

/// The bytes per logit of a cross-entropy's forward and backward, each kernel's reads and writes.
/// `fused`: one kernel reads the logits and one writes their gradient (e each). `vocab_parallel`
/// (Megatron-LM's, megatron/core/tensor_parallel/cross_entropy.py, and its 2021 megatron/mpu):
/// the fp32 copy (e in, 4 out), the maximum (4 in), the subtraction (4 in, 4 out), the
/// exponential (4 in, 4 out), the sum (4 in) and the division (4 in, 4 out), all in place, e + 36;
/// in the backward the product with the loss's gradient in place (4 in, 4 out) and the cast back
/// (4 in, e out), e + 12 (the target's one logit per row is negligible). `unfused`: the forward's
/// unfusedCrossEntropyBytes; the backward's gradient of the log-probabilities (4 written), the
/// log-softmax backward (8 in, 4 out) and the cast back (4 in, e out), e + 20.
/// `fused_vocab_parallel` (megatron/core/fusions/fused_cross_entropy.py at core_r0.8.0, each
/// function under torch.compile, jit_fuser): calculate_logits_max writes the fp32 copy and takes
/// its maximum in one pass (e in, 4 out), calculate_predicted_logits subtracts the maximum,
/// exponentiates in place and sums (4 in, 4 out), calculate_cross_entropy_loss divides in place
/// (4 in, 4 out): e + 20; the backward's calculate_gradients scales the softmax in place by the
/// loss's gradient, written back to its buffer, and writes the cast gradient (4 in, 4 + e out):
/// e + 8. Each function is counted as one pass over the logits, TorchInductor fusing its
/// operations (an assumption: no profile of these kernels is at hand).
double crossEntropyBytes(ir::CrossEntropyKind kind, double e, bool backward) {
  switch (kind) {
  case ir::CrossEntropyKind::Unfused:
    return backward ? e + 20 : unfusedCrossEntropyBytes(e);
  case ir::CrossEntropyKind::VocabParallel:
    return backward ? e + 12 : e + 36;
  case ir::CrossEntropyKind::FusedVocabParallel:
    return backward ? e + 8 : e + 20;
  case ir::CrossEntropyKind::Fused:
  case ir::CrossEntropyKind::Chunked:
    break;
  }
  return 2 * e;
}

/// The classes of a transformer's layers (getUnitWorkClass): bits of what sets a layer apart.
constexpr int64_t kMoeLayerClass = 1;
/// A layer of full attention among sliding-window ones (`full_every`).
constexpr int64_t kFullAttentionLayerClass = 2;
/// A multi-token prediction module (`mtp_layers`): a layer of its kind with the module's own work.
constexpr int64_t kMtpLayerClass = 4;

/// A multi-token prediction module's projection (Megatron-Core's MultiTokenPredictionLayer,
/// megatron/core/transformer/multi_token_prediction.py: eh_proj, column-parallel from the
/// concatenated 2·h to h over every token of the tensor-parallel group, in FP8 under mixed(fp8)
/// like the layer's products).
Gemm mtpProjection(const TransformerDims &x) {
  Gemm projection{"mtp projection", x.tokens, x.h / x.t, 2 * x.h};
  projection.fp8 = x.fp8;
  projection.mx = x.fp8 && x.mx;
  projection.fp4 = x.fp8 && x.fp4;
  return projection;
}

/// A multi-token prediction module's work besides its transformer layer (DeepSeek-AI 2024,
/// "DeepSeek-V3", §2.2, as Megatron-Core runs it): the embedding lookup of the shifted tokens on
/// the module's stage, the norms of the embedding (enorm) and of the previous depth's hidden state
/// (hnorm), their concatenation (torch.cat: both read, 2·h written per token), the projection, and
/// the norm of the layer's output (final_layernorm); backward, the projection's products, the
/// three norms' backward and the embedding's gradient (the concatenation's backward is two views).
/// The output layer and the loss over the module's output are the head's. Recomputed with the
/// layer under full recomputation (Megatron-Core checkpoints the module whole); the other modes
/// keep the module's own tensors (getMtpActivationBytes).
void addMtpWork(const TransformerDims &x, PassKind pass, Work &work) {
  std::vector<Gemm> products = {mtpProjection(x)};
  if (pass == PassKind::Forward || pass == PassKind::RecomputeFull) {
    work.memory.push_back({"mtp embedding lookup", 2 * x.tokens * x.h * x.stream});
    work.memory.push_back(
        {"mtp norms (enorm, hnorm, final norm)", 3 * x.outside() * normBytesPerElement(x, false)});
    work.memory.push_back({"mtp concatenation", 2 * 2 * x.outside() * x.e});
    work.gemms.push_back(products.front());
    addFp8Casts(x, products, /*backward=*/false, work);
    addWeightCasts(x, products, /*backward=*/false, work);
  } else if (pass == PassKind::Backward) {
    addBackwardProducts(products, work.gemms);
    addFp8Casts(x, products, /*backward=*/true, work);
    addWeightCasts(x, products, /*backward=*/true, work);
    work.memory.push_back({"mtp norms backward (enorm, hnorm, final norm)",
                           3 * x.outside() * normBytesPerElement(x, true)});
    work.memory.push_back({"mtp embedding gradient", 3 * x.tokens * x.h * x.stream});
  }
}

/// The norms of a layer that are modules of their own under Transformer Engine's layer specs,
/// which Megatron-Core's `layernorm` recomputation recomputes (transformer_layer.py: an input or
/// pre-MLP norm that is not an IdentityOp): an MoE layer's before its router and dispatcher, and
/// under latent attention the one before its down-projections; a dense layer's norms are fused
/// into the products they feed (TELayerNormColumnParallelLinear), which keep their outputs.
double separateNorms(const TransformerDims &x) { return (x.moe ? 1 : 0) + (x.latent ? 1 : 0); }

/// Megatron-Core's selective recomputation of `modules` (ir::RecomputeModule bits;
/// transformer_config.py, recompute_modules), what each repeats before the layer's backward:
/// `core_attn` the attention kernel's forward (attention.py, checkpoint_core_attention);
/// `layernorm` the norms of their own (separateNorms); `moe_act` the routed experts' activation
/// function (experts.py); `mla_up_proj` latent attention's up-projections of the stored latents
/// (the query's from the hidden state without a query latent) and the rotary embedding
/// (multi_latent_attention.py, qkv_up_proj_and_rope_apply); `mlp` a dense layer's whole MLP from
/// its input, its norm and both products (transformer_layer.py, recompute_mlp; not an MoE layer's).
void addModuleRecompute(const TransformerDims &x, unsigned modules, Work &work) {
  if (modules & ir::kRecomputeCoreAttention)
    addFusedAttention(x, /*backward=*/false, work);
  if ((modules & ir::kRecomputeLayernorm) && separateNorms(x) > 0)
    addNorms(x, work, separateNorms(x));
  if ((modules & ir::kRecomputeMoeActivation) && x.moe)
    work.memory.push_back(
        {"experts' activation", mlpActivationAccesses(x, false) * expertWidthBytes(x), 1});
  bool upProjections = x.latent && (modules & ir::kRecomputeMlaUpProjection);
  bool mlp = !x.moe && (modules & ir::kRecomputeMlp);
  std::vector<Gemm> products;
  for (const Gemm &gemm : layerProjections(x)) {
    StringRef name = gemm.name;
    if ((upProjections && (name == "q up" || name == "kv up" || name == "q")) ||
        (mlp && name.starts_with("mlp ")))
      products.push_back(gemm);
  }
  work.gemms.insert(work.gemms.end(), products.begin(), products.end());
  addFp8Casts(x, products, /*backward=*/false, work);
  addWeightCasts(x, products, /*backward=*/false, work);
  if (upProjections)
    addRotary(x, /*backward=*/false, work);
  if (mlp) {
    addNorms(x, work, 1);
    addMlpActivation(x, work);
  }
}

/// A transformer unit's work; a layer's by its class (getUnitWorkClass).
Work transformerWork(const ir::TransformerConfig &config, UnitKind unit, PassKind pass,
                     const Layout &layout, int64_t layerClass = 0) {
  TransformerDims x = getLayerDims(config, layout, layerClass & kMoeLayerClass);
  if (layerClass & kFullAttentionLayerClass)
    x.window = 0;
  Work work;
  bool backward = pass == PassKind::Backward;
  switch (unit) {
  case UnitKind::Embedding:
    // A vocabulary-parallel lookup writes its rows; the backward adds them into the gradient.
    // `embedding_norm`: a norm over the stream after the lookup (its output is the first layer's
    // input, in the stream's type: no cast under autocast).
    if (pass == PassKind::Forward) {
      work.memory.push_back({"embedding lookup", 2 * x.tokens * x.h * x.stream});
      if (x.embeddingNorm)
        work.memory.push_back({"embedding norm", x.outside() * normBytesPerElement(x, false)});
    } else if (backward) {
      if (x.embeddingNorm)
        work.memory.push_back(
            {"embedding norm backward", x.outside() * normBytesPerElement(x, true)});
      work.memory.push_back({"embedding gradient", 3 * x.tokens * x.h * x.stream});
    }
    return work;
  case UnitKind::Head: {
    if (pass != PassKind::Forward && !backward)
      return work; // The output layer is not recomputed (Megatron-LM checkpoints the blocks).
    Gemm logits{"logits", x.tokens, x.vocab / x.t, x.h};
    logits.tensorSlot = kSlotQkv; // Beside the all-gather of the final norm's output.
    double logitCount = x.tokens * x.vocab / x.t;
    // Multi-token prediction: the output layer and the loss once more over each module's output
    // (Megatron-Core's GPTModel applies its output layer to the main and every module's hidden
    // states; DeepSeek-V3 §2.2, the shared output head).
    double depths = 1 + static_cast<double>(config.mtpLayers);
    std::string times =
        config.mtpLayers > 0
            ? fmt::format(" × {} (the model's loss and its {} multi-token "
                          "prediction module{})",
                          num(depths), config.mtpLayers, config.mtpLayers > 1 ? "s'" : "'s")
            : std::string();
    if (x.fp32Params)
      for (int64_t depth = 0; depth <= config.mtpLayers; ++depth)
        addWeightCasts(x, {logits}, backward, work);
    if (!backward) {
      for (int64_t depth = 0; depth <= config.mtpLayers; ++depth) {
        work.gemms.push_back(logits);
        if (depth > 0)
          work.gemms.back().name = "logits (multi-token prediction " + std::to_string(depth) + ")";
      }
      work.memory.push_back({"final norm", x.outside() * normBytesPerElement(x, false)});
      if (double cast = streamCastBytes(x))
        work.memory.push_back({"final norm output cast (autocast)", x.outside() * cast});
      work.memory.push_back(
          {"cross-entropy" + times,
           depths * logitCount * crossEntropyBytes(layout.crossEntropy, x.e, false)});
    } else {
      for (int64_t depth = 0; depth <= config.mtpLayers; ++depth) {
        addBackwardProducts({logits}, work.gemms);
        if (depth > 0)
          for (size_t i = work.gemms.size() - 2; i < work.gemms.size(); ++i)
            work.gemms[i].name += " (multi-token prediction " + std::to_string(depth) + ")";
      }
      work.memory.push_back({"final norm backward", x.outside() * normBytesPerElement(x, true)});
      if (double cast = streamCastBytes(x))
        work.memory.push_back({"final norm gradient cast (autocast)", x.outside() * cast});
      work.memory.push_back(
          {"cross-entropy backward" + times,
           depths * logitCount * crossEntropyBytes(layout.crossEntropy, x.e, true)});
      // `train_metrics`: after the backward, each metric is an unfused cross-entropy's forward
      // over the logits (autocast's fp32 copy, then the log-softmax), without gradient.
      if (layout.trainMetrics > 0)
        work.memory.push_back({"training metrics (" + std::to_string(layout.trainMetrics) +
                                   " cross-entropies of the logits)",
                               static_cast<double>(layout.trainMetrics) * logitCount *
                                   unfusedCrossEntropyBytes(x.e)});
    }
    return work;
  }
  case UnitKind::Layer:
    if (layerClass & kMtpLayerClass) {
      // A multi-token prediction module: a layer of its kind, then the module's own work.
      work = transformerWork(config, unit, pass, layout, layerClass & ~kMtpLayerClass);
      addMtpWork(x, pass, work);
      return work;
    }
    break;
  default:
    return work;
  }
  switch (pass) {
  case PassKind::Forward:
  case PassKind::RecomputeFull:
    work.gemms = layerProjections(x);
    if (x.materialized())
      addMaterializedAttention(x, /*backward=*/false, work);
    else
      addFusedAttention(x, /*backward=*/false, work);
    addLayerElementwise(x, work);
    return work;
  case PassKind::RecomputeSelective:
    // Materialized: the attention core again (Korthikanti et al. 2022 §5). Flash: nothing of the
    // core is stored, so selective recomputation repeats the norms and the MLP activation from
    // their stored inputs. That is not Megatron-Core's selective recomputation over its fused
    // backends, which runs the attention kernel's forward again (recompute_modules core_attn);
    // its `layernorm` module recomputes the norms, but its `mlp` module the whole dense MLP. The
    // Megatron-LM bridge refuses the fused case both ways.
    if (x.materialized()) {
      addMaterializedAttention(x, /*backward=*/false, work);
    } else {
      addNorms(x, work, 2);
      addLatentNorms(x, /*backward=*/false, work);
      addMlpActivation(x, work);
    }
    return work;
  case PassKind::RecomputeOps:
    addOpRecompute(x, work);
    return work;
  case PassKind::RecomputeAttention:
    // Megatron-Core's checkpointed core attention (megatron/core/transformer/attention.py,
    // checkpoint_core_attention): the attention kernel's forward again from the stored Q, K and
    // V; materialized, Korthikanti et al.'s scores and softmax again.
    if (x.materialized())
      addMaterializedAttention(x, /*backward=*/false, work);
    else
      addFusedAttention(x, /*backward=*/false, work);
    return work;
  case PassKind::RecomputeModules:
    addModuleRecompute(x, layout.recomputeModules, work);
    return work;
  case PassKind::Backward: {
    std::vector<Gemm> products = layerProjections(x);
    addBackwardProducts(products, work.gemms);
    if (x.materialized())
      addMaterializedAttention(x, /*backward=*/true, work);
    else
      addFusedAttention(x, /*backward=*/true, work);
    addLayerElementwiseBackward(x, products, work);
    return work;
  }
  }
  return work;
}

/// An mlp layer: one product of its input and weight (column-split on even layers, row-split on
/// odd ones, as Lowering pairs them), then the bias and GELU.
Work mlpWork(const ir::MlpConfig &config, int64_t layer, PassKind pass, const Layout &layout) {
  Work work;
  if (pass == PassKind::RecomputeSelective || pass == PassKind::RecomputeOps ||
      pass == PassKind::RecomputeAttention || pass == PassKind::RecomputeModules)
    return work;
  double b = layout.microBatch, t = static_cast<double>(std::max<int64_t>(1, layout.tensor));
  double in = static_cast<double>(layer == 0 ? config.input : config.width);
  double out = static_cast<double>(layer + 1 == config.layers ? config.output : config.width);
  double e = ir::getActivationBytes(layout.precision);
  bool column = layer % 2 == 0;
  Gemm linear{"linear", b, column ? out / t : out, column ? in : in / t};
  double activation = 2 * b * (column ? out / t : out) * e;
  bool backward = pass == PassKind::Backward;
  if (backward) {
    addBackwardProducts({linear}, work.gemms);
    work.memory.push_back({"bias and gelu backward", 1.5 * activation});
  } else {
    work.gemms.push_back(linear);
    work.memory.push_back({"bias and gelu", activation});
  }
  WeightCastLayout casts{e, layout.fp32Params, layout.paramsGathered,
                         layout.kernels == ir::KernelMode::Eager};
  addWeightCasts(casts, {linear}, backward, work);
  return work;
}

} // namespace

std::optional<PassKind> getRecomputePass(ir::ActivationMode mode) {
  switch (mode) {
  case ir::ActivationMode::Keep:
    return std::nullopt;
  case ir::ActivationMode::RecomputeSelective:
    return PassKind::RecomputeSelective;
  case ir::ActivationMode::RecomputeFull:
    return PassKind::RecomputeFull;
  case ir::ActivationMode::RecomputeOps:
    return PassKind::RecomputeOps;
  case ir::ActivationMode::RecomputeAttention:
    return PassKind::RecomputeAttention;
  case ir::ActivationMode::RecomputeModules:
    return PassKind::RecomputeModules;
  }
  llvm_unreachable("unknown ActivationMode");
}

std::string getOpRecomputeObstacle(const ir::Model &model) {
  if (model.kind == ir::ModelKind::Abstract)
    return std::string();
  if (model.kind != ir::ModelKind::Transformer)
    return "it is defined for transformer layers";
  const ir::TransformerConfig &config = model.transformer;
  if (config.attention == ir::AttentionKind::Materialized)
    return "it keeps the fused attention kernel's output, and the model has attention = "
           "materialized";
  if (config.bias || config.qkvBias)
    return "it keeps the outputs of products without a bias, and the model has bias = " +
           config.getBiasText().str();
  if (config.moe.isEnabled())
    return "it is defined for dense layers, and the model has MoE layers";
  if (config.unpad)
    return "it keeps the attention kernel's output as scaled_dot_product_attention returns it, "
           "and the model packs the attention's inputs (unpad = true)";
  if (config.postNorm)
    return "it is defined for two norms a layer, and the model has post_norm = true";
  if (config.isLatentAttention())
    return "it is defined over the q, k and v products, and the model has multi-head latent "
           "attention (kv_lora_rank)";
  if (config.mtpLayers > 0)
    return "it is torchtitan's policy over its Llama layers, and the model has multi-token "
           "prediction modules (mtp_layers)";
  return std::string();
}

std::string getModuleRecomputeObstacle(const ir::Model &model, unsigned modules) {
  if (model.kind != ir::ModelKind::Transformer)
    return "model '" + model.name + "' is " +
           (model.kind == ir::ModelKind::Mlp ? "an mlp" : "abstract") +
           ", and Megatron-Core's modules are a transformer layer's";
  const ir::TransformerConfig &config = model.transformer;
  if (config.attention == ir::AttentionKind::Materialized)
    return "placec counts Megatron-Core's modules over fused attention, and the model has "
           "attention = materialized";
  if (config.unpad)
    return "unpad = true is flash-attn's packing as llm-foundry calls it, which Megatron-Core's "
           "layer does not run";
  bool moe = config.moe.isEnabled();
  bool dense = !moe || config.moe.getNumMoeLayers(config.layers) < config.layers;
  if ((modules & ir::kRecomputeMoeActivation) && !moe)
    return "moe_act recomputes the experts' activation, and the model has no MoE layers";
  if ((modules & ir::kRecomputeMlaUpProjection) && !config.isLatentAttention())
    return "mla_up_proj recomputes latent attention's up-projections, and the model has no "
           "kv_lora_rank";
  if ((modules & ir::kRecomputeMlp) && !dense)
    return "mlp recomputes a dense layer's MLP (not an MoE layer's), and every layer of the model "
           "is an MoE layer";
  if ((modules & ir::kRecomputeLayernorm) && !moe && !config.isLatentAttention())
    return "layernorm recomputes the norms that are modules of their own (an MoE layer's before "
           "its router, latent attention's before its down-projections), and the model's norms "
           "are fused into the products they feed";
  return std::string();
}

std::string getSavedFp8Obstacle(const ir::Model &model, ir::ActivationMode mode) {
  if (model.kind == ir::ModelKind::Abstract)
    return std::string();
  if (model.kind != ir::ModelKind::Transformer)
    return "placec counts it for transformer layers";
  if (model.transformer.attention == ir::AttentionKind::Materialized)
    return "placec counts it over a fused attention kernel, and the model has attention = "
           "materialized";
  if (mode == ir::ActivationMode::RecomputeOps)
    return "recompute(op) is torchtitan's policy over PyTorch's float8 linears, which keep their "
           "inputs in bf16";
  return std::string();
}

std::string getEagerObstacle(const ir::Model &model, ir::ActivationMode mode,
                             ir::Precision precision) {
  if (model.kind != ir::ModelKind::Transformer)
    return std::string();
  const ir::TransformerConfig &config = model.transformer;
  if (config.attention == ir::AttentionKind::Materialized)
    return "placec counts eager PyTorch over the fused attention kernel "
           "(scaled_dot_product_attention), and the model has attention = materialized";
  if (config.moe.isEnabled())
    return "placec counts eager PyTorch for dense layers, and the model has MoE layers";
  if (config.isLatentAttention())
    return "placec counts eager PyTorch for multi-head and grouped-query attention, and the model "
           "has multi-head latent attention (kv_lora_rank)";
  if (config.mtpLayers > 0)
    return "placec counts eager PyTorch for the reference modules of a next-token model, and the "
           "model has multi-token prediction modules (mtp_layers)";
  if (precision == ir::Precision::MixedFP8)
    return "Float8 linears without torch.compile cast through separate kernels that placec does "
           "not count; write mixed(bf16), or kernels = fused for a compiled run";
  if (mode == ir::ActivationMode::RecomputeSelective ||
      mode == ir::ActivationMode::RecomputeAttention ||
      mode == ir::ActivationMode::RecomputeModules)
    return ir::toString(mode).str() +
           " is Megatron-LM's recomputation of its fused kernels; write recompute(op) "
           "(torchtitan's per-op policy), recompute or keep";
  return std::string();
}

double getStreamBytes(ir::Precision precision, bool fp32Params, bool paramsGathered) {
  // Autocast over fp32 modules (PyTorch's DDP or one device): the embedding's fp32 weights give
  // an fp32 output, each residual addition of a product's output to it promotes to fp32, and
  // autocast runs layer_norm in fp32, so the residual stream stays fp32 while the products and
  // the attention run in the compute type (aten/src/ATen/autocast_mode.cpp's fp32 list; add's
  // type promotion). Gathered, FSDP hands the modules compute-type copies and the stream is too.
  double e = ir::getActivationBytes(precision);
  return fp32Params && !paramsGathered && precision != ir::Precision::FP32 ? 4 : e;
}

Layout getRunLayout(const ir::Run &run) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::Mesh &mesh = strategy.mesh;
  Layout layout;
  layout.microBatch = static_cast<double>(run.microBatch);
  layout.tensor = mesh.getDegree(ir::AxisKind::Tensor);
  layout.context = mesh.getDegree(ir::AxisKind::Sequence);
  layout.expert = mesh.getDegree(ir::AxisKind::Expert);
  layout.expertFold = strategy.foldsExpertTensor();
  layout.expertContextFold = strategy.foldsExpertContext();
  layout.dispatcher = strategy.expertDispatcher;
  layout.sequenceParallel = strategy.sequenceParallel;
  layout.sequenceParallelInputs = strategy.sequenceParallelInputs;
  layout.activations = strategy.activationMode;
  layout.recomputeModules = strategy.recomputeModules;
  layout.precision = run.precision;
  layout.crossEntropy = run.crossEntropy;
  layout.trainMetrics = run.trainMetrics;
  layout.kernels = run.kernels;
  layout.fp32Params = run.fp32Params && run.precision != ir::Precision::FP32;
  layout.fp8Saved = run.fp8Saved;
  layout.fp8Scaling = run.fp8Scaling;
  layout.fp8Attention = run.fp8Attention;
  const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
  layout.paramsGathered = llvm::any_of(params.axes, [](const ir::AxisPlacement &axis) {
    return axis.mode == ir::PlacementMode::ShardedWithGather;
  });
  layout.contextMethod = strategy.contextMethod;
  layout.contextMerge = run.contextMerge;
  layout.gradAccumulation = run.gradAccumulation;
  layout.gradBytes = ir::getStateBytes(run).grads;
  return layout;
}

Work getUnitWork(const ir::Model &model, UnitKind unit, int64_t layer, PassKind pass,
                 const Layout &layout) {
  Work work;
  if (model.kind == ir::ModelKind::Transformer)
    work = transformerWork(model.transformer, unit, pass, layout,
                           getUnitWorkClass(model, unit, layer));
  else if (model.kind == ir::ModelKind::Mlp && unit == UnitKind::MlpLayer)
    work = mlpWork(model.mlp, layer, pass, layout);
  // `grad_accumulation = add | cast_add`: after the backward, the fresh gradient of every weight
  // on the device, each weight-gradient product's result and the token embedding's table (its
  // gradient is a scatter, not a product), is added into the stored gradients by kernels of
  // their own. The norms' and biases' vectors are left out (h or so elements beside h² ones).
  if (pass != PassKind::Backward)
    return work;
  double accumulation = getGradientAccumulationBytes(
      layout.gradAccumulation, ir::getActivationBytes(layout.precision), layout.gradBytes);
  if (accumulation > 0) {
    double weights = 0;
    for (const Gemm &gemm : work.gemms)
      if (gemm.weightGradient)
        weights += gemm.m * gemm.n * gemm.batch;
    if (model.kind == ir::ModelKind::Transformer && unit == UnitKind::Embedding)
      weights += static_cast<double>(model.transformer.vocab) /
                 static_cast<double>(std::max<int64_t>(1, layout.tensor)) *
                 static_cast<double>(model.transformer.hidden);
    if (weights > 0)
      work.memory.push_back(
          {layout.gradAccumulation == ir::GradAccumulation::Add
               ? "gradient accumulation (grad_accumulation = add)"
               : "gradient accumulation (grad_accumulation = cast_add: cast, then add)",
           weights * accumulation});
  }
  return work;
}

bool quantizesParams(UnitKind unit) {
  return unit == UnitKind::Layer || unit == UnitKind::Abstract;
}

ir::StateBytes getUnitStateBytes(const ir::StateBytes &bytes, UnitKind unit) {
  return quantizesParams(unit) ? bytes : bytes.unquantized();
}

int64_t getUnitWorkClass(const ir::Model &model, UnitKind unit, int64_t layer) {
  if (model.kind == ir::ModelKind::Transformer) {
    const ir::TransformerConfig &config = model.transformer;
    if (unit != UnitKind::Layer)
      return 0;
    return (config.isMoeBlock(layer) ? kMoeLayerClass : 0) |
           (config.hasFullAttentionLayers() && !config.isWindowedBlock(layer)
                ? kFullAttentionLayerClass
                : 0) |
           (config.isMtpBlock(layer) ? kMtpLayerClass : 0);
  }
  if (model.kind == ir::ModelKind::Mlp && unit == UnitKind::MlpLayer)
    return layer;
  return 0;
}

MoeShape getMoeShape(const ir::TransformerConfig &config, const Layout &layout,
                     std::string *formula) {
  MoeShape shape;
  const ir::MoeConfig &moe = config.moe;
  if (!moe.isEnabled())
    return shape;
  double context = static_cast<double>(std::max<int64_t>(1, layout.context));
  // Folded, the tensor axes split the tokens a device routes and join the expert group.
  double fold = layout.expertFold ? static_cast<double>(std::max<int64_t>(1, layout.tensor)) : 1;
  // Folded sequence axes join the group; their devices route their own tokens either way.
  double ep = static_cast<double>(std::max<int64_t>(1, layout.expert)) * fold *
              (layout.expertContextFold ? context : 1);
  double experts = static_cast<double>(moe.experts), k = static_cast<double>(moe.topK);
  shape.tokens = layout.microBatch * static_cast<double>(config.seq) / (context * fold);
  shape.localExperts = experts / ep;
  shape.group = ep;
  shape.sortsByLocalExpert =
      layout.dispatcher == ir::ExpertDispatcher::AllToAll && ep > 1 && shape.localExperts > 1;
  if (moe.capacityFactor) {
    // GShard (Lepikhin et al. 2021, §2.2) and Megatron-Core's --moe-expert-capacity-factor with
    // padding: every expert's slot count per source, whether filled or not.
    shape.capacity = std::ceil(*moe.capacityFactor * shape.tokens * k / experts);
    shape.dispatchRows = experts * shape.capacity;
    shape.tokensPerExpert = ep * shape.capacity;
    if (formula)
      *formula =
          fmt::format("C = ⌈c·T·k/E⌉ = ⌈{}·{}·{}/{}⌉ = {}; dispatch E·C = {} rows; each "
                      "expert computes ep·C = {} rows",
                      num(*moe.capacityFactor), num(shape.tokens), num(k), num(experts),
                      num(shape.capacity), num(shape.dispatchRows), num(shape.tokensPerExpert));
    return shape;
  }
  shape.dispatchRows = shape.tokens * k;
  shape.tokensPerExpert = shape.tokens * k * ep / experts * moe.imbalance;
  if (formula)
    *formula =
        fmt::format("dropless: dispatch T·k = {}·{} = {} rows; each expert computes "
                    "T·k·ep/E × imbalance = {}·{}·{}/{} × {} = {} rows",
                    num(shape.tokens), num(k), num(shape.dispatchRows), num(shape.tokens), num(k),
                    num(ep), num(experts), num(moe.imbalance), num(shape.tokensPerExpert));
  return shape;
}

double getModelFlops(const ir::Model &model, double globalBatch, std::string *formula) {
  if (model.kind == ir::ModelKind::Mlp) {
    double flops = 6 * static_cast<double>(model.numParams) * globalBatch;
    if (formula)
      *formula = fmt::format("6·Ψ·B = 6·{}·{}", model.numParams, num(globalBatch));
    return flops;
  }
  if (model.kind != ir::ModelKind::Transformer)
    return 0;
  // One sample's forward on one device, the attention counted over the whole s×s (s×w under a
  // sliding window: AttentionCore::getAttendedKeys without the causal mask).
  Layout layout;
  auto forwardOf = [&](const ir::TransformerConfig &config, UnitKind unit, int64_t layerClass) {
    Work work = transformerWork(config, unit, PassKind::Forward, layout, layerClass);
    double flops = 0;
    for (const Gemm &gemm : work.gemms)
      flops += gemm.getFlops();
    for (AttentionCore core : work.attention) {
      core.causal = false;
      flops += core.getFlops();
    }
    return flops;
  };
  auto forward = [&](UnitKind unit) { return forwardOf(model.transformer, unit, 0); };
  double layers = static_cast<double>(model.transformer.layers);
  double layer = forward(UnitKind::Layer), head = forward(UnitKind::Head);
  const ir::MoeConfig &moe = model.transformer.moe;
  if (moe.isEnabled() || model.transformer.hasFullAttentionLayers() ||
      model.transformer.mtpLayers > 0) {
    // The layers by class (dense or MoE, windowed or full attention), each class's forward once;
    // an MoE layer's experts counted at even routing (the FLOPs a token needs, whatever the
    // imbalance or the capacity padding).
    ir::TransformerConfig even = model.transformer;
    even.moe.capacityFactor.reset();
    even.moe.imbalance = 1;
    std::map<int64_t, int64_t> classes;
    for (int64_t l = 0; l < model.transformer.getNumBlocks(); ++l)
      ++classes[getUnitWorkClass(model, UnitKind::Layer, l)];
    double sum = 0;
    std::string terms;
    for (auto [layerClass, count] : classes) {
      double perLayer = forwardOf(even, UnitKind::Layer, layerClass);
      sum += static_cast<double>(count) * perLayer;
      if (!formula)
        continue;
      std::string name = moe.isEnabled() || model.transformer.mtpLayers > 0
                             ? (layerClass & kMoeLayerClass ? "MoE" : "dense")
                             : "";
      if (model.transformer.hasFullAttentionLayers())
        name += std::string(name.empty() ? "" : ", ") +
                (layerClass & kFullAttentionLayerClass ? "full attention" : "windowed");
      if (layerClass & kMtpLayerClass)
        name += std::string(name.empty() ? "" : ", ") + "multi-token prediction";
      terms += fmt::format("{}{} × {} ({})", terms.empty() ? "" : " + ", count,
                           fmtAmount(perLayer, "FLOP"), name);
    }
    double flops = 3 * (sum + head) * globalBatch;
    if (formula)
      *formula = fmt::format("3 × (Σ layers of a class × its layer forward + head forward) × B "
                             "= 3 × ({} + {}) × {}",
                             terms, fmtAmount(head, "FLOP"), num(globalBatch));
    return flops;
  }
  double flops = 3 * (layers * layer + head) * globalBatch;
  if (formula)
    *formula = fmt::format("3 × (l × layer forward + head forward) × B = 3 × ({} × {} + {}) × {}",
                           num(layers), fmtAmount(layer, "FLOP"), fmtAmount(head, "FLOP"),
                           num(globalBatch));
  return flops;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

namespace {

/// What a layer keeps beyond the tensors the fused kernels' backward reads over grouped keys and
/// values, per s·b·h. Where repeatsKv holds, the attention kernel keeps the keys and values
/// repeated to every head, 2·2·(a − kv)·d/h beyond the grouped ones that QKV counts (`repeated`).
/// Under `kernels = eager` also each RMSNorm its input's fp32 copy (for pow and the rsqrt product;
/// its bf16 input is kept by none), 4 bytes whatever the activation type (`fp32`, split by t under
/// sequence parallelism), and swiglu silu's output, 2·f/h (`silu`). `repeated` and `silu` are in
/// 2-byte units, split by t.
struct ExtraKept {
  double fp32 = 0, repeated = 0, silu = 0;
  double inside() const { return repeated + silu; }
  double getBytes(const TransformerDims &x) const {
    return x.s * x.b * x.h * (fp32 / (x.sp ? x.t : 1) + x.e / 2 * inside() / x.t);
  }
};
ExtraKept getExtraKept(const TransformerDims &x) {
  ExtraKept kept;
  if (x.repeatKv)
    kept.repeated = 2 * 2 * (x.a - x.kv) * x.d / x.h;
  if (x.eager) {
    kept.fp32 = x.rmsnorm ? x.norms() * 4 : 0;
    kept.silu = x.swiglu ? 2 * x.f / x.h : 0;
  }
  return kept;
}
/// The --explain text of `kept`, " + s·b·h·(…) B [label: what, and which setting keeps it]", or
/// empty when it keeps nothing.
std::string describeExtraKept(const ExtraKept &kept, const TransformerDims &x,
                              const ir::TransformerConfig &config, const char *label) {
  if (kept.fp32 <= 0 && kept.inside() <= 0)
    return std::string();
  std::string t = num(x.t), split = x.sp ? "/" + t : std::string();
  std::vector<std::string> terms, outside, inside;
  if (kept.fp32 > 0) {
    terms.push_back(num(kept.fp32) + split);
    outside.push_back(fmt::format("the norms' fp32 inputs {}·4{} (kernels = eager)", num(x.norms()),
                                  x.sp ? "/t" : ""));
  }
  if (kept.inside() > 0)
    terms.push_back(fmt::format("{}/{}", num(kept.inside() * x.e / 2), t));
  if (kept.repeated > 0)
    inside.push_back(fmt::format("K and V repeated to every head 2·2·(a − kv)·d/h ({})",
                                 config.kvRepeat ? "kv_repeat = true" : "kernels = eager"));
  if (kept.silu > 0)
    inside.push_back("silu's output 2·f/h (kernels = eager)");
  std::string what;
  for (const std::string &part : outside)
    what += part;
  if (!inside.empty()) {
    what += what.empty() ? "over t " : ", and over t ";
    for (size_t i = 0; i < inside.size(); ++i)
      what += (i ? " and " : "") + inside[i];
  }
  std::string sum = terms.size() == 1 ? terms[0] : "(" + terms[0] + " + " + terms[1] + ")";
  return fmt::format(" + {}·{}·{}·{} B [{}: {}]", num(x.s), num(x.b), num(x.h), sum, label, what);
}

} // namespace

double getLayerActivationBytes(const ir::TransformerConfig &config, const Layout &layout,
                               std::string *formula, bool moeLayer) {
  TransformerDims x = getLayerDims(config, layout, moeLayer);
  double scale = x.e / 2.0;
  double t = x.t;
  bool sp = x.sp;
  ir::ActivationMode mode = layout.activations;
  double sbh = x.s * x.b * x.h;
  std::string sbhText = fmt::format("{}·{}·{}", num(x.s), num(x.b), num(x.h));
  std::string scaleText =
      x.e != 2 ? fmt::format(" × {} ({}-byte activations)", num(scale), static_cast<int>(x.e))
               : std::string();
  // Autocast over fp32 modules keeps the stream's tensors that the backward reads, the norms'
  // inputs, in fp32 where the formulas below count e bytes: the layer's input alone when it is
  // the checkpoint (full recomputation, recompute(op)), both norms' inputs otherwise.
  auto withStream = [&](double bytes, int inputs) {
    if (!x.autocastStream())
      return bytes;
    double extra = inputs * (x.stream - x.e) * x.outside();
    if (formula)
      *formula += fmt::format(" + {}·({} − {})·{}{} B [{} in fp32: autocast over fp32 modules]",
                              inputs, num(x.stream), num(x.e), sbhText,
                              sp ? fmt::format("/{}", num(t)) : std::string(),
                              inputs == 1 ? "the layer's input" : "the norms' inputs");
    return bytes + extra;
  };
  // `post_norm`: the two blocks' outputs, the post-norms' inputs (4 in units of s·b·h at 2
  // bytes, outside the tensor-parallel region), kept in every mode but full recomputation.
  double post = x.postNorm ? 4 : 0;
  if (mode == ir::ActivationMode::RecomputeFull) {
    // Layer inputs only.
    double bytes = scale * 2 * sbh / (sp ? t : 1);
    if (formula)
      *formula =
          sp ? fmt::format("2·{}/{} B per layer [2·s·b·h/t (layer inputs only)]{}", sbhText, num(t),
                           scaleText)
             : fmt::format("2·{} B per layer [2·s·b·h (layer inputs only)]{}", sbhText, scaleText);
    return withStream(bytes, 1);
  }
  if (mode == ir::ActivationMode::RecomputeOps) {
    // What torchtitan's "op" policy keeps (opRecomputedProducts): the layer's input (the
    // checkpoint's), the outputs of wq (Q before the rotary embedding), wv, the attention kernel
    // (its output and log-sum-exp) and w1, each split by t, and w2's output, the whole [tokens, h]
    // partial sum before its reduction; gelu: the first product's, not the second's. Under
    // sequence parallelism the policy also keeps the outputs of the two reduce-scatters.
    double q = 2 * x.a * x.d / x.h, v = 2 * x.kv * x.d / x.h;
    double gate = 2 * x.f / x.h, down = x.swiglu ? 2 : 0, lse = 4 * x.a / x.h;
    double input = 2 / (sp ? t : 1), scattered = sp ? 2 * 2 / t : 0;
    double coefficient = input + scattered + (2 * q + v + gate + lse) / t + down;
    if (formula)
      *formula = fmt::format(
          "{}·(2{}{} + ({} + {} + {} + {} + 4·{}/{})/{}{}) B per layer [s·b·h·(layer input{}{} + "
          "(Q 2·a·d/h + V 2·kv·d/h + attention output 2·a·d/h + MLP {} 2·f/h + softmax "
          "statistics)/t{}), recompute(op): every other product's output kept]{}",
          sbhText, sp ? fmt::format("/{}", num(t)) : std::string(),
          sp ? fmt::format(" + 2·2/{}", num(t)) : std::string(), num(q), num(v), num(q), num(gate),
          num(x.a), num(x.h), num(t), x.swiglu ? " + 2" : "", sp ? "/t" : "",
          sp ? " + the two reduce-scattered outputs 2·2/t" : "", x.swiglu ? "gate" : "up",
          x.swiglu ? " + MLP down product 2" : "", scaleText);
    return withStream(scale * sbh * coefficient, 1);
  }
  if (x.materialized()) {
    // Korthikanti et al. 2022, Table 2: 34 bytes per s·b·h (norm inputs, QKV input, Q, K, V,
    // attention output, MLP input, its two 4h intermediates and the dropout masks), 10 of them
    // outside the tensor-parallel region, and 5·a·s/h for scores, probabilities and the mask.
    double a = x.a;
    double attention = 5 * a * x.s / (x.h * t);
    std::string attentionNumbers =
        t > 1 ? fmt::format("5·{}·{}/({}·{})", num(a), num(x.s), num(x.h), num(t))
              : fmt::format("5·{}·{}/{}", num(a), num(x.s), num(x.h));
    std::string attentionSymbols = t > 1 ? "5·a·s/(h·t)" : "5·a·s/h";
    // Megatron-Core's checkpointed core attention is Korthikanti et al.'s selective set here.
    bool selective = mode == ir::ActivationMode::RecomputeSelective ||
                     mode == ir::ActivationMode::RecomputeAttention;
    double coefficient = 0;
    std::string symbols, numbers;
    if (sp && x.keepInputs) {
      // sp_inputs = keep: QKV's and the MLP's inputs (2 + 2 of the 10) kept gathered.
      coefficient = 30 / t + 4 + (selective ? 0 : attention);
      symbols = selective ? "s·b·h·(30/t + 4)" : "s·b·h·(30/t + 4 + " + attentionSymbols + ")";
      numbers = selective ? fmt::format("{}·(30/{} + 4)", sbhText, num(t))
                          : fmt::format("{}·(30/{} + 4 + {})", sbhText, num(t), attentionNumbers);
      symbols += ", the two products' inputs kept gathered (sp_inputs = keep)";
    } else if (sp) {
      coefficient = 34 / t + (selective ? 0 : attention);
      symbols = selective ? "s·b·h·34/t" : "s·b·h·(34/t + " + attentionSymbols + ")";
      numbers = selective ? fmt::format("{}·34/{}", sbhText, num(t))
                          : fmt::format("{}·(34/{} + {})", sbhText, num(t), attentionNumbers);
    } else if (t > 1) {
      coefficient = 10 + 24 / t + (selective ? 0 : attention);
      symbols = selective ? "s·b·h·(10 + 24/t)" : "s·b·h·(10 + 24/t + " + attentionSymbols + ")";
      numbers = selective ? fmt::format("{}·(10 + 24/{})", sbhText, num(t))
                          : fmt::format("{}·(10 + 24/{} + {})", sbhText, num(t), attentionNumbers);
    } else {
      coefficient = 34 + (selective ? 0 : attention);
      symbols = selective ? "s·b·h·34" : "s·b·h·(34 + " + attentionSymbols + ")";
      numbers = selective ? fmt::format("{}·34", sbhText)
                          : fmt::format("{}·(34 + {})", sbhText, attentionNumbers);
    }
    if (post > 0) {
      coefficient += post / (sp ? t : 1);
      std::string split = sp ? fmt::format("/{}", num(t)) : std::string();
      numbers += fmt::format(" + {}·4{}", sbhText, split);
      symbols += fmt::format(" + s·b·h·4{} (post_norm: the blocks' outputs)", sp ? "/t" : "");
    }
    if (formula)
      *formula = fmt::format("{} B per layer [{}]{}", numbers, symbols, scaleText);
    return withStream(scale * sbh * coefficient, 2);
  }
  // Flash attention: what the backward reads, in units of s·b·h at 2 bytes. Outside the tensor-
  // parallel region (split by t under sequence parallelism): the two norm inputs and the two
  // products' inputs (the norm outputs), 8. Inside it: Q, K and V (2·(a + 2·kv)/a), the
  // attention output (2), the MLP intermediates (gelu: 4h in and out, 16h/h; swiglu: gate, up
  // and their product, 6·f/h), each split by t; the softmax log-sum-exp, 4 bytes per head and
  // token. Selective recomputation recomputes the norm outputs and the MLP activation from the
  // stored inputs (4 and the activation's output fewer). Megatron-Core's checkpointed core
  // attention (recompute(attention)) keeps what keep keeps but what the kernel alone holds: the
  // checkpoint keeps Q, K and V and the output projection its input, so the log-sum-exp goes, and
  // the kernel's BF16 output where the projection keeps an FP8 copy instead (saved = fp8).
  bool selective = mode == ir::ActivationMode::RecomputeSelective;
  // Megatron-Core's modules (addModuleRecompute): each drops what its recomputation gives back.
  unsigned modules = mode == ir::ActivationMode::RecomputeModules ? layout.recomputeModules : 0;
  bool coreAttention =
      mode == ir::ActivationMode::RecomputeAttention || (modules & ir::kRecomputeCoreAttention);
  bool upProjections = x.latent && (modules & ir::kRecomputeMlaUpProjection);
  bool moeActivation = x.moe && (modules & ir::kRecomputeMoeActivation);
  bool denseMlp = !x.moe && (modules & ir::kRecomputeMlp);
  double norms = (modules & ir::kRecomputeLayernorm) ? separateNorms(x) : 0;
  // Bytes per element of what a product keeps of its input for its weight gradient: 2, or 1 under
  // `saved = fp8` (Transformer Engine's linears keep the FP8 cast of their input, and a
  // LayerNormLinear's norm writes it directly: the norm outputs, the attention output's copy for
  // its projection and the MLP's second input; what other kernels keep stays in the activation
  // type).
  double p = x.fp8Saved ? x.fp8SavedBytes() : 2;
  // Q, K and V, and the attention output, over h (a·d = h unless head_dim says otherwise; under
  // latent attention a·(d + r) for Q and K and a·dv for V and the output); under `saved = fp8`
  // the projection keeps an FP8 copy of the output beside the kernel's.
  // `attention = fp8`: the kernel keeps its FP8 casts of Q, K and V for its backward, one byte
  // each (a checkpointed core attention keeps its inputs, in the activation type, instead).
  double qkvBytes = x.fp8Attention && !coreAttention ? 1 : 2;
  double qkv = upProjections ? 0 : qkvBytes * x.qkvWidth() / x.h;
  // `unpad = true`: the output projection keeps the padded output beside the kernel's packed one.
  double attentionOutput = ((coreAttention && x.fp8Saved ? 0 : 2) +
                            (x.fp8Saved ? x.fp8SavedBytes() : 0) + (x.unpad ? 2 : 0)) *
                           x.a * x.dv / x.h;
  // An MLP of width w keeps (swiglu) gate, up and their product, 6·w/h, or 4·w/h with the
  // product recomputed; (gelu) its input and output, 4·w/h, or 2·w/h. The product (swiglu) or
  // output (gelu) is the second product's input: p bytes.
  auto mlpOf = [&](double width, bool activationRecomputed) {
    bool dropped = selective || activationRecomputed;
    return (x.swiglu ? (dropped ? 4 : 4 + p) : (dropped ? 2 : 2 + p)) * width / x.h;
  };
  // `mlp` keeps none of a dense MLP's intermediates (its input is the norm's, kept anyway).
  double mlp = denseMlp ? 0 : mlpOf(x.f, false);
  // An MoE layer (Megatron-Core's MoE layer keeps the same tensors per routed row): each of the
  // R = (rows the local experts compute)/T routed copies of a token keeps its permuted input
  // (2, not split over t: every tensor-parallel rank routes all its tokens) and its experts'
  // intermediates; the router keeps its fp32 probabilities (4·E/h); the shared experts are an MLP.
  // Folded (expert_tensor = fold) the experts are whole, so their intermediates are t/et = t
  // times what a split width keeps per row, and the router's probabilities are of the device's
  // own T/t tokens.
  double routed = 0, moeText = 0, routedTokens = 1;
  if (x.moe) {
    double r = x.experts.tokensPerExpert * x.experts.localExperts / x.tokens;
    routedTokens = x.experts.tokens / x.tokens;
    mlp = r * (x.t / x.et) * mlpOf(x.expertFfn, moeActivation) +
          (x.sharedFfn > 0 ? mlpOf(x.sharedFfn, false) : 0);
    routed = p * r + 4 * x.numExperts / x.h * routedTokens;
    moeText = r;
  }
  // Under sp_inputs = keep the products' inputs (4) are kept gathered, not split by t, and not
  // recomputed by selective recomputation either.
  double gathered = x.keepInputs ? 2 * p : 0;
  // `layernorm` and `mlp` drop the outputs of the norms they recompute: the products' inputs.
  double outside =
      (selective || x.keepInputs ? 4 : 4 + 2 * p) - p * (norms + (denseMlp ? 1 : 0)) + post;
  // Latent attention's latents, per h, beside the stream's: each norm's input (2) and output,
  // the up-projection's input (p; recomputed by recompute(selective), kept gathered under
  // sp_inputs = keep), computed on each rank's own tokens.
  double latents = x.latent ? (x.qRank + x.kvRank) / x.h : 0;
  gathered += x.keepInputs ? p * latents : 0;
  outside += (selective || x.keepInputs ? 2 : 2 + p) * latents;
  // Eager PyTorch and repeated K/V keep more (ExtraKept): all of it under keep; the repeated K and
  // V under recompute(selective) too, which recomputes neither the attention kernel nor its
  // inputs (getEagerObstacle refuses recompute(selective) under eager).
  ExtraKept extra;
  if (mode == ir::ActivationMode::Keep || coreAttention ||
      mode == ir::ActivationMode::RecomputeModules)
    extra = getExtraKept(x);
  else if (selective)
    extra.repeated = getExtraKept(x).repeated;
  double inside = qkv + attentionOutput + mlp;
  double lse = coreAttention ? 0 : 4 * x.a / x.h; // 4 bytes per head and token, over h.
  double coefficient = outside / (sp ? t : 1) + gathered + (inside + lse) / t + routed;
  if (formula) {
    std::string mlpText = x.swiglu && !x.moe && !denseMlp
                              ? fmt::format("{}·{}/{}", selective ? 4 : 4 + p, num(x.f), num(x.h))
                              : num(mlp);
    *formula = fmt::format(
        "{}·({}{}{} + ({} + {} + {}{})/{}) B per layer [s·b·h·({}{} + "
        "(QKV 2·(a + 2·kv)·d/h + attention output + MLP intermediates{})/t), "
        "flash attention{}]{}",
        sbhText, num(outside), sp ? fmt::format("/{}", num(t)) : std::string(),
        gathered > 0 ? " + " + num(gathered) : std::string(), num(qkv), num(attentionOutput),
        mlpText, coreAttention ? std::string() : fmt::format(" + 4·{}/{}", num(x.a), num(x.h)),
        num(t),
        std::string(gathered > 0 ? "norm inputs" : "norm and product inputs") +
            (x.postNorm ? ", the blocks' outputs (post_norm)" : ""),
        sp ? (gathered > 0 ? "/t + product inputs" : "/t") : "",
        coreAttention ? "" : " + softmax statistics",
        coreAttention && x.fp8Saved
            ? ", core attention recomputed: the kernel's output and log-sum-exp not kept (the "
              "projection keeps its FP8 copy)"
        : coreAttention ? ", core attention recomputed: the kernel's log-sum-exp not kept"
        : gathered > 0 && selective
            ? ", norms' outputs kept gathered (sp_inputs = keep), MLP activation recomputed"
        : gathered > 0 ? ", the products' inputs kept gathered (sp_inputs = keep)"
        : selective    ? ", norms and MLP activation recomputed"
                       : "",
        scaleText);
    if (x.fp8Saved)
      *formula += x.fp4  ? " [mixed(fp4): the products keep their inputs as NVFP4, 1/2 + 1/16 "
                           "byte with the block scales: the norms' outputs, the MLP's second "
                           "input and a copy of the attention output]"
                  : x.mx ? " [saved = fp8, scaling = mx: the products keep their inputs as MXFP8, "
                           "1 + 1/32 byte with the block scales: the norms' outputs, the MLP's "
                           "second input and a copy of the attention output]"
                         : " [saved = fp8: the products keep their inputs as FP8, 1 byte: the "
                           "norms' outputs, the MLP's second input and a copy of the attention "
                           "output]";
    if (x.unpad)
      *formula += " [unpad = true: the attention output twice, the kernel's packed one and the "
                  "padded one its projection keeps]";
    if (qkvBytes == 1)
      *formula += " [attention = fp8: the kernel keeps Q, K and V as FP8, 1 byte: QKV 1·(a + "
                  "2·kv)·d/h]";
    if (modules) {
      std::vector<std::string> parts;
      if (norms > 0)
        parts.push_back(
            fmt::format("layernorm: {} norm output{} not kept", num(norms), norms > 1 ? "s" : ""));
      if (moeActivation)
        parts.push_back("moe_act: the experts' activation output not kept");
      if (upProjections)
        parts.push_back("mla_up_proj: Q, K and V not kept");
      if (denseMlp)
        parts.push_back("mlp: the MLP norm's output and the MLP's intermediates not kept");
      *formula += fmt::format(" [{}{}{}]", ir::getActivationModeText(mode, 0, modules),
                              parts.empty() ? "" : ": ", llvm::join(parts, "; "));
    }
    if (x.latent)
      *formula += fmt::format(
          " [multi-head latent attention: the latents' norm inputs and outputs, ({} + {})/{} per "
          "unit outside; Q and K of a·(d + r) = {}·{}, V and the output of a·dv = {}·{}]",
          num(x.qRank), num(x.kvRank), num(x.h), num(x.a), num(x.dqk), num(x.a), num(x.dv));
    if (x.moe && routedTokens < 1)
      *formula += fmt::format(
          " + s·b·h·({}·R + 4·E/(h·t)) = {}·({}·{} + 4·{}/({}·{})) B [MoE, expert_tensor = fold: "
          "the experts' whole-width intermediates of R = {} routed rows per token, t·R in the MLP "
          "term, their permuted inputs and the router's probabilities of the device's own tokens]",
          num(p), sbhText, num(p), num(moeText), num(x.numExperts), num(x.h), num(x.t),
          num(moeText));
    else if (x.moe)
      *formula += fmt::format(" + s·b·h·({}·R + 4·E/h) = {}·({}·{} + 4·{}/{}) B [MoE: the experts' "
                              "intermediates of R = {} routed rows per token in the MLP term, "
                              "their permuted inputs and the router's probabilities]",
                              num(p), sbhText, num(p), num(moeText), num(x.numExperts), num(x.h),
                              num(moeText));
    *formula +=
        describeExtraKept(extra, x, config, "kept beyond the fused kernels over grouped K and V");
  }
  // Eager autograd under params = fp32 keeps the weights' casts it multiplied by until the
  // layer's backward (each product saves its operands), e bytes per weight; gathered, the
  // products use the gathered copies, and compiled, the backward casts again (addWeightCasts).
  double copies = 0;
  if (mode == ir::ActivationMode::Keep && x.eager && x.fp32Params && !x.paramsGathered) {
    double weights = getWeightElements(layerProjections(x));
    copies = weights * x.e;
    if (formula)
      *formula += fmt::format(" + {}·{} B [the weights' {}-byte casts the products keep: kernels = "
                              "eager, params = fp32]",
                              num(weights), num(x.e), num(x.e));
  }
  return withStream(scale * sbh * coefficient + extra.getBytes(x) + copies, 2);
}

/// The head's loss buffers of one output layer's logits (getHeadActivationBytes, which counts one
/// per multi-token prediction depth).
static double getLogitBufferBytes(const TransformerDims &x, ir::CrossEntropyKind crossEntropy,
                                  std::string *formula) {
  if (crossEntropy == ir::CrossEntropyKind::Unfused) {
    // The larger of the forward's peak (the logits, their fp32 copy and the fp32 log-softmax)
    // and the backward's (the kept log-softmax, the gradient of it and the gradient of the copy;
    // the logits are freed before the backward, as torchtitan does).
    double perLogit = std::max(x.e + 8, 12.0);
    if (formula)
      *formula = fmt::format("{}·{}·{}/{}·max({} + 4 + 4, 3·4) B (unfused cross-entropy: the "
                             "logits, an fp32 copy and log-softmax, or in the backward three "
                             "fp32 buffers) ",
                             num(x.b), num(x.s), num(x.vocab), num(x.t), num(x.e));
    return x.tokens * x.vocab / x.t * perLogit;
  }
  if (crossEntropy == ir::CrossEntropyKind::Chunked) {
    // One sequence's logits at a time, the loss's gradient written over them (placert's CUDA
    // trainer, GptCudaTrainer.cu).
    if (formula)
      *formula = fmt::format("{}·{}/{}·{} B (chunked cross-entropy: one sequence's logits, the "
                             "gradient written over them) ",
                             num(x.s), num(x.vocab), num(x.t), num(x.e));
    return x.s * x.vocab / x.t * x.e;
  }
  double bytes = x.tokens * x.vocab / x.t * (x.e + 4);
  if (formula)
    *formula = fmt::format("{}·{}·{}/{}·({} + 4) B (logits and their fp32 softmax) ", num(x.b),
                           num(x.s), num(x.vocab), num(x.t), num(x.e));
  return bytes;
}

double getHeadActivationBytes(const ir::TransformerConfig &config, const Layout &layout,
                              std::string *formula) {
  TransformerDims x = getDims(config, layout);
  double bytes = getLogitBufferBytes(x, layout.crossEntropy, formula);
  // Multi-token prediction: each module's loss over its own logits, all kept for the backward.
  if (config.mtpLayers > 0) {
    if (formula)
      *formula = fmt::format("{} × {}(the model's loss and its {} multi-token prediction "
                             "module{}) ",
                             config.mtpLayers + 1, *formula, config.mtpLayers,
                             config.mtpLayers > 1 ? "s'" : "'s");
    bytes *= static_cast<double>(config.mtpLayers + 1);
  }
  return bytes;
}

double getEmbeddingActivationBytes(const ir::TransformerConfig &config, const Layout &layout,
                                   std::string *formula) {
  if (!config.embeddingNorm)
    return 0;
  TransformerDims x = getDims(config, layout);
  if (formula)
    *formula =
        fmt::format("{}·{}·{}{}·{} B (the embedding norm's input)", num(x.s), num(x.b), num(x.h),
                    x.sp ? fmt::format("/{}", num(x.t)) : std::string(), num(x.stream));
  return x.outside() * x.stream;
}

double getMtpActivationBytes(const ir::TransformerConfig &config, const Layout &layout,
                             std::string *formula) {
  TransformerDims x = getDims(config, layout);
  double t = x.t;
  std::string sbh = fmt::format("{}·{}·{}", num(x.s), num(x.b), num(x.h));
  std::string split = x.sp ? fmt::format("/{}", num(t)) : std::string();
  double scale = x.e / 2;
  if (layout.activations == ir::ActivationMode::RecomputeFull) {
    if (formula)
      *formula = fmt::format("2·{}{} B [the module checkpointed from its two inputs: the shifted "
                             "tokens' embedding beside the hidden state its layer's count holds]",
                             sbh, split);
    return scale * 2 * x.s * x.b * x.h / (x.sp ? t : 1);
  }
  // In units of s·b·h at 2 bytes: the three norms' inputs (2 each, over the stream), the
  // projection's input of 2·h (p bytes per element: 1 under saved = fp8) and the output layer's
  // input (p), outside the tensor-parallel region: split over t under sequence parallelism, or
  // both products' inputs kept gathered under sp_inputs = keep.
  double p = x.fp8Saved ? x.fp8SavedBytes() : 2;
  double norms = 3 * 2, inputs = 3 * p;
  double coefficient = x.keepInputs ? norms / t + inputs : (norms + inputs) / (x.sp ? t : 1);
  if (formula)
    *formula = x.keepInputs
                   ? fmt::format("{}·(6/{} + 3·{}) B [the inputs of enorm, hnorm and the final "
                                 "norm 3·2/t, the projection's 2·h and the output layer's h kept "
                                 "gathered (sp_inputs = keep)]",
                                 sbh, num(t), num(p))
                   : fmt::format("{}·(6 + 3·{}){} B [the inputs of enorm, hnorm and the final norm "
                                 "3·2, the projection's 2·h and the output layer's h at {} B]",
                                 sbh, num(p), split, num(p));
  return scale * x.s * x.b * x.h * coefficient;
}

double getMlpLayerActivationBytes(const ir::MlpConfig &config, const Layout &layout,
                                  std::string *formula) {
  // A linear layer keeps its input and its pre-activation output for the backward.
  unsigned bytes = ir::getActivationBytes(layout.precision);
  double b = layout.microBatch, width = static_cast<double>(config.width);
  bool full = layout.activations == ir::ActivationMode::RecomputeFull;
  if (formula)
    *formula = full ? fmt::format("{}·{}·{} B per layer [b·width input]", num(b), num(width), bytes)
                    : fmt::format("{}·2·{}·{} B per layer [b·(input + pre-activation)·width]",
                                  num(b), num(width), bytes);
  return bytes * b * (full ? 1 : 2) * width;
}

double getRecomputedLayerBytes(const ir::Model &model, const Layout &layout, std::string *formula,
                               bool moeLayer) {
  if (layout.activations == ir::ActivationMode::Keep || model.kind == ir::ModelKind::Abstract)
    return 0;
  bool transformer = model.kind == ir::ModelKind::Transformer;
  if (transformer && layout.activations == ir::ActivationMode::RecomputeOps) {
    // Full and selective recomputation keep a subset of what `keep` keeps; torchtitan's op policy
    // keeps tensors `keep` does not (Q before the rotary embedding, w2's output, the
    // reduce-scatters' outputs), so what its recomputation materializes is listed: the two norms'
    // outputs and the second norm's input (6, split by t under sequence parallelism), Q after the
    // rotary embedding and K, and the MLP's up product and its product with the gate (swiglu) or
    // the activation's output (gelu), split by t; and what eager kernels and repeated K/V keep
    // beyond the fused kernels over grouped K and V (ExtraKept, all of it recomputed).
    TransformerDims x = getLayerDims(model.transformer, layout, moeLayer);
    double sbh = x.s * x.b * x.h;
    double inside = (2 * x.a * x.d + 2 * x.kv * x.d + (x.swiglu ? 4 : 2) * x.f) / x.h;
    double bytes = x.e / 2 * sbh * (6 / (x.sp ? x.t : 1) + inside / x.t);
    ExtraKept extra = getExtraKept(x);
    if (formula)
      *formula = fmt::format(
          "{}·{}·{}·(6{} + ({} + {} + {})/{}){} B (recompute(op): the recomputed layer's norm "
          "outputs and second norm input, Q after the rotary embedding, K and the MLP's {}, alive "
          "from its recomputation through its backward){}",
          num(x.s), num(x.b), num(x.h), x.sp ? fmt::format("/{}", num(x.t)) : std::string(),
          num(2 * x.a * x.d / x.h), num(2 * x.kv * x.d / x.h), num((x.swiglu ? 4 : 2) * x.f / x.h),
          num(x.t), x.e != 2 ? fmt::format(" × {}", num(x.e / 2)) : std::string(),
          x.swiglu ? "up product and gated product" : "activation output",
          describeExtraKept(extra, x, model.transformer,
                            "recomputed too, beyond the fused kernels over grouped K and V"));
    return bytes + extra.getBytes(x);
  }
  Layout keep = layout;
  keep.activations = ir::ActivationMode::Keep;
  auto bytesOf = [&](const Layout &of) {
    return transformer ? getLayerActivationBytes(model.transformer, of, nullptr, moeLayer)
                       : getMlpLayerActivationBytes(model.mlp, of);
  };
  double all = bytesOf(keep), kept = bytesOf(layout);
  if (formula)
    *formula =
        fmt::format("{} − {} (the recomputed {}layer's activations without recomputation, "
                    "less what {} keeps, alive from its recomputation through its backward)",
                    fmtAmount(all, "B"), fmtAmount(kept, "B"), moeLayer ? "MoE " : "",
                    ir::getActivationModeText(layout.activations, 0, layout.recomputeModules));
  return all - kept;
}

WeightPassOperands getWeightPassOperands(const ir::Model &model, UnitKind unit, int64_t layer,
                                         const Layout &layout, std::string *formula) {
  if (model.kind != ir::ModelKind::Transformer && model.kind != ir::ModelKind::Mlp)
    return {};
  // The deferred product dW = xᵀ·dy of a forward product y = x·W (m rows, k in, n out) reads x,
  // m·k elements, and dy, m·n. Its backward work lists it as (k, n, m): its k is the forward's
  // rows. Products that read one tensor (q, k and v, or gate and up, under `projections =
  // separate`) keep it once. Under sequence parallelism a column-parallel product keeps its input
  // split over t and gathers it again for the weight pass (Megatron-Core's linear with
  // sequence parallelism; Qi et al.'s WeightGradStore gathers it when the pass runs), unless
  // `sp_inputs = keep` keeps it gathered.
  Work forward = getUnitWork(model, unit, layer, PassKind::Forward, layout);
  Work backward = getUnitWork(model, unit, layer, PassKind::Backward, layout);
  // The forward product's shared input, by the backward weight gradient's name.
  auto inputOf = [&forward](const Gemm &weightGradient) {
    StringRef name = weightGradient.name;
    if (name.consume_back(" weight gradient"))
      for (const Gemm &gemm : llvm::reverse(forward.gemms))
        if (gemm.name == name)
          return gemm.input;
    return -1;
  };
  double e = ir::getActivationBytes(layout.precision), t = 1, savedBytes = e;
  bool sp = false;
  if (model.kind == ir::ModelKind::Transformer) {
    TransformerDims x = getLayerDims(
        model.transformer, layout, unit == UnitKind::Layer && model.transformer.isMoeBlock(layer));
    t = x.t;
    sp = x.sp && !x.keepInputs; // sp_inputs = keep: the column-parallel inputs kept gathered
    if (x.fp8Saved)
      savedBytes = x.fp8SavedBytes();
  }
  std::set<int> shared;
  double inputs = 0, gradients = 0;
  for (const Gemm &gemm : backward.gemms) {
    if (!gemm.weightGradient)
      continue;
    int input = inputOf(gemm);
    gradients += gemm.k * gemm.n * gemm.batch * e;
    if (input >= 0 && !shared.insert(input).second)
      continue;
    bool column = gemm.tensorSlot == kSlotQkv || gemm.tensorSlot == kSlotMlpIn;
    inputs += gemm.k * gemm.m * gemm.batch * (gemm.fp8 ? savedBytes : e) / (sp && column ? t : 1);
  }
  if (formula)
    *formula = fmt::format(
        "{} (the products' inputs{}) + {} (their output gradients)", fmtAmount(inputs, "B"),
        sp ? ", the column-parallel ones split by t" : "", fmtAmount(gradients, "B"));
  return {inputs, gradients};
}

double getWeightPassBytes(const ir::Model &model, UnitKind unit, int64_t layer,
                          const Layout &layout, std::string *formula) {
  WeightPassOperands operands = getWeightPassOperands(model, unit, layer, layout, formula);
  return operands.inputs + operands.gradients;
}

double getDeferredWeightExtraBytes(const WeightPassOperands &operands, double kept,
                                   bool keepsGraph) {
  if (keepsGraph)
    return std::max(0.0, operands.inputs - kept) + operands.gradients;
  return std::max(0.0, operands.inputs + operands.gradients - kept);
}

bool keepsGraphForWeightPass(ir::Schedule schedule) {
  return schedule == ir::Schedule::ZeroBubbleV;
}

double getDeferredWeightExtraBytes(const ir::Model &model, int64_t layer, const Layout &layout,
                                   bool keepsGraph, std::string *formula) {
  if (model.kind != ir::ModelKind::Transformer && model.kind != ir::ModelKind::Mlp)
    return 0;
  bool transformer = model.kind == ir::ModelKind::Transformer;
  UnitKind unit = transformer ? UnitKind::Layer : UnitKind::MlpLayer;
  bool moeLayer = transformer && model.transformer.isMoeBlock(layer);
  double kept = transformer ? getLayerActivationBytes(model.transformer, layout, nullptr, moeLayer)
                            : getMlpLayerActivationBytes(model.mlp, layout);
  std::string stashText;
  WeightPassOperands operands =
      getWeightPassOperands(model, unit, layer, layout, formula ? &stashText : nullptr);
  double extra = getDeferredWeightExtraBytes(operands, kept, keepsGraph);
  if (keepsGraph) {
    if (formula)
      *formula = fmt::format("max(0, {} (the products' inputs) − {} kept) + {} (their output "
                             "gradients, beside the autograd graph kept) = {} per {}layer",
                             fmtAmount(operands.inputs, "B"), fmtAmount(kept, "B"),
                             fmtAmount(operands.gradients, "B"), fmtAmount(extra, "B"),
                             moeLayer ? "MoE " : "");
    return extra;
  }
  if (formula)
    *formula = fmt::format("max(0, {} − {} kept) = {} per {}layer", stashText, fmtAmount(kept, "B"),
                           fmtAmount(extra, "B"), moeLayer ? "MoE " : "");
  return extra;
}

namespace {

/// One pass of PyTorch's ScheduleZBVZeroBubble on a rank: the forward, the input-gradient pass or
/// the weight pass of micro-batch `microbatch` through the rank's first chunk (stage r) or its
/// second (stage 2p − 1 − r).
struct VPass {
  enum Kind : uint8_t { Forward, Input, Weight } kind;
  bool second;
  int64_t microbatch;
};

/// Rank `rank`'s passes in PyTorch's order (torch/distributed/pipelining/schedules.py,
/// ScheduleZBVZeroBubble._calculate_single_rank_operations): 2(p − r) − 1 first-chunk forwards;
/// r pairs of forwards; p − r second-chunk forward, input-gradient and weight triples; the steady
/// state's first-chunk forward (while any is left), input gradient and weight pass, then the
/// second chunk's three; r pairs of input gradients; p − r first-chunk input gradients each with
/// a first-chunk weight pass; the weight passes left, the second chunk's first. PyTorch builds
/// the order for max(m, 2p − 1) micro-batches and leaves out the passes of those past m.
std::vector<VPass> getZeroBubbleVOrder(int64_t p, int64_t m, int64_t rank) {
  int64_t n = std::max(m, 2 * p - 1);
  int64_t next[2][3] = {}; // [chunk][kind]: the next micro-batch of each
  std::vector<VPass> order;
  auto add = [&](VPass::Kind kind, bool second) {
    int64_t &microbatch = next[second][kind];
    if (microbatch < m)
      order.push_back({kind, second, microbatch});
    ++microbatch;
  };
  for (int64_t i = 0; i < 2 * (p - rank) - 1; ++i)
    add(VPass::Forward, false);
  for (int64_t i = 0; i < rank; ++i) {
    add(VPass::Forward, true);
    add(VPass::Forward, false);
  }
  for (int64_t i = 0; i < p - rank; ++i)
    for (VPass::Kind kind : {VPass::Forward, VPass::Input, VPass::Weight})
      add(kind, true);
  while (next[1][VPass::Forward] < next[0][VPass::Forward] || next[0][VPass::Forward] < n) {
    if (next[0][VPass::Forward] < n)
      add(VPass::Forward, false);
    add(VPass::Input, false);
    add(VPass::Weight, false);
    for (VPass::Kind kind : {VPass::Forward, VPass::Input, VPass::Weight})
      add(kind, true);
  }
  for (int64_t i = 0; i < rank; ++i) {
    add(VPass::Input, false);
    add(VPass::Input, true);
  }
  for (int64_t i = 0; i < p - rank; ++i) {
    add(VPass::Input, false);
    add(VPass::Weight, false);
  }
  for (bool second : {true, false})
    while (next[second][VPass::Weight] < next[second][VPass::Input])
      add(VPass::Weight, second);
  return order;
}

/// A completion time of ZB-V's play and the chain of passes that ends there.
struct TimedChain {
  int64_t time = -1; // -1: not yet
  ZeroBubbleVChain chain;
};

/// PyTorch's ZB-V over p ranks and m micro-batches, played with integer pass times `f`, `b` and
/// `w` and the transfers free: every rank runs its passes in order, a forward once the previous
/// stage's forward of its micro-batch is done, an input gradient once the next stage's (the last
/// stage's: its own forward), a weight pass after its input gradient. The orders and the tables
/// are built once for all the plays of one p and m.
class ZeroBubbleVPlayer {
public:
  ZeroBubbleVPlayer(int64_t p, int64_t m)
      : p(p), forwardDone(static_cast<size_t>(2 * p * m)),
        inputDone(static_cast<size_t>(2 * p * m)) {
    for (int64_t r = 0; r < p; ++r)
      orders.push_back(getZeroBubbleVOrder(p, m, r));
  }

  /// The step, and one longest chain.
  TimedChain play(int64_t f, int64_t b, int64_t w) {
    int64_t stages = 2 * p;
    std::fill(forwardDone.begin(), forwardDone.end(), TimedChain{});
    std::fill(inputDone.begin(), inputDone.end(), TimedChain{});
    std::vector<size_t> position(static_cast<size_t>(p), 0);
    std::vector<TimedChain> clock(static_cast<size_t>(p), TimedChain{0, {}});
    // The ranks that may go on: each runs until a pass waits for another stage, and a pass's
    // end wakes the rank that waits for it (stage s on rank s or 2p − 1 − s).
    std::vector<int64_t> awake(static_cast<size_t>(p));
    std::iota(awake.begin(), awake.end(), 0);
    std::vector<char> isAwake(static_cast<size_t>(p), 1);
    auto wake = [&](int64_t stage) {
      if (stage < 0 || stage >= stages)
        return;
      int64_t rank = stage < p ? stage : stages - 1 - stage;
      if (!isAwake[static_cast<size_t>(rank)]) {
        isAwake[static_cast<size_t>(rank)] = 1;
        awake.push_back(rank);
      }
    };
    while (!awake.empty()) {
      int64_t r = awake.back();
      awake.pop_back();
      isAwake[static_cast<size_t>(r)] = 0;
      const std::vector<VPass> &order = orders[static_cast<size_t>(r)];
      size_t &next = position[static_cast<size_t>(r)];
      TimedChain &now = clock[static_cast<size_t>(r)];
      for (; next < order.size(); ++next) {
        const VPass &pass = order[next];
        int64_t stage = pass.second ? stages - 1 - r : r;
        const TimedChain *ready = nullptr;
        if (pass.kind == VPass::Forward && stage > 0)
          ready = &forwardDone[at(stage - 1, pass.microbatch)];
        else if (pass.kind == VPass::Input)
          ready = stage == stages - 1 ? &forwardDone[at(stage, pass.microbatch)]
                                      : &inputDone[at(stage + 1, pass.microbatch)];
        if (ready && ready->time < 0)
          break;
        if (ready && ready->time > now.time)
          now = *ready;
        switch (pass.kind) {
        case VPass::Forward:
          now.time += f;
          ++now.chain.forward;
          forwardDone[at(stage, pass.microbatch)] = now;
          wake(stage + 1);
          break;
        case VPass::Input:
          now.time += b;
          ++now.chain.input;
          inputDone[at(stage, pass.microbatch)] = now;
          wake(stage - 1);
          break;
        case VPass::Weight:
          now.time += w;
          ++now.chain.weight;
          break;
        }
      }
    }
    return *llvm::max_element(
        clock, [](const TimedChain &x, const TimedChain &y) { return x.time < y.time; });
  }

private:
  size_t at(int64_t stage, int64_t microbatch) const {
    return static_cast<size_t>(microbatch * 2 * p + stage); // a pass's neighbours side by side
  }

  int64_t p;
  std::vector<std::vector<VPass>> orders;
  // When each stage's forward and input gradient of each micro-batch ended, and how.
  std::vector<TimedChain> forwardDone, inputDone;
};

/// A direction of pass times (f, b, w), all at least 0, in lowest terms.
using PassWeights = std::array<int64_t, 3>;

/// What a ZB-V chain takes with these pass times: forward·F + input·B + weight·W, in integers
/// for finding the chains and in seconds for a step.
template <typename T> T getChainTime(const ZeroBubbleVChain &chain, T f, T b, T w) {
  return static_cast<T>(chain.forward) * f + static_cast<T>(chain.input) * b +
         static_cast<T>(chain.weight) * w;
}

int64_t getChainTime(const ZeroBubbleVChain &chain, const PassWeights &d) {
  return getChainTime(chain, d[0], d[1], d[2]);
}

/// `d` scaled to lowest terms with every component at least 0, or nothing where it points
/// nowhere or out of the positive orthant.
std::optional<PassWeights> getPassWeights(PassWeights d) {
  if (llvm::all_of(d, [](int64_t x) { return x <= 0; }))
    for (int64_t &x : d)
      x = -x;
  if (llvm::any_of(d, [](int64_t x) { return x < 0; }) ||
      llvm::all_of(d, [](int64_t x) { return x == 0; }))
    return std::nullopt;
  int64_t divisor = std::gcd(std::gcd(d[0], d[1]), d[2]);
  for (int64_t &x : d)
    x /= divisor;
  return d;
}

PassWeights getCross(const PassWeights &a, const PassWeights &b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}

PassWeights getDifference(const ZeroBubbleVChain &a, const ZeroBubbleVChain &b) {
  return {a.forward - b.forward, a.input - b.input, a.weight - b.weight};
}

/// The longest of `chains` at pass times `d`; -1 for none.
int64_t getLongestChainTime(ArrayRef<ZeroBubbleVChain> chains, const PassWeights &d) {
  int64_t longest = -1;
  for (const ZeroBubbleVChain &chain : chains)
    longest = std::max(longest, getChainTime(chain, d));
  return longest;
}

/// The vertices of the subdivision of the pass times' directions (f, b, w ≥ 0) into the cells
/// where one of `chains` is the longest: the corners, the directions on a face of the orthant
/// where two chains meet as the longest, and those inside it where three do.
std::vector<PassWeights> getChainVertices(ArrayRef<ZeroBubbleVChain> chains) {
  const PassWeights axes[] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  std::vector<PassWeights> vertices(std::begin(axes), std::end(axes));
  auto add = [&](PassWeights direction, std::initializer_list<size_t> meeting) {
    std::optional<PassWeights> d = getPassWeights(direction);
    if (!d)
      return;
    int64_t longest = getLongestChainTime(chains, *d);
    if (llvm::all_of(meeting, [&](size_t i) { return getChainTime(chains[i], *d) == longest; }))
      vertices.push_back(*d);
  };
  for (size_t i = 0; i < chains.size(); ++i)
    for (size_t j = i + 1; j < chains.size(); ++j) {
      PassWeights ij = getDifference(chains[i], chains[j]);
      for (const PassWeights &axis : axes)
        add(getCross(ij, axis), {i, j});
      for (size_t k = j + 1; k < chains.size(); ++k)
        add(getCross(ij, getDifference(chains[i], chains[k])), {i, j, k});
    }
  return vertices;
}

/// Whether the longest of `chains` is at least `chain` for every pass times, that is at every
/// vertex of their subdivision, on whose cells they are linear and `chain` is.
bool coversChain(ArrayRef<ZeroBubbleVChain> chains, const ZeroBubbleVChain &chain) {
  return llvm::all_of(getChainVertices(chains), [&](const PassWeights &d) {
    return getChainTime(chain, d) <= getLongestChainTime(chains, d);
  });
}

} // namespace

// The step is a convex piecewise-linear function g of the pass times (f, b, w), the longest of the
// order's paths. The longest of the chains found so far, g_S, lies below it and is linear on each
// cell of its subdivision of the directions, so where g_S equals g at every vertex of that
// subdivision, g (convex) lies below g_S on each cell and the two are equal everywhere. So: play
// the order at each vertex (exact in integers), add the chain the play finds wherever it is
// longer than g_S there, and repeat until no vertex adds one; a direction where g and g_S were
// equal stays so as chains are added, so each is played once. Last, the chains that the others
// cover are left out.
std::vector<ZeroBubbleVChain> findZeroBubbleVChains(int64_t p, int64_t m) {
  ZeroBubbleVPlayer player(p, m);
  std::vector<ZeroBubbleVChain> chains;
  std::set<PassWeights> played;
  auto play = [&](const PassWeights &d) {
    if (!played.insert(d).second)
      return false;
    TimedChain step = player.play(d[0], d[1], d[2]);
    if (step.time <= getLongestChainTime(chains, d))
      return false;
    chains.push_back(step.chain);
    return true;
  };
  play({1, 1, 1});
  for (bool found = true; found;) {
    found = false;
    for (const PassWeights &d : getChainVertices(chains))
      found |= play(d);
  }
  for (size_t i = 0; i < chains.size();) {
    std::vector<ZeroBubbleVChain> others = chains;
    others.erase(others.begin() + static_cast<ptrdiff_t>(i));
    if (coversChain(others, chains[i]))
      chains = std::move(others);
    else
      ++i;
  }
  return chains;
}

namespace {

/// Rank `rank`'s fullest moments under PyTorch's ZB-V, in micro-batches of two chunks: the
/// chunks held from a forward to its weight pass, those of them past their input gradient, and
/// the head's weight passes deferred (the first rank's second chunk is the last stage), each
/// moment that no other holds at least as much of all three.
llvm::SmallVector<HeldMicrobatches, 2> getZeroBubbleVHeld(int64_t p, int64_t m, int64_t rank) {
  llvm::SmallVector<HeldMicrobatches, 2> peaks;
  int held = 0, deferred = 0, heads = 0;
  for (const VPass &pass : getZeroBubbleVOrder(p, m, rank)) {
    int head = rank == 0 && pass.second ? 1 : 0;
    held += pass.kind == VPass::Forward ? 1 : pass.kind == VPass::Weight ? -1 : 0;
    deferred += pass.kind == VPass::Input ? 1 : pass.kind == VPass::Weight ? -1 : 0;
    heads += pass.kind == VPass::Input ? head : pass.kind == VPass::Weight ? -head : 0;
    HeldMicrobatches now{held / 2.0, deferred / 2.0, static_cast<double>(heads)};
    auto covers = [](const HeldMicrobatches &a, const HeldMicrobatches &b) {
      return a.microbatches >= b.microbatches && a.deferred >= b.deferred && a.heads >= b.heads;
    };
    if (llvm::any_of(peaks, [&](const HeldMicrobatches &peak) { return covers(peak, now); }))
      continue;
    llvm::erase_if(peaks, [&](const HeldMicrobatches &peak) { return covers(now, peak); });
    peaks.push_back(now);
  }
  return peaks;
}

} // namespace

ArrayRef<ZeroBubbleVChain> getZeroBubbleVChains(int64_t stages, int64_t microbatches) {
  // Kept for the process (a search asks for the same few pipelines millions of times), each
  // thread remembering the last it asked for; std::map's nodes stay where they are.
  static std::mutex mutex;
  static std::map<std::pair<int64_t, int64_t>, std::vector<ZeroBubbleVChain>> computed;
  thread_local std::pair<int64_t, int64_t> lastKey{-1, -1};
  thread_local ArrayRef<ZeroBubbleVChain> last;
  std::pair<int64_t, int64_t> key{stages, microbatches};
  if (key == lastKey)
    return last;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = computed.try_emplace(key);
  if (inserted)
    it->second = findZeroBubbleVChains(stages, microbatches);
  lastKey = key;
  last = it->second;
  return last;
}

double getInFlightMicrobatches(ir::Schedule schedule, int64_t stages, int64_t microbatches,
                               int64_t chunks, int stage, std::string *formula, int64_t group) {
  double m = static_cast<double>(microbatches), p = static_cast<double>(stages);
  auto count = [](double value) {
    return num(value) + (value == 1 ? " micro-batch" : " micro-batches");
  };
  if (stages <= 1) {
    if (formula)
      *formula = "1 micro-batch in flight (no pipeline)";
    return 1;
  }
  switch (schedule) {
  case ir::Schedule::GPipe:
    if (formula)
      *formula = fmt::format("{} in flight (gpipe keeps all m)", count(m));
    return m;
  case ir::Schedule::OneFOneB: {
    double value = std::min(p - stage, m);
    if (formula)
      *formula = fmt::format("{} in flight (1f1b: min(p - stage, m) = min({} - {}, {}))",
                             count(value), num(p), stage, num(m));
    return value;
  }
  case ir::Schedule::ZeroBubble: {
    // Qi et al.'s hand schedule (efficiency.py, get_hand_schedule): stage s defers its first s
    // weight passes, so every stage holds p micro-batches from a forward to its weight pass at
    // its peak, p − s − 1 of them whole and s + 1 what the weight passes read (getDeferredWeight-
    // Peaks, getDeferredWeightExtraBytes).
    double value = std::min(p, m);
    if (formula)
      *formula = fmt::format("{} in flight (zero_bubble: min(p, m) = min({}, {}) on every stage, "
                             "from each forward to its weight pass, stage s deferring its first "
                             "s weight passes)",
                             count(value), num(p), num(m));
    return value;
  }
  case ir::Schedule::ZeroBubbleV: {
    // PyTorch's order (getZeroBubbleVOrder), played in CostModelTest: rank r holds at most
    // min(m + 1 + r, 2m, 2p) chunks, p micro-batches from 2p − 1 of them up.
    double value = std::min({m + 1 + stage, 2 * m, 2 * p}) / 2;
    if (formula)
      *formula = fmt::format("{} in flight (zbv: min(m + 1 + rank, 2m, 2p) = min({} + 1 + {}, "
                             "2·{}, 2·{}) chunks of half a stage)",
                             count(value), num(m), stage, num(m), num(p));
    return value;
  }
  case ir::Schedule::DualPipeV: {
    // 2p + 1 chunks of half a stage: DualPipe's PP + 1 stages' activations with PP = 2p stages on
    // p ranks (deepseek-ai/DualPipe, README): 2p − r − 1 forwards of phase 0 and r + 1 of phase 1
    // before the main step (dualpipev.py, steps 1 and 2), one more beside a backward there.
    double value = std::min(p + 0.5, m);
    if (formula)
      *formula = fmt::format("{} in flight (dualpipev: 2p + 1 chunks of half a stage, min(p + "
                             "1/2, m) = min({} + 1/2, {}))",
                             count(value), num(p), num(m));
    return value;
  }
  case ir::Schedule::DualPipe: {
    // PP + 1 chunks of a stage holding one chunk of each direction (DeepSeek-AI 2024, Table 2).
    double value = std::min((p + 1) / 2, m);
    if (formula)
      *formula = fmt::format("{} in flight (dualpipe: p + 1 chunks of half a stage, min((p + "
                             "1)/2, m) = min(({} + 1)/2, {}))",
                             count(value), num(p), num(m));
    return value;
  }
  case ir::Schedule::Interleaved: {
    if (chunks <= 1) // one chunk per stage: 1F1B
      return getInFlightMicrobatches(ir::Schedule::OneFOneB, stages, microbatches, 1, stage,
                                     formula);
    // Megatron-Core's interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py,
    // get_pp_rank_microbatches): stage s runs 2(p − s − 1) + (v − 1)·p warm-up chunk forwards
    // (every one of the m·v where they are more), then a forward before each backward, so at its
    // peak it holds one chunk more than its warm-up, each a v-th of the stage. On the first
    // stage that is Korthikanti et al.'s p·(1 + (p − 1)/(p·v)) (2022, §4.2.3); the last holds
    // p − (p − 1)/v, not one micro-batch as under 1F1B.
    // With micro-batch groups of N (`group`), (v − 1)·N warm-up chunks in place of (v − 1)·p.
    double v = static_cast<double>(chunks), s = static_cast<double>(stage);
    double n = group > 0 ? static_cast<double>(group) : p;
    double value = std::min(m, (2 * (p - s - 1) + (v - 1) * n + 1) / v);
    if (formula)
      *formula = fmt::format(
          "{} in flight (interleaved: min(m, (2(p - stage - 1) + (v - 1)·{} + "
          "1)/v) = min({}, (2·({} - {} - 1) + ({} - 1)·{} + 1)/{}), "
          "Megatron-Core's warm-up chunks and one more{})",
          count(value), group > 0 ? "N" : "p", num(m), num(p), stage, num(v), num(n), num(v),
          group > 0 ? fmt::format(", micro-batch groups of N = {}", group) : std::string());
    return value;
  }
  }
  return 1;
}

double getLossInFlightMicrobatches(ir::Schedule schedule, int64_t stages, int64_t microbatches,
                                   int64_t chunks, int stage, std::string *formula, int64_t group) {
  if (stages <= 1 || schedule == ir::Schedule::GPipe)
    return getInFlightMicrobatches(schedule, stages, microbatches, chunks, stage, formula);
  // Interleaved micro-batch groups of N whose last holds L < N: the last stage's step k runs
  // the forward of table entry k and the backward of entry k − (v − 1)·N (Megatron-Core's
  // get_schedule_table), so the head's chunk runs the forward of the last group's micro-batch j
  // (v − 1)·(N − L) steps before its backward: min(L, (v − 1)·(N − L) + 1) in flight (played in
  // CostModelTest.InterleavedAgainstItsSchedule).
  if (schedule == ir::Schedule::Interleaved && chunks > 1 && group > 0 &&
      microbatches % group != 0) {
    int64_t last = microbatches % group;
    double value = static_cast<double>(std::min(last, (chunks - 1) * (group - last) + 1));
    if (formula)
      *formula = fmt::format("{} micro-batches in flight (interleaved, groups of N = {} whose "
                             "last holds L = {}: min(L, (v - 1)·(N - L) + 1))",
                             num(value), group, last);
    return value;
  }
  // The head's chunk (the last of the last stage, or the V's second on the first rank) runs a
  // micro-batch's backward before its next forward: 1F1B's and ZB-H1's last stage, Megatron-Core's
  // and PyTorch's interleaved 1F1B, which start their steady state there, ZB-V (PyTorch's
  // ScheduleZBVZeroBubble) and DualPipeV (dualpipev.py). The zero-bubble schedules' deferred
  // weight passes of the head keep its input and output gradient past that
  // (getDeferredWeightPeaks).
  if (formula)
    *formula = fmt::format("1 micro-batch in flight (the head's chunk runs each micro-batch's "
                           "backward before its next forward under {})",
                           ir::toString(schedule).str());
  return std::min(1.0, static_cast<double>(microbatches));
}

llvm::SmallVector<HeldMicrobatches, 2>
getDeferredWeightPeaks(ir::Schedule schedule, int64_t stages, int64_t microbatches, int64_t chunks,
                       int stage, bool hasHead, double extraInFlight, std::string *formula) {
  llvm::SmallVector<HeldMicrobatches, 2> peaks;
  if (stages <= 1 || (schedule != ir::Schedule::ZeroBubble &&
                      schedule != ir::Schedule::ZeroBubbleV && schedule != ir::Schedule::DualPipeV))
    return peaks;
  double p = static_cast<double>(stages), m = static_cast<double>(microbatches),
         r = static_cast<double>(stage);
  auto add = [&](double held, double deferred, double heads) {
    peaks.push_back({held + extraInFlight, deferred, hasHead ? heads : 0});
  };
  switch (schedule) {
  case ir::Schedule::ZeroBubble: {
    // Stage s defers its first s weight passes to its end and runs every other one after its
    // input-gradient pass: at its fullest, after an input-gradient pass, s + 1 await theirs.
    double held = std::min(p, m), deferred = std::min(r + 1, held);
    add(held, deferred, deferred);
    if (formula)
      *formula = fmt::format("{} of them past their input-gradient pass, holding their weight "
                             "passes' operands (zero_bubble: min(stage + 1, m) = min({} + 1, {}))",
                             num(deferred), stage, num(m));
    break;
  }
  case ir::Schedule::ZeroBubbleV:
    // Fewer than 2p − 1 micro-batches: PyTorch's order played pass by pass.
    if (m < 2 * p - 1) {
      for (const HeldMicrobatches &peak : getZeroBubbleVHeld(stages, microbatches, stage))
        add(peak.microbatches, peak.deferred, peak.heads);
      if (!formula)
        break;
      std::vector<std::string> terms;
      for (const HeldMicrobatches &peak : peaks)
        terms.push_back(fmt::format("({}, {}, {})", num(peak.microbatches), num(peak.deferred),
                                    num(peak.heads)));
      *formula = fmt::format("the fullest moments of rank {} as PyTorch orders zbv's passes for "
                             "m = {} < 2p - 1 (in flight, past their input-gradient pass, the "
                             "head's): {}",
                             stage, num(m), llvm::join(terms, ", "));
      break;
    }
    // Played in PyTorch's order (CostModelTest): rank r's peaks are 2p − 1 chunk forwards with
    // one chunk past its input gradient (the head's on the first rank), and p − 1 − r with
    // 2r + 1 past theirs, before its cool-down's weight passes.
    add(std::min(p, m), 0.5, 1);
    add((p + r) / 2, r + 0.5, 0);
    if (formula)
      *formula = fmt::format("the larger of two peaks (zbv, rank {}): all of them with one chunk "
                             "past its input-gradient pass, or (p + r)/2 = {} with 2r + 1 = {} "
                             "chunks past theirs, holding their autograd graphs and their "
                             "products' output gradients (PyTorch)",
                             stage, num((p + r) / 2), stage * 2 + 1);
    break;
  case ir::Schedule::DualPipeV:
    // Played in dualpipev.py's order (CostModelTest): 2p + 1 chunks with one past its input
    // gradient, or p − 1 − r with r + 1 past theirs (its steps 6 and 7).
    add(std::min(p + 0.5, m), 0.5, 1);
    add(p / 2, (r + 1) / 2, 0);
    if (formula)
      *formula = fmt::format("the larger of two peaks (dualpipev, rank {}): all of them with one "
                             "chunk past its input-gradient pass, or p/2 = {} with r + 1 = {} "
                             "chunks past theirs, holding their weight passes' operands",
                             stage, num(p / 2), stage + 1);
    break;
  default:
    break;
  }
  return peaks;
}

double getHeldActivationBytes(llvm::ArrayRef<HeldMicrobatches> peaks, double inFlight,
                              double perMicrobatch, double perDeferred, double perHead) {
  if (peaks.empty())
    return inFlight * perMicrobatch;
  double bytes = 0;
  for (const HeldMicrobatches &peak : peaks)
    bytes = std::max(bytes, peak.microbatches * perMicrobatch + peak.deferred * perDeferred +
                                peak.heads * perHead);
  return bytes;
}

double getExpertOverlapInFlight(ir::Schedule schedule, double inFlight, int64_t stages,
                                int64_t microbatches, int64_t chunks, int64_t stageLayers,
                                std::string *formula) {
  double m = static_cast<double>(microbatches);
  if (microbatches <= 1 || stageLayers <= 0)
    return inFlight;
  if (stages > 1 && schedule == ir::Schedule::DualPipeV) {
    if (formula)
      *formula += "; ep_overlap: DualPipeV's count, that of its forward and backward chunks "
                  "side by side";
    return inFlight;
  }
  double layer = 1 / static_cast<double>(stageLayers);
  double chunk = stages > 1 ? 1 / static_cast<double>(std::max<int64_t>(1, chunks)) : 0;
  double value = std::min(m, inFlight + chunk + layer);
  if (formula) {
    std::string extra =
        stages > 1 ? fmt::format(" + 1/{} (one more warm-up chunk)", chunks) : std::string();
    *formula += fmt::format("; ep_overlap: min(m, {}{} + 1/{} (one more layer paired)) = {}",
                            num(inFlight), extra, stageLayers, num(value));
  }
  return value;
}

namespace {
/// `count × each B`, or where the stage holds units that no quantized product reads and they take
/// other bytes (or `parts` says what `each` holds), the sum of the two parts:
/// `count: (q × each B (parts) + p × plain B (…))`, or where all of them are such units
/// `count × plain B (…)`.
std::string getPlainSplitText(const StageStates &x, const std::string &count, double each,
                              double plain, const std::string &parts = std::string()) {
  if (x.plainParams <= 0 || (each == plain && parts.empty()))
    return fmt::format("{} × {} B{}", count, each, parts);
  // An mlp's layers: all of them.
  if (x.plainParams >= x.params)
    return fmt::format("{} × {} B (read by BF16 products: the weight alone)", count, plain);
  return fmt::format("{}: ({} × {} B{} + {} × {} B (the embedding's and the head's, read by BF16 "
                     "products: the weight alone))",
                     count, num(x.params - x.plainParams), each, parts, num(x.plainParams), plain);
}
} // namespace

StageMemoryResult getStageMemory(const StageStates &x, const ir::StateBytes &bytes,
                                 std::vector<Explanation> *device, std::vector<Explanation> *host) {
  StageMemoryResult result;
  // The units that no quantized product reads hold their weights alone (quantizesParams).
  const ir::StateBytes plain = bytes.unquantized();
  const ir::StateBytes &largest = x.largestPlain ? plain : bytes;
  double quantized = x.params - x.plainParams;
  double denseParamBytes = quantized * bytes.params + x.plainParams * plain.params;
  // Routed experts by their own shard degrees (over the expert-data-parallel axes).
  double paramBytes = denseParamBytes / static_cast<double>(x.paramShard) +
                      x.expertParams * bytes.params / static_cast<double>(x.expertParamShard);
  double gradBytes = x.params * bytes.grads / static_cast<double>(x.gradShard) +
                     x.expertParams * bytes.grads / static_cast<double>(x.expertGradShard);
  double optimizerBytes =
      x.params * bytes.optimizer / static_cast<double>(x.optimizerShard) +
      x.expertParams * bytes.optimizer / static_cast<double>(x.expertOptimizerShard);
  (x.paramsOnHost ? result.host : result.device).params = paramBytes;
  (x.gradsOnHost ? result.host : result.device).grads = gradBytes;
  (x.optimizerOnHost ? result.host : result.device).optimizer = optimizerBytes;
  // Layers by kind (dense, MoE) and by whether they are recomputed (recompute(layers = n)): their
  // counts and one layer's bytes for one micro-batch (the search's fast path asks for these
  // numbers alone; their names and formulas are built below, for explanations only).
  const int64_t termCounts[4] = {x.layers - x.moeLayers - (x.keptLayers - x.keptMoeLayers),
                                 x.moeLayers - x.keptMoeLayers, x.keptLayers - x.keptMoeLayers,
                                 x.keptMoeLayers};
  const double termBytes[4] = {x.layerActivationBytes, x.moeLayerActivationBytes,
                               x.keptLayerActivationBytes, x.keptMoeLayerActivationBytes};
  double activations = 0;
  for (size_t i = 0; i < 4; ++i)
    activations += static_cast<double>(termCounts[i]) * termBytes[i];
  activations += static_cast<double>(x.mtpLayers) * x.mtpActivationBytes;
  activations += x.embeddingActivationBytes;
  double perMicrobatch = activations;
  activations =
      getHeldActivationBytes(x.peaks, x.inFlight, perMicrobatch, x.deferredExtra, x.headWeightPass);
  (x.activationsOnHost ? result.host : result.device).activations = activations;

  // Transient buffers.
  double gathered = 0, tied = 0, unreduced = 0, fromHost = 0, gatheredUnits = 0;
  if (x.gathers) {
    if (x.keepAfterForward) {
      gathered = quantized * bytes.gathered + x.plainParams * plain.gathered;
    } else {
      gatheredUnits = std::min<double>(2, static_cast<double>(x.units));
      gathered = gatheredUnits * x.largestUnit * largest.gathered;
      tied = x.tiedEmbedding * plain.gathered;
    }
  }
  if (x.gradShard > 1 || x.gradsOnHost)
    unreduced = x.largestUnit * bytes.grads;
  if (x.paramsOnHost)
    fromHost = x.largestUnit * largest.gathered / static_cast<double>(x.paramShard);
  double transient = gathered + tied + unreduced + fromHost + x.headBuffers + x.recomputedLayer;
  result.device.transient = transient;
  result.device.peak = result.device.getPersistent() + result.device.activations + transient;
  result.host.peak = result.host.getPersistent() + result.host.activations;
  if (!device || !host)
    return result;

  auto add = [&](bool onHost, std::string figure, std::string formula, double value,
                 StringRef unit = "B") {
    (onHost ? host : device)->push_back({std::move(figure), std::move(formula), value, unit.str()});
  };
  std::vector<std::string> optimizerParts;
  if (bytes.masterCopy() > 0)
    optimizerParts.push_back("fp32 master");
  if (bytes.moments == 2)
    optimizerParts.push_back(bytes.momentBytes == 4 ? "momentum, variance"
                                                    : "bf16 momentum, variance");
  else if (bytes.moments == 1)
    optimizerParts.push_back("momentum");
  std::string optimizerText = optimizerParts.empty() ? fmt::format("{} B", bytes.optimizer)
                                                     : fmt::format("{} B ({})", bytes.optimizer,
                                                                   fmt::join(optimizerParts, ", "));
  auto experts = [&](double perParam, const std::string &shardText) {
    if (x.expertParams <= 0)
      return std::string();
    return fmt::format(" + {} × {} B{} (routed experts)", num(x.expertParams), perParam, shardText);
  };
  // What a parameter's bytes hold where FP8 or FP4 training keeps quantized copies of it.
  std::string paramParts;
  if (bytes.cache > 0)
    paramParts = bytes.params > bytes.cache
                     ? fmt::format(" ({} B weight, {} B {})", bytes.params - bytes.cache,
                                   bytes.cache, bytes.cacheWhat)
                     : fmt::format(" ({} alone)", bytes.cacheWhat);
  add(x.paramsOnHost, "params",
      fmt::format("{}{}{}",
                  getPlainSplitText(x, x.paramsText, bytes.params, plain.params, paramParts),
                  x.paramShardText, experts(bytes.params, x.expertParamShardText)),
      paramBytes);
  add(x.gradsOnHost, "grads",
      fmt::format("{} × {} B{}{}{}", num(x.params), bytes.grads, x.gradShardText,
                  experts(bytes.grads, x.expertGradShardText),
                  x.gradsOnHostWithOptimizer
                      ? " (on the host with the optimizer, after each reduce-scatter)"
                      : ""),
      gradBytes);
  add(x.optimizerOnHost, "optimizer",
      fmt::format("{} × {}{}{}", num(x.params), optimizerText, x.optimizerShardText,
                  experts(bytes.optimizer, x.expertOptimizerShardText)),
      optimizerBytes);
  device->push_back(
      {"model states",
       fmt::format("params + grads + optimizer = {} + {} + {}",
                   fmtAmount(result.device.params, "B"), fmtAmount(result.device.grads, "B"),
                   fmtAmount(result.device.optimizer, "B")),
       result.device.getPersistent(), "B"});
  // Under a schedule that defers weight passes: what its peaks add for them.
  std::string deferredText;
  if (!x.peaks.empty() && (x.deferredExtra > 0 || x.headWeightPass > 0)) {
    std::vector<std::string> peakTerms;
    for (const HeldMicrobatches &peak : x.peaks) {
      std::string term =
          fmt::format("{} × {}", num(peak.microbatches), fmtAmount(perMicrobatch, "B"));
      if (peak.deferred > 0 && x.deferredExtra > 0)
        term += fmt::format(" + {} × {}", num(peak.deferred), fmtAmount(x.deferredExtra, "B"));
      if (peak.heads > 0 && x.headWeightPass > 0)
        term += fmt::format(" + {} × {} (the head's)", num(peak.heads),
                            fmtAmount(x.headWeightPass, "B"));
      peakTerms.push_back(term);
    }
    deferredText = fmt::format(
        "; {}; what a deferred weight pass holds beyond the activations: {}{}{}; so max({})",
        x.peaksText,
        x.deferredExtra > 0 ? fmt::format("the layers' {} ({} for the stage's layers)",
                                          x.deferredExtraText, fmtAmount(x.deferredExtra, "B"))
                            : std::string(),
        x.deferredExtra > 0 && x.headWeightPass > 0 ? ", " : "",
        x.headWeightPass > 0 ? "the head's " + x.headWeightPassText : std::string(),
        llvm::join(peakTerms, ", "));
  }
  if (!x.activationsKnown)
    add(x.activationsOnHost, "activations",
        "unknown: an abstract model gives its parameter count only", 0, "");
  else if (x.moeLayers == 0 && x.keptLayers == 0 && x.mtpLayers == 0 &&
           x.embeddingActivationBytes == 0)
    add(x.activationsOnHost, "activations",
        fmt::format("{} layers × {} × {}{}", x.layers, x.layerActivationText, x.inFlightText,
                    deferredText),
        activations);
  else {
    const std::string *termTexts[4] = {&x.layerActivationText, &x.moeLayerActivationText,
                                       &x.keptLayerActivationText, &x.keptMoeLayerActivationText};
    // The kinds named where the stage has more than one (a dense stage's layers are just layers).
    const char *termNames[4] = {x.keptLayers > 0
                                    ? x.moeLayers > 0 ? "recomputed dense " : "recomputed "
                                : x.moeLayers > 0 ? "dense "
                                                  : "",
                                x.keptLayers > 0 ? "recomputed MoE " : "MoE ",
                                x.moeLayers > 0 ? "kept dense " : "kept ", "kept MoE "};
    std::vector<std::string> layerTerms;
    for (size_t i = 0; i < 4; ++i)
      if (termCounts[i] > 0)
        layerTerms.push_back(
            fmt::format("{} {}layers × {}", termCounts[i], termNames[i], *termTexts[i]));
    if (x.mtpLayers > 0)
      layerTerms.push_back(fmt::format("{} multi-token prediction module{} × {} (beyond {} layer)",
                                       x.mtpLayers, x.mtpLayers > 1 ? "s" : "", x.mtpActivationText,
                                       x.mtpLayers > 1 ? "their" : "its"));
    if (x.embeddingActivationBytes > 0)
      layerTerms.push_back(x.embeddingActivationText);
    add(x.activationsOnHost, "activations",
        fmt::format("({}) × {}{}", llvm::join(layerTerms, " + "), x.inFlightText, deferredText),
        activations);
  }

  std::vector<std::string> parts;
  if (x.gathers && x.keepAfterForward)
    parts.push_back(
        fmt::format("{} (every gathered unit, kept from its forward to its backward)",
                    getPlainSplitText(x, num(x.params), bytes.gathered, plain.gathered)));
  if (x.gathers && !x.keepAfterForward)
    parts.push_back(fmt::format("{} × {} ({}, the largest unit) × {} B (gathered params: the "
                                "unit in use{})",
                                num(gatheredUnits), num(x.largestUnit), x.largestName,
                                largest.gathered,
                                gatheredUnits > 1 ? " and the next, prefetched" : ""));
  if (tied > 0)
    parts.push_back(fmt::format("{} × {} B (the tied embedding, gathered from its forward "
                                "through the head's)",
                                num(x.tiedEmbedding), plain.gathered));
  if (unreduced > 0)
    parts.push_back(fmt::format("{} × {} B (a unit's full gradient before it is {})",
                                num(x.largestUnit), bytes.grads,
                                x.gradShard > 1 ? "reduce-scattered" : "sent to the host"));
  if (fromHost > 0)
    parts.push_back(fmt::format("{} × {} B / {} (a unit's params brought from the host)",
                                num(x.largestUnit), largest.gathered, x.paramShard));
  if (x.headBuffers > 0)
    parts.push_back(x.headBuffersText);
  if (x.recomputedLayer > 0)
    parts.push_back(x.recomputedLayerText);
  device->push_back({"transient",
                     parts.empty() ? "none (nothing is gathered, reduced per unit or brought "
                                     "from the host)"
                                   : llvm::join(parts, " + "),
                     transient, "B"});
  device->push_back(
      {"peak",
       fmt::format("model states + activations + transient = {} + {} + {}",
                   fmtAmount(result.device.getPersistent(), "B"),
                   fmtAmount(result.device.activations, "B"), fmtAmount(transient, "B")),
       result.device.peak, "B"});
  return result;
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

StringRef toString(Collective collective) {
  switch (collective) {
  case Collective::AllReduce:
    return "all-reduce";
  case Collective::AllGather:
    return "all-gather";
  case Collective::ReduceScatter:
    return "reduce-scatter";
  case Collective::AllToAll:
    return "all-to-all";
  case Collective::PointToPoint:
    return "send";
  case Collective::Host:
    return "host transfer";
  }
  return "?";
}

GroupShape getGroupShape(const ir::Mesh &mesh, ArrayRef<unsigned> axes, int64_t devicesPerNode) {
  std::vector<unsigned> sorted(axes.begin(), axes.end());
  llvm::sort(sorted);
  std::vector<GroupAxis> groupAxes;
  for (unsigned axis : sorted)
    groupAxes.push_back({mesh.getStride(axis), mesh.axes[axis].size});
  return getGroupShape(groupAxes, devicesPerNode);
}

GroupShape getGroupShape(ArrayRef<GroupAxis> sorted, int64_t devicesPerNode) {
  GroupShape shape;
  shape.size = 1;
  for (const GroupAxis &axis : sorted)
    shape.size *= axis.size;
  // Group 0 holds the ranks Σ c_i·stride_i. In a row-major mesh every axis's stride exceeds the
  // largest offset its inner axes reach, so the ranks below `limit` are counted axis by axis from
  // the outermost: the whole blocks of the outer axis, then the inner axes in the partial one.
  int64_t innerTotals[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  std::vector<int64_t> innerVector;
  int64_t *inner = innerTotals;
  if (sorted.size() + 1 > 8) {
    innerVector.assign(sorted.size() + 1, 1);
    inner = innerVector.data();
  }
  for (size_t i = sorted.size(); i-- > 0;)
    inner[i] = inner[i + 1] * sorted[i].size;
  int64_t limit = std::max<int64_t>(1, devicesPerNode), count = 0;
  for (size_t i = 0; i < sorted.size() && limit > 0; ++i) {
    int64_t stride = sorted[i].stride, size = sorted[i].size;
    int64_t whole = std::min(size, limit / stride);
    count += whole * inner[i + 1];
    if (whole >= size) {
      shape.perNode = count;
      return shape;
    }
    limit -= whole * stride;
  }
  if (sorted.empty())
    count = 1;
  else if (limit > 0)
    count += 1; // The partial block's first rank (offset 0 of every inner axis).
  shape.perNode = std::max<int64_t>(1, count);
  return shape;
}

bool crossesNodes(int64_t stride, int64_t stages, int stage, int peer, int64_t devices,
                  int64_t devicesPerNode) {
  // The layers axis's coordinate of rank r is (r / stride) % stages: stage `stage` holds the
  // ranks r = a·period + stage·stride + b (period = stride·stages, 0 ≤ b < stride), and each
  // one's peer is r + offset. With D devices per node, r and r + offset lie in different nodes
  // exactly when (r mod D) + offset ≥ D (offset > 0) or (r mod D) + offset < 0 (offset < 0): so
  // only the largest and the smallest residue mod D of the stage's ranks matter.
  int64_t offset = (static_cast<int64_t>(peer) - stage) * stride;
  int64_t nodeSize = devicesPerNode;
  if (offset == 0)
    return false;
  int64_t period = stride * stages;
  if (period <= 0 || devices % period != 0) {
    // Not a whole number of blocks (no mesh lays out devices so): rank by rank.
    for (int64_t rank = 0; rank < devices; ++rank)
      if ((rank / stride) % stages == stage && rank / nodeSize != (rank + offset) / nodeSize)
        return true;
    return false;
  }
  // Every rank's peer is a node or more away.
  if (offset >= nodeSize || -offset >= nodeSize)
    return true;
  // The block starts a·period + stage·stride, taken mod D, repeat every D/gcd(period, D) blocks.
  int64_t blocks = std::min(devices / period, nodeSize / std::gcd(period, nodeSize));
  for (int64_t a = 0; a < blocks; ++a) {
    int64_t first = (a * period + stage * stride) % nodeSize;
    int64_t last = first + stride - 1; // The block's residues, first..last mod D.
    bool wraps = last >= nodeSize;
    int64_t highest = wraps ? nodeSize - 1 : last, lowest = wraps ? 0 : first;
    if (offset > 0 ? highest + offset >= nodeSize : lowest + offset < 0)
      return true;
  }
  return false;
}

GroupShape getStagePairShape(int64_t stride, int64_t stages, int stage, int peer, int64_t devices,
                             int64_t devicesPerNode) {
  return {2, crossesNodes(stride, stages, stage, peer, devices, devicesPerNode) ? 1 : 2};
}

int64_t getEmbeddingCopyParams(const ir::Model &model, int64_t tensorDegree) {
  if (model.kind != ir::ModelKind::Transformer ||
      (!model.transformer.tiedEmbeddings && model.transformer.mtpLayers == 0))
    return 0;
  // The token embedding (embed.tokens, split by vocabulary rows like the output layer); the
  // learned position embedding stays on the first stage.
  for (const ir::Tensor &tensor : model.tensors)
    if (tensor.layer < 0 && tensor.split == ir::TensorSplit::Vocabulary)
      return (tensor.numElements + tensorDegree - 1) / tensorDegree;
  return 0;
}

double getSentBytes(Collective collective, double n, double bytes) {
  switch (collective) {
  case Collective::AllReduce:
    return 2 * (n - 1) / n * bytes;
  case Collective::AllGather:
  case Collective::ReduceScatter:
  case Collective::AllToAll:
    return (n - 1) / n * bytes;
  case Collective::PointToPoint:
  case Collective::Host:
    return bytes;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// Overlap
//===----------------------------------------------------------------------===//

double getOverlapExposedSeconds(double commSeconds, double computeSeconds) {
  if (commSeconds <= 0)
    return 0;
  double kappa = kOverlapComputeSlowdown;
  return std::max(commSeconds - computeSeconds, commSeconds * kappa / (1 + kappa));
}

bool overlapsTensorTraffic(ir::AsyncTensorParallel mode, bool forwardComputation,
                           bool inputGradient) {
  switch (mode) {
  case ir::AsyncTensorParallel::Off:
    return false;
  case ir::AsyncTensorParallel::All:
    return true;
  case ir::AsyncTensorParallel::Forward:
    return forwardComputation;
  case ir::AsyncTensorParallel::WeightGradient:
    return inputGradient;
  }
  return false;
}

double getTensorOverlapExposedSeconds(double commSeconds, const TensorSlotSeconds &slots) {
  int used = 0;
  for (double gemmSeconds : slots)
    used += gemmSeconds > 0;
  if (commSeconds <= 0 || used == 0)
    return 0;
  double share = commSeconds / used, exposed = 0;
  for (double gemmSeconds : slots)
    if (gemmSeconds > 0)
      exposed += getOverlapExposedSeconds(share, gemmSeconds);
  return exposed;
}

double getPassExposedSeconds(ArrayRef<PassUnit> units) {
  double exposed = 0, previousReduce = 0;
  bool first = true;
  for (size_t i = 0; i < units.size(); ++i) {
    const PassUnit &unit = units[i];
    if (unit.count <= 0)
      continue;
    size_t next = i + 1;
    while (next < units.size() && units[next].count <= 0)
      ++next;
    double nextGather = next < units.size() ? units[next].gather : 0;
    if (first)
      exposed += unit.gather;
    first = false;
    double beside = unit.beside + unit.tensorBeside;
    // Async TP's collectives never hide better than beside their own products.
    double floor =
        unit.tensorBeside > 0 ? getTensorOverlapExposedSeconds(unit.tensorBeside, unit.slots) : 0;
    auto window = [&](double comm) {
      return std::max(getOverlapExposedSeconds(comm + beside, unit.compute), floor);
    };
    if (unit.count == 1) {
      exposed += window(nextGather + previousReduce);
    } else {
      // A run of identical units: the first overlaps the previous unit's reduction, the middle
      // ones their neighbours', the last the next unit's gather.
      exposed += window(unit.gather + previousReduce) +
                 static_cast<double>(unit.count - 2) * window(unit.gather + unit.reduce) +
                 window(nextGather + unit.reduce);
    }
    previousReduce = unit.reduce;
  }
  // The last unit's reduction ends the pass.
  return exposed + previousReduce;
}

double getExpertOverlapUnpairedShare(ir::Schedule schedule, int64_t stages, int64_t stage,
                                     int64_t microbatches, int64_t chunks, int64_t group) {
  double m = static_cast<double>(std::max<int64_t>(1, microbatches));
  if (stages <= 1)
    return 1 / m;
  if (schedule == ir::Schedule::DualPipeV) {
    // DualPipeV's main step pairs 2·(m − 2p + r + 1) chunks, but the last rank's first, and its
    // fifth step p − r − 1 more, of the 2m forwards (and backwards) of rank r.
    double p = static_cast<double>(stages), r = static_cast<double>(stage);
    double paired = 2 * (m - 2 * p + r + 1) - (stage == stages - 1 ? 1 : 0) + (p - r - 1);
    return std::clamp(1 - paired / (2 * m), 0.0, 1.0);
  }
  double p = static_cast<double>(stages), v = static_cast<double>(std::max<int64_t>(1, chunks));
  double n = group > 0 ? static_cast<double>(group) : p;
  double warmup = 2 * (p - static_cast<double>(stage) - 1) + (v - 1) * n + 1;
  return std::min(1.0, warmup / (m * v));
}

std::array<ExpertOverlapWindow, 4> getExpertOverlapWindows(const ExpertExchange &unit) {
  return {{{"the combine gradient", "the forward's attention side", unit.backwardCombine,
            unit.forwardCompute - unit.forwardExperts},
           {"the dispatch", "the backward's routed experts", unit.forwardDispatch,
            unit.backwardExperts},
           {"the dispatch gradient", "the forward's routed experts", unit.backwardDispatch,
            unit.forwardExperts},
           {"the combine", "the backward's attention side", unit.forwardCombine,
            unit.backwardCompute - unit.backwardExperts}}};
}

double getExpertOverlapExposedSeconds(ArrayRef<ExpertExchange> units, double unpaired) {
  double paired = 0, alone = 0;
  for (const ExpertExchange &unit : units) {
    double comm = unit.getComm();
    if (comm <= 0)
      continue;
    for (const ExpertOverlapWindow &window : getExpertOverlapWindows(unit))
      paired += getOverlapExposedSeconds(window.commSeconds, window.computeSeconds);
    alone += comm;
  }
  return (1 - unpaired) * paired + unpaired * alone;
}

PassUnit getStepPassUnit(const PassUnit &unit, double stepGather, double stepReduce) {
  PassUnit step;
  step.compute = unit.compute;
  step.count = unit.count;
  step.gather = stepGather;
  step.reduce = stepReduce;
  return step;
}

//===----------------------------------------------------------------------===//
// Pipelines
//===----------------------------------------------------------------------===//

int64_t getSmallestMicrobatchGroup(int64_t stages, int64_t microbatches) {
  if (stages <= 0 || microbatches < stages)
    return 0;
  for (int64_t group = stages; group < microbatches; ++group) {
    int64_t last = microbatches % group;
    if (last == 0 || last >= stages)
      return group;
  }
  return microbatches; // One group: the last is whole.
}

std::string getScheduleRemedy(ir::Schedule schedule, int64_t stages, int64_t microbatches,
                              int64_t chunks, int64_t group) {
  switch (schedule) {
  case ir::Schedule::ZeroBubble:
    return fmt::format("at least {} micro-batches", stages);
  case ir::Schedule::ZeroBubbleV:
    return fmt::format("at least 2p - 1 = {} micro-batches", 2 * stages - 1);
  case ir::Schedule::DualPipeV:
    return fmt::format("at least 2p = {} micro-batches", 2 * stages);
  default:
    if (chunks > 1 && group > 0 && group != stages)
      return fmt::format("a group that divides the {} micro-batches or leaves at least {}",
                         microbatches, stages);
    return fmt::format("{} × k micro-batches", stages);
  }
}

bool isScheduleValid(ir::Schedule schedule, int64_t stages, int64_t microbatches, int64_t chunks,
                     std::string *why, int64_t group) {
  if (stages <= 1)
    return true;
  switch (schedule) {
  case ir::Schedule::Interleaved:
    if (chunks > 1 && group > 0 && group != stages) {
      // Megatron-Core's forward_backward_pipelining_with_interleaving: N in [p, m], and a last
      // group short of N at least p (else a dependency bubble, which it raises on).
      if (group < stages || group > microbatches) {
        if (why)
          *why = fmt::format("the interleaved schedule's micro-batch groups must hold between "
                             "the {} pipeline stages and the {} micro-batches per step "
                             "(Megatron-Core), but group = {}",
                             stages, microbatches, group);
        return false;
      }
      int64_t last = microbatches % group;
      if (last > 0 && last < stages) {
        if (why)
          *why = fmt::format("the interleaved schedule's last micro-batch group must be whole or "
                             "hold at least the {} pipeline stages (Megatron-Core), but {} "
                             "micro-batches in groups of {} leave {}",
                             stages, microbatches, group, last);
        return false;
      }
      return true;
    }
    if (chunks > 1 && microbatches % stages != 0) {
      if (why)
        *why = fmt::format("the interleaved schedule needs the micro-batches per step to be a "
                           "multiple of the pipeline stages (Megatron-LM), but {} micro-batches "
                           "over {} stages leave {}",
                           microbatches, stages, microbatches % stages);
      return false;
    }
    return true;
  case ir::Schedule::ZeroBubble:
    if (microbatches < stages) {
      if (why)
        *why =
            fmt::format("zero_bubble needs at least as many micro-batches per step as "
                        "pipeline stages to reach its steady state (Qi et al. 2024), but {} < {}",
                        microbatches, stages);
      return false;
    }
    return true;
  case ir::Schedule::ZeroBubbleV:
    // PyTorch's ScheduleZBVZeroBubble orders fewer than 2p − 1 micro-batches as 2p − 1 with the
    // missing ones' passes left out (torch/distributed/pipelining/schedules.py,
    // _calculate_single_rank_operations); placec plays that order (getBubbleSeconds), up to
    // kMaxPlayedZeroBubbleV ranks × micro-batches.
    if (microbatches < 2 * stages - 1 && stages * microbatches > kMaxPlayedZeroBubbleV) {
      if (why)
        *why = fmt::format("zbv with fewer than 2p - 1 micro-batches is timed by playing its "
                           "order pass by pass, which placec does up to {} stages × "
                           "micro-batches, but {} × {} (from 2p - 1 = {} micro-batches on, its "
                           "bubble is a closed form)",
                           kMaxPlayedZeroBubbleV, stages, microbatches, 2 * stages - 1);
      return false;
    }
    return true;
  case ir::Schedule::DualPipeV:
    // deepseek-ai/DualPipe, dualpipe/dualpipev.py: num_chunks >= num_ranks * 2.
    if (microbatches < 2 * stages) {
      if (why)
        *why = fmt::format("dualpipev needs at least twice as many micro-batches per step as "
                           "pipeline stages (deepseek-ai/DualPipe's DualPipeV), but {} stages and "
                           "{} micro-batches",
                           stages, microbatches);
      return false;
    }
    return true;
  case ir::Schedule::DualPipe:
    // dualpipe/dualpipe.py: an even number of ranks, num_chunks even and >= num_ranks * 2.
    if (stages % 2 != 0 || microbatches % 2 != 0 || microbatches < 2 * stages) {
      if (why)
        *why = fmt::format("dualpipe needs an even number of pipeline stages and an even number "
                           "of micro-batches per step, at least twice the stages (DeepSeek-AI's "
                           "DualPipe), but {} stages and {} micro-batches",
                           stages, microbatches);
      return false;
    }
    return true;
  case ir::Schedule::OneFOneB:
  case ir::Schedule::GPipe:
    return true;
  }
  return true;
}

namespace {

/// A V schedule's chunk passes (half a stage): its forward F and input-gradient backward B, each
/// with a quarter of the stage's exposed communication per micro-batch (two forward and two
/// backward chunk passes carry it), and its weight-gradient pass W.
struct VChunks {
  double forward, backward, weight;
};

VChunks getVChunks(const MicrobatchTimes &times) {
  double comm = times.exposed / 4;
  return {times.forward / 2 + comm, (times.backward - times.weight) / 2 + comm, times.weight / 2};
}

double getChainSeconds(const ZeroBubbleVChain &chain, const VChunks &c) {
  return getChainTime(chain, c.forward, c.backward, c.weight);
}

/// getBubbleSeconds's formula with the numbers put in: `times` the slowest stage's, or on uneven
/// stages the others' mean (`slowest` then the slowest stage's, which is not counted).
std::string describeBubble(ir::Schedule schedule, bool valid, double p, int64_t microbatches,
                           int64_t chunks, const MicrobatchTimes &times,
                           const MicrobatchTimes *slowest) {
  std::string what = slowest ? "the other stages' mean micro-batch" : "slowest micro-batch";
  std::string note = slowest ? fmt::format("; uneven stages, the slowest's {} not counted",
                                           fmtSeconds(slowest->getTotal()))
                             : std::string();
  std::string also = slowest ? "; " + what : std::string();
  std::string name = ir::toString(schedule).str();
  double f = times.forward, w = times.weight, b = times.backward - times.weight,
         comm = times.exposed;
  switch (valid ? schedule : ir::Schedule::OneFOneB) {
  case ir::Schedule::OneFOneB:
  case ir::Schedule::GPipe:
    break;
  case ir::Schedule::Interleaved:
    return fmt::format("(p - 1)/v × {} = ({} - 1)/{} × {} (interleaved, m = {} a multiple of p{})",
                       what, num(p), num(static_cast<double>(std::max<int64_t>(1, chunks))),
                       fmtSeconds(times.getTotal()), microbatches, note);
  case ir::Schedule::ZeroBubble:
    return fmt::format("(p - 1) × (max(F, B, F + B - W) + comm) = ({} - 1) × (max({}, {}, {} + "
                       "{} - {}) + {}) (zero bubble ZB-H1, W filling the cool-down, the exact "
                       "bubble of Qi et al.'s schedule for m ≥ p{}{})",
                       num(p), fmtSeconds(f), fmtSeconds(b), fmtSeconds(f), fmtSeconds(b),
                       fmtSeconds(w), fmtSeconds(comm), also, note);
  case ir::Schedule::ZeroBubbleV:
  case ir::Schedule::DualPipeV: {
    VChunks c = getVChunks(times);
    bool zbv = schedule == ir::Schedule::ZeroBubbleV;
    if (zbv && static_cast<double>(microbatches) < 2 * p - 1) {
      // The chains, the longest first.
      std::vector<ZeroBubbleVChain> chains(
          getZeroBubbleVChains(static_cast<int64_t>(p), microbatches));
      llvm::sort(chains, [&](const ZeroBubbleVChain &x, const ZeroBubbleVChain &y) {
        return std::make_tuple(getChainSeconds(x, c), x.forward, x.input, x.weight) >
               std::make_tuple(getChainSeconds(y, c), y.forward, y.input, y.weight);
      });
      std::vector<std::string> terms;
      for (const ZeroBubbleVChain &chain : chains)
        terms.push_back(fmt::format("{}F + {}B + {}W", chain.forward, chain.input, chain.weight));
      return fmt::format("the longest of the {} chains of PyTorch's ScheduleZBVZeroBubble order "
                         "for m = {} < 2p - 1 (found by playing it pass by pass), max({}), less "
                         "2m(F + B + W), over chunks of half a stage, F = {}/2 + comm/4 = {}, B = "
                         "{}/2 + comm/4 = {}, W = {}/2 = {}, comm = {}, p = {}{}{}",
                         chains.size(), microbatches, llvm::join(terms, ", "), fmtSeconds(f),
                         fmtSeconds(c.forward), fmtSeconds(b), fmtSeconds(c.backward),
                         fmtSeconds(w), fmtSeconds(c.weight), fmtSeconds(comm), num(p), also, note);
    }
    std::string chains =
        zbv ? "the longest of ZB-V's eight chains, max(B + (p - 2)W, (p - 1)B, 2(p - 1)(B - W), "
              "F + (p - 2)W, (2p - 3)F - (p - 2)B, (2p - 3)F + B - 2(p - 1)W, (2p - 2)F - (p - "
              "1)B - W, (2p - 2)F - (2p - 1)W)"
            : "(p - 1)·max(0, B - W) + max((p - 2)·F + (p - 1)·B, 2·(p - 1)·F)";
    return fmt::format("{} over chunks of half a stage, F = {}/2 + comm/4 = {}, B = {}/2 + "
                       "comm/4 = {}, W = {}/2 = {}, comm = {}, p = {} ({}, the exact bubble of {} "
                       "for m ≥ {}{}{})",
                       chains, fmtSeconds(f), fmtSeconds(c.forward), fmtSeconds(b),
                       fmtSeconds(c.backward), fmtSeconds(w), fmtSeconds(c.weight),
                       fmtSeconds(comm), num(p), name,
                       zbv ? "PyTorch's ScheduleZBVZeroBubble" : "DualPipeV's schedule",
                       zbv ? "2p - 1" : "2p", also, note);
  }
  case ir::Schedule::DualPipe:
    return fmt::format("(p/2 - 1) × (max(0, F&B + B - 3W) + comm)/2, F&B = F + B, B the whole "
                       "backward: ({}/2 - 1) × (max(0, {} + 2·{} - {}) + {})/2 (dualpipe, "
                       "chunks of half a stage{}{})",
                       num(p), fmtSeconds(f), fmtSeconds(b), fmtSeconds(w), fmtSeconds(comm), also,
                       note);
  }
  return fmt::format("(p - 1) × {} = ({} - 1) × {} ({}, m = {}{})", what, num(p),
                     fmtSeconds(times.getTotal()), name, microbatches, note);
}

} // namespace

double getBubbleSeconds(ir::Schedule schedule, int64_t microbatches, int64_t chunks,
                        ArrayRef<StageMicrobatch> stageTimes, std::string *formula, int64_t group) {
  // The slowest stage, and the others' mean micro-batch: all stages' sum less the slowest, over
  // p − 1.
  int64_t stages = 0;
  const MicrobatchTimes *slowest = nullptr;
  MicrobatchTimes sum;
  for (const StageMicrobatch &stage : stageTimes) {
    if (stage.count <= 0)
      continue;
    stages += stage.count;
    if (!slowest || stage.times.getTotal() > slowest->getTotal())
      slowest = &stage.times;
    sum.add(stage.times, static_cast<double>(stage.count));
  }
  double p = static_cast<double>(stages);
  if (stages <= 1) {
    if (formula)
      *formula = "no pipeline";
    return 0;
  }
  sum.add(*slowest, -1);
  MicrobatchTimes times;
  times.add(sum, 1 / (p - 1));
  double f = times.forward, w = times.weight, b = times.backward - times.weight,
         comm = times.exposed;
  bool valid = isScheduleValid(schedule, stages, microbatches, chunks, nullptr, group);
  double bubble = (p - 1) * times.getTotal();
  switch (valid ? schedule : ir::Schedule::OneFOneB) {
  case ir::Schedule::OneFOneB:
  case ir::Schedule::GPipe:
    break;
  case ir::Schedule::Interleaved:
    bubble /= static_cast<double>(std::max<int64_t>(1, chunks));
    break;
  case ir::Schedule::ZeroBubble:
    // ZB-H1 as Qi et al. 2024 hand-schedule it (Figure 3; sail-sg/zero-bubble-pipeline-
    // parallelism, efficiency.py, get_hand_schedule): 1F1B's order with rank r's first r weight
    // passes deferred to its end. Played pass by pass, its bubble is the longest of three
    // chains for every m ≥ p: the forwards' way down, the backwards' way up, and the paper's
    // F + B − W per rank, which holds alone only where W is at most F and B.
    bubble = (p - 1) * (std::max({f, b, f + b - w}) + comm);
    break;
  case ir::Schedule::ZeroBubbleV: {
    // PyTorch's ScheduleZBVZeroBubble (torch/distributed/pipelining/schedules.py), played pass by
    // pass: its critical path is one of these chains, the same for every m ≥ 2p − 1. With fewer
    // micro-batches the chains depend on m (getZeroBubbleVChains), the step the longest of them.
    VChunks c = getVChunks(times);
    double F = c.forward, B = c.backward, W = c.weight;
    if (microbatches < 2 * stages - 1) {
      double step = 0;
      for (const ZeroBubbleVChain &chain : getZeroBubbleVChains(stages, microbatches))
        step = std::max(step, getChainSeconds(chain, c));
      bubble = step - 2 * static_cast<double>(microbatches) * (F + B + W);
      break;
    }
    bubble = std::max({B + (p - 2) * W, (p - 1) * B, 2 * (p - 1) * (B - W), F + (p - 2) * W,
                       (2 * p - 3) * F - (p - 2) * B, (2 * p - 3) * F + B - 2 * (p - 1) * W,
                       (2 * p - 2) * F - (p - 1) * B - W, (2 * p - 2) * F - (2 * p - 1) * W});
    break;
  }
  case ir::Schedule::DualPipeV: {
    VChunks c = getVChunks(times);
    bubble = (p - 1) * std::max(0.0, c.backward - c.weight) +
             std::max((p - 2) * c.forward + (p - 1) * c.backward, 2 * (p - 1) * c.forward);
    break;
  }
  case ir::Schedule::DualPipe:
    // DeepSeek-AI 2024, Table 2: (PP/2 − 1)(F&B + B − 3W), B the whole backward of a chunk.
    bubble = (p / 2 - 1) * (std::max(0.0, f + 2 * (b + w) - 3 * w) + comm) / 2;
    break;
  }
  // The formula is written out only when asked for (the search calls this millions of times).
  if (formula) {
    bool uneven = false;
    for (const StageMicrobatch &stage : stageTimes)
      uneven |= stage.count > 0 && stage.times != *slowest;
    *formula = describeBubble(schedule, valid, p, microbatches, chunks, uneven ? times : *slowest,
                              uneven ? slowest : nullptr);
  }
  return bubble;
}

//===----------------------------------------------------------------------===//
// CostModel
//===----------------------------------------------------------------------===//

double getWeightGradientResultBytes(ir::Precision precision, const ir::StateBytes &bytes,
                                    bool fp32Params, ir::GradAccumulation accumulation) {
  if (fp32Params || accumulation != ir::GradAccumulation::Fused)
    return ir::getActivationBytes(precision);
  return 2.0 * bytes.grads;
}

double getGradientAccumulationBytes(ir::GradAccumulation accumulation, double resultBytes,
                                    double gradBytes) {
  switch (accumulation) {
  case ir::GradAccumulation::Fused:
    return 0;
  case ir::GradAccumulation::Add:
    return resultBytes + 2 * gradBytes;
  case ir::GradAccumulation::CastAdd:
    return resultBytes + 4 * gradBytes;
  }
  return 0;
}

CostModel::CostModel(const ir::Cluster &cluster, ir::Precision precision,
                     double weightGradientResultBytes)
    : cluster(cluster), precision(precision) {
  if (cluster.device) {
    family = &getFamilyConstants(cluster.device->family);
    gemmEfficiency = getGemmEfficiency(*cluster.device);
  }
  shapes = cluster.hasShapeModel() && cluster.computeUnits > 0 && cluster.hbmBandwidth > 0;
  elementBytes = ir::getActivationBytes(precision);
  this->weightGradientResultBytes =
      weightGradientResultBytes > 0 ? weightGradientResultBytes : elementBytes;
  peak = cluster.peakFlops;
  if (precision == ir::Precision::FP32 && cluster.peakTf32 > 0)
    peak = cluster.peakTf32;
  kernelEfficiency = cluster.fittedKernelEfficiency.value_or(kTrainingKernelEfficiency);
  tileOverheadK = cluster.fittedTileOverheadK.value_or(kGemmTileOverheadK);
}

double CostModel::getGemmSeconds(const Gemm &gemm, std::string *formula) const {
  double flops = gemm.getFlops();
  if (!shapes || peak <= 0) {
    double rate = peak * cluster.efficiency;
    if (formula)
      *formula = fmt::format("{} / (peak × efficiency = {} × {})", fmtAmount(flops, "FLOP"),
                             fmtRate(peak, "FLOP/s"), num(cluster.efficiency));
    return rate > 0 ? flops / rate : 0;
  }
  double units = static_cast<double>(cluster.computeUnits);
  // FP8 products run at the FP8 peak; NVFP4 products on the FP4 tensor cores (Verify requires
  // them, on a Blackwell device, whose preset has an FP8 peak) are timed as the same products in
  // FP8 at the measured ratio (kNvfp4GemmTimeRatio).
  double lowPeak = cluster.getLowPrecisionPeak(ir::Fp8Scaling::Tensor);
  bool low = gemm.fp8 && precision == ir::Precision::MixedFP8 && lowPeak > 0 &&
             (!gemm.fp4 || cluster.getLowPrecisionPeak(ir::Fp8Scaling::Nvfp4) > 0);
  bool fp4 = low && gemm.fp4, fp8 = low && !gemm.fp4;
  double gemmPeak = low ? lowPeak : peak;
  double efficiency = low ? gemmEfficiency.fp8 : gemmEfficiency.bf16;
  double achieved = gemmPeak * efficiency * kernelEfficiency;
  double best = std::numeric_limits<double>::infinity();
  double bestWaves = 0;
  int bestTile = 0;
  for (int i = 0; i < static_cast<int>(std::size(kGemmTiles)); ++i) {
    double tm = kGemmTiles[i][0], tn = kGemmTiles[i][1];
    double tiles = std::ceil(gemm.m / tm) * std::ceil(gemm.n / tn) * gemm.batch;
    double waves = std::ceil(tiles / units);
    double time = waves * units * tm * tn * 2 * (gemm.k + tileOverheadK) / achieved;
    if (time < best) {
      best = time;
      bestWaves = waves;
      bestTile = i;
    }
  }
  // FP8 operands are one byte, NVFP4's half of one; the result stays in the activation type,
  // but a weight gradient's is added into the stored gradient (getWeightGradientResultBytes).
  double operandBytes = fp4 ? 0.5 : fp8 ? 1 : elementBytes;
  double resultBytes = gemm.weightGradient ? weightGradientResultBytes : elementBytes;
  double traffic =
      ((gemm.m * gemm.k + gemm.k * gemm.n) * operandBytes + gemm.m * gemm.n * resultBytes) *
      gemm.batch;
  double memory = traffic / (cluster.hbmBandwidth * family->memoryEfficiency * kernelEfficiency);
  // MXFP8's and NVFP4's block-scaled products, each measured against the same products with one
  // scale per tensor.
  double ratio = fp4 ? kNvfp4GemmTimeRatio : fp8 && gemm.mx ? kMxfp8GemmTimeRatio : 1;
  best *= ratio;
  double time = std::max(best, memory);
  if (formula) {
    std::string shape =
        gemm.batch > 1
            ? fmt::format("{} × {}×{}×{}", num(gemm.batch), num(gemm.m), num(gemm.n), num(gemm.k))
            : fmt::format("{}×{}×{}", num(gemm.m), num(gemm.n), num(gemm.k));
    double tm = kGemmTiles[bestTile][0], tn = kGemmTiles[bestTile][1];
    *formula = fmt::format(
        "{} (m×n×k {}): {} waves of {}×{} tiles over {} SMs × 2·{}·{}·(k {} + {}) FLOP / ({} × {} "
        "× {}){} = {}; operands and result {} / ({} × {} × {}) = {}; the slower",
        gemm.name, shape, num(bestWaves), tm, tn, num(units), tm, tn, num(gemm.k),
        num(tileOverheadK), fmtRate(gemmPeak, "FLOP/s"), num(efficiency), num(kernelEfficiency),
        ratio != 1 ? fmt::format(" × {} ({} against FP8 with one scale per tensor)", num(ratio),
                                 fp4 ? "NVFP4 on the FP4 tensor cores" : "MXFP8")
                   : std::string(),
        fmtSeconds(best), fmtAmount(traffic, "B"), fmtRate(cluster.hbmBandwidth, "B/s"),
        num(family->memoryEfficiency), num(kernelEfficiency), fmtSeconds(memory));
  }
  return time;
}

double CostModel::getMemorySeconds(double bytes, std::string *formula) const {
  if (!shapes) {
    if (formula)
      *formula = "not timed (no device preset: compute is FLOPs over peak × efficiency)";
    return 0;
  }
  double rate = cluster.hbmBandwidth * family->memoryEfficiency * kernelEfficiency;
  if (formula)
    *formula = fmt::format("{} / ({} × {} × {})", fmtAmount(bytes, "B"),
                           fmtRate(cluster.hbmBandwidth, "B/s"), num(family->memoryEfficiency),
                           num(kernelEfficiency));
  return bytes / rate;
}

double CostModel::getAttentionSeconds(const AttentionCore &core, std::string *formula) const {
  double flops = core.getFlops();
  double efficiency = cluster.efficiency;
  double stretch = 1;
  StringRef kernel;
  std::string overheads;
  if (shapes) {
    // `shapes` holds only with a device preset (ir::Cluster::hasShapeModel).
    const FusedAttentionConstants *constants = &getAttentionConstants(*cluster.device, core.kernel);
    switch (core.kernel) {
    case ir::AttentionKind::Flash3:
      kernel = ", FlashAttention-3";
      break;
    case ir::AttentionKind::Cudnn:
      kernel = ", cuDNN";
      break;
    case ir::AttentionKind::Flash:
    case ir::AttentionKind::Materialized:
      break;
    }
    efficiency = core.backward ? constants->backwardEfficiency : constants->forwardEfficiency;
    // The keys each query attends on average, and the two overheads of FusedAttentionConstants.
    double attended = core.getAttendedKeys();
    double keyOverhead =
        core.backward ? constants->backwardKeyOverhead : constants->forwardKeyOverhead;
    double dimOverhead = constants->headDimOverhead;
    double d = core.getMeanHeadDim();
    // Each of the kernels a query's keys are split across (AttentionCore::calls) pays the key
    // overhead once: a ring of c steps c times.
    double calls = std::max(1.0, core.calls);
    if (attended > 0 && d > 0 && (keyOverhead > 0 || dimOverhead > 0)) {
      stretch = (1 + calls * keyOverhead / attended) * (1 + dimOverhead / d);
      overheads = fmt::format(" × (1 + {}{} / {} keys) × (1 + {} / d {})",
                              calls > 1 ? num(calls) + " kernels × " : std::string(),
                              num(keyOverhead), num(attended), num(dimOverhead), num(d));
    }
  }
  double kernels = shapes ? kernelEfficiency : 1;
  double rate = peak * efficiency * kernels;
  // `attention = fp8`: cuDNN's FP8 kernel, the BF16 kernel's time times their measured ratio.
  const Fp8AttentionRatio *fp8 =
      core.fp8 && shapes ? getFp8AttentionRatio(*cluster.device) : nullptr;
  double ratio = fp8 ? (core.backward ? fp8->backward : fp8->forward) : 1;
  if (formula)
    *formula = fmt::format(
        "fused attention{} ({} heads × {}×{} × d {}{}{}): {}{} / ({} × {}{}){}",
        core.backward ? " backward" : "", num(core.batchHeads), num(core.queries), num(core.keys),
        core.valueDim > 0 && core.valueDim != core.headDim
            ? fmt::format("{} (values {})", num(core.headDim), num(core.valueDim))
            : num(core.headDim),
        std::string(core.causal ? ", causal" : "") +
            (core.window > 0 && core.window < core.keys
                 ? ", window " + num(core.window) + " (" + num(core.getAttendedKeys()) +
                       " keys a query)"
                 : std::string()),
        kernel.str(), fmtAmount(flops, "FLOP"), overheads, fmtRate(peak, "FLOP/s"), num(efficiency),
        shapes ? " × " + num(kernels) : std::string(),
        fp8 ? fmt::format(" × {} (cuDNN's FP8 kernel against its BF16 one)", num(ratio))
            : std::string());
  return rate > 0 ? flops * stretch * ratio / rate : 0;
}

double CostModel::getComputeSeconds(const Work &work, std::vector<Explanation> *lines,
                                    TensorSlotSeconds *slots) const {
  auto addToSlot = [&](const Gemm &gemm, double seconds) {
    if (slots && gemm.tensorSlot >= 0 && gemm.tensorSlot < kTensorSlots)
      (*slots)[static_cast<size_t>(gemm.tensorSlot)] += seconds;
  };
  if (!shapes) {
    double flops = work.getFlops(), rate = peak * cluster.efficiency;
    double time = rate > 0 ? flops / rate : 0;
    if (slots)
      for (const Gemm &gemm : work.gemms)
        addToSlot(gemm, getGemmSeconds(gemm));
    if (lines)
      lines->push_back({"compute",
                        fmt::format("{} / (peak × efficiency = {} × {})", fmtAmount(flops, "FLOP"),
                                    fmtRate(peak, "FLOP/s"), num(cluster.efficiency)),
                        time, "s"});
    return time;
  }
  double total = 0;
  std::string formula;
  for (const Gemm &gemm : work.gemms) {
    double time = getGemmSeconds(gemm, lines ? &formula : nullptr);
    total += time;
    addToSlot(gemm, time);
    if (lines)
      lines->push_back({"gemm", formula, time, "s"});
  }
  for (const AttentionCore &core : work.attention) {
    double time = getAttentionSeconds(core, lines ? &formula : nullptr);
    total += time;
    if (lines)
      lines->push_back({"attention", formula, time, "s"});
  }
  for (const MemoryOp &op : work.memory) {
    double time = getMemorySeconds(op.bytes, lines ? &formula : nullptr);
    total += time;
    if (lines)
      lines->push_back({op.name, formula, time, "s"});
  }
  return total;
}

double CostModel::getWeightGradientSeconds(const Work &work) const {
  double total = 0;
  for (const Gemm &gemm : work.gemms)
    if (gemm.weightGradient)
      total += getGemmSeconds(gemm);
  return total;
}

double CostModel::getRoutedExpertSeconds(const Work &work) const {
  double total = 0;
  if (!shapes) {
    double rate = peak * cluster.efficiency;
    for (const Gemm &gemm : work.gemms)
      if (gemm.routed && rate > 0)
        total += gemm.getFlops() / rate;
    return total;
  }
  for (const Gemm &gemm : work.gemms)
    if (gemm.routed)
      total += getGemmSeconds(gemm);
  for (const MemoryOp &op : work.memory)
    if (op.routedShare > 0)
      total += getMemorySeconds(op.routedShare * op.bytes);
  return total;
}

TensorSlotSeconds CostModel::getColumnParallelSlotSeconds(const Work &work, bool inputGradients,
                                                          bool weightGradients) const {
  TensorSlotSeconds slots{};
  for (const Gemm &gemm : work.gemms)
    if (((gemm.weightGradient && weightGradients) || (gemm.inputGradient && inputGradients)) &&
        (gemm.tensorSlot == kSlotQkv || gemm.tensorSlot == kSlotMlpIn))
      slots[static_cast<size_t>(gemm.tensorSlot)] += getGemmSeconds(gemm);
  return slots;
}

namespace {
/// The bytes an optimizer step moves per parameter: it reads and writes every optimizer state,
/// reads the gradient and writes the parameter, which it also reads when the parameter is the
/// fp32 weight the step updates (masterParams) rather than a cast of the master copy. `text`
/// receives "(2·o + g + p)".
double getOptimizerStepBytes(const ir::StateBytes &bytes, std::string *text) {
  double paramAccesses = bytes.masterParams ? 2 : 1;
  if (text)
    *text = fmt::format("(2·{} + {} + {}{})", bytes.optimizer, bytes.grads,
                        bytes.masterParams ? "2·" : "", bytes.params);
  return 2.0 * bytes.optimizer + bytes.grads + paramAccesses * bytes.params;
}
} // namespace

double CostModel::getOptimizerSeconds(double elements, ir::StateBytes bytes,
                                      std::string *formula) const {
  std::string perParamText;
  double traffic = elements * getOptimizerStepBytes(bytes, formula ? &perParamText : nullptr);
  std::string memoryFormula;
  double time = getMemorySeconds(traffic, formula ? &memoryFormula : nullptr);
  if (formula)
    *formula = fmt::format("{} params × {} B = {}: {}", num(elements), perParamText,
                           fmtAmount(traffic, "B"), memoryFormula);
  return time;
}

double CostModel::getGradientAccumulationSeconds(double elements, double microbatches,
                                                 std::string *formula) const {
  double additions = std::max(0.0, microbatches - 1);
  double traffic = additions * elements * 3 * 4;
  std::string memoryFormula;
  double time = getMemorySeconds(traffic, formula ? &memoryFormula : nullptr);
  if (formula)
    *formula =
        fmt::format("({} micro-batches - 1) × {} gradients × 3·4 B = {}: {}", num(microbatches),
                    num(elements), fmtAmount(traffic, "B"), memoryFormula);
  return time;
}

double CostModel::getGatherCopySeconds(double gatheredBytes, std::string *formula) const {
  double traffic = 2 * gatheredBytes;
  std::string memoryFormula;
  double time = getMemorySeconds(traffic, formula ? &memoryFormula : nullptr);
  if (formula)
    *formula = fmt::format("2 × {} gathered (read and written) = {}: {}",
                           fmtAmount(gatheredBytes, "B"), fmtAmount(traffic, "B"), memoryFormula);
  return time;
}

double CostModel::getTrainMetricSyncSeconds(int64_t metrics, const GroupShape &world,
                                            std::string *formula) const {
  if (metrics <= 0 || world.size <= 1) {
    if (formula)
      *formula = "no metrics or one rank: nothing to synchronize";
    return 0;
  }
  double n = static_cast<double>(world.size);
  double states = static_cast<double>(metrics * kTrainMetricStates);
  // One element from each rank (sum_loss fp32, total_items int64).
  constexpr double kElementBytes = 8;
  std::string barrierText, gatherText;
  double barrier = getCollectiveSeconds(Collective::AllReduce, world, kElementBytes,
                                        formula ? &barrierText : nullptr);
  double gather = getCollectiveSeconds(Collective::AllGather, world, n * kElementBytes,
                                       formula ? &gatherText : nullptr);
  // The zeros_like, and the copies out of the all-gather's buffer: n host operators each.
  double perRank = n * kHostOperatorSeconds;
  double perState = barrier + perRank + std::max(gather, perRank) + 2 * kHostOperatorSeconds;
  double time = states * perState;
  if (formula)
    *formula = fmt::format(
        "{} metrics × {} states × (barrier + {} zeros_like + max(all-gather, {} copies) + stack "
        "and sum) = {} × (barrier {} + {} × {} + max({}, {}) + 2 × {}) = {} [barrier: {}; "
        "all-gather: {}; {} per host operator]",
        metrics, kTrainMetricStates, num(n), num(n), num(states), fmtSeconds(barrier), num(n),
        fmtSeconds(kHostOperatorSeconds), fmtSeconds(gather), fmtSeconds(perRank),
        fmtSeconds(kHostOperatorSeconds), fmtSeconds(time), barrierText, gatherText,
        fmtSeconds(kHostOperatorSeconds));
  return time;
}

double CostModel::getHostOptimizerSeconds(double elements, ir::StateBytes bytes,
                                          std::string *formula) const {
  std::string perParamText;
  double traffic = elements * getOptimizerStepBytes(bytes, formula ? &perParamText : nullptr);
  if (!cluster.hostMemoryBandwidth || *cluster.hostMemoryBandwidth <= 0) {
    if (formula)
      *formula = "on the host: not timed (host_memory_bandwidth is not given)";
    return 0;
  }
  double efficiency = family ? family->memoryEfficiency : 1;
  double perDevice = *cluster.hostMemoryBandwidth / static_cast<double>(cluster.devicesPerNode);
  double time = traffic / (perDevice * efficiency);
  if (formula)
    *formula = fmt::format("on the host: {} params × {} B = {} / (host_memory_"
                           "bandwidth {} / {} devices{})",
                           num(elements), perParamText, fmtAmount(traffic, "B"),
                           fmtRate(*cluster.hostMemoryBandwidth, "B/s"), cluster.devicesPerNode,
                           family ? " × " + num(efficiency) : std::string());
  return time;
}

double CostModel::busBandwidth(const GroupShape &group, bool ring, std::string *formula) const {
  double intraEfficiency = family ? family->intraBusEfficiency : 1;
  double interEfficiency = family ? family->interBusEfficiency : 1;
  double intra = cluster.intraBandwidth * intraEfficiency;
  if (group.isIntraNode()) {
    if (formula)
      *formula = family ? fmt::format("intra_bandwidth × {} = {}", num(intraEfficiency),
                                      fmtRate(intra, "B/s"))
                        : fmt::format("intra_bandwidth {}", fmtRate(intra, "B/s"));
    return intra;
  }
  // Across nodes a ring leaves each node once per ring; NCCL runs one ring per NIC of the
  // group's devices in the node, so the node's `perNode` NICs carry it side by side, up to the
  // bandwidth inside the node.
  double perNode = static_cast<double>(group.perNode);
  double network = perNode * cluster.interBandwidth * interEfficiency;
  double bandwidth = std::min(intra, network);
  if (formula)
    *formula = fmt::format(
        "min(intra_bandwidth{} = {}, {} per node × inter_bandwidth{} = {})",
        family ? " × " + num(intraEfficiency) : std::string(), fmtRate(intra, "B/s"), num(perNode),
        family ? " × " + num(interEfficiency) : std::string(), fmtRate(network, "B/s"));
  (void)ring;
  return bandwidth;
}

double CostModel::getRingLatency(double steps, double interSteps) const {
  // NCCL's base plus a hop per ring step, the steps between nodes at the network's latency and
  // the others at NVLink's (kNvlinkStepLatency); without a preset `latency` per step.
  double base = family ? kCollectiveBaseLatency : 0;
  double intraStep = family ? kNvlinkStepLatency : cluster.latency;
  return base + (steps - interSteps) * intraStep + interSteps * cluster.latency;
}

double getHoldersReachedPerToken(int64_t experts, int64_t topK, int64_t holders, int64_t groups,
                                 int64_t groupTopK, std::string *formula) {
  if (holders <= 1 || experts <= 0 || topK <= 0)
    return holders == 1 && experts > 0 && topK > 0 ? 1 : 0;
  // Draws of `k` of `total` items spread evenly over `bins` bins: the chance that a bin's `each`
  // items hold none of them is C(total − each, k)/C(total, k), and the bins reached are
  // bins·(1 − that).
  auto reached = [](double total, double each, int64_t k, double bins) {
    double none = 1;
    for (int64_t i = 0; i < k; ++i)
      none *= std::max(0.0, total - each - static_cast<double>(i)) /
              std::max(1.0, total - static_cast<double>(i));
    return bins * (1 - none);
  };
  double e = static_cast<double>(experts), h = static_cast<double>(holders);
  // Group-limited routing (DeepSeek-V3 §2.1.2): the token's experts lie in its g groups.
  if (groups > 0 && groupTopK > 0 && groups <= experts && experts % groups == 0) {
    double g = static_cast<double>(groups);
    // Groups whole in the holders: the holders of the token's g groups, each taken to hold one
    // of its experts.
    if (groups % holders == 0) {
      if (formula)
        *formula = "H·(1 - C(G - G/H, g)/C(G, g))";
      return reached(g, g / h, groupTopK, h);
    }
    // Groups that span H/G holders each: its k experts drawn from the g·E/G of its groups,
    // E/H to a holder, over the g·H/G holders of those groups.
    if (holders % groups == 0) {
      if (formula)
        *formula = "(g·H/G)·(1 - C(g·E/G - E/H, k)/C(g·E/G, k))";
      double chosen = static_cast<double>(groupTopK) * e / g;
      return reached(chosen, e / h, std::min<int64_t>(topK, static_cast<int64_t>(chosen)),
                     static_cast<double>(groupTopK) * h / g);
    }
  }
  if (formula)
    *formula = "H·(1 - C(E - E/H, k)/C(E, k))";
  return reached(e, e / h, topK, h);
}

double getOtherHoldersPerToken(int64_t experts, int64_t topK, int64_t holders, int64_t groups,
                               int64_t groupTopK, std::string *formula) {
  // Every holder is the token's own with chance 1/H, evenly: the others are (H − 1)/H of those
  // reached.
  if (holders <= 1)
    return 0;
  double h = static_cast<double>(holders);
  return getHoldersReachedPerToken(experts, topK, holders, groups, groupTopK, formula) * (h - 1) /
         h;
}

double CostModel::getFlexNvlinkEfficiency(ir::ExpertDispatcher dispatcher) const {
  if (!family)
    return 1;
  return dispatcher == ir::ExpertDispatcher::HybridEP ? family->hybridEpNvlinkEfficiency
                                                      : family->deepEpNvlinkEfficiency;
}

double CostModel::getExpertExchangeSeconds(ir::ExpertDispatcher dispatcher, const GroupShape &group,
                                           double bytes, const ir::MoeConfig &moe,
                                           std::string *formula) const {
  int64_t experts = moe.experts, topK = moe.topK;
  if (dispatcher == ir::ExpertDispatcher::AllToAll || experts <= 0 || topK <= 0 ||
      cluster.intraBandwidth <= 0 || (!group.isIntraNode() && cluster.interBandwidth <= 0) ||
      group.size <= 1)
    return getCollectiveSeconds(Collective::AllToAll, group, bytes, formula);
  // DeepEP's and HybridEP's kernels send a token once to each rank that holds one of its
  // experts, which permutes it to them (DeepEP's is_token_in_rank; HybridEP's token buffers of one
  // row a token, docs/Hybrid-EP_Implementation.md, 4.2), where the all-to-all dispatcher sends a
  // row to each expert: of the buffer's k rows a token, the ranks reached. Their kernels reach a
  // fraction of NVLink of their own (getFlexNvlinkEfficiency).
  double n = static_cast<double>(group.size);
  double perNode = static_cast<double>(std::min(group.perNode, group.size));
  int64_t nodeCount = group.getNodes();
  double nodes = static_cast<double>(nodeCount);
  double k = static_cast<double>(topK);
  std::string ranksFormula;
  double ranks = getHoldersReachedPerToken(experts, topK, group.size, moe.routerGroups,
                                           moe.routerGroupTopK, formula ? &ranksFormula : nullptr);
  double flexEfficiency = getFlexNvlinkEfficiency(dispatcher);
  double nvlink = cluster.intraBandwidth * flexEfficiency;
  // Every row but the one to the sending (or, across nodes, the forwarding) rank crosses NVLink.
  double nvlinkRows = ranks * (perNode - 1) / perNode;
  double inside = nvlinkRows / k * bytes / nvlink;
  // Inside a node the kernels' own start-up is in the benchmarks' times the efficiencies come
  // from, and no ring runs: NCCL's base latency alone. Across nodes the all-to-all's, as its
  // benchmark comparison was made with it.
  double latency = group.isIntraNode() ? (family ? kCollectiveBaseLatency : cluster.latency)
                                       : getRingLatency(n - 1, nodes - 1);
  std::string routing =
      fmt::format("E {}, k {}{}", experts, topK,
                  moe.routerGroups > 0 && moe.routerGroupTopK > 0
                      ? fmt::format(", g {}, G {}", moe.routerGroupTopK, moe.routerGroups)
                      : std::string());
  std::string nvlinkText =
      fmt::format("(intra_bandwidth{} = {})", family ? " × " + num(flexEfficiency) : std::string(),
                  fmtRate(nvlink, "B/s"));
  if (group.isIntraNode()) {
    if (formula)
      *formula = fmt::format(
          "{}: latency + over NVLink the ranks a token reaches but the sender, ({} - 1)/{} × {} "
          "[{}, H {} ranks] = {} rows of a token's k: {}/{} × {} / {} = {} + {}",
          ir::toString(dispatcher).str(), num(perNode), num(perNode), ranksFormula, routing,
          group.size, num(nvlinkRows), num(nvlinkRows), topK, fmtAmount(bytes, "B"), nvlinkText,
          fmtSeconds(latency), fmtSeconds(inside));
    return latency + inside;
  }
  // DeepSeek-AI 2024, §3.2.2, as DeepEP's internode kernels and HybridEP run it: a token goes
  // once over the network to the rank of its local index on each other node that holds one of
  // its experts, which forwards it over NVLink to those experts' ranks (the combine the reverse,
  // reduced in the node before it crosses).
  std::string nodesFormula;
  double remote = getOtherHoldersPerToken(experts, topK, nodeCount, moe.routerGroups,
                                          moe.routerGroupTopK, formula ? &nodesFormula : nullptr);
  double interEfficiency = family ? family->interBusEfficiency : 1;
  double outside = remote / k * bytes / (cluster.interBandwidth * interEfficiency);
  // DeepEP's internode kernels forward over NVLink while the network delivers: the slower of the
  // two stages (its V1 benchmark on H800s with 400 Gb/s NICs, docs/legacy.md in deepseek-ai/DeepEP,
  // EP 16 to 64, lies 6 to 11 % above it). HybridEP's, called through its Torch API as
  // Megatron-Core calls them, take the two stages' sum: its benchmark on H100s (the hybrid-ep
  // branch's docs/README_Hybrid-EP.md, 16 SMs, EP 16, 32 and 64) lies within 17 % of it (9.2 % on
  // average), where the slower stage alone is 10 to 41 % under
  // (CostModelTest.HybridEpAcrossNodesAgainstItsBenchmark; docs/fidelity.md, "HybridEP across
  // nodes").
  bool staged = dispatcher == ir::ExpertDispatcher::HybridEP;
  double stages = staged ? inside + outside : std::max(inside, outside);
  if (formula) {
    *formula = fmt::format(
        "{} (by node): latency + {}(over NVLink the ranks a token reaches but the forwarding one, "
        "({} - 1)/{} × {} [{}, H {} ranks] = {} rows of a token's k: {}/{} × {} / {}; over the "
        "NIC each token once to each other node with one of its experts, (H - 1)/H × {} [H {} "
        "nodes] = {}: {}/{} × {} / (inter_bandwidth{})) = {} + {}({}, {})",
        ir::toString(dispatcher).str(), staged ? "sum" : "max", num(perNode), num(perNode),
        ranksFormula, routing, group.size, num(nvlinkRows), num(nvlinkRows), topK,
        fmtAmount(bytes, "B"), nvlinkText, nodesFormula, nodeCount, num(remote), num(remote), topK,
        fmtAmount(bytes, "B"), family ? " × " + num(interEfficiency) : std::string(),
        fmtSeconds(latency), staged ? "sum" : "max", fmtSeconds(inside), fmtSeconds(outside));
  }
  return latency + stages;
}

double CostModel::getCollectiveSeconds(Collective collective, const GroupShape &group, double bytes,
                                       std::string *formula) const {
  if (collective == Collective::PointToPoint)
    return getPointToPointSeconds(bytes, !group.isIntraNode(), formula);
  if (collective == Collective::Host)
    return getHostSeconds(bytes, false, formula);
  double n = static_cast<double>(group.size);
  if (group.size <= 1) {
    if (formula)
      *formula = "a group of one: nothing moves";
    return 0;
  }
  double nodes = static_cast<double>(group.getNodes());
  double base = family ? kCollectiveBaseLatency : 0;
  double intraStep = family ? kNvlinkStepLatency : cluster.latency;
  double interStep = cluster.latency;
  std::string bandwidthText;
  double bus = busBandwidth(group, true, formula ? &bandwidthText : nullptr);
  if (bus <= 0) {
    if (formula)
      *formula = "no bandwidth given: not timed";
    return 0;
  }
  double sent = getSentBytes(collective, n, bytes);
  if (collective == Collective::AllToAll) {
    // Each rank sends (n − 1)/n of its buffer, the part for the other nodes over its own NIC.
    double perNode = static_cast<double>(std::min(group.perNode, group.size));
    double intraEfficiency = family ? family->intraBusEfficiency : 1;
    double interEfficiency = family ? family->interBusEfficiency : 1;
    double inside = (perNode - 1) / n * bytes / (cluster.intraBandwidth * intraEfficiency);
    double outside = group.isIntraNode()
                         ? 0
                         : (n - perNode) / n * bytes / (cluster.interBandwidth * interEfficiency);
    double latency = getRingLatency(n - 1, nodes - 1);
    double time = latency + std::max(inside, outside);
    if (formula)
      *formula = fmt::format("all-to-all: latency + max(inside the node ({} - 1)/{} × {} over "
                             "NVLink, across nodes ({} - {})/{} × {} over the NIC) = {} + "
                             "max({}, {})",
                             num(perNode), num(n), fmtAmount(bytes, "B"), num(n), num(perNode),
                             num(n), fmtAmount(bytes, "B"), fmtSeconds(latency), fmtSeconds(inside),
                             fmtSeconds(outside));
    return time;
  }
  bool reduce = collective == Collective::AllReduce;
  double steps = reduce ? 2 * (n - 1) : n - 1;
  double interSteps = reduce ? 2 * (nodes - 1) : nodes - 1;
  double latency = getRingLatency(steps, interSteps);
  double ringTime = latency + sent / bus;
  if (reduce && !group.isIntraNode()) {
    // NCCL's tree all-reduce: a chain inside each node and a double binary tree across nodes,
    // 2·(perNode − 1) NVLink and 2·log2(nodes) network steps, the same bus bandwidth at large
    // sizes.
    double treeLatency = base + 2 * ((static_cast<double>(group.perNode) - 1) * intraStep +
                                     std::ceil(std::log2(nodes)) * interStep);
    double treeTime = treeLatency + sent / bus;
    if (treeTime < ringTime) {
      if (formula)
        *formula = fmt::format("tree all-reduce: latency (2·(per node - 1) NVLink steps, "
                               "2·log2 nodes network steps) + 2 × (n - 1)/n × bytes / bus "
                               "bandwidth = {} + 2 × {}/{} × {} / {} [bus bandwidth {}]",
                               fmtSeconds(treeLatency), num(n - 1), num(n), fmtAmount(bytes, "B"),
                               fmtRate(bus, "B/s"), bandwidthText);
      return treeTime;
    }
  }
  if (formula) {
    std::string factor =
        collective == Collective::AllReduce ? "2 × (n - 1)/n" : std::string("(n - 1)/n");
    std::string factorNumbers = collective == Collective::AllReduce
                                    ? fmt::format("2 × {}/{}", num(n - 1), num(n))
                                    : fmt::format("{}/{}", num(n - 1), num(n));
    std::string latencyText =
        family ? fmt::format("{} + {} NVLink steps × {} + {} network steps × {}", fmtSeconds(base),
                             num(steps - interSteps), fmtSeconds(intraStep), num(interSteps),
                             fmtSeconds(interStep))
               : fmt::format("{} steps × {}", num(steps), fmtSeconds(interStep));
    *formula = fmt::format("ring {}: latency + {} × bytes / bus bandwidth = ({}) + {} × {} / {} "
                           "[bus bandwidth {}]",
                           toString(collective).str(), factor, latencyText, factorNumbers,
                           fmtAmount(bytes, "B"), fmtRate(bus, "B/s"), bandwidthText);
  }
  return ringTime;
}

double CostModel::getPointToPointSeconds(double bytes, bool interNode, std::string *formula) const {
  double efficiency =
      family ? (interNode ? family->interBusEfficiency : family->intraBusEfficiency) : 1;
  double link = interNode ? cluster.interBandwidth : cluster.intraBandwidth;
  double bandwidth = link * efficiency;
  if (bandwidth <= 0) {
    if (formula)
      *formula = "no bandwidth given: not timed";
    return 0;
  }
  double time = cluster.latency + bytes / bandwidth;
  if (formula)
    *formula = fmt::format(
        "latency + bytes / {}{} = {} + {} / {}", interNode ? "inter_bandwidth" : "intra_bandwidth",
        family ? " × " + num(efficiency) : std::string(), fmtSeconds(cluster.latency),
        fmtAmount(bytes, "B"), fmtRate(bandwidth, "B/s"));
  return time;
}

double CostModel::getHostSeconds(double bytes, bool nvme, std::string *formula) const {
  double bandwidth =
      nvme && cluster.nvmeBandwidth ? *cluster.nvmeBandwidth : cluster.hostBandwidth.value_or(0);
  StringRef name = nvme && cluster.nvmeBandwidth ? "nvme_bandwidth" : "host_bandwidth";
  if (bandwidth <= 0) {
    if (formula)
      *formula = fmt::format("{} is not given: not timed", name.str());
    return 0;
  }
  double time = cluster.latency + bytes / bandwidth;
  if (formula)
    *formula =
        fmt::format("latency + bytes / {} = {} + {} / {}", name.str(), fmtSeconds(cluster.latency),
                    fmtAmount(bytes, "B"), fmtRate(bandwidth, "B/s"));
  return time;
}

} // namespace placec::cost
