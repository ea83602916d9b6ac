// The IR's enum spellings, mesh geometry (strides, degrees, rank groups, intra-node classes),
// bytes per state, and program lookups.
#include "placec/ir/IR.h"

#include "llvm/Support/ErrorHandling.h"

#include <limits>

using namespace llvm;

namespace placec::ir {

/// a · b, saturating at the int64 limits instead of overflowing.
static int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_mul_overflow(a, b, &result))
    return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                              : std::numeric_limits<int64_t>::max();
  return result;
}

//===----------------------------------------------------------------------===//
// Spellings
//===----------------------------------------------------------------------===//

StringRef toString(TensorSplit split) {
  switch (split) {
  case TensorSplit::Column:
    return "column";
  case TensorSplit::Row:
    return "row";
  case TensorSplit::Vocabulary:
    return "vocabulary";
  case TensorSplit::Replicated:
    return "replicated";
  }
  llvm_unreachable("unknown TensorSplit");
}

StringRef toString(ModelKind kind) {
  switch (kind) {
  case ModelKind::Transformer:
    return "transformer";
  case ModelKind::Mlp:
    return "mlp";
  case ModelKind::Abstract:
    return "abstract";
  }
  llvm_unreachable("unknown ModelKind");
}

StringRef toString(MlpActivation activation) {
  switch (activation) {
  case MlpActivation::Gelu:
    return "gelu";
  case MlpActivation::Swiglu:
    return "swiglu";
  case MlpActivation::Relu2:
    return "relu2";
  }
  llvm_unreachable("unknown MlpActivation");
}

StringRef toString(NormKind norm) {
  switch (norm) {
  case NormKind::LayerNorm:
    return "layernorm";
  case NormKind::RmsNorm:
    return "rmsnorm";
  }
  llvm_unreachable("unknown NormKind");
}

StringRef toString(Projections projections) {
  switch (projections) {
  case Projections::Fused:
    return "fused";
  case Projections::Separate:
    return "separate";
  }
  llvm_unreachable("unknown Projections");
}

StringRef toString(PositionKind positions) {
  switch (positions) {
  case PositionKind::Learned:
    return "learned";
  case PositionKind::Rope:
    return "rope";
  }
  llvm_unreachable("unknown PositionKind");
}

void resolveExpertPlacements(Strategy &strategy) {
  // The routed experts' states: split over the expert axes, by tensor kind over the tensor axes
  // and by stage over the layers axis; on the other batch axes as written, else as the dense
  // state is placed there.
  for (State state : kAllStates) {
    const StatePlacement &dense = strategy.getPlacement(state);
    StatePlacement &placement = strategy.getExpertPlacement(state);
    placement.axes.resize(strategy.mesh.axes.size());
    placement.tier = dense.tier;
    for (size_t i = 0; i < strategy.mesh.axes.size(); ++i) {
      AxisPlacement &slot = placement.axes[i];
      if (slot.isExplicit)
        continue;
      if (strategy.mesh.axes[i].kind == AxisKind::Expert && state != State::Activations) {
        slot.mode = PlacementMode::Sharded;
        continue;
      }
      slot.mode = i < dense.axes.size() ? dense.axes[i].mode : PlacementMode::Replicated;
      slot.keepAfterForward = i < dense.axes.size() && dense.axes[i].keepAfterForward;
    }
  }
}

StringRef toString(RouterKind router) {
  return router == RouterKind::Softmax ? "softmax" : "sigmoid";
}

StringRef toString(AttentionKind attention) {
  switch (attention) {
  case AttentionKind::Flash:
    return "flash";
  case AttentionKind::Flash3:
    return "flash3";
  case AttentionKind::Cudnn:
    return "cudnn";
  case AttentionKind::Materialized:
    return "materialized";
  }
  llvm_unreachable("unknown AttentionKind");
}

