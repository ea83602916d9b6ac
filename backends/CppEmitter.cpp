// The C++ backend: emits a run's StepPlan as a readable program over placert's public API — one
// function per stage and pass (forward, backward, step), one runtime call per plan op with the
// op's reason as its comment, names taken from the .place file.
#include "placec/backends/CppEmitter.h"

#include "TrainerSupport.h"
#include "fmt/format.h"
#include "placec/Config.h"
#include "placec/passes/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <sstream>

using namespace llvm;

namespace placec::codegen {

namespace {

using plan::Op;
using plan::OpKind;

/// An output stream that indents every line by the current depth; `Scope` opens a brace block
/// and closes it when it goes out of scope.
class IndentedStream {
public:
  void line(StringRef text = "") {
    if (!text.empty())
      out << std::string(depth * 2, ' ') << text.str();
    out << "\n";
  }
  void comment(StringRef text) { line(("// " + text).str()); }
  std::string str() const { return out.str(); }

  class Scope {
  public:
    Scope(IndentedStream &stream, StringRef header, StringRef closing = "}")
        : stream(stream), closing(closing.str()) {
      stream.line((header + " {").str());
      ++stream.depth;
    }
    ~Scope() {
      --stream.depth;
      stream.line(closing);
    }

  private:
    IndentedStream &stream;
    std::string closing;
  };

private:
  std::ostringstream out;
  unsigned depth = 0;
};

const char *dtypeName(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::BF16:
    return "DType::BF16";
  case plan::DType::FP16:
    return "DType::FP16";
  case plan::DType::FP32:
    return "DType::FP32";
  case plan::DType::FP8: // Refused before emission (FP8 and FP4 runs are not compiled).
  case plan::DType::MXFP8:
  case plan::DType::NVFP4:
  case plan::DType::FP4:
    return "DType::BF16";
  }
  return "?";
}

const char *phaseName(plan::Phase phase) {
  switch (phase) {
  case plan::Phase::Forward:
    return "Phase::Forward";
  case plan::Phase::Backward:
    return "Phase::Backward";
  case plan::Phase::Step:
    return "Phase::Step";
  }
  return "?";
}

/// A C++ identifier for a unit: `layer.3` → `layer3`.
std::string unitIdentifier(StringRef name) {
  std::string result;
  for (char c : name)
    if (llvm::isAlnum(c) || c == '_')
      result += c;
  return result;
}

std::string quoted(StringRef text) { return ("\"" + text + "\"").str(); }

/// Calls `refuse` for each part of the run that the CPU runtime cannot train, with where it is
/// written and why (docs/running.md lists them).
void forEachUnsupported(const ir::Run &run, size_t stages, RefuseFn refuse) {
  const ir::Model &model = *run.model;
  const ir::Strategy &strategy = *run.strategy;
  SMLoc strategyLoc = getFieldLoc(run, "strategy");
  if (run.crossEntropy == ir::CrossEntropyKind::Chunked)
    refuse(getFieldLoc(run, "cross_entropy"), "cross_entropy = chunked",
           "the CPU trainer computes the loss over the whole micro-batch's logits (write "
           "cross_entropy = fused)");
  if (!run.optimizerStates.isDefault())
    refuse(getFieldLoc(run, "optimizer"),
           "optimizer = " + ir::spellOptimizer(run.optimizer, run.optimizerStates),
           "placert's Adam keeps fp32 moments and the master copy its precision implies "
           "(write adam)");
  if (model.kind == ir::ModelKind::Abstract) {
    refuse(getFieldLoc(run, "model"), "model '" + model.name + "' of kind abstract",
           "an abstract model has a parameter count but no layers to compute");
    return;
  }
  int64_t contextDegree = strategy.mesh.getDegree(ir::AxisKind::Sequence);
  if (model.kind == ir::ModelKind::Transformer) {
    const ir::TransformerConfig &config = model.transformer;
    int64_t tensorDegree = strategy.mesh.getDegree(ir::AxisKind::Tensor);
    if (tensorDegree > 1 && config.vocab % tensorDegree != 0)
      refuse(model.loc, "vocab = " + Twine(config.vocab),
             "the vocabulary-parallel embedding and cross-entropy need a vocabulary that divides "
             "among the " +
                 Twine(tensorDegree) + " tensor-parallel ranks");
    if (tensorDegree > 1 && strategy.sequenceParallel &&
        (run.microBatch * (config.seq / contextDegree)) % tensorDegree != 0)
      refuse(getFieldLoc(run, "micro_batch"),
             "micro_batch = " + Twine(run.microBatch) + " with seq = " + Twine(config.seq) +
                 (contextDegree > 1 ? " over " + Twine(contextDegree) + " context ranks" : ""),
             "sequence parallelism splits the micro-batch's tokens among the " +
                 Twine(tensorDegree) + " tensor-parallel ranks");
    // Context parallelism: ring and all-to-all attention run; every method splits the tokens
    // with Megatron-Core's load-balanced split (2·cp chunks per sequence).
    SMLoc contextLoc = strategy.contextLoc.isValid() ? strategy.contextLoc : strategyLoc;
    if (contextDegree > 1 && strategy.contextMethod == ir::ContextMethod::AllGather)
      refuse(contextLoc, "context = all_gather",
             "placert's context-parallel attention passes key/value blocks around a ring or "
             "exchanges heads all-to-all; declare context = ring or context = all_to_all");
    else if (contextDegree > 1 && config.seq % (2 * contextDegree) != 0)
      refuse(contextLoc,
             "seq = " + Twine(config.seq) + " over " + Twine(contextDegree) + " context ranks",
             "placert splits each sequence into 2 x " + Twine(contextDegree) +
                 " load-balanced chunks (Megatron-Core's split), for all_to_all too");
    if (config.qkvBias)
      refuse(model.loc, "bias = qkv",
             "placert's transformer has biases on every linear layer or on none; declare "
             "bias = true or bias = false");
    forEachCommonUnsupported(run, "the CPU trainer", refuse);
    if (strategy.foldsExpertTensor() && config.moe.sharedExperts > 0)
      refuse(strategy.expertTensorLoc,
             "expert_tensor = fold with shared_experts = " + Twine(config.moe.sharedExperts),
             "the CPU trainer's folded MoE layer routes each tensor rank's own rows and has no "
             "tensor-parallel MLP for shared experts (write expert_tensor = split)");
    if (config.moe.routerBias)
      refuse(model.loc, "router_bias = true", "the CPU trainer's router has no bias");
    if (config.moe.isEnabled() && config.moe.auxLossScope != ir::AuxLossScope::Global)
      refuse(config.moe.auxLossScopeLoc.isValid() ? config.moe.auxLossScopeLoc : model.loc,
             "aux_loss_scope = " + ir::toString(config.moe.auxLossScope),
             "the CPU trainer counts the load-balancing loss over each whole micro-batch across "
             "the data-parallel ranks (aux_loss_scope = global), which the single-device step "
             "it is checked against computes");
    if (config.mlp == ir::MlpActivation::Relu2)
      refuse(config.mlpLoc, "mlp = relu2",
             "placert's transformer implements GELU and SwiGLU MLPs; declare mlp = gelu or "
             "mlp = swiglu");
    // placert's attention reads each grouped key/value head in place (GptKernels.h): it neither
    // copies K and V to every query head nor, under context parallelism, exchanges the repeated
    // heads that the step plan of such a model moves (cost::getAttentionKvHeads).
    if (cost::repeatsKv(config, run.kernels)) {
      std::string heads = "kv_heads = " + std::to_string(config.getKvHeads()) +
                          " < heads = " + std::to_string(config.heads);
      if (config.kvRepeat)
        refuse(config.kvRepeatLoc.isValid() ? config.kvRepeatLoc : model.loc,
               "kv_repeat = true with " + heads,
               "placert's attention reads each grouped key/value head in place and does not "
               "repeat them to every query head; declare kv_repeat = false");
      else if (contextDegree > 1)
        refuse(getFieldLoc(run, "kernels"),
               "kernels = eager with " + heads + " under context parallelism",
               "eager PyTorch repeats the keys and values to every head before the attention, so "
               "the step plan exchanges all heads' K and V, and placert's context-parallel "
               "attention exchanges the grouped ones; write kernels = fused");
    }
    if (strategy.activationMode == ir::ActivationMode::RecomputeAttention)
      refuse(strategy.activationModeLoc.isValid() ? strategy.activationModeLoc : strategyLoc,
             "activations = recompute(attention)",
             "placert keeps a layer's activations, its selective set or its input only; "
             "Megatron-Core's checkpointed core attention is analysed and exported, not compiled");
    if (strategy.activationMode == ir::ActivationMode::RecomputeModules)
      refuse(strategy.activationModeLoc.isValid() ? strategy.activationModeLoc : strategyLoc,
             "activations = " +
                 ir::getActivationModeText(strategy.activationMode, 0, strategy.recomputeModules),
             "placert keeps a layer's activations, its selective set or its input only; "
             "Megatron-Core's recomputation of its modules is analysed and exported, not compiled");
    if (strategy.activationMode == ir::ActivationMode::RecomputeOps)
      refuse(strategy.activationModeLoc.isValid() ? strategy.activationModeLoc : strategyLoc,
             "activations = recompute(op)",
             "placert keeps a layer's activations, its selective set or its input only; "
             "torchtitan's per-op policy is analysed, not compiled");
    if (strategy.recomputeLayers > 0)
      refuse(strategy.activationModeLoc.isValid() ? strategy.activationModeLoc : strategyLoc,
             "activations = recompute(layers = " + Twine(strategy.recomputeLayers) + ")",
             "placert recomputes every layer or none; Megatron-LM's block recomputation is "
             "analysed and exported, not compiled");
    // Mixtures of experts: placert routes without dropping tokens (docs/running.md).
    const ir::MoeConfig &moe = config.moe;
    if (moe.isEnabled()) {
      if (moe.capacityFactor &&
          *moe.capacityFactor * static_cast<double>(moe.topK) < static_cast<double>(moe.experts))
        refuse(model.loc,
               "capacity_factor = " + Twine(fmt::format("{}", *moe.capacityFactor)) + " with " +
                   Twine(moe.experts) + " experts and top_k = " + Twine(moe.topK),
               "placert routes without dropping tokens: the capacity factor must be at least "
               "experts / top_k, or absent (dropless)");
    }
    // Tied embeddings across stages: the trainer sums the embedding's gradient and its copy's
    // on the head's stage before the step's reductions, over whole gradients on the device.
    if (config.tiedEmbeddings && stages > 1) {
      const ir::StatePlacement &grads = strategy.getPlacement(ir::State::Grads);
      bool sharded = false;
      for (unsigned i = 0; i < grads.axes.size() && i < strategy.mesh.axes.size(); ++i)
        sharded |= ir::isDataParallel(strategy.mesh.axes[i].kind) &&
                   grads.axes[i].mode == ir::PlacementMode::Sharded;
      if (sharded || grads.tier == ir::Tier::Host)
        refuse(grads.loc.isValid() ? grads.loc : strategyLoc,
               Twine(sharded ? "grads sharded" : "grads @ host") + " with tied embeddings across " +
                   Twine(stages) + " pipeline stages",
               "placert sums the word embedding's gradient with its copy's on the head's stage "
               "before the step's reductions, over whole gradients on the device; replicate the "
               "grads on the device (the optimizer may stay sharded), or declare the model with "
               "tied_embeddings = false");
    }
  } else if (strategy.activationMode != ir::ActivationMode::Keep) {
    refuse(strategy.activationModeLoc.isValid() ? strategy.activationModeLoc : strategyLoc,
           "activation recomputation of an mlp", "the mlp trainer keeps its activations");
  }
  if (run.fp32Params)
    refuse(getFieldLoc(run, "precision"), "precision = " + ir::spellPrecision(run),
           "placert keeps the parameters in the compute type and their fp32 master copy in the "
           "optimizer state, not fp32 parameters cast on use; leave params = fp32 out");
  if (run.precision == ir::Precision::MixedFP8)
    refuse(getFieldLoc(run, "precision"), "precision = " + ir::spellPrecision(run),
           "the CPU runtime computes in fp32 and has no FP8 or FP4 products; such runs are "
           "analysed, not compiled");
  if (strategy.pipeline) {
    const ir::Pipeline &pipeline = *strategy.pipeline;
    ir::Schedule schedule = pipeline.schedule;
    if (schedule != ir::Schedule::OneFOneB && schedule != ir::Schedule::GPipe &&
        schedule != ir::Schedule::Interleaved)
      refuse(pipeline.loc, "the " + ir::toString(schedule) + " schedule",
             "placert's pipeline executor runs GPipe, 1F1B and interleaved 1F1B; the zero-bubble "
             "and DualPipe schedules are analysed, not compiled");
    // The language refuses the two together, so at most one of these applies.
    if (pipeline.firstStageLayers > 0 || pipeline.lastStageLayers > 0)
      refuse(pipeline.loc, "uneven first and last pipeline stages",
             "placert's pipeline executor splits the layers evenly among the stages");
    if (!pipeline.layout.empty())
      refuse(pipeline.layout.loc, "a pipeline layout",
             "placert's pipeline executor splits the layers evenly among the stages");
    if (pipeline.embeddingLayer || pipeline.lossLayer)
      refuse(pipeline.loc, "the embedding or the loss counted as a pipeline layer",
             "placert's pipeline executor splits the layers evenly among the stages");
    if (pipeline.scatterSends)
      refuse(pipeline.loc, "sends = scatter",
             "placert's pipeline executor sends each stage's activations whole from every "
             "tensor-parallel rank; scattered sends are analysed, not compiled");
  }
  const ir::StatePlacement &activations = strategy.getPlacement(ir::State::Activations);
  if (activations.tier != ir::Tier::Device)
    refuse(activations.tierLoc.isValid() ? activations.tierLoc : strategyLoc, "activations @ host",
           "the step plan lowers no transfers of offloaded activations (only their memory), so the "
           "runtime keeps them on the device");
}

class Emitter {
public:
  Emitter(const plan::StepPlan &plan, StringRef sourceName)
      : plan(plan), run(*plan.run), strategy(*run.strategy), mesh(strategy.mesh), model(*run.model),
        sourceName(sourceName) {}

