// The cost model: every memory, FLOP, time and communication formula of placec, written once.
// Like LLVM's TargetTransformInfo it is one interface with per-target answers: the analyses over a
// step plan, `--explain` and the search all ask it, and a device is data (a preset of datasheet
// figures and its family's calibration constants), never a branch in a formula. Each function
// that `--explain` shows can also return its formula with the numbers put in.
#ifndef PLACEC_PASSES_COSTMODEL_H
#define PLACEC_PASSES_COSTMODEL_H

#include "placec/ir/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace placec::cost {

//===----------------------------------------------------------------------===//
// Explanations
//===----------------------------------------------------------------------===//

/// One figure of a report and how it is computed, with the numbers put in.
struct Explanation {
  /// What the figure is: `params`, `peak`, `time`.
  std::string figure;
  /// The formula with its inputs: `1557611200 × 2 B / 64 (gather over dp)`.
  std::string formula;
  /// The value the formula gives.
  double value = 0;
  /// "B" (bytes), "s" (seconds), "%" (a fraction shown as a percentage), "calls", "tokens/s",
  /// "FLOP" or empty when the figure has no value (an unknown one).
  std::string unit;
};

//===----------------------------------------------------------------------===//
// Calibration constants
//===----------------------------------------------------------------------===//

/// A fused attention kernel's speed on a device family. Its time is its FLOPs (over the scores it
/// computes) at `efficiency` of the dense peak, stretched by two overheads written like the GEMM
/// tile's: each block of queries loads its queries and rescales and writes its output, which
/// costs about as much as `keyOverhead` more keys attended by every query, and the softmax's work
/// on each score (its maximum, exponential and rescaling, on no tensor core) costs about as much
/// as `headDimOverhead` more head dimensions of the two products:
///
///   FLOPs × (1 + keyOverhead / L) × (1 + headDimOverhead / d) / (peak × efficiency)
///
/// with L the keys each query attends on average (half of them under a causal mask) and d the
/// head dimension. `efficiency` is 0 where the kernel does not run on the family; overheads of 0
/// leave one fraction of the peak for every shape (families with one published measurement).
struct FusedAttentionConstants {
  double forwardEfficiency = 0, backwardEfficiency = 0;
  double forwardKeyOverhead = 0, backwardKeyOverhead = 0;
  double headDimOverhead = 0;
};

/// The calibration constants of a device family, each from a cited measurement (CostModel.cpp).
struct FamilyConstants {
  /// Fraction of the dense tensor-core peak that a large, well-shaped GEMM reaches (BF16), and
  /// in FP8, on the family's reference device; a device with a measurement of its own takes that
  /// instead (getGemmEfficiency).
  double gemmEfficiency;
  double fp8GemmEfficiency;
  /// Fraction of HBM bandwidth that memory-bound kernels (norms, activations, softmax,
  /// residuals, the optimizer step) reach.
  double memoryEfficiency;
  /// Fused attention: FlashAttention-2 (`attention = flash`), FlashAttention-3 and cuDNN's.
  FusedAttentionConstants flash2, flash3, cudnn;
  /// Fraction of the link bandwidth that collectives reach as bus bandwidth (nccl-tests), over
  /// the links inside a node and over the network.
  double intraBusEfficiency;
  double interBusEfficiency;
  /// Fraction of the NVLink bandwidth that DeepEP's and HybridEP's dispatch and combine kernels
  /// reach, counting the rows they deliver to other ranks (their own benchmarks).
  double deepEpNvlinkEfficiency;
  double hybridEpNvlinkEfficiency;
};

const FamilyConstants &getFamilyConstants(ir::DeviceFamily family);

/// The fractions of a device's dense BF16 and FP8 peaks that a large, well-shaped GEMM reaches:
/// the device's own measurement where one is published, its family's otherwise.
struct GemmEfficiency {
  double bf16 = 0;
  double fp8 = 0;
};
GemmEfficiency getGemmEfficiency(const ir::DevicePreset &device);

/// The fused-attention constants of a kernel (FlashAttention-2 for `flash` and `materialized`,
/// FlashAttention-3, cuDNN) on a device: the device's own measurement where one is published with
/// the software its family's reference measurement ran, its family's otherwise.
const FusedAttentionConstants &getAttentionConstants(const ir::DevicePreset &device,
                                                     ir::AttentionKind kernel);

/// Whether a device family runs a fused attention kernel (FlashAttention-3 needs Hopper; cuDNN's
/// fused attention needs an NVIDIA GPU).
bool runsAttention(ir::DeviceFamily family, ir::AttentionKind kernel);

/// cuDNN's FP8 attention (`mixed(…, attention = fp8)`): the time its FP8 kernel takes against its
/// BF16 kernel over the same shapes, forward and backward, as one run of a benchmark measured
/// both (CostModel.cpp cites it). The attention is timed as cuDNN's BF16 kernel times this.
struct Fp8AttentionRatio {
  double forward = 0, backward = 0;
};
/// The ratio measured on the device or on its family's reference device; null where nothing
/// measured cuDNN's FP8 attention (the verifier's rule `precision` refuses `attention = fp8`
/// there).
const Fp8AttentionRatio *getFp8AttentionRatio(const ir::DevicePreset &device);

/// Constants that hold for every device.
///
/// GEMM tiles: cuBLAS and CUTLASS kernels compute C in tiles of 256×128 or 128×128 elements, one
/// tile per SM at a time; a GEMM takes whole waves of tiles (NVIDIA, "Matrix Multiplication
/// Background User's Guide", tile and wave quantization). The model takes the faster tiling.
inline constexpr int kGemmTiles[][2] = {{256, 128}, {128, 128}};

/// The two constants fitted to measured training runs (docs/fidelity.md: on the ten rows of
/// Narayanan et al. 2021, Table 1, the calibration set; every other row is held out). They are
/// the point of lowest mean |step error| over those rows on the grid of `placec fidelity --fit`
/// (the tile overhead in steps of 32, the efficiency in steps of 0.01), which
/// test/lit/report/fidelity-fit.test holds them to: a change of the model that moves that point
/// fails it until the constants are fitted again.
///
/// A GEMM tile's prologue and epilogue (loading the first stages of A and B, writing C) cost
/// about as much as this much more of the reduction dimension k, so short-k products (small
/// models, tensor-parallel slices) run below the large-GEMM efficiency.
inline constexpr double kGemmTileOverheadK = 128;
/// The fraction of their microbenchmark speed that kernels reach inside a training step (launch
/// gaps, layout transposes, cache and clock interference among the step's kernels).
inline constexpr double kTrainingKernelEfficiency = 0.82;

/// Compute slowdown while communication kernels run alongside it: the average of Lee et al. 2025
/// ("Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning",
/// arXiv:2507.03114, §1: overlapped compute is 18.9% slower on average, 40% at most, on A100,
/// H100, MI210 and MI250; the collectives take SMs and memory bandwidth from the kernels).
inline constexpr double kOverlapComputeSlowdown = 0.189;

/// Fraction of the attention core's FLOPs that a causal mask leaves to a fused kernel (it skips
/// the blocks above the diagonal: about half of s×s).
inline constexpr double kCausalFraction = 0.5;

/// NCCL's latency model for the Simple protocol of ring collectives (NVIDIA/nccl,
/// src/graph/tuning.cc: baseLat Ring/Simple 8.4 us, hwLat Ring/Simple 3.4 us per NVLink step and
/// 9.6 us per network step): a call costs the base latency plus one hop latency per ring step, the
/// steps between nodes at the network's and the others at NVLink's. With a device preset placec
/// uses these; the network step is the cluster's `latency` (9.6 us on every preset). Without a
/// preset every step costs `latency` and there is no base.
inline constexpr double kCollectiveBaseLatency = 8.4e-6;
inline constexpr double kNvlinkStepLatency = 3.4e-6;

/// The host's time for one small eager PyTorch operator while the device waits for it: placec's
/// kernel bench on an H100 machine (bench/gpu/kernels.py, `launch`: 20,000 `add_` on 16 elements
/// timed on the host, 10.9 and 11.2 us in its two runs of 2026-11-27, PyTorch 2.11;
/// bench/README.md, "Kernels").
inline constexpr double kHostOperatorSeconds = 10.9e-6;
/// The states of each training metric that `train_metrics` counts: Composer's
/// LanguageCrossEntropy and LanguagePerplexity keep two scalars, `sum_loss` and `total_items`
/// (composer/metrics/nlp.py, `add_state(..., dist_reduce_fx='sum')`).
inline constexpr int64_t kTrainMetricStates = 2;

/// MXFP8 products take longer than FP8 products with one scale per tensor on the same tensor
/// cores: over the twelve products of a layer (hidden 4096, FFN 16384, 15,872 tokens; forward,
/// input and weight gradients) on a B300, their inputs quantized beforehand, 7.161 ms against
/// 6.812 ms (Transformer Engine, docs/examples/gemm_profiling/gemm_profiling.rst at commit
/// 8f2e635, "Autocast vs Pre-quantized", the per-layer totals of MXFP8 and FP8 CurrentScaling).
inline constexpr double kMxfp8GemmTimeRatio = 7.161 / 6.812;