StringRef toString(DataParallelOverlap overlap) {
  switch (overlap) {
  case DataParallelOverlap::Grads:
    return "grads";
  case DataParallelOverlap::All:
    return "all";
  case DataParallelOverlap::None:
    return "none";
  }
  llvm_unreachable("unknown DataParallelOverlap");
}

StringRef toString(ExpertOverlap overlap) {
  return overlap == ExpertOverlap::On ? "true" : "false";
}

StringRef toString(SequenceParallelInputs inputs) {
  switch (inputs) {
  case SequenceParallelInputs::Regather:
    return "regather";
  case SequenceParallelInputs::Keep:
    return "keep";
  }
  llvm_unreachable("unknown SequenceParallelInputs");
}

StringRef toString(AsyncTensorParallel mode) {
  switch (mode) {
  case AsyncTensorParallel::Off:
    return "false";
  case AsyncTensorParallel::All:
    return "true";
  case AsyncTensorParallel::Forward:
    return "forward";
  case AsyncTensorParallel::WeightGradient:
    return "wgrad";
  }
  llvm_unreachable("unknown AsyncTensorParallel");
}

StringRef toString(ContextMethod method) {
  switch (method) {
  case ContextMethod::Ring:
    return "ring";
  case ContextMethod::AllGather:
    return "all_gather";
  case ContextMethod::AllToAll:
    return "all_to_all";
  }
  llvm_unreachable("unknown ContextMethod");
}

StringRef toString(AxisKind kind) {
  switch (kind) {
  case AxisKind::Batch:
    return "batch";
  case AxisKind::Tensor:
    return "tensor";
  case AxisKind::Layers:
    return "layers";
  case AxisKind::Sequence:
    return "sequence";
  case AxisKind::Expert:
    return "expert";
  }
  llvm_unreachable("unknown AxisKind");
}

StringRef toString(State state) {
  switch (state) {
  case State::Params:
    return "params";
  case State::Grads:
    return "grads";
  case State::Optimizer:
    return "optimizer";
  case State::Activations:
    return "activations";
  }
  llvm_unreachable("unknown State");
}

StringRef toString(PlacementMode mode) {
  switch (mode) {
  case PlacementMode::Replicated:
    return "replicate";
  case PlacementMode::Sharded:
    return "shard";
  case PlacementMode::ShardedWithGather:
    return "gather";
  case PlacementMode::TensorSplit:
    return "tensor-split";
  case PlacementMode::StageSplit:
    return "stage-split";
  case PlacementMode::BatchSplit:
    return "batch-split";
  case PlacementMode::SequenceSplit:
    return "sequence-split";
  }
  llvm_unreachable("unknown PlacementMode");
}

StringRef toString(Tier tier) {
  switch (tier) {
  case Tier::Device:
    return "device";
  case Tier::Host:
    return "host";
  case Tier::Nvme:
    return "nvme";
  }
  llvm_unreachable("unknown Tier");
}

StringRef toString(ActivationMode mode) {
  switch (mode) {
  case ActivationMode::Keep:
    return "keep";
  case ActivationMode::RecomputeSelective:
    return "recompute(selective)";
  case ActivationMode::RecomputeFull:
    return "recompute";
  case ActivationMode::RecomputeOps:
    return "recompute(op)";
  case ActivationMode::RecomputeAttention:
    return "recompute(attention)";
  case ActivationMode::RecomputeModules:
    return "recompute(modules)";
  }
  llvm_unreachable("unknown ActivationMode");
}

ArrayRef<std::pair<RecomputeModule, StringRef>> getRecomputeModuleNames() {
  static const std::pair<RecomputeModule, StringRef> names[] = {
      {kRecomputeCoreAttention, "core_attn"},
      {kRecomputeMoeActivation, "moe_act"},
      {kRecomputeLayernorm, "layernorm"},
      {kRecomputeMlaUpProjection, "mla_up_proj"},
      {kRecomputeMlp, "mlp"}};
  return names;
}