  Expected<std::string> emit();

private:
  Error checkSupported() const;
  std::string axisGroup(ArrayRef<unsigned> axes) const {
    std::string result = "{";
    for (size_t i = 0; i < axes.size(); ++i)
      result += (Twine(i ? ", " : "") + quoted(mesh.axes[axes[i]].name)).str();
    return result + "}";
  }
  std::string batchAxesWith(ir::State state, std::initializer_list<ir::PlacementMode> modes,
                            bool expert = false) const {
    std::vector<unsigned> axes;
    const ir::StatePlacement &placement =
        expert ? strategy.getExpertPlacement(state) : strategy.getPlacement(state);
    for (unsigned i = 0; i < mesh.axes.size(); ++i)
      if ((expert ? strategy.isExpertDataParallelAxis(mesh.axes[i].kind)
                  : ir::isDataParallel(mesh.axes[i].kind)) &&
          i < placement.axes.size() && llvm::is_contained(modes, placement.axes[i].mode))
        axes.push_back(i);
    return axisGroup(axes);
  }
  Expected<std::string> call(const Op &op) const;
  Error emitPass(unsigned stage, StringRef pass, ArrayRef<Op> ops, bool perMicrobatch,
                 StringRef suffix = "");
  bool isInterleaved() const { return plan.chunks > 1 && plan.stages.size() > 1; }
  /// The stage-local model chunk of a unit under an interleaved schedule (chunk g of the model
  /// runs on stage g mod p as that stage's chunk g / p).
  unsigned localChunk(int unit) const {
    int64_t layers = model.getNumLayers(), p = static_cast<int64_t>(plan.stages.size());
    int64_t chunks = p * plan.chunks, perChunk = std::max<int64_t>(1, layers / chunks);
    int64_t layer = plan.units[unit].layer;
    int64_t global = layer < 0 ? 0 : layer >= layers ? chunks - 1 : layer / perChunk;
    return static_cast<unsigned>(global / p);
  }
  void emitMain();