/// NVFP4 products take this fraction of the time of the same products in FP8 with one scale per
/// tensor on the same device: 3.764 ms against 6.812 ms over the same twelve products on the same
/// B300, their inputs quantized beforehand (the same table as kMxfp8GemmTimeRatio, its NVFP4
/// column). The FP4 tensor cores' dense peak is 2.8 times the FP8 one on that B300 (Bekman's
/// table, the `b300` preset) and the products ran 1.81 times as fast. placec applies the ratio on
/// every Blackwell device rather than scaling it by each device's FP4/FP8 peak ratio: scaled, the
/// GB200's products (2 times the peak) would run 1.36 times as fast as in MXFP8, and placec's
/// Llama 3 70B step on 64 GB200s, about 70 % products, 1.14 times as fast as its MXFP8 twin's,
/// where Megatron-Bridge measured 1.31 (docs/fidelity.md, "NVFP4").
inline constexpr double kNvfp4GemmTimeRatio = 3.764 / 6.812;

/// FlashAttention's backward does five matrix products per block against the forward's two
/// (Dao 2023, "FlashAttention-2", §3.1): 2.5 times the forward's FLOPs.
inline constexpr double kFusedAttentionBackwardRatio = 2.5;

//===----------------------------------------------------------------------===//
// Work: what a unit computes
//===----------------------------------------------------------------------===//

/// A matrix product C[m×n] = A[m×k]·B[k×n], `batch` of them (attention heads).
struct Gemm {
  std::string name;
  double m = 0, n = 0, k = 0, batch = 1;
  /// A backward's weight-gradient product (the W pass of zero-bubble schedules).
  bool weightGradient = false;
  /// Run in FP8 under mixed(fp8): the linear layers of the transformer blocks (the attention
  /// core and the output layer stay in BF16, as Transformer Engine and torchao run them).
  bool fp8 = false;
  /// A product of block-scaled operands (MXFP8, `scaling = mx`, or NVFP4, `mixed(fp4)`):
  /// kMxfp8GemmTimeRatio.
  bool mx = false;
  /// The tensor-parallel collective this product feeds or drains (TensorSlot), or -1: under
  /// async_tp each collective overlaps only with its own products.
  int tensorSlot = -1;
  /// A backward's input-gradient product.
  bool inputGradient = false;
  /// The forward's products with the same non-negative `input` read one tensor (q, k and v, or
  /// an MLP's gate and up, under `projections = separate`); -1: a tensor of its own.
  int input = -1;
  /// Under `mixed(fp4)` an `fp8` product runs in NVFP4, on the FP4 tensor cores.
  bool fp4 = false;
  /// A routed experts' grouped product, which runs between the expert dispatch and the combine
  /// (CostModel::getRoutedExpertSeconds).
  bool routed = false;
  double getFlops() const { return 2 * m * n * k * batch; }
};

/// The four tensor-parallel collectives of a transformer block, one per side of each of its
/// column- and row-parallel products (Megatron-LM with sequence parallelism: Korthikanti et al.
/// 2022, Figure 5): the all-gather before QKV, the reduce-scatter after the attention output, the
/// all-gather before the MLP's (or the experts') input products, the reduce-scatter after their
/// output products; in the backward the transposed collective beside the same products' input
/// and weight gradients. The output layer's products take the first slot.
enum TensorSlot : int { kSlotQkv = 0, kSlotAttentionOutput, kSlotMlpIn, kSlotMlpOut };
inline constexpr int kTensorSlots = 4;
/// GEMM seconds of a pass by TensorSlot.
using TensorSlotSeconds = std::array<double, kTensorSlots>;

/// A memory-bound kernel: the bytes it reads and writes in device memory.
struct MemoryOp {
  std::string name;
  double bytes = 0;
  /// The share of the bytes moved between the expert dispatch and the combine, by the routed
  /// experts' kernels: the received rows' sort by local expert and back (all of it), the
  /// experts' part of an MoE layer's MLP activation (CostModel::getRoutedExpertSeconds).
  double routedShare = 0;
};

/// A fused attention core (FlashAttention): `batchHeads` independent heads of `queries` query
/// rows against `keys` key rows of width `headDim`.
struct AttentionCore {
  /// `headDim`: the width of a query and key head; `valueDim`, of a value head where it differs
  /// (multi-head latent attention), 0 otherwise.
  double batchHeads = 0, queries = 0, keys = 0, headDim = 0, valueDim = 0;
  bool causal = true;
  /// Sliding-window attention: each query attends at most this many keys (itself included); 0:
  /// no window. Only without context parallelism (the queries are the keys' positions).
  double window = 0;
  /// The kernels across which each query's keys are split (getContextAttentionCalls): each
  /// pays the kernel's per-query overhead (FusedAttentionConstants' key overhead) once.
  double calls = 1;
  bool backward = false;
  /// The fused kernel (never Materialized: those products are Gemms).
  ir::AttentionKind kernel = ir::AttentionKind::Flash;
  /// cuDNN's FP8 kernel (`attention = fp8`): the BF16 kernel's time times Fp8AttentionRatio.
  bool fp8 = false;
  /// The keys a query attends on average: every key; under a causal mask the earlier half
  /// (kCausalFraction); under a window w < keys, w − w²/(2·keys) causal (the first w queries
  /// see their prefix, the others w keys) and w otherwise. A fused kernel skips the blocks
  /// outside the mask.
  double getAttendedKeys() const;
  /// The mean of the two products' head widths, (query/key + value)/2: the width whose 4·q·k·d
  /// FLOPs are QKᵀ's and PV's.
  double getMeanHeadDim() const { return valueDim > 0 ? (headDim + valueDim) / 2 : headDim; }
  double getFlops() const;
};

/// The compute of one unit's pass for one micro-batch on one device.
struct Work {
  std::vector<Gemm> gemms;
  std::vector<MemoryOp> memory;
  std::vector<AttentionCore> attention;
  /// FLOPs executed: GEMMs and attention cores.
  double getFlops() const;
  /// Bytes the memory-bound kernels move.
  double getMemoryBytes() const;
  bool empty() const { return gemms.empty() && memory.empty() && attention.empty(); }
};

/// The unit a Work belongs to.
enum class UnitKind { Embedding, Layer, Head, MlpLayer, Abstract };
/// Whether a unit's parameters feed products that mixed(fp8) and mixed(fp4) run quantized, so
/// that they hold ir::StateBytes' quantized copies and are all-gathered as such: a transformer's
/// layers, routed experts included (Gemm::fp8; the norms, biases, router and sinks among them,
/// under 1 % of a layer, are counted with them), and an abstract model's units. The embedding,
/// the head and an mlp's layers keep their weights alone (ir::StateBytes::unquantized): the
/// output layer runs in BF16 under Transformer Engine (Megatron-Core's is its own
/// ColumnParallelLinear) and under torchao (torchtitan's float8 converter leaves `output` out),
/// the embedding is a lookup, and placec times an mlp's products in BF16.
bool quantizesParams(UnitKind unit);
/// `bytes` for the parameters of a unit of kind `unit` (quantizesParams).
ir::StateBytes getUnitStateBytes(const ir::StateBytes &bytes, UnitKind unit);
/// The pass of a unit: its forward, its backward, or the recomputation before the backward.
enum class PassKind {
  Forward,
  Backward,
  RecomputeFull,
  RecomputeSelective,
  RecomputeOps,
  RecomputeAttention,
  RecomputeModules
};
/// The number of PassKinds, for tables indexed by them.
constexpr int kNumPassKinds = 7;

/// The pass that recomputes a layer's forward before its backward under activation mode `mode`;
/// none when everything the backward reads is kept.
std::optional<PassKind> getRecomputePass(ir::ActivationMode mode);

/// Why `recompute(op)` does not apply to `model`, or empty where it does: torchtitan's per-op
/// policy keeps the outputs of `aten.mm` (linear layers without a bias; a biased one runs
/// `aten.addmm`, which the policy does not keep) and of the fused attention kernel, over dense
/// transformer layers (getLayerActivationBytes). An abstract model has no layers to say.
std::string getOpRecomputeObstacle(const ir::Model &model);
/// Why Megatron-Core's recomputation of `modules` (ir::RecomputeModule bits) does not apply to
/// `model`, or empty where it does: a transformer's over fused attention without flash-attn's
/// packing, each module where the model has it (`moe_act` an MoE layer, `mla_up_proj` latent
/// attention, `mlp` a dense layer, `layernorm` a norm of its own: an MoE layer's before its
/// router, or latent attention's before its down-projections).
std::string getModuleRecomputeObstacle(const ir::Model &model, unsigned modules);
/// Why `mixed(fp8, saved = fp8)` cannot be modelled for `model` under `mode`, or empty: it is
/// counted for transformer layers over a fused attention kernel, and not under torchtitan's
/// per-op policy (which runs over PyTorch's float8 linears).
std::string getSavedFp8Obstacle(const ir::Model &model, ir::ActivationMode mode);

/// Why `kernels = eager` cannot be modelled for `model` trained under activation mode `mode` at
/// `precision`, or empty where it can. placec counts eager PyTorch's kernels for the reference
/// modules of a dense transformer over the fused attention kernel (torchtitan's Llama: RMSNorm in
/// fp32 operators, the rotary embedding as a complex product, silu and the gate product apart,
/// grouped keys and values repeated to every head); materialized attention, MoE layers, Float8
/// casts and Megatron-LM's recompute(selective) run kernels it does not count.
std::string getEagerObstacle(const ir::Model &model, ir::ActivationMode mode,
                             ir::Precision precision);