std::optional<RecomputeModule> findRecomputeModule(StringRef name) {
  for (const auto &[module, moduleName] : getRecomputeModuleNames())
    if (moduleName == name)
      return module;
  return std::nullopt;
}

std::string getActivationModeText(ActivationMode mode, int64_t recomputeLayers,
                                  unsigned recomputeModules) {
  if (mode == ActivationMode::RecomputeFull && recomputeLayers > 0)
    return "recompute(layers = " + std::to_string(recomputeLayers) + ")";
  if (mode == ActivationMode::RecomputeModules) {
    std::string text;
    for (const auto &[module, name] : getRecomputeModuleNames())
      if (recomputeModules & module)
        text += (text.empty() ? "" : ", ") + name.str();
    return "recompute(" + text + ")";
  }
  return toString(mode).str();
}

StringRef toString(Schedule schedule) {
  switch (schedule) {
  case Schedule::OneFOneB:
    return "1f1b";
  case Schedule::GPipe:
    return "gpipe";
  case Schedule::Interleaved:
    return "interleaved";
  case Schedule::ZeroBubble:
    return "zero_bubble";
  case Schedule::ZeroBubbleV:
    return "zbv";
  case Schedule::DualPipe:
    return "dualpipe";
  case Schedule::DualPipeV:
    return "dualpipev";
  }
  llvm_unreachable("unknown Schedule");
}

StringRef toString(Precision precision) {
  switch (precision) {
  case Precision::MixedBF16:
    return "mixed(bf16)";
  case Precision::MixedFP16:
    return "mixed(fp16)";
  case Precision::FP32:
    return "fp32";
  case Precision::MixedFP8:
    return "mixed(fp8)";
  }
  llvm_unreachable("unknown Precision");
}

StringRef toString(Fp8Scaling scaling) {
  switch (scaling) {
  case Fp8Scaling::Tensor:
    return "tensor";
  case Fp8Scaling::Current:
    return "current";
  case Fp8Scaling::Mx:
    return "mx";
  }
  llvm_unreachable("unknown Fp8Scaling");
}

StringRef toString(OptimizerKind optimizer) {
  switch (optimizer) {
  case OptimizerKind::Adam:
    return "adam";
  case OptimizerKind::Sgd:
    return "sgd";
  case OptimizerKind::SgdMomentum:
    return "sgd(momentum = true)";
  }
  llvm_unreachable("unknown OptimizerKind");
}

StringRef toString(CrossEntropyKind kind) {
  switch (kind) {
  case CrossEntropyKind::Fused:
    return "fused";
  case CrossEntropyKind::Unfused:
    return "unfused";
  case CrossEntropyKind::VocabParallel:
    return "vocab_parallel";
  case CrossEntropyKind::FusedVocabParallel:
    return "fused_vocab_parallel";
  case CrossEntropyKind::Chunked:
    return "chunked";
  }
  llvm_unreachable("unknown CrossEntropyKind");
}

StringRef toString(KernelMode mode) {
  switch (mode) {
  case KernelMode::Fused:
    return "fused";
  case KernelMode::Eager:
    return "eager";
  }
  llvm_unreachable("unknown KernelMode");
}

