// Imports a Hugging Face `config.json` as a Place transformer declaration. Every key is either
// read, known not to change the parameter count or the FLOPs, or an error: a key that placec
// cannot represent is never dropped (docs/bridges.md, "Hugging Face configs").
#include "ImportSupport.h"
#include "placec/backends/Export.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

using namespace llvm;

namespace placec::bridge {

namespace {

using namespace detail;

/// The model families placec maps. Gated families have a three-matrix MLP (gate, up, down).
enum class Family {
  Llama,
  Mistral,
  Qwen2,
  Qwen3,
  Gemma,
  Gemma3,
  Phi3,
  Mixtral,
  Qwen3Moe,
  Gpt2,
  GptNeox,
  Nemotron,
  DeepSeek,
  GptOss,
  Bloom
};

struct FamilyInfo {
  const char *modelType;
  Family family;
  bool tiedByDefault; ///< The config class's default for tie_word_embeddings.
};

// tie_word_embeddings defaults of the transformers config classes (LlamaConfig, MistralConfig,
// Qwen2Config, Qwen3Config, Phi3Config and GPTNeoXConfig default to False; GemmaConfig and
// GPT2Config tie).
constexpr FamilyInfo kFamilies[] = {
    {"llama", Family::Llama, false},
    {"mistral", Family::Mistral, false},
    {"qwen2", Family::Qwen2, false},
    {"qwen3", Family::Qwen3, false},
    {"gemma", Family::Gemma, true},
    {"phi3", Family::Phi3, false},
    {"gpt2", Family::Gpt2, true},
    {"gpt_neox", Family::GptNeox, false},
    {"mixtral", Family::Mixtral, false},
    {"qwen3_moe", Family::Qwen3Moe, false},
    {"nemotron", Family::Nemotron, false},
    {"gemma3_text", Family::Gemma3, true},
    {"deepseek_v3", Family::DeepSeek, false},
    {"deepseek_v2", Family::DeepSeek, false},
    {"kimi_k2", Family::DeepSeek, false},
    {"gpt_oss", Family::GptOss, false},
    {"bloom", Family::Bloom, true},
};

/// Keys of every family that change neither the parameter count nor the FLOPs: token ids,
/// initialisation, dropout, epsilons, RoPE's base and scaling, and bookkeeping.
constexpr const char *kNeutralKeys[] = {
    "architectures",
    "_name_or_path",
    "auto_map",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "initializer_range",
    "use_cache",
    "attention_dropout",
    "hidden_dropout",
    "classifier_dropout",
    "resid_pdrop",
    "embd_pdrop",
    "attn_pdrop",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "rope_theta",
    "rope_scaling",
    "rotary_emb_base",
    "pretraining_tp",
    "tokenizer_class",
    "bos_token",
    "eos_token",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "is_decoder",
    "is_encoder_decoder",
    "quantization_config",
    "id2label",
    "label2id",
    "problem_type",
    "task_specific_params",
    "use_mrope",
};

/// The keys each family reads besides the neutral ones.
std::vector<StringRef> familyKeys(Family family) {
  switch (family) {
  case Family::Gpt2:
    return {"model_type",
            "vocab_size",
            "n_embd",
            "n_layer",
            "n_head",
            "n_inner",
            "n_positions",
            "n_ctx",
            "activation_function",
            "tie_word_embeddings",
            "add_cross_attention",
            "scale_attn_weights",
            "scale_attn_by_inverse_layer_idx",
            "reorder_and_upcast_attn",
            "summary_type",
            "summary_use_proj",
            "summary_activation",
            "summary_proj_to_labels",
            "summary_first_dropout"};
  case Family::Bloom:
    // transformers' BloomConfig: n_layer and n_head, or the names its attribute_map reads for
    // them; n_embed in place of hidden_size (BloomConfig.__init__); seq_length, the training
    // script's, which some checkpoints keep. n_inner is read by nothing (BloomMLP is 4·hidden
    // wide), and the Megatron-DeepSpeed flags the checkpoints carry over (the fused kernels,
    // skip_bias_add, the residual's source, offset_alibi, slow_but_exact's inference path) change
    // neither the parameters nor the FLOPs.
    return {"model_type",
            "vocab_size",
            "hidden_size",
            "n_embed",
            "n_layer",
            "num_hidden_layers",
            "n_head",
            "num_attention_heads",
            "n_inner",
            "seq_length",
            "tie_word_embeddings",
            "apply_residual_connection_post_layernorm",
            "attention_softmax_in_fp32",
            "bias_dropout_fusion",
            "masked_softmax_fusion",
            "offset_alibi",
            "skip_bias_add",
            "skip_bias_add_qkv",
            "slow_but_exact",
            "unk_token_id"};
  case Family::GptNeox:
    return {"model_type",
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "hidden_act",
            "tie_word_embeddings",
            "attention_bias",
            "rotary_pct",
            "partial_rotary_factor",
            "use_parallel_residual"};
  case Family::Gemma3: {
    // Gemma 3's language model: the common keys, its window's pattern and keys whose only
    // accepted value is the one Place's attention computes (no soft-capping, causal).
    std::vector<StringRef> keys = familyKeys(Family::Llama);
    keys.insert(keys.end(),
                {"sliding_window_pattern", "query_pre_attn_scalar", "rope_local_base_freq",
                 "attn_logit_softcapping", "final_logit_softcapping", "cache_implementation",
                 "use_bidirectional_attention"});
    return keys;
  }
  case Family::DeepSeek:
    // DeepSeek-V2 and V3 (transformers' DeepseekV2Config and DeepseekV3Config, and the keys of
    // deepseek-ai's own configs; Kimi K2 is DeepSeek-V3's architecture): multi-head latent
    // attention and a mixture of experts with shared experts after dense layers. Routing among
    // groups of experts (n_group, topk_group under topk_method group_limited_greedy or noaux_tc)
    // is the model's router_groups and router_group_top_k; the routed weights' scale and the
    // expert-parallel degree the weights were saved for (ep_size) change neither the parameters
    // nor the FLOPs.
    return {"model_type",
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "max_position_embeddings",
            "hidden_act",
            "tie_word_embeddings",
            "attention_bias",
            "mlp_bias",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
            "n_routed_experts",
            "n_shared_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "first_k_dense_replace",
            "moe_layer_freq",
            "scoring_func",
            "norm_topk_prob",
            "aux_loss_alpha",
            "seq_aux",
            "num_nextn_predict_layers",
            "n_group",
            "topk_group",
            "topk_method",
            "routed_scaling_factor",
            "ep_size",
            "rope_interleave"};
  default:
    return {"model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "intermediate_size", "max_position_embeddings",
            "original_max_position_embeddings", "head_dim", "hidden_act", "hidden_activation",
            "tie_word_embeddings", "attention_bias", "mlp_bias", "sliding_window",
            "use_sliding_window", "max_window_layers", "layer_types", "partial_rotary_factor",
            // Nemotron's LayerNorm1P.
            "norm_eps",
            // Mixtral and Qwen3-MoE.
            "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
            "decoder_sparse_step", "mlp_only_layers", "norm_topk_prob", "router_aux_loss_coef",
            "output_router_logits", "router_jitter_noise",
            // gpt-oss: its experts per token under a second name, the clamp of its gated
            // activation, and the context its rotary scaling starts from.
            "experts_per_token", "swiglu_limit", "initial_context_length"};
  }
}

class HuggingFaceImporter {
public:
  HuggingFaceImporter(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags)
      : options(options), diags(diags),
        text(diags.getSourceMgr().getMemoryBuffer(bufferId)->getBuffer()), keys(text) {}