/// Whether the attention kernel receives each grouped key/value head repeated to all of its
/// query heads: the model says `kv_repeat = true`, or eager PyTorch runs it (`kernels = eager`,
/// torchtitan's `repeat_kv` at commit 9dec370, models/llama/model.py), and there are fewer
/// key/value heads than query heads. Where it holds the repetition's copies are memory-bound work
/// (K and V repeated forward, their gradients summed backward), the kernel keeps the repeated K and
/// V for the backward, and context parallelism exchanges them (getAttentionKvHeads).
bool repeatsKv(const ir::TransformerConfig &config, ir::KernelMode kernels);

/// Whether the rotary embedding runs as PyTorch's kernels for a complex product over an fp32 copy
/// of Q and K (`view_as_complex(x.float()) * freqs_cis` cast back): eager PyTorch runs torchtitan's
/// modules so (`kernels = eager`), and so does torch.compile where the model says
/// `rope_complex = true`, since TorchInductor generates no code for complex tensors and falls
/// back to PyTorch's kernel for every operator on one (torch/_inductor/lowering.py,
/// unsupported_input_tensor; torchtitan issue #15). Needs `positions = rope`.
bool rotatesComplex(const ir::TransformerConfig &config, ir::KernelMode kernels);

/// The key/value heads the attention kernel receives, and so the ones context parallelism
/// exchanges (PyTorch's context parallelism all-gathers or rotates the K and V that
/// scaled_dot_product_attention gets): `heads` where repeatsKv, `kv_heads` otherwise.
int64_t getAttentionKvHeads(const ir::TransformerConfig &config, ir::KernelMode kernels);

/// The attention kernels a context-parallel rank runs per pass, across which each of its queries'
/// keys are split: the ring's cp steps (Transformer Engine's and PyTorch's alike: the rank whose
/// every step holds all its queries, load-balanced, paces the ring), and PyTorch's all-gather,
/// which loops over the gathered chunks as its ring does (`context_merge = eager`); 1 for
/// Transformer Engine's all-gather (one kernel per chunk of queries over the keys it attends),
/// for Ulysses's all-to-all (whole sequences of fewer heads) and without context parallelism.
double getContextAttentionCalls(int64_t context, ir::ContextMethod method, ir::ContextMerge merge);

/// How the model's work is split on one device.
struct Layout {
  double microBatch = 1;
  int64_t tensor = 1;  ///< Tensor-parallel degree.
  int64_t context = 1; ///< Context-parallel degree (the sequence split across devices).
  /// How the attention sees the other context-parallel ranks' keys and values (`context`), and
  /// which implementation runs it (`context_merge`): getContextAttentionCalls and the merges.
  ir::ContextMethod contextMethod = ir::ContextMethod::Ring;
  ir::ContextMerge contextMerge = ir::ContextMerge::Fused;
  int64_t expert = 1; ///< Expert-parallel degree (the routed experts split across devices).
  /// `expert_tensor = fold` under a tensor degree above 1: the routed experts whole on each
  /// device, the tensor axes' devices in their group (getMoeShape).
  bool expertFold = false;
  /// `expert_context = fold` under a sequence degree above 1: the sequence axes' devices in the
  /// routed experts' group, E/(ep·cp) experts on each (getMoeShape).
  bool expertContextFold = false;
  /// `dispatcher`: how the expert group moves the routed rows (MoeShape::sortsByLocalExpert).
  ir::ExpertDispatcher dispatcher = ir::ExpertDispatcher::AllToAll;
  bool sequenceParallel = false;
  /// What sequence parallelism's column-parallel products keep of their gathered input
  /// (`sp_inputs`): under `keep` the two layer inputs they read are kept whole.
  ir::SequenceParallelInputs sequenceParallelInputs = ir::SequenceParallelInputs::Regather;
  ir::ActivationMode activations = ir::ActivationMode::Keep;
  /// Under ir::ActivationMode::RecomputeModules, the ir::RecomputeModule bits.
  unsigned recomputeModules = 0;
  ir::Precision precision = ir::Precision::MixedBF16;
  ir::CrossEntropyKind crossEntropy = ir::CrossEntropyKind::Fused;
  /// `train_metrics`: cross-entropy metrics computed from each micro-batch's logits after its
  /// backward (the head's backward counts them).
  int64_t trainMetrics = 0;
  ir::KernelMode kernels = ir::KernelMode::Fused;
  /// `mixed(…, params = fp32)`: fp32 parameters cast to the compute type on use; and whether
  /// they are gathered (`gather(...)`: FSDP casts each shard before its all-gather).
  bool fp32Params = false;
  bool paramsGathered = false;
  /// `mixed(fp8, saved = fp8)`: the FP8 products keep their inputs for the backward in FP8
  /// (counted where the precision is mixed(fp8): getDims).
  bool fp8Saved = false;
  /// `mixed(fp8, scaling = mx)`: MXFP8 (ir::Fp8Scaling).
  ir::Fp8Scaling fp8Scaling = ir::Fp8Scaling::Tensor;
  /// `mixed(fp8 | fp4, attention = fp8)`: the attention kernel in FP8 (ir::Run::fp8Attention).
  bool fp8Attention = false;
  /// `grad_accumulation`: how each micro-batch's weight gradients join the stored ones, and the
  /// stored gradients' bytes per element (ir::StateBytes::grads).
  ir::GradAccumulation gradAccumulation = ir::GradAccumulation::Fused;
  double gradBytes = 2;
};

/// A run's layout: its micro-batch, its mesh's tensor, sequence and expert degrees, and what its
/// strategy and run say of sequence parallelism, activations, precision, loss and kernels.
Layout getRunLayout(const ir::Run &run);

/// The work of one pass of a unit of `model` for one micro-batch on one device. Transformer
/// units list their GEMMs by shape (Narayanan et al. 2021, §5.1: the QKV, attention output and
/// MLP products of a layer and the logits of the head), the attention core (materialized: two
/// batched GEMMs and a softmax in device memory; flash: one fused kernel) and the memory-bound
/// kernels with the bytes they move. A backward computes, for each product of the forward, the
/// input gradient and the weight gradient.
/// `layer` is the layer's index: an mlp's layers differ in shape, a transformer's only in being
/// dense or mixture-of-experts layers and, under `full_every`, in attending a window or the
/// whole prefix (getUnitWorkClass).
Work getUnitWork(const ir::Model &model, UnitKind unit, int64_t layer, PassKind pass,
                 const Layout &layout);
/// What getUnitWork reads of `layer`: units of `model` of the same kind and class have the same
/// work in every pass under one layout (a transformer's dense and MoE layers, each windowed or of
/// full attention; an mlp's layers one by one), so that a caller may compute it once per class.
int64_t getUnitWorkClass(const ir::Model &model, UnitKind unit, int64_t layer);

/// Mixture-of-experts layers on one device for one micro-batch (Fedus et al. 2021, "Switch
/// Transformers", §2.1; Megatron-Core's token dispatcher). Every device routes its own T = b·s/cp
/// tokens (all of them on every tensor-parallel rank) and sends each to its top_k experts'
/// devices, E/ep experts on each. Under Layout::expertFold each tensor-parallel rank routes its
/// own sequence shard, T = b·s/(cp·t), to a group of ep·t devices holding E/(ep·t) whole experts
/// each (Megatron-Core's --expert-tensor-parallel-size 1); under Layout::expertContextFold the
/// group takes the context-parallel devices too, ep·cp (·t), each routing its own T as before.
/// Dropless, the dispatch buffer holds T·k rows of h; with a capacity factor c each expert takes
/// C = ⌈c·T·k/E⌉ rows from each source device, padded, so the buffer is E·C rows.
struct MoeShape {
  double tokens = 0;       ///< T: tokens routed by one device.
  double dispatchRows = 0; ///< Rows of h in one device's dispatch buffer.
  double capacity = 0;     ///< C per expert per source device; 0 when dropless.
  double localExperts = 0; ///< E/ep experts on one device (E/(ep·t) folded).
  /// Devices of the expert group: ep (ep·t with the tensor axes folded, times cp with the
  /// sequence axes folded).
  double group = 1;
  double tokensPerExpert = 0; ///< Rows each local expert computes (× imbalance when dropless).
  /// Megatron-Core's all-to-all dispatcher with several experts on a device and a group of more
  /// than one: the rows a device receives arrive grouped by source rank and are sorted into
  /// local-expert order before the experts, and back into source order before the combine
  /// ("Permutation 2" and "Unpermutation 2", sort_chunks_by_idxs in
  /// megatron/core/transformer/moe/token_dispatcher.py, dispatch_postprocess and
  /// combine_preprocess), a read and a write of the dispatch buffer each way. The flex
  /// dispatcher's backends permute once each way (DeepEP after its dispatch, HybridEP inside it).
  bool sortsByLocalExpert = false;
};
MoeShape getMoeShape(const ir::TransformerConfig &config, const Layout &layout,
                     std::string *formula = nullptr);

/// Bytes per element of a transformer's residual stream (the embedding's output, the residual
/// additions, the norms' inputs, and what crosses a pipeline stage boundary): the activations'
/// bytes, or 4 under autocast over fp32 modules (`params = fp32` with the parameters not
/// gathered: the fp32 embedding's output and every addition to it stay fp32).
double getStreamBytes(ir::Precision precision, bool fp32Params, bool paramsGathered);

