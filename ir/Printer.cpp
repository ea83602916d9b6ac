// Prints a Program in placec's deterministic textual IR format (docs/ir.md): declaration order,
// exact numbers, readable units alongside base units, and rank groups of each run's mesh.
#include "placec/ir/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <charconv>
#include <cmath>
#include <limits>

using namespace llvm;

namespace placec::ir {

namespace {

/// The groups of an axis printed in full; the rest are counted.
constexpr int64_t kMaxPrintedGroups = 4;
/// Groups up to this size print every rank; larger ones print the first few, `…`, and the last.
constexpr int64_t kMaxPrintedRanks = 8;
constexpr int64_t kLeadingRanks = 4;

/// Shortest round-trip spelling of a double; integral values below 2^53 print as integers.
std::string formatNumber(double value) {
  if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 0x1p53)
    return std::to_string(static_cast<int64_t>(value));
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

/// A readable mantissa: at most 12 significant digits, trailing zeros trimmed.
std::string formatMantissa(double value) {
  char buffer[64];
  auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::general, 12);
  return std::string(buffer, result.ptr);
}

struct Unit {
  double scale;
  StringRef name;
};

/// `value` in the largest unit it reaches (the smallest unit when it reaches none).
std::string formatInUnits(double value, ArrayRef<Unit> units) {
  const Unit *chosen = &units.front();
  for (const Unit &unit : units)
    if (std::fabs(value) >= unit.scale)
      chosen = &unit;
  return formatMantissa(value / chosen->scale) + " " + chosen->name.str();
}

const Unit kDecimalBytes[] = {{1, "B"}, {1e3, "KB"}, {1e6, "MB"}, {1e9, "GB"}, {1e12, "TB"}};
const Unit kBinaryBytes[] = {
    {1, "B"}, {0x1p10, "KiB"}, {0x1p20, "MiB"}, {0x1p30, "GiB"}, {0x1p40, "TiB"}};
const Unit kBandwidth[] = {{1, "B/s"}, {1e3, "KB/s"}, {1e6, "MB/s"}, {1e9, "GB/s"}, {1e12, "TB/s"}};
const Unit kRate[] = {{1e12, "TFLOPS"}, {1e15, "PFLOPS"}};
const Unit kTime[] = {{1e-9, "ns"}, {1e-6, "us"}, {1e-3, "ms"}, {1, "s"}};

/// `<base value> <base unit> (<readable>)`, the readable part left out when it says the same.
std::string formatQuantity(double value, StringRef baseUnit, std::string readable) {
  std::string base = formatNumber(value) + " " + baseUnit.str();
  if (value == 0 || readable == base)
    return base;
  return base + " (" + readable + ")";
}

std::string formatBytes(double value) {
  // Whichever of the decimal and binary spellings is shorter: 80 GiB, 40 GB.
  std::string decimal = formatInUnits(value, kDecimalBytes);
  std::string binary = formatInUnits(value, kBinaryBytes);
  return formatQuantity(value, "B", binary.size() < decimal.size() ? binary : decimal);
}

std::string formatBandwidth(double value) {
  return formatQuantity(value, "B/s", formatInUnits(value, kBandwidth));
}

std::string formatRate(double value) {
  return formatQuantity(value, "FLOP/s", formatInUnits(value, kRate));
}

std::string formatTime(double value) {
  return formatQuantity(value, "s", formatInUnits(value, kTime));
}

bool isIdentifier(StringRef name) {
  if (name.empty() || !(isAlpha(name.front()) || name.front() == '_'))
    return false;
  return all_of(name, [](char c) { return isAlnum(c) || c == '_'; });
}

class IRPrinter {
public:
  explicit IRPrinter(raw_ostream &os) : os(os) {}

  void print(const Program &program);

private:
  void print(const Model &model);
  void print(const Cluster &cluster);
  void print(const Strategy &strategy);
  void print(const Run &run);
  void printState(const Strategy &strategy, State state, bool expert = false);
  void printGroups(const Mesh &mesh, const Cluster &cluster);
  void printGroup(int64_t first, int64_t stride, int64_t size);

  /// `@name`, or `@"name"` with escapes when the name is not an identifier.
  void printSymbol(StringRef name) {
    os << '@';
    if (isIdentifier(name)) {
      os << name;
      return;
    }
    os << '"';
    os.write_escaped(name);
    os << '"';
  }

  /// Starts a line at the current indentation.
  raw_ostream &line() {
    os.indent(indent * 2);
    return os;
  }
  void open() { ++indent; }
  void close() {
    --indent;
    line() << "}\n";
  }

