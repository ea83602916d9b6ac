// Memory, communication and time of a run, computed by walking its StepPlan.
#include "placec/passes/Analysis.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"

#include <algorithm>
#include <cmath>
#include <map>
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

namespace {

using plan::Op;
using plan::OpKind;
using plan::Phase;

class Analyzer {
public:
  explicit Analyzer(const plan::StepPlan &plan)
      : plan(plan), run(*plan.run), strategy(*run.strategy), mesh(strategy.mesh), model(*run.model),
        cluster(*run.cluster) {}

  RunAnalysis analyze();

private:
  int64_t productOf(const std::vector<unsigned> &axes) const {
    int64_t result = 1;
    for (unsigned axis : axes)
      result *= mesh.axes[axis].size;
    return result;
  }
  int64_t shardDegree(ir::State state) const;
  /// Activation bytes of one layer for one micro-batch (Korthikanti et al. 2022, Table 2).
  double layerActivationBytes() const;
  /// Micro-batches whose activations a stage holds at its peak.
  double inFlight(int stage) const;
  StageMemory stageMemory(const plan::StagePlan &stage) const;

  /// The link an op of `stage` crosses.
  LinkClass linkOf(const Op &op, int stage) const;
  /// α–β time of one call of a collective or transfer made by `stage`.
  double callSeconds(const Op &op, int stage, double bytes) const;
  /// Bytes one device sends per call (ring algorithms).
  double sentBytesPerCall(const Op &op, double bytes) const;
  int64_t groupSize(const Op &op) const;

