// `placec search`: runs the strategy search on a loaded program and prints its result as a table
// and Place text (or JSON), writes the best plan as a complete .place file, and for
// `--max-params` prints the largest model each strategy family fits.
#include "placec/ir/Devices.h"
#include "placec/passes/Search.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>

using namespace llvm;

namespace placec::search {

std::string formatExports(const std::vector<BridgeVerdict> &verdicts) {
  std::vector<StringRef> targets;
  for (const BridgeVerdict &verdict : verdicts)
    if (verdict.exports())
      targets.push_back(verdict.target);
  return targets.empty() ? "-" : llvm::join(targets, ", ");
}

std::optional<double> parseBytes(StringRef text) {
  text = text.trim();
  size_t split = text.find_first_not_of("0123456789.eE+-");
  StringRef number = text.substr(0, split), unit = text.substr(std::min(split, text.size())).trim();
  // `7.5e9` is all number; `80GB` and `80 GB` split at the unit.
  double value = 0;
  if (number.empty() || number.getAsDouble(value) || value < 0)
    return std::nullopt;
  static const std::pair<const char *, double> units[] = {{"", 1},
                                                          {"B", 1},
                                                          {"KB", 1e3},
                                                          {"MB", 1e6},
                                                          {"GB", 1e9},
                                                          {"TB", 1e12},
                                                          {"KiB", 1024.0},
                                                          {"MiB", 1048576.0},
                                                          {"GiB", 1073741824.0},
                                                          {"TiB", 1099511627776.0}};
  for (auto [name, scale] : units)
    if (unit == name)
      return value * scale;
  return std::nullopt;
}

namespace {

/// The params column: the choice, and `x:rep` when the routed experts' params and grads are
/// replicated over dp and cp instead (mixture-of-experts searches; the legend says so).
std::string paramsText(const Candidate &c) {
  return toString(c.params).str() + (c.expertsReplicated ? " x:rep" : "");
}

/// A string literal as a pointer, which llvm::format takes (it refuses arrays).
const char *text(const char *literal) { return literal; }

std::string formatBytes(double bytes) {
  std::string text;
  raw_string_ostream os(text);
  if (bytes >= 1e9)
    os << format("%.2f GB", bytes / 1e9);
  else
    os << format("%.1f MB", bytes / 1e6);
  return text;
}

/// TFLOP/s per device the plan reaches on the model's FLOPs.
double tflopsPerDevice(const analysis::RunAnalysis &analysis, int64_t devices) {
  if (analysis.time.stepSeconds <= 0)
    return 0;
  return analysis.time.flopsPerStep / analysis.time.stepSeconds / static_cast<double>(devices) /
         1e12;
}

double interNodeBytes(const analysis::RunAnalysis &analysis) {
  double total = 0;
  for (const analysis::CommEntry &entry : analysis.communication)
    if (entry.link == analysis::LinkClass::InterNode)
      total += entry.sentBytes;
  return total;
}

/// A progress bar on stderr, shown once the search has run for a second.
class ProgressBar {
public:
  explicit ProgressBar(raw_ostream &err) : err(err), start(std::chrono::steady_clock::now()) {}
  void update(double fraction) {
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed < 1 && !shown)
      return;
    shown = true;
    int filled = static_cast<int>(std::lround(std::min(1.0, fraction) * 40));
    err << "\rsearching [" << std::string(filled, '#') << std::string(40 - filled, ' ') << "] "
        << format("%3.0f%%", fraction * 100);
    err.flush();
  }
  void finish() {
    if (shown)
      err << "\n";
  }

private:
  raw_ostream &err;
  std::chrono::steady_clock::time_point start;
  bool shown = false;
};

/// The activations column: the mode, then `+ sp` and `+ async_tp` (`+ async_tp=wgrad`, …) where
/// they apply.
std::string activationsText(const Candidate &c) {
  return ir::toString(c.activations).str() +
         (!c.sequenceParallel                              ? ""
          : c.spInputs == ir::SequenceParallelInputs::Keep ? " + sp(keep)"
                                                           : " + sp") +
         (c.asyncTp != ir::AsyncTensorParallel::Off ? " + " + formatAsyncTp(c.asyncTp)
                                                    : std::string());
}

/// Whether the tables show the experts column: some plan of the top has an expert axis.
bool showsExperts(const SearchResult &result) {
  return llvm::any_of(result.top, [](const Candidate &c) { return c.ep > 1; });
}

/// `interleaved(4)`, `interleaved(8)(emb+loss)` (the embedding and the loss counted as layers),
/// `interleaved(2)(group = 9)` (micro-batch groups other than the stages), `1f1b(first = last =
/// 7)`, `-` without a pipeline.
std::string scheduleText(const Candidate &c) {
  if (c.pp == 1)
    return "-";
  std::string text;
  raw_string_ostream os(text);
  os << ir::toString(c.schedule);
  if (c.schedule == ir::Schedule::Interleaved)
    os << "(" << c.chunks << ")";
  if (c.group > 0)
    os << "(group = " << c.group << ")";
  if (c.countedSplit)
    os << "(emb+loss)";
  else if (c.edgeLayers > 0)
    os << "(first = last = " << c.edgeLayers << ")";
  return text;
}

void printTable(const SearchResult &result, raw_ostream &out) {
  int64_t devices = result.cluster->getNumDevices();
  int meshWidth = 4, activationsWidth = 34, expertsWidth = 7, scheduleWidth = 30,
      precisionWidth = 24;
  bool experts = showsExperts(result);
  for (const Candidate &c : result.top) {
    scheduleWidth = std::max(scheduleWidth, static_cast<int>(scheduleText(c).size()));
    meshWidth = std::max(meshWidth, static_cast<int>(c.formatMesh().size()));
    activationsWidth = std::max(activationsWidth, static_cast<int>(activationsText(c).size()));
    expertsWidth = std::max(expertsWidth, static_cast<int>(c.formatExperts().size()));
    precisionWidth = std::max(precisionWidth, static_cast<int>(c.formatPrecision().size()));
  }
  // The experts column (`split`, `fold(cp, tp) + ep_overlap`, …) where some plan has experts.
  auto expertsCell = [&](StringRef cell) {
    if (!experts)
      return std::string();
    std::string padded = " " + cell.str();
    padded.resize(std::max<size_t>(padded.size(), 1 + expertsWidth), ' ');
    return padded;
  };
  out << format("%-4s %-*s %-10s %-18s %-14s %-16s %-*s", text("rank"), meshWidth, text("mesh"),
                text("context"), text("params"), text("grads"), text("optimizer"), activationsWidth,
                text("activations"))
      << expertsCell("experts")
      << format(" %4s %5s %-*s %-*s %10s %9s %6s %10s", text("b"), text("m"), scheduleWidth,
                text("schedule"), precisionWidth, text("precision"), text("step (s)"),
                text("TFLOP/s"), text("MFU"), text("memory"));
  out << (result.topBridges.empty() ? "\n" : "  exports to\n");
  for (size_t i = 0; i < result.top.size(); ++i) {
    const Candidate &c = result.top[i];
    const analysis::RunAnalysis &analysis = result.topAnalyses[i];
    std::string activations = activationsText(c);
    std::string schedule = scheduleText(c);
    std::string context = c.cp > 1 ? ir::toString(c.context).str() : "-";
    out << format("%-4zu %-*s %-10s %-18s %-14s %-16s %-*s", i + 1, meshWidth,
                  c.formatMesh().c_str(), context.c_str(), paramsText(c).c_str(),
                  toString(c.grads).str().c_str(), toString(c.optimizer).str().c_str(),
                  activationsWidth, activations.c_str())
        << expertsCell(c.formatExperts())
        << format(" %4lld %5lld %-*s %-*s %10.3f %9.1f %5.1f%% %10s",
                  static_cast<long long>(c.microBatch), static_cast<long long>(c.microbatches),
                  scheduleWidth, schedule.c_str(), precisionWidth, c.formatPrecision().c_str(),
                  analysis.time.stepSeconds, tflopsPerDevice(analysis, devices),
                  analysis.time.mfu * 100, formatBytes(analysis.memory.device.peak).c_str());
    out << (i < result.topBridges.size() ? "  " + formatExports(result.topBridges[i]) : "") << "\n";
  }
  if (llvm::any_of(result.top, [](const Candidate &c) { return c.expertsReplicated; }))
    out << "x:rep: the routed experts' params and grads replicated over dp, and over cp unless "
           "fold(cp) puts it in their group (ZeRO-1 for the experts)\n";
}

/// The same table as GitHub Markdown.
void printMarkdownTable(const SearchResult &result, raw_ostream &out) {
  int64_t devices = result.cluster->getNumDevices();
  bool bridges = !result.topBridges.empty();
  bool experts = showsExperts(result);
  out << "| rank | mesh | context | params | grads | optimizer | activations |"
      << (experts ? " experts |" : "")
      << " b | m | schedule | precision | step (s) | TFLOP/s | MFU | memory |"
      << (bridges ? " exports to |" : "") << "\n"
      << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" << (experts ? "---|" : "")
      << (bridges ? "---|" : "") << "\n";
  for (size_t i = 0; i < result.top.size(); ++i) {
    const Candidate &c = result.top[i];
    const analysis::RunAnalysis &analysis = result.topAnalyses[i];
    std::string activations = activationsText(c);
    std::string schedule = scheduleText(c);
    out << "| " << i + 1 << " | `" << c.formatMesh() << "` | "
        << (c.cp > 1 ? ir::toString(c.context).str() : "-") << " | " << paramsText(c) << " | "
        << toString(c.grads) << " | " << toString(c.optimizer) << " | " << activations << " | "
        << (experts ? c.formatExperts() + " | " : "") << c.microBatch << " | " << c.microbatches
        << " | " << schedule << " | " << c.formatPrecision() << " | "
        << format("%.3f", analysis.time.stepSeconds) << " | "
        << format("%.1f", tflopsPerDevice(analysis, devices)) << " | "
        << format("%.1f%%", analysis.time.mfu * 100) << " | "
        << formatBytes(analysis.memory.device.peak) << " |"
        << (i < result.topBridges.size() ? " " + formatExports(result.topBridges[i]) + " |" : "")
        << "\n";
  }
}

json::Object candidateJson(const Candidate &c) {
  return json::Object{{"mesh", c.formatMesh()},
                      {"pp", c.pp},
                      {"dp_node", c.dpNode},
                      {"dp_local", c.dpLocal},
                      {"cp", c.cp},
                      {"tp", c.tp},
                      {"context", c.cp > 1 ? ir::toString(c.context) : StringRef("none")},
                      {"async_tp", ir::toString(c.asyncTp)},
                      {"sp_inputs", c.sequenceParallel && c.tp > 1
                                        ? json::Value(ir::toString(c.spInputs))
                                        : json::Value(nullptr)},
                      {"dp_overlap", ir::toString(c.dpOverlap)},
                      {"grad_reduce", ir::toString(c.gradReduce)},
                      {"ep_overlap", c.epOverlap},
                      {"dispatcher", ir::toString(c.dispatcher)},
                      {"expert_tensor", c.expertFold ? "fold" : "split"},
                      {"expert_context", c.contextFold ? "fold" : "split"},
                      {"precision", c.formatPrecision()},
                      {"ep", c.ep},
                      {"experts_replicated", c.expertsReplicated},
                      {"params", toString(c.params)},
                      {"grads", toString(c.grads)},
                      {"optimizer", toString(c.optimizer)},
                      {"activations", ir::toString(c.activations)},
                      {"sequence_parallel", c.sequenceParallel},
                      {"micro_batch", c.microBatch},
                      {"microbatches", c.microbatches},
                      {"schedule", c.pp > 1 ? ir::toString(c.schedule) : StringRef("none")},
                      {"chunks", c.chunks},
                      {"group", c.group},
                      {"first_last_layers", c.countedSplit ? 0 : c.edgeLayers},
                      {"embedding_loss_layers", c.countedSplit},
                      {"step_seconds", c.stepSeconds},
                      {"peak_bytes", c.peakBytes}};
}

int printMaxParams(const ir::Run &run, const SearchOptions &options, bool json, raw_ostream &out) {
  std::vector<MaxParamsRow> rows = findMaxParams(run, options);
  if (json) {
    json::Array array;
    for (const MaxParamsRow &row : rows) {
      json::Object object{{"family", toString(row.family)},
                          {"tensor_parallel", row.tensorParallel},
                          {"params", row.params}};
      if (row.config) {
        object["hidden"] = row.config->hidden;
        object["heads"] = row.config->heads;
        object["layers"] = row.config->layers;
      }
      if (row.best)
        object["plan"] = candidateJson(*row.best);
      array.push_back(std::move(object));
    }
    out << formatv("{0:2}", json::Value(std::move(array))) << "\n";
    return 0;
  }
  const ir::TransformerConfig &base = run.model->transformer;
  out << "largest model of the shape of '" << run.model->name << "' (hidden / layers "
      << format("%g", static_cast<double>(base.hidden) / static_cast<double>(base.layers))
      << ", seq " << base.seq << ", vocab " << base.vocab << ", head dim " << base.getHeadDim()
      << "; hidden, heads and layers scaled) that fits on " << options.devices << " devices:\n";
  out << format("%-8s %-4s %10s %8s %6s %6s  %s\n", text("family"), text("tp"), text("params"),
                text("hidden"), text("heads"), text("layers"), text("best plan"));
  for (const MaxParamsRow &row : rows) {
    std::string params = "-", hidden = "-", heads = "-", layers = "-", plan = "nothing fits";
    if (row.config) {
      params = formatv("{0:F1}B", static_cast<double>(row.params) / 1e9).str();
      hidden = std::to_string(row.config->hidden);
      heads = std::to_string(row.config->heads);
      layers = std::to_string(row.config->layers);
      plan = row.best ? row.best->describe() : "";
    }
    out << format("%-8s %-4s %10s %8s %6s %6s  %s\n", toString(row.family).str().c_str(),
                  row.tensorParallel ? "yes" : "no", params.c_str(), hidden.c_str(), heads.c_str(),
                  layers.c_str(), plan.c_str());
  }
  return 0;
}

} // namespace

