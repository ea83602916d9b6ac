// The StepPlan: what one training step of a run does on each pipeline stage, in order — the
// gathers, computes, frees, reductions, optimizer updates, host transfers and pipeline
// sends/receives that the placement implies. The analyses walk it, and the C++ backend emits it,
// so what the report predicts is what the generated program does (ARCHITECTURE.md, decision 1).
#ifndef PLACEC_PASSES_STEPPLAN_H
#define PLACEC_PASSES_STEPPLAN_H

#include "placec/ir/IR.h"
#include "placec/passes/CostModel.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace placec::plan {

/// Element types of the buffers the plan moves. The block-scaled ones carry their scales:
/// MXFP8, one E4M3 byte and a 32nd of an E8M0 scale an element (ir::kMxfp8BytesPerElement);
/// NVFP4, a 4-bit E2M1 value and a 16th of an E4M3 scale (ir::kNvfp4BytesPerElement). FP4 is
/// the packed E2M1 values alone, half a byte an element (getParamGatherType).
enum class DType { BF16, FP16, FP32, FP8, MXFP8, NVFP4, FP4 };
llvm::StringRef toString(DType dtype);
/// Bytes per element, fractional for the block-scaled types.
double getSize(DType dtype);
/// The type of one quantized copy of a product's operand under `scaling`, as Transformer Engine
/// all-gathers it: the data and its scales (transformer_engine/pytorch/distributed.py,
/// _all_gather_fp8, _all_gather_mxfp8 and _all_gather_nvfp4 gather both).
DType getQuantizedType(ir::Fp8Scaling scaling);
/// The type the parameters are all-gathered in, `paramType` (the plan's) but for:
/// - `gather = fp8`, FP8;
/// - NVFP4 parameters (`mixed(fp4, params = fp4)`, Megatron-Core's --fp4-param-gather), the
///   packed E2M1 values alone (FP4): Megatron-Core's parameter buffer holds them packed, half a
///   byte a parameter (megatron/core/distributed/param_and_grad_buffer.py), and Transformer
///   Engine's quantize_master_weights agrees the 16×16 blocks' scales by an all-reduce of their
///   amaxes before the gather (getNvfp4AmaxElements), and post_all_gather_processing transposes
///   the column-wise copy after it (transformer_engine/pytorch/tensor/utils.py).
DType getParamGatherType(DType paramType, bool fp8Gather, bool fp8Params, ir::Fp8Scaling scaling);
/// The type a unit's parameters are all-gathered in: `gatherType` (getParamGatherType) where
/// quantized products read them (cost::quantizesParams), their own `paramType` otherwise (the
/// embedding and the output layer stay BF16 under `gather = fp8` and `params = fp8 | fp4`).
DType getUnitGatherType(DType gatherType, DType paramType, cost::UnitKind unit);
/// The fp32 amaxes of `params` NVFP4 parameters' 16×16 blocks, one a block, that Transformer
/// Engine's _cast_master_weights_to_nvfp4_2d all-reduces (max) over the distributed optimizer's
/// group before the parameters' all-gather: the packed amaxes of every weight the group updates,
/// whole on each rank (transformer_engine/pytorch/tensor/utils.py; Megatron-Core calls it once per
/// step and optimizer, distrib_optimizer.py, _copy_main_params_to_model_params). Each weight's
/// blocks are ⌈rows/16⌉·⌈columns/16⌉, counted here as ⌈params/256⌉ of a unit.
int64_t getNvfp4AmaxElements(int64_t params);

/// Where in the step an op runs.
enum class Phase {
  Forward,  ///< In the forward of a micro-batch.
  Backward, ///< In the backward of a micro-batch (recomputation included).
  Step,     ///< Once per step, after the last micro-batch's backward.
};
llvm::StringRef toString(Phase phase);

enum class OpKind {
  AllGather,       ///< Collective: each rank contributes 1/n, all receive the whole buffer.
  ReduceScatter,   ///< Collective: the sum of the whole buffer, each rank keeps 1/n.
  AllReduce,       ///< Collective: the sum of the whole buffer on every rank.
  AllToAll,        ///< Collective: each rank sends 1/n of its buffer to every rank.
  RingStep,        ///< Each rank sends its buffer to the next rank of the group, receives the
                   ///< previous one's (context parallelism's ring of key/value blocks).
  Send,            ///< Pipeline: activations (forward) or their gradients (backward) to a stage.
  Recv,            ///< Pipeline: the matching receive.
  Compute,         ///< Forward, backward or recomputation of a unit.
  Free,            ///< Releases a transient buffer (gathered parameters).
  OptimizerUpdate, ///< The optimizer step on the parameters a rank owns.
  HostToDevice,    ///< Transfer over the host link.
  DeviceToHost,    ///< Transfer over the host link.
};
llvm::StringRef toString(OpKind kind);
bool isCollective(OpKind kind);

