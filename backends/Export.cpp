// Exports a verified run as a DeepSpeed JSON config, Megatron-LM flags or a torchtitan TOML job
// config, refusing (rule `export`) every part of the placement that the target cannot express.
#include "placec/backends/Export.h"

#include "ImportSupport.h"
#include "placec/passes/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

using namespace llvm;

namespace placec::bridge {

std::optional<Target> parseTarget(StringRef name) {
  return StringSwitch<std::optional<Target>>(name)
      .Case("deepspeed", Target::DeepSpeed)
      .Case("megatron", Target::Megatron)
      .Case("torchtitan", Target::Torchtitan)
      .Default(std::nullopt);
}

StringRef toString(Target target) {
  switch (target) {
  case Target::DeepSpeed:
    return "deepspeed";
  case Target::Megatron:
    return "megatron";
  case Target::Torchtitan:
    return "torchtitan";
  }
  return "";
}

namespace {

/// The mesh of a run's strategy seen by the exporters: axes of size 1 are left out, since they
/// change nothing in any target.
struct MeshView {
  std::vector<unsigned> batchAxes; ///< Batch axes, outermost first.
  /// Batch axes including those of size 1, which still say which ZeRO stage a single-rank run
  /// means (`zero2(dp = 1) * offload_optimizer` is ZeRO-Offload on one GPU).
  std::vector<unsigned> allBatchAxes;
  std::vector<unsigned> tensorAxes;
  std::vector<unsigned> layersAxes;
  std::vector<unsigned> order; ///< Every axis of size > 1, outermost first.
  std::vector<unsigned> contextAxes;
  std::vector<unsigned> expertAxes;
  int64_t batchDegree = 1, tensorDegree = 1, layersDegree = 1, contextDegree = 1, expertDegree = 1;
};

MeshView viewMesh(const ir::Mesh &mesh) {
  MeshView view;
  for (unsigned index = 0; index < mesh.axes.size(); ++index) {
    const ir::Axis &axis = mesh.axes[index];
    if (axis.kind == ir::AxisKind::Batch)
      view.allBatchAxes.push_back(index);
    if (axis.size <= 1)
      continue;
    view.order.push_back(index);
    switch (axis.kind) {
    case ir::AxisKind::Batch:
      view.batchAxes.push_back(index);
      view.batchDegree *= axis.size;
      break;
    case ir::AxisKind::Tensor:
      view.tensorAxes.push_back(index);
      view.tensorDegree *= axis.size;
      break;
    case ir::AxisKind::Layers:
      view.layersAxes.push_back(index);
      view.layersDegree *= axis.size;
      break;
    case ir::AxisKind::Sequence:
      view.contextAxes.push_back(index);
      view.contextDegree *= axis.size;
      break;
    case ir::AxisKind::Expert:
      view.expertAxes.push_back(index);
      view.expertDegree *= axis.size;
      break;
    }
  }
  return view;
}

/// The axes of `among` on which a state has `mode`.
std::vector<unsigned> axesWithMode(ArrayRef<unsigned> among, const ir::StatePlacement &placement,
                                   ir::PlacementMode mode) {
  std::vector<unsigned> axes;
  for (unsigned index : among)
    if (index < placement.axes.size() && placement.axes[index].mode == mode)
      axes.push_back(index);
  return axes;
}

/// The batch axes on which a state has `mode` (with `all`, those of size 1 too).
std::vector<unsigned> axesWithMode(const MeshView &view, const ir::StatePlacement &placement,
                                   ir::PlacementMode mode, bool all = false) {
  return axesWithMode(all ? view.allBatchAxes : view.batchAxes, placement, mode);
}

/// The data-parallel axes of a target whose data-parallel group spans the context-parallel
/// ranks too (Megatron-LM's data-parallel group with context parallelism, DeepSpeed's
/// sequence-data-parallel group): the batch axes, then the sequence axes.
std::vector<unsigned> dataAndContextAxes(const MeshView &view) {
  std::vector<unsigned> axes = view.batchAxes;
  axes.insert(axes.end(), view.contextAxes.begin(), view.contextAxes.end());
  return axes;
}

/// True when `axes` are the innermost batch axes (a suffix of the batch axes, in rank order).
bool isInnerSuffix(ArrayRef<unsigned> batchAxes, ArrayRef<unsigned> axes) {
  if (axes.size() > batchAxes.size())
    return false;
  return batchAxes.take_back(axes.size()) == axes;
}

int64_t productOf(const ir::Mesh &mesh, ArrayRef<unsigned> axes) {
  int64_t product = 1;
  for (unsigned index : axes)
    product *= mesh.axes[index].size;
  return product;
}

std::string axisList(const ir::Mesh &mesh, ArrayRef<unsigned> axes) {
  std::string list;
  for (unsigned index : axes) {
    if (!list.empty())
      list += ", ";
    list += "'" + mesh.axes[index].name + "'";
  }
  return list.empty() ? "no axis" : list;
}

StringRef tierWord(ir::Tier tier) { return tier == ir::Tier::Nvme ? "nvme" : "cpu"; }

/// One export: the run, its strategy seen through MeshView, and the refusals reported so far.
class Exporter {
public:
  Exporter(const ir::Run &run, Target target, DiagnosticEngine &diags)
      : run(run), strategy(*run.strategy), mesh(strategy.mesh), view(viewMesh(strategy.mesh)),
        target(target), diags(diags) {
    auto it = run.fieldLocs.find("strategy");
    loc = it != run.fieldLocs.end() ? it->second : run.loc;
  }

  /// When set, refusals are collected here instead of reported (getExportRefusals).
  std::vector<std::string> *refusals = nullptr;

  bool exportTo(raw_ostream &os) {
    std::string text;
    raw_string_ostream out(text);
    if (view.contextAxes.size() > 1)
      refuse("several sequence axes " + axisList(mesh, view.contextAxes) + ": " + toString(target) +
             " has one context-parallel group");
    if (view.expertAxes.size() > 1)
      refuse("several expert axes " + axisList(mesh, view.expertAxes) + ": " + toString(target) +
             " has one expert-parallel group");
    StringRef framework = target == Target::Megatron    ? "Megatron-LM"
                          : target == Target::DeepSpeed ? "DeepSpeed"
                                                        : "torchtitan";
    if (run.crossEntropy == ir::CrossEntropyKind::Chunked)
      refuse("cross_entropy = chunked: " + framework +
             " computes the loss over the whole micro-batch's logits (write cross_entropy = " +
             (target == Target::Torchtitan ? "unfused" : "fused") + ")");
    if (run.trainMetrics > 0)
      refuse("train_metrics = " + Twine(run.trainMetrics) + ": " + framework +
             " computes the loss and no other metric from the logits (leave train_metrics out)");
    // Megatron-Core and torchtitan call the attention kernel on the padded batch (Megatron-Core's
    // packed sequences come packed from the data loader: nothing gathers them per layer).
    if (target != Target::DeepSpeed && run.model->kind == ir::ModelKind::Transformer &&
        run.model->transformer.unpad)
      refuse(Twine("unpad = true: ") +
             (target == Target::Megatron ? "Megatron-Core" : "torchtitan") +
             " calls the attention kernel on the padded Q, K and V (leave unpad out)");
    // DeepSpeed's config has no pipeline (refused below); Megatron-Core and PyTorch's pipelining
    // send the boundary whole from every tensor-parallel rank.
    if (target != Target::DeepSpeed && strategy.pipeline && strategy.pipeline->scatterSends)
      refuse(Twine("pipeline sends = scatter: ") +
             (target == Target::Megatron
                  ? "Megatron-LM has sent the activations between stages whole since its "
                    "pipeline moved to Megatron-Core (January 2023)"
                  : "PyTorch's pipelining sends the activations between stages whole") +
             " (write sends = whole)");
    if (target == Target::DeepSpeed && (!view.expertAxes.empty() || run.model->isMoe()))
      refuse("mixture-of-experts layers: DeepSpeed-MoE is configured in the model code (its "
             "MoE layer's ep_size), not in the JSON config");
    // Adam's states: Megatron-LM keeps bf16 moments with its precision-aware optimizer, and main
    // parameters always (--main-params-dtype fp32 or fp16); the other targets' Adam keeps fp32
    // moments and the master copy their mixed precision implies.
    const ir::OptimizerStates &states = run.optimizerStates;
    if (!states.master)
      refuse("optimizer " + ir::spellOptimizer(run.optimizer, states) + ": " + framework +
             " keeps a master copy of 16-bit parameters" +
             (target == Target::Megatron ? ", in --main-params-dtype fp32 or fp16" : "") +
             " (leave master = none out)");
    if (states.momentBytes != 4 && target != Target::Megatron)
      refuse("optimizer " + ir::spellOptimizer(run.optimizer, states) + ": " + framework +
             "'s Adam keeps its moments in fp32 (leave moments = bf16 out)");
    switch (target) {
    case Target::DeepSpeed:
      writeDeepSpeed(out);
      break;
    case Target::Megatron:
      writeMegatron(out);
      break;
    case Target::Torchtitan:
      writeTorchtitan(out);
      break;
    }
    if (refused)
      return false;
    os << text;
    return true;
  }

private:
  /// Reports one part of the placement that the target cannot express.
  void refuse(const Twine &message) {
    if (refusals)
      refusals->push_back(message.str());
    else
      diags.error(loc,
                  "cannot export run '" + run.name + "' to " + toString(target) + ": " + message,
                  "export");
    refused = true;
  }

  const ir::StatePlacement &placement(ir::State state) const {
    return strategy.getPlacement(state);
  }

  void refuseTensorAxes(StringRef why) {
    if (!view.tensorAxes.empty())
      refuse("tensor axis " + axisList(mesh, view.tensorAxes) + " of size " +
             Twine(view.tensorDegree) + ": " + why);
  }
  void refuseLayersAxes(StringRef why) {
    if (!view.layersAxes.empty())
      refuse("layers axis " + axisList(mesh, view.layersAxes) + " of size " +
             Twine(view.layersDegree) + ": " + why);
  }
  void refuseKeepAfterForward(StringRef why) {
    for (unsigned index : view.batchAxes) {
      const ir::AxisPlacement &axis = placement(ir::State::Params).axes[index];
      if (axis.mode == ir::PlacementMode::ShardedWithGather && axis.keepAfterForward) {
        refuse("params gathered over '" + mesh.axes[index].name +
               "' with keep_after_forward = true: " + why);
        return;
      }
    }
  }
  void refuseTier(ir::State state, StringRef why) {
    if (placement(state).tier != ir::Tier::Device)
      refuse(toString(state) + " at tier '" + ir::toString(placement(state).tier) + "': " + why);
  }
  /// Params stored sharded and never gathered cannot run the forward; the verifier reports it
  /// (rule `coverage`), but a strategy could still reach here with it as a warning.
  void refuseShardedParams() {
    std::vector<unsigned> sharded =
        axesWithMode(view, placement(ir::State::Params), ir::PlacementMode::Sharded);
    if (!sharded.empty())
      refuse("params sharded without gather over " + axisList(mesh, sharded) +
             ": no framework runs the forward pass on parameter shards");
  }

