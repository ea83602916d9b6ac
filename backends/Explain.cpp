// --explain: re-derives every memory, communication and time figure of a run from its step
// plan's units and ops and its placement, and records each formula with the numbers put in. A
// figure that disagrees with the analysis carries the analysis's value, so the explanation doubles
// as a cross-check of passes/Analysis.cpp.
#include "ReportSupport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <tuple>

using namespace llvm;

namespace placec::report {

namespace {

using plan::Op;
using plan::OpKind;
using plan::Phase;

/// A number in a formula: exact integers as written, others with 4 significant digits.
std::string num(double value) {
  if (std::fabs(value) < 1e15 && value == std::round(value))
    return formatInteger(value);
  return fmt::format("{:.4g}", value);
}

/// `1 micro-batch`, `16 micro-batches`.
std::string microbatches(double count) {
  return num(count) + (count == 1 ? " micro-batch" : " micro-batches");
}

/// Formats a value in its unit for the right-hand side of a formula.
std::string formatValue(double value, StringRef unit) {
  if (unit == "B")
    return formatBytes(value);
  if (unit == "s")
    return formatSeconds(value);
  if (unit == "%")
    return formatPercent(value);
  if (unit == "tokens/s")
    return formatCount(value) + " tokens/s";
  if (unit == "calls")
    return formatInteger(value);
  return formatSignificant(value);
}

bool differs(double a, double b) { return std::fabs(a - b) > 1e-6 * std::max(1.0, std::fabs(b)); }

class Explainer {
public:
  explicit Explainer(const RunReport &report)
      : plan(*report.plan), run(*report.run), strategy(*run.strategy), mesh(strategy.mesh),
        model(*run.model), cluster(*run.cluster), analysis(report.analysis) {}

  RunExplanation explain();

private:
  struct Shard {
    int64_t degree = 1;
    std::string text; ///< ` / 64 (gather over dp)` or ` (replicated over dp = 64)`.
  };
  Shard shardOf(ir::State state) const;
  void explainMemory(RunExplanation &result);
  void explainCommunication(RunExplanation &result);
  void explainTime(RunExplanation &result);
  std::string activationFormula(double &perLayer) const;
  double inFlight(int stage, std::string &why) const;
  double beta(analysis::LinkClass link) const;
  /// The α–β time of one call of `op` moving `bytes`, on the link the analysis found for it.
  double callSeconds(const Op &op, double bytes, int stage) const;
  const analysis::CommEntry *findEntry(int stage, const Op &op) const;

  Explanation make(std::string figure, std::string formula, double value, std::string unit,
                   std::optional<double> analysisValue = std::nullopt) const {
    Explanation explanation;
    explanation.figure = std::move(figure);
    explanation.formula = std::move(formula);
    explanation.value = value;
    explanation.unit = std::move(unit);
    if (analysisValue && differs(value, *analysisValue))
      explanation.analysisValue = analysisValue;
    return explanation;
  }