  raw_ostream &os;
  unsigned indent = 0;
};

} // namespace

void IRPrinter::print(const Program &program) {
  bool first = true;
  auto separate = [&] {
    if (!first)
      os << '\n';
    first = false;
  };
  for (const std::unique_ptr<Model> &model : program.models) {
    separate();
    print(*model);
  }
  for (const std::unique_ptr<Cluster> &cluster : program.clusters) {
    separate();
    print(*cluster);
  }
  for (const std::unique_ptr<Strategy> &strategy : program.strategies) {
    separate();
    print(*strategy);
  }
  for (const std::unique_ptr<Run> &run : program.runs) {
    separate();
    print(*run);
  }
}

void IRPrinter::print(const Model &model) {
  line() << "model ";
  printSymbol(model.name);
  os << " : " << toString(model.kind) << " {\n";
  open();

  if (model.kind == ModelKind::Abstract) {
    line() << "params = " << model.numParams << '\n';
    close();
    return;
  }

  line() << "config {\n";
  open();
  if (model.kind == ModelKind::Transformer) {
    const TransformerConfig &config = model.transformer;
    line() << "layers = " << config.layers << '\n';
    line() << "hidden = " << config.hidden << '\n';
    line() << "heads = " << config.heads << '\n';
    line() << "seq = " << config.seq << '\n';
    line() << "vocab = " << config.vocab << '\n';
    int64_t ffn = config.ffn;
    if (ffn <= 0 && __builtin_mul_overflow(config.hidden, int64_t(4), &ffn))
      ffn = std::numeric_limits<int64_t>::max();
    line() << "ffn = " << ffn << '\n';
    line() << "mlp = " << toString(config.mlp) << '\n';
    line() << "norm = " << toString(config.norm) << '\n';
    line() << "bias = " << config.getBiasText() << '\n';
    line() << "positions = " << toString(config.positions) << '\n';
    if (config.embeddingNorm)
      line() << "embedding_norm = true\n";
    line() << "tied_embeddings = " << (config.tiedEmbeddings ? "true" : "false") << '\n';
    line() << "kv_heads = " << config.getKvHeads() << '\n';
    if (config.kvRepeat)
      line() << "kv_repeat = true\n";
    if (config.ropeComplex)
      line() << "rope_complex = true\n";
    if (config.unpad)
      line() << "unpad = true\n";
    if (config.projections != Projections::Fused)
      line() << "projections = " << toString(config.projections) << '\n';
    line() << "attention = " << toString(config.attention) << '\n';
    if (config.headDim > 0 || config.qkNorm)
      line() << "head_dim = " << config.getHeadDim()
             << ", qk_norm = " << (config.qkNorm ? "true" : "false") << '\n';
    if (config.isLatentAttention())
      line() << "kv_lora_rank = " << config.kvLoraRank << ", q_lora_rank = " << config.qLoraRank
             << ", rope_head_dim = " << config.ropeHeadDim
             << ", v_head_dim = " << config.getValueHeadDim() << '\n';
    if (config.postNorm)
      line() << "post_norm = true\n";
    if (config.sinks)
      line() << "sinks = true\n";
    if (config.window > 0) {
      line() << "window = " << config.window;
      if (config.fullEvery > 0)
        os << ", full_every = " << config.fullEvery;
      os << '\n';
    }
    if (config.moe.isEnabled()) {
      const MoeConfig &moe = config.moe;
      line() << "experts = " << moe.experts << ", top_k = " << moe.topK
             << ", expert_ffn = " << moe.expertFfn << ", shared_experts = " << moe.sharedExperts
             << ", shared_expert_ffn = " << moe.sharedExpertFfn << '\n';
      line() << "moe_every = " << moe.every << ", dense_layers = " << moe.denseLayers
             << ", moe_layers = " << moe.getNumMoeLayers(config.layers)
             << ", router = " << toString(moe.router) << ", capacity_factor = "
             << (moe.capacityFactor ? formatNumber(*moe.capacityFactor) : "dropless")
             << ", aux_loss = " << formatNumber(moe.auxLoss)
             << ", imbalance = " << formatNumber(moe.imbalance) << '\n';
      if (moe.auxLossScope != AuxLossScope::Global)
        line() << "aux_loss_scope = " << toString(moe.auxLossScope) << '\n';
      if (moe.routerBias)
        line() << "router_bias = true\n";
      if (moe.routerGroups > 0)
        line() << "router_groups = " << moe.routerGroups
               << ", router_group_top_k = " << moe.routerGroupTopK << '\n';
    }
    if (config.mtpLayers > 0)
      line() << "mtp_layers = " << config.mtpLayers << '\n';
  } else {
    const MlpConfig &config = model.mlp;
    line() << "layers = " << config.layers << '\n';
    line() << "width = " << config.width << '\n';
    line() << "input = " << config.input << '\n';
    line() << "output = " << config.output << '\n';
  }
  close();

  line() << "tensors (" << model.tensors.size() << ") {\n";
  open();
  for (const Tensor &tensor : model.tensors) {
    line() << tensor.name << " : [";
    interleaveComma(tensor.shape, os);
    os << "], elements = " << tensor.numElements << ", split = " << toString(tensor.split)
       << ", layer = " << tensor.layer << (tensor.expert ? ", expert" : "") << '\n';
  }
  close();

  line() << "params = " << model.numParams << " {\n";
  open();
  int64_t layerParams = model.getLayerParams();
  int64_t embeddingParams = model.getEmbeddingParams();
  line() << "layers = " << layerParams << '\n';
  line() << "embeddings = " << embeddingParams << '\n';
  line() << "head = " << model.getHeadParams() << '\n';
  if (int64_t mtp = model.getMtpParams(); mtp > 0)
    line() << "mtp = " << mtp << " (multi-token prediction modules)\n";
  if (model.isMoe()) {
    line() << "experts = " << model.getExpertParams() << " (routed)\n";
    line() << "active = " << model.getActiveParams() << " (per token: top_k of the routed)\n";
  }
  if (model.kind == ModelKind::Transformer) {
    int64_t narayanan;
    if (__builtin_add_overflow(layerParams, embeddingParams, &narayanan))
      narayanan = std::numeric_limits<int64_t>::max();
    line() << "narayanan = " << narayanan << " (layers + embeddings)\n";
  }
  line() << "by_split = {";
  interleaveComma(ArrayRef<TensorSplit>{TensorSplit::Column, TensorSplit::Row,
                                        TensorSplit::Vocabulary, TensorSplit::Replicated},
                  os, [&](TensorSplit split) {
                    os << toString(split) << " = " << model.getParamsWithSplit(split);
                  });
  os << "}\n";
  close();
  close();
}

