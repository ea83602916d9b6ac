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

#include "fmt/format.h"
#include "placec/ir/Devices.h"
#include "placec/ir/Diagnostics.h"
#include "placec/passes/Passes.h"
#include "placec/passes/StepPlan.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cmath>
#include <limits>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>

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

// Bits of a set of data-parallel axes: the outer batch axis (`dp_node`, or the one `dp` axis when
// the batch degree is not split), the inner one (`dp_local`) and the context axis (`cp`).
constexpr unsigned kOuter = 1, kInner = 2, kContext = 4, kExpert = 8,
                   kAll = kOuter | kInner | kContext | kExpert;

unsigned paramMask(ParamChoice choice) {
  switch (choice) {
  case ParamChoice::GatherInner:
  case ParamChoice::GatherInnerKeep:
    return kInner;
  case ParamChoice::GatherAll:
  case ParamChoice::GatherAllKeep:
  case ParamChoice::HostGatherAll:
    return kAll;
  default:
    return 0;
  }
}

unsigned gradMask(GradChoice choice) {
  return choice == GradChoice::ShardInner ? kInner : choice == GradChoice::ShardAll ? kAll : 0;
}

unsigned optimizerMask(OptimizerChoice choice) {
  return choice == OptimizerChoice::ShardInner                                            ? kInner
         : choice == OptimizerChoice::ShardAll || choice == OptimizerChoice::HostShardAll ? kAll
                                                                                          : 0;
}

/// Whether a placement all-gathers parameters, which `gather = fp8` then moves in FP8: the
/// gathered parameters, or the updated ones where the optimizer is sharded and they are not.
bool gathersParams(ParamChoice params, OptimizerChoice optimizer) {
  return paramMask(params) != 0 || (optimizerMask(optimizer) & ~paramMask(params)) != 0;
}

/// The data-parallel axes (kOuter, kInner, kContext) a candidate's mesh has.
unsigned presentAxes(const Candidate &c) {
  return (c.dpNode > 1 ? kOuter : 0) | (c.dpLocal > 1 ? kInner : 0) | (c.cp > 1 ? kContext : 0);
}

/// Whether the candidate's strategy writes `grad_reduce = all_reduce`: the searched run's
/// setting, where some axis shards the optimizer and replicates the gradients (the verifier's rule
/// `placement` refuses it elsewhere).
bool writesGradReduce(const Candidate &c) {
  if (c.gradReduce != ir::GradReduce::AllReduce)
    return false;
  // The experts' own replicated gradients: over the batch axes, and cp unless it is folded into
  // their group.
  unsigned expertOptimizer =
      c.expertsReplicated ? optimizerMask(c.optimizer) & ~(c.contextFold ? kContext : 0u) : 0;
  return (presentAxes(c) & ((optimizerMask(c.optimizer) & ~gradMask(c.grads)) | expertOptimizer)) !=
         0;
}

/// Whether the candidate's `dp_overlap` changes its step, so that its strategy writes it (the
/// verifier's rule `placement`): `none` needs gradients reduced once per step (replicated over a
/// data-parallel axis), `all` updated parameters all-gathered after the optimizer (sharded
/// optimizer, replicated parameters); `grads` is the default.
bool writesDpOverlap(const Candidate &c) {
  unsigned present = presentAxes(c);
  switch (c.dpOverlap) {
  case ir::DataParallelOverlap::Grads:
    return false;
  case ir::DataParallelOverlap::None:
    return (present & ~gradMask(c.grads)) != 0;
  case ir::DataParallelOverlap::All:
    return (present & optimizerMask(c.optimizer) & ~paramMask(c.params)) != 0;
  }
  return false;
}

bool keepsAfterForward(ParamChoice choice) {
  return choice == ParamChoice::GatherInnerKeep || choice == ParamChoice::GatherAllKeep;
}

bool paramsOnHost(ParamChoice choice) {
  return choice == ParamChoice::Host || choice == ParamChoice::HostGatherAll;
}

/// The `group` a searched plan writes for interleaving m micro-batches over pp stages: 0
/// (Megatron-Core's default) where the stages divide them or none fits, else the smallest that
/// fits (cost::getSmallestMicrobatchGroup).
int64_t getSearchGroup(int64_t pp, int64_t m) {
  int64_t group = cost::getSmallestMicrobatchGroup(pp, m);
  return group == pp ? 0 : group;
}

bool isVShape(ir::Schedule schedule) {
  return schedule == ir::Schedule::ZeroBubbleV || schedule == ir::Schedule::DualPipeV;
}

