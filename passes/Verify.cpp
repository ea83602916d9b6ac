// The verifier: the composition rules of the language (docs/rules.md) checked on every run.
#include "placec/passes/Analysis.h"
#include "placec/passes/CostModel.h"
#include "placec/passes/Passes.h"
#include "placec/passes/StepPlan.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <map>
#include <numeric>

using namespace llvm;

namespace placec {

namespace {

/// The buffer name of the standard prelude (frontend/Frontend.h, kPreludeName). Diagnostics are
/// not pointed into it: a user cannot edit the prelude, so they point at the user's code instead
/// and a note shows the prelude line.
constexpr StringLiteral kPreludeBufferName = "<prelude>";

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;

/// Formats a mesh as written: `[pp = 4, dp = 16, tp = 8]`.
std::string formatMesh(const ir::Mesh &mesh) {
  std::string text = "[";
  for (size_t i = 0; i < mesh.axes.size(); ++i)
    text += (i ? ", " : "") + mesh.axes[i].name + " = " + std::to_string(mesh.axes[i].size);
  return text + "]";
}

/// The axes of a strategy's expert group with their sizes, as a product: `ep 4 × cp 2 × tp 2`.
std::string formatExpertGroup(const ir::Strategy &strategy) {
  std::string text;
  for (const ir::Axis &axis : strategy.mesh.axes)
    if (strategy.isExpertGroupAxis(axis.kind) && axis.size > 1)
      text += (text.empty() ? "" : " × ") + axis.name + " " + std::to_string(axis.size);
  return text;
}

/// Three significant digits at most, without trailing zeros: 93.4, 1.88, 0.117, 1200.
std::string formatNumber(double value) {
  std::string text;
  raw_string_ostream os(text);
  if (value >= 100)
    os << format("%.0f", value);
  else if (value >= 10)
    os << format("%.1f", value);
  else if (value >= 1)
    os << format("%.2f", value);
  else
    os << format("%.3g", value);
  os.flush();
  if (StringRef(text).contains('.') && !StringRef(text).contains('e')) {
    text = StringRef(text).rtrim('0').str();
    text = StringRef(text).rtrim('.').str();
  }
  return text;
}

/// Memory: `93.4 GiB`.
std::string formatGiB(double bytes) { return formatNumber(bytes / kGiB) + " GiB"; }
/// Memory with its decimal value for comparison with GB-based figures: `93.4 GiB (100 GB)`.
std::string formatGiBAndGB(double bytes) {
  return formatGiB(bytes) + " (" + formatNumber(bytes / kGB) + " GB)";
}
/// Traffic, in decimal units like the bandwidths it crosses: `3.2 GB`.
std::string formatGB(double bytes) { return formatNumber(bytes / kGB) + " GB"; }

/// `'dp'`, `'a' and 'b'`, `'a', 'b' and 'c'`.
std::string quoteList(ArrayRef<std::string> names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0)
      text += i + 1 == names.size() ? " and " : ", ";
    text += "'" + names[i] + "'";
  }
  return text;
}

/// A set of mesh axes that one rule finds wrong for one state, in mesh order.
struct AxisSet {
  const ir::Mesh *mesh = nullptr;
  std::vector<unsigned> axes;

  bool empty() const { return axes.empty(); }
  std::vector<std::string> getNames() const {
    std::vector<std::string> names;
    for (unsigned axis : axes)
      names.push_back(mesh->axes[axis].name);
    return names;
  }
  /// `'dp'`, `'node' and 'gpu'`.
  std::string quoted() const { return quoteList(getNames()); }
  /// `dp`, `node, gpu`: the arguments of a mode.
  std::string args() const { return join(getNames(), ", "); }
  int64_t getDegree() const {
    int64_t degree = 1;
    for (unsigned axis : axes)
      degree *= mesh->axes[axis].size;
    return degree;
  }
};

/// The batch axes on which `state` is placed in one of `modes`. Axes of size 1 are left out: a
/// mode over one device changes nothing. With `expert`, the routed experts' placement over their
/// expert-data-parallel axes.
AxisSet batchAxesWith(const ir::Strategy &strategy, ir::State state,
                      std::initializer_list<ir::PlacementMode> modes, bool expert = false) {
  AxisSet set{&strategy.mesh, {}};
  const ir::StatePlacement &placement =
      expert ? strategy.getExpertPlacement(state) : strategy.getPlacement(state);
  for (unsigned i = 0; i < strategy.mesh.axes.size(); ++i) {
    ir::AxisKind kind = strategy.mesh.axes[i].kind;
    if ((expert ? strategy.isExpertDataParallelAxis(kind) : ir::isDataParallel(kind)) &&
        strategy.mesh.axes[i].size > 1 && llvm::is_contained(modes, placement.axes[i].mode))
      set.axes.push_back(i);
  }
  return set;
}

/// `axes` restricted to those where `other` (of the routed experts with `expert`) is placed in one
/// of `modes`.
AxisSet intersect(const AxisSet &axes, const ir::Strategy &strategy, ir::State other,
                  std::initializer_list<ir::PlacementMode> modes, bool expert = false) {
  AxisSet set{axes.mesh, {}};
  const ir::StatePlacement &placement =
      expert ? strategy.getExpertPlacement(other) : strategy.getPlacement(other);
  for (unsigned axis : axes.axes)
    if (llvm::is_contained(modes, placement.axes[axis].mode))
      set.axes.push_back(axis);
  return set;
}

/// Where a diagnostic goes: a location in the user's files and, when the placement it is about
/// was written in the prelude, the prelude location for a note.
struct Where {
  SMLoc loc;
  SMLoc preludeLoc;
};

/// Bytes of one state (or of the transient buffers, which belong to none), for the breakdown
/// notes of `capacity`.
struct StateShare {
  StringRef name;
  double bytes;
  std::optional<ir::State> state;
};

class VerifyPass : public Pass {
public:
  explicit VerifyPass(VerifyOptions options) : options(options) {}
  StringRef getName() const override { return "verify"; }
  bool run(ir::Program &program, DiagnosticEngine &diags) override;

private:
  /// `mesh-size`: the mesh's product equals the cluster's device count.
  bool checkMeshSize(const ir::Run &run);
  /// `divisibility`: tensor degree divides the split dimensions, layers divide among stages,
  /// micro-batches are at least one and the global-batch equation holds.
  bool checkDivisibility(const ir::Run &run);
  /// `gradient-integrity`: the optimizer consumes full gradients (summed over every batch axis
  /// and micro-batch, once).
  bool checkGradientIntegrity(const ir::Run &run);
  /// `state-consistency`: params sharded where the optimizer is replicated (wasteful).
  void checkStateConsistency(const ir::Run &run);
  /// `coverage`: params sharded on a batch axis and never gathered.
  bool checkCoverage(const ir::Run &run);
  /// Expert parallelism: an expert axis needs routed experts it divides, and the routed experts'
  /// placement keeps gradient integrity, coverage and state consistency over the
  /// expert-data-parallel axes.
  bool checkExperts(const ir::Run &run);
  /// `pipeline-sharding`: per-micro-batch collectives of the batch axes under a pipeline.
  void checkPipelineSharding(const ir::Run &run, const analysis::RunAnalysis *analysis);
  /// `offload`: the cluster fields an offloaded tier needs.
  bool checkOffloadLinks(const ir::Run &run);
  /// `offload`: offloaded params that move the whole per-device model every step.
  void checkOffloadTraffic(const ir::Run &run, const plan::StepPlan &plan);
  /// `capacity`: device, host and NVMe memory against the cluster's.
  bool checkCapacity(const ir::Run &run, const analysis::RunAnalysis &analysis);

  /// The location of a run's field, or of the run's name when the field was not written.
  static SMLoc fieldLoc(const ir::Run &run, StringRef key) {
    SMLoc loc = run.fieldLocs.lookup(key);
    return loc.isValid() ? loc : run.loc;
  }
  bool isInPrelude(SMLoc loc) const;
  /// Where to report about a placement written at `loc` (invalid: not written).
  Where locate(const ir::Run &run, SMLoc loc) const;
  /// The location of a state's mode on one axis: the mode, the state's line, or nothing.
  static SMLoc axisLoc(const ir::Strategy &strategy, ir::State state, unsigned axis) {
    const ir::StatePlacement &placement = strategy.getPlacement(state);
    SMLoc loc = placement.axes[axis].loc;
    return loc.isValid() ? loc : placement.loc;
  }
  static SMLoc tierLoc(const ir::Strategy &strategy, ir::State state) {
    const ir::StatePlacement &placement = strategy.getPlacement(state);
    return placement.tierLoc.isValid() ? placement.tierLoc : placement.loc;
  }

  /// Reports a rule's error or warning at `where`, then the notes `notes` adds, the prelude note
  /// and the note naming the run when the location is not in the run itself. Reports nothing and
  /// returns false when the same diagnostic was already reported for another run of the same
  /// strategy.
  bool report(Severity severity, const ir::Run &run, const Where &where, const Twine &message,
              StringRef rule, function_ref<void()> notes = {});
  /// A note saying where a state's mode over `axes` comes from: the mode as written, or the
  /// default of a batch axis.
  void noteDefault(const ir::Run &run, ir::State state, const AxisSet &axes, StringRef mode);

  /// A suggestion for a run over capacity: the first single change that fits, then all of them
  /// together, then more devices.
  std::string suggestForDevice(const ir::Run &run);
  /// A suggestion for a run whose offloaded states overflow the host or NVMe (`tier`).
  std::string suggestForOffload(const ir::Run &run, ir::Tier tier, ArrayRef<StateShare> shares);

  VerifyOptions options;
  DiagnosticEngine *diags = nullptr;
  StringSet<> reported;
};

bool VerifyPass::isInPrelude(SMLoc loc) const {
  if (!loc.isValid())
    return false;
  SourceMgr &sourceMgr = diags->getSourceMgr();
  unsigned id = sourceMgr.FindBufferContainingLoc(loc);
  return id != 0 && sourceMgr.getMemoryBuffer(id)->getBufferIdentifier() == kPreludeBufferName;
}

Where VerifyPass::locate(const ir::Run &run, SMLoc loc) const {
  if (loc.isValid() && !isInPrelude(loc))
    return {loc, SMLoc()};
  // The strategy's own name (a user declaration or the instantiation as written), else the
  // run's `strategy` field.
  SMLoc fallback = run.strategy->loc;
  if (!fallback.isValid() || isInPrelude(fallback))
    fallback = fieldLoc(run, "strategy");
  return {fallback, isInPrelude(loc) ? loc : SMLoc()};
}

bool VerifyPass::report(Severity severity, const ir::Run &run, const Where &where,
                        const Twine &message, StringRef rule, function_ref<void()> notes) {
  std::string text = message.str();
  std::string key =
      (Twine(rule) + "@" + Twine(reinterpret_cast<uintptr_t>(where.loc.getPointer())) + ":" + text)
          .str();
  if (!reported.insert(key).second)
    return false;
  diags->report(severity, where.loc, text, rule);
  if (notes)
    notes();
  if (where.preludeLoc.isValid())
    diags->note(where.preludeLoc, "the placement is written in the prelude here");
  SMLoc strategyField = fieldLoc(run, "strategy");
  if (where.loc != strategyField)
    diags->note(strategyField,
                Twine("run '") + run.name + "' uses strategy '" + run.strategy->name + "' here");
  return true;
}

