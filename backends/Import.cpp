// Imports a DeepSpeed JSON config or Megatron-LM flags as a Place strategy and run, so that the
// configuration a user already has can be checked and reported on. Unknown keys and flags are
// errors at their line and column, with the closest known spelling.
#include "ImportSupport.h"
#include "placec/backends/Export.h"
#include "placec/passes/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

using namespace llvm;

namespace placec::bridge {

namespace detail {

/// The names of the prelude's strategies, which no declaration may reuse.
bool isPreludeName(StringRef name) {
  return StringSwitch<bool>(name)
      .Cases("dp", "zero1", "zero2", "zero3", "fsdp", "hsdp", true)
      .Cases("tp", "sp", "pp", "offload_optimizer", "offload_params", true)
      .Default(false);
}

/// A Place name from a file name or a user's choice.
std::string makeName(StringRef wanted, StringRef inputName, StringRef fallback) {
  std::string name = wanted.str();
  if (name.empty() && !inputName.starts_with("<"))
    name = sys::path::stem(inputName).str();
  for (char &c : name)
    if (!isAlnum(c) && c != '_')
      c = '_';
  if (name.empty() || name == "-" || isDigit(name[0]))
    name = fallback.str() + (name.empty() || name == "-" ? "" : "_" + name);
  if (isPreludeName(name))
    name += "_imported";
  return name;
}

std::optional<json::Value> parseJsonDocument(StringRef text, DiagnosticEngine &diags) {
  Expected<json::Value> parsed = json::parse(text);
  if (parsed)
    return std::move(*parsed);
  // json::ParseError logs "[line:column, byte=offset]: message"; the offset places the error.
  std::string message = toString(parsed.takeError());
  size_t offset = 0;
  StringRef rest = message;
  if (size_t at = rest.find("byte="); at != StringRef::npos) {
    StringRef digits = rest.drop_front(at + 5).take_while(isDigit);
    if (digits.getAsInteger(10, offset) || offset > text.size())
      offset = 0;
  }
  if (size_t colon = rest.find("]: "); colon != StringRef::npos)
    rest = rest.drop_front(colon + 3);
  diags.error(SMLoc::getFromPointer(text.data() + offset), "not a JSON document: " + rest);
  return std::nullopt;
}

/// The closest of `candidates` to `word`, when close enough to be a likely misspelling.
std::string closest(StringRef word, ArrayRef<StringRef> candidates, unsigned maxDistance) {
  unsigned best = maxDistance + 1;
  std::string found;
  for (StringRef candidate : candidates) {
    unsigned distance = word.edit_distance(candidate, true, best);
    if (distance < best) {
      best = distance;
      found = candidate.str();
    }
  }
  return found;
}

void writePlace(const Imported &imported, const ImportOptions &options, StringRef source,
                StringRef name, StringRef modelText, StringRef modelName, raw_ostream &os) {
  os << "// Imported by placec from " << options.inputName << " (" << source << ").\n";
  if (!options.fromPath.empty())
    os << "import \"" << options.fromPath << "\";\n";
  os << "\n";
  if (!modelText.empty())
    os << modelText << "\n";
  os << "strategy " << name << " {\n  mesh [";
  for (size_t i = 0; i < imported.axes.size(); ++i) {
    if (i)
      os << ", ";
    os << imported.axes[i].first;
    if (!imported.axisKinds[i].empty())
      os << ": " << imported.axisKinds[i];
    os << " = " << imported.axes[i].second;
  }
  os << "];\n";
  if (!imported.pipeline.empty())
    os << "  pipeline = " << imported.pipeline << ";\n";
  if (!imported.context.empty())
    os << "  context = " << imported.context << ";\n";
  if (imported.asyncTp != ir::AsyncTensorParallel::Off)
    os << "  async_tp = " << ir::toString(imported.asyncTp) << ";\n";
  if (!imported.spInputs.empty())
    os << "  sp_inputs = " << imported.spInputs << ";\n";
  if (imported.dpOverlap != ir::DataParallelOverlap::Grads)
    os << "  dp_overlap = " << ir::toString(imported.dpOverlap) << ";\n";
  if (imported.gradReduce != ir::GradReduce::ReduceScatter)
    os << "  grad_reduce = " << ir::toString(imported.gradReduce) << ";\n";
  if (imported.epOverlap != ir::ExpertOverlap::Off)
    os << "  ep_overlap = " << ir::toString(imported.epOverlap) << ";\n";
  if (imported.dispatcher != ir::ExpertDispatcher::AllToAll)
    os << "  dispatcher = " << ir::toString(imported.dispatcher) << ";\n";
  if (imported.expertTensor != ir::ExpertTensor::Split)
    os << "  expert_tensor = " << ir::toString(imported.expertTensor) << ";\n";
  if (imported.expertContext != ir::ExpertTensor::Split)
    os << "  expert_context = " << ir::toString(imported.expertContext) << ";\n";
  auto line = [&](StringRef state, StringRef value) {
    if (!value.empty())
      os << "  " << state << " = " << value << ";\n";
  };
  line("params", imported.params);
  line("grads", imported.grads);
  line("optimizer", imported.optimizer);
  line("activations", imported.activations);
  line("expert_params", imported.expertParams);
  line("expert_grads", imported.expertGrads);
  line("expert_optimizer", imported.expertOptimizer);
  os << "}\n\nrun " << name << " {\n";
  os << "  model = " << modelName << ";\n";
  os << "  cluster = " << options.clusterName << ";\n";
  os << "  strategy = " << name << ";\n";
  os << "  micro_batch = " << imported.microBatch << ";\n";
  os << "  global_batch = " << imported.globalBatch << ";\n";
  os << "  precision = " << imported.precision << ";\n";
  os << "  optimizer = " << imported.optimizerKind << ";\n";
  if (!imported.crossEntropy.empty())
    os << "  cross_entropy = " << imported.crossEntropy << ";\n";
  if (!imported.kernels.empty())
    os << "  kernels = " << imported.kernels << ";\n";
  if (!imported.paramGather.empty())
    os << "  param_gather = " << imported.paramGather << ";\n";
  if (!imported.contextMerge.empty())
    os << "  context_merge = " << imported.contextMerge << ";\n";
  if (!imported.gradAccumulation.empty())
    os << "  grad_accumulation = " << imported.gradAccumulation << ";\n";
  os << "}\n";
}

} // namespace detail

namespace {

using namespace detail;

//===----------------------------------------------------------------------===//
// DeepSpeed
//===----------------------------------------------------------------------===//

/// The keys placec knows in a DeepSpeed config, by path. `*` after a path means its contents are
/// free-form (optimizer parameters, monitoring settings) and not checked.
constexpr const char *kDeepSpeedKeys[] = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "steps_per_print",
    "wall_clock_breakdown",
    "dump_state",
    "prescale_gradients",
    "gradient_predivide_factor",
    "communication_data_type",
    "sparse_gradients",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer",
    "memory_breakdown",
    "seed",
    "sequence_parallel_size",
    "optimizer",
    "optimizer.type",
    "optimizer.params*",
    "scheduler*",
    "fp16",
    "fp16.enabled",
    "fp16.auto_cast",
    "fp16.loss_scale",
    "fp16.initial_scale_power",
    "fp16.loss_scale_window",
    "fp16.hysteresis",
    "fp16.consecutive_hysteresis",
    "fp16.min_loss_scale",
    "bf16",
    "bf16.enabled",
    "bf16.immediate_grad_update",
    "data_types",
    "data_types.grad_accum_dtype",
    "amp*",
    "zero_optimization",
    "zero_optimization.stage",
    "zero_optimization.offload_optimizer",
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_optimizer.nvme_path",
    "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_optimizer.buffer_count",
    "zero_optimization.offload_optimizer.fast_init",
    "zero_optimization.offload_optimizer.ratio",
    "zero_optimization.offload_param",
    "zero_optimization.offload_param.device",
    "zero_optimization.offload_param.nvme_path",
    "zero_optimization.offload_param.pin_memory",
    "zero_optimization.offload_param.buffer_count",
    "zero_optimization.offload_param.buffer_size",
    "zero_optimization.offload_param.max_in_cpu",
    "zero_optimization.overlap_comm",
    "zero_optimization.contiguous_gradients",
    "zero_optimization.reduce_scatter",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.allgather_partitions",
    "zero_optimization.allgather_bucket_size",
    "zero_optimization.round_robin_gradients",
    "zero_optimization.sub_group_size",
    "zero_optimization.elastic_checkpoint",
    "zero_optimization.ignore_unused_parameters",
    "zero_optimization.load_from_fp32_weights",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
    "zero_optimization.stage3_max_live_parameters",
    "zero_optimization.stage3_max_reuse_distance",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    "zero_optimization.stage3_gather_fp16_weights_on_model_save",
    "zero_optimization.zero_hpz_partition_size",
    "zero_optimization.zero_quantized_weights",
    "zero_optimization.zero_quantized_gradients",
    "zero_optimization.mics_shard_size",
    "zero_optimization.mics_hierarchical_params_gather",
    "zero_optimization.memory_efficient_linear",
    "activation_checkpointing",
    "activation_checkpointing.partition_activations",
    "activation_checkpointing.cpu_checkpointing",
    "activation_checkpointing.contiguous_memory_optimization",
    "activation_checkpointing.number_checkpoints",
    "activation_checkpointing.synchronize_checkpoint_boundary",
    "activation_checkpointing.profile",
    "aio*",
    "flops_profiler*",
    "tensorboard*",
    "wandb*",
    "csv_monitor*",
    "comms_logger*",
    "checkpoint*",
    "data_types*",
};

class DeepSpeedImporter {
public:
  DeepSpeedImporter(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags)
      : options(options), diags(diags),
        text(diags.getSourceMgr().getMemoryBuffer(bufferId)->getBuffer()), keys(text) {
    for (const char *key : kDeepSpeedKeys) {
      StringRef path(key);
      if (path.consume_back("*"))
        freeForm.insert(path);
      known.insert(path);
    }
  }

  bool run(raw_ostream &os) {
    std::optional<json::Value> parsed = parseJsonDocument(text, diags);
    if (!parsed)
      return false;
    const json::Object *root = parsed->getAsObject();
    if (!root) {
      diags.error(SMLoc::getFromPointer(text.data()), "a DeepSpeed config is a JSON object");
      return false;
    }
    checkKeys(*root, "");
    if (diags.hasErrors())
      return false;
    Imported imported;
    if (!translate(*root, imported))
      return false;
    std::string name = makeName(options.name, options.inputName, "deepspeed");
    writePlace(imported, options, "DeepSpeed", name, "", options.modelName, os);
    return true;
  }

private:
  SMLoc locOf(StringRef path) const {
    size_t offset = keys.find(path);
    return SMLoc::getFromPointer(text.data() + (offset == StringRef::npos ? 0 : offset));
  }

  /// Unknown keys are errors: DeepSpeed ignores them silently, so a misspelled key would switch a
  /// setting off without a word.
  void checkKeys(const json::Object &object, const std::string &prefix) {
    std::vector<std::string> names;
    for (const auto &entry : object)
      names.push_back(entry.first.str());
    // In the order they are written.
    llvm::sort(names, [&](const std::string &a, const std::string &b) {
      return keys.find(prefix.empty() ? a : prefix + "." + a) <
             keys.find(prefix.empty() ? b : prefix + "." + b);
    });
    for (const std::string &key : names) {
      std::string path = prefix.empty() ? key : prefix + "." + key;
      if (!known.contains(path)) {
        std::vector<StringRef> siblings;
        for (const StringRef candidate : known.keys()) {
          StringRef parent = candidate.rsplit('.').first;
          if ((prefix.empty() && !candidate.contains('.')) ||
              (!prefix.empty() && candidate.contains('.') && parent == prefix))
            siblings.push_back(candidate.rsplit('.').second.empty() ? candidate
                                                                    : candidate.rsplit('.').second);
        }
        llvm::sort(siblings);
        std::string suggestion = closest(key, siblings, std::max<unsigned>(3, key.size() / 3));
        diags.error(locOf(path),
                    "unknown DeepSpeed key '" + path + "'" +
                        (suggestion.empty() ? std::string("; DeepSpeed would ignore it silently")
                                            : "; did you mean '" + suggestion + "'?"));
        continue;
      }
      if (freeForm.contains(path))
        continue;
      if (const json::Object *child = object.get(key)->getAsObject())
        checkKeys(*child, path);
    }
  }

  const json::Value *lookup(const json::Object &root, StringRef path) const {
    const json::Object *object = &root;
    SmallVector<StringRef> parts;
    path.split(parts, '.');
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const json::Value *value = object->get(parts[i]);
      if (!value || !(object = value->getAsObject()))
        return nullptr;
    }
    return object->get(parts.back());
  }