  const plan::StepPlan &plan;
  const ir::Run &run;
  const ir::Strategy &strategy;
  const ir::Mesh &mesh;
  const ir::Model &model;
  const ir::Cluster &cluster;
};

int64_t Analyzer::shardDegree(ir::State state) const {
  int64_t degree = 1;
  const ir::StatePlacement &placement = strategy.getPlacement(state);
  for (unsigned i = 0; i < mesh.axes.size(); ++i)
    if (mesh.axes[i].kind == ir::AxisKind::Batch &&
        (placement.axes[i].mode == ir::PlacementMode::Sharded ||
         placement.axes[i].mode == ir::PlacementMode::ShardedWithGather))
      degree *= mesh.axes[i].size;
  return degree;
}

double Analyzer::layerActivationBytes() const {
  double b = static_cast<double>(run.microBatch);
  double t = static_cast<double>(mesh.getDegree(ir::AxisKind::Tensor));
  if (model.kind == ir::ModelKind::Transformer)
    return getTransformerLayerActivationBytes(model.transformer, b, t, strategy.sequenceParallel,
                                              strategy.activationMode,
                                              ir::getActivationBytes(run.precision));
  if (model.kind == ir::ModelKind::Mlp) {
    // A linear layer keeps its input and its pre-activation output for the backward.
    double bytes = ir::getActivationBytes(run.precision);
    double width = static_cast<double>(model.mlp.width);
    if (strategy.activationMode == ir::ActivationMode::RecomputeFull)
      return bytes * b * width;
    return bytes * b * 2 * width;
  }
  return 0;
}

double Analyzer::inFlight(int stage) const {
  return getInFlightMicrobatches(plan.schedule, static_cast<int64_t>(plan.stages.size()),
                                 plan.microbatches, plan.chunks, stage);
}

StageMemory Analyzer::stageMemory(const plan::StagePlan &stage) const {
  StageMemory result;
  result.stage = stage.stage;
  ir::StateBytes bytes = ir::getStateBytes(run.precision, run.optimizer);
  const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
  const ir::StatePlacement &grads = strategy.getPlacement(ir::State::Grads);
  const ir::StatePlacement &optimizer = strategy.getPlacement(ir::State::Optimizer);
  const ir::StatePlacement &activations = strategy.getPlacement(ir::State::Activations);
  bool optimizerOnHost = optimizer.tier != ir::Tier::Device;
  // ZeRO-Offload: with the optimizer on the host, gradients sharded over a batch axis go there
  // after each micro-batch's reduce-scatter and accumulate there; replicated gradients
  // accumulate on the device until the step's reduction (the plan's device-to-host ops).
  bool gradsSharded = llvm::any_of(llvm::seq<unsigned>(0, mesh.axes.size()), [&](unsigned i) {
    return mesh.axes[i].kind == ir::AxisKind::Batch &&
           grads.axes[i].mode == ir::PlacementMode::Sharded;
  });
  bool gradsOnHost =
      grads.tier != ir::Tier::Device || (optimizerOnHost && !grads.tierExplicit && gradsSharded);
  int64_t paramShard = shardDegree(ir::State::Params);
  int64_t gradShard = shardDegree(ir::State::Grads);
  int64_t optimizerShard = shardDegree(ir::State::Optimizer);

  double paramElements = 0, largestUnit = 0, embedParams = 0;
  int64_t layersOnStage = 0;
  bool hasHead = false;
  for (unsigned index : stage.units) {
    const plan::Unit &unit = plan.units[index];
    paramElements += static_cast<double>(unit.params);
    largestUnit = std::max(largestUnit, static_cast<double>(unit.params));
    if (unit.layer >= 0 && unit.layer < model.getNumLayers())
      ++layersOnStage;
    if (model.kind == ir::ModelKind::Transformer && unit.layer < 0)
      embedParams = static_cast<double>(unit.params);
    hasHead |= model.kind == ir::ModelKind::Transformer && unit.layer >= model.getNumLayers();
  }
  double tiedEmbedParams =
      model.kind == ir::ModelKind::Transformer && model.transformer.tiedEmbeddings && hasHead
          ? embedParams
          : 0;
  double paramBytes = paramElements * bytes.params / static_cast<double>(paramShard);
  double gradBytes = paramElements * bytes.grads / static_cast<double>(gradShard);
  double optimizerBytes = paramElements * bytes.optimizer / static_cast<double>(optimizerShard);
  (params.tier == ir::Tier::Device ? result.device : result.host).params = paramBytes;
  (gradsOnHost ? result.host : result.device).grads = gradBytes;
  (optimizerOnHost ? result.host : result.device).optimizer = optimizerBytes;

  double activationBytes =
      static_cast<double>(layersOnStage) * layerActivationBytes() * inFlight(stage.stage);
  (activations.tier == ir::Tier::Device ? result.device : result.host).activations =
      activationBytes;

  // Transient buffers: gathered units (the one in use and the next, prefetched, or every unit
  // from its forward to its backward with keep_after_forward), a unit's full gradient before it
  // is reduce-scattered or sent to the host, a unit's parameters brought from the host.
  double transient = 0;
  bool gathers = llvm::any_of(stage.forward, [](const Op &op) {
    return op.kind == OpKind::AllGather && op.state == ir::State::Params;
  });
  if (gathers) {
    bool keep = llvm::any_of(params.axes,
                             [](const ir::AxisPlacement &axis) { return axis.keepAfterForward; });
    double gathered = keep ? paramElements : std::min<double>(2, stage.units.size()) * largestUnit;
    // Tied embeddings stay gathered from the embedding's forward through the head's (the plan's
    // Free of the embedding follows the head).
    if (!keep)
      gathered += tiedEmbedParams;
    transient += gathered * bytes.params;
  }
  if (gradShard > 1 || gradsOnHost)
    transient += largestUnit * bytes.grads;
  if (params.tier != ir::Tier::Device)
    transient += largestUnit * bytes.params / static_cast<double>(paramShard);
  result.device.transient = transient;
  result.device.peak = result.device.getPersistent() + result.device.activations + transient;
  result.host.peak = result.host.getPersistent() + result.host.activations;
  return result;
}

int64_t Analyzer::groupSize(const Op &op) const { return productOf(op.axes); }

LinkClass Analyzer::linkOf(const Op &op, int stage) const {
  if (op.kind == OpKind::HostToDevice || op.kind == OpKind::DeviceToHost)
    return LinkClass::Host;
  if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
    // Each device of `stage` exchanges with the device of the peer stage at the same
    // coordinates on every other axis; the boundary is inter-node when any such pair lies in
    // two nodes (the boundary between stages 3 and 4 of 8 stages of 2 ranks each on nodes of 8,
    // say, while the boundary between 2 and 3 stays inside a node).
    if (op.axes.empty() || op.peerStage < 0)
      return LinkClass::IntraNode;
    int64_t stride = mesh.getStride(op.axes[0]), size = mesh.axes[op.axes[0]].size;
    int64_t offset = (op.peerStage - stage) * stride;
    for (int64_t rank = 0, devices = mesh.getNumDevices(); rank < devices; ++rank)
      if ((rank / stride) % size == stage &&
          rank / cluster.devicesPerNode != (rank + offset) / cluster.devicesPerNode)
        return LinkClass::InterNode;
    return LinkClass::IntraNode;
  }
  // A group lies inside a node when the block spanned by its outermost axis divides the node.
  unsigned outermost = *std::min_element(op.axes.begin(), op.axes.end());
  int64_t span = mesh.getStride(outermost) * mesh.axes[outermost].size;
  if (groupSize(op) == 1 || cluster.devicesPerNode % span == 0)
    return LinkClass::IntraNode;
  return LinkClass::InterNode;
}