std::vector<int64_t> divisorsOf(int64_t n) {
  std::vector<int64_t> result;
  for (int64_t d = 1; d <= n / d; ++d)
    if (n % d == 0) {
      result.push_back(d);
      if (d * d != n)
        result.push_back(n / d);
    }
  std::sort(result.begin(), result.end());
  return result;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The plan's parameter and gradient dtype (plan::Lowering: BF16 under mixed(fp8)).
plan::DType planParamType(ir::Precision precision) {
  return precision == ir::Precision::FP32        ? plan::DType::FP32
         : precision == ir::Precision::MixedFP16 ? plan::DType::FP16
                                                 : plan::DType::BF16;
}

/// A kind of unit on a stage and how many of them there are.
struct UnitGroup {
  cost::UnitKind kind = cost::UnitKind::Layer;
  int64_t params = 0; ///< After the tensor-parallel split.
  /// Plan::Unit::sequenceParallelParams: the tensors whose gradients sequence parallelism leaves
  /// partial (ir::Tensor::hasSequenceParallelGradient).
  int64_t sequenceParallelParams = 0;
  int64_t count = 0;
};

/// One stage class of a (tp, pp, chunks, V shape) layout.
struct StageShape {
  int stage = 0;
  std::vector<UnitGroup> groups;
  int64_t numUnits = 0, numLayers = 0, sumParams = 0, maxParams = 0;
  /// Of sumParams, the units' that no quantized product reads (cost::quantizesParams); whether
  /// the largest unit is one of them (cost::StageStates::plainParams, largestPlain).
  int64_t plainParams = 0;
  bool largestPlain = false;
  /// Pipeline sends per micro-batch (forward and backward together) inside a node and across
  /// nodes; for the middle class, those of the middle stage with the most sends across nodes.
  int64_t intraSends = 0, interSends = 0;
  /// The stages the class stands for (p − 2 for the middle class, else 1), and their sends
  /// together: the middle stages differ only in their sends, which the bubble sums.
  int64_t count = 1, sumIntraSends = 0, sumInterSends = 0;
  /// Tied embeddings with the embedding and the head on this stage: the embedding stays
  /// gathered from its forward through the head's (cost::getStageMemory).
  int64_t tiedEmbedParams = 0;
  bool hasHead = false, hasEmbedding = false;
  /// The word embedding's copy (cost::getEmbeddingCopyParams) where the embedding and the head
  /// are on different stages: on both, the step all-reduces its gradient between them (Lowering);
  /// the head's group counts the copy in its params. `pair`: the group of the two stages.
  int64_t embeddingCopy = 0;
  cost::GroupShape pair;
};

/// A stage class's parameters as the memory of cost::getStageMemory counts them.
void setShapeParams(cost::StageStates &states, const StageShape &shape) {
  states.params = static_cast<double>(shape.sumParams);
  states.plainParams = static_cast<double>(shape.plainParams);
  states.largestUnit = static_cast<double>(shape.maxParams);
  states.largestPlain = shape.largestPlain;
}

/// What depends on a candidate's per-device work layout (tp, micro-batch, sequence parallelism,
/// activation mode, cp): the compute of each kind of unit in seconds per micro-batch
/// ([unit kind][pass]), the weight-gradient part of each backward, and the activation bytes of
/// a layer and of the head's loss.
struct UnitTimes {
  double seconds[3][cost::kNumPassKinds] = {};
  double weight[3] = {};
  /// GEMM seconds by tensor-parallel slot, for async_tp (cost::getTensorOverlapExposedSeconds):
  /// every product of each pass, and the backward's column-parallel weight gradients
  /// (`async_tp = wgrad`) and input gradients (beside the second gathers of sequence
  /// parallelism; cost::CostModel::getColumnParallelSlotSeconds).
  cost::TensorSlotSeconds slots[3][cost::kNumPassKinds] = {};
  cost::TensorSlotSeconds weightSlots[3] = {}, inputSlots[3] = {};
  double layerActivation = 0, headActivation = 0, recomputedLayer = 0, embeddingActivation = 0;
  /// What a layer, and the head, of a micro-batch whose weight pass is deferred hold
  /// (cost::getDeferredWeightExtraBytes with WeightGradStore and with the autograd graph kept,
  /// cost::getWeightPassBytes).
  double deferredExtra = 0, deferredExtraGraph = 0, headWeightPass = 0;
};

/// The seconds of the collectives inside each kind of unit's forward ([kind][0]) and backward
/// ([kind][1]) (plan::getUnitCollectives), and those `recompute(op)` and `recompute(attention)`
/// repeat ([kind][2] and [kind][3], plan::getRecomputedCollectives; full recomputation repeats
/// the forward's), for one (tp,
/// micro-batch, sequence parallelism, cp, method), by where they run (Analyzer::isAsyncTensor and
/// the ring steps): the tensor-parallel ones (beside the compute under async_tp, on the critical
/// path otherwise), the ring steps (beside), the other context-parallel exchanges (critical); and
/// the vocabulary-parallel cross-entropy's all-gather of the head (a tensor-parallel collective
/// too).
struct UnitTraffic {
  double tensor[3][4] = {}, ring[3][4] = {}, context[3][4] = {};
  /// The parts of tensor[kind][1] that reduce input gradients (plan::UnitCollective::
  /// inputGradient), which `async_tp = wgrad` runs beside the weight gradients, and that gather
  /// the column-parallel inputs again (plan::UnitCollective::regather), always beside the input
  /// gradients.
  double inputGradient[3] = {}, regather[3] = {};
  double headGather = 0;
};

/// What a candidate's placement costs each kind of unit, in seconds (the parts of
/// Analyzer::analyze that depend on the mesh and the placements, not on the activation mode,
/// micro-batch or schedule): host transfers on the critical path per micro-batch, the parameter
/// gather before a pass, the gradient reductions after a unit's backward, the step's
/// reductions, the step's exposed transfers and all-gathers, and the optimizer step.
struct PlacementTimes {
  bool known[3] = {};
  /// The params each kind was timed for: the head's differ with the word embedding's copy.
  int64_t params[3] = {};
  double critical[3] = {}, gather[3] = {}, gatherCopy[3] = {}, backwardReduce[3] = {},
         stepReduce[3] = {}, stepGather[3] = {}, stepExposed[3] = {}, optimizer[3] = {},
         accumulation[3] = {};
};

/// One stage class's time without its pipeline sends (Analyzer::analyze's StageTime): the
/// compute of a micro-batch (forward, backward, the backward's weight gradients, their sum),
/// the communication it exposes on the critical path and around its units' compute, what the
/// step's reductions and transfers expose, and the optimizer.
struct StageTimes {
  double forward = 0, backward = 0, weight = 0, compute = 0, critical = 0, passes = 0, step = 0,
         optimizer = 0;
};

/// The index of a unit kind in UnitTimes.
int unitIndex(cost::UnitKind kind) {
  return kind == cost::UnitKind::Embedding ? 0 : kind == cost::UnitKind::Layer ? 1 : 2;
}

/// A unit's forward and backward compute per micro-batch; the backward of a recomputed layer
/// begins with its recomputation.
std::pair<double, double> passSeconds(const UnitTimes &times, cost::UnitKind kind,
                                      std::optional<cost::PassKind> recomputePass) {
  const double *unitTime = times.seconds[unitIndex(kind)];
  double recompute = kind == cost::UnitKind::Layer && recomputePass
                         ? unitTime[static_cast<int>(*recomputePass)]
                         : 0;
  return {unitTime[static_cast<int>(cost::PassKind::Forward)],
          recompute + unitTime[static_cast<int>(cost::PassKind::Backward)]};
}

/// The stage layouts among a group's schedules: the even split (1f1b, zero_bubble, interleaved),
/// the V (zbv, dualpipev), and uneven first and last stages of `edges` layers each.
struct Layouts {
  bool even = false, vShape = false;
  std::vector<int64_t> edges;
};

/// A hash of a tuple of integers and booleans (the evaluator's cache keys).
struct TupleHash {
  template <typename... T> size_t operator()(const std::tuple<T...> &key) const {
    uint64_t hash = 0x9e3779b97f4a7c15ull;
    std::apply(
        [&](const T &...values) {
          ((hash = (hash ^ static_cast<uint64_t>(values)) * 0x100000001b3ull), ...);
        },
        key);
    return static_cast<size_t>(hash ^ (hash >> 29));
  }
};

/// A hash of two cache entries' addresses (the evaluator's caches never move their entries).
struct PointerPairHash {
  template <typename A, typename B> size_t operator()(const std::pair<A *, B *> &key) const {
    return TupleHash()(std::make_tuple(reinterpret_cast<uintptr_t>(key.first),
                                       reinterpret_cast<uintptr_t>(key.second)));
  }
};

/// The settings of a candidate's work layout besides its degrees, micro-batch and sequence
/// parallelism, as one small integer: the activation mode, the sequence-parallel inputs, and
/// whether fp32 parameters are gathered (their casts and the residual stream's type, layoutOf).
int getWorkMode(const Candidate &c) {
  bool gatheredFp32 = c.fp32Params && paramMask(c.params) != 0;
  return static_cast<int>(c.activations) * 4 + static_cast<int>(c.spInputs) * 2 +
         (gatheredFp32 ? 1 : 0);
}

/// Whether a candidate's backward gathers the column-parallel inputs again
/// (plan::regathersInputs).
bool regathersFor(const ir::Model &model, const Candidate &c) {
  return plan::regathersInputs(model, c.tp, c.sequenceParallel, c.spInputs, c.activations);
}

/// Precomputed facts of a run's model on a cluster at one precision, shared by every candidate.
class Evaluator {
public:
  /// `scaling`: the FP8 scaling of this precision's candidates (precisionVariants), which is not
  /// always the run's: `--precision fp8` over a mixed(fp4) run explores one scale per tensor;
  /// `fp8Params`, whether they keep FP8 parameters alone (Candidate::fp8Params).
  Evaluator(const ir::Run &run, const ir::Cluster &cluster, ir::Precision precision,
            ir::Fp8Scaling scaling, bool fp8Params)
      : model(*run.model), cluster(cluster),
        bytes(candidateStateBytes(run, cluster, precision, scaling, fp8Params)),
        costModel(cluster, precision,
                  cost::getWeightGradientResultBytes(
                      precision, bytes, run.fp32Params && precision != ir::Precision::FP32,
                      run.gradAccumulation)),
        precision(precision), paramType(planParamType(precision)),
        fp8Type(plan::getQuantizedType(scaling)), crossEntropy(run.crossEntropy),
        trainMetrics(run.trainMetrics), kernels(run.kernels), contextMerge(run.contextMerge),
        gradAccumulation(run.gradAccumulation),
        copiesGathers(run.paramGather == ir::ParamGather::CopyOut) {
    layers = model.getNumLayers();
    activationBytes = ir::getActivationBytes(precision);
    paramBytes = static_cast<unsigned>(plan::getSize(paramType));
  }

  /// The stage classes of a layout, cached.
  const std::vector<StageShape> &getShapes(int64_t tp, int64_t pp, int64_t chunks, bool vShape,
                                           int64_t edge = 0);
  /// Per-device memory that no activation mode, micro-batch or schedule can lower: the model
  /// states and transient buffers of the fullest stage, the smaller of the two stage layouts
  /// (the embedding and the head on the first and last stages, or both on the first under the
  /// V schedules, or the first and last stages lighter), the smallest over the group's `layouts`.
  double lowerBound(const Candidate &candidate, const Layouts &layouts);
  /// Rules, memory and step time of a candidate. An accepted candidate whose step cannot come
  /// under `stepBound` (its stages' compute alone is longer) is left untimed (verdict.timed).
  void evaluate(const Candidate &candidate, FastVerdict &verdict,
                double stepBound = std::numeric_limits<double>::infinity());

private:
  struct Geometry {
    /// The sizes and rank strides of the data-parallel axes, indexed by bit position (outer,
    /// inner, context); [pp, dp_node, dp_local, cp, tp] is row-major.
    int64_t sizes[3] = {1, 1, 1};
    int64_t strides[3] = {1, 1, 1};
    unsigned present = 0;
  };
  Geometry geometry(const Candidate &c) const {
    Geometry g;
    g.sizes[0] = c.dpNode;
    g.sizes[1] = c.dpLocal;
    g.sizes[2] = c.cp;
    g.strides[2] = c.tp;
    g.strides[1] = c.cp * c.tp;
    g.strides[0] = c.dpLocal * c.cp * c.tp;
    g.present = presentAxes(c);
    return g;
  }
  int64_t degree(const Geometry &g, unsigned mask) const {
    mask &= g.present;
    int64_t result = 1;
    for (unsigned i = 0; i < 3; ++i)
      if (mask & (1u << i))
        result *= g.sizes[i];
    return result;
  }
  /// The cluster shape of the group over the data-parallel axes in `mask`.
  cost::GroupShape groupOf(const Geometry &g, unsigned mask) const {
    mask &= g.present;
    cost::GroupAxis axes[3];
    size_t count = 0;
    for (unsigned i = 0; i < 3; ++i)
      if (mask & (1u << i))
        axes[count++] = {g.strides[i], g.sizes[i]};
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
    layout.context = c.cp;
    layout.sequenceParallel = c.sequenceParallel;
    layout.sequenceParallelInputs = c.spInputs;
    layout.activations = c.activations;
    layout.precision = precision;
    layout.crossEntropy = crossEntropy;
    layout.trainMetrics = trainMetrics;
    layout.kernels = kernels;
    layout.fp32Params = c.fp32Params;
    layout.paramsGathered = paramMask(c.params) != 0;
    layout.fp8Saved = c.fp8Saved;
    layout.fp8Scaling = c.fp8Scaling;
    layout.fp8Attention = c.fp8Attention;
    layout.contextMethod = c.context;
    layout.contextMerge = contextMerge;
    layout.dispatcher = c.dispatcher;
    layout.gradAccumulation = gradAccumulation;
    layout.gradBytes = bytes.grads;
    return layout;
  }
  /// The compute and activations of every kind of unit for a candidate's layout, cached.
  const UnitTimes &getUnitTimes(const Candidate &c);
  /// The collectives of every kind of unit for a candidate's layout, cached.
  const UnitTraffic &getUnitTraffic(const Candidate &c);
  /// The time of each stage class of a candidate without its pipeline sends (lastStages), and
  /// the time of one send inside a node and across nodes.
  void timeStages(const Candidate &c, const Geometry &g, const cost::StageStates &states,
                  const std::vector<StageShape> &stageShapes);
  /// The stage classes' device and host peaks without activations, for the placement in
  /// `states` (its shard degrees and where the states live), cached per placement.
  struct StatesPart {
    double device[3] = {}, host[3] = {};
  };
  const StatesPart &getStatesPart(cost::StageStates &states,
                                  const std::vector<StageShape> &stageShapes);
  /// What the activations add to each stage class's device peak: with no micro-batch in flight
  /// (the recomputed layer), per micro-batch in flight (its layers' activations) and per
  /// micro-batch whose loss is in flight (on the head's stage, its loss buffers), for one work
  /// layout, cached.
  struct ActivationPart {
    double fixed[3] = {}, perMicrobatch[3] = {}, perLoss[3] = {};
    /// Under schedules that defer weight passes: what a deferred micro-batch's layers hold beyond
    /// their activations (with WeightGradStore, and with the autograd graph kept), and the head's
    /// deferred weight pass (cost::getHeldActivationBytes).
    double perDeferred[3] = {}, perDeferredGraph[3] = {}, perHead[3] = {};
  };
  const ActivationPart &getActivationPart(const UnitTimes &times,
                                          const std::vector<StageShape> &stageShapes);
  /// A pipeline layout's stage classes with what its schedule holds on each: whether the
  /// schedule's formulas hold (cost::isScheduleValid), each class's micro-batches in flight and
  /// those whose loss is in flight, and its peaks under deferred weight passes. They depend on the
  /// mesh's tp and pp, the schedule, its chunks, group and micro-batches and the first and last
  /// stages' layers, not on the placement or the work layout, which the search varies inside them.
  struct ScheduleHolds {
    const std::vector<StageShape> *shapes = nullptr;
    bool valid = true;
    double inFlight[3] = {}, lossInFlight[3] = {};
    llvm::SmallVector<cost::HeldMicrobatches, 2> peaks[3];
  };
  const ScheduleHolds &getScheduleHolds(const Candidate &c);
  /// Computes a new entry of getScheduleHolds's table.
  void fillScheduleHolds(const Candidate &c, ScheduleHolds &holds);

  /// The run's options, as each candidate at this precision keeps them (precisionVariants); the
  /// scaling counts under mixed(fp8) only (ir::getStateBytes).
  static ir::StateBytes candidateStateBytes(const ir::Run &run, const ir::Cluster &cluster,
                                            ir::Precision precision, ir::Fp8Scaling scaling,
                                            bool fp8Params) {
    bool mixed = precision != ir::Precision::FP32;
    return ir::getStateBytes(precision, run.optimizer, run.fp32Grads && mixed,
                             run.fp32Params && mixed, scaling, run.optimizerStates, fp8Params,
                             ir::keepsFp8Transposes(cluster));
  }

  const ir::Model &model;
  const ir::Cluster &cluster;
  ir::StateBytes bytes{};
  cost::CostModel costModel;
  ir::Precision precision = ir::Precision::MixedBF16;
  /// The plan's parameter type, and the type of the candidates' quantized gathers (their FP8
  /// scaling's).
  plan::DType paramType = plan::DType::BF16;
  plan::DType fp8Type = plan::DType::FP8;
  ir::CrossEntropyKind crossEntropy = ir::CrossEntropyKind::Fused;
  int64_t trainMetrics = 0;
  ir::KernelMode kernels = ir::KernelMode::Fused;
  ir::ContextMerge contextMerge = ir::ContextMerge::Fused;
  ir::GradAccumulation gradAccumulation = ir::GradAccumulation::Fused;
  /// `param_gather = copy_out`: each all-gather of the parameters is copied out on the compute
  /// stream (Analyzer::gatherCopySeconds).
  bool copiesGathers = false;
  int64_t layers = 0;
  unsigned activationBytes = 2;
  unsigned paramBytes = 2;
  std::unordered_map<std::tuple<int64_t, int64_t, int64_t, bool, int64_t>, std::vector<StageShape>,
                     TupleHash>
      shapes;
  std::unordered_map<std::tuple<int64_t, int64_t, bool, int, int64_t>, UnitTimes, TupleHash>
      unitTimes;
  std::unordered_map<std::tuple<int64_t, int64_t, bool, int64_t, int, bool, int64_t>, UnitTraffic,
                     TupleHash>
      unitTraffic;
  // The placement costs of the last (mesh, placement), which the candidates of a group share.
  std::tuple<int64_t, int64_t, int64_t, int64_t, int, int, int, bool, bool, int> placementKey;
  PlacementTimes placement;
  bool hasPlacement = false;
  // The stage times of the last candidate timed.
  using TimeKey = std::tuple<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>,
                             std::tuple<int, int, int, bool, int>,
                             std::tuple<int, bool, int, int64_t, int64_t, bool, int64_t>>;
  TimeKey lastTimeKey;
  bool hasTimes = false;
  StageTimes lastStages[3];
  double lastSendIntra = 0, lastSendInter = 0;
  // The stage states `evaluate` fills in, kept between candidates so that their strings (used by
  // explanations only, never here) are not built and destroyed for each: every candidate writes
  // the same fields, and the others keep their defaults.
  cost::StageStates candidateStates;
  // The states parts of the last placement, by stage layout (a handful per placement).
  std::tuple<int64_t, int64_t, int64_t, unsigned> statesPlacement{0, 0, 0, ~0u};
  llvm::SmallVector<std::pair<const std::vector<StageShape> *, StatesPart>, 4> statesParts;
  // The activation parts by work layout and stage layout, for the mesh of getScheduleHolds.
  std::unordered_map<std::pair<const UnitTimes *, const std::vector<StageShape> *>, ActivationPart,
                     PointerPairHash>
      activationParts;
  // The work layout and activation part of the candidates of one mesh (its tensor, pipeline,
  // batch and context degrees and context method) by their step (Candidate::stepIndex) and
  // activation settings (stepSlot): the same for every placement, so that most candidates find
  // them without hashing their keys. Null where not yet looked up.
  struct StepEntry {
    const UnitTimes *times = nullptr;
    const ActivationPart *activations = nullptr;
  };
  std::vector<std::vector<StepEntry>> stepEntries;
  std::tuple<int64_t, int64_t, int64_t, int64_t, int> stepEntriesMesh{0, 0, 0, 0, 0};
  StepEntry noStepEntry;
  StepEntry &getStepEntry(const Candidate &c);
  using HoldsKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int, int64_t, int64_t>;
  std::unordered_map<HoldsKey, ScheduleHolds, TupleHash> scheduleHolds;
  HoldsKey lastHoldsKey;
  std::tuple<int64_t, int64_t, int64_t> holdsMesh{0, 0, 0};
  const ScheduleHolds *lastHolds = nullptr;
  // scheduleHolds's entries by the candidates' Candidate::stepIndex, for the mesh holdsStepsMesh
  // (tensor, pipeline and batch degrees: the enumeration's list of steps); null where not yet
  // looked up.
  std::vector<const ScheduleHolds *> holdsByStep;
  std::tuple<int64_t, int64_t, int64_t> holdsStepsMesh{0, 0, 0};
  // The last entries looked up (consecutive candidates mostly share them).
  std::tuple<int64_t, int64_t, int64_t, bool, int64_t> lastShapesKey;
  const std::vector<StageShape> *lastShapes = nullptr;
  std::tuple<int64_t, int64_t, bool, int, int64_t> lastTimesKey;
  const UnitTimes *lastTimes = nullptr;
  std::tuple<int64_t, int64_t, bool, int64_t, int, bool, int64_t> lastTrafficKey;
  const UnitTraffic *lastTraffic = nullptr;
};

const UnitTimes &Evaluator::getUnitTimes(const Candidate &c) {
  auto key = std::make_tuple(c.tp, c.microBatch, c.sequenceParallel, getWorkMode(c),
                             // The context method: how many attention kernels and merges.
                             c.cp * 4 + static_cast<int64_t>(c.context));
  if (lastTimes && lastTimesKey == key)
    return *lastTimes;
  auto it = unitTimes.find(key);
  if (it != unitTimes.end()) {
    lastTimesKey = key;
    return *(lastTimes = &it->second);
  }
  UnitTimes times;
  cost::Layout layout = layoutOf(c);
  // The forward, the backward and the candidate's recomputation (the key holds its mode).
  std::vector<cost::PassKind> passes = {cost::PassKind::Forward, cost::PassKind::Backward};
  if (std::optional<cost::PassKind> recompute = cost::getRecomputePass(c.activations))
    passes.push_back(*recompute);
  for (cost::UnitKind kind :
       {cost::UnitKind::Embedding, cost::UnitKind::Layer, cost::UnitKind::Head})
    for (cost::PassKind pass : passes) {
      cost::Work work = cost::getUnitWork(model, kind, 0, pass, layout);
      times.seconds[unitIndex(kind)][static_cast<int>(pass)] = costModel.getComputeSeconds(
          work, nullptr, &times.slots[unitIndex(kind)][static_cast<int>(pass)]);
      if (pass == cost::PassKind::Backward) {
        times.weight[unitIndex(kind)] = costModel.getWeightGradientSeconds(work);
        times.weightSlots[unitIndex(kind)] =
            costModel.getColumnParallelSlotSeconds(work, false, true);
        times.inputSlots[unitIndex(kind)] =
            costModel.getColumnParallelSlotSeconds(work, true, false);
      }
    }
  times.layerActivation = cost::getLayerActivationBytes(model.transformer, layout);
  times.headActivation = cost::getHeadActivationBytes(model.transformer, layout);
  times.embeddingActivation = cost::getEmbeddingActivationBytes(model.transformer, layout);
  times.recomputedLayer = cost::getRecomputedLayerBytes(model, layout);
  // The layer's deferred weight pass with WeightGradStore and with the autograd graph kept.
  cost::WeightPassOperands operands =
      cost::getWeightPassOperands(model, cost::UnitKind::Layer, 0, layout);
  double kept = cost::getLayerActivationBytes(model.transformer, layout, nullptr,
                                              model.transformer.isMoeBlock(0));
  times.deferredExtra = cost::getDeferredWeightExtraBytes(operands, kept, false);
  times.deferredExtraGraph = cost::getDeferredWeightExtraBytes(operands, kept, true);
  times.headWeightPass = cost::getWeightPassBytes(model, cost::UnitKind::Head, 0, layout);
  lastTimesKey = key;
  return *(lastTimes = &unitTimes.emplace(key, times).first->second);
}

const UnitTraffic &Evaluator::getUnitTraffic(const Candidate &c) {
  bool regather = regathersFor(model, c);
  // Userbuffers gather one quantized copy of a gradient where NCCL gathers two (MXFP8, NVFP4).
  bool userbuffers = c.asyncTp == ir::AsyncTensorParallel::All;
  int64_t gradientCopies = plan::getGradientGatherCopies(fp8Type, userbuffers);
  auto key = std::make_tuple(c.tp, c.microBatch, c.sequenceParallel, c.cp,
                             static_cast<int>(c.cp > 1 ? c.context : ir::ContextMethod::Ring),
                             regather, gradientCopies);
  if (lastTraffic && lastTrafficKey == key)
    return *lastTraffic;
  auto it = unitTraffic.find(key);
  if (it != unitTraffic.end()) {
    lastTrafficKey = key;
    return *(lastTraffic = &it->second);
  }
  UnitTraffic traffic;
  plan::UnitLayout layout;
  layout.microBatch = c.microBatch;
  layout.tensor = c.tp;
  layout.sequenceParallel = c.sequenceParallel;
  layout.context = c.cp;
  layout.contextMethod = c.context;
  layout.regather = regather;
  layout.kernels = kernels;
  layout.fp8 = precision == ir::Precision::MixedFP8;
  layout.fp8Type = fp8Type;
  layout.userbuffers = userbuffers;
  // The tensor axis is innermost (stride 1), the context axis next (stride tp).
  cost::GroupAxis tensorAxis{1, c.tp}, contextAxis{c.tp, c.cp};
  cost::GroupShape tensorGroup =
      cost::getGroupShape(ArrayRef(&tensorAxis, 1), cluster.devicesPerNode);
  cost::GroupShape contextGroup =
      cost::getGroupShape(ArrayRef(&contextAxis, 1), cluster.devicesPerNode);
  for (cost::UnitKind kind :
       {cost::UnitKind::Embedding, cost::UnitKind::Layer, cost::UnitKind::Head}) {
    int layer = kind == cost::UnitKind::Embedding ? -1
                : kind == cost::UnitKind::Layer   ? 0
                                                  : static_cast<int>(layers);
    int index = unitIndex(kind);
    for (int pass = 0; pass < 4; ++pass)
      for (const plan::UnitCollective &op :
           pass < 2
               ? plan::getUnitCollectives(model, kind, layer, pass == 0, layout)
               : plan::getRecomputedCollectives(model, kind, layer,
                                                pass == 2 ? ir::ActivationMode::RecomputeOps
                                                          : ir::ActivationMode::RecomputeAttention,
                                                layout)) {
        double opBytes = static_cast<double>(op.elements) *
                         (op.fp8 ? plan::getSize(layout.fp8Type) : activationBytes);
        if (op.kind == plan::OpKind::RingStep)
          traffic.ring[index][pass] +=
              static_cast<double>(op.repeat) *
              costModel.getPointToPointSeconds(opBytes, !contextGroup.isIntraNode());
        else if (op.over == ir::AxisKind::Tensor) {
          double seconds = collective(op.kind, tensorGroup, opBytes);
          traffic.tensor[index][pass] += seconds;
          if (pass == 1 && op.inputGradient)
            traffic.inputGradient[index] += seconds;
          if (pass == 1 && op.regather)
            traffic.regather[index] += seconds;
        } else
          traffic.context[index][pass] += collective(op.kind, contextGroup, opBytes);
      }
  }
  if (c.tp > 1)
    traffic.headGather =
        collective(plan::OpKind::AllGather, tensorGroup,
                   static_cast<double>(3 * c.microBatch * model.transformer.seq / c.cp * c.tp) *
                       activationBytes);
  lastTrafficKey = key;
  return *(lastTraffic = &unitTraffic.emplace(key, traffic).first->second);
}

Evaluator::StepEntry &Evaluator::getStepEntry(const Candidate &c) {
  // getUnitTimes's key less the micro-batch, which the step gives, and less the mesh's degrees.
  size_t slot = static_cast<size_t>(getWorkMode(c)) * 2 + (c.sequenceParallel ? 1 : 0);
  if (c.stepIndex < 0) {
    noStepEntry = StepEntry();
    return noStepEntry;
  }
  auto mesh = std::make_tuple(c.tp, c.pp, c.getBatchDegree(), c.cp, static_cast<int>(c.context));
  if (mesh != stepEntriesMesh) {
    stepEntries.clear();
    stepEntriesMesh = mesh;
  }
  if (slot >= stepEntries.size())
    stepEntries.resize(slot + 1);
  std::vector<StepEntry> &bySlot = stepEntries[slot];
  size_t step = static_cast<size_t>(c.stepIndex);
  if (step >= bySlot.size())
    bySlot.resize(step + 1);
  return bySlot[step];
}

const Evaluator::ScheduleHolds &Evaluator::getScheduleHolds(const Candidate &c) {
  // A mesh's candidates come together and share a handful of entries: this table and the
  // activation parts hold one mesh's (pipeline stages, tensor and data-parallel degrees), which
  // keeps them small and in cache.
  auto mesh = std::make_tuple(c.tp, c.pp, c.getDataDegree());
  if (mesh != holdsMesh) {
    scheduleHolds.clear();
    holdsByStep.clear();
    activationParts.clear();
    stepEntries.clear();
    holdsMesh = mesh;
    lastHolds = nullptr;
  }
  // The enumeration's step index names the entry without hashing its fields: the steps are one
  // list for every candidate of a mesh (they depend on its pipeline stages and batch degree), and
  // the innermost loop runs over them.
  auto stepsMesh = std::make_tuple(c.tp, c.pp, c.getBatchDegree());
  if (stepsMesh != holdsStepsMesh) {
    holdsByStep.clear();
    holdsStepsMesh = stepsMesh;
  }
  size_t step = static_cast<size_t>(c.stepIndex);
  bool indexed = c.stepIndex >= 0;
  HoldsKey key{c.tp,           c.pp,   c.chunks, c.edgeLayers, static_cast<int>(c.schedule),
               c.microbatches, c.group};
  if (indexed && step < holdsByStep.size() && holdsByStep[step]) {
    assert(scheduleHolds.count(key) && &scheduleHolds.find(key)->second == holdsByStep[step] &&
           "a step index names another schedule's entry");
    return *holdsByStep[step];
  }
  if (!lastHolds || lastHoldsKey != key) {
    lastHoldsKey = key;
    auto [it, inserted] = scheduleHolds.try_emplace(key);
    lastHolds = &it->second;
    if (inserted)
      fillScheduleHolds(c, it->second);
  }
  if (indexed) {
    if (step >= holdsByStep.size())
      holdsByStep.resize(step + 1, nullptr);
    holdsByStep[step] = lastHolds;
  }
  return *lastHolds;
}

void Evaluator::fillScheduleHolds(const Candidate &c, ScheduleHolds &holds) {
  holds.valid = cost::isScheduleValid(c.schedule, c.pp, c.microbatches, c.chunks, nullptr, c.group);
  bool vShape = c.pp > 1 && isVShape(c.schedule);
  holds.shapes = &getShapes(c.tp, c.pp, c.chunks, vShape, c.edgeLayers);
  if (!holds.valid)
    return;
  for (size_t i = 0; i < holds.shapes->size(); ++i) {
    const StageShape &shape = (*holds.shapes)[i];
    holds.inFlight[i] = cost::getInFlightMicrobatches(c.schedule, c.pp, c.microbatches, c.chunks,
                                                      shape.stage, nullptr, c.group);
    holds.lossInFlight[i] = cost::getLossInFlightMicrobatches(
        c.schedule, c.pp, c.microbatches, c.chunks, shape.stage, nullptr, c.group);
    holds.peaks[i] = cost::getDeferredWeightPeaks(c.schedule, c.pp, c.microbatches, c.chunks,
                                                  shape.stage, shape.hasHead, 0);
  }
}

const std::vector<StageShape> &Evaluator::getShapes(int64_t tp, int64_t pp, int64_t chunks,
                                                    bool vShape, int64_t edge) {
  auto key = std::make_tuple(tp, pp, chunks, vShape, edge);
  if (lastShapes && lastShapesKey == key)
    return *lastShapes;
  auto it = shapes.find(key);
  if (it != shapes.end()) {
    lastShapesKey = key;
    return *(lastShapes = &it->second);
  }
  // The units of the model after the tensor-parallel split, as Lowering::buildUnits builds them.
  std::map<int, int64_t> unitParams, sequenceParallelParams;
  for (const ir::Tensor &tensor : model.tensors) {
    unitParams[tensor.layer] += tensor.split == ir::TensorSplit::Replicated
                                    ? tensor.numElements
                                    : ceilDiv(tensor.numElements, tp);
    if (tensor.hasSequenceParallelGradient())
      sequenceParallelParams[tensor.layer] += tensor.numElements;
  }
  const ir::TransformerConfig &config = model.transformer;
  int headLayer = static_cast<int>(layers);
  // The stage of the embedding and of the head: the first chunk's and the last chunk's
  // (plan::getPipelineLayout; the V schedules end on the first stage).
  int64_t headStage = vShape ? 0 : pp - 1;

  // The pipeline sends of stage s per micro-batch, to each peer stage (Lowering: a send at
  // each end of a chunk whose neighbouring layer is on another stage). Consecutive chunks
  // c and c + 1 lie on stages c % p and (c + 1) % p, or along the V: stage s holds chunks s and
  // 2p − 1 − s, whose neighbours are on s ± 1 and the turn at stage p − 1 sends nothing.
  int64_t stride = cluster.getNumDevices() / pp;
  auto sendsOf = [&](int64_t s) {
    std::vector<int64_t> peers; // One entry per send, forward and backward.
    if (pp <= 1)
      return peers;
    if (!vShape) {
      for (int64_t i = 0; i < chunks - (s == pp - 1 ? 1 : 0); ++i)
        peers.push_back((s + 1) % pp);
      for (int64_t i = 0; i < chunks - (s == 0 ? 1 : 0); ++i)
        peers.push_back((s + pp - 1) % pp);
    } else if (s == 0) {
      peers = {1, 1};
    } else if (s == pp - 1) {
      peers = {pp - 2, pp - 2};
    } else {
      peers = {s + 1, s - 1, s - 1, s + 1};
    }
    return peers;
  };
  auto linksOf = [&](int64_t s) {
    std::pair<int64_t, int64_t> links{0, 0}; // intra, inter
    for (int64_t peer : sendsOf(s)) {
      if (cost::crossesNodes(stride, pp, static_cast<int>(s), static_cast<int>(peer),
                             cluster.getNumDevices(), cluster.devicesPerNode))
        ++links.second;
      else
        ++links.first;
    }
    return links;
  };

  // The word embedding's copy on the head's stage when that is not the embedding's (Lowering).
  int64_t copy = pp > 1 && !vShape ? cost::getEmbeddingCopyParams(model, tp) : 0;
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
      if (kind == cost::UnitKind::Layer)
        shape.numLayers += count;
      shape.groups.push_back(group);
      shape.numUnits += count;
      shape.sumParams += params * count;
      bool plain = !cost::quantizesParams(kind);
      if (plain)
        shape.plainParams += params * count;
      if (params > shape.maxParams) {
        shape.maxParams = params;
        shape.largestPlain = plain;
      }
    };
    bool hasEmbedding = stage == 0 && unitParams.count(-1);
    shape.hasEmbedding = hasEmbedding;
    if (hasEmbedding)
      addGroup(unitParams[-1], 1, cost::UnitKind::Embedding, -1);
    // Layers per stage: an even share, or with uneven edges `edge` on the first and the last
    // stage and the rest shared by the others (plan::getPipelineLayout).
    int64_t stageLayers = edge == 0                       ? layers / pp
                          : stage == 0 || stage == pp - 1 ? edge
                                                          : (layers - 2 * edge) / (pp - 2);
    addGroup(unitParams[0], stageLayers, cost::UnitKind::Layer, 0);
    if (stage == headStage && unitParams.count(headLayer)) {
      addGroup(unitParams[headLayer] + (hasEmbedding ? 0 : copy), 1, cost::UnitKind::Head,
               headLayer);
      shape.hasHead = true;
    }
    if (copy > 0 && (hasEmbedding || shape.hasHead)) {
      shape.embeddingCopy = copy;
      shape.pair = cost::getStagePairShape(stride, pp, 0, static_cast<int>(headStage),
                                           cluster.getNumDevices(), cluster.devicesPerNode);
    }
    if (config.tiedEmbeddings && hasEmbedding && shape.hasHead)
      shape.tiedEmbedParams = unitParams[-1];
    std::tie(shape.intraSends, shape.interSends) = linksOf(stage);
    shape.sumIntraSends = shape.intraSends;
    shape.sumInterSends = shape.interSends;
    if (stage == 1 && pp > 2) {
      shape.count = pp - 2;
      for (int64_t middle = 2; middle + 1 < pp; ++middle) {
        auto links = linksOf(middle);
        shape.sumIntraSends += links.first;
        shape.sumInterSends += links.second;
        if (links.second > shape.interSends)
          std::tie(shape.intraSends, shape.interSends) = links;
      }
    }
    result.push_back(std::move(shape));
  }
  lastShapesKey = key;
  return *(lastShapes = &shapes.emplace(key, std::move(result)).first->second);
}