/// Model FLOPs of one training step for `globalBatch` samples: three times the forward of every
/// unit (forward and backward, no recomputation), with the attention scores counted over the
/// whole s×s (the convention of Narayanan et al. 2021 and of MFU figures).
double getModelFlops(const ir::Model &model, double globalBatch, std::string *formula = nullptr);

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

/// Activation bytes of one transformer layer for one micro-batch on one device.
/// `attention = materialized`: Korthikanti et al. 2022, Table 2 (s·b·h·(34 + 5·a·s/h) and its
/// tensor-parallel, sequence-parallel and recomputation rows). `attention = flash`: the tensors
/// the backward reads, listed one by one (no s×s scores: the softmax statistics instead).
/// An MoE layer (`moeLayer`) keeps its routed experts' inputs and intermediates (top_k of them
/// per token, times the imbalance) and the router's fp32 probabilities in place of the MLP's.
double getLayerActivationBytes(const ir::TransformerConfig &config, const Layout &layout,
                               std::string *formula = nullptr, bool moeLayer = false);

/// The head's loss buffers for one micro-batch on one device, alive from the head's forward to its
/// backward: the logits in the activation type and the softmax in fp32 that the cross-entropy's
/// backward reads, b·s·V/t·(e + 4) bytes.
double getHeadActivationBytes(const ir::TransformerConfig &config, const Layout &layout,
                              std::string *formula = nullptr);
/// What the embedding keeps for one micro-batch on its stage: with `embedding_norm`, the norm's
/// input, s·b·h (over t under sequence parallelism) in the stream's type; 0 without. The layers
/// are checkpointed without it under full recomputation (Megatron-DeepSpeed checkpoints the
/// transformer layers only), so every activation mode keeps it.
double getEmbeddingActivationBytes(const ir::TransformerConfig &config, const Layout &layout,
                                   std::string *formula = nullptr);
/// What one multi-token prediction module (`mtp_layers`) keeps for one micro-batch beyond its
/// transformer layer's activations (getLayerActivationBytes of its kind): under full
/// recomputation its second input, the shifted tokens' embedding (Megatron-Core checkpoints the
/// module from its two inputs, where the layer's count has one); otherwise the inputs of its
/// three norms, the projection's input (the two norms' outputs) and the output layer's input.
double getMtpActivationBytes(const ir::TransformerConfig &config, const Layout &layout,
                             std::string *formula = nullptr);

/// The activations a recomputed layer materializes again and holds from its recomputation through
/// its backward, one layer at a time: its activation bytes under `keep` less those `layout`'s
/// mode keeps (0 under keep). A transformer layer (an MoE one with `moeLayer`) or an mlp layer.
double getRecomputedLayerBytes(const ir::Model &model, const Layout &layout,
                               std::string *formula = nullptr, bool moeLayer = false);

/// Activation bytes of one mlp layer for one micro-batch: its input and pre-activation output
/// (its input alone under full recomputation).
double getMlpLayerActivationBytes(const ir::MlpConfig &config, const Layout &layout,
                                  std::string *formula = nullptr);

/// What a deferred weight pass of `unit` reads for one micro-batch on one device: the operands of
/// its weight-gradient products, each product's input and output gradient (Qi et al. 2024, Table
/// 1: 32·s·b·h of a GPT layer's 34·s·b·h + 5·a·s²·b), the column-parallel inputs split by t under
/// sequence parallelism, a tensor read by several products once.
double getWeightPassBytes(const ir::Model &model, UnitKind unit, int64_t layer,
                          const Layout &layout, std::string *formula = nullptr);

/// getWeightPassBytes in its two parts: the products' inputs and their output gradients.
struct WeightPassOperands {
  double inputs = 0, gradients = 0;
};
WeightPassOperands getWeightPassOperands(const ir::Model &model, UnitKind unit, int64_t layer,
                                         const Layout &layout, std::string *formula = nullptr);

/// Whether a schedule's deferred weight passes keep the micro-batch's autograd graph until they
/// run. PyTorch's torch.distributed.pipelining, whose ScheduleZBVZeroBubble `zbv` follows,
/// computes the input gradients with `retain_graph=True` and keeps the autograd nodes of the
/// products with their saved tensors, and through them the rest of the graph, capturing the
/// products' output gradients beside them (torch/distributed/pipelining/_backward.py,
/// stage_backward_input). Qi et al.'s and DualPipe's WeightGradStore (`zero_bubble`,
/// `dualpipev`) keep each product's input and output gradient and let the backward free the
/// rest.
bool keepsGraphForWeightPass(ir::Schedule schedule);

/// What a layer (transformer block `layer`, or an mlp layer) of a micro-batch whose weight pass is
/// deferred holds beyond its activation bytes under `layout`'s mode, from its input-gradient pass
/// to its weight pass. With WeightGradStore (`keepsGraph` false): max(0, getWeightPassBytes −
/// getLayerActivationBytes); under recomputation the weight pass reads what the recomputation
/// materialized, which the store keeps past the backward; under `keep` the operands are among the
/// kept tensors, and the micro-batch is counted whole, an upper bound (the store frees the rest).
/// With the autograd graph kept (`keepsGraph`): max(0, inputs − getLayerActivationBytes) + the
/// output gradients, the graph's saved tensors and the captured gradients beside them (under
/// recomputation the recomputed inputs are taken as kept, an upper bound).
double getDeferredWeightExtraBytes(const ir::Model &model, int64_t layer, const Layout &layout,
                                   bool keepsGraph, std::string *formula = nullptr);
/// The same from a layer's weight-pass operands (getWeightPassOperands) and the activation bytes
/// its mode keeps, for clients that need both schedules' answers.
double getDeferredWeightExtraBytes(const WeightPassOperands &operands, double kept,
                                   bool keepsGraph);

/// A stage's micro-batches at one of its peaks under a schedule that defers weight passes:
/// `microbatches` in flight in all, each at its activation bytes; `deferred` of them past their
/// input-gradient pass, holding their weight passes' operands (getDeferredWeightExtraBytes more);
/// and `heads` deferred weight passes of the head (getWeightPassBytes of the head).
struct HeldMicrobatches {
  double microbatches = 0, deferred = 0, heads = 0;
};

/// The peaks of pipeline stage `stage` under zero_bubble, zbv and dualpipev, as their schedules
/// order the passes (every one of the others, and no pipeline: none). `extraInFlight` is what the
/// stage holds beyond the schedule's count (getExpertOverlapInFlight's excess over
/// getInFlightMicrobatches; 0 without it), added to each peak's. ZB-H1 (Qi et al.'s hand schedule):
/// min(p, m) in flight, min(s + 1, m) deferred, the s it defers and the one between its
/// input-gradient and weight passes; the head's stage holds the head's with each. ZB-V (PyTorch's
/// ScheduleZBVZeroBubble), rank r: p in flight with one chunk deferred (the head's chunk on the
/// first rank), or (p + r)/2 with 2r + 1 chunks deferred. DualPipeV (deepseek-ai/DualPipe,
/// dualpipev.py): p + 1/2 with one chunk deferred, or p/2 with r + 1 chunks deferred.
llvm::SmallVector<HeldMicrobatches, 2> getDeferredWeightPeaks(ir::Schedule schedule, int64_t stages,
                                                              int64_t microbatches, int64_t chunks,
                                                              int stage, bool hasHead,
                                                              double extraInFlight,
                                                              std::string *formula = nullptr);

/// The activation bytes a stage holds at its peak: max over `peaks` of microbatches·perMicrobatch
/// + deferred·perDeferred + heads·perHead; inFlight·perMicrobatch without peaks.
double getHeldActivationBytes(llvm::ArrayRef<HeldMicrobatches> peaks, double inFlight,
                              double perMicrobatch, double perDeferred, double perHead);

/// Micro-batches (of the stage's layers) whose activations pipeline stage `stage` of `stages`
/// holds at its peak: 1F1B min(p − stage, m), GPipe m (Narayanan et al. 2021 §2.2); ZB-H1
/// min(p, m) on every stage, from each forward to its deferred weight pass (Qi et al. 2024 §2.1,
/// whose hand schedule's stage s defers s of them); interleaved min(m, (2(p − stage − 1) + (v −
/// 1)·p + 1)/v), Megatron-Core's and PyTorch's warm-up chunk forwards and one more, Korthikanti et
/// al.'s p·(1 + (p − 1)/(p·v)) on the first stage (2022 §4.2.3); ZB-V min(p, m) on every stage (its
/// memory is balanced, as 1F1B's first stage; Qi et al. 2024 §4); DualPipeV min(p + 1/2, m), 2p + 1
/// chunks of half a stage (the DualPipe README's PP + 1 stages with PP = 2p); DualPipe
/// min((p + 1)/2, m) (DeepSeek-V3, Table 2).
/// Interleaved with micro-batch groups of N (`group`, 0: p): (v − 1)·N warm-up chunks.
double getInFlightMicrobatches(ir::Schedule schedule, int64_t stages, int64_t microbatches,
                               int64_t chunks, int stage, std::string *formula = nullptr,
                               int64_t group = 0);