  const plan::StepPlan &plan;
  const ir::Run &run;
  const ir::Strategy &strategy;
  const ir::Mesh &mesh;
  const ir::Model &model;
  std::string sourceName;
  IndentedStream os;
};

Error Emitter::checkSupported() const {
  std::string messages;
  forEachUnsupported(run, plan.stages.size(), [&](SMLoc, const Twine &part, const Twine &why) {
    if (messages.empty())
      messages =
          ("run '" + run.name + "': " + part + " is not supported by the CPU runtime: " + why)
              .str();
  });
  if (messages.empty())
    return Error::success();
  return createStringError(inconvertibleErrorCode(), "%s", messages.c_str());
}

Expected<std::string> Emitter::call(const Op &op) const {
  std::string unit = op.unit >= 0 ? unitIdentifier(plan.units[op.unit].name) : "";
  std::string axes = axisGroup(op.axes);
  const char *dtype = dtypeName(op.dtype), *phase = phaseName(op.phase);
  switch (op.kind) {
  case OpKind::Recv:
    return fmt::format("trainer.recvActivations({}, mb, /*peerStage=*/{}, /*elements=*/{}, {}, {})",
                       unit, op.peerStage, op.elements, dtype, phase);
  case OpKind::Send:
    return fmt::format("trainer.sendActivations({}, mb, /*peerStage=*/{}, /*elements=*/{}, {}, {})",
                       unit, op.peerStage, op.elements, dtype, phase);
  case OpKind::Compute:
    if (op.compute == plan::ComputeKind::Forward)
      return fmt::format("trainer.forward({}, mb)", unit);
    if (op.compute == plan::ComputeKind::Backward)
      return fmt::format("trainer.backward({}, mb)", unit);
    break;
  case OpKind::Free:
    return fmt::format("trainer.freeGathered({}, mb, /*elements=*/{}, {})", unit, op.elements,
                       phase);
  case OpKind::AllGather:
    if (op.state == ir::State::Params && op.phase != plan::Phase::Step)
      return fmt::format("trainer.gatherParams({}, mb, {}, /*elements=*/{}, {}, {})", unit, axes,
                         op.elements, dtype, phase);
    if (op.state == ir::State::Params)
      return fmt::format("trainer.allGatherParams({}, {}, /*elements=*/{}, {})", unit, axes,
                         op.elements, dtype);
    break;
  case OpKind::AllReduce:
    if (op.state == ir::State::Activations)
      return fmt::format("trainer.tensorAllReduce({}, mb, {}, /*elements=*/{}, {}, {})", unit, axes,
                         op.elements, dtype, phase);
    if (op.state == ir::State::Grads && op.phase == plan::Phase::Step && op.peerStage >= 0)
      return fmt::format(
          "trainer.allReduceEmbeddingGrads({}, {}, /*peerStage=*/{}, /*elements=*/{}, {})", unit,
          axes, op.peerStage, op.elements, dtype);
    if (op.state == ir::State::Grads && op.phase == plan::Phase::Step)
      return fmt::format("trainer.allReduceGrads({}, {}, /*elements=*/{}, {})", unit, axes,
                         op.elements, dtype);
    if (op.state == ir::State::Grads && model.kind == ir::ModelKind::Transformer)
      return fmt::format("trainer.allReduceReplicatedGrads({}, mb, {}, /*elements=*/{}, {})", unit,
                         axes, op.elements, dtype);
    break;
  case OpKind::ReduceScatter:
    if (op.state == ir::State::Grads)
      return fmt::format("trainer.reduceScatterGrads({}, {}, /*elements=*/{}, {}, {})", unit, axes,
                         op.elements, dtype, phase);
    break;
  case OpKind::DeviceToHost:
    if (op.state == ir::State::Grads)
      return fmt::format("trainer.gradsToHost({}, /*elements=*/{}, {}, {})", unit, op.elements,
                         dtype, phase);
    if (op.state == ir::State::Params && op.phase == plan::Phase::Step)
      return fmt::format("trainer.paramsToHost({}, /*elements=*/{}, {})", unit, op.elements, dtype);
    break;
  case OpKind::HostToDevice:
    if (op.state == ir::State::Params && op.phase == plan::Phase::Step)
      return fmt::format("trainer.paramsToDevice({}, /*elements=*/{}, {})", unit, op.elements,
                         dtype);
    if (op.state == ir::State::Params)
      return fmt::format("trainer.bringParams({}, mb, /*elements=*/{}, {}, {})", unit, op.elements,
                         dtype, phase);
    break;
  case OpKind::OptimizerUpdate:
    return fmt::format("trainer.optimizerUpdate({}, /*elements=*/{})", unit, op.elements);
  case OpKind::AllToAll: // Inside a unit's computation (emitted as a planned collective).
  case OpKind::RingStep:
    break;
  }
  return createStringError(inconvertibleErrorCode(),
                           "run '%s': the plan op '%s' (%s) is not supported by the CPU runtime "
                           "yet",
                           run.name.c_str(), plan::toString(op.kind).str().c_str(),
                           op.reason.c_str());
}

/// A collective of the plan that runs inside a unit's computation: tensor-, sequence- and
/// context-parallel traffic of activations (and the vocabulary-parallel cross-entropy's
/// exchange).
bool isUnitCollective(const Op &op, int unit) {
  return op.unit == unit && op.state == ir::State::Activations &&
         (op.kind == OpKind::AllReduce || op.kind == OpKind::AllGather ||
          op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllToAll ||
          op.kind == OpKind::RingStep);
}

const char *collectiveName(OpKind kind) {
  switch (kind) {
  case OpKind::AllGather:
    return "placert::Collective::AllGather";
  case OpKind::ReduceScatter:
    return "placert::Collective::ReduceScatter";
  case OpKind::AllToAll:
    return "placert::Collective::AllToAll";
  case OpKind::RingStep:
    return "placert::Collective::RingStep";
  default:
    return "placert::Collective::AllReduce";
  }
}

Error Emitter::emitPass(unsigned stage, StringRef pass, ArrayRef<Op> ops, bool perMicrobatch,
                        StringRef suffix) {
  bool transformer = model.kind == ir::ModelKind::Transformer;
  std::string trainer = transformer ? "placert::GptTrainer" : "placert::MlpTrainer";
  std::string signature = perMicrobatch ? fmt::format("Status {}Stage{}{}({} &trainer, int mb)",
                                                      pass.str(), stage, suffix.str(), trainer)
                                        : fmt::format("Status {}Stage{}{}({} &trainer)", pass.str(),
                                                      stage, suffix.str(), trainer);
  IndentedStream::Scope function(os, signature);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op &op = ops[i];
    if (transformer && op.kind == OpKind::Compute) {
      // The unit's computation with the collectives the plan lists after it, which the trainer
      // runs in this order when its math reaches them.
      const char *method = op.compute == plan::ComputeKind::Forward    ? "forward"
                           : op.compute == plan::ComputeKind::Backward ? "backward"
                                                                       : "recompute";
      os.comment(op.reason);
      size_t end = i + 1;
      while (end < ops.size() && isUnitCollective(ops[end], op.unit))
        ++end;
      std::string unit = unitIdentifier(plan.units[op.unit].name);
      if (end == i + 1) {
        os.line(fmt::format("PLACERT_TRY(trainer.{}({}, mb, {{}}));", method, unit));
        continue;
      }
      os.line(fmt::format("PLACERT_TRY(trainer.{}({}, mb, {{", method, unit));
      // A repeated op (a ring's steps, Op::repeat) is one entry per call.
      for (size_t k = i + 1; k < end; ++k) {
        const Op &inner = ops[k];
        for (int64_t call = 0; call < inner.repeat; ++call) {
          os.line("    // " + inner.reason);
          os.line(fmt::format("    {{{}, {}, /*elements=*/{}, {}}},", collectiveName(inner.kind),
                              axisGroup(inner.axes), inner.elements, dtypeName(inner.dtype)));
        }
      }
      os.line("}));");
      i = end - 1;
      continue;
    }
    Expected<std::string> text = call(op);
    if (!text)
      return text.takeError();
    os.comment(op.reason);
    os.line("PLACERT_TRY(" + *text + ");");
  }
  os.line("return Status::success();");
  return Error::success();
}

