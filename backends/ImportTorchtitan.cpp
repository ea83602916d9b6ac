// Imports a torchtitan TOML job config as a Place strategy and run (and, for torchtitan's Llama 3
// flavors, the model). Parsed with toml++; errors carry the key path and its line and column.
// Keys that change the placement and that Place cannot express are errors, never dropped
// (docs/bridges.md, "torchtitan jobs").
#include "ImportSupport.h"
#include "placec/backends/Export.h"
#include "placec/passes/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"

// Header-only, without exceptions: parse errors come back in the result.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#if __has_include(<toml++/toml.hpp>)
#include <toml++/toml.hpp>
#else
#include <toml++/toml.h>
#endif

#include <optional>
#include <string>
#include <vector>

using namespace llvm;

namespace placec::bridge {

namespace {

using namespace detail;

/// The keys placec knows in a torchtitan job config (torchtitan/config/job_config.py), by path.
/// `*` after a section means its contents change neither the model nor the placement (logging,
/// checkpoints, the learning-rate schedule) and are not checked.
constexpr const char *kTorchtitanKeys[] = {
    "job*",
    "profiling*",
    "metrics*",
    "lr_scheduler*",
    "checkpoint*",
    "comm*",
    "memory_estimation*",
    "validation*",
    "mx*",
    "model",
    "model.name",
    "model.flavor",
    "model.tokenizer_path",
    "model.hf_assets_path",
    "model.converters",
    "model.print_after_conversion",
    "optimizer",
    "optimizer.name",
    "optimizer.lr",
    "optimizer.beta1",
    "optimizer.beta2",
    "optimizer.eps",
    "optimizer.weight_decay",
    "optimizer.implementation",
    "optimizer.early_step_in_backward",
    "training",
    "training.dataset",
    "training.dataset_path",
    "training.local_batch_size",
    "training.batch_size",
    "training.global_batch_size",
    "training.seq_len",
    "training.max_norm",
    "training.steps",
    "training.warmup_steps",
    "training.enable_cpu_offload",
    "training.mixed_precision_param",
    "training.mixed_precision_reduce",
    "training.compile",
    "training.gc_freq",
    "training.gc_debug",
    "training.seed",
    "training.deterministic",
    "parallelism",
    "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree",
    "parallelism.enable_compiled_autograd",
    "parallelism.fsdp_reshard_after_forward",
    "parallelism.tensor_parallel_degree",
    "parallelism.disable_loss_parallel",
    "parallelism.enable_async_tensor_parallel",
    "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_split_points",
    "parallelism.pipeline_parallel_layers_per_stage",
    "parallelism.pipeline_parallel_first_stage_less_layers",
    "parallelism.pipeline_parallel_last_stage_less_layers",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_schedule_csv",
    "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.context_parallel_degree",
    "parallelism.context_parallel_rotate_method",
    "parallelism.expert_parallel_degree",
    "parallelism.expert_tensor_parallel_degree",
    "activation_checkpoint",
    "activation_checkpoint.mode",
    "activation_checkpoint.selective_ac_option",
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
    "float8",
    "float8.enable_fsdp_float8_all_gather",
    "float8.precompute_float8_dynamic_scale_for_fsdp",
    "float8.force_recompute_fp8_weight_in_bwd",
    "float8.recipe_name",
    "float8.filter_fqns",
    "float8.emulate",
    "float8.moe_fqns_prototype",
    "float8.enable_float8_linear",
    "fault_tolerance",
    "fault_tolerance*",
    "experimental*",
};

/// torchtitan's Llama 3 flavors (torchtitan/models/llama3/__init__.py, llama3_configs): dim,
/// n_layers, n_heads, n_kv_heads, and the MLP width that Llama's rule gives from
/// ffn_dim_multiplier and multiple_of: 4·dim·2/3, times the multiplier, rounded up to the
/// multiple (8B: 4096 → 14336; 70B: 8192 → 28672; 405B: 16384 → 53248, the widths of Meta's
/// published Llama 3.1 configs). The vocabulary is the Llama 3 tokenizer's 128,256 tokens.
struct Flavor {
  const char *name;
  int64_t layers, hidden, heads, kvHeads, ffn;
};
constexpr Flavor kLlama3Flavors[] = {
    {"8B", 32, 4096, 32, 8, 14336},
    {"70B", 80, 8192, 64, 8, 28672},
    {"405B", 126, 16384, 128, 8, 53248},
};
constexpr int64_t kLlama3Vocab = 128256;

} // namespace

const char *detail::findTorchtitanFlavor(const ir::TransformerConfig &config) {
  for (const Flavor &flavor : kLlama3Flavors)
    if (config.layers == flavor.layers && config.hidden == flavor.hidden &&
        config.heads == flavor.heads && config.getKvHeads() == flavor.kvHeads &&
        config.ffn == flavor.ffn && config.vocab == kLlama3Vocab &&
        config.mlp == ir::MlpActivation::Swiglu && config.norm == ir::NormKind::RmsNorm &&
        !config.bias && !config.qkvBias && config.positions == ir::PositionKind::Rope &&
        !config.tiedEmbeddings && !config.moe.isEnabled() && config.headDim == 0 &&
        !config.qkNorm && !config.isWindowed() && !config.postNorm && !config.isLatentAttention() &&
        !config.sinks && config.mtpLayers == 0)
      return flavor.name;
  return nullptr;
}

namespace {

class TorchtitanImporter {
public:
  TorchtitanImporter(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags)
      : options(options), diags(diags),
        text(diags.getSourceMgr().getMemoryBuffer(bufferId)->getBuffer()) {
    lineStarts.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n')
        lineStarts.push_back(i + 1);
    for (const char *key : kTorchtitanKeys) {
      StringRef path(key);
      if (path.consume_back("*"))
        freeForm.insert(path);
      else
        known.insert(path);
    }
  }