void VerifyPass::noteDefault(const ir::Run &run, ir::State state, const AxisSet &axes,
                             StringRef mode) {
  const ir::Strategy &strategy = *run.strategy;
  SMLoc loc = axisLoc(strategy, state, axes.axes.front());
  bool written = strategy.getPlacement(state).axes[axes.axes.front()].isExplicit;
  std::string what =
      (Twine(ir::toString(state)) + (state == ir::State::Optimizer ? " is " : " are ") + mode +
       " over " + axes.quoted())
          .str();
  if (loc.isValid() && !isInPrelude(loc)) {
    diags->note(loc, written ? what + " here" : what + " (the default on a batch axis)");
    return;
  }
  if (loc.isValid()) {
    diags->note(loc, what + " in the prelude strategy");
    return;
  }
  diags->note(locate(run, SMLoc()).loc, what + " (the default on a batch axis)");
}

bool VerifyPass::run(ir::Program &program, DiagnosticEngine &diags) {
  this->diags = &diags;
  reported.clear();
  bool ok = true;
  for (const std::unique_ptr<ir::Run> &run : program.runs) {
    // Later rules assume the mesh fits the cluster.
    if (!checkMeshSize(*run)) {
      ok = false;
      continue;
    }
    // Collect every violation of the run; the analyses need a run without errors.
    bool runOk = checkDivisibility(*run);
    runOk &= checkGradientIntegrity(*run);
    checkStateConsistency(*run);
    runOk &= checkCoverage(*run);
    runOk &= checkExperts(*run);
    runOk &= checkOffloadLinks(*run);
    if (!runOk) {
      checkPipelineSharding(*run, nullptr);
      ok = false;
      continue;
    }
    std::unique_ptr<plan::StepPlan> plan =
        plan::lowerRun(*run, plan::LowerOptions{/*reasons=*/false});
    analysis::RunAnalysis analysis = analysis::analyze(*plan, options.analysis);
    checkPipelineSharding(*run, &analysis);
    checkOffloadTraffic(*run, *plan);
    ok &= checkCapacity(*run, analysis);
    if (options.onAnalysis)
      options.onAnalysis(*run, analysis);
  }
  this->diags = nullptr;
  return ok;
}

//===----------------------------------------------------------------------===//
// mesh-size, divisibility
//===----------------------------------------------------------------------===//

bool VerifyPass::checkMeshSize(const ir::Run &run) {
  const ir::Mesh &mesh = run.strategy->mesh;
  const ir::Cluster &cluster = *run.cluster;
  int64_t meshDevices = mesh.getNumDevices();
  if (meshDevices == cluster.getNumDevices())
    return true;
  diags->error(fieldLoc(run, "strategy"),
               Twine("mesh ") + formatMesh(mesh) + " of strategy '" + run.strategy->name +
                   "' has " + Twine(meshDevices) + " devices, but cluster '" + cluster.name +
                   "' has " + Twine(cluster.getNumDevices()) + " (" + Twine(cluster.nodes) +
                   " nodes × " + Twine(cluster.devicesPerNode) + ")",
               "mesh-size");
  diags->note(run.strategy->loc, Twine("strategy '") + run.strategy->name + "' is declared here");
  diags->note(cluster.loc, Twine("cluster '") + cluster.name + "' is declared here");
  return false;
}