double Evaluator::lowerBound(const Candidate &c, const Layouts &layouts) {
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
  auto fullest = [&](bool vShape, int64_t edge) {
    double best = 0;
    for (const StageShape &shape : getShapes(c.tp, c.pp, vShape ? 2 : 1, vShape, edge)) {
      setShapeParams(states, shape);
      states.units = shape.numUnits;
      states.tiedEmbedding = static_cast<double>(shape.tiedEmbedParams);
      // No activations: the device peak without them is the bound.
      best = std::max(best, cost::getStageMemory(states, bytes).device.peak);
    }
    return best;
  };
  if (c.pp == 1)
    return fullest(false, 0);
  double bound = std::numeric_limits<double>::infinity();
  if (layouts.even)
    bound = std::min(bound, fullest(false, 0));
  if (layouts.vShape)
    bound = std::min(bound, fullest(true, 0));
  for (int64_t edge : layouts.edges)
    bound = std::min(bound, fullest(false, edge));
  return bound;
}

const Evaluator::StatesPart &Evaluator::getStatesPart(cost::StageStates &states,
                                                      const std::vector<StageShape> &stageShapes) {
  auto placement =
      std::make_tuple(states.paramShard, states.gradShard, states.optimizerShard,
                      (states.paramsOnHost ? 1u : 0u) | (states.optimizerOnHost ? 2u : 0u) |
                          (states.gradsOnHost ? 4u : 0u) | (states.gathers ? 8u : 0u) |
                          (states.keepAfterForward ? 16u : 0u));
  if (placement != statesPlacement) {
    statesParts.clear();
    statesPlacement = placement;
  }
  for (const auto &[layout, part] : statesParts)
    if (layout == &stageShapes)
      return part;
  StatesPart part;
  // Without activations: no layer's bytes, nothing in flight, no loss buffers, no recomputed
  // layer (getActivationPart adds them).
  states.layerActivationBytes = 0;
  states.inFlight = 0;
  states.headBuffers = 0;
  states.recomputedLayer = 0;
  for (size_t i = 0; i < stageShapes.size(); ++i) {
    const StageShape &shape = stageShapes[i];
    setShapeParams(states, shape);
    states.units = shape.numUnits;
    states.layers = shape.numLayers;
    states.tiedEmbedding = static_cast<double>(shape.tiedEmbedParams);
    cost::StageMemoryResult memory = cost::getStageMemory(states, bytes);
    part.device[i] = memory.device.peak;
    part.host[i] = memory.host.peak;
  }
  statesParts.emplace_back(&stageShapes, part);
  return statesParts.back().second;
}

const Evaluator::ActivationPart &
Evaluator::getActivationPart(const UnitTimes &times, const std::vector<StageShape> &stageShapes) {
  auto [it, inserted] = activationParts.try_emplace({&times, &stageShapes});
  ActivationPart &part = it->second;
  if (!inserted)
    return part;
  for (size_t i = 0; i < stageShapes.size(); ++i) {
    const StageShape &shape = stageShapes[i];
    // A stage that holds nothing but this shape's layers and loss (no parameters): its peak is
    // what the activations add to any placement's.
    cost::StageStates bare;
    bare.layers = shape.numLayers;
    bare.layerActivationBytes = times.layerActivation;
    bare.recomputedLayer = shape.numLayers > 0 ? times.recomputedLayer : 0;
    bare.inFlight = 0;
    double none = cost::getStageMemory(bare, bytes).device.peak;
    bare.inFlight = 1;
    bare.embeddingActivationBytes = shape.hasEmbedding ? times.embeddingActivation : 0;
    double one = cost::getStageMemory(bare, bytes).device.peak;
    bare.headBuffers = shape.hasHead ? times.headActivation : 0;
    double loss = cost::getStageMemory(bare, bytes).device.peak;
    part.fixed[i] = none;
    part.perMicrobatch[i] = one - none;
    part.perLoss[i] = loss - one;
    part.perDeferred[i] = static_cast<double>(shape.numLayers) * times.deferredExtra;
    part.perDeferredGraph[i] = static_cast<double>(shape.numLayers) * times.deferredExtraGraph;
    part.perHead[i] = shape.hasHead ? times.headWeightPass : 0;
  }
  return part;
}

