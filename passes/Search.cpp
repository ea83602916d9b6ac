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
  int64_t params = 0; ///< After the tensor-parallel split.
  /// Plan::Unit::sequenceParallelParams: replicated tensors of layers and the head.
  int64_t sequenceParallelParams = 0;
  int64_t count = 0;
  double forwardFlopsPerSample = 0;
  double recomputeFullPerSample = 0, recomputeSelectivePerSample = 0;
  /// Tensor-parallel collectives of the forward pass, the backward pass and a recomputed
  /// forward, in all-gather equivalents (an all-reduce counts two: its ring time is exactly that
  /// of an all-gather and a reduce-scatter of the same buffer), without and with sequence
  /// parallelism.
  int tensorForward[2] = {0, 0}, tensorBackward[2] = {0, 0}, tensorRecompute[2] = {0, 0};
  /// The head: the vocabulary-parallel cross-entropy's all-gather of 3·b·s activation values
  /// per tensor rank in the forward (Lowering).
  bool crossEntropy = false;
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
  /// gathered from its forward through the head's (Analyzer::stageMemory).
  int64_t tiedEmbedParams = 0;
};

/// Precomputed facts of a run's model on a cluster, shared by every candidate.
class Evaluator {
public:
  Evaluator(const ir::Run &run, const ir::Cluster &cluster) : model(*run.model), cluster(cluster) {
    const ir::TransformerConfig &config = model.transformer;
    s = static_cast<double>(config.seq);
    h = static_cast<double>(config.hidden);
    vocab = static_cast<double>(config.vocab);
    layers = model.getNumLayers();
    bytes = ir::getStateBytes(run.precision, run.optimizer);
    activationBytes = ir::getActivationBytes(run.precision);
    flopRate = cluster.peakFlops * cluster.efficiency;
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
    /// The rank span of a group whose outermost axis is the outer or the inner sub-axis.
    int64_t spanOuter = 1, spanInner = 1;
    unsigned present = 0;
  };
  Geometry geometry(const Candidate &c) const {
    Geometry g;
    g.sizes[kOuter] = c.dpNode;
    g.sizes[kInner] = c.dpLocal;
    g.present = (c.dpNode > 1 ? kOuter : 0) | (c.dpLocal > 1 ? kInner : 0);
    g.spanInner = c.dpLocal * c.tp;
    g.spanOuter = c.dpNode * c.dpLocal * c.tp;
    return g;
  }
  int64_t degree(const Geometry &g, unsigned mask) const {
    mask &= g.present;
    return (mask & kOuter ? g.sizes[kOuter] : 1) * (mask & kInner ? g.sizes[kInner] : 1);
  }
  double bandwidth(const Geometry &g, unsigned mask) const {
    mask &= g.present;
    int64_t span = mask & kOuter ? g.spanOuter : g.spanInner;
    return cluster.devicesPerNode % span == 0 ? cluster.intraBandwidth : cluster.interBandwidth;
  }
  /// Seconds of one ring all-gather or reduce-scatter (`factor` 1) or all-reduce (2).
  double collective(double n, double bytes, double beta, double factor) const {
    if (beta <= 0)
      return 0;
    return factor * (n - 1) * cluster.latency + factor * (n - 1) / n * bytes / beta;
  }
  double transfer(double bytes, double beta) const {
    return beta <= 0 ? 0 : cluster.latency + bytes / beta;
  }
  double layerActivationBytes(const Candidate &c) const;
  double inFlight(const Candidate &c, int stage) const;