bool VerifyPass::checkDivisibility(const ir::Run &run) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::Mesh &mesh = strategy.mesh;
  const ir::Model &model = *run.model;
  bool ok = true;
  SMLoc strategyLoc = fieldLoc(run, "strategy");

  int64_t tensorDegree = mesh.getDegree(ir::AxisKind::Tensor);
  if (tensorDegree > 1) {
    auto requireDivides = [&](StringRef what, int64_t value) {
      if (value % tensorDegree == 0)
        return;
      diags->error(strategyLoc,
                   Twine("tensor-parallel degree ") + Twine(tensorDegree) + " does not divide " +
                       what + " (" + Twine(value) + ") of model '" + model.name + "'",
                   "divisibility");
      diags->note(model.loc, Twine("model '") + model.name + "' is declared here");
      ok = false;
    };
    if (model.kind == ir::ModelKind::Transformer) {
      requireDivides("the heads", model.transformer.heads);
      // Grouped-query attention: each tensor-parallel rank holds whole key/value heads, as
      // Megatron-Core requires (num_query_groups divisible by the tensor-parallel size).
      if (model.transformer.kvHeads > 0)
        requireDivides("the key/value heads", model.transformer.kvHeads);
      requireDivides("the hidden size", model.transformer.hidden);
      requireDivides("the ffn size", model.transformer.ffn);
    } else if (model.kind == ir::ModelKind::Mlp) {
      requireDivides("the width", model.mlp.width);
    }
  }

  int64_t stages = mesh.getDegree(ir::AxisKind::Layers);
  int64_t layers = model.getNumLayers();
  const ir::Pipeline *pipeline = strategy.pipeline ? &*strategy.pipeline : nullptr;
  bool uneven = pipeline && (pipeline->firstStageLayers > 0 || pipeline->lastStageLayers > 0);
  if (pipeline && !pipeline->layout.empty()) {
    // Megatron-Core's layout: as many virtual stages as stages × chunks, every layer and
    // multi-token prediction module of the model placed once (its validate_layer_layout).
    const ir::PipelineLayoutSpec &layout = pipeline->layout;
    int64_t virtualStages = static_cast<int64_t>(layout.layers.size());
    int64_t total = stages * pipeline->chunks;
    auto fail = [&](const Twine &message) {
      diags->error(layout.loc, message, "divisibility");
      diags->note(model.loc, Twine("model '") + model.name + "' is declared here");
      ok = false;
    };
    if (model.kind != ir::ModelKind::Transformer)
      fail(Twine("a pipeline layout places a transformer's layers, but model '") + model.name +
           "' is " + (model.kind == ir::ModelKind::Mlp ? "an mlp" : "abstract"));
    else if (virtualStages != total)
      fail(Twine("the layout has ") + Twine(virtualStages) + " virtual stages, but " +
           Twine(stages) + " pipeline stage" + (stages == 1 ? "" : "s") +
           (pipeline->chunks > 1 ? Twine(" × ") + Twine(pipeline->chunks) + " chunks" : Twine("")) +
           " make " + Twine(total));
    else if (layout.getNumLayers() != layers)
      fail(Twine("the layout places ") + Twine(layout.getNumLayers()) +
           " transformer layers (t), but model '" + model.name + "' has " + Twine(layers));
    else if (layout.getNumMtpLayers() != model.transformer.mtpLayers)
      fail(Twine("the layout places ") + Twine(layout.getNumMtpLayers()) +
           " multi-token prediction modules (m), but model '" + model.name + "' has " +
           Twine(model.transformer.mtpLayers) + " (mtp_layers)");
  } else if (uneven && layers > 0) {
    // The written first and last stages, the others even (Megatron-LM's
    // --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers).
    int64_t first = pipeline->firstStageLayers, last = pipeline->lastStageLayers;
    int64_t rest = layers - first - last;
    int64_t unwritten = stages - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0);
    bool even = stages >= 2 && rest >= 0 &&
                (unwritten == 0 ? rest == 0 : rest >= unwritten && rest % unwritten == 0);
    if (!even) {
      diags->error(pipeline->loc,
                   Twine("the ") + Twine(layers) + " layers of model '" + model.name +
                       "' do not split into " + Twine(stages) +
                       " stages with first = " + Twine(pipeline->firstStageLayers) +
                       " and last = " + Twine(pipeline->lastStageLayers) +
                       ": every other stage must get the same number of layers, at least one",
                   "divisibility");
      diags->note(model.loc, Twine("model '") + model.name + "' is declared here");
      ok = false;
    }
  } else if (pipeline && (pipeline->embeddingLayer || pipeline->lossLayer) &&
             model.kind != ir::ModelKind::Transformer) {
    diags->error(pipeline->loc,
                 Twine("'embedding_layer' and 'loss_layer' count a transformer's embedding and "
                       "loss as layers of the pipeline split; model '") +
                     model.name + "' is " +
                     (model.kind == ir::ModelKind::Mlp ? "an mlp" : "abstract"),
                 "divisibility");
    ok = false;
  } else if (strategy.pipeline && layers > 0) {
    int64_t chunks = strategy.pipeline->chunks;
    // With the embedding and the loss counted as layers (Megatron-Core's
    // get_num_layers_to_build), the layers plus them divide evenly among the chunks, and the
    // first and last chunks build one layer fewer each (none at all where a chunk holds one: the
    // embedding or the output layer alone, as Llama 3 405B's first and last chunks are).
    int64_t split = strategy.pipeline->getSplitLayers(layers);
    int64_t counted = split - layers;
    int64_t total = stages * chunks;
    if (split % total != 0) {
      std::string countedText =
          counted == 0 ? ""
                       : " with the " +
                             std::string(counted == 2 ? "embedding and the loss counted as layers"
                                         : pipeline->embeddingLayer ? "embedding counted as a layer"
                                                                    : "loss counted as a layer") +
                             " (" + std::to_string(split) + ")";
      diags->error(counted > 0 ? pipeline->loc : strategyLoc,
                   Twine("the ") + Twine(layers) + " layers of model '" + model.name + "'" +
                       countedText + " do not divide evenly among " + Twine(stages) +
                       " pipeline stages" +
                       (chunks > 1 ? Twine(" × ") + Twine(chunks) + " chunks" : Twine("")),
                   "divisibility");
      diags->note(model.loc, Twine("model '") + model.name + "' is declared here");
      ok = false;
    }
  }

  // Context parallelism (rule `divisibility`): Megatron-Core splits each sequence into 2·cp
  // chunks to balance the causal attention, so the ring and all-gather exchanges need the
  // sequence to divide by 2·cp; Ulysses's all-to-all gives each rank whole heads, so the
  // tensor-parallel degree times cp must divide the heads and the key/value heads (the ones the
  // attention receives: all `heads` where K and V are repeated, cost::repeatsKv).
  int64_t context = mesh.getDegree(ir::AxisKind::Sequence);
  if (context > 1) {
    if (model.kind != ir::ModelKind::Transformer) {
      diags->error(strategyLoc,
                   Twine("context parallelism over ") + Twine(context) +
                       " devices splits sequences, but model '" + model.name + "' is " +
                       (model.kind == ir::ModelKind::Mlp ? "an mlp" : "abstract") +
                       ", which has none",
                   "divisibility");
      ok = false;
    } else {
      const ir::TransformerConfig &config = model.transformer;
      auto requireContext = [&](StringRef what, int64_t value, int64_t degree, StringRef because) {
        if (value % degree == 0)
          return;
        diags->error(strategy.contextLoc.isValid() ? strategy.contextLoc : strategyLoc,
                     Twine(what) + " (" + Twine(value) + ") of model '" + model.name +
                         "' does not divide by " + Twine(degree) + ": " + because,
                     "divisibility");
        diags->note(model.loc, Twine("model '") + model.name + "' is declared here");
        ok = false;
      };
      // A model whose attention placec does not time under context parallelism (rule
      // `placement`): `what` names the model's field, `why` the reason, and `note` is said at the
      // field.
      auto refuseContext = [&](const Twine &what, const Twine &why, SMLoc fieldLoc,
                               const Twine &field, const Twine &note,
                               StringRef fix = "leave the sequence axis out") {
        diags->error(strategy.contextLoc.isValid() ? strategy.contextLoc : strategyLoc,
                     Twine("context parallelism over ") + Twine(context) + " devices with " + what +
                         " (model '" + model.name + "': " + field + "): " + why + " (" + fix + ")",
                     "placement");
        diags->note(fieldLoc.isValid() ? fieldLoc : model.loc, note);
        ok = false;
      };
      // ALiBi's bias depends on each query's distance to each key, which a rank's chunk of the
      // sequence would have to carry into its kernels; PyTorch's scaled_dot_product_attention
      // takes no ALiBi, and placec describes no context-parallel implementation that passes it.
      // Sliding-window attention: placec times the ring's and the all-gather's exchanges and
      // blockwise attention over the whole causal prefix, where a window needs only the
      // neighbouring ranks' keys. Ulysses's all-to-all gives each rank whole sequences for its
      // heads, whose kernel attends the window as it would without context parallelism
      // (cost::AttentionCore::window): Transformer Engine's attn_forward_func_with_cp takes a
      // sliding window with cp_comm_type "a2a".
      if (config.positions == ir::PositionKind::Alibi) {
        refuseContext("ALiBi positions",
                      "placec describes no context-parallel implementation that passes ALiBi's "
                      "distances to its attention kernels",
                      config.positionsLoc, "positions = alibi",
                      "the positions of model '" + model.name + "' are written here");
      } else if (config.isWindowed() && strategy.contextMethod != ir::ContextMethod::AllToAll) {
        refuseContext("a sliding window",
                      "placec times the keys and values a context-parallel rank receives from " +
                          Twine(strategy.contextMethod == ir::ContextMethod::Ring
                                    ? "a ring"
                                    : "an all-gather") +
                          " over the whole causal prefix, not over a sliding window",
                      config.windowLoc, "window = " + Twine(config.window),
                      "the window of model '" + model.name + "' is written here",
                      "write context = all_to_all, whose ranks attend whole sequences for their "
                      "heads, or leave the sequence axis out");
      } else if (strategy.contextMethod == ir::ContextMethod::AllToAll &&
                 run.contextMerge == ir::ContextMerge::Eager) {
        // PyTorch's context parallelism (`context_merge = eager`) passes or gathers key/value
        // chunks; it has no head-split all-to-all.
        diags->error(fieldLoc(run, "context_merge"),
                     Twine("context_merge = eager is PyTorch's context parallelism, which passes "
                           "or all-gathers the keys and values (context = ring or all_gather); "
                           "strategy '") +
                         strategy.name +
                         "' splits the heads with Ulysses's all-to-all (context = all_to_all)",
                     "placement");
        diags->note(strategy.contextLoc.isValid() ? strategy.contextLoc : strategyLoc,
                    "the context method is written here");
        ok = false;
      } else if (strategy.contextMethod == ir::ContextMethod::AllToAll) {
        int64_t degree = tensorDegree * context;
        requireContext("the heads", config.heads, degree,
                       "Ulysses's all-to-all gives each of the tensor × context ranks whole heads");
        // K and V repeated to every head before the attention (cost::repeatsKv) split like the
        // query heads.
        if (!cost::repeatsKv(config, run.kernels))
          requireContext("the key/value heads", config.getKvHeads(), degree,
                         "Ulysses's all-to-all gives each of the tensor × context ranks whole "
                         "key/value heads");
        requireContext("the sequence", config.seq, context,
                       "each context-parallel rank holds an equal part");
      } else {
        requireContext("the sequence", config.seq, 2 * context,
                       "context parallelism splits each sequence into 2 × cp load-balanced "
                       "chunks");
      }
    }
  }

  int64_t batchDegree = mesh.getSampleDegree();
  int64_t perMicrobatch = run.microBatch * batchDegree;
  if (strategy.pipeline && strategy.pipeline->microbatches) {
    int64_t microbatches = *strategy.pipeline->microbatches;
    if (run.globalBatch != perMicrobatch * microbatches) {
      diags->error(fieldLoc(run, "global_batch"),
                   Twine("global_batch (") + Twine(run.globalBatch) +
                       ") must equal micro_batch × batch degree × micro-batches = " +
                       Twine(run.microBatch) + " × " + Twine(batchDegree) + " × " +
                       Twine(microbatches) + " = " + Twine(perMicrobatch * microbatches),
                   "divisibility");
      diags->note(strategy.pipeline->loc, "the pipeline's micro-batch count is set here");
      ok = false;
    }
  } else if (run.globalBatch % perMicrobatch != 0 || run.globalBatch < perMicrobatch) {
    diags->error(
        fieldLoc(run, "global_batch"),
        Twine("global_batch (") + Twine(run.globalBatch) +
            ") must be a multiple of micro_batch × batch degree = " + Twine(run.microBatch) +
            " × " + Twine(batchDegree) + " = " + Twine(perMicrobatch) +
            ", so that every step has a whole number (at least "
            "one) of micro-batches",
        "divisibility");
    ok = false;
  }

  if (strategy.pipeline && strategy.pipeline->schedule == ir::Schedule::DualPipe) {
    diags->error(strategy.pipeline->loc,
                 "dualpipe keeps two copies of every stage's layers and exchanges their "
                 "gradients, which the step plan does not lower; its one-copy form is "
                 "'dualpipev'",
                 "schedule");
    ok = false;
  }
  // Rule `device`: a fused attention kernel the cluster's device family cannot run.
  if (run.model->kind == ir::ModelKind::Transformer && run.cluster->device &&
      !cost::runsAttention(run.cluster->device->family, run.model->transformer.attention)) {
    const ir::TransformerConfig &config = run.model->transformer;
    ir::DeviceFamily family = run.cluster->device->family;
    std::string instead = "flash";
    if (cost::runsAttention(family, ir::AttentionKind::Cudnn))
      instead += " or cudnn";
    diags->error(config.attentionLoc.isValid() ? config.attentionLoc : run.model->loc,
                 Twine("attention = ") + ir::toString(config.attention) + " of model '" +
                     run.model->name + "' does not run on the " + run.cluster->device->name +
                     " of cluster '" + run.cluster->name + "' (" + ir::toString(family) + "): " +
                     (config.attention == ir::AttentionKind::Flash3
                          ? "FlashAttention-3 needs a Hopper GPU"
                          : "cuDNN's fused attention needs an NVIDIA GPU") +
                     "; write attention = " + instead,
                 "device");
    diags->note(fieldLoc(run, "model"), Twine("run '") + run.name + "' trains model '" +
                                            run.model->name + "' on cluster '" + run.cluster->name +
                                            "' here");
    ok = false;
  }
  bool fp4 = run.precision == ir::Precision::MixedFP8 && run.fp8Scaling == ir::Fp8Scaling::Nvfp4;
  double lowPeak = run.cluster->getLowPrecisionPeak(run.fp8Scaling);
  if (run.precision == ir::Precision::MixedFP8 && lowPeak <= 0) {
    StringRef type = fp4 ? "fp4" : "fp8";
    diags->error(fieldLoc(run, "precision"),
                 Twine("mixed(") + type + ") runs its products on " + (fp4 ? "FP4" : "FP8") +
                     " tensor cores, but cluster '" + run.cluster->name + "' has none" +
                     (run.cluster->device ? Twine(" (") + run.cluster->device->name + ")"
                                          : Twine(": give it peak_") + type),
                 "precision");
    diags->note(run.cluster->loc, Twine("cluster '") + run.cluster->name + "' is declared here");
    ok = false;
  }
  // Rule `precision`: under `params = fp32` autograd adds each micro-batch's fp32 weight
  // gradients into the stored ones (counted as such), which no kernel of a framework's own
  // repeats.
  if (run.gradAccumulation != ir::GradAccumulation::Fused && run.fp32Params &&
      run.precision != ir::Precision::FP32) {
    diags->error(fieldLoc(run, "grad_accumulation"),
                 "grad_accumulation = " + ir::toString(run.gradAccumulation) +
                     " adds 16-bit weight gradients into the stored ones, but run '" + run.name +
                     "' keeps its parameters in fp32 (" + ir::spellPrecision(run) +
                     "), whose gradients autograd accumulates itself; leave grad_accumulation "
                     "out",
                 "precision");
    ok = false;
  }
  // Rule `precision`: `adam(master = none)` leaves out the fp32 master copy of 16-bit
  // parameters; fp32 parameters are the optimizer's weights already.
  if (!run.optimizerStates.master && (run.precision == ir::Precision::FP32 || run.fp32Params)) {
    diags->error(fieldLoc(run, "optimizer"),
                 "adam(master = none) leaves out the master copy of 16-bit parameters, but "
                 "run '" +
                     run.name + "' keeps its parameters in fp32 (" + ir::spellPrecision(run) +
                     "), which the optimizer updates itself; leave master = none out",
                 "precision");
    ok = false;
  }
  // Rule `precision`: MXFP8's and NVFP4's block-scaled products run on Blackwell's tensor cores,
  // and placec models Transformer Engine's recipes of them there (ir::Fp8Scaling). CDNA 4 has
  // block-scaled MXFP8 products too, with no measurement of them or of the recipe's casts.
  if (run.precision == ir::Precision::MixedFP8 && ir::isBlockScaled(run.fp8Scaling)) {
    std::string spelled = fp4 ? "mixed(fp4)" : "mixed(fp8, scaling = mx)";
    StringRef format = fp4 ? "NVFP4" : "MXFP8";
    const ir::DevicePreset *device = run.cluster->device;
    // A device without FP4 tensor cores was refused above already.
    if ((!device || device->family != ir::DeviceFamily::Blackwell) && !(fp4 && lowPeak <= 0)) {
      diags->error(
          fieldLoc(run, "precision"),
          Twine(spelled) +
              " runs its products on block-scaled tensor cores, which placec models on Blackwell "
              "GPUs only, "
              "but cluster '" +
              run.cluster->name + "' " +
              (device ? Twine("has ") + device->name + " (" + ir::toString(device->family) + ")"
                      : Twine("names no device")) +
              "; write device = b200, gb200, b300 or gb300, or " +
              (fp4 ? "mixed(fp8)" : "scaling = tensor"),
          "precision");
      diags->note(run.cluster->loc, Twine("cluster '") + run.cluster->name + "' is declared here");
      ok = false;
    }
    if (run.fp8Gather) {
      diags->error(fieldLoc(run, "precision"),
                   Twine("mixed(fp8, scaling = mx, gather = fp8) cannot be modelled: placec "
                         "counts FP8 all-gathers of one scale per tensor; leave gather = fp8 out"),
                   "precision");
      ok = false;
    }
    if (!run.fp8Saved) {
      diags->error(fieldLoc(run, "precision"),
                   Twine(spelled) + " is Transformer Engine's " + format +
                       " recipe, whose linears keep their inputs for the backward as " + format +
                       (fp4 ? "; leave saved = bf16 out" : "; write saved = fp8"),
                   "precision");
      ok = false;
    }
  }
  // Rule `precision`: `params = fp8` is Megatron-Core's --fp8-param-gather: the parameters as
  // Transformer Engine's FP8 tensors alone, the fp32 master copy in the optimizer. Under one scale
  // per tensor the FP8 data is what is all-gathered (`gather = fp8`), whole parameters by the
  // distributed optimizer after its step or shards by Megatron-FSDP before each use; under MXFP8
  // (with --reuse-grad-buf-for-mxfp8-param-ag) the distributed optimizer, which keeps every
  // parameter whole, all-gathers them in bf16 through the gradient buffer and casts the two MXFP8
  // copies after the gather. `params = fp4` is --fp4-param-gather: NVFP4 parameters, kept whole
  // by the distributed optimizer like MXFP8's, which all-gathers their packed values after its
  // step (plan::getParamGatherType).
  if (run.fp8Params) {
    const ir::Strategy &strategy = *run.strategy;
    bool mx = ir::isBlockScaled(run.fp8Scaling);
    bool fp4 = run.fp8Scaling == ir::Fp8Scaling::Nvfp4;
    std::string spelled = fp4 ? "params = fp4" : "params = fp8";
    // Offloaded, or under MXFP8 sharded over a data-parallel axis (the routed experts: over their
    // expert-data-parallel axes; their split over the expert axis is the model's).
    auto sharded = [&](bool expert) {
      const ir::StatePlacement &placement = expert ? strategy.getExpertPlacement(ir::State::Params)
                                                   : strategy.getPlacement(ir::State::Params);
      return placement.tier != ir::Tier::Device ||
             (mx && !batchAxesWith(
                         strategy, ir::State::Params,
                         {ir::PlacementMode::Sharded, ir::PlacementMode::ShardedWithGather}, expert)
                         .empty());
    };
    std::string why;
    if (!ir::isBlockScaled(run.fp8Scaling) && !run.fp8Gather)
      why = "Megatron-Core's --fp8-param-gather all-gathers the updated FP8 parameters of one "
            "scale per tensor as FP8; write gather = fp8";
    else if (!run.optimizerStates.master)
      why = std::string("the optimizer updates an fp32 master copy and casts it into the ") +
            (fp4 ? "NVFP4" : "FP8") + " parameters; leave master = none out";
    else if (sharded(false) || (run.model->isMoe() && sharded(true)))
      why = mx ? std::string("placec models Megatron-Core's distributed optimizer, which keeps "
                             "the ") +
                     (fp4 ? "NVFP4" : "MXFP8") +
                     " parameters whole on every device; replicate the params on the device, or "
                     "leave " +
                     spelled + " out"
               : "the FP8 parameters stay on the device, where the optimizer casts its fp32 "
                 "master copy into them; keep the params on the device, or leave params = fp8 "
                 "out";
    if (!why.empty()) {
      diags->error(fieldLoc(run, "precision"),
                   spelled + " in run '" + run.name + "' (" + ir::spellPrecision(run) + "): " + why,
                   "precision");
      ok = false;
    }
  }
  // Rule `precision`: `attention = fp8` is Transformer Engine's FP8 dot-product attention, which
  // runs cuDNN's FP8 kernel; placec times it by the measured ratio of that kernel to cuDNN's BF16
  // one (cost::getFp8AttentionRatio), which exists on Blackwell only, and without context
  // parallelism (whose exchanges of FP8 keys and values it does not count).
  if (run.fp8Attention) {
    std::string why;
    const ir::DevicePreset *device = run.cluster->device;
    if (run.model->kind != ir::ModelKind::Transformer)
      why = "model '" + run.model->name + "' has no attention";
    else if (run.model->transformer.attention != ir::AttentionKind::Cudnn)
      why = "it runs cuDNN's FP8 attention, and model '" + run.model->name +
            "' writes attention = " + ir::toString(run.model->transformer.attention).str() +
            "; write attention = cudnn";
    else if (!device || !cost::getFp8AttentionRatio(*device))
      why = "placec times cuDNN's FP8 attention by its measured ratio to the BF16 kernel, which "
            "it has for Blackwell devices only (b200, gb200, b300, gb300), and cluster '" +
            run.cluster->name + "' " +
            (device ? "has " + std::string(device->name) + " (" +
                          ir::toString(device->family).str() + ")"
                    : std::string("names no device"));
    else if (mesh.getDegree(ir::AxisKind::Sequence) > 1)
      why = "placec does not count context parallelism's exchanges of FP8 keys and values";
    if (!why.empty()) {
      diags->error(fieldLoc(run, "precision"),
                   Twine("attention = fp8 is Transformer Engine's FP8 dot-product attention: ") +
                       why,
                   "precision");
      ok = false;
    }
  }
  // Rule `placement`: `recompute(op)` is torchtitan's per-op policy over a Llama-style layer
  // (cost::getOpRecomputeObstacle).
  if (strategy.activationMode == ir::ActivationMode::RecomputeOps) {
    std::string why = cost::getOpRecomputeObstacle(*run.model);
    if (!why.empty()) {
      diags->error(strategy.activationModeLoc.isValid() ? strategy.activationModeLoc : strategyLoc,
                   Twine("recompute(op) does not apply to model '") + run.model->name +
                       "': " + why + "; write recompute(selective) or recompute",
                   "placement");
      diags->note(fieldLoc(run, "model"),
                  Twine("run '") + run.name + "' trains model '" + run.model->name + "' here");
      ok = false;
    }
  }
  // Rule `placement`: `recompute(attention)` is Megatron-Core's checkpointed core attention: a
  // transformer's, over the attention kernel as Megatron-Core calls it (no flash-attn packing).
  if (strategy.activationMode == ir::ActivationMode::RecomputeAttention) {
    std::string why;
    if (run.model->kind != ir::ModelKind::Transformer)
      why = "model '" + run.model->name + "' is " +
            (run.model->kind == ir::ModelKind::Mlp ? "an mlp" : "abstract") +
            ", which has no attention";
    else if (run.model->transformer.unpad)
      why = "unpad = true is flash-attn's packing as llm-foundry calls it, which Megatron-Core's "
            "checkpointed core attention does not run";
    if (!why.empty()) {
      diags->error(strategy.activationModeLoc.isValid() ? strategy.activationModeLoc : strategyLoc,
                   "recompute(attention) recomputes a transformer's core attention as "
                   "Megatron-Core checkpoints it: " +
                       why + "; write recompute or keep",
                   "placement");
      diags->note(fieldLoc(run, "model"),
                  Twine("run '") + run.name + "' trains model '" + run.model->name + "' here");
      ok = false;
    }
  }
  // Rule `placement`: `recompute(core_attn, moe_act, …)` is Megatron-Core's recomputation of its
  // modules: each where the model has it (cost::getModuleRecomputeObstacle), and with the
  // products' inputs gathered again as Megatron-Core does (sp_inputs = regather).
  if (strategy.activationMode == ir::ActivationMode::RecomputeModules) {
    std::string why = cost::getModuleRecomputeObstacle(*run.model, strategy.recomputeModules);
    if (why.empty() && strategy.sequenceParallel &&
        strategy.sequenceParallelInputs == ir::SequenceParallelInputs::Keep)
      why = "sp_inputs = keep keeps the products' inputs gathered, and Megatron-Core's layers "
            "gather them again (sp_inputs = regather)";
    if (!why.empty()) {
      diags->error(
          strategy.activationModeLoc.isValid() ? strategy.activationModeLoc : strategyLoc,
          ir::getActivationModeText(strategy.activationMode, 0, strategy.recomputeModules) +
              " does not apply to run '" + run.name + "': " + why,
          "placement");
      diags->note(fieldLoc(run, "model"),
                  Twine("run '") + run.name + "' trains model '" + run.model->name + "' here");
      ok = false;
    }
  }
  // Rule `placement`: `saved = fp8` is counted where placec knows what the products keep
  // (cost::getSavedFp8Obstacle).
  if (run.fp8Saved) {
    std::string why = cost::getSavedFp8Obstacle(*run.model, strategy.activationMode);
    if (!why.empty()) {
      diags->error(fieldLoc(run, "precision"),
                   Twine("mixed(fp8, saved = fp8) cannot be modelled for run '") + run.name +
                       "': " + why + "; leave saved = fp8 out",
                   "placement");
      ok = false;
    }
  }
  // Rule `placement`: training metrics are counted over a transformer's logits, the whole
  // micro-batch's, which a chunked loss never holds at once.
  if (run.trainMetrics > 0 && run.model->kind == ir::ModelKind::Transformer &&
      run.crossEntropy == ir::CrossEntropyKind::Chunked) {
    diags->error(fieldLoc(run, "train_metrics"),
                 Twine("train_metrics cannot be modelled for run '") + run.name +
                     "': the metrics read the whole micro-batch's logits, which cross_entropy = "
                     "chunked never holds at once; leave train_metrics out, or write "
                     "cross_entropy = fused or unfused",
                 "placement");
    ok = false;
  }
  if (run.trainMetrics > 0 && run.model->kind != ir::ModelKind::Transformer) {
    diags->error(fieldLoc(run, "train_metrics"),
                 Twine("train_metrics cannot be modelled for run '") + run.name +
                     "': placec counts them over a transformer's logits, and model '" +
                     run.model->name + "' is " +
                     (run.model->kind == ir::ModelKind::Mlp ? "an mlp" : "abstract") +
                     "; leave train_metrics out",
                 "placement");
    ok = false;
  }
  // Rule `placement`: `kernels = eager` is modelled for the modules placec counts its kernels
  // for (cost::getEagerObstacle).
  if (run.kernels == ir::KernelMode::Eager) {
    std::string why = cost::getEagerObstacle(*run.model, strategy.activationMode, run.precision);
    if (!why.empty()) {
      diags->error(fieldLoc(run, "kernels"),
                   Twine("kernels = eager cannot be modelled for run '") + run.name + "': " + why,
                   "placement");
      ok = false;
    }
  }
  // Rule `placement`: a setting that the mesh gives nothing to act on would be silently ignored.
  if (strategy.contextLoc.isValid() && context <= 1) {
    diags->error(strategy.contextLoc,
                 Twine("'context' chooses how attention exchanges keys and values over a "
                       "sequence axis, but the mesh ") +
                     formatMesh(mesh) + " of strategy '" + strategy.name + "' has none",
                 "placement");
    ok = false;
  }
  if (run.fieldLocs.count("context_merge") && context <= 1) {
    diags->error(fieldLoc(run, "context_merge"),
                 Twine("'context_merge' chooses how a context-parallel rank runs its attention, "
                       "but the mesh ") +
                     formatMesh(mesh) + " of strategy '" + strategy.name + "' has no sequence axis",
                 "placement");
    ok = false;
  }
  // `wgrad` overlaps the input-gradient reductions with or without sequence parallelism (an
  // all-reduce without it); the other modes overlap sequence parallelism's collectives.
  bool weightGradient = strategy.asyncTensorParallel == ir::AsyncTensorParallel::WeightGradient;
  if (strategy.asyncTensorParallel != ir::AsyncTensorParallel::Off &&
      (tensorDegree <= 1 || (!strategy.sequenceParallel && !weightGradient))) {
    std::string message =
        weightGradient
            ? "async_tp = wgrad overlaps the backward's input-gradient reductions of tensor "
              "parallelism with the weight gradients, but the mesh " +
                  formatMesh(mesh) + " of strategy '" + strategy.name + "' has no tensor axis"
        : tensorDegree <= 1
            ? "async_tp overlaps tensor-parallel collectives with their GEMMs, but the mesh " +
                  formatMesh(mesh) + " of strategy '" + strategy.name + "' has no tensor axis"
            : "async_tp overlaps the all-gathers and reduce-scatters of sequence parallelism "
              "with their GEMMs; strategy '" +
                  strategy.name + "' needs 'activations = shard(tp)' for it";
    diags->error(strategy.asyncTensorParallelLoc, message, "placement");
    ok = false;
  }
  // `sp_inputs` says what sequence parallelism's column-parallel products keep: without it there
  // is nothing to choose.
  if (strategy.sequenceParallelInputsLoc.isValid() &&
      (tensorDegree <= 1 || !strategy.sequenceParallel)) {
    diags->error(strategy.sequenceParallelInputsLoc,
                 "sp_inputs chooses what the column-parallel products keep of the input that "
                 "sequence parallelism all-gathers for them; strategy '" +
                     strategy.name + "' " +
                     (tensorDegree <= 1 ? "has no tensor axis in its mesh " + formatMesh(mesh)
                                        : std::string("needs 'activations = shard(tp)' for it")),
                 "placement");
    ok = false;
  }
  // `dp_overlap` says when the step's data-parallel collectives run: `none` those of the
  // gradients replicated over a data-parallel axis (reduced once per step), `all` the all-gathers
  // of the parameters replicated where the optimizer is sharded.
  if (strategy.dataParallelOverlapLoc.isValid()) {
    ir::DataParallelOverlap overlap = strategy.dataParallelOverlap;
    AxisSet stepReduced =
        batchAxesWith(strategy, ir::State::Grads, {ir::PlacementMode::Replicated});
    AxisSet stepGathered =
        intersect(batchAxesWith(strategy, ir::State::Optimizer,
                                {ir::PlacementMode::Sharded, ir::PlacementMode::ShardedWithGather}),
                  strategy, ir::State::Params, {ir::PlacementMode::Replicated});
    if (overlap == ir::DataParallelOverlap::None && stepReduced.empty()) {
      diags->error(strategy.dataParallelOverlapLoc,
                   "dp_overlap = none runs the step's gradient reductions after the backward, but "
                   "strategy '" +
                       strategy.name + "' has none: no data-parallel axis of its mesh " +
                       formatMesh(mesh) +
                       " replicates the grads (sharded grads are reduced in every micro-batch's "
                       "backward)",
                   "placement");
      ok = false;
    }
    if (overlap == ir::DataParallelOverlap::All && stepGathered.empty()) {
      diags->error(strategy.dataParallelOverlapLoc,
                   "dp_overlap = all runs the all-gathers of the updated parameters beside the "
                   "next step's forward, but strategy '" +
                       strategy.name + "' has none: no data-parallel axis of its mesh " +
                       formatMesh(mesh) +
                       " shards the optimizer and replicates the params (the distributed "
                       "optimizer, ZeRO-1 and ZeRO-2)",
                   "placement");
      ok = false;
    }
  }
  // `grad_reduce = all_reduce` changes the step's sum over the axes that shard the optimizer and
  // not the gradients (ZeRO-1); elsewhere the gradients are all-reduced already, or
  // reduce-scattered in every micro-batch's backward where they are sharded.
  if (strategy.gradReduceLoc.isValid() && strategy.gradReduce == ir::GradReduce::AllReduce &&
      !strategy.shardsOptimizerOnly()) {
    diags->error(strategy.gradReduceLoc,
                 "grad_reduce = all_reduce sums the gradients over the axes that shard the "
                 "optimizer and replicate the grads (ZeRO-1), but strategy '" +
                     strategy.name + "' has none in its mesh " + formatMesh(mesh) +
                     " (replicated optimizers' gradients are all-reduced already, sharded "
                     "gradients reduce-scattered in every micro-batch's backward)",
                 "placement");
    ok = false;
  }
  // `sends = scatter` splits the boundary tensor that every tensor-parallel rank holds whole;
  // under sequence parallelism each already holds and sends its own slice.
  if (strategy.pipeline && strategy.pipeline->scatterSends &&
      (tensorDegree <= 1 || stages <= 1 || strategy.sequenceParallel)) {
    diags->error(strategy.pipeline->loc,
                 "sends = scatter splits the activations sent between pipeline stages over the "
                 "tensor-parallel ranks, which hold them whole; strategy '" +
                     strategy.name + "' " +
                     (stages <= 1 ? "has no pipeline axis in its mesh " + formatMesh(mesh)
                      : tensorDegree <= 1
                          ? "has no tensor axis in its mesh " + formatMesh(mesh)
                          : std::string("shards them over tp already (activations = shard(tp)): "
                                        "each rank sends its own slice")),
                 "placement");
    ok = false;
  }
  // Rule `schedule`: the schedule's bubble and memory formulas hold only where its
  // preconditions do (cost::isScheduleValid).
  std::string why;
  if (ok && strategy.pipeline && stages > 1 &&
      !cost::isScheduleValid(strategy.pipeline->schedule, stages, run.microbatchesPerStep,
                             strategy.pipeline->chunks, &why, strategy.pipeline->group)) {
    bool grouped = strategy.pipeline->group > 0 && strategy.pipeline->group != stages &&
                   strategy.pipeline->chunks > 1;
    diags->error(grouped && strategy.pipeline->groupLoc.isValid() ? strategy.pipeline->groupLoc
                 : strategy.pipeline->loc.isValid()               ? strategy.pipeline->loc
                                                                  : strategyLoc,
                 why, "schedule");
    diags->note(fieldLoc(run, "strategy"),
                Twine("run '") + run.name + "' uses the schedule here; use 1f1b, or " +
                    cost::getScheduleRemedy(strategy.pipeline->schedule, stages,
                                            run.microbatchesPerStep, strategy.pipeline->chunks,
                                            strategy.pipeline->group));
    ok = false;
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// gradient-integrity, state-consistency, coverage
//===----------------------------------------------------------------------===//

bool VerifyPass::checkGradientIntegrity(const ir::Run &run) {
  const ir::Strategy &strategy = *run.strategy;
  bool ok = true;

  // A replicated optimizer updates every parameter, so it needs the whole summed gradient on
  // every replica; sharded grads keep only 1/n of the sum on each.
  AxisSet broken =
      intersect(batchAxesWith(strategy, ir::State::Grads, {ir::PlacementMode::Sharded}), strategy,
                ir::State::Optimizer, {ir::PlacementMode::Replicated});
  if (!broken.empty()) {
    int64_t n = broken.getDegree();
    Where where = locate(run, axisLoc(strategy, ir::State::Grads, broken.axes.front()));
    report(Severity::Error, run, where,
           Twine("optimizer replicated over ") + broken.quoted() +
               " needs the full gradient on every replica, but grads are sharded over " +
               broken.quoted() + ": each replica would update every parameter from 1/" + Twine(n) +
               " of the summed gradient, breaking gradient integrity",
           "gradient-integrity", [&] {
             noteDefault(run, ir::State::Optimizer, broken, "replicated");
             diags->note(where.loc, Twine("shard the optimizer over ") + broken.quoted() +
                                        " as well ('optimizer = shard(" + broken.args() +
                                        ")', ZeRO-2) so that each rank updates the 1/" + Twine(n) +
                                        " it holds, or replicate grads over " + broken.quoted());
           });
    ok = false;
  }

  // Gradients kept off the device must reach the optimizer: the step plan moves gradients to
  // the host only for an optimizer there, and never back to the device.
  const ir::StatePlacement &grads = strategy.getPlacement(ir::State::Grads);
  const ir::StatePlacement &optimizer = strategy.getPlacement(ir::State::Optimizer);
  if (grads.tier != ir::Tier::Device && optimizer.tier == ir::Tier::Device) {
    Where where = locate(run, tierLoc(strategy, ir::State::Grads));
    report(Severity::Error, run, where,
           Twine("grads @ ") + ir::toString(grads.tier) +
               " are out of reach of the optimizer, which runs on the device: no step brings "
               "the accumulated gradients back, so the optimizer would not consume their full "
               "sum, breaking gradient integrity",
           "gradient-integrity", [&] {
             diags->note(where.loc,
                         Twine("keep grads on the device, or place the optimizer @ ") +
                             ir::toString(grads.tier) +
                             " too so that it runs where the gradients are (ZeRO-Offload)");
           });
    ok = false;
  }
  return ok;
}

void VerifyPass::checkStateConsistency(const ir::Run &run) {
  const ir::Strategy &strategy = *run.strategy;
  // Replicated params under a sharded optimizer are made consistent by the all-gather the
  // compiler inserts after the update; nothing to report. Sharded params under a replicated
  // optimizer stay consistent too (every replica computes the same update), but each replica
  // updates the whole parameter and keeps 1/n of it.
  AxisSet wasteful =
      intersect(batchAxesWith(strategy, ir::State::Params,
                              {ir::PlacementMode::Sharded, ir::PlacementMode::ShardedWithGather}),
                strategy, ir::State::Optimizer, {ir::PlacementMode::Replicated});
  if (wasteful.empty())
    return;
  int64_t n = wasteful.getDegree();
  unsigned first = wasteful.axes.front();
  StringRef mode = ir::toString(strategy.getPlacement(ir::State::Params).axes[first].mode);
  Where where = locate(run, axisLoc(strategy, ir::State::Params, first));
  report(Severity::Warning, run, where,
         Twine("params are placed '") + mode + "(" + wasteful.args() +
             ")' but the optimizer is replicated over " + wasteful.quoted() +
             ": every replica updates the whole parameter and keeps 1/" + Twine(n) +
             " of it, so the copies stay equal but " + Twine(n - 1) + "/" + Twine(n) +
             " of the optimizer's memory and update work is wasted",
         "state-consistency", [&] {
           noteDefault(run, ir::State::Optimizer, wasteful, "replicated");
           diags->note(where.loc, Twine("shard the optimizer over ") + wasteful.quoted() +
                                      " too ('optimizer = shard(" + wasteful.args() +
                                      ")'): each rank then updates only the 1/" + Twine(n) +
                                      " it keeps");
         });
}

bool VerifyPass::checkCoverage(const ir::Run &run) {
  const ir::Strategy &strategy = *run.strategy;
  AxisSet neverGathered = batchAxesWith(strategy, ir::State::Params, {ir::PlacementMode::Sharded});
  if (neverGathered.empty())
    return true;
  int64_t n = neverGathered.getDegree();
  Where where = locate(run, axisLoc(strategy, ir::State::Params, neverGathered.axes.front()));
  report(Severity::Error, run, where,
         Twine("params sharded over batch axis ") + neverGathered.quoted() +
             " are never gathered, so the forward cannot run: each of the " + Twine(n) +
             " ranks holds 1/" + Twine(n) +
             " of every layer but computes whole layers on its own samples",
         "coverage", [&] {
           diags->note(where.loc, Twine("write 'gather(") + neverGathered.args() +
                                      ")' to store 1/" + Twine(n) +
                                      " and all-gather each layer around its use (ZeRO-3), or "
                                      "'replicate(" +
                                      neverGathered.args() + ")'");
         });
  return false;
}

//===----------------------------------------------------------------------===//
// experts
//===----------------------------------------------------------------------===//

/// The mesh's tensor axes by name, comma-separated: "tp".
static std::string tensorAxisNames(const ir::Mesh &mesh) {
  std::vector<std::string> names;
  for (const ir::Axis &axis : mesh.axes)
    if (axis.kind == ir::AxisKind::Tensor)
      names.push_back(axis.name);
  return llvm::join(names, ", ");
}

bool VerifyPass::checkExperts(const ir::Run &run) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::Mesh &mesh = strategy.mesh;
  const ir::Model &model = *run.model;
  bool ok = true;
  int64_t ep = mesh.getDegree(ir::AxisKind::Expert);
  int firstExpertAxis = -1;
  for (unsigned i = 0; i < mesh.axes.size(); ++i)
    if (mesh.axes[i].kind == ir::AxisKind::Expert && firstExpertAxis < 0)
      firstExpertAxis = static_cast<int>(i);
  // `dispatcher = deepep | hybridep` moves the expert exchanges; without them it says nothing.
  if (strategy.expertDispatcher != ir::ExpertDispatcher::AllToAll && (!model.isMoe() || ep <= 1)) {
    report(Severity::Error, run, locate(run, strategy.expertDispatcherLoc),
           Twine("dispatcher = ") + ir::toString(strategy.expertDispatcher) +
               " moves the expert-parallel dispatch and combine, but " +
               (!model.isMoe() ? Twine("model '") + model.name + "' has no routed experts"
                               : Twine("strategy '") + strategy.name +
                                     "' has no expert axis of more than one device in its mesh " +
                                     formatMesh(mesh)),
           "placement");
    ok = false;
  }
  // The flex dispatcher's exchanges are timed dropless (getMoeShape's padded rows are the
  // all-to-all dispatcher's).
  if (strategy.expertDispatcher != ir::ExpertDispatcher::AllToAll && model.isMoe() &&
      model.kind == ir::ModelKind::Transformer && model.transformer.moe.capacityFactor) {
    report(Severity::Error, run, locate(run, strategy.expertDispatcherLoc),
           Twine("dispatcher = ") + ir::toString(strategy.expertDispatcher) +
               " with the capacity factor of model '" + model.name +
               "': placec times the flex dispatcher's exchanges dropless (write dispatcher = "
               "alltoall, whose padded rows it counts, or drop capacity_factor)",
           "placement");
    ok = false;
  }
  // `expert_tensor = fold` (Megatron-Core's --expert-tensor-parallel-size 1 under
  // --tensor-model-parallel-size t): whole experts over the expert and tensor axes, each tensor
  // rank routing its own sequence shard (megatron/core/transformer/moe/token_dispatcher.py;
  // Megatron-Core asserts sequence parallelism for MoE under tensor parallelism).
  // `expert_context = fold`: the sequence axes' devices join the expert group, as Megatron-Core
  // forms it under context parallelism (its rank orders tp-cp-ep-dp-pp and tp-ep-dp-pp: the
  // expert ranks take the context ranks before the data ranks) and torchtitan does
  // (expert_parallel_degree borrows from the FSDP and context ranks).
  // Each fold needs routed experts, its own axis and an expert axis to join, and a group that
  // divides the experts.
  auto checkFold = [&](ir::AxisKind kind, SMLoc loc, StringRef setting, StringRef what) {
    auto refuse = [&](const Twine &why, StringRef rule) {
      report(Severity::Error, run, locate(run, loc),
             setting + " puts " + what + " together, but " + why, rule);
      ok = false;
    };
    StringRef axes = kind == ir::AxisKind::Tensor ? "tensor" : "sequence";
    if (!model.isMoe())
      refuse(Twine("model '") + model.name + "' has no routed experts", "placement");
    else if (mesh.getDegree(kind) <= 1)
      refuse(Twine("strategy '") + strategy.name + "' has no " + axes + " axis of more than one " +
                 "device in its mesh " + formatMesh(mesh) + " (write " +
                 setting.take_front(setting.find(" =")) + " = split, or leave it out)",
             "placement");
    else if (ep <= 1)
      refuse(Twine("strategy '") + strategy.name + "' has no expert axis of more than one " +
                 "device in its mesh " + formatMesh(mesh) + " for the " + axes + " axes to join",
             "placement");
    else if (kind == ir::AxisKind::Tensor && !strategy.sequenceParallel)
      refuse(Twine("each tensor-parallel rank routes its own sequence shard, which needs ") +
                 "sequence parallelism: write 'activations = shard(" + tensorAxisNames(mesh) + ")'",
             "placement");
    else if (model.transformer.moe.experts % strategy.getExpertGroupDegree() != 0)
      refuse(Twine("the expert group of ") + Twine(strategy.getExpertGroupDegree()) + " devices (" +
                 formatExpertGroup(strategy) + ") does not divide the " +
                 Twine(model.transformer.moe.experts) + " routed experts of model '" + model.name +
                 "': each device holds an equal share of every MoE layer's experts",
             "divisibility");
  };
  if (strategy.expertTensor == ir::ExpertTensor::Fold)
    checkFold(ir::AxisKind::Tensor, strategy.expertTensorLoc, "expert_tensor = fold",
              "whole routed experts on the expert and tensor axes");
  int64_t cp = mesh.getDegree(ir::AxisKind::Sequence);
  if (strategy.expertContext == ir::ExpertTensor::Fold) {
    checkFold(ir::AxisKind::Sequence, strategy.expertContextLoc, "expert_context = fold",
              "the routed experts on the expert and sequence axes");
    // The folded sequence axes split the experts: their placements may only say so.
    if (cp > 1)
      for (ir::State state : {ir::State::Params, ir::State::Grads, ir::State::Optimizer})
        for (unsigned i = 0; i < mesh.axes.size(); ++i) {
          const ir::AxisPlacement &slot = strategy.getExpertPlacement(state).axes[i];
          if (mesh.axes[i].kind != ir::AxisKind::Sequence || !slot.isExplicit ||
              slot.mode == ir::PlacementMode::Sharded)
            continue;
          report(Severity::Error, run, locate(run, slot.loc.isValid() ? slot.loc : strategy.loc),
                 Twine("'expert_") + ir::toString(state) + "' places the routed experts over '" +
                     mesh.axes[i].name + "', a sequence axis that expert_context = fold makes " +
                     "part of the expert group, which splits the experts among its devices and " +
                     "never gathers them; leave it out or write 'shard(" + mesh.axes[i].name + ")'",
                 "placement");
          ok = false;
        }
  }
  // `ep_overlap = true` runs each micro-batch's expert all-to-alls beside another's compute, as
  // Megatron-Core's combined 1F1B does, under that schedule's conditions
  // (megatron/core/transformer/transformer_config.py, TransformerConfig.__post_init__).
  if (strategy.expertOverlap == ir::ExpertOverlap::On) {
    auto refuse = [&](const Twine &why, StringRef rule) {
      report(Severity::Error, run, locate(run, strategy.expertOverlapLoc),
             "ep_overlap = true overlaps each micro-batch's expert all-to-alls with another "
             "micro-batch's compute, but " +
                 why,
             rule);
      ok = false;
    };
    const std::optional<ir::Pipeline> &pipeline = strategy.pipeline;
    int64_t stages = mesh.getDegree(ir::AxisKind::Layers);
    if (!model.isMoe())
      refuse(Twine("model '") + model.name + "' has no routed experts", "placement");
    else if (ep <= 1)
      refuse(Twine("strategy '") + strategy.name + "' has no expert axis of more than one device " +
                 "in its mesh " + formatMesh(mesh) + " to exchange tokens over",
             "placement");
    // Over stages, the schedules that run one micro-batch's forward beside another's backward:
    // Megatron-Core's interleaved one with virtual stages, and DualPipeV, whose main step runs
    // a forward chunk beside a backward one (deepseek-ai/DualPipe, dualpipe/dualpipev.py).
    if (stages > 1 && pipeline && pipeline->schedule != ir::Schedule::DualPipeV &&
        (pipeline->schedule != ir::Schedule::Interleaved || pipeline->chunks < 2))
      refuse(Twine("over ") + Twine(stages) + " pipeline stages the forward and backward " +
                 "micro-batches run side by side only in the interleaved schedule with virtual " +
                 "pipeline stages (Megatron-Core's) and in dualpipev, and strategy '" +
                 strategy.name + "' runs " + ir::toString(pipeline->schedule) +
                 (pipeline->schedule == ir::Schedule::Interleaved ? " with one chunk" : ""),
             "schedule");
    if (strategy.activationMode == ir::ActivationMode::RecomputeFull)
      refuse(Twine("strategy '") + strategy.name + "' recomputes whole layers (" +
                 ir::getActivationModeText(strategy.activationMode, strategy.recomputeLayers,
                                           strategy.recomputeModules) +
                 "), which Megatron-Core refuses with it",
             "placement");
    if (run.precision == ir::Precision::FP32)
      refuse(Twine("run '") + run.name + "' computes in fp32; Megatron-Core runs it only over a " +
                 "bf16 or fp16 model",
             "precision");
  }
  if (!model.isMoe()) {
    if (firstExpertAxis >= 0) {
      const ir::Axis &axis = mesh.axes[firstExpertAxis];
      Where where = locate(run, axis.loc);
      report(Severity::Error, run, where,
             Twine("expert axis '") + axis.name + "' splits routed experts, but model '" +
                 model.name + "' has none",
             "placement", [&] {
               diags->note(model.loc, Twine("write 'experts = N; top_k = K;' in model '") +
                                          model.name + "', or make '" + axis.name +
                                          "' a batch axis ('" + axis.name +
                                          ": batch = " + Twine(axis.size) + "')");
             });
      ok = false;
    }
    for (ir::State state : {ir::State::Params, ir::State::Grads, ir::State::Optimizer}) {
      SMLoc loc = strategy.getExpertPlacement(state).loc;
      if (!loc.isValid())
        continue;
      report(Severity::Error, run, locate(run, loc),
             Twine("'expert_") + ir::toString(state) + "' places routed experts, but model '" +
                 model.name + "' has none",
             "placement",
             [&] { diags->note(model.loc, Twine("model '") + model.name + "' is declared here"); });
      ok = false;
    }
    return ok;
  }
  const ir::MoeConfig &moe = model.transformer.moe;
  if (ep > 1 && moe.experts % ep != 0) {
    Where where = locate(run, mesh.axes[firstExpertAxis].loc);
    report(Severity::Error, run, where,
           Twine("expert-parallel degree ") + Twine(ep) + " does not divide the " +
               Twine(moe.experts) + " routed experts of model '" + model.name +
               "': each expert rank holds an equal share of every MoE layer's experts",
           "divisibility",
           [&] { diags->note(model.loc, Twine("model '") + model.name + "' is declared here"); });
    ok = false;
  }

  // The routed experts over their expert-data-parallel axes (batch and sequence, size > 1).
  auto locOf = [&](ir::State state, unsigned axis) {
    const ir::StatePlacement &placement = strategy.getExpertPlacement(state);
    SMLoc loc = placement.axes[axis].loc;
    if (!loc.isValid())
      loc = placement.loc;
    return loc.isValid() ? loc : axisLoc(strategy, state, axis);
  };
  AxisSet broken = intersect(
      batchAxesWith(strategy, ir::State::Grads, {ir::PlacementMode::Sharded}, /*expert=*/true),
      strategy, ir::State::Optimizer, {ir::PlacementMode::Replicated}, /*expert=*/true);
  if (!broken.empty()) {
    int64_t n = broken.getDegree();
    Where where = locate(run, locOf(ir::State::Grads, broken.axes.front()));
    report(Severity::Error, run, where,
           Twine("the routed experts' optimizer is replicated over ") + broken.quoted() +
               " but their grads are sharded there: each replica would update its experts "
               "from 1/" +
               Twine(n) + " of their summed gradient, breaking gradient integrity",
           "gradient-integrity", [&] {
             diags->note(where.loc, Twine("write 'expert_optimizer = shard(") + broken.args() +
                                        ");' or replicate the experts' grads over " +
                                        broken.quoted());
           });
    ok = false;
  }
  AxisSet neverGathered =
      batchAxesWith(strategy, ir::State::Params, {ir::PlacementMode::Sharded}, /*expert=*/true);
  if (!neverGathered.empty()) {
    int64_t n = neverGathered.getDegree();
    Where where = locate(run, locOf(ir::State::Params, neverGathered.axes.front()));
    report(Severity::Error, run, where,
           Twine("the routed experts' params sharded over ") + neverGathered.quoted() +
               " are never gathered, so their forward cannot run: each of the " + Twine(n) +
               " ranks that hold the same experts keeps 1/" + Twine(n) +
               " of them but computes whole experts",
           "coverage", [&] {
             diags->note(where.loc, Twine("write 'expert_params = gather(") + neverGathered.args() +
                                        ");' or 'replicate(" + neverGathered.args() + ")'");
           });
    ok = false;
  }
  AxisSet wasteful =
      intersect(batchAxesWith(strategy, ir::State::Params, {ir::PlacementMode::ShardedWithGather},
                              /*expert=*/true),
                strategy, ir::State::Optimizer, {ir::PlacementMode::Replicated},
                /*expert=*/true);
  if (!wasteful.empty()) {
    int64_t n = wasteful.getDegree();
    Where where = locate(run, locOf(ir::State::Params, wasteful.axes.front()));
    report(Severity::Warning, run, where,
           Twine("the routed experts' params are gathered over ") + wasteful.quoted() +
               " but their optimizer is replicated there: every replica updates whole experts "
               "and keeps 1/" +
               Twine(n) + " of them, wasting " + Twine(n - 1) + "/" + Twine(n) +
               " of the experts' optimizer memory",
           "state-consistency", [&] {
             diags->note(where.loc,
                         Twine("write 'expert_optimizer = shard(") + wasteful.args() + ");'");
           });
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// pipeline-sharding
//===----------------------------------------------------------------------===//

void VerifyPass::checkPipelineSharding(const ir::Run &run, const analysis::RunAnalysis *analysis) {
  const ir::Strategy &strategy = *run.strategy;
  int64_t m = run.microbatchesPerStep;
  if (!strategy.pipeline || m <= 1)
    return;
  // The bytes per device per step of one state's per-micro-batch collectives, on the busiest
  // stage; 0 without an analysis.
  auto volume = [&](plan::OpKind kind, ir::State state) {
    double most = 0;
    if (!analysis)
      return most;
    std::map<int, double> byStage;
    for (const analysis::CommEntry &entry : analysis->communication)
      if (entry.collective == kind && entry.state == state && entry.phase != plan::Phase::Step)
        byStage[entry.stage] += entry.totalBytes;
    for (const auto &[stage, bytes] : byStage)
      most = std::max(most, bytes);
    return most;
  };

  AxisSet gradShards = batchAxesWith(strategy, ir::State::Grads, {ir::PlacementMode::Sharded});
  if (!gradShards.empty()) {
    double bytes = volume(plan::OpKind::ReduceScatter, ir::State::Grads);
    std::string volumeText =
        bytes > 0 ? " (" + formatGB(bytes) + " per device per step, " + std::to_string(m) +
                        "× what one reduction of the accumulated gradients moves)"
                  : std::string();
    Where where = locate(run, axisLoc(strategy, ir::State::Grads, gradShards.axes.front()));
    report(Severity::Warning, run, where,
           Twine("grads sharded over ") + gradShards.quoted() +
               " are reduce-scattered after the backward of every micro-batch: with the "
               "pipeline's " +
               Twine(m) + " micro-batches per step that is " + Twine(m) +
               " reduce-scatters per step where accumulating first needs one" + volumeText,
           "pipeline-sharding", [&] {
             diags->note(where.loc,
                         Twine("replicate grads over ") + gradShards.quoted() +
                             " and keep the optimizer sharded (ZeRO-1): the gradients then "
                             "accumulate over the micro-batches and are reduce-scattered once "
                             "per step");
           });
  }

  AxisSet gathers =
      batchAxesWith(strategy, ir::State::Params, {ir::PlacementMode::ShardedWithGather});
  if (!gathers.empty()) {
    const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
    bool keep = llvm::any_of(gathers.axes,
                             [&](unsigned axis) { return params.axes[axis].keepAfterForward; });
    int64_t perMicrobatch = keep ? 1 : 2;
    double bytes = volume(plan::OpKind::AllGather, ir::State::Params);
    std::string volumeText =
        bytes > 0 ? " (" + formatGB(bytes) + " per device per step)" : std::string();
    Where where = locate(run, axisLoc(strategy, ir::State::Params, gathers.axes.front()));
    report(Severity::Warning, run, where,
           Twine("params gathered over ") + gathers.quoted() + " are all-gathered " +
               (keep ? "for the forward of every micro-batch"
                     : "for the forward and again for the backward of every micro-batch") +
               ": with the pipeline's " + Twine(m) +
               " micro-batches per step each layer is gathered " + Twine(perMicrobatch * m) +
               " times per step, " + Twine(m) + "× as often as with one micro-batch" + volumeText,
           "pipeline-sharding", [&] {
             diags->note(where.loc, Twine("replicate params over ") + gathers.quoted() +
                                        " (ZeRO-1 or ZeRO-2 under the pipeline) if they fit, or "
                                        "use fewer, larger micro-batches");
           });
  }
}

//===----------------------------------------------------------------------===//
// offload
//===----------------------------------------------------------------------===//

bool VerifyPass::checkOffloadLinks(const ir::Run &run) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::Cluster &cluster = *run.cluster;
  bool ok = true;
  for (ir::State state : ir::kAllStates) {
    const ir::StatePlacement &placement = strategy.getPlacement(state);
    std::vector<std::string> missing;
    if (placement.tier == ir::Tier::Host && !cluster.hostBandwidth)
      missing.push_back("host_bandwidth");
    if (placement.tier == ir::Tier::Nvme) {
      if (!cluster.nvmeBandwidth)
        missing.push_back("nvme_bandwidth");
      if (!cluster.nvmeCapacity)
        missing.push_back("nvme_capacity");
    }
    if (missing.empty())
      continue;
    ok = false;
    bool host = placement.tier == ir::Tier::Host;
    Where where = locate(run, tierLoc(strategy, state));
    report(Severity::Error, run, where,
           Twine(ir::toString(state)) + " @ " + ir::toString(placement.tier) +
               (state == ir::State::Optimizer ? " needs the " : " need the ") +
               (host ? "host link's bandwidth" : "NVMe link's bandwidth and capacity") +
               ", but cluster '" + cluster.name + "' does not set " + quoteList(missing),
           "offload", [&] {
             diags->note(cluster.loc,
                         Twine("cluster '") + cluster.name + "' is declared here; add " +
                             (host ? "'host_bandwidth = …;' (per device, the PCIe link)"
                                   : "'nvme_bandwidth = …;' (per device) and 'nvme_capacity = "
                                     "…;' (per node)") +
                             ", or keep " + ir::toString(state) + " @ device");
           });
  }
  return ok;
}

void VerifyPass::checkOffloadTraffic(const ir::Run &run, const plan::StepPlan &plan) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
  if (params.tier == ir::Tier::Device)
    return;
  // Gathering over a batch axis brings only this rank's shard over the host link. Without a
  // batch axis there is nothing to gather over, and no cheaper placement to suggest.
  AxisSet gathers =
      batchAxesWith(strategy, ir::State::Params, {ir::PlacementMode::ShardedWithGather});
  AxisSet batchAxes = batchAxesWith(strategy, ir::State::Params,
                                    {ir::PlacementMode::Replicated, ir::PlacementMode::Sharded,
                                     ir::PlacementMode::ShardedWithGather});
  if (!gathers.empty() || batchAxes.empty())
    return;

  // The bytes over the host link per device per step as the plan moves them, on the busiest
  // stage: every HostToDevice and DeviceToHost of the params.
  double most = 0, mostToDevice = 0, mostToHost = 0;
  for (const plan::StagePlan &stage : plan.stages) {
    double toDevice = 0, toHost = 0;
    for (const std::vector<plan::Op> *ops : {&stage.forward, &stage.backward, &stage.step})
      for (const plan::Op &op : *ops) {
        if (op.state != ir::State::Params)
          continue;
        double bytes = static_cast<double>(op.elements) * plan::getSize(op.dtype) *
                       static_cast<double>(op.perMicrobatch ? plan.microbatches : 1);
        if (op.kind == plan::OpKind::HostToDevice)
          toDevice += bytes;
        else if (op.kind == plan::OpKind::DeviceToHost)
          toHost += bytes;
      }
    if (toDevice + toHost > most) {
      most = toDevice + toHost;
      mostToDevice = toDevice;
      mostToHost = toHost;
    }
  }
  if (most <= 0)
    return;
  std::string seconds;
  if (run.cluster->hostBandwidth && *run.cluster->hostBandwidth > 0)
    seconds = ", " + formatNumber(most / *run.cluster->hostBandwidth) + " s at the cluster's " +
              formatGB(*run.cluster->hostBandwidth) + "/s host_bandwidth";
  int64_t n = batchAxes.getDegree();
  Where where = locate(run, tierLoc(strategy, ir::State::Params));
  report(Severity::Warning, run, where,
         Twine("params @ ") + ir::toString(params.tier) +
             " are not gathered over any batch axis, so every device brings its whole copy of "
             "the model over the host link for the forward and again for the backward of each "
             "micro-batch: " +
             formatGB(most) + " per device per step (" + formatGB(mostToDevice) +
             " to the device, " + formatGB(mostToHost) + " back)" + seconds,
         "offload", [&] {
           diags->note(where.loc, Twine("gather params over ") + batchAxes.quoted() +
                                      " ('params = gather(" + batchAxes.args() + ") @ " +
                                      ir::toString(params.tier) + "'): each device then moves 1/" +
                                      Twine(n) +
                                      " over the host link and all-gathers the rest over the "
                                      "device links (ZeRO-Infinity)");
         });
}