void Evaluator::evaluate(const Candidate &c, FastVerdict &verdict, double stepBound) {
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
  const ScheduleHolds &holds = getScheduleHolds(c);
  if (!holds.valid) {
    verdict.rejectedBy = "schedule";
    return;
  }

  bool vShape = c.pp > 1 && isVShape(c.schedule);
  const std::vector<StageShape> &stageShapes = *holds.shapes;
  StepEntry &entry = getStepEntry(c);
  if (!entry.times)
    entry.times = &getUnitTimes(c);
  assert(entry.times == &getUnitTimes(c) && "a step index names another work layout's entry");
  const UnitTimes &times = *entry.times;
  cost::StageStates &states = candidateStates;
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

  // Memory (Analyzer::stageStates): the stage with the highest device peak, the first on ties.
  // cost::getStageMemory sums a part that the placement decides (model states, gathered and
  // unreduced buffers) and one that the work layout decides (each micro-batch in flight's
  // activations and loss buffers, the recomputed layer); each part is evaluated once and the
  // schedule's micro-batches in flight put in.
  const StatesPart &placed = getStatesPart(states, stageShapes);
  if (!entry.activations)
    entry.activations = &getActivationPart(times, stageShapes);
  assert(entry.activations == &getActivationPart(times, stageShapes) &&
         "a step index names another activation part");
  const ActivationPart &activations = *entry.activations;
  double peak = -1, hostPeak = 0;
  const double *perDeferred = cost::keepsGraphForWeightPass(c.schedule)
                                  ? activations.perDeferredGraph
                                  : activations.perDeferred;
  for (size_t i = 0; i < stageShapes.size(); ++i) {
    // Where the deferred weight passes hold nothing beyond their micro-batches' activations (no
    // recomputation, no head), the fullest peak is the count in flight, which needs no peaks.
    ArrayRef<cost::HeldMicrobatches> peaks;
    if (perDeferred[i] > 0 || activations.perHead[i] > 0)
      peaks = holds.peaks[i];
    verdict.deferredExtra |= !peaks.empty() && perDeferred[i] > 0;
    double device =
        placed.device[i] + activations.fixed[i] +
        cost::getHeldActivationBytes(peaks, holds.inFlight[i], activations.perMicrobatch[i],
                                     perDeferred[i], activations.perHead[i]) +
        holds.lossInFlight[i] * activations.perLoss[i];
    if (device > peak) {
      peak = device;
      hostPeak = placed.host[i];
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
  // The step is at least m times each stage's compute per micro-batch (the slowest stage's
  // m·compute plus what it exposes, plus a bubble that is never negative): a candidate whose
  // bound is above `stepBound` is not timed. The margin keeps rounding from deciding a tie.
  if (stepBound < std::numeric_limits<double>::infinity()) {
    std::optional<cost::PassKind> recomputePass = cost::getRecomputePass(c.activations);
    double slowest = 0;
    for (const StageShape &shape : stageShapes) {
      double compute = 0;
      for (const UnitGroup &group : shape.groups) {
        auto [forward, backward] = passSeconds(times, group.kind, recomputePass);
        compute += static_cast<double>(group.count) * (forward + backward);
      }
      slowest = std::max(slowest, compute);
    }
    double lower = static_cast<double>(c.microbatches) * slowest;
    if (lower > stepBound * (1 + 1e-9)) {
      verdict.timed = false;
      verdict.stepSeconds = lower;
      return;
    }
  }

  // Time (Analyzer::analyze): per stage class, per micro-batch compute, overlapped and critical
  // communication, then the once-per-step reductions, the optimizer and the pipeline bubble.
  // Candidates that differ from the previous one only in the schedule have the same stages
  // but for their pipeline sends (the number of chunks) where the stage layout is the same
  // (1f1b, zero_bubble and interleaved; zbv and dualpipev): the stages are timed once.
  auto timeKey = std::make_tuple(
      std::make_tuple(c.tp, c.pp, c.dpNode, c.dpLocal, c.cp, static_cast<int>(c.context)),
      std::make_tuple(static_cast<int>(c.params), static_cast<int>(c.grads),
                      static_cast<int>(c.optimizer), c.fp8Gather, static_cast<int>(c.gradReduce)),
      std::make_tuple(static_cast<int>(c.activations) * 2 + static_cast<int>(c.spInputs),
                      c.sequenceParallel,
                      static_cast<int>(c.asyncTp) * 4 + static_cast<int>(c.dpOverlap), c.microBatch,
                      c.microbatches, vShape, c.edgeLayers));
  if (!hasTimes || timeKey != lastTimeKey) {
    timeStages(c, g, states, stageShapes);
    hasTimes = true;
    lastTimeKey = timeKey;
  }
  // The stages with this candidate's pipeline sends (their count depends on the chunks).
  // Each class's micro-batch with how many stages have it: the middle class's worst stage once
  // and the other middle stages at their mean sends.
  double m = static_cast<double>(c.microbatches);
  double slowestStage = 0;
  cost::StageMicrobatch microbatches[4];
  size_t numMicrobatches = 0;
  for (size_t i = 0; i < stageShapes.size(); ++i) {
    const StageShape &shape = stageShapes[i];
    const StageTimes &stage = lastStages[i];
    double exposedPerMicrobatch = static_cast<double>(shape.intraSends) * lastSendIntra +
                                  static_cast<double>(shape.interSends) * lastSendInter +
                                  stage.critical + stage.passes;
    double exposed = m * exposedPerMicrobatch + stage.step;
    slowestStage = std::max(slowestStage, m * stage.compute + exposed + stage.optimizer);
    microbatches[numMicrobatches++] = {
        {stage.forward, stage.backward, stage.weight, exposedPerMicrobatch}, 1};
    if (shape.count > 1) {
      double others = static_cast<double>(shape.count - 1);
      double sends = (static_cast<double>(shape.sumIntraSends - shape.intraSends) * lastSendIntra +
                      static_cast<double>(shape.sumInterSends - shape.interSends) * lastSendInter) /
                     others;
      microbatches[numMicrobatches++] = {
          {stage.forward, stage.backward, stage.weight, sends + stage.critical + stage.passes},
          shape.count - 1};
    }
  }
  verdict.stepSeconds =
      slowestStage + cost::getBubbleSeconds(c.schedule, c.microbatches, c.chunks,
                                            ArrayRef(microbatches, numMicrobatches), nullptr,
                                            c.group);
}

void Evaluator::timeStages(const Candidate &c, const Geometry &g, const cost::StageStates &states,
                           const std::vector<StageShape> &stageShapes) {
  unsigned paramAxes = paramMask(c.params) & g.present;
  unsigned gradAxes = gradMask(c.grads) & g.present;
  unsigned optimizerAxes = optimizerMask(c.optimizer) & g.present;
  const UnitTimes &times = getUnitTimes(c);
  const UnitTraffic &traffic = getUnitTraffic(c);
  bool regather = regathersFor(model, c);
  int64_t paramShard = states.paramShard, gradShard = states.gradShard,
          optimizerShard = states.optimizerShard;
  bool onHostParams = states.paramsOnHost, onHostOptimizer = states.optimizerOnHost;
  bool gradsOnHost = states.gradsOnHost, keep = states.keepAfterForward;
  double pBytes = paramBytes;
  plan::DType quantizedGatherType = plan::getParamGatherType(
      paramType, c.fp8Gather, c.precision == ir::Precision::MixedFP8 && c.fp8Params, c.fp8Scaling);
  // The training metrics' synchronization over every rank at the step's end (Analysis).
  double metricSync = costModel.getTrainMetricSyncSeconds(
      trainMetrics, {c.pp * c.getDataDegree() * c.ep * c.tp, cluster.devicesPerNode});
  double sendIntra = 0, sendInter = 0;
  if (c.pp > 1) {
    int64_t elements = c.microBatch * model.transformer.seq / c.cp * model.transformer.hidden;
    if (c.sequenceParallel)
      elements /= c.tp;
    double sendBytes = static_cast<double>(elements) *
                       cost::getStreamBytes(precision, c.fp32Params, paramMask(c.params) != 0);
    sendIntra = costModel.getPointToPointSeconds(sendBytes, false);
    sendInter = costModel.getPointToPointSeconds(sendBytes, true);
  }
  lastSendIntra = sendIntra;
  lastSendInter = sendInter;
  // The step's sums as Lowering writes them: reduce-scattered over the axes that shard only the
  // optimizer, unless `grad_reduce = all_reduce` all-reduces them with the others.
  unsigned shardAxes = optimizerAxes & ~gradAxes;
  unsigned scatterAxes = c.gradReduce == ir::GradReduce::AllReduce ? 0 : shardAxes;
  unsigned reduceAxes = g.present & ~gradAxes & ~scatterAxes;
  unsigned syncAxes = optimizerAxes & ~paramAxes;
  int64_t scatterDegree = degree(g, scatterAxes), shardDegree = degree(g, shardAxes);
  bool hostStepTransfer = onHostOptimizer != onHostParams;
  std::optional<cost::PassKind> recomputePass = cost::getRecomputePass(c.activations);
  bool sp = c.sequenceParallel && c.tp > 1;
  auto key = std::make_tuple(c.tp, c.dpNode, c.dpLocal, c.cp, static_cast<int>(c.params),
                             static_cast<int>(c.grads), static_cast<int>(c.optimizer), c.fp8Gather,
                             sp, static_cast<int>(c.gradReduce));
  if (!hasPlacement || key != placementKey) {
    placement = PlacementTimes();
    placementKey = key;
    hasPlacement = true;
  }

  cost::PassUnit forwardPass[3], backwardPass[3], stepPass[3], nextForwardPass[3];
  size_t shapeIndex = 0;
  for (const StageShape &shape : stageShapes) {
    double forwardCompute = 0, backwardCompute = 0, weightCompute = 0, critical = 0,
           stepExposed = 0, optimizer = 0;
    size_t numGroups = shape.groups.size();
    assert(numGroups <= 3 && "a stage holds the embedding, layers and the head at most");
    for (size_t index = 0; index < numGroups; ++index) {
      const UnitGroup &group = shape.groups[index];
      // The backward pass visits the groups in reverse order.
      cost::PassUnit &forwardUnit = forwardPass[index];
      cost::PassUnit &backwardUnit = backwardPass[numGroups - 1 - index];
      cost::PassUnit &stepUnit = stepPass[numGroups - 1 - index];
      cost::PassUnit &nextForwardUnit = nextForwardPass[index];
      double count = static_cast<double>(group.count);
      int kind = unitIndex(group.kind);
      bool recomputes = group.kind == cost::UnitKind::Layer && recomputePass;
      auto [forward, backward] = passSeconds(times, group.kind, recomputePass);
      forwardUnit = cost::PassUnit();
      forwardUnit.compute = forward;
      forwardUnit.count = group.count;
      backwardUnit = cost::PassUnit();
      backwardUnit.compute = backward;
      backwardUnit.count = group.count;
      forwardCompute += count * forward;
      backwardCompute += count * backward;
      weightCompute += count * times.weight[kind];
      // Tensor-parallel and context-parallel traffic inside the unit; a fully recomputed layer
      // repeats its forward's in the backward.
      // Which of them async_tp runs beside products (Analyzer::isAsyncTensor): those of a
      // forward computation (pass 0, or 2 for recompute(op)), or the backward's (pass 1) input-
      // gradient reductions apart from its other collectives.
      double unitCritical = 0;
      auto addPass = [&](int pass, cost::PassUnit &unit) {
        unit.beside += traffic.ring[kind][pass];
        unitCritical += traffic.context[kind][pass];
        bool forwardComputation = pass != 1;
        double reductions = forwardComputation ? 0 : traffic.inputGradient[kind];
        double regathers = forwardComputation ? 0 : traffic.regather[kind];
        double others = traffic.tensor[kind][pass] - reductions - regathers;
        unit.tensorBeside += regathers;
        (cost::overlapsTensorTraffic(c.asyncTp, forwardComputation, false) ? unit.tensorBeside
                                                                           : unitCritical) +=
            others;
        (cost::overlapsTensorTraffic(c.asyncTp, forwardComputation, true) ? unit.tensorBeside
                                                                          : unitCritical) +=
            reductions;
      };
      // The products beside which they run (Analyzer::slotSeconds): every product of a pass
      // whose collectives async_tp overlaps, or the backward's column-parallel weight gradients
      // (under `wgrad`) and input gradients (beside the second gathers).
      auto addSlots = [&](cost::PassKind pass, cost::PassUnit &unit) {
        bool backward = pass == cost::PassKind::Backward;
        bool async = cost::overlapsTensorTraffic(c.asyncTp, !backward, backward);
        bool weights = c.asyncTp == ir::AsyncTensorParallel::WeightGradient;
        if (async && !weights) {
          const cost::TensorSlotSeconds &slots = times.slots[kind][static_cast<int>(pass)];
          for (size_t s = 0; s < slots.size(); ++s)
            unit.slots[s] += slots[s];
          return;
        }
        if (!backward)
          return;
        for (size_t s = 0; s < unit.slots.size(); ++s)
          unit.slots[s] += (weights ? times.weightSlots[kind][s] : 0) +
                           (regather ? times.inputSlots[kind][s] : 0);
      };
      addPass(0, forwardUnit);
      addSlots(cost::PassKind::Forward, forwardUnit);
      if (recomputes) {
        if (*recomputePass == cost::PassKind::RecomputeFull)
          addPass(0, backwardUnit);
        else if (*recomputePass == cost::PassKind::RecomputeOps)
          addPass(2, backwardUnit);
        else if (*recomputePass == cost::PassKind::RecomputeAttention)
          addPass(3, backwardUnit);
        addSlots(*recomputePass, backwardUnit);
      }
      addPass(1, backwardUnit);
      addSlots(cost::PassKind::Backward, backwardUnit);
      // The vocabulary-parallel cross-entropy's all-gather (Lowering).
      if (c.tp > 1 && group.kind == cost::UnitKind::Head)
        (cost::overlapsTensorTraffic(c.asyncTp, true, false) ? forwardUnit.tensorBeside
                                                             : unitCritical) += traffic.headGather;
      critical += count * unitCritical;
      if (!placement.known[kind] || placement.params[kind] != group.params) {
        // Once per (mesh, placement) and kind of unit.
        placement.known[kind] = true;
        placement.params[kind] = group.params;
        cost::GroupAxis tensorAxis{1, c.tp};
        cost::GroupShape tensorGroup =
            cost::getGroupShape(ArrayRef(&tensorAxis, 1), cluster.devicesPerNode);
        cost::GroupShape gatherGroup = groupOf(g, paramAxes), gradGroup = groupOf(g, gradAxes);
        cost::GroupShape scatterGroup = groupOf(g, scatterAxes),
                         reduceGroup = groupOf(g, reduceAxes), syncGroup = groupOf(g, syncAxes);
        double unitParams = static_cast<double>(group.params);
        double gatherBytes =
            plan::getSize(plan::getUnitGatherType(quantizedGatherType, paramType, group.kind));
        ir::StateBytes unitBytes = cost::getUnitStateBytes(bytes, group.kind);
        double hostCritical = 0;
        if (onHostParams)
          hostCritical +=
              2 * hostTransfer(static_cast<double>(ceilDiv(group.params, paramShard)) * pBytes);
        if (gradsOnHost)
          hostCritical +=
              hostTransfer(static_cast<double>(ceilDiv(group.params, gradShard)) * bytes.grads);
        placement.critical[kind] = hostCritical;
        if (paramAxes) {
          placement.gather[kind] =
              collective(plan::OpKind::AllGather, gatherGroup, unitParams * gatherBytes);
          placement.gatherCopy[kind] =
              copiesGathers ? costModel.getGatherCopySeconds(unitParams * gatherBytes) : 0;
        }
        double reduce = 0;
        if (sp && group.sequenceParallelParams > 0)
          reduce += collective(plan::OpKind::AllReduce, tensorGroup,
                               static_cast<double>(group.sequenceParallelParams) * bytes.grads);
        if (gradAxes)
          reduce += collective(plan::OpKind::ReduceScatter, gradGroup, unitParams * bytes.grads);
        placement.backwardReduce[kind] = reduce;
        double stepReduce = 0, unitStepExposed = 0;
        int64_t gradElements = ceilDiv(group.params, gradShard);
        if (scatterAxes) {
          stepReduce += collective(plan::OpKind::ReduceScatter, scatterGroup,
                                   static_cast<double>(gradElements) * bytes.grads);
          gradElements = ceilDiv(gradElements, scatterDegree);
        }
        if (reduceAxes) {
          stepReduce += collective(plan::OpKind::AllReduce, reduceGroup,
                                   static_cast<double>(gradElements) * bytes.grads);
          if (!scatterAxes && shardAxes)
            gradElements = ceilDiv(gradElements, shardDegree);
        }
        placement.stepReduce[kind] = stepReduce;
        if (onHostOptimizer && !gradAxes)
          unitStepExposed += hostTransfer(static_cast<double>(gradElements) * bytes.grads);
        // Under params = fp32, the stored gradients' sum for one micro-batch after the first
        // (the time over two micro-batches: one addition).
        placement.accumulation[kind] =
            c.fp32Params && !gradsOnHost
                ? costModel.getGradientAccumulationSeconds(
                      static_cast<double>(ceilDiv(group.params, gradShard)), 2)
                : 0;
        double owned = static_cast<double>(ceilDiv(group.params, optimizerShard));
        placement.optimizer[kind] = onHostOptimizer
                                        ? costModel.getHostOptimizerSeconds(owned, unitBytes)
                                        : costModel.getOptimizerSeconds(owned, unitBytes);
        if (hostStepTransfer)
          unitStepExposed += hostTransfer(owned * pBytes);
        if (syncAxes) {
          double synced = static_cast<double>(ceilDiv(group.params, paramShard)) * gatherBytes;
          placement.stepGather[kind] = collective(plan::OpKind::AllGather, syncGroup, synced);
          if (copiesGathers)
            unitStepExposed += costModel.getGatherCopySeconds(synced);
        }
        placement.stepExposed[kind] = unitStepExposed;
      }
      critical += count * placement.critical[kind];
      if (paramAxes) {
        double gather = placement.gather[kind], copy = placement.gatherCopy[kind];
        forwardUnit.gather = gather;
        forwardUnit.compute += copy;
        forwardCompute += count * copy;
        // Tied embeddings on one stage: the head's backward gathers the embedding again
        // (Lowering), before the head's compute; the embedding's own backward does not.
        bool tiedEmbedding = shape.tiedEmbedParams > 0 && group.kind == cost::UnitKind::Embedding;
        bool tiedHead = shape.tiedEmbedParams > 0 && group.kind == cost::UnitKind::Head;
        double backwardCopy = 0;
        if (!keep && !tiedEmbedding) {
          backwardUnit.gather += gather;
          backwardCopy += copy;
        }
        if (!keep && tiedHead) {
          int embedding = unitIndex(cost::UnitKind::Embedding);
          backwardUnit.gather += placement.gather[embedding];
          backwardCopy += placement.gatherCopy[embedding];
        }
        backwardUnit.compute += backwardCopy;
        backwardCompute += count * backwardCopy;
      }
      // The step's data-parallel collectives as `dp_overlap` runs them (Analyzer::analyze).
      bool reduceBeside = c.dpOverlap != ir::DataParallelOverlap::None;
      bool gatherBeside = c.dpOverlap == ir::DataParallelOverlap::All;
      stepUnit =
          cost::getStepPassUnit(backwardUnit, 0, reduceBeside ? placement.stepReduce[kind] : 0);
      if (gatherBeside)
        nextForwardUnit = cost::getStepPassUnit(forwardUnit, placement.stepGather[kind], 0);
      backwardUnit.reduce = placement.backwardReduce[kind];
      stepExposed +=
          count * (placement.stepExposed[kind] + (reduceBeside ? 0 : placement.stepReduce[kind]) +
                   (gatherBeside ? 0 : placement.stepGather[kind]));
      optimizer += count * (placement.optimizer[kind] +
                            std::max(0.0, static_cast<double>(c.microbatches) - 1) *
                                placement.accumulation[kind]);
    }
    // The word embedding's gradient all-reduced with its copy's stage, after the batch-axis
    // reductions (Lowering; Analyzer::analyze exposes it).
    if (shape.embeddingCopy > 0)
      stepExposed +=
          collective(plan::OpKind::AllReduce, shape.pair,
                     static_cast<double>(ceilDiv(shape.embeddingCopy, gradShard)) * bytes.grads);
    // NVFP4 parameters alone: the layers' blocks' amaxes all-reduced before their all-gather
    // (Lowering; Analyzer::analyze exposes it).
    if (syncAxes && quantizedGatherType == plan::DType::FP4) {
      int64_t amaxes = 0;
      for (const UnitGroup &group : shape.groups)
        if (cost::quantizesParams(group.kind))
          amaxes += group.count * plan::getNvfp4AmaxElements(group.params);
      if (amaxes > 0)
        stepExposed += collective(plan::OpKind::AllReduce, groupOf(g, syncAxes),
                                  static_cast<double>(amaxes) * plan::getSize(plan::DType::FP32));
    }
    StageTimes &stage = lastStages[shapeIndex++];
    stage.forward = forwardCompute;
    stage.backward = backwardCompute;
    stage.weight = weightCompute;
    stage.compute = forwardCompute + backwardCompute;
    stage.critical = critical;
    stage.passes = cost::getPassExposedSeconds(ArrayRef(forwardPass, numGroups)) +
                   cost::getPassExposedSeconds(ArrayRef(backwardPass, numGroups));
    stage.step =
        cost::getPassExposedSeconds(ArrayRef(stepPass, numGroups)) + stepExposed + metricSync;
    if (c.dpOverlap == ir::DataParallelOverlap::All)
      stage.step += cost::getPassExposedSeconds(ArrayRef(nextForwardPass, numGroups));
    stage.optimizer = optimizer;
  }
}

/// True when the fast path can handle the run's model: a transformer of identical layers (the
/// fast path's units are the embedding, identical layers and the head; models whose layers
/// differ are searched exactly, searchesExactly).
bool isSearchable(const ir::Run &run) {
  return run.model->kind == ir::ModelKind::Transformer && !searchesExactly(*run.model) &&
         run.model->getNumLayers() > 0 && run.globalBatch > 0;
}

/// The precisions a search explores, each with the `gather = fp8` settings it tries: the run's
/// own (with its setting) when `requested` is empty; mixed(fp8) with both otherwise.
struct PrecisionVariant {
  ir::Precision precision;
  bool plainGather, fp8Gather;
  /// The run's `grads = fp32` and `params = fp32`, kept at every mixed precision.
  bool fp32Grads, fp32Params;
  /// The run's `saved = fp8` and `scaling`, kept at mixed(fp8); its `attention = fp8`, kept at
  /// mixed(fp8) and mixed(fp4).
  bool fp8Saved;
  ir::Fp8Scaling fp8Scaling;
  bool fp8Attention;
  /// The run's `params = fp8`, kept at mixed(fp8), and `params = fp4`, kept at mixed(fp4): the
  /// parameters are then never offloaded, under MXFP8 and NVFP4 never sharded, and under one
  /// scale per tensor always gathered as FP8 (the verifier's rule `precision`).
  bool fp8Params = false;
  /// Whether the parameters stay whole on the device: MXFP8 or NVFP4 parameters alone.
  bool keepsParamsWhole() const { return fp8Params && ir::isBlockScaled(fp8Scaling); }
  /// Whether every candidate gathers as FP8, even one that gathers nothing: FP8 parameters of one
  /// scale per tensor.
  bool gathersFp8Always() const { return fp8Params && fp8Gather; }
  /// Writes the variant's precision fields into a candidate.
  void applyTo(Candidate &c) const {
    c.precision = precision;
    c.fp32Grads = fp32Grads;
    c.fp32Params = fp32Params;
    c.fp8Params = fp8Params;
    c.fp8Saved = fp8Saved;
    c.fp8Scaling = fp8Scaling;
    c.fp8Attention = fp8Attention;
  }
};
std::vector<PrecisionVariant> precisionVariants(const ir::Run &run,
                                                const std::vector<ir::Precision> &requested,
                                                bool fp4 = false) {
  std::vector<PrecisionVariant> result;
  if (requested.empty() && !fp4) {
    result.push_back({run.precision, !run.fp8Gather, run.fp8Gather, run.fp32Grads, run.fp32Params,
                      run.fp8Saved, run.fp8Scaling, run.fp8Attention, run.fp8Params});
    return result;
  }
  for (ir::Precision precision : requested) {
    bool fp8 = precision == ir::Precision::MixedFP8;
    bool mixed = precision != ir::Precision::FP32;
    // `--precision fp8` from a mixed(fp4) run is mixed(fp8) with one scale per tensor; MXFP8
    // keeps its scales out of FP8 all-gathers (the verifier's rule `precision`).
    bool fromFp4 = run.fp8Scaling == ir::Fp8Scaling::Nvfp4;
    ir::Fp8Scaling scaling = fp8 && !fromFp4 ? run.fp8Scaling : ir::Fp8Scaling::Tensor;
    bool mx = fp8 && ir::isBlockScaled(scaling);
    // FP8 parameters of one scale per tensor are all-gathered as FP8 (the verifier's rule
    // `precision`): no plain gathers beside them.
    bool fp8Params = run.fp8Params && fp8 && !fromFp4;
    result.push_back({precision, mx || !fp8Params, fp8 && !mx, run.fp32Grads && mixed,
                      run.fp32Params && mixed, run.fp8Saved && fp8 && !fromFp4, scaling,
                      run.fp8Attention && fp8, fp8Params});
  }
  // `--precision fp4`: NVFP4 keeps its inputs as NVFP4 and gathers in the parameters' type, or
  // as packed NVFP4 values where a mixed(fp4) run keeps NVFP4 parameters alone.
  if (fp4)
    result.push_back({ir::Precision::MixedFP8, true, false, run.fp32Grads, run.fp32Params, true,
                      ir::Fp8Scaling::Nvfp4, run.fp8Attention,
                      run.fp8Params && run.fp8Scaling == ir::Fp8Scaling::Nvfp4});
  return result;
}

/// The activation modes explored by default: keep, recompute(selective) and recompute, and the
/// run's own recompute(op) where it uses it and it applies to the model; under `kernels = eager`
/// only those placec models eager kernels for (cost::getEagerObstacle).
std::vector<ir::ActivationMode> getDefaultActivationModes(const ir::Run &run) {
  std::vector<ir::ActivationMode> candidates = {ir::ActivationMode::Keep,
                                                ir::ActivationMode::RecomputeSelective,
                                                ir::ActivationMode::RecomputeFull};
  if (run.strategy && run.strategy->activationMode == ir::ActivationMode::RecomputeOps &&
      cost::getOpRecomputeObstacle(*run.model).empty())
    candidates.push_back(ir::ActivationMode::RecomputeOps);
  std::vector<ir::ActivationMode> modes;
  for (ir::ActivationMode mode : candidates)
    if (run.kernels == ir::KernelMode::Fused ||
        cost::getEagerObstacle(*run.model, mode, run.precision).empty())
      modes.push_back(mode);
  return modes;
}

/// The ways attention may exchange keys and values over a context axis of cp devices beside tp
/// tensor-parallel ones: those `allowed` (SearchOptions::contextMethods; nullopt: all) where their
/// divisibility holds (rule `divisibility`, docs/rules.md): the ring and the all-gather split each
/// sequence into 2·cp load-balanced chunks, the all-to-all (Ulysses) splits the heads and the
/// key/value heads it exchanges over tp·cp, and PyTorch's context parallelism (`context_merge =
/// eager`, the verifier's rule `placement`) has no all-to-all. With cp = 1 only `ring`, which then
/// means nothing.
std::vector<ir::ContextMethod>
getContextMethods(const ir::Run &run, int64_t tp, int64_t cp,
                  const std::optional<std::vector<ir::ContextMethod>> &allowed) {
  const ir::TransformerConfig &config = run.model->transformer;
  if (cp == 1)
    return {ir::ContextMethod::Ring};
  // The verifier's rule `placement`: no context parallelism under ALiBi, and only Ulysses's
  // all-to-all under a sliding window; its rule `precision`: none with FP8 attention (whose
  // context-parallel exchanges placec does not count; the run's, so the variants a search
  // explores without it keep this too).
  if (config.positions == ir::PositionKind::Alibi || run.fp8Attention)
    return {};
  std::vector<ir::ContextMethod> methods;
  auto add = [&](ir::ContextMethod method) {
    if (!allowed || llvm::is_contained(*allowed, method))
      methods.push_back(method);
  };
  if (!config.isWindowed() && config.seq % (2 * cp) == 0) {
    add(ir::ContextMethod::Ring);
    add(ir::ContextMethod::AllGather);
  }
  // The key/value heads Ulysses's all-to-all splits: `heads` where they are repeated before the
  // attention (cost::getAttentionKvHeads).
  if (run.contextMerge == ir::ContextMerge::Fused && config.heads % (tp * cp) == 0 &&
      cost::getAttentionKvHeads(config, run.kernels) % (tp * cp) == 0 && config.seq % cp == 0)
    add(ir::ContextMethod::AllToAll);
  return methods;
}

/// Whether `async_tp = value` needs sequence parallelism (Verify's rule `async_tp`).
bool needsSequenceParallelism(ir::AsyncTensorParallel value) {
  return value == ir::AsyncTensorParallel::All || value == ir::AsyncTensorParallel::Forward;
}

/// Calls `body(candidate, innerCount)` for each (precision, mesh, placement) group, and
/// `inner(candidate)` for each candidate of a group, unless `body` returns false (the group is
/// skipped). `body` also learns whether the group has V-shaped schedules.
template <typename GroupFn, typename CandidateFn>
void enumerate(const ir::Run &run, const ir::Cluster &cluster,
               const std::vector<PrecisionVariant> &precisions,
               const std::vector<ir::Schedule> &schedules,
               const std::vector<ir::ActivationMode> &activations,
               const std::vector<ir::AsyncTensorParallel> &asyncTp,
               ir::SequenceParallelInputs spInputs, ir::DataParallelOverlap dpOverlap,
               const std::optional<std::vector<ir::ContextMethod>> &contextMethods, GroupFn body,
               CandidateFn inner, uint64_t *meshCount = nullptr) {
  // The schedules explored: the requested ones, or every one but gpipe.
  auto explores = [&](ir::Schedule schedule) {
    return schedules.empty()
               ? schedule != ir::Schedule::GPipe
               : std::find(schedules.begin(), schedules.end(), schedule) != schedules.end();
  };
  const ir::Model &model = *run.model;
  const ir::TransformerConfig &config = model.transformer;
  int64_t devices = cluster.getNumDevices();
  int64_t layers = model.getNumLayers();
  const std::vector<ir::ActivationMode> exploredModes =
      activations.empty() ? getDefaultActivationModes(run) : activations;
  const std::vector<ir::AsyncTensorParallel> exploredAsync =
      asyncTp.empty() ? std::vector<ir::AsyncTensorParallel>{ir::AsyncTensorParallel::Off,
                                                             ir::AsyncTensorParallel::All}
                      : asyncTp;
  int64_t globalBatch = run.globalBatch;
  int64_t kvHeads = config.getKvHeads();
  bool host = cluster.hostBandwidth.has_value() && *cluster.hostBandwidth > 0;
  for (const PrecisionVariant &variant : precisions)
    for (int64_t tp : divisorsOf(cluster.devicesPerNode)) {
      if (devices % tp || config.heads % tp || kvHeads % tp || config.hidden % tp ||
          config.ffn % tp)
        continue;
      for (int64_t pp : divisorsOf(devices / tp)) {
        if (pp > layers)
          break;
        // Uneven stages (pp ≥ 3): the first and the last stage one layer short of the others,
        // to make room for the embedding and the output layer (Megatron-LM's first/last
        // pipeline layers; Llama 3's 126 layers on 16 stages of 8, the first and last of 7,
        // Dubey et al. 2024 §3.3.2): when pp divides layers + 2.
        bool evenSplit = layers % pp == 0;
        // Both make room for two more layers: where pp divides layers + 2, the first and the
        // last stage hold (layers + 2)/pp − 1 layers and the others (layers + 2)/pp.
        bool roomForTwo = (layers + 2) % pp == 0;
        int64_t edge = (layers + 2) / pp - 1;
        std::vector<int64_t> edges;
        if (pp >= 3 && roomForTwo && edge >= 1)
          edges.push_back(edge);
        // The embedding and the loss counted as layers of an interleaved split (Megatron-LM's
        // --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split;
        // Llama 3.1 405B's 126 + 2 layers on 8 stages × 8 chunks of 2, or on 16 stages × 8
        // chunks of 1, the embedding and the output layer alone in theirs): the chunks v > 1 for
        // which pp·v divides layers + 2 (rule `divisibility`). Without interleaving the split is
        // the uneven one above.
        std::vector<int64_t> countedChunks;
        if (pp >= 2 && roomForTwo && model.kind == ir::ModelKind::Transformer)
          for (int64_t v : divisorsOf((layers + 2) / pp))
            if (v > 1)
              countedChunks.push_back(v);
        if (!evenSplit && edges.empty() && countedChunks.empty())
          continue;
        for (int64_t cp : divisorsOf(devices / (tp * pp))) {
          int64_t dp = devices / (tp * pp * cp);
          if (globalBatch % dp)
            continue;
          std::vector<ir::ContextMethod> methods = getContextMethods(run, tp, cp, contextMethods);
          if (methods.empty())
            continue;
          // Micro-batch sizes with their schedules (schedule, chunks), each only where its
          // formulas hold (cost::isScheduleValid) and the layers divide by the stages × chunks.
          struct Step {
            int64_t microBatch;
            ir::Schedule schedule;
            int64_t chunks;
            int64_t edge = 0;
            bool counted = false;
            int64_t group = 0;
          };
          std::vector<Step> steps;
          Layouts layouts;
          auto addEdgeLayout = [&layouts](int64_t edgeLayers) {
            if (std::find(layouts.edges.begin(), layouts.edges.end(), edgeLayers) ==
                layouts.edges.end())
              layouts.edges.push_back(edgeLayers);
          };
          for (int64_t b : divisorsOf(globalBatch / dp)) {
            int64_t m = globalBatch / (b * dp);
            int64_t group = getSearchGroup(pp, m);
            // Without a pipeline the schedule is moot: one candidate, 1f1b.
            if (pp == 1) {
              steps.push_back({b, ir::Schedule::OneFOneB, 1});
              layouts.even = true;
              continue;
            }
            // Uneven stages with the schedules that take `first` and `last` (1f1b, gpipe,
            // zero_bubble), one layout after the other.
            for (int64_t uneven : edges)
              for (ir::Schedule schedule :
                   {ir::Schedule::OneFOneB, ir::Schedule::GPipe, ir::Schedule::ZeroBubble})
                if (explores(schedule) && cost::isScheduleValid(schedule, pp, m, 1)) {
                  steps.push_back({b, schedule, 1, uneven});
                  addEdgeLayout(uneven);
                }
            // The counted split's stages are the uneven ones: the first and the last hold
            // `edge` layers over their chunks.
            if (explores(ir::Schedule::Interleaved))
              for (int64_t v : countedChunks)
                if (cost::isScheduleValid(ir::Schedule::Interleaved, pp, m, v, nullptr, group)) {
                  steps.push_back({b, ir::Schedule::Interleaved, v, edge, true, group});
                  addEdgeLayout(edge);
                }
            if (!evenSplit)
              continue;
            // Schedules of one stage layout next to each other: the evaluator reuses the
            // stage times of the previous candidate when only the schedule changed. GPipe is
            // left out unless asked for: its bubble is 1F1B's and it holds all m micro-batches
            // against 1F1B's min(p − stage, m) (cost::getBubbleSeconds,
            // cost::getInFlightMicrobatches), so its 1F1B twin is never slower and never larger.
            for (ir::Schedule schedule :
                 {ir::Schedule::OneFOneB, ir::Schedule::GPipe, ir::Schedule::ZeroBubble})
              if (explores(schedule) && cost::isScheduleValid(schedule, pp, m, 1)) {
                steps.push_back({b, schedule, 1});
                layouts.even = true;
              }
            if (explores(ir::Schedule::Interleaved))
              for (int64_t v : divisorsOf(layers / pp))
                if (v > 1 &&
                    cost::isScheduleValid(ir::Schedule::Interleaved, pp, m, v, nullptr, group)) {
                  steps.push_back({b, ir::Schedule::Interleaved, v, 0, false, group});
                  layouts.even = true;
                }
            if (layers % (2 * pp) == 0)
              for (ir::Schedule v : {ir::Schedule::ZeroBubbleV, ir::Schedule::DualPipeV})
                if (explores(v) && cost::isScheduleValid(v, pp, m, 2)) {
                  steps.push_back({b, v, 2});
                  layouts.vShape = true;
                }
          }
          if (steps.empty())
            continue;
          // Activation modes: each without and with sequence parallelism, and with each
          // explored async_tp setting where tp > 1 (`true` and `forward` need sequence
          // parallelism, the rule `async_tp`).
          struct Mode {
            ir::ActivationMode mode;
            bool sp;
            ir::AsyncTensorParallel async;
          };
          std::vector<Mode> activationModes;
          for (ir::ActivationMode mode : exploredModes) {
            if (tp == 1) {
              activationModes.push_back({mode, false, ir::AsyncTensorParallel::Off});
              continue;
            }
            for (bool sp : {false, true})
              for (ir::AsyncTensorParallel async : exploredAsync)
                if (sp || !needsSequenceParallelism(async))
                  activationModes.push_back({mode, sp, async});
          }
          uint64_t innerCount = activationModes.size() * steps.size();
          // Batch splits: unsplit, or node × local with the local part inside a node (the
          // dp_local groups, of stride cp·tp, within devices_per_node).
          std::vector<int64_t> locals = {1};
          if (cluster.devicesPerNode % (tp * cp) == 0)
            for (int64_t local : divisorsOf(std::gcd(dp, cluster.devicesPerNode / (tp * cp))))
              if (local > 1 && local < dp)
                locals.push_back(local);
          for (ir::ContextMethod method : methods)
            for (int64_t local : locals) {
              if (meshCount)
                ++*meshCount;
              Candidate c;
              variant.applyTo(c);
              c.spInputs = spInputs;
              c.dpOverlap = dpOverlap;
              if (run.strategy)
                c.gradReduce = run.strategy->gradReduce;
              c.tp = tp;
              c.pp = pp;
              c.cp = cp;
              c.context = method;
              c.dpLocal = local;
              c.dpNode = dp / local;
              bool split = c.isSplit();
              bool data = dp * cp > 1;
              std::vector<ParamChoice> params = {ParamChoice::Replicate};
              std::vector<GradChoice> grads = {GradChoice::Replicate};
              std::vector<OptimizerChoice> optimizers = {OptimizerChoice::Replicate};
              if (data) {
                if (!variant.keepsParamsWhole()) {
                  if (split)
                    params.insert(params.end(),
                                  {ParamChoice::GatherInner, ParamChoice::GatherInnerKeep});
                  params.insert(params.end(), {ParamChoice::GatherAll, ParamChoice::GatherAllKeep});
                }
                if (split) {
                  grads.push_back(GradChoice::ShardInner);
                  optimizers.push_back(OptimizerChoice::ShardInner);
                }
                grads.push_back(GradChoice::ShardAll);
                optimizers.push_back(OptimizerChoice::ShardAll);
              }
              if (host) {
                if (!variant.fp8Params) {
                  params.push_back(ParamChoice::Host);
                  if (data)
                    params.push_back(ParamChoice::HostGatherAll);
                }
                optimizers.push_back(OptimizerChoice::HostShardAll);
              }
              for (ParamChoice param : params)
                for (GradChoice grad : grads)
                  for (OptimizerChoice optimizer : optimizers) {
                    // A split mesh whose placements never name the inner sub-axis alone is the
                    // unsplit mesh again (the same groups, the same costs): skipped as a
                    // duplicate.
                    if (split && paramMask(param) != kInner && gradMask(grad) != kInner &&
                        optimizerMask(optimizer) != kInner)
                      continue;
                    c.params = param;
                    c.grads = grad;
                    c.optimizer = optimizer;
                    // FP8 gathers change only the bytes of parameter all-gathers.
                    bool gathers = gathersParams(param, optimizer);
                    bool fp8Only = variant.gathersFp8Always();
                    for (bool fp8Gather : {false, true}) {
                      if (fp8Gather ? !(variant.fp8Gather && (gathers || fp8Only))
                                    : fp8Only || !(variant.plainGather || !gathers))
                        continue;
                      c.fp8Gather = fp8Gather;
                      if (!body(c, innerCount, layouts))
                        continue;
                      for (const Mode &mode : activationModes)
                        for (size_t index = 0; index < steps.size(); ++index) {
                          const Step &step = steps[index];
                          c.stepIndex = static_cast<int32_t>(index);
                          c.activations = mode.mode;
                          c.sequenceParallel = mode.sp;
                          c.asyncTp = mode.async;
                          c.microBatch = step.microBatch;
                          c.microbatches = globalBatch / (step.microBatch * dp);
                          c.schedule = step.schedule;
                          c.chunks = step.chunks;
                          c.group = step.group;
                          c.edgeLayers = step.edge;
                          c.countedSplit = step.counted;
                          inner(c);
                        }
                    }
                  }
            }
        }
      }
    }
}

/// True when two candidates differ at most in their schedule and chunks, on the same stage layout
/// (V-shaped or not, the same first and last stages, the embedding and the loss counted or not).
bool sameLayoutExceptSchedule(const Candidate &x, const Candidate &y) {
  return isVShape(x.schedule) == isVShape(y.schedule) && x.edgeLayers == y.edgeLayers &&
         x.countedSplit == y.countedSplit && x.pp == y.pp && x.dpNode == y.dpNode &&
         x.dpLocal == y.dpLocal && x.cp == y.cp && x.tp == y.tp && x.context == y.context &&
         x.asyncTp == y.asyncTp && x.spInputs == y.spInputs && x.dpOverlap == y.dpOverlap &&
         x.gradReduce == y.gradReduce && x.precision == y.precision && x.fp8Gather == y.fp8Gather &&
         x.fp8Saved == y.fp8Saved && x.fp8Scaling == y.fp8Scaling &&
         x.fp8Attention == y.fp8Attention && x.params == y.params && x.grads == y.grads &&
         x.optimizer == y.optimizer && x.activations == y.activations &&
         x.sequenceParallel == y.sequenceParallel && x.microBatch == y.microBatch &&
         x.microbatches == y.microbatches;
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
  } else if (getBatchDegree() > 1 || (pp == 1 && tp == 1 && cp == 1 && ep == 1)) {
    parts.push_back("dp = " + std::to_string(getBatchDegree()));
  }
  if (ep > 1)
    parts.push_back("ep = " + std::to_string(ep));
  if (cp > 1)
    parts.push_back("cp = " + std::to_string(cp));
  if (tp > 1)
    parts.push_back("tp = " + std::to_string(tp));
  std::string text = "[";
  for (size_t i = 0; i < parts.size(); ++i)
    text += (i ? ", " : "") + parts[i];
  return text + "]";
}

std::string formatAsyncTp(ir::AsyncTensorParallel value) {
  switch (value) {
  case ir::AsyncTensorParallel::Off:
    return std::string();
  case ir::AsyncTensorParallel::All:
    return "async_tp";
  case ir::AsyncTensorParallel::Forward:
  case ir::AsyncTensorParallel::WeightGradient:
    return "async_tp=" + ir::toString(value).str();
  }
  return std::string();
}

std::string Candidate::formatExperts() const {
  if (ep <= 1)
    return "-";
  std::string text = "split";
  if (expertFold || contextFold)
    text = std::string("fold(") + (contextFold ? "cp" : "") +
           (contextFold && expertFold ? ", " : "") + (expertFold ? "tp" : "") + ")";
  if (dispatcher != ir::ExpertDispatcher::AllToAll)
    text += ", " + ir::toString(dispatcher).str();
  return epOverlap ? text + " + ep_overlap" : text;
}

std::string Candidate::formatPrecision() const {
  return ir::spellPrecision(precision, fp8Gather, fp32Grads, fp32Params, fp8Saved, fp8Scaling,
                            fp8Attention, fp8Params);
}

std::string Candidate::describe() const {
  std::string text = formatMesh();
  if (cp > 1)
    text += " context " + ir::toString(context).str() + ",";
  text += " params " + toString(params).str() + ", grads " + toString(grads).str() +
          ", optimizer " + toString(optimizer).str() + ", activations " +
          ir::toString(activations).str() +
          (sequenceParallel ? (spInputs == ir::SequenceParallelInputs::Keep ? "+sp(keep)" : "+sp")
                            : "") +
          (asyncTp != ir::AsyncTensorParallel::Off ? "+" + formatAsyncTp(asyncTp) : "") +
          ", b=" + std::to_string(microBatch) + " m=" + std::to_string(microbatches);
  if (ep > 1)
    text += ", experts " + formatExperts();
  if (expertsReplicated)
    text += cp > 1 && !contextFold ? ", experts replicated over dp and cp"
                                   : ", experts replicated over dp";
  if (pp > 1)
    text += " " + ir::toString(schedule).str() +
            (schedule == ir::Schedule::Interleaved ? "/" + std::to_string(chunks) : "") +
            (group > 0 ? " group=" + std::to_string(group) : "") +
            (countedSplit     ? " embedding_layer+loss_layer"
             : edgeLayers > 0 ? " first=last=" + std::to_string(edgeLayers)
                              : "");
  return text + " " + formatPrecision();
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
                      const std::function<void(const Candidate &)> &callback,
                      const std::vector<ir::Precision> &precisions,
                      const std::vector<ir::AsyncTensorParallel> &asyncTp,
                      ir::SequenceParallelInputs spInputs, ir::DataParallelOverlap dpOverlap) {
  if (!isSearchable(run))
    return;
  enumerate(
      run, cluster, precisionVariants(run, precisions), {}, {}, asyncTp, spInputs, dpOverlap,
      std::nullopt, [](const Candidate &, uint64_t, const Layouts &) { return true; },
      [&](const Candidate &c) { callback(c); });
}

/// A comma-separated list of `choices` spelled as ir::toString spells them, without repeats; on an
/// unknown name returns nullopt and sets `error` to `flag 'name' is not <what>: <hint>`.
template <typename T>
static std::optional<std::vector<T>>
parseChoiceList(StringRef text, std::initializer_list<T> choices, StringRef flag, StringRef what,
                StringRef hint, std::string &error) {
  std::vector<T> result;
  SmallVector<StringRef, 6> names;
  text.split(names, ',');
  for (StringRef name : names) {
    name = name.trim();
    const T *value = llvm::find_if(choices, [&](T choice) { return name == ir::toString(choice); });
    if (value == choices.end()) {
      error = (flag + " '" + name + "' is not " + what + ": " + hint).str();
      return std::nullopt;
    }
    if (!llvm::is_contained(result, *value))
      result.push_back(*value);
  }
  return result;
}

bool searchesExactly(const ir::Model &model) {
  return model.isMoe() ||
         (model.kind == ir::ModelKind::Transformer &&
          (model.transformer.hasFullAttentionLayers() || model.transformer.mtpLayers > 0));
}

std::string getExactSearchReason(const ir::Model &model) {
  if (!searchesExactly(model))
    return std::string();
  return model.isMoe() ? "has routed experts"
         : model.transformer.hasFullAttentionLayers()
             ? "alternates sliding-window and full-attention layers"
             : "has multi-token prediction modules on its last stage";
}

bool isDefaultSearchSchedule(const ir::Model &model, ir::Schedule schedule) {
  if (model.isMoe())
    return schedule == ir::Schedule::OneFOneB || schedule == ir::Schedule::Interleaved;
  return schedule != ir::Schedule::GPipe;
}

std::optional<std::vector<ir::Schedule>> parseSchedules(StringRef text, const ir::Run &run,
                                                        std::string &error) {
  return parseChoiceList(text,
                         {ir::Schedule::OneFOneB, ir::Schedule::GPipe, ir::Schedule::Interleaved,
                          ir::Schedule::ZeroBubble, ir::Schedule::ZeroBubbleV,
                          ir::Schedule::DualPipeV},
                         "--schedules", "a schedule the search explores",
                         "write a comma-separated list of 1f1b, gpipe, interleaved, zero_bubble, "
                         "zbv and dualpipev",
                         error);
}

/// Why a run under `kernels = eager` cannot be searched with activation mode `mode` at
/// `precision`; empty for a fused run or where it can.
static std::string eagerObstacle(const ir::Run &run, ir::ActivationMode mode,
                                 ir::Precision precision) {
  if (run.kernels == ir::KernelMode::Fused)
    return std::string();
  std::string why = cost::getEagerObstacle(*run.model, mode, precision);
  return why.empty() ? why : "run '" + run.name + "' has kernels = eager, and " + why;
}

std::optional<std::vector<ir::ActivationMode>>
parseActivationModes(StringRef text, const ir::Run &run, std::string &error) {
  const ir::Model &model = *run.model;
  std::vector<ir::ActivationMode> result;
  SmallVector<StringRef, 4> names;
  text.split(names, ',');
  for (StringRef name : names) {
    name = name.trim();
    std::optional<ir::ActivationMode> mode =
        llvm::StringSwitch<std::optional<ir::ActivationMode>>(name)
            .Case("keep", ir::ActivationMode::Keep)
            .Case("selective", ir::ActivationMode::RecomputeSelective)
            .Case("full", ir::ActivationMode::RecomputeFull)
            .Case("op", ir::ActivationMode::RecomputeOps)
            .Case("attention", ir::ActivationMode::RecomputeAttention)
            .Default(std::nullopt);
    if (!mode) {
      error = "--activations '" + name.str() +
              "' is not an activation mode: write a comma-separated list of keep, selective, "
              "full, op and attention";
      return std::nullopt;
    }
    if (*mode == ir::ActivationMode::RecomputeAttention && model.transformer.unpad) {
      error = "--activations attention: model '" + model.name +
              "' says unpad = true, and recompute(attention) needs the padded Q, K and V it "
              "stores (rule placement)";
      return std::nullopt;
    }
    if (*mode == ir::ActivationMode::RecomputeOps) {
      std::string why = cost::getOpRecomputeObstacle(model);
      if (!why.empty()) {
        error =
            "--activations op: recompute(op) does not apply to model '" + model.name + "': " + why;
        return std::nullopt;
      }
    }
    if (*mode == ir::ActivationMode::RecomputeOps && searchesExactly(model)) {
      error = "--activations op: model '" + model.name + "' " + getExactSearchReason(model) +
              ", and the search of a model whose layers differ explores keep, selective, "
              "attention and full";
      return std::nullopt;
    }
    if (std::string why = eagerObstacle(run, *mode, run.precision); !why.empty()) {
      error = "--activations " + name.str() + ": " + why;
      return std::nullopt;
    }
    if (std::find(result.begin(), result.end(), *mode) == result.end())
      result.push_back(*mode);
  }
  return result;
}

std::optional<std::vector<ir::AsyncTensorParallel>> parseAsyncTensorParallel(StringRef text,
                                                                             std::string &error) {
  return parseChoiceList(text,
                         {ir::AsyncTensorParallel::Off, ir::AsyncTensorParallel::All,
                          ir::AsyncTensorParallel::Forward,
                          ir::AsyncTensorParallel::WeightGradient},
                         "--async-tp", "an async_tp setting",
                         "write a comma-separated list of false, true, forward and wgrad", error);
}

/// A mixture-of-experts setting's list (parseChoiceList), where `moeOnly` is an error for a model
/// without experts, and why.
template <typename T>
std::optional<std::vector<T>>
parseExpertChoiceList(StringRef text, std::initializer_list<T> choices, T moeOnly, StringRef flag,
                      StringRef what, StringRef hint, const ir::Run &run, StringRef why,
                      std::string &error) {
  std::optional<std::vector<T>> values = parseChoiceList(text, choices, flag, what, hint, error);
  if (values && llvm::is_contained(*values, moeOnly) && !run.model->isMoe()) {
    error = (flag + " " + ir::toString(moeOnly) + ": model '" + run.model->name +
             "' has no experts (" + why + ")")
                .str();
    return std::nullopt;
  }
  return values;
}

std::optional<std::vector<ir::ExpertOverlap>> parseExpertOverlap(StringRef text, const ir::Run &run,
                                                                 std::string &error) {
  return parseExpertChoiceList(
      text, {ir::ExpertOverlap::Off, ir::ExpertOverlap::On}, ir::ExpertOverlap::On, "--ep-overlap",
      "an ep_overlap setting", "write a comma-separated list of false and true", run,
      "ep_overlap overlaps the expert all-to-alls of a mixture of experts", error);
}

std::optional<std::vector<ir::ExpertTensor>> parseExpertTensor(StringRef text, const ir::Run &run,
                                                               std::string &error) {
  return parseExpertChoiceList(
      text, {ir::ExpertTensor::Split, ir::ExpertTensor::Fold}, ir::ExpertTensor::Fold,
      "--expert-tensor", "an expert_tensor setting",
      "write a comma-separated list of split and fold", run,
      "fold puts whole routed experts over the expert and tensor axes", error);
}

std::optional<std::vector<ir::ExpertDispatcher>>
parseDispatchers(StringRef text, const ir::Run &run, std::string &error) {
  std::optional<std::vector<ir::ExpertDispatcher>> values =
      parseChoiceList(text,
                      {ir::ExpertDispatcher::AllToAll, ir::ExpertDispatcher::DeepEP,
                       ir::ExpertDispatcher::HybridEP},
                      "--dispatcher", "a dispatcher",
                      "write a comma-separated list of alltoall, deepep and hybridep", error);
  if (!values)
    return values;
  const ir::Model &model = *run.model;
  for (ir::ExpertDispatcher dispatcher : *values) {
    if (dispatcher == ir::ExpertDispatcher::AllToAll)
      continue;
    std::string name = ir::toString(dispatcher).str();
    if (!model.isMoe()) {
      error = "--dispatcher " + name + ": model '" + model.name + "' has no experts (" + name +
              " dispatches the tokens of a mixture of experts)";
      return std::nullopt;
    }
    if (model.kind == ir::ModelKind::Transformer && model.transformer.moe.capacityFactor) {
      error = "--dispatcher " + name + ": model '" + model.name +
              "' has a capacity factor, and placec times the flex dispatcher's exchanges dropless "
              "(explore alltoall, or drop capacity_factor)";
      return std::nullopt;
    }
  }
  return values;
}

std::optional<std::vector<ir::ExpertTensor>> parseExpertContext(StringRef text, const ir::Run &run,
                                                                std::string &error) {
  return parseExpertChoiceList(
      text, {ir::ExpertTensor::Split, ir::ExpertTensor::Fold}, ir::ExpertTensor::Fold,
      "--expert-context", "an expert_context setting",
      "write a comma-separated list of split and fold", run,
      "fold splits the routed experts over the expert and context axes", error);
}

std::optional<std::vector<ir::ContextMethod>> parseContextMethods(StringRef text,
                                                                  std::string &error) {
  // `none` adds nothing: plans without a context axis are always explored.
  SmallVector<StringRef, 4> names;
  text.split(names, ',');
  std::vector<std::string> methods;
  for (StringRef name : names)
    if (name.trim() != "none")
      methods.push_back(name.str());
  if (methods.empty())
    return std::vector<ir::ContextMethod>();
  std::string listed = llvm::join(methods, ",");
  return parseChoiceList(
      StringRef(listed),
      {ir::ContextMethod::Ring, ir::ContextMethod::AllGather, ir::ContextMethod::AllToAll},
      "--context", "a context-parallel method",
      "write a comma-separated list of none, ring, all_gather and all_to_all", error);
}

std::optional<std::vector<ir::Precision>> parsePrecisions(StringRef text, const ir::Run &run,
                                                          std::string &error, bool *fp4) {
  const ir::Cluster &cluster = *run.cluster;
  std::vector<ir::Precision> result;
  SmallVector<StringRef, 4> names;
  text.split(names, ',');
  if (fp4)
    *fp4 = false;
  for (StringRef name : names) {
    name = name.trim();
    // NVFP4 products (rule `precision`): FP4 tensor cores, on Blackwell.
    if (name == "fp4" && fp4) {
      if (cluster.getLowPrecisionPeak(ir::Fp8Scaling::Nvfp4) <= 0 || !cluster.device ||
          cluster.device->family != ir::DeviceFamily::Blackwell) {
        error = "--precision fp4: cluster '" + cluster.name + "' has no FP4 tensor cores" +
                (cluster.device ? " (" + std::string(cluster.device->name) + ")"
                                : std::string(": give it peak_fp4 and a Blackwell device"));
        return std::nullopt;
      }
      if (std::string why = eagerObstacle(run, ir::ActivationMode::Keep, ir::Precision::MixedFP8);
          !why.empty()) {
        error = "--precision fp4: " + why;
        return std::nullopt;
      }
      *fp4 = true;
      continue;
    }
    std::optional<ir::Precision> precision;
    if (name == "bf16")
      precision = ir::Precision::MixedBF16;
    else if (name == "fp16")
      precision = ir::Precision::MixedFP16;
    else if (name == "fp32")
      precision = ir::Precision::FP32;
    else if (name == "fp8")
      precision = ir::Precision::MixedFP8;
    if (!precision) {
      error = "--precision '" + name.str() +
              "' is not a precision: write a comma-separated list of bf16, fp16, fp32, fp8 and "
              "fp4";
      return std::nullopt;
    }
    // Rule `precision`: FP8 products need FP8 tensor cores.
    if (*precision == ir::Precision::MixedFP8 && cluster.peakFp8 <= 0) {
      error = "--precision fp8: cluster '" + cluster.name + "' has no FP8 tensor cores" +
              (cluster.device ? " (" + std::string(cluster.device->name) + ")"
                              : std::string(": give it peak_fp8"));
      return std::nullopt;
    }
    if (std::string why = eagerObstacle(run, ir::ActivationMode::Keep, *precision); !why.empty()) {
      error = "--precision " + name.str() + ": " + why;
      return std::nullopt;
    }
    if (std::find(result.begin(), result.end(), *precision) == result.end())
      result.push_back(*precision);
  }
  return result;
}

FastVerdict evaluateFast(const ir::Run &run, const ir::Cluster &cluster,
                         const Candidate &candidate) {
  Evaluator evaluator(run, cluster, candidate.precision, candidate.fp8Scaling, candidate.fp8Params);
  FastVerdict verdict;
  evaluator.evaluate(candidate, verdict);
  return verdict;
}

std::unique_ptr<ir::Strategy> buildStrategy(const Candidate &c, StringRef name) {
  auto strategy = std::make_unique<ir::Strategy>();
  strategy->name = name.str();
  strategy->hasMesh = true;
  ir::Mesh &mesh = strategy->mesh;
  int outer = -1, inner = -1, context = -1, expert = -1;
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
  } else if (c.getBatchDegree() > 1 || (c.pp == 1 && c.tp == 1 && c.cp == 1 && c.ep == 1)) {
    outer = addAxis("dp", ir::AxisKind::Batch, c.getBatchDegree());
  }
  if (c.ep > 1)
    expert = addAxis("ep", ir::AxisKind::Expert, c.ep);
  if (c.cp > 1)
    context = addAxis("cp", ir::AxisKind::Sequence, c.cp);
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
    for (auto [bit, index] : {std::pair<unsigned, int>{kOuter, outer},
                              {kInner, inner},
                              {kContext, context},
                              {kExpert, expert}})
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
  // ZeRO-1 for the experts: their params and grads replicated over every expert-data-parallel
  // axis (the batch axes, and the context axis unless it is folded into the expert group).
  if (c.expertsReplicated)
    for (ir::State state : {ir::State::Params, ir::State::Grads}) {
      ir::StatePlacement &placement = strategy->getExpertPlacement(state);
      placement.axes.resize(mesh.axes.size());
      for (int index : {outer, inner, c.contextFold ? -1 : context})
        if (index >= 0) {
          placement.axes[index].mode = ir::PlacementMode::Replicated;
          placement.axes[index].isExplicit = true;
        }
    }
  strategy->activationMode = c.activations;
  strategy->sequenceParallel = c.sequenceParallel;
  strategy->asyncTensorParallel = c.asyncTp;
  if (c.sequenceParallel && c.tp > 1)
    strategy->sequenceParallelInputs = c.spInputs;
  strategy->dataParallelOverlap = c.dpOverlap;
  if (writesGradReduce(c))
    strategy->gradReduce = c.gradReduce;
  strategy->expertOverlap = c.epOverlap ? ir::ExpertOverlap::On : ir::ExpertOverlap::Off;
  strategy->expertDispatcher = c.dispatcher;
  strategy->expertTensor = c.expertFold ? ir::ExpertTensor::Fold : ir::ExpertTensor::Split;
  strategy->expertContext = c.contextFold ? ir::ExpertTensor::Fold : ir::ExpertTensor::Split;
  if (c.cp > 1)
    strategy->contextMethod = c.context;
  if (c.pp > 1) {
    ir::Pipeline pipeline;
    pipeline.schedule = c.schedule;
    pipeline.microbatches = c.microbatches;
    pipeline.chunks = c.chunks;
    pipeline.group = c.group;
    if (c.countedSplit)
      pipeline.embeddingLayer = pipeline.lossLayer = true;
    else
      pipeline.firstStageLayers = pipeline.lastStageLayers = c.edgeLayers;
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
  run->precision = c.precision;
  run->fp8Gather = c.fp8Gather;
  run->fp32Grads = c.fp32Grads;
  run->fp32Params = c.fp32Params;
  run->fp8Params = c.fp8Params;
  run->fp8Saved = c.fp8Saved;
  run->fp8Scaling = c.fp8Scaling;
  run->fp8Attention = c.fp8Attention;
  run->optimizer = base.optimizer;
  // No master copy is a choice over 16-bit parameters only (the verifier's rule precision).
  run->optimizerStates = base.optimizerStates;
  if (c.precision == ir::Precision::FP32 || c.fp32Params)
    run->optimizerStates.master = true;
  run->crossEntropy = base.crossEntropy;
  run->trainMetrics = base.trainMetrics;
  run->kernels = base.kernels;
  run->paramGather = base.paramGather;
  run->contextMerge = base.contextMerge;
  run->gradAccumulation = base.gradAccumulation;
  run->microbatchesPerStep = c.microbatches;
  return run;
}

std::string evaluateExact(const ir::Run &base, const ir::Cluster &cluster, const Candidate &c,
                          analysis::RunAnalysis *analysisOut, double stepBound, bool untimedUnfit) {
  ir::Program program;
  program.strategies.push_back(buildStrategy(c, "candidate"));
  program.runs.push_back(buildRun(base, cluster, *program.strategies.back(), c));
  SourceMgr sourceMgr;
  DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  VerifyOptions options;
  options.capacityIsError = true;
  options.suggestCapacityFixes = false;
  options.analysis.stepBound = stepBound;
  options.analysis.untimedUnfit = untimedUnfit;
  std::optional<analysis::RunAnalysis> verified;
  options.onAnalysis = [&](const ir::Run &, analysis::RunAnalysis &analysis) {
    verified = std::move(analysis);
  };
  createVerifyPass(options)->run(program, diags);
  std::string rule;
  for (const Diagnostic &diag : diags.getDiagnostics())
    if (diag.severity == Severity::Error) {
      rule = diag.rule.empty() ? "error" : diag.rule;
      break;
    }
  // A run another rule rejects is not analysed: nothing reads its times or memory.
  if (!rule.empty() && rule != "capacity")
    return rule;
  analysis::RunAnalysis result =
      verified ? std::move(*verified)
               : analysis::analyze(
                     *plan::lowerRun(*program.runs.back(), plan::LowerOptions{/*reasons=*/false}),
                     options.analysis);
  // The capacity rule is defined by the memory analysis; a verifier without it (it is being
  // added) is completed here so that the search never reports a plan that does not fit.
  if (rule.empty() && (!result.memory.fitsDevice || !result.memory.fitsHost))
    rule = "capacity";
  if (analysisOut)
    *analysisOut = std::move(result);
  return rule;
}

namespace {

/// A candidate and its place in the search order: the index of its (precision, mesh, placement)
/// group in `enumerate`'s order, then its index within the group.
struct Ranked {
  Candidate candidate;
  uint64_t order = 0;
};

/// The order of a search's ranking: `isBetter`, ties broken by the search order, so that the
/// best candidates are those of a search on one thread, whatever the number of threads.
bool isRankedBetter(const Ranked &x, const Ranked &y) {
  if (isBetter(x.candidate, y.candidate))
    return true;
  if (isBetter(y.candidate, x.candidate))
    return false;
  return x.order < y.order;
}

/// The smaller footprint of two candidates; ties go to the earlier in the search order.
bool isRankedSmaller(const Ranked &x, const Ranked &y) {
  if (x.candidate.peakBytes != y.candidate.peakBytes)
    return x.candidate.peakBytes < y.candidate.peakBytes;
  return x.order < y.order;
}

/// SearchOptions::refusal's verdicts in one thread: the best candidate refused and why.
struct Refused {
  std::optional<Ranked> best;
  std::string reason;
  /// Asks `options.refusal` of a candidate about to enter the top; true when it is refused.
  bool refuses(const SearchOptions &options, const Ranked &ranked, SearchResult &counts) {
    if (!options.refusal)
      return false;
    std::string why = options.refusal(ranked.candidate);
    if (why.empty())
      return false;
    ++counts.refused;
    ++counts.refusals[why];
    if (!best || isRankedBetter(ranked, *best)) {
      best = ranked;
      reason = std::move(why);
    }
    return true;
  }
  void merge(const Refused &other) {
    if (other.best && (!best || isRankedBetter(*other.best, *best))) {
      best = other.best;
      reason = other.reason;
    }
  }
  void store(SearchResult &result) const {
    if (best) {
      result.bestRefused = best->candidate;
      result.bestRefusal = reason;
    }
  }
};

/// One thread's part of a search: the groups it claimed, its counts, its best candidates (sorted
/// by isRankedBetter, at most `keep`), its smallest footprint and the candidates it refused.
struct SearchShare {
  SearchResult counts;
  std::vector<Ranked> best;
  std::optional<Ranked> smallest;
  Refused refused;
};

/// Adds one thread's counts of a search to the result's.
void addCounts(const SearchResult &share, SearchResult &result) {
  result.spaceSize += share.spaceSize;
  result.accepted += share.accepted;
  result.prunedByLowerBound += share.prunedByLowerBound;
  result.prunedBySchedule += share.prunedBySchedule;
  result.prunedByStep += share.prunedByStep;
  result.prunedByMemoryOrder += share.prunedByMemoryOrder;
  result.refused += share.refused;
  for (const auto &[reason, count] : share.refusals)
    result.refusals[reason] += count;
  for (const auto &[rule, count] : share.rejectedByRule)
    result.rejectedByRule[rule] += count;
}

/// Runs `body(thread)` for each of `threads` threads: inline for one, on a pool for more.
template <typename Body> void runOnThreads(unsigned threads, Body body) {
  if (threads == 1) {
    body(0u);
    return;
  }
  DefaultThreadPool pool(hardware_concurrency(threads));
  for (unsigned thread = 0; thread < threads; ++thread)
    pool.async([&body, thread] { body(thread); });
  pool.wait();
}

} // namespace

/// Models whose layers differ (searchesExactly): a mixture of experts, whose MoE layers differ
/// from the dense ones and whose experts have a placement of their own, a model that alternates
/// sliding-window and full-attention layers, and one with multi-token prediction modules on its
/// last stage. The closed-form fast path models none of them,
/// so every candidate goes through the exact path (the verifier and the analyses of its step
/// plan). The space is smaller: meshes [pp, dp, ep, cp, tp] (tp inside a node, ep dividing the
/// experts, 1 for a dense model, cp with the context methods whose divisibility holds), ZeRO-1, -2
/// or -3 over every batch-like axis (the experts' states sharded over the expert-data-parallel
/// `dp` and `cp` like the dense ones), the three activation modes (or those of `--activations`),
/// micro-batches of 1, 2 or 4 (not a multiple of cp > 1), the pipelines of isDefaultSearchSchedule
/// or those `--schedules` names (the
/// layers split evenly, or, interleaved, the embedding and the loss counted as layers), sequence
/// parallelism with tensor parallelism.
void searchExactly(const ir::Run &run, const ir::Cluster &cluster, const SearchOptions &options,
                   SearchResult &result) {
  const ir::Model &model = *run.model;
  int64_t layers = model.getNumLayers();
  int64_t devices = cluster.getNumDevices();
  std::vector<PrecisionVariant> precisions =
      precisionVariants(run, options.precisions, options.fp4);
  struct Placement {
    ParamChoice params;
    GradChoice grads;
    OptimizerChoice optimizer;
  };
  const Placement placements[] = {
      {ParamChoice::Replicate, GradChoice::Replicate, OptimizerChoice::ShardAll},
      {ParamChoice::Replicate, GradChoice::ShardAll, OptimizerChoice::ShardAll},
      {ParamChoice::GatherAll, GradChoice::ShardAll, OptimizerChoice::ShardAll}};
  // By growing memory, so that a mode over the budget prunes the ones after it (the requested
  // ones in this order; recompute(op) does not apply to MoE layers). recompute(attention), only
  // where asked for, keeps what keep keeps but the attention kernel's softmax statistics (and its
  // output where the projection keeps an FP8 copy), more than recompute(selective)'s recomputed
  // norms and MLP activation drop (cost::getLayerActivationBytes).
  std::vector<ir::ActivationMode> activations;
  for (ir::ActivationMode mode :
       {ir::ActivationMode::RecomputeFull, ir::ActivationMode::RecomputeSelective,
        ir::ActivationMode::RecomputeAttention, ir::ActivationMode::Keep})
    if (options.activations.empty() ? mode != ir::ActivationMode::RecomputeAttention
                                    : llvm::is_contained(options.activations, mode))
      activations.push_back(mode);
  // The async_tp settings (sequence parallelism is on wherever tp > 1): the requested ones, or
  // none by default.
  const std::vector<ir::AsyncTensorParallel> offOnly = {ir::AsyncTensorParallel::Off};
  const std::vector<ir::AsyncTensorParallel> &asyncValues =
      options.asyncTp.empty() ? offOnly : options.asyncTp;
  // The pipeline schedules explored: the requested ones, or isDefaultSearchSchedule's.
  auto explores = [&](ir::Schedule schedule) {
    return options.schedules.empty() ? isDefaultSearchSchedule(model, schedule)
                                     : llvm::is_contained(options.schedules, schedule);
  };
  // A pipeline of the search: its schedule and chunks, the embedding and the loss counted as
  // layers or not (then `edge` holds the first and the last stage's layers).
  struct Pipeline {
    ir::Schedule schedule;
    int64_t chunks;
    bool counted = false;
    int64_t edge = 0;
    bool operator<(const Pipeline &other) const {
      return std::tie(schedule, chunks, counted) <
             std::tie(other.schedule, other.chunks, other.counted);
    }
  };
  // The ep_overlap settings where Megatron-Core's conditions hold (Verify's checkExperts): an
  // expert axis, no pipeline, an interleaved one (its combined 1F1B needs virtual stages) or
  // DualPipeV (which pairs a forward chunk with a backward one), no full recomputation, not fp32.
  const std::vector<ir::ExpertOverlap> overlapOff = {ir::ExpertOverlap::Off};
  const std::vector<ir::ExpertOverlap> &overlapValues =
      options.epOverlap.empty() ? overlapOff : options.epOverlap;
  // The dispatchers explored over expert axes of more than one device: the flag's, or the run's.
  const std::vector<ir::ExpertDispatcher> runDispatcher = {
      run.strategy ? run.strategy->expertDispatcher : ir::ExpertDispatcher::AllToAll};
  const std::vector<ir::ExpertDispatcher> &dispatcherValues =
      options.dispatchers.empty() ? runDispatcher : options.dispatchers;
  const std::vector<ir::ExpertDispatcher> allToAllOnly = {ir::ExpertDispatcher::AllToAll};
  // The expert_tensor settings where `fold` applies (Verify's checkExperts): an expert and a
  // tensor axis (with sequence parallelism, which every candidate with tp > 1 has) whose group
  // divides the experts. Folded experts keep less than split ones (the routed rows' inputs and
  // the router's probabilities of a rank's own tokens), so the most frugal of a plan's variants
  // is folded where fold is explored.
  const std::vector<ir::ExpertTensor> splitOnly = {ir::ExpertTensor::Split};
  const std::vector<ir::ExpertTensor> &tensorValues =
      options.expertTensor.empty() ? splitOnly : options.expertTensor;
  bool exploresFold = llvm::is_contained(tensorValues, ir::ExpertTensor::Fold);
  // The expert_context settings where `fold` applies (Verify's checkFold): an expert and a context
  // axis whose group (with the tensor axis where that is folded too) divides the experts. A plan
  // folded over cp keeps less than its split twin (each device holds ep·cp's share of the experts'
  // states, the same tokens), so the plan folded over both is the most frugal of its variants.
  const std::vector<ir::ExpertTensor> &contextValues =
      options.expertContext.empty() ? splitOnly : options.expertContext;
  bool exploresContextFold = llvm::is_contained(contextValues, ir::ExpertTensor::Fold);
  auto overlapsExperts = [](int64_t ep, int64_t pp, const Pipeline &pipeline,
                            ir::ActivationMode mode, ir::Precision precision) {
    return ep > 1 &&
           (pp == 1 || (pipeline.schedule == ir::Schedule::Interleaved && pipeline.chunks > 1) ||
            pipeline.schedule == ir::Schedule::DualPipeV) &&
           mode != ir::ActivationMode::RecomputeFull && precision != ir::Precision::FP32;
  };
  // The groups of candidates, in the search order: a mesh with its pipelines, a placement, a
  // precision, the gather's type and the experts' placement. Within a group the candidates grow in
  // memory (micro-batch, then activation mode), which prunes them; the groups are searched on
  // every thread.
  struct Group {
    int64_t tp, pp, cp, ep;
    ir::ContextMethod context;
    size_t pipelines; ///< Index into `layouts`.
    const Placement *placement;
    const PrecisionVariant *variant;
    bool fp8Gather, expertsReplicated;
  };
  std::vector<std::vector<Pipeline>> layouts;
  std::vector<Group> groups;
  for (int64_t tp : divisorsOf(std::min<int64_t>(cluster.devicesPerNode, 8))) {
    if (devices % tp != 0)
      continue;
    for (int64_t pp : divisorsOf(devices / tp)) {
      if (pp > layers)
        break;
      // The stage layouts: the layers split evenly, or (interleaved) with the embedding and the
      // loss counted as layers (Megatron-LM's --account-for-embedding-in-pipeline-split and
      // --account-for-loss-in-pipeline-split; Qwen3-235B's 94 + 2 layers on 8 stages × 3 chunks
      // of 4): the chunks v > 1 for which pp·v divides layers + 2, the first and the last stage
      // holding (layers + 2)/pp − 1 layers (rule `divisibility`).
      std::vector<Pipeline> pipelines;
      if (pp == 1) {
        pipelines.push_back({ir::Schedule::OneFOneB, 1});
      } else {
        if (layers % pp == 0) {
          for (ir::Schedule schedule :
               {ir::Schedule::OneFOneB, ir::Schedule::GPipe, ir::Schedule::ZeroBubble})
            if (explores(schedule))
              pipelines.push_back({schedule, 1});
          if (explores(ir::Schedule::Interleaved))
            for (int64_t v : divisorsOf(layers / pp))
              if (v > 1)
                pipelines.push_back({ir::Schedule::Interleaved, v});
          // The V schedules: two chunks a stage, the second in reverse order.
          if (layers % (2 * pp) == 0)
            for (ir::Schedule schedule : {ir::Schedule::ZeroBubbleV, ir::Schedule::DualPipeV})
              if (explores(schedule))
                pipelines.push_back({schedule, 2});
        }
        if ((layers + 2) % pp == 0 && explores(ir::Schedule::Interleaved))
          for (int64_t v : divisorsOf((layers + 2) / pp))
            if (v > 1)
              pipelines.push_back({ir::Schedule::Interleaved, v, true, (layers + 2) / pp - 1});
      }
      if (pipelines.empty())
        continue;
      layouts.push_back(std::move(pipelines));
      int64_t rest = devices / (tp * pp);
      for (int64_t cp : divisorsOf(rest))
        for (ir::ContextMethod context : getContextMethods(run, tp, cp, options.contextMethods))
          for (int64_t ep : divisorsOf(rest / cp)) {
            // Expert parallelism for a mixture of experts only (ep dividing its experts).
            if (model.isMoe() ? model.transformer.moe.experts % ep != 0 : ep > 1)
              continue;
            ++result.meshes;
            for (const Placement &placement : placements)
              for (const PrecisionVariant &variant : precisions)
                for (bool fp8Gather : {false, true}) {
                  if ((fp8Gather ? !variant.fp8Gather : !variant.plainGather) ||
                      (fp8Gather && !variant.gathersFp8Always() &&
                       !gathersParams(placement.params, placement.optimizer)) ||
                      (variant.keepsParamsWhole() && placement.params != ParamChoice::Replicate))
                    continue;
                  // Under ZeRO-3 the experts may instead stay whole over their
                  // expert-data-parallel axes, dp and cp (ZeRO-1 for them).
                  for (bool expertsReplicated : {false, true})
                    if (!expertsReplicated ||
                        (model.isMoe() && placement.params == ParamChoice::GatherAll &&
                         rest / ep > 1))
                      groups.push_back({tp, pp, cp, ep, context, layouts.size() - 1, &placement,
                                        &variant, fp8Gather, expertsReplicated});
                }
          }
    }
  }

  // One group: its candidates evaluated exactly, in order. Memory grows with the micro-batch and
  // with what the activations keep (full recomputation, then selective, then keep): past a plan
  // over the budget, the same plan keeping more is over it too, and is counted without being
  // evaluated.
  unsigned keep = std::max(1u, options.topK);
  struct Share {
    SearchResult counts;
    std::vector<std::pair<Ranked, analysis::RunAnalysis>> best; // isRankedBetter order.
    std::optional<Ranked> smallest;
    Refused refused;
  };
  auto searchGroup = [&](uint64_t index, Share &share) {
    const Group &group = groups[index];
    int64_t tp = group.tp, pp = group.pp, cp = group.cp, ep = group.ep;
    int64_t rest = devices / (tp * pp);
    // The devices that take different samples: dp × ep (the context ranks share theirs).
    int64_t samples = rest / cp;
    // Whether this group's candidates fold their experts too: an expert and a tensor axis whose
    // devices together divide the experts, fold explored.
    bool foldsHere = exploresFold && model.isMoe() && ep > 1 && tp > 1 &&
                     model.transformer.moe.experts % (ep * tp) == 0;
    // Whether they may fold the context axis into the expert group. The folds explored, each
    // where its group divides the experts; folded over cp the experts have no context replicas to
    // keep whole, so ZeRO-1 for them needs a batch axis besides ep.
    bool foldsContextHere = exploresContextFold && model.isMoe() && ep > 1 && cp > 1 &&
                            model.transformer.moe.experts % (ep * cp) == 0;
    // (expert_tensor, expert_context) folded, and the dispatcher.
    std::vector<std::tuple<bool, bool, ir::ExpertDispatcher>> folds;
    for (ir::ExpertTensor tensor : foldsHere ? tensorValues : splitOnly)
      for (ir::ExpertTensor context : foldsContextHere ? contextValues : splitOnly) {
        bool tensorFold = tensor == ir::ExpertTensor::Fold;
        bool contextFold = context == ir::ExpertTensor::Fold;
        int64_t folded = ep * (tensorFold ? tp : 1) * (contextFold ? cp : 1);
        if (model.transformer.moe.experts % folded == 0 &&
            !(contextFold && group.expertsReplicated && samples / ep <= 1))
          for (ir::ExpertDispatcher dispatcher : ep > 1 ? dispatcherValues : allToAllOnly)
            folds.emplace_back(tensorFold, contextFold, dispatcher);
      }
    const PrecisionVariant &variant = *group.variant;
    SearchResult &counts = share.counts;
    uint64_t order = index << 32;
    // The pipelines whose full recomputation was over the budget at a smaller micro-batch:
    // each holds b·min(in flight, m·v) micro-batches' activations, m = B/b, which does not
    // shrink as b grows.
    std::set<Pipeline> smallerOver;
    for (int64_t b : {1, 2, 4}) {
      // A micro-batch that is a multiple of cp > 1 is left out: with the context ranks as batch
      // ranks and b/cp sequences each, a device computes the same tokens per micro-batch in the
      // same number of micro-batches, without the key/value exchanges, and its expert axis is
      // no wider.
      if (run.globalBatch % (b * samples) != 0 || (cp > 1 && b % cp == 0))
        continue;
      int64_t m = run.globalBatch / (b * samples);
      int64_t searchGroup = getSearchGroup(pp, m);
      for (const Pipeline &pipeline : layouts[group.pipelines]) {
        int64_t microbatchGroup = pipeline.schedule == ir::Schedule::Interleaved ? searchGroup : 0;
        if (!cost::isScheduleValid(pipeline.schedule, pp, m, pipeline.chunks, nullptr,
                                   microbatchGroup))
          continue;
        bool lessOver = false;
        for (ir::ActivationMode mode : activations)
          for (ir::AsyncTensorParallel async : tp > 1 ? asyncValues : offOnly)
            for (ir::ExpertOverlap overlap :
                 overlapsExperts(ep, pp, pipeline, mode, variant.precision) ? overlapValues
                                                                            : overlapOff)
              for (auto [tensorFold, contextFold, dispatcher] : folds) {
                Candidate c;
                c.pp = pp;
                c.dpNode = samples / ep;
                c.cp = cp;
                c.context = group.context;
                c.ep = ep;
                c.tp = tp;
                c.params = group.placement->params;
                c.grads = group.placement->grads;
                c.optimizer = group.placement->optimizer;
                c.activations = mode;
                c.sequenceParallel = tp > 1;
                c.spInputs = options.spInputs;
                c.dpOverlap = options.dpOverlap;
                c.asyncTp = async;
                c.epOverlap = overlap == ir::ExpertOverlap::On;
                c.expertFold = tensorFold;
                c.contextFold = contextFold;
                c.dispatcher = dispatcher;
                if (run.strategy)
                  c.gradReduce = run.strategy->gradReduce;
                c.microBatch = b;
                c.microbatches = m;
                c.schedule = pipeline.schedule;
                c.chunks = pipeline.chunks;
                c.group = microbatchGroup;
                c.countedSplit = pipeline.counted;
                c.edgeLayers = pipeline.edge;
                variant.applyTo(c);
                c.fp8Gather = group.fp8Gather;
                c.expertsReplicated = group.expertsReplicated;
                if (options.filter && !options.filter(c))
                  continue;
                ++counts.spaceSize;
                uint64_t position = order++;
                if (smallerOver.count(pipeline) || lessOver) {
                  ++counts.rejectedByRule["capacity"];
                  ++counts.prunedByMemoryOrder;
                  continue;
                }
                // Once the kept plans are as many as the top, the slowest of them bounds what can
                // still enter: a plan whose compute and critical communication alone are slower
                // is counted as accepted and not timed, nor is one over the budget (as on the
                // fast path). Collecting every accepted plan (onAccepted) times them all.
                std::vector<std::pair<Ranked, analysis::RunAnalysis>> &kept = share.best;
                double stepBound = !options.onAccepted && kept.size() == keep
                                       ? kept.back().first.candidate.stepSeconds
                                       : std::numeric_limits<double>::infinity();
                analysis::RunAnalysis exact;
                std::string rule =
                    evaluateExact(run, cluster, c, &exact, stepBound, /*untimedUnfit=*/true);
                c.stepSeconds = exact.time.stepSeconds;
                c.peakBytes = exact.memory.device.peak;
                c.hostPeakBytes = exact.memory.host.peak;
                Ranked ranked{c, position};
                if (rule == "capacity") {
                  // The overlap holds more than the same plan without it, and split experts more
                  // than folded ones, which the plans after it may not: only the most frugal
                  // variant prunes them.
                  if (!c.epOverlap && (c.expertFold || !foldsHere) &&
                      (c.contextFold || !foldsContextHere)) {
                    lessOver = true;
                    if (mode == ir::ActivationMode::RecomputeFull)
                      smallerOver.insert(pipeline);
                  }
                  if (!share.smallest || isRankedSmaller(ranked, *share.smallest))
                    share.smallest = ranked;
                }
                if (!rule.empty()) {
                  ++counts.rejectedByRule[rule];
                  continue;
                }
                ++counts.accepted;
                if (!exact.time.timed) {
                  ++counts.prunedByStep;
                  continue;
                }
                if (options.onAccepted)
                  options.onAccepted(c);
                if (kept.size() == keep && !isRankedBetter(ranked, kept.back().first))
                  continue;
                if (share.refused.refuses(options, ranked, counts))
                  continue;
                auto at = std::upper_bound(
                    kept.begin(), kept.end(), ranked,
                    [](const Ranked &x, const auto &y) { return isRankedBetter(x, y.first); });
                kept.insert(at, {ranked, std::move(exact)});
                if (kept.size() > keep)
                  kept.pop_back();
              }
      }
    }
  };

  unsigned threads =
      std::min<unsigned>(getSearchThreads(options), std::max<size_t>(1, groups.size()));
  result.threads = threads;
  std::vector<Share> shares(threads);
  std::atomic<uint64_t> next{0};
  // The progress bar advances by groups.
  uint64_t done = 0;
  std::mutex progressMutex;
  auto work = [&](Share &share) {
    for (uint64_t index = next.fetch_add(1); index < groups.size(); index = next.fetch_add(1)) {
      searchGroup(index, share);
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progressMutex);
        options.progress(static_cast<double>(++done) / static_cast<double>(groups.size()));
      }
    }
  };
  runOnThreads(threads, [&](unsigned thread) { work(shares[thread]); });
  // The shares merged: the counts add up, the best and the smallest are those of the search
  // order, whatever the number of threads.
  std::vector<std::pair<Ranked, analysis::RunAnalysis>> best;
  std::optional<Ranked> smallest;
  Refused refused;
  for (Share &share : shares) {
    addCounts(share.counts, result);
    for (auto &entry : share.best)
      best.push_back(std::move(entry));
    if (share.smallest && (!smallest || isRankedSmaller(*share.smallest, *smallest)))
      smallest = share.smallest;
    refused.merge(share.refused);
  }
  refused.store(result);
  std::sort(best.begin(), best.end(),
            [](const auto &x, const auto &y) { return isRankedBetter(x.first, y.first); });
  if (best.size() > keep)
    best.resize(keep);
  if (result.accepted == 0 && smallest)
    result.smallest = smallest->candidate;
  for (auto &[ranked, analysis] : best) {
    result.top.push_back(ranked.candidate);
    result.topAnalyses.push_back(std::move(analysis));
  }
}