/// Micro-batches whose loss buffers (getHeadActivationBytes) the stage holding the head keeps at
/// once: GPipe's m; one under the other pipeline schedules, whose head chunk runs each
/// micro-batch's backward before its next forward; without a pipeline the stage's count.
/// Interleaved with micro-batch groups of N (`group`) whose last is short: two.
double getLossInFlightMicrobatches(ir::Schedule schedule, int64_t stages, int64_t microbatches,
                                   int64_t chunks, int stage, std::string *formula = nullptr,
                                   int64_t group = 0);

/// Micro-batches in flight on a stage under `ep_overlap = true`, from the schedule's `inFlight`
/// (getInFlightMicrobatches). Megatron-Core's combined 1F1B runs the forward of layer i of one
/// micro-batch beside the backward of the last layer another still holds
/// (megatron/core/models/common/model_chunk_schedule_plan.py), so the two hold one layer more than
/// the other's whole stage: + 1/n for a stage of n layers; under interleaving it schedules one
/// extra warm-up forward of a model chunk (schedules.py, get_pp_rank_microbatches): + 1/v more.
/// At most m; unchanged at one micro-batch, which nothing is paired with. Unchanged under
/// `dualpipev`, whose count (2p + 1 chunks, the DualPipe README) is that of its schedule, which
/// runs its forward and backward chunks side by side.
double getExpertOverlapInFlight(ir::Schedule schedule, double inFlight, int64_t stages,
                                int64_t microbatches, int64_t chunks, int64_t stageLayers,
                                std::string *formula = nullptr);

/// What one pipeline stage holds, the input of getStageMemory.
struct StageStates {
  double params = 0; ///< Parameter elements per device after the tensor split.
  /// Of `params`: the elements of units that no quantized product reads (quantizesParams), which
  /// take ir::StateBytes::unquantized's bytes; and whether the largest unit is one of them.
  double plainParams = 0;
  bool largestPlain = false;
  double largestUnit = 0;   ///< Elements of the stage's largest unit.
  std::string largestName;  ///< Its name (for explanations).
  double tiedEmbedding = 0; ///< A tied embedding kept gathered from its forward to the head's.
  /// The head's loss buffers of the in-flight micro-batches (getHeadActivationBytes), on the
  /// stage that holds the head.
  double headBuffers = 0;
  std::string headBuffersText;
  /// The largest recomputed layer of the stage (getRecomputedLayerBytes), on a stage with layers.
  double recomputedLayer = 0;
  std::string recomputedLayerText;
  int64_t units = 0;  ///< Units on the stage.
  int64_t layers = 0; ///< Transformer blocks or mlp layers on the stage.
  /// Routed experts' parameter elements per device (after the expert and tensor splits), their
  /// shard degrees over the expert-data-parallel axes and how they were counted.
  double expertParams = 0;
  int64_t expertParamShard = 1, expertGradShard = 1, expertOptimizerShard = 1;
  std::string expertParamShardText, expertGradShardText, expertOptimizerShardText;
  /// MoE layers among `layers`, and the activation bytes of one of them for one micro-batch.
  int64_t moeLayers = 0;
  double moeLayerActivationBytes = 0;
  std::string moeLayerActivationText;
  int64_t paramShard = 1, gradShard = 1, optimizerShard = 1;
  /// Explanations of the shard degrees: ` / 64 (gather over dp)`.
  std::string paramShardText, gradShardText, optimizerShardText;
  std::string paramsText; ///< How `params` was counted.
  bool gathers = false;   ///< Parameters are gathered around each use.
  bool keepAfterForward = false;
  bool paramsOnHost = false, gradsOnHost = false, optimizerOnHost = false;
  bool activationsOnHost = false;
  bool gradsOnHostWithOptimizer = false; ///< Sharded grads following a host optimizer.
  bool activationsKnown = true;
  double layerActivationBytes = 0; ///< One layer, one micro-batch.
  std::string layerActivationText;
  /// Under `recompute(layers = n)`: the stage's layers that are not recomputed (`keptMoeLayers`
  /// of them MoE layers), which keep what `keep` keeps, and that for one of them and one
  /// micro-batch.
  int64_t keptLayers = 0, keptMoeLayers = 0;
  double keptLayerActivationBytes = 0, keptMoeLayerActivationBytes = 0;
  std::string keptLayerActivationText, keptMoeLayerActivationText;
  /// Multi-token prediction modules among `layers`, and what one keeps beyond its layer for one
  /// micro-batch (getMtpActivationBytes).
  int64_t mtpLayers = 0;
  double mtpActivationBytes = 0;
  std::string mtpActivationText;
  /// What the embedding keeps for one micro-batch (getEmbeddingActivationBytes), on the stage
  /// that holds the embedding.
  double embeddingActivationBytes = 0;
  std::string embeddingActivationText;
  double inFlight = 1;
  std::string inFlightText;
  /// Under a schedule that defers weight passes (getDeferredWeightPeaks): the stage's peaks, what
  /// its layers hold beyond their activations for one micro-batch past its input-gradient pass
  /// (getDeferredWeightExtraBytes summed), and the head's deferred weight pass
  /// (getWeightPassBytes).
  llvm::SmallVector<HeldMicrobatches, 2> peaks;
  double deferredExtra = 0, headWeightPass = 0;
  std::string peaksText, deferredExtraText, headWeightPassText;
};

/// Bytes per device (or per device on the host) by state.
struct MemoryBreakdown {
  double params = 0;
  double grads = 0;
  double optimizer = 0;
  /// Activations kept for the backward at the peak (all in-flight micro-batches).
  double activations = 0;
  /// Gather buffers and other memory alive only around a use.
  double transient = 0;
  /// The most memory in use at any point of the step.
  double peak = 0;

  double getPersistent() const { return params + grads + optimizer; }
};

struct StageMemoryResult {
  MemoryBreakdown device, host;
};

/// The memory of a stage: model states by their shard degrees and tiers (ZeRO, Rajbhandari et
/// al. 2020: (2 + 2 + K)·Ψ split by what each state is sharded over), activations of the
/// in-flight micro-batches, and the transient buffers: gathered units (the one in use and the
/// next, prefetched; every unit with keep_after_forward), a unit's full gradient before it is
/// reduce-scattered or sent to the host, a unit brought from the host.
StageMemoryResult getStageMemory(const StageStates &states, const ir::StateBytes &bytes,
                                 std::vector<Explanation> *device = nullptr,
                                 std::vector<Explanation> *host = nullptr);

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

enum class Collective { AllReduce, AllGather, ReduceScatter, AllToAll, PointToPoint, Host };
llvm::StringRef toString(Collective collective);

/// A group of ranks as it lies on the cluster: `size` ranks, `perNode` of them in each node.
struct GroupShape {
  int64_t size = 1;
  int64_t perNode = 1;
  int64_t getNodes() const { return perNode > 0 ? (size + perNode - 1) / perNode : 1; }
  bool isIntraNode() const { return perNode >= size; }
};

/// The expected number of holders (the ranks of an expert group, or its nodes) that hold at least
/// one of a token's `topK` experts, the token's own holder included, `experts` experts spread
/// evenly over `holders` and a token's experts drawn evenly without repeats (routing forced to
/// balance): H·(1 − C(E − E/H, k)/C(E, k)). Under group-limited routing (`groups` G > 0,
/// `groupTopK` g, G dividing E): groups whole in the holders (H divides G), the holders of the
/// token's g groups, each taken to hold one of its experts, H·(1 − C(G − G/H, g)/C(G, g)); groups
/// that span H/G holders each (G divides H), the token's k experts drawn from the g·E/G of its
/// groups over their g·H/G holders, (g·H/G)·(1 − C(gE/G − E/H, k)/C(gE/G, k)); otherwise the
/// experts' count.
double getHoldersReachedPerToken(int64_t experts, int64_t topK, int64_t holders, int64_t groups = 0,
                                 int64_t groupTopK = 0, std::string *formula = nullptr);
/// Of those, the holders besides the token's own: (H − 1)/H of them (each holder is the token's
/// own with chance 1/H).
double getOtherHoldersPerToken(int64_t experts, int64_t topK, int64_t holders, int64_t groups = 0,
                               int64_t groupTopK = 0, std::string *formula = nullptr);

/// The shape of the group of mesh `axes` on nodes of `devicesPerNode`: the ranks of group 0
/// that lie in node 0 (groups are translates of it).
GroupShape getGroupShape(const ir::Mesh &mesh, llvm::ArrayRef<unsigned> axes,
                         int64_t devicesPerNode);

/// One axis of a group in a row-major mesh: its rank stride and size.
struct GroupAxis {
  int64_t stride = 1, size = 1;
};
/// The same for a group given by its axes' strides and sizes, outermost (largest stride) first.
GroupShape getGroupShape(llvm::ArrayRef<GroupAxis> axes, int64_t devicesPerNode);

/// True when some device of pipeline stage `stage` and its peer in stage `peer` (the same
/// coordinates on every other axis) lie in different nodes. `stride` is the layers axis's stride.
bool crossesNodes(int64_t stride, int64_t stages, int stage, int peer, int64_t devices,
                  int64_t devicesPerNode);

/// The group of two pipeline stages, `stage` and `peer`, at the same coordinates on every other
/// axis (the embedding group of the first and the last stage): two ranks, in one node or in two
/// (crossesNodes).
GroupShape getStagePairShape(int64_t stride, int64_t stages, int stage, int peer, int64_t devices,
                             int64_t devicesPerNode);