/// The compute an Op of kind Compute performs.
enum class ComputeKind { Forward, Backward, Recompute };
llvm::StringRef toString(ComputeKind kind);

/// A collective's mesh axes, outermost first: inline for up to four (a plan has thousands of ops,
/// and a search lowers a plan for each candidate).
using AxisList = llvm::SmallVector<unsigned, 4>;

/// One step of the plan.
struct Op {
  Op() = default;
  Op(const Op &) = default;
  Op &operator=(const Op &) = default;
  // Moved, not copied, when a vector of ops grows: AxisList's move is not declared noexcept, and
  // copying every op at each growth took a sixth of a DeepSeek-V3-sized search's time.
  Op(Op &&) noexcept = default;
  Op &operator=(Op &&) noexcept = default;

  OpKind kind = OpKind::Compute;
  Phase phase = Phase::Forward;
  /// The state the op moves or changes; Activations for tensor-parallel and pipeline traffic.
  ir::State state = ir::State::Params;
  /// Index into StepPlan::units; -1 for an op on the whole stage (a bucketed reduction).
  int unit = -1;
  /// Collectives: the mesh axes of the group, outermost first (the group is their product).
  AxisList axes;
  /// Collectives: the size of the collective's full buffer in elements, per device (all-gather
  /// output, reduce-scatter input, all-reduce buffer). Transfers, sends: the elements moved.
  /// Compute: unused. Free: the elements released.
  int64_t elements = 0;
  DType dtype = DType::BF16;
  /// True when the op runs once per micro-batch; false when once per step.
  bool perMicrobatch = true;
  /// Send/Recv: the other stage. An all-reduce over the layers axis: its group is this stage and
  /// `peerStage` only (the embedding's gradient with its copy's).
  int peerStage = -1;
  /// Tensor-parallel and other activation traffic: repeated by a recomputed forward, in the
  /// backward phase (part of the forward computation, not of the gradients').
  bool recomputed = false;
  /// Tensor-parallel traffic of the backward: the reduction of a column-parallel product's input
  /// gradient, which its weight gradient does not wait for (`async_tp = wgrad` runs it beside).
  bool inputGradient = false;
  /// Tensor-parallel traffic of the backward: sequence parallelism's all-gather of a
  /// column-parallel product's input again, for its weight gradient (`sp_inputs = regather`),
  /// which runs beside the product's input gradient.
  bool regather = false;
  /// An expert all-to-all: the combine (forward) or the combine's gradient (backward); false
  /// for the dispatch and its gradient (ExpertExchange).
  bool combine = false;
  /// Pipeline traffic: a stage boundary's send or receive, or the all-gather of the slices that
  /// `sends = scatter` received, which the next computation waits for.
  bool boundary = false;
  /// RingStep: how many identical steps, back to back, the op stands for (a ring's cp − 1 steps
  /// of one pass), each a call of its own; 1 for every other op. One op for the pass keeps a plan
  /// of long rings small: the search lowers thousands of candidates with cp up to 64.
  int64_t repeat = 1;
  /// Compute: what is computed, its work (GEMMs by shape, attention, memory-bound kernels) and
  /// FLOPs per device per micro-batch.
  ComputeKind compute = ComputeKind::Forward;
  /// Shared by the ops of the units of one class (cost::getUnitWorkClass); null for the other
  /// kinds of op (getWork reads it as empty).
  std::shared_ptr<const cost::Work> work;
  double flops = 0;
  /// Why the op is there, in the terms of the placement: "params gather(dp) before use".
  std::string reason;

  /// The compute op's work; empty for the other kinds.
  const cost::Work &getWork() const {
    static const cost::Work none;
    return work ? *work : none;
  }
};

