// Shared pieces of the report backends: human units, text and Markdown tables, descriptions of
// IR objects, and the analysis entry point that every report starts from.
#include "ReportSupport.h"

#include "placec/passes/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

using namespace llvm;

namespace placec::report {

RunReport analyzeRun(const ir::Run &run) {
  RunReport report;
  report.run = &run;
  report.plan = plan::lowerRun(run);
  report.analysis = analysis::analyze(*report.plan);
  return report;
}

//===----------------------------------------------------------------------===//
// Numbers and units
//===----------------------------------------------------------------------===//

/// Rounds half away from zero to `decimals` places (printf rounds exact ties to even, which
/// would print 41.25 as 41.2 where published tables say 41.3).
static std::string fixed(double value, int decimals) {
  double scale = std::pow(10.0, decimals);
  double rounded = std::round(value * scale) / scale;
  if (rounded == 0)
    rounded = 0; // No "-0.00".
  return fmt::format("{:.{}f}", rounded, decimals);
}

std::string formatSignificant(double value) {
  if (!std::isfinite(value))
    return value != value ? "nan" : (value > 0 ? "inf" : "-inf");
  double magnitude = std::fabs(value);
  if (magnitude == 0)
    return "0";
  // Decide the decimals on the rounded value, so that 99.96 prints as 100, not 100.0.
  if (std::round(magnitude) >= 100)
    return fixed(value, 0);
  if (std::round(magnitude * 10) / 10 >= 10)
    return fixed(value, 1);
  if (magnitude >= 0.005)
    return fixed(value, 2);
  return fmt::format("{:.3g}", value);
}

std::string formatBytes(double bytes) {
  double magnitude = std::fabs(bytes);
  if (magnitude < 1000)
    return formatInteger(bytes) + " B";
  static const char *const units[] = {"KB", "MB", "GB", "TB", "PB"};
  double scaled = bytes / 1000;
  unsigned unit = 0;
  while (std::fabs(scaled) >= 999.5 && unit + 1 < std::size(units)) {
    scaled /= 1000;
    ++unit;
  }
  return formatSignificant(scaled) + " " + units[unit];
}

std::string formatGB(double bytes) {
  if (bytes == 0)
    return "0";
  // Below 10 MB, GB would need more digits than the column is worth: use the size's own unit.
  if (std::fabs(bytes) < 1e7)
    return formatBytes(bytes);
  return formatSignificant(bytes / 1e9) + " GB";
}

std::string formatCapacity(double bytes) {
  constexpr double gib = 1024.0 * 1024 * 1024;
  double inGiB = bytes / gib;
  double tib = inGiB / 1024;
  if (tib >= 1 && tib == std::round(tib))
    return fmt::format("{:.0f} TiB", tib);
  if (inGiB >= 1 && inGiB == std::round(inGiB))
    return fmt::format("{:.0f} GiB", inGiB);
  return formatBytes(bytes);
}

std::string formatSeconds(double seconds) {
  double magnitude = std::fabs(seconds);
  if (magnitude == 0)
    return "0";
  if (magnitude >= 0.9995)
    return formatSignificant(seconds) + " s";
  if (magnitude >= 0.9995e-3)
    return formatSignificant(seconds * 1e3) + " ms";
  return formatSignificant(seconds * 1e6) + " us";
}

std::string formatBandwidth(double bytesPerSecond) {
  if (bytesPerSecond >= 1e9)
    return formatSignificant(bytesPerSecond / 1e9) + " GB/s";
  return formatSignificant(bytesPerSecond / 1e6) + " MB/s";
}

std::string formatFlopRate(double flops) {
  if (flops >= 1e15)
    return formatSignificant(flops / 1e15) + " PFLOPS";
  return formatSignificant(flops / 1e12) + " TFLOPS";
}

std::string formatCount(double value) {
  double magnitude = std::fabs(value);
  if (magnitude >= 1e12)
    return formatSignificant(value / 1e12) + "T";
  if (magnitude >= 1e9)
    return formatSignificant(value / 1e9) + "B";
  if (magnitude >= 1e6)
    return formatSignificant(value / 1e6) + "M";
  if (magnitude >= 1e4)
    return formatSignificant(value / 1e3) + "K";
  return formatSignificant(value);
}

std::string formatInteger(double value) {
  if (std::fabs(value) < 9.007199254740992e15 && value == std::round(value))
    return fmt::format("{}", static_cast<int64_t>(value));
  return fmt::format("{:.6g}", value);
}

std::string formatPercent(double fraction) { return fixed(fraction * 100, 1) + " %"; }

std::string formatRatio(double a, double b) {
  if (a == b)
    return "=";
  if (a == 0)
    return "new";
  if (b == 0)
    return "gone";
  double ratio = b / a;
  if (ratio < 0)
    return fmt::format("×{}", formatSignificant(ratio));
  if (ratio >= 1)
    return "×" + formatSignificant(ratio);
  return "÷" + formatSignificant(1 / ratio);
}

//===----------------------------------------------------------------------===//
// Tables
//===----------------------------------------------------------------------===//

size_t displayWidth(StringRef text) {
  size_t width = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80)
      ++width;
  return width;
}

