// The tables of a report, built once from the analyses and rendered as text (ReportText.cpp) or
// Markdown (ReportMarkdown.cpp): a summary, the runs' configurations, memory on the device and on
// the host, memory per stage, communication per collective, time, and --explain's formulas.
#include "ReportSupport.h"
#include "placec/passes/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <map>

using namespace llvm;

namespace placec::report {

namespace {

/// Side-by-side tables hold at most this many runs; more runs continue in another table.
constexpr size_t kRunsPerTable = 5;

using RunRow = std::function<std::string(const RunReport &)>;

/// Builds tables with a label column and one column per run, `kRunsPerTable` runs per table.
/// With `untitled`, a table that holds every run has no title (the section's heading says it);
/// with `leftAligned`, the run columns are left-aligned (text rather than numbers).
std::vector<Table> sideBySide(StringRef title, ArrayRef<RunReport> runs,
                              ArrayRef<std::pair<std::string, RunRow>> rows, bool untitled = false,
                              bool leftAligned = false) {
  std::vector<Table> tables;
  for (size_t first = 0; first < runs.size(); first += kRunsPerTable) {
    ArrayRef<RunReport> chunk = runs.slice(first, std::min(kRunsPerTable, runs.size() - first));
    Table table;
    if (runs.size() > kRunsPerTable)
      table.title = fmt::format("{} (runs {}-{} of {})", title.str(), first + 1,
                                first + chunk.size(), runs.size());
    else if (!untitled)
      table.title = title.str();
    if (leftAligned)
      for (unsigned column = 1; column <= chunk.size(); ++column)
        table.leftColumns.push_back(column);
    table.header.push_back("");
    for (const RunReport &run : chunk)
      table.header.push_back(run.run->name);
    for (const auto &[label, cell] : rows) {
      std::vector<std::string> row{label};
      for (const RunReport &run : chunk)
        row.push_back(cell(run));
      table.addRow(std::move(row));
    }
    tables.push_back(std::move(table));
  }
  return tables;
}

bool usesHost(const RunReport &report) {
  const analysis::MemoryBreakdown &host = report.analysis.memory.host;
  return host.peak > 0 || host.getPersistent() > 0 || host.activations > 0;
}

std::string fits(bool ok) { return ok ? "fits" : "OVER"; }

std::string activationsCell(const RunReport &report, double bytes) {
  if (!report.analysis.memory.activationsKnown)
    return "unknown";
  return formatGB(bytes);
}

std::string stepCell(const RunReport &report) {
  const analysis::TimeReport &time = report.analysis.time;
  if (!time.known)
    return time.stepSeconds > 0 ? ">= " + formatSeconds(time.stepSeconds) : "unknown";
  return formatSeconds(time.stepSeconds);
}

std::string mfuCell(const RunReport &report) {
  return report.analysis.time.known ? formatPercent(report.analysis.time.mfu) : "unknown";
}

std::string meshLinks(const RunReport &report) {
  const ir::Mesh &mesh = report.run->strategy->mesh;
  std::vector<std::string> parts;
  for (unsigned i = 0; i < mesh.axes.size(); ++i)
    parts.push_back(fmt::format("{}: {}", mesh.axes[i].name, axisLink(*report.run, i).str()));
  return parts.empty() ? "-" : llvm::join(parts, ", ");
}

std::string meshKinds(const RunReport &report) {
  const ir::Mesh &mesh = report.run->strategy->mesh;
  std::vector<std::string> parts;
  for (const ir::Axis &axis : mesh.axes)
    parts.push_back(fmt::format("{}: {}", axis.name, ir::toString(axis.kind).str()));
  return parts.empty() ? "-" : llvm::join(parts, ", ");
}

Table summaryTable(ArrayRef<RunReport> runs) {
  Table table;
  table.header = {"run",  "devices", "strategy", "mesh", "model states",
                  "peak", "use",     "fits",     "step", "MFU"};
  table.leftColumns = {2, 3};
  for (const RunReport &report : runs) {
    const analysis::MemoryReport &memory = report.analysis.memory;
    table.addRow({report.run->name, std::to_string(report.run->cluster->getNumDevices()),
                  report.run->strategy->name, describeMesh(report.run->strategy->mesh),
                  formatGB(memory.device.getPersistent()), formatGB(memory.device.peak),
                  formatPercent(memory.device.peak / memory.deviceCapacity),
                  fits(memory.fitsDevice && memory.fitsHost), stepCell(report), mfuCell(report)});
  }
  table.notes.push_back("model states = params + grads + optimizer per device; peak adds "
                        "activations and transient buffers; GB = 10^9 bytes");
  return table;
}

std::vector<Table> configurationTables(ArrayRef<RunReport> runs) {
  std::vector<std::pair<std::string, RunRow>> rows = {
      {"model", [](const RunReport &r) { return r.run->model->name; }},
      {"  size", [](const RunReport &r) { return describeModel(*r.run->model); }},
      {"  attention", [](const RunReport &r) { return describeAttention(*r.run->model); }},
      {"cluster", [](const RunReport &r) { return r.run->cluster->name; }},
      {"  nodes × devices", [](const RunReport &r) { return describeCluster(*r.run->cluster); }},
      {"  device",
       [](const RunReport &r) {
         const ir::Cluster &c = *r.run->cluster;
         return c.device ? std::string(c.device->name) : std::string("-");
       }},
      {"  peak",
       [](const RunReport &r) {
         const ir::Cluster &c = *r.run->cluster;
         if (c.hasShapeModel())
           return formatFlopRate(c.peakFlops) + " (compute timed by shape)";
         return formatFlopRate(c.peakFlops) + fmt::format(" × {}", formatSignificant(c.efficiency));
       }},
      {"  intra / inter-node",
       [](const RunReport &r) {
         const ir::Cluster &c = *r.run->cluster;
         return fmt::format("{} / {}", formatBandwidth(c.intraBandwidth),
                            formatBandwidth(c.interBandwidth));
       }},
      {"  host link",
       [](const RunReport &r) {
         const ir::Cluster &c = *r.run->cluster;
         return c.hostBandwidth ? formatBandwidth(*c.hostBandwidth) : std::string("-");
       }},
      {"strategy", [](const RunReport &r) { return r.run->strategy->name; }},
      {"  mesh", [](const RunReport &r) { return describeMesh(r.run->strategy->mesh); }},
      {"  axis kinds", meshKinds},
      {"  axis links", meshLinks},
      {"  params",
       [](const RunReport &r) { return describePlacement(*r.run->strategy, ir::State::Params); }},
      {"  grads",
       [](const RunReport &r) { return describePlacement(*r.run->strategy, ir::State::Grads); }},
      {"  optimizer",
       [](const RunReport &r) {
         return describePlacement(*r.run->strategy, ir::State::Optimizer);
       }},
      {"  activations",
       [](const RunReport &r) {
         return describePlacement(*r.run->strategy, ir::State::Activations);
       }},
      {"  pipeline",
       [](const RunReport &r) { return describePipeline(*r.run->strategy, r.plan->microbatches); }},
      {"  context",
       [](const RunReport &r) {
         std::string text = describeContext(*r.run->strategy);
         if (!text.empty() && r.run->contextMerge == ir::ContextMerge::Eager)
           text += ", merged eager (context_merge)";
         return text.empty() ? std::string("-") : text;
       }},
      {"  async_tp",
       [](const RunReport &r) {
         std::string text = describeAsyncTensorParallel(*r.run->strategy);
         return text.empty() ? std::string("-") : text;
       }},
      {"  sp_inputs",
       [](const RunReport &r) {
         std::string text = describeSequenceParallelInputs(*r.run->strategy);
         return text.empty() ? std::string("-") : text;
       }},
      {"  dp_overlap",
       [](const RunReport &r) {
         std::string text = describeDataParallelOverlap(*r.run->strategy);
         return text.empty() ? std::string("-") : text;
       }},
      {"  grad_reduce",
       [](const RunReport &r) {
         std::string text = describeGradReduce(*r.run->strategy);
         return text.empty() ? std::string("-") : text;
       }},
      {"  ep_overlap",
       [](const RunReport &r) {
         std::string text = describeExpertOverlap(*r.run->strategy);
         return text.empty() ? std::string("-") : text;
       }},
      {"  dispatcher",
       [](const RunReport &r) {
         std::string text = describeExpertDispatcher(*r.run->strategy);
         return text.empty() ? std::string("-") : text;
       }},
      {"  expert_tensor",
       [](const RunReport &r) {
         std::string text = describeExpertTensor(*r.run->strategy);
         return text.empty() ? std::string("-") : text;
       }},
      {"  expert_context",
       [](const RunReport &r) {
         std::string text = describeExpertContext(*r.run->strategy);
         return text.empty() ? std::string("-") : text;
       }},
      {"batch (micro × dp × steps)", [](const RunReport &r) { return describeBatch(*r.run); }},
      {"precision", [](const RunReport &r) { return describePrecision(*r.run); }},
      {"optimizer", [](const RunReport &r) { return describeOptimizer(*r.run); }},
      {"cross-entropy",
       [](const RunReport &r) {
         std::string text = ir::toString(r.run->crossEntropy).str();
         if (r.run->trainMetrics > 0)
           text += ", " + std::to_string(r.run->trainMetrics) + " training metrics";
         return text;
       }},
      {"kernels",
       [](const RunReport &r) {
         // rope_complex = true: torch.compile leaves the rotary embedding to PyTorch's kernels.
         std::string text = ir::toString(r.run->kernels).str();
         if (r.run->kernels == ir::KernelMode::Fused &&
             cost::rotatesComplex(r.run->model->transformer, r.run->kernels))
           text += ", rotary embedding eager (rope_complex)";
         return text;
       }},
      {"param gather", [](const RunReport &r) { return ir::toString(r.run->paramGather).str(); }},
      {"grad accumulation",
       [](const RunReport &r) { return ir::toString(r.run->gradAccumulation).str(); }},
  };
  std::vector<Table> tables = sideBySide("Configuration", runs, rows, /*untitled=*/true,
                                         /*leftAligned=*/true);
  // Explain "peak × efficiency" only where a run shows it.
  bool flat =
      llvm::any_of(runs, [](const RunReport &r) { return !r.run->cluster->hasShapeModel(); });
  for (Table &table : tables)
    table.notes.push_back(flat ? "bandwidths per device; peak × efficiency: compute at a flat "
                                 "fraction of peak (a cluster without a device preset, or one "
                                 "that writes efficiency)"
                               : "bandwidths per device");
  return tables;
}

std::vector<Table> deviceMemoryTables(ArrayRef<RunReport> runs) {
  auto memory = [](const RunReport &r) -> const analysis::MemoryReport & {
    return r.analysis.memory;
  };
  std::vector<std::pair<std::string, RunRow>> rows = {
      {"params", [&](const RunReport &r) { return formatGB(memory(r).device.params); }},
      {"grads", [&](const RunReport &r) { return formatGB(memory(r).device.grads); }},
      {"optimizer", [&](const RunReport &r) { return formatGB(memory(r).device.optimizer); }},
      {"model states",
       [&](const RunReport &r) { return formatGB(memory(r).device.getPersistent()); }},
      {"activations",
       [&](const RunReport &r) { return activationsCell(r, memory(r).device.activations); }},
      {"transient", [&](const RunReport &r) { return formatGB(memory(r).device.transient); }},
      {"peak", [&](const RunReport &r) { return formatGB(memory(r).device.peak); }},
      {"capacity",
       [&](const RunReport &r) {
         double capacity = memory(r).deviceCapacity;
         std::string text = formatCapacity(capacity);
         return text.ends_with("iB") ? fmt::format("{} ({})", formatGB(capacity), text) : text;
       }},
      {"use",
       [&](const RunReport &r) {
         return formatPercent(memory(r).device.peak / memory(r).deviceCapacity);
       }},
      {"fits", [&](const RunReport &r) { return fits(memory(r).fitsDevice); }},
  };
  bool staged = llvm::any_of(runs, [](const RunReport &r) { return r.plan->stages.size() > 1; });
  std::vector<Table> tables = sideBySide("Memory per device", runs, rows);
  for (Table &table : tables) {
    table.notes.push_back("GB = 10^9 bytes; model states = params + grads + optimizer; "
                          "transient: gathered params, unreduced gradients, the loss buffers and "
                          "the recomputed layer around a use");
    if (staged)
      table.notes.push_back("with a pipeline: the stage with the highest peak");
  }
  return tables;
}

std::vector<Table> hostMemoryTables(ArrayRef<RunReport> runs) {
  auto host = [](const RunReport &r) -> const analysis::MemoryBreakdown & {
    return r.analysis.memory.host;
  };
  std::vector<std::pair<std::string, RunRow>> rows = {
      {"params", [&](const RunReport &r) { return formatGB(host(r).params); }},
      {"grads", [&](const RunReport &r) { return formatGB(host(r).grads); }},
      {"optimizer", [&](const RunReport &r) { return formatGB(host(r).optimizer); }},
      {"activations", [&](const RunReport &r) { return activationsCell(r, host(r).activations); }},
      {"peak per device", [&](const RunReport &r) { return formatGB(host(r).peak); }},
      {"peak per node",
       [&](const RunReport &r) {
         return formatGB(host(r).peak * static_cast<double>(r.run->cluster->devicesPerNode));
       }},
      {"capacity per node",
       [&](const RunReport &r) {
         const std::optional<double> &capacity = r.analysis.memory.hostCapacity;
         return capacity ? formatCapacity(*capacity) : std::string("not given");
       }},
      {"use",
       [&](const RunReport &r) {
         const std::optional<double> &capacity = r.analysis.memory.hostCapacity;
         if (!capacity || *capacity <= 0)
           return std::string("-");
         return formatPercent(host(r).peak * static_cast<double>(r.run->cluster->devicesPerNode) /
                              *capacity);
       }},
      {"fits",
       [&](const RunReport &r) {
         return r.analysis.memory.hostCapacity ? fits(r.analysis.memory.fitsHost)
                                               : std::string("not checked");
       }},
  };
  std::vector<Table> tables = sideBySide("Host memory", runs, rows);
  for (Table &table : tables)
    table.notes.push_back("what each device keeps in host memory; a node holds devices_per_node "
                          "times that");
  return tables;
}

Table stageTable(const RunReport &report) {
  Table table;
  table.title = fmt::format("Memory per stage: {}", report.run->name);
  bool host = usesHost(report);
  table.header = {"stage", "params", "grads", "optimizer", "activations", "transient", "peak"};
  if (host)
    table.header.push_back("host peak");
  for (const analysis::StageMemory &stage : report.analysis.memory.stages) {
    std::vector<std::string> row = {std::to_string(stage.stage),
                                    formatGB(stage.device.params),
                                    formatGB(stage.device.grads),
                                    formatGB(stage.device.optimizer),
                                    activationsCell(report, stage.device.activations),
                                    formatGB(stage.device.transient),
                                    formatGB(stage.device.peak)};
    if (host)
      row.push_back(formatGB(stage.host.peak));
    table.addRow(std::move(row));
  }
  return table;
}

/// `0`, `1-10`, `0, 11`: a sorted list of stages as ranges.
std::string stageRanges(ArrayRef<int> stages) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < stages.size();) {
    size_t j = i;
    while (j + 1 < stages.size() && stages[j + 1] == stages[j] + 1)
      ++j;
    parts.push_back(j == i ? std::to_string(stages[i])
                           : fmt::format("{}-{}", stages[i], stages[j]));
    i = j + 1;
  }
  return llvm::join(parts, ", ");
}