double Analyzer::sentBytesPerCall(const Op &op, double bytes) const {
  double n = static_cast<double>(groupSize(op));
  switch (op.kind) {
  case OpKind::AllReduce:
    return 2 * (n - 1) / n * bytes;
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
    return (n - 1) / n * bytes;
  case OpKind::Send:
  case OpKind::DeviceToHost:
  case OpKind::HostToDevice:
    return bytes;
  default:
    return 0;
  }
}

double Analyzer::callSeconds(const Op &op, int stage, double bytes) const {
  // Ring collectives in the α–β model: all-reduce 2(n−1)α + 2(n−1)/n·bytes/β, all-gather and
  // reduce-scatter (n−1)α + (n−1)/n·bytes/β (REFERENCE-NUMBERS §2).
  LinkClass link = linkOf(op, stage);
  double beta = link == LinkClass::Host        ? cluster.hostBandwidth.value_or(0)
                : link == LinkClass::IntraNode ? cluster.intraBandwidth
                                               : cluster.interBandwidth;
  if (beta <= 0)
    return 0;
  double n = static_cast<double>(groupSize(op));
  double alpha = cluster.latency;
  switch (op.kind) {
  case OpKind::AllReduce:
    return 2 * (n - 1) * alpha + sentBytesPerCall(op, bytes) / beta;
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
    return (n - 1) * alpha + sentBytesPerCall(op, bytes) / beta;
  case OpKind::Send:
  case OpKind::Recv:
  case OpKind::DeviceToHost:
  case OpKind::HostToDevice:
    return alpha + bytes / beta;
  default:
    return 0;
  }
}