//===----------------------------------------------------------------------===//
// capacity
//===----------------------------------------------------------------------===//

/// A copy of a run with a changed strategy, for what-if analyses.
struct Variant {
  std::string description;
  ir::Strategy strategy;
  double peak = 0;
};

double analyzePeak(const ir::Run &run, const ir::Strategy &strategy) {
  ir::Run copy = run;
  // The experts follow the changed dense placements where theirs are not written.
  ir::Strategy resolved = strategy;
  ir::resolveExpertPlacements(resolved);
  copy.strategy = &resolved;
  std::unique_ptr<plan::StepPlan> plan =
      plan::lowerRun(copy, plan::LowerOptions{/*reasons=*/false});
  return analysis::analyze(*plan).memory.device.peak;
}

std::string VerifyPass::suggestForDevice(const ir::Run &run) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::Mesh &mesh = strategy.mesh;
  double capacity = run.cluster->deviceMemory;
  auto setBatchModes = [&](ir::Strategy &target, ir::State state, ir::PlacementMode from,
                           ir::PlacementMode to) {
    bool changed = false;
    for (unsigned i = 0; i < mesh.axes.size(); ++i) {
      ir::AxisPlacement &slot = target.getPlacement(state).axes[i];
      if (ir::isDataParallel(mesh.axes[i].kind) && mesh.axes[i].size > 1 && slot.mode == from) {
        slot.mode = to;
        changed = true;
      }
    }
    return changed;
  };
  AxisSet batch = batchAxesWith(strategy, ir::State::Optimizer,
                                {ir::PlacementMode::Replicated, ir::PlacementMode::Sharded});
  std::string over = batch.empty() ? std::string() : " over " + batch.quoted();

  // Single changes in order of their cost: ZeRO stages (no extra traffic up to stage 2),
  // selective recomputation, ZeRO-3, full recomputation, optimizer offload.
  std::vector<Variant> variants;
  ir::Strategy zero = strategy;
  bool zero1 = setBatchModes(zero, ir::State::Optimizer, ir::PlacementMode::Replicated,
                             ir::PlacementMode::Sharded);
  if (zero1)
    variants.push_back({"shard the optimizer" + over + " (ZeRO-1)", zero, 0});
  bool zero2 = setBatchModes(zero, ir::State::Grads, ir::PlacementMode::Replicated,
                             ir::PlacementMode::Sharded);
  if (zero2)
    variants.push_back({"shard grads and the optimizer" + over + " (ZeRO-2)", zero, 0});
  bool model = run.model->kind != ir::ModelKind::Abstract;
  if (model && run.model->kind == ir::ModelKind::Transformer &&
      strategy.activationMode == ir::ActivationMode::Keep) {
    ir::Strategy selective = strategy;
    selective.activationMode = ir::ActivationMode::RecomputeSelective;
    bool materialized = run.model->transformer.attention == ir::AttentionKind::Materialized;
    variants.push_back({materialized
                            ? "recompute the attention core ('activations = recompute(selective)')"
                            : "recompute the norms and the MLP activation ('activations = "
                              "recompute(selective)')",
                        selective, 0});
  }
  bool zero3 = setBatchModes(zero, ir::State::Params, ir::PlacementMode::Replicated,
                             ir::PlacementMode::ShardedWithGather);
  if (zero3)
    variants.push_back(
        {"gather params and shard grads and the optimizer" + over + " (ZeRO-3)", zero, 0});
  // Recomputing the first n layers of each chunk (recompute(layers = n)), the smallest n that
  // fits: the peak falls as n grows, so a binary search over 1 … the largest chunk less one.
  int64_t layers = run.model->getNumLayers();
  if (model && layers > 1 &&
      (strategy.activationMode != ir::ActivationMode::RecomputeFull ||
       strategy.recomputeLayers > 0)) {
    plan::PipelineLayout pipe =
        plan::getPipelineLayout(layers, mesh.getDegree(ir::AxisKind::Layers),
                                strategy.pipeline ? &*strategy.pipeline : nullptr);
    int64_t chunkLayers = 1;
    for (int64_t position : pipe.layerInChunk)
      chunkLayers = std::max(chunkLayers, position + 1);
    ir::Strategy block = strategy;
    block.activationMode = ir::ActivationMode::RecomputeFull;
    auto peakWith = [&](int64_t n) {
      block.recomputeLayers = n;
      return analyzePeak(run, block);
    };
    int64_t low = std::max<int64_t>(1, strategy.recomputeLayers + 1), high = chunkLayers - 1;
    // `peak` is always that of `high`, the fewest layers known to fit.
    double peak = low <= high ? peakWith(high) : 0;
    if (low <= high && peak <= capacity) {
      while (low < high) {
        int64_t middle = low + (high - low) / 2;
        if (double middlePeak = peakWith(middle); middlePeak <= capacity) {
          high = middle;
          peak = middlePeak;
        } else {
          low = middle + 1;
        }
      }
      block.recomputeLayers = low;
      variants.push_back(
          {"recompute only the first " + std::to_string(low) + " of the " +
               std::to_string(chunkLayers) + " layers " +
               (pipe.stageOfChunk.size() <= 1                           ? "of the model"
                : pipe.stageOfChunk.size() == pipe.layersOfStage.size() ? "of each stage"
                                                                        : "of each chunk") +
               " ('activations = recompute(layers = " + std::to_string(low) + ")')",
           block, peak});
    }
  }
  if (model && (strategy.activationMode != ir::ActivationMode::RecomputeFull ||
                strategy.recomputeLayers > 0)) {
    ir::Strategy full = strategy;
    full.activationMode = ir::ActivationMode::RecomputeFull;
    full.recomputeLayers = 0;
    variants.push_back(
        {"keep only the layer inputs and recompute the rest ('activations = recompute')", full, 0});
  }
  if (strategy.getPlacement(ir::State::Optimizer).tier == ir::Tier::Device) {
    ir::Strategy offload = strategy;
    offload.getPlacement(ir::State::Optimizer).tier = ir::Tier::Host;
    variants.push_back({"offload the optimizer ('optimizer = @ host', ZeRO-Offload)", offload, 0});
  }
  for (Variant &variant : variants)
    if (variant.peak <= 0) // Not computed by the search for it above.
      variant.peak = analyzePeak(run, variant.strategy);
  for (const Variant &variant : variants)
    if (variant.peak <= capacity)
      return "to fit, " + variant.description + ": " + formatGiB(variant.peak) + " per device";

  // Everything on the device together: ZeRO-3 and full recomputation.
  ir::Strategy all = zero;
  if (model) {
    all.activationMode = ir::ActivationMode::RecomputeFull;
    all.recomputeLayers = 0;
  }
  bool changedAny = zero1 || zero2 || zero3 || all.activationMode != strategy.activationMode ||
                    all.recomputeLayers != strategy.recomputeLayers;
  std::string together = "gathering params and sharding grads and the optimizer" + over +
                         (model ? " with full recomputation" : "");
  if (!changedAny)
    return "every state is already sharded where it can be: add devices, or split the model "
           "further with tensor or pipeline parallelism";
  double allPeak = analyzePeak(run, all);
  if (allPeak <= capacity)
    return "no single change fits, but " + together + " needs " + formatGiB(allPeak) +
           " per device";
  return "even " + together + " needs " + formatGiB(allPeak) +
         " per device: add devices, or split the model further with tensor or pipeline "
         "parallelism";
}