Table communicationTable(const RunReport &report) {
  Table table;
  table.title = fmt::format("Communication per device per step: {}", report.run->name);
  bool staged = report.plan->stages.size() > 1;
  if (staged)
    table.header.push_back("stages");
  for (const char *column :
       {"axis", "collective", "state", "phase", "count", "message", "sent", "link", "time"})
    table.header.push_back(column);
  unsigned offset = staged ? 1 : 0;
  table.leftColumns = {offset + 0, offset + 1, offset + 2, offset + 3, offset + 7};
  if (staged)
    table.leftColumns.push_back(0);

  // Under a pipeline, the entries that read the same on several stages share one row.
  struct Row {
    std::vector<int> stages;
    std::vector<std::string> cells;
  };
  std::vector<Row> rows;
  std::map<int, std::pair<double, double>> perStage; // stage -> (sent, time)
  bool hidden = false;
  for (const analysis::CommEntry &entry : report.analysis.communication) {
    // A collective over a group of one device moves nothing.
    if (plan::isCollective(entry.collective) && entry.groupSize == 1) {
      hidden = true;
      continue;
    }
    std::vector<std::string> cells = {
        entry.axis.empty() ? "-" : entry.axis, collectiveName(entry.collective),
        ir::toString(entry.state).str(),       plan::toString(entry.phase).str(),
        std::to_string(entry.count),           formatBytes(entry.messageBytes),
        formatBytes(entry.sentBytes),          analysis::toString(entry.link).str(),
        formatSeconds(entry.timeSeconds)};
    auto same = llvm::find_if(rows, [&](const Row &row) { return row.cells == cells; });
    if (staged && same != rows.end())
      same->stages.push_back(entry.stage);
    else
      rows.push_back(Row{{entry.stage}, std::move(cells)});
    perStage[entry.stage].first += entry.sentBytes;
    perStage[entry.stage].second += entry.timeSeconds;
  }
  for (Row &row : rows) {
    if (staged)
      row.cells.insert(row.cells.begin(), stageRanges(row.stages));
    table.addRow(std::move(row.cells));
  }
  if (hidden)
    table.notes.push_back("collectives over groups of one device move nothing and are left out");
  if (rows.empty()) {
    table.notes.push_back("no communication: nothing is sharded, replicated over several devices "
                          "or offloaded");
    return table;
  }
  // A device belongs to one stage: the total is the busiest stage's.
  auto busiest = perStage.begin();
  for (auto it = perStage.begin(); it != perStage.end(); ++it)
    if (it->second.first > busiest->second.first)
      busiest = it;
  std::vector<std::string> total(table.header.size());
  total[0] = staged ? fmt::format("total (stage {})", busiest->first) : "total";
  total[total.size() - 3] = formatBytes(busiest->second.first);
  total[total.size() - 1] = formatSeconds(busiest->second.second);
  table.addRow(std::move(total));
  std::string note = "message: one call's full buffer; sent: what each device puts on the wire "
                     "(ring algorithms), all calls; time: alpha-beta, all calls, before overlap";
  if (staged)
    note += "; a device belongs to one stage: the total is the stage that sends the most";
  table.notes.push_back(note);
  return table;
}