  /// A whole number at `path`; nullopt when absent. Reports `"auto"` and other non-numbers.
  std::optional<int64_t> getInt(const json::Object &root, StringRef path, int64_t min = 1) {
    const json::Value *value = lookup(root, path);
    if (!value || value->kind() == json::Value::Null)
      return std::nullopt;
    if (std::optional<int64_t> number = value->getAsInteger()) {
      if (*number >= min)
        return number;
    } else if (std::optional<double> real = value->getAsNumber()) {
      if (*real == std::floor(*real) && *real >= double(min) && *real < 9e15)
        return static_cast<int64_t>(*real);
    } else if (value->getAsString() == std::optional<StringRef>("auto")) {
      diags.error(locOf(path), "'" + path +
                                   "' is \"auto\", which the Hugging Face Trainer "
                                   "fills in; write the number it takes");
      return std::nullopt;
    }
    diags.error(locOf(path), "'" + path + "' must be a whole number of at least " + Twine(min));
    return std::nullopt;
  }

  bool getBool(const json::Object &root, StringRef path) {
    const json::Value *value = lookup(root, path);
    if (!value)
      return false;
    if (std::optional<bool> flag = value->getAsBoolean())
      return *flag;
    if (value->getAsString() == std::optional<StringRef>("auto")) {
      diags.error(locOf(path), "'" + path + "' is \"auto\"; write true or false");
      return false;
    }
    diags.error(locOf(path), "'" + path + "' must be true or false");
    return false;
  }

  /// `offload_*.device`: the Place tier, or empty for none.
  std::string getTier(const json::Object &root, StringRef path) {
    const json::Value *value = lookup(root, path);
    if (!value)
      return "";
    std::optional<StringRef> device = value->getAsString();
    if (device == std::optional<StringRef>("cpu"))
      return "host";
    if (device == std::optional<StringRef>("nvme"))
      return "nvme";
    if (device == std::optional<StringRef>("none"))
      return "";
    diags.error(locOf(path), "'" + path + "' must be \"cpu\", \"nvme\" or \"none\"");
    return "";
  }

  /// `dp_overlap` from `zero_optimization.overlap_comm`, whose default is true at stage 3 only
  /// (deepspeed/runtime/zero/config.py), over `ranks` data-parallel ranks (data and sequence).
  /// Without ZeRO, and at stage 1 under bf16 with fp32 gradients (its bf16 optimizer, which has
  /// no reduction of its own), the engine all-reduces the gradients after the backward at the
  /// accumulation boundary (allreduce_gradients in deepspeed/runtime/engine.py): `none`, and
  /// overlap_comm is not read. The ZeRO optimizer at stage 1 reduces them during the last
  /// micro-batch's backward on a stream of its own with overlap_comm (`grads`), after the
  /// backward without it (`none`; reduce_gradients in deepspeed/runtime/zero/stage_1_and_2.py).
  /// At stages 2 and 3 each micro-batch's gradients are reduced during its backward, on the
  /// compute stream without overlap_comm (reduce_ipg_grads), which Place does not express: its
  /// sharded gradients are reduced beside the backward.
  bool translateOverlap(const json::Object &root, int64_t stage, bool bf16Optimizer, int64_t ranks,
                        Imported &imported) {
    const char *key = "zero_optimization.overlap_comm";
    bool written = lookup(root, key) != nullptr;
    bool overlap = written ? getBool(root, key) : stage == 3;
    if (diags.hasErrors())
      return false;
    if ((stage == 0 || bf16Optimizer) && overlap) {
      diags.error(locOf(key),
                  Twine("'zero_optimization.overlap_comm' is true ") +
                      (stage == 0 ? "without ZeRO" : "with bf16 and fp32 gradients at stage 1") +
                      ", where DeepSpeed ignores it: its " +
                      (stage == 0 ? "engine" : "bf16 optimizer") +
                      " all-reduces the gradients after the backward (write false or leave it "
                      "out)");
      return false;
    }
    if (ranks <= 1 || overlap)
      return true;
    if (stage <= 1) {
      imported.dpOverlap = ir::DataParallelOverlap::None;
      return true;
    }
    std::string stageName = "ZeRO stage " + std::to_string(stage);
    std::string what = written
                           ? "'zero_optimization.overlap_comm' is false at " + stageName
                           : stageName + " without 'zero_optimization.overlap_comm' (DeepSpeed's "
                                         "default is false below stage 3)";
    diags.error(locOf(written ? key : "zero_optimization.stage"),
                what + ": each micro-batch's gradients are reduced during its backward on the "
                       "compute stream, which Place does not express (its sharded gradients are "
                       "reduced beside the backward); write \"overlap_comm\": true");
    return false;
  }

  /// The product of a batch's factors, or an error at `path` when it does not fit in 64 bits
  /// (a batch size no run has, which would otherwise wrap around).
  std::optional<int64_t> batchProduct(std::initializer_list<int64_t> factors, StringRef path) {
    std::optional<int64_t> product = checkedProduct(factors);
    if (!product)
      diags.error(locOf(path), "'" + path +
                                   "' is too large: the batch it makes (micro-batch × "
                                   "accumulation steps × data-parallel ranks) does not fit in 64 "
                                   "bits");
    return product;
  }

  bool translate(const json::Object &root, Imported &imported) {
    std::optional<int64_t> train = getInt(root, "train_batch_size");
    std::optional<int64_t> micro = getInt(root, "train_micro_batch_size_per_gpu");
    std::optional<int64_t> accumulation = getInt(root, "gradient_accumulation_steps");
    std::optional<int64_t> stageValue = getInt(root, "zero_optimization.stage", 0);
    std::optional<int64_t> hpz = getInt(root, "zero_optimization.zero_hpz_partition_size");
    std::optional<int64_t> mics = getInt(root, "zero_optimization.mics_shard_size");
    std::string optimizerTier = getTier(root, "zero_optimization.offload_optimizer.device");
    std::string paramsTier = getTier(root, "zero_optimization.offload_param.device");
    bool bf16 = getBool(root, "bf16.enabled"), fp16 = getBool(root, "fp16.enabled");
    bool cpuCheckpointing = getBool(root, "activation_checkpointing.cpu_checkpointing");
    int64_t ulysses = getInt(root, "sequence_parallel_size").value_or(1);
    if (diags.hasErrors())
      return false;
    SMLoc start = SMLoc::getFromPointer(text.data());

    // Batch: train = micro × accumulation × data-parallel ranks; DeepSpeed derives a missing one.
    // Ulysses' sequence-parallel ranks share their samples, so they are not data-parallel ranks.
    int64_t devices = options.devices;
    if (devices > 0 && ulysses > 1) {
      if (devices % ulysses != 0) {
        diags.error(locOf("sequence_parallel_size"),
                    "sequence_parallel_size " + Twine(ulysses) + " does not divide the " +
                        Twine(devices) + " devices of cluster '" + options.clusterName + "'");
        return false;
      }
      devices /= ulysses;
    }
    if (devices <= 0) {
      if (!train || !micro) {
        diags.error(start, "the data-parallel size is unknown: give the cluster (--cluster with "
                           "--from) or both train_batch_size and train_micro_batch_size_per_gpu");
        return false;
      }
      int64_t steps = accumulation.value_or(1);
      std::optional<int64_t> perRank =
          batchProduct({*micro, steps}, "train_micro_batch_size_per_gpu");
      if (!perRank)
        return false;
      if (*train % *perRank != 0) {
        diags.error(locOf("train_batch_size"),
                    "train_batch_size " + Twine(*train) + " is not a multiple of " +
                        "train_micro_batch_size_per_gpu × gradient_accumulation_steps = " +
                        Twine(*perRank));
        return false;
      }
      devices = *train / *perRank;
    }
    if (!micro && !train) {
      diags.error(start, "give train_micro_batch_size_per_gpu or train_batch_size");
      return false;
    }
    int64_t steps = accumulation.value_or(0);
    if (!micro) {
      if (!steps)
        steps = 1;
      std::optional<int64_t> ranks = batchProduct({steps, devices}, "gradient_accumulation_steps");
      if (!ranks)
        return false;
      micro = *train / *ranks;
      if (*micro < 1 || *train % *ranks != 0) {
        diags.error(locOf("train_batch_size"),
                    "train_batch_size " + Twine(*train) + " is not a multiple of " + Twine(*ranks) +
                        " (accumulation steps × " + Twine(devices) + " data-parallel ranks)");
        return false;
      }
    } else if (!steps) {
      std::optional<int64_t> perStep =
          batchProduct({*micro, devices}, "train_micro_batch_size_per_gpu");
      if (!perStep)
        return false;
      steps = train ? *train / *perStep : 1;
    }
    std::optional<int64_t> product =
        batchProduct({*micro, steps, devices}, accumulation ? "gradient_accumulation_steps"
                                                            : "train_micro_batch_size_per_gpu");
    if (!product)
      return false;
    int64_t global = *product;
    if (train && *train != global) {
      diags.error(locOf("train_batch_size"),
                  "train_batch_size " + Twine(*train) + " is not train_micro_batch_size_per_gpu " +
                      Twine(*micro) + " × gradient_accumulation_steps " + Twine(steps) + " × " +
                      Twine(devices) + " data-parallel ranks = " + Twine(global));
      return false;
    }
    imported.microBatch = *micro;
    imported.globalBatch = global;

    // Precision and optimizer.
    if (bf16 && fp16) {
      diags.error(locOf("fp16"), "bf16 and fp16 are both enabled");
      return false;
    }
    // The gradients' type: data_types.grad_accum_dtype, or where it is absent the type DeepSpeed
    // runs with (bf16 without ZeRO accumulates in fp32; anything else in the parameters' type).
    // DeepSpeed keeps fp32 gradients for bf16 training only in its bf16 optimizer (ZeRO stage 0 or
    // 1, optimizer on the device), and refuses bf16 accumulation without ZeRO.
    int64_t stage = stageValue.value_or(0);
    std::string gradType = bf16 ? (stage == 0 ? "fp32" : "bf16") : fp16 ? "fp16" : "fp32";
    if (const json::Value *value = lookup(root, "data_types.grad_accum_dtype")) {
      std::string name = value->getAsString().value_or("").lower();
      StringRef type = name;
      type.consume_front("torch.");
      gradType = type == "fp32" || type == "float32" || type == "float"  ? "fp32"
                 : type == "bf16" || type == "bfloat16"                  ? "bf16"
                 : type == "fp16" || type == "float16" || type == "half" ? "fp16"
                                                                         : "";
      std::string model = bf16 ? "bf16" : fp16 ? "fp16" : "fp32";
      std::string problem;
      if (gradType.empty())
        problem = "must be \"fp32\", \"bf16\" or \"fp16\"";
      else if (gradType != model && gradType != "fp32")
        problem = "is " + gradType + " under " + model + " training";
      else if (bf16 && gradType == "bf16" && stage == 0)
        problem = "is bf16 without ZeRO, which DeepSpeed refuses";
      else if (bf16 && gradType == "fp32" && (stage > 1 || !optimizerTier.empty()))
        problem = "is fp32 with ZeRO stage " + std::to_string(stage) +
                  (optimizerTier.empty() ? "" : " and the optimizer offloaded") +
                  ", where DeepSpeed's ZeRO optimizer, not its bf16 optimizer, keeps the "
                  "gradients; placec does not model their type there";
      else if (fp16 && gradType == "fp32")
        problem = "is fp32 under fp16 training, which DeepSpeed keeps in fp16 or refuses";
      if (!problem.empty()) {
        diags.error(locOf("data_types.grad_accum_dtype"),
                    "'data_types.grad_accum_dtype' " + problem);
        return false;
      }
    }
    imported.precision =
        bf16   ? ir::spellPrecision(ir::Precision::MixedBF16, false, gradType == "fp32", false)
        : fp16 ? "mixed(fp16)"
               : "fp32";
    if (const json::Value *type = lookup(root, "optimizer.type")) {
      std::string name = type->getAsString().value_or("").lower();
      if (name == "adam" || name == "adamw" || name == "fusedadam" || name == "cpuadam" ||
          name == "onebitadam" || name == "zerooneadam")
        imported.optimizerKind = "adam";
      else if (name == "sgd") {
        const json::Value *momentum = lookup(root, "optimizer.params.momentum");
        imported.optimizerKind =
            momentum && momentum->getAsNumber().value_or(0) != 0 ? "sgd(momentum = true)" : "sgd";
      } else {
        diags.error(locOf("optimizer.type"),
                    "optimizer type '" + name +
                        "' has no Place equivalent; Place knows adam (Adam, AdamW, FusedAdam, "
                        "CPUAdam) and sgd (SGD)");
        return false;
      }
    }

    // The ZeRO stage and its variants.
    if (stage > 3) {
      diags.error(locOf("zero_optimization.stage"),
                  "ZeRO stage " + Twine(stage) + " does not exist; stages are 0 to 3");
      return false;
    }
    int64_t inner = 0;
    std::string variant;
    if (hpz && *hpz > 1 && *hpz < devices) {
      inner = *hpz;
      variant = "zero_optimization.zero_hpz_partition_size";
    }
    if (mics && *mics > 1 && *mics < devices) {
      if (inner) {
        diags.error(locOf("zero_optimization.mics_shard_size"),
                    "mics_shard_size and zero_hpz_partition_size cannot be combined");
        return false;
      }
      inner = *mics;
      variant = "zero_optimization.mics_shard_size";
    }
    if (inner && ulysses > 1) {
      diags.error(locOf(variant), "'" + variant +
                                      "' with sequence_parallel_size: placec does not import "
                                      "DeepSpeed's partial sharding together with Ulysses");
      return false;
    }
    if (inner) {
      if (stage != 3) {
        diags.error(locOf(variant), "'" + variant + "' needs ZeRO stage 3");
        return false;
      }
      if (devices % inner != 0) {
        diags.error(locOf(variant), "'" + variant + "' " + Twine(inner) + " does not divide the " +
                                        Twine(devices) + " data-parallel ranks");
        return false;
      }
      imported.axes = {{"dp_replicate", devices / inner}, {"dp_shard", inner}};
      imported.axisKinds = {"batch", "batch"};
      imported.params = "gather(dp_shard)";
      bool isMics = StringRef(variant).ends_with("mics_shard_size");
      imported.grads = isMics ? "shard(dp_shard)" : "shard(dp_replicate, dp_shard)";
      imported.optimizer = imported.grads;
    } else {
      // Ulysses (DeepSpeed's sequence parallelism): consecutive ranks split each sequence and
      // exchange heads all-to-all around attention; ZeRO shards over data and sequence ranks.
      imported.axes = {{"dp", devices}};
      std::string axes = "dp";
      if (ulysses > 1) {
        imported.axes.push_back({"cp", ulysses});
        imported.context = "all_to_all";
        axes = "dp, cp";
      }
      imported.axisKinds.assign(imported.axes.size(), "");
      if (stage >= 1)
        imported.optimizer = "shard(" + axes + ")";
      if (stage >= 2)
        imported.grads = "shard(" + axes + ")";
      if (stage >= 3)
        imported.params = "gather(" + axes + ")";
    }
    auto withTier = [](std::string &placement, StringRef tier) {
      if (tier.empty())
        return;
      placement = placement.empty() ? ("@ " + tier).str() : placement + " @ " + tier.str();
    };
    if (!paramsTier.empty() && stage != 3) {
      diags.error(locOf("zero_optimization.offload_param"),
                  "offload_param needs ZeRO stage 3 (DeepSpeed ignores it otherwise)");
      return false;
    }
    if (!optimizerTier.empty() && stage == 0) {
      diags.error(locOf("zero_optimization.offload_optimizer"),
                  "offload_optimizer needs ZeRO stage 1 to 3 (DeepSpeed ignores it otherwise)");
      return false;
    }
    withTier(imported.params, paramsTier);
    withTier(imported.optimizer, optimizerTier);
    bool bf16Optimizer = stage == 1 && bf16 && gradType == "fp32";
    if (!translateOverlap(root, stage, bf16Optimizer, devices * ulysses, imported))
      return false;
    // The bf16 optimizer's engine all-reduces the whole gradients and each rank updates its
    // partition (runtime/bf16_optimizer.py has no reduce_gradients of its own).
    if (bf16Optimizer && optimizerTier.empty() && devices * ulysses > 1)
      imported.gradReduce = ir::GradReduce::AllReduce;
    // It casts each micro-batch's bf16 gradients to fp32 and adds them into its buffer
    // (update_hp_grads), as it does without ZeRO.
    if (bf16 && gradType == "fp32" && stage <= 1 && optimizerTier.empty())
      imported.gradAccumulation = "cast_add";
    if (lookup(root, "activation_checkpointing"))
      imported.activations = cpuCheckpointing ? "recompute @ host" : "recompute";
    return true;
  }

