// Strategy search (`placec search`): the space of meshes and placements, the closed-form fast
// path that decides and predicts each candidate as the verifier and the analyses would, and the
// exhaustive search that ranks the accepted candidates by predicted step time.
//
// The fast path mirrors plan::lowerRun and analysis::analyze op for op, grouped: every layer of
// a transformer has the same tensors, so a stage is at most three kinds of units (the embedding,
// L/p identical layers, the head) with multiplicities, and the pipeline stages fall into three
// classes (the first, holding the embedding and the most in-flight micro-batches; the second,
// the fullest of the middle ones; the last, holding the head). Sums of per-unit op costs become
// multiplicity × cost; nothing is approximated beyond floating-point summation order. SearchTest
// checks it against the verifier and the analyses on random samples of the space, and the
// search re-checks its winners with the real pipeline.
#include "placec/passes/Search.h"

#include "placec/ir/Diagnostics.h"
#include "placec/passes/Passes.h"
#include "placec/passes/StepPlan.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <numeric>

using namespace llvm;

namespace placec::search {

StringRef toString(ParamChoice choice) {
  switch (choice) {
  case ParamChoice::Replicate:
    return "replicate";
  case ParamChoice::GatherInner:
    return "gather(local)";
  case ParamChoice::GatherInnerKeep:
    return "gather(local,keep)";
  case ParamChoice::GatherAll:
    return "gather(all)";
  case ParamChoice::GatherAllKeep:
    return "gather(all,keep)";
  case ParamChoice::Host:
    return "@host";
  case ParamChoice::HostGatherAll:
    return "gather(all)@host";
  }
  return "?";
}

StringRef toString(GradChoice choice) {
  switch (choice) {
  case GradChoice::Replicate:
    return "replicate";
  case GradChoice::ShardInner:
    return "shard(local)";
  case GradChoice::ShardAll:
    return "shard(all)";
  }
  return "?";
}

StringRef toString(OptimizerChoice choice) {
  switch (choice) {
  case OptimizerChoice::Replicate:
    return "replicate";
  case OptimizerChoice::ShardInner:
    return "shard(local)";
  case OptimizerChoice::ShardAll:
    return "shard(all)";
  case OptimizerChoice::HostShardAll:
    return "shard(all)@host";
  }
  return "?";
}

StringRef toString(Family family) {
  switch (family) {
  case Family::Dp:
    return "dp";
  case Family::Zero1:
    return "zero1";
  case Family::Zero2:
    return "zero2";
  case Family::Zero3:
    return "zero3";
  }
  return "?";
}

namespace {

// Bits of a set of batch sub-axes: the outer (`dp_node`, or the one `dp` axis when the batch
// degree is not split) and the inner (`dp_local`).
constexpr unsigned kOuter = 1, kInner = 2;

unsigned paramMask(ParamChoice choice) {
  switch (choice) {
  case ParamChoice::GatherInner:
  case ParamChoice::GatherInnerKeep:
    return kInner;
  case ParamChoice::GatherAll:
  case ParamChoice::GatherAllKeep:
  case ParamChoice::HostGatherAll:
    return kOuter | kInner;
  default:
    return 0;
  }
}

unsigned gradMask(GradChoice choice) {
  return choice == GradChoice::ShardInner ? kInner
         : choice == GradChoice::ShardAll ? kOuter | kInner
                                          : 0;
}

unsigned optimizerMask(OptimizerChoice choice) {
  return choice == OptimizerChoice::ShardInner ? kInner
         : choice == OptimizerChoice::ShardAll || choice == OptimizerChoice::HostShardAll
             ? kOuter | kInner
             : 0;
}

bool keepsAfterForward(ParamChoice choice) {
  return choice == ParamChoice::GatherInnerKeep || choice == ParamChoice::GatherAllKeep;
}

bool paramsOnHost(ParamChoice choice) {
  return choice == ParamChoice::Host || choice == ParamChoice::HostGatherAll;
}

std::vector<int64_t> divisorsOf(int64_t n) {
  std::vector<int64_t> result;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      result.push_back(d);
      if (d * d != n)
        result.push_back(n / d);
    }
  std::sort(result.begin(), result.end());
  return result;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// A kind of unit on a stage and how many of them there are.
struct UnitGroup {
  cost::UnitKind kind = cost::UnitKind::Layer;
  int64_t params = 0; ///< After the tensor-parallel split.
  /// Plan::Unit::sequenceParallelParams: replicated tensors of layers and the head.
  int64_t sequenceParallelParams = 0;
  int64_t count = 0;
  /// The unit's tensor-parallel collectives (plan::getTensorCollectives) of the forward pass and
  /// the backward pass, without ([0]) and with ([1]) sequence parallelism.
  std::vector<plan::OpKind> tensorForward[2], tensorBackward[2];
};

/// One stage class of a (tp, pp, chunks) layout.
struct StageShape {
  int stage = 0;
  std::vector<UnitGroup> groups;
  int64_t numUnits = 0, numLayers = 0, sumParams = 0, maxParams = 0;
  int64_t sendsForward = 0, sendsBackward = 0;
  /// Whether the stage's forward sends (to the next stage) and backward sends (to the previous)
  /// cross nodes; for the middle class, those of the middle stage with the most such crossings.
  bool interForward = false, interBackward = false;
  /// Tied embeddings with the embedding and the head on this stage: the embedding stays
  /// gathered from its forward through the head's (cost::getStageMemory).
  int64_t tiedEmbedParams = 0;
  bool hasHead = false;
};

/// The compute of each kind of unit for one layout (tp, micro-batch, sequence parallelism,
/// activation mode), in seconds per micro-batch: [unit kind][pass].
struct UnitTimes {
  double seconds[3][4] = {};
  /// The weight-gradient part of each kind's backward.
  double weight[3] = {};
};

/// Precomputed facts of a run's model on a cluster, shared by every candidate.
class Evaluator {
public:
  Evaluator(const ir::Run &run, const ir::Cluster &cluster)
      : model(*run.model), cluster(cluster), costModel(cluster, run.precision) {
    layers = model.getNumLayers();
    bytes = ir::getStateBytes(run.precision, run.optimizer);
    activationBytes = ir::getActivationBytes(run.precision);
    precision = run.precision;
  }