std::vector<Table> timeTables(ArrayRef<RunReport> runs) {
  auto time = [](const RunReport &r) -> const analysis::TimeReport & { return r.analysis.time; };
  std::vector<std::pair<std::string, RunRow>> rows = {
      {"compute",
       [&](const RunReport &r) {
         return time(r).known ? formatSeconds(time(r).computeSeconds) : std::string("unknown");
       }},
      {"exposed comm",
       [&](const RunReport &r) { return formatSeconds(time(r).exposedCommSeconds); }},
      {"bubble", [&](const RunReport &r) { return formatSeconds(time(r).bubbleSeconds); }},
      {"step", stepCell},
      {"MFU", mfuCell},
      {"tokens/s",
       [&](const RunReport &r) {
         return time(r).known ? formatCount(time(r).tokensPerSecond) : std::string("unknown");
       }},
      {"model FLOPs per step",
       [&](const RunReport &r) {
         return time(r).known ? fmt::format("{:.3g}", time(r).flopsPerStep)
                              : std::string("unknown");
       }},
  };
  std::vector<Table> tables = sideBySide("Time per step", runs, rows, /*untitled=*/true);
  bool abstract = llvm::any_of(runs, [](const RunReport &r) { return !r.analysis.time.known; });
  for (Table &table : tables) {
    table.notes.push_back("compute: each unit's GEMMs, attention and memory-bound kernels timed "
                          "by the cost model (peak × efficiency without a device preset); "
                          "exposed comm: what compute does not hide; MFU = model FLOPs / (step "
                          "× devices × peak)");
    if (abstract)
      table.notes.push_back("an abstract model has no FLOPs: its step is at least its exposed "
                            "communication");
  }
  return tables;
}