  const ImportOptions &options;
  DiagnosticEngine &diags;
  StringRef text;
  KeyLocator keys;
  StringSet<> known, freeForm;
};

//===----------------------------------------------------------------------===//
// Megatron-LM
//===----------------------------------------------------------------------===//

/// Megatron-LM flags that placec reads; `=` marks those that take a value.
constexpr const char *kMegatronFlags[] = {
    "--tensor-model-parallel-size=",
    "--pipeline-model-parallel-size=",
    "--num-layers-per-virtual-pipeline-stage=",
    "--sequence-parallel",
    "--use-distributed-optimizer",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--no-gradient-accumulation-fusion",
    "--micro-batch-size=",
    "--global-batch-size=",
    "--bf16",
    "--fp16",
    "--grad-reduce-in-bf16",
    "--accumulate-allreduce-grads-in-fp32",
    "--main-grads-dtype=",
    "--optimizer=",
    "--sgd-momentum=",
    "--use-precision-aware-optimizer",
    "--exp-avg-dtype=",
    "--exp-avg-sq-dtype=",
    "--main-params-dtype=",
    "--recompute-granularity=",
    "--recompute-method=",
    "--recompute-num-layers=",
    "--recompute-activations",
    "--num-layers=",
    "--hidden-size=",
    "--num-attention-heads=",
    "--ffn-hidden-size=",
    "--seq-length=",
    "--max-position-embeddings=",
    "--vocab-size=",
    "--swiglu",
    "--squared-relu",
    "--normalization=",
    "--disable-bias-linear",
    "--position-embedding-type=",
    "--untie-embeddings-and-output-weights",
    "--group-query-attention",
    "--attention-backend=",
    "--num-query-groups=",
    "--kv-channels=",
    "--qk-layernorm",
    "--window-size=",
    "--window-attn-skip-freq=",
    "--multi-latent-attention",
    "--softmax-type=",
    "--q-lora-rank=",
    "--kv-lora-rank=",
    "--qk-head-dim=",
    "--qk-pos-emb-head-dim=",
    "--v-head-dim=",
    "--add-qkv-bias",
    "--context-parallel-size=",
    "--cp-comm-type=",
    "--fp8-format=",
    "--fp8-recipe=",
    "--fp8-param-gather",
    "--reuse-grad-buf-for-mxfp8-param-ag",
    "--fp4-format=",
    "--fp4-recipe=",
    "--fp4-param-gather",
    "--fp8-dot-product-attention",
    "--tp-comm-overlap",
    "--cross-entropy-loss-fusion",
    "--cross-entropy-fusion-impl=",
    "--pipeline-model-parallel-layout=",
    "--num-virtual-stages-per-pipeline-rank=",
    "--microbatch-group-size-per-vp-stage=",
    "--microbatch-group-size-per-virtual-pipeline-stage=",
    "--decoder-first-pipeline-num-layers=",
    "--decoder-last-pipeline-num-layers=",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--num-experts=",
    "--moe-router-topk=",
    "--expert-model-parallel-size=",
    "--expert-tensor-parallel-size=",
    "--moe-ffn-hidden-size=",
    "--moe-shared-expert-intermediate-size=",
    "--moe-router-score-function=",
    "--moe-expert-capacity-factor=",
    "--moe-pad-expert-input-to-capacity",
    "--moe-aux-loss-coeff=",
    "--moe-layer-freq=",
    "--moe-token-dispatcher-type=",
    "--moe-flex-dispatcher-backend=",
    "--moe-router-load-balancing-type=",
    "--overlap-moe-expert-parallel-comm",
    "--delay-wgrad-compute",
    "--mtp-num-layers=",
    "--moe-router-num-groups=",
    "--moe-router-group-topk=",
    "--recompute-modules=",
};

/// The flags placec reads that take a list of values (Megatron-LM's nargs='*'), read as one value
/// of the words joined by spaces.
constexpr StringRef kMegatronListFlags[] = {"--recompute-modules"};

/// Megatron-LM flags that change the model or the placement in ways `placec import` does not
/// translate yet. Each is an error unless it has its neutral value (`neutral`, when not null):
/// ignoring it would write a plan that is not the job's.
struct UntranslatedFlag {
  const char *name;
  const char *neutral;
  const char *what;
  /// True when Place has no equivalent at all (rather than one the import does not write yet).
  bool inexpressible = false;
};
const UntranslatedFlag kUntranslatedMegatronFlags[] = {
    {"--hierarchical-context-parallel-sizes", nullptr,
     "hierarchical context parallelism (a2a+p2p), which has no Place equivalent", true},
    {"--fp8", nullptr,
     "FP8 training through an abbreviation that Megatron-LM's parser may not resolve: write "
     "--fp8-format e4m3 or hybrid",
     true},
};

/// Megatron-LM flags that describe a dense model's attention (errors with a model named by
/// --model, whose declaration says it).
constexpr StringRef kMegatronAttentionModelFlags[] = {"--kv-channels",
                                                      "--qk-layernorm",
                                                      "--window-size",
                                                      "--window-attn-skip-freq",
                                                      "--multi-latent-attention",
                                                      "--softmax-type",
                                                      "--q-lora-rank",
                                                      "--kv-lora-rank",
                                                      "--qk-head-dim",
                                                      "--qk-pos-emb-head-dim",
                                                      "--v-head-dim"};
/// Megatron-LM flags that describe other parts of the model (errors with a model named by
/// --model, whose declaration says it): the multi-token prediction modules.
constexpr StringRef kMegatronOtherModelFlags[] = {"--mtp-num-layers"};
/// Megatron-LM's widths of multi-head latent attention; all but the first (--q-lora-rank, none
/// without a query latent) the import needs written with --multi-latent-attention rather than
/// assume its defaults.
constexpr StringRef kMegatronLatentFlags[] = {"--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
                                              "--qk-pos-emb-head-dim", "--v-head-dim"};

/// Megatron-LM flags that describe a mixture-of-experts model (errors with a model named by
/// --model, whose declaration says it).
constexpr StringRef kMegatronMoeModelFlags[] = {"--num-experts",
                                                "--moe-router-topk",
                                                "--moe-ffn-hidden-size",
                                                "--moe-shared-expert-intermediate-size",
                                                "--moe-router-score-function",
                                                "--moe-expert-capacity-factor",
                                                "--moe-aux-loss-coeff",
                                                "--moe-layer-freq",
                                                "--moe-router-num-groups",
                                                "--moe-router-group-topk"};

class MegatronImporter {
public:
  MegatronImporter(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags)
      : options(options), diags(diags),
        text(diags.getSourceMgr().getMemoryBuffer(bufferId)->getBuffer()) {}

  bool run(raw_ostream &os) {
    tokenize();
    readFlags();
    if (diags.hasErrors())
      return false;
    return translate(os);
  }

private:
  struct Word {
    std::string text;
    size_t offset;
  };

  SMLoc locAt(size_t offset) const { return SMLoc::getFromPointer(text.data() + offset); }

  /// Shell-like words: whitespace separated, single and double quotes, backslash line
  /// continuations, `#` comments to the end of the line.
  void tokenize() {
    size_t i = 0;
    while (i < text.size()) {
      char c = text[i];
      if (isSpace(c) || (c == '\\' && i + 1 < text.size() && isSpace(text[i + 1]))) {
        ++i;
        continue;
      }
      if (c == '#') {
        while (i < text.size() && text[i] != '\n')
          ++i;
        continue;
      }
      Word word{"", i};
      while (i < text.size() && !isSpace(text[i])) {
        char ch = text[i];
        if (ch == '"' || ch == '\'') {
          size_t close = text.find(ch, i + 1);
          if (close == StringRef::npos)
            close = text.size();
          word.text += text.slice(i + 1, close).str();
          i = close + 1;
          continue;
        }
        word.text += ch;
        ++i;
      }
      words.push_back(std::move(word));
    }
  }