void IRPrinter::print(const Cluster &cluster) {
  line() << "cluster ";
  printSymbol(cluster.name);
  os << " {\n";
  open();
  line() << "nodes = " << cluster.nodes << '\n';
  line() << "devices_per_node = " << cluster.devicesPerNode << '\n';
  line() << "devices = " << cluster.getNumDevices() << '\n';
  line() << "device_memory = " << formatBytes(cluster.deviceMemory) << '\n';
  line() << "peak = " << formatRate(cluster.peakFlops) << '\n';
  line() << "intra_bandwidth = " << formatBandwidth(cluster.intraBandwidth) << '\n';
  line() << "inter_bandwidth = " << formatBandwidth(cluster.interBandwidth) << '\n';
  line() << "host_bandwidth = "
         << (cluster.hostBandwidth ? formatBandwidth(*cluster.hostBandwidth) : "none") << '\n';
  line() << "latency = " << formatTime(cluster.latency) << '\n';
  line() << "host_memory = " << (cluster.hostMemory ? formatBytes(*cluster.hostMemory) : "none")
         << '\n';
  line() << "efficiency = " << formatNumber(cluster.efficiency) << '\n';
  line() << "nvme_bandwidth = "
         << (cluster.nvmeBandwidth ? formatBandwidth(*cluster.nvmeBandwidth) : "none") << '\n';
  line() << "nvme_capacity = "
         << (cluster.nvmeCapacity ? formatBytes(*cluster.nvmeCapacity) : "none") << '\n';
  line() << "device = ";
  if (cluster.device)
    os << cluster.device->name << " (" << cluster.device->description << ", "
       << toString(cluster.device->family) << ")\n";
  else
    os << "none\n";
  line() << "peak_tf32 = " << (cluster.peakTf32 > 0 ? formatRate(cluster.peakTf32) : "none")
         << '\n';
  line() << "peak_fp8 = " << (cluster.peakFp8 > 0 ? formatRate(cluster.peakFp8) : "none") << '\n';
  line() << "peak_fp4 = " << (cluster.peakFp4 > 0 ? formatRate(cluster.peakFp4) : "none") << '\n';
  line() << "hbm_bandwidth = "
         << (cluster.hbmBandwidth > 0 ? formatBandwidth(cluster.hbmBandwidth) : "none") << '\n';
  line() << "compute_units = " << cluster.computeUnits << '\n';
  line() << "host_memory_bandwidth = "
         << (cluster.hostMemoryBandwidth ? formatBandwidth(*cluster.hostMemoryBandwidth) : "none")
         << '\n';
  line() << "compute_model = " << (cluster.hasShapeModel() ? "shapes" : "flat efficiency") << '\n';
  close();
}