  /// toml++ 3.3 asks whether a character is whitespace with a generated table that reaches an
  /// unreachable branch for U+00A1-U+0499, U+2C5E-U+3057 (but U+3000) and U+FB26-U+FEFE (the
  /// blocks of 0x3FA code points from U+00A0 whose bit is clear in its mask and that its switch
  /// does not list: blocks 0, 11 and 63), and it
  /// asks that of characters in strings too. The offset of the first such character that is not
  /// in a comment (where toml++ does not ask), or npos. A string opens only where TOML allows one
  /// (after `=`, `[`, `,`, `{`, `.` or at the start of a line), as toml++ reads it.
  size_t findUnsafeCharacter() const {
    auto unsafe = [](uint32_t c) {
      return (c >= 0xA1 && c <= 0x499) || (c >= 0x2C5E && c <= 0x3057 && c != 0x3000) ||
             (c >= 0xFB26 && c <= 0xFEFE);
    };
    size_t i = 0, n = text.size();
    char last = '\n';
    bool inString = false;
    char quote = 0;
    bool multiLine = false;
    while (i < n) {
      unsigned char c = text[i];
      if (!inString && c == '#') {
        while (i < n && text[i] != '\n')
          ++i;
        continue;
      }
      if (!inString && (c == '"' || c == '\'') &&
          (last == '=' || last == '[' || last == ',' || last == '{' || last == '.' ||
           last == '\n')) {
        inString = true;
        quote = c;
        multiLine = text.substr(i).starts_with(StringRef(std::string(3, c)));
        i += multiLine ? 3 : 1;
        continue;
      }
      if (inString) {
        // An escape: the backslash, then the escaped character (checked below when it is not
        // ASCII, since toml++ tests it for whitespace).
        if (c == '\\' && quote == '"') {
          ++i;
          if (i < n && static_cast<unsigned char>(text[i]) < 0x80)
            ++i;
          continue;
        }
        if (multiLine ? text.substr(i).starts_with(StringRef(std::string(3, quote))) : c == quote) {
          inString = false;
          i += multiLine ? 3 : 1;
          last = quote;
          continue;
        }
        if (c == '\n' && !multiLine)
          inString = false;
      }
      if (c >= 0x80) {
        // Decode the UTF-8 sequence (toml++ rejects malformed ones itself).
        size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        uint32_t cp = length == 4 ? c & 0x07 : length == 3 ? c & 0x0F : c & 0x1F;
        for (size_t k = 1; k < length && i + k < n; ++k)
          cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        if (length > 1 && unsafe(cp))
          return i;
        i += length;
        if (!inString)
          last = 'x';
        continue;
      }
      if (!inString && c != ' ' && c != '\t' && c != '\r')
        last = c;
      ++i;
    }
    return StringRef::npos;
  }

  bool run(raw_ostream &os) {
    if (size_t unsafe = findUnsafeCharacter(); unsafe != StringRef::npos) {
      diags.error(SMLoc::getFromPointer(text.data() + unsafe),
                  "placec's TOML reader (toml++ 3.3) misreads this character outside a comment; "
                  "remove it or move it into a comment");
      return false;
    }
    toml::parse_result result =
        toml::parse(std::string_view(text.data(), text.size()), options.inputName);
    if (!result) {
      const toml::parse_error &error = result.error();
      diags.error(locAt(error.source().begin),
                  "not a TOML document: " + Twine(std::string(error.description())));
      return false;
    }
    root = &result.table();
    checkKeys(*root, "");
    if (diags.hasErrors())
      return false;
    // dp_overlap stays grads: FSDP2 and DDP reduce each unit's gradients as the backward
    // produces them, and FSDP2 gathers the parameters before each forward, not after the step.
    Imported imported;
    std::string modelText, modelName;
    std::string name = makeName(options.name, options.inputName, "torchtitan");
    if (!translate(imported, name, modelText, modelName))
      return false;
    writePlace(imported, options, "torchtitan job config", name, modelText, modelName, os);
    return true;
  }

private:
  SMLoc locAt(const toml::source_position &position) const {
    if (position.line == 0 || position.line > lineStarts.size())
      return SMLoc::getFromPointer(text.data());
    size_t offset = lineStarts[position.line - 1] + (position.column ? position.column - 1 : 0);
    return SMLoc::getFromPointer(text.data() + std::min(offset, text.size()));
  }

  /// Where the key at `path` is written (its value, which toml++ places), or the start.
  SMLoc locOf(StringRef path) const {
    auto it = positions.find(path);
    if (it != positions.end())
      return locAt(it->second);
    return SMLoc::getFromPointer(text.data());
  }