static bool isLeft(const Table &table, unsigned column) {
  return column == 0 || llvm::is_contained(table.leftColumns, column);
}

void renderText(const Table &table, raw_ostream &os) {
  size_t columns = table.header.size();
  for (const std::vector<std::string> &row : table.rows)
    columns = std::max(columns, row.size());
  std::vector<size_t> widths(columns, 0);
  auto measure = [&](const std::vector<std::string> &row) {
    for (size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], displayWidth(row[i]));
  };
  measure(table.header);
  for (const std::vector<std::string> &row : table.rows)
    measure(row);

  auto printRow = [&](const std::vector<std::string> &row) {
    std::string line;
    for (size_t i = 0; i < columns; ++i) {
      StringRef cell = i < row.size() ? StringRef(row[i]) : StringRef();
      std::string pad(widths[i] - displayWidth(cell), ' ');
      if (i)
        line += "  ";
      if (isLeft(table, static_cast<unsigned>(i)))
        line += cell.str() + pad;
      else
        line += pad + cell.str();
    }
    os << StringRef(line).rtrim() << "\n";
  };
  if (!table.title.empty())
    os << table.title << "\n";
  if (!table.header.empty()) {
    printRow(table.header);
    size_t total = 0;
    for (size_t width : widths)
      total += width;
    total += 2 * (columns - 1);
    os << std::string(total, '-') << "\n";
  }
  for (const std::vector<std::string> &row : table.rows)
    printRow(row);
  for (const std::string &note : table.notes)
    os << note << "\n";
}

/// Escapes the characters that would break a Markdown table cell or start emphasis (an
/// underscore inside a word starts none in GitHub Markdown), and keeps a cell's indentation.
static std::string escapeMarkdown(StringRef text) {
  std::string result;
  while (text.starts_with("  ")) {
    result += "&emsp;";
    text = text.drop_front(2);
  }
  for (char c : text) {
    if (c == '|' || c == '*' || c == '\\')
      result += '\\';
    result += c;
  }
  return result;
}

void renderMarkdown(const Table &table, raw_ostream &os) {
  size_t columns = table.header.size();
  for (const std::vector<std::string> &row : table.rows)
    columns = std::max(columns, row.size());
  if (!table.title.empty())
    os << "**" << escapeMarkdown(table.title) << "**\n\n";
  auto printRow = [&](const std::vector<std::string> &row) {
    os << "|";
    for (size_t i = 0; i < columns; ++i)
      os << " " << (i < row.size() ? escapeMarkdown(row[i]) : std::string()) << " |";
    os << "\n";
  };
  std::vector<std::string> header = table.header;
  header.resize(columns);
  printRow(header);
  os << "|";
  for (size_t i = 0; i < columns; ++i)
    os << (isLeft(table, static_cast<unsigned>(i)) ? " --- |" : " ---: |");
  os << "\n";
  for (const std::vector<std::string> &row : table.rows)
    printRow(row);
  if (!table.notes.empty()) {
    os << "\n";
    for (const std::string &note : table.notes)
      os << escapeMarkdown(note) << "\n";
  }
  os << "\n";
}

//===----------------------------------------------------------------------===//
// Descriptions
//===----------------------------------------------------------------------===//

std::string describeMesh(const ir::Mesh &mesh) {
  std::string text = "[";
  for (size_t i = 0; i < mesh.axes.size(); ++i) {
    const ir::Axis &axis = mesh.axes[i];
    text += (i ? ", " : "") + axis.name + " = " + std::to_string(axis.size);
  }
  return text + "]";
}

StringRef axisLink(const ir::Run &run, unsigned axis) {
  return run.strategy->mesh.isIntraNode(axis, run.cluster->devicesPerNode) ? "intra" : "inter";
}