/// A unit of the model the plan moves as one: the embeddings, one transformer block or mlp
/// layer, the head (final norm and output layer), or the whole of an abstract model.
struct Unit {
  std::string name;
  cost::UnitKind kind = cost::UnitKind::Abstract;
  /// The layer index (ir::Tensor::layer) of the unit's tensors.
  int layer = 0;
  int stage = 0;
  /// The unit's parameters per device after the tensor-parallel split, before any batch-axis
  /// sharding.
  int64_t params = 0;
  /// The unit's parameters before any split.
  int64_t fullParams = 0;
  /// The head on a stage without the embedding: the copy of the word embedding that it holds
  /// (cost::getEmbeddingCopyParams), counted in `params`; its gradient is all-reduced with the
  /// embedding's at the step.
  int64_t embeddingCopy = 0;
  /// Parameters of tensors that tensor parallelism replicates inside the layers and the head
  /// (norms, row-parallel biases). Under sequence parallelism each tensor-parallel rank sees only
  /// its slice of the sequence, so their gradients must be summed over the tensor axes.
  int64_t sequenceParallelParams = 0;
  /// The routed experts of an MoE layer: a unit of parameters only (their compute is the
  /// layer's), split over the expert axes and placed by the expert placements.
  bool expert = false;
  /// A transformer block or mlp layer that the activation mode recomputes before its backward
  /// (every one under `recompute`, `recompute(selective)` and `recompute(op)`; the first n of
  /// each chunk under `recompute(layers = n)`); false under `keep`.
  bool recomputed = false;
};

/// What one pipeline stage does in a step. Without a pipeline there is one stage.
struct StagePlan {
  int stage = 0;
  std::vector<unsigned> units; ///< Indices into StepPlan::units, in model order.
  std::vector<Op> forward;     ///< One micro-batch's forward, in order.
  std::vector<Op> backward;    ///< One micro-batch's backward, in order.
  std::vector<Op> step;        ///< After the last micro-batch, in order.
};

class StepPlan {
public:
  const ir::Run *run = nullptr;
  std::vector<Unit> units;
  std::vector<StagePlan> stages;
  /// Micro-batches per step (per batch replica).
  int64_t microbatches = 1;
  ir::Schedule schedule = ir::Schedule::OneFOneB;
  int64_t chunks = 1;
  /// Interleaving's micro-batch group (ir::Pipeline::group; 0: the stages).
  int64_t group = 0;
  DType paramType = DType::BF16;
  /// The type parameters are all-gathered in (FP8 under mixed(fp8, gather = fp8)).
  DType gatherType = DType::BF16;
  DType gradType = DType::BF16;
  DType activationType = DType::BF16;
  /// The type of what crosses a pipeline stage boundary, the residual stream: the activations',
  /// or FP32 under autocast over fp32 modules (cost::getStreamBytes).
  DType boundaryType = DType::BF16;
  /// The backward gathers the column-parallel products' inputs again (regathersInputs).
  bool regather = false;
};

/// How a run's model is split for the collectives inside a unit.
struct UnitLayout {
  int64_t microBatch = 1;
  int64_t tensor = 1;
  bool sequenceParallel = false;
  int64_t context = 1;
  ir::ContextMethod contextMethod = ir::ContextMethod::Ring;
  int64_t expert = 1;
  /// `expert_tensor = fold` with a tensor degree above 1 (ir::Strategy::foldsExpertTensor): the
  /// MoE layers' routed experts whole, their dispatch and combine over the expert and tensor
  /// axes, each tensor rank routing its own sequence shard.
  bool expertFold = false;
  /// `expert_context = fold` with a sequence degree above 1 (ir::Strategy::foldsExpertContext):
  /// the MoE layers' dispatch and combine over the expert and sequence axes, E/(ep·cp) experts a
  /// device.
  bool expertContextFold = false;
  /// The devices that see different tokens of the batch: batch × sequence × expert degrees.
  int64_t samples = 1;
  /// The backward gathers the column-parallel products' inputs again (regathersInputs).
  bool regather = false;
  /// The run's kernels: under `eager` (as with `kv_repeat = true`) the attention receives, and
  /// context parallelism exchanges, K and V repeated to every head (cost::getAttentionKvHeads).
  ir::KernelMode kernels = ir::KernelMode::Fused;
  /// `mixed(fp8)` and `mixed(fp4)`: the sequence-parallel gathers of the quantized products'
  /// inputs move the quantized copy (UnitCollective::fp8), of type `fp8Type`
  /// (getQuantizedType).
  bool fp8 = false;
  DType fp8Type = DType::FP8;
  /// `async_tp = true`: Transformer Engine's userbuffers move the tensor-parallel collectives,
  /// one quantized copy of each gathered gradient (getGradientGatherCopies).
  bool userbuffers = false;
  /// Under ir::ActivationMode::RecomputeModules, the ir::RecomputeModule bits
  /// (getRecomputedCollectives).
  unsigned recomputeModules = 0;
};