  /// The pipeline's schedule when the strategy runs one over a layers axis of size > 1.
  std::optional<ir::Schedule> schedule() const {
    if (view.layersAxes.empty())
      return std::nullopt;
    return strategy.pipeline ? strategy.pipeline->schedule : ir::Schedule::OneFOneB;
  }
  bool unevenStages() const {
    return !view.layersAxes.empty() && strategy.pipeline &&
           (strategy.pipeline->firstStageLayers > 0 || strategy.pipeline->lastStageLayers > 0);
  }
  StringRef contextName() const { return ir::toString(strategy.contextMethod); }

  int64_t gradientAccumulation() const {
    return run.microbatchesPerStep > 0 ? run.microbatchesPerStep : 1;
  }

  // DeepSpeed -------------------------------------------------------------------------------

  void writeDeepSpeed(raw_ostream &os) {
    refuseTensorAxes("DeepSpeed's config has no tensor parallelism (it comes from the model code, "
                     "e.g. Megatron-DeepSpeed)");
    refuseLayersAxes("DeepSpeed's config has no pipeline degree (PipelineModule takes num_stages "
                     "in the model code)");
    refuseShardedParams();
    if (run.paramGather == ir::ParamGather::CopyOut)
      refuse("param_gather = copy_out: DeepSpeed's ZeRO gathers into the parameters' own storage "
             "(write param_gather = in_place)");
    refuseKeepAfterForward("DeepSpeed has no setting that keeps gathered parameters from the "
                           "forward to the backward");
    refuseTier(ir::State::Grads, "DeepSpeed offloads gradients only together with the optimizer "
                                 "(offload_optimizer); place the optimizer there instead");

    // Ulysses (DeepSpeed's sequence parallelism, `sequence_parallel_size`): consecutive ranks
    // form a sequence-parallel group, and ZeRO shards over data and sequence ranks together.
    int64_t ulysses = view.contextDegree;
    if (!view.contextAxes.empty()) {
      if (strategy.contextMethod != ir::ContextMethod::AllToAll)
        refuse("context = " + contextName() + " over " + axisList(mesh, view.contextAxes) +
               ": DeepSpeed's sequence parallelism is Ulysses, whose all-to-alls are "
               "context = all_to_all; it has no ring or all-gather attention");
      if (view.order.back() != view.contextAxes.back())
        refuse("sequence axis " + axisList(mesh, view.contextAxes) +
               " is not the innermost axis: DeepSpeed's sequence-parallel groups are "
               "consecutive ranks");
    }

    const ir::StatePlacement &params = placement(ir::State::Params);
    const ir::StatePlacement &grads = placement(ir::State::Grads);
    const ir::StatePlacement &optimizer = placement(ir::State::Optimizer);
    // Axes of size 1 are left out, unless every batch axis has size 1 (a single rank).
    bool single = view.batchAxes.empty() && view.contextAxes.empty();
    std::vector<unsigned> all = single ? view.allBatchAxes : dataAndContextAxes(view);
    std::vector<unsigned> optShard = axesWithMode(all, optimizer, ir::PlacementMode::Sharded);
    std::vector<unsigned> gradShard = axesWithMode(all, grads, ir::PlacementMode::Sharded);
    std::vector<unsigned> paramGather =
        axesWithMode(all, params, ir::PlacementMode::ShardedWithGather);

    int stage = -1;
    int64_t hpzSize = 0, micsSize = 0;
    if (optShard.empty() && gradShard.empty() && paramGather.empty())
      stage = 0;
    else if (optShard == all && gradShard.empty() && paramGather.empty())
      stage = 1;
    else if (optShard == all && gradShard == all && paramGather.empty())
      stage = 2;
    else if (optShard == all && gradShard == all && paramGather == all)
      stage = 3;
    else if (optShard == all && gradShard == all && isInnerSuffix(all, paramGather)) {
      stage = 3; // ZeRO++ hpZ: a secondary copy of the params sharded inside the inner group.
      hpzSize = productOf(mesh, paramGather);
    } else if (!optShard.empty() && optShard == gradShard && optShard == paramGather &&
               isInnerSuffix(all, optShard)) {
      stage = 3; // MiCS: every state sharded inside the inner group, replicated across groups.
      micsSize = productOf(mesh, optShard);
    } else {
      refuse("params gathered over " + axisList(mesh, paramGather) + ", grads sharded over " +
             axisList(mesh, gradShard) + " and optimizer sharded over " + axisList(mesh, optShard) +
             " match no ZeRO stage: DeepSpeed shards over every data-parallel rank (stages 1-3), "
             "or params over the innermost axes only (hpZ) or all states over the innermost "
             "axes only (MiCS)");
    }
    if ((hpzSize > 1 || micsSize > 1) && ulysses > 1)
      refuse(Twine(hpzSize > 1 ? "ZeRO++ hpZ" : "MiCS") +
             " with sequence parallelism: placec does not export DeepSpeed's partial sharding "
             "together with Ulysses");
    if (run.fp32Params)
      refuse("precision " + ir::spellPrecision(run) +
             ": DeepSpeed's mixed precision keeps the parameters in bf16 or fp16 and their fp32 "
             "master copy in the optimizer (leave params = fp32 out)");
    if (run.precision == ir::Precision::MixedFP8)
      refuse("precision " + ir::spellPrecision(run) +
             ": DeepSpeed's config has no FP8 or FP4 training (Transformer Engine's low-precision "
             "products come from the model code)");
    // The gradients' type (DeepSpeed's data_types.grad_accum_dtype, written out since its
    // default differs between versions): fp32 gradients only in the bf16 optimizer, which
    // DeepSpeed runs for bf16 without ZeRO or with ZeRO stage 1 on the device; bf16 gradients
    // only under ZeRO (without it DeepSpeed refuses to accumulate in bf16).
    bool bf16Optimizer = stage <= 1 && optimizer.tier == ir::Tier::Device;
    bool bf16Fp32Grads = run.precision == ir::Precision::MixedBF16 && run.fp32Grads;
    // Where DeepSpeed runs its bf16 optimizer for this run.
    bool runsBf16Optimizer = bf16Optimizer && bf16Fp32Grads;
    if (bf16Fp32Grads && !bf16Optimizer)
      refuse("precision mixed(bf16, grads = fp32) with ZeRO stage " + Twine(stage) +
             (optimizer.tier != ir::Tier::Device ? " and the optimizer offloaded" : "") +
             ": DeepSpeed keeps fp32 gradients only in its bf16 optimizer (ZeRO stage 0 or 1, "
             "on the device)");
    if (run.precision == ir::Precision::MixedBF16 && !run.fp32Grads && stage == 0)
      refuse("precision mixed(bf16) without ZeRO: DeepSpeed accumulates bf16 training's "
             "gradients in fp32 unless ZeRO is on (write mixed(bf16, grads = fp32))");
    if (run.precision == ir::Precision::MixedFP16 && run.fp32Grads)
      refuse("precision mixed(fp16, grads = fp32): DeepSpeed's fp16 training keeps fp16 "
             "gradients");
    if (params.tier != ir::Tier::Device && stage != 3)
      refuse("params at tier '" + ir::toString(params.tier) +
             "' without ZeRO stage 3: DeepSpeed offloads parameters (offload_param) only in "
             "stage 3");
    if (optimizer.tier != ir::Tier::Device && stage < 1)
      refuse("optimizer at tier '" + ir::toString(optimizer.tier) +
             "' without sharding: DeepSpeed offloads the optimizer (offload_optimizer) only in "
             "ZeRO stages 1-3");
    if (strategy.activationMode == ir::ActivationMode::RecomputeSelective ||
        strategy.activationMode == ir::ActivationMode::RecomputeOps ||
        strategy.activationMode == ir::ActivationMode::RecomputeAttention ||
        strategy.activationMode == ir::ActivationMode::RecomputeModules)
      refuse("activations = " +
             ir::getActivationModeText(strategy.activationMode, 0, strategy.recomputeModules) +
             ": DeepSpeed's activation checkpointing recomputes whole checkpointed functions "
             "(recompute)");
    if (strategy.recomputeLayers > 0)
      refuse("activations = recompute(layers = " + Twine(strategy.recomputeLayers) +
             "): DeepSpeed's config checkpoints the layers the model code wraps, and says nothing "
             "of which (write recompute or keep)");
    if (strategy.sequenceParallel)
      refuse("activations sharded along the sequence: DeepSpeed's config has no sequence "
             "parallelism over a tensor axis");
    const ir::StatePlacement &activations = placement(ir::State::Activations);
    if (activations.tier == ir::Tier::Nvme)
      refuse("activations at tier 'nvme': DeepSpeed checkpoints activations to the CPU only");
    if (activations.tier != ir::Tier::Device &&
        strategy.activationMode != ir::ActivationMode::RecomputeFull)
      refuse("activations offloaded without recompute: DeepSpeed moves only checkpointed "
             "activations to the CPU (cpu_checkpointing)");
    // The step's data-parallel collectives. Without ZeRO, and under its bf16 optimizer, the
    // engine all-reduces the gradients after the backward (allreduce_gradients in
    // deepspeed/runtime/engine.py); ZeRO's optimizer reduces them beside the backward with
    // overlap_comm (at stage 1 during the last micro-batch's, at stage 2 during every one), and
    // gathers the updated partitions after the optimizer step, never beside the next forward.
    int64_t ranks = productOf(mesh, all);
    bool engineReduces = stage == 0 || (stage == 1 && runsBf16Optimizer);
    if (strategy.dataParallelOverlap == ir::DataParallelOverlap::All)
      refuse("dp_overlap = all: DeepSpeed's ZeRO gathers the updated parameter partitions after "
             "the optimizer step, not beside the next step's forward (write dp_overlap = grads)");
    if (strategy.dataParallelOverlap == ir::DataParallelOverlap::Grads && engineReduces &&
        ranks > 1)
      refuse(Twine("dp_overlap = grads ") +
             (stage == 0 ? "without ZeRO"
                         : "at ZeRO stage 1 with mixed(bf16, grads = fp32), which DeepSpeed runs "
                           "with its bf16 optimizer") +
             ": DeepSpeed's engine all-reduces the gradients after the backward, where nothing "
             "overlaps them (write dp_overlap = none)");
    // The sum over the ranks that shard the optimizer: the bf16 optimizer's engine all-reduces
    // the whole gradients and each rank updates its partition of them (runtime/bf16_optimizer.py
    // has no reduce_gradients, so engine.py's allreduce_gradients takes
    // buffered_allreduce_fallback), while the ZeRO optimizer reduces each partition's gradients to
    // the rank that updates it.
    bool bf16Reduces = stage == 1 && engineReduces && ranks > 1;
    // The bf16 optimizer casts each micro-batch's bf16 gradients to fp32 and adds them into its
    // buffer after every backward (update_hp_grads); the other optimizers are not modelled.
    if (runsBf16Optimizer && run.gradAccumulation != ir::GradAccumulation::CastAdd)
      refuse("grad_accumulation = " + ir::toString(run.gradAccumulation) +
             " with mixed(bf16, grads = fp32), which DeepSpeed runs with its bf16 optimizer: it "
             "casts each micro-batch's bf16 gradients to fp32 and adds them into its buffer "
             "(write grad_accumulation = cast_add)");
    if (!runsBf16Optimizer && run.gradAccumulation != ir::GradAccumulation::Fused)
      refuse("grad_accumulation = " + ir::toString(run.gradAccumulation) +
             ": placec exports DeepSpeed's accumulation for its bf16 optimizer only (ZeRO stage "
             "0 or 1 with mixed(bf16, grads = fp32), grad_accumulation = cast_add)");
    if (bf16Reduces && strategy.gradReduce != ir::GradReduce::AllReduce)
      refuse("grad_reduce = reduce_scatter at ZeRO stage 1 with mixed(bf16, grads = fp32), which "
             "DeepSpeed runs with its bf16 optimizer: its engine all-reduces the whole gradients "
             "before each rank updates its partition (write grad_reduce = all_reduce)");
    if (!bf16Reduces && strategy.allReducesShardedOptimizer())
      refuse("grad_reduce = all_reduce at ZeRO stage " + Twine(stage) +
             ": DeepSpeed's ZeRO optimizer reduces each partition's gradients to the rank that "
             "updates it; only its bf16 optimizer (ZeRO stage 1 with mixed(bf16, grads = fp32)) "
             "all-reduces them (write grad_reduce = reduce_scatter)");
    if (refused)
      return;

    json::OStream json(os, 2);
    json.object([&] {
      json.attribute("train_batch_size", run.globalBatch);
      json.attribute("train_micro_batch_size_per_gpu", run.microBatch);
      json.attribute("gradient_accumulation_steps", gradientAccumulation());
      if (ulysses > 1)
        json.attribute("sequence_parallel_size", ulysses);
      if (run.precision == ir::Precision::MixedBF16)
        json.attributeObject("bf16", [&] { json.attribute("enabled", true); });
      if (run.precision == ir::Precision::MixedFP16)
        json.attributeObject("fp16", [&] { json.attribute("enabled", true); });
      if (run.precision == ir::Precision::MixedBF16)
        json.attributeObject("data_types", [&] {
          json.attribute("grad_accum_dtype", run.fp32Grads ? "fp32" : "bf16");
        });
      json.attributeObject("optimizer", [&] {
        switch (run.optimizer) {
        case ir::OptimizerKind::Adam:
          json.attribute("type", "Adam");
          break;
        case ir::OptimizerKind::Sgd:
          json.attribute("type", "SGD");
          json.attributeObject("params", [&] { json.attribute("momentum", 0.0); });
          break;
        case ir::OptimizerKind::SgdMomentum:
          json.attribute("type", "SGD");
          json.attributeObject("params", [&] { json.attribute("momentum", 0.9); });
          break;
        }
      });
      json.attributeObject("zero_optimization", [&] {
        json.attribute("stage", stage);
        // Written at stages 1 and 2, whose default (false) is not ZeRO-3's.
        if ((stage == 1 || stage == 2) && ranks > 1)
          json.attribute("overlap_comm",
                         stage == 2 || (!engineReduces && strategy.dataParallelOverlap !=
                                                              ir::DataParallelOverlap::None));
        if (optimizer.tier != ir::Tier::Device)
          json.attributeObject("offload_optimizer",
                               [&] { json.attribute("device", tierWord(optimizer.tier)); });
        if (params.tier != ir::Tier::Device)
          json.attributeObject("offload_param",
                               [&] { json.attribute("device", tierWord(params.tier)); });
        if (hpzSize > 1)
          json.attribute("zero_hpz_partition_size", hpzSize);
        if (micsSize > 1)
          json.attribute("mics_shard_size", micsSize);
      });
      if (strategy.activationMode == ir::ActivationMode::RecomputeFull)
        json.attributeObject("activation_checkpointing", [&] {
          json.attribute("partition_activations", false);
          json.attribute("cpu_checkpointing", activations.tier != ir::Tier::Device);
        });
    });
    os << "\n";
  }