std::string describePlacement(const ir::Strategy &strategy, ir::State state) {
  const ir::StatePlacement &placement = strategy.getPlacement(state);
  const ir::Mesh &mesh = strategy.mesh;
  std::vector<std::string> modes;
  for (unsigned i = 0; i < mesh.axes.size() && i < placement.axes.size(); ++i) {
    const ir::AxisPlacement &axis = placement.axes[i];
    const std::string &name = mesh.axes[i].name;
    switch (axis.mode) {
    case ir::PlacementMode::Replicated:
      modes.push_back("replicate(" + name + ")");
      break;
    case ir::PlacementMode::Sharded:
      modes.push_back("shard(" + name + ")");
      break;
    case ir::PlacementMode::ShardedWithGather:
      modes.push_back("gather(" + name +
                      (axis.keepAfterForward ? ", keep_after_forward = true" : "") + ")");
      break;
    case ir::PlacementMode::TensorSplit:
      if (state != ir::State::Activations)
        modes.push_back("shard(" + name + ")");
      break;
    case ir::PlacementMode::StageSplit:
      modes.push_back("stages(" + name + ")");
      break;
    case ir::PlacementMode::BatchSplit:
    case ir::PlacementMode::SequenceSplit:
      break;
    }
  }
  std::string text = llvm::join(modes, ", ");
  if (state == ir::State::Activations) {
    text = describeActivations(strategy);
  }
  if (placement.tier != ir::Tier::Device)
    text += (text.empty() ? "@ " : " @ ") + ir::toString(placement.tier).str();
  return text.empty() ? "-" : text;
}

std::string describeActivations(const ir::Strategy &strategy) {
  std::string text = ir::getActivationModeText(strategy.activationMode, strategy.recomputeLayers,
                                               strategy.recomputeModules);
  if (strategy.sequenceParallel) {
    for (const ir::Axis &axis : strategy.mesh.axes)
      if (axis.kind == ir::AxisKind::Tensor)
        text += ", shard(" + axis.name + ")";
  }
  return text;
}

std::string describePipeline(const ir::Strategy &strategy, int64_t microbatches) {
  if (!strategy.pipeline)
    return "none";
  const ir::Pipeline &pipeline = *strategy.pipeline;
  std::string text =
      fmt::format("{}(microbatches = {}", ir::toString(pipeline.schedule).str(), microbatches);
  if (pipeline.schedule == ir::Schedule::Interleaved)
    text += fmt::format(", chunks = {}", pipeline.chunks);
  if (pipeline.schedule == ir::Schedule::Interleaved && pipeline.group > 0)
    text += fmt::format(", group = {}", pipeline.group);
  if (pipeline.firstStageLayers > 0)
    text += fmt::format(", first = {}", pipeline.firstStageLayers);
  if (pipeline.lastStageLayers > 0)
    text += fmt::format(", last = {}", pipeline.lastStageLayers);
  if (!pipeline.layout.empty())
    text += fmt::format(", layout = \"{}\"", pipeline.layout.text);
  if (pipeline.embeddingLayer)
    text += ", embedding_layer = true";
  if (pipeline.lossLayer)
    text += ", loss_layer = true";
  if (pipeline.scatterSends)
    text += ", sends = scatter";
  return text + ")";
}

namespace {
bool hasAxisOf(const ir::Strategy &strategy, ir::AxisKind kind) {
  return llvm::any_of(strategy.mesh.axes,
                      [&](const ir::Axis &axis) { return axis.kind == kind && axis.size > 1; });
}
} // namespace

std::string describeContext(const ir::Strategy &strategy) {
  return hasAxisOf(strategy, ir::AxisKind::Sequence) ? ir::toString(strategy.contextMethod).str()
                                                     : std::string();
}

std::string describeAsyncTensorParallel(const ir::Strategy &strategy) {
  return hasAxisOf(strategy, ir::AxisKind::Tensor)
             ? ir::toString(strategy.asyncTensorParallel).str()
             : std::string();
}

std::string describeSequenceParallelInputs(const ir::Strategy &strategy) {
  return strategy.sequenceParallel && hasAxisOf(strategy, ir::AxisKind::Tensor)
             ? ir::toString(strategy.sequenceParallelInputs).str()
             : std::string();
}