/// The quantized copies that the backward's sequence-parallel all-gather of a row-parallel
/// product's output gradient moves under `mixed(fp8)` and `mixed(fp4)`: the gradient is
/// quantized before the gather (Transformer Engine's grad_output_preprocess in
/// transformer_engine/pytorch/module/base.py, since its 1.x releases; torchao's
/// Float8RowwiseParallel casts it to float8 before the redistribute's backward all-gather). One
/// with one scale per tensor, whose transpose is taken after the gather; two under MXFP8 and
/// NVFP4, whose row-wise copy (for the input gradient) and column-wise copy (for the weight
/// gradient) are quantized along different blocks and both gathered, but one under userbuffers,
/// which gather the row-wise copy alone. `fp8Type` and `userbuffers` as in UnitLayout.
int64_t getGradientGatherCopies(DType fp8Type, bool userbuffers);

/// Whether the backward all-gathers the inputs of the column-parallel products again for their
/// weight gradients (Korthikanti et al. 2022, §4.2.2): under sequence parallelism with a tensor
/// axis where the products keep their sequence shard (`sp_inputs = regather`), but not under
/// `recompute(op)`, whose recomputation gathers them (getRecomputedCollectives).
bool regathersInputs(const ir::Model &model, int64_t tensor, bool sequenceParallel,
                     ir::SequenceParallelInputs inputs, ir::ActivationMode mode);

/// One collective inside a unit's pass: its kind, the axes it runs over (the tensor or the
/// sequence axes), the elements of its buffer (as Op::elements) and why it is there.
struct UnitCollective {
  OpKind kind = OpKind::AllReduce;
  ir::AxisKind over = ir::AxisKind::Tensor;
  int64_t elements = 0;
  const char *what = "";
  /// The backward's reduction of a column-parallel product's input gradient (Op::inputGradient).
  bool inputGradient = false;
  /// The backward's second gather of a column-parallel product's input (Op::regather).
  bool regather = false;
  /// Moved quantized (UnitLayout::fp8Type: FP8, MXFP8 or NVFP4 with its scales): under
  /// `mixed(fp8)` and `mixed(fp4)` the backward's sequence-parallel all-gathers of the
  /// row-parallel products' output gradients, the attention's output projection's and a dense
  /// layer's MLP's (getGradientGatherCopies), and the all-gather of a transformer layer's input to
  /// its QKV product, and to its MLP's in a dense layer, forward, recomputed and again for the
  /// weight gradient. Transformer Engine's LayerNormLinear writes the norm's output in FP8 and
  /// gathers that (transformer_engine/pytorch/module/ layernorm_linear.py, gather_along_first_dim
  /// of ln_out), and torchao's float8 tensor parallelism casts the module's input before its
  /// all-gather (PrepareFloat8ModuleInput, Float8ColwiseParallel). The output layer stays in BF16,
  /// and an MoE layer's experts take the dispatcher's BF16 rows.
  bool fp8 = false;
  /// Op::combine: an expert all-to-all of the combine or its gradient.
  bool combine = false;
  /// Op::repeat: the identical ring steps that follow each other.
  int64_t repeat = 1;
  /// Over the axes that split one data-parallel rank's micro-batch, its sequence axes and, under
  /// `expert_tensor = fold`, its tensor axes, rather than all the axes `over` names: the
  /// load-balancing statistics under `aux_loss_scope = local` or `sequence`.
  bool local = false;
};