RunAnalysis Analyzer::analyze() {
  RunAnalysis result;
  MemoryReport &memory = result.memory;
  memory.activationsKnown = model.kind != ir::ModelKind::Abstract;
  memory.deviceCapacity = cluster.deviceMemory;
  memory.hostCapacity = cluster.hostMemory;
  for (const plan::StagePlan &stage : plan.stages) {
    StageMemory stageResult = stageMemory(stage);
    if (memory.stages.empty() || stageResult.device.peak > memory.device.peak) {
      memory.device = stageResult.device;
      memory.host = stageResult.host;
    }
    memory.stages.push_back(stageResult);
  }
  memory.fitsDevice = memory.device.peak <= cluster.deviceMemory;
  if (cluster.hostMemory)
    memory.fitsHost =
        memory.host.peak * static_cast<double>(cluster.devicesPerNode) <= *cluster.hostMemory;

  // Communication: one entry per stage × collective × axis group × state × phase.
  double m = static_cast<double>(plan.microbatches);
  double flopRate = cluster.peakFlops * cluster.efficiency;
  TimeReport &time = result.time;
  double slowestStage = 0, slowestMicrobatch = 0;
  double computePerMicrobatchMax = 0, exposedMax = 0;
  for (const plan::StagePlan &stage : plan.stages) {
    std::map<std::tuple<int, std::vector<unsigned>, int, int>, size_t> index;
    auto account = [&](const Op &op) {
      if (op.kind == OpKind::Compute || op.kind == OpKind::Free ||
          op.kind == OpKind::OptimizerUpdate || op.kind == OpKind::Recv)
        return 0.0;
      double bytes = static_cast<double>(op.elements) * plan::getSize(op.dtype);
      double calls = op.perMicrobatch ? m : 1;
      auto key = std::make_tuple(static_cast<int>(op.kind), op.axes, static_cast<int>(op.state),
                                 static_cast<int>(op.phase));
      auto [it, inserted] = index.try_emplace(key, result.communication.size());
      if (inserted) {
        CommEntry entry;
        entry.stage = stage.stage;
        entry.axes = op.axes;
        for (size_t i = 0; i < op.axes.size(); ++i)
          entry.axis += (i ? "," : "") + mesh.axes[op.axes[i]].name;
        if (op.kind == OpKind::HostToDevice || op.kind == OpKind::DeviceToHost)
          entry.axis = "host";
        entry.groupSize = groupSize(op);
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
      entry.sentBytes += sentBytesPerCall(op, bytes) * calls;
      entry.timeSeconds += seconds * calls;
      return seconds;
    };

    // Per micro-batch: compute, and communication that overlaps with it (parameter gathers
    // and gradient reductions of the batch axes, prefetched one unit ahead or started as a
    // unit's backward ends) or not (tensor-parallel partial sums, pipeline sends, host
    // transfers). The passes are timed unit by unit (getPassExposedSeconds).
    double forwardCompute = 0, backwardCompute = 0;
    double critical = 0, stepOverlap = 0, stepExposed = 0;
    auto overlappable = [](const Op &op) {
      return (op.state == ir::State::Params && op.kind == OpKind::AllGather) ||
             (op.state == ir::State::Grads &&
              (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllReduce));
    };
    std::vector<size_t> positions;
    auto timePass = [&](const std::vector<Op> &ops, double &compute) {
      std::vector<PassUnit> units(getPassPositions(ops, positions));
      for (size_t i = 0; i < ops.size(); ++i) {
        const Op &op = ops[i];
        PassUnit &unit = units[positions[i]];
        if (op.kind == OpKind::Compute) {
          unit.compute += op.flops / flopRate;
          compute += op.flops / flopRate;
          continue;
        }
        double seconds = account(op);
        if (!overlappable(op))
          critical += seconds;
        else
          (op.kind == OpKind::AllGather ? unit.gather : unit.reduce) += seconds;
      }
      return getPassExposedSeconds(units);
    };
    double forwardExposed = timePass(stage.forward, forwardCompute);
    double backwardExposed = timePass(stage.backward, backwardCompute);
    for (const Op &op : stage.step) {
      double seconds = account(op);
      // Step-time gradient reductions start as the backward produces each unit's gradients.
      (overlappable(op) && op.state == ir::State::Grads ? stepOverlap : stepExposed) += seconds;
    }
    double exposedPerMicrobatch = critical + forwardExposed + backwardExposed;
    double computePerMicrobatch = forwardCompute + backwardCompute;
    double exposed = m * exposedPerMicrobatch +
                     getOverlapExposedSeconds(stepOverlap, backwardCompute) + stepExposed;
    double stageSeconds = m * computePerMicrobatch + exposed;
    if (stageSeconds >= slowestStage) {
      slowestStage = stageSeconds;
      computePerMicrobatchMax = computePerMicrobatch;
      exposedMax = exposed;
    }
    slowestMicrobatch = std::max(slowestMicrobatch, computePerMicrobatch + exposedPerMicrobatch);
  }

  // Time (Narayanan et al. 2021): model FLOPs 72·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) for a
  // transformer, 6·Ψ per sample for an mlp; bubble (p − 1)/v micro-batch times.
  double globalBatch = static_cast<double>(run.globalBatch);
  if (model.kind == ir::ModelKind::Transformer) {
    const ir::TransformerConfig &config = model.transformer;
    double s = config.seq, l = static_cast<double>(config.layers), h = config.hidden,
           v = config.vocab;
    time.flopsPerStep = 72 * globalBatch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
  } else if (model.kind == ir::ModelKind::Mlp) {
    time.flopsPerStep = 6 * static_cast<double>(model.numParams) * globalBatch;
  } else {
    time.known = false;
  }
  double p = static_cast<double>(plan.stages.size());
  time.computeSeconds = m * computePerMicrobatchMax;
  time.exposedCommSeconds = exposedMax;
  time.bubbleSeconds = (p - 1) * slowestMicrobatch / static_cast<double>(plan.chunks);
  time.stepSeconds = slowestStage + time.bubbleSeconds;
  if (time.known && time.stepSeconds > 0) {
    double devices = static_cast<double>(mesh.getNumDevices());
    time.mfu = time.flopsPerStep / (time.stepSeconds * devices * cluster.peakFlops);
    double tokens = model.kind == ir::ModelKind::Transformer
                        ? globalBatch * static_cast<double>(model.transformer.seq)
                        : globalBatch;
    time.tokensPerSecond = tokens / time.stepSeconds;
  }
  return result;
}

} // namespace