void retainFreedMemory() {
#ifdef __GLIBC__
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

unsigned getSearchThreads(const SearchOptions &options) {
  if (options.onAccepted)
    return 1;
  // At most one per hardware thread: more would only take turns on the same cores.
  ThreadPoolStrategy strategy = hardware_concurrency(options.threads);
  strategy.Limit = true;
  return std::max(1u, strategy.compute_thread_count());
}

SearchResult searchStrategies(const ir::Run &run, const SearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result;
  result.cluster = makeSearchCluster(*run.cluster, options.devices, options.memoryBudget);
  const ir::Cluster &cluster = *result.cluster;
  result.threads = 1;
  if (searchesExactly(*run.model) && run.model->getNumLayers() > 0 && run.globalBatch > 0) {
    searchExactly(run, cluster, options, result);
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }
  if (!isSearchable(run))
    return result;
  std::vector<PrecisionVariant> precisions =
      precisionVariants(run, options.precisions, options.fp4);
  unsigned threads = getSearchThreads(options);
  result.threads = threads;
  // One evaluator per thread and precision (its cost model, state bytes and caches), mixed(fp8)
  // and mixed(fp4) apart.
  using PrecisionKey = std::pair<ir::Precision, ir::Fp8Scaling>;
  std::vector<std::map<PrecisionKey, std::unique_ptr<Evaluator>>> evaluators(threads);
  for (auto &perThread : evaluators)
    for (const PrecisionVariant &variant : precisions)
      perThread.emplace(PrecisionKey{variant.precision, variant.fp8Scaling},
                        std::make_unique<Evaluator>(run, cluster, variant.precision,
                                                    variant.fp8Scaling, variant.fp8Params));
  unsigned keep = std::max(1u, options.topK) + 16;
  std::vector<Candidate> best; // Sorted, fastest first, at most `keep`.
  // The total, for the progress bar.
  uint64_t total = 0;
  if (options.progress)
    enumerate(
        run, cluster, precisions, options.schedules, options.activations, options.asyncTp,
        options.spInputs, options.dpOverlap, options.contextMethods,
        [&](const Candidate &c, uint64_t inner, const Layouts &) {
          if (!options.filter)
            total += inner;
          return static_cast<bool>(options.filter);
        },
        [&](const Candidate &c) { total += options.filter(c) ? 1 : 0; });
  std::atomic<uint64_t> done{0};
  std::mutex progressMutex;
  uint64_t reported = 0; // The count last passed to options.progress, under progressMutex.

  // Each thread walks the whole enumeration and evaluates the groups it claims, one at a time,
  // in increasing order (the next unclaimed group is taken when a claimed one begins).
  auto searchShare = [&](bool prune, bool collect, unsigned thread, std::atomic<uint64_t> &next,
                         SearchShare &share) {
    auto &evaluatorsHere = evaluators[thread];
    // The candidates of one precision come together: the last evaluator is mostly the one.
    Evaluator *lastEvaluator = nullptr;
    std::optional<PrecisionKey> lastPrecision;
    auto evaluatorFor = [&](const Candidate &c) -> Evaluator & {
      PrecisionKey key{c.precision, c.fp8Scaling};
      if (lastPrecision != key) {
        lastEvaluator = evaluatorsHere.at(key).get();
        lastPrecision = key;
      }
      return *lastEvaluator;
    };
    SearchResult &counts = share.counts;
    uint64_t group = 0, claimed = next.fetch_add(1), order = 0, unreported = 0;
    std::optional<Candidate> overBudget;
    FastVerdict verdict;
    // Candidates rejected one by one, most of the space, counted here by their rule's name (a
    // string literal: a handful of rules) rather than in `counts`, and added to it at the end.
    llvm::SmallVector<std::pair<StringRef, uint64_t>, 4> rejected;
    auto reject = [&](StringRef rule) {
      for (auto &[name, count] : rejected)
        if (name == rule) {
          ++count;
          return;
        }
      rejected.emplace_back(rule, 1);
    };
    auto report = [&](uint64_t count) {
      if (!collect || !options.progress)
        return;
      unreported += count;
      if (unreported < (1 << 16))
        return;
      uint64_t now = done.fetch_add(unreported) + unreported;
      unreported = 0;
      std::lock_guard<std::mutex> lock(progressMutex);
      // Another thread may have reported a later count while this one waited for the lock.
      if (now <= reported)
        return;
      reported = now;
      options.progress(total ? std::min(1.0, static_cast<double>(now) / static_cast<double>(total))
                             : 0);
    };
    enumerate(
        run, cluster, precisions, options.schedules, options.activations, options.asyncTp,
        options.spInputs, options.dpOverlap, options.contextMethods,
        [&](const Candidate &c, uint64_t inner, const Layouts &layouts) {
          if (group++ != claimed)
            return false;
          order = claimed << 32;
          claimed = next.fetch_add(1);
          if (!prune || options.filter)
            return true;
          // Rule order: gradient-integrity before capacity, as in the verifier's report.
          unsigned present = presentAxes(c);
          if (gradMask(c.grads) & present & ~(optimizerMask(c.optimizer) & present))
            return true;
          if (evaluatorFor(c).lowerBound(c, layouts) <= cluster.deviceMemory)
            return true;
          if (collect) {
            counts.spaceSize += inner;
            counts.rejectedByRule["capacity"] += inner;
            counts.prunedByLowerBound += inner;
            report(inner);
          }
          return false;
        },
        [&](const Candidate &candidate) {
          uint64_t position = order++;
          assert((position & 0xffffffffu) != 0xffffffffu && "a group of 2^32 candidates");
          if (options.filter && !options.filter(candidate))
            return;
          // A schedule of the same stage layout as a capacity-rejected 1f1b or zbv candidate
          // (which hold the fewest micro-batches in flight on every stage of their layouts:
          // cost::getInFlightMicrobatches; zbv only where its deferred weight passes hold no
          // more than their activations) does not fit either.
          if (prune && !options.filter && overBudget && candidate.pp > 1 &&
              sameLayoutExceptSchedule(candidate, *overBudget)) {
            if (collect) {
              ++counts.spaceSize;
              reject("capacity");
              ++counts.prunedBySchedule;
              report(1);
            }
            return;
          }
          // Once the kept buffer is full, its slowest plan bounds what can still enter it: a
          // candidate whose compute alone is slower is counted as accepted and not timed.
          // Collecting every accepted candidate (onAccepted) times them all.
          std::vector<Ranked> &kept = share.best;
          double stepBound = prune && collect && !options.onAccepted && kept.size() == keep
                                 ? kept.back().candidate.stepSeconds
                                 : std::numeric_limits<double>::infinity();
          evaluatorFor(candidate).evaluate(candidate, verdict, stepBound);
          bool capacity = verdict.rejectedBy == "capacity";
          // ZB-V's last ranks can hold more than DualPipeV's where a deferred weight pass holds
          // more than its micro-batch's activations (cost::getDeferredWeightPeaks).
          if (capacity &&
              (candidate.schedule == ir::Schedule::OneFOneB ||
               (candidate.schedule == ir::Schedule::ZeroBubbleV && !verdict.deferredExtra)))
            overBudget = candidate;
          if (collect) {
            ++counts.spaceSize;
            report(1);
          }
          if (capacity || verdict.rejectedBy.empty()) {
            // Track the smallest memory of candidates that break no other rule.
            if (!share.smallest || verdict.peakBytes < share.smallest->candidate.peakBytes) {
              Ranked copy{candidate, position};
              copy.candidate.peakBytes = verdict.peakBytes;
              copy.candidate.hostPeakBytes = verdict.hostPeakBytes;
              share.smallest = copy;
            }
          }
          if (!collect)
            return;
          if (!verdict.rejectedBy.empty()) {
            reject(verdict.rejectedBy);
            return;
          }
          ++counts.accepted;
          if (!verdict.timed) {
            ++counts.prunedByStep;
            return;
          }
          Ranked copy{candidate, position};
          copy.candidate.stepSeconds = verdict.stepSeconds;
          copy.candidate.peakBytes = verdict.peakBytes;
          copy.candidate.hostPeakBytes = verdict.hostPeakBytes;
          if (options.onAccepted)
            options.onAccepted(copy.candidate);
          if (kept.size() == keep && !isRankedBetter(copy, kept.back()))
            return;
          if (share.refused.refuses(options, copy, counts))
            return;
          kept.insert(std::upper_bound(kept.begin(), kept.end(), copy, isRankedBetter), copy);
          if (kept.size() > keep)
            kept.pop_back();
        },
        collect && thread == 0 ? &result.meshes : nullptr);
    for (const auto &[rule, count] : rejected)
      counts.rejectedByRule[rule.str()] += count;
  };

  // Runs the search on every thread and merges the shares: the counts add up, the best and the
  // smallest are those of the merged order.
  Refused refused;
  auto search = [&](bool prune, bool collect) {
    std::atomic<uint64_t> next{0};
    std::vector<SearchShare> shares(threads);
    runOnThreads(threads, [&](unsigned thread) {
      searchShare(prune, collect, thread, next, shares[thread]);
    });
    std::vector<Ranked> merged;
    std::optional<Ranked> smallest;
    for (SearchShare &share : shares) {
      addCounts(share.counts, result);
      merged.insert(merged.end(), share.best.begin(), share.best.end());
      if (share.smallest && (!smallest || isRankedSmaller(*share.smallest, *smallest)))
        smallest = share.smallest;
      if (collect)
        refused.merge(share.refused);
    }
    std::sort(merged.begin(), merged.end(), isRankedBetter);
    if (merged.size() > keep)
      merged.resize(keep);
    if (collect) {
      best.clear();
      for (const Ranked &ranked : merged)
        best.push_back(ranked.candidate);
    }
    result.smallest.reset();
    if (smallest)
      result.smallest = smallest->candidate;
  };
  search(options.pruneByLowerBound, true);
  if (result.accepted == 0 && options.pruneByLowerBound && result.prunedByLowerBound > 0) {
    // Nothing fits: the pruned groups may hold the smallest footprint; find it exactly.
    search(false, false);
  }
  if (result.accepted > 0)
    result.smallest.reset();
  refused.store(result);

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
  if (c.pp != 1 || c.cp != 1 || c.isSplit() || (c.tp > 1) != tensorParallel ||
      c.asyncTp != ir::AsyncTensorParallel::Off)
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
    } else if (c.getBatchDegree() > 1 && (mask & kOuter)) {
      text = outer;
    }
    if (c.ep > 1 && (mask & kExpert))
      text += (text.empty() ? "" : ", ") + std::string("ep");
    if (c.cp > 1 && (mask & kContext))
      text += (text.empty() ? "" : ", ") + std::string("cp");
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
  // ZeRO-1 for the experts: replicated over their expert-data-parallel axes (buildStrategy).
  std::string expertAxes =
      c.expertsReplicated ? axes(kOuter | kInner | (c.contextFold ? 0 : kContext)) : "";
  if (!expertAxes.empty())
    text += "  expert_params = replicate(" + expertAxes + ");\n  expert_grads = replicate(" +
            expertAxes + ");\n";
  std::string activations = c.sequenceParallel ? "shard(tp), " : "";
  activations += ir::toString(c.activations).str();
  text += "  activations = " + activations + ";\n";
  if (c.cp > 1)
    text += "  context     = " + ir::toString(c.context).str() + ";\n";
  if (c.asyncTp != ir::AsyncTensorParallel::Off)
    text += "  async_tp    = " + ir::toString(c.asyncTp).str() + ";\n";
  if (c.sequenceParallel && c.tp > 1 && c.spInputs != ir::SequenceParallelInputs::Regather)
    text += "  sp_inputs   = " + ir::toString(c.spInputs).str() + ";\n";
  if (writesDpOverlap(c))
    text += "  dp_overlap  = " + ir::toString(c.dpOverlap).str() + ";\n";
  if (writesGradReduce(c))
    text += "  grad_reduce = " + ir::toString(c.gradReduce).str() + ";\n";
  if (c.epOverlap)
    text += "  ep_overlap  = true;\n";
  if (c.dispatcher != ir::ExpertDispatcher::AllToAll)
    text += "  dispatcher  = " + ir::toString(c.dispatcher).str() + ";\n";
  if (c.expertFold)
    text += "  expert_tensor = fold;\n";
  if (c.contextFold)
    text += "  expert_context = fold;\n";
  if (c.pp > 1) {
    text += "  pipeline    = " + ir::toString(c.schedule).str() +
            "(microbatches = " + std::to_string(c.microbatches);
    if (c.schedule == ir::Schedule::Interleaved)
      text += ", chunks = " + std::to_string(c.chunks);
    if (c.group > 0)
      text += ", group = " + std::to_string(c.group);
    if (c.countedSplit)
      text += ", embedding_layer = true, loss_layer = true";
    else if (c.edgeLayers > 0)
      text +=
          ", first = " + std::to_string(c.edgeLayers) + ", last = " + std::to_string(c.edgeLayers);
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
     << "; tied_embeddings = " << (config.tiedEmbeddings ? "true" : "false") << ";\n";
  if (config.kvHeads > 0)
    os << "  kv_heads = " << config.kvHeads << ";\n";
  if (config.kvRepeat)
    os << "  kv_repeat = true;\n";
  if (config.ropeComplex)
    os << "  rope_complex = true;\n";
  if (config.unpad)
    os << "  unpad = true;\n";
  if (config.projections != ir::Projections::Fused)
    os << "  projections = " << ir::toString(config.projections) << ";\n";
  if (config.headDim > 0)
    os << "  head_dim = " << config.headDim << ";\n";
  if (config.qkNorm)
    os << "  qk_norm = true;\n";
  if (config.window > 0)
    os << "  window = " << config.window << ";\n";
  if (config.fullEvery > 0)
    os << "  full_every = " << config.fullEvery << ";\n";
  if (config.postNorm)
    os << "  post_norm = true;\n";
  if (config.sinks)
    os << "  sinks = true;\n";
  if (config.isLatentAttention()) {
    os << "  kv_lora_rank = " << config.kvLoraRank << "; rope_head_dim = " << config.ropeHeadDim
       << "; v_head_dim = " << config.getValueHeadDim() << ";\n";
    if (config.qLoraRank > 0)
      os << "  q_lora_rank = " << config.qLoraRank << ";\n";
  }
  if (config.moe.isEnabled()) {
    // Every field, defaults included, so that the plan's model is the searched one.
    const ir::MoeConfig &moe = config.moe;
    os << "  experts = " << moe.experts << "; top_k = " << moe.topK
       << "; expert_ffn = " << moe.expertFfn << ";\n";
    if (moe.sharedExperts > 0)
      os << "  shared_experts = " << moe.sharedExperts
         << "; shared_expert_ffn = " << moe.sharedExpertFfn << ";\n";
    os << "  dense_layers = " << moe.denseLayers << "; moe_every = " << moe.every
       << "; router = " << ir::toString(moe.router)
       << fmt::format("; aux_loss = {};\n", moe.auxLoss);
    if (moe.auxLoss > 0 && moe.auxLossScope != ir::AuxLossScope::Global)
      os << "  aux_loss_scope = " << ir::toString(moe.auxLossScope) << ";\n";
    if (moe.routerBias)
      os << "  router_bias = true;\n";
    if (moe.routerGroups > 0)
      os << "  router_groups = " << moe.routerGroups
         << "; router_group_top_k = " << moe.routerGroupTopK << ";\n";
    if (moe.capacityFactor)
      os << fmt::format("  capacity_factor = {};\n", *moe.capacityFactor);
    else
      os << fmt::format("  imbalance = {};\n", moe.imbalance);
  }
  if (config.mtpLayers > 0)
    os << "  mtp_layers = " << config.mtpLayers << ";\n";
  os << "  attention = " << ir::toString(config.attention) << ";\n}\n";
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
  os << "cluster " << cluster.name << " {\n";
  // The preset selects the device family's calibration (and the shape-based compute model);
  // every figure below overrides it with the same value.
  if (cluster.device)
    os << "  device = " << cluster.device->name << ";\n";
  os << "  nodes = " << cluster.nodes << "; devices_per_node = " << cluster.devicesPerNode
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
  if (cluster.peakFp8 > 0)
    os << "  peak_fp8 = " << formatQuantity(cluster.peakFp8, rateUnits) << ";\n";
  if (cluster.peakFp4 > 0)
    os << "  peak_fp4 = " << formatQuantity(cluster.peakFp4, rateUnits) << ";\n";
  if (cluster.peakTf32 > 0)
    os << "  peak_tf32 = " << formatQuantity(cluster.peakTf32, rateUnits) << ";\n";
  if (cluster.hbmBandwidth > 0)
    os << "  hbm_bandwidth = " << formatQuantity(cluster.hbmBandwidth, bandwidthUnits) << ";\n";
  if (cluster.computeUnits > 0)
    os << "  compute_units = " << cluster.computeUnits << ";\n";
  if (cluster.hostMemoryBandwidth)
    os << "  host_memory_bandwidth = "
       << formatQuantity(*cluster.hostMemoryBandwidth, bandwidthUnits) << ";\n";
  if (!cluster.device || cluster.efficiencyExplicit)
    os << "  efficiency = " << format("%.12g", cluster.efficiency) << ";\n";
  os << "}\n";
  return text;
}

std::string formatRun(const ir::Run &base, const Candidate &c, StringRef name,
                      StringRef strategyName, StringRef clusterName) {
  std::string precision = c.formatPrecision();
  // A run-level setting, written unless it is the default.
  auto setting = [](StringRef key, StringRef value, bool isDefault) {
    return isDefault ? std::string() : ("\n  " + key + " = " + value + ";").str();
  };
  std::string crossEntropy = setting("cross_entropy", ir::toString(base.crossEntropy),
                                     base.crossEntropy == ir::CrossEntropyKind::Fused);
  std::string kernels =
      setting("kernels", ir::toString(base.kernels), base.kernels == ir::KernelMode::Fused);
  std::string paramGather = setting("param_gather", ir::toString(base.paramGather),
                                    base.paramGather == ir::ParamGather::InPlace);
  std::string trainMetrics =
      setting("train_metrics", std::to_string(base.trainMetrics), base.trainMetrics == 0);
  std::string contextMerge = setting("context_merge", ir::toString(base.contextMerge),
                                     base.contextMerge == ir::ContextMerge::Fused || c.cp <= 1);
  std::string gradAccumulation = setting("grad_accumulation", ir::toString(base.gradAccumulation),
                                         base.gradAccumulation == ir::GradAccumulation::Fused);
  return "run " + name.str() + " {\n  model = " + base.model->name +
         "; cluster = " + clusterName.str() + "; strategy = " + strategyName.str() +
         ";\n  micro_batch = " + std::to_string(c.microBatch) +
         "; global_batch = " + std::to_string(base.globalBatch) + ";\n  precision = " + precision +
         "; optimizer = " + ir::spellOptimizer(base.optimizer, base.optimizerStates) + ";" +
         crossEntropy + kernels + paramGather + trainMetrics + contextMerge + gradAccumulation +
         "\n}\n";
}

} // namespace placec::search