  const ir::Model &model;
  const ir::Cluster &cluster;
  double s = 0, h = 0, vocab = 0, flopRate = 0;
  int64_t layers = 0;
  ir::StateBytes bytes{};
  unsigned activationBytes = 2;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<StageShape>> shapes;
};

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
  double t = static_cast<double>(tp);
  double matmuls =
      2 * s * (4 * h * h + (config.mlp == ir::MlpActivation::Swiglu ? 3 : 2) * h * config.ffn);
  double layerFlops = (matmuls + 4 * s * s * h) / t;
  double headFlops = 1.5 * s * h * vocab / t;
  double attentionCore = 4 * s * s * h / t;

  std::vector<int> classes = {0};
  if (pp > 2)
    classes.push_back(1);
  if (pp > 1)
    classes.push_back(static_cast<int>(pp - 1));
  std::vector<StageShape> result;
  for (int stage : classes) {
    StageShape shape;
    shape.stage = stage;
    auto addGroup = [&](int64_t params, int64_t count, int kind, int layer) {
      if (count == 0)
        return;
      UnitGroup group;
      group.params = params;
      group.sequenceParallelParams = sequenceParallelParams[layer];
      group.count = count;
      // Lowering's tensorTraffic: a layer all-reduces twice per pass (sequence parallelism:
      // an all-gather and a reduce-scatter each time); the embedding reduces its output in the
      // forward (a reduce-scatter under sequence parallelism, whose backward is an all-gather);
      // the head all-gathers its input under sequence parallelism and reduces its gradient in
      // the backward. Full recomputation repeats the forward of layers and the head.
      if (kind == 0) { // embedding
        group.tensorForward[0] = 2;
        group.tensorForward[1] = 1;
        group.tensorBackward[1] = 1;
      } else if (kind == 1) { // layer
        group.forwardFlopsPerSample = layerFlops;
        group.recomputeFullPerSample = layerFlops;
        group.recomputeSelectivePerSample = attentionCore;
        for (int sp = 0; sp < 2; ++sp)
          group.tensorForward[sp] = group.tensorBackward[sp] = group.tensorRecompute[sp] = 4;
        shape.numLayers += count;
      } else { // head
        group.forwardFlopsPerSample = headFlops;
        group.recomputeFullPerSample = headFlops;
        group.tensorForward[1] = group.tensorRecompute[1] = 1;
        group.tensorBackward[0] = 2;
        group.crossEntropy = true;
        group.tensorBackward[1] = 1;
      }
      shape.groups.push_back(group);
      shape.numUnits += count;
      shape.sumParams += params * count;
      shape.maxParams = std::max(shape.maxParams, params);
    };
    if (stage == 0 && unitParams.count(-1))
      addGroup(unitParams[-1], 1, 0, -1);
    addGroup(unitParams[0], layers / pp, 1, 0);
    if (stage == pp - 1 && unitParams.count(static_cast<int>(layers)))
      addGroup(unitParams[static_cast<int>(layers)], 1, 2, static_cast<int>(layers));
    if (config.tiedEmbeddings && pp == 1 && unitParams.count(-1) &&
        unitParams.count(static_cast<int>(layers)))
      shape.tiedEmbedParams = unitParams[-1];
    if (pp > 1) {
      shape.sendsForward = chunks - (stage == pp - 1 ? 1 : 0);
      shape.sendsBackward = chunks - (stage == 0 ? 1 : 0);
      // Analyzer::linkOf: a boundary crosses nodes when any rank of the stage and its peer at
      // the same coordinates on the other axes lie in two nodes. The layers axis is outermost,
      // so stage s holds the ranks [s·stride, (s+1)·stride).
      int64_t stride = cluster.getNumDevices() / pp;
      auto crosses = [&](int64_t from, int64_t to) {
        int64_t offset = (to - from) * stride;
        for (int64_t rank = from * stride; rank < (from + 1) * stride; ++rank)
          if (rank / cluster.devicesPerNode != (rank + offset) / cluster.devicesPerNode)
            return true;
        return false;
      };
      auto linksOf = [&](int64_t s) {
        return std::make_pair(crosses(s, (s + 1) % pp), crosses(s, (s + pp - 1) % pp));
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

double Evaluator::layerActivationBytes(const Candidate &c) const {
  return analysis::getTransformerLayerActivationBytes(
      model.transformer, static_cast<double>(c.microBatch), static_cast<double>(c.tp),
      c.sequenceParallel, c.activations, activationBytes);
}

double Evaluator::inFlight(const Candidate &c, int stage) const {
  return analysis::getInFlightMicrobatches(c.schedule, c.pp, c.microbatches, c.chunks, stage);
}

double Evaluator::lowerBound(const Candidate &c) {
  Geometry g = geometry(c);
  int64_t paramShard = degree(g, paramMask(c.params));
  int64_t gradShard = degree(g, gradMask(c.grads));
  int64_t optimizerShard = degree(g, optimizerMask(c.optimizer));
  bool onHostParams = paramsOnHost(c.params);
  bool onHostOptimizer = c.optimizer == OptimizerChoice::HostShardAll;
  bool gathers = paramMask(c.params) & g.present;
  double best = 0;
  for (const StageShape &shape : getShapes(c.tp, c.pp, 1)) {
    double p = static_cast<double>(shape.sumParams), maxP = static_cast<double>(shape.maxParams);
    double memory = 0;
    if (!onHostParams)
      memory += p * bytes.params / static_cast<double>(paramShard);
    if (!(onHostOptimizer && (gradMask(c.grads) & g.present)))
      memory += p * bytes.grads / static_cast<double>(gradShard);
    if (!onHostOptimizer)
      memory += p * bytes.optimizer / static_cast<double>(optimizerShard);
    if (gathers)
      memory += (keepsAfterForward(c.params)
                     ? p
                     : std::min<double>(2, static_cast<double>(shape.numUnits)) * maxP +
                           static_cast<double>(shape.tiedEmbedParams)) *
                bytes.params;
    if (gradShard > 1)
      memory += maxP * bytes.grads;
    if (onHostParams)
      memory += maxP * bytes.params / static_cast<double>(paramShard);
    best = std::max(best, memory);
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

  const std::vector<StageShape> &stageShapes = getShapes(c.tp, c.pp, c.chunks);
  int64_t paramShard = degree(g, paramAxes);
  int64_t gradShard = degree(g, gradAxes);
  int64_t optimizerShard = degree(g, optimizerAxes);
  bool onHostParams = paramsOnHost(c.params);
  bool onHostOptimizer = c.optimizer == OptimizerChoice::HostShardAll;
  bool keep = keepsAfterForward(c.params);
  // ZeRO-Offload: sharded gradients accumulate on the host next to the optimizer, replicated
  // ones on the device until the step's reduction.
  bool gradsOnHost = onHostOptimizer && gradAxes;
  double layerActivations = layerActivationBytes(c);

  // Memory (Analyzer::stageMemory): the stage with the highest device peak, the first on ties.
  double peak = -1, hostPeak = 0;
  for (const StageShape &shape : stageShapes) {
    double p = static_cast<double>(shape.sumParams), maxP = static_cast<double>(shape.maxParams);
    double paramBytes = p * bytes.params / static_cast<double>(paramShard);
    double gradBytes = p * bytes.grads / static_cast<double>(gradShard);
    double optimizerBytes = p * bytes.optimizer / static_cast<double>(optimizerShard);
    double device = 0, host = 0;
    (onHostParams ? host : device) += paramBytes;
    (gradsOnHost ? host : device) += gradBytes;
    (onHostOptimizer ? host : device) += optimizerBytes;
    double activations =
        static_cast<double>(shape.numLayers) * layerActivations * inFlight(c, shape.stage);
    double transient = 0;
    if (paramAxes)
      transient += (keep ? p
                         : std::min<double>(2, static_cast<double>(shape.numUnits)) * maxP +
                               static_cast<double>(shape.tiedEmbedParams)) *
                   bytes.params;
    if (gradShard > 1 || gradsOnHost)
      transient += maxP * bytes.grads;
    if (onHostParams)
      transient += maxP * bytes.params / static_cast<double>(paramShard);
    double stagePeak = device + activations + transient;
    if (stagePeak > peak) {
      peak = stagePeak;
      hostPeak = host;
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
  // communication, then the once-per-step reductions and the pipeline bubble.
  double b = static_cast<double>(c.microBatch), m = static_cast<double>(c.microbatches);
  double hostBeta = cluster.hostBandwidth.value_or(0);
  double t = static_cast<double>(c.tp);
  double tensorCall = 0;
  double tensorBeta =
      cluster.devicesPerNode % c.tp == 0 ? cluster.intraBandwidth : cluster.interBandwidth;
  if (c.tp > 1) {
    double tpBytes = b * s * h * activationBytes;
    tensorCall = collective(t, tpBytes, tensorBeta, 1);
  }
  double sendIntra = 0, sendInter = 0;
  if (c.pp > 1) {
    int64_t elements = c.microBatch * model.transformer.seq * model.transformer.hidden;
    if (c.sequenceParallel)
      elements /= c.tp;
    sendIntra = transfer(static_cast<double>(elements) * activationBytes, cluster.intraBandwidth);
    sendInter = transfer(static_cast<double>(elements) * activationBytes, cluster.interBandwidth);
  }
  double gatherN = static_cast<double>(paramShard), gatherBeta = bandwidth(g, paramAxes);
  double gradN = static_cast<double>(gradShard), gradBeta = bandwidth(g, gradAxes);
  unsigned scatterAxes = optimizerAxes & ~gradAxes;
  unsigned reduceAxes = g.present & ~gradAxes & ~scatterAxes;
  unsigned syncAxes = optimizerAxes & ~paramAxes;
  int64_t scatterDegree = degree(g, scatterAxes);
  double scatterBeta = bandwidth(g, scatterAxes), reduceBeta = bandwidth(g, reduceAxes),
         syncBeta = bandwidth(g, syncAxes);
  double reduceN = static_cast<double>(degree(g, reduceAxes)),
         syncN = static_cast<double>(degree(g, syncAxes));
  bool hostStepTransfer = onHostOptimizer != onHostParams;
  bool fullRecompute = c.activations == ir::ActivationMode::RecomputeFull;
  bool selectiveRecompute = c.activations == ir::ActivationMode::RecomputeSelective;

  double slowestStage = 0, slowestMicrobatch = 0;
  analysis::PassUnit forwardPass[3], backwardPass[3];
  for (const StageShape &shape : stageShapes) {
    double forwardCompute = 0, backwardCompute = 0, critical = 0, stepOverlap = 0, stepExposed = 0;
    size_t numGroups = shape.groups.size();
    assert(numGroups <= 3 && "a stage holds the embedding, layers and the head at most");
    critical +=
        static_cast<double>(shape.sendsForward) * (shape.interForward ? sendInter : sendIntra);
    critical +=
        static_cast<double>(shape.sendsBackward) * (shape.interBackward ? sendInter : sendIntra);
    for (size_t index = 0; index < numGroups; ++index) {
      const UnitGroup &group = shape.groups[index];
      // The backward pass visits the groups in reverse order.
      analysis::PassUnit &forwardUnit = forwardPass[index];
      analysis::PassUnit &backwardUnit = backwardPass[numGroups - 1 - index];
      double count = static_cast<double>(group.count);
      double forward = b * group.forwardFlopsPerSample;
      double recompute = fullRecompute        ? b * group.recomputeFullPerSample
                         : selectiveRecompute ? b * group.recomputeSelectivePerSample
                                              : 0;
      forwardUnit = analysis::PassUnit{0, 0, forward / flopRate, group.count};
      backwardUnit = analysis::PassUnit{0, 0, (recompute + 2 * forward) / flopRate, group.count};
      forwardCompute += count * forward / flopRate;
      backwardCompute += count * (recompute + 2 * forward) / flopRate;
      int sp = c.sequenceParallel ? 1 : 0;
      int tensorCalls = group.tensorForward[sp] + group.tensorBackward[sp] +
                        (fullRecompute ? group.tensorRecompute[sp] : 0);
      critical += count * tensorCalls * tensorCall;
      if (group.crossEntropy && c.tp > 1)
        critical += count * collective(t, 3 * b * s * t * activationBytes, tensorBeta, 1);
      double unitParams = static_cast<double>(group.params);
      if (onHostParams)
        critical += count * 2 *
                    transfer(static_cast<double>(ceilDiv(group.params, paramShard)) * bytes.params,
                             hostBeta);
      if (gradsOnHost)
        critical +=
            count *
            transfer(static_cast<double>(ceilDiv(group.params, gradShard)) * bytes.grads, hostBeta);
      if (paramAxes) {
        double gather = collective(gatherN, unitParams * bytes.params, gatherBeta, 1);
        forwardUnit.gather = gather;
        // Tied embeddings without a pipeline: the head's backward gathers the embedding again
        // (Lowering), before the head's compute.
        bool tiedEmbedding = shape.tiedEmbedParams > 0 && index == 0;
        bool tiedHead = shape.tiedEmbedParams > 0 && index + 1 == numGroups;
        if (!keep && !tiedEmbedding)
          backwardUnit.gather += gather;
        if (!keep && tiedHead)
          backwardUnit.gather += collective(
              gatherN, static_cast<double>(shape.tiedEmbedParams) * bytes.params, gatherBeta, 1);
      }
      if (c.sequenceParallel && c.tp > 1 && group.sequenceParallelParams > 0)
        backwardUnit.reduce += collective(
            t, static_cast<double>(group.sequenceParallelParams) * bytes.grads, tensorBeta, 2);
      if (gradAxes)
        backwardUnit.reduce += collective(gradN, unitParams * bytes.grads, gradBeta, 1);
      int64_t gradElements = ceilDiv(group.params, gradShard);
      if (scatterAxes) {
        stepOverlap +=
            count * collective(static_cast<double>(scatterDegree),
                               static_cast<double>(gradElements) * bytes.grads, scatterBeta, 1);
        gradElements = ceilDiv(gradElements, scatterDegree);
      }
      if (reduceAxes)
        stepOverlap += count * collective(reduceN, static_cast<double>(gradElements) * bytes.grads,
                                          reduceBeta, 2);
      if (onHostOptimizer && !gradAxes)
        stepExposed += count * transfer(static_cast<double>(gradElements) * bytes.grads, hostBeta);
      if (hostStepTransfer)
        stepExposed += count * transfer(static_cast<double>(ceilDiv(group.params, optimizerShard)) *
                                            bytes.params,
                                        hostBeta);
      if (syncAxes)
        stepExposed +=
            count *
            collective(syncN, static_cast<double>(ceilDiv(group.params, paramShard)) * bytes.params,
                       syncBeta, 1);
    }
    double exposedPerMicrobatch =
        critical + analysis::getPassExposedSeconds(ArrayRef(forwardPass, numGroups)) +
        analysis::getPassExposedSeconds(ArrayRef(backwardPass, numGroups));
    double computePerMicrobatch = forwardCompute + backwardCompute;
    double exposed = m * exposedPerMicrobatch +
                     analysis::getOverlapExposedSeconds(stepOverlap, backwardCompute) + stepExposed;
    slowestStage = std::max(slowestStage, m * computePerMicrobatch + exposed);
    slowestMicrobatch = std::max(slowestMicrobatch, computePerMicrobatch + exposedPerMicrobatch);
  }
  double bubble = static_cast<double>(c.pp - 1) * slowestMicrobatch / static_cast<double>(c.chunks);
  verdict.stepSeconds = slowestStage + bubble;
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
      std::vector<int64_t> microBatches = divisorsOf(globalBatch / dp);
      // Schedules: (schedule, chunks).
      std::vector<std::pair<ir::Schedule, int64_t>> schedules;
      if (pp == 1) {
        schedules.push_back({ir::Schedule::OneFOneB, 1});
      } else {
        schedules.push_back({ir::Schedule::OneFOneB, 1});
        schedules.push_back({ir::Schedule::GPipe, 1});
        for (int64_t v : divisorsOf(layers / pp))
          if (v > 1)
            schedules.push_back({ir::Schedule::Interleaved, v});
      }
      std::vector<std::pair<ir::ActivationMode, bool>> activationModes;
      for (ir::ActivationMode mode :
           {ir::ActivationMode::Keep, ir::ActivationMode::RecomputeSelective,
            ir::ActivationMode::RecomputeFull}) {
        activationModes.push_back({mode, false});
        if (tp > 1)
          activationModes.push_back({mode, true});
      }
      uint64_t innerCount = activationModes.size() * microBatches.size() * schedules.size();
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
                for (int64_t b : microBatches)
                  for (auto [schedule, chunks] : schedules) {
                    c.activations = mode;
                    c.sequenceParallel = sp;
                    c.microBatch = b;
                    c.microbatches = globalBatch / (b * dp);
                    c.schedule = schedule;
                    c.chunks = chunks;
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
        slot.mode = state == ir::State::Activations ? ir::PlacementMode::BatchSplit
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
     << "; norm = " << ir::toString(config.norm) << "; bias = " << (config.bias ? "true" : "false")
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