  /// Unknown keys are errors: torchtitan rejects them too, and a misspelled key read as absent
  /// would import a different job. Records where every key is.
  void checkKeys(const toml::table &table, const std::string &prefix) {
    bool freeSection = !prefix.empty() && freeForm.contains(prefix);
    for (auto &&[key, node] : table) {
      std::string path = (prefix.empty() ? "" : prefix + ".") + std::string(key.str());
      toml::source_position where = key.source().begin;
      if (where.line == 0)
        where = node.source().begin;
      positions[path] = where;
      if (freeSection)
        continue;
      if (freeForm.contains(path) || known.contains(path)) {
        if (const toml::table *child = node.as_table())
          checkKeys(*child, path);
        else if (prefix.empty())
          diags.error(locAt(where), "'" + path + "' must be a [" + path + "] section");
        continue;
      }
      std::vector<StringRef> siblings;
      for (const auto &candidate : known.keys()) {
        auto [parent, leaf] = candidate.rsplit('.');
        if (prefix.empty() ? leaf.empty() : parent == prefix)
          siblings.push_back(leaf.empty() ? parent : leaf);
      }
      if (prefix.empty())
        for (const auto &candidate : freeForm.keys())
          siblings.push_back(candidate);
      llvm::sort(siblings);
      StringRef word(key.str().data(), key.str().size());
      std::string suggestion = closest(word, siblings, std::max<unsigned>(2, word.size() / 4));
      diags.error(locAt(where), "unknown torchtitan key '" + path + "'" +
                                    (suggestion.empty() ? std::string()
                                                        : "; did you mean '" + suggestion + "'?"));
    }
  }

  const toml::node *lookup(StringRef path) const {
    auto [section, key] = path.split('.');
    const toml::node *table = root->get(std::string_view(section.data(), section.size()));
    if (!table || !table->is_table())
      return nullptr;
    return table->as_table()->get(std::string_view(key.data(), key.size()));
  }

  /// A whole number from `min` to 2⁴⁰ (far above any degree, batch or sequence, so that their
  /// products are checked without overflow).
  std::optional<int64_t> getInt(StringRef path, int64_t min = 1) {
    constexpr int64_t kMax = int64_t(1) << 40;
    const toml::node *node = lookup(path);
    if (!node)
      return std::nullopt;
    if (std::optional<int64_t> value = node->value_exact<int64_t>();
        value && *value >= min && *value <= kMax)
      return value;
    diags.error(locOf(path),
                "'" + path + "' must be a whole number from " + Twine(min) + " to 2^40");
    return std::nullopt;
  }

  std::optional<bool> getBool(StringRef path) {
    const toml::node *node = lookup(path);
    if (!node)
      return std::nullopt;
    if (std::optional<bool> value = node->value_exact<bool>())
      return value;
    diags.error(locOf(path), "'" + path + "' must be true or false");
    return std::nullopt;
  }

  std::optional<std::string> getString(StringRef path) {
    const toml::node *node = lookup(path);
    if (!node)
      return std::nullopt;
    if (std::optional<std::string_view> value = node->value_exact<std::string_view>())
      return std::string(*value);
    diags.error(locOf(path), "'" + path + "' must be a string");
    return std::nullopt;
  }

  /// A list of strings; torchtitan also takes one comma-separated string.
  std::optional<std::vector<std::string>> getList(StringRef path) {
    const toml::node *node = lookup(path);
    if (!node)
      return std::nullopt;
    std::vector<std::string> items;
    if (std::optional<std::string_view> value = node->value_exact<std::string_view>()) {
      SmallVector<StringRef> parts;
      StringRef(value->data(), value->size()).split(parts, ',', -1, false);
      for (StringRef part : parts)
        items.push_back(part.trim().str());
      return items;
    }
    if (const toml::array *array = node->as_array()) {
      for (const toml::node &item : *array) {
        std::optional<std::string_view> value = item.value_exact<std::string_view>();
        if (!value) {
          diags.error(locOf(path), "'" + path + "' must be a list of strings");
          return std::nullopt;
        }
        items.push_back(std::string(*value));
      }
      return items;
    }
    diags.error(locOf(path), "'" + path + "' must be a list of strings");
    return std::nullopt;
  }

  /// Reports a key whose value Place cannot express.
  void refuse(StringRef path, const Twine &why) {
    diags.error(locOf(path), "torchtitan key '" + path + "': " + why);
  }

  /// `pipeline_parallel_split_points` as Place's `, first = f, last = l` (empty for an even
  /// split); reports what Place cannot express.
  std::string readSplitPoints(ArrayRef<std::string> points, int64_t pp, int64_t layers,
                              StringRef schedule) {
    StringRef key = "parallelism.pipeline_parallel_split_points";
    if (schedule != "1F1B" && schedule != "GPipe") {
      refuse(key, "split points with '" + schedule +
                      "': Place gives the first and last stages their own sizes under 1F1B and "
                      "GPipe only");
      return "";
    }
    if (int64_t(points.size()) != pp - 1) {
      refuse(key, Twine(points.size()) + " split points make " + Twine(points.size() + 1) +
                      " stages, but pipeline_parallel_degree is " + Twine(pp));
      return "";
    }
    if (layers <= 0) {
      refuse(key, "the model's layer count is unknown");
      return "";
    }
    std::vector<int64_t> starts = {0};
    for (const std::string &point : points) {
      StringRef rest(point);
      int64_t index = 0;
      if (!rest.consume_front("layers.") || rest.getAsInteger(10, index) ||
          index <= starts.back() || index >= layers) {
        refuse(key, "'" + point + "' is not \"layers.N\" with N increasing from 1 to " +
                        Twine(layers - 1));
        return "";
      }
      starts.push_back(index);
    }
    starts.push_back(layers);
    std::vector<int64_t> sizes;
    for (size_t i = 0; i + 1 < starts.size(); ++i)
      sizes.push_back(starts[i + 1] - starts[i]);
    int64_t first = sizes.front(), last = sizes.back();
    for (size_t i = 1; i + 1 < sizes.size(); ++i)
      if (sizes[i] != sizes[1]) {
        refuse(key, "the middle stages hold different numbers of layers; Place gives the first "
                    "and the last stage their own sizes and the others an even share");
        return "";
      }
    int64_t middle = sizes.size() > 2 ? sizes[1] : 0;
    if (sizes.size() > 2 && first == middle && last == middle)
      return ""; // An even split.
    std::string out;
    if (sizes.size() == 2 || first != middle)
      out += ", first = " + std::to_string(first);
    if (sizes.size() == 2 || last != middle)
      out += ", last = " + std::to_string(last);
    return out;
  }