  bool run(raw_ostream &os) {
    std::optional<json::Value> parsed = parseJsonDocument(text, diags);
    if (!parsed)
      return false;
    root = parsed->getAsObject();
    if (!root) {
      diags.error(SMLoc::getFromPointer(text.data()),
                  "a Hugging Face config.json is a JSON object");
      return false;
    }
    const json::Value *typeValue = root->get("model_type");
    std::optional<StringRef> type = typeValue ? typeValue->getAsString() : std::nullopt;
    if (!type) {
      diags.error(typeValue ? locOf("model_type") : SMLoc::getFromPointer(text.data()),
                  typeValue ? "'model_type' must be a string"
                            : "no 'model_type': a Hugging Face config.json names its model "
                              "type (llama, mistral, qwen2, gpt2, ...); a DeepSpeed config is "
                              "imported with --model and --cluster");
      return false;
    }
    const FamilyInfo *info = nullptr;
    std::vector<StringRef> known;
    for (const FamilyInfo &candidate : kFamilies) {
      known.push_back(candidate.modelType);
      if (*type == candidate.modelType)
        info = &candidate;
    }
    // Families refused as a whole, each with what Place cannot describe of it.
    static const std::pair<StringRef, StringRef> kRefusedTypes[] = {
        {"gemma3", "Gemma 3's image-and-text model, whose vision tower Place does not describe; "
                   "import its text_config (model_type gemma3_text) for the language model "
                   "alone"},
    };
    for (const auto &[refused, why] : kRefusedTypes)
      if (*type == refused) {
        diags.error(locOf("model_type"), "'model_type' is \"" + refused + "\": " + why);
        return false;
      }
    if (!info) {
      diags.error(locOf("model_type"),
                  "'model_type' is \"" + *type + "\", which placec does not map; it maps " +
                      join(known, ", ") + " (docs/bridges.md says why others are refused)");
      return false;
    }
    family = info->family;
    checkKeys();
    std::string model = family == Family::Bloom ? translateBloom(*info) : translate(*info);
    if (diags.hasErrors())
      return false;
    os << "// Imported by placec from " << options.inputName << " (Hugging Face config.json, "
       << "model_type " << *type << ").\n\n";
    os << model;
    return true;
  }

private:
  SMLoc locOf(StringRef key) const {
    size_t offset = keys.find(key);
    return SMLoc::getFromPointer(text.data() + (offset == StringRef::npos ? 0 : offset));
  }

  std::string quoted(StringRef key) const {
    const json::Value *value = root->get(key);
    std::string out;
    raw_string_ostream os(out);
    if (value)
      os << *value;
    return out;
  }