Block explainBlock(const RunReport &report) {
  RunExplanation explanation = explainRun(report);
  Block block;
  block.heading = report.run->name;
  Block device;
  device.heading = report.plan->stages.size() > 1
                       ? fmt::format("memory per device (stage {})", explanation.stage)
                       : "memory per device";
  for (const Explanation &line : explanation.deviceMemory)
    device.lines.push_back(formatExplanation(line));
  block.children.push_back(std::move(device));
  if (!explanation.hostMemory.empty()) {
    Block host;
    host.heading = "host memory per device";
    for (const Explanation &line : explanation.hostMemory)
      host.lines.push_back(formatExplanation(line));
    block.children.push_back(std::move(host));
  }
  Block communication;
  communication.heading = "communication per device per step";
  for (const RunExplanation::Communication &entry : explanation.communication) {
    Block child;
    child.heading = entry.figure;
    for (const Explanation &line : entry.lines)
      child.lines.push_back(formatExplanation(line));
    communication.children.push_back(std::move(child));
  }
  if (communication.children.empty())
    communication.lines.push_back("none");
  block.children.push_back(std::move(communication));
  if (!explanation.compute.empty()) {
    Block compute;
    compute.heading = fmt::format("compute per micro-batch{}",
                                  report.plan->stages.size() > 1 ? " (the slowest stage)" : "");
    for (const RunExplanation::Communication &entry : explanation.compute) {
      Block child;
      child.heading = entry.figure;
      for (const Explanation &line : entry.lines)
        child.lines.push_back(formatExplanation(line));
      compute.children.push_back(std::move(child));
    }
    block.children.push_back(std::move(compute));
  }
  Block time;
  time.heading = "time per step";
  for (const Explanation &line : explanation.time)
    time.lines.push_back(formatExplanation(line));
  block.children.push_back(std::move(time));
  return block;
}

} // namespace