int runSearchCommand(const ir::Program &program, const SearchCommandOptions &options,
                     raw_ostream &out, raw_ostream &err) {
  const ir::Run *run = nullptr;
  if (options.runName.empty()) {
    if (program.runs.size() == 1)
      run = program.runs.front().get();
  } else {
    run = program.findRun(options.runName);
  }
  if (!run) {
    std::string names;
    for (const std::unique_ptr<ir::Run> &candidate : program.runs)
      names += (names.empty() ? "" : ", ") + candidate->name;
    err << "placec: error: "
        << (options.runName.empty() ? std::string("name the run to search with --run NAME")
                                    : "no run named '" + options.runName + "'")
        << "; the runs are " << (names.empty() ? std::string("none") : names) << "\n";
    return 1;
  }
  if (run->model->kind != ir::ModelKind::Transformer) {
    err << "placec: error: run '" << run->name << "': the search needs a transformer model; '"
        << run->model->name << "' is " << ir::toString(run->model->kind) << "\n";
    return 1;
  }
  SearchOptions searchOptions;
  searchOptions.devices = options.devices ? options.devices : run->cluster->getNumDevices();
  if (searchOptions.devices % run->cluster->devicesPerNode != 0) {
    err << "placec: error: --devices " << options.devices << " is not a multiple of the "
        << run->cluster->devicesPerNode << " devices per node of cluster '" << run->cluster->name
        << "'\n";
    return 1;
  }
  if (!options.memoryBudget.empty()) {
    std::optional<double> budget = parseBytes(options.memoryBudget);
    if (!budget || *budget <= 0) {
      err << "placec: error: --memory-budget '" << options.memoryBudget
          << "' is not a size: write bytes or a quantity such as '70 GB' or '64GiB'\n";
      return 1;
    }
    searchOptions.memoryBudget = *budget;
  }
  // Precisions: the run's own unless --precision asks for others; FP8 only on a device that has
  // FP8 tensor cores (rule `precision`).
  std::string precisionError;
  if (!options.precisions.empty()) {
    std::optional<std::vector<ir::Precision>> precisions =
        parsePrecisions(options.precisions, *run, precisionError, &searchOptions.fp4);
    if (!precisions) {
      err << "placec: error: " << precisionError << "\n";
      return 1;
    }
    searchOptions.precisions = *precisions;
  } else if (run->precision == ir::Precision::MixedFP8 &&
             run->cluster->getLowPrecisionPeak(run->fp8Scaling) <= 0) {
    bool fp4 = run->fp8Scaling == ir::Fp8Scaling::Nvfp4;
    err << "placec: error: run '" << run->name << "' is " << (fp4 ? "mixed(fp4)" : "mixed(fp8)")
        << ", but cluster '" << run->cluster->name << "' has no " << (fp4 ? "FP4" : "FP8")
        << " tensor cores"
        << (run->cluster->device ? " (" + std::string(run->cluster->device->name) + ")"
                                 : std::string(fp4 ? ": give it peak_fp4" : ": give it peak_fp8"))
        << "\n";
    return 1;
  }
  // Each list flag parsed into its option where it is given; false on an error, printed.
  auto parseFlag = [&](const std::string &text, auto parse, auto &into) {
    if (text.empty())
      return true;
    std::string error;
    auto values = parse(StringRef(text), error);
    if (!values) {
      err << "placec: error: " << error << "\n";
      return false;
    }
    into = *values;
    return true;
  };
  auto withRun = [&](auto parse) {
    return [&, parse](StringRef text, std::string &error) { return parse(text, *run, error); };
  };
  if (!parseFlag(options.schedules, withRun(parseSchedules), searchOptions.schedules))
    return 1;
  // --target: the framework's own settings where none is asked for, and only plans its bridge
  // exports. Megatron-LM always reduces the input gradients beside the weight gradients (wgrad;
  // true is --tp-comm-overlap) and gathers the sequence shard again (regather, the default);
  // torchtitan's asynchronous TP overlaps the forward's collectives (forward) and PyTorch keeps
  // the gathered inputs (keep). A model searched exactly (search::searchesExactly: a mixture of
  // experts, alternating window and full attention) is searched without async_tp's overlap.
  // Megatron-LM recomputes whole layers or, with its selective recomputation, the core attention:
  // over fused attention that is recompute(attention).
  std::string asyncTp = options.asyncTp, spInputs = options.spInputs,
              activations = options.activations;
  if (!options.target.empty() && options.maxParams) {
    err << "placec: error: --max-params sizes the strategy families, not a framework's plans; "
           "leave --target out\n";
    return 1;
  }
  if (!options.target.empty()) {
    bool moe = searchesExactly(*run->model);
    if (asyncTp.empty() && options.target == "megatron")
      asyncTp = moe ? "wgrad" : "wgrad,true";
    if (activations.empty() && options.target == "megatron" &&
        run->model->transformer.attention != ir::AttentionKind::Materialized &&
        !run->model->transformer.unpad && run->kernels == ir::KernelMode::Fused)
      activations = "keep,attention,full";
    if (asyncTp.empty() && options.target == "torchtitan")
      asyncTp = moe ? "false" : "false,forward";
    if (spInputs.empty() && options.target == "torchtitan")
      spInputs = "keep";
  }
  if (!parseFlag(activations, withRun(parseActivationModes), searchOptions.activations) ||
      !parseFlag(asyncTp, parseAsyncTensorParallel, searchOptions.asyncTp) ||
      !parseFlag(options.epOverlap, withRun(parseExpertOverlap), searchOptions.epOverlap) ||
      !parseFlag(options.expertTensor, withRun(parseExpertTensor), searchOptions.expertTensor) ||
      !parseFlag(options.dispatcher, withRun(parseDispatchers), searchOptions.dispatchers) ||
      !parseFlag(options.expertContext, withRun(parseExpertContext), searchOptions.expertContext))
    return 1;
  if (!options.context.empty()) {
    std::string error;
    std::optional<std::vector<ir::ContextMethod>> methods =
        parseContextMethods(options.context, error);
    if (!methods) {
      err << "placec: error: " << error << "\n";
      return 1;
    }
    if (run->contextMerge == ir::ContextMerge::Eager &&
        llvm::is_contained(*methods, ir::ContextMethod::AllToAll)) {
      err << "placec: error: --context=" << options.context << ": run '" << run->name
          << "' has context_merge = eager, PyTorch's context parallelism, which has no "
             "all-to-all (list ring, all_gather or none)\n";
      return 1;
    }
    searchOptions.contextMethods = *methods;
  }
  if (!spInputs.empty()) {
    if (spInputs == "regather" || spInputs == "keep") {
      searchOptions.spInputs = spInputs == "keep" ? ir::SequenceParallelInputs::Keep
                                                  : ir::SequenceParallelInputs::Regather;
    } else {
      err << "placec: error: --sp-inputs '" << spInputs
          << "' is not an sp_inputs setting: write regather (Megatron-LM's column-parallel "
             "products gather their inputs again in the backward) or keep (PyTorch's keep them "
             "gathered)\n";
      return 1;
    }
  }
  if (!options.dpOverlap.empty()) {
    if (options.dpOverlap == "grads" || options.dpOverlap == "all" || options.dpOverlap == "none") {
      searchOptions.dpOverlap = options.dpOverlap == "all"    ? ir::DataParallelOverlap::All
                                : options.dpOverlap == "none" ? ir::DataParallelOverlap::None
                                                              : ir::DataParallelOverlap::Grads;
    } else {
      err << "placec: error: --dp-overlap '" << options.dpOverlap
          << "' is not a dp_overlap setting: write grads (the step's gradient reductions beside "
             "the last backward: PyTorch, Megatron-LM's --overlap-grad-reduce), all (and the "
             "updated parameters' all-gathers beside the next forward: --overlap-param-gather) "
             "or none (both exposed: Megatron-LM's default)\n";
      return 1;
    }
  }
  searchOptions.topK = std::max(1u, options.topK);
  searchOptions.onAccepted = options.onAccepted;
  searchOptions.threads = options.threads;
  if (options.maxParams && searchesExactly(*run->model)) {
    // The families are sized by the fast path over models of identical layers.
    err << "placec: error: --max-params scales a model of identical layers, and model '"
        << run->model->name << "' " << getExactSearchReason(*run->model) << "\n";
    return 1;
  }
  if (options.maxParams)
    return printMaxParams(*run, searchOptions, options.json, out);

  std::string strategyName = run->name + "_best";
  std::string runName = run->name + "_searched";
  // The plans are built as the runs their Place text declares, on the searched cluster.
  std::shared_ptr<ir::Cluster> searchCluster =
      makeSearchCluster(*run->cluster, searchOptions.devices, searchOptions.memoryBudget);
  auto buildPlan = [&](const Candidate &c, std::unique_ptr<ir::Strategy> &strategy) {
    strategy = buildStrategy(c, strategyName);
    std::unique_ptr<ir::Run> built = buildRun(*run, *searchCluster, *strategy, c);
    built->name = runName;
    return built;
  };
  if (!options.target.empty())
    searchOptions.refusal = [&](const Candidate &c) {
      std::unique_ptr<ir::Strategy> strategy;
      std::unique_ptr<ir::Run> built = buildPlan(c, strategy);
      std::vector<BridgeVerdict> verdicts = options.bridges(*built, options.target);
      return verdicts.empty() ? std::string() : verdicts.front().refusal;
    };

  ProgressBar bar(err);
  if (options.progress && sys::Process::StandardErrIsDisplayed())
    searchOptions.progress = [&](double fraction) { bar.update(fraction); };
  SearchResult result = searchStrategies(*run, searchOptions);
  bar.finish();
  const ir::Cluster &cluster = *result.cluster;
  int64_t devices = cluster.getNumDevices();

  std::string placeText;
  if (!result.top.empty())
    placeText = formatStrategy(result.top.front(), strategyName) + "\n" +
                formatRun(*run, result.top.front(), runName, strategyName, cluster.name);
  // What each framework's bridge says of each plan, built as the run its Place text declares.
  if (options.bridges)
    for (const Candidate &c : result.top) {
      std::unique_ptr<ir::Strategy> strategy;
      result.topBridges.push_back(options.bridges(*buildPlan(c, strategy), ""));
    }

  if (options.print) {
    options.print(*run, result, placeText, out);
  } else if (options.json) {
    json::Object rejected;
    for (const auto &[rule, count] : result.rejectedByRule)
      rejected[rule] = static_cast<int64_t>(count);
    json::Object refusals;
    for (const auto &[reason, count] : result.refusals)
      refusals[reason] = static_cast<int64_t>(count);
    json::Array top;
    for (size_t i = 0; i < result.top.size(); ++i) {
      json::Object object = candidateJson(result.top[i]);
      object["tflops_per_device"] = tflopsPerDevice(result.topAnalyses[i], devices);
      object["mfu"] = result.topAnalyses[i].time.mfu;
      object["inter_node_bytes"] = interNodeBytes(result.topAnalyses[i]);
      if (i < result.topBridges.size()) {
        json::Object bridges;
        for (const BridgeVerdict &verdict : result.topBridges[i])
          bridges[verdict.target] =
              verdict.exports() ? json::Value(nullptr) : json::Value(verdict.refusal);
        object["bridges"] = std::move(bridges);
      }
      top.push_back(std::move(object));
    }
    json::Object root{
        {"run", run->name},
        {"devices", devices},
        {"memory_budget", cluster.deviceMemory},
        {"space", static_cast<int64_t>(result.spaceSize)},
        {"meshes", static_cast<int64_t>(result.meshes)},
        {"accepted", static_cast<int64_t>(result.accepted)},
        {"pruned_by_lower_bound", static_cast<int64_t>(result.prunedByLowerBound)},
        {"pruned_by_schedule", static_cast<int64_t>(result.prunedBySchedule)},
        {"pruned_by_step", static_cast<int64_t>(result.prunedByStep)},
        {"pruned_by_memory_order", static_cast<int64_t>(result.prunedByMemoryOrder)},
        {"rejected", std::move(rejected)},
        {"target", options.target.empty() ? json::Value(nullptr) : json::Value(options.target)},
        {"refused_by_target", static_cast<int64_t>(result.refused)},
        {"refusals", std::move(refusals)},
        {"seconds", result.seconds},
        {"threads", static_cast<int64_t>(result.threads)},
        {"top", std::move(top)}};
    if (!placeText.empty())
      root["place"] = placeText;
    if (result.smallest) {
      root["smallest"] = candidateJson(*result.smallest);
    }
    out << formatv("{0:2}", json::Value(std::move(root))) << "\n";
  } else if (options.markdown) {
    out << "## Search for run `" << run->name << "`\n\n"
        << "Model `" << run->model->name << "` ("
        << formatv("{0:F1}B", static_cast<double>(run->model->numParams) / 1e9) << " params) on "
        << devices << " devices of cluster `" << cluster.name << "`, memory budget "
        << formatBytes(cluster.deviceMemory) << " per device. Space: " << result.spaceSize
        << " candidates over " << result.meshes << " meshes; accepted: " << result.accepted;
    for (const auto &[rule, count] : result.rejectedByRule)
      out << "; rejected by " << rule << ": " << count;
    if (!options.target.empty())
      out << "; left out as `placec compile --target=" << options.target
          << "` cannot express them: " << result.refused;
    out << ".\n\n";
    if (!result.top.empty()) {
      printMarkdownTable(result, out);
      out << "\nThe best plan:\n\n```\n" << placeText << "```\n";
      if (!result.topBridges.empty()) {
        out << "\nThe best plan in other frameworks (`placec compile --target=...`):\n\n";
        for (const BridgeVerdict &verdict : result.topBridges.front())
          out << "- `" << verdict.target << "`: " << verdict.describe() << "\n";
      }
    }
  } else {
    out << "search for run '" << run->name << "': model '" << run->model->name << "' ("
        << formatv("{0:F1}B", static_cast<double>(run->model->numParams) / 1e9) << " params) on "
        << devices << " devices of cluster '" << cluster.name << "', memory budget "
        << formatBytes(cluster.deviceMemory) << " per device\n";
    out << "space: " << result.spaceSize << " candidates over " << result.meshes
        << " meshes, searched in " << format("%.3f", result.seconds) << " s ("
        << format("%.3g",
                  result.seconds > 0 ? static_cast<double>(result.spaceSize) / result.seconds : 0.0)
        << " candidates/s) on " << result.threads
        << (result.threads == 1 ? " thread\n" : " threads\n");
    out << "accepted: " << result.accepted;
    if (result.prunedByStep)
      out << " (" << result.prunedByStep
          << " not timed: a lower bound of their step is slower than every plan kept for the top)";
    out << "\n";
    for (const auto &[rule, count] : result.rejectedByRule) {
      std::vector<std::string> pruned;
      if (rule == "capacity" && (result.prunedByLowerBound || result.prunedBySchedule))
        pruned.push_back(std::to_string(result.prunedByLowerBound) +
                         " by the closed-form lower bound");
      if (rule == "capacity" && result.prunedBySchedule)
        pruned.push_back(std::to_string(result.prunedBySchedule) +
                         " as schedules holding more micro-batches than one over the budget");
      if (rule == "capacity" && result.prunedByMemoryOrder)
        pruned.push_back(std::to_string(result.prunedByMemoryOrder) +
                         " as plans keeping more activations or larger micro-batches than one "
                         "over the budget");
      out << "rejected by " << rule << ": " << count
          << (pruned.empty() ? std::string() : " (" + llvm::join(pruned, ", ") + ")") << "\n";
    }
    if (!options.target.empty())
      out << "left out as placec compile --target=" << options.target
          << " cannot express them: " << result.refused
          << " (of the accepted plans that would have ranked)\n";
    if (!result.top.empty()) {
      out << "\n";
      printTable(result, out);
      out << "\n// The best plan, ready to paste:\n" << placeText;
      if (!result.topBridges.empty()) {
        out << "\nThe best plan in other frameworks (placec compile --target=...):\n";
        for (const BridgeVerdict &verdict : result.topBridges.front())
          out << format("  %-11s ", verdict.target.c_str()) << verdict.describe() << "\n";
      }
    }
  }
  out.flush();
  if (result.disagreements)
    err << "placec: warning: " << result.disagreements
        << " candidates the search accepted were rejected by the verifier\n";

  if (result.top.empty() && result.bestRefused) {
    err << "placec: error: no strategy for run '" << run->name << "' on " << devices
        << " devices that placec compile --target=" << options.target
        << " can express fits: the fastest plan that fits, " << result.bestRefused->describe()
        << ", is refused: " << result.bestRefusal << "\n";
    // The bridge's reasons over every plan it was asked of, the most frequent first.
    std::vector<std::pair<std::string, uint64_t>> reasons(result.refusals.begin(),
                                                          result.refusals.end());
    llvm::sort(reasons, [](const auto &a, const auto &b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    for (size_t i = 0; i < std::min<size_t>(reasons.size(), 3); ++i)
      err << "placec: note: " << reasons[i].second << " of the " << result.refused
          << " plans refused: " << reasons[i].first << "\n";
    return 1;
  }
  if (result.top.empty()) {
    err << "placec: error: no strategy for run '" << run->name << "' fits " << devices
        << " devices with " << formatBytes(cluster.deviceMemory) << " each";
    if (result.smallest)
      err << ": the smallest per-device memory reachable is "
          << formatBytes(result.smallest->peakBytes) << ", with " << result.smallest->describe();
    err << "\n";
    return 1;
  }

  if (!options.outputFile.empty()) {
    std::error_code ec;
    ToolOutputFile file(options.outputFile, ec, sys::fs::OF_None);
    if (ec) {
      err << "placec: error: cannot write '" << options.outputFile << "': " << ec.message() << "\n";
      return 1;
    }
    file.os() << "// The best plan placec search found for run '" << run->name << "' on " << devices
              << " devices.\n\n"
              << formatModel(*run->model) << "\n"
              << formatCluster(*makeSearchCluster(*run->cluster, devices, 0)) << "\n"
              << placeText;
    file.keep();
  }
  return 0;
}

} // namespace placec::search