  /// transformers' `layer_types`, one entry per layer: true for "full_attention", false for
  /// "sliding_attention"; nothing, with an error, for anything else.
  std::optional<std::vector<bool>> getLayerTypes(int64_t layers) {
    const json::Array *types = root->getArray("layer_types");
    std::vector<bool> full;
    if (types) {
      for (const json::Value &type : *types) {
        std::optional<StringRef> name = type.getAsString();
        if (name != std::optional<StringRef>("full_attention") &&
            name != std::optional<StringRef>("sliding_attention"))
          break;
        full.push_back(*name == "full_attention");
      }
    }
    if (!types || full.size() != types->size() || static_cast<int64_t>(full.size()) != layers) {
      diags.error(locOf("layer_types"),
                  "'layer_types' must list \"full_attention\" or \"sliding_attention\" for each "
                  "of the " +
                      Twine(layers) + " layers");
      return std::nullopt;
    }
    return full;
  }

  /// Reports `key = value` as something Place cannot represent.
  void refuse(StringRef key, const Twine &why) {
    diags.error(locOf(key), "'" + key + "' is " + quoted(key) + ": " + why);
  }

  /// Every top-level key must be read or known to be neutral.
  void checkKeys() {
    StringSet<> allowed;
    for (const char *key : kNeutralKeys)
      allowed.insert(key);
    std::vector<StringRef> own = familyKeys(family);
    for (StringRef key : own)
      allowed.insert(key);
    std::vector<std::string> names;
    for (const auto &entry : *root)
      names.push_back(entry.first.str());
    llvm::sort(names, [&](const std::string &a, const std::string &b) {
      return keys.find(a) < keys.find(b);
    });
    for (const std::string &key : names) {
      if (allowed.contains(key))
        continue;
      std::vector<StringRef> candidates(own.begin(), own.end());
      std::string suggestion = closest(key, candidates, std::max<size_t>(2, key.size() / 4));
      diags.error(locOf(key), "unknown key '" + key + "' for model_type '" +
                                  root->getString("model_type").value_or("") +
                                  "': placec cannot tell whether it changes the model" +
                                  (suggestion.empty() ? std::string()
                                                      : "; did you mean '" + suggestion + "'?"));
    }
  }

  /// A whole number from 1 to `max` at `key` (Place's limit for the field it becomes); nullopt
  /// (and an error when `required`) otherwise.
  std::optional<int64_t> getInt(StringRef key, bool required = true,
                                int64_t max = int64_t(1) << 30) {
    const json::Value *value = root->get(key);
    if (!value || value->kind() == json::Value::Null) {
      if (required)
        diags.error(SMLoc::getFromPointer(text.data()),
                    "missing '" + key + "', which the model needs");
      return std::nullopt;
    }
    if (std::optional<int64_t> number = value->getAsInteger()) {
      if (*number >= 1 && *number <= max)
        return number;
      if (*number > max) {
        diags.error(locOf(key), "'" + key + "' is " + quoted(key) +
                                    ": Place's field takes at most " + Twine(max));
        return std::nullopt;
      }
    }
    diags.error(locOf(key),
                "'" + key + "' must be a whole number of at least 1, not " + quoted(key));
    return std::nullopt;
  }

  std::optional<bool> getBool(StringRef key) {
    const json::Value *value = root->get(key);
    if (!value)
      return std::nullopt;
    if (std::optional<bool> flag = value->getAsBoolean())
      return flag;
    diags.error(locOf(key), "'" + key + "' must be true or false, not " + quoted(key));
    return std::nullopt;
  }

  std::optional<StringRef> getString(StringRef key) {
    const json::Value *value = root->get(key);
    if (!value || value->kind() == json::Value::Null)
      return std::nullopt;
    if (std::optional<StringRef> string = value->getAsString())
      return string;
    diags.error(locOf(key), "'" + key + "' must be a string, not " + quoted(key));
    return std::nullopt;
  }

  static bool isGelu(StringRef act) {
    return act == "gelu" || act == "gelu_new" || act == "gelu_fast" || act == "gelu_pytorch_tanh" ||
           act == "gelu_python" || act == "gelu_accurate";
  }