  bool translate(Imported &imported, StringRef name, std::string &modelText,
                 std::string &modelName) {
    // Degrees (torchtitan's defaults: every degree 1, data_parallel_shard_degree -1 for the
    // ranks left over).
    int64_t replicate = getInt("parallelism.data_parallel_replicate_degree").value_or(1);
    std::optional<int64_t> shardValue = getInt("parallelism.data_parallel_shard_degree", -1);
    int64_t tp = getInt("parallelism.tensor_parallel_degree").value_or(1);
    int64_t pp = getInt("parallelism.pipeline_parallel_degree").value_or(1);
    int64_t cp = getInt("parallelism.context_parallel_degree").value_or(1);
    int64_t ep = getInt("parallelism.expert_parallel_degree").value_or(1);
    std::optional<int64_t> etp = getInt("parallelism.expert_tensor_parallel_degree");
    std::optional<int64_t> localValue = getInt("training.local_batch_size");
    std::optional<int64_t> legacyBatch = getInt("training.batch_size");
    std::optional<int64_t> globalValue = getInt("training.global_batch_size", -1);
    std::optional<int64_t> seqValue = getInt("training.seq_len");
    int64_t microSize = getInt("parallelism.pipeline_parallel_microbatch_size").value_or(1);
    std::optional<int64_t> layersPerStage =
        getInt("parallelism.pipeline_parallel_layers_per_stage");
    if (diags.hasErrors())
      return false;
    if (ep != 1 && options.modelExperts == 0)
      refuse("parallelism.expert_parallel_degree",
             "expert parallelism needs a mixture-of-experts model: name one declared with "
             "'experts' with --model");
    if (localValue && legacyBatch)
      refuse("training.batch_size", "give local_batch_size or its older name batch_size, not both");
    int64_t local = localValue ? *localValue : legacyBatch.value_or(8);

    // The model.
    int64_t layers = options.layers;
    if (!options.modelName.empty()) {
      modelName = options.modelName;
      if (seqValue && options.modelSeq > 0 && *seqValue != options.modelSeq)
        refuse("training.seq_len",
               Twine(*seqValue) + " differs from seq = " + Twine(options.modelSeq) + " of model '" +
                   modelName + "'; placec's model has one sequence length");
    } else {
      std::string family = getString("model.name").value_or("llama3");
      std::string flavorName = getString("model.flavor").value_or("debugmodel");
      const Flavor *flavor = nullptr;
      for (const Flavor &candidate : kLlama3Flavors)
        if (flavorName == candidate.name)
          flavor = &candidate;
      if (family != "llama3") {
        refuse("model.name", "model '" + family +
                                 "' is not one whose shape placec knows (llama3); declare it in "
                                 "the --from file and name it with --model");
        return false;
      }
      if (!flavor) {
        refuse("model.flavor", "flavor '" + flavorName +
                                   "' is not one whose shape placec knows (8B, 70B, 405B); "
                                   "declare the model in the --from file and name it with --model");
        return false;
      }
      layers = flavor->layers;
      modelName = name.str() + "_model";
      int64_t seq = seqValue.value_or(2048);
      std::string body;
      raw_string_ostream m(body);
      // torchtitan's Llama repeats the grouped keys and values to every head before
      // scaled_dot_product_attention (repeat_kv, models/llama/model.py at commit 9dec370):
      // kv_repeat = true. It applies the rotary embedding as a complex product
      // (apply_rotary_emb, torch.view_as_complex; models/common/rope.py since), which
      // torch.compile leaves to PyTorch's kernels: rope_complex = true. Its wq, wk, wv and w1, w3
      // are linears of their own: projections = separate.
      m << "// torchtitan's llama3 flavor " << flavor->name << ".\n";
      m << "model " << modelName << " : transformer {\n";
      m << "  layers = " << flavor->layers << ";\n  hidden = " << flavor->hidden
        << ";\n  heads = " << flavor->heads << ";\n  kv_heads = " << flavor->kvHeads
        << ";\n  kv_repeat = true;\n  rope_complex = true;\n  projections = separate;\n  seq = "
        << seq << ";\n  vocab = " << kLlama3Vocab << ";\n  ffn = " << flavor->ffn
        << ";\n  mlp = swiglu;\n  norm = rmsnorm;\n  bias = false;\n  positions = rope;\n"
        << "  tied_embeddings = false;\n}\n";
      modelText = body;
    }

    // The mesh: torchtitan's order is pp, dp_replicate, dp_shard, cp, tp, outermost first.
    int64_t devices = options.devices;
    if (devices <= 0) {
      diags.error(SMLoc::getFromPointer(text.data()),
                  "the device count is unknown: give the cluster (--cluster with --from)");
      return false;
    }
    int64_t others = saturatingMul(saturatingMul(replicate, tp), saturatingMul(pp, cp));
    int64_t shard = shardValue.value_or(-1);
    if (shard == 0 || shard < -1) {
      refuse("parallelism.data_parallel_shard_degree", "it is -1 (the ranks left over) or at "
                                                       "least 1");
      return false;
    }
    if (shard == -1) {
      if (devices % others != 0) {
        refuse("parallelism.data_parallel_shard_degree",
               "-1 takes the ranks left over, but replicate × tensor × pipeline × context = " +
                   Twine(others) + " does not divide the " + Twine(devices) +
                   " devices of cluster '" + options.clusterName + "'");
        return false;
      }
      shard = devices / others;
    }
    if (saturatingMul(others, shard) != devices) {
      diags.error(locOf(shardValue ? "parallelism.data_parallel_shard_degree"
                                   : "parallelism.data_parallel_replicate_degree"),
                  "the degrees multiply to " + Twine(saturatingMul(others, shard)) +
                      ", but cluster '" + options.clusterName + "' has " + Twine(devices) +
                      " devices");
      return false;
    }
    if (pp > 1)
      imported.axes.push_back({"pp", pp});
    // Expert parallelism ("dp2ep") takes its ranks from the FSDP ones: [dp_shard / ep, ep]. Under
    // tensor parallelism torchtitan's expert_tensor_parallel_degree (added in aeb3a4baf,
    // 2025-08-13, default 1) says whether the experts are split over the tensor ranks like the
    // dense MLP (tp) or whole, the tensor ranks in their group (1: the group of ep is ep / tp
    // FSDP ranks times the tp tensor ranks, `expert_tensor = fold`).
    if (etp && *etp != 1 && *etp != tp) {
      refuse("parallelism.expert_tensor_parallel_degree",
             Twine(*etp) +
                 ": torchtitan takes 1 (whole experts, the tensor ranks in their "
                 "group) or tensor_parallel_degree, " +
                 Twine(tp));
      return false;
    }
    bool fold = ep > 1 && tp > 1 && etp.value_or(1) == 1;
    // Under context parallelism the expert group takes the context ranks too (torchtitan's
    // ParallelDims asserts ep % cp == 0, ep % (cp · tp) == 0 with the tensor ranks folded in:
    // ep = dp_shard_in_ep · cp [· tp]): `expert_context = fold`.
    bool contextFold = ep > 1 && cp > 1;
    int64_t inner = (fold ? tp : 1) * (contextFold ? cp : 1);
    if (contextFold && (ep % inner != 0 || ep / inner < 2)) {
      refuse("parallelism.expert_parallel_degree",
             Twine(ep) + " with context_parallel_degree " + Twine(cp) +
                 (fold ? " and the " + Twine(tp) +
                             " tensor ranks in the group (expert_tensor_parallel_degree 1)"
                       : Twine()) +
                 ": torchtitan's expert group takes the " + Twine(inner) +
                 " context and tensor ranks it holds before FSDP ranks, which Place says as " +
                 "expert_context = fold with an expert axis of 2 or more FSDP ranks, so it must " +
                 "be a multiple of " + Twine(inner) + " above it");
      return false;
    }
    if (fold && !contextFold && (ep % tp != 0 || ep / tp < 2)) {
      refuse("parallelism.expert_parallel_degree",
             Twine(ep) + " with expert_tensor_parallel_degree 1 (torchtitan's default) over " +
                 Twine(tp) + " tensor ranks: Place folds the tensor ranks into an expert axis " +
                 "of 2 or more FSDP ranks, so it must be a multiple of " + Twine(tp) +
                 " above it (or write expert_tensor_parallel_degree = " + Twine(tp) +
                 " to split the experts)");
      return false;
    }
    int64_t epAxis = ep / inner;
    if (epAxis > 1 && shard % epAxis != 0) {
      refuse("parallelism.expert_parallel_degree",
             Twine(ep) +
                 (inner > 1 ? " over " + Twine(inner) + " tensor and context ranks" : Twine()) +
                 ": " + Twine(epAxis) + " does not divide data_parallel_shard_degree " +
                 Twine(shard));
      return false;
    }
    if (fold)
      imported.expertTensor = ir::ExpertTensor::Fold;
    if (contextFold)
      imported.expertContext = ir::ExpertTensor::Fold;
    ep = epAxis;
    int64_t shardRest = shard / ep;
    bool hybrid = replicate > 1 && shardRest > 1;
    std::string shardAxis = hybrid ? "dp_shard" : "dp";
    if (replicate > 1 || (shardRest == 1 && ep == 1))
      imported.axes.push_back({hybrid ? "dp_replicate" : "dp", replicate});
    if (shardRest > 1)
      imported.axes.push_back({shardAxis, shardRest});
    if (ep > 1)
      imported.axes.push_back({"ep", ep});
    if (cp > 1)
      imported.axes.push_back({"cp", cp});
    if (tp > 1)
      imported.axes.push_back({"tp", tp});
    for (const auto &axis : imported.axes)
      imported.axisKinds.push_back(StringRef(axis.first).starts_with("dp_") ? "batch" : "");

    // FSDP shards over data and context together (torchtitan's dp_shard_cp mesh).
    std::vector<std::string> fsdpAxes;
    if (shardRest > 1)
      fsdpAxes.push_back(shardAxis);
    if (ep > 1)
      fsdpAxes.push_back("ep");
    if (cp > 1)
      fsdpAxes.push_back("cp");
    std::string reshard = getString("parallelism.fsdp_reshard_after_forward").value_or("default");
    if (reshard != "default" && reshard != "always" && reshard != "never")
      refuse("parallelism.fsdp_reshard_after_forward",
             "'" + reshard + "' is none of \"default\", \"always\", \"never\"");
    // "default" reshards after the forward except under a pipeline (torchtitan's
    // parallelize_llama), where each micro-batch would gather again.
    bool keep = reshard == "never" || (reshard == "default" && pp > 1);
    if (!fsdpAxes.empty()) {
      std::string axes = join(fsdpAxes, ", ");
      imported.params = "gather(" + axes + (keep ? ", keep_after_forward = true)" : ")");
      imported.grads = "shard(" + axes + ")";
      imported.optimizer = imported.grads;
    }

    // Context parallelism: torchtitan's rotate methods are PyTorch's context-parallel SDPA
    // exchanges: "allgather" gathers the other ranks' K/V shards, "alltoall" passes them from
    // rank to rank (a ring, each step an all_to_all).
    if (std::optional<std::string> method =
            getString("parallelism.context_parallel_rotate_method")) {
      if (*method == "alltoall")
        imported.context = "ring";
      else if (*method == "allgather")
        imported.context = "all_gather";
      else
        refuse("parallelism.context_parallel_rotate_method",
               "'" + *method + "' is neither \"allgather\" nor \"alltoall\"");
    } else if (cp > 1) {
      imported.context = "all_gather"; // torchtitan's default.
    }
    if (cp == 1)
      imported.context.clear();
    else
      imported.contextMerge = "eager"; // PyTorch's context parallelism, either rotate method.

    // Tensor parallelism: torchtitan's always shards the activations along the sequence, and
    // its column-parallel products keep their gathered inputs (PyTorch's matmul saves them).
    std::vector<std::string> activations;
    if (tp > 1) {
      activations.push_back("shard(tp)");
      imported.spInputs = "keep";
    }
    if (getBool("parallelism.enable_async_tensor_parallel").value_or(false)) {
      if (tp == 1)
        refuse("parallelism.enable_async_tensor_parallel",
               "asynchronous tensor parallelism needs tensor_parallel_degree above 1");
      else if (!getBool("training.compile").value_or(false))
        refuse("parallelism.enable_async_tensor_parallel",
               "torchtitan applies asynchronous tensor parallelism only with training.compile = "
               "true; without it the job runs synchronous tensor parallelism");
      else
        imported.asyncTp = ir::AsyncTensorParallel::Forward;
    }

    // Activation checkpointing (torchtitan's default: selective, every second layer).
    std::string mode = getString("activation_checkpoint.mode").value_or("selective");
    std::string option = getString("activation_checkpoint.selective_ac_option").value_or("2");
    if (mode == "full")
      activations.push_back("recompute");
    else if (mode == "selective" && option == "op" && options.modelExperts > 0)
      refuse("activation_checkpoint.selective_ac_option",
             "\"op\" over a mixture-of-experts model: placec's recompute(op) models the policy "
             "over dense layers; write mode = \"full\" or \"none\"");
    else if (mode == "selective" && option == "op")
      activations.push_back("recompute(op)");
    else if (mode == "selective")
      diags.error(locOf(lookup("activation_checkpoint.selective_ac_option")
                            ? "activation_checkpoint.selective_ac_option"
                            : "activation_checkpoint.mode"),
                  "torchtitan key 'activation_checkpoint.selective_ac_option' is \"" + option +
                      "\"" +
                      (lookup("activation_checkpoint.mode") ? "" : " (torchtitan's default)") +
                      ": recomputing one layer in every " + option +
                      " whole has no Place equivalent; write mode = \"full\", \"none\" or "
                      "selective_ac_option = \"op\"");
    else if (mode != "none")
      refuse("activation_checkpoint.mode",
             "'" + mode + "' is none of \"none\", \"selective\", \"full\"");
    imported.activations = join(activations, ", ");

    // Pipeline.
    std::string schedule = getString("parallelism.pipeline_parallel_schedule").value_or("1F1B");
    if (lookup("parallelism.pipeline_parallel_schedule_csv") &&
        !getString("parallelism.pipeline_parallel_schedule_csv").value_or("").empty())
      refuse("parallelism.pipeline_parallel_schedule_csv",
             "a schedule read from a file has no Place equivalent");
    // Split points "layers.N" (where each stage after the first starts) with one stage per rank:
    // Place's first and last stage sizes when the middle stages share the rest evenly.
    std::string uneven;
    bool splitPoints = false;
    if (std::optional<std::vector<std::string>> points =
            getList("parallelism.pipeline_parallel_split_points");
        points && !points->empty()) {
      uneven = readSplitPoints(*points, pp, layers, schedule);
      splitPoints = true;
    }
    // Without split points torchtitan's split counts the embedding and the output layer as
    // pipeline_parallel_first_stage_less_layers and _last_stage_less_layers layers (one each
    // unless written; generate_llm_fqn_per_model_part), Place's embedding_layer and loss_layer.
    // Older torchtitan split evenly, so a job that leaves them out is ambiguous.
    int64_t countedLayers = 0;
    if (pp > 1 && !splitPoints) {
      for (bool first : {true, false}) {
        std::string key = std::string("parallelism.pipeline_parallel_") +
                          (first ? "first" : "last") + "_stage_less_layers";
        if (!lookup(key)) {
          refuse("parallelism.pipeline_parallel_degree",
                 "without split points torchtitan counts the embedding and the output layer as "
                 "pipeline_parallel_first_stage_less_layers and "
                 "pipeline_parallel_last_stage_less_layers layers of its split (one each by "
                 "default since 2025, none before); write both keys so that the split is known "
                 "(0 and 0 for an even split)");
          break;
        }
        std::optional<int64_t> value = getInt(key, 0);
        if (value && *value != 0 && *value != 1) {
          refuse(key, Twine(*value) + ": Place counts the " +
                          (first ? "embedding" : "output layer") +
                          " as one layer of the split or as none (0 or 1)");
          continue;
        }
        if (value && *value == 1) {
          uneven += first ? ", embedding_layer = true" : ", loss_layer = true";
          ++countedLayers;
        }
      }
    }

    // Batch: local_batch_size per data-parallel rank, global_batch_size reached by gradient
    // accumulation (default: local × data-parallel degree).
    int64_t dp = replicate * shard; // Both divide the device count.
    int64_t global = globalValue.value_or(-1);
    if (global == 0 || global < -1) {
      refuse("training.global_batch_size", "it is -1 (local × data-parallel degree) or at least 1");
      return false;
    }
    int64_t perStep = saturatingMul(local, dp);
    if (global == -1)
      global = perStep;
    if (perStep == INT64_MAX || global % perStep != 0) {
      refuse("training.global_batch_size",
             Twine(global) + " is not a multiple of local_batch_size × data-parallel degree = " +
                 Twine(perStep));
      return false;
    }
    int64_t accumulation = global / perStep;
    if (pp > 1) {
      if (local % microSize != 0) {
        refuse("parallelism.pipeline_parallel_microbatch_size",
               Twine(microSize) + " does not divide local_batch_size " + Twine(local));
        return false;
      }
      int64_t microbatches = local / microSize * accumulation;
      imported.microBatch = microSize;
      std::string n = std::to_string(microbatches);
      auto chunksOf = [&](int64_t expected) -> std::optional<int64_t> {
        if (!layersPerStage) {
          if (expected)
            return expected;
          refuse("parallelism.pipeline_parallel_schedule",
                 "'" + schedule +
                     "' runs several stages per rank; give pipeline_parallel_layers_per_stage so "
                     "that the number of stages is known");
          return std::nullopt;
        }
        int64_t split = layers + countedLayers;
        if (layers <= 0 || split % saturatingMul(pp, *layersPerStage) != 0) {
          refuse("parallelism.pipeline_parallel_layers_per_stage",
                 Twine(*layersPerStage) + " layers per stage do not divide the model's " +
                     Twine(layers) + " layers" +
                     (countedLayers ? " with the embedding or the output counted" : "") + " into " +
                     Twine(pp) + " ranks");
          return std::nullopt;
        }
        int64_t chunks = split / (pp * *layersPerStage);
        if (expected && chunks != expected) {
          refuse("parallelism.pipeline_parallel_layers_per_stage",
                 "'" + schedule + "' runs " + Twine(expected) + " stages per rank, but " +
                     Twine(*layersPerStage) + " layers per stage make " + Twine(chunks));
          return std::nullopt;
        }
        return chunks;
      };
      // The micro-batches where placec's formulas for the schedule hold (rule `schedule`): a
      // run outside them imports to nothing placec can time faithfully.
      auto timesSchedule = [&](ir::Schedule kind, int64_t chunks, int64_t group = 0) {
        std::string why;
        if (cost::isScheduleValid(kind, pp, microbatches, chunks, &why, group))
          return true;
        refuse("parallelism.pipeline_parallel_schedule", "'" + schedule + "' over " + Twine(pp) +
                                                             " ranks with " + n +
                                                             " micro-batches per step: " + why);
        return false;
      };
      if (schedule == "1F1B" || schedule == "GPipe") {
        if (layersPerStage)
          chunksOf(1);
        imported.pipeline =
            (schedule == "1F1B" ? "1f1b(microbatches = " : "gpipe(microbatches = ") + n + uneven +
            ")";
      } else if (schedule == "Interleaved1F1B") {
        // PyTorch's ScheduleInterleaved1F1B (torch/distributed/pipelining/schedules.py) runs the
        // micro-batches in max(1, ⌊m/p⌋) rounds of m/rounds through each chunk, and raises where
        // the rounds do not divide m: groups of that size (of p where p divides m).
        std::optional<int64_t> chunks = chunksOf(0);
        int64_t rounds = std::max<int64_t>(1, microbatches / pp);
        int64_t group = microbatches / rounds;
        if (chunks && microbatches % rounds != 0)
          refuse("parallelism.pipeline_parallel_schedule",
                 "'" + schedule + "' over " + Twine(pp) + " ranks with " + n +
                     " micro-batches per step: PyTorch's ScheduleInterleaved1F1B runs them in " +
                     Twine(rounds) + " rounds, which must divide them");
        else if (chunks && timesSchedule(ir::Schedule::Interleaved, *chunks, group))
          imported.pipeline =
              "interleaved(microbatches = " + n + ", chunks = " + std::to_string(*chunks) +
              (group != pp ? ", group = " + std::to_string(group) : "") + uneven + ")";
      } else if (schedule == "ZBVZeroBubble") {
        if (chunksOf(2) && timesSchedule(ir::Schedule::ZeroBubbleV, 2))
          imported.pipeline = "zbv(microbatches = " + n + uneven + ")";
      } else if (schedule == "DualPipeV") {
        if (chunksOf(2) && timesSchedule(ir::Schedule::DualPipeV, 2))
          imported.pipeline = "dualpipev(microbatches = " + n + uneven + ")";
      } else {
        refuse("parallelism.pipeline_parallel_schedule",
               "'" + schedule +
                   "' has no Place equivalent; Place runs 1F1B, GPipe, Interleaved1F1B, "
                   "ZBVZeroBubble and DualPipeV");
      }
    } else {
      imported.microBatch = local;
    }
    imported.globalBatch = global;

    // Precision and optimizer.
    std::string param = getString("training.mixed_precision_param").value_or("bfloat16");
    std::string reduce = getString("training.mixed_precision_reduce").value_or("float32");
    if (param != "bfloat16" && param != "float32")
      refuse("training.mixed_precision_param",
             "'" + param + "' is neither \"bfloat16\" nor \"float32\"");
    if (reduce != "float32")
      refuse("training.mixed_precision_reduce",
             "'" + reduce + "': placec imports torchtitan's default, \"float32\", only");
    std::vector<std::string> converters =
        getList("model.converters").value_or(std::vector<std::string>{});
    bool fp8 = getBool("float8.enable_float8_linear").value_or(false);
    for (const std::string &converter : converters) {
      if (converter == "float8")
        fp8 = true;
      else
        refuse("model.converters",
               "converter '" + converter + "' has no Place equivalent (placec knows \"float8\")");
    }
    // torchtitan builds the model in fp32 and keeps it so under mixed precision: FSDP's
    // MixedPrecisionPolicy casts each shard to the param dtype for the all-gather and reduces
    // (and accumulates) gradients in training.mixed_precision_reduce, "float32"; without FSDP,
    // autocast casts each use. Both are `params = fp32`.
    bool fp32Params = param == "bfloat16";
    imported.precision = param == "float32" ? "fp32"
                                            : ir::spellPrecision(ir::Precision::MixedBF16, false,
                                                                 fp32Params, fp32Params);
    // torchtitan's loss is F.cross_entropy over the logits cast to fp32.
    imported.crossEntropy = "unfused";
    // torchtitan shards with FSDP2 (fully_shard), which copies each gathered parameter out of
    // the all-gather's buffer (foreach_all_gather_copy_out).
    imported.paramGather = "copy_out";
    if (fp8) {
      if (param == "float32")
        refuse("training.mixed_precision_param",
               "\"float32\" with the float8 converter: FP8 training keeps bf16 elsewhere");
      std::string recipe = getString("float8.recipe_name").value_or("tensorwise");
      if (recipe != "tensorwise")
        refuse("float8.recipe_name",
               "'" + recipe + "': placec models tensorwise-scaled FP8 products");
      if (getBool("float8.emulate").value_or(false))
        refuse("float8.emulate", "emulated FP8 runs no FP8 products");
      std::vector<std::string> filtered =
          getList("float8.filter_fqns").value_or(std::vector<std::string>{});
      if (filtered != std::vector<std::string>{"output"})
        refuse("float8.filter_fqns",
               "Place's mixed(fp8) runs every layer's products in FP8 and the output layer in "
               "bf16, which is filter_fqns = [\"output\"]");
      bool gather = getBool("float8.enable_fsdp_float8_all_gather").value_or(false);
      if (gather && fsdpAxes.empty())
        refuse("float8.enable_fsdp_float8_all_gather", "FP8 all-gathers need FSDP");
      imported.precision =
          ir::spellPrecision(ir::Precision::MixedFP8, gather, fp32Params, fp32Params);
    } else if (getBool("float8.enable_fsdp_float8_all_gather").value_or(false)) {
      refuse("float8.enable_fsdp_float8_all_gather",
             "FP8 all-gathers need the float8 converter (model.converters = [\"float8\"])");
    }
    // torch.compile (false by default): placec's fused kernels are what torch.compile makes of a
    // layer; without it each operator of torchtitan's modules is its own kernel.
    if (!getBool("training.compile").value_or(false)) {
      std::string value = lookup("training.compile") ? "false" : "false (torchtitan's default)";
      if (fp8)
        refuse("training.compile",
               value + ": Float8 linears without torch.compile cast through separate kernels "
                       "that placec does not count; set compile = true");
      else if (options.modelExperts > 0)
        refuse("training.compile",
               value + ": placec counts eager PyTorch's kernels for dense layers, and the model "
                       "has MoE layers; set compile = true");
      else
        imported.kernels = "eager";
    }
    std::string optimizer = getString("optimizer.name").value_or("AdamW");
    if (optimizer != "AdamW" && optimizer != "Adam")
      refuse("optimizer.name", "'" + optimizer +
                                   "': Place's optimizers are adam and sgd, and "
                                   "torchtitan's are Adam and AdamW");

    // Settings that change where states live and that Place cannot express.
    if (getBool("training.enable_cpu_offload").value_or(false))
      refuse("training.enable_cpu_offload",
             "FSDP's CPU offload moves params, grads and optimizer together, which placec does "
             "not model");
    if (getBool("fault_tolerance.enable").value_or(false))
      refuse("fault_tolerance.enable", "TorchFT's dynamic replica groups have no Place equivalent");
    for (StringRef key : {"experimental.custom_import", "experimental.custom_args_module"})
      if (!getString(key).value_or("").empty())
        refuse(key, "a custom module can change the model and its parallelisation");
    return !diags.hasErrors();
  }

  const ImportOptions &options;
  DiagnosticEngine &diags;
  StringRef text;
  std::vector<size_t> lineStarts;
  StringSet<> known, freeForm;
  StringMap<toml::source_position> positions;
  const toml::table *root = nullptr;
};

} // namespace

bool importTorchtitan(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags,
                      raw_ostream &os) {
  return TorchtitanImporter(bufferId, options, diags).run(os);
}

} // namespace placec::bridge