std::string VerifyPass::suggestForOffload(const ir::Run &run, ir::Tier tier,
                                          ArrayRef<StateShare> shares) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::Cluster &cluster = *run.cluster;
  // An offloaded optimizer replicated over a batch axis keeps a whole copy per device.
  AxisSet unsharded =
      batchAxesWith(strategy, ir::State::Optimizer, {ir::PlacementMode::Replicated});
  if (strategy.getPlacement(ir::State::Optimizer).tier == tier && !unsharded.empty())
    return "to fit, shard the offloaded optimizer over " + unsharded.quoted() +
           " ('optimizer = shard(" + unsharded.args() + ") @ " + ir::toString(tier).str() +
           "') so that each device keeps 1/" + std::to_string(unsharded.getDegree()) + " of it";
  // The largest offloaded state back on the device, where it fits there.
  // Largest first, equal sizes in their order (inserted after their equals: std::stable_sort's
  // temporary buffer is deprecated in libstdc++ 12, an error for clang).
  std::vector<StateShare> sorted;
  for (const StateShare &share : shares)
    sorted.insert(llvm::upper_bound(
                      sorted, share,
                      [](const StateShare &a, const StateShare &b) { return a.bytes > b.bytes; }),
                  share);
  for (const StateShare &share : sorted) {
    // Gradients that follow the optimizer have no tier of their own to drop; an optimizer
    // brought back to the device would leave offloaded gradients out of its reach.
    if (share.bytes <= 0 || !share.state || strategy.getPlacement(*share.state).tier != tier ||
        (*share.state == ir::State::Optimizer &&
         strategy.getPlacement(ir::State::Grads).tier != ir::Tier::Device))
      continue;
    ir::Strategy variant = strategy;
    variant.getPlacement(*share.state).tier = ir::Tier::Device;
    double peak = analyzePeak(run, variant);
    if (peak <= cluster.deviceMemory)
      return "to fit, keep " +
             (*share.state == ir::State::Optimizer ? "the optimizer" : share.name.str()) +
             " on the device (drop its '@ " + ir::toString(tier).str() + "'): " + formatGiB(peak) +
             " per device, within device_memory";
  }
  if (tier == ir::Tier::Host && cluster.nvmeBandwidth && cluster.nvmeCapacity)
    return "to fit, move the largest offloaded state @ nvme";
  return "to fit, add nodes: the offloaded states take " +
         formatGiB(std::accumulate(
             shares.begin(), shares.end(), 0.0,
             [](double sum, const StateShare &share) { return sum + share.bytes; })) +
         " per device";
}