  std::string translate(const FamilyInfo &info) {
    bool gpt2 = family == Family::Gpt2, neox = family == Family::GptNeox;
    // gpt-oss (transformers' GptOssForCausalLM): Mixtral's routing over experts of
    // intermediate_size with biases on every linear, the router's included, and a learned sink
    // logit per head in each attention softmax.
    bool gptOss = family == Family::GptOss;
    bool moe = family == Family::Mixtral || family == Family::Qwen3Moe || gptOss;
    // Nemotron (transformers' NemotronForCausalLM: Nemotron-4, Minitron): today's attention
    // (grouped query heads, head_dim, rotary positions), a two-matrix MLP with squared ReLU
    // (up_proj, down_proj), LayerNorm1P (a LayerNorm whose weight is stored less one: the same
    // parameters), no biases by default.
    bool nemotron = family == Family::Nemotron;
    bool modern = !gpt2 && !neox;
    bool gated = modern && !nemotron;
    std::optional<int64_t> layers =
        getInt(gpt2 ? "n_layer" : "num_hidden_layers", true, ir::kMaxLayers);
    std::optional<int64_t> hidden = getInt(gpt2 ? "n_embd" : "hidden_size", true, 1 << 24);
    std::optional<int64_t> heads = getInt(gpt2 ? "n_head" : "num_attention_heads", true, 1 << 20);
    std::optional<int64_t> vocab = getInt("vocab_size");
    std::optional<int64_t> ffn = getInt(gpt2 ? "n_inner" : "intermediate_size", !gpt2, 1 << 26);
    std::optional<int64_t> positions = getInt(gpt2 ? "n_positions" : "max_position_embeddings");
    int64_t kvHeads = modern ? getInt("num_key_value_heads", false, 1 << 20).value_or(0) : 0;
    if (diags.hasErrors())
      return "";

    // The sequence: --seq, else the longest the model was trained for.
    int64_t seq = options.seq > 0 ? options.seq : *positions;
    if (!checkSequenceFlag())
      return "";
    if (gpt2 && options.seq > *positions)
      diags.error(locOf("n_positions"),
                  "--seq " + Twine(options.seq) + " is longer than 'n_positions' " +
                      Twine(*positions) +
                      ": GPT-2's learned position table has no rows for the positions after it");
    if (gpt2) {
      if (std::optional<int64_t> context = getInt("n_ctx", false);
          context && *context != *positions)
        refuse("n_ctx", "it differs from n_positions " + Twine(*positions) +
                            ", and Place's model has one sequence length");
    }

    bool deepseek = family == Family::DeepSeek;
    if (*hidden % *heads != 0 && !(modern && root->get("head_dim")) && !deepseek)
      refuse(gpt2 ? "n_head" : "num_attention_heads",
             "it does not divide the hidden size " + Twine(*hidden) +
                 ", and Place's heads are hidden / heads wide");
    // A head width other than hidden / heads (Gemma 7B, most Qwen3 sizes) is Place's head_dim.
    int64_t headDim = modern ? getInt("head_dim", false, 1 << 24).value_or(0) : 0;
    std::string latentText;
    if (deepseek) {
      // DeepSeek's multi-head latent attention: every head's keys and values come up from the
      // key/value latent, so num_key_value_heads can only be the heads (transformers' attention
      // repeats nothing then); qk_nope_head_dim is Place's head_dim. A null q_lora_rank
      // (DeepSeek-V2-Lite) projects the queries from the hidden state.
      if (kvHeads > 0 && kvHeads != *heads)
        refuse("num_key_value_heads",
               "multi-head latent attention brings up keys and values for every one of the " +
                   Twine(*heads) + " heads, so there are no key/value groups");
      kvHeads = 0;
      headDim = getInt("qk_nope_head_dim", true, 1 << 16).value_or(0);
      std::optional<int64_t> kvRank = getInt("kv_lora_rank", true, 1 << 20);
      std::optional<int64_t> qRank = getInt("q_lora_rank", false, 1 << 20);
      std::optional<int64_t> rope = getInt("qk_rope_head_dim", true, 1 << 16);
      std::optional<int64_t> value = getInt("v_head_dim", true, 1 << 16);
      // Multi-token prediction (DeepSeek-V3 §2.2): the modules after the last layer that the
      // checkpoint holds (DeepSeek-V3's layer 61) and training runs, which transformers'
      // DeepseekV3ForCausalLM leaves out for inference; Place's mtp_layers.
      int64_t mtp = 0;
      if (root->get("num_nextn_predict_layers")) {
        std::optional<int64_t> value = root->getInteger("num_nextn_predict_layers");
        if (!value || *value < 0 || *value > ir::kMaxLayers)
          refuse("num_nextn_predict_layers", "it must be a whole number from 0 to " +
                                                 Twine(ir::kMaxLayers) +
                                                 " (the multi-token prediction modules)");
        else
          mtp = *value;
      }
      if (kvRank && rope && value) {
        raw_string_ostream l(latentText);
        if (qRank)
          l << "  q_lora_rank = " << *qRank << ";\n";
        l << "  kv_lora_rank = " << *kvRank << ";\n  rope_head_dim = " << *rope
          << ";\n  v_head_dim = " << *value << ";\n";
        if (mtp > 0)
          l << "  mtp_layers = " << mtp << ";\n";
      }
    } else if (headDim > 0 && headDim * *heads == *hidden) {
      headDim = 0;
    }
    if (kvHeads > 0 && *heads % kvHeads != 0)
      refuse("num_key_value_heads", "it does not divide the " + Twine(*heads) + " heads");

    // Sliding-window attention (Mistral, Phi-3: every layer; Qwen2 and Qwen3 under
    // use_sliding_window: the layers from max_window_layers on) is Place's window, in every
    // layer or (layer_types) with every n-th layer of full attention. A window of the whole
    // sequence is none.
    int64_t window = 0, fullEvery = 0;
    if (modern && root->get("layer_types")) {
      // transformers' layer_types, which its newer versions write, says each layer's attention
      // and decides over use_sliding_window and max_window_layers: windowed layers with every
      // n-th (from 1) of full attention are Place's full_every = n.
      std::optional<std::vector<bool>> full = getLayerTypes(*layers);
      bool anyWindowed = full && llvm::is_contained(*full, false);
      std::optional<int64_t> size =
          anyWindowed ? getInt("sliding_window", false) : std::optional<int64_t>();
      if (anyWindowed && !size) {
        if (!root->get("sliding_window"))
          refuse("layer_types", "its sliding_attention layers need 'sliding_window', the "
                                "window's tokens");
      } else if (anyWindowed && *size < seq) {
        window = *size;
        auto first = llvm::find(*full, true);
        int64_t every = first == full->end() ? 0 : (first - full->begin()) + 1;
        for (int64_t l = 0; every > 0 && l < *layers; ++l)
          if ((*full)[l] != ((l + 1) % every == 0)) {
            refuse("layer_types",
                   "its full_attention layers are not every n-th layer (the n-th, the 2n-th, "
                   "…), the one pattern of windowed and full layers Place's full_every says");
            window = 0;
            break;
          }
        if (window > 0)
          fullEvery = every;
      }
    } else if (modern && root->get("sliding_window")) {
      std::optional<int64_t> size = getInt("sliding_window", false);
      bool qwen = family == Family::Qwen2 || family == Family::Qwen3 || family == Family::Qwen3Moe;
      bool used = !qwen || getBool("use_sliding_window").value_or(false);
      if (used && size && *size < seq && family == Family::Gemma3) {
        // Gemma3TextConfig: layer i attends the whole prefix where (i + 1) %
        // sliding_window_pattern is 0 (default 6); a pattern of 1 leaves no windowed layer.
        int64_t pattern = getInt("sliding_window_pattern", false, 1 << 20).value_or(6);
        if (pattern > 1) {
          window = *size;
          fullEvery = pattern <= *layers ? pattern : 0;
        }
      } else if (used && size && *size < seq) {
        std::optional<int64_t> full =
            qwen ? root->getInteger("max_window_layers") : std::optional<int64_t>(0);
        if (!full || *full < 0)
          refuse(qwen && root->get("max_window_layers") ? "max_window_layers"
                                                        : "use_sliding_window",
                 "use_sliding_window needs max_window_layers, a whole number of layers (the "
                 "first ones, which attend the whole sequence)");
        else if (*full == 0)
          window = *size;
        else if (*full < *layers)
          refuse("max_window_layers", "the first " + Twine(*full) +
                                          " layers attend the whole sequence and the others "
                                          "a window of " +
                                          Twine(*size) +
                                          " tokens, and Place's window holds in every "
                                          "layer");
      }
    }

    // Activation.
    StringRef actKey =
        (family == Family::Gemma || family == Family::Gemma3) && root->get("hidden_activation")
            ? "hidden_activation"
        : gpt2 ? "activation_function"
               : "hidden_act";
    StringRef act = getString(actKey).value_or(gpt2       ? "gelu_new"
                                               : nemotron ? "relu2"
                                               : gated    ? "silu"
                                                          : "gelu");
    if (gated && act != "silu" && act != "swish" && !isGelu(act))
      refuse(actKey, "the gated MLP's activation must be SiLU or GELU");
    bool relu2 = !gated && act == "relu2"; // transformers' ReLUSquaredActivation
    if (!gated && !isGelu(act) && !relu2)
      refuse(actKey, "Place's two-matrix MLP is mlp = gelu or mlp = relu2 (squared ReLU)");

    // Biases: Place writes all, none, or the query/key/value projections only.
    std::string bias = modern ? "false" : "true";
    if (family == Family::Qwen2)
      bias = "qkv"; // Qwen2Attention: q_proj, k_proj, v_proj with bias, o_proj without.
    bool attentionBias = getBool("attention_bias").value_or(neox);
    // gpt-oss's experts have biases whatever its config says (GptOssExperts).
    bool mlpBias = getBool("mlp_bias").value_or(false) || gptOss;
    if (modern && family != Family::Qwen2) {
      if (attentionBias && mlpBias)
        bias = "true";
      else if (attentionBias)
        refuse("attention_bias", "biases on the query, key, value and output projections but not "
                                 "the MLP (mlp_bias false) have no Place equivalent (bias = true "
                                 "puts them everywhere, bias = qkv not on the output projection)");
      else if (mlpBias)
        refuse("mlp_bias", "biases on the MLP only have no Place equivalent");
    }
    if (deepseek && (attentionBias || mlpBias))
      refuse(attentionBias ? "attention_bias" : "mlp_bias",
             "Place's multi-head latent attention has no biases (DeepSeek's projections have "
             "none)");
    if (family == Family::Qwen2 && root->get("attention_bias"))
      refuse("attention_bias", "Qwen2 has query, key and value biases whatever this key says");
    if (neox && !attentionBias)
      refuse("attention_bias", "GPT-NeoX's MLP keeps its biases, so attention without biases has "
                               "no Place equivalent");
    if (gpt2 && getBool("add_cross_attention").value_or(false))
      refuse("add_cross_attention", "cross-attention layers are not part of Place's decoder");

    // Families whose layers hold weights that Place's transformer has no field for.
    // Qwen3 (dense and MoE) normalizes each head's queries and keys: qk_norm.
    bool qkNorm = family == Family::Qwen3 || family == Family::Qwen3Moe || family == Family::Gemma3;
    // Gemma 3 normalizes each block's output too (post_attention_layernorm,
    // post_feedforward_layernorm): post_norm. Its attention is causal and unscaled by tanh.
    bool postNorm = family == Family::Gemma3;
    if (family == Family::Gemma3) {
      for (StringRef key : {"attn_logit_softcapping", "final_logit_softcapping"})
        if (const json::Value *value = root->get(key); value && value->kind() != json::Value::Null)
          refuse(key, "logit soft-capping (c·tanh(x/c) over the attention scores or the logits) "
                      "has no Place equivalent");
      if (getBool("use_bidirectional_attention").value_or(false))
        refuse("use_bidirectional_attention",
               "Place's attention is causal; a bidirectional model is not a decoder");
    }
    // Families whose attention projects Q, K and V with linears of their own (q_proj, k_proj,
    // v_proj) and whose gated MLPs (and experts) have their own gate and up linears; Phi-3 fuses
    // both (qkv_proj, gate_up_proj), GPT-2 (c_attn) and GPT-NeoX (query_key_value) the attention.
    // gpt-oss's experts compute the gate and the up in one product (gate_up_proj) where its
    // attention has q_proj, k_proj and v_proj: written fused, which times its attention's
    // projections as one product.
    bool separateProjections = family != Family::Phi3 && !gpt2 && !neox && !gptOss;

    // Mixtures of experts.
    std::string moeText;
    if (moe) {
      bool mixtral = family == Family::Mixtral || gptOss;
      if (gptOss)
        if (std::optional<int64_t> perToken = root->getInteger("experts_per_token");
            perToken && *perToken != root->getInteger("num_experts_per_tok"))
          refuse("experts_per_token", "it differs from num_experts_per_tok, which transformers "
                                      "routes by");
      StringRef expertsKey = mixtral ? "num_local_experts" : "num_experts";
      std::optional<int64_t> experts = getInt(expertsKey, true, 1 << 16);
      std::optional<int64_t> topK = getInt("num_experts_per_tok", true, 1 << 16);
      std::optional<int64_t> expertFfn =
          mixtral ? ffn : getInt("moe_intermediate_size", true, 1 << 26);
      int64_t every = 1, dense = 0;
      if (!mixtral) {
        // Qwen3-MoE: layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i is not in
        // mlp_only_layers; Place's layers are MoE from dense_layers on, every moe_every-th.
        int64_t step = getInt("decoder_sparse_step", false, 1 << 20).value_or(1);
        if (step != 1)
          refuse("decoder_sparse_step",
                 "Qwen3-MoE makes layers step - 1, 2·step - 1, … sparse; Place's MoE layers are "
                 "0, k, 2k, … after the dense ones");
        if (const json::Value *only = root->get("mlp_only_layers")) {
          const json::Array *list = only->getAsArray();
          bool prefix = list != nullptr;
          for (size_t i = 0; list && i < list->size(); ++i)
            prefix &= (*list)[i].getAsInteger() == std::optional<int64_t>(int64_t(i));
          if (!prefix)
            refuse("mlp_only_layers", "Place's dense layers are the first n (dense_layers); "
                                      "these are not 0, 1, …, n - 1");
          else
            dense = int64_t(list->size());
        }
        requireNormalizedTopK();
      }
      // MixtralConfig's and Qwen3MoeConfig's default.
      double auxLoss = getAuxLoss("router_aux_loss_coef", 0.001);
      checkExperts(expertsKey, experts, topK);
      if (experts && topK && expertFfn) {
        raw_string_ostream e(moeText);
        e << "  experts = " << *experts << ";\n  top_k = " << *topK << ";\n";
        if (*expertFfn != ffn.value_or(0))
          e << "  expert_ffn = " << *expertFfn << ";\n";
        if (dense > 0)
          e << "  dense_layers = " << dense << ";\n";
        if (every != 1)
          e << "  moe_every = " << every << ";\n";
        e << "  aux_loss = " << format("%g", auxLoss) << ";\n";
      }
    }

    if (deepseek)
      moeText = translateDeepSeekMoe();

    bool tied = getBool("tie_word_embeddings").value_or(info.tiedByDefault);
    if (diags.hasErrors())
      return "";

    std::string name = modelName();
    std::string out;
    raw_string_ostream m(out);
    m << "model " << name << " : transformer {\n";
    m << "  layers = " << *layers << ";\n  hidden = " << *hidden << ";\n  heads = " << *heads
      << ";\n";
    if (kvHeads > 0 && kvHeads != *heads)
      m << "  kv_heads = " << kvHeads << ";\n";
    if (headDim > 0)
      m << "  head_dim = " << headDim << ";\n";
    m << latentText;
    if (window > 0)
      m << "  window = " << window << ";\n";
    if (fullEvery > 0)
      m << "  full_every = " << fullEvery << ";\n";
    if (qkNorm)
      m << "  qk_norm = true;\n";
    if (postNorm)
      m << "  post_norm = true;\n";
    if (gptOss)
      m << "  sinks = true;\n";
    m << "  seq = " << seq << ";\n  vocab = " << *vocab << ";\n";
    int64_t ffnValue = ffn.value_or(4 * *hidden);
    if (ffnValue != 4 * *hidden || gated)
      m << "  ffn = " << ffnValue << ";\n";
    if (gated)
      m << "  mlp = swiglu;\n  norm = rmsnorm;\n";
    else if (relu2)
      m << "  mlp = relu2;\n";
    if (bias != "true")
      m << "  bias = " << bias << ";\n";
    if (!gpt2)
      m << "  positions = rope;\n";
    if (!tied)
      m << "  tied_embeddings = false;\n";
    if (separateProjections)
      m << "  projections = separate;\n";
    m << moeText;
    if (gptOss)
      m << "  router_bias = true;\n";
    m << "}\n";
    return out;
  }