  // Megatron-LM -----------------------------------------------------------------------------

  /// Megatron orders ranks tensor innermost, then context, then data, then pipeline outermost
  /// (Megatron-Core's default order tp-cp-ep-dp-pp).
  void checkMegatronOrder() {
    int last = -1; // 0 pipeline, 1 data, 2 context, 3 tensor, in the order Megatron nests them.
    unsigned lastAxis = 0;
    for (unsigned index : view.order) {
      ir::AxisKind kind = mesh.axes[index].kind;
      int rank = kind == ir::AxisKind::Layers     ? 0
                 : kind == ir::AxisKind::Batch    ? 1
                 : kind == ir::AxisKind::Expert   ? 2
                 : kind == ir::AxisKind::Sequence ? 3
                                                  : 4;
      if (rank < last) {
        refuse("axis '" + mesh.axes[index].name + "' is inside the " +
               ir::toString(mesh.axes[lastAxis].kind) + " axis '" + mesh.axes[lastAxis].name +
               "': Megatron-LM numbers ranks tensor innermost, then context, expert, data, and "
               "pipeline outermost (write the mesh as [pp, dp, ep, cp, tp])");
        return;
      }
      last = rank;
      lastAxis = index;
    }
  }

  void writeMegatron(raw_ostream &os) {
    const ir::Model &model = *run.model;
    if (model.kind != ir::ModelKind::Transformer)
      refuse("model '" + model.name + "' is " +
             (model.kind == ir::ModelKind::Mlp ? "an mlp" : "abstract") +
             ": Megatron-LM trains transformers (its flags describe one)");
    if (view.tensorAxes.size() > 1)
      refuse("several tensor axes " + axisList(mesh, view.tensorAxes) +
             ": Megatron-LM has one tensor-parallel group");
    if (model.kind == ir::ModelKind::Transformer &&
        model.transformer.mlp == ir::MlpActivation::Relu2 && model.transformer.bias)
      refuse("mlp = relu2 with bias = true: Megatron-LM fuses the bias only into GELU and SwiGLU "
             "(megatron/core/transformer/mlp.py) and adds it before squared_relu in a kernel of "
             "its own, which placec does not count; declare bias = false");
    checkMegatronOrder();
    refuseShardedParams();
    // Megatron-LM's data-parallel group spans the context-parallel ranks: gradients are reduced
    // and the distributed optimizer shards over data and context ranks together.
    std::vector<unsigned> dataAxes = dataAndContextAxes(view);
    dataAxes.insert(dataAxes.end(), view.expertAxes.begin(), view.expertAxes.end());
    llvm::sort(dataAxes);
    std::vector<unsigned> paramGather =
        axesWithMode(dataAxes, placement(ir::State::Params), ir::PlacementMode::ShardedWithGather);
    if (!paramGather.empty())
      refuse("params gathered over " + axisList(mesh, paramGather) +
             ": Megatron-LM has no ZeRO-3 (its distributed optimizer shards the optimizer state "
             "only)");
    std::vector<unsigned> gradShard =
        axesWithMode(dataAxes, placement(ir::State::Grads), ir::PlacementMode::Sharded);
    if (!gradShard.empty())
      refuse("grads sharded over " + axisList(mesh, gradShard) +
             ": Megatron-LM keeps full gradient buffers (the distributed optimizer reduce-scatters "
             "into them but does not free them)");
    std::vector<unsigned> optShard =
        axesWithMode(dataAxes, placement(ir::State::Optimizer), ir::PlacementMode::Sharded);
    if (!optShard.empty() && optShard != dataAxes)
      refuse("optimizer sharded over " + axisList(mesh, optShard) + " but not over " +
             axisList(mesh, ArrayRef<unsigned>(dataAxes)) +
             ": --use-distributed-optimizer shards over the whole data-parallel group (with the "
             "context-parallel ranks)");
    if (strategy.allReducesShardedOptimizer())
      refuse("grad_reduce = all_reduce: Megatron-LM's distributed optimizer reduce-scatters the "
             "gradients into the shards each rank updates (write grad_reduce = reduce_scatter)");
    for (ir::State state : ir::kAllStates)
      refuseTier(state, "Megatron-LM's flags place every state on the device");
    if (strategy.activationMode == ir::ActivationMode::RecomputeOps)
      refuse("activations = recompute(op): Megatron-LM recomputes whole layers or the selective "
             "modules, not every other product (write recompute or recompute(selective))");
    if (run.kernels == ir::KernelMode::Eager)
      refuse("kernels = eager: Megatron-LM runs its fused kernels (write kernels = fused)");
    if (run.paramGather == ir::ParamGather::CopyOut)
      refuse("param_gather = copy_out: Megatron-LM's distributed optimizer all-gathers into the "
             "parameters' own buffer (write param_gather = in_place)");
    if (run.gradAccumulation == ir::GradAccumulation::CastAdd)
      refuse("grad_accumulation = cast_add: Megatron-LM adds the fresh gradient into the main "
             "gradient in one kernel without its fusion (write add, or fused, its default)");
    if (run.contextMerge == ir::ContextMerge::Eager && view.contextDegree > 1)
      refuse("context_merge = eager: Megatron-LM runs Transformer Engine's context-parallel "
             "attention, whose merges are fused (write context_merge = fused)");
    if (run.fp32Params)
      refuse("precision " + ir::spellPrecision(run) +
             ": Megatron-LM keeps the parameters in bf16 or fp16 and their fp32 master copy in "
             "the optimizer (leave params = fp32 out)");
    if (run.precision == ir::Precision::MixedFP8 && !run.fp8Saved)
      refuse("precision " + ir::spellPrecision(run) +
             ": Megatron-LM's FP8 runs on Transformer Engine's linears, which keep their inputs "
             "for the backward as FP8 (write saved = fp8)");
    // A model that repeats its grouped keys and values itself (kv_repeat = true, whatever the
    // kernels): Megatron-Core's unfused attention repeats them to every head (repeat_interleave in
    // megatron/core/transformer/dot_product_attention.py); its fused backends take them grouped.
    if (cost::repeatsKv(model.transformer, ir::KernelMode::Fused) &&
        model.transformer.attention != ir::AttentionKind::Materialized)
      refuse("kv_repeat = true with attention = " + ir::toString(model.transformer.attention) +
             ": Megatron-Core's fused attention backends take the grouped keys and values without "
             "repeating them (write kv_repeat = false, or attention = materialized for its "
             "unfused attention, which repeats them)");
    // Megatron-Core's selective recomputation checkpoints the core attention (recompute_modules
    // core_attn, its default: megatron/core/transformer/attention.py, checkpoint_core_attention):
    // Korthikanti et al.'s scores and softmax again under its unfused attention, the fused kernel's
    // forward again under the fused backends, which is recompute(attention); it keeps the norms'
    // outputs and the MLP activation that Place's recompute(selective) over fused attention
    // recomputes instead.
    if (strategy.activationMode == ir::ActivationMode::RecomputeSelective &&
        model.transformer.attention != ir::AttentionKind::Materialized)
      refuse("activations = recompute(selective) with attention = " +
             ir::toString(model.transformer.attention) +
             ": Megatron-Core's --recompute-granularity selective runs the fused attention "
             "kernel's forward again in the backward and keeps the norms' outputs and the MLP "
             "activation, which Place's recompute(selective) over fused attention recomputes "
             "instead (write recompute(attention) for Megatron-Core's selective recomputation)");
    // Megatron-Core applies the rotary embedding in real arithmetic (_rotate_half in
    // megatron/core/models/common/embeddings/rope_utils.py), or fused under --apply-rope-fusion.
    if (model.transformer.ropeComplex)
      refuse("rope_complex = true: Megatron-Core applies the rotary embedding in real arithmetic, "
             "not as a complex product (write rope_complex = false)");
    // Megatron-Core's attention projects Q, K and V in one product (linear_qkv) and its swiglu
    // MLP the gate and up in one (linear_fc1 at twice the width).
    if (model.transformer.projections == ir::Projections::Separate)
      refuse("projections = separate: Megatron-Core computes Q, K and V in one product and the "
             "MLP's gate and up in one (write projections = fused)");
    if (strategy.asyncTensorParallel == ir::AsyncTensorParallel::Forward && view.tensorDegree > 1)
      refuse("async_tp = forward: Megatron-LM's --tp-comm-overlap overlaps the tensor-parallel "
             "collectives of the backward as well (write async_tp = true)");
    if (strategy.asyncTensorParallel == ir::AsyncTensorParallel::Off && view.tensorDegree > 1)
      refuse("async_tp = false: Megatron-LM's column-parallel linears always reduce the input "
             "gradient beside the weight gradient (write async_tp = wgrad, or true for "
             "--tp-comm-overlap)");
    if (strategy.sequenceParallel && view.tensorDegree > 1 &&
        strategy.sequenceParallelInputs == ir::SequenceParallelInputs::Keep)
      refuse("sp_inputs = keep: Megatron-LM's column-parallel linears keep their input's "
             "sequence shard and gather it again in the backward (write sp_inputs = regather, "
             "the default)");
    const ir::MoeConfig &moe = model.transformer.moe;
    if (model.isMoe()) {
      // Megatron-Core's expert group takes the context-parallel ranks before the data-parallel
      // ones (its rank orders tp-cp-ep-dp-pp and tp-ep-dp-pp): expert_context = fold.
      if (view.expertDegree > 1 && view.contextDegree > 1 && !strategy.foldsExpertContext())
        refuse("expert axis " + axisList(mesh, view.expertAxes) + " with sequence axis " +
               axisList(mesh, view.contextAxes) +
               " and expert_context = split: Megatron-Core's expert group takes the "
               "context-parallel ranks before the data-parallel ones (write expert_context = "
               "fold)");
      // The experts' states over the expert-data-parallel group (the data axes but ep, and but
      // the context axes the experts fold): the distributed optimizer shards them there when it
      // shards the dense ones.
      std::vector<unsigned> expertData;
      for (unsigned axis : dataAndContextAxes(view))
        if (strategy.isExpertDataParallelAxis(mesh.axes[axis].kind))
          expertData.push_back(axis);
      const ir::StatePlacement &expertOptimizer = strategy.getExpertPlacement(ir::State::Optimizer);
      std::vector<unsigned> expertShard =
          axesWithMode(expertData, expertOptimizer, ir::PlacementMode::Sharded);
      if (!axesWithMode(expertData, strategy.getExpertPlacement(ir::State::Params),
                        ir::PlacementMode::ShardedWithGather)
               .empty() ||
          !axesWithMode(expertData, strategy.getExpertPlacement(ir::State::Grads),
                        ir::PlacementMode::Sharded)
               .empty())
        refuse("expert params gathered or expert grads sharded: Megatron-LM has no ZeRO-3 or "
               "ZeRO-2 for the experts either");
      if (expertShard != (optShard.empty() ? std::vector<unsigned>{} : expertData))
        refuse("expert optimizer sharded over " + axisList(mesh, expertShard) +
               " with the dense optimizer over " + axisList(mesh, optShard) +
               ": --use-distributed-optimizer shards the experts' optimizer over the whole "
               "expert-data-parallel group exactly when it shards the dense one");
      if (moe.denseLayers > 0 && moe.every > 1)
        refuse("dense_layers with moe_every = " + Twine(moe.every) +
               ": placec writes --moe-layer-freq as a number or as ([0]*N+[1]*M)");
    }
    // --overlap-param-gather overlaps the distributed optimizer's all-gather of the updated
    // parameters, and megatron/training/arguments.py accepts it only with that optimizer.
    if (strategy.dataParallelOverlap == ir::DataParallelOverlap::All && optShard.empty())
      refuse("dp_overlap = all without the optimizer sharded over the data-parallel group: "
             "Megatron-LM's --overlap-param-gather overlaps the all-gather of the updated "
             "parameters that its distributed optimizer (--use-distributed-optimizer) runs, and "
             "needs it (write dp_overlap = grads, or shard the optimizer over " +
             axisList(mesh, dataAxes) + ")");
    std::optional<ir::Schedule> pipelineSchedule = schedule();
    if (pipelineSchedule == ir::Schedule::GPipe)
      refuse("pipeline schedule gpipe: Megatron-LM runs 1F1B or interleaved 1F1B");
    if (pipelineSchedule == ir::Schedule::ZeroBubble ||
        pipelineSchedule == ir::Schedule::ZeroBubbleV ||
        pipelineSchedule == ir::Schedule::DualPipe || pipelineSchedule == ir::Schedule::DualPipeV)
      refuse("pipeline schedule " + ir::toString(*pipelineSchedule) +
             ": Megatron-LM has no flag for it (its schedules are 1F1B and interleaved 1F1B)");
    // --fp8-param-gather keeps the parameters as Transformer Engine's FP8 tensors alone: FP8
    // all-gathers of bf16 parameters are not a Megatron-LM setting.
    if (run.fp8Gather && !run.fp8Params)
      refuse("precision " + ir::spellPrecision(run) +
             ": Megatron-LM's FP8 all-gathers (--fp8-param-gather) keep the parameters as FP8 "
             "alone, without the bf16 copy placec counts beside them here (write params = fp8)");
    if (run.crossEntropy == ir::CrossEntropyKind::Unfused)
      refuse("cross_entropy = unfused: Megatron-LM computes its vocabulary-parallel loss (write "
             "cross_entropy = vocab_parallel, its default, or fused, Transformer Engine's fused "
             "kernel)");
    if (refused)
      return;

    auto flag = [&](StringRef name, const Twine &value) { os << name << " " << value << "\n"; };
    flag("--tensor-model-parallel-size", Twine(view.tensorDegree));
    flag("--pipeline-model-parallel-size", Twine(view.layersDegree));
    // Folded (expert_tensor = fold), Megatron-Core's expert group is the expert axis times the
    // tensor axis: the [.., ep, tp] ranks that checkMegatronOrder leaves consecutive, as its
    // expert rank order etp-ep-edp-pp with ETP 1 numbers them; with the sequence axis folded
    // (expert_context = fold) the [.., ep, cp, (tp)] ones.
    if (view.expertDegree > 1)
      flag("--expert-model-parallel-size", Twine(strategy.getExpertGroupDegree()));
    if (view.expertDegree > 1 && strategy.foldsExpertTensor())
      flag("--expert-tensor-parallel-size", "1");
    bool layout = view.layersDegree > 1 && strategy.pipeline && !strategy.pipeline->layout.empty();
    // Megatron-Core derives the virtual stages from a layout (quoted: it holds '|', '(' and '*').
    if (layout)
      flag("--pipeline-model-parallel-layout", "\"" + strategy.pipeline->layout.text + "\"");
    else if (strategy.pipeline && strategy.pipeline->schedule == ir::Schedule::Interleaved &&
             view.layersDegree > 1)
      flag("--num-layers-per-virtual-pipeline-stage",
           Twine(strategy.pipeline->getSplitLayers(model.getNumLayers()) /
                 (view.layersDegree * strategy.pipeline->chunks)));
    // Interleaving's micro-batch groups, where they are not Megatron-Core's default of p.
    if (strategy.pipeline && strategy.pipeline->schedule == ir::Schedule::Interleaved &&
        strategy.pipeline->chunks > 1 && view.layersDegree > 1 && strategy.pipeline->group > 0 &&
        strategy.pipeline->group != view.layersDegree)
      flag("--microbatch-group-size-per-vp-stage", Twine(strategy.pipeline->group));
    if (view.layersDegree > 1 && strategy.pipeline) {
      if (strategy.pipeline->embeddingLayer)
        os << "--account-for-embedding-in-pipeline-split\n";
      if (strategy.pipeline->lossLayer)
        os << "--account-for-loss-in-pipeline-split\n";
    }
    if (unevenStages()) {
      if (strategy.pipeline->firstStageLayers > 0)
        flag("--decoder-first-pipeline-num-layers", Twine(strategy.pipeline->firstStageLayers));
      if (strategy.pipeline->lastStageLayers > 0)
        flag("--decoder-last-pipeline-num-layers", Twine(strategy.pipeline->lastStageLayers));
    }
    if (view.contextDegree > 1) {
      // Transformer Engine's context-parallel attention (its tests/pytorch/attention/
      // test_attention_with_cp.py): keys and values of another width than the queries' (latent
      // attention) only around a ring, a learnable softmax (sinks) only all-to-all.
      const ir::TransformerConfig &config = model.transformer;
      if (config.isLatentAttention() && strategy.contextMethod != ir::ContextMethod::Ring)
        refuse("context = " + ir::toString(strategy.contextMethod) +
               " with multi-head latent attention: Transformer Engine passes keys and values of "
               "another width than the queries' around a ring only (write context = ring)");
      if (config.sinks && strategy.contextMethod != ir::ContextMethod::AllToAll)
        refuse("context = " + ir::toString(strategy.contextMethod) +
               " with sinks = true: Transformer Engine's learnable softmax runs under context "
               "parallelism all-to-all only (write context = all_to_all)");
      flag("--context-parallel-size", Twine(view.contextDegree));
      flag("--cp-comm-type", strategy.contextMethod == ir::ContextMethod::Ring        ? "p2p"
                             : strategy.contextMethod == ir::ContextMethod::AllGather ? "all_gather"
                                                                                      : "a2a");
    }
    if (strategy.sequenceParallel)
      os << "--sequence-parallel\n";
    if (strategy.asyncTensorParallel == ir::AsyncTensorParallel::All && view.tensorDegree > 1)
      os << "--tp-comm-overlap\n";
    if (!optShard.empty())
      os << "--use-distributed-optimizer\n";
    // The step's gradient reductions over the data-parallel group beside the last micro-batch's
    // backward (grads, all), and the updated parameters' all-gathers beside the next step's
    // forward (all); neither flag is Megatron-LM's default, none.
    if (productOf(mesh, dataAxes) > 1 &&
        strategy.dataParallelOverlap != ir::DataParallelOverlap::None)
      os << "--overlap-grad-reduce\n";
    if (strategy.dataParallelOverlap == ir::DataParallelOverlap::All)
      os << "--overlap-param-gather\n";
    // Batch-level overlap of the expert all-to-alls: Megatron-Core's documentation pairs it with
    // --delay-wgrad-compute (megatron/core/transformer/moe/README.md, "EP A2A Overlap").
    if (strategy.expertOverlap == ir::ExpertOverlap::On)
      os << "--overlap-moe-expert-parallel-comm\n--delay-wgrad-compute\n";
    // Without its gradient accumulation fusion, Megatron-LM's data-parallel module adds each
    // weight's fresh gradient into its main gradient in the backward hook (main_grad.add_).
    if (run.gradAccumulation == ir::GradAccumulation::Add)
      os << "--no-gradient-accumulation-fusion\n";
    flag("--micro-batch-size", Twine(run.microBatch));
    flag("--global-batch-size", Twine(run.globalBatch));
    if (run.precision == ir::Precision::MixedBF16 || run.precision == ir::Precision::MixedFP8)
      os << "--bf16\n";
    if (run.precision == ir::Precision::MixedFP16)
      os << "--fp16\n";
    // Megatron-LM accumulates and reduces gradients in fp32 under --bf16 by default, in fp16
    // under --fp16 (megatron/training/arguments.py): say which the plan counts.
    if (run.fp32Grads)
      os << "--accumulate-allreduce-grads-in-fp32\n";
    else if (run.precision == ir::Precision::MixedBF16 || run.precision == ir::Precision::MixedFP8)
      os << "--grad-reduce-in-bf16\n";
    if (run.precision == ir::Precision::MixedFP8 && run.fp8Scaling == ir::Fp8Scaling::Nvfp4) {
      // NVFP4: E2M1 values under Transformer Engine's NVFP4BlockScaling recipe; its parameters
      // alone, all-gathered as packed NVFP4 values.
      flag("--fp4-format", "e2m1");
      flag("--fp4-recipe", "nvfp4");
      if (run.fp8Params)
        os << "--fp4-param-gather\n";
    } else if (run.precision == ir::Precision::MixedFP8) {
      // E4M3 in the forward, E5M2 for the gradients: Transformer Engine's recipe, which the
      // import reads back as mixed(fp8) like e4m3.
      flag("--fp8-format", "hybrid");
      // Megatron-LM's default recipe scales per tensor (delayed); current scaling is its
      // tensorwise recipe, MXFP8 its own.
      if (run.fp8Scaling == ir::Fp8Scaling::Mx)
        flag("--fp8-recipe", "mxfp8");
      else if (run.fp8Scaling == ir::Fp8Scaling::Current)
        flag("--fp8-recipe", "tensorwise");
      // The FP8 parameters alone: all-gathered as FP8 under one scale per tensor, in bf16
      // through the gradient buffer under MXFP8.
      if (run.fp8Params)
        os << "--fp8-param-gather\n";
      if (run.fp8Params && run.fp8Scaling == ir::Fp8Scaling::Mx)
        os << "--reuse-grad-buf-for-mxfp8-param-ag\n";
    }
    // Transformer Engine's FP8 dot-product attention (megatron/training/arguments.py).
    if (run.precision == ir::Precision::MixedFP8 && run.fp8Attention)
      os << "--fp8-dot-product-attention\n";
    switch (run.optimizer) {
    case ir::OptimizerKind::Adam:
      flag("--optimizer", "adam");
      // Megatron-Core's precision-aware optimizer keeps the moments in the types given
      // (megatron/training/arguments.py, --exp-avg-dtype and --exp-avg-sq-dtype).
      if (run.optimizerStates.momentBytes == 2) {
        os << "--use-precision-aware-optimizer\n";
        flag("--exp-avg-dtype", "bf16");
        flag("--exp-avg-sq-dtype", "bf16");
      }
      break;
    case ir::OptimizerKind::Sgd:
      flag("--optimizer", "sgd");
      flag("--sgd-momentum", "0");
      break;
    case ir::OptimizerKind::SgdMomentum:
      flag("--optimizer", "sgd");
      flag("--sgd-momentum", "0.9");
      break;
    }
    switch (strategy.activationMode) {
    case ir::ActivationMode::Keep:
      break;
    case ir::ActivationMode::RecomputeFull:
      flag("--recompute-granularity", "full");
      // recompute(layers = n): the first n layers of each model chunk (the block method).
      if (strategy.recomputeLayers > 0) {
        flag("--recompute-method", "block");
        flag("--recompute-num-layers", Twine(strategy.recomputeLayers));
      } else {
        flag("--recompute-method", "uniform");
        flag("--recompute-num-layers", "1");
      }
      break;
    case ir::ActivationMode::RecomputeSelective:
    case ir::ActivationMode::RecomputeAttention:
      flag("--recompute-granularity", "selective");
      break;
    case ir::ActivationMode::RecomputeModules: {
      // Megatron-Core's --recompute-modules, a list in its own order.
      flag("--recompute-granularity", "selective");
      std::string modules;
      for (const auto &[module, name] : ir::getRecomputeModuleNames())
        if (strategy.recomputeModules & module)
          modules += (modules.empty() ? "" : " ") + name.str();
      flag("--recompute-modules", modules);
      break;
    }
    case ir::ActivationMode::RecomputeOps:
      break; // Refused.
    }
    // The loss (megatron/core/models/common/language_module/language_module.py): one fused
    // kernel each way is Transformer Engine's implementation of --cross-entropy-loss-fusion, its
    // `native` one Megatron-Core's jit-fused functions (fused_vocab_parallel); without the flag,
    // Megatron-LM's vocabulary-parallel cross-entropy (vocab_parallel).
    if (run.crossEntropy == ir::CrossEntropyKind::Fused ||
        run.crossEntropy == ir::CrossEntropyKind::FusedVocabParallel) {
      os << "--cross-entropy-loss-fusion\n";
      flag("--cross-entropy-fusion-impl",
           run.crossEntropy == ir::CrossEntropyKind::Fused ? "te" : "native");
    }
    const ir::TransformerConfig &config = model.transformer;
    flag("--num-layers", Twine(config.layers));
    // Multi-token prediction modules (Megatron-Core's MultiTokenPredictionBlock, on the last
    // pipeline stage, each layer of the decoder's last layer spec).
    if (config.mtpLayers > 0)
      flag("--mtp-num-layers", Twine(config.mtpLayers));
    flag("--hidden-size", Twine(config.hidden));
    flag("--num-attention-heads", Twine(config.heads));
    flag("--ffn-hidden-size", Twine(config.ffn ? config.ffn : 4 * config.hidden));
    flag("--seq-length", Twine(config.seq));
    flag("--max-position-embeddings", Twine(config.seq));
    flag("--vocab-size", Twine(config.vocab));
    if (config.mlp == ir::MlpActivation::Swiglu)
      os << "--swiglu\n";
    else if (config.mlp == ir::MlpActivation::Relu2)
      os << "--squared-relu\n";
    if (config.norm == ir::NormKind::RmsNorm)
      flag("--normalization", "RMSNorm");
    if (!config.bias)
      os << "--disable-bias-linear\n";
    if (config.qkvBias)
      os << "--add-qkv-bias\n";
    if (config.getKvHeads() != config.heads) {
      os << "--group-query-attention\n";
      flag("--num-query-groups", Twine(config.getKvHeads()));
    }
    // Megatron-LM's head width is --kv-channels (hidden / heads when not given), and
    // --qk-layernorm normalizes each head's queries and keys with --normalization's norm.
    if (config.headDim > 0 && !config.isLatentAttention())
      flag("--kv-channels", Twine(config.headDim));
    // Multi-head latent attention (Megatron-Core's MLASelfAttention): --qk-layernorm gives its
    // latents their norms (of --normalization's kind, as Place's are the model's norm), and
    // every width is written rather than left to Megatron-LM's defaults.
    if (config.isLatentAttention()) {
      os << "--multi-latent-attention\n";
      if (config.qLoraRank > 0)
        flag("--q-lora-rank", Twine(config.qLoraRank));
      flag("--kv-lora-rank", Twine(config.kvLoraRank));
      flag("--qk-head-dim", Twine(config.getHeadDim()));
      flag("--qk-pos-emb-head-dim", Twine(config.ropeHeadDim));
      flag("--v-head-dim", Twine(config.getValueHeadDim()));
      os << "--qk-layernorm\n";
    }
    // Megatron-LM's GPT layer normalizes each block's input only (Gemma's post-norms are
    // Megatron-Bridge's model code, not a flag).
    if (config.postNorm)
      refuse("post_norm = true: Megatron-LM's transformer layer has no norm on the attention's "
             "and the MLP's outputs");
    if (config.qkNorm) {
      if (config.norm != ir::NormKind::RmsNorm)
        refuse("qk_norm = true with norm = " + ir::toString(config.norm) +
               ": Megatron-LM's --qk-layernorm normalizes queries and keys with the model's "
               "--normalization, where Place's qk_norm is an RMSNorm (write norm = rmsnorm)");
      os << "--qk-layernorm\n";
    }
    // Megatron-Core's window_size is flash-attn's (left, right): a query attends `left` earlier
    // tokens and itself, so Place's window of w tokens is (w − 1, 0). Its unfused attention has
    // no window (megatron/core/transformer/dot_product_attention.py asserts window_size is None).
    if (config.isWindowed()) {
      if (config.attention == ir::AttentionKind::Materialized)
        refuse("window = " + Twine(config.window) +
               " with attention = materialized: Megatron-Core's unfused attention has no sliding "
               "window (write attention = flash or cudnn)");
      flag("--window-size", Twine(config.window - 1) + ",0");
      // Megatron-Core's is_layer_window_attention: layer_number (from 1) % freq != 0 attends the
      // window, as Place's full_every counts its layers.
      if (config.hasFullAttentionLayers())
        flag("--window-attn-skip-freq", Twine(config.fullEvery));
    }
    switch (config.attention) {
    case ir::AttentionKind::Flash:
    case ir::AttentionKind::Flash3:
      flag("--attention-backend", "flash"); // FlashAttention-3 where installed on Hopper.
      break;
    case ir::AttentionKind::Cudnn:
      flag("--attention-backend", "fused");
      break;
    case ir::AttentionKind::Materialized:
      flag("--attention-backend", "unfused");
      break;
    }
    // Attention sinks: Megatron-Core's learnable softmax offset per head.
    if (config.sinks)
      flag("--softmax-type", "learnable");
    if (model.isMoe()) {
      const ir::MoeConfig &moe = config.moe;
      // Megatron-Core's router has a bias exactly when its linears do (--add-bias-linear:
      // megatron/core/transformer/moe/router.py, Router.__init__).
      if (moe.routerBias != config.bias)
        refuse(moe.routerBias ? "router_bias = true with bias = " + config.getBiasText() +
                                    ": Megatron-Core's router has a bias only with its linears' "
                                    "(--add-bias-linear; write bias = true)"
                              : Twine("bias = true without router_bias: Megatron-Core's router "
                                      "has a bias with its linears' (--add-bias-linear); write "
                                      "router_bias = true"));
      flag("--num-experts", Twine(moe.experts));
      flag("--moe-router-topk", Twine(moe.topK));
      flag("--moe-ffn-hidden-size", Twine(moe.expertFfn));
      if (moe.sharedExperts > 0)
        flag("--moe-shared-expert-intermediate-size",
             Twine(moe.sharedExperts * moe.sharedExpertFfn));
      if (moe.denseLayers > 0)
        flag("--moe-layer-freq", "([0]*" + Twine(moe.denseLayers) + "+[1]*" +
                                     Twine(config.layers - moe.denseLayers) + ")");
      else if (moe.every > 1)
        flag("--moe-layer-freq", Twine(moe.every));
      flag("--moe-router-score-function",
           moe.router == ir::RouterKind::Sigmoid ? "sigmoid" : "softmax");
      if (moe.routerGroups > 0) {
        flag("--moe-router-num-groups", Twine(moe.routerGroups));
        flag("--moe-router-group-topk", Twine(moe.routerGroupTopK));
      }
      if (moe.capacityFactor) {
        os << "--moe-expert-capacity-factor " << format("%g", *moe.capacityFactor) << "\n";
        os << "--moe-pad-expert-input-to-capacity\n";
      }
      // Megatron-Core's load-balancing losses by the tokens they count
      // (megatron/core/transformer/moe/router.py): global_aux_loss sums the statistics over the
      // tensor, data and context ranks, aux_loss and seq_aux_loss over the tensor and context
      // ranks, the latter per sequence.
      if (moe.auxLoss > 0)
        flag("--moe-router-load-balancing-type",
             moe.auxLossScope == ir::AuxLossScope::Global  ? "global_aux_loss"
             : moe.auxLossScope == ir::AuxLossScope::Local ? "aux_loss"
                                                           : "seq_aux_loss");
      os << "--moe-aux-loss-coeff " << format("%g", moe.auxLoss) << "\n";
      // Megatron-Core's flex dispatcher names its backend (transformer_config.py,
      // moe_flex_dispatcher_backend).
      if (view.expertDegree > 1 && strategy.expertDispatcher == ir::ExpertDispatcher::AllToAll)
        flag("--moe-token-dispatcher-type", "alltoall");
      else if (view.expertDegree > 1)
        os << "--moe-token-dispatcher-type flex\n--moe-flex-dispatcher-backend "
           << ir::toString(strategy.expertDispatcher) << "\n";
    }
    if (config.positions == ir::PositionKind::Rope)
      flag("--position-embedding-type", "rope");
    else if (config.positions == ir::PositionKind::Alibi)
      refuse("positions = alibi: Megatron-LM's --position-embedding-type takes learned_absolute, "
             "rope or none (ALiBi is Megatron-DeepSpeed's)");
    if (config.embeddingNorm)
      refuse("embedding_norm = true: Megatron-LM's embedding has no norm (--embed-layernorm is "
             "Megatron-DeepSpeed's)");
    if (!config.tiedEmbeddings)
      os << "--untie-embeddings-and-output-weights\n";
  }