/// The collectives inside one pass of a unit, in the order the math runs them: the
/// tensor-parallel ones of getTensorCollectives, and those of context parallelism around a
/// layer's attention core. Ring (Liu et al. 2023, "Ring Attention"; Megatron-Core): the forward
/// passes each rank's key/value block around the ring in cp − 1 steps beside the blockwise
/// attention; the backward passes the blocks again with their accumulating gradients (cp − 1
/// steps of K, V, dK, dV) and sends the gradients home (one step of dK, dV). All-gather
/// (Llama 3's): the forward all-gathers K and V; the backward all-gathers them again and
/// reduce-scatters dK, dV. All-to-all (Jacobs et al. 2023, "DeepSpeed Ulysses"): Q, K, V go from
/// sequence-split to head-split before the attention and the output back after; the backward
/// the reverse. An MoE layer with a load-balancing loss over several batch-like devices first
/// all-reduces its 2·E routing statistics (each expert's routed fraction and mean probability)
/// over them, so that the loss is the one of the whole micro-batch (`over` Batch: every batch,
/// sequence and expert axis, and the tensor axes under `expert_tensor = fold`, whose tensor ranks
/// route their own sequence shards); with top_k > 1 under tensor parallelism the backward sums the
/// combine weights' gradients, b·s/cp·k values, over the tensor axes (each rank holds a slice of
/// every expert's output). An MoE layer over expert axes (Lepikhin et al. 2021, GShard §2.2): the
/// forward dispatches the routed rows to their experts' devices by an all-to-all and combines the
/// experts' outputs back by another, between the MLP block's sequence-parallel gather and reduce
/// (or before its all-reduce); the backward sends the gradients the same two ways.
std::vector<UnitCollective> getUnitCollectives(const ir::Model &model, cost::UnitKind unit,
                                               int64_t layer, bool forwardPass,
                                               const UnitLayout &layout);

/// The collectives a recomputation before the backward repeats: the whole forward's under full
/// recomputation; under `recompute(op)` the tensor-parallel ones that produce a tensor it
/// recomputes (the sequence-parallel all-gathers before the QKV and MLP products, or without
/// sequence parallelism the attention block's all-reduce; the reduce-scatters' outputs are kept
/// and the attention's exchanges are not repeated); none for selective recomputation.
std::vector<UnitCollective> getRecomputedCollectives(const ir::Model &model, cost::UnitKind unit,
                                                     int64_t layer, ir::ActivationMode mode,
                                                     const UnitLayout &layout);

/// Where a pipeline puts the layers: the model chunk (0 … stages·chunks − 1) of each layer, the
/// stage of each chunk (chunk c on stage c mod p; V-shaped schedules put chunk c ≥ p on stage
/// 2p − 1 − c), and the layers of each stage.
struct PipelineLayout {
  std::vector<int> chunkOfLayer;
  std::vector<int> stageOfChunk;
  std::vector<int64_t> layersOfStage;
  /// Each layer's position in its chunk (0 for the chunk's first layer).
  std::vector<int64_t> layerInChunk;

  /// True when `layer` is recomputed under `recompute(layers = n)` with `recomputeLayers` = n:
  /// the first n layers of every chunk are (Megatron-LM's block method, which checkpoints the
  /// first n layers of each model chunk's transformer block); every layer when n is 0.
  bool isRecomputedLayer(int64_t layer, int64_t recomputeLayers) const;
};
PipelineLayout getPipelineLayout(int64_t layers, int64_t stages, const ir::Pipeline *pipeline);

/// The collectives over the tensor axes inside one pass of a unit, in order (Korthikanti et al.
/// 2022, §4.2.2): a transformer layer all-reduces its partial sums twice per pass (after the
/// attention and MLP row-parallel products in the forward, at the column-parallel inputs in the
/// backward); with sequence parallelism each all-reduce becomes an all-gather into the tensor-
/// parallel region and a reduce-scatter out of it. The vocabulary-parallel embedding reduces its
/// output in the forward (a reduce-scatter to the sequence-split layout under sequence
/// parallelism, whose backward is an all-gather); the head's input is replicated (all-gathered
/// under sequence parallelism) and its gradient reduced in the backward. An mlp's column/row
/// pair reduces once per direction: after the row layer in the forward, at the column layer's
/// input in the backward. The vocabulary-parallel cross-entropy's all-gather is not listed here.
std::vector<OpKind> getTensorCollectives(const ir::Model &model, cost::UnitKind unit, int64_t layer,
                                         bool forwardPass, bool sequenceParallel);

struct LowerOptions {
  /// Write each op's `reason`. The analyses never read it; the verifier and the search, which
  /// print no plan, lower without it.
  bool reasons = true;
};

/// Lowers a verified run to its step plan.
std::unique_ptr<StepPlan> lowerRun(const ir::Run &run, const LowerOptions &options = {});

/// Prints the plan (`placec --emit=plan`), documented in docs/plan.md.
void printPlan(const StepPlan &plan, llvm::raw_ostream &os);

} // namespace placec::plan

#endif // PLACEC_PASSES_STEPPLAN_H