  /// Whether --seq is within Place's limit of 2^30 tokens (a config's own lengths are read with
  /// that limit); an error otherwise.
  bool checkSequenceFlag() {
    if (options.seq <= (int64_t(1) << 30))
      return true;
    diags.error(SMLoc::getFromPointer(text.data()),
                "--seq " + Twine(options.seq) + " is longer than Place's limit of 2^30 tokens");
    return false;
  }

  /// One of two keys that name the same field (`preferred`, or `alias` where only it is given);
  /// both given with different values is an error at the alias.
  StringRef eitherKey(StringRef preferred, StringRef alias) {
    const json::Value *a = root->get(preferred), *b = root->get(alias);
    if (a && b && !(*a == *b))
      refuse(alias, "it differs from " + preferred + " " + quoted(preferred) +
                        ", which names the same field");
    return a || !b ? preferred : alias;
  }

  /// The model's name: --name, else the file's stem (its folder's name for a config.json).
  std::string modelName() const {
    std::string name = options.name;
    if (name.empty()) {
      StringRef stem = sys::path::stem(options.inputName);
      if (stem == "config")
        stem = sys::path::filename(sys::path::parent_path(options.inputName));
      name = stem.str();
    }
    return makeName(name, "", "hf");
  }

  /// BLOOM (transformers' BloomForCausalLM; BigScience 2022, "BLOOM", §3.2): pre-norm layers of
  /// LayerNorm with biases on every linear, one QKV product, a GELU MLP of 4·hidden, ALiBi
  /// positions and a LayerNorm on the word embedding (word_embeddings_layernorm), the output
  /// layer tied to the embedding unless the config says otherwise. ALiBi has no position table,
  /// so the sequence is --seq, else the config's seq_length.
  std::string translateBloom(const FamilyInfo &info) {
    std::optional<int64_t> layers =
        getInt(eitherKey("n_layer", "num_hidden_layers"), true, ir::kMaxLayers);
    std::optional<int64_t> hidden = getInt(eitherKey("hidden_size", "n_embed"), true, 1 << 24);
    StringRef headsKey = eitherKey("n_head", "num_attention_heads");
    std::optional<int64_t> heads = getInt(headsKey, true, 1 << 20);
    std::optional<int64_t> vocab = getInt("vocab_size");
    std::optional<int64_t> seq =
        options.seq > 0 ? std::optional<int64_t>(options.seq) : getInt("seq_length", false);
    if (!seq && !diags.hasErrors())
      diags.error(SMLoc::getFromPointer(text.data()),
                  "BLOOM's config has no 'seq_length' and ALiBi no position table to take one "
                  "from: pass --seq");
    checkSequenceFlag();
    if (hidden && heads && *hidden % *heads != 0)
      refuse(headsKey, "it does not divide the hidden size " + Twine(*hidden) +
                           ", and BLOOM's heads are hidden / heads wide");
    bool tied = getBool("tie_word_embeddings").value_or(info.tiedByDefault);
    if (diags.hasErrors())
      return "";
    std::string out;
    raw_string_ostream m(out);
    m << "model " << modelName() << " : transformer {\n";
    m << "  layers = " << *layers << ";\n  hidden = " << *hidden << ";\n  heads = " << *heads
      << ";\n  seq = " << *seq << ";\n  vocab = " << *vocab << ";\n";
    m << "  positions = alibi;\n  embedding_norm = true;\n";
    if (!tied)
      m << "  tied_embeddings = false;\n";
    m << "}\n";
    return out;
  }