StringRef toString(ParamGather gather) {
  switch (gather) {
  case ParamGather::InPlace:
    return "in_place";
  case ParamGather::CopyOut:
    return "copy_out";
  }
  llvm_unreachable("unknown ParamGather");
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

int64_t Mesh::getNumDevices() const {
  int64_t devices = 1;
  for (const Axis &axis : axes)
    devices = saturatingMul(devices, axis.size);
  return devices;
}

int Mesh::findAxis(StringRef name) const {
  for (unsigned i = 0, e = axes.size(); i != e; ++i)
    if (axes[i].name == name)
      return static_cast<int>(i);
  return -1;
}

int64_t Mesh::getStride(unsigned axis) const {
  assert(axis < axes.size() && "axis index out of range");
  int64_t stride = 1;
  for (unsigned i = axis + 1, e = axes.size(); i < e; ++i)
    stride = saturatingMul(stride, axes[i].size);
  return stride;
}

int64_t Mesh::getDegree(AxisKind kind) const {
  int64_t degree = 1;
  for (const Axis &axis : axes)
    if (axis.kind == kind)
      degree = saturatingMul(degree, axis.size);
  return degree;
}

int64_t Mesh::getNumGroups(unsigned axis) const {
  assert(axis < axes.size() && "axis index out of range");
  int64_t size = axes[axis].size;
  if (size <= 0)
    return 0;
  return getNumDevices() / size;
}

std::vector<int64_t> Mesh::getGroup(unsigned axis, int64_t index) const {
  assert(axis < axes.size() && "axis index out of range");
  int64_t size = axes[axis].size;
  int64_t stride = getStride(axis);
  // Group `index` fixes the outer coordinates to index / stride and the inner ones to
  // index % stride; its ranks step by `stride` from there. Groups come in order of first rank.
  int64_t first = (index / stride) * stride * size + index % stride;
  std::vector<int64_t> group;
  group.reserve(size > 0 ? static_cast<size_t>(size) : 0);
  for (int64_t k = 0; k < size; ++k)
    group.push_back(first + k * stride);
  return group;
}

std::vector<std::vector<int64_t>> Mesh::getGroups(unsigned axis) const {
  std::vector<std::vector<int64_t>> groups;
  int64_t numGroups = getNumGroups(axis);
  groups.reserve(static_cast<size_t>(numGroups));
  for (int64_t g = 0; g < numGroups; ++g)
    groups.push_back(getGroup(axis, g));
  return groups;
}

// The groups of an axis of size n and stride s tile each block [q·s·n, (q+1)·s·n) of ranks, and a
// node boundary strictly inside a block always cuts some group (with n > 1, either a group holds
// both the rank just after the boundary and the rank s before it, or, when the boundary is less
// than s into the block, the group starting at the block's first rank jumps over it). So every
// group is intra-node iff no multiple of devicesPerNode below the device count falls strictly
// inside a block: iff the mesh fits in one node or devicesPerNode is a multiple of s·n.
bool Mesh::isIntraNode(unsigned axis, int64_t devicesPerNode) const {
  assert(axis < axes.size() && "axis index out of range");
  if (axes[axis].size <= 1)
    return true;
  if (devicesPerNode <= 0)
    return false;
  if (getNumDevices() <= devicesPerNode)
    return true;
  int64_t span = saturatingMul(getStride(axis), axes[axis].size);
  return span > 0 && devicesPerNode % span == 0;
}

int64_t StatePlacement::getDegree(const Mesh &mesh, PlacementMode mode) const {
  int64_t degree = 1;
  for (size_t i = 0, e = std::min(axes.size(), mesh.axes.size()); i != e; ++i)
    if (axes[i].mode == mode)
      degree = saturatingMul(degree, mesh.axes[i].size);
  return degree;
}

//===----------------------------------------------------------------------===//
// Runs and programs
//===----------------------------------------------------------------------===//

std::string spellOptimizer(OptimizerKind optimizer, OptimizerStates states) {
  if (optimizer != OptimizerKind::Adam || states.isDefault())
    return toString(optimizer).str();
  std::string args;
  if (states.momentBytes != 4)
    args = "moments = bf16";
  if (!states.master)
    args += std::string(args.empty() ? "" : ", ") + "master = none";
  return "adam(" + args + ")";
}

StateBytes getStateBytes(Precision precision, OptimizerKind optimizer, bool fp32Grads,
                         bool fp32Params, Fp8Scaling scaling, OptimizerStates states) {
  bool mixed = precision != Precision::FP32;
  // The parameters are the optimizer's fp32 weights under fp32 and under `params = fp32`;
  // otherwise mixed precision keeps an fp32 master copy in the optimizer state.
  bool master = !mixed || fp32Params;
  unsigned weightBytes = master ? 4 : 2;
  // FP8 training keeps the BF16 weights and caches their FP8 cast (one byte each) from the first
  // micro-batch of a step to the last (Transformer Engine's weight cache). Over fp32 parameters
  // (PyTorch's float8 linears) each use casts them again: no cache. Under MXFP8 the cache holds
  // both of a weight's MXFP8 copies, along its rows (the forward's product) and along its columns
  // (the input gradient's), each with its scales (Transformer Engine's MXFP8Quantizer with both
  // usages).
  double fp8Cache = scaling == Fp8Scaling::Mx ? 2 * kMxfp8BytesPerElement : 1;
  double paramBytes =
      precision == Precision::MixedFP8 && !fp32Params ? weightBytes + fp8Cache : weightBytes;
  // `adam(master = none)`: no master copy; the step updates the 16-bit weights themselves.
  bool updatesParams = master || (optimizer == OptimizerKind::Adam && !states.master);
  unsigned masterBytes = updatesParams ? 0 : 4;
  unsigned moments = 0, momentBytes = 4;
  switch (optimizer) {
  case OptimizerKind::Adam:
    // Momentum and variance (fp32, or bf16 under `moments = bf16`), plus the master copy.
    moments = 2;
    momentBytes = states.momentBytes;
    break;
  case OptimizerKind::SgdMomentum:
    // fp32 momentum, plus the master copy.
    moments = 1;
    break;
  case OptimizerKind::Sgd:
    // Only the master copy.
    break;
  }
  unsigned optimizerBytes = moments * momentBytes + masterBytes;
  double gathered = fp32Params ? 2 : paramBytes;
  StateBytes bytes{paramBytes, fp32Grads ? 4 : weightBytes, optimizerBytes, updatesParams,
                   gathered};
  bytes.moments = moments;
  bytes.momentBytes = moments ? momentBytes : 0;
  return bytes;
}

std::string spellPrecision(Precision precision, bool fp8Gather, bool fp32Grads, bool fp32Params,
                           bool fp8Saved, Fp8Scaling scaling) {
  std::string text = toString(precision).str();
  bool fp8 = precision == Precision::MixedFP8;
  bool scaled = fp8 && scaling != Fp8Scaling::Tensor;
  if (precision == Precision::FP32 ||
      (!(fp8 && (fp8Gather || fp8Saved)) && !scaled && !fp32Grads && !fp32Params))
    return text;
  text.pop_back();
  if (scaled)
    text += ", scaling = " + toString(scaling).str();
  if (fp8 && fp8Gather)
    text += ", gather = fp8";
  if (fp8 && fp8Saved)
    text += ", saved = fp8";
  // `params = fp32` implies fp32 gradients: the canonical spelling leaves `grads = fp32` out.
  if (fp32Params)
    text += ", params = fp32";
  else if (fp32Grads)
    text += ", grads = fp32";
  return text + ")";
}

std::string spellPrecision(const Run &run) {
  return spellPrecision(run.precision, run.fp8Gather, run.fp32Grads, run.fp32Params, run.fp8Saved,
                        run.fp8Scaling);
}

unsigned getActivationBytes(Precision precision) { return precision == Precision::FP32 ? 4 : 2; }

template <typename T>
static const T *findByName(const std::vector<std::unique_ptr<T>> &decls, StringRef name) {
  for (const std::unique_ptr<T> &decl : decls)
    if (decl && decl->name == name)
      return decl.get();
  return nullptr;
}

const Model *Program::findModel(StringRef name) const { return findByName(models, name); }
const Cluster *Program::findCluster(StringRef name) const { return findByName(clusters, name); }
const Run *Program::findRun(StringRef name) const { return findByName(runs, name); }

} // namespace placec::ir