std::string describeDataParallelOverlap(const ir::Strategy &strategy) {
  return hasAxisOf(strategy, ir::AxisKind::Batch) || hasAxisOf(strategy, ir::AxisKind::Sequence)
             ? ir::toString(strategy.dataParallelOverlap).str()
             : std::string();
}

std::string describeGradReduce(const ir::Strategy &strategy) {
  return strategy.shardsOptimizerOnly() ? ir::toString(strategy.gradReduce).str() : std::string();
}

std::string describeExpertOverlap(const ir::Strategy &strategy) {
  return strategy.mesh.getDegree(ir::AxisKind::Expert) > 1
             ? ir::toString(strategy.expertOverlap).str()
             : std::string();
}

std::string describeExpertDispatcher(const ir::Strategy &strategy) {
  return strategy.mesh.getDegree(ir::AxisKind::Expert) > 1
             ? ir::toString(strategy.expertDispatcher).str()
             : std::string();
}

std::string describeExpertTensor(const ir::Strategy &strategy) {
  return strategy.mesh.getDegree(ir::AxisKind::Expert) > 1 &&
                 strategy.mesh.getDegree(ir::AxisKind::Tensor) > 1
             ? ir::toString(strategy.expertTensor).str()
             : std::string();
}

std::string describeExpertContext(const ir::Strategy &strategy) {
  return strategy.mesh.getDegree(ir::AxisKind::Expert) > 1 &&
                 strategy.mesh.getDegree(ir::AxisKind::Sequence) > 1
             ? ir::toString(strategy.expertContext).str()
             : std::string();
}

std::string describePrecision(const ir::Run &run) { return ir::spellPrecision(run); }

std::string describeOptimizer(const ir::Run &run) {
  return ir::spellOptimizer(run.optimizer, run.optimizerStates);
}

std::string describeModel(const ir::Model &model) {
  std::string text = fmt::format("{} params", formatCount(static_cast<double>(model.numParams)));
  if (model.isMoe()) {
    const ir::MoeConfig &moe = model.transformer.moe;
    text += fmt::format(" ({} active), {} layers ({} MoE: {} experts, top-{})",
                        formatCount(static_cast<double>(model.getActiveParams())),
                        model.transformer.layers, moe.getNumMoeLayers(model.transformer.layers),
                        moe.experts, moe.topK);
  } else if (model.kind == ir::ModelKind::Transformer)
    text += fmt::format(", {} layers", model.transformer.layers);
  else if (model.kind == ir::ModelKind::Mlp)
    text += fmt::format(", {} layers", model.mlp.layers);
  else
    text += ", abstract";
  if (model.kind == ir::ModelKind::Transformer && model.transformer.mtpLayers > 0)
    text += fmt::format(", {} multi-token prediction module{}", model.transformer.mtpLayers,
                        model.transformer.mtpLayers > 1 ? "s" : "");
  if (model.kind == ir::ModelKind::Transformer &&
      model.transformer.projections == ir::Projections::Separate)
    text += ", separate projections";
  return text;
}

/// `n` as an English ordinal: 2nd, 6th, 11th, 23rd.
static std::string ordinal(int64_t n) {
  int64_t tens = n % 100, units = n % 10;
  const char *suffix = tens >= 11 && tens <= 13 ? "th"
                       : units == 1             ? "st"
                       : units == 2             ? "nd"
                       : units == 3             ? "rd"
                                                : "th";
  return std::to_string(n) + suffix;
}

std::string describeAttention(const ir::Model &model) {
  if (model.kind != ir::ModelKind::Transformer)
    return "-";
  ir::AttentionKind kind = model.transformer.attention;
  StringRef kernel = "scores in device memory";
  switch (kind) {
  case ir::AttentionKind::Flash:
    kernel = "FlashAttention-2";
    break;
  case ir::AttentionKind::Flash3:
    kernel = "FlashAttention-3";
    break;
  case ir::AttentionKind::Cudnn:
    kernel = "cuDNN fused attention";
    break;
  case ir::AttentionKind::Materialized:
    break;
  }
  // kv_repeat = true (eager runs repeat them too: the kernels row says so).
  bool repeated = cost::repeatsKv(model.transformer, ir::KernelMode::Fused);
  const ir::TransformerConfig &config = model.transformer;
  std::string latent =
      config.isLatentAttention()
          ? fmt::format(", multi-head latent (kv_lora_rank {}, {}, heads {} + {} rotary, values "
                        "{})",
                        config.kvLoraRank,
                        config.qLoraRank > 0 ? fmt::format("q_lora_rank {}", config.qLoraRank)
                                             : std::string("queries unprojected"),
                        config.getHeadDim(), config.ropeHeadDim, config.getValueHeadDim())
          : std::string();
  return fmt::format(
      "{} ({}){}{}{}{}", ir::toString(kind).str(), kernel.str(), latent,
      !config.isWindowed()              ? std::string()
      : config.hasFullAttentionLayers() ? fmt::format(", window of {} tokens, every {} layer full",
                                                      config.window, ordinal(config.fullEvery))
                                        : fmt::format(", window of {} tokens", config.window),
      repeated ? ", K/V repeated to every head" : "",
      std::string(config.unpad ? ", inputs unpadded" : "") + (config.sinks ? ", with sinks" : ""));
}