double getTransformerLayerActivationBytes(const ir::TransformerConfig &config, double microBatch,
                                          double tensorDegree, bool sequenceParallel,
                                          ir::ActivationMode mode, unsigned activationBytes) {
  double s = static_cast<double>(config.seq), h = static_cast<double>(config.hidden),
         a = static_cast<double>(config.heads), t = tensorDegree;
  double scale = activationBytes / 2.0;
  double sbh = s * microBatch * h;
  double attention = 5 * a * s / (h * t);
  bool sp = sequenceParallel;
  switch (mode) {
  case ir::ActivationMode::Keep:
    return scale * sbh * (sp ? 34 / t + attention : 10 + 24 / t + attention);
  case ir::ActivationMode::RecomputeSelective:
    return scale * sbh * (sp ? 34 / t : 10 + 24 / t);
  case ir::ActivationMode::RecomputeFull:
    return scale * 2 * sbh / (sp ? t : 1);
  }
  return 0;
}

double getInFlightMicrobatches(ir::Schedule schedule, int64_t stages, int64_t microbatches,
                               int64_t chunks, int stage) {
  double m = static_cast<double>(microbatches), p = static_cast<double>(stages);
  if (stages <= 1)
    return 1;
  // Narayanan et al. 2021 §2.2 and Korthikanti et al. 2022 §4.2.3: with 1F1B stage s holds
  // min(p − s, m) micro-batches; GPipe holds all m; interleaving multiplies by 1 + (p−1)/(p·v).
  switch (schedule) {
  case ir::Schedule::GPipe:
    return m;
  case ir::Schedule::OneFOneB:
    return std::min(p - stage, m);
  case ir::Schedule::Interleaved: {
    double v = static_cast<double>(chunks);
    return std::min(p - stage, m) * (1 + (p - 1) / (p * v));
  }
  }
  return 1;
}

double getOverlapExposedSeconds(double commSeconds, double computeSeconds) {
  if (commSeconds <= 0)
    return 0;
  double kappa = kOverlapComputeSlowdown;
  return std::max(commSeconds - computeSeconds, commSeconds * kappa / (1 + kappa));
}

size_t getPassPositions(const std::vector<plan::Op> &ops, std::vector<size_t> &positions) {
  positions.assign(ops.size(), 0);
  // Forward scan: the position of each compute op (consecutive computes of one unit, such as a
  // recomputation and its backward, share one), and of the ops after it.
  size_t count = 0;
  int lastUnit = -2;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::Compute && (count == 0 || ops[i].unit != lastUnit)) {
      ++count;
      lastUnit = ops[i].unit;
    }
    positions[i] = count == 0 ? 0 : count - 1;
  }
  // Backward scan: a parameter gather belongs to the next compute.
  size_t next = count == 0 ? 0 : count - 1;
  for (size_t i = ops.size(); i-- > 0;) {
    if (ops[i].kind == OpKind::Compute)
      next = positions[i];
    else if (ops[i].kind == OpKind::AllGather && ops[i].state == ir::State::Params)
      positions[i] = next;
  }
  return std::max<size_t>(count, 1);
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
    if (unit.count == 1) {
      exposed += getOverlapExposedSeconds(nextGather + previousReduce, unit.compute);
    } else {
      // A run of identical units: the first overlaps the previous unit's reduction, the middle
      // ones their neighbours', the last the next unit's gather.
      exposed += getOverlapExposedSeconds(unit.gather + previousReduce, unit.compute) +
                 static_cast<double>(unit.count - 2) *
                     getOverlapExposedSeconds(unit.gather + unit.reduce, unit.compute) +
                 getOverlapExposedSeconds(nextGather + unit.reduce, unit.compute);
    }
    previousReduce = unit.reduce;
  }
  // The last unit's reduction ends the pass.
  return exposed + previousReduce;
}

RunAnalysis analyze(const plan::StepPlan &plan) { return Analyzer(plan).analyze(); }

} // namespace placec::analysis