std::string formatDiagnostic(const ReportDiagnostic &diag) {
  std::string text;
  if (!diag.file.empty())
    text = fmt::format("{}:{}:{}: ", diag.file, diag.line, diag.column);
  text += toString(diag.severity).str() + ": " + diag.message;
  if (!diag.rule.empty())
    text += " [" + diag.rule + "]";
  return text;
}

std::vector<Section> buildReportSections(ArrayRef<RunReport> runs,
                                         ArrayRef<ReportDiagnostic> diagnostics,
                                         const ReportOptions &options) {
  std::vector<Section> sections;
  if (runs.size() > 1) {
    Section summary;
    summary.heading = "Summary";
    summary.tables.push_back(summaryTable(runs));
    sections.push_back(std::move(summary));
  }

  Section configuration;
  configuration.heading = "Configuration";
  configuration.tables = configurationTables(runs);
  sections.push_back(std::move(configuration));

  Section memory;
  memory.heading = "Memory";
  memory.tables = deviceMemoryTables(runs);
  if (llvm::any_of(runs, usesHost))
    llvm::append_range(memory.tables, hostMemoryTables(runs));
  for (const RunReport &report : runs)
    if (stagesDiffer(report.analysis.memory))
      memory.tables.push_back(stageTable(report));
  sections.push_back(std::move(memory));

  Section communication;
  communication.heading = "Communication";
  for (const RunReport &report : runs)
    communication.tables.push_back(communicationTable(report));
  sections.push_back(std::move(communication));

  Section time;
  time.heading = "Time";
  time.tables = timeTables(runs);
  sections.push_back(std::move(time));

  if (options.explain) {
    Section explain;
    explain.heading = "Explain";
    explain.intro.push_back("Each figure with the cost model's formula that computes it and the "
                            "numbers put in (docs/plan.md, \"The cost model\").");
    for (const RunReport &report : runs)
      explain.blocks.push_back(explainBlock(report));
    sections.push_back(std::move(explain));
  }

  std::vector<std::string> shown;
  for (const ReportDiagnostic &diag : diagnostics)
    if (diag.severity != Severity::Note)
      shown.push_back(formatDiagnostic(diag));
  if (!shown.empty()) {
    Section section;
    section.heading = "Diagnostics";
    Block block;
    block.lines = std::move(shown);
    section.blocks.push_back(std::move(block));
    sections.push_back(std::move(section));
  }
  return sections;
}

} // namespace placec::report