void Emitter::emitMain() {
  IndentedStream::Scope function(os, "int main(int argc, char **argv)");
  os.line("placert::Options options;");
  os.line("bool help = false;");
  os.line("Status status = placert::parseOptions(argc, argv, options, help);");
  {
    IndentedStream::Scope ifBlock(os, "if (!status.isOk())");
    os.line("std::fprintf(stderr, \"" + run.name +
            ": error: %s\\n\", status.getMessage().c_str());");
    os.line("return 1;");
  }
  os.line("if (help)");
  os.line("  return 0;");
  os.line();
  os.comment(fmt::format("The mesh of strategy `{}`, outermost axis first: a rank is the row-major",
                         strategy.name));
  os.comment("index of its coordinates.");
  {
    IndentedStream::Scope meshBlock(os, "std::vector<placert::Axis> mesh =", "};");
    for (const ir::Axis &axis : mesh.axes) {
      const char *kind = axis.kind == ir::AxisKind::Batch      ? "Batch"
                         : axis.kind == ir::AxisKind::Tensor   ? "Tensor"
                         : axis.kind == ir::AxisKind::Sequence ? "Sequence"
                         : axis.kind == ir::AxisKind::Expert   ? "Expert"
                                                               : "Layers";
      os.line(fmt::format("{{\"{}\", placert::AxisKind::{}, {}}},", axis.name, kind, axis.size));
    }
  }
  os.line("std::unique_ptr<placert::Runtime> runtime;");
  os.line("status = placert::Runtime::create(&argc, &argv, mesh, options, runtime);");
  {
    IndentedStream::Scope ifBlock(os, "if (!status.isOk())");
    os.line("std::fprintf(stderr, \"placert: error: %s\\n\", status.getMessage().c_str());");
    os.line("return 1;");
  }
  os.line();
  if (model.kind == ir::ModelKind::Transformer) {
    const ir::TransformerConfig &gpt = model.transformer;
    int64_t ffn = gpt.ffn > 0 ? gpt.ffn : 4 * gpt.hidden;
    os.comment(
        fmt::format("model {} : transformer {{ layers = {}; hidden = {}; heads = {}; "
                    "kv_heads = {}; seq = {}; vocab = {}; ffn = {}; tied_embeddings = {}; }}",
                    model.name, gpt.layers, gpt.hidden, gpt.heads, gpt.getKvHeads(), gpt.seq,
                    gpt.vocab, ffn, gpt.tiedEmbeddings ? "true" : "false"));
    auto flag = [](bool value) { return value ? "true" : "false"; };
    os.comment(fmt::format("mlp = {}; norm = {}; bias = {}; positions = {};",
                           ir::toString(gpt.mlp).str(), ir::toString(gpt.norm).str(),
                           flag(gpt.bias), ir::toString(gpt.positions).str()));
    os.line(
        fmt::format("placert::GptShape shape{{\"{}\", {}, {}, {}, {}, {}, {}, {}, "
                    "/*swiglu=*/{}, /*rmsNorm=*/{}, /*bias=*/{}, /*rope=*/{}, /*kvHeads=*/{}}};",
                    model.name, gpt.layers, gpt.hidden, gpt.heads, gpt.seq, gpt.vocab, ffn,
                    flag(gpt.tiedEmbeddings), flag(gpt.mlp == ir::MlpActivation::Swiglu),
                    flag(gpt.norm == ir::NormKind::RmsNorm), flag(gpt.bias),
                    flag(gpt.positions == ir::PositionKind::Rope), gpt.getKvHeads()));
    const ir::MoeConfig &moe = gpt.moe;
    if (moe.isEnabled()) {
      // The widths as the IR resolves them: expert_ffn defaults to ffn, shared_expert_ffn to
      // expert_ffn.
      int64_t expertFfn = moe.expertFfn > 0 ? moe.expertFfn : ffn;
      int64_t sharedFfn = moe.sharedExpertFfn > 0 ? moe.sharedExpertFfn : expertFfn;
      os.comment(fmt::format(
          "experts = {}; top_k = {}; expert_ffn = {}; shared_experts = {}; shared_expert_ffn = "
          "{}; moe_every = {}; dense_layers = {}; router = {}; capacity_factor = {}; aux_loss = "
          "{};",
          moe.experts, moe.topK, expertFfn, moe.sharedExperts, sharedFfn, moe.every,
          moe.denseLayers, ir::toString(moe.router).str(),
          moe.capacityFactor ? fmt::format("{}", *moe.capacityFactor) : "none (dropless)",
          moe.auxLoss));
      os.line(fmt::format("shape.moe.experts = {};", moe.experts));
      os.line(fmt::format("shape.moe.topK = {};", moe.topK));
      os.line(fmt::format("shape.moe.expertFfn = {};", expertFfn));
      os.line(fmt::format("shape.moe.sharedExperts = {};", moe.sharedExperts));
      os.line(fmt::format("shape.moe.sharedExpertFfn = {};", sharedFfn));
      os.line(fmt::format("shape.moe.moeEvery = {};", moe.every));
      os.line(fmt::format("shape.moe.denseLayers = {};", moe.denseLayers));
      os.line(fmt::format("shape.moe.router = placert::MoeRouter::{};",
                          moe.router == ir::RouterKind::Softmax ? "Softmax" : "Sigmoid"));
      os.line(fmt::format("shape.moe.capacityFactor = {}; // 0: dropless",
                          moe.capacityFactor ? *moe.capacityFactor : 0.0));
      os.line(fmt::format("shape.moe.auxLoss = {};", moe.auxLoss));
    }
  } else {
    const ir::MlpConfig &mlp = model.mlp;
    os.comment(fmt::format("model {} : mlp {{ layers = {}; width = {}; input = {}; output = {}; }}",
                           model.name, mlp.layers, mlp.width, mlp.input, mlp.output));
    os.line(fmt::format("placert::MlpShape shape{{\"{}\", {}, {}, {}, {}}};", model.name,
                        mlp.layers, mlp.width, mlp.input, mlp.output));
  }
  os.comment(fmt::format("run {}: micro_batch = {}; global_batch = {}; precision = {}; "
                         "optimizer = {};",
                         run.name, run.microBatch, run.globalBatch, ir::spellPrecision(run),
                         ir::toString(run.optimizer).str()));
  os.line("placert::TrainingSpec spec;");
  os.line(fmt::format("spec.run = \"{}\";", run.name));
  os.line(fmt::format("spec.strategy = \"{}\";", strategy.name));
  os.line(fmt::format("spec.placecVersion = \"{}\";", PLACEC_VERSION));
  os.line(fmt::format("spec.globalBatch = {};", run.globalBatch));
  os.line(fmt::format("spec.microBatch = {};", run.microBatch));
  os.line(fmt::format("spec.microbatches = {}; // per step per batch replica", plan.microbatches));
  os.line(fmt::format("spec.schedule = placert::Schedule::{};", plan.schedule == ir::Schedule::GPipe
                                                                    ? "GPipe"
                                                                : isInterleaved() ? "Interleaved"
                                                                                  : "OneFOneB"));
  if (isInterleaved() && plan.group > 0)
    os.line(fmt::format("spec.microbatchGroup = {}; // the micro-batches each chunk runs in a row",
                        plan.group));
  const char *optimizer = run.optimizer == ir::OptimizerKind::Adam  ? "Adam"
                          : run.optimizer == ir::OptimizerKind::Sgd ? "Sgd"
                                                                    : "SgdMomentum";
  os.line(fmt::format("spec.optimizer = placert::OptimizerKind::{};", optimizer));
  os.line(fmt::format("spec.paramType = placert::{};", dtypeName(plan.paramType)));
  os.line(fmt::format("spec.gradType = placert::{};", dtypeName(plan.gradType)));
  os.line(fmt::format("spec.activationType = placert::{};", dtypeName(plan.activationType)));
  os.line(fmt::format("spec.optimizerBytesPerParam = {};", ir::getStateBytes(run).optimizer));
  os.line();
  // Tiers as the memory analysis places them: gradients follow an offloaded optimizer to the
  // host when they are sharded and their tier is not written.
  const ir::StatePlacement &params = strategy.getPlacement(ir::State::Params);
  const ir::StatePlacement &grads = strategy.getPlacement(ir::State::Grads);
  const ir::StatePlacement &optimizerPlacement = strategy.getPlacement(ir::State::Optimizer);
  bool optimizerOnHost = optimizerPlacement.tier != ir::Tier::Device;
  std::string gradShard = batchAxesWith(ir::State::Grads, {ir::PlacementMode::Sharded});
  bool gradsOnHost = grads.tier != ir::Tier::Device ||
                     (optimizerOnHost && !grads.tierExplicit && gradShard != "{}");
  os.comment("Where the states live over the batch axes, and in which memory tier.");
  os.line("placert::StatePlacement placement;");
  os.line(fmt::format("placement.paramShard = {};",
                      batchAxesWith(ir::State::Params, {ir::PlacementMode::Sharded,
                                                        ir::PlacementMode::ShardedWithGather})));
  os.line(fmt::format("placement.gradShard = {};", gradShard));
  os.line(fmt::format("placement.optimizerShard = {};",
                      batchAxesWith(ir::State::Optimizer, {ir::PlacementMode::Sharded})));
  auto tier = [](bool host) { return host ? "placert::Tier::Host" : "placert::Tier::Device"; };
  os.line(fmt::format("placement.paramsTier = {};", tier(params.tier != ir::Tier::Device)));
  os.line(fmt::format("placement.gradsTier = {};", tier(gradsOnHost)));
  os.line(fmt::format("placement.optimizerTier = {};", tier(optimizerOnHost)));
  os.line();
  if (model.kind == ir::ModelKind::Transformer) {
    const char *recompute = strategy.activationMode == ir::ActivationMode::RecomputeFull ? "Full"
                            : strategy.activationMode == ir::ActivationMode::RecomputeSelective
                                ? "Selective"
                                : "None";
    os.comment(fmt::format("activations = {}{}", ir::toString(strategy.activationMode).str(),
                           strategy.sequenceParallel ? ", shard (sequence parallelism)" : ""));
    std::vector<unsigned> sequenceAxes;
    for (unsigned i = 0; i < mesh.axes.size(); ++i)
      if (mesh.axes[i].kind == ir::AxisKind::Sequence)
        sequenceAxes.push_back(i);
    std::string trainerArgs =
        fmt::format("*runtime, shape, spec, placement, placert::Recompute::{}, "
                    "/*sequenceParallel=*/{}",
                    recompute, strategy.sequenceParallel ? "true" : "false");
    if (!sequenceAxes.empty()) {
      // Context parallelism: the sequence axes split every sample's tokens.
      os.comment(fmt::format("context = {} over the sequence axes",
                             ir::toString(strategy.contextMethod).str()));
      os.line(
          fmt::format("placert::ContextParallelism context{{{}, {}, "
                      "placert::ContextMethod::{}}};",
                      axisGroup(sequenceAxes), mesh.getDegree(ir::AxisKind::Sequence),
                      strategy.contextMethod == ir::ContextMethod::AllToAll ? "AllToAll" : "Ring"));
      trainerArgs += ", context";
    }
    if (model.isMoe()) {
      // Expert parallelism: the expert axes split the routed experts, whose states live over the
      // expert-data-parallel axes.
      std::vector<unsigned> expertAxes;
      for (unsigned i = 0; i < mesh.axes.size(); ++i)
        if (mesh.axes[i].kind == ir::AxisKind::Expert)
          expertAxes.push_back(i);
      const ir::StatePlacement &expertParams = strategy.getExpertPlacement(ir::State::Params);
      const ir::StatePlacement &expertGrads = strategy.getExpertPlacement(ir::State::Grads);
      const ir::StatePlacement &expertOptimizer = strategy.getExpertPlacement(ir::State::Optimizer);
      bool expertOptimizerOnHost = expertOptimizer.tier != ir::Tier::Device;
      std::string expertGradShard =
          batchAxesWith(ir::State::Grads, {ir::PlacementMode::Sharded}, /*expert=*/true);
      bool expertGradsOnHost =
          expertGrads.tier != ir::Tier::Device ||
          (expertOptimizerOnHost && !expertGrads.tierExplicit && expertGradShard != "{}");
      os.comment("The routed experts' states over the expert-data-parallel axes.");
      os.line("placert::StatePlacement expertPlacement;");
      os.line(fmt::format(
          "expertPlacement.paramShard = {};",
          batchAxesWith(ir::State::Params,
                        {ir::PlacementMode::Sharded, ir::PlacementMode::ShardedWithGather},
                        /*expert=*/true)));
      os.line(fmt::format("expertPlacement.gradShard = {};", expertGradShard));
      os.line(fmt::format(
          "expertPlacement.optimizerShard = {};",
          batchAxesWith(ir::State::Optimizer, {ir::PlacementMode::Sharded}, /*expert=*/true)));
      os.line(fmt::format("expertPlacement.paramsTier = {};",
                          tier(expertParams.tier != ir::Tier::Device)));
      os.line(fmt::format("expertPlacement.gradsTier = {};", tier(expertGradsOnHost)));
      os.line(fmt::format("expertPlacement.optimizerTier = {};", tier(expertOptimizerOnHost)));
      std::string folds;
      if (strategy.foldsExpertTensor() || strategy.foldsExpertContext())
        folds = fmt::format(", /*foldTensor=*/{}, /*foldContext=*/{}", strategy.foldsExpertTensor(),
                            strategy.foldsExpertContext());
      os.line(fmt::format("placert::ExpertParallelism expert{{{}, {}, expertPlacement{}}};",
                          axisGroup(expertAxes), mesh.getDegree(ir::AxisKind::Expert), folds));
      if (sequenceAxes.empty())
        trainerArgs += ", placert::ContextParallelism{}";
      trainerArgs += ", expert";
    }
    os.line(fmt::format("placert::GptTrainer trainer({});", trainerArgs));
    if (plan.regather) {
      os.comment("sp_inputs = regather: QKV, the MLP's input products and the output layer keep");
      os.comment("their input's sequence shard and gather it again in the backward.");
      os.line("trainer.setRegatherInputs(true);");
    }
  } else {
    os.line("placert::MlpTrainer trainer(*runtime, shape, spec, placement);");
  }
  os.comment("The units in model order: name, layer, stage, parameters per device after the");
  os.comment("tensor-parallel split.");
  for (const plan::Unit &unit : plan.units)
    os.line(fmt::format("trainer.addUnit({{\"{}\", {}, /*stage=*/{}, /*params=*/{}{}}});",
                        unit.name, unit.layer, unit.stage, unit.params,
                        unit.expert ? ", /*experts=*/true" : ""));
  os.line("status = trainer.setup();");
  os.line("if (!status.isOk())");
  os.line("  runtime->abort(status);");
  os.line();
  os.comment("What each pipeline stage runs; the runtime drives the schedule, the steps, --check");
  os.comment("and --metrics.");
  {
    IndentedStream::Scope stages(os, "std::vector<placert::StageProgram> stages =", "};");
    for (const plan::StagePlan &stage : plan.stages) {
      if (!isInterleaved()) {
        os.line(fmt::format("{{[&](int mb) {{ return forwardStage{0}(trainer, mb); }},\n{1}  "
                            "[&](int mb) {{ return backwardStage{0}(trainer, mb); }},\n{1}  "
                            "[&] {{ return stepStage{0}(trainer); }}}},",
                            stage.stage, std::string(4, ' ')));
        continue;
      }
      std::string forward, backward;
      for (unsigned chunk = 0; chunk < plan.chunks; ++chunk) {
        forward += fmt::format("{}[&](int mb) {{ return forwardStage{}Chunk{}(trainer, mb); }}",
                               chunk ? ", " : "", stage.stage, chunk);
        backward += fmt::format("{}[&](int mb) {{ return backwardStage{}Chunk{}(trainer, mb); }}",
                                chunk ? ", " : "", stage.stage, chunk);
      }
      os.line(fmt::format("{{nullptr, nullptr, [&] {{ return stepStage{0}(trainer); }},\n{1}  "
                          "{{{2}}},\n{1}  {{{3}}}}},",
                          stage.stage, std::string(4, ' '), forward, backward));
    }
  }
  os.line("return trainer.train(stages);");
}

