// Lowering: a verified run to its StepPlan. Each op is derived from the placement alone:
// gathers from `gather` modes, reductions from the gradient and optimizer placements, the
// parameter all-gather that keeps replicas consistent after a sharded optimizer step, host
// transfers from tiers, tensor-parallel and pipeline traffic from the mesh.
#include "placec/passes/StepPlan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>
#include <optional>
#include <tuple>

using namespace llvm;

namespace placec::plan {

StringRef toString(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return "bf16";
  case DType::FP16:
    return "fp16";
  case DType::FP32:
    return "fp32";
  case DType::FP8:
    return "fp8";
  case DType::MXFP8:
    return "mxfp8";
  case DType::NVFP4:
    return "nvfp4";
  case DType::FP4:
    return "fp4";
  }
  return "?";
}

double getSize(DType dtype) {
  switch (dtype) {
  case DType::FP32:
    return 4;
  case DType::BF16:
  case DType::FP16:
    return 2;
  case DType::FP8:
    return 1;
  case DType::MXFP8:
    return ir::kMxfp8BytesPerElement;
  case DType::NVFP4:
    return ir::kNvfp4BytesPerElement;
  case DType::FP4:
    return 0.5;
  }
  return 2;
}

DType getParamGatherType(DType paramType, bool fp8Gather, bool fp8Params, ir::Fp8Scaling scaling) {
  if (fp8Gather)
    return DType::FP8;
  return fp8Params && scaling == ir::Fp8Scaling::Nvfp4 ? DType::FP4 : paramType;
}

DType getUnitGatherType(DType gatherType, DType paramType, cost::UnitKind unit) {
  return cost::quantizesParams(unit) ? gatherType : paramType;
}

int64_t getNvfp4AmaxElements(int64_t params) {
  constexpr int64_t block = 16 * 16;
  return (params + block - 1) / block;
}

int64_t getGradientGatherCopies(DType fp8Type, bool userbuffers) {
  return fp8Type == DType::FP8 || userbuffers ? 1 : 2;
}

DType getQuantizedType(ir::Fp8Scaling scaling) {
  return scaling == ir::Fp8Scaling::Nvfp4 ? DType::NVFP4
         : scaling == ir::Fp8Scaling::Mx  ? DType::MXFP8
                                          : DType::FP8;
}

StringRef toString(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return "forward";
  case Phase::Backward:
    return "backward";
  case Phase::Step:
    return "step";
  }
  return "?";
}

StringRef toString(OpKind kind) {
  switch (kind) {
  case OpKind::AllGather:
    return "all-gather";
  case OpKind::ReduceScatter:
    return "reduce-scatter";
  case OpKind::AllReduce:
    return "all-reduce";
  case OpKind::AllToAll:
    return "all-to-all";
  case OpKind::RingStep:
    return "ring-step";
  case OpKind::Send:
    return "send";
  case OpKind::Recv:
    return "recv";
  case OpKind::Compute:
    return "compute";
  case OpKind::Free:
    return "free";
  case OpKind::OptimizerUpdate:
    return "optimizer-update";
  case OpKind::HostToDevice:
    return "host-to-device";
  case OpKind::DeviceToHost:
    return "device-to-host";
  }
  return "?";
}

bool isCollective(OpKind kind) {
  return kind == OpKind::AllGather || kind == OpKind::ReduceScatter || kind == OpKind::AllReduce ||
         kind == OpKind::AllToAll;
}

StringRef toString(ComputeKind kind) {
  switch (kind) {
  case ComputeKind::Forward:
    return "forward";
  case ComputeKind::Backward:
    return "backward";
  case ComputeKind::Recompute:
    return "recompute";
  }
  return "?";
}