  /// Place's router renormalizes the top-k probabilities: an error unless norm_topk_prob is true.
  void requireNormalizedTopK() {
    if (!getBool("norm_topk_prob").value_or(false))
      refuse(root->get("norm_topk_prob") ? "norm_topk_prob" : "model_type",
             "Place's router renormalizes the top-k probabilities (norm_topk_prob = true); "
             "without it the combine weights differ");
  }

  /// The load-balancing loss coefficient at `key` (0 to 1), or `fallback` when it is absent.
  double getAuxLoss(StringRef key, double fallback) {
    const json::Value *value = root->get(key);
    if (!value)
      return fallback;
    std::optional<double> number = value->getAsNumber();
    if (!number || *number < 0 || *number > 1) {
      diags.error(locOf(key), "'" + key + "' must be a number from 0 to 1, not " + quoted(key));
      return fallback;
    }
    return *number;
  }

  /// A mixture of experts has at least 2 experts (at `expertsKey`), and routes each token to no
  /// more of them than it has.
  void checkExperts(StringRef expertsKey, std::optional<int64_t> experts,
                    std::optional<int64_t> topK) {
    if (experts && topK && *topK > *experts)
      refuse("num_experts_per_tok", "it exceeds the " + Twine(*experts) + " experts");
    if (experts && *experts < 2)
      refuse(expertsKey, "a mixture of experts has at least 2");
  }

