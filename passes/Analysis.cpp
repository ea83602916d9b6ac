// Memory, communication and time of a run, computed by walking its StepPlan and asking the cost
// model what each unit, op and stage costs.
#include "placec/passes/Analysis.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <set>
#include <tuple>

using namespace llvm;

namespace placec::analysis {

StringRef toString(LinkClass link) {
  switch (link) {
  case LinkClass::IntraNode:
    return "intra";
  case LinkClass::InterNode:
    return "inter";
  case LinkClass::Host:
    return "host";
  }
  return "?";
}

std::string getCollectiveName(plan::OpKind kind) {
  switch (kind) {
  case plan::OpKind::HostToDevice:
    return "host->device";
  case plan::OpKind::DeviceToHost:
    return "device->host";
  default:
    return plan::toString(kind).str();
  }
}

cost::Collective getCollective(plan::OpKind kind) {
  switch (kind) {
  case plan::OpKind::AllReduce:
    return cost::Collective::AllReduce;
  case plan::OpKind::AllGather:
    return cost::Collective::AllGather;
  case plan::OpKind::ReduceScatter:
    return cost::Collective::ReduceScatter;
  case plan::OpKind::AllToAll:
    return cost::Collective::AllToAll;
  case plan::OpKind::Send:
  case plan::OpKind::Recv:
  case plan::OpKind::RingStep:
    return cost::Collective::PointToPoint;
  default:
    return cost::Collective::Host;
  }
}

size_t getPassPositions(const std::vector<plan::Op> &ops, std::vector<size_t> &positions) {
  positions.assign(ops.size(), 0);
  // Forward scan: the position of each compute op (consecutive computes of one unit, such as a
  // recomputation and its backward, share one), and of the ops after it.
  size_t count = 0;
  int lastUnit = -2;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == plan::OpKind::Compute && (count == 0 || ops[i].unit != lastUnit)) {
      ++count;
      lastUnit = ops[i].unit;
    }
    positions[i] = count == 0 ? 0 : count - 1;
  }
  // Backward scan: a parameter gather belongs to the next compute.
  size_t next = count == 0 ? 0 : count - 1;
  for (size_t i = ops.size(); i-- > 0;) {
    if (ops[i].kind == plan::OpKind::Compute)
      next = positions[i];
    else if (ops[i].kind == plan::OpKind::AllGather && ops[i].state == ir::State::Params)
      positions[i] = next;
  }
  return std::max<size_t>(count, 1);
}

namespace {

using plan::Op;
using plan::OpKind;
using plan::Phase;

std::string num(double value) { return cost::formatFormulaNumber(value); }
std::string seconds(double value) { return cost::formatFormulaSeconds(value); }

std::string microbatches(double count) {
  return num(count) + (count == 1 ? " micro-batch" : " micro-batches");
}

/// `3.12 GB`.
std::string bytesText(double value) {
  static const char *prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int index = 0;
  while (std::fabs(value) >= 1000 && index < 6) {
    value /= 1000;
    ++index;
  }
  if (index == 0)
    return fmt::format("{} B", num(value));
  int decimals = value >= 99.95 ? 0 : value >= 9.995 ? 1 : 2;
  return fmt::format("{:.{}f} {}B", value, decimals, prefixes[index]);
}

bool isTraffic(const Op &op) {
  return op.kind != OpKind::Compute && op.kind != OpKind::Free &&
         op.kind != OpKind::OptimizerUpdate && op.kind != OpKind::Recv;
}

/// Gathers of parameters and reductions of gradients over batch axes run beside compute.
/// The embedding's gradient all-reduce with its copy's stage (a collective with a peer stage)
/// waits for them: Megatron-Core's finalize_model_grads runs it after the data-parallel ones.
bool isOverlappable(const Op &op) {
  return (op.state == ir::State::Params && op.kind == OpKind::AllGather) ||
         (op.state == ir::State::Grads && op.peerStage < 0 &&
          (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllReduce));
}

class Analyzer {
public:
  Analyzer(const plan::StepPlan &plan, const AnalysisOptions &options)
      : plan(plan), run(*plan.run), strategy(*run.strategy), mesh(strategy.mesh), model(*run.model),
        cluster(*run.cluster), options(options), stateBytes(ir::getStateBytes(run)),
        costModel(cluster, run.precision,
                  cost::getWeightGradientResultBytes(run.precision, stateBytes, run.fp32Params,
                                                     run.gradAccumulation)),
        layout(cost::getRunLayout(run)) {}

  RunAnalysis analyze();

private:
  struct Shard {
    int64_t degree = 1;
    std::string text; ///< ` / 64 (gather over dp)` or ` (replicated over dp = 64)`.
  };
  /// The shard degree of a state over its batch axes; of the routed experts' over their
  /// expert-data-parallel axes with `expert`; its text only with `explain`.
  Shard shardOf(ir::State state, bool expert, bool explain) const;
  /// What a stage holds, for the cost model's memory formula.
  cost::StageStates stageStates(const plan::StagePlan &stage, bool explain) const;

  const cost::GroupShape &groupOf(const plan::AxisList &axes) {
    auto it = groups.find(axes);
    if (it == groups.end())
      it = groups.emplace(axes, cost::getGroupShape(mesh, axes, cluster.devicesPerNode)).first;
    return it->second;
  }
  /// The group of a collective made by `stage`: its axes', or with a peer stage the two stages.
  cost::GroupShape groupOf(const Op &op, int stage) {
    if (op.peerStage < 0 || op.axes.empty())
      return groupOf(op.axes);
    return cost::getStagePairShape(mesh.getStride(op.axes[0]), mesh.axes[op.axes[0]].size, stage,
                                   op.peerStage, mesh.getNumDevices(), cluster.devicesPerNode);
  }
  /// Whether a pipeline send of `stage` to `peer` crosses nodes.
  bool sendCrossesNodes(const Op &op, int stage) {
    if (op.axes.empty() || op.peerStage < 0)
      return false;
    auto key = std::make_pair(stage, op.peerStage);
    auto it = crossings.find(key);
    if (it == crossings.end())
      it = crossings
               .emplace(key, cost::crossesNodes(mesh.getStride(op.axes[0]),
                                                mesh.axes[op.axes[0]].size, stage, op.peerStage,
                                                mesh.getNumDevices(), cluster.devicesPerNode))
               .first;
    return it->second;
  }
  LinkClass linkOf(const Op &op, int stage);
  /// The time of one call of a collective or transfer made by `stage`.
  double callSeconds(const Op &op, int stage, double bytes, std::string *formula = nullptr);
  /// The time of a compute op (transformer layers share one figure per kind of pass).
  double computeSeconds(const Op &op, std::vector<Explanation> *lines = nullptr);
  /// The weight-gradient part of a backward compute op.
  double weightSeconds(const Op &op) const {
    return costModel.getWeightGradientSeconds(op.getWork());
  }
  /// The part of a compute op between the expert dispatch and the combine (keyed as
  /// computeSeconds).
  double routedExpertSeconds(const Op &op) {
    auto [it, inserted] = routedCache.try_emplace(&op.getWork());
    if (inserted)
      it->second = costModel.getRoutedExpertSeconds(op.getWork());
    return it->second;
  }
  /// The copy of the gathered parameters out of an all-gather's buffer that follows `op` on the
  /// compute stream under `param_gather = copy_out`; 0 for any other op or setting.
  double gatherCopySeconds(const Op &op, std::string *formula = nullptr) const {
    if (run.paramGather != ir::ParamGather::CopyOut || op.kind != OpKind::AllGather ||
        op.state != ir::State::Params)
      return 0;
    return costModel.getGatherCopySeconds(
        static_cast<double>(op.elements) * plan::getSize(op.dtype), formula);
  }
  /// The GEMM seconds of a compute op by tensor-parallel slot (cost::TensorSlot).
  const cost::TensorSlotSeconds &slotSeconds(const Op &op);
  /// Whether the strategy's async_tp runs tensor-parallel traffic beside products
  /// (cost::overlapsTensorTraffic).
  bool overlapsTensorTraffic(bool forwardComputation, bool inputGradient) const {
    return cost::overlapsTensorTraffic(strategy.asyncTensorParallel, forwardComputation,
                                       inputGradient);
  }
  /// An expert-parallel all-to-all (a MoE layer's dispatch or combine, forward or backward): over
  /// the expert axes, and the tensor and sequence axes with them where the experts fold them
  /// (`expert_tensor = fold`, `expert_context = fold`).
  bool isExpertExchange(const Op &op) const {
    auto kindOf = [&](unsigned axis) { return mesh.axes[axis].kind; };
    return op.kind == OpKind::AllToAll &&
           llvm::any_of(op.axes,
                        [&](unsigned axis) { return kindOf(axis) == ir::AxisKind::Expert; }) &&
           llvm::all_of(op.axes,
                        [&](unsigned axis) { return strategy.isExpertGroupAxis(kindOf(axis)); });
  }
  /// Communication inside a unit that runs beside the unit's compute: the tensor-parallel
  /// collectives under async_tp and sequence parallelism's second gathers of the column-parallel
  /// products' inputs, beside their own products (isAsyncTensor), and ring attention's
  /// exchanges, beside the whole unit.
  bool isAsyncTensor(const Op &op) const {
    return !op.boundary &&
           (op.regather || overlapsTensorTraffic(op.phase == plan::Phase::Forward || op.recomputed,
                                                 op.inputGradient)) &&
           op.state == ir::State::Activations && plan::isCollective(op.kind) && !op.axes.empty() &&
           llvm::all_of(op.axes, [&](unsigned axis) {
             return mesh.axes[axis].kind == ir::AxisKind::Tensor;
           });
  }