  // torchtitan ------------------------------------------------------------------------------

  void writeTorchtitan(raw_ostream &os) {
    if (view.tensorAxes.size() > 1)
      refuse("several tensor axes " + axisList(mesh, view.tensorAxes) +
             ": torchtitan has one tensor-parallel dimension");
    if (run.gradAccumulation != ir::GradAccumulation::Fused)
      refuse("grad_accumulation = " + ir::toString(run.gradAccumulation) +
             ": torchtitan's FSDP2 and DDP accumulate the gradients through autograd and their "
             "reductions, which placec models without it (leave grad_accumulation out)");
    refuseShardedParams();
    const ir::StatePlacement &params = placement(ir::State::Params);
    const ir::StatePlacement &grads = placement(ir::State::Grads);
    const ir::StatePlacement &optimizer = placement(ir::State::Optimizer);
    // Each batch axis is either FSDP's shard dimension (params gathered, grads and optimizer
    // sharded) or its replicate dimension (everything replicated).
    std::vector<unsigned> replicateAxes, shardAxes;
    bool keepAfterForward = false, reshardAfterForward = false;
    for (unsigned index : view.batchAxes) {
      ir::PlacementMode p = params.axes[index].mode, g = grads.axes[index].mode,
                        o = optimizer.axes[index].mode;
      StringRef name = mesh.axes[index].name;
      if (p == ir::PlacementMode::Replicated && g == ir::PlacementMode::Replicated &&
          o == ir::PlacementMode::Replicated) {
        replicateAxes.push_back(index);
      } else if (p == ir::PlacementMode::ShardedWithGather && g == ir::PlacementMode::Sharded &&
                 o == ir::PlacementMode::Sharded) {
        shardAxes.push_back(index);
        (params.axes[index].keepAfterForward ? keepAfterForward : reshardAfterForward) = true;
      } else if (p == ir::PlacementMode::Replicated && g == ir::PlacementMode::Replicated) {
        refuse("optimizer sharded over '" + name +
               "' with params and grads replicated (ZeRO-1): torchtitan has no optimizer-only "
               "sharding; FSDP shards params, grads and optimizer together");
      } else if (p == ir::PlacementMode::Replicated) {
        refuse("grads and optimizer sharded over '" + name +
               "' with params replicated (ZeRO-2): torchtitan's FSDP shards the params too");
      } else {
        refuse("params, grads and optimizer over '" + name +
               "' are neither all replicated nor FSDP-sharded (params gathered, grads and "
               "optimizer sharded)");
      }
    }
    if (run.model->kind == ir::ModelKind::Transformer && run.model->transformer.mtpLayers > 0)
      refuse("mtp_layers = " + Twine(run.model->transformer.mtpLayers) +
             ": torchtitan's trainer has no multi-token prediction modules");
    if (strategy.asyncTensorParallel == ir::AsyncTensorParallel::All && view.tensorDegree > 1)
      refuse("async_tp = true: torchtitan's asynchronous tensor parallelism overlaps only the "
             "forward computation's collectives; its compiler pass fuses a collective with a "
             "single product, and the backward's input gradients of projections that share an "
             "input are summed before their reduce-scatter (write async_tp = forward)");
    if (strategy.asyncTensorParallel == ir::AsyncTensorParallel::WeightGradient &&
        view.tensorDegree > 1)
      refuse("async_tp = wgrad: PyTorch's tensor parallelism reduces a projection's input "
             "gradient before the backward goes on (write async_tp = false, or forward for "
             "torchtitan's asynchronous tensor parallelism)");
    if (strategy.sequenceParallel && view.tensorDegree > 1 &&
        strategy.sequenceParallelInputs == ir::SequenceParallelInputs::Regather)
      refuse("sp_inputs = regather: PyTorch's tensor parallelism keeps each column-parallel "
             "product's gathered input for its weight gradient (write sp_inputs = keep)");
    if (run.crossEntropy == ir::CrossEntropyKind::VocabParallel ||
        run.crossEntropy == ir::CrossEntropyKind::FusedVocabParallel)
      refuse("cross_entropy = " + ir::toString(run.crossEntropy) +
             ": torchtitan's loss is F.cross_entropy over the logits cast to fp32 (write "
             "cross_entropy = unfused)");
    if (strategy.dataParallelOverlap == ir::DataParallelOverlap::None)
      refuse("dp_overlap = none: PyTorch's FSDP2 and DDP reduce each unit's gradients as the "
             "backward produces them, beside the backward (write dp_overlap = grads, the "
             "default)");
    if (strategy.dataParallelOverlap == ir::DataParallelOverlap::All)
      refuse("dp_overlap = all: torchtitan's FSDP2 gathers the parameters before each unit's "
             "forward and has no all-gather of updated parameters after the optimizer step to "
             "overlap (write dp_overlap = grads, the default)");
    if (strategy.expertOverlap == ir::ExpertOverlap::On)
      refuse("ep_overlap = true: Megatron-Core's batch-level overlap of the expert all-to-alls "
             "(--overlap-moe-expert-parallel-comm), for which placec writes no torchtitan "
             "setting (write ep_overlap = false, the default)");
    if (strategy.expertDispatcher != ir::ExpertDispatcher::AllToAll)
      refuse("dispatcher = " + ir::toString(strategy.expertDispatcher) +
             ": placec writes torchtitan's expert parallelism with its all-to-all only (write "
             "dispatcher = alltoall, the default)");
    if (run.kernels == ir::KernelMode::Eager &&
        strategy.asyncTensorParallel != ir::AsyncTensorParallel::Off && view.tensorDegree > 1)
      refuse("kernels = eager with async_tp: torchtitan applies asynchronous tensor parallelism "
             "only under torch.compile (write kernels = fused)");
    if (strategy.activationMode == ir::ActivationMode::RecomputeSelective ||
        strategy.activationMode == ir::ActivationMode::RecomputeAttention ||
        strategy.activationMode == ir::ActivationMode::RecomputeModules)
      refuse("activations = " +
             ir::getActivationModeText(strategy.activationMode, 0, strategy.recomputeModules) +
             ": torchtitan's selective checkpointing keeps every other product's output (\"op\", "
             "recompute(op)) or recomputes every n-th block whole; write recompute(op), recompute "
             "or keep");
    if (strategy.recomputeLayers > 0)
      refuse("activations = recompute(layers = " + Twine(strategy.recomputeLayers) +
             "): torchtitan's layer-wise selective checkpointing recomputes every n-th block, "
             "not the first n of each stage; write recompute, recompute(op) or keep");
    // torchtitan applies FSDP over data and context ranks together (its dp_shard_cp mesh), so
    // a context axis must be FSDP-sharded like the shard axes.
    // Expert parallelism (torchtitan's "dp2ep") is carved out of the FSDP ranks: an expert axis
    // is FSDP-sharded for the dense tensors, and the experts are FSDP-sharded over the other
    // shard axes (their default placement).
    // Its expert group takes the context ranks before FSDP ones (ParallelDims: ep = dp_shard_in_ep
    // · cp [· tp]): expert_context = fold.
    if (view.expertDegree > 1 && view.contextDegree > 1 && !strategy.foldsExpertContext())
      refuse("expert axis " + axisList(mesh, view.expertAxes) + " with sequence axis " +
             axisList(mesh, view.contextAxes) +
             " and expert_context = split: torchtitan's expert group takes the context ranks "
             "before the FSDP ones (write expert_context = fold)");
    for (ir::State state : {ir::State::Params, ir::State::Grads, ir::State::Optimizer})
      for (unsigned index : view.batchAxes)
        if (strategy.getExpertPlacement(state).axes[index].mode !=
            placement(state).axes[index].mode) {
          refuse("expert " + toString(state) + " over '" + mesh.axes[index].name +
                 "' placed unlike the dense " + toString(state) +
                 ": torchtitan shards the experts with FSDP over the same data-parallel ranks "
                 "as the rest of the model, but the expert-parallel ones");
          break;
        }
    std::vector<unsigned> fsdpAxes = view.contextAxes;
    fsdpAxes.insert(fsdpAxes.end(), view.expertAxes.begin(), view.expertAxes.end());
    for (unsigned index : fsdpAxes) {
      ir::PlacementMode p = params.axes[index].mode, g = grads.axes[index].mode,
                        o = optimizer.axes[index].mode;
      if (p == ir::PlacementMode::ShardedWithGather && g == ir::PlacementMode::Sharded &&
          o == ir::PlacementMode::Sharded)
        (params.axes[index].keepAfterForward ? keepAfterForward : reshardAfterForward) = true;
      else
        refuse("params, grads and optimizer over " + ir::toString(mesh.axes[index].kind) +
               " axis '" + mesh.axes[index].name +
               "' are not FSDP-sharded (params gathered, grads and optimizer sharded): "
               "torchtitan shards the model with FSDP over the context- and expert-parallel "
               "ranks too");
    }
    if (keepAfterForward && reshardAfterForward)
      refuse("keep_after_forward differs between the sharded axes: torchtitan has one "
             "fsdp_reshard_after_forward setting");
    // torchtitan's mesh, outermost first: pp, dp_replicate, dp_shard, cp, tp.
    int last = -1;
    for (unsigned index : view.order) {
      const ir::Axis &axis = mesh.axes[index];
      int rank = axis.kind == ir::AxisKind::Layers      ? 0
                 : axis.kind == ir::AxisKind::Tensor    ? 5
                 : axis.kind == ir::AxisKind::Sequence  ? 4
                 : axis.kind == ir::AxisKind::Expert    ? 3
                 : llvm::is_contained(shardAxes, index) ? 2
                                                        : 1;
      if (rank < last) {
        refuse("axis '" + axis.name +
               "' is out of torchtitan's order: its mesh is pp, dp_replicate, dp_shard (its "
               "expert-parallel part innermost), cp, tp from outermost to innermost");
        break;
      }
      last = rank;
    }
    // torchtitan's rotate methods (PyTorch's context-parallel attention): "allgather" gathers
    // the other ranks' K/V shards, "alltoall" passes them from rank to rank as a ring does.
    if (view.contextDegree > 1 && strategy.contextMethod == ir::ContextMethod::AllToAll)
      refuse("context = all_to_all over " + axisList(mesh, view.contextAxes) +
             ": torchtitan's context parallelism passes K/V shards (a ring, \"alltoall\") or "
             "gathers them (\"allgather\"); it has no Ulysses head exchange");
    std::optional<ir::Schedule> pipelineSchedule = schedule();
    // PyTorch's ScheduleInterleaved1F1B runs the micro-batches in ⌊m/p⌋ rounds of m/⌊m/p⌋
    // (torch/distributed/pipelining/schedules.py): no other group.
    if (pipelineSchedule == ir::Schedule::Interleaved && strategy.pipeline->chunks > 1 &&
        view.layersDegree > 1) {
      int64_t m = gradientAccumulation(), p = view.layersDegree;
      int64_t rounds = std::max<int64_t>(1, m / p);
      int64_t group = strategy.pipeline->group > 0 ? strategy.pipeline->group : p;
      if (m % rounds != 0 || m / rounds != group)
        refuse("interleaved micro-batch groups of " + Twine(group) + " over " + Twine(m) +
               " micro-batches: torchtitan's ScheduleInterleaved1F1B runs them in max(1, m / p) "
               "= " +
               Twine(rounds) + " rounds" +
               (m % rounds != 0
                    ? Twine(", which must divide m")
                    : " of " + Twine(m / rounds) + " (write group = " + Twine(m / rounds) + ")"));
    }
    if (pipelineSchedule == ir::Schedule::ZeroBubble)
      refuse("pipeline schedule zero_bubble: torchtitan's zero-bubble schedules run several "
             "stages per rank (InterleavedZeroBubble, ZBVZeroBubble); ZB-H1 over one stage per "
             "rank is neither");
    if (pipelineSchedule == ir::Schedule::DualPipe)
      refuse("pipeline schedule dualpipe: torchtitan runs DualPipeV, the one-copy form");
    if (!view.layersAxes.empty() && strategy.pipeline && !strategy.pipeline->layout.empty())
      refuse("a pipeline layout: Megatron-Core's --pipeline-model-parallel-layout has no "
             "torchtitan equivalent in placec's export (write first and last for uneven edge "
             "stages)");
    // Uneven stages become split points: the module names where each stage after the first
    // starts.
    std::vector<int64_t> splitPoints;
    if (unevenStages()) {
      int64_t layers = run.model->getNumLayers(), stages = view.layersDegree;
      const ir::Pipeline &pipeline = *strategy.pipeline;
      int64_t first = pipeline.firstStageLayers, last = pipeline.lastStageLayers;
      int64_t middleStages = stages - (first > 0) - (last > 0);
      int64_t rest = layers - first - last;
      int64_t share = middleStages > 0 ? rest / middleStages : 0;
      int64_t start = 0;
      for (int64_t stage = 0; stage + 1 < stages; ++stage) {
        start += stage == 0 && first > 0 ? first : share;
        splitPoints.push_back(start);
      }
    }
    if (!view.tensorAxes.empty() && !strategy.sequenceParallel)
      refuse("tensor axis " + axisList(mesh, view.tensorAxes) +
             " without sequence parallelism: torchtitan's tensor parallelism always shards the "
             "replicated activations along the sequence (write activations = shard(" +
             mesh.axes[view.tensorAxes.front()].name + "))");
    for (ir::State state : ir::kAllStates)
      refuseTier(state, "torchtitan keeps every state on the device (enable_cpu_offload moves "
                        "params, grads and optimizer together and is not modelled)");
    if (run.precision == ir::Precision::MixedFP16)
      refuse("precision mixed(fp16): torchtitan trains in bf16 or fp32 (no loss scaling)");
    bool fsdp = !shardAxes.empty() || !view.contextAxes.empty();
    if (run.fp8Gather && !fsdp)
      refuse("mixed(fp8, gather = fp8) without FSDP: torchtitan's FP8 all-gathers are FSDP's");
    if (run.fp8Params)
      refuse("precision " + ir::spellPrecision(run) +
             ": torchtitan keeps the parameters in fp32 and casts them to FP8 for each product "
             "(leave params = fp8 out)");
    if (run.fp8Scaling == ir::Fp8Scaling::Nvfp4)
      refuse("mixed(fp4): placec's NVFP4 is Transformer Engine's recipe; torchtitan exports "
             "tensorwise float8 only (write mixed(fp8))");
    if (run.fp8Saved)
      refuse("mixed(fp8, saved = fp8): torchtitan's float8 linears (torchao) keep their inputs "
             "for the backward in bf16 (leave saved = fp8 out)");
    if (run.fp8Scaling == ir::Fp8Scaling::Mx)
      refuse("mixed(fp8, scaling = mx): placec's MXFP8 is Transformer Engine's recipe; torchtitan "
             "exports tensorwise float8 only (write scaling = tensor or scaling = current)");
    if (run.fp8Attention)
      refuse("attention = fp8: placec's FP8 attention is Transformer Engine's; torchtitan's "
             "attention runs in bf16 (leave attention = fp8 out)");
    // Without FSDP torchtitan's mixed precision is autocast, which it turns off under tensor or
    // pipeline parallelism (torchtitan/distributed/utils.py, maybe_enable_amp): such a job would
    // train in fp32.
    if (!fsdp && run.precision != ir::Precision::FP32 &&
        (view.tensorDegree > 1 || view.layersDegree > 1))
      refuse("precision " + ir::spellPrecision(run) +
             " without FSDP under tensor or pipeline parallelism: torchtitan's mixed precision is "
             "FSDP's, or autocast under data parallelism alone, and it trains such a job in fp32 "
             "(write precision = fp32, or shard the params over a batch axis)");
    // FSDP's MixedPrecisionPolicy accumulates and reduces gradients in
    // training.mixed_precision_reduce, whose one value is "float32" (`params = fp32`, which
    // says exactly what torchtitan keeps, implies it).
    if (fsdp && run.precision != ir::Precision::FP32 && !run.fp32Grads)
      refuse("precision " + ir::spellPrecision(run.precision, run.fp8Gather, false, false) +
             " with FSDP: torchtitan's FSDP accumulates and reduces gradients in fp32 "
             "(training.mixed_precision_reduce = \"float32\", its one value); write " +
             ir::spellPrecision(run.precision, run.fp8Gather, true, true));
    if (run.optimizer != ir::OptimizerKind::Adam)
      refuse(Twine("optimizer '") + ir::toString(run.optimizer) +
             "': torchtitan's optimizers are Adam and AdamW");
    if (refused)
      return;

    int64_t replicate = productOf(mesh, replicateAxes),
            shard = productOf(mesh, shardAxes) * view.expertDegree;
    int64_t microbatches = gradientAccumulation();
    bool pipelined = view.layersDegree > 1;
    os << "# Generated by placec from run '" << run.name << "' (model '" << run.model->name << "', "
       << run.cluster->getNumDevices() << " devices).\n";
    os << "[parallelism]\n";
    os << "data_parallel_replicate_degree = " << replicate << "\n";
    os << "data_parallel_shard_degree = " << shard << "\n";
    if (shard > 1)
      os << "fsdp_reshard_after_forward = \"" << (keepAfterForward ? "never" : "always") << "\"\n";
    // torchtitan's expert_tensor_parallel_degree (aeb3a4baf, 2025-08-13) defaults to 1, the
    // experts whole with the tensor ranks in their group (`expert_tensor = fold`, an expert group
    // of ep · tp); split experts say tp. The group takes the context ranks too (`expert_context =
    // fold`, ep · cp [· tp]).
    if (view.expertDegree > 1) {
      os << "expert_parallel_degree = " << strategy.getExpertGroupDegree() << "\n";
      if (view.tensorDegree > 1)
        os << "expert_tensor_parallel_degree = "
           << (strategy.foldsExpertTensor() ? 1 : view.tensorDegree) << "\n";
    }
    os << "tensor_parallel_degree = " << view.tensorDegree << "\n";
    bool async =
        strategy.asyncTensorParallel != ir::AsyncTensorParallel::Off && view.tensorDegree > 1;
    os << "enable_async_tensor_parallel = " << (async ? "true" : "false") << "\n";
    if (view.contextDegree > 1) {
      os << "context_parallel_degree = " << view.contextDegree << "\n";
      os << "context_parallel_rotate_method = \""
         << (strategy.contextMethod == ir::ContextMethod::Ring ? "alltoall" : "allgather")
         << "\"\n";
    }
    os << "pipeline_parallel_degree = " << view.layersDegree << "\n";
    if (pipelined) {
      StringRef name = "1F1B";
      int64_t chunks = 1;
      switch (*pipelineSchedule) {
      case ir::Schedule::GPipe:
        name = "GPipe";
        break;
      case ir::Schedule::Interleaved:
        name = "Interleaved1F1B";
        chunks = strategy.pipeline->chunks;
        break;
      case ir::Schedule::ZeroBubbleV:
        name = "ZBVZeroBubble";
        chunks = 2;
        break;
      case ir::Schedule::DualPipeV:
        name = "DualPipeV";
        chunks = 2;
        break;
      default:
        break;
      }
      os << "pipeline_parallel_schedule = \"" << name << "\"\n";
      if (!splitPoints.empty()) {
        os << "pipeline_parallel_split_points = [";
        for (size_t i = 0; i < splitPoints.size(); ++i)
          os << (i ? ", " : "") << "\"layers." << splitPoints[i] << "\"";
        os << "]\n";
      }
      os << "pipeline_parallel_microbatch_size = " << run.microBatch << "\n";
      // torchtitan counts the embedding and the output layer as this many layers of its split
      // (its default is one each); written always, so that its split is the plan's.
      bool embedding = strategy.pipeline && strategy.pipeline->embeddingLayer;
      bool loss = strategy.pipeline && strategy.pipeline->lossLayer;
      os << "pipeline_parallel_first_stage_less_layers = " << (embedding ? 1 : 0) << "\n";
      os << "pipeline_parallel_last_stage_less_layers = " << (loss ? 1 : 0) << "\n";
      if (chunks > 1 && run.model->getNumLayers() > 0)
        os << "pipeline_parallel_layers_per_stage = "
           << strategy.pipeline->getSplitLayers(run.model->getNumLayers()) /
                  (view.layersDegree * chunks)
           << "\n";
    }
    os << "\n[training]\n";
    // With a pipeline, the local batch is split into micro-batches; without one, the micro-batch
    // is the local batch and the rest of the step is gradient accumulation.
    os << "local_batch_size = " << (pipelined ? run.microBatch * microbatches : run.microBatch)
       << "\n";
    os << "global_batch_size = " << run.globalBatch << "\n";
    if (run.model->kind == ir::ModelKind::Transformer)
      os << "seq_len = " << run.model->transformer.seq << "\n";
    os << "mixed_precision_param = \""
       << (run.precision == ir::Precision::FP32 ? "float32" : "bfloat16") << "\"\n";
    os << "mixed_precision_reduce = \"float32\"\n";
    // placec's fused kernels are torch.compile's; eager is torchtitan's default.
    os << "compile = " << (run.kernels == ir::KernelMode::Fused ? "true" : "false") << "\n";
    // The model, when it is one of torchtitan's llama3 flavors; torchao's float8 training with
    // tensorwise scaling keeps the output layer in bf16, as placec's mixed(fp8) does.
    const char *flavor = run.model->kind == ir::ModelKind::Transformer
                             ? detail::findTorchtitanFlavor(run.model->transformer)
                             : nullptr;
    if (flavor || run.precision == ir::Precision::MixedFP8)
      os << "\n[model]\n";
    if (flavor)
      os << "name = \"llama3\"\nflavor = \"" << flavor << "\"\n";
    if (run.precision == ir::Precision::MixedFP8) {
      os << "converters = [\"float8\"]\n";
      os << "\n[float8]\n";
      os << "enable_fsdp_float8_all_gather = " << (run.fp8Gather ? "true" : "false") << "\n";
      os << "filter_fqns = [\"output\"]\n";
    }
    os << "\n[optimizer]\nname = \"Adam\"\n";
    os << "\n[activation_checkpoint]\n";
    switch (strategy.activationMode) {
    case ir::ActivationMode::Keep:
      os << "mode = \"none\"\n";
      break;
    case ir::ActivationMode::RecomputeFull:
      os << "mode = \"full\"\n";
      break;
    case ir::ActivationMode::RecomputeSelective:
    case ir::ActivationMode::RecomputeAttention:
    case ir::ActivationMode::RecomputeModules:
      break; // Refused.
    case ir::ActivationMode::RecomputeOps:
      os << "mode = \"selective\"\nselective_ac_option = \"op\"\n";
      break;
    }
  }