bool VerifyPass::checkCapacity(const ir::Run &run, const analysis::RunAnalysis &analysis) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::Cluster &cluster = *run.cluster;
  const analysis::MemoryReport &memory = analysis.memory;
  Severity severity = options.capacityIsError ? Severity::Error : Severity::Warning;
  bool ok = true;
  SMLoc where = fieldLoc(run, "strategy");
  auto capacityNote = [&](StringRef key) {
    SMLoc loc = cluster.fieldLocs.lookup(key);
    diags->note(loc.isValid() ? loc : cluster.loc,
                Twine("the ") + key + " of cluster '" + cluster.name + "' is set here");
  };
  auto breakdown = [](ArrayRef<StateShare> shares) {
    std::string text;
    for (const StateShare &share : shares) {
      if (share.bytes <= 0)
        continue;
      text += (text.empty() ? "" : ", ") + share.name.str() + " " + formatGiB(share.bytes);
    }
    return text.empty() ? std::string("nothing") : text;
  };

  const analysis::MemoryBreakdown &device = memory.device;
  if (device.peak > cluster.deviceMemory) {
    std::string stage;
    if (memory.stages.size() > 1) {
      for (const analysis::StageMemory &stageMemory : memory.stages)
        if (stageMemory.device.peak == device.peak) {
          stage = " on pipeline stage " + std::to_string(stageMemory.stage) + " of " +
                  std::to_string(memory.stages.size());
          break;
        }
    }
    if (severity == Severity::Error)
      ok = false;
    report(severity, run, {where, SMLoc()},
           Twine("run '") + run.name + "' needs " + formatGiBAndGB(device.peak) +
               " per device at its peak" + stage + ", over the " +
               formatGiBAndGB(cluster.deviceMemory) + " device_memory of cluster '" + cluster.name +
               "'",
           "capacity", [&] {
             diags->note(where,
                         Twine("per device: ") +
                             breakdown({{"params", device.params, ir::State::Params},
                                        {"grads", device.grads, ir::State::Grads},
                                        {"optimizer", device.optimizer, ir::State::Optimizer},
                                        {"activations", device.activations, ir::State::Activations},
                                        {"gather, transfer and loss buffers", device.transient,
                                         std::nullopt}}));
             if (!memory.activationsKnown)
               diags->note(run.model->loc,
                           Twine("model '") + run.model->name +
                               "' is abstract, so its activations are unknown: this check "
                               "covers the model states only");
             if (options.suggestCapacityFixes)
               diags->note(where, suggestForDevice(run));
             capacityNote("device_memory");
           });
  }

  // Host and NVMe, per node. The analysis counts every off-device state as host memory; split
  // it by the tier each state is placed in.
  const analysis::MemoryBreakdown &host = memory.host;
  const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
  const ir::StatePlacement &grads = strategy.getPlacement(ir::State::Grads);
  const ir::StatePlacement &optimizer = strategy.getPlacement(ir::State::Optimizer);
  const ir::StatePlacement &activations = strategy.getPlacement(ir::State::Activations);
  // Off-device gradients the analysis counts are in their tier, or on the host where they follow
  // an offloaded optimizer there (ZeRO-Offload).
  ir::Tier gradTier = grads.tier != ir::Tier::Device ? grads.tier : ir::Tier::Host;
  double perNode = static_cast<double>(cluster.devicesPerNode);
  for (ir::Tier tier : {ir::Tier::Host, ir::Tier::Nvme}) {
    std::vector<StateShare> shares = {
        {"params", params.tier == tier ? host.params : 0, ir::State::Params},
        {"grads", gradTier == tier ? host.grads : 0, ir::State::Grads},
        {"optimizer", optimizer.tier == tier ? host.optimizer : 0, ir::State::Optimizer},
        {"activations", activations.tier == tier ? host.activations : 0, ir::State::Activations}};
    double bytes = 0;
    for (const StateShare &share : shares)
      bytes += share.bytes;
    std::optional<double> capacity =
        tier == ir::Tier::Host ? cluster.hostMemory : cluster.nvmeCapacity;
    StringRef key = tier == ir::Tier::Host ? "host_memory" : "nvme_capacity";
    if (!capacity || bytes * perNode <= *capacity)
      continue;
    if (severity == Severity::Error)
      ok = false;
    std::string fix =
        options.suggestCapacityFixes ? suggestForOffload(run, tier, shares) : std::string();
    report(severity, run, {where, SMLoc()},
           Twine("run '") + run.name + "' needs " + formatGiBAndGB(bytes * perNode) + " of " +
               (tier == ir::Tier::Host ? "host memory" : "NVMe") + " per node (" +
               Twine(cluster.devicesPerNode) + " devices × " + formatGiB(bytes) + "), over the " +
               formatGiBAndGB(*capacity) + " " + key + " of cluster '" + cluster.name + "'",
           "capacity", [&] {
             diags->note(where,
                         Twine("per device @ ") + ir::toString(tier) + ": " + breakdown(shares));
             if (!fix.empty())
               diags->note(where, fix);
             capacityNote(key);
           });
  }
  return ok;
}

} // namespace

std::unique_ptr<Pass> createVerifyPass(VerifyOptions options) {
  return std::make_unique<VerifyPass>(options);
}

} // namespace placec