  const plan::StepPlan &plan;
  const ir::Run &run;
  const ir::Strategy &strategy;
  const ir::Mesh &mesh;
  const ir::Model &model;
  const ir::Cluster &cluster;
  const analysis::RunAnalysis &analysis;
};

Explainer::Shard Explainer::shardOf(ir::State state) const {
  Shard shard;
  const ir::StatePlacement &placement = strategy.getPlacement(state);
  std::vector<std::string> split, replicated;
  for (unsigned i = 0; i < mesh.axes.size() && i < placement.axes.size(); ++i) {
    const ir::Axis &axis = mesh.axes[i];
    if (axis.kind != ir::AxisKind::Batch)
      continue;
    switch (placement.axes[i].mode) {
    case ir::PlacementMode::Sharded:
      shard.degree *= axis.size;
      split.push_back(fmt::format("shard over {}", axis.name));
      break;
    case ir::PlacementMode::ShardedWithGather:
      shard.degree *= axis.size;
      split.push_back(fmt::format("gather over {}", axis.name));
      break;
    default:
      if (axis.size > 1) {
        replicated.push_back(fmt::format("{} = {}", axis.name, axis.size));
      }
      break;
    }
  }
  if (shard.degree > 1)
    shard.text = fmt::format(" / {} ({})", shard.degree, llvm::join(split, ", "));
  else if (!replicated.empty())
    shard.text = fmt::format(" (replicated over {})", llvm::join(replicated, ", "));
  return shard;
}

double Explainer::inFlight(int stage, std::string &why) const {
  double m = static_cast<double>(plan.microbatches);
  double p = static_cast<double>(plan.stages.size());
  if (plan.stages.size() <= 1) {
    why = "1 micro-batch in flight (no pipeline)";
    return 1;
  }
  switch (plan.schedule) {
  case ir::Schedule::GPipe:
    why = fmt::format("{} in flight (gpipe keeps all m)", microbatches(m));
    return m;
  case ir::Schedule::OneFOneB: {
    double value = std::min(p - stage, m);
    why = fmt::format("{} in flight (1f1b: min(p - stage, m) = min({} - {}, {}))",
                      microbatches(value), num(p), stage, num(m));
    return value;
  }
  case ir::Schedule::Interleaved: {
    double v = static_cast<double>(plan.chunks);
    double value = std::min(p - stage, m) * (1 + (p - 1) / (p * v));
    why = fmt::format("{} in flight (interleaved: min(p - stage, m) × (1 + (p - 1)/(p·v)) "
                      "= min({} - {}, {}) × (1 + {}/({}·{})))",
                      microbatches(value), num(p), stage, num(m), num(p - 1), num(p), num(v));
    return value;
  }
  }
  return 1;
}

std::string Explainer::activationFormula(double &perLayer) const {
  double b = static_cast<double>(run.microBatch);
  int64_t tensorDegree = mesh.getDegree(ir::AxisKind::Tensor);
  double t = static_cast<double>(tensorDegree);
  unsigned elementBytes = ir::getActivationBytes(run.precision);
  double scale = elementBytes / 2.0;
  if (model.kind == ir::ModelKind::Transformer) {
    const ir::TransformerConfig &config = model.transformer;
    double s = static_cast<double>(config.seq), h = static_cast<double>(config.hidden),
           a = static_cast<double>(config.heads);
    double sbh = s * b * h;
    double attention = 5 * a * s / (h * t);
    bool sp = strategy.sequenceParallel;
    std::string symbols, numbers;
    std::string sbhNumbers = fmt::format("{}·{}·{}", num(s), num(b), num(h));
    std::string attentionNumbers =
        t > 1 ? fmt::format("5·{}·{}/({}·{})", num(a), num(s), num(h), num(t))
              : fmt::format("5·{}·{}/{}", num(a), num(s), num(h));
    std::string attentionSymbols = t > 1 ? "5·a·s/(h·t)" : "5·a·s/h";
    double coefficient = 0;
    switch (strategy.activationMode) {
    case ir::ActivationMode::Keep:
      if (sp) {
        coefficient = 34 / t + attention;
        symbols = "s·b·h·(34/t + " + attentionSymbols + ")";
        numbers = fmt::format("{}·(34/{} + {})", sbhNumbers, num(t), attentionNumbers);
      } else if (t > 1) {
        coefficient = 10 + 24 / t + attention;
        symbols = "s·b·h·(10 + 24/t + " + attentionSymbols + ")";
        numbers = fmt::format("{}·(10 + 24/{} + {})", sbhNumbers, num(t), attentionNumbers);
      } else {
        coefficient = 34 + attention;
        symbols = "s·b·h·(34 + " + attentionSymbols + ")";
        numbers = fmt::format("{}·(34 + {})", sbhNumbers, attentionNumbers);
      }
      break;
    case ir::ActivationMode::RecomputeSelective:
      if (sp) {
        coefficient = 34 / t;
        symbols = "s·b·h·34/t";
        numbers = fmt::format("{}·34/{}", sbhNumbers, num(t));
      } else if (t > 1) {
        coefficient = 10 + 24 / t;
        symbols = "s·b·h·(10 + 24/t)";
        numbers = fmt::format("{}·(10 + 24/{})", sbhNumbers, num(t));
      } else {
        coefficient = 34;
        symbols = "s·b·h·34";
        numbers = fmt::format("{}·34", sbhNumbers);
      }
      break;
    case ir::ActivationMode::RecomputeFull:
      coefficient = sp ? 2 / t : 2;
      symbols = sp ? "2·s·b·h/t (layer inputs only)" : "2·s·b·h (layer inputs only)";
      numbers = sp ? fmt::format("2·{}/{}", sbhNumbers, num(t)) : fmt::format("2·{}", sbhNumbers);
      break;
    }
    perLayer = scale * sbh * coefficient;
    std::string text = fmt::format("{} B per layer [{}]", numbers, symbols);
    if (elementBytes != 2)
      text += fmt::format(" × {} ({}-byte activations)", num(scale), elementBytes);
    return text;
  }
  if (model.kind == ir::ModelKind::Mlp) {
    double width = static_cast<double>(model.mlp.width);
    bool full = strategy.activationMode == ir::ActivationMode::RecomputeFull;
    perLayer = elementBytes * b * (full ? 1 : 2) * width;
    return full ? fmt::format("{}·{}·{} B per layer [b·width input]", num(b), num(width),
                              elementBytes)
                : fmt::format("{}·2·{}·{} B per layer [b·(input + pre-activation)·width]", num(b),
                              num(width), elementBytes);
  }
  perLayer = 0;
  return "";
}

void Explainer::explainMemory(RunExplanation &result) {
  const analysis::MemoryReport &memory = analysis.memory;
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
  result.stage = stage.stage;

  ir::StateBytes bytes = ir::getStateBytes(run.precision, run.optimizer);
  const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
  const ir::StatePlacement &grads = strategy.getPlacement(ir::State::Grads);
  const ir::StatePlacement &optimizer = strategy.getPlacement(ir::State::Optimizer);
  const ir::StatePlacement &activations = strategy.getPlacement(ir::State::Activations);
  bool optimizerOnHost = optimizer.tier != ir::Tier::Device;
  // ZeRO-Offload: with the optimizer on the host, gradients sharded over a batch axis go there
  // after each reduce-scatter; replicated gradients accumulate on the device until the step.
  bool gradsSharded = false;
  for (unsigned i = 0; i < mesh.axes.size() && i < grads.axes.size(); ++i)
    gradsSharded |= mesh.axes[i].kind == ir::AxisKind::Batch &&
                    grads.axes[i].mode == ir::PlacementMode::Sharded;
  bool gradsOnHost =
      grads.tier != ir::Tier::Device || (optimizerOnHost && !grads.tierExplicit && gradsSharded);
  bool paramsOnHost = params.tier != ir::Tier::Device;

  double elements = 0, largest = 0, embedParams = 0;
  std::string largestName;
  int64_t layersOnStage = 0;
  bool hasHead = false;
  for (unsigned index : stage.units) {
    const plan::Unit &unit = plan.units[index];
    if (model.kind == ir::ModelKind::Transformer && unit.layer < 0)
      embedParams = static_cast<double>(unit.params);
    hasHead |= model.kind == ir::ModelKind::Transformer && unit.layer >= model.getNumLayers();
    elements += static_cast<double>(unit.params);
    if (static_cast<double>(unit.params) > largest) {
      largest = static_cast<double>(unit.params);
      largestName = unit.name;
    }
    if (unit.layer >= 0 && unit.layer < model.getNumLayers())
      ++layersOnStage;
  }
  int64_t tensorDegree = mesh.getDegree(ir::AxisKind::Tensor);
  std::string elementsText = num(elements);
  if (plan.stages.size() > 1 && !stage.units.empty())
    elementsText +=
        fmt::format(" (stage {}: {}..{})", stage.stage, plan.units[stage.units.front()].name,
                    plan.units[stage.units.back()].name);
  if (tensorDegree > 1)
    elementsText += fmt::format(" (per device after the tensor split over {})", tensorDegree);

  const analysis::StageMemory &reported = memory.stages[stageIndex];
  auto add = [&](bool onHost, Explanation explanation) {
    (onHost ? result.hostMemory : result.deviceMemory).push_back(std::move(explanation));
  };
  auto reportedOf = [&](bool onHost) -> const analysis::MemoryBreakdown & {
    return onHost ? reported.host : reported.device;
  };

  Shard paramShard = shardOf(ir::State::Params);
  double paramBytes = elements * bytes.params / static_cast<double>(paramShard.degree);
  add(paramsOnHost,
      make("params", fmt::format("{} × {} B{}", elementsText, bytes.params, paramShard.text),
           paramBytes, "B", reportedOf(paramsOnHost).params));

  Shard gradShard = shardOf(ir::State::Grads);
  double gradBytes = elements * bytes.grads / static_cast<double>(gradShard.degree);
  add(gradsOnHost,
      make("grads",
           fmt::format("{} × {} B{}{}", num(elements), bytes.grads, gradShard.text,
                       gradsOnHost && !grads.tierExplicit
                           ? " (on the host with the optimizer, after each reduce-scatter)"
                           : ""),
           gradBytes, "B", reportedOf(gradsOnHost).grads));

  Shard optimizerShard = shardOf(ir::State::Optimizer);
  double optimizerBytes = elements * bytes.optimizer / static_cast<double>(optimizerShard.degree);
  add(optimizerOnHost,
      make("optimizer",
           fmt::format("{} × {}{}", num(elements),
                       describeOptimizerBytes(run.precision, run.optimizer), optimizerShard.text),
           optimizerBytes, "B", reportedOf(optimizerOnHost).optimizer));

  double device[3] = {paramsOnHost ? 0 : paramBytes, gradsOnHost ? 0 : gradBytes,
                      optimizerOnHost ? 0 : optimizerBytes};
  double host[3] = {paramsOnHost ? paramBytes : 0, gradsOnHost ? gradBytes : 0,
                    optimizerOnHost ? optimizerBytes : 0};
  double deviceStates = device[0] + device[1] + device[2];
  double hostStates = host[0] + host[1] + host[2];
  result.deviceMemory.push_back(
      make("model states",
           fmt::format("params + grads + optimizer = {} + {} + {}", formatBytes(device[0]),
                       formatBytes(device[1]), formatBytes(device[2])),
           deviceStates, "B", reported.device.getPersistent()));

  // Activations.
  bool activationsOnHost = activations.tier != ir::Tier::Device;
  double activationBytes = 0;
  if (model.kind == ir::ModelKind::Abstract) {
    add(activationsOnHost,
        make("activations", "unknown: an abstract model gives its parameter count only", 0, ""));
  } else {
    double perLayer = 0;
    std::string perLayerText = activationFormula(perLayer);
    std::string why;
    double flight = inFlight(stage.stage, why);
    activationBytes = static_cast<double>(layersOnStage) * perLayer * flight;
    add(activationsOnHost,
        make("activations", fmt::format("{} layers × {} × {}", layersOnStage, perLayerText, why),
             activationBytes, "B", reportedOf(activationsOnHost).activations));
  }

  // Transient buffers.
  std::vector<std::string> parts;
  double transient = 0;
  bool gathers = llvm::any_of(stage.forward, [](const Op &op) {
    return op.kind == OpKind::AllGather && op.state == ir::State::Params;
  });
  if (gathers) {
    bool keep = llvm::any_of(params.axes,
                             [](const ir::AxisPlacement &axis) { return axis.keepAfterForward; });
    if (keep) {
      transient += elements * bytes.params;
      parts.push_back(fmt::format("{} × {} B (every gathered unit, kept from its forward to its "
                                  "backward)",
                                  num(elements), bytes.params));
    } else {
      double units = std::min<double>(2, static_cast<double>(stage.units.size()));
      transient += units * largest * bytes.params;
      parts.push_back(
          fmt::format("{} × {} ({}, the largest unit) × {} B (gathered params: the unit "
                      "in use{})",
                      num(units), num(largest), largestName, bytes.params,
                      units > 1 ? " and the next, prefetched" : ""));
      // Tied embeddings stay gathered from the embedding's forward through the head's.
      if (model.kind == ir::ModelKind::Transformer && model.transformer.tiedEmbeddings && hasHead &&
          embedParams > 0) {
        transient += embedParams * bytes.params;
        parts.push_back(fmt::format("{} × {} B (the tied embedding, gathered from its forward "
                                    "through the head's)",
                                    num(embedParams), bytes.params));
      }
    }
  }
  if (gradShard.degree > 1 || gradsOnHost) {
    transient += largest * bytes.grads;
    parts.push_back(fmt::format("{} × {} B (a unit's full gradient before it is {})", num(largest),
                                bytes.grads,
                                gradShard.degree > 1 ? "reduce-scattered" : "sent to the host"));
  }
  if (paramsOnHost) {
    transient += largest * bytes.params / static_cast<double>(paramShard.degree);
    parts.push_back(fmt::format("{} × {} B / {} (a unit's params brought from the host)",
                                num(largest), bytes.params, paramShard.degree));
  }
  result.deviceMemory.push_back(make("transient",
                                     parts.empty()
                                         ? "none (nothing is gathered, reduced per unit or brought "
                                           "from the host)"
                                         : llvm::join(parts, " + "),
                                     transient, "B", reported.device.transient));

  double deviceActivations = activationsOnHost ? 0 : activationBytes;
  double peak = deviceStates + deviceActivations + transient;
  result.deviceMemory.push_back(
      make("peak",
           fmt::format("model states + activations + transient = {} + {} + {}",
                       formatBytes(deviceStates), formatBytes(deviceActivations),
                       formatBytes(transient)),
           peak, "B", reported.device.peak));
  result.deviceMemory.push_back(
      make("use of device memory",
           fmt::format("peak / device_memory = {} / {}", formatBytes(peak),
                       formatCapacity(cluster.deviceMemory)),
           peak / cluster.deviceMemory, "%"));

  if (!result.hostMemory.empty()) {
    double hostActivations = activationsOnHost ? activationBytes : 0;
    double hostPeak = hostStates + hostActivations;
    result.hostMemory.push_back(
        make("peak",
             fmt::format("params + grads + optimizer + activations on the host = {} + {} + "
                         "{} + {}",
                         formatBytes(host[0]), formatBytes(host[1]), formatBytes(host[2]),
                         formatBytes(hostActivations)),
             hostPeak, "B", reported.host.peak));
    std::string capacity =
        cluster.hostMemory ? fmt::format(" (host_memory {})", formatCapacity(*cluster.hostMemory))
                           : std::string(" (host_memory not given: not checked)");
    result.hostMemory.push_back(
        make("per node",
             fmt::format("peak × devices_per_node = {} × {}{}", formatBytes(hostPeak),
                         cluster.devicesPerNode, capacity),
             hostPeak * static_cast<double>(cluster.devicesPerNode), "B"));
  }
}

double Explainer::beta(analysis::LinkClass link) const {
  switch (link) {
  case analysis::LinkClass::Host:
    return cluster.hostBandwidth.value_or(0);
  case analysis::LinkClass::IntraNode:
    return cluster.intraBandwidth;
  case analysis::LinkClass::InterNode:
    return cluster.interBandwidth;
  }
  return 0;
}

const analysis::CommEntry *Explainer::findEntry(int stage, const Op &op) const {
  for (const analysis::CommEntry &entry : analysis.communication)
    if (entry.stage == stage && entry.collective == op.kind && entry.axes == op.axes &&
        entry.state == op.state && entry.phase == op.phase)
      return &entry;
  return nullptr;
}

/// Latency steps per call: 2(n - 1) for an all-reduce, n - 1 for an all-gather or reduce-scatter,
/// one for a point-to-point or host transfer.
static double latencySteps(OpKind kind, double n) {
  switch (kind) {
  case OpKind::AllReduce:
    return 2 * (n - 1);
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
    return n - 1;
  default:
    return 1;
  }
}

/// The fraction of a call's buffer each device sends with ring algorithms.
static double sentFactor(OpKind kind, double n) {
  switch (kind) {
  case OpKind::AllReduce:
    return 2 * (n - 1) / n;
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
    return (n - 1) / n;
  default:
    return 1;
  }
}

double Explainer::callSeconds(const Op &op, double bytes, int stage) const {
  const analysis::CommEntry *entry = findEntry(stage, op);
  analysis::LinkClass link = entry ? entry->link : analysis::LinkClass::IntraNode;
  double bandwidth = beta(link);
  if (bandwidth <= 0)
    return 0;
  double n = static_cast<double>(entry ? entry->groupSize : 1);
  return latencySteps(op.kind, n) * cluster.latency + sentFactor(op.kind, n) * bytes / bandwidth;
}

static bool isTraffic(const Op &op) {
  return op.kind != OpKind::Compute && op.kind != OpKind::Free &&
         op.kind != OpKind::OptimizerUpdate && op.kind != OpKind::Recv;
}

void Explainer::explainCommunication(RunExplanation &result) {
  double m = static_cast<double>(plan.microbatches);
  for (const analysis::CommEntry &entry : analysis.communication) {
    std::vector<Explanation> lines;
    double perMicrobatchCalls = 0, perStepCalls = 0, perMicrobatchElements = 0, perStepElements = 0;
    unsigned elementSize = 2;
    std::string dtype;
    for (const plan::StagePlan &stage : plan.stages) {
      if (stage.stage != entry.stage)
        continue;
      for (const std::vector<Op> *ops : {&stage.forward, &stage.backward, &stage.step})
        for (const Op &op : *ops) {
          if (!isTraffic(op) || op.kind != entry.collective || op.axes != entry.axes ||
              op.state != entry.state || op.phase != entry.phase)
            continue;
          elementSize = plan::getSize(op.dtype);
          dtype = plan::toString(op.dtype).str();
          if (op.perMicrobatch) {
            ++perMicrobatchCalls;
            perMicrobatchElements += static_cast<double>(op.elements);
          } else {
            ++perStepCalls;
            perStepElements += static_cast<double>(op.elements);
          }
        }
    }
    double n = static_cast<double>(entry.groupSize);
    std::string what = entry.link == analysis::LinkClass::Host ? " over the host link"
                       : entry.axis.empty()                    ? ""
                                                               : " over " + entry.axis;

    // Count.
    double count = perMicrobatchCalls * m + perStepCalls;
    std::vector<std::string> countParts;
    if (perMicrobatchCalls > 0)
      countParts.push_back(
          fmt::format("{} per micro-batch × {}", num(perMicrobatchCalls), microbatches(m)));
    if (perStepCalls > 0)
      countParts.push_back(fmt::format("{} once per step", num(perStepCalls)));
    lines.push_back(make("count", llvm::join(countParts, " + "), count, "calls",
                         static_cast<double>(entry.count)));

    // Bytes.
    double total = (perMicrobatchElements * m + perStepElements) * elementSize;
    std::vector<std::string> totalParts;
    if (perMicrobatchCalls > 0)
      totalParts.push_back(fmt::format("{} elements × {} B ({}) × {}", num(perMicrobatchElements),
                                       elementSize, dtype, microbatches(m)));
    if (perStepCalls > 0)
      totalParts.push_back(
          fmt::format("{} elements × {} B ({})", num(perStepElements), elementSize, dtype));
    lines.push_back(make("total", llvm::join(totalParts, " + "), total, "B", entry.totalBytes));
    double message = count > 0 ? total / count : 0;
    lines.push_back(make("message",
                         fmt::format("total / count = {} / {}", formatBytes(total), num(count)),
                         message, "B", entry.messageBytes));

    double factor = sentFactor(entry.collective, n);
    double sent = factor * total;
    std::string sentFormula;
    switch (entry.collective) {
    case OpKind::AllReduce:
      sentFormula = fmt::format("2 × ({} - 1)/{} × total (ring all-reduce) = 2 × {}/{} × {}",
                                num(n), num(n), num(n - 1), num(n), formatBytes(total));
      break;
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
      sentFormula =
          fmt::format("({} - 1)/{} × total (ring {}) = {}/{} × {}", num(n), num(n),
                      collectiveName(entry.collective), num(n - 1), num(n), formatBytes(total));
      break;
    default:
      sentFormula = "total (point to point)";
      break;
    }
    lines.push_back(make("sent", sentFormula, sent, "B", entry.sentBytes));

    // Time.
    double bandwidth = beta(entry.link);
    double steps = latencySteps(entry.collective, n);
    double seconds = bandwidth > 0 ? count * steps * cluster.latency + sent / bandwidth : 0;
    std::string linkName = entry.link == analysis::LinkClass::Host        ? "host_bandwidth"
                           : entry.link == analysis::LinkClass::IntraNode ? "intra_bandwidth"
                                                                          : "inter_bandwidth";
    std::string timeFormula;
    if (bandwidth <= 0)
      timeFormula = fmt::format("{} is not given: not timed", linkName);
    else if (cluster.latency > 0)
      timeFormula = fmt::format("count × {} × latency + sent / {} = {} × {} × {} + {} / {}",
                                entry.collective == OpKind::AllReduce ? "2(n - 1)"
                                : isCollective(entry.collective)      ? "(n - 1)"
                                                                      : "1",
                                linkName, num(count), num(steps), formatSeconds(cluster.latency),
                                formatBytes(sent), formatBandwidth(bandwidth));
    else
      timeFormula = fmt::format("sent / {} = {} / {}", linkName, formatBytes(sent),
                                formatBandwidth(bandwidth));
    lines.push_back(make("time", timeFormula, seconds, "s", entry.timeSeconds));

    std::string figure =
        fmt::format("{} {}{} ({})", collectiveName(entry.collective),
                    ir::toString(entry.state).str(), what, plan::toString(entry.phase).str());
    if (plan.stages.size() > 1)
      figure += fmt::format(", stage {}", entry.stage);
    result.communication.push_back({std::move(figure), std::move(lines)});
  }
}

void Explainer::explainTime(RunExplanation &result) {
  const analysis::TimeReport &time = analysis.time;
  double m = static_cast<double>(plan.microbatches);
  double flopRate = cluster.peakFlops * cluster.efficiency;

  // Per stage, mirroring the analysis: compute per micro-batch, and the communication that the
  // compute does not hide.
  struct StageTime {
    int stage = 0;
    double forwardFlops = 0, backwardFlops = 0, recomputeFlops = 0;
    double computePerMicrobatch = 0, exposedPerMicrobatch = 0, exposed = 0, total = 0;
  };
  std::vector<StageTime> stages;
  for (const plan::StagePlan &stage : plan.stages) {
    StageTime st;
    st.stage = stage.stage;
    auto overlappable = [](const Op &op) {
      return (op.state == ir::State::Params && op.kind == OpKind::AllGather) ||
             (op.state == ir::State::Grads &&
              (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllReduce));
    };
    double forwardCompute = 0, backwardCompute = 0, critical = 0, stepOverlap = 0, stepExposed = 0;
    auto seconds = [&](const Op &op) {
      return callSeconds(op, static_cast<double>(op.elements) * plan::getSize(op.dtype),
                         stage.stage);
    };
    // Each pass unit by unit: gathers before a unit's compute, reductions after it.
    std::vector<size_t> positions;
    auto passUnits = [&](const std::vector<Op> &ops, bool backward, double &compute) {
      std::vector<analysis::PassUnit> units(analysis::getPassPositions(ops, positions));
      for (size_t i = 0; i < ops.size(); ++i) {
        const Op &op = ops[i];
        analysis::PassUnit &unit = units[positions[i]];
        if (op.kind == OpKind::Compute) {
          if (!backward)
            st.forwardFlops += op.flops;
          else
            (op.compute == plan::ComputeKind::Recompute ? st.recomputeFlops : st.backwardFlops) +=
                op.flops;
          unit.compute += op.flops / flopRate;
          compute += op.flops / flopRate;
        } else if (isTraffic(op)) {
          if (!overlappable(op))
            critical += seconds(op);
          else
            (op.kind == OpKind::AllGather ? unit.gather : unit.reduce) += seconds(op);
        }
      }
      return units;
    };
    std::vector<analysis::PassUnit> forwardUnits = passUnits(stage.forward, false, forwardCompute);
    std::vector<analysis::PassUnit> backwardUnits =
        passUnits(stage.backward, true, backwardCompute);
    for (const Op &op : stage.step)
      if (isTraffic(op))
        (overlappable(op) && op.state == ir::State::Grads ? stepOverlap : stepExposed) +=
            seconds(op);
    st.computePerMicrobatch = forwardCompute + backwardCompute;
    st.exposedPerMicrobatch = critical + analysis::getPassExposedSeconds(forwardUnits) +
                              analysis::getPassExposedSeconds(backwardUnits);
    st.exposed = m * st.exposedPerMicrobatch +
                 analysis::getOverlapExposedSeconds(stepOverlap, backwardCompute) + stepExposed;
    st.total = m * st.computePerMicrobatch + st.exposed;
    stages.push_back(st);
  }
  if (stages.empty())
    return;
  const StageTime *slowest = &stages.front();
  double slowestMicrobatch = 0;
  for (const StageTime &st : stages) {
    if (st.total >= slowest->total)
      slowest = &st;
    slowestMicrobatch =
        std::max(slowestMicrobatch, st.computePerMicrobatch + st.exposedPerMicrobatch);
  }
  std::string stageText =
      stages.size() > 1 ? fmt::format(" (stage {}, the slowest)", slowest->stage) : "";

  double compute = m * slowest->computePerMicrobatch;
  std::string flopsText = fmt::format("{:.4g} forward + {:.4g} backward", slowest->forwardFlops,
                                      slowest->backwardFlops);
  if (slowest->recomputeFlops > 0)
    flopsText += fmt::format(" + {:.4g} recompute", slowest->recomputeFlops);
  result.time.push_back(
      make("compute",
           fmt::format("{} × ({}) FLOPs / (peak × efficiency = "
                       "{} × {}){}",
                       microbatches(m), flopsText, formatFlopRate(cluster.peakFlops),
                       num(cluster.efficiency), stageText),
           compute, "s", time.computeSeconds));
  result.time.push_back(make(
      "exposed comm",
      fmt::format("{} × {} per micro-batch (tensor-parallel, pipeline and host "
                  "traffic in full; a pass's first gather and last gradient reduction in full; "
                  "the others beside the neighbouring unit's compute, max(comm - compute, "
                  "comm × κ/(1 + κ)) with κ = {}, the compute's slowdown beside "
                  "communication) + what the step's reductions and updates add{}",
                  microbatches(m), formatSeconds(slowest->exposedPerMicrobatch),
                  num(analysis::kOverlapComputeSlowdown), stageText),
      slowest->exposed, "s", time.exposedCommSeconds));
  double p = static_cast<double>(plan.stages.size());
  double v = static_cast<double>(plan.chunks);
  double bubble = (p - 1) * slowestMicrobatch / v;
  result.time.push_back(make("bubble",
                             p > 1
                                 ? fmt::format("(p - 1)/v × slowest micro-batch = ({} - 1)/{} × {}",
                                               num(p), num(v), formatSeconds(slowestMicrobatch))
                                 : std::string("no pipeline"),
                             bubble, "s", time.bubbleSeconds));
  double step = slowest->total + bubble;
  result.time.push_back(
      make("step",
           fmt::format("compute + exposed comm + bubble = {} + {} + {}", formatSeconds(compute),
                       formatSeconds(slowest->exposed), formatSeconds(bubble)),
           step, "s", time.stepSeconds));
  if (!time.known)
    return;
  double batch = static_cast<double>(run.globalBatch);
  double devices = static_cast<double>(mesh.getNumDevices());
  double flops = 0;
  std::string flopsFormula;
  if (model.kind == ir::ModelKind::Transformer) {
    const ir::TransformerConfig &config = model.transformer;
    double s = static_cast<double>(config.seq), l = static_cast<double>(config.layers),
           h = static_cast<double>(config.hidden), vocab = static_cast<double>(config.vocab);
    flops = 72 * batch * s * l * h * h * (1 + s / (6 * h) + vocab / (16 * l * h));
    flopsFormula = fmt::format("72·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) = "
                               "72·{}·{}·{}·{}²·(1 + {}/(6·{}) + {}/(16·{}·{})) = {:.4g}",
                               num(batch), num(s), num(l), num(h), num(s), num(h), num(vocab),
                               num(l), num(h), flops);
  } else {
    flops = 6 * static_cast<double>(model.numParams) * batch;
    flopsFormula = fmt::format("6·Ψ·B = 6·{}·{} = {:.4g}", model.numParams, num(batch), flops);
  }
  if (step > 0) {
    result.time.push_back(make("MFU",
                               fmt::format("model FLOPs / (step × devices × peak), model FLOPs "
                                           "{} / ({} × {} × {})",
                                           flopsFormula, formatSeconds(step), num(devices),
                                           formatFlopRate(cluster.peakFlops)),
                               flops / (step * devices * cluster.peakFlops), "%", time.mfu));
    double tokens = model.kind == ir::ModelKind::Transformer
                        ? batch * static_cast<double>(model.transformer.seq)
                        : batch;
    result.time.push_back(
        make("tokens/s",
             model.kind == ir::ModelKind::Transformer
                 ? fmt::format("B·s / step = {}·{} / {}", num(batch), model.transformer.seq,
                               formatSeconds(step))
                 : fmt::format("B / step = {} / {}", num(batch), formatSeconds(step)),
             tokens / step, "tokens/s", time.tokensPerSecond));
  }
}

RunExplanation Explainer::explain() {
  RunExplanation result;
  explainMemory(result);
  explainCommunication(result);
  explainTime(result);
  return result;
}

} // namespace

RunExplanation explainRun(const RunReport &report) { return Explainer(report).explain(); }

std::string formatExplanation(const Explanation &explanation) {
  std::string text = explanation.figure + " = " + explanation.formula;
  if (!explanation.unit.empty())
    text += " = " + formatValue(explanation.value, explanation.unit);
  if (explanation.analysisValue)
    text += " [analysis reports " + formatValue(*explanation.analysisValue, explanation.unit) + "]";
  return text;
}

} // namespace placec::report