  /// Where the time of a pass's op other than a compute goes: beside the neighbouring units'
  /// compute (parameter gathers, gradient reductions), into the expert overlap, beside the
  /// unit's own products (isAsyncTensor) or its whole compute (ring attention), or on the
  /// critical path.
  enum class Lane { Neighbours, Experts, Products, Unit, Critical };
  Lane laneOf(const Op &op) const {
    if (isOverlappable(op))
      return Lane::Neighbours;
    if (strategy.expertOverlap == ir::ExpertOverlap::On && isExpertExchange(op))
      return Lane::Experts;
    if (isAsyncTensor(op))
      return Lane::Products;
    if (op.kind == OpKind::RingStep)
      return Lane::Unit;
    return Lane::Critical;
  }

  void explainMemory(RunExplanation &explanation, const MemoryReport &memory);
  void explainCommunication(RunExplanation &explanation,
                            const std::vector<CommEntry> &communication);

  const plan::StepPlan &plan;
  const ir::Run &run;
  const ir::Strategy &strategy;
  const ir::Mesh &mesh;
  const ir::Model &model;
  const ir::Cluster &cluster;
  const AnalysisOptions &options;
  /// Bytes per parameter of each model state under the run's precision and optimizer.
  const ir::StateBytes stateBytes;
  cost::CostModel costModel;
  cost::Layout layout;
  std::map<plan::AxisList, cost::GroupShape> groups;
  std::map<std::pair<int, int>, bool> crossings;
  /// The compute time, the product slots and the routed experts' part of each work, keyed by
  /// the work the compute ops share (the ops of one class of units and one pass: plan::Op::work).
  std::map<const cost::Work *, double> computeCache;
  std::map<const cost::Work *, cost::TensorSlotSeconds> slotCache;
  std::map<const cost::Work *, double> routedCache;
};

Analyzer::Shard Analyzer::shardOf(ir::State state, bool expert, bool explain) const {
  Shard shard;
  const ir::StatePlacement &placement =
      expert ? strategy.getExpertPlacement(state) : strategy.getPlacement(state);
  std::vector<std::string> split, replicated;
  for (unsigned i = 0; i < mesh.axes.size() && i < placement.axes.size(); ++i) {
    const ir::Axis &axis = mesh.axes[i];
    if (expert ? !strategy.isExpertDataParallelAxis(axis.kind) : !ir::isDataParallel(axis.kind))
      continue;
    switch (placement.axes[i].mode) {
    case ir::PlacementMode::Sharded:
    case ir::PlacementMode::ShardedWithGather:
      shard.degree *= axis.size;
      if (explain)
        split.push_back(fmt::format(
            "{} over {}", placement.axes[i].mode == ir::PlacementMode::Sharded ? "shard" : "gather",
            axis.name));
      break;
    default:
      if (explain && axis.size > 1)
        replicated.push_back(fmt::format("{} = {}", axis.name, axis.size));
      break;
    }
  }
  if (!explain)
    return shard;
  if (shard.degree > 1)
    shard.text = fmt::format(" / {} ({})", shard.degree, llvm::join(split, ", "));
  else if (!replicated.empty())
    shard.text = fmt::format(" (replicated over {})", llvm::join(replicated, ", "));
  return shard;
}

cost::StageStates Analyzer::stageStates(const plan::StagePlan &stage, bool explain) const {
  cost::StageStates x;
  const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
  const ir::StatePlacement &grads = strategy.getPlacement(ir::State::Grads);
  const ir::StatePlacement &optimizer = strategy.getPlacement(ir::State::Optimizer);
  const ir::StatePlacement &activations = strategy.getPlacement(ir::State::Activations);
  x.optimizerOnHost = optimizer.tier != ir::Tier::Device;
  // ZeRO-Offload: with the optimizer on the host, gradients sharded over a batch axis go there
  // after each micro-batch's reduce-scatter and accumulate there; replicated gradients
  // accumulate on the device until the step's reduction (the plan's device-to-host ops).
  bool gradsSharded = llvm::any_of(llvm::seq<unsigned>(0, mesh.axes.size()), [&](unsigned i) {
    return ir::isDataParallel(mesh.axes[i].kind) &&
           grads.axes[i].mode == ir::PlacementMode::Sharded;
  });
  x.gradsOnHostWithOptimizer = x.optimizerOnHost && !grads.tierExplicit && gradsSharded;
  x.gradsOnHost = grads.tier != ir::Tier::Device || x.gradsOnHostWithOptimizer;
  x.paramsOnHost = params.tier != ir::Tier::Device;
  x.activationsOnHost = activations.tier != ir::Tier::Device;
  Shard paramShard = shardOf(ir::State::Params, false, explain),
        gradShard = shardOf(ir::State::Grads, false, explain),
        optimizerShard = shardOf(ir::State::Optimizer, false, explain);
  x.paramShard = paramShard.degree;
  x.gradShard = gradShard.degree;
  x.optimizerShard = optimizerShard.degree;
  x.paramShardText = paramShard.text;
  x.gradShardText = gradShard.text;
  x.optimizerShardText = optimizerShard.text;

  if (model.isMoe()) {
    Shard expertParams = shardOf(ir::State::Params, true, explain),
          expertGrads = shardOf(ir::State::Grads, true, explain),
          expertOptimizer = shardOf(ir::State::Optimizer, true, explain);
    x.expertParamShard = expertParams.degree;
    x.expertGradShard = expertGrads.degree;
    x.expertOptimizerShard = expertOptimizer.degree;
    // The devices of an expert group, as the cost model counts them (ep, or ep·t folded).
    double group = explain ? cost::getMoeShape(model.transformer, layout).group : 1;
    std::string split =
        group > 1 ? fmt::format(" (E/{} experts per device)", group) : std::string();
    x.expertParamShardText = expertParams.text + split;
    x.expertGradShardText = expertGrads.text;
    x.expertOptimizerShardText = expertOptimizer.text;
  }

  double embedParams = 0;
  int64_t embeddingCopy = 0;
  bool hasHead = false, hasEmbedding = false;
  for (unsigned index : stage.units) {
    const plan::Unit &unit = plan.units[index];
    double elements = static_cast<double>(unit.params);
    embeddingCopy += unit.embeddingCopy;
    (unit.expert ? x.expertParams : x.params) += elements;
    bool plain = !cost::quantizesParams(unit.kind);
    if (plain && !unit.expert)
      x.plainParams += elements;
    if (elements > x.largestUnit) {
      x.largestUnit = elements;
      x.largestName = unit.name;
      x.largestPlain = plain;
    }
    if (unit.expert)
      continue;
    bool moeLayer = unit.kind == cost::UnitKind::Layer &&
                    model.kind == ir::ModelKind::Transformer &&
                    model.transformer.isMoeBlock(unit.layer);
    if (moeLayer)
      ++x.moeLayers;
    if (unit.kind == cost::UnitKind::Layer && model.kind == ir::ModelKind::Transformer &&
        model.transformer.isMtpBlock(unit.layer))
      ++x.mtpLayers;
    if (unit.kind == cost::UnitKind::Layer || unit.kind == cost::UnitKind::MlpLayer) {
      ++x.layers;
      // recompute(layers = n): the layers after the first n of their chunk keep everything.
      if (layout.activations != ir::ActivationMode::Keep && !unit.recomputed) {
        ++x.keptLayers;
        x.keptMoeLayers += moeLayer ? 1 : 0;
      }
    }
    if (unit.kind == cost::UnitKind::Embedding) {
      embedParams = elements;
      hasEmbedding = true;
    }
    hasHead |= unit.kind == cost::UnitKind::Head;
  }
  x.units = static_cast<int64_t>(stage.units.size());
  x.gathers = llvm::any_of(stage.forward, [](const Op &op) {
    return op.kind == OpKind::AllGather && op.state == ir::State::Params;
  });
  x.keepAfterForward = llvm::any_of(
      params.axes, [](const ir::AxisPlacement &axis) { return axis.keepAfterForward; });
  // Tied embeddings stay gathered from the embedding's forward through the head's (the plan's
  // Free of the embedding follows the head).
  if (model.kind == ir::ModelKind::Transformer && model.transformer.tiedEmbeddings && hasHead)
    x.tiedEmbedding = embedParams;

  x.activationsKnown = model.kind != ir::ModelKind::Abstract;
  // One dense layer's and (where the stage has them) one MoE layer's activation bytes under
  // `layoutOf`'s mode.
  auto layerBytes = [&](const cost::Layout &layoutOf, bool withMoe, double &dense,
                        std::string &denseText, double &moe, std::string &moeText) {
    if (model.kind == ir::ModelKind::Transformer) {
      dense = cost::getLayerActivationBytes(model.transformer, layoutOf,
                                            explain ? &denseText : nullptr);
      if (withMoe)
        moe = cost::getLayerActivationBytes(model.transformer, layoutOf,
                                            explain ? &moeText : nullptr, /*moeLayer=*/true);
    } else if (model.kind == ir::ModelKind::Mlp)
      dense = cost::getMlpLayerActivationBytes(model.mlp, layoutOf, explain ? &denseText : nullptr);
  };
  layerBytes(layout, x.moeLayers > 0, x.layerActivationBytes, x.layerActivationText,
             x.moeLayerActivationBytes, x.moeLayerActivationText);
  if (x.mtpLayers > 0)
    x.mtpActivationBytes = cost::getMtpActivationBytes(model.transformer, layout,
                                                       explain ? &x.mtpActivationText : nullptr);
  if (hasEmbedding && model.kind == ir::ModelKind::Transformer)
    x.embeddingActivationBytes = cost::getEmbeddingActivationBytes(
        model.transformer, layout, explain ? &x.embeddingActivationText : nullptr);
  if (x.keptLayers > 0) {
    cost::Layout keep = layout;
    keep.activations = ir::ActivationMode::Keep;
    layerBytes(keep, x.keptMoeLayers > 0, x.keptLayerActivationBytes, x.keptLayerActivationText,
               x.keptMoeLayerActivationBytes, x.keptMoeLayerActivationText);
  }
  // The layer being recomputed (the larger of a dense and an MoE one where the stage has both).
  if (x.layers > x.keptLayers) {
    std::string denseText, moeText;
    double dense =
        x.layers - x.moeLayers > x.keptLayers - x.keptMoeLayers
            ? cost::getRecomputedLayerBytes(model, layout, explain ? &denseText : nullptr)
            : 0;
    double moe =
        x.moeLayers > x.keptMoeLayers
            ? cost::getRecomputedLayerBytes(model, layout, explain ? &moeText : nullptr, true)
            : 0;
    x.recomputedLayer = std::max(dense, moe);
    if (explain)
      x.recomputedLayerText = moe > dense ? moeText : denseText;
  }
  double scheduleInFlight = cost::getInFlightMicrobatches(
      plan.schedule, static_cast<int64_t>(plan.stages.size()), plan.microbatches, plan.chunks,
      stage.stage, explain ? &x.inFlightText : nullptr, plan.group);
  x.inFlight = scheduleInFlight;
  // The layers' activations only: the loss's buffers are not paired (the combined step runs the
  // backward's loss before its layers, the forward's after them).
  if (strategy.expertOverlap == ir::ExpertOverlap::On)
    x.inFlight = cost::getExpertOverlapInFlight(
        plan.schedule, scheduleInFlight, static_cast<int64_t>(plan.stages.size()),
        plan.microbatches, plan.chunks, x.layers, explain ? &x.inFlightText : nullptr);
  // Schedules that defer weight passes: what the deferred passes hold at the stage's peaks, by
  // class of layer (and whether recompute(layers = n) keeps it).
  x.peaks = cost::getDeferredWeightPeaks(
      plan.schedule, static_cast<int64_t>(plan.stages.size()), plan.microbatches, plan.chunks,
      stage.stage, hasHead, x.inFlight - scheduleInFlight, explain ? &x.peaksText : nullptr);
  if (!x.peaks.empty()) {
    cost::Layout keep = layout;
    keep.activations = ir::ActivationMode::Keep;
    std::map<std::pair<int64_t, bool>, double> extraOf;
    for (unsigned index : stage.units) {
      const plan::Unit &unit = plan.units[index];
      if (unit.expert ||
          (unit.kind != cost::UnitKind::Layer && unit.kind != cost::UnitKind::MlpLayer))
        continue;
      bool kept = layout.activations != ir::ActivationMode::Keep && !unit.recomputed;
      auto [it, inserted] =
          extraOf.try_emplace({cost::getUnitWorkClass(model, unit.kind, unit.layer), kept}, 0.0);
      if (inserted) {
        std::string text;
        it->second = cost::getDeferredWeightExtraBytes(model, unit.layer, kept ? keep : layout,
                                                       cost::keepsGraphForWeightPass(plan.schedule),
                                                       explain ? &text : nullptr);
        if (explain && !text.empty())
          x.deferredExtraText += (x.deferredExtraText.empty() ? "" : "; ") + text;
      }
      x.deferredExtra += it->second;
    }
    if (hasHead && model.kind == ir::ModelKind::Transformer)
      x.headWeightPass = cost::getWeightPassBytes(model, cost::UnitKind::Head, 0, layout,
                                                  explain ? &x.headWeightPassText : nullptr);
  }
  if (hasHead && model.kind == ir::ModelKind::Transformer) {
    std::string headText, lossText;
    double lossInFlight = cost::getLossInFlightMicrobatches(
        plan.schedule, static_cast<int64_t>(plan.stages.size()), plan.microbatches, plan.chunks,
        stage.stage, explain ? &lossText : nullptr, plan.group);
    x.headBuffers =
        cost::getHeadActivationBytes(model.transformer, layout, explain ? &headText : nullptr) *
        lossInFlight;
    if (explain)
      x.headBuffersText =
          headText + "× " + num(lossInFlight) + " in flight (the head's loss: " + lossText + ")";
  }
  if (explain) {
    x.paramsText = num(x.params);
    if (plan.stages.size() > 1 && !stage.units.empty())
      x.paramsText +=
          fmt::format(" (stage {}: {}..{})", stage.stage, plan.units[stage.units.front()].name,
                      plan.units[stage.units.back()].name);
    int64_t tensorDegree = mesh.getDegree(ir::AxisKind::Tensor);
    if (tensorDegree > 1)
      x.paramsText += fmt::format(" (per device after the tensor split over {})", tensorDegree);
    if (embeddingCopy > 0)
      x.paramsText += fmt::format(" (with the head's copy of the word embedding, {})",
                                  num(static_cast<double>(embeddingCopy)));
  }
  return x;
}

LinkClass Analyzer::linkOf(const Op &op, int stage) {
  if (op.kind == OpKind::HostToDevice || op.kind == OpKind::DeviceToHost)
    return LinkClass::Host;
  if (op.kind == OpKind::Send || op.kind == OpKind::Recv)
    return sendCrossesNodes(op, stage) ? LinkClass::InterNode : LinkClass::IntraNode;
  return groupOf(op, stage).isIntraNode() ? LinkClass::IntraNode : LinkClass::InterNode;
}

double Analyzer::callSeconds(const Op &op, int stage, double bytes, std::string *formula) {
  switch (op.kind) {
  case OpKind::HostToDevice:
  case OpKind::DeviceToHost:
    return costModel.getHostSeconds(bytes, false, formula);
  case OpKind::Send:
  case OpKind::Recv:
    return costModel.getPointToPointSeconds(bytes, sendCrossesNodes(op, stage), formula);
  case OpKind::AllToAll:
    if (isExpertExchange(op) && model.kind == ir::ModelKind::Transformer)
      return costModel.getExpertExchangeSeconds(strategy.expertDispatcher, groupOf(op.axes), bytes,
                                                model.transformer.moe, formula);
    [[fallthrough]];
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
  case OpKind::AllReduce:
    return costModel.getCollectiveSeconds(getCollective(op.kind), groupOf(op, stage), bytes,
                                          formula);
  case OpKind::RingStep:
    // Each rank sends to its neighbour in the group; across nodes when the group spans them.
    return costModel.getPointToPointSeconds(bytes, !groupOf(op.axes).isIntraNode(), formula);
  default:
    return 0;
  }
}

const cost::TensorSlotSeconds &Analyzer::slotSeconds(const Op &op) {
  static const cost::TensorSlotSeconds none{};
  // The products beside which async_tp's collectives run: all of a pass whose collectives it
  // overlaps, or under `wgrad` the backward's column-parallel weight gradients; and those beside
  // which sequence parallelism gathers the column-parallel inputs again, their input gradients.
  bool backward = op.compute == plan::ComputeKind::Backward;
  bool async = overlapsTensorTraffic(!backward, backward);
  bool regather = backward && plan.regather;
  if (!async && !regather)
    return none;
  // Keyed as computeSeconds: the units of one class have the same products.
  auto [it, inserted] = slotCache.try_emplace(&op.getWork());
  if (inserted) {
    if (async && strategy.asyncTensorParallel != ir::AsyncTensorParallel::WeightGradient)
      costModel.getComputeSeconds(op.getWork(), nullptr, &it->second);
    else
      it->second = costModel.getColumnParallelSlotSeconds(
          op.getWork(), regather,
          strategy.asyncTensorParallel == ir::AsyncTensorParallel::WeightGradient);
  }
  return it->second;
}

double Analyzer::computeSeconds(const Op &op, std::vector<Explanation> *lines) {
  // The ops of one class of units share their work, and so its time (the flops follow from it).
  const cost::Work *key = &op.getWork();
  if (!lines) {
    auto it = computeCache.find(key);
    if (it != computeCache.end())
      return it->second;
  }
  double time = op.getWork().empty() && op.flops > 0
                    ? op.flops / (costModel.getPeak() * cluster.efficiency)
                    : costModel.getComputeSeconds(op.getWork(), lines);
  computeCache[key] = time;
  return time;
}

void Analyzer::explainMemory(RunExplanation &explanation, const MemoryReport &memory) {
  // The stage the report shows: the first with the highest device peak.
  size_t stageIndex = 0;
  for (size_t i = 0; i < memory.stages.size(); ++i)
    if (memory.stages[i].device.peak == memory.device.peak) {
      stageIndex = i;
      break;
    }
  if (stageIndex >= plan.stages.size())
    return;
  const plan::StagePlan &stage = plan.stages[stageIndex];
  explanation.stage = stage.stage;
  cost::StageStates states = stageStates(stage, /*explain=*/true);
  std::vector<Explanation> device, host;
  cost::StageMemoryResult result = cost::getStageMemory(states, stateBytes, &device, &host);
  // Order as the report's table: the model states, then activations, transient and peak.
  explanation.deviceMemory = std::move(device);
  explanation.deviceMemory.push_back(
      {"use of device memory",
       fmt::format("peak / device_memory = {} / {}", bytesText(result.device.peak),
                   bytesText(cluster.deviceMemory)),
       result.device.peak / cluster.deviceMemory, "%"});
  explanation.hostMemory = std::move(host);
  if (!explanation.hostMemory.empty()) {
    const MemoryBreakdown &h = result.host;
    explanation.hostMemory.push_back(
        {"peak",
         fmt::format("params + grads + optimizer + activations on the host = {} + {} + {} + {}",
                     bytesText(h.params), bytesText(h.grads), bytesText(h.optimizer),
                     bytesText(h.activations)),
         h.peak, "B"});
    std::string capacity = cluster.hostMemory
                               ? fmt::format(" (host_memory {})", bytesText(*cluster.hostMemory))
                               : std::string(" (host_memory not given: not checked)");
    explanation.hostMemory.push_back(
        {"per node",
         fmt::format("peak × devices_per_node = {} × {}{}", bytesText(h.peak),
                     cluster.devicesPerNode, capacity),
         h.peak * static_cast<double>(cluster.devicesPerNode), "B"});
  }
}

void Analyzer::explainCommunication(RunExplanation &explanation,
                                    const std::vector<CommEntry> &communication) {
  double m = static_cast<double>(plan.microbatches);
  for (const CommEntry &entry : communication) {
    std::vector<Explanation> lines;
    double perMicrobatchCalls = 0, perStepCalls = 0;
    // The elements of the row by type, per micro-batch and once per step: a row can mix types
    // (a backward's quantized regathers beside its BF16 gradient gathers).
    std::map<plan::DType, std::pair<double, double>> elementsByType;
    const Op *sample = nullptr;
    for (const plan::StagePlan &stage : plan.stages) {
      if (stage.stage != entry.stage)
        continue;
      for (const std::vector<Op> *ops : {&stage.forward, &stage.backward, &stage.step})
        for (const Op &op : *ops) {
          if (!isTraffic(op) || op.kind != entry.collective ||
              ArrayRef<unsigned>(op.axes) != ArrayRef<unsigned>(entry.axes) ||
              op.state != entry.state || op.phase != entry.phase)
            continue;
          sample = &op;
          double calls = static_cast<double>(op.repeat);
          double elements = calls * static_cast<double>(op.elements);
          std::pair<double, double> &byType = elementsByType[op.dtype];
          if (op.perMicrobatch) {
            perMicrobatchCalls += calls;
            byType.first += elements;
          } else {
            perStepCalls += calls;
            byType.second += elements;
          }
        }
    }
    double n = static_cast<double>(entry.groupSize);
    std::string what = entry.link == LinkClass::Host ? " over the host link"
                       : entry.axis.empty()          ? ""
                                                     : " over " + entry.axis;
    double count = perMicrobatchCalls * m + perStepCalls;
    std::vector<std::string> countParts;
    if (perMicrobatchCalls > 0)
      countParts.push_back(
          fmt::format("{} per micro-batch × {}", num(perMicrobatchCalls), microbatches(m)));
    if (perStepCalls > 0)
      countParts.push_back(fmt::format("{} once per step", num(perStepCalls)));
    lines.push_back({"count", llvm::join(countParts, " + "), count, "calls"});

    double total = 0;
    std::vector<std::string> totalParts;
    for (const auto &[dtype, elements] : elementsByType) {
      double size = plan::getSize(dtype);
      std::string type = fmt::format("{} B ({})", num(size), plan::toString(dtype).str());
      total += (elements.first * m + elements.second) * size;
      if (elements.first > 0)
        totalParts.push_back(
            fmt::format("{} elements × {} × {}", num(elements.first), type, microbatches(m)));
      if (elements.second > 0)
        totalParts.push_back(fmt::format("{} elements × {}", num(elements.second), type));
    }
    lines.push_back({"total", llvm::join(totalParts, " + "), total, "B"});
    double message = count > 0 ? total / count : 0;
    lines.push_back({"message",
                     fmt::format("total / count = {} / {}", bytesText(total), num(count)), message,
                     "B"});

    cost::Collective collective = getCollective(entry.collective);
    double sent = cost::getSentBytes(collective, n, total);
    std::string sentFormula;
    switch (entry.collective) {
    case OpKind::AllReduce:
      sentFormula = fmt::format("2 × ({} - 1)/{} × total (ring all-reduce) = 2 × {}/{} × {}",
                                num(n), num(n), num(n - 1), num(n), bytesText(total));
      break;
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllToAll:
      sentFormula =
          fmt::format("({} - 1)/{} × total (ring {}) = {}/{} × {}", num(n), num(n),
                      plan::toString(entry.collective).str(), num(n - 1), num(n), bytesText(total));
      break;
    default:
      sentFormula = "total (point to point)";
      break;
    }
    lines.push_back({"sent", sentFormula, sent, "B"});

    std::string callFormula;
    if (sample)
      callSeconds(*sample, entry.stage, message, &callFormula);
    lines.push_back({"time",
                     fmt::format("Σ over the {} calls of one call's time; a call of the mean "
                                 "message: {}",
                                 num(count), callFormula),
                     entry.timeSeconds, "s"});

    std::string figure =
        fmt::format("{} {}{} ({})", getCollectiveName(entry.collective),
                    ir::toString(entry.state).str(), what, plan::toString(entry.phase).str());
    if (plan.stages.size() > 1)
      figure += fmt::format(", stage {}", entry.stage);
    explanation.communication.push_back({std::move(figure), std::move(lines)});
  }
}

RunAnalysis Analyzer::analyze() {
  RunAnalysis result;
  MemoryReport &memory = result.memory;
  memory.activationsKnown = model.kind != ir::ModelKind::Abstract;
  memory.deviceCapacity = cluster.deviceMemory;
  memory.hostCapacity = cluster.hostMemory;
  for (const plan::StagePlan &stage : plan.stages) {
    cost::StageMemoryResult stageResult =
        cost::getStageMemory(stageStates(stage, /*explain=*/false), stateBytes);
    StageMemory entry{stage.stage, stageResult.device, stageResult.host};
    if (memory.stages.empty() || entry.device.peak > memory.device.peak) {
      memory.device = entry.device;
      memory.host = entry.host;
    }
    memory.stages.push_back(entry);
  }
  memory.fitsDevice = memory.device.peak <= cluster.deviceMemory;
  if (cluster.hostMemory)
    memory.fitsHost =
        memory.host.peak * static_cast<double>(cluster.devicesPerNode) <= *cluster.hostMemory;

  // Communication: one entry per stage × collective × axis group × state × phase; and the time
  // of each stage.
  double m = static_cast<double>(plan.microbatches);
  TimeReport &time = result.time;
  if (options.untimedUnfit && !(memory.fitsDevice && memory.fitsHost)) {
    time.timed = false;
    return result;
  }
  // A stage's step is m × (its compute and its critical communication per micro-batch) plus
  // what else it exposes and its optimizer, and the bubble is never negative: past `stepBound`,
  // that much is enough. The margin keeps rounding from deciding a tie.
  if (options.stepBound < std::numeric_limits<double>::infinity()) {
    double lower = 0;
    for (const plan::StagePlan &stage : plan.stages) {
      double perMicrobatch = 0;
      for (const std::vector<Op> *ops : {&stage.forward, &stage.backward})
        for (const Op &op : *ops) {
          if (op.kind == OpKind::Compute)
            perMicrobatch += computeSeconds(op);
          else if (isTraffic(op) && laneOf(op) == Lane::Critical)
            perMicrobatch +=
                static_cast<double>(op.repeat) *
                callSeconds(op, stage.stage,
                            static_cast<double>(op.elements) * plan::getSize(op.dtype));
        }
      lower = std::max(lower, m * perMicrobatch);
    }
    if (lower > options.stepBound * (1 + 1e-9)) {
      time.timed = false;
      time.stepSeconds = lower;
      return result;
    }
  }
  struct StageTime {
    int stage = 0;
    double forwardCompute = 0, backwardCompute = 0, weight = 0, optimizer = 0;
    double exposedPerMicrobatch = 0, exposed = 0, total = 0;
    /// Under `ep_overlap = true` and --explain: the MoE layer whose windows expose the most.
    int expertUnit = -1;
    cost::ExpertExchange expertExchange;
  };
  std::vector<StageTime> stageTimes;
  // The training metrics' synchronization at the step's end, over every rank, the same on
  // every stage.
  cost::GroupShape world{mesh.getNumDevices(), cluster.devicesPerNode};
  std::string metricSyncFormula;
  double metricSync = costModel.getTrainMetricSyncSeconds(
      run.trainMetrics, world, options.explain ? &metricSyncFormula : nullptr);
  for (const plan::StagePlan &stage : plan.stages) {
    // The communication table's row of each (collective, axes, state, phase); the axes by the
    // number of their first appearance, so that looking a row up copies nothing.
    std::map<plan::AxisList, int> axesNumbers;
    std::map<std::tuple<int, int, int, int>, size_t> index;
    // An op's calls into its row; the seconds of all of them in one pass (Op::repeat).
    auto account = [&](const Op &op) {
      if (!isTraffic(op))
        return 0.0;
      double bytes = static_cast<double>(op.elements) * plan::getSize(op.dtype);
      double repeat = static_cast<double>(op.repeat);
      double calls = (op.perMicrobatch ? m : 1) * repeat;
      auto numbered = axesNumbers.find(op.axes);
      if (numbered == axesNumbers.end())
        numbered = axesNumbers.emplace(op.axes, static_cast<int>(axesNumbers.size())).first;
      auto key = std::make_tuple(static_cast<int>(op.kind), numbered->second,
                                 static_cast<int>(op.state), static_cast<int>(op.phase));
      auto [it, inserted] = index.try_emplace(key, result.communication.size());
      if (inserted) {
        CommEntry entry;
        entry.stage = stage.stage;
        entry.axes.assign(op.axes.begin(), op.axes.end());
        for (size_t i = 0; i < op.axes.size(); ++i)
          entry.axis += (i ? "," : "") + mesh.axes[op.axes[i]].name;
        if (op.kind == OpKind::HostToDevice || op.kind == OpKind::DeviceToHost)
          entry.axis = "host";
        cost::GroupShape group = groupOf(op, stage.stage);
        entry.groupSize = group.size;
        entry.groupPerNode = group.perNode;
        entry.collective = op.kind;
        entry.state = op.state;
        entry.phase = op.phase;
        entry.link = linkOf(op, stage.stage);
        result.communication.push_back(entry);
      }
      CommEntry &entry = result.communication[it->second];
      double seconds = callSeconds(op, stage.stage, bytes);
      entry.count += static_cast<int64_t>(calls);
      entry.totalBytes += bytes * calls;
      entry.messageBytes = entry.totalBytes / static_cast<double>(entry.count);
      entry.sentBytes +=
          cost::getSentBytes(getCollective(op.kind), static_cast<double>(entry.groupSize), bytes) *
          calls;
      entry.timeSeconds += seconds * calls;
      return seconds * repeat;
    };

    // Per micro-batch: compute, and communication that overlaps with it (parameter gathers
    // and gradient reductions of the batch axes, prefetched one unit ahead or started as a
    // unit's backward ends) or not (tensor-parallel partial sums, pipeline sends, host
    // transfers). The passes are timed unit by unit (cost::getPassExposedSeconds).
    StageTime st;
    st.stage = stage.stage;
    double critical = 0;
    std::vector<size_t> positions;
    std::vector<cost::PassUnit> backwardUnits;
    // Under `ep_overlap = true`: each unit's expert all-to-alls and compute, by pass.
    bool expertOverlap = strategy.expertOverlap == ir::ExpertOverlap::On;
    std::map<int, cost::ExpertExchange> expertExchanges;
    auto timePass = [&](const std::vector<Op> &ops, double &compute, bool backwardPass) {
      std::vector<cost::PassUnit> units(getPassPositions(ops, positions));
      for (size_t i = 0; i < ops.size(); ++i) {
        const Op &op = ops[i];
        cost::PassUnit &unit = units[positions[i]];
        if (op.kind == OpKind::Compute) {
          double seconds = computeSeconds(op);
          unit.compute += seconds;
          compute += seconds;
          if (expertOverlap) {
            cost::ExpertExchange &exchange = expertExchanges[op.unit];
            (backwardPass ? exchange.backwardCompute : exchange.forwardCompute) += seconds;
            (backwardPass ? exchange.backwardExperts : exchange.forwardExperts) +=
                routedExpertSeconds(op);
          }
          const cost::TensorSlotSeconds &slots = slotSeconds(op);
          for (size_t s = 0; s < slots.size(); ++s)
            unit.slots[s] += slots[s];
          if (op.compute == plan::ComputeKind::Backward)
            st.weight += weightSeconds(op);
          continue;
        }
        double seconds = account(op);
        // FSDP2's copy of each gathered parameter out of the all-gather's buffer runs on the
        // compute stream, before the unit's kernels.
        double copy = gatherCopySeconds(op);
        unit.compute += copy;
        compute += copy;
        switch (laneOf(op)) {
        case Lane::Neighbours:
          (op.kind == OpKind::AllGather ? unit.gather : unit.reduce) += seconds;
          break;
        case Lane::Experts: {
          cost::ExpertExchange &exchange = expertExchanges[op.unit];
          (backwardPass ? (op.combine ? exchange.backwardCombine : exchange.backwardDispatch)
                        : (op.combine ? exchange.forwardCombine : exchange.forwardDispatch)) +=
              seconds;
          break;
        }
        case Lane::Products:
          unit.tensorBeside += seconds;
          break;
        case Lane::Unit:
          unit.beside += seconds;
          break;
        case Lane::Critical:
          critical += seconds;
          break;
        }
      }
      return units;
    };
    std::vector<cost::PassUnit> forwardUnits = timePass(stage.forward, st.forwardCompute, false);
    double forwardExposed = cost::getPassExposedSeconds(forwardUnits);
    backwardUnits = timePass(stage.backward, st.backwardCompute, true);
    double backwardExposed = cost::getPassExposedSeconds(backwardUnits);
    double expertExposed = 0;
    if (expertOverlap) {
      std::vector<cost::ExpertExchange> exchanges;
      double most = -1;
      for (const auto &[unit, exchange] : expertExchanges) {
        exchanges.push_back(exchange);
        if (!options.explain || exchange.getComm() <= 0)
          continue;
        double exposed = cost::getExpertOverlapExposedSeconds(exchange, 0);
        if (exposed > most) {
          most = exposed;
          st.expertUnit = unit;
          st.expertExchange = exchange;
        }
      }
      expertExposed = cost::getExpertOverlapExposedSeconds(
          exchanges, cost::getExpertOverlapUnpairedShare(
                         plan.schedule, static_cast<int64_t>(plan.stages.size()), stage.stage,
                         plan.microbatches, plan.chunks, plan.group));
    }
    // Once per step: the gradient reductions left for the step start as the last micro-batch's
    // backward produces each unit's gradients, so they run beside that backward unit by unit
    // (the last unit's, the first layer's, exposed), or after it under
    // `dp_overlap = none`; the optimizer then runs, and the updated parameters are gathered or
    // brought back, exposed, or under `dp_overlap = all` gathered before each unit's forward in
    // the next step, beside the forward of the unit before it (cost::getStepPassUnit).
    ir::DataParallelOverlap dpOverlap = strategy.dataParallelOverlap;
    std::vector<cost::PassUnit> stepUnits, nextForwardUnits;
    for (const cost::PassUnit &unit : backwardUnits)
      stepUnits.push_back(cost::getStepPassUnit(unit, 0, 0));
    // Each unit's position in a pass (its first compute's).
    auto positionsOfUnits = [&](const std::vector<Op> &ops) {
      std::vector<size_t> positions;
      getPassPositions(ops, positions);
      std::map<int, size_t> positionOfUnit;
      for (size_t i = 0; i < ops.size(); ++i)
        if (ops[i].kind == OpKind::Compute)
          positionOfUnit.try_emplace(ops[i].unit, positions[i]);
      return positionOfUnit;
    };
    std::map<int, size_t> backwardPositionOfUnit = positionsOfUnits(stage.backward);
    // Under `dp_overlap = all` only: where each unit's updated parameters are gathered.
    std::map<int, size_t> forwardPositionOfUnit;
    if (dpOverlap == ir::DataParallelOverlap::All) {
      for (const cost::PassUnit &unit : forwardUnits)
        nextForwardUnits.push_back(cost::getStepPassUnit(unit, 0, 0));
      forwardPositionOfUnit = positionsOfUnits(stage.forward);
    }
    double stepOverlap = 0, stepExposed = metricSync;
    for (const Op &op : stage.step) {
      if (op.kind == OpKind::OptimizerUpdate) {
        double elements = static_cast<double>(op.elements);
        ir::StateBytes unitBytes = cost::getUnitStateBytes(stateBytes, plan.units[op.unit].kind);
        st.optimizer += strategy.getPlacement(ir::State::Optimizer).tier == ir::Tier::Device
                            ? costModel.getOptimizerSeconds(elements, unitBytes)
                            : costModel.getHostOptimizerSeconds(elements, unitBytes);
        continue;
      }
      double seconds = account(op);
      stepExposed += gatherCopySeconds(op);
      bool overlappable = isOverlappable(op);
      if (overlappable && op.state == ir::State::Grads &&
          dpOverlap != ir::DataParallelOverlap::None) {
        auto it = backwardPositionOfUnit.find(op.unit);
        if (it != backwardPositionOfUnit.end() && !stepUnits.empty())
          stepUnits[it->second].reduce += seconds;
        else
          stepOverlap += seconds;
      } else if (auto it = forwardPositionOfUnit.find(op.unit);
                 overlappable && op.kind == OpKind::AllGather && op.state == ir::State::Params &&
                 it != forwardPositionOfUnit.end()) {
        nextForwardUnits[it->second].gather += seconds;
      } else {
        stepExposed += seconds;
      }
    }
    // Under params = fp32 the micro-batches' gradients are summed into the stored ones.
    if (layout.fp32Params)
      st.optimizer += costModel.getGradientAccumulationSeconds(
          memory.stages[stageTimes.size()].device.grads / stateBytes.grads, m);
    double stepReduce = cost::getPassExposedSeconds(stepUnits) +
                        cost::getOverlapExposedSeconds(stepOverlap, st.backwardCompute) +
                        cost::getPassExposedSeconds(nextForwardUnits);
    st.exposedPerMicrobatch = critical + forwardExposed + backwardExposed + expertExposed;
    st.exposed = m * st.exposedPerMicrobatch + stepReduce + stepExposed;
    st.total = m * (st.forwardCompute + st.backwardCompute) + st.exposed + st.optimizer;
    stageTimes.push_back(st);
  }

  // The step: the slowest stage plus the pipeline bubble, which the stages' micro-batches set.
  const StageTime *slowest = nullptr;
  std::vector<cost::StageMicrobatch> stageMicrobatches;
  for (const StageTime &st : stageTimes) {
    if (!slowest || st.total >= slowest->total)
      slowest = &st;
    stageMicrobatches.push_back(
        {{st.forwardCompute, st.backwardCompute, st.weight, st.exposedPerMicrobatch}, 1});
  }
  int64_t stages = static_cast<int64_t>(plan.stages.size());
  std::string bubbleFormula;
  time.bubbleSeconds =
      cost::getBubbleSeconds(plan.schedule, plan.microbatches, plan.chunks, stageMicrobatches,
                             options.explain ? &bubbleFormula : nullptr, plan.group);
  if (slowest) {
    time.computeSeconds = m * (slowest->forwardCompute + slowest->backwardCompute);
    time.exposedCommSeconds = slowest->exposed;
    time.optimizerSeconds = slowest->optimizer;
    time.stepSeconds = slowest->total + time.bubbleSeconds;
  }
  double globalBatch = static_cast<double>(run.globalBatch);
  std::string flopsFormula;
  time.known = model.kind != ir::ModelKind::Abstract;
  if (time.known)
    time.flopsPerStep =
        cost::getModelFlops(model, globalBatch, options.explain ? &flopsFormula : nullptr);
  double devices = static_cast<double>(mesh.getNumDevices());
  double tokensPerSample =
      model.kind == ir::ModelKind::Transformer ? static_cast<double>(model.transformer.seq) : 1;
  if (time.known && time.stepSeconds > 0) {
    time.mfu = time.flopsPerStep / (time.stepSeconds * devices * cluster.peakFlops);
    time.tokensPerSecond = globalBatch * tokensPerSample / time.stepSeconds;
  }

  if (!options.explain)
    return result;
  RunExplanation &explanation = result.explanation.emplace();
  explainMemory(explanation, memory);
  explainCommunication(explanation, result.communication);
  if (!slowest)
    return result;
  const plan::StagePlan &stage = plan.stages[slowest->stage];
  std::string stageText =
      stages > 1 ? fmt::format(" (stage {}, the slowest)", slowest->stage) : std::string();
  // The compute of each kind and class of unit (cost::getUnitWorkClass: a transformer's dense and
  // MoE layers, windowed or of full attention; each mlp layer) and pass on the slowest stage,
  // once.
  std::set<std::tuple<int, int, int64_t>> shown;
  for (const std::vector<Op> *ops : {&stage.forward, &stage.backward})
    for (const Op &op : *ops) {
      if (op.kind != OpKind::Compute)
        continue;
      const plan::Unit &unit = plan.units[op.unit];
      if (!shown
               .emplace(static_cast<int>(unit.kind), static_cast<int>(op.compute),
                        cost::getUnitWorkClass(model, unit.kind, unit.layer))
               .second)
        continue;
      std::vector<Explanation> lines;
      double seconds = computeSeconds(op, &lines);
      lines.push_back({"total", fmt::format("{} FLOP", num(op.flops)), seconds, "s"});
      explanation.compute.push_back(
          {fmt::format("{} of {}", plan::toString(op.compute).str(), unit.name), std::move(lines)});
    }
  if (run.paramGather == ir::ParamGather::CopyOut) {
    double perMicrobatch = 0, perStep = 0;
    int gathers = 0;
    const Op *firstGather = nullptr;
    auto add = [&](const Op &op, double &sum) {
      double copy = gatherCopySeconds(op);
      if (copy > 0 && !firstGather)
        firstGather = &op;
      sum += copy;
      return copy > 0;
    };
    for (const std::vector<Op> *ops : {&stage.forward, &stage.backward})
      for (const Op &op : *ops)
        gathers += add(op, perMicrobatch);
    for (const Op &op : stage.step)
      add(op, perStep);
    if (firstGather) {
      std::string first;
      double firstSeconds = gatherCopySeconds(*firstGather, &first);
      explanation.compute.push_back(
          {"copies of the gathered params (param_gather = copy_out)",
           {{"one copy", first, firstSeconds, "s"},
            {"per micro-batch",
             fmt::format("Σ over the {} params all-gathers of the forward and backward, each "
                         "buffer copied out into the params on the compute stream",
                         gathers),
             perMicrobatch, "s"},
            {"per step", "the step's all-gathers of the updated params, copied out the same way",
             perStep, "s"}}});
    }
  }
  explanation.time.push_back(
      {"compute",
       fmt::format("{} × (forward {} + backward {} per micro-batch: the sum of each unit's "
                   "kernels below){}",
                   microbatches(m), seconds(slowest->forwardCompute),
                   seconds(slowest->backwardCompute), stageText),
       time.computeSeconds, "s"});
  std::string accumulationFormula;
  if (layout.fp32Params)
    costModel.getGradientAccumulationSeconds(
        memory.stages[static_cast<size_t>(slowest->stage)].device.grads / stateBytes.grads, m,
        &accumulationFormula);
  explanation.time.push_back(
      {"optimizer",
       fmt::format("Σ over the units of the optimizer step on this rank's shard (read and write "
                   "every state, memory-bound){}{}",
                   layout.fp32Params
                       ? fmt::format(" + the micro-batches' fp32 weight gradients summed into "
                                     "the stored ones (params = fp32): {}",
                                     accumulationFormula)
                       : std::string(),
                   strategy.getPlacement(ir::State::Optimizer).tier == ir::Tier::Device ? ""
                   : cluster.hostMemoryBandwidth
                       ? " on the host's memory"
                       : " (on the host: not timed, host_memory_bandwidth is not given)"),
       time.optimizerSeconds, "s"});
  ir::AsyncTensorParallel async = strategy.asyncTensorParallel;
  // Under `ep_overlap = true`: the windows of the stage's MoE layer that exposes the most.
  auto explainExpertWindows = [&](const StageTime &st) -> std::string {
    if (st.expertUnit < 0)
      return "";
    std::vector<std::string> windows;
    for (const cost::ExpertOverlapWindow &w : cost::getExpertOverlapWindows(st.expertExchange))
      windows.push_back(fmt::format("{} {} beside {} {}", w.comm, seconds(w.commSeconds), w.compute,
                                    seconds(w.computeSeconds)));
    return fmt::format("; the windows of {}, the layer that exposes the most, per micro-batch: {} "
                       "(paired, {} exposed)",
                       plan.units[static_cast<size_t>(st.expertUnit)].name,
                       llvm::join(windows, ", "),
                       seconds(cost::getExpertOverlapExposedSeconds(st.expertExchange, 0)));
  };
  explanation.time.push_back(
      {"exposed comm",
       fmt::format(
           "{} × {} per micro-batch ({}pipeline and host traffic in full; "
           "a pass's first gather and last gradient reduction in full; the others beside "
           "the neighbouring unit's compute, max(comm - compute, comm × κ/(1 + κ)) with "
           "κ = {}, the compute's slowdown beside communication{}{}{}) + what the step's "
           "reductions and updates add ({}){}",
           microbatches(m), seconds(slowest->exposedPerMicrobatch),
           async == ir::AsyncTensorParallel::Off && !plan.regather ? "tensor-parallel, "
           : async == ir::AsyncTensorParallel::Forward
               ? (plan.regather ? "the backward's other tensor-parallel, "
                                : "the backward's tensor-parallel, ")
           : async != ir::AsyncTensorParallel::All ? "the other tensor-parallel, "
                                                   : "",
           num(cost::kOverlapComputeSlowdown),
           async == ir::AsyncTensorParallel::Off ? ""
           : async == ir::AsyncTensorParallel::WeightGradient
               ? std::string("; async_tp = wgrad: the backward's input-gradient reductions "
                             "beside the unit's compute, never better than each beside its "
                             "product's weight gradient, Σ over QKV and MLP in of max(c - G, c × "
                             "κ/(1 + κ)) with c the reductions shared equally by the two and G a "
                             "slot's weight-gradient GEMM time")
               : fmt::format("; async_tp's tensor-parallel collectives{} beside the unit's "
                             "compute, never better than each beside its own products, Σ over "
                             "QKV, attention output, MLP in and MLP out of max(c - G, c × κ/(1 + "
                             "κ)) with c the collectives shared equally by the slots with "
                             "products and G a slot's GEMM time",
                             async == ir::AsyncTensorParallel::Forward
                                 ? " of the forward and of a recomputed forward"
                                 : ""),
           plan.regather && async != ir::AsyncTensorParallel::All
               ? "; sp_inputs = regather: the backward's second gathers of the "
                 "column-parallel products' inputs beside the unit's compute, never "
                 "better than each beside its product's input gradient (those GEMMs "
                 "join the slots' G)"
               : "",
           strategy.expertOverlap == ir::ExpertOverlap::On
               ? fmt::format(
                     "; ep_overlap = true: each MoE layer's forward beside another "
                     "micro-batch's backward in four windows, an all-to-all beside compute in "
                     "each (the combine gradient beside the forward's attention side, the "
                     "dispatch beside the backward's routed experts, the dispatch gradient "
                     "beside the forward's routed experts, the combine beside the backward's "
                     "attention side), max(A - C, A × κ/(1 + κ)) a window, but for the share u "
                     "= {} of the passes that run alone, in full{}",
                     num(cost::getExpertOverlapUnpairedShare(
                         plan.schedule, static_cast<int64_t>(plan.stages.size()), slowest->stage,
                         plan.microbatches, plan.chunks, plan.group)),
                     explainExpertWindows(*slowest))
               : std::string(),
           strategy.dataParallelOverlap == ir::DataParallelOverlap::None
               ? "dp_overlap = none: the gradient reductions after the last backward and the "
                 "updated parameters' all-gathers after the optimizer, in full"
           : strategy.dataParallelOverlap == ir::DataParallelOverlap::All
               ? "dp_overlap = all: the gradient reductions beside the last micro-batch's "
                 "backward, the updated parameters' all-gathers beside the next step's first "
                 "forward, unit by unit as in a pass, the first unit's in full"
               : "dp_overlap = grads: the gradient reductions beside the last micro-batch's "
                 "backward, unit by unit as in a pass, the last unit's in full; the updated "
                 "parameters' all-gathers after the optimizer, in full",
           stageText),
       time.exposedCommSeconds, "s"});
  if (metricSync > 0)
    explanation.time.push_back(
        {"metrics sync",
         fmt::format("part of exposed comm, at the step's end (train_metrics = {}): {}",
                     run.trainMetrics, metricSyncFormula),
         metricSync, "s"});
  if (stages > 1) {
    // Each stage's micro-batch, runs of equal stages together: what the bubble sums, and where a
    // pipeline is out of balance.
    std::string list;
    double longest = 0;
    for (size_t i = 0; i < stageMicrobatches.size();) {
      double total = stageMicrobatches[i].times.getTotal();
      std::string shown = seconds(total);
      size_t j = i + 1;
      while (j < stageMicrobatches.size() &&
             seconds(stageMicrobatches[j].times.getTotal()) == shown)
        ++j;
      longest = std::max(longest, total);
      list += fmt::format(
          "{}{} {}", list.empty() ? "" : ", ",
          j - i == 1 ? fmt::format("stage {}", i) : fmt::format("stages {}-{}", i, j - 1), shown);
      i = j;
    }
    explanation.time.push_back(
        {"stages",
         fmt::format("each stage's micro-batch, forward + backward + exposed comm: {}", list),
         longest, "s"});
  }
  explanation.time.push_back({"bubble", bubbleFormula, time.bubbleSeconds, "s"});
  explanation.time.push_back(
      {"step",
       fmt::format("compute + optimizer + exposed comm + bubble = {} + {} + {} + {}",
                   seconds(time.computeSeconds), seconds(time.optimizerSeconds),
                   seconds(time.exposedCommSeconds), seconds(time.bubbleSeconds)),
       time.stepSeconds, "s"});
  if (time.known && time.stepSeconds > 0) {
    explanation.time.push_back(
        {"MFU",
         fmt::format("model FLOPs / (step × devices × peak), model FLOPs {} = {:.4g} / ({} × {} "
                     "× {:.4g} FLOP/s)",
                     flopsFormula, time.flopsPerStep, seconds(time.stepSeconds), num(devices),
                     cluster.peakFlops),
         time.mfu, "%"});
    explanation.time.push_back(
        {"tokens/s",
         model.kind == ir::ModelKind::Transformer
             ? fmt::format("B·s / step = {}·{} / {}", num(globalBatch), model.transformer.seq,
                           seconds(time.stepSeconds))
             : fmt::format("B / step = {} / {}", num(globalBatch), seconds(time.stepSeconds)),
         time.tokensPerSecond, "tokens/s"});
  }
  return result;
}

} // namespace

RunAnalysis analyze(const plan::StepPlan &plan, const AnalysisOptions &options) {
  return Analyzer(plan, options).analyze();
}

} // namespace placec::analysis