/// The word embedding's copy on a pipeline stage that holds the head but not the embedding, in
/// elements per device after a tensor split over `tensorDegree` (the vocabulary rows): with tied
/// embeddings the output layer reads it, and multi-token prediction modules embed their shifted
/// tokens with it (Megatron-Core's LanguageModule.setup_embeddings_and_output_layer keeps a copy
/// there for either, and finalize_model_grads all-reduces its gradient with the first stage's
/// every step); 0 for a model with neither.
int64_t getEmbeddingCopyParams(const ir::Model &model, int64_t tensorDegree);

/// Bytes one device puts on the wire in one call moving `bytes` (the collective's full
/// buffer) over `n` ranks: ring all-reduce 2(n−1)/n, all-gather, reduce-scatter and all-to-all
/// (n−1)/n, point-to-point and host transfers the whole buffer.
double getSentBytes(Collective collective, double n, double bytes);

//===----------------------------------------------------------------------===//
// Overlap
//===----------------------------------------------------------------------===//

/// Seconds that `commSeconds` of communication overlapped with `computeSeconds` of compute add
/// to the compute: the compute runs `1 + κ` times slower while the communication lasts (κ =
/// kOverlapComputeSlowdown), so the window takes max(comm, compute + comm · κ/(1 + κ)) and
/// exposes max(comm − compute, comm · κ/(1 + κ)).
double getOverlapExposedSeconds(double commSeconds, double computeSeconds);

/// One unit of a forward or backward pass, or `count` identical units in a row: the overlappable
/// communication it needs before its compute (parameter gathers) and after it (gradient
/// reductions), and its compute, in seconds.
struct PassUnit {
  double gather = 0;
  double reduce = 0;
  double compute = 0;
  /// Communication that runs beside the unit's own compute (ring attention's key/value
  /// exchange beside the attention).
  double beside = 0;
  /// Tensor-parallel collectives under async_tp, each beside the products of its slot, whose
  /// GEMM seconds are `slots` (all zero: beside the whole compute, as `beside`).
  double tensorBeside = 0;
  TensorSlotSeconds slots{};
  int64_t count = 1;
};

/// Whether `async_tp = mode` runs a tensor-parallel collective beside products: `true` every
/// collective, `forward` those of a forward computation (the forward pass or a recomputed
/// forward), `wgrad` the backward's input-gradient reductions, `false` none. A compute op asks it
/// of the collectives beside its products (a backward's are its input-gradient reductions). The
/// analysis and the search's fast path both ask it.
bool overlapsTensorTraffic(ir::AsyncTensorParallel mode, bool forwardComputation,
                           bool inputGradient);

/// Seconds that async_tp's collectives of one unit, `commSeconds` in all and one equal share per
/// slot with products, add when each overlaps only with its own products (the decomposed
/// all-gather-matmul and matmul-reduce-scatter of Wang et al. 2023, "Overlap Communication with
/// Dependent Computation via Decomposition in Large Deep Learning Models", ASPLOS '23, as
/// Megatron-LM's and PyTorch's asynchronous tensor parallelism run them):
/// Σ_slots max(c − G_s, c·κ/(1 + κ)), c = comm / slots with products; 0 without slots.
double getTensorOverlapExposedSeconds(double commSeconds, const TensorSlotSeconds &slots);

/// Seconds that the overlappable communication of one pass over `units` (in pass order) adds to
/// its compute, when gathered parameters are prefetched one unit ahead and gradients are reduced
/// as soon as a unit's backward ends: the first unit's gather has no compute beside it, unit j's
/// compute overlaps the gather of unit j + 1 and the reduction of unit j − 1 (each window as
/// getOverlapExposedSeconds, with the unit's own `beside` and `tensorBeside` communication, and
/// never below what getTensorOverlapExposedSeconds leaves of the latter), and the last unit's
/// reduction ends the pass:
/// `G_1 + Σ_j max(X_j − C_j, X_j·κ/(1 + κ), T_j) + R_k`, X_j = G_{j+1} + R_{j−1} + S_j.
double getPassExposedSeconds(llvm::ArrayRef<PassUnit> units);

/// The expert-parallel all-to-alls of one unit (a MoE layer) under `ep_overlap = true`: the
/// dispatch and combine of its forward and of its backward, and the compute of both passes.
struct ExpertExchange {
  /// The all-to-alls' seconds: the forward's dispatch and combine, the backward's combine
  /// gradient (its first) and dispatch gradient.
  double forwardDispatch = 0, forwardCombine = 0, backwardCombine = 0, backwardDispatch = 0;
  /// Each pass's compute, and the part of it between the dispatch and the combine
  /// (CostModel::getRoutedExpertSeconds: the routed experts').
  double forwardCompute = 0, backwardCompute = 0;
  double forwardExperts = 0, backwardExperts = 0;
  double getComm() const {
    return forwardDispatch + forwardCombine + backwardCombine + backwardDispatch;
  }
};

/// One window of getExpertOverlapWindows: an all-to-all and the compute beside it.
struct ExpertOverlapWindow {
  const char *comm, *compute;
  double commSeconds, computeSeconds;
};
/// The four windows in which Megatron-Core's combined 1F1B runs a MoE layer's forward beside
/// another micro-batch's backward (getExpertOverlapExposedSeconds), in their order.
std::array<ExpertOverlapWindow, 4> getExpertOverlapWindows(const ExpertExchange &unit);

/// The share of a stage's forwards (and of its backwards) that run alone under `ep_overlap =
/// true`, with no pass of another micro-batch beside them. Megatron-Core's combined 1F1B runs the
/// forward of each micro-batch beside the backward of an earlier one and leaves alone the first
/// forward and the last backward (megatron/core/pipeline_parallel/combined_1f1b.py), and under
/// interleaving the warm-up forwards and cool-down backwards of each stage, W = 2·(p − s − 1) +
/// (v − 1)·p + 1 of its m·v chunk passes for stage s of p with v chunks per stage (schedules.py,
/// get_pp_rank_microbatches, with the micro-batch group of a virtual stage at its default of p
/// and the extra warm-up forward of the overlap): min(1, W / (m·v)), 1/m without a pipeline.
/// Under `dualpipev`, DualPipeV's own pairs (deepseek-ai/DualPipe, dualpipe/dualpipev.py, whose
/// `_forward_backward_chunk` runs a forward chunk beside a backward one): rank r of p pairs two
/// chunks in each of the m − 2p + r + 1 iterations of its main step (but the last rank's first
/// two) and one in each of the p − r − 1 of its fifth, of its 2m forward and 2m backward chunk
/// passes: u = (3p − r − 1 + [r = p − 1]) / (2m). Interleaved with micro-batch groups of N
/// (`group`, 0: p), (v − 1)·N warm-up chunks.
double getExpertOverlapUnpairedShare(ir::Schedule schedule, int64_t stages, int64_t stage,
                                     int64_t microbatches, int64_t chunks, int64_t group = 0);

/// Seconds per micro-batch that the expert-parallel all-to-alls of a stage's units add under
/// `ep_overlap = true`. Megatron-Core's combined 1F1B runs a layer's forward beside another
/// micro-batch's backward in four windows, each an all-to-all on the communication stream beside
/// one part of the other pass on the compute stream, the next window waiting for both
/// (megatron/core/models/common/model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run):
/// the backward's combine gradient beside the forward's attention side (everything up to the
/// dispatch: attention, norms, router, shared experts, permutation), the forward's dispatch beside
/// the backward's routed experts, the backward's dispatch gradient beside the forward's routed
/// experts, the forward's combine beside the backward's attention side. Each window is timed as
/// getOverlapExposedSeconds, for the share of the passes that are paired, and the exchanges in
/// full for the `unpaired` share that runs alone:
/// `(1 − u)·Σ_j Σ_w max(A_jw − C_jw, A_jw·κ/(1 + κ)) + u·Σ_j A_j`, with A_jw the all-to-all and
/// C_jw the compute of window w of unit j, and A_j its four all-to-alls.
double getExpertOverlapExposedSeconds(llvm::ArrayRef<ExpertExchange> units, double unpaired);

/// A unit of a pass as the step's data-parallel collectives see it: its compute (and
/// multiplicity), gathering `stepGather` seconds before it and reducing `stepReduce` after it; its
/// own collectives were counted with every micro-batch's pass and are not counted again. The
/// step's gradient reductions run beside the last micro-batch's backward (`dp_overlap = grads` or
/// `all`); under `dp_overlap = all` the updated parameters' all-gathers run beside the next step's
/// first forward, each unit's before its forward (Megatron-LM's --overlap-param-gather).
PassUnit getStepPassUnit(const PassUnit &unit, double stepGather, double stepReduce);

//===----------------------------------------------------------------------===//
// Pipelines
//===----------------------------------------------------------------------===//

