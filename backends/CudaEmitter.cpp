// The CUDA backend: checks that placert's GPU trainer can run a run (GPT-2-layout transformer with
// multi-head attention, mixed bf16, Adam, devices only, data parallelism with ZeRO 0-3, any
// recomputation) and writes its main.cpp and CMakeLists.txt. Everything else is refused at the
// source location that asks for it.
#include "placec/backends/CudaEmitter.h"

#include "TrainerSupport.h"
#include "fmt/format.h"
#include "placec/Config.h"
#include "placec/backends/CppEmitter.h"
#include "placec/passes/Analysis.h"
#include "placec/passes/StepPlan.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

using namespace llvm;

namespace placec::codegen {

namespace {

/// The batch axes of the mesh, in mesh order.
std::vector<unsigned> batchAxes(const ir::Mesh &mesh) {
  std::vector<unsigned> axes;
  for (unsigned i = 0; i < mesh.axes.size(); ++i)
    if (mesh.axes[i].kind == ir::AxisKind::Batch)
      axes.push_back(i);
  return axes;
}

std::string batchLabel(const ir::Mesh &mesh) {
  std::string label;
  for (unsigned axis : batchAxes(mesh))
    label += (label.empty() ? "" : ",") + mesh.axes[axis].name;
  return label.empty() ? "dp" : label;
}

/// The state's mode over the batch axes when it is the same on all of them (Replicated when there
/// is no batch axis), or nullopt when the axes differ (hybrid sharding).
std::optional<ir::PlacementMode> uniformMode(const ir::Strategy &strategy, ir::State state) {
  std::optional<ir::PlacementMode> mode;
  const ir::StatePlacement &placement = strategy.getPlacement(state);
  for (unsigned axis : batchAxes(strategy.mesh)) {
    if (strategy.mesh.axes[axis].size == 1 || axis >= placement.axes.size())
      continue;
    ir::PlacementMode here = placement.axes[axis].mode;
    if (mode && *mode != here)
      return std::nullopt;
    mode = here;
  }
  return mode.value_or(ir::PlacementMode::Replicated);
}

SMLoc placementLoc(const ir::Strategy &strategy, ir::State state) {
  const ir::StatePlacement &placement = strategy.getPlacement(state);
  return placement.loc.isValid() ? placement.loc : strategy.loc;
}

/// The ZeRO stage the placement amounts to (call after checkCudaSupported).
int zeroStage(const ir::Strategy &strategy) {
  auto sharded = [&](ir::State state) {
    std::optional<ir::PlacementMode> mode = uniformMode(strategy, state);
    return mode && *mode != ir::PlacementMode::Replicated;
  };
  if (sharded(ir::State::Params))
    return 3;
  if (sharded(ir::State::Grads))
    return 2;
  if (sharded(ir::State::Optimizer))
    return 1;
  return 0;
}

std::string number(double value) { return fmt::format("{:.17g}", value); }

std::string quoted(StringRef text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

} // namespace

bool checkCudaSupported(const ir::Run &run, DiagnosticEngine &diags) {
  bool ok = true;
  auto refuse = [&](SMLoc loc, const Twine &part, const Twine &why) {
    diags.error(loc,
                "cannot compile run '" + run.name + "' for CUDA: " + part + ": " + why +
                    " (see docs/gpu.md)",
                "cuda");
    ok = false;
  };
  const ir::Model &model = *run.model;
  const ir::Strategy &strategy = *run.strategy;
  const ir::Mesh &mesh = strategy.mesh;
  SMLoc modelLoc = getFieldLoc(run, "model");
  // Parts of the strategy are reported at the run's `strategy = …` (the strategy may come from
  // the prelude), with a note where the part is written.
  SMLoc strategyLoc = getFieldLoc(run, "strategy");
  auto refuseStrategy = [&](SMLoc partLoc, const Twine &part, const Twine &why) {
    refuse(strategyLoc, part, why);
    if (partLoc.isValid() && partLoc != strategyLoc)
      diags.note(partLoc, part + " is written here");
  };
  if (model.kind != ir::ModelKind::Transformer) {
    refuse(modelLoc, "model '" + model.name + "' of kind " + ir::toString(model.kind),
           "the GPU trainer runs transformers only");
    return false;
  }
  const ir::TransformerConfig &config = model.transformer;
  if (strategy.activationMode == ir::ActivationMode::RecomputeOps)
    refuseStrategy(strategy.activationModeLoc, "activations = recompute(op)",
                   "the GPU trainer keeps a block's activations (recomputing the attention "
                   "probabilities) or its input only");
  if (strategy.activationMode == ir::ActivationMode::RecomputeModules)
    refuseStrategy(strategy.activationModeLoc,
                   "activations = " + ir::getActivationModeText(strategy.activationMode, 0,
                                                                strategy.recomputeModules),
                   "the GPU trainer keeps a block's activations or its input only, not "
                   "Megatron-Core's recomputation of its modules");
  if (strategy.activationMode == ir::ActivationMode::RecomputeAttention)
    refuseStrategy(strategy.activationModeLoc, "activations = recompute(attention)",
                   "the GPU trainer keeps a block's activations (recomputing the attention "
                   "probabilities under materialized attention) or its input only, not "
                   "Megatron-Core's checkpointed core attention");
  if (config.attention == ir::AttentionKind::Flash &&
      strategy.activationMode == ir::ActivationMode::RecomputeSelective)
    refuseStrategy(strategy.activationModeLoc, "activations = recompute(selective)",
                   "under fused attention the GPU trainer keeps the norms and the MLP activation "
                   "(activations = keep) or recomputes the whole block (recompute(full))");
  if (config.attention == ir::AttentionKind::Materialized &&
      strategy.activationMode == ir::ActivationMode::Keep)
    refuseStrategy(strategy.activationModeLoc, "activations = keep with attention = materialized",
                   "the GPU trainer recomputes the attention scores in the backward "
                   "(activations = recompute(selective))");
  if (strategy.recomputeLayers > 0)
    refuseStrategy(strategy.activationModeLoc,
                   "activations = recompute(layers = " + Twine(strategy.recomputeLayers) + ")",
                   "the GPU trainer recomputes every block or none");
  if (config.mlp != ir::MlpActivation::Gelu)
    refuse(model.loc, "mlp = " + ir::toString(config.mlp), "the GPU trainer implements GELU");
  if (config.norm != ir::NormKind::LayerNorm)
    refuse(model.loc, "norm = " + ir::toString(config.norm),
           "the GPU trainer implements LayerNorm");
  if (config.positions == ir::PositionKind::Rope) // ALiBi: forEachCommonUnsupported.
    refuse(model.loc, "positions = " + ir::toString(config.positions),
           "the GPU trainer implements learned positions");
  if (!config.tiedEmbeddings)
    refuse(model.loc, "untied embeddings",
           "the GPU trainer ties the output layer to the embedding");
  if (!config.bias)
    refuse(model.loc, "bias = " + config.getBiasText(), "the GPU trainer's layers have biases");
  forEachCommonUnsupported(run, "the GPU trainer", refuse);
  if (config.moe.isEnabled())
    refuse(model.loc, "experts = " + Twine(config.moe.experts),
           "the GPU trainer's layers have dense MLPs; mixture-of-experts layers are analysed, not "
           "compiled for CUDA");
  if (config.getKvHeads() != config.heads)
    refuse(model.loc,
           "kv_heads = " + Twine(config.getKvHeads()) + " with heads = " + Twine(config.heads),
           "the GPU trainer implements multi-head attention (kv_heads = heads); grouped-query "
           "attention trains on the CPU target");
  if (config.heads > 0 && config.hidden % config.heads != 0)
    refuse(model.loc, "hidden " + Twine(config.hidden) + " and heads " + Twine(config.heads),
           "the head dimension must be whole");
  else if (config.attention == ir::AttentionKind::Flash3 ||
           config.attention == ir::AttentionKind::Cudnn)
    refuse(model.loc, "attention = " + ir::toString(config.attention),
           "the GPU trainer's fused attention is FlashAttention-2's algorithm (attention = flash); "
           "attention = materialized keeps the scores");
  else if (config.attention == ir::AttentionKind::Flash && config.heads > 0) {
    int64_t headDim = config.hidden / config.heads;
    if (headDim != 16 && headDim != 32 && headDim != 64 && headDim != 128)
      refuse(model.loc, "attention = flash with heads of " + Twine(headDim),
             "the GPU trainer's fused attention runs heads of 16, 32, 64 or 128; attention = "
             "materialized runs any");
  }
  if (run.precision != ir::Precision::MixedBF16)
    refuse(getFieldLoc(run, "precision"), "precision = " + ir::spellPrecision(run),
           "the GPU trainer computes in bf16 with fp32 master weights (precision = "
           "mixed(bf16))");
  else if (run.fp32Grads)
    refuse(getFieldLoc(run, "precision"), "precision = mixed(bf16, grads = fp32)",
           "the GPU trainer accumulates and reduces its gradients in bf16 (precision = "
           "mixed(bf16))");
  if (run.crossEntropy != ir::CrossEntropyKind::Chunked)
    refuse(getFieldLoc(run, "cross_entropy"), "cross_entropy = " + ir::toString(run.crossEntropy),
           "the GPU trainer runs the output layer and the loss one sequence at a time (write "
           "cross_entropy = chunked, which the report counts so)");
  if (run.optimizer != ir::OptimizerKind::Adam || !run.optimizerStates.isDefault())
    refuse(getFieldLoc(run, "optimizer"),
           "optimizer = " + ir::spellOptimizer(run.optimizer, run.optimizerStates),
           "the GPU trainer implements Adam with fp32 moments and an fp32 master copy");
  for (const ir::Axis &axis : mesh.axes) {
    if (axis.size <= 1 || axis.kind == ir::AxisKind::Batch)
      continue;
    SMLoc loc = axis.loc.isValid() ? axis.loc : strategy.loc;
    if (axis.kind == ir::AxisKind::Tensor)
      refuseStrategy(loc, "tensor axis '" + axis.name + "' of size " + Twine(axis.size),
                     "tensor parallelism is not implemented on CUDA yet");
    else if (axis.kind == ir::AxisKind::Sequence)
      refuseStrategy(loc, "sequence axis '" + axis.name + "' of size " + Twine(axis.size),
                     "context parallelism is not implemented on CUDA yet (the CPU target runs "
                     "it)");
    else if (axis.kind == ir::AxisKind::Expert)
      refuseStrategy(loc, "expert axis '" + axis.name + "' of size " + Twine(axis.size),
                     "expert parallelism is not implemented on CUDA");
    else
      refuseStrategy(loc, "layers axis '" + axis.name + "' of size " + Twine(axis.size),
                     "pipeline parallelism is not implemented on CUDA yet");
  }
  for (ir::State state : {ir::State::Params, ir::State::Grads, ir::State::Optimizer}) {
    const ir::StatePlacement &placement = strategy.getPlacement(state);
    if (placement.tier != ir::Tier::Device)
      refuseStrategy(placement.tierLoc.isValid() ? placement.tierLoc
                                                 : placementLoc(strategy, state),
                     ir::toString(state) + " @ " + ir::toString(placement.tier),
                     "the GPU trainer keeps every state in device memory");
    std::optional<ir::PlacementMode> mode = uniformMode(strategy, state);
    if (!mode)
      refuseStrategy(placementLoc(strategy, state), ir::toString(state) + " placement",
                     "sharded over some batch axes and replicated over others (hybrid sharding)");
    else if (state == ir::State::Params && *mode == ir::PlacementMode::Sharded)
      refuseStrategy(placementLoc(strategy, state), "params sharded without gather",
                     "the GPU trainer gathers sharded parameters around each use (gather(...))");
  }
  const ir::StatePlacement &activations = strategy.getPlacement(ir::State::Activations);
  if (activations.tier != ir::Tier::Device)
    refuseStrategy(activations.tierLoc.isValid() ? activations.tierLoc
                                                 : placementLoc(strategy, ir::State::Activations),
                   "activations @ " + ir::toString(activations.tier),
                   "the GPU trainer keeps activations in device memory");
  for (const ir::AxisPlacement &axis : strategy.getPlacement(ir::State::Params).axes)
    if (axis.keepAfterForward) {
      refuseStrategy(axis.loc.isValid() ? axis.loc : placementLoc(strategy, ir::State::Params),
                     "gather(…, keep_after_forward = true)",
                     "the GPU trainer gathers a block's params again for its backward");
      break;
    }
  if (ok) {
    // ZeRO stages nest: what a stage shards, the stages below shard too.
    int stage = zeroStage(strategy);
    auto isSharded = [&](ir::State state) {
      std::optional<ir::PlacementMode> mode = uniformMode(strategy, state);
      return mode && *mode != ir::PlacementMode::Replicated;
    };
    if ((stage >= 2 && !isSharded(ir::State::Optimizer)) ||
        (stage >= 3 && !isSharded(ir::State::Grads)))
      refuseStrategy(
          strategy.loc, "this placement",
          "the GPU trainer runs ZeRO stages: sharded params need sharded grads and optimizer "
          "state, sharded grads need a sharded optimizer state");
  }
  return ok;
}

std::string emitCudaMain(const ir::Run &run, StringRef sourceName, double predictedPeakBytes) {
  const ir::Model &model = *run.model;
  const ir::TransformerConfig &config = model.transformer;
  const ir::Strategy &strategy = *run.strategy;
  int64_t dataParallel = strategy.mesh.getDegree(ir::AxisKind::Batch);
  int stage = zeroStage(strategy);
  int64_t ffn = config.ffn > 0 ? config.ffn : 4 * config.hidden;
  return fmt::format(
      R"(// Generated by placec {21} from {0}: run `{1}` on CUDA GPUs (placert::cuda, docs/gpu.md).
// Do not edit. Model `{2}`: GPT-2 layout, {3} layers, hidden {4}, {5} heads, seq {6}, vocab {7}.
// Strategy `{8}`: data parallel over '{9}' on {10} rank(s), ZeRO stage {11}.
// Run with `mpirun -np {10} ./{1}` (or plainly for one rank); `--help` lists the options.
#include "placert/cuda.h"

int main(int argc, char **argv) {{
  placert::cuda::GptShape shape;
  shape.name = {12};
  shape.layers = {3};
  shape.hidden = {4};
  shape.heads = {5};
  shape.seq = {6};
  shape.vocab = {7};
  shape.ffn = {13};

  placert::cuda::GptRunSpec spec;
  spec.run = {14};
  spec.axis = {15};
  spec.globalBatch = {16};
  spec.microBatch = {17};
  spec.dataParallel = {10};
  spec.zeroStage = {11};
  spec.recomputeFull = {20};
  spec.fusedAttention = {22};
  spec.placecVersion = "{21}";
  // The cluster's peak FLOP/s per device (MFU) and the report's per-device peak memory.
  spec.peakFlops = {18};
  spec.predictedPeakBytes = {19};
  return placert::cuda::runGpt(argc, argv, shape, spec);
}}
)",
      sys::path::filename(sourceName).str(), run.name, model.name, config.layers, config.hidden,
      config.heads, config.seq, config.vocab, strategy.name, batchLabel(strategy.mesh),
      dataParallel, stage, quoted(model.name), ffn, quoted(run.name),
      quoted(batchLabel(strategy.mesh)), run.globalBatch, run.microBatch,
      number(run.cluster ? run.cluster->peakFlops : 0), number(predictedPeakBytes),
      strategy.activationMode == ir::ActivationMode::RecomputeFull ? "true" : "false",
      PLACEC_VERSION, config.attention == ir::AttentionKind::Flash ? "true" : "false");
}

std::string emitCudaCMakeLists(const ir::Run &run, StringRef sourceName, StringRef placertHint) {
  return fmt::format(R"(# Generated by placec {0} from {1}: run `{2}` on CUDA. Do not edit.
# Build: cmake -S . -B build && cmake --build build
# The program is plain C++: CUDA, cuBLAS and NCCL stay inside the placert_cuda library.
cmake_minimum_required(VERSION 3.20)
project({2} LANGUAGES CXX)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
{3}add_executable({2} main.cpp)
target_compile_features({2} PRIVATE cxx_std_17)
target_link_libraries({2} PRIVATE placert::cuda)
)",
                     PLACEC_VERSION, sys::path::filename(sourceName).str(), run.name,
                     emitFindPackage("placert_cuda", placertHint));
}

bool emitCudaProject(const ir::Run &run, StringRef sourceName, StringRef directory,
                     StringRef placertHint, DiagnosticEngine &diags, std::string &error) {
  if (!checkCudaSupported(run, diags))
    return false;
  std::unique_ptr<plan::StepPlan> stepPlan = plan::lowerRun(run);
  double predicted = analysis::analyze(*stepPlan).memory.device.peak;
  if (std::error_code ec = sys::fs::create_directories(directory)) {
    error = "cannot create '" + directory.str() + "': " + ec.message();
    return false;
  }
  auto write = [&](StringRef name, StringRef text) {
    SmallString<256> path(directory);
    sys::path::append(path, name);
    std::error_code ec;
    raw_fd_ostream out(path, ec);
    if (ec) {
      error = "cannot write '" + std::string(path) + "': " + ec.message();
      return false;
    }
    out << text;
    return true;
  };
  return write("main.cpp", emitCudaMain(run, sourceName, predicted)) &&
         write("CMakeLists.txt", emitCudaCMakeLists(run, sourceName, placertHint));
}

} // namespace placec::codegen