  /// The stage classes of a layout, cached.
  const std::vector<StageShape> &getShapes(int64_t tp, int64_t pp, int64_t chunks);
  /// Per-device memory that no activation mode, micro-batch or schedule can lower: the model
  /// states and transient buffers of the fullest stage.
  double lowerBound(const Candidate &candidate);
  void evaluate(const Candidate &candidate, FastVerdict &verdict);

private:
  struct Geometry {
    /// The sizes of the batch sub-axes, indexed by their bit (kOuter, kInner); [0] unused.
    int64_t sizes[3] = {1, 1, 1};
    /// Rank strides of the sub-axes ([pp, dp_node, dp_local, tp] is row-major).
    int64_t strides[3] = {1, 1, 1};
    unsigned present = 0;
  };
  Geometry geometry(const Candidate &c) const {
    Geometry g;
    g.sizes[kOuter] = c.dpNode;
    g.sizes[kInner] = c.dpLocal;
    g.strides[kOuter] = c.dpLocal * c.tp;
    g.strides[kInner] = c.tp;
    g.present = (c.dpNode > 1 ? kOuter : 0) | (c.dpLocal > 1 ? kInner : 0);
    return g;
  }
  int64_t degree(const Geometry &g, unsigned mask) const {
    mask &= g.present;
    return (mask & kOuter ? g.sizes[kOuter] : 1) * (mask & kInner ? g.sizes[kInner] : 1);
  }
  /// The cluster shape of the group over the batch sub-axes in `mask`.
  cost::GroupShape group(const Geometry &g, unsigned mask) const {
    mask &= g.present;
    cost::GroupAxis axes[2];
    size_t count = 0;
    for (unsigned bit : {kOuter, kInner})
      if (mask & bit)
        axes[count++] = {g.strides[bit], g.sizes[bit]};
    return cost::getGroupShape(ArrayRef(axes, count), cluster.devicesPerNode);
  }
  double collective(plan::OpKind kind, const cost::GroupShape &shape, double bytes) const {
    return costModel.getCollectiveSeconds(analysis::getCollective(kind), shape, bytes);
  }
  double hostTransfer(double bytes) const { return costModel.getHostSeconds(bytes); }
  cost::Layout layoutOf(const Candidate &c) const {
    cost::Layout layout;
    layout.microBatch = static_cast<double>(c.microBatch);
    layout.tensor = c.tp;
    layout.sequenceParallel = c.sequenceParallel;
    layout.activations = c.activations;
    layout.precision = precision;
    return layout;
  }
  /// The compute of every kind of unit for a candidate's layout, cached.
  const UnitTimes &getUnitTimes(const Candidate &c);