static StringRef explicitness(bool isExplicit) { return isExplicit ? "[explicit]" : "[default]"; }

void IRPrinter::print(const Strategy &strategy) {
  line() << "strategy ";
  printSymbol(strategy.name);
  os << " {\n";
  open();
  const Mesh &mesh = strategy.mesh;
  if (!strategy.hasMesh) {
    line() << "mesh = none\n";
  } else {
    line() << "mesh (devices = " << mesh.getNumDevices() << ") {\n";
    open();
    for (unsigned i = 0, e = mesh.axes.size(); i != e; ++i) {
      const Axis &axis = mesh.axes[i];
      line() << "axis " << axis.name << " : " << toString(axis.kind) << ", size = " << axis.size
             << ", stride = " << mesh.getStride(i) << '\n';
    }
    close();
  }
  for (State state : kAllStates)
    printState(strategy, state);
  bool experts = strategy.mesh.getDegree(AxisKind::Expert) > 1 ||
                 llvm::any_of(strategy.expertPlacements, [](const StatePlacement &placement) {
                   return placement.loc.isValid();
                 });
  if (experts)
    for (State state : {State::Params, State::Grads, State::Optimizer})
      printState(strategy, state, /*expert=*/true);
  if (strategy.pipeline) {
    const Pipeline &pipeline = *strategy.pipeline;
    line() << "pipeline = " << toString(pipeline.schedule) << "(microbatches = ";
    if (pipeline.microbatches)
      os << *pipeline.microbatches;
    else
      os << "auto";
    os << ", chunks = " << pipeline.chunks;
    if (!pipeline.layout.empty())
      os << ", layout = \"" << pipeline.layout.text << '"';
    os << ") " << explicitness(pipeline.loc.isValid()) << '\n';
  } else {
    line() << "pipeline = none\n";
  }
  line() << "context = " << toString(strategy.contextMethod) << ' '
         << explicitness(strategy.contextLoc.isValid()) << '\n';
  line() << "async_tp = " << toString(strategy.asyncTensorParallel) << ' '
         << explicitness(strategy.asyncTensorParallelLoc.isValid()) << '\n';
  line() << "sp_inputs = " << toString(strategy.sequenceParallelInputs) << ' '
         << explicitness(strategy.sequenceParallelInputsLoc.isValid()) << '\n';
  line() << "dp_overlap = " << toString(strategy.dataParallelOverlap) << ' '
         << explicitness(strategy.dataParallelOverlapLoc.isValid()) << '\n';
  line() << "grad_reduce = " << toString(strategy.gradReduce) << ' '
         << explicitness(strategy.gradReduceLoc.isValid()) << '\n';
  line() << "ep_overlap = " << toString(strategy.expertOverlap) << ' '
         << explicitness(strategy.expertOverlapLoc.isValid()) << '\n';
  line() << "dispatcher = " << toString(strategy.expertDispatcher) << ' '
         << explicitness(strategy.expertDispatcherLoc.isValid()) << '\n';
  line() << "expert_tensor = " << toString(strategy.expertTensor) << ' '
         << explicitness(strategy.expertTensorLoc.isValid()) << '\n';
  line() << "expert_context = " << toString(strategy.expertContext) << ' '
         << explicitness(strategy.expertContextLoc.isValid()) << '\n';
  close();
}

void IRPrinter::printState(const Strategy &strategy, State state, bool expert) {
  const StatePlacement &placement =
      expert ? strategy.getExpertPlacement(state) : strategy.getPlacement(state);
  line() << (expert ? "expert_" : "") << toString(state) << " {\n";
  open();
  if (strategy.hasMesh) {
    for (unsigned i = 0, e = strategy.mesh.axes.size(); i != e; ++i) {
      line() << strategy.mesh.axes[i].name << " = ";
      if (i >= placement.axes.size()) {
        os << "<missing>\n";
        continue;
      }
      const AxisPlacement &axis = placement.axes[i];
      os << toString(axis.mode);
      if (axis.keepAfterForward)
        os << "(keep_after_forward = true)";
      os << ' ' << explicitness(axis.isExplicit) << '\n';
    }
  }
  line() << "tier = " << toString(placement.tier) << ' ' << explicitness(placement.tierExplicit)
         << '\n';
  if (state == State::Activations) {
    line() << "mode = "
           << getActivationModeText(strategy.activationMode, strategy.recomputeLayers,
                                    strategy.recomputeModules)
           << ' ' << explicitness(strategy.activationModeLoc.isValid()) << '\n';
    line() << "sequence_parallel = " << (strategy.sequenceParallel ? "true" : "false") << '\n';
  }
  close();
}