/// Whether a schedule's formulas hold for these numbers; the verifier's rule `schedule` rejects
/// the rest, and the search never builds them. Interleaving needs the micro-batches to be a
/// multiple of the stages (Megatron-LM's precondition; Narayanan et al. 2021 §2.2.2); ZB-H1 needs
/// at least as many micro-batches as stages to reach its steady state (Qi et al. 2024, §2); ZB-V
/// takes any (PyTorch's ScheduleZBVZeroBubble orders fewer than 2p − 1 as 2p − 1 with the missing
/// ones' passes left out, which getBubbleSeconds plays); DualPipeV twice as many as stages
/// (deepseek-ai/DualPipe, dualpipev.py), DualPipe an even number of stages too and an even number
/// of micro-batches (dualpipe.py). Under interleaving, `group` is the micro-batch group
/// (ir::Pipeline::group; 0: the stages): it must lie between p and m, and the last group be whole
/// or at least p (Megatron-Core's schedules.py), which with groups of p is m a multiple of p.
bool isScheduleValid(ir::Schedule schedule, int64_t stages, int64_t microbatches, int64_t chunks,
                     std::string *why = nullptr, int64_t group = 0);

/// What would meet isScheduleValid's precondition that these numbers miss, for a note: "at
/// least 16 micro-batches", "4 × k micro-batches", "a group that divides …".
std::string getScheduleRemedy(ir::Schedule schedule, int64_t stages, int64_t microbatches,
                              int64_t chunks, int64_t group = 0);

/// The most stages × micro-batches for which placec plays ZB-V's order pass by pass (fewer than
/// 2p − 1 micro-batches; getZeroBubbleVChains plays it a few tens of times): 2^17, every pipeline
/// of up to 256 stages, in under a second; beyond it the rule `schedule` refuses the plan.
constexpr int64_t kMaxPlayedZeroBubbleV = int64_t{1} << 17;

/// A chain of passes through ZB-V's step: how many chunk forwards, input-gradient passes and
/// weight passes lie on it, end to end across the ranks. It takes forward·F + input·B + weight·W.
struct ZeroBubbleVChain {
  int64_t forward = 0, input = 0, weight = 0;
};

/// The chains of PyTorch's ScheduleZBVZeroBubble over `stages` ranks and m micro-batches whose
/// longest is the step for every chunk time F, B, W ≥ 0 with the transfers free, as the order
/// played pass by pass gives it; each of them is the longest for some times. Found once per
/// process for each p and m (findZeroBubbleVChains; p × m ≤ kMaxPlayedZeroBubbleV) and kept: one
/// for one micro-batch, four where m ≤ p, at most thirteen below 2p − 1 (measured up to p = 128),
/// the closed form's eight from there on; so a step for few micro-batches costs what a closed form
/// does. getBubbleSeconds times ZB-V below 2p − 1 micro-batches by them.
llvm::ArrayRef<ZeroBubbleVChain> getZeroBubbleVChains(int64_t stages, int64_t microbatches);

/// getZeroBubbleVChains's chains found afresh, without keeping them: the order is played in
/// integers at the vertices of the regions of pass times where each chain found so far is the
/// longest, and each play that finds a longer path adds its chain, until none does; the step,
/// convex in the times, then equals the longest chain everywhere. A few tens of plays of 6·p·m
/// passes each.
std::vector<ZeroBubbleVChain> findZeroBubbleVChains(int64_t stages, int64_t microbatches);

/// The smallest micro-batch group interleaving accepts for `microbatches` over `stages`
/// (isScheduleValid): the stages where they divide the micro-batches (Megatron-Core's default),
/// else the least N in (p, m] whose last group, m mod N, is empty or holds at least p; 0 where
/// m < p, which no group fits. A larger group only adds warm-up chunks ((v − 1)·N,
/// getInFlightMicrobatches) and leaves the bubble as it is, so the search takes this one.
int64_t getSmallestMicrobatchGroup(int64_t stages, int64_t microbatches);

/// One micro-batch of a stage: its forward, its backward (recomputation and the weight
/// gradients included), the weight gradients' part of it, and the communication it exposes, in
/// seconds.
struct MicrobatchTimes {
  double forward = 0, backward = 0, weight = 0, exposed = 0;
  double getTotal() const { return forward + backward + exposed; }
  /// Adds `scale` times `other`'s times, field by field.
  void add(const MicrobatchTimes &other, double scale) {
    forward += scale * other.forward;
    backward += scale * other.backward;
    weight += scale * other.weight;
    exposed += scale * other.exposed;
  }
  bool operator==(const MicrobatchTimes &) const = default;
};

/// A stage's micro-batch times and how many stages of the pipeline have them (the search groups
/// identical stages; the analysis gives each stage with a count of one).
struct StageMicrobatch {
  MicrobatchTimes times;
  int64_t count = 1;
};

/// The pipeline bubble: the time the slowest stage idles in a step, p = the stages' total count.
/// With F, B (the input gradients) and W (the weight gradients) of a micro-batch and t = F + B +
/// W + its exposed communication, on p equal stages:
///   1F1B, GPipe: (p − 1)·t for every m ≥ 1 (the first micro-batch reaches the last stage after
///     p − 1 stage times and the last backward returns as late; Huang et al. 2019, Narayanan
///     et al. 2021 §2.2: a fraction (p − 1)/m of the ideal m·t);
///   interleaved, v chunks, m a multiple of p: (p − 1)·t/v;
///   ZB-H1 (m ≥ p): (p − 1)·(max(F, B, F + B − W) + comm), the exact bubble of the schedule
///     Qi et al. 2024 hand-craft (§2.1, Figure 3: 1F1B's order with rank r's first r weight
///     passes deferred to its end; CostModelTest's simulation): the longest of the forwards' way
///     down, the backwards' way up and the paper's F + B − W per rank, which is the longest
///     only where W is at most F and B;
///   ZB-V (p ranks, 2p stages; m ≥ 2p − 1, below which PyTorch's order is played pass by pass
///     with these chunk times, the step less 2m(F + B + W)): on chunks of half a stage, F, B and W
///     as DualPipeV's below, the longest of eight chains: max(B + (p − 2)W, (p − 1)B, 2(p − 1)(B −
///     W), F + (p − 2)W, (2p − 3)F − (p − 2)B, (2p − 3)F + B − 2(p − 1)W, (2p − 2)F − (p − 1)B − W,
///     (2p − 2)F − (2p − 1)W), the exact bubble of PyTorch's ScheduleZBVZeroBubble
///     (torch/distributed/pipelining/schedules.py; CostModelTest's simulation), never below
///     (p − 1)F, the time the first forward takes to reach the last rank (Qi et al. 2024, §4,
///     give (p − 1)(F + B − 2W), zero where F = B = W, which no V schedule reaches);
///   DualPipeV (p ranks, 2p stages, m ≥ 2p): on chunks of half a stage, F = F/2 + comm/4,
///     B = B/2 + comm/4 and W = W/2, (p − 1)·max(0, B − W) + max((p − 2)·F + (p − 1)·B,
///     2·(p − 1)·F). That is the schedule's exact bubble, the same for every m ≥ 2p: played
///     pass by pass (deepseek-ai/DualPipe, dualpipe/dualpipev.py; bench/pipeline/
///     dualpipev_schedule.py and CostModelTest's simulation), its critical path is one of four
///     chains, whose lengths less a rank's 2m chunks of work are these terms. The DualPipe
///     README's (PP/2 − 1)(F&B + B − 3W) with PP = 2p stages, F&B = F + B + W and B the whole
///     backward, is this when the forward and input-gradient chunks are equal and B ≥ W;
///   DualPipe: (p/2 − 1)·(F&B + B − 3W) on half-stage chunks, F&B = F + B + W, B + W the whole
///     backward (DeepSeek-AI 2024, Table 2 of the DeepSeek-V3 report; refused by rule
///     `schedule`, kept for the formula's sake).
/// On uneven stages (the embedding on the first, the head on the last, uneven splits), the stage
/// with the largest t works through its m micro-batches while the others fill the pipeline before
/// it and drain it after: each (p − 1)·X above becomes the sum of X over the other p − 1 stages
/// (for DualPipe, that sum × (p/2 − 1)/(p − 1)), computed as p − 1 times the other stages' mean
/// micro-batch (DualPipeV's formula takes that mean as every chunk's). For 1F1B and GPipe this is
/// the exact step of the schedule when the slowest stage is the last (m·t_last + Σ_{i ≠ last} t_i),
/// and an upper bound, tighter than (p − 1)·t_max, when it is another. Negative differences are no
/// bubble. Interleaving's micro-batch groups (`group`, 0: p) leave its bubble as it is
/// (CostModelTest.InterleavedAgainstItsSchedule plays them).
double getBubbleSeconds(ir::Schedule schedule, int64_t microbatches, int64_t chunks,
                        llvm::ArrayRef<StageMicrobatch> stages, std::string *formula = nullptr,
                        int64_t group = 0);

//===----------------------------------------------------------------------===//
// The cost model of a cluster
//===----------------------------------------------------------------------===//

/// The bytes a weight-gradient product moves per element of its result. Megatron-LM and
/// Transformer Engine add it into the stored gradient in the product's epilogue
/// (gradient_accumulation_fusion: D = A·B + C with C and D the main gradient, zeroed at the step's
/// start), which reads and writes every element in the gradients' type, 2 × `bytes.grads`;
/// PyTorch's autograd (`params = fp32`) writes a fresh result in the compute type, and its
/// accumulation is a kernel of its own (CostModel::getGradientAccumulationSeconds). Short
/// reductions (few tokens per expert, short micro-batches) make the product memory-bound on it.
double
getWeightGradientResultBytes(ir::Precision precision, const ir::StateBytes &bytes, bool fp32Params,
                             ir::GradAccumulation accumulation = ir::GradAccumulation::Fused);