namespace {

int64_t product(const ir::Mesh &mesh, ArrayRef<unsigned> axes) {
  int64_t result = 1;
  for (unsigned axis : axes)
    result *= mesh.axes[axis].size;
  return result;
}

std::vector<unsigned> difference(ArrayRef<unsigned> all, ArrayRef<unsigned> remove) {
  std::vector<unsigned> result;
  for (unsigned axis : all)
    if (!llvm::is_contained(remove, axis))
      result.push_back(axis);
  return result;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Lowering {
public:
  Lowering(const ir::Run &run, const LowerOptions &options)
      : run(run), strategy(*run.strategy), mesh(strategy.mesh), model(*run.model),
        reasons(options.reasons) {}

  std::unique_ptr<StepPlan> lower();

private:
  void buildUnits();
  void lowerStage(StagePlan &stage);
  /// The work of one pass of a unit for one micro-batch on one device (the cost model's).
  /// A unit's work in `pass`, computed once per class of units (cost::getUnitWorkClass).
  /// The compute ops of one class share it.
  const std::shared_ptr<const cost::Work> &unitWork(const Unit &unit, cost::PassKind pass) const {
    auto [at, inserted] = works.try_emplace(classKey(unit, static_cast<int>(pass)));
    if (inserted)
      at->second = std::make_shared<const cost::Work>(
          cost::getUnitWork(model, unit.kind, unit.layer, pass, layout));
    return at->second;
  }
  /// The key of what the units of one class share: the unit's kind, `what` of it (a pass, a
  /// Traffic) and its class.
  using ClassKey = std::tuple<int, int, int64_t>;
  ClassKey classKey(const Unit &unit, int what) const {
    return {static_cast<int>(unit.kind), what,
            cost::getUnitWorkClass(model, unit.kind, unit.layer)};
  }
  mutable std::map<ClassKey, std::shared_ptr<const cost::Work>> works;
  /// The collectives inside a unit's forward, its backward (getUnitCollectives) or its
  /// recomputed forward (getRecomputedCollectives), computed once per class of units: they
  /// depend on the layer only as its work does (cost::getUnitWorkClass).
  enum class Traffic { Forward, Backward, Recomputed };
  const std::vector<UnitCollective> &unitTraffic(const Unit &unit, Traffic which) const {
    auto [at, inserted] = traffic.try_emplace(classKey(unit, static_cast<int>(which)));
    if (inserted)
      at->second = which == Traffic::Recomputed
                       ? getRecomputedCollectives(model, unit.kind, unit.layer,
                                                  strategy.activationMode, unitLayout)
                       : getUnitCollectives(model, unit.kind, unit.layer, which == Traffic::Forward,
                                            unitLayout);
    return at->second;
  }
  mutable std::map<ClassKey, std::vector<UnitCollective>> traffic;
  /// A compute op of a unit's pass.
  Op computeOp(int unitIndex, const Unit &unit, cost::PassKind pass) const;
  /// Elements of the activation tensor that crosses a stage boundary, per micro-batch.
  int64_t boundaryElements() const;
  /// Whether each tensor-parallel rank sends only its slice of the boundary (`sends = scatter`).
  bool scattersSends() const {
    return strategy.pipeline && strategy.pipeline->scatterSends && tensorDegree > 1;
  }
  /// Elements each rank sends and receives across a stage boundary, per micro-batch.
  int64_t sentElements() const {
    return scattersSends() ? boundaryElements() / tensorDegree : boundaryElements();
  }
  /// A boundary send or receive, and after a receive of scattered slices their all-gather over
  /// the tensor axes.
  void boundaryTransfer(std::vector<Op> &ops, OpKind kind, Phase phase, int unit, int peer,
                        const Twine &reason) const {
    DType type = plan->boundaryType;
    Op op = collective(kind, phase, ir::State::Activations, unit, {}, sentElements(), type, true,
                       reason);
    op.peerStage = peer;
    op.boundary = true;
    if (layersAxis)
      op.axes = {*layersAxis};
    ops.push_back(op);
    if (kind == OpKind::Recv && scattersSends()) {
      Op gather = collective(OpKind::AllGather, phase, ir::State::Activations, unit, tensorAxes,
                             boundaryElements(), type, true,
                             "sends = scatter: the received slices, gathered over tp");
      gather.boundary = true;
      ops.push_back(gather);
    }
  }
  /// Transformer blocks (layers and multi-token prediction modules) and mlp layers.
  bool isLayer(const Unit &unit) const {
    return unit.layer >= 0 && unit.layer < model.getHeadLayer();
  }
  bool isMtp(const Unit &unit) const {
    return model.kind == ir::ModelKind::Transformer && model.transformer.isMtpBlock(unit.layer);
  }
  /// Units whose forward recomputation repeats: transformer blocks and mlp layers.
  /// Under `recompute(layers = n)` the first n layers of each chunk only, and every multi-token
  /// prediction module: Megatron-Core checkpoints the module whenever the recomputation
  /// granularity is full, whatever the method and the layer count (multi_token_prediction.py).
  bool isRecomputed(const Unit &unit) const {
    return (unit.kind == cost::UnitKind::Layer || unit.kind == cost::UnitKind::MlpLayer) &&
           (isMtp(unit) || pipelineLayout.isRecomputedLayer(unit.layer, strategy.recomputeLayers));
  }
  /// The final norm and output layer of a transformer (an abstract model has no head).
  bool isHead(const Unit &unit) const {
    return model.kind == ir::ModelKind::Transformer && unit.layer >= model.getHeadLayer();
  }
  /// The type a unit's parameters are all-gathered in (getUnitGatherType).
  DType getGatherType(const Unit &unit) const {
    return getUnitGatherType(plan->gatherType, plan->paramType, unit.kind);
  }

  Op collective(OpKind kind, Phase phase, ir::State state, int unit, ArrayRef<unsigned> axes,
                int64_t elements, DType dtype, bool perMicrobatch, const Twine &reason) const {
    Op op;
    setCollective(op, kind, phase, state, unit, axes, elements, dtype, perMicrobatch, reason);
    return op;
  }
  /// The same, written into `op` (a new element of an op list, which then needs no move).
  void setCollective(Op &op, OpKind kind, Phase phase, ir::State state, int unit,
                     ArrayRef<unsigned> axes, int64_t elements, DType dtype, bool perMicrobatch,
                     const Twine &reason) const {
    op.kind = kind;
    op.phase = phase;
    op.state = state;
    op.unit = unit;
    op.axes.assign(axes.begin(), axes.end());
    op.elements = elements;
    op.dtype = dtype;
    op.perMicrobatch = perMicrobatch;
    if (reasons)
      op.reason = reason.str();
  }

  const ir::Run &run;
  const ir::Strategy &strategy;
  const ir::Mesh &mesh;
  const ir::Model &model;
  /// LowerOptions::reasons.
  bool reasons;
  std::unique_ptr<StepPlan> plan;

  cost::Layout layout;
  UnitLayout unitLayout;
  PipelineLayout pipelineLayout;
  int64_t stages = 1, chunks = 1, tensorDegree = 1, contextDegree = 1, expertDegree = 1;
  std::vector<unsigned> contextAxes;
  std::vector<unsigned> expertAxes;
  std::vector<unsigned> tensorAxes;
  /// The axes of an expert group's dispatch and combine: the expert axes, and the tensor and
  /// sequence axes with them where the experts fold them (ir::Strategy::isExpertGroupAxis), in
  /// mesh order.
  std::vector<unsigned> expertGroupAxes;
  /// The axes whose ranks route different tokens of the global micro-batch, over which the
  /// load-balancing loss's statistics are summed: the batch axes, and the tensor axes too under
  /// `expert_tensor = fold` (each tensor rank routes its own sequence shard).
  std::vector<unsigned> routingAxes;
  /// The axes that split one data-parallel rank's micro-batch among ranks that route their own
  /// tokens: the sequence axes, and the tensor axes under `expert_tensor = fold`
  /// (UnitCollective::local).
  std::vector<unsigned> localRoutingAxes;
  std::optional<unsigned> layersAxis;
  /// The head unit that holds the word embedding's copy (buildUnits) and the embedding unit it
  /// mirrors; -1 without a copy.
  int copyUnit = -1, embeddingUnit = -1;
  /// The batch axes of the dense tensors, or of the routed experts' (expertAxes left out), by
  /// what each state does on them.
  struct StateAxes {
    std::vector<unsigned> gatherAxes;         ///< params gather(ax)
    std::vector<unsigned> paramShardAxes;     ///< params shard(ax) or gather(ax)
    std::vector<unsigned> gradShardAxes;      ///< grads shard(ax)
    std::vector<unsigned> optimizerShardAxes; ///< optimizer shard(ax)
    std::vector<unsigned> batchAxes;
  };
  StateAxes getStateAxes(bool expert) const;
  StateAxes dense, experts;
  std::vector<unsigned> batchAxes;
};

Lowering::StateAxes Lowering::getStateAxes(bool expert) const {
  StateAxes result;
  auto placementOf = [&](ir::State state) -> const ir::StatePlacement & {
    return expert ? strategy.getExpertPlacement(state) : strategy.getPlacement(state);
  };
  auto withMode = [&](ir::State state, std::initializer_list<ir::PlacementMode> modes) {
    std::vector<unsigned> axes;
    const ir::StatePlacement &placement = placementOf(state);
    for (unsigned i = 0; i < mesh.axes.size(); ++i)
      if ((expert ? strategy.isExpertDataParallelAxis(mesh.axes[i].kind)
                  : ir::isDataParallel(mesh.axes[i].kind)) &&
          i < placement.axes.size() && llvm::is_contained(modes, placement.axes[i].mode))
        axes.push_back(i);
    return axes;
  };
  result.gatherAxes = withMode(ir::State::Params, {ir::PlacementMode::ShardedWithGather});
  result.paramShardAxes = withMode(
      ir::State::Params, {ir::PlacementMode::Sharded, ir::PlacementMode::ShardedWithGather});
  result.gradShardAxes = withMode(ir::State::Grads, {ir::PlacementMode::Sharded});
  result.optimizerShardAxes = withMode(ir::State::Optimizer, {ir::PlacementMode::Sharded});
  for (unsigned i = 0; i < mesh.axes.size(); ++i)
    if (expert ? strategy.isExpertDataParallelAxis(mesh.axes[i].kind)
               : ir::isDataParallel(mesh.axes[i].kind))
      result.batchAxes.push_back(i);
  return result;
}

std::unique_ptr<StepPlan> Lowering::lower() {
  plan = std::make_unique<StepPlan>();
  plan->run = &run;
  plan->microbatches = std::max<int64_t>(1, run.microbatchesPerStep);
  if (strategy.pipeline) {
    plan->schedule = strategy.pipeline->schedule;
    plan->chunks = chunks = strategy.pipeline->chunks;
    plan->group = strategy.pipeline->group;
  }
  switch (run.precision) {
  case ir::Precision::MixedBF16:
    plan->paramType = plan->gradType = plan->activationType = DType::BF16;
    break;
  case ir::Precision::MixedFP16:
    plan->paramType = plan->gradType = plan->activationType = DType::FP16;
    break;
  case ir::Precision::FP32:
    plan->paramType = plan->gradType = plan->activationType = DType::FP32;
    break;
  case ir::Precision::MixedFP8:
    plan->paramType = plan->gradType = plan->activationType = DType::BF16;
    break;
  }
  plan->gatherType =
      getParamGatherType(plan->paramType, run.fp8Gather,
                         run.precision == ir::Precision::MixedFP8 && run.fp8Params, run.fp8Scaling);
  if (run.fp32Grads)
    plan->gradType = DType::FP32;

  for (unsigned i = 0; i < mesh.axes.size(); ++i) {
    switch (mesh.axes[i].kind) {
    case ir::AxisKind::Tensor:
      tensorAxes.push_back(i);
      tensorDegree *= mesh.axes[i].size;
      break;
    case ir::AxisKind::Layers:
      layersAxis = i;
      stages = mesh.axes[i].size;
      break;
    case ir::AxisKind::Batch:
      batchAxes.push_back(i);
      break;
    case ir::AxisKind::Sequence:
      // Context parallelism: the states are data parallel over the axis (summed gradients,
      // optional sharding), the tokens split along it.
      batchAxes.push_back(i);
      contextAxes.push_back(i);
      contextDegree *= mesh.axes[i].size;
      break;
    case ir::AxisKind::Expert:
      // Expert parallelism: a batch axis for the dense tensors, the split of the experts.
      batchAxes.push_back(i);
      expertAxes.push_back(i);
      expertDegree *= mesh.axes[i].size;
      break;
    }
  }
  unitLayout.expert = expertDegree;
  unitLayout.expertFold = strategy.foldsExpertTensor();
  unitLayout.expertContextFold = strategy.foldsExpertContext();
  expertGroupAxes.clear();
  routingAxes.clear();
  localRoutingAxes.clear();
  for (unsigned i = 0; i < mesh.axes.size(); ++i) {
    ir::AxisKind kind = mesh.axes[i].kind;
    if (strategy.isExpertGroupAxis(kind))
      expertGroupAxes.push_back(i);
    bool foldedTensor = kind == ir::AxisKind::Tensor && unitLayout.expertFold;
    if (ir::isDataParallel(kind) || foldedTensor)
      routingAxes.push_back(i);
    if (kind == ir::AxisKind::Sequence || foldedTensor)
      localRoutingAxes.push_back(i);
  }
  unitLayout.samples = product(mesh, batchAxes);
  unitLayout.microBatch = run.microBatch;
  unitLayout.tensor = tensorDegree;
  unitLayout.sequenceParallel = strategy.sequenceParallel;
  unitLayout.context = contextDegree;
  unitLayout.contextMethod = strategy.contextMethod;
  unitLayout.kernels = run.kernels;
  unitLayout.fp8 = run.precision == ir::Precision::MixedFP8;
  unitLayout.fp8Type = getQuantizedType(run.fp8Scaling);
  unitLayout.userbuffers = strategy.asyncTensorParallel == ir::AsyncTensorParallel::All;
  unitLayout.recomputeModules = strategy.recomputeModules;
  unitLayout.regather = regathersInputs(model, tensorDegree, strategy.sequenceParallel,
                                        strategy.sequenceParallelInputs, strategy.activationMode);
  plan->regather = unitLayout.regather;
  pipelineLayout = getPipelineLayout(model.getNumLayers(), stages,
                                     strategy.pipeline ? &*strategy.pipeline : nullptr);
  layout = cost::getRunLayout(run);
  plan->boundaryType =
      cost::getStreamBytes(run.precision, layout.fp32Params, layout.paramsGathered) == 4
          ? DType::FP32
          : plan->activationType;
  dense = getStateAxes(/*expert=*/false);
  experts = getStateAxes(/*expert=*/true);

  buildUnits();
  for (Unit &unit : plan->units)
    unit.recomputed = strategy.activationMode != ir::ActivationMode::Keep && isRecomputed(unit);
  plan->stages.resize(stages);
  for (int64_t s = 0; s < stages; ++s) {
    plan->stages[s].stage = static_cast<int>(s);
    for (unsigned u = 0; u < plan->units.size(); ++u)
      if (plan->units[u].stage == s)
        plan->stages[s].units.push_back(u);
    lowerStage(plan->stages[s]);
  }
  return std::move(plan);
}

void Lowering::buildUnits() {
  int64_t layers = model.getNumLayers();
  if (model.kind == ir::ModelKind::Abstract) {
    // One unit per stage, the parameters split evenly (the remainder on the last stage).
    int64_t per = model.numParams / stages;
    for (int64_t s = 0; s < stages; ++s) {
      Unit unit;
      unit.name = stages == 1 ? "model" : "model.part" + std::to_string(s);
      unit.layer = static_cast<int>(s);
      unit.stage = static_cast<int>(s);
      unit.kind = cost::UnitKind::Abstract;
      unit.fullParams = s + 1 == stages ? model.numParams - per * (stages - 1) : per;
      unit.params = unit.fullParams;
      plan->units.push_back(unit);
    }
    return;
  }
  // Units by layer index: -1 embeddings, [0, L) layers, [L, L + n) multi-token prediction
  // modules, L + n head. The embedding is on the stage of the first chunk, the modules and the
  // head on the stage of the last (the first stage under V shapes), as Megatron-Core builds the
  // modules on the last pipeline stage (mtp_on_this_rank) beside the output layer.
  const PipelineLayout &pipe = pipelineLayout;
  int64_t head = model.getHeadLayer();
  auto stageOf = [&](int64_t layer) -> int {
    if (layer < 0)
      return pipe.stageOfChunk.front();
    if (layer >= layers)
      return pipe.stageOfChunk.back();
    return pipe.stageOfChunk[pipe.chunkOfLayer[layer]];
  };
  // An MoE layer's routed experts are a unit of their own, after the layer's.
  std::map<std::pair<int, bool>, size_t> unitOfLayer;
  for (const ir::Tensor &tensor : model.tensors) {
    auto [it, inserted] =
        unitOfLayer.try_emplace({tensor.layer, tensor.expert}, plan->units.size());
    if (inserted) {
      Unit unit;
      unit.layer = tensor.layer;
      unit.stage = stageOf(tensor.layer);
      unit.expert = tensor.expert;
      unit.name = tensor.layer < 0         ? std::string("embed")
                  : tensor.layer >= head   ? std::string("head")
                  : tensor.layer >= layers ? "mtp." + std::to_string(tensor.layer - layers)
                                           : "layer." + std::to_string(tensor.layer);
      if (tensor.expert)
        unit.name += ".experts";
      unit.kind = model.kind == ir::ModelKind::Mlp ? cost::UnitKind::MlpLayer
                  : tensor.layer < 0               ? cost::UnitKind::Embedding
                  : tensor.layer >= head           ? cost::UnitKind::Head
                                                   : cost::UnitKind::Layer;
      plan->units.push_back(unit);
    }
    Unit &unit = plan->units[it->second];
    unit.fullParams += tensor.numElements;
    // The routed experts are stacked on the first dimension: each device of the expert group
    // holds E/ep of them, split over the tensor axes, or E/(ep·t) whole ones under expert_tensor =
    // fold (and a cp-th of that under expert_context = fold).
    bool fold = unitLayout.expertFold;
    int64_t elements =
        tensor.expert ? tensor.numElements / strategy.getExpertGroupDegree() : tensor.numElements;
    unit.params += tensor.split == ir::TensorSplit::Replicated || (tensor.expert && fold)
                       ? elements
                       : ceilDiv(elements, tensorDegree);
    // The router and the experts see every token of the tensor-parallel group (the MoE block
    // gathers the sequence first), so their gradients are whole on each tensor rank. Folded, each
    // tensor rank routes its own sequence shard: the router's gradients are sums over the tensor
    // axes like a norm's, the experts' whole on the device that holds them.
    if (tensor.hasSequenceParallelGradient() || (fold && tensor.router))
      unit.sequenceParallelParams += tensor.numElements;
  }
  // A head on another stage than the embedding's holds a copy of the word embedding where the
  // output layer or the multi-token prediction modules read it (Megatron-Core's
  // setup_embeddings_and_output_layer); the copy is a parameter like the head's own, with its
  // gradients and optimizer states.
  auto embed = unitOfLayer.find({-1, false}),
       last = unitOfLayer.find({static_cast<int>(head), false});
  if (embed != unitOfLayer.end() && last != unitOfLayer.end() &&
      plan->units[embed->second].stage != plan->units[last->second].stage) {
    Unit &headUnit = plan->units[last->second];
    headUnit.embeddingCopy = cost::getEmbeddingCopyParams(model, tensorDegree);
    headUnit.params += headUnit.embeddingCopy;
    headUnit.fullParams += headUnit.embeddingCopy * tensorDegree;
    if (headUnit.embeddingCopy > 0) {
      copyUnit = static_cast<int>(last->second);
      embeddingUnit = static_cast<int>(embed->second);
    }
  }
}

Op Lowering::computeOp(int unitIndex, const Unit &unit, cost::PassKind pass) const {
  Op op;
  op.kind = OpKind::Compute;
  op.phase = pass == cost::PassKind::Forward ? Phase::Forward : Phase::Backward;
  op.state = pass == cost::PassKind::Backward ? ir::State::Grads : ir::State::Activations;
  op.unit = unitIndex;
  op.compute = pass == cost::PassKind::Forward    ? ComputeKind::Forward
               : pass == cost::PassKind::Backward ? ComputeKind::Backward
                                                  : ComputeKind::Recompute;
  op.work = unitWork(unit, pass);
  op.flops = op.work->getFlops();
  if (!reasons)
    return op;
  switch (pass) {
  case cost::PassKind::Forward:
    op.reason = "forward of " + unit.name;
    break;
  case cost::PassKind::Backward:
    op.reason = "backward of " + unit.name;
    break;
  case cost::PassKind::RecomputeFull:
    op.reason = "recompute the forward from the stored unit input";
    break;
  case cost::PassKind::RecomputeSelective:
    op.reason = model.transformer.attention == ir::AttentionKind::Materialized
                    ? "recompute the attention scores and softmax"
                    : "recompute the norms and the MLP activation";
    break;
  case cost::PassKind::RecomputeOps:
    op.reason = "recompute what the per-op policy did not keep";
    break;
  case cost::PassKind::RecomputeAttention:
    op.reason = model.transformer.attention == ir::AttentionKind::Materialized
                    ? "recompute the attention scores and softmax (the checkpointed core attention)"
                    : "recompute the attention kernel's forward (the checkpointed core attention)";
    break;
  case cost::PassKind::RecomputeModules:
    op.reason = "recompute Megatron-Core's modules: " +
                ir::getActivationModeText(strategy.activationMode, 0, strategy.recomputeModules);
    break;
  }
  return op;
}

int64_t Lowering::boundaryElements() const {
  int64_t b = run.microBatch;
  if (model.kind == ir::ModelKind::Transformer) {
    int64_t elements = b * model.transformer.seq / contextDegree * model.transformer.hidden;
    return strategy.sequenceParallel ? elements / tensorDegree : elements;
  }
  if (model.kind == ir::ModelKind::Mlp)
    return b * model.mlp.width;
  return 0;
}

void Lowering::lowerStage(StagePlan &stage) {
  DType pType = plan->paramType, gType = plan->gradType, aType = plan->activationType;
  const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
  const ir::StatePlacement &optimizer = strategy.getPlacement(ir::State::Optimizer);
  bool paramsOnHost = params.tier != ir::Tier::Device;
  bool optimizerOnHost = optimizer.tier != ir::Tier::Device;
  std::optional<cost::PassKind> recomputePass = cost::getRecomputePass(strategy.activationMode);
  // What the placement of the dense tensors, or of the routed experts, implies for a unit.
  struct Reductions {
    const StateAxes *axes = nullptr;
    bool keepAfterForward = false;
    int64_t paramShard = 1, gradShard = 1, optimizerShard = 1;
    std::vector<unsigned> stepShardAxes, stepScatterAxes, stepReduceAxes, syncAxes;
  };
  auto reductionsOf = [&](const StateAxes &axes, const ir::StatePlacement &paramPlacement) {
    Reductions r;
    r.axes = &axes;
    r.keepAfterForward = llvm::any_of(
        axes.gatherAxes, [&](unsigned axis) { return paramPlacement.axes[axis].keepAfterForward; });
    r.paramShard = product(mesh, axes.paramShardAxes);
    r.gradShard = product(mesh, axes.gradShardAxes);
    // Gradient reductions (gradient integrity): sharded grads are reduce-scattered every
    // micro-batch; replicated grads are accumulated and reduced once per step, scattered where
    // the optimizer is sharded and all-reduced where it is replicated. The routed experts' are
    // reduced over their expert-data-parallel axes only: the expert axes hold other experts.
    // Under `grad_reduce = all_reduce` the optimizer's shard axes are summed with the others by
    // one all-reduce, and each rank updates its shard of the whole sum (stepShardAxes).
    r.stepShardAxes = difference(axes.optimizerShardAxes, axes.gradShardAxes);
    if (strategy.gradReduce != ir::GradReduce::AllReduce)
      r.stepScatterAxes = r.stepShardAxes;
    r.stepReduceAxes =
        difference(difference(axes.batchAxes, axes.gradShardAxes), r.stepScatterAxes);
    // State consistency: where the optimizer is sharded and params are replicated, the updated
    // shards are all-gathered.
    r.syncAxes = difference(axes.optimizerShardAxes, axes.paramShardAxes);
    r.optimizerShard = product(mesh, axes.optimizerShardAxes);
    return r;
  };
  const Reductions denseReductions = reductionsOf(dense, params);
  const Reductions expertReductions =
      reductionsOf(experts, strategy.getExpertPlacement(ir::State::Params));
  auto reductions = [&](const Unit &unit) -> const Reductions & {
    return unit.expert ? expertReductions : denseReductions;
  };
  bool keepAfterForward = denseReductions.keepAfterForward;
  const std::vector<unsigned> &gatherAxes = dense.gatherAxes;

  bool hasTensorTraffic = tensorDegree > 1 && model.kind != ir::ModelKind::Abstract;
  int64_t layers = model.getNumLayers();
  // Pipeline boundaries: between consecutive units of different chunks on different stages (the
  // V schedules turn around on one stage, which sends nothing). The units run embedding, layers
  // 0 … L − 1, head; the embedding and the head are units of the first and the last chunk, which
  // hold no layer where the embedding and the loss are counted as layers of a split into chunks of
  // one layer (Llama 3 405B's 126 + 2 layers over 16 stages × 8 chunks, "the first model chunk on
  // the first stage has only the embedding", Dubey et al. 2024, §3.3.2).
  const PipelineLayout &pipe = pipelineLayout;
  std::optional<int> embeddingStage, headStage;
  for (const Unit &unit : plan->units) {
    if (unit.expert)
      continue;
    if (unit.layer < 0)
      embeddingStage = unit.stage;
    else if (isHead(unit))
      headStage = unit.stage;
  }
  // The stage of block `block`: a layer's chunk's, or the head's for a multi-token prediction
  // module (Lowering::buildUnits).
  auto stageOfLayer = [&](int64_t block) -> std::optional<int> {
    if (block >= layers)
      return headStage;
    return pipe.stageOfChunk[pipe.chunkOfLayer[block]];
  };
  int64_t blocks = model.getHeadLayer();
  // The stage of the unit before and after `unit` in model order, if there is one.
  auto stageBefore = [&](const Unit &unit) -> std::optional<int> {
    if (isHead(unit))
      return blocks > 0 ? stageOfLayer(blocks - 1) : embeddingStage;
    if (!isLayer(unit))
      return std::nullopt;
    return unit.layer > 0 ? stageOfLayer(unit.layer - 1) : embeddingStage;
  };
  auto stageAfter = [&](const Unit &unit) -> std::optional<int> {
    if (unit.layer < 0)
      return blocks > 0 ? stageOfLayer(0) : headStage;
    if (!isLayer(unit))
      return std::nullopt;
    return unit.layer + 1 < blocks ? stageOfLayer(unit.layer + 1) : headStage;
  };
  auto chunkStart = [&](const Unit &unit) {
    std::optional<int> before = unit.expert ? std::nullopt : stageBefore(unit);
    return before && *before != unit.stage;
  };
  auto chunkEnd = [&](const Unit &unit) {
    std::optional<int> after = unit.expert ? std::nullopt : stageAfter(unit);
    return after && *after != unit.stage;
  };
  auto prevStageOf = [&](const Unit &unit) { return *stageBefore(unit); };
  auto nextStageOf = [&](const Unit &unit) { return *stageAfter(unit); };

  // Tensor-parallel traffic of one unit's forward (`forwardPass`) or backward pass, added to `ops`
  // in `phase` (a recomputed forward runs in the backward phase and repeats the forward's
  // traffic): getTensorCollectives.
  auto addTraffic = [&](std::vector<Op> &ops, Phase phase, int unitIndex,
                        ArrayRef<UnitCollective> collectives, StringRef why,
                        bool recomputed = false) {
    for (const UnitCollective &c : collectives) {
      Op &op = ops.emplace_back();
      setCollective(op, c.kind, phase, ir::State::Activations, unitIndex,
                    c.local                          ? localRoutingAxes
                    : c.over == ir::AxisKind::Tensor ? tensorAxes
                    : c.over == ir::AxisKind::Expert ? expertGroupAxes
                    : c.over == ir::AxisKind::Batch  ? routingAxes
                                                     : contextAxes,
                    c.elements, c.fp8 ? unitLayout.fp8Type : aType, true,
                    c.what + Twine(" (") + why + ")");
      op.recomputed = recomputed;
      op.inputGradient = c.inputGradient;
      op.regather = c.regather;
      op.combine = c.combine;
      op.repeat = c.repeat;
    }
  };
  auto tensorTraffic = [&](std::vector<Op> &ops, Phase phase, bool forwardPass, int unitIndex,
                           const Unit &unit, StringRef why) {
    addTraffic(ops, phase, unitIndex,
               unitTraffic(unit, forwardPass ? Traffic::Forward : Traffic::Backward), why);
  };

  // A unit's parameters are brought in before each use (from the host where params are
  // offloaded, then gathered where they are sharded with gather) and the gathered buffer is
  // freed after it.
  auto bringIn = [&](std::vector<Op> &ops, Phase phase, int unitIndex, const Unit &unit,
                     StringRef use) {
    const Reductions &r = reductions(unit);
    if (paramsOnHost)
      ops.push_back(collective(OpKind::HostToDevice, phase, ir::State::Params, unitIndex, {},
                               ceilDiv(unit.params, r.paramShard), pType, true,
                               "params @ host: the unit's shard to the device for " + use));
    if (!r.axes->gatherAxes.empty())
      ops.push_back(collective(OpKind::AllGather, phase, ir::State::Params, unitIndex,
                               r.axes->gatherAxes, unit.params, getGatherType(unit), true,
                               "params gather: the whole unit for " + use));
  };
  auto release = [&](std::vector<Op> &ops, Phase phase, int unitIndex, const Unit &unit,
                     StringRef what) {
    if (!reductions(unit).axes->gatherAxes.empty())
      ops.push_back(collective(OpKind::Free, phase, ir::State::Params, unitIndex, {}, unit.params,
                               pType, true, "free " + what));
  };
  // An MoE layer's routed experts (their own unit, right after the layer's) are brought in and
  // released with the layer, since the layer's compute uses them.
  auto expertsOf = [&](unsigned index) -> int {
    if (index + 1 < plan->units.size() && plan->units[index + 1].expert &&
        plan->units[index + 1].layer == plan->units[index].layer && !plan->units[index].expert)
      return static_cast<int>(index + 1);
    return -1;
  };
  // Tied embeddings: the head's output layer is the embedding matrix, so where both units are on
  // this stage and parameters are brought in around each use, the embedding stays gathered from
  // its forward through the head's forward, and is gathered again with the head for the
  // backward and kept through its own backward (where its accumulated gradient is reduced). The
  // volume is unchanged: the embedding is still gathered once per direction.
  int embedUnit = -1, headUnit = -1;
  for (unsigned index : stage.units) {
    if (plan->units[index].layer < 0)
      embedUnit = static_cast<int>(index);
    else if (isHead(plan->units[index]))
      headUnit = static_cast<int>(index);
  }
  bool tiedHere = model.kind == ir::ModelKind::Transformer && model.transformer.tiedEmbeddings &&
                  embedUnit >= 0 && headUnit >= 0 && (paramsOnHost || !gatherAxes.empty());

  // Room for a unit's usual ops (its compute, gathers and frees, tensor-parallel, expert and
  // context collectives, reductions), so that the lists rarely grow.
  stage.forward.reserve(9 * stage.units.size());
  stage.backward.reserve(14 * stage.units.size());
  stage.step.reserve(4 * stage.units.size());

  // Forward of one micro-batch.
  for (unsigned index : stage.units) {
    const Unit &unit = plan->units[index];
    int u = static_cast<int>(index);
    if (unit.expert)
      continue;
    int x = expertsOf(index);
    if (stages > 1 && chunkStart(unit)) {
      boundaryTransfer(stage.forward, OpKind::Recv, Phase::Forward, u, prevStageOf(unit),
                       "activations from the previous stage");
    }
    bringIn(stage.forward, Phase::Forward, u, unit, "its forward");
    if (x >= 0)
      bringIn(stage.forward, Phase::Forward, x, plan->units[x], "the layer's forward");
    stage.forward.push_back(computeOp(u, unit, cost::PassKind::Forward));
    tensorTraffic(stage.forward, Phase::Forward, /*forwardPass=*/true, u, unit, "forward");
    // Vocabulary-parallel cross-entropy (Megatron-LM, Shoeybi et al. 2019 §3): each tensor rank
    // holds the logits of V/t words, so the per-token maximum, sum of exponentials and target
    // logit of every rank (3·b·s values each, in the activation dtype) are all-gathered before
    // the loss.
    // With multi-token prediction, once per module's loss too.
    if (hasTensorTraffic && model.kind == ir::ModelKind::Transformer && isHead(unit))
      for (int64_t depth = 0; depth <= model.transformer.mtpLayers; ++depth)
        stage.forward.push_back(collective(
            OpKind::AllGather, Phase::Forward, ir::State::Activations, u, tensorAxes,
            3 * run.microBatch * model.transformer.seq / contextDegree * tensorDegree, aType, true,
            depth == 0 ? "vocabulary-parallel cross-entropy: every rank's row maxima, sums of "
                         "exponentials and target logits"
                       : "vocabulary-parallel cross-entropy of a multi-token prediction module"));
    if (x >= 0 && !expertReductions.keepAfterForward)
      release(stage.forward, Phase::Forward, x, plan->units[x], "the experts after the forward");
    if (!keepAfterForward && !(tiedHere && u == embedUnit)) {
      release(stage.forward, Phase::Forward, u, unit, "the unit after its forward");
      if (tiedHere && u == headUnit)
        release(stage.forward, Phase::Forward, embedUnit, plan->units[embedUnit],
                "the tied embedding after the head's forward");
    }
    if (stages > 1 && chunkEnd(unit)) {
      boundaryTransfer(stage.forward, OpKind::Send, Phase::Forward, u, nextStageOf(unit),
                       "activations to the next stage");
    }
  }

  // Backward of one micro-batch, units in reverse.
  for (unsigned index : llvm::reverse(stage.units)) {
    const Unit &unit = plan->units[index];
    int u = static_cast<int>(index);
    if (unit.expert)
      continue;
    int x = expertsOf(index);
    if (stages > 1 && chunkEnd(unit)) {
      boundaryTransfer(stage.backward, OpKind::Recv, Phase::Backward, u, nextStageOf(unit),
                       "activation gradients from the next stage");
    }
    if (!keepAfterForward && !(tiedHere && u == embedUnit)) {
      bringIn(stage.backward, Phase::Backward, u, unit, "its backward");
      if (tiedHere && u == headUnit)
        bringIn(stage.backward, Phase::Backward, embedUnit, plan->units[embedUnit],
                "the head's backward (tied embedding)");
    }
    if (x >= 0 && !expertReductions.keepAfterForward)
      bringIn(stage.backward, Phase::Backward, x, plan->units[x], "the layer's backward");
    // Full recomputation stores only each layer's input and repeats the layer's forward (and its
    // tensor-parallel traffic) before the backward; the embedding's output is the first layer's
    // stored input, and the head is not recomputed (Megatron-LM checkpoints the transformer
    // blocks; with it the plan's FLOPs are Narayanan et al. 2021's 96·B·s·l·h²·(1 + s/(6h) +
    // V/(16·l·h)) exactly). Selective recomputation repeats what the cost model says it does
    // (the attention core when it is materialized; the norms and MLP activation under flash).
    // Per-op recomputation (`recompute(op)`) repeats the products and kernels whose outputs it
    // does not keep, and the tensor-parallel collectives among them (getRecomputedCollectives).
    if (recomputePass && unit.recomputed && !unitWork(unit, *recomputePass)->empty()) {
      stage.backward.push_back(computeOp(u, unit, *recomputePass));
      addTraffic(stage.backward, Phase::Backward, u, unitTraffic(unit, Traffic::Recomputed),
                 "recomputed forward", /*recomputed=*/true);
    }
    stage.backward.push_back(computeOp(u, unit, cost::PassKind::Backward));
    tensorTraffic(stage.backward, Phase::Backward, /*forwardPass=*/false, u, unit, "backward");
    release(stage.backward, Phase::Backward, u, unit, "the unit after its backward");
    if (x >= 0)
      release(stage.backward, Phase::Backward, x, plan->units[x], "the experts after the backward");
    // Sequence parallelism (Korthikanti et al. 2022, §4.2.2): the norms and row-parallel biases
    // run on each rank's slice of the sequence, so their gradients are partial sums over the
    // tensor axes; gradient integrity needs them summed before any batch-axis reduction. So does
    // the router of folded experts, which routes each rank's own slice.
    if (strategy.sequenceParallel && hasTensorTraffic && model.kind == ir::ModelKind::Transformer &&
        unit.sequenceParallelParams > 0)
      stage.backward.push_back(collective(
          OpKind::AllReduce, Phase::Backward, ir::State::Grads, u, tensorAxes,
          unit.sequenceParallelParams, gType, true,
          unitLayout.expertFold && unit.kind == cost::UnitKind::Layer &&
                  model.transformer.isMoeBlock(unit.layer)
              ? "sequence parallelism: sum the norm, row-parallel bias and router gradients over "
                "the tensor axes (expert_tensor = fold)"
              : "sequence parallelism: sum the norm and row-parallel bias gradients over the "
                "tensor axes"));
    for (int v : {u, x}) {
      if (v < 0)
        continue;
      const Unit &reduced = plan->units[v];
      const Reductions &r = reductions(reduced);
      if (!r.axes->gradShardAxes.empty())
        stage.backward.push_back(collective(
            OpKind::ReduceScatter, Phase::Backward, ir::State::Grads, v, r.axes->gradShardAxes,
            reduced.params, gType, true,
            reduced.expert
                ? "expert grads shard: sum this micro-batch's gradients over the devices that "
                  "hold the same experts, keep this rank's shard"
                : "grads shard: sum this micro-batch's gradients, keep this rank's shard"));
      // ZeRO-Offload (Ren et al. 2021, §4): sharded gradients go to the host as soon as each
      // micro-batch's reduce-scatter produces them and accumulate there; replicated gradients
      // accumulate on the device and go once per step, after their reduction.
      if (optimizerOnHost && !r.axes->gradShardAxes.empty())
        stage.backward.push_back(
            collective(OpKind::DeviceToHost, Phase::Backward, ir::State::Grads, v, {},
                       ceilDiv(reduced.params, r.gradShard), gType, true,
                       "optimizer @ host: this rank's gradient shard goes to the host"));
    }
    if (stages > 1 && chunkStart(unit)) {
      boundaryTransfer(stage.backward, OpKind::Send, Phase::Backward, u, prevStageOf(unit),
                       "activation gradients to the previous stage");
    }
  }

  // Once per step: the remaining gradient reductions, the optimizer, parameter consistency.
  // NVFP4 parameters alone: the amaxes of the quantized units' blocks, by the axes their updated
  // parameters are all-gathered over (the dense and the expert optimizers'), with the first unit.
  std::map<std::vector<unsigned>, std::pair<int, int64_t>> amaxes;
  for (unsigned index : stage.units) {
    const Unit &unit = plan->units[index];
    int u = static_cast<int>(index);
    const Reductions &r = reductions(unit);
    const std::vector<unsigned> &stepScatterAxes = r.stepScatterAxes;
    const std::vector<unsigned> &stepReduceAxes = r.stepReduceAxes;
    const std::vector<unsigned> &syncAxes = r.syncAxes;
    int64_t gradElements = ceilDiv(unit.params, r.gradShard);
    // The word embedding's gradient and its copy's on the head's stage, summed between the two
    // stages so that both copies take the same update: the gradient as this rank holds it, before
    // the step's batch-axis reductions, where DeepSpeed's pipeline engine sums its tied modules'
    // gradients (deepspeed/runtime/pipe/schedule.py, TrainSchedule: ReduceTiedGrads, then
    // ReduceGrads, then OptimizerStep). Megatron-Core's finalize_model_grads
    // (_allreduce_word_embedding_grads) sums the same elements after them, to the same result;
    // before them the sum needs no agreement between the two units' shards of the step's scatter.
    if (copyUnit >= 0 && layersAxis && (u == copyUnit || u == embeddingUnit)) {
      Op pair = collective(OpKind::AllReduce, Phase::Step, ir::State::Grads, u, {*layersAxis},
                           ceilDiv(plan->units[copyUnit].embeddingCopy, r.gradShard), gType, false,
                           "tied or shared word embedding: sum its gradient with the copy's on "
                           "the other stage");
      pair.peerStage =
          u == copyUnit ? plan->units[embeddingUnit].stage : plan->units[copyUnit].stage;
      stage.step.push_back(pair);
    }
    if (!stepScatterAxes.empty()) {
      stage.step.push_back(collective(
          OpKind::ReduceScatter, Phase::Step, ir::State::Grads, u, stepScatterAxes, gradElements,
          gType, false,
          "grads replicated, optimizer shard: sum the accumulated gradients, keep the shard "
          "this rank updates"));
      gradElements = ceilDiv(gradElements, product(mesh, stepScatterAxes));
    }
    if (!stepReduceAxes.empty()) {
      bool sharded = stepScatterAxes.empty() && !r.stepShardAxes.empty();
      stage.step.push_back(collective(
          OpKind::AllReduce, Phase::Step, ir::State::Grads, u, stepReduceAxes, gradElements, gType,
          false,
          sharded ? "grads replicated, optimizer shard, grad_reduce = all_reduce: sum the "
                    "accumulated gradients on every replica, then update this rank's shard"
                  : "grads and optimizer replicated: sum the accumulated gradients on every "
                    "replica"));
      if (sharded)
        gradElements = ceilDiv(gradElements, product(mesh, r.stepShardAxes));
    }
    if (optimizerOnHost && r.axes->gradShardAxes.empty())
      stage.step.push_back(collective(OpKind::DeviceToHost, Phase::Step, ir::State::Grads, u, {},
                                      gradElements, gType, false,
                                      "optimizer @ host: the reduced gradients go to the host"));
    int64_t owned = ceilDiv(unit.params, r.optimizerShard);
    Op update;
    update.kind = OpKind::OptimizerUpdate;
    update.phase = Phase::Step;
    update.state = ir::State::Optimizer;
    update.unit = u;
    update.elements = owned;
    update.dtype = DType::FP32;
    update.perMicrobatch = false;
    if (reasons)
      update.reason = optimizerOnHost ? "optimizer step on the host for this rank's shard"
                                      : "optimizer step for this rank's shard";
    stage.step.push_back(update);
    if (optimizerOnHost || paramsOnHost) {
      // The updated parameters return to the device (or, with params @ host, stay there).
      if (!paramsOnHost)
        stage.step.push_back(collective(OpKind::HostToDevice, Phase::Step, ir::State::Params, u, {},
                                        owned, pType, false,
                                        "optimizer @ host: updated params back to the device"));
      else if (!optimizerOnHost)
        stage.step.push_back(collective(OpKind::DeviceToHost, Phase::Step, ir::State::Params, u, {},
                                        owned, pType, false,
                                        "params @ host: updated params back to the host"));
    }
    // Under `gather = fp8` the updated parameters are all-gathered in FP8 as well
    // (Megatron-Core's --fp8-param-gather keeps its parameter buffer in FP8 and all-gathers it;
    // apex's DistributedFusedAdam with FP8 parameters syncs them as uint8).
    if (!syncAxes.empty())
      stage.step.push_back(
          collective(OpKind::AllGather, Phase::Step, ir::State::Params, u, syncAxes,
                     ceilDiv(unit.params, r.paramShard), getGatherType(unit), false,
                     "optimizer shard, params replicated: all-gather the updated params (state "
                     "consistency)"));
    if (!syncAxes.empty() && getGatherType(unit) == DType::FP4)
      amaxes.try_emplace(syncAxes, u, 0).first->second.second += getNvfp4AmaxElements(unit.params);
  }
  for (const auto &[axes, amax] : amaxes)
    stage.step.push_back(collective(
        OpKind::AllReduce, Phase::Step, ir::State::Params, amax.first, axes, amax.second,
        DType::FP32, false,
        "NVFP4 params: agree the 16×16 blocks' scales (all-reduce their amaxes, max) before "
        "the all-gather"));
}

} // namespace

std::vector<OpKind> getTensorCollectives(const ir::Model &model, cost::UnitKind unit, int64_t layer,
                                         bool forwardPass, bool sequenceParallel) {
  std::vector<OpKind> kinds;
  bool sp = sequenceParallel && model.kind == ir::ModelKind::Transformer;
  switch (unit) {
  case cost::UnitKind::Layer:
    for (int i = 0; i < 2; ++i) {
      if (sp) {
        kinds.push_back(OpKind::AllGather);
        kinds.push_back(OpKind::ReduceScatter);
      } else {
        kinds.push_back(OpKind::AllReduce);
      }
    }
    break;
  case cost::UnitKind::Embedding:
    if (forwardPass)
      kinds.push_back(sp ? OpKind::ReduceScatter : OpKind::AllReduce);
    else if (sp)
      kinds.push_back(OpKind::AllGather);
    break;
  case cost::UnitKind::Head:
    if (!forwardPass)
      kinds.push_back(sp ? OpKind::ReduceScatter : OpKind::AllReduce);
    else if (sp)
      kinds.push_back(OpKind::AllGather);
    break;
  case cost::UnitKind::MlpLayer:
    if ((layer % 2 == 1 && forwardPass) ||
        (layer % 2 == 0 && layer + 1 < model.getNumLayers() && !forwardPass))
      kinds.push_back(OpKind::AllReduce);
    break;
  case cost::UnitKind::Abstract:
    break;
  }
  return kinds;
}

bool regathersInputs(const ir::Model &model, int64_t tensor, bool sequenceParallel,
                     ir::SequenceParallelInputs inputs, ir::ActivationMode mode) {
  if (!sequenceParallel || tensor <= 1 || model.kind != ir::ModelKind::Transformer ||
      mode == ir::ActivationMode::RecomputeOps)
    return false;
  return inputs == ir::SequenceParallelInputs::Regather;
}

/// The tensor-parallel collectives of multi-token prediction (Megatron-Core's
/// MultiTokenPredictionLayer, megatron/core/transformer/multi_token_prediction.py), added to a
/// pass's `result`:
///  - a module's own, before its layer's in the forward and after them in the backward: the
///    vocabulary-parallel embedding of the shifted tokens (reduced as the embedding's: an
///    all-reduce, or a reduce-scatter under sequence parallelism, gathered again in the
///    backward), the projection's input of 2·h gathered under sequence parallelism (in FP8 under
///    mixed(fp8), as the layers' column-parallel inputs; again for the weight gradient under
///    sp_inputs = regather) and its input gradient reduced, and its output gathered over the
///    tensor axes (gather_from_tensor_model_parallel_region; split again along the sequence
///    under sequence parallelism, whose backward gathers the gradient);
///  - the head's, once more per module: the output layer over each module's output.
static void addMtpCollectives(const ir::TransformerConfig &config, cost::UnitKind unit,
                              int64_t layer, bool forwardPass, const UnitLayout &layout,
                              std::vector<UnitCollective> &result) {
  if (config.mtpLayers <= 0)
    return;
  if (unit == cost::UnitKind::Head) {
    std::vector<UnitCollective> one = result;
    for (int64_t k = 0; k < config.mtpLayers; ++k)
      result.insert(result.end(), one.begin(), one.end());
    return;
  }
  if (unit != cost::UnitKind::Layer || !config.isMtpBlock(layer))
    return;
  bool sp = layout.sequenceParallel;
  int64_t tokens = layout.microBatch * config.seq / layout.context * config.hidden;
  std::vector<UnitCollective> own;
  if (forwardPass) {
    own.push_back({sp ? OpKind::ReduceScatter : OpKind::AllReduce, ir::AxisKind::Tensor, tokens,
                   "multi-token prediction: the shifted tokens' vocabulary-parallel embedding"});
    if (sp)
      own.push_back({OpKind::AllGather, ir::AxisKind::Tensor, 2 * tokens,
                     "multi-token prediction: sequence-parallel gather of the projection's input",
                     false, false, layout.fp8});
    own.push_back({OpKind::AllGather, ir::AxisKind::Tensor, tokens,
                   "multi-token prediction: the projection's output gathered over the tensor "
                   "axes"});
    result.insert(result.begin(), own.begin(), own.end());
    return;
  }
  if (sp)
    result.push_back({OpKind::AllGather, ir::AxisKind::Tensor, tokens,
                      "multi-token prediction: the projection's output gradient gathered along "
                      "the sequence"});
  if (sp && layout.regather)
    result.push_back({OpKind::AllGather, ir::AxisKind::Tensor, 2 * tokens,
                      "multi-token prediction: the projection's input gathered again, for the "
                      "weight gradient",
                      /*inputGradient=*/false, /*regather=*/true, layout.fp8});
  result.push_back({sp ? OpKind::ReduceScatter : OpKind::AllReduce, ir::AxisKind::Tensor,
                    2 * tokens,
                    sp ? "multi-token prediction: sequence-parallel reduce of the projection's "
                         "input gradient"
                       : "multi-token prediction: tensor-parallel partial sums of the "
                         "projection's input gradient",
                    /*inputGradient=*/true});
  if (sp)
    result.push_back({OpKind::AllGather, ir::AxisKind::Tensor, tokens,
                      "multi-token prediction: the shifted tokens' embedding gradient gathered "
                      "along the sequence"});
}

std::vector<UnitCollective> getUnitCollectives(const ir::Model &model, cost::UnitKind unit,
                                               int64_t layer, bool forwardPass,
                                               const UnitLayout &layout) {
  std::vector<UnitCollective> result;
  if (model.kind == ir::ModelKind::Abstract)
    return result;
  std::vector<OpKind> tensor;
  if (layout.tensor > 1)
    tensor = getTensorCollectives(model, unit, layer, forwardPass, layout.sequenceParallel);
  // Folded routed experts take each rank's own sequence shard: an MoE layer without shared
  // experts has no MLP block pair (the forward's second, the backward's first).
  bool foldedMoe = layout.expertFold && unit == cost::UnitKind::Layer &&
                   model.kind == ir::ModelKind::Transformer && model.transformer.isMoeBlock(layer);
  bool dropMlpPair = foldedMoe && model.transformer.moe.sharedExperts == 0 && tensor.size() == 4;
  if (dropMlpPair)
    tensor.erase(forwardPass ? tensor.begin() + 2 : tensor.begin(),
                 forwardPass ? tensor.end() : tensor.begin() + 2);
  int64_t b = layout.microBatch;
  // The tensor-parallel buffer: b·s·h (the local sequence under context parallelism); the mlp's
  // is the layer's own edge, its output in the forward (b·output for a row-parallel last layer),
  // its input in the backward (b·input for layer 0), which the runtime moves.
  int64_t tensorElements = 0;
  if (model.kind == ir::ModelKind::Transformer) {
    tensorElements = b * model.transformer.seq / layout.context * model.transformer.hidden;
  } else {
    const ir::MlpConfig &mlp = model.mlp;
    tensorElements = b * (forwardPass ? (layer + 1 == mlp.layers ? mlp.output : mlp.width)
                                      : (layer == 0 ? mlp.input : mlp.width));
  }
  // Multi-head latent attention gathers its latents, not the hidden state, before its
  // column-parallel up-projections (Megatron-Core's multi_latent_attention.py: the query latent,
  // or the hidden state without one, the key/value latent and the shared rotary key, each rank's
  // down-projections having run on its own tokens), and reduces their gradients in the backward:
  // the attention block's input collective, the first of a forward under sequence parallelism
  // and the last of a backward.
  bool latent = model.kind == ir::ModelKind::Transformer && unit == cost::UnitKind::Layer &&
                model.transformer.isLatentAttention();
  size_t latentAt = forwardPass ? (layout.sequenceParallel ? 0 : SIZE_MAX) : tensor.size() - 1;
  int64_t latentElements = 0;
  if (latent) {
    const ir::TransformerConfig &config = model.transformer;
    latentElements = b * config.seq / layout.context *
                     ((config.qLoraRank > 0 ? config.qLoraRank : config.hidden) +
                      config.kvLoraRank + config.ropeHeadDim);
  }
  auto elementsAt = [&](size_t i) {
    return latent && i == latentAt ? latentElements : tensorElements;
  };
  // In the backward every tensor-parallel reduction sums the input gradient of a column-parallel
  // product (QKV, the MLP's input, the output layer, an mlp's even layer), the transpose of the
  // forward's gather or identity; the row-parallel products' output gradients are gathered.
  auto addTensor = [&](size_t i, bool fp8, int64_t copies = 1) {
    OpKind kind = tensor[i];
    bool latents = latent && i == latentAt;
    result.push_back({kind, ir::AxisKind::Tensor, copies * elementsAt(i),
                      kind == OpKind::AllGather
                          ? (latents       ? "sequence-parallel gather of the attention's latents"
                             : forwardPass ? "sequence-parallel gather of the input"
                                           : "sequence-parallel gather of the output gradient")
                      : kind == OpKind::ReduceScatter
                          ? (latents ? "sequence-parallel reduce of the latents' gradients"
                                     : "sequence-parallel reduce of the output")
                      : latents ? "tensor-parallel partial sums of the latents' gradients"
                                : "tensor-parallel partial sums",
                      /*inputGradient=*/!forwardPass && kind != OpKind::AllGather,
                      /*regather=*/false, fp8});
  };
  // Context parallelism inside a layer's attention: the attention block's collectives are the
  // first pair of a forward and the second of a backward; the exchange sits between the
  // sequence-parallel gather and reduce of that block, or before its all-reduce.
  std::vector<UnitCollective> context;
  if (layout.context > 1 && unit == cost::UnitKind::Layer &&
      model.kind == ir::ModelKind::Transformer) {
    const ir::TransformerConfig &config = model.transformer;
    // The head widths of K (and Q) and of V: under latent attention head_dim + rope_head_dim and
    // v_head_dim, otherwise both head_dim.
    int64_t cp = layout.context, t = layout.tensor, dqk = config.getQueryKeyHeadDim(),
            dv = config.getValueHeadDim();
    int64_t local = b * config.seq / cp;
    // The key/value heads the attention kernel receives: `heads` where the model repeats them
    // before it (kv_repeat = true, or eager PyTorch), `kv_heads` otherwise.
    int64_t kv = cost::getAttentionKvHeads(config, layout.kernels);
    int64_t kvBlock = local * kv * (dqk + dv) / t; // K and V of the local tokens
    switch (layout.contextMethod) {
    case ir::ContextMethod::Ring:
      // The cp − 1 steps of a pass are one op repeated (Op::repeat).
      if (forwardPass) {
        context.push_back({OpKind::RingStep, ir::AxisKind::Sequence, kvBlock,
                           "ring attention: pass the key/value block on"});
        context.back().repeat = cp - 1;
      } else {
        context.push_back({OpKind::RingStep, ir::AxisKind::Sequence, 2 * kvBlock,
                           "ring attention: pass the key/value block and its gradients on"});
        context.back().repeat = cp - 1;
        context.push_back({OpKind::RingStep, ir::AxisKind::Sequence, kvBlock,
                           "ring attention: send the key/value gradients home"});
      }
      break;
    case ir::ContextMethod::AllGather:
      context.push_back({OpKind::AllGather, ir::AxisKind::Sequence, kvBlock * cp,
                         "context parallelism: all-gather the keys and values"});
      if (!forwardPass)
        context.push_back({OpKind::ReduceScatter, ir::AxisKind::Sequence, kvBlock * cp,
                           "context parallelism: reduce-scatter the key/value gradients"});
      break;
    case ir::ContextMethod::AllToAll: {
      int64_t qkv = local * (config.heads * dqk + kv * (dqk + dv)) / t;
      int64_t out = local * config.heads * dv / t;
      UnitCollective in{OpKind::AllToAll, ir::AxisKind::Sequence, qkv,
                        "Ulysses: queries, keys and values from sequence-split to head-split"};
      UnitCollective back{OpKind::AllToAll, ir::AxisKind::Sequence, out,
                          "Ulysses: the attention output from head-split to sequence-split"};
      if (forwardPass) {
        context = {in, back};
      } else {
        back.what = "Ulysses: the output gradient from sequence-split to head-split";
        in.what = "Ulysses: the query, key and value gradients back to sequence-split";
        context = {back, in};
      }
      break;
    }
    }
  }
  // An MoE layer's dispatch and combine over the expert axes (the rows of getMoeShape).
  std::vector<UnitCollective> experts;
  if (unit == cost::UnitKind::Layer && model.kind == ir::ModelKind::Transformer &&
      model.transformer.isMoeBlock(layer)) {
    const ir::MoeConfig &moe = model.transformer.moe;
    // The load-balancing loss's statistics, the tokens and the mean probability each expert
    // gets (Switch Transformer, eq. 4), summed over the ranks that route the tokens it counts:
    // every data-parallel rank's (`global`), or the context and folded tensor shards of one
    // rank's micro-batch (`local`), per sequence of it under `sequence`.
    bool global = moe.auxLossScope == ir::AuxLossScope::Global;
    bool perSequence = moe.auxLossScope == ir::AuxLossScope::Sequence;
    int64_t routers = (global ? layout.samples : layout.context) * (foldedMoe ? layout.tensor : 1);
    if (forwardPass && moe.auxLoss > 0 && routers > 1) {
      UnitCollective statistics{OpKind::AllReduce, ir::AxisKind::Batch,
                                2 * moe.experts * (perSequence ? b : 1),
                                global ? "load-balancing loss: sum the routing statistics of the "
                                         "micro-batch"
                                : perSequence ? "load-balancing loss: sum each sequence's routing "
                                                "statistics over its shards"
                                              : "load-balancing loss: sum the routing statistics "
                                                "of this rank's micro-batch over its shards"};
      statistics.local = !global;
      experts.push_back(statistics);
    }
    if (!forwardPass && moe.topK > 1 && layout.tensor > 1 && !foldedMoe)
      experts.push_back({OpKind::AllReduce, ir::AxisKind::Tensor,
                         b * model.transformer.seq / layout.context * moe.topK,
                         "MoE: sum the combine weights' gradients over the tensor axes"});
    if (layout.expert > 1) {
      cost::Layout moeLayout;
      moeLayout.microBatch = static_cast<double>(layout.microBatch);
      moeLayout.context = layout.context;
      moeLayout.expert = layout.expert;
      moeLayout.tensor = layout.tensor;
      moeLayout.expertFold = layout.expertFold;
      moeLayout.expertContextFold = layout.expertContextFold;
      cost::MoeShape shape = cost::getMoeShape(model.transformer, moeLayout);
      int64_t rows = static_cast<int64_t>(shape.dispatchRows) * model.transformer.hidden;
      UnitCollective dispatch{OpKind::AllToAll, ir::AxisKind::Expert, rows,
                              forwardPass
                                  ? "expert parallelism: dispatch the routed rows to their experts"
                                  : "expert parallelism: the dispatch's gradients back to the "
                                    "tokens"};
      UnitCollective combine{OpKind::AllToAll, ir::AxisKind::Expert, rows,
                             forwardPass ? "expert parallelism: combine the experts' outputs back"
                                         : "expert parallelism: the combine's gradients to the "
                                           "experts"};
      combine.combine = true;
      if (forwardPass) {
        experts.push_back(dispatch);
        experts.push_back(combine);
      } else {
        experts.push_back(combine);
        experts.push_back(dispatch);
      }
    }
  }
  bool sp = layout.sequenceParallel && model.kind == ir::ModelKind::Transformer;
  // Where the exchanges go among the tensor collectives: the attention's inside the attention
  // block's pair, the experts' inside the MLP block's (forward: attention block first).
  size_t attentionAt = 0, expertsAt = 0;
  if (unit == cost::UnitKind::Layer && !tensor.empty()) {
    attentionAt = forwardPass ? (sp ? 1 : 0) : (sp ? 3 : 1);
    expertsAt = forwardPass ? (sp ? 3 : 1) : (sp ? 1 : 0);
  }
  if (dropMlpPair) {
    // Only the attention block's pair: the experts' exchanges after it in the forward, before it
    // in the backward.
    attentionAt = 1;
    expertsAt = forwardPass ? 2 : 0;
  }
  for (size_t i = 0; i <= tensor.size(); ++i) {
    if (forwardPass && i == attentionAt)
      result.insert(result.end(), context.begin(), context.end());
    if (i == expertsAt)
      result.insert(result.end(), experts.begin(), experts.end());
    if (!forwardPass && i == attentionAt)
      result.insert(result.end(), context.begin(), context.end());
    if (i >= tensor.size())
      break;
    // The column-parallel products' inputs gathered again beside their input gradients, before
    // the reduction of those (QKV's, the MLP's but in an MoE layer, whose experts take the
    // dispatched rows, and the output layer's).
    bool columnParallelReduction =
        !forwardPass && layout.regather && sp && tensor[i] == OpKind::ReduceScatter &&
        (unit == cost::UnitKind::Head ||
         (unit == cost::UnitKind::Layer &&
          (i + 1 == tensor.size() || !model.transformer.isMoeBlock(layer))));
    // Under mixed(fp8) and mixed(fp4) a layer's QKV input and a dense layer's MLP input are
    // gathered quantized (UnitCollective::fp8): the forward's gathers (the attention block's
    // first, the MLP's third) and the regathers before their reductions; and the backward's
    // gathers of the row-parallel products' output gradients (below).
    bool fp8Layer = layout.fp8 && unit == cost::UnitKind::Layer;
    if (columnParallelReduction)
      result.push_back({OpKind::AllGather, ir::AxisKind::Tensor, elementsAt(i),
                        "sequence-parallel gather of the input again, for the weight gradient",
                        /*inputGradient=*/false, /*regather=*/true, fp8Layer});
    bool gather = fp8Layer && sp && tensor[i] == OpKind::AllGather;
    if (forwardPass) {
      addTensor(i, gather && (i == 0 || !model.transformer.isMoeBlock(layer)));
      continue;
    }
    // The backward's gathers of the row-parallel products' output gradients, quantized: the
    // attention's output projection's (the second gather, or the only one where an MoE layer
    // folds its experts without an MLP pair) and a dense layer's MLP's (the first); an MoE
    // layer's MLP block gathers the dispatcher's BF16 rows.
    size_t attentionGather = dropMlpPair ? 0 : 2;
    bool gradient = gather && (i == attentionGather || !model.transformer.isMoeBlock(layer));
    addTensor(i, gradient,
              gradient ? getGradientGatherCopies(layout.fp8Type, layout.userbuffers) : 1);
  }
  if (model.kind == ir::ModelKind::Transformer && layout.tensor > 1)
    addMtpCollectives(model.transformer, unit, layer, forwardPass, layout, result);
  return result;
}

std::vector<UnitCollective> getRecomputedCollectives(const ir::Model &model, cost::UnitKind unit,
                                                     int64_t layer, ir::ActivationMode mode,
                                                     const UnitLayout &layout) {
  if (mode == ir::ActivationMode::RecomputeFull)
    return getUnitCollectives(model, unit, layer, /*forwardPass=*/true, layout);
  std::vector<UnitCollective> result;
  // Megatron-Core's modules: the checkpointed core attention's context-parallel exchanges (below)
  // and a dense layer's checkpointed MLP's tensor-parallel collectives, the last of its forward's
  // (an all-reduce, or under sequence parallelism the gather of its input and the reduce-scatter
  // of its output); the other modules recompute kernels and products on stored inputs.
  if (mode == ir::ActivationMode::RecomputeModules) {
    if (unit != cost::UnitKind::Layer || model.kind != ir::ModelKind::Transformer)
      return result;
    std::vector<UnitCollective> forward =
        getUnitCollectives(model, unit, layer, /*forwardPass=*/true, layout);
    if (layout.recomputeModules & ir::kRecomputeCoreAttention)
      for (const UnitCollective &c : forward)
        if (c.over == ir::AxisKind::Sequence)
          result.push_back(c);
    if ((layout.recomputeModules & ir::kRecomputeMlp) && !model.transformer.isMoeBlock(layer) &&
        layout.tensor > 1) {
      std::vector<UnitCollective> tensor;
      for (const UnitCollective &c : forward)
        if (c.over == ir::AxisKind::Tensor)
          tensor.push_back(c);
      size_t block = layout.sequenceParallel ? 2 : 1;
      if (tensor.size() >= block)
        result.insert(result.end(), tensor.end() - block, tensor.end());
    }
    return result;
  }
  // The checkpointed core attention runs its context-parallel exchanges again (Transformer
  // Engine's attention with context parallelism is inside Megatron-Core's checkpoint).
  if (mode == ir::ActivationMode::RecomputeAttention) {
    if (unit == cost::UnitKind::Layer)
      for (UnitCollective &c : getUnitCollectives(model, unit, layer, /*forwardPass=*/true, layout))
        if (c.over == ir::AxisKind::Sequence)
          result.push_back(std::move(c));
    return result;
  }
  if (mode != ir::ActivationMode::RecomputeOps || unit != cost::UnitKind::Layer)
    return result;
  bool first = true;
  for (UnitCollective &c : getUnitCollectives(model, unit, layer, /*forwardPass=*/true, layout)) {
    if (c.over != ir::AxisKind::Tensor)
      continue;
    if (c.kind == OpKind::AllGather || (c.kind == OpKind::AllReduce && first))
      result.push_back(std::move(c));
    first = false;
  }
  return result;
}

PipelineLayout getPipelineLayout(int64_t layers, int64_t stages, const ir::Pipeline *pipeline) {
  PipelineLayout layout;
  stages = std::max<int64_t>(1, stages);
  int64_t chunks = pipeline ? std::max<int64_t>(1, pipeline->chunks) : 1;
  bool vShape = pipeline && (pipeline->schedule == ir::Schedule::ZeroBubbleV ||
                             pipeline->schedule == ir::Schedule::DualPipeV);
  int64_t total = stages * chunks;
  for (int64_t c = 0; c < total; ++c)
    layout.stageOfChunk.push_back(
        static_cast<int>(vShape && c >= stages ? 2 * stages - 1 - c : c % stages));
  // Layers per chunk: even, or the written first and last stages with the rest even, or even
  // with the embedding and the loss counted as layers of the first and last chunks
  // (Megatron-Core's get_num_layers_to_build), or as a layout writes them.
  int64_t split = pipeline ? pipeline->getSplitLayers(layers) : layers;
  std::vector<int64_t> perChunk(total, total > 0 ? split / total : 0);
  if (total > 0 && pipeline && pipeline->embeddingLayer)
    perChunk.front() = std::max<int64_t>(0, perChunk.front() - 1);
  if (total > 0 && pipeline && pipeline->lossLayer)
    perChunk.back() = std::max<int64_t>(0, perChunk.back() - 1);
  int64_t first = pipeline ? pipeline->firstStageLayers : 0;
  int64_t last = pipeline ? pipeline->lastStageLayers : 0;
  if (chunks == 1 && stages > 1 && (first > 0 || last > 0)) {
    int64_t middle = stages - 2;
    int64_t rest = layers - (first > 0 ? first : 0) - (last > 0 ? last : 0);
    int64_t unwritten = middle + (first > 0 ? 0 : 1) + (last > 0 ? 0 : 1);
    int64_t each = unwritten > 0 ? std::max<int64_t>(0, rest) / unwritten : 0;
    for (int64_t c = 0; c < total; ++c)
      perChunk[c] = each;
    if (first > 0)
      perChunk.front() = first;
    if (last > 0)
      perChunk.back() = last;
  }
  // Megatron-Core's layout gives each virtual stage its layers, in the same order.
  if (pipeline && static_cast<int64_t>(pipeline->layout.layers.size()) == total)
    perChunk = pipeline->layout.layers;
  // Whatever an uneven split leaves goes to the last chunk (the verifier rejects such splits).
  int64_t assigned = 0;
  for (int64_t value : perChunk)
    assigned += value;
  if (total > 0)
    perChunk.back() += layers - assigned;
  layout.layersOfStage.assign(stages, 0);
  for (int64_t c = 0; c < total; ++c) {
    for (int64_t i = 0; i < perChunk[c]; ++i) {
      layout.chunkOfLayer.push_back(static_cast<int>(c));
      layout.layerInChunk.push_back(i);
    }
    layout.layersOfStage[layout.stageOfChunk[c]] += perChunk[c];
  }
  layout.chunkOfLayer.resize(static_cast<size_t>(std::max<int64_t>(0, layers)),
                             static_cast<int>(total - 1));
  layout.layerInChunk.resize(layout.chunkOfLayer.size(), 0);
  return layout;
}

bool PipelineLayout::isRecomputedLayer(int64_t layer, int64_t recomputeLayers) const {
  if (recomputeLayers <= 0)
    return true;
  if (layer < 0 || layer >= static_cast<int64_t>(layerInChunk.size()))
    return false;
  return layerInChunk[static_cast<size_t>(layer)] < recomputeLayers;
}

std::unique_ptr<StepPlan> lowerRun(const ir::Run &run, const LowerOptions &options) {
  return Lowering(run, options).lower();
}

void printPlan(const StepPlan &plan, raw_ostream &os) {
  const ir::Run &run = *plan.run;
  const ir::Mesh &mesh = run.strategy->mesh;
  os << "plan " << run.name << " {\n";
  os << "  micro-batches per step: " << plan.microbatches;
  if (plan.stages.size() > 1)
    os << ", schedule " << ir::toString(plan.schedule) << " over " << plan.stages.size()
       << " stages" << (plan.chunks > 1 ? ", " + std::to_string(plan.chunks) + " chunks" : "");
  os << "\n  dtypes: params ";
  // params = fp32: the stored parameters are fp32, the gathered and cast copies the compute type.
  if (run.fp32Params)
    os << "fp32 (used as " << toString(plan.paramType) << ")";
  else
    os << toString(plan.paramType);
  os << ", grads " << toString(plan.gradType) << ", activations " << toString(plan.activationType);
  if (plan.boundaryType != plan.activationType)
    os << ", stage boundaries " << toString(plan.boundaryType);
  os << ", optimizer fp32\n";
  auto printCall = [&](const Op &op, unsigned indent) {
    os.indent(indent) << toString(op.kind);
    if (op.kind == OpKind::Compute)
      os << " " << toString(op.compute);
    if (op.unit >= 0)
      os << " " << plan.units[op.unit].name;
    os << " " << ir::toString(op.state);
    if (!op.axes.empty()) {
      os << " over ";
      for (size_t i = 0; i < op.axes.size(); ++i)
        os << (i ? "," : "") << mesh.axes[op.axes[i]].name;
    }
    if (op.peerStage >= 0)
      os << (op.kind == OpKind::Send   ? " to stage "
             : op.kind == OpKind::Recv ? " from stage "
                                       : " with stage ")
         << op.peerStage;
    if (op.kind == OpKind::Compute)
      os << " flops=" << format("%.6g", op.flops);
    else
      os << " elements=" << op.elements << " " << toString(op.dtype);
    os << "   // " << op.reason << "\n";
  };
  // A repeated op (Op::repeat) is printed once for each of the calls it stands for.
  auto printOp = [&](const Op &op, unsigned indent) {
    for (int64_t call = 0; call < op.repeat; ++call)
      printCall(op, indent);
  };
  for (const StagePlan &stage : plan.stages) {
    os << "  stage " << stage.stage << " {\n    units:";
    for (unsigned unit : stage.units)
      os << " " << plan.units[unit].name;
    os << "\n    for each micro-batch: forward {\n";
    for (const Op &op : stage.forward)
      printOp(op, 6);
    os << "    }\n    for each micro-batch: backward {\n";
    for (const Op &op : stage.backward)
      printOp(op, 6);
    os << "    }\n    once per step {\n";
    for (const Op &op : stage.step)
      printOp(op, 6);
    os << "    }\n  }\n";
  }
  os << "}\n";
}

} // namespace placec::plan