Expected<std::string> Emitter::emit() {
  if (Error error = checkSupported())
    return error;
  std::string file = sys::path::filename(sourceName).str();
  os.comment(fmt::format("Generated by placec {} from {}: run `{}` (model `{}`, strategy `{}`, "
                         "{} ranks).",
                         PLACEC_VERSION, file, run.name, model.name, strategy.name,
                         mesh.getNumDevices()));
  os.comment("Do not edit: regenerate with `placec compile`. Each runtime call below is one op of");
  os.comment("the run's step plan (`placec --emit=plan`), commented with the plan's reason.");
  os.comment("");
  os.comment("Build: cmake -S . -B build && cmake --build build (CMakeLists.txt says where it "
             "finds placert)");
  os.comment(fmt::format("Run:   mpirun -np {} build/{} --steps 3 --check", mesh.getNumDevices(),
                         run.name));
  os.line("#include <placert/placert.h>");
  os.line();
  os.line("#include <cstdio>");
  os.line("#include <memory>");
  os.line("#include <vector>");
  os.line();
  os.line("using placert::DType;");
  os.line("using placert::Phase;");
  os.line("using placert::Status;");
  os.line();
  {
    // Not indented, like the LLVM style.
    os.line("namespace {");
    os.line();
    os.comment("The units of the plan, in model order.");
    std::string units;
    for (const plan::Unit &unit : plan.units)
      units += (units.empty() ? "" : ", ") + unitIdentifier(unit.name);
    os.line("enum Unit : int { " + units + " };");
    for (const plan::StagePlan &stage : plan.stages) {
      std::string names;
      for (unsigned unit : stage.units)
        names += " " + plan.units[unit].name;
      if (isInterleaved()) {
        // Interleaved: each of the stage's model chunks is a function of its own, which the
        // runtime's schedule calls.
        for (unsigned chunk = 0; chunk < plan.chunks; ++chunk) {
          std::vector<Op> forward, backward;
          for (const Op &op : stage.forward)
            if (op.unit >= 0 && localChunk(op.unit) == chunk)
              forward.push_back(op);
          for (const Op &op : stage.backward)
            if (op.unit >= 0 && localChunk(op.unit) == chunk)
              backward.push_back(op);
          std::string suffix = "Chunk" + std::to_string(chunk);
          os.line();
          os.comment(fmt::format("Stage {}:{}. Forward of chunk {} for one micro-batch.",
                                 stage.stage, names, chunk));
          if (Error error = emitPass(stage.stage, "forward", forward, true, suffix))
            return error;
          os.line();
          os.comment(fmt::format("Stage {}: backward of chunk {} for one micro-batch.", stage.stage,
                                 chunk));
          if (Error error = emitPass(stage.stage, "backward", backward, true, suffix))
            return error;
        }
      } else {
        os.line();
        os.comment(fmt::format("Stage {}:{}. Forward of one micro-batch.", stage.stage, names));
        if (Error error = emitPass(stage.stage, "forward", stage.forward, true))
          return error;
        os.line();
        os.comment(
            fmt::format("Stage {}: backward of one micro-batch, units in reverse.", stage.stage));
        if (Error error = emitPass(stage.stage, "backward", stage.backward, true))
          return error;
      }
      os.line();
      os.comment(fmt::format("Stage {}: once per step, after the last micro-batch's backward.",
                             stage.stage));
      if (Error error = emitPass(stage.stage, "step", stage.step, false))
        return error;
    }
    os.line();
    os.line("} // namespace");
  }
  os.line();
  emitMain();
  return os.str();
}

} // namespace