/// Bytes moved per element of the stored gradients, per micro-batch, by `grad_accumulation`'s
/// kernels of their own (none under `fused`): `add` reads the product's fresh gradient
/// (`resultBytes`, the compute type) and the stored one and writes the stored one, r + 2·g;
/// `cast_add` first casts the fresh gradient to the stored type (r + g), then adds the two (3·g):
/// r + 4·g (DeepSpeed's update_hp_grads: hp_grad.add_(lp_grad.to(hp_grad.dtype))).
double getGradientAccumulationBytes(ir::GradAccumulation accumulation, double resultBytes,
                                    double gradBytes);

/// Times work and communication on one cluster for one precision.
class CostModel {
public:
  /// `weightGradientResultBytes`: getWeightGradientResultBytes of the run; 0, a result written
  /// once in the compute type.
  CostModel(const ir::Cluster &cluster, ir::Precision precision,
            double weightGradientResultBytes = 0);

  const ir::Cluster &getCluster() const { return cluster; }
  /// The dense peak FLOP/s of the run's matrix products (BF16/FP16, TF32 under fp32).
  double getPeak() const { return peak; }
  /// True when compute is timed from shapes (a device preset without a flat `efficiency`).
  bool hasShapeModel() const { return shapes; }
  /// The fitted constants this model times with (the cluster's replacements, if any).
  double getKernelEfficiency() const { return kernelEfficiency; }
  double getTileOverheadK() const { return tileOverheadK; }

  /// One GEMM (or a batch of them): the slower of its compute, in whole waves of tiles over the
  /// device's SMs at the family's GEMM efficiency, and its operands' and result's traffic.
  double getGemmSeconds(const Gemm &gemm, std::string *formula = nullptr) const;
  /// A memory-bound kernel: bytes over the HBM bandwidth the family reaches.
  double getMemorySeconds(double bytes, std::string *formula = nullptr) const;
  /// A fused attention core at the family's attention efficiency.
  double getAttentionSeconds(const AttentionCore &core, std::string *formula = nullptr) const;
  /// Everything in a Work; flat mode: its FLOPs over peak × efficiency. `slots`, when given,
  /// receives the part spent in the products of each TensorSlot.
  double getComputeSeconds(const Work &work, std::vector<Explanation> *lines = nullptr,
                           TensorSlotSeconds *slots = nullptr) const;
  /// The part of getComputeSeconds spent in weight-gradient products.
  double getWeightGradientSeconds(const Work &work) const;
  /// The part of getComputeSeconds spent between the expert dispatch and the combine, in the
  /// routed experts' products (Gemm::routed) and kernels (MemoryOp::routedShare): Megatron-Core's
  /// `mlp` node of combined 1F1B (megatron/core/models/gpt/fine_grained_callables.py, "post
  /// dispatch->experts->combine preprocess"). Flat mode: the routed products' FLOPs over peak ×
  /// efficiency.
  double getRoutedExpertSeconds(const Work &work) const;
  /// The seconds of a backward's column-parallel products by TensorSlot (QKV, the MLP's input;
  /// the output layer's in QKV's slot): their input gradients' (`inputGradients`), beside which
  /// sequence parallelism gathers their inputs again (`sp_inputs = regather`), and their weight
  /// gradients' (`weightGradients`), beside which `async_tp = wgrad` reduces the input
  /// gradients. The row-parallel slots stay empty (their input gradients need no reduction, their
  /// inputs no gather).
  TensorSlotSeconds getColumnParallelSlotSeconds(const Work &work, bool inputGradients,
                                                 bool weightGradients) const;
  /// The optimizer step over `elements` parameters this rank owns: bytes of every state read and
  /// written (memory-bound).
  double getOptimizerSeconds(double elements, ir::StateBytes bytes,
                             std::string *formula = nullptr) const;
  /// Under `params = fp32` (PyTorch's mixed precision) each micro-batch after the first adds its
  /// fp32 weight gradients into the `elements` gradients a device stores (autograd's
  /// AccumulateGrad; FSDP2 into the sharded ones): two read and one written, 3·4 bytes each
  /// (memory-bound). Megatron-LM accumulates inside the weight-gradient GEMM instead
  /// (gradient_accumulation_fusion), which costs nothing apart but the product's reading and
  /// writing of the gradient (getWeightGradientResultBytes).
  double getGradientAccumulationSeconds(double elements, double microbatches,
                                        std::string *formula = nullptr) const;
  /// Under `param_gather = copy_out` (PyTorch's FSDP2) each all-gather of the parameters is
  /// followed, on the compute stream, by a copy of every parameter out of the collective's flat
  /// buffer into its own tensor (torch.split_with_sizes_copy in foreach_all_gather_copy_out,
  /// torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): the `gatheredBytes` read and
  /// written once (memory-bound). `in_place` gathers cost nothing apart.
  double getGatherCopySeconds(double gatheredBytes, std::string *formula = nullptr) const;
  /// `train_metrics`: at the end of every step Composer computes each training metric
  /// (Trainer._compute_and_log_metrics), and torchmetrics synchronizes each of its
  /// kTrainMetricStates scalar states over the job's `world` ranks (gather_all_tensors,
  /// torchmetrics 1.0: a barrier, a one-element all-reduce after which the host waits for the
  /// device; `n` zeros_like; a one-element all-gather into them, which ProcessGroupNCCL copies out
  /// of its flat buffer piece by piece, `n` copies; the stack and the sum of the pieces). The
  /// device idles while the host issues those operators, kHostOperatorSeconds each; the all-gather
  /// runs while the host issues the copies. 0 for one rank (torchmetrics does not synchronize).
  double getTrainMetricSyncSeconds(int64_t metrics, const GroupShape &world,
                                   std::string *formula = nullptr) const;
  /// The same step on the host (ZeRO-Offload's CPU optimizer): the bytes over the node's host
  /// memory bandwidth shared by its devices; 0 (not timed) when that bandwidth is unknown.
  double getHostOptimizerSeconds(double elements, ir::StateBytes bytes,
                                 std::string *formula = nullptr) const;

  /// One call of a collective over `group` moving `bytes` (its full buffer), as NCCL runs it:
  /// a ring (all-reduce, all-gather, reduce-scatter) or, for an all-reduce across nodes, a tree
  /// when it is faster; across nodes the ring's bus bandwidth is that of the node's links the
  /// group uses (its `perNode` NICs, at most the NVLink bandwidth), Jeaugey 2019 ("Massively
  /// scale your deep learning training with NCCL 2.4"). Point-to-point and host transfers move
  /// the buffer once over their link.
  double getCollectiveSeconds(Collective collective, const GroupShape &group, double bytes,
                              std::string *formula = nullptr) const;
  /// The fraction of NVLink's bandwidth that `dispatcher`'s kernels reach (FamilyConstants); 1
  /// without a device preset.
  double getFlexNvlinkEfficiency(ir::ExpertDispatcher dispatcher) const;
  /// An expert group's dispatch or combine of `bytes` of routed rows per device (moe.topK rows
  /// per token, moe.experts experts spread evenly over the group) under `dispatcher`: the
  /// all-to-all of getCollectiveSeconds; for deepep and hybridep, each token sent once to each
  /// rank holding one of its experts (getHoldersReachedPerToken of the group's ranks), every such
  /// row but the sender's (or forwarder's) own over NVLink at the backend's efficiency
  /// (getFlexNvlinkEfficiency), and across nodes each token once to each other node holding one of
  /// its experts (getOtherHoldersPerToken of the nodes) over the NIC, with the all-to-all's
  /// latency: DeepEP the slower of the two stages, HybridEP their sum (as the backends' own
  /// benchmarks measured them).
  double getExpertExchangeSeconds(ir::ExpertDispatcher dispatcher, const GroupShape &group,
                                  double bytes, const ir::MoeConfig &moe,
                                  std::string *formula = nullptr) const;
  /// A pipeline send of `bytes` inside a node or across nodes.
  double getPointToPointSeconds(double bytes, bool interNode, std::string *formula = nullptr) const;
  /// A transfer of `bytes` over the host link (or NVMe with `nvme`).
  double getHostSeconds(double bytes, bool nvme = false, std::string *formula = nullptr) const;

private:
  double busBandwidth(const GroupShape &group, bool ring, std::string *formula) const;
  /// A collective's latency: NCCL's base and `steps` hops, `interSteps` of them between nodes.
  double getRingLatency(double steps, double interSteps) const;

  const ir::Cluster &cluster;
  const FamilyConstants *family = nullptr;
  GemmEfficiency gemmEfficiency;
  /// kTrainingKernelEfficiency and kGemmTileOverheadK, or the cluster's fitted replacements.
  double kernelEfficiency = kTrainingKernelEfficiency;
  double tileOverheadK = kGemmTileOverheadK;
  ir::Precision precision;
  double peak = 0;
  unsigned elementBytes = 2;
  /// getWeightGradientResultBytes.
  double weightGradientResultBytes = 2;
  bool shapes = false;
};

/// A number in a formula of `--explain`: exact integers as written, others with 4 significant
/// digits.
std::string formatFormulaNumber(double value);
/// A duration in a formula of `--explain`: `1.23 ms`, `45.6 us`, `2.00 s`.
std::string formatFormulaSeconds(double value);

} // namespace placec::cost

#endif // PLACEC_PASSES_COSTMODEL_H