  const ir::Model &model;
  const ir::Cluster &cluster;
  cost::CostModel costModel;
  ir::Precision precision = ir::Precision::MixedBF16;
  int64_t layers = 0;
  ir::StateBytes bytes{};
  unsigned activationBytes = 2;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<StageShape>> shapes;
  std::map<std::tuple<int64_t, int64_t, bool, int>, UnitTimes> unitTimes;
  std::map<std::tuple<int64_t, int64_t, bool, int>, double> activationCache, headCache;
};

/// The index of a unit kind in UnitTimes.
int unitIndex(cost::UnitKind kind) {
  return kind == cost::UnitKind::Embedding ? 0 : kind == cost::UnitKind::Layer ? 1 : 2;
}

const UnitTimes &Evaluator::getUnitTimes(const Candidate &c) {
  auto key =
      std::make_tuple(c.tp, c.microBatch, c.sequenceParallel, static_cast<int>(c.activations));
  auto it = unitTimes.find(key);
  if (it != unitTimes.end())
    return it->second;
  UnitTimes times;
  cost::Layout layout = layoutOf(c);
  for (cost::UnitKind kind :
       {cost::UnitKind::Embedding, cost::UnitKind::Layer, cost::UnitKind::Head})
    for (cost::PassKind pass :
         {cost::PassKind::Forward, cost::PassKind::Backward, cost::PassKind::RecomputeFull,
          cost::PassKind::RecomputeSelective}) {
      cost::Work work = cost::getUnitWork(model, kind, 0, pass, layout);
      times.seconds[unitIndex(kind)][static_cast<int>(pass)] = costModel.getComputeSeconds(work);
      if (pass == cost::PassKind::Backward)
        times.weight[unitIndex(kind)] = costModel.getWeightGradientSeconds(work);
    }
  return unitTimes.emplace(key, times).first->second;
}

const std::vector<StageShape> &Evaluator::getShapes(int64_t tp, int64_t pp, int64_t chunks) {
  auto key = std::make_tuple(tp, pp, chunks);
  auto it = shapes.find(key);
  if (it != shapes.end())
    return it->second;
  // The units of the model after the tensor-parallel split, as Lowering::buildUnits builds them.
  std::map<int, int64_t> unitParams, sequenceParallelParams;
  for (const ir::Tensor &tensor : model.tensors) {
    unitParams[tensor.layer] += tensor.split == ir::TensorSplit::Replicated
                                    ? tensor.numElements
                                    : ceilDiv(tensor.numElements, tp);
    if (tensor.split == ir::TensorSplit::Replicated && tensor.layer >= 0)
      sequenceParallelParams[tensor.layer] += tensor.numElements;
  }
  const ir::TransformerConfig &config = model.transformer;

  std::vector<int> classes = {0};
  if (pp > 2)
    classes.push_back(1);
  if (pp > 1)
    classes.push_back(static_cast<int>(pp - 1));
  std::vector<StageShape> result;
  for (int stage : classes) {
    StageShape shape;
    shape.stage = stage;
    auto addGroup = [&](int64_t params, int64_t count, cost::UnitKind kind, int layer) {
      if (count == 0)
        return;
      UnitGroup group;
      group.kind = kind;
      group.params = params;
      group.sequenceParallelParams = sequenceParallelParams[layer];
      group.count = count;
      for (int sp = 0; sp < 2; ++sp) {
        group.tensorForward[sp] = plan::getTensorCollectives(model, kind, layer, true, sp);
        group.tensorBackward[sp] = plan::getTensorCollectives(model, kind, layer, false, sp);
      }
      if (kind == cost::UnitKind::Layer)
        shape.numLayers += count;
      shape.groups.push_back(group);
      shape.numUnits += count;
      shape.sumParams += params * count;
      shape.maxParams = std::max(shape.maxParams, params);
    };
    if (stage == 0 && unitParams.count(-1))
      addGroup(unitParams[-1], 1, cost::UnitKind::Embedding, -1);
    addGroup(unitParams[0], layers / pp, cost::UnitKind::Layer, 0);
    if (stage == pp - 1 && unitParams.count(static_cast<int>(layers))) {
      addGroup(unitParams[static_cast<int>(layers)], 1, cost::UnitKind::Head,
               static_cast<int>(layers));
      shape.hasHead = true;
    }
    if (config.tiedEmbeddings && pp == 1 && unitParams.count(-1) &&
        unitParams.count(static_cast<int>(layers)))
      shape.tiedEmbedParams = unitParams[-1];
    if (pp > 1) {
      shape.sendsForward = chunks - (stage == pp - 1 ? 1 : 0);
      shape.sendsBackward = chunks - (stage == 0 ? 1 : 0);
      // The layers axis is outermost: stage s holds the ranks [s·stride, (s+1)·stride).
      int64_t stride = cluster.getNumDevices() / pp;
      auto linksOf = [&](int64_t s) {
        auto crosses = [&](int64_t peer) {
          return cost::crossesNodes(stride, pp, static_cast<int>(s), static_cast<int>(peer),
                                    cluster.getNumDevices(), cluster.devicesPerNode);
        };
        return std::make_pair(crosses((s + 1) % pp), crosses((s + pp - 1) % pp));
      };
      std::tie(shape.interForward, shape.interBackward) = linksOf(stage);
      if (stage == 1)
        for (int64_t middle = 2; middle + 1 < pp; ++middle) {
          auto [forward, backward] = linksOf(middle);
          if (int(forward) + int(backward) > int(shape.interForward) + int(shape.interBackward))
            std::tie(shape.interForward, shape.interBackward) = std::make_pair(forward, backward);
        }
    }
    result.push_back(std::move(shape));
  }
  return shapes.emplace(key, std::move(result)).first->second;
}

double Evaluator::lowerBound(const Candidate &c) {
  Geometry g = geometry(c);
  cost::StageStates states;
  states.paramShard = degree(g, paramMask(c.params));
  states.gradShard = degree(g, gradMask(c.grads));
  states.optimizerShard = degree(g, optimizerMask(c.optimizer));
  states.paramsOnHost = paramsOnHost(c.params);
  states.optimizerOnHost = c.optimizer == OptimizerChoice::HostShardAll;
  states.gradsOnHost = states.optimizerOnHost && (gradMask(c.grads) & g.present);
  states.gathers = paramMask(c.params) & g.present;
  states.keepAfterForward = keepsAfterForward(c.params);
  double best = 0;
  for (const StageShape &shape : getShapes(c.tp, c.pp, 1)) {
    states.params = static_cast<double>(shape.sumParams);
    states.largestUnit = static_cast<double>(shape.maxParams);
    states.units = shape.numUnits;
    states.tiedEmbedding = static_cast<double>(shape.tiedEmbedParams);
    // No activations: the device peak without them is the bound.
    best = std::max(best, cost::getStageMemory(states, bytes).device.peak);
  }
  return best;
}

void Evaluator::evaluate(const Candidate &c, FastVerdict &verdict) {
  verdict = FastVerdict();
  // Rule `gradient-integrity`: the optimizer consumes full gradients, so wherever gradients are
  // sharded the optimizer must be sharded too.
  Geometry g = geometry(c);
  unsigned paramAxes = paramMask(c.params) & g.present;
  unsigned gradAxes = gradMask(c.grads) & g.present;
  unsigned optimizerAxes = optimizerMask(c.optimizer) & g.present;
  if (gradAxes & ~optimizerAxes) {
    verdict.rejectedBy = "gradient-integrity";
    return;
  }
  // Rule `schedule`: a schedule's formulas hold only where its preconditions do.
  if (c.pp > 1 && !cost::isScheduleValid(c.schedule, c.pp, c.microbatches, c.chunks)) {
    verdict.rejectedBy = "schedule";
    return;
  }

  const std::vector<StageShape> &stageShapes = getShapes(c.tp, c.pp, c.chunks);
  cost::StageStates states;
  states.paramShard = degree(g, paramAxes);
  states.gradShard = degree(g, gradAxes);
  states.optimizerShard = degree(g, optimizerAxes);
  states.paramsOnHost = paramsOnHost(c.params);
  states.optimizerOnHost = c.optimizer == OptimizerChoice::HostShardAll;
  // ZeRO-Offload: sharded gradients accumulate on the host next to the optimizer, replicated
  // ones on the device until the step's reduction.
  states.gradsOnHost = states.optimizerOnHost && gradAxes;
  states.gathers = paramAxes != 0;
  states.keepAfterForward = keepsAfterForward(c.params);
  auto activationKey =
      std::make_tuple(c.tp, c.microBatch, c.sequenceParallel, static_cast<int>(c.activations));
  auto cached = activationCache.find(activationKey);
  if (cached == activationCache.end())
    cached =
        activationCache
            .emplace(activationKey, cost::getLayerActivationBytes(model.transformer, layoutOf(c)))
            .first;
  states.layerActivationBytes = cached->second;
  auto headCached = headCache.find(activationKey);
  if (headCached == headCache.end())
    headCached =
        headCache
            .emplace(activationKey, cost::getHeadActivationBytes(model.transformer, layoutOf(c)))
            .first;

  // Memory (Analyzer::stageStates): the stage with the highest device peak, the first on ties.
  double peak = -1, hostPeak = 0;
  for (const StageShape &shape : stageShapes) {
    states.params = static_cast<double>(shape.sumParams);
    states.largestUnit = static_cast<double>(shape.maxParams);
    states.units = shape.numUnits;
    states.layers = shape.numLayers;
    states.tiedEmbedding = static_cast<double>(shape.tiedEmbedParams);
    states.inFlight =
        cost::getInFlightMicrobatches(c.schedule, c.pp, c.microbatches, c.chunks, shape.stage);
    states.headBuffers = shape.hasHead ? headCached->second * states.inFlight : 0;
    cost::StageMemoryResult memory = cost::getStageMemory(states, bytes);
    if (memory.device.peak > peak) {
      peak = memory.device.peak;
      hostPeak = memory.host.peak;
    }
  }
  verdict.peakBytes = peak;
  verdict.hostPeakBytes = hostPeak;
  // Rule `capacity`.
  if (peak > cluster.deviceMemory ||
      (cluster.hostMemory &&
       hostPeak * static_cast<double>(cluster.devicesPerNode) > *cluster.hostMemory)) {
    verdict.rejectedBy = "capacity";
    return;
  }

  // Time (Analyzer::analyze): per stage class, per micro-batch compute, overlapped and critical
  // communication, then the once-per-step reductions, the optimizer and the pipeline bubble.
  const UnitTimes &times = getUnitTimes(c);
  double b = static_cast<double>(c.microBatch), m = static_cast<double>(c.microbatches);
  double s = static_cast<double>(model.transformer.seq);
  double h = static_cast<double>(model.transformer.hidden);
  int64_t paramShard = states.paramShard, gradShard = states.gradShard,
          optimizerShard = states.optimizerShard;
  bool onHostParams = states.paramsOnHost, onHostOptimizer = states.optimizerOnHost;
  bool gradsOnHost = states.gradsOnHost, keep = states.keepAfterForward;
  cost::GroupAxis tensorAxis{1, c.tp};
  cost::GroupShape tensorGroup =
      cost::getGroupShape(ArrayRef(&tensorAxis, 1), cluster.devicesPerNode);
  double tpBytes = b * s * h * activationBytes;
  double sendIntra = 0, sendInter = 0;
  if (c.pp > 1) {
    int64_t elements = c.microBatch * model.transformer.seq * model.transformer.hidden;
    if (c.sequenceParallel)
      elements /= c.tp;
    double sendBytes = static_cast<double>(elements) * activationBytes;
    sendIntra = costModel.getPointToPointSeconds(sendBytes, false);
    sendInter = costModel.getPointToPointSeconds(sendBytes, true);
  }
  cost::GroupShape gatherGroup = group(g, paramAxes), gradGroup = group(g, gradAxes);
  unsigned scatterAxes = optimizerAxes & ~gradAxes;
  unsigned reduceAxes = g.present & ~gradAxes & ~scatterAxes;
  unsigned syncAxes = optimizerAxes & ~paramAxes;
  int64_t scatterDegree = degree(g, scatterAxes);
  cost::GroupShape scatterGroup = group(g, scatterAxes), reduceGroup = group(g, reduceAxes),
                   syncGroup = group(g, syncAxes);
  bool hostStepTransfer = onHostOptimizer != onHostParams;
  bool fullRecompute = c.activations == ir::ActivationMode::RecomputeFull;
  bool selectiveRecompute = c.activations == ir::ActivationMode::RecomputeSelective;
  int sp = c.sequenceParallel && c.tp > 1 ? 1 : 0;

  double slowestStage = 0;
  cost::MicrobatchTimes slowestMicrobatch;
  cost::PassUnit forwardPass[3], backwardPass[3], stepPass[3];
  for (const StageShape &shape : stageShapes) {
    double forwardCompute = 0, backwardCompute = 0, weightCompute = 0, critical = 0,
           stepExposed = 0, optimizer = 0;
    size_t numGroups = shape.groups.size();
    assert(numGroups <= 3 && "a stage holds the embedding, layers and the head at most");
    critical +=
        static_cast<double>(shape.sendsForward) * (shape.interForward ? sendInter : sendIntra);
    critical +=
        static_cast<double>(shape.sendsBackward) * (shape.interBackward ? sendInter : sendIntra);
    for (size_t index = 0; index < numGroups; ++index) {
      const UnitGroup &group = shape.groups[index];
      // The backward pass visits the groups in reverse order.
      cost::PassUnit &forwardUnit = forwardPass[index];
      cost::PassUnit &backwardUnit = backwardPass[numGroups - 1 - index];
      cost::PassUnit &stepUnit = stepPass[numGroups - 1 - index];
      double count = static_cast<double>(group.count);
      const double *unitTime = times.seconds[unitIndex(group.kind)];
      bool recomputed = group.kind == cost::UnitKind::Layer;
      double forward = unitTime[static_cast<int>(cost::PassKind::Forward)];
      double recompute = recomputed && fullRecompute
                             ? unitTime[static_cast<int>(cost::PassKind::RecomputeFull)]
                         : recomputed && selectiveRecompute
                             ? unitTime[static_cast<int>(cost::PassKind::RecomputeSelective)]
                             : 0;
      double backward = recompute + unitTime[static_cast<int>(cost::PassKind::Backward)];
      forwardUnit = cost::PassUnit();
      forwardUnit.compute = forward;
      forwardUnit.count = group.count;
      backwardUnit = cost::PassUnit();
      backwardUnit.compute = backward;
      backwardUnit.count = group.count;
      stepUnit = backwardUnit;
      forwardCompute += count * forward;
      backwardCompute += count * backward;
      weightCompute += count * times.weight[unitIndex(group.kind)];
      if (c.tp > 1) {
        double tensor = 0;
        for (plan::OpKind kind : group.tensorForward[sp])
          tensor += collective(kind, tensorGroup, tpBytes);
        if (recomputed && fullRecompute)
          tensor *= 2;
        for (plan::OpKind kind : group.tensorBackward[sp])
          tensor += collective(kind, tensorGroup, tpBytes);
        critical += count * tensor;
        // The vocabulary-parallel cross-entropy's all-gather (Lowering).
        if (group.kind == cost::UnitKind::Head)
          critical += count * collective(plan::OpKind::AllGather, tensorGroup,
                                         3 * b * s * static_cast<double>(c.tp) * activationBytes);
      }
      double unitParams = static_cast<double>(group.params);
      if (onHostParams)
        critical +=
            count * 2 *
            hostTransfer(static_cast<double>(ceilDiv(group.params, paramShard)) * bytes.params);
      if (gradsOnHost)
        critical += count * hostTransfer(static_cast<double>(ceilDiv(group.params, gradShard)) *
                                         bytes.grads);
      if (paramAxes) {
        double gather = collective(plan::OpKind::AllGather, gatherGroup, unitParams * bytes.params);
        forwardUnit.gather = gather;
        // Tied embeddings without a pipeline: the head's backward gathers the embedding again
        // (Lowering), before the head's compute.
        bool tiedEmbedding = shape.tiedEmbedParams > 0 && group.kind == cost::UnitKind::Embedding;
        bool tiedHead = shape.tiedEmbedParams > 0 && group.kind == cost::UnitKind::Head;
        if (!keep && !tiedEmbedding)
          backwardUnit.gather += gather;
        if (!keep && tiedHead)
          backwardUnit.gather +=
              collective(plan::OpKind::AllGather, gatherGroup,
                         static_cast<double>(shape.tiedEmbedParams) * bytes.params);
      }
      if (sp && group.sequenceParallelParams > 0)
        backwardUnit.reduce +=
            collective(plan::OpKind::AllReduce, tensorGroup,
                       static_cast<double>(group.sequenceParallelParams) * bytes.grads);
      if (gradAxes)
        backwardUnit.reduce +=
            collective(plan::OpKind::ReduceScatter, gradGroup, unitParams * bytes.grads);
      int64_t gradElements = ceilDiv(group.params, gradShard);
      if (scatterAxes) {
        stepUnit.reduce += collective(plan::OpKind::ReduceScatter, scatterGroup,
                                      static_cast<double>(gradElements) * bytes.grads);
        gradElements = ceilDiv(gradElements, scatterDegree);
      }
      if (reduceAxes)
        stepUnit.reduce += collective(plan::OpKind::AllReduce, reduceGroup,
                                      static_cast<double>(gradElements) * bytes.grads);
      if (onHostOptimizer && !gradAxes)
        stepExposed += count * hostTransfer(static_cast<double>(gradElements) * bytes.grads);
      double owned = static_cast<double>(ceilDiv(group.params, optimizerShard));
      optimizer += count * (onHostOptimizer ? costModel.getHostOptimizerSeconds(owned, bytes)
                                            : costModel.getOptimizerSeconds(owned, bytes));
      if (hostStepTransfer)
        stepExposed +=
            count *
            hostTransfer(static_cast<double>(ceilDiv(group.params, optimizerShard)) * bytes.params);
      if (syncAxes)
        stepExposed += count * collective(plan::OpKind::AllGather, syncGroup,
                                          static_cast<double>(ceilDiv(group.params, paramShard)) *
                                              bytes.params);
    }
    double exposedPerMicrobatch = critical +
                                  cost::getPassExposedSeconds(ArrayRef(forwardPass, numGroups)) +
                                  cost::getPassExposedSeconds(ArrayRef(backwardPass, numGroups));
    double computePerMicrobatch = forwardCompute + backwardCompute;
    double exposed = m * exposedPerMicrobatch +
                     cost::getPassExposedSeconds(ArrayRef(stepPass, numGroups)) + stepExposed;
    slowestStage = std::max(slowestStage, m * computePerMicrobatch + exposed + optimizer);
    cost::MicrobatchTimes microbatch{forwardCompute, backwardCompute, weightCompute,
                                     exposedPerMicrobatch};
    if (microbatch.getTotal() > slowestMicrobatch.getTotal())
      slowestMicrobatch = microbatch;
  }
  verdict.stepSeconds = slowestStage + cost::getBubbleSeconds(c.schedule, c.pp, c.microbatches,
                                                              c.chunks, slowestMicrobatch);
}

/// True when the search can handle the run's model.
bool isSearchable(const ir::Run &run) {
  return run.model->kind == ir::ModelKind::Transformer && run.model->getNumLayers() > 0 &&
         run.globalBatch > 0;
}

/// Calls `body(candidate, innerCount)` for each (mesh, placement) group, and `inner(candidate)`
/// for each candidate of a group, unless `body` returns false (the group is skipped).
template <typename GroupFn, typename CandidateFn>
void enumerate(const ir::Run &run, const ir::Cluster &cluster, GroupFn body, CandidateFn inner,
               uint64_t *meshCount = nullptr) {
  const ir::Model &model = *run.model;
  const ir::TransformerConfig &config = model.transformer;
  int64_t devices = cluster.getNumDevices();
  int64_t layers = model.getNumLayers();
  int64_t globalBatch = run.globalBatch;
  bool host = cluster.hostBandwidth.has_value() && *cluster.hostBandwidth > 0;
  for (int64_t tp : divisorsOf(cluster.devicesPerNode)) {
    if (devices % tp || config.heads % tp || config.hidden % tp || config.ffn % tp)
      continue;
    for (int64_t pp : divisorsOf(layers)) {
      if (devices % (tp * pp))
        continue;
      int64_t dp = devices / (tp * pp);
      if (globalBatch % dp)
        continue;
      // Micro-batch sizes with their schedules (schedule, chunks): interleaving only where its
      // formulas hold (cost::isScheduleValid: the micro-batches a multiple of the stages).
      struct Step {
        int64_t microBatch;
        ir::Schedule schedule;
        int64_t chunks;
      };
      std::vector<Step> steps;
      for (int64_t b : divisorsOf(globalBatch / dp)) {
        int64_t m = globalBatch / (b * dp);
        steps.push_back({b, ir::Schedule::OneFOneB, 1});
        if (pp == 1)
          continue;
        steps.push_back({b, ir::Schedule::GPipe, 1});
        for (int64_t v : divisorsOf(layers / pp))
          if (v > 1 && cost::isScheduleValid(ir::Schedule::Interleaved, pp, m, v))
            steps.push_back({b, ir::Schedule::Interleaved, v});
      }
      std::vector<std::pair<ir::ActivationMode, bool>> activationModes;
      for (ir::ActivationMode mode :
           {ir::ActivationMode::Keep, ir::ActivationMode::RecomputeSelective,
            ir::ActivationMode::RecomputeFull}) {
        activationModes.push_back({mode, false});
        if (tp > 1)
          activationModes.push_back({mode, true});
      }
      uint64_t innerCount = activationModes.size() * steps.size();
      // Batch splits: unsplit, or node × local with the local part inside a node.
      std::vector<int64_t> locals = {1};
      for (int64_t local : divisorsOf(std::gcd(dp, cluster.devicesPerNode / tp)))
        if (local > 1 && local < dp)
          locals.push_back(local);
      for (int64_t local : locals) {
        if (meshCount)
          ++*meshCount;
        Candidate c;
        c.tp = tp;
        c.pp = pp;
        c.dpLocal = local;
        c.dpNode = dp / local;
        bool split = c.isSplit();
        std::vector<ParamChoice> params = {ParamChoice::Replicate};
        std::vector<GradChoice> grads = {GradChoice::Replicate};
        std::vector<OptimizerChoice> optimizers = {OptimizerChoice::Replicate};
        if (dp > 1) {
          if (split)
            params.insert(params.end(), {ParamChoice::GatherInner, ParamChoice::GatherInnerKeep});
          params.insert(params.end(), {ParamChoice::GatherAll, ParamChoice::GatherAllKeep});
          if (split) {
            grads.push_back(GradChoice::ShardInner);
            optimizers.push_back(OptimizerChoice::ShardInner);
          }
          grads.push_back(GradChoice::ShardAll);
          optimizers.push_back(OptimizerChoice::ShardAll);
        }
        if (host) {
          params.push_back(ParamChoice::Host);
          if (dp > 1)
            params.push_back(ParamChoice::HostGatherAll);
          optimizers.push_back(OptimizerChoice::HostShardAll);
        }
        for (ParamChoice param : params)
          for (GradChoice grad : grads)
            for (OptimizerChoice optimizer : optimizers) {
              // A split mesh whose placements never name the inner sub-axis alone is the
              // unsplit mesh again (the same groups, the same costs): skipped as a duplicate.
              if (split && paramMask(param) != kInner && gradMask(grad) != kInner &&
                  optimizerMask(optimizer) != kInner)
                continue;
              c.params = param;
              c.grads = grad;
              c.optimizer = optimizer;
              if (!body(c, innerCount))
                continue;
              for (auto [mode, sp] : activationModes)
                for (const Step &step : steps) {
                  c.activations = mode;
                  c.sequenceParallel = sp;
                  c.microBatch = step.microBatch;
                  c.microbatches = globalBatch / (step.microBatch * dp);
                  c.schedule = step.schedule;
                  c.chunks = step.chunks;
                  inner(c);
                }
            }
      }
    }
  }
}

bool isBetter(const Candidate &x, const Candidate &y) {
  if (x.stepSeconds != y.stepSeconds)
    return x.stepSeconds < y.stepSeconds;
  return x.peakBytes < y.peakBytes;
}

std::string formatQuantity(double value, ArrayRef<std::pair<double, const char *>> units) {
  for (auto [scale, unit] : units)
    if (value >= scale && std::fmod(value, scale) == 0)
      return std::to_string(static_cast<int64_t>(value / scale)) + " " + unit;
  // Not a whole number of any unit: the last (smallest) unit with a decimal mantissa.
  std::string text;
  raw_string_ostream os(text);
  os << format("%.17g", value / units.back().first) << " " << units.back().second;
  return text;
}

} // namespace

std::string Candidate::formatMesh() const {
  std::vector<std::string> parts;
  if (pp > 1)
    parts.push_back("pp = " + std::to_string(pp));
  if (isSplit()) {
    parts.push_back("dp_node: batch = " + std::to_string(dpNode));
    parts.push_back("dp_local: batch = " + std::to_string(dpLocal));
  } else if (getBatchDegree() > 1 || (pp == 1 && tp == 1)) {
    parts.push_back("dp = " + std::to_string(getBatchDegree()));
  }
  if (tp > 1)
    parts.push_back("tp = " + std::to_string(tp));
  std::string text = "[";
  for (size_t i = 0; i < parts.size(); ++i)
    text += (i ? ", " : "") + parts[i];
  return text + "]";
}

std::string Candidate::describe() const {
  std::string text = formatMesh() + " params " + toString(params).str() + ", grads " +
                     toString(grads).str() + ", optimizer " + toString(optimizer).str() +
                     ", activations " + ir::toString(activations).str() +
                     (sequenceParallel ? "+sp" : "") + ", b=" + std::to_string(microBatch) +
                     " m=" + std::to_string(microbatches);
  if (pp > 1)
    text += " " + ir::toString(schedule).str() + (chunks > 1 ? "/" + std::to_string(chunks) : "");
  return text;
}

std::shared_ptr<ir::Cluster> makeSearchCluster(const ir::Cluster &cluster, int64_t devices,
                                               double budget) {
  auto copy = std::make_shared<ir::Cluster>(cluster);
  if (devices > 0)
    copy->nodes = devices / cluster.devicesPerNode;
  if (budget > 0)
    copy->deviceMemory = budget;
  return copy;
}

void forEachCandidate(const ir::Run &run, const ir::Cluster &cluster,
                      const std::function<void(const Candidate &)> &callback) {
  if (!isSearchable(run))
    return;
  enumerate(
      run, cluster, [](const Candidate &, uint64_t) { return true; },
      [&](const Candidate &c) { callback(c); });
}

FastVerdict evaluateFast(const ir::Run &run, const ir::Cluster &cluster,
                         const Candidate &candidate) {
  Evaluator evaluator(run, cluster);
  FastVerdict verdict;
  evaluator.evaluate(candidate, verdict);
  return verdict;
}

std::unique_ptr<ir::Strategy> buildStrategy(const Candidate &c, StringRef name) {
  auto strategy = std::make_unique<ir::Strategy>();
  strategy->name = name.str();
  strategy->hasMesh = true;
  ir::Mesh &mesh = strategy->mesh;
  int outer = -1, inner = -1;
  auto addAxis = [&](std::string axisName, ir::AxisKind kind, int64_t size) {
    ir::Axis axis;
    axis.name = std::move(axisName);
    axis.kind = kind;
    axis.size = size;
    mesh.axes.push_back(axis);
    return static_cast<int>(mesh.axes.size() - 1);
  };
  if (c.pp > 1)
    addAxis("pp", ir::AxisKind::Layers, c.pp);
  if (c.isSplit()) {
    outer = addAxis("dp_node", ir::AxisKind::Batch, c.dpNode);
    inner = addAxis("dp_local", ir::AxisKind::Batch, c.dpLocal);
  } else if (c.getBatchDegree() > 1 || (c.pp == 1 && c.tp == 1)) {
    outer = addAxis("dp", ir::AxisKind::Batch, c.getBatchDegree());
  }
  if (c.tp > 1)
    addAxis("tp", ir::AxisKind::Tensor, c.tp);

  for (ir::State state : ir::kAllStates) {
    ir::StatePlacement &placement = strategy->getPlacement(state);
    placement.axes.resize(mesh.axes.size());
    for (size_t i = 0; i < mesh.axes.size(); ++i) {
      ir::AxisPlacement &slot = placement.axes[i];
      switch (mesh.axes[i].kind) {
      case ir::AxisKind::Batch:
      case ir::AxisKind::Expert:
        slot.mode = state == ir::State::Activations ? ir::PlacementMode::BatchSplit
                                                    : ir::PlacementMode::Replicated;
        break;
      case ir::AxisKind::Sequence:
        slot.mode = state == ir::State::Activations ? ir::PlacementMode::SequenceSplit
                                                    : ir::PlacementMode::Replicated;
        break;
      case ir::AxisKind::Tensor:
        slot.mode = state == ir::State::Activations && c.sequenceParallel
                        ? ir::PlacementMode::Sharded
                        : ir::PlacementMode::TensorSplit;
        slot.isExplicit = state == ir::State::Activations && c.sequenceParallel;
        break;
      case ir::AxisKind::Layers:
        slot.mode = ir::PlacementMode::StageSplit;
        break;
      }
    }
  }
  auto apply = [&](ir::State state, unsigned mask, ir::PlacementMode mode, bool keep) {
    ir::StatePlacement &placement = strategy->getPlacement(state);
    for (auto [bit, index] : {std::pair<unsigned, int>{kOuter, outer}, {kInner, inner}})
      if ((mask & bit) && index >= 0) {
        placement.axes[index].mode = mode;
        placement.axes[index].keepAfterForward = keep;
        placement.axes[index].isExplicit = true;
      }
  };
  apply(ir::State::Params, paramMask(c.params), ir::PlacementMode::ShardedWithGather,
        keepsAfterForward(c.params));
  apply(ir::State::Grads, gradMask(c.grads), ir::PlacementMode::Sharded, false);
  apply(ir::State::Optimizer, optimizerMask(c.optimizer), ir::PlacementMode::Sharded, false);
  if (paramsOnHost(c.params)) {
    strategy->getPlacement(ir::State::Params).tier = ir::Tier::Host;
    strategy->getPlacement(ir::State::Params).tierExplicit = true;
  }
  if (c.optimizer == OptimizerChoice::HostShardAll) {
    strategy->getPlacement(ir::State::Optimizer).tier = ir::Tier::Host;
    strategy->getPlacement(ir::State::Optimizer).tierExplicit = true;
  }
  strategy->activationMode = c.activations;
  strategy->sequenceParallel = c.sequenceParallel;
  if (c.pp > 1) {
    ir::Pipeline pipeline;
    pipeline.schedule = c.schedule;
    pipeline.microbatches = c.microbatches;
    pipeline.chunks = c.chunks;
    strategy->pipeline = pipeline;
  }
  ir::resolveExpertPlacements(*strategy);
  return strategy;
}

std::unique_ptr<ir::Run> buildRun(const ir::Run &base, const ir::Cluster &cluster,
                                  const ir::Strategy &strategy, const Candidate &c) {
  auto run = std::make_unique<ir::Run>();
  run->name = base.name;
  run->model = base.model;
  run->cluster = &cluster;
  run->strategy = &strategy;
  run->microBatch = c.microBatch;
  run->globalBatch = base.globalBatch;
  run->precision = base.precision;
  run->optimizer = base.optimizer;
  run->microbatchesPerStep = c.microbatches;
  return run;
}

std::string evaluateExact(const ir::Run &base, const ir::Cluster &cluster, const Candidate &c,
                          analysis::RunAnalysis *analysisOut) {
  ir::Program program;
  program.strategies.push_back(buildStrategy(c, "candidate"));
  program.runs.push_back(buildRun(base, cluster, *program.strategies.back(), c));
  SourceMgr sourceMgr;
  DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  VerifyOptions options;
  options.capacityIsError = true;
  createVerifyPass(options)->run(program, diags);
  std::string rule;
  for (const Diagnostic &diag : diags.getDiagnostics())
    if (diag.severity == Severity::Error) {
      rule = diag.rule.empty() ? "error" : diag.rule;
      break;
    }
  analysis::RunAnalysis result = analysis::analyze(*plan::lowerRun(*program.runs.back()));
  // The capacity rule is defined by the memory analysis; a verifier without it (it is being
  // added) is completed here so that the search never reports a plan that does not fit.
  if (rule.empty() && (!result.memory.fitsDevice || !result.memory.fitsHost))
    rule = "capacity";
  if (analysisOut)
    *analysisOut = std::move(result);
  return rule;
}

SearchResult searchStrategies(const ir::Run &run, const SearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result;
  result.cluster = makeSearchCluster(*run.cluster, options.devices, options.memoryBudget);
  const ir::Cluster &cluster = *result.cluster;
  if (!isSearchable(run))
    return result;
  Evaluator evaluator(run, cluster);
  unsigned keep = std::max(1u, options.topK) + 16;
  std::vector<Candidate> best; // Sorted, fastest first, at most `keep`.
  FastVerdict verdict;
  uint64_t done = 0, nextReport = 1 << 16;
  // The total, for the progress bar.
  uint64_t total = 0;
  if (options.progress)
    enumerate(
        run, cluster,
        [&](const Candidate &c, uint64_t inner) {
          if (!options.filter)
            total += inner;
          return static_cast<bool>(options.filter);
        },
        [&](const Candidate &c) { total += options.filter(c) ? 1 : 0; });

  auto search = [&](bool prune, bool collect) {
    enumerate(
        run, cluster,
        [&](const Candidate &c, uint64_t inner) {
          if (!prune || options.filter)
            return true;
          // Rule order: gradient-integrity before capacity, as in the verifier's report.
          unsigned present = (c.dpNode > 1 ? kOuter : 0) | (c.dpLocal > 1 ? kInner : 0);
          if (gradMask(c.grads) & present & ~(optimizerMask(c.optimizer) & present))
            return true;
          if (evaluator.lowerBound(c) <= cluster.deviceMemory)
            return true;
          if (collect) {
            result.spaceSize += inner;
            result.rejectedByRule["capacity"] += inner;
            result.prunedByLowerBound += inner;
            done += inner;
          }
          return false;
        },
        [&](const Candidate &candidate) {
          if (options.filter && !options.filter(candidate))
            return;
          evaluator.evaluate(candidate, verdict);
          if (collect) {
            ++result.spaceSize;
            if (options.progress && ++done >= nextReport) {
              nextReport = done + (1 << 16);
              options.progress(total ? static_cast<double>(done) / static_cast<double>(total) : 0);
            }
          }
          if (verdict.rejectedBy == "capacity" || verdict.rejectedBy.empty()) {
            // Track the smallest memory of candidates that break no other rule.
            if (!result.smallest || verdict.peakBytes < result.smallest->peakBytes) {
              Candidate copy = candidate;
              copy.peakBytes = verdict.peakBytes;
              copy.hostPeakBytes = verdict.hostPeakBytes;
              result.smallest = copy;
            }
          }
          if (!collect)
            return;
          if (!verdict.rejectedBy.empty()) {
            ++result.rejectedByRule[verdict.rejectedBy];
            return;
          }
          ++result.accepted;
          Candidate copy = candidate;
          copy.stepSeconds = verdict.stepSeconds;
          copy.peakBytes = verdict.peakBytes;
          copy.hostPeakBytes = verdict.hostPeakBytes;
          if (options.onAccepted)
            options.onAccepted(copy);
          if (best.size() == keep && !isBetter(copy, best.back()))
            return;
          best.insert(std::upper_bound(best.begin(), best.end(), copy, isBetter), copy);
          if (best.size() > keep)
            best.pop_back();
        },
        collect ? &result.meshes : nullptr);
  };
  search(options.pruneByLowerBound, true);
  if (result.accepted == 0 && options.pruneByLowerBound && result.prunedByLowerBound > 0) {
    // Nothing fits: the pruned groups may hold the smallest footprint; find it exactly.
    result.smallest.reset();
    search(false, false);
  }
  if (result.accepted > 0)
    result.smallest.reset();

  // Re-check the winners with the verifier and the analyses themselves.
  for (const Candidate &candidate : best) {
    if (result.top.size() >= std::max(1u, options.topK))
      break;
    analysis::RunAnalysis exact;
    std::string rule = evaluateExact(run, cluster, candidate, &exact);
    if (!rule.empty()) {
      ++result.disagreements;
      continue;
    }
    Candidate checked = candidate;
    checked.stepSeconds = exact.time.stepSeconds;
    checked.peakBytes = exact.memory.device.peak;
    checked.hostPeakBytes = exact.memory.host.peak;
    result.top.push_back(checked);
    result.topAnalyses.push_back(std::move(exact));
  }
  if (options.progress)
    options.progress(1);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

bool isInFamily(const Candidate &c, Family family, bool tensorParallel) {
  if (c.pp != 1 || c.isSplit() || (c.tp > 1) != tensorParallel)
    return false;
  switch (family) {
  case Family::Dp:
    return c.params == ParamChoice::Replicate && c.grads == GradChoice::Replicate &&
           c.optimizer == OptimizerChoice::Replicate;
  case Family::Zero1:
    return c.params == ParamChoice::Replicate && c.grads == GradChoice::Replicate &&
           c.optimizer == OptimizerChoice::ShardAll;
  case Family::Zero2:
    return c.params == ParamChoice::Replicate && c.grads == GradChoice::ShardAll &&
           c.optimizer == OptimizerChoice::ShardAll;
  case Family::Zero3:
    return (c.params == ParamChoice::GatherAll || c.params == ParamChoice::GatherAllKeep) &&
           c.grads == GradChoice::ShardAll && c.optimizer == OptimizerChoice::ShardAll;
  }
  return false;
}

std::vector<MaxParamsRow> findMaxParams(const ir::Run &run, const SearchOptions &options) {
  std::vector<MaxParamsRow> rows;
  if (!isSearchable(run))
    return rows;
  const ir::TransformerConfig &base = run.model->transformer;
  int64_t headDim = base.hidden / base.heads;
  // The ffn per head, kept (four times hidden for GPT, 11008/32 per head for LLaMA-7B).
  double ffnPerHead = static_cast<double>(base.ffn) / static_cast<double>(base.heads);
  // The aspect ratio hidden / layers, kept (128 for GPT-3 175B and LLaMA-7B): Kaplan et al.
  // 2020 (§3.1, Figure 5) found the loss nearly independent of the shape at a fixed parameter
  // count over a wide range of aspect ratios, so one ratio spans the family.
  double layersPerHidden = static_cast<double>(base.layers) / static_cast<double>(base.hidden);
  auto configFor = [&](int64_t heads) {
    ir::TransformerConfig config = base;
    config.heads = heads;
    config.hidden = heads * headDim;
    config.ffn = static_cast<int64_t>(std::llround(ffnPerHead * static_cast<double>(heads)));
    config.layers =
        std::max<int64_t>(1, std::llround(layersPerHidden * static_cast<double>(config.hidden)));
    return config;
  };
  for (Family family : {Family::Dp, Family::Zero1, Family::Zero2, Family::Zero3})
    for (bool tensorParallel : {false, true}) {
      MaxParamsRow row;
      row.family = family;
      row.tensorParallel = tensorParallel;
      // The heads step keeps every tensor degree up to a node's size possible.
      int64_t step = tensorParallel ? run.cluster->devicesPerNode : 1;
      auto probe = [&](int64_t multiple, Candidate *bestOut) {
        ir::Model model = *run.model;
        model.transformer = configFor(multiple * step);
        model.tensors = ir::buildTransformerTensors(model.transformer);
        model.numParams = model.getTensorParams();
        ir::Run scaled = run;
        scaled.model = &model;
        SearchOptions probeOptions = options;
        probeOptions.topK = 1;
        probeOptions.progress = nullptr;
        probeOptions.filter = [&](const Candidate &c) {
          return isInFamily(c, family, tensorParallel);
        };
        SearchResult found = searchStrategies(scaled, probeOptions);
        if (found.top.empty())
          return int64_t(0);
        if (bestOut)
          *bestOut = found.top.front();
        return model.numParams;
      };
      // Exponential then binary search on the head count (a multiple of `step`).
      int64_t low = 0, high = 1;
      while (high < (int64_t(1) << 20) && probe(high, nullptr) > 0) {
        low = high;
        high *= 2;
      }
      while (high - low > 1) {
        int64_t mid = low + (high - low) / 2;
        (probe(mid, nullptr) > 0 ? low : high) = mid;
      }
      if (low > 0) {
        Candidate best;
        row.params = probe(low, &best);
        row.config = configFor(low * step);
        row.best = best;
      }
      rows.push_back(row);
    }
  return rows;
}

std::string formatStrategy(const Candidate &c, StringRef name) {
  std::string outer = c.isSplit() ? "dp_node" : "dp", inner = "dp_local";
  auto axes = [&](unsigned mask) {
    std::string text;
    if (c.isSplit()) {
      if (mask & kOuter)
        text = outer;
      if (mask & kInner)
        text += (text.empty() ? "" : ", ") + inner;
    } else if (c.getBatchDegree() > 1 && mask) {
      text = outer;
    }
    return text;
  };
  std::string text = "strategy " + name.str() + " {\n  mesh " + c.formatMesh() + ";\n";
  std::string params = axes(paramMask(c.params));
  std::string paramsText = params.empty() ? "" : "gather(" + params;
  if (!params.empty() && keepsAfterForward(c.params))
    paramsText += ", keep_after_forward = true";
  if (!params.empty())
    paramsText += ")";
  if (paramsOnHost(c.params))
    paramsText += std::string(paramsText.empty() ? "" : " ") + "@ host";
  if (!paramsText.empty())
    text += "  params      = " + paramsText + ";\n";
  std::string grads = axes(gradMask(c.grads));
  if (!grads.empty())
    text += "  grads       = shard(" + grads + ");\n";
  std::string optimizer = axes(optimizerMask(c.optimizer));
  std::string optimizerText = optimizer.empty() ? "" : "shard(" + optimizer + ")";
  if (c.optimizer == OptimizerChoice::HostShardAll)
    optimizerText += std::string(optimizerText.empty() ? "" : " ") + "@ host";
  if (!optimizerText.empty())
    text += "  optimizer   = " + optimizerText + ";\n";
  std::string activations = c.sequenceParallel ? "shard(tp), " : "";
  switch (c.activations) {
  case ir::ActivationMode::Keep:
    activations += "keep";
    break;
  case ir::ActivationMode::RecomputeSelective:
    activations += "recompute(selective)";
    break;
  case ir::ActivationMode::RecomputeFull:
    activations += "recompute";
    break;
  }
  text += "  activations = " + activations + ";\n";
  if (c.pp > 1) {
    text += "  pipeline    = " + ir::toString(c.schedule).str() +
            "(microbatches = " + std::to_string(c.microbatches);
    if (c.schedule == ir::Schedule::Interleaved)
      text += ", chunks = " + std::to_string(c.chunks);
    text += ");\n";
  }
  return text + "}\n";
}

std::string formatModel(const ir::Model &model) {
  const ir::TransformerConfig &config = model.transformer;
  std::string text;
  raw_string_ostream os(text);
  os << "model " << model.name << " : transformer {\n"
     << "  layers = " << config.layers << "; hidden = " << config.hidden
     << "; heads = " << config.heads << "; seq = " << config.seq << "; vocab = " << config.vocab
     << ";\n  ffn = " << config.ffn << "; mlp = " << ir::toString(config.mlp)
     << "; norm = " << ir::toString(config.norm) << "; bias = " << config.getBiasText()
     << "; positions = " << ir::toString(config.positions)
     << "; tied_embeddings = " << (config.tiedEmbeddings ? "true" : "false") << ";\n}\n";
  return text;
}

std::string formatCluster(const ir::Cluster &cluster) {
  static const std::pair<double, const char *> memoryUnits[] = {{1099511627776.0, "TiB"},
                                                                {1073741824.0, "GiB"},
                                                                {1e12, "TB"},
                                                                {1e9, "GB"},
                                                                {1048576.0, "MiB"},
                                                                {1, "B"}};
  static const std::pair<double, const char *> bandwidthUnits[] = {
      {1e12, "TB/s"}, {1e9, "GB/s"}, {1e6, "MB/s"}, {1, "B/s"}};
  static const std::pair<double, const char *> rateUnits[] = {{1e15, "PFLOPS"}, {1e12, "TFLOPS"}};
  std::string text;
  raw_string_ostream os(text);
  os << "cluster " << cluster.name << " {\n"
     << "  nodes = " << cluster.nodes << "; devices_per_node = " << cluster.devicesPerNode
     << ";\n  device_memory = " << formatQuantity(cluster.deviceMemory, memoryUnits)
     << "; peak = " << formatQuantity(cluster.peakFlops, rateUnits)
     << ";\n  intra_bandwidth = " << formatQuantity(cluster.intraBandwidth, bandwidthUnits)
     << "; inter_bandwidth = " << formatQuantity(cluster.interBandwidth, bandwidthUnits) << ";\n";
  if (cluster.hostBandwidth)
    os << "  host_bandwidth = " << formatQuantity(*cluster.hostBandwidth, bandwidthUnits) << ";\n";
  if (cluster.hostMemory)
    os << "  host_memory = " << formatQuantity(*cluster.hostMemory, memoryUnits) << ";\n";
  if (cluster.nvmeBandwidth)
    os << "  nvme_bandwidth = " << formatQuantity(*cluster.nvmeBandwidth, bandwidthUnits) << ";\n";
  if (cluster.nvmeCapacity)
    os << "  nvme_capacity = " << formatQuantity(*cluster.nvmeCapacity, memoryUnits) << ";\n";
  if (cluster.latency > 0) {
    static const std::pair<double, const char *> timeUnits[] = {
        {1, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}};
    std::string latency;
    for (auto [scale, unit] : timeUnits)
      if (cluster.latency >= scale || scale == 1e-9) {
        raw_string_ostream ls(latency);
        ls << format("%.12g", cluster.latency / scale) << " " << unit;
        break;
      }
    os << "  latency = " << latency << ";\n";
  }
  os << "  efficiency = " << format("%.12g", cluster.efficiency) << ";\n}\n";
  return text;
}

std::string formatRun(const ir::Run &base, const Candidate &c, StringRef name,
                      StringRef strategyName, StringRef clusterName) {
  std::string precision = base.precision == ir::Precision::MixedBF16   ? "mixed(bf16)"
                          : base.precision == ir::Precision::MixedFP16 ? "mixed(fp16)"
                                                                       : "fp32";
  std::string optimizer = base.optimizer == ir::OptimizerKind::Adam  ? "adam"
                          : base.optimizer == ir::OptimizerKind::Sgd ? "sgd"
                                                                     : "sgd(momentum = true)";
  return "run " + name.str() + " {\n  model = " + base.model->name +
         "; cluster = " + clusterName.str() + "; strategy = " + strategyName.str() +
         ";\n  micro_batch = " + std::to_string(c.microBatch) +
         "; global_batch = " + std::to_string(base.globalBatch) + ";\n  precision = " + precision +
         "; optimizer = " + optimizer + ";\n}\n";
}

} // namespace placec::search