bool checkCpuSupported(const ir::Run &run, DiagnosticEngine &diags) {
  bool ok = true;
  forEachUnsupported(
      run, plan::lowerRun(run)->stages.size(), [&](SMLoc loc, const Twine &part, const Twine &why) {
        diags.error(loc,
                    "cannot compile run '" + run.name + "' for the CPU runtime: " + part + ": " +
                        why + " (see docs/running.md)",
                    "cpu");
        ok = false;
      });
  return ok;
}

Expected<std::string> emitMainCpp(const plan::StepPlan &plan, StringRef sourceName, Target target) {
  (void)target;
  return Emitter(plan, sourceName).emit();
}

std::string emitFindPackage(StringRef package, StringRef hint) {
  std::string text = fmt::format(
      "# {0} comes from -D{0}_DIR=DIR or CMAKE_PREFIX_PATH when given, else from\n# {1}the "
      "system prefixes (/usr/local, /usr).\n# DIR: {0}'s build tree, or "
      "<prefix>/lib/cmake/{0}.\nfind_package({0} {2}.{3} CONFIG REQUIRED",
      package, hint.empty() ? "" : "next to the placec that wrote this file (HINTS), else from ",
      PLACEC_VERSION_MAJOR, PLACEC_VERSION_MINOR);
  if (!hint.empty()) {
    // A CMake quoted argument: backslashes, quotes and `$` escaped.
    text += "\n  HINTS \"";
    for (char c : hint) {
      if (c == '\\' || c == '"' || c == '$')
        text += '\\';
      text += c;
    }
    text += '"';
  }
  text += fmt::format(")\nmessage(STATUS \"Found {0} ${{{0}_VERSION}}: ${{{0}_DIR}}\")\n", package);
  return text;
}