  const ir::Run &run;
  const ir::Strategy &strategy;
  const ir::Mesh &mesh;
  MeshView view;
  Target target;
  DiagnosticEngine &diags;
  SMLoc loc;
  bool refused = false;
};

} // namespace

bool exportRun(const ir::Run &run, Target target, DiagnosticEngine &diags, raw_ostream &os) {
  if (!run.strategy || !run.model || !run.cluster) {
    diags.error(run.loc, "cannot export run '" + run.name + "': it is incomplete", "export");
    return false;
  }
  return Exporter(run, target, diags).exportTo(os);
}

std::vector<std::string> getExportRefusals(const ir::Run &run, Target target) {
  std::vector<std::string> refusals;
  if (!run.strategy || !run.model || !run.cluster)
    return {"it is incomplete"};
  SourceMgr sourceMgr;
  DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  Exporter exporter(run, target, diags);
  exporter.refusals = &refusals;
  // A stream of its own: the search asks for refusals from several threads at once, and
  // llvm::nulls() is one buffered stream shared by all of them.
  raw_null_ostream discarded;
  exporter.exportTo(discarded);
  return refusals;
}

std::vector<search::BridgeVerdict> getBridgeVerdicts(const ir::Run &run, StringRef only) {
  std::vector<search::BridgeVerdict> verdicts;
  for (Target target : {Target::Megatron, Target::Torchtitan, Target::DeepSpeed}) {
    if (!only.empty() && only != toString(target))
      continue;
    std::vector<std::string> refusals = getExportRefusals(run, target);
    verdicts.push_back(
        {toString(target).str(), refusals.empty() ? std::string() : refusals.front()});
  }
  return verdicts;
}

} // namespace placec::bridge