void IRPrinter::print(const Run &run) {
  line() << "run ";
  printSymbol(run.name);
  os << " {\n";
  open();
  auto printReference = [&](StringRef key, const auto *decl) {
    line() << key << " = ";
    if (decl)
      printSymbol(decl->name);
    else
      os << "none";
    os << '\n';
  };
  printReference("model", run.model);
  printReference("cluster", run.cluster);
  printReference("strategy", run.strategy);
  line() << "micro_batch = " << run.microBatch << '\n';
  line() << "global_batch = " << run.globalBatch << '\n';
  line() << "precision = " << spellPrecision(run) << '\n';
  line() << "optimizer = " << spellOptimizer(run.optimizer, run.optimizerStates) << '\n';
  if (run.crossEntropy != CrossEntropyKind::Fused)
    line() << "cross_entropy = " << toString(run.crossEntropy) << '\n';
  if (run.trainMetrics > 0)
    line() << "train_metrics = " << run.trainMetrics << '\n';
  StateBytes bytes = getStateBytes(run);
  line() << "bytes_per_param = {params = " << format("%g", bytes.params)
         << ", grads = " << bytes.grads << ", optimizer = " << bytes.optimizer;
  // The embedding's and the head's parameters, read by BF16 products, keep the weight alone.
  double unquantized = bytes.unquantized().params;
  if (unquantized != bytes.params)
    os << ", unquantized_params = " << format("%g", unquantized);
  os << "}\n";
  line() << "bytes_per_activation = " << getActivationBytes(run.precision) << '\n';
  line() << "microbatches_per_step = " << run.microbatchesPerStep;
  if (run.microbatchesPerStep == 0)
    os << " (not derived)";
  os << '\n';
  if (run.strategy && run.cluster) {
    if (run.strategy->hasMesh)
      printGroups(run.strategy->mesh, *run.cluster);
    else
      line() << "groups = none\n";
  }
  close();
}

void IRPrinter::printGroups(const Mesh &mesh, const Cluster &cluster) {
  line() << "groups on ";
  printSymbol(cluster.name);
  os << " (devices = " << mesh.getNumDevices() << ", devices_per_node = " << cluster.devicesPerNode
     << ") {\n";
  open();
  for (unsigned i = 0, e = mesh.axes.size(); i != e; ++i) {
    const Axis &axis = mesh.axes[i];
    int64_t numGroups = mesh.getNumGroups(i);
    line() << "axis " << axis.name << " : " << toString(axis.kind) << ", size = " << axis.size
           << ", stride = " << mesh.getStride(i) << ", "
           << (mesh.isIntraNode(i, cluster.devicesPerNode) ? "intra-node" : "inter-node") << ", "
           << numGroups << (numGroups == 1 ? " group" : " groups") << '\n';
    open();
    int64_t stride = mesh.getStride(i);
    for (int64_t g = 0; g < std::min(numGroups, kMaxPrintedGroups); ++g) {
      // As Mesh::getGroup, without building a group that may hold a million ranks.
      line();
      printGroup((g / stride) * stride * axis.size + g % stride, stride, axis.size);
    }
    if (numGroups > kMaxPrintedGroups) {
      int64_t rest = numGroups - kMaxPrintedGroups;
      line() << "… " << rest << (rest == 1 ? " more group" : " more groups") << '\n';
    }
    --indent;
  }
  close();
}

void IRPrinter::printGroup(int64_t first, int64_t stride, int64_t size) {
  os << '[';
  int64_t printed = size <= kMaxPrintedRanks ? size : kLeadingRanks;
  for (int64_t k = 0; k < printed; ++k)
    os << (k == 0 ? "" : ", ") << first + k * stride;
  if (printed < size)
    os << ", …, " << first + (size - 1) * stride;
  os << "]\n";
}

void printProgram(const Program &program, raw_ostream &os) { IRPrinter(os).print(program); }

} // namespace placec::ir