  void readFlags() {
    std::vector<StringRef> names;
    StringSet<> takesValue;
    for (const char *flag : kMegatronFlags) {
      StringRef name(flag);
      if (name.consume_back("="))
        takesValue.insert(name);
      names.push_back(name);
    }
    for (size_t i = 0; i < words.size(); ++i) {
      StringRef word = words[i].text;
      if (!word.starts_with("--")) {
        diags.error(locAt(words[i].offset),
                    "expected a flag starting with '--', found '" + word + "'");
        continue;
      }
      std::string value;
      bool hasValue = false;
      if (size_t eq = word.find('='); eq != StringRef::npos) {
        value = word.substr(eq + 1).str();
        word = word.take_front(eq);
        hasValue = true;
      }
      // The words after a flag up to the next flag: its values (Megatron-LM's list flags, such
      // as --recompute-modules or --data-path, take several).
      auto takeValues = [&] {
        std::vector<std::string> values;
        while (i + 1 < words.size() && !StringRef(words[i + 1].text).starts_with("--"))
          values.push_back(words[++i].text);
        return values;
      };
      if (const UntranslatedFlag *untranslated = findUntranslated(word)) {
        size_t offset = words[i].offset;
        if (!hasValue)
          value = join(takeValues(), " ");
        std::string given = value.empty() ? std::string() : " (given '" + value + "')";
        if (!untranslated->neutral || value != untranslated->neutral)
          diags.error(locAt(offset),
                      Twine("Megatron-LM flag '") + word + "' sets " + untranslated->what +
                          (untranslated->inexpressible
                               ? ""
                               : ", which placec import does not translate yet; ignoring it "
                                 "would write a plan that is not this job's: write that part of "
                                 "the .place file by hand, or drop the flag") +
                          given);
        continue;
      }
      if (!llvm::is_contained(names, word)) {
        // Megatron-LM has hundreds of flags; only near misses of the ones read here are
        // reported as misspellings, the others are listed once as ignored.
        std::string suggestion = closest(word, names, word.size() >= 10 ? 2 : 1);
        if (!suggestion.empty())
          diags.error(locAt(words[i].offset), "unknown Megatron-LM flag '" + word +
                                                  "'; did you mean '" + suggestion + "'?");
        else
          ignored.push_back(words[i]);
        if (!hasValue)
          takeValues();
        continue;
      }
      size_t at = i;
      if (takesValue.contains(word) && !hasValue) {
        if (i + 1 >= words.size() || StringRef(words[i + 1].text).starts_with("--")) {
          diags.error(locAt(words[i].offset), "flag '" + word + "' needs a value");
          continue;
        }
        value = words[++i].text;
        at = i;
        // The flags placec reads take one value each, but its list flags.
        if (llvm::is_contained(kMegatronListFlags, word)) {
          for (const std::string &more : takeValues())
            value += " " + more;
        } else if (i + 1 < words.size() && !StringRef(words[i + 1].text).starts_with("--")) {
          diags.error(locAt(words[i + 1].offset), "flag '" + word + "' takes one value, but '" +
                                                      words[i + 1].text + "' follows '" + value +
                                                      "'");
          takeValues();
        }
      }
      flags[word.str()] = {value, words[at].offset};
    }
    if (!ignored.empty()) {
      std::vector<std::string> names;
      for (const Word &word : ignored)
        names.push_back(StringRef(word.text).split('=').first.str());
      diags.warning(locAt(ignored.front().offset),
                    "ignored " + Twine(ignored.size()) +
                        (ignored.size() == 1 ? " flag that does" : " flags that do") +
                        " not change the placement: " + join(names, ", "));
    }
  }

  static const UntranslatedFlag *findUntranslated(StringRef word) {
    for (const UntranslatedFlag &flag : kUntranslatedMegatronFlags)
      if (word == flag.name)
        return &flag;
    return nullptr;
  }

  bool has(StringRef flag) const { return flags.count(flag); }

  std::optional<int64_t> getInt(StringRef flag) {
    auto it = flags.find(flag);
    if (it == flags.end())
      return std::nullopt;
    int64_t number = 0;
    if (StringRef(it->second.first).getAsInteger(10, number) || number < 1) {
      diags.error(locAt(it->second.second), "'" + flag +
                                                "' takes a whole number of at least 1, not '" +
                                                it->second.first + "'");
      return std::nullopt;
    }
    return number;
  }

  std::string getString(StringRef flag, StringRef otherwise) const {
    auto it = flags.find(flag);
    return it == flags.end() ? otherwise.str() : it->second.first;
  }

  SMLoc locOf(StringRef flag) const {
    auto it = flags.find(flag);
    return locAt(it == flags.end() ? 0 : it->second.second);
  }

  /// The multi-token prediction modules: the named model's, or --mtp-num-layers's.
  int64_t getMtpLayers() const {
    int64_t mtp = 0;
    if (options.model)
      mtp = options.model->transformer.mtpLayers;
    else
      StringRef(getString("--mtp-num-layers", "0")).getAsInteger(10, mtp);
    return mtp;
  }

  /// Place's window from --window-size LEFT,RIGHT (flash-attn's: a query attends LEFT earlier
  /// tokens and itself, and RIGHT later ones; -1 is unbounded): LEFT + 1 where RIGHT is 0;
  /// nothing where LEFT is -1 or the window holds the whole sequence.
  std::optional<int64_t> windowOf(int64_t seq) {
    std::string text = getString("--window-size", "");
    SMLoc loc = locOf("--window-size");
    auto [leftText, rightText] = StringRef(text).split(',');
    int64_t left = 0, right = 0;
    if (StringRef(leftText).trim().getAsInteger(10, left) ||
        StringRef(rightText).trim().getAsInteger(10, right) || left < -1 || right < -1) {
      diags.error(loc, "--window-size '" + text +
                           "' is not LEFT,RIGHT: two whole numbers of tokens, each at least -1");
      return std::nullopt;
    }
    if (right != 0) {
      diags.error(loc, "--window-size " + text +
                           ": a window that reaches later tokens is not causal; Place's window "
                           "looks back only (write LEFT,0)");
      return std::nullopt;
    }
    if (left < 0 || left + 1 >= seq)
      return std::nullopt;
    return left + 1;
  }

  /// Place's full_every from --window-attn-skip-freq N (Megatron-Core's is_layer_window_attention:
  /// the layers numbered from 1 that N divides attend the whole prefix): N where some layer is
  /// one, nothing where N exceeds the layers or the flag is absent. Its per-layer lists
  /// (`[1,1,0]*4`, 1 for a windowed layer) have no Place equivalent.
  std::optional<int64_t> fullEveryOf(int64_t layers) {
    if (!has("--window-attn-skip-freq"))
      return std::nullopt;
    std::string text = getString("--window-attn-skip-freq", "");
    SMLoc loc = locOf("--window-attn-skip-freq");
    int64_t every = 0;
    if (StringRef(text).trim().getAsInteger(10, every) || every < 1) {
      diags.error(loc, "--window-attn-skip-freq '" + text +
                           "' is not a whole number of at least 1: Place's full_every makes "
                           "every n-th layer one of full attention, and a per-layer list has no "
                           "Place equivalent");
      return std::nullopt;
    }
    if (every == 1) {
      diags.error(loc, "--window-attn-skip-freq 1 makes every layer one of full attention, and "
                       "--window-size then applies to none: drop both flags");
      return std::nullopt;
    }
    if (every > layers)
      return std::nullopt;
    return every;
  }

  /// The MoE fields of a model declared from the flags (nothing for a dense model).
  std::string moeModelText(int64_t ffn, int64_t layers) {
    if (!has("--num-experts")) {
      for (StringRef flag : kMegatronMoeModelFlags)
        if (has(flag))
          diags.error(locOf(flag), flag + " describes mixture-of-experts layers, but there is no "
                                          "--num-experts");
      return "";
    }
    std::string text;
    raw_string_ostream m(text);
    std::optional<int64_t> experts = getInt("--num-experts");
    int64_t topK = getInt("--moe-router-topk").value_or(2); // Megatron-LM's default.
    if (!experts)
      return "";
    m << "  experts = " << *experts << ";\n  top_k = " << topK << ";\n";
    flagModel.transformer.moe.experts = *experts;
    flagModel.transformer.moe.topK = topK;
    // Megatron-Core's router has a bias with the linears' (--add-bias-linear, the default).
    if (!has("--disable-bias-linear"))
      m << "  router_bias = true;\n";
    if (std::optional<int64_t> width = getInt("--moe-ffn-hidden-size"); width && *width != ffn)
      m << "  expert_ffn = " << *width << ";\n";
    if (std::optional<int64_t> shared = getInt("--moe-shared-expert-intermediate-size"))
      m << "  shared_experts = 1;\n  shared_expert_ffn = " << *shared << ";\n";
    // --moe-layer-freq k: layers 0, k, 2k, … are MoE; "([0]*N+[1]*M)": the first N dense.
    std::string freq = getString("--moe-layer-freq", "1");
    int64_t every = 0, dense = 0, moe = 0;
    StringRef pattern(freq);
    pattern = pattern.trim();
    if (!pattern.getAsInteger(10, every) && every >= 1) {
      flagModel.transformer.moe.every = every;
      if (every > 1)
        m << "  moe_every = " << every << ";\n";
    } else if (pattern.consume_front("([0]*") && !pattern.consumeInteger(10, dense) &&
               pattern.consume_front("+[1]*") && !pattern.consumeInteger(10, moe) &&
               pattern == ")" && moe >= 1 && dense <= layers && moe <= layers &&
               dense + moe == layers) {
      flagModel.transformer.moe.denseLayers = dense;
      if (dense > 0)
        m << "  dense_layers = " << dense << ";\n";
    } else {
      diags.error(locOf("--moe-layer-freq"),
                  "--moe-layer-freq '" + freq +
                      "' is neither a whole number k (every k-th layer, from the first) nor "
                      "([0]*N+[1]*M) with N + M = " +
                      Twine(layers) + " layers (the first N dense), the patterns Place expresses");
    }
    std::string scoring = getString("--moe-router-score-function", "softmax");
    if (scoring == "sigmoid")
      m << "  router = sigmoid;\n";
    else if (scoring != "softmax")
      diags.error(locOf("--moe-router-score-function"),
                  "--moe-router-score-function is softmax or sigmoid, not '" + scoring + "'");
    // Group-limited routing: both flags or neither (Megatron-Core's TopKRouter takes the groups
    // with their top-k), equal groups whose chosen ones hold the top-k experts (the model's
    // rules, checked here at the flags).
    if (has("--moe-router-num-groups") != has("--moe-router-group-topk"))
      diags.error(locOf(has("--moe-router-num-groups") ? "--moe-router-num-groups"
                                                       : "--moe-router-group-topk"),
                  "group-limited routing needs both --moe-router-num-groups and "
                  "--moe-router-group-topk");
    else if (std::optional<int64_t> groups = getInt("--moe-router-num-groups"); groups)
      if (std::optional<int64_t> groupTopK = getInt("--moe-router-group-topk"); groupTopK) {
        if (*experts % *groups != 0)
          diags.error(locOf("--moe-router-num-groups"),
                      "--moe-router-num-groups " + Twine(*groups) + " does not divide the " +
                          Twine(*experts) + " experts into equal groups");
        else if (*groupTopK > *groups || *groupTopK * (*experts / *groups) < topK)
          diags.error(locOf("--moe-router-group-topk"),
                      "--moe-router-group-topk " + Twine(*groupTopK) + " of " + Twine(*groups) +
                          " groups of " + Twine(*experts / *groups) +
                          " experts cannot hold the top " + Twine(topK));
        else
          m << "  router_groups = " << *groups << ";\n  router_group_top_k = " << *groupTopK
            << ";\n";
      }
    if (has("--moe-expert-capacity-factor")) {
      std::string factor = getString("--moe-expert-capacity-factor", "");
      double value = 0;
      if (StringRef(factor).getAsDouble(value) || !(value > 0) || value > 1e3)
        diags.error(locOf("--moe-expert-capacity-factor"),
                    "--moe-expert-capacity-factor takes a number above 0, not '" + factor + "'");
      else if (!has("--moe-pad-expert-input-to-capacity"))
        diags.error(locOf("--moe-expert-capacity-factor"),
                    "--moe-expert-capacity-factor without --moe-pad-expert-input-to-capacity "
                    "drops tokens without padding; Place models padded expert buffers");
      else
        m << "  capacity_factor = " << factor << ";\n";
    }
    // Megatron-LM's load-balancing loss: coefficient 0 unless given; its type says over which
    // tokens it counts the routing statistics (aux_loss_scope).
    std::string balancing = getString("--moe-router-load-balancing-type", "aux_loss");
    std::string coefficient = getString("--moe-aux-loss-coeff", "0");
    double value = 0;
    ir::AuxLossScope scope = ir::AuxLossScope::Global;
    if (balancing == "none")
      coefficient = "0";
    else if (balancing == "aux_loss")
      scope = ir::AuxLossScope::Local;
    else if (balancing == "seq_aux_loss")
      scope = ir::AuxLossScope::Sequence;
    else if (balancing != "global_aux_loss")
      diags.error(locOf("--moe-router-load-balancing-type"),
                  "--moe-router-load-balancing-type " + balancing +
                      ": Place's load-balancing loss is the Switch Transformer's, over the "
                      "micro-batch of each rank (aux_loss), each sequence (seq_aux_loss) or "
                      "every rank (global_aux_loss)");
    if (StringRef(coefficient).getAsDouble(value) || value < 0 || value > 1) {
      diags.error(locOf("--moe-aux-loss-coeff"),
                  "--moe-aux-loss-coeff takes a number from 0 to 1, not '" + coefficient + "'");
    } else {
      m << "  aux_loss = " << coefficient << ";\n";
      if (value > 0 && scope != ir::AuxLossScope::Global)
        m << "  aux_loss_scope = " << ir::toString(scope) << ";\n";
    }
    return text;
  }

