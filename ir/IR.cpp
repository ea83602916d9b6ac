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
  case PositionKind::Alibi:
    return "alibi";
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
      // Folded sequence axes split the experts like the expert axes.
      AxisKind kind = strategy.mesh.axes[i].kind;
      if ((kind == AxisKind::Expert ||
           (kind == AxisKind::Sequence && strategy.foldsExpertContext())) &&
          state != State::Activations) {
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

StringRef toString(AuxLossScope scope) {
  switch (scope) {
  case AuxLossScope::Global:
    return "global";
  case AuxLossScope::Local:
    return "local";
  case AuxLossScope::Sequence:
    return "sequence";
  }
  return "global";
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

StringRef toString(GradReduce reduce) {
  switch (reduce) {
  case GradReduce::ReduceScatter:
    return "reduce_scatter";
  case GradReduce::AllReduce:
    return "all_reduce";
  }
  llvm_unreachable("unknown GradReduce");
}

StringRef toString(ExpertOverlap overlap) {
  return overlap == ExpertOverlap::On ? "true" : "false";
}

StringRef toString(ExpertTensor mode) {
  switch (mode) {
  case ExpertTensor::Split:
    return "split";
  case ExpertTensor::Fold:
    return "fold";
  }
  llvm_unreachable("unknown ExpertTensor");
}

StringRef toString(ExpertDispatcher dispatcher) {
  switch (dispatcher) {
  case ExpertDispatcher::AllToAll:
    return "alltoall";
  case ExpertDispatcher::DeepEP:
    return "deepep";
  case ExpertDispatcher::HybridEP:
    return "hybridep";
  }
  llvm_unreachable("unknown ExpertDispatcher");
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

//===----------------------------------------------------------------------===//
// Pipeline layouts
//===----------------------------------------------------------------------===//

int64_t PipelineLayoutSpec::getNumLayers() const {
  int64_t sum = 0;
  for (int64_t value : layers)
    sum += value;
  return sum;
}

int64_t PipelineLayoutSpec::getNumMtpLayers() const {
  int64_t sum = 0;
  for (int64_t value : mtpLayers)
    sum += value;
  return sum;
}

namespace {

/// One symbol of an expanded layout and the byte of the text it was written at.
struct LayoutSymbol {
  char symbol;
  size_t offset;
};

/// Expands Megatron-Core's layout text: `x*n` repeats the symbol before it, `(…)*n` the group.
/// Groups do not nest (Megatron-Core's expansion has no nesting either).
class LayoutExpander {
public:
  LayoutExpander(StringRef text, std::string &error, size_t &offset)
      : text(text), error(error), errorOffset(offset) {}

  bool expand(std::vector<LayoutSymbol> &out) {
    while (pos < text.size()) {
      char ch = text[pos];
      if (ch == ',') { // Cosmetic.
        ++pos;
        continue;
      }
      size_t start = pos;
      std::vector<LayoutSymbol> item;
      if (ch == '(') {
        ++pos;
        while (pos < text.size() && text[pos] != ')') {
          char inner = text[pos];
          if (inner == '(')
            return fail(pos, "groups in parentheses do not nest");
          if (inner == ',') {
            ++pos;
            continue;
          }
          if (!isSymbol(inner))
            return fail(pos, describeUnexpected(inner));
          std::vector<LayoutSymbol> one{{inner, pos}};
          ++pos;
          if (!repeat(one, item))
            return false;
        }
        if (pos >= text.size())
          return fail(start, "'(' is not closed");
        ++pos;
        if (pos >= text.size() || text[pos] != '*')
          return fail(start, "a group in parentheses needs a count: '(…)*n'");
        if (item.empty())
          return fail(start, "an empty group");
      } else if (ch == ')') {
        return fail(pos, "')' without '('");
      } else if (isSymbol(ch)) {
        item.push_back({ch, pos});
        ++pos;
      } else {
        return fail(pos, describeUnexpected(ch));
      }
      if (!repeat(item, out))
        return false;
    }
    return true;
  }

private:
  static bool isSymbol(char ch) {
    return ch == 'E' || ch == 't' || ch == 'm' || ch == 'L' || ch == '|';
  }

  static std::string describeUnexpected(char ch) {
    if (ch == '*')
      return "'*' needs a symbol or a group in parentheses before it";
    std::string shown(3, '\'');
    shown[1] = ch;
    return "unexpected " + shown +
           ": a layout is written with E (the embedding), t (a transformer layer), m (a "
           "multi-token prediction module), L (the output layer and the loss), '|' between "
           "virtual stages, 'x*n' and '(…)*n' for repeats, commas for legibility";
  }

  /// Appends `item` to `out` once, or n times after a following `*n`.
  bool repeat(const std::vector<LayoutSymbol> &item, std::vector<LayoutSymbol> &out) {
    int64_t count = 1;
    if (pos < text.size() && text[pos] == '*') {
      size_t star = pos++;
      size_t digits = pos;
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
        ++pos;
      if (pos == digits)
        return fail(star, "'*' needs a count after it");
      if (pos - digits > 6 || text.substr(digits, pos - digits).getAsInteger(10, count))
        return fail(digits, "the count is too large");
    }
    if (static_cast<int64_t>(out.size()) + count * static_cast<int64_t>(item.size()) > kLimit)
      return fail(item.empty() ? pos : item.front().offset,
                  "the layout expands to more than " + std::to_string(kLimit) + " symbols");
    for (int64_t i = 0; i < count; ++i)
      out.insert(out.end(), item.begin(), item.end());
    return true;
  }

  bool fail(size_t at, const std::string &message) {
    error = message;
    errorOffset = at;
    return false;
  }

  static constexpr int64_t kLimit = 1 << 20;
  StringRef text;
  std::string &error;
  size_t &errorOffset;
  size_t pos = 0;
};

} // namespace

std::optional<PipelineLayoutSpec> parsePipelineLayout(StringRef text, std::string &error,
                                                      size_t &offset) {
  std::vector<LayoutSymbol> symbols;
  if (!LayoutExpander(text, error, offset).expand(symbols))
    return std::nullopt;
  auto fail = [&](size_t at, std::string message) {
    error = std::move(message);
    offset = at;
    return std::nullopt;
  };
  if (symbols.empty())
    return fail(0, "an empty layout: write the virtual stages' symbols, as 'Et*4|(t*4|)*14tmL'");
  // Virtual stages with their symbols, and where each begins (its '|', or the text's start).
  std::vector<std::vector<LayoutSymbol>> stages(1);
  std::vector<size_t> starts = {0};
  for (const LayoutSymbol &symbol : symbols) {
    if (symbol.symbol == '|') {
      stages.emplace_back();
      starts.push_back(symbol.offset);
    } else {
      stages.back().push_back(symbol);
    }
  }
  const LayoutSymbol *embedding = nullptr, *loss = nullptr;
  for (const LayoutSymbol &symbol : symbols) {
    if (symbol.symbol == 'E') {
      if (embedding)
        return fail(symbol.offset, "a second E: the layout places the embedding once");
      embedding = &symbol;
    } else if (symbol.symbol == 'L') {
      if (loss)
        return fail(symbol.offset, "a second L: the layout places the loss once");
      loss = &symbol;
    }
  }
  if (!embedding)
    return fail(0, "the layout places no embedding: it begins with E");
  if (!loss)
    return fail(text.size(), "the layout places no loss: it ends with L");
  if (stages.front().empty() || stages.front().front().symbol != 'E')
    return fail(embedding->offset, "E must be the first symbol of the first virtual stage: "
                                   "placec places the embedding there");
  if (stages.back().empty() || stages.back().back().symbol != 'L')
    return fail(loss->offset, "L must be the last symbol of the last virtual stage: placec "
                              "places the output layer and the loss there");
  PipelineLayoutSpec layout;
  layout.text = text.str();
  for (size_t i = 0; i < stages.size(); ++i) {
    int64_t layers = 0, modules = 0;
    for (const LayoutSymbol &symbol : stages[i]) {
      if (symbol.symbol == 't') {
        if (modules > 0)
          return fail(symbol.offset, "a transformer layer after a multi-token prediction "
                                     "module: the modules follow every layer");
        ++layers;
      } else if (symbol.symbol == 'm') {
        if (i + 1 != stages.size())
          return fail(symbol.offset,
                      "m outside the last virtual stage: placec places the multi-token "
                      "prediction modules on the last virtual stage, beside the output layer");
        ++modules;
      }
    }
    bool edge = i == 0 || i + 1 == stages.size();
    if (!edge && layers == 0) {
      return fail(starts[i],
                  "virtual stage " + std::to_string(i) +
                      " holds no transformer layer: every virtual stage but the first and "
                      "the last holds at least one");
    }
    layout.layers.push_back(layers);
    layout.mtpLayers.push_back(modules);
  }
  return layout;
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

double Cluster::getLowPrecisionPeak(Fp8Scaling scaling) const {
  return scaling == Fp8Scaling::Nvfp4 ? peakFp4 : peakFp8;
}

StringRef toString(Fp8Scaling scaling) {
  switch (scaling) {
  case Fp8Scaling::Tensor:
    return "tensor";
  case Fp8Scaling::Current:
    return "current";
  case Fp8Scaling::Mx:
    return "mx";
  case Fp8Scaling::Nvfp4:
    return "nvfp4";
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

StringRef toString(GradAccumulation accumulation) {
  switch (accumulation) {
  case GradAccumulation::Fused:
    return "fused";
  case GradAccumulation::Add:
    return "add";
  case GradAccumulation::CastAdd:
    return "cast_add";
  }
  llvm_unreachable("unknown GradAccumulation");
}

StringRef toString(ContextMerge merge) {
  switch (merge) {
  case ContextMerge::Fused:
    return "fused";
  case ContextMerge::Eager:
    return "eager";
  }
  llvm_unreachable("unknown ContextMerge");
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

bool Strategy::allReducesShardedOptimizer() const {
  return gradReduce == GradReduce::AllReduce && shardsOptimizerOnly();
}

bool Strategy::shardsOptimizerOnly() const {
  for (size_t i = 0; i < mesh.axes.size(); ++i) {
    if (mesh.axes[i].size <= 1)
      continue;
    for (const auto *states : {&placements, &expertPlacements}) {
      const StatePlacement &optimizer = (*states)[static_cast<unsigned>(State::Optimizer)];
      const StatePlacement &grads = (*states)[static_cast<unsigned>(State::Grads)];
      if (i < optimizer.axes.size() && optimizer.axes[i].mode == PlacementMode::Sharded &&
          (i >= grads.axes.size() || grads.axes[i].mode != PlacementMode::Sharded))
        return true;
    }
  }
  return false;
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
                         bool fp32Params, Fp8Scaling scaling, OptimizerStates states,
                         bool fp8Params, bool fp8Transposes) {
  bool mixed = precision != Precision::FP32;
  // The parameters are the optimizer's fp32 weights under fp32 and under `params = fp32`;
  // otherwise mixed precision keeps an fp32 master copy in the optimizer state.
  bool master = !mixed || fp32Params;
  unsigned weightBytes = master ? 4 : 2;
  // FP8 training keeps the BF16 weights and caches their FP8 cast (one byte each) from the first
  // micro-batch of a step to the last (Transformer Engine's weight cache), for both products that
  // read a weight, the forward's along its rows and the input gradient's along its columns
  // (linear.py sets the weight quantizer's two usages in training). Of one scale per tensor that
  // is one buffer on Blackwell and the cast with its transpose where the products take one layout
  // (`fp8Transposes`, Hopper). Over fp32 parameters (PyTorch's float8 linears) each use casts them
  // again: no cache. Under MXFP8 the cache holds both of a weight's MXFP8 copies, each with its
  // scales (Transformer Engine's MXFP8Quantizer with both usages), on every device.
  // NVFP4 keeps two copies the same way, of a little over half a byte each. These are the bytes of
  // the weights that quantized products read; the embedding and the output layer, which run in
  // BF16, keep the weight alone (StateBytes::unquantized).
  double fp8Cache = isBlockScaled(scaling) ? 2 * getQuantizedBytesPerElement(scaling)
                    : fp8Transposes        ? 2
                                           : 1;
  double paramBytes =
      precision == Precision::MixedFP8 && !fp32Params ? weightBytes + fp8Cache : weightBytes;
  // `params = fp8` (Megatron-Core's --fp8-param-gather), `params = fp4` under NVFP4
  // (--fp4-param-gather): the quantized copies alone, as the cache counts them, without the bf16
  // weight.
  if (fp8Params && precision == Precision::MixedFP8 && !fp32Params)
    paramBytes = fp8Cache;
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
  bytes.weight = weightBytes;
  if (precision == Precision::MixedFP8 && !fp32Params) {
    bytes.cache = fp8Cache;
    bytes.cacheWhat = scaling == Fp8Scaling::Nvfp4 ? "two NVFP4 copies"
                      : scaling == Fp8Scaling::Mx  ? "two MXFP8 copies"
                      : fp8Transposes              ? "FP8 copy and its transpose"
                                                   : "FP8 copy";
  }
  return bytes;
}

bool keepsFp8Transposes(const Cluster &cluster) {
  return cluster.device && keepsFp8Transposes(cluster.device->family);
}

StateBytes getStateBytes(const Run &run) {
  return getStateBytes(run.precision, run.optimizer, run.fp32Grads, run.fp32Params, run.fp8Scaling,
                       run.optimizerStates, run.fp8Params,
                       run.cluster && keepsFp8Transposes(*run.cluster));
}

std::string spellPrecision(Precision precision, bool fp8Gather, bool fp32Grads, bool fp32Params,
                           bool fp8Saved, Fp8Scaling scaling, bool fp8Attention, bool fp8Params) {
  bool fp8 = precision == Precision::MixedFP8;
  // NVFP4 products are `mixed(fp4)`, whose scaling and saved type the name says.
  bool fp4 = fp8 && scaling == Fp8Scaling::Nvfp4;
  std::string text = fp4 ? "mixed(fp4)" : toString(precision).str();
  bool scaled = fp8 && !fp4 && scaling != Fp8Scaling::Tensor;
  // `saved = fp4` is mixed(fp4)'s own; only `saved = bf16` would be written.
  bool savedWritten = fp4 ? !fp8Saved : fp8Saved;
  bool attention = fp8 && fp8Attention;
  if (precision == Precision::FP32 ||
      (!(fp8 && (fp8Gather || savedWritten)) && !scaled && !attention && !fp32Grads &&
       !fp32Params && !(fp8 && fp8Params)))
    return text;
  text.pop_back();
  if (scaled)
    text += ", scaling = " + toString(scaling).str();
  if (fp8 && fp8Gather)
    text += ", gather = fp8";
  if (fp8 && savedWritten)
    text += fp4 ? ", saved = bf16" : ", saved = fp8";
  if (attention)
    text += ", attention = fp8";
  // `params = fp32` implies fp32 gradients: the canonical spelling leaves `grads = fp32` out.
  if (fp32Params)
    text += ", params = fp32";
  else if (fp32Grads)
    text += ", grads = fp32";
  if (fp8 && fp8Params && !fp32Params)
    text += fp4 ? ", params = fp4" : ", params = fp8";
  return text + ")";
}

std::string spellPrecision(const Run &run) {
  return spellPrecision(run.precision, run.fp8Gather, run.fp32Grads, run.fp32Params, run.fp8Saved,
                        run.fp8Scaling, run.fp8Attention, run.fp8Params);
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