  /// A whole number from 0 to `max` at `key`, or `fallback` when it is absent or null.
  std::optional<int64_t> getCount(StringRef key, int64_t fallback, int64_t max) {
    const json::Value *value = root->get(key);
    if (!value || value->kind() == json::Value::Null)
      return fallback;
    std::optional<int64_t> number = value->getAsInteger();
    if (!number || *number < 0 || *number > max) {
      diags.error(locOf(key), "'" + key + "' must be a whole number from 0 to " + Twine(max) +
                                  ", not " + quoted(key));
      return std::nullopt;
    }
    return number;
  }

  /// DeepSeek-V2 and V3's mixture of experts: n_routed_experts routed experts of
  /// moe_intermediate_size, n_shared_experts shared ones of the same width, after
  /// first_k_dense_replace dense layers (transformers' DeepseekV3DecoderLayer: layer i is MoE
  /// from first_k_dense_replace on, every moe_layer_freq-th counted from layer 0, which is Place's
  /// moe_every only for 1), routed by a softmax or a sigmoid (scoring_func).
  std::string translateDeepSeekMoe() {
    std::optional<int64_t> experts = getInt("n_routed_experts", true, 1 << 16);
    std::optional<int64_t> topK = getInt("num_experts_per_tok", true, 1 << 16);
    std::optional<int64_t> expertFfn = getInt("moe_intermediate_size", true, 1 << 26);
    std::optional<int64_t> shared = getCount("n_shared_experts", 0, 1024);
    std::optional<int64_t> dense = getCount("first_k_dense_replace", 0, ir::kMaxLayers);
    if (std::optional<int64_t> every = getCount("moe_layer_freq", 1, ir::kMaxLayers);
        every && *every != 1)
      refuse("moe_layer_freq", "DeepSeek's MoE layers are every n-th counted from layer 0 after "
                               "the dense ones; Place's moe_every counts from the first MoE layer, "
                               "so only 1 maps");
    StringRef scoring = getString("scoring_func").value_or("softmax");
    if (scoring != "softmax" && scoring != "sigmoid")
      refuse("scoring_func", "Place's router is a softmax or a sigmoid");
    requireNormalizedTopK();
    double auxLoss = getAuxLoss("aux_loss_alpha", 0);
    bool seqAux = getBool("seq_aux").value_or(true);
    checkExperts("n_routed_experts", experts, topK);
    // Group-limited routing: n_group groups, topk_group of them per token, except under the
    // greedy top-k (DeepSeek-V2-Lite's), which ignores the groups.
    int64_t groups = getCount("n_group", 1, 1 << 16).value_or(1);
    int64_t groupTopK =
        root->get("topk_group") ? getCount("topk_group", 0, 1 << 16).value_or(0) : 0;
    bool limited = groups > 1 && getString("topk_method").value_or("greedy") != StringRef("greedy");
    if (limited && groupTopK < 1)
      refuse("n_group", "group-limited routing needs topk_group, the groups a token's experts "
                        "come from, of at least 1");
    else if (limited && experts && topK &&
             (*experts % groups != 0 || groupTopK > groups ||
              groupTopK * (*experts / groups) < *topK))
      refuse("n_group", "the groups must divide n_routed_experts evenly, and topk_group of them "
                        "must hold num_experts_per_tok experts");
    std::string out;
    if (!experts || !topK || !expertFfn || !shared || !dense)
      return out;
    raw_string_ostream e(out);
    e << "  experts = " << *experts << ";\n  top_k = " << *topK
      << ";\n  expert_ffn = " << *expertFfn << ";\n";
    if (*shared > 0)
      e << "  shared_experts = " << *shared << ";\n";
    if (*dense > 0)
      e << "  dense_layers = " << *dense << ";\n";
    if (scoring == "sigmoid")
      e << "  router = sigmoid;\n";
    if (limited)
      e << "  router_groups = " << groups << ";\n  router_group_top_k = " << groupTopK << ";\n";
    // DeepSeek's balance loss counts each sequence's routing (DeepSeek-V3 §2.1.2, the
    // sequence-wise auxiliary loss; the modeling code's `seq_aux`, true unless set false, where
    // it counts the whole batch of the forward instead).
    if (auxLoss > 0) {
      e << "  aux_loss = " << format("%g", auxLoss) << ";\n";
      e << "  aux_loss_scope = " << (seqAux ? "sequence" : "local") << ";\n";
    }
    return out;
  }

  const ImportOptions &options;
  DiagnosticEngine &diags;
  StringRef text;
  KeyLocator keys;
  const json::Object *root = nullptr;
  Family family = Family::Llama;
};

} // namespace

bool isHuggingFaceConfig(StringRef text) {
  Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    consumeError(parsed.takeError());
    return false;
  }
  const json::Object *root = parsed->getAsObject();
  return root && root->get("model_type");
}

bool importHuggingFace(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags,
                       raw_ostream &os) {
  return HuggingFaceImporter(bufferId, options, diags).run(os);
}

} // namespace placec::bridge