std::string emitCMakeLists(const plan::StepPlan &plan, StringRef sourceName,
                           StringRef placertHint) {
  const std::string &name = plan.run->name;
  return fmt::format(R"(# Generated by placec {0} from {1}: run `{2}`. Do not edit.
# Build: cmake -S . -B build && cmake --build build
cmake_minimum_required(VERSION 3.20)
project({2} LANGUAGES CXX)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
{3}add_executable({2} main.cpp)
target_compile_features({2} PRIVATE cxx_std_17)
target_link_libraries({2} PRIVATE placert::placert)
)",
                     PLACEC_VERSION, sys::path::filename(sourceName).str(), name,
                     emitFindPackage("placert", placertHint));
}

Error emitCppProject(const plan::StepPlan &plan, StringRef sourceName, StringRef directory,
                     StringRef placertHint, Target target) {
  Expected<std::string> main = emitMainCpp(plan, sourceName, target);
  if (!main)
    return main.takeError();
  if (std::error_code ec = sys::fs::create_directories(directory))
    return createStringError(ec, "cannot create '%s': %s", directory.str().c_str(),
                             ec.message().c_str());
  auto write = [&](StringRef name, StringRef text) -> Error {
    SmallString<256> path(directory);
    sys::path::append(path, name);
    std::error_code ec;
    raw_fd_ostream out(path, ec);
    if (ec)
      return createStringError(ec, "cannot write '%s': %s", path.c_str(), ec.message().c_str());
    out << text;
    return Error::success();
  };
  if (Error error = write("main.cpp", *main))
    return error;
  return write("CMakeLists.txt", emitCMakeLists(plan, sourceName, placertHint));
}

} // namespace placec::codegen