std::string describeCluster(const ir::Cluster &cluster) {
  return fmt::format("{} × {}, {}", cluster.nodes, cluster.devicesPerNode,
                     formatCapacity(cluster.deviceMemory));
}

std::string describeBatch(const ir::Run &run) {
  int64_t batchDegree = run.strategy->mesh.getSampleDegree();
  return fmt::format("{} × {} × {} = {}", run.microBatch, batchDegree,
                     std::max<int64_t>(1, run.microbatchesPerStep), run.globalBatch);
}

std::string collectiveName(plan::OpKind kind) { return analysis::getCollectiveName(kind); }

bool stagesDiffer(const analysis::MemoryReport &memory) {
  if (memory.stages.size() < 2)
    return false;
  const analysis::StageMemory &first = memory.stages.front();
  return llvm::any_of(memory.stages, [&](const analysis::StageMemory &stage) {
    return std::fabs(stage.device.peak - first.device.peak) > 0.5 ||
           std::fabs(stage.host.peak - first.host.peak) > 0.5;
  });
}

std::string describeRunCount(size_t count) {
  return count == 1 ? "1 run" : fmt::format("{} runs", count);
}

} // namespace placec::report

namespace placec::report {

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

static ReportDiagnostic resolve(const Diagnostic &diag, SourceMgr &sourceMgr) {
  ReportDiagnostic result;
  result.severity = diag.severity;
  result.rule = diag.rule;
  result.message = diag.message;
  if (!diag.loc.isValid())
    return result;
  unsigned bufferId = sourceMgr.FindBufferContainingLoc(diag.loc);
  if (bufferId == 0)
    return result;
  result.file = sourceMgr.getMemoryBuffer(bufferId)->getBufferIdentifier().str();
  auto [line, column] = sourceMgr.getLineAndColumn(diag.loc, bufferId);
  result.line = line;
  result.column = column;
  return result;
}

std::vector<ReportDiagnostic> collectDiagnostics(DiagnosticEngine &diags) {
  std::vector<ReportDiagnostic> result;
  for (const Diagnostic &diag : diags.getDiagnostics()) {
    ReportDiagnostic resolved = resolve(diag, diags.getSourceMgr());
    if (diag.severity == Severity::Note && !result.empty())
      result.back().notes.push_back(std::move(resolved));
    else
      result.push_back(std::move(resolved));
  }
  return result;
}

void attachDiagnostics(MutableArrayRef<RunReport> reports, ArrayRef<ReportDiagnostic> all,
                       DiagnosticEngine &diags) {
  const std::vector<Diagnostic> &raw = diags.getDiagnostics();
  // The raw diagnostics that are not notes, in the order of `all`.
  std::vector<const Diagnostic *> heads;
  for (const Diagnostic &diag : raw)
    if (diag.severity != Severity::Note || heads.empty())
      heads.push_back(&diag);
  for (RunReport &report : reports) {
    const ir::Run &run = *report.run;
    // The run's declaration spans from its name to its last field (at least).
    const char *begin = run.loc.getPointer();
    const char *end = begin;
    for (const auto &field : run.fieldLocs)
      if (field.second.isValid() && field.second.getPointer() > end)
        end = field.second.getPointer();
    std::string quoted = "'" + run.name + "'";
    for (size_t i = 0; i < heads.size() && i < all.size(); ++i) {
      const char *at = heads[i]->loc.getPointer();
      bool inside = begin && at && at >= begin && at <= end;
      if (inside || StringRef(heads[i]->message).contains(quoted))
        report.diagnostics.push_back(all[i]);
    }
  }
}

} // namespace placec::report