  bool translate(raw_ostream &os) {
    int64_t t = getInt("--tensor-model-parallel-size").value_or(1);
    int64_t p = getInt("--pipeline-model-parallel-size").value_or(1);
    int64_t c = getInt("--context-parallel-size").value_or(1);
    int64_t e = getInt("--expert-model-parallel-size").value_or(1);
    std::optional<int64_t> firstLayers = getInt("--decoder-first-pipeline-num-layers");
    std::optional<int64_t> lastLayers = getInt("--decoder-last-pipeline-num-layers");
    std::optional<int64_t> micro = getInt("--micro-batch-size");
    std::optional<int64_t> global = getInt("--global-batch-size");
    std::optional<int64_t> virtualLayers = getInt("--num-layers-per-virtual-pipeline-stage");
    std::optional<int64_t> virtualStages = getInt("--num-virtual-stages-per-pipeline-rank");
    std::optional<int64_t> layers = getInt("--num-layers");
    std::optional<int64_t> hidden = getInt("--hidden-size");
    std::optional<int64_t> heads = getInt("--num-attention-heads");
    std::optional<int64_t> ffn = getInt("--ffn-hidden-size");
    std::optional<int64_t> seq = getInt("--seq-length");
    std::optional<int64_t> vocab = getInt("--vocab-size");
    if (diags.hasErrors())
      return false;
    SMLoc start = locAt(0);
    if (!micro) {
      diags.error(start, "missing --micro-batch-size");
      return false;
    }
    int64_t devices = options.devices;
    if (devices <= 0) {
      diags.error(start, "the data-parallel size is unknown: give the cluster (--cluster with "
                         "--from), whose device count is divided by tensor and pipeline sizes");
      return false;
    }
    if (devices % saturatingMul(saturatingMul(t, p), c) != 0) {
      diags.error(locOf("--tensor-model-parallel-size"),
                  "tensor " + Twine(t) + " × pipeline " + Twine(p) + " × context " + Twine(c) +
                      " does not divide the " + Twine(devices) + " devices of cluster '" +
                      options.clusterName + "'");
      return false;
    }
    int64_t d = devices / (t * p * c); // t · p · c divides the device count.
    // Expert parallelism is carved out of the data-parallel ranks (Megatron-Core's rank order
    // tp-cp-ep-dp-pp): [dp = d / e, ep = e]. Under --expert-tensor-parallel-size 1 with tensor
    // parallelism (MoE parallel folding) the expert group of e ranks is the tensor ranks and
    // e / t of the data-parallel ones (the expert rank order etp-ep-edp-pp, ETP 1 innermost):
    // [dp = d / (e / t), ep = e / t, tp = t] with `expert_tensor = fold`.
    std::optional<int64_t> etp = getInt("--expert-tensor-parallel-size");
    bool fold = etp && *etp == 1 && t > 1;
    if (etp && *etp != t && !fold) {
      diags.error(locOf("--expert-tensor-parallel-size"),
                  "--expert-tensor-parallel-size " + Twine(*etp) +
                      " under --tensor-model-parallel-size " + Twine(t) +
                      ": Place splits the experts over the tensor axis like the dense MLP (an "
                      "expert tensor-parallel size of " +
                      Twine(t) +
                      ") or, under tensor parallelism, folds the tensor axis into the expert "
                      "group (1, expert_tensor = fold)");
      return false;
    }
    if (fold && c == 1 && (e <= t || e % t != 0)) {
      diags.error(locOf("--expert-tensor-parallel-size"),
                  "--expert-tensor-parallel-size 1 under --tensor-model-parallel-size " + Twine(t) +
                      " is translated as expert_tensor = fold, whose expert group " +
                      "is an expert axis of 2 or more data-parallel ranks times the " + Twine(t) +
                      " tensor ranks: --expert-model-parallel-size must be a multiple of " +
                      Twine(t) + " above it, not " + Twine(e));
      return false;
    }
    // Under context parallelism Megatron-Core's expert group takes the context ranks (after the
    // expert tensor ranks) before the data-parallel ones: [.., ep = e / (c · t'), cp = c, ..]
    // with `expert_context = fold`, t' the tensor ranks folded in (t under ETP 1, else 1).
    bool contextFold = e > 1 && c > 1;
    int64_t inner = (fold ? t : 1) * (contextFold ? c : 1);
    if (contextFold && (e % inner != 0 || e / inner < 2)) {
      diags.error(locOf("--expert-model-parallel-size"),
                  "--expert-model-parallel-size " + Twine(e) + " with --context-parallel-size " +
                      Twine(c) +
                      (fold ? " and --expert-tensor-parallel-size 1 under --tensor-model-parallel-"
                              "size " +
                                  Twine(t)
                            : Twine()) +
                      ": Megatron-Core's expert group takes the " + Twine(inner) +
                      (fold ? " tensor and context" : " context") +
                      " ranks first, which Place says as expert_context = fold with an expert "
                      "axis of 2 or more data-parallel ranks: --expert-model-parallel-size must be "
                      "a multiple of " +
                      Twine(inner) + " above it");
      return false;
    }
    if (fold && !has("--sequence-parallel")) {
      diags.error(locOf("--expert-tensor-parallel-size"),
                  "--expert-tensor-parallel-size 1 under tensor parallelism routes each tensor "
                  "rank's own sequence shard, which needs --sequence-parallel (Megatron-Core "
                  "warns that expert and tensor parallelism must use it)");
      return false;
    }
    int64_t ep = e / inner; // the expert axis of the mesh
    if (ep > 1 && d % ep != 0) {
      diags.error(locOf("--expert-model-parallel-size"),
                  "--expert-model-parallel-size " + Twine(e) +
                      (inner > 1 ? " over " + Twine(inner) +
                                       (fold && contextFold ? " tensor and context"
                                        : fold              ? " tensor"
                                                            : " context") +
                                       " ranks"
                                 : Twine()) +
                      ": " + Twine(ep) + " does not divide the " + Twine(d) +
                      " data-parallel ranks");
      return false;
    }
    std::optional<int64_t> perStep = checkedProduct({*micro, d});
    if (!perStep) {
      diags.error(locOf("--micro-batch-size"),
                  "--micro-batch-size " + Twine(*micro) + " is too large: times the " + Twine(d) +
                      " data-parallel ranks it does not fit in 64 bits");
      return false;
    }
    int64_t globalBatch = global.value_or(*perStep);
    if (globalBatch % *perStep != 0) {
      diags.error(locOf("--global-batch-size"), "--global-batch-size " + Twine(globalBatch) +
                                                    " is not a multiple of " +
                                                    "--micro-batch-size × data-parallel size " +
                                                    Twine(d) + " = " + Twine(*perStep));
      return false;
    }
    int64_t microbatches = globalBatch / *perStep;

    // The model: declared from the flags unless one was named.
    std::string name = makeName(options.name, options.inputName, "megatron");
    std::string modelName = options.modelName, modelText;
    int64_t numLayers = layers.value_or(options.layers);
    // Megatron-Core's attention kernels: flash (FlashAttention), fused (cuDNN through Transformer
    // Engine), unfused and local (scores in device memory); auto, the default, picks by what is
    // installed, read as Place's default, flash.
    std::string backend = getString("--attention-backend", "auto");
    std::string attention = backend == "fused"                           ? "cudnn"
                            : backend == "unfused" || backend == "local" ? "materialized"
                                                                         : "flash";
    if (backend != "fused" && backend != "unfused" && backend != "local" && backend != "flash" &&
        backend != "auto")
      diags.error(locOf("--attention-backend"),
                  "attention backend '" + backend +
                      "' is none of flash, fused, unfused, local and auto");
    else if (!modelName.empty() && has("--attention-backend") && !options.modelAttention.empty() &&
             options.modelAttention != attention &&
             !(attention == "flash" && options.modelAttention == "flash3"))
      diags.error(locOf("--attention-backend"),
                  "--attention-backend " + backend + " runs attention = " + attention +
                      ", but model '" + modelName +
                      "' declares attention = " + options.modelAttention + "; change one of them");
    if (!modelName.empty() && has("--group-query-attention")) {
      diags.error(locOf("--group-query-attention"),
                  "--group-query-attention describes the model, but the model is named with "
                  "--model '" +
                      modelName +
                      "': write kv_heads in its declaration and drop the "
                      "flag, or leave out --model to declare the model from the flags");
      return false;
    }
    if (modelName.empty()) {
      std::vector<StringRef> missing;
      if (!layers)
        missing.push_back("--num-layers");
      if (!hidden)
        missing.push_back("--hidden-size");
      if (!heads)
        missing.push_back("--num-attention-heads");
      if (!seq)
        missing.push_back("--seq-length");
      if (!vocab)
        missing.push_back("--vocab-size");
      if (!missing.empty()) {
        diags.error(start, "the model needs " + join(missing, ", ") +
                               " (or name a declared model with --model)");
        return false;
      }
      modelName = name + "_model";
      std::string body;
      raw_string_ostream m(body);
      m << "model " << modelName << " : transformer {\n";
      m << "  layers = " << *layers << ";\n  hidden = " << *hidden << ";\n  heads = " << *heads
        << ";\n  seq = " << *seq << ";\n  vocab = " << *vocab << ";\n";
      if (ffn)
        m << "  ffn = " << *ffn << ";\n";
      if (has("--swiglu") && has("--squared-relu"))
        diags.error(locOf("--squared-relu"),
                    "--squared-relu and --swiglu are two activations for one MLP; Megatron-LM "
                    "takes one");
      if (has("--swiglu"))
        m << "  mlp = swiglu;\n";
      else if (has("--squared-relu"))
        m << "  mlp = relu2;\n";
      if (has("--squared-relu") && !has("--disable-bias-linear"))
        diags.error(locOf("--squared-relu"),
                    "--squared-relu with biases: Megatron-LM adds each bias before squared_relu "
                    "in a kernel of its own (it fuses the bias only into GELU and SwiGLU), which "
                    "placec does not count; add --disable-bias-linear");
      std::string norm = getString("--normalization", "LayerNorm");
      if (norm == "RMSNorm")
        m << "  norm = rmsnorm;\n";
      else if (norm != "LayerNorm")
        diags.error(locOf("--normalization"),
                    "normalization '" + norm + "' has no Place equivalent (LayerNorm, RMSNorm)");
      if (has("--disable-bias-linear") && !has("--add-qkv-bias"))
        m << "  bias = false;\n";
      std::string positions = getString("--position-embedding-type", "learned_absolute");
      if (positions == "rope")
        m << "  positions = rope;\n";
      else if (positions != "learned_absolute")
        diags.error(locOf("--position-embedding-type"),
                    "position embedding '" + positions +
                        "' has no Place equivalent (learned_absolute, rope)");
      if (has("--untie-embeddings-and-output-weights"))
        m << "  tied_embeddings = false;\n";
      if (has("--add-qkv-bias") && !has("--disable-bias-linear"))
        diags.error(locOf("--add-qkv-bias"),
                    "--add-qkv-bias without --disable-bias-linear keeps every bias; drop one");
      else if (has("--add-qkv-bias"))
        m << "  bias = qkv;\n";
      // Megatron-LM reads --num-query-groups (default 1) only with --group-query-attention.
      if (has("--group-query-attention"))
        m << "  kv_heads = " << getInt("--num-query-groups").value_or(1) << ";\n";
      bool latent = has("--multi-latent-attention");
      if (latent) {
        // Megatron-Core's MLA: --qk-head-dim is the part of a head without positions, Place's
        // head_dim; --qk-layernorm gives the latents their norms, which Place's latent attention
        // always has.
        std::vector<StringRef> missing;
        for (StringRef flag : ArrayRef(kMegatronLatentFlags).drop_front())
          if (!has(flag))
            missing.push_back(flag);
        if (!missing.empty())
          diags.error(locOf("--multi-latent-attention"),
                      "--multi-latent-attention needs " + join(missing, ", ") +
                          " written: placec does not assume Megatron-LM's defaults for them");
        if (!has("--qk-layernorm"))
          diags.error(locOf("--multi-latent-attention"),
                      "--multi-latent-attention without --qk-layernorm leaves the latents "
                      "unnormalized, which Place's latent attention (DeepSeek's) does not "
                      "describe; add --qk-layernorm");
        if (std::optional<int64_t> rank = getInt("--q-lora-rank"))
          m << "  q_lora_rank = " << *rank << ";\n";
        m << "  kv_lora_rank = " << getInt("--kv-lora-rank").value_or(0) << ";\n";
        m << "  head_dim = " << getInt("--qk-head-dim").value_or(0) << ";\n";
        m << "  rope_head_dim = " << getInt("--qk-pos-emb-head-dim").value_or(0) << ";\n";
        m << "  v_head_dim = " << getInt("--v-head-dim").value_or(0) << ";\n";
      } else {
        for (StringRef flag : kMegatronLatentFlags)
          if (has(flag))
            diags.error(locOf(flag), flag + " describes multi-head latent attention; add "
                                            "--multi-latent-attention or drop the flag");
      }
      if (std::optional<int64_t> channels = getInt("--kv-channels"); channels && !latent)
        m << "  head_dim = " << *channels << ";\n";
      // Megatron-Core's softmax_type: `learnable` adds a learned logit per head (sinks).
      std::string softmax = getString("--softmax-type", "vanilla");
      if (softmax == "learnable")
        m << "  sinks = true;\n";
      else if (softmax != "vanilla")
        diags.error(locOf("--softmax-type"),
                    "--softmax-type '" + softmax +
                        "' has no Place equivalent (vanilla, or learnable: sinks = true)");
      if (has("--qk-layernorm") && !latent) {
        if (norm != "RMSNorm")
          diags.error(locOf("--qk-layernorm"),
                      "--qk-layernorm normalizes queries and keys with the --normalization "
                      "norm (" +
                          norm +
                          "), and Place's qk_norm is an RMSNorm: add --normalization "
                          "RMSNorm or drop the flag");
        m << "  qk_norm = true;\n";
      }
      if (has("--window-size"))
        if (std::optional<int64_t> window = windowOf(*seq)) {
          m << "  window = " << *window << ";\n";
          if (std::optional<int64_t> every = fullEveryOf(*layers))
            m << "  full_every = " << *every << ";\n";
        }
      if (attention != "flash")
        m << "  attention = " << attention << ";\n";
      flagModel.kind = ir::ModelKind::Transformer;
      flagModel.transformer.layers = *layers;
      flagModel.transformer.attention = attention == "cudnn" ? ir::AttentionKind::Cudnn
                                        : attention == "materialized"
                                            ? ir::AttentionKind::Materialized
                                            : ir::AttentionKind::Flash;
      flagModel.transformer.kvLoraRank = latent ? getInt("--kv-lora-rank").value_or(1) : 0;
      m << moeModelText(ffn.value_or(4 * *hidden), *layers);
      // Multi-token prediction (Megatron-Core's --mtp-num-layers; 0, as written, is none).
      if (getString("--mtp-num-layers", "0") != "0")
        if (std::optional<int64_t> mtp = getInt("--mtp-num-layers"))
          m << "  mtp_layers = " << *mtp << ";\n";
      m << "}\n";
      modelText = body;
    }

    if (!options.modelName.empty())
      for (ArrayRef<StringRef> flags : {ArrayRef<StringRef>(kMegatronAttentionModelFlags),
                                        ArrayRef<StringRef>(kMegatronMoeModelFlags),
                                        ArrayRef<StringRef>(kMegatronOtherModelFlags)})
        for (StringRef flag : flags)
          if (has(flag) && !(flag == "--mtp-num-layers" && getString(flag, "0") == "0"))
            diags.error(locOf(flag),
                        flag +
                            " describes the model, but the model is named with "
                            "--model '" +
                            options.modelName +
                            "': write it in the model's declaration and drop the flag");
    if (e > 1 && !options.modelName.empty() && options.modelExperts == 0)
      diags.error(locOf("--expert-model-parallel-size"),
                  "--expert-model-parallel-size needs a mixture-of-experts model, but model '" +
                      options.modelName + "' has no experts");
    if (e > 1 && !has("--num-experts") && options.modelName.empty())
      diags.error(locOf("--expert-model-parallel-size"),
                  "--expert-model-parallel-size needs --num-experts: expert parallelism splits "
                  "the experts");
    // Place models the all-to-all token dispatch and the flex dispatcher's DeepEP and HybridEP
    // backends (`dispatcher`); Megatron-Core's default is "allgather".
    std::string dispatcherType = getString("--moe-token-dispatcher-type", "allgather");
    std::string flexBackend = getString("--moe-flex-dispatcher-backend", "deepep");
    ir::ExpertDispatcher dispatcher = ir::ExpertDispatcher::AllToAll;
    if (e > 1 && dispatcherType != "alltoall" && dispatcherType != "flex")
      diags.error(locOf(has("--moe-token-dispatcher-type") ? "--moe-token-dispatcher-type"
                                                           : "--expert-model-parallel-size"),
                  "--moe-token-dispatcher-type " +
                      getString("--moe-token-dispatcher-type", "allgather (the default)") +
                      ": Place models the tokens' all-to-all dispatch over the expert-parallel "
                      "ranks and the flex dispatcher; write --moe-token-dispatcher-type alltoall "
                      "or flex");
    else if (has("--moe-flex-dispatcher-backend") && dispatcherType != "flex")
      diags.error(locOf("--moe-flex-dispatcher-backend"),
                  "--moe-flex-dispatcher-backend is the flex dispatcher's backend and needs "
                  "--moe-token-dispatcher-type flex");
    else if (dispatcherType == "flex" && flexBackend != "deepep" && flexBackend != "hybridep")
      diags.error(locOf("--moe-flex-dispatcher-backend"),
                  "--moe-flex-dispatcher-backend " + flexBackend +
                      ": Place's dispatchers are alltoall, deepep and hybridep");
    else if (e > 1 && dispatcherType == "flex")
      dispatcher =
          flexBackend == "hybridep" ? ir::ExpertDispatcher::HybridEP : ir::ExpertDispatcher::DeepEP;
    if (diags.hasErrors())
      return false;
    if (!options.modelName.empty() && has("--add-qkv-bias")) {
      diags.error(locOf("--add-qkv-bias"),
                  "--add-qkv-bias describes the model, but the model is named with --model '" +
                      modelName + "': write bias = qkv in its declaration and drop the flag");
      return false;
    }

    Imported imported;
    imported.dispatcher = dispatcher;
    if (p > 1)
      imported.axes.push_back({"pp", p});
    imported.axes.push_back({"dp", d / ep});
    if (ep > 1)
      imported.axes.push_back({"ep", ep});
    if (fold)
      imported.expertTensor = ir::ExpertTensor::Fold;
    if (contextFold)
      imported.expertContext = ir::ExpertTensor::Fold;
    if (c > 1)
      imported.axes.push_back({"cp", c});
    if (t > 1)
      imported.axes.push_back({"tp", t});
    imported.axisKinds.assign(imported.axes.size(), "");

    // Context parallelism: Megatron-Core's --cp-comm-type (default p2p, a ring).
    std::string commType = getString("--cp-comm-type", "p2p");
    if (commType == "p2p")
      imported.context = "ring";
    else if (commType == "all_gather")
      imported.context = "all_gather";
    else if (commType == "a2a")
      imported.context = "all_to_all";
    else if (commType == "a2a+p2p")
      diags.error(locOf("--cp-comm-type"),
                  "--cp-comm-type a2a+p2p is hierarchical context parallelism (all-to-all inside "
                  "groups, a ring across them), which has no Place equivalent");
    else
      diags.error(locOf("--cp-comm-type"), "--cp-comm-type is p2p, all_gather, a2a or a2a+p2p, "
                                           "not '" +
                                               commType + "'");
    if (c == 1 && has("--cp-comm-type"))
      diags.error(locOf("--cp-comm-type"),
                  "--cp-comm-type without --context-parallel-size above 1 has no effect; drop it "
                  "or give the context-parallel size");
    if (c == 1)
      imported.context.clear();

    if ((firstLayers || lastLayers) && p == 1)
      diags.error(locOf(firstLayers ? "--decoder-first-pipeline-num-layers"
                                    : "--decoder-last-pipeline-num-layers"),
                  "uneven pipeline stages need --pipeline-model-parallel-size above 1");
    // megatron/training/arguments.py: uneven first and last stages take their virtual stages from
    // --num-virtual-stages-per-pipeline-rank, and the three ways of giving virtual stages exclude
    // one another.
    if ((firstLayers || lastLayers) && virtualLayers)
      diags.error(locOf(firstLayers ? "--decoder-first-pipeline-num-layers"
                                    : "--decoder-last-pipeline-num-layers"),
                  "uneven first and last stages with --num-layers-per-virtual-pipeline-stage: "
                  "Megatron-LM takes their virtual stages from "
                  "--num-virtual-stages-per-pipeline-rank");
    if (virtualStages && (virtualLayers || has("--pipeline-model-parallel-layout")))
      diags.error(locOf("--num-virtual-stages-per-pipeline-rank"),
                  Twine("--num-virtual-stages-per-pipeline-rank with ") +
                      (virtualLayers ? "--num-layers-per-virtual-pipeline-stage"
                                     : "--pipeline-model-parallel-layout") +
                      ": Megatron-LM takes one way of giving the virtual stages");
    if (virtualStages && p == 1)
      diags.error(locOf("--num-virtual-stages-per-pipeline-rank"),
                  "--num-virtual-stages-per-pipeline-rank needs --pipeline-model-parallel-size "
                  "above 1");
    // The embedding and the loss counted as layers of the split (Megatron-Core's
    // get_num_layers_to_build); Megatron-LM refuses them with uneven first and last stages.
    bool embeddingLayer = has("--account-for-embedding-in-pipeline-split");
    bool lossLayer = has("--account-for-loss-in-pipeline-split");
    const char *accountFlag = embeddingLayer ? "--account-for-embedding-in-pipeline-split"
                                             : "--account-for-loss-in-pipeline-split";
    if ((embeddingLayer || lossLayer) && p == 1)
      diags.error(locOf(accountFlag),
                  Twine(accountFlag) + " needs --pipeline-model-parallel-size above 1");
    if ((embeddingLayer || lossLayer) && (firstLayers || lastLayers))
      diags.error(locOf(accountFlag),
                  Twine(accountFlag) + " with --decoder-" + (firstLayers ? "first" : "last") +
                      "-pipeline-num-layers: Megatron-LM takes one or the other");
    // Megatron-Core's layout (its --pipeline-model-parallel-layout): the virtual stages are the
    // layout's over the pipeline size, and it takes no other way of splitting the layers.
    std::optional<ir::PipelineLayoutSpec> layout;
    if (has("--pipeline-model-parallel-layout")) {
      const char *layoutFlag = "--pipeline-model-parallel-layout";
      std::string text = getString(layoutFlag, "");
      std::string error;
      size_t offset = 0;
      layout = ir::parsePipelineLayout(text, error, offset);
      const char *conflict = firstLayers                   ? "--decoder-first-pipeline-num-layers"
                             : lastLayers                  ? "--decoder-last-pipeline-num-layers"
                             : embeddingLayer || lossLayer ? accountFlag
                             : virtualLayers ? "--num-layers-per-virtual-pipeline-stage"
                                             : nullptr;
      int64_t mtp = getMtpLayers();
      if (!layout)
        diags.error(locOf(layoutFlag), Twine(layoutFlag) + " '" + text + "' at its character " +
                                           Twine(offset + 1) + ": " + error);
      else if (p == 1)
        diags.error(locOf(layoutFlag),
                    Twine(layoutFlag) + " needs --pipeline-model-parallel-size above 1");
      else if (conflict)
        diags.error(locOf(layoutFlag), Twine(layoutFlag) + " with " + conflict +
                                           ": the layout places every layer itself");
      else if (layout->layers.size() % static_cast<size_t>(p) != 0)
        diags.error(locOf(layoutFlag),
                    Twine(layoutFlag) + " '" + text + "' has " + Twine(layout->layers.size()) +
                        " virtual stages, not a multiple of the pipeline size " + Twine(p));
      else if (numLayers > 0 && layout->getNumLayers() != numLayers)
        diags.error(locOf(layoutFlag),
                    Twine(layoutFlag) + " '" + text + "' places " + Twine(layout->getNumLayers()) +
                        " transformer layers (t), but the model has " + Twine(numLayers));
      else if (layout->getNumMtpLayers() != mtp)
        diags.error(locOf(layoutFlag), Twine(layoutFlag) + " '" + text + "' places " +
                                           Twine(layout->getNumMtpLayers()) +
                                           " multi-token prediction modules (m), but the "
                                           "model has " +
                                           Twine(mtp));
    }
    int64_t splitLayers = numLayers + (embeddingLayer ? 1 : 0) + (lossLayer ? 1 : 0);
    std::string accounted = std::string(embeddingLayer ? ", embedding_layer = true" : "") +
                            (lossLayer ? ", loss_layer = true" : "");
    int64_t chunks = 1; // the interleaved schedule's model chunks per stage
    if (p > 1 && !diags.hasErrors()) {
      if (layout) {
        chunks = static_cast<int64_t>(layout->layers.size()) / p;
        imported.pipeline =
            (chunks > 1 ? "interleaved(microbatches = " + std::to_string(microbatches) +
                              ", chunks = " + std::to_string(chunks)
                        : "1f1b(microbatches = " + std::to_string(microbatches)) +
            ", layout = \"" + layout->text + "\")";
      } else if (virtualStages && *virtualStages > 1 && (firstLayers || lastLayers)) {
        // Megatron-Core's get_num_layers_to_build: each of the first stage's v chunks builds
        // first/v layers, the last stage's last/v, the middle stages' their even share over v;
        // Place says it as the layout of those virtual stages.
        int64_t v = chunks = *virtualStages;
        int64_t f = firstLayers.value_or(0), l = lastLayers.value_or(0);
        int64_t middleStages = p - (firstLayers ? 1 : 0) - (lastLayers ? 1 : 0);
        int64_t rest = numLayers - f - l;
        int64_t each = middleStages > 0 && rest >= 0 ? rest / middleStages : 0;
        if (numLayers <= 0 || f % v != 0 || l % v != 0 || rest < 0 ||
            (middleStages == 0 ? rest != 0 : rest % middleStages != 0 || each % v != 0)) {
          std::string edges =
              (firstLayers ? "the first stage's layers (" + std::to_string(f) + ")" : "") +
              std::string(firstLayers && lastLayers ? ", " : "") +
              (lastLayers
                   ? std::string(firstLayers ? "the last's (" : "the last stage's layers (") +
                         std::to_string(l) + ")"
                   : "");
          diags.error(locOf("--num-virtual-stages-per-pipeline-rank"),
                      edges +
                          " and the other stages' even share of the rest do not each divide "
                          "into " +
                          Twine(v) + " virtual stages (Megatron-Core's TransformerConfig)");
          return false;
        }
        int64_t mtp = getMtpLayers();
        std::string text;
        for (int64_t i = 0; i < p * v; ++i) {
          int64_t rank = i % p;
          int64_t n = rank == 0 && firstLayers      ? f / v
                      : rank == p - 1 && lastLayers ? l / v
                                                    : each / v;
          text += i == 0 ? "E" : "|";
          text += n == 1 ? std::string("t") : n > 1 ? "t*" + std::to_string(n) : std::string();
          if (i + 1 == p * v)
            text += std::string(static_cast<size_t>(std::max<int64_t>(0, mtp)), 'm') + "L";
        }
        std::string error;
        size_t offset = 0;
        if (!ir::parsePipelineLayout(text, error, offset)) {
          diags.error(locOf("--num-virtual-stages-per-pipeline-rank"),
                      "the virtual stages of the uneven split, \"" + text + "\": " + error);
          return false;
        }
        imported.pipeline = "interleaved(microbatches = " + std::to_string(microbatches) +
                            ", chunks = " + std::to_string(v) + ", layout = \"" + text + "\")";
      } else if ((virtualStages && *virtualStages > 1) || virtualLayers) {
        // An even split over virtual stages, given per stage or as the layers of a chunk.
        bool byStages = virtualStages && *virtualStages > 1;
        int64_t divisor = p * (byStages ? *virtualStages : *virtualLayers);
        if (numLayers <= 0 || splitLayers % divisor != 0) {
          diags.error(locOf(byStages ? "--num-virtual-stages-per-pipeline-rank"
                                     : "--num-layers-per-virtual-pipeline-stage"),
                      "the layers" +
                          Twine(embeddingLayer || lossLayer
                                    ? " with the embedding or the loss counted"
                                    : "") +
                          (byStages ? " do not divide evenly into " + Twine(p) + " stages of " +
                                          Twine(*virtualStages) + " virtual stages"
                                    : " do not divide into " + Twine(p) + " stages of chunks of " +
                                          Twine(*virtualLayers) + " layers"));
          return false;
        }
        chunks = byStages ? *virtualStages : splitLayers / divisor;
        imported.pipeline = "interleaved(microbatches = " + std::to_string(microbatches) +
                            ", chunks = " + std::to_string(chunks) + accounted + ")";
      } else {
        imported.pipeline = "1f1b(microbatches = " + std::to_string(microbatches);
        if (firstLayers)
          imported.pipeline += ", first = " + std::to_string(*firstLayers);
        if (lastLayers)
          imported.pipeline += ", last = " + std::to_string(*lastLayers);
        imported.pipeline += accounted + ")";
      }
    }
    // Megatron-Core's interleaved schedule (megatron/core/pipeline_parallel/schedules.py) runs
    // the micro-batches in groups of --microbatch-group-size-per-vp-stage (before January 2026
    // --microbatch-group-size-per-virtual-pipeline-stage), the pipeline size by default, and
    // raises where the groups do not fit the step: a group between p and m, the last one whole
    // or at least p (rule schedule's; with groups of p, m a multiple of p). Place writes another
    // group as `group = N`; a job Megatron-Core would refuse is refused here, at its flag.
    // The flags are read whatever the schedule, so that a malformed value is an error even where
    // Megatron-Core ignores it (without interleaving).
    const char *groupFlags[] = {"--microbatch-group-size-per-vp-stage",
                                "--microbatch-group-size-per-virtual-pipeline-stage"};
    std::optional<int64_t> groups[] = {getInt(groupFlags[0]), getInt(groupFlags[1])};
    if (chunks > 1 && !diags.hasErrors()) {
      const char *chunkFlag = layout          ? "--pipeline-model-parallel-layout"
                              : virtualLayers ? "--num-layers-per-virtual-pipeline-stage"
                                              : "--num-virtual-stages-per-pipeline-rank";
      // Both spellings given: Megatron-LM keeps the one it parses last; placec asks for one.
      if (groups[0] && groups[1] && *groups[0] != *groups[1])
        diags.error(locOf(groupFlags[1]), Twine(groupFlags[1]) + " " + Twine(*groups[1]) +
                                              " contradicts " + groupFlags[0] + " " +
                                              Twine(*groups[0]) + ": give one");
      const char *groupFlag = groups[0] ? groupFlags[0] : groupFlags[1];
      std::optional<int64_t> group = groups[0] ? groups[0] : groups[1];
      std::string why;
      bool grouped = group && *group != p;
      if (!diags.hasErrors() && grouped) {
        if (!cost::isScheduleValid(ir::Schedule::Interleaved, p, microbatches, chunks, &why,
                                   *group))
          diags.error(locOf(groupFlag),
                      Twine(groupFlag) + " " + Twine(*group) + " over " + Twine(microbatches) +
                          " micro-batches per step (--global-batch-size / (--micro-batch-size × "
                          "data-parallel size)), which Megatron-Core refuses: " +
                          why);
        else
          imported.pipeline.insert(imported.pipeline.size() - 1,
                                   ", group = " + std::to_string(*group));
      } else if (!diags.hasErrors() &&
                 !cost::isScheduleValid(ir::Schedule::Interleaved, p, microbatches, chunks, &why)) {
        diags.error(locOf(chunkFlag),
                    Twine(chunkFlag) + " runs the interleaved schedule over " +
                        Twine(microbatches) + " micro-batches per step (--global-batch-size / " +
                        "(--micro-batch-size × data-parallel size)), which Megatron-Core " +
                        "refuses: " + why);
      }
    }
    // The distributed optimizer shards over the data-parallel group, which spans the
    // context-parallel ranks.
    if (has("--use-distributed-optimizer"))
      imported.optimizer =
          std::string("shard(dp") + (ep > 1 ? ", ep" : "") + (c > 1 ? ", cp" : "") + ")";
    // ... and the experts' optimizer over the expert-data-parallel group.
    if (has("--use-distributed-optimizer") && e > 1)
      imported.expertOptimizer = "shard(dp)";
    // The step's data-parallel collectives over the data- and context-parallel group: without
    // --overlap-grad-reduce (Megatron-LM's default) the gradients are reduced after the backward;
    // with it each bucket's reduction starts as the last micro-batch's backward produces it; with
    // --overlap-param-gather too each bucket's updated parameters are all-gathered beside the
    // next step's forward, which megatron/training/arguments.py accepts only with
    // --overlap-grad-reduce and the distributed optimizer.
    bool overlapGrads = has("--overlap-grad-reduce");
    bool overlapParams = has("--overlap-param-gather");
    if (overlapParams && !has("--use-distributed-optimizer"))
      diags.error(locOf("--overlap-param-gather"),
                  "--overlap-param-gather needs --use-distributed-optimizer: it overlaps the "
                  "distributed optimizer's all-gather of the updated parameters with the next "
                  "step's forward (Megatron-LM refuses it without)");
    if (overlapParams && !overlapGrads)
      diags.error(locOf("--overlap-param-gather"),
                  "--overlap-param-gather needs --overlap-grad-reduce (Megatron-LM refuses it "
                  "without)");
    // Without its fusion Megatron-LM adds each fresh weight gradient into the main gradient in
    // its data-parallel module's backward hook (main_grad.add_).
    if (has("--no-gradient-accumulation-fusion"))
      imported.gradAccumulation = "add";
    if (d * c > 1)
      imported.dpOverlap = !overlapGrads   ? ir::DataParallelOverlap::None
                           : overlapParams ? ir::DataParallelOverlap::All
                                           : ir::DataParallelOverlap::Grads;
    std::string granularity = getString("--recompute-granularity", "");
    if (has("--recompute-activations"))
      granularity = "selective";
    // Megatron-Core's batch-level overlap of the expert all-to-alls, which it runs only over
    // expert parallelism, over a pipeline only when interleaved, and with --delay-wgrad-compute
    // only beside it (megatron/core/transformer/transformer_config.py).
    if (has("--delay-wgrad-compute") && !has("--overlap-moe-expert-parallel-comm"))
      diags.error(locOf("--delay-wgrad-compute"),
                  "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm (Megatron-Core "
                  "refuses it without)");
    if (has("--overlap-moe-expert-parallel-comm")) {
      if (e <= 1)
        diags.error(locOf("--overlap-moe-expert-parallel-comm"),
                    "--overlap-moe-expert-parallel-comm overlaps the expert-parallel all-to-alls "
                    "and needs --expert-model-parallel-size above 1");
      else if (p > 1 && !has("--num-layers-per-virtual-pipeline-stage") &&
               !(layout && static_cast<int64_t>(layout->layers.size()) > p) &&
               !(virtualStages && *virtualStages > 1))
        diags.error(locOf("--overlap-moe-expert-parallel-comm"),
                    "--overlap-moe-expert-parallel-comm over a pipeline needs the interleaved "
                    "schedule (--num-layers-per-virtual-pipeline-stage): Megatron-Core pairs the "
                    "micro-batches' forward and backward passes only there");
      else if (granularity == "full")
        diags.error(locOf("--overlap-moe-expert-parallel-comm"),
                    "--overlap-moe-expert-parallel-comm with --recompute-granularity full: "
                    "Megatron-Core refuses whole-layer recomputation with it");
      else
        imported.epOverlap = ir::ExpertOverlap::On;
    }
    std::string recompute;
    if (granularity == "full") {
      // uniform: groups of n layers keep one input each (n = 1 is Place's recompute); block:
      // the first n layers of each model chunk are recomputed, the rest keep everything.
      std::string method = getString("--recompute-method", "uniform");
      std::optional<int64_t> n = has("--recompute-num-layers") ? getInt("--recompute-num-layers")
                                                               : std::optional<int64_t>(1);
      if (method != "uniform" && method != "block")
        diags.error(locOf("--recompute-method"),
                    "--recompute-method is 'uniform' or 'block', not '" + method + "'");
      else if (n && method == "block")
        recompute = "recompute(layers = " + std::to_string(*n) + ")";
      else if (n && *n == 1)
        recompute = "recompute";
      else if (n)
        diags.error(locOf("--recompute-num-layers"),
                    "--recompute-method uniform with --recompute-num-layers " + std::to_string(*n) +
                        " keeps one input per group of layers, which Place does not express: "
                        "its recompute keeps each layer's input (--recompute-num-layers 1), and "
                        "recompute(layers = n) is --recompute-method block");
    } else if (granularity == "selective") {
      // Megatron-Core checkpoints the core attention (recompute_modules core_attn, the default):
      // Place's recompute(selective) under its unfused attention (Korthikanti et al.'s set), and
      // recompute(attention) under a fused backend (the kernel's forward again).
      std::string effective = !modelName.empty() && !options.modelAttention.empty()
                                  ? options.modelAttention
                                  : attention;
      // --recompute-modules names them (core_attn by default): Place's recompute(…) with the
      // same names, held to the model as the verifier holds it (cost::getModuleRecomputeObstacle).
      std::string modules = getString("--recompute-modules", "core_attn");
      SmallVector<StringRef> names;
      StringRef(modules).split(names, ' ', -1, /*KeepEmpty=*/false);
      unsigned bits = 0;
      bool known = true;
      for (StringRef module : names) {
        if (std::optional<ir::RecomputeModule> bit = ir::findRecomputeModule(module)) {
          bits |= *bit;
          continue;
        }
        known = false;
        diags.error(locOf("--recompute-modules"),
                    ir::isUndescribedRecomputeModule(module)
                        ? "--recompute-modules " + module +
                              ": Megatron-Core's checkpoint of the whole " +
                              (module == "moe" ? "MoE layer" : "shared experts' MLP") +
                              " is not one placec describes (it describes core_attn, moe_act, "
                              "layernorm, mla_up_proj and mlp)"
                        : "--recompute-modules " + module +
                              ": not a module placec describes (core_attn, moe_act, layernorm, "
                              "mla_up_proj, mlp)");
      }
      const ir::Model *rules = options.model                                  ? options.model
                               : flagModel.kind == ir::ModelKind::Transformer ? &flagModel
                                                                              : nullptr;
      if (known && bits != ir::kRecomputeCoreAttention && bits != 0 && rules)
        if (std::string why = cost::getModuleRecomputeObstacle(*rules, bits); !why.empty())
          diags.error(locOf("--recompute-modules"), "--recompute-modules " + modules + ": " + why);
      if (bits == 0 || bits == ir::kRecomputeCoreAttention)
        recompute = effective == "materialized" ? "recompute(selective)" : "recompute(attention)";
      else
        recompute = ir::getActivationModeText(ir::ActivationMode::RecomputeModules, 0, bits);
    } else if (!granularity.empty()) {
      diags.error(locOf("--recompute-granularity"),
                  "--recompute-granularity is 'full' or 'selective', not '" + granularity + "'");
    }
    if (has("--sequence-parallel") && t > 1)
      imported.activations = recompute.empty() ? "shard(tp)" : "shard(tp), " + recompute;
    else
      imported.activations = recompute;
    if (has("--tp-comm-overlap")) {
      if (t == 1 || !has("--sequence-parallel"))
        diags.error(locOf("--tp-comm-overlap"),
                    "--tp-comm-overlap overlaps the all-gathers and reduce-scatters of sequence "
                    "parallelism; it needs --tensor-model-parallel-size above 1 and "
                    "--sequence-parallel");
      else
        imported.asyncTp = ir::AsyncTensorParallel::All;
    } else if (t > 1) {
      // Without it the column-parallel linears still reduce each input gradient beside the
      // weight gradient (megatron/core/tensor_parallel/layers.py; Transformer Engine's Linear
      // alike), which nothing turns off.
      imported.asyncTp = ir::AsyncTensorParallel::WeightGradient;
    }
    // The loss: Megatron-LM's vocabulary-parallel cross-entropy, a kernel per operation over an
    // fp32 copy of the logits unless --cross-entropy-loss-fusion
    // (megatron/core/models/common/language_module/language_module.py), whose `te` implementation
    // is one fused kernel each way and whose `native` one (the default) runs the operations in
    // four torch.compile'd functions (megatron/core/fusions/fused_cross_entropy.py).
    std::string fusionImpl = getString("--cross-entropy-fusion-impl", "native");
    if (fusionImpl != "native" && fusionImpl != "te")
      diags.error(locOf("--cross-entropy-fusion-impl"),
                  "--cross-entropy-fusion-impl is native or te, not '" + fusionImpl + "'");
    else if (!has("--cross-entropy-loss-fusion"))
      imported.crossEntropy = "vocab_parallel";
    else if (fusionImpl == "native")
      imported.crossEntropy = "fused_vocab_parallel";
    imported.microBatch = *micro;
    imported.globalBatch = globalBatch;
    if (has("--bf16") && has("--fp16"))
      diags.error(locOf("--fp16"), "--bf16 and --fp16 are both given");
    ir::Fp8Scaling scaling = ir::Fp8Scaling::Tensor;
    bool fp8Params = false;
    ir::Precision precision = has("--bf16")   ? ir::Precision::MixedBF16
                              : has("--fp16") ? ir::Precision::MixedFP16
                                              : ir::Precision::FP32;
    // The gradients' type (megatron/training/arguments.py): under --bf16 Megatron-LM accumulates
    // and all-reduces them in fp32 unless --grad-reduce-in-bf16 or --main-grads-dtype bf16 says
    // otherwise; under --fp16 only --accumulate-allreduce-grads-in-fp32 does.
    std::string mainGrads = getString("--main-grads-dtype", "fp32");
    if (mainGrads != "fp32" && mainGrads != "bf16")
      diags.error(locOf("--main-grads-dtype"),
                  "--main-grads-dtype is fp32 or bf16, not '" + mainGrads + "'");
    bool fp32Grads = false;
    if (has("--grad-reduce-in-bf16")) {
      if (precision != ir::Precision::MixedBF16)
        diags.error(locOf("--grad-reduce-in-bf16"), "--grad-reduce-in-bf16 needs --bf16");
      if (has("--accumulate-allreduce-grads-in-fp32"))
        diags.error(locOf("--accumulate-allreduce-grads-in-fp32"),
                    "--accumulate-allreduce-grads-in-fp32 and --grad-reduce-in-bf16 are both "
                    "given");
    } else if (has("--accumulate-allreduce-grads-in-fp32")) {
      if (mainGrads != "fp32")
        diags.error(locOf("--main-grads-dtype"),
                    "--main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32");
      fp32Grads = precision != ir::Precision::FP32;
    } else {
      fp32Grads = precision == ir::Precision::MixedBF16 && mainGrads == "fp32";
    }
    // FP8: --fp8-format e4m3 (every tensor E4M3) or hybrid (E4M3 forward, E5M2 gradients); both
    // run the layers' products in FP8 over bf16 training, which is Place's mixed(fp8).
    if (has("--fp8-format")) {
      std::string format = getString("--fp8-format", "");
      if (format != "e4m3" && format != "hybrid")
        diags.error(locOf("--fp8-format"), "--fp8-format is e4m3 or hybrid, not '" + format + "'");
      else if (!has("--bf16"))
        diags.error(locOf("--fp8-format"),
                    "--fp8-format without --bf16: Place's mixed(fp8) keeps bf16 outside the "
                    "FP8 products");
      std::string recipe = getString("--fp8-recipe", "delayed");
      if (recipe == "mxfp8")
        scaling = ir::Fp8Scaling::Mx;
      else if (recipe == "tensorwise")
        scaling = ir::Fp8Scaling::Current;
      else if (recipe != "delayed")
        diags.error(locOf("--fp8-recipe"),
                    "--fp8-recipe " + recipe +
                        " scales blocks of a tensor that placec does not model; it models "
                        "delayed or tensorwise scaling and mxfp8");
      // MXFP8 parameters (--fp8-param-gather under mxfp8) are kept as MXFP8 tensors only, with no
      // bf16 copy, and with --reuse-grad-buf-for-mxfp8-param-ag they are all-gathered in bf16
      // through the gradient buffer and cast after the gather (Megatron-Core's
      // distributed/param_and_grad_buffer.py: the shared buffer and the copy into param.data):
      // Place's `params = fp8`. Without that flag the all-gathers take a bf16 buffer of their
      // own, which placec does not count.
      // Under one scale per tensor --fp8-param-gather makes the parameters Transformer Engine's
      // FP8 tensors alone (fp8_model_init), all-gathered as FP8 by the distributed optimizer:
      // `gather = fp8, params = fp8`.
      fp8Params = has("--fp8-param-gather");
      if (scaling == ir::Fp8Scaling::Mx && fp8Params) {
        if (!has("--reuse-grad-buf-for-mxfp8-param-ag"))
          diags.error(locOf("--fp8-param-gather"),
                      "--fp8-param-gather with --fp8-recipe mxfp8 but without "
                      "--reuse-grad-buf-for-mxfp8-param-ag: Megatron-Core then all-gathers the "
                      "MXFP8 parameters in a bf16 buffer of their own, which placec does not "
                      "count; add the flag (Place's params = fp8 gathers through the gradient "
                      "buffer), or leave --fp8-param-gather out to count bf16 parameters beside "
                      "their MXFP8 cast");
      }
      precision = ir::Precision::MixedFP8;
    } else {
      for (StringRef flag : {"--fp8-param-gather", "--fp8-recipe"})
        if (has(flag))
          diags.error(locOf(flag), flag + " needs --fp8-format");
    }
    // FP4: --fp4-format e2m1 runs the layers' products in NVFP4 (Transformer Engine's
    // NVFP4BlockScaling, Megatron-Core's --fp4-recipe nvfp4, its default), Place's mixed(fp4).
    if (has("--fp4-format")) {
      std::string format = getString("--fp4-format", "");
      std::string recipe = getString("--fp4-recipe", "nvfp4");
      if (format != "e2m1")
        diags.error(locOf("--fp4-format"), "--fp4-format is e2m1, not '" + format + "'");
      else if (has("--fp8-format"))
        diags.error(locOf("--fp4-format"), "--fp4-format and --fp8-format are both given");
      else if (!has("--bf16"))
        diags.error(locOf("--fp4-format"),
                    "--fp4-format without --bf16: Place's mixed(fp4) keeps bf16 outside the "
                    "NVFP4 products");
      else if (recipe != "nvfp4")
        diags.error(locOf("--fp4-recipe"), "--fp4-recipe " + recipe +
                                               ": placec models Transformer Engine's nvfp4 "
                                               "recipe only");
      // --fp4-param-gather keeps the parameters as NVFP4 tensors alone and all-gathers their
      // packed values: `params = fp4`.
      fp8Params = has("--fp4-param-gather");
      precision = ir::Precision::MixedFP8;
      scaling = ir::Fp8Scaling::Nvfp4;
    } else {
      for (StringRef flag : {"--fp4-param-gather", "--fp4-recipe"})
        if (has(flag))
          diags.error(locOf(flag), flag + " needs --fp4-format");
    }
    // Megatron-LM's FP8 runs on Transformer Engine's linears, which keep their inputs for the
    // backward as FP8: `saved = fp8`.
    bool fp8 = precision == ir::Precision::MixedFP8;
    // --fp8-dot-product-attention: Transformer Engine's FP8 attention, `attention = fp8`.
    if (has("--fp8-dot-product-attention") && !fp8)
      diags.error(locOf("--fp8-dot-product-attention"),
                  "--fp8-dot-product-attention needs --fp8-format or --fp4-format");
    imported.precision =
        ir::spellPrecision(precision, fp8Params && !ir::isBlockScaled(scaling), fp32Grads, false,
                           fp8, scaling, fp8 && has("--fp8-dot-product-attention"), fp8Params);
    std::string optimizer = getString("--optimizer", "adam");
    // Megatron-Core's precision-aware optimizer (megatron/training/arguments.py): the moments in
    // --exp-avg-dtype and --exp-avg-sq-dtype (fp32 by default), the main parameters in
    // --main-params-dtype (fp32 by default); the dtype flags need it.
    bool precisionAware = has("--use-precision-aware-optimizer");
    std::string expAvg = getString("--exp-avg-dtype", "fp32");
    std::string expAvgSq = getString("--exp-avg-sq-dtype", "fp32");
    for (StringRef flag : {"--exp-avg-dtype", "--exp-avg-sq-dtype", "--main-params-dtype"})
      if (has(flag) && !precisionAware)
        diags.error(locOf(flag), flag + " needs --use-precision-aware-optimizer");
    for (auto [flag, dtype] : {std::pair<StringRef, StringRef>{"--exp-avg-dtype", expAvg},
                               {"--exp-avg-sq-dtype", expAvgSq}})
      if (dtype != "fp32" && dtype != "bf16")
        diags.error(locOf(flag), flag + " " + dtype +
                                     ": Place's Adam keeps its moments in fp32 or bf16 "
                                     "(adam(moments = bf16))");
    if (expAvg != expAvgSq && (expAvg == "fp32" || expAvg == "bf16") &&
        (expAvgSq == "fp32" || expAvgSq == "bf16"))
      diags.error(locOf("--exp-avg-sq-dtype"), "--exp-avg-dtype " + expAvg +
                                                   " with --exp-avg-sq-dtype " + expAvgSq +
                                                   ": Place's Adam keeps both moments in one type");
    std::string mainParams = getString("--main-params-dtype", "fp32");
    if (mainParams != "fp32")
      diags.error(locOf("--main-params-dtype"),
                  "--main-params-dtype " + mainParams +
                      ": Place's master copy of 16-bit parameters is fp32");
    if (optimizer == "adam")
      imported.optimizerKind = expAvg == "bf16" ? "adam(moments = bf16)" : "adam";
    else if (optimizer == "sgd")
      imported.optimizerKind =
          getString("--sgd-momentum", "0.9") == "0" ? "sgd" : "sgd(momentum = true)";
    else
      diags.error(locOf("--optimizer"), "--optimizer is 'adam' or 'sgd', not '" + optimizer + "'");
    if (diags.hasErrors())
      return false;
    writePlace(imported, options, "Megatron-LM flags", name, modelText, modelName, os);
    return true;
  }

  const ImportOptions &options;
  DiagnosticEngine &diags;
  StringRef text;
  std::vector<Word> words;
  std::vector<Word> ignored;
  std::map<std::string, std::pair<std::string, size_t>, std::less<>> flags;
  /// The model the flags declare, as far as the strategy's rules read it (its layers, attention
  /// kernel, latent attention and MoE layers); abstract when a model is named or none declared.
  ir::Model flagModel;
};

} // namespace

bool importDeepSpeed(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags,
                     raw_ostream &os) {
  return DeepSpeedImporter(bufferId, options, diags).run(os);
}

bool importMegatron(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags,
                    raw_ostream &os) {
  return MegatronImporter(bufferId, options, diags).run(os);
}

} // namespace placec::bridge
