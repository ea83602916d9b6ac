// Exports a verified run as a DeepSpeed JSON config, Megatron-LM flags or a torchtitan TOML job
// config, refusing (rule `export`) every part of the placement that the target cannot express.
#include "placec/backends/Export.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSwitch.h"
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

/// The batch axes on which a state has `mode` (with `all`, those of size 1 too).
std::vector<unsigned> axesWithMode(const MeshView &view, const ir::StatePlacement &placement,
                                   ir::PlacementMode mode, bool all = false) {
  std::vector<unsigned> axes;
  for (unsigned index : all ? view.allBatchAxes : view.batchAxes)
    if (index < placement.axes.size() && placement.axes[index].mode == mode)
      axes.push_back(index);
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

  bool exportTo(raw_ostream &os) {
    std::string text;
    raw_string_ostream out(text);
    if (!view.contextAxes.empty())
      refuse("sequence axis " + axisList(mesh, view.contextAxes) +
             ": context parallelism is not exported yet");
    if (!view.expertAxes.empty() || run.model->isMoe())
      refuse("mixture-of-experts layers and expert axes are not exported");
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
    diags.error(loc, "cannot export run '" + run.name + "' to " + toString(target) + ": " + message,
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
    refuseKeepAfterForward("DeepSpeed has no setting that keeps gathered parameters from the "
                           "forward to the backward");
    refuseTier(ir::State::Grads, "DeepSpeed offloads gradients only together with the optimizer "
                                 "(offload_optimizer); place the optimizer there instead");

    const ir::StatePlacement &params = placement(ir::State::Params);
    const ir::StatePlacement &grads = placement(ir::State::Grads);
    const ir::StatePlacement &optimizer = placement(ir::State::Optimizer);
    // Axes of size 1 are left out, unless every batch axis has size 1 (a single rank).
    bool single = view.batchAxes.empty();
    std::vector<unsigned> optShard =
        axesWithMode(view, optimizer, ir::PlacementMode::Sharded, single);
    std::vector<unsigned> gradShard = axesWithMode(view, grads, ir::PlacementMode::Sharded, single);
    std::vector<unsigned> paramGather =
        axesWithMode(view, params, ir::PlacementMode::ShardedWithGather, single);
    const std::vector<unsigned> &all = single ? view.allBatchAxes : view.batchAxes;

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
    if (params.tier != ir::Tier::Device && stage != 3)
      refuse("params at tier '" + ir::toString(params.tier) +
             "' without ZeRO stage 3: DeepSpeed offloads parameters (offload_param) only in "
             "stage 3");
    if (optimizer.tier != ir::Tier::Device && stage < 1)
      refuse("optimizer at tier '" + ir::toString(optimizer.tier) +
             "' without sharding: DeepSpeed offloads the optimizer (offload_optimizer) only in "
             "ZeRO stages 1-3");
    if (strategy.activationMode == ir::ActivationMode::RecomputeSelective)
      refuse("activations = recompute(selective): DeepSpeed's activation checkpointing recomputes "
             "whole checkpointed functions (recompute)");
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
    if (refused)
      return;

    json::OStream json(os, 2);
    json.object([&] {
      json.attribute("train_batch_size", run.globalBatch);
      json.attribute("train_micro_batch_size_per_gpu", run.microBatch);
      json.attribute("gradient_accumulation_steps", gradientAccumulation());
      if (run.precision == ir::Precision::MixedBF16)
        json.attributeObject("bf16", [&] { json.attribute("enabled", true); });
      if (run.precision == ir::Precision::MixedFP16)
        json.attributeObject("fp16", [&] { json.attribute("enabled", true); });
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

  /// Megatron orders ranks tensor innermost, then data, then pipeline outermost.
  void checkMegatronOrder() {
    int last = -1; // 0 pipeline, 1 data, 2 tensor, in the order Megatron nests them.
    for (unsigned index : view.order) {
      int rank = mesh.axes[index].kind == ir::AxisKind::Layers  ? 0
                 : mesh.axes[index].kind == ir::AxisKind::Batch ? 1
                                                                : 2;
      if (rank < last) {
        refuse("axis '" + mesh.axes[index].name + "' is inside a " +
               (rank == 0 ? "data or tensor" : "tensor") +
               " axis: Megatron-LM numbers ranks tensor innermost, then data, then pipeline "
               "outermost (write the mesh as [pp, dp, tp])");
        return;
      }
      last = rank;
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
    checkMegatronOrder();
    refuseShardedParams();
    std::vector<unsigned> paramGather =
        axesWithMode(view, placement(ir::State::Params), ir::PlacementMode::ShardedWithGather);
    if (!paramGather.empty())
      refuse("params gathered over " + axisList(mesh, paramGather) +
             ": Megatron-LM has no ZeRO-3 (its distributed optimizer shards the optimizer state "
             "only)");
    std::vector<unsigned> gradShard =
        axesWithMode(view, placement(ir::State::Grads), ir::PlacementMode::Sharded);
    if (!gradShard.empty())
      refuse("grads sharded over " + axisList(mesh, gradShard) +
             ": Megatron-LM keeps full gradient buffers (the distributed optimizer reduce-scatters "
             "into them but does not free them)");
    std::vector<unsigned> optShard =
        axesWithMode(view, placement(ir::State::Optimizer), ir::PlacementMode::Sharded);
    if (!optShard.empty() && optShard != view.batchAxes)
      refuse("optimizer sharded over " + axisList(mesh, optShard) + " but not over " +
             axisList(mesh, ArrayRef<unsigned>(view.batchAxes)) +
             ": --use-distributed-optimizer shards over the whole data-parallel group");
    for (ir::State state : ir::kAllStates)
      refuseTier(state, "Megatron-LM's flags place every state on the device");
    if (strategy.pipeline && strategy.pipeline->schedule == ir::Schedule::GPipe &&
        !view.layersAxes.empty())
      refuse("pipeline schedule gpipe: Megatron-LM runs 1F1B or interleaved 1F1B");
    if (refused)
      return;

    auto flag = [&](StringRef name, const Twine &value) { os << name << " " << value << "\n"; };
    flag("--tensor-model-parallel-size", Twine(view.tensorDegree));
    flag("--pipeline-model-parallel-size", Twine(view.layersDegree));
    if (strategy.pipeline && strategy.pipeline->schedule == ir::Schedule::Interleaved &&
        view.layersDegree > 1)
      flag("--num-layers-per-virtual-pipeline-stage",
           Twine(model.getNumLayers() / (view.layersDegree * strategy.pipeline->chunks)));
    if (strategy.sequenceParallel)
      os << "--sequence-parallel\n";
    if (!optShard.empty())
      os << "--use-distributed-optimizer\n";
    flag("--micro-batch-size", Twine(run.microBatch));
    flag("--global-batch-size", Twine(run.globalBatch));
    if (run.precision == ir::Precision::MixedBF16)
      os << "--bf16\n";
    if (run.precision == ir::Precision::MixedFP16)
      os << "--fp16\n";
    switch (run.optimizer) {
    case ir::OptimizerKind::Adam:
      flag("--optimizer", "adam");
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
      flag("--recompute-method", "uniform");
      flag("--recompute-num-layers", "1");
      break;
    case ir::ActivationMode::RecomputeSelective:
      flag("--recompute-granularity", "selective");
      break;
    }
    const ir::TransformerConfig &config = model.transformer;
    flag("--num-layers", Twine(config.layers));
    flag("--hidden-size", Twine(config.hidden));
    flag("--num-attention-heads", Twine(config.heads));
    flag("--ffn-hidden-size", Twine(config.ffn ? config.ffn : 4 * config.hidden));
    flag("--seq-length", Twine(config.seq));
    flag("--max-position-embeddings", Twine(config.seq));
    flag("--vocab-size", Twine(config.vocab));
    if (config.mlp == ir::MlpActivation::Swiglu)
      os << "--swiglu\n";
    if (config.norm == ir::NormKind::RmsNorm)
      flag("--normalization", "RMSNorm");
    if (!config.bias)
      os << "--disable-bias-linear\n";
    if (config.positions == ir::PositionKind::Rope)
      flag("--position-embedding-type", "rope");
    if (!config.tiedEmbeddings)
      os << "--untie-embeddings-and-output-weights\n";
  }

  // torchtitan ------------------------------------------------------------------------------

  void writeTorchtitan(raw_ostream &os) {
    if (view.tensorAxes.size() > 1)
      refuse("several tensor axes " + axisList(mesh, view.tensorAxes) +
             ": torchtitan has one tensor-parallel dimension");
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
    if (keepAfterForward && reshardAfterForward)
      refuse("keep_after_forward differs between the sharded axes: torchtitan has one "
             "fsdp_reshard_after_forward setting");
    // torchtitan's mesh, outermost first: pp, dp_replicate, dp_shard, tp.
    int last = -1;
    for (unsigned index : view.order) {
      const ir::Axis &axis = mesh.axes[index];
      int rank = axis.kind == ir::AxisKind::Layers      ? 0
                 : axis.kind == ir::AxisKind::Tensor    ? 3
                 : llvm::is_contained(shardAxes, index) ? 2
                                                        : 1;
      if (rank < last) {
        refuse("axis '" + axis.name +
               "' is out of torchtitan's order: its mesh is pp, dp_replicate, dp_shard, tp from "
               "outermost to innermost");
        break;
      }
      last = rank;
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
    if (run.optimizer != ir::OptimizerKind::Adam)
      refuse(Twine("optimizer '") + ir::toString(run.optimizer) +
             "': torchtitan's optimizers are Adam and AdamW");
    if (refused)
      return;

    int64_t replicate = productOf(mesh, replicateAxes), shard = productOf(mesh, shardAxes);
    int64_t microbatches = gradientAccumulation();
    bool pipelined = view.layersDegree > 1;
    os << "# Generated by placec from run '" << run.name << "' (model '" << run.model->name << "', "
       << run.cluster->getNumDevices() << " devices).\n";
    os << "[parallelism]\n";
    os << "data_parallel_replicate_degree = " << replicate << "\n";
    os << "data_parallel_shard_degree = " << shard << "\n";
    if (shard > 1)
      os << "fsdp_reshard_after_forward = \"" << (keepAfterForward ? "never" : "always") << "\"\n";
    os << "tensor_parallel_degree = " << view.tensorDegree << "\n";
    os << "enable_async_tensor_parallel = false\n";
    os << "pipeline_parallel_degree = " << view.layersDegree << "\n";
    if (pipelined) {
      StringRef schedule = "1F1B";
      if (strategy.pipeline && strategy.pipeline->schedule == ir::Schedule::GPipe)
        schedule = "GPipe";
      if (strategy.pipeline && strategy.pipeline->schedule == ir::Schedule::Interleaved)
        schedule = "Interleaved1F1B";
      os << "pipeline_parallel_schedule = \"" << schedule << "\"\n";
      os << "pipeline_parallel_microbatch_size = " << run.microBatch << "\n";
      if (schedule == "Interleaved1F1B" && run.model->getNumLayers() > 0)
        os << "pipeline_parallel_layers_per_stage = "
           << run.model->getNumLayers() / (view.layersDegree * strategy.pipeline->chunks) << "\n";
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

} // namespace placec::bridge
