// The placec IR: a Program of Models (parameter tensors with their tensor-parallel split kinds),
// Clusters, Strategies (a Mesh and a Placement of the four training states) and Runs. Sema builds
// it from the AST with every name resolved, every default applied and every unit converted to base
// units (bytes, bytes/s, FLOP/s, seconds).
#ifndef PLACEC_IR_IR_H
#define PLACEC_IR_IR_H

#include "placec/ir/Devices.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace placec::ir {

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

/// How a tensor-parallel axis splits a tensor (Megatron-LM).
enum class TensorSplit {
  Column,     ///< Output features split: qkv, MLP up/gate projections and their biases.
  Row,        ///< Input features split: attention output and MLP down projection weights.
  Vocabulary, ///< Vocabulary rows split: token embedding and untied output layer.
  Replicated, ///< Not split: norms, row-parallel biases, position embeddings.
};

llvm::StringRef toString(TensorSplit split);

/// One parameter tensor.
struct Tensor {
  std::string name; ///< `layers.3.attn.qkv.weight`, `embed.tokens`.
  std::vector<int64_t> shape;
  int64_t numElements = 0; ///< The product of the shape: element count, independent of dtype.
  TensorSplit split = TensorSplit::Replicated;
  /// The transformer block or mlp layer the tensor belongs to, counted from 0; -1 for tensors
  /// before the first layer (embeddings), and `numLayers` for tensors after the last (final
  /// norm, output layer).
  int layer = 0;
  /// A routed expert's tensor (`layers.i.moe.experts.*`, the experts stacked on the first
  /// dimension): split over the expert axes and placed by `expert_params`, `expert_grads` and
  /// `expert_optimizer`. The router and shared experts are dense tensors.
  bool expert = false;
  /// A router's tensor (`layers.i.moe.router.*`): dense, but it reads every token of the
  /// tensor-parallel group (the MoE block gathers the sequence first), so its gradient is whole
  /// on each tensor rank.
  bool router = false;
  /// The embedding's norm (`embedding_norm`): replicated like a layer's norm, and under sequence
  /// parallelism it runs on each rank's slice of the sequence, as a layer's norms do.
  bool embeddingNorm = false;

  /// Whether, under sequence parallelism, each tensor rank holds a partial sum of the tensor's
  /// gradient that the tensor axes must add up (Korthikanti et al. 2022, §4.2.2): the replicated
  /// tensors of the layers, the head and the embedding's norm (norms, row-parallel biases), not a
  /// router's or an expert's, which see every token of the group.
  bool hasSequenceParallelGradient() const {
    return split == TensorSplit::Replicated && !expert && !router && (layer >= 0 || embeddingNorm);
  }
};

enum class ModelKind { Transformer, Mlp, Abstract };
/// The MLP: `gelu` (two matrices, GELU between), `swiglu` (three: silu of the gate times the up
/// product) or `relu2` (two matrices, squared ReLU between: Nemotron-4's and Primer's).
enum class MlpActivation { Gelu, Swiglu, Relu2 };
enum class NormKind { LayerNorm, RmsNorm };
/// Where a transformer gets its positions: a `learned` table (GPT-2, GPT-3), the rotary embedding
/// of Q and K (`rope`; Su et al. 2021, "RoFormer"), or ALiBi (`alibi`; Press et al. 2022, "Train
/// Short, Test Long"): a bias of −slope·distance added to every attention score, one fixed slope
/// per head, no parameters (BLOOM; Megatron-DeepSpeed's --position-embedding-type alibi).
enum class PositionKind { Learned, Rope, Alibi };
/// How a layer's projections that read the same input run: `fused` (one QKV product and one
/// gate-and-up product, Megatron-Core's linear_qkv and linear_fc1) or `separate` (each its own
/// product that reads the input, and autograd sums their input gradients: torchtitan's and
/// Hugging Face's Llama, wq/wk/wv and w1/w3).
enum class Projections { Fused, Separate };
/// How the attention core runs: fused (the s×s scores live only in on-chip memory, recomputed in
/// the backward) by FlashAttention-2 (`flash`: PyTorch's SDPA, torchtitan, llm-foundry),
/// FlashAttention-3 (`flash3`: Hopper only) or cuDNN's fused attention (`cudnn`: Transformer
/// Engine, Megatron-Core and NeMo on Hopper), or materialized (scores and probabilities written
/// to device memory and kept for the backward, Korthikanti et al. 2022's accounting). The fused
/// kernels store and move the same bytes; they differ in speed.
enum class AttentionKind { Flash, Flash3, Cudnn, Materialized };
/// How a mixture-of-experts router scores the experts of a token: a softmax over the experts
/// (Mixtral, Qwen3-MoE) or an independent sigmoid per expert (DeepSeek-V3).
enum class RouterKind { Softmax, Sigmoid };
/// Over which tokens the load-balancing loss's routing statistics are counted (`aux_loss_scope`):
/// each micro-batch across every data-parallel device (`global`, the default; Megatron-Core's
/// global_aux_loss), each data-parallel device's own micro-batch (`local`; Megatron-Core's
/// aux_loss, GShard's per-group loss), or each sequence of it (`sequence`; DeepSeek-V3's
/// sequence-wise balance loss, §2.1.2, Megatron-Core's seq_aux_loss).
enum class AuxLossScope { Global, Local, Sequence };

llvm::StringRef toString(ModelKind kind);
llvm::StringRef toString(MlpActivation activation);
llvm::StringRef toString(NormKind norm);
llvm::StringRef toString(PositionKind positions);
llvm::StringRef toString(Projections projections);
llvm::StringRef toString(AttentionKind attention);
llvm::StringRef toString(RouterKind router);
llvm::StringRef toString(AuxLossScope scope);

/// The mixture-of-experts layers of a transformer (`experts` written): in each MoE layer a
/// router sends every token to `topK` of `experts` feed-forward experts and sums their outputs,
/// weighted by the renormalized router scores, with the output of `sharedExperts` always-on ones.
struct MoeConfig {
  int64_t experts = 0; ///< Routed experts per MoE layer; 0: a dense model.
  int64_t topK = 0;
  int64_t expertFfn = 0;       ///< FFN width of one routed expert.
  int64_t sharedExperts = 0;   ///< Always-on experts per MoE layer.
  int64_t sharedExpertFfn = 0; ///< FFN width of one shared expert.
  int64_t every = 1;           ///< Every k-th layer after the dense ones is an MoE layer.
  int64_t denseLayers = 0;     ///< The first n layers are dense.
  RouterKind router = RouterKind::Softmax;
  /// `router_bias = true`: the router's scores have a bias per expert (gpt-oss; Megatron-Core's
  /// router under --add-bias-linear).
  bool routerBias = false;
  /// `router_groups = G; router_group_top_k = g;`: group-limited routing (DeepSeek-V2 §2.1.2,
  /// DeepSeek-V3 §2.1.2, Megatron-Core's --moe-router-num-groups and --moe-router-group-topk): the
  /// experts in G contiguous groups, a token's top_k drawn from the g groups its scores rank
  /// first; 0: no groups. It changes no parameter and no FLOP, only how many nodes and ranks a
  /// token's experts span (cost::getHoldersReachedPerToken).
  int64_t routerGroups = 0, routerGroupTopK = 0;
  /// Expert capacity as a multiple of the tokens an expert gets under even routing; nullopt:
  /// dropless routing.
  std::optional<double> capacityFactor;
  double auxLoss = 0.01; ///< The load-balancing loss coefficient.
  /// The tokens whose routing statistics the loss counts (AuxLossScope), and where
  /// `aux_loss_scope` is written (invalid when it is not).
  AuxLossScope auxLossScope = AuxLossScope::Global;
  llvm::SMLoc auxLossScopeLoc;
  /// The busiest expert's tokens over the mean under dropless routing (the step waits for the
  /// busiest rank). 1: even routing, the default (docs/language.md).
  double imbalance = 1.0;

  bool isEnabled() const { return experts > 0; }
  /// True when layer `layer` (from 0) is an MoE layer.
  bool isMoeLayer(int64_t layer) const {
    return isEnabled() && layer >= denseLayers && (layer - denseLayers) % every == 0;
  }
  /// The number of MoE layers among `layers`.
  int64_t getNumMoeLayers(int64_t layers) const {
    if (!isEnabled() || layers <= denseLayers)
      return 0;
    return (layers - denseLayers + every - 1) / every;
  }
};

/// The most layers a transformer or an MLP may have. The step plan holds every layer's operations
/// (each with its own shapes, collectives and positions in the step), so a run's lowering,
/// analysis and report grow with the layer count: about 2 s and 230 MB for one run of 16,384
/// GPT layers. The deepest transformers trained have about a thousand (Wang et al. 2022,
/// DeepNet: 1,000 layers).
constexpr int64_t kMaxLayers = int64_t{1} << 14;

struct TransformerConfig {
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, ffn = 0;
  /// Key/value heads (grouped-query attention); 0 means `heads` (multi-head attention).
  int64_t kvHeads = 0;
  /// `kv_repeat = true`: the model code repeats each key/value head to its query heads before
  /// the attention kernel (torchtitan's Llama, `repeat_kv`; Hugging Face's eager attention), so
  /// the kernel receives, keeps and context parallelism exchanges `heads` heads of K and V
  /// (cost::repeatsKv). Nothing to repeat when kv_heads = heads.
  bool kvRepeat = false;
  /// Where `kv_repeat` is written (invalid when it is not).
  llvm::SMLoc kvRepeatLoc;
  /// `rope_complex = true`: the model code applies the rotary embedding as a complex product over
  /// an fp32 copy of Q and K (`torch.view_as_complex`: torchtitan's and Meta's Llama), which
  /// torch.compile does not compile (cost::rotatesComplex). Only with `positions = rope`.
  bool ropeComplex = false;
  /// Where `rope_complex` is written (invalid when it is not).
  llvm::SMLoc ropeComplexLoc;
  Projections projections = Projections::Fused;
  /// Where `projections` is written (invalid when it is not).
  llvm::SMLoc projectionsLoc;
  AttentionKind attention = AttentionKind::Flash;
  /// Where `attention` is written (invalid when it is not).
  llvm::SMLoc attentionLoc;
  /// `unpad = true`: the model gathers the tokens of Q, K and V into packed tensors before a
  /// variable-length attention kernel and scatters its output back into the padded batch
  /// (flash-attn's `unpad_input` and `pad_input` around `flash_attn_varlen_func`, as llm-foundry's
  /// MPT calls FlashAttention-2), whether or not the batch has padding. Fused attention only.
  bool unpad = false;
  /// Where `unpad` is written (invalid when it is not).
  llvm::SMLoc unpadLoc;
  /// The width of one attention head when it is not hidden/heads (Qwen3, Gemma); 0: hidden/heads.
  int64_t headDim = 0;
  /// RMSNorm of each head's queries and keys before the attention (Qwen3, OLMo 2): two weights of
  /// the head width per layer.
  bool qkNorm = false;
  /// `window = w`: sliding-window attention in every layer (Mistral 7B; Beltagy et al. 2020,
  /// "Longformer"; Child et al. 2019): each query attends the `w` most recent tokens, itself
  /// included, as Hugging Face's `sliding_window` counts them. 0: the whole causal prefix. A
  /// window of `seq` tokens or more is the whole prefix.
  int64_t window = 0;
  /// Where `window` is written (invalid when it is not).
  llvm::SMLoc windowLoc;
  /// `full_every = n` with a window: every n-th layer (the n-th, the 2n-th, … counted from 1)
  /// attends the whole causal prefix and the others the window (Megatron-Core's
  /// `--window-attn-skip-freq n`; Gemma 3's five local layers to one global, n = 6, Gemma Team
  /// 2025, "Gemma 3 Technical Report"; gpt-oss's alternation, n = 2, OpenAI 2025, "gpt-oss-120b &
  /// gpt-oss-20b Model Card"). 0: the window holds in every layer.
  int64_t fullEvery = 0;
  /// Where `full_every` is written (invalid when it is not).
  llvm::SMLoc fullEveryLoc;
  /// `post_norm = true`: a norm of the model's kind also on each block's output before its
  /// residual addition, four norms a layer (Gemma 2 and 3's post_attention_layernorm and
  /// post_feedforward_layernorm; Gemma Team 2024, "Gemma 2", §2).
  bool postNorm = false;
  /// Where `post_norm` is written (invalid when it is not).
  llvm::SMLoc postNormLoc;
  /// `sinks = true`: a learned logit per head in each row of the attention's softmax, attended by
  /// no value (gpt-oss; OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card"; Xiao et al. 2023,
  /// "Efficient Streaming Language Models with Attention Sinks"): `heads` parameters a layer.
  bool sinks = false;
  /// Where `sinks` is written (invalid when it is not).
  llvm::SMLoc sinksLoc;
  /// Multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", §2.1; DeepSeek-V3) when
  /// `kvLoraRank` > 0: the keys and values of every head come up from one latent of
  /// `kv_lora_rank` per token (a down-projection, an RMSNorm, an up-projection to the heads), the
  /// queries likewise from a latent of `q_lora_rank` (0: one projection from the hidden state),
  /// and a decoupled rotary part of `rope_head_dim` per head, whose key is one head shared by all.
  /// Each query and key head is head_dim + rope_head_dim wide (head_dim is the part without
  /// positions: DeepSeek's qk_nope_head_dim, Megatron-Core's --qk-head-dim), each value head
  /// `v_head_dim` (0: head_dim).
  int64_t kvLoraRank = 0, qLoraRank = 0, ropeHeadDim = 0, valueHeadDim = 0;
  /// Where `kv_lora_rank` is written (invalid when it is not).
  llvm::SMLoc kvLoraRankLoc;
  MlpActivation mlp = MlpActivation::Gelu;
  /// Where `mlp` is written (invalid when it is not).
  llvm::SMLoc mlpLoc;
  NormKind norm = NormKind::LayerNorm;
  bool bias = true;
  /// `bias = qkv`: biases on the query, key and value projections only (Qwen2; Megatron-LM's
  /// `--add-qkv-bias`). `bias` is false then.
  bool qkvBias = false;
  PositionKind positions = PositionKind::Learned;
  /// Where `positions` is written (invalid when it is not).
  llvm::SMLoc positionsLoc;
  /// `embedding_norm = true`: a norm of the model's kind on the token embedding's output, before
  /// the first layer (BLOOM's word_embeddings_layernorm; Megatron-DeepSpeed's --embed-layernorm;
  /// BigScience 2022, "BLOOM", §3.2.2): its weight (and LayerNorm's bias) are embedding
  /// parameters, and it keeps its input for the backward.
  bool embeddingNorm = false;
  /// Where `embedding_norm` is written (invalid when it is not).
  llvm::SMLoc embeddingNormLoc;
  bool tiedEmbeddings = true;
  MoeConfig moe;
  /// `mtp_layers = n`: multi-token prediction (DeepSeek-AI 2024, "DeepSeek-V3", §2.2;
  /// Megatron-Core's --mtp-num-layers): n sequential modules after the last layer, the k-th
  /// predicting the token k + 1 ahead. Each normalizes the previous depth's hidden state (the
  /// last layer's output for the first) and the embedding of the token k positions on (two
  /// norms), projects their concatenation from 2·hidden to hidden, runs one transformer layer of
  /// the last layer's kind (dense or MoE, its attention pattern), normalizes its output, and
  /// takes the model's own output layer and cross-entropy; the embedding and the output layer
  /// are shared with the model. The modules are blocks `layers` … `layers + n − 1`, after the
  /// decoder's layers and before the head (getNumBlocks).
  int64_t mtpLayers = 0;
  /// Where `mtp_layers` is written (invalid when it is not).
  llvm::SMLoc mtpLayersLoc;

  /// The key/value heads: `kvHeads`, or `heads` when it is not given.
  int64_t getKvHeads() const { return kvHeads > 0 ? kvHeads : heads; }
  /// Whether attention looks back over fewer tokens than the sequence (`window` < `seq`).
  bool isWindowed() const { return window > 0 && window < seq; }
  /// Whether layer `layer` (from 0) attends a sliding window: every layer of a windowed model but
  /// every `fullEvery`-th.
  bool isWindowedLayer(int64_t layer) const {
    return isWindowed() && (fullEvery == 0 || (layer + 1) % fullEvery != 0);
  }
  /// Whether some layers attend a window and others the whole prefix (`full_every` with a
  /// window shorter than the sequence and no more than `layers` layers apart).
  bool hasFullAttentionLayers() const {
    return isWindowed() && fullEvery > 0 && fullEvery <= layers;
  }
  /// The width of one attention head (under latent attention, its part without positions).
  int64_t getHeadDim() const { return headDim > 0 ? headDim : heads > 0 ? hidden / heads : 0; }
  /// Whether the attention is multi-head latent attention (`kv_lora_rank`).
  bool isLatentAttention() const { return kvLoraRank > 0; }
  /// The width of one query or key head: head_dim, and the rotary part under latent attention.
  int64_t getQueryKeyHeadDim() const {
    return getHeadDim() + (isLatentAttention() ? ropeHeadDim : 0);
  }
  /// The width of one value head (and of one head of the attention's output).
  int64_t getValueHeadDim() const {
    return isLatentAttention() && valueHeadDim > 0 ? valueHeadDim : getHeadDim();
  }
  /// The `bias` field as written: `true`, `false` or `qkv`.
  llvm::StringRef getBiasText() const { return bias ? "true" : qkvBias ? "qkv" : "false"; }
  /// The transformer blocks: the layers and the multi-token prediction modules after them. The
  /// head's tensors and unit are block getNumBlocks().
  int64_t getNumBlocks() const { return layers + mtpLayers; }
  /// Whether block `block` is a multi-token prediction module (`mtp_layers`).
  bool isMtpBlock(int64_t block) const { return block >= layers && block < getNumBlocks(); }
  /// Whether block `block` is an MoE layer: a layer by `moe`, and a multi-token prediction module
  /// as the last layer, whose layer spec Megatron-Core builds it from
  /// (megatron/core/models/gpt/gpt_layer_specs.py, get_gpt_mtp_block_spec: the decoder block's
  /// last layer spec).
  bool isMoeBlock(int64_t block) const {
    return moe.isMoeLayer(isMtpBlock(block) && layers > 0 ? layers - 1 : block);
  }
  /// Whether block `block` attends a sliding window: a layer by isWindowedLayer, and the k-th
  /// multi-token prediction module (from 0) as layer k, since Megatron-Core numbers the modules'
  /// layers from 1 on their own (multi_token_prediction.py) and picks each layer's window by that
  /// number (is_layer_window_attention).
  bool isWindowedBlock(int64_t block) const {
    return isWindowedLayer(isMtpBlock(block) ? block - layers : block);
  }
};

struct MlpConfig {
  int64_t layers = 0, width = 0, input = 0, output = 0;
};

class Model {
public:
  std::string name;
  llvm::SMLoc loc;
  ModelKind kind = ModelKind::Abstract;
  TransformerConfig transformer; ///< Meaningful when kind == Transformer.
  MlpConfig mlp;                 ///< Meaningful when kind == Mlp.
  /// Every parameter tensor, in model order. Empty for an abstract model.
  std::vector<Tensor> tensors;
  /// The parameter count: the sum over `tensors`, or the declared `params` of an abstract model.
  int64_t numParams = 0;

  /// The number of layers (transformer blocks or mlp linear layers); 0 for an abstract model.
  int64_t getNumLayers() const;
  /// Parameters in tensors with `layer` in [0, numLayers).
  int64_t getLayerParams() const;
  /// Parameters in tensors before the first layer (embeddings).
  int64_t getEmbeddingParams() const;
  /// Parameters in tensors after the last layer and its multi-token prediction modules (final
  /// norm, untied output layer).
  int64_t getHeadParams() const;
  /// Parameters of the multi-token prediction modules (`mtp_layers`).
  int64_t getMtpParams() const;
  /// The block index of the head's tensors: the layer count of an mlp, and of a transformer its
  /// layers and multi-token prediction modules (TransformerConfig::getNumBlocks).
  int64_t getHeadLayer() const;
  /// Parameters whose tensor has the given split kind.
  int64_t getParamsWithSplit(TensorSplit split) const;
  /// The sum of the element counts of every tensor (what `numParams` is for a non-abstract model).
  int64_t getTensorParams() const;
  /// Parameters in routed experts' tensors.
  int64_t getExpertParams() const;
  /// The parameters one token uses: every dense tensor and `top_k` of each MoE layer's routed
  /// experts (`numParams` for a dense model).
  int64_t getActiveParams() const;
  /// True for a transformer with mixture-of-experts layers.
  bool isMoe() const { return kind == ModelKind::Transformer && transformer.moe.isEnabled(); }
};

/// Builds the tensors of a transformer (GPT-2 layout, or LLaMA with swiglu/rmsnorm/rope/untied).
/// `ffn = 0` means four times hidden. Element counts and sums saturate at INT64_MAX instead of
/// overflowing; Sema bounds the config first, so that only matters for unchecked callers.
std::vector<Tensor> buildTransformerTensors(const TransformerConfig &config);
/// Builds the tensors of an mlp: `layers` linear layers with biases, input → width … → output.
std::vector<Tensor> buildMlpTensors(const MlpConfig &config);

//===----------------------------------------------------------------------===//
// Clusters
//===----------------------------------------------------------------------===//

enum class Fp8Scaling;

/// The most devices a cluster, a mesh or a search may have (2^24, some sixteen million).
inline constexpr int64_t kMaxDevices = int64_t(1) << 24;

class Cluster {
public:
  std::string name;
  llvm::SMLoc loc;
  int64_t nodes = 0;
  int64_t devicesPerNode = 0;
  double deviceMemory = 0;             ///< Bytes per device.
  double peakFlops = 0;                ///< FLOP/s per device.
  double intraBandwidth = 0;           ///< Bytes/s per device inside a node.
  double interBandwidth = 0;           ///< Bytes/s per device across nodes.
  std::optional<double> hostBandwidth; ///< Bytes/s per device to host memory.
  double latency = 0;                  ///< Seconds per collective step (alpha).
  std::optional<double> hostMemory;    ///< Bytes per node.
  /// A flat fraction of peak that all compute reaches. Used when written, or when the cluster
  /// names no device (then 0.5); otherwise compute is timed from its shapes (docs/plan.md).
  double efficiency = 0.5;
  bool efficiencyExplicit = false;
  /// The preset of `device = …;`, or null; its figures fill every field the cluster does not
  /// write, and its family selects the cost model's calibration constants.
  const DevicePreset *device = nullptr;
  double peakTf32 = 0; ///< FLOP/s per device of fp32 matrix products (TF32); 0: `peak`.
  double peakFp8 = 0;  ///< FLOP/s per device in FP8; 0 when the device has none.
  double peakFp4 = 0;  ///< FLOP/s per device in FP4 (NVFP4); 0 when the device has none.
  /// The peak that `mixed(fp8)` products at `scaling` run at: FP4's for NVFP4, FP8's otherwise.
  double getLowPrecisionPeak(Fp8Scaling scaling) const;
  double hbmBandwidth = 0; ///< Bytes/s of device memory; 0 when unknown.
  /// Bytes/s of host memory per node (what a host optimizer step runs at).
  std::optional<double> hostMemoryBandwidth;
  int64_t computeUnits = 0;            ///< SMs or CUs; 0 when unknown.
  std::optional<double> nvmeBandwidth; ///< Bytes/s per device.
  std::optional<double> nvmeCapacity;  ///< Bytes per node.
  /// The cost model's two fitted constants for this cluster, in place of those of
  /// passes/CostModel.h (`kTrainingKernelEfficiency`, `kGemmTileOverheadK`). No Place field sets
  /// them: `placec fidelity --fit` does, to time its rows with the other values of its grid.
  std::optional<double> fittedKernelEfficiency;
  std::optional<double> fittedTileOverheadK;
  /// Where each field was written, by key, for notes.
  llvm::StringMap<llvm::SMLoc> fieldLocs;

  int64_t getNumDevices() const { return nodes * devicesPerNode; }
  /// True when compute is timed from GEMM shapes and memory traffic (a device family is known
  /// and no flat `efficiency` is written).
  bool hasShapeModel() const { return device != nullptr && !efficiencyExplicit; }
};

//===----------------------------------------------------------------------===//
// Strategies: meshes and placements
//===----------------------------------------------------------------------===//

/// What an axis splits in the computation.
enum class AxisKind {
  Batch,    ///< The samples of a step (data parallelism).
  Tensor,   ///< Every weight matrix and the work of a layer (tensor parallelism).
  Layers,   ///< The layers, into consecutive stages (pipeline parallelism).
  Sequence, ///< Every sequence, into contiguous parts (context parallelism).
  /// The routed experts of every MoE layer (expert parallelism); for everything else a batch
  /// axis: its devices see different samples.
  Expert,
};

llvm::StringRef toString(AxisKind kind);

/// True for the axes whose devices hold the same parameters and compute the gradients of
/// different tokens, so that the model states are placed over them and the gradients summed
/// over them: batch axes, sequence (context-parallel) axes and, for dense tensors, expert axes.
inline bool isDataParallel(AxisKind kind) {
  return kind == AxisKind::Batch || kind == AxisKind::Sequence || kind == AxisKind::Expert;
}
/// The same for routed experts' tensors: the expert axes split them, so only the batch and
/// sequence axes replicate them (the expert-data-parallel group).
inline bool isExpertDataParallel(AxisKind kind) {
  return kind == AxisKind::Batch || kind == AxisKind::Sequence;
}

/// `async_tp = false | true | forward | wgrad;`: which tensor-parallel collectives run beside
/// products instead of before or after them: those of sequence parallelism beside the products
/// they feed or drain (decomposed all-gather-matmul and matmul-reduce-scatter, Wang et al. 2023,
/// ASPLOS '23), or the backward's input-gradient reductions beside the weight gradients.
enum class AsyncTensorParallel {
  Off, ///< `false` (the default): every collective on the critical path.
  /// `true`: the collectives of both passes (Megatron-Core's --tp-comm-overlap, whose
  /// Transformer Engine userbuffers also overlap the backward's gradient collectives).
  All,
  /// `forward`: the collectives of the forward computation, the forward pass and a recomputed
  /// forward, but not the backward's gradient collectives (PyTorch's asynchronous tensor
  /// parallelism as torchtitan runs it: a compiler pass fuses a collective with one product,
  /// and the backward's input gradients of projections that share an input are summed before
  /// their reduce-scatter).
  Forward,
  /// `wgrad`: only the backward's reductions of the column-parallel products' input gradients
  /// (the all-reduce, or the reduce-scatter under sequence parallelism, after QKV's, the MLP
  /// input's and the output layer's input gradient), each beside its product's weight gradient,
  /// which does not need it (Megatron-LM without --tp-comm-overlap: its column-parallel linear
  /// issues the reduction asynchronously before the weight-gradient GEMM, megatron/core/
  /// tensor_parallel/layers.py, since September 2021; it has no flag to turn this off).
  WeightGradient,
};
/// The value as written: `false`, `true`, `forward`, `wgrad`.
llvm::StringRef toString(AsyncTensorParallel mode);

/// `dp_overlap = grads | all | none;`: which of the step's data-parallel collectives (the
/// reduction of the accumulated gradients before the optimizer and the all-gather of the updated
/// parameters after it, where the optimizer is sharded and the parameters are not) run beside
/// compute.
enum class DataParallelOverlap {
  /// `grads` (the default): each unit's gradient reduction starts as the last micro-batch's
  /// backward produces its gradients and runs beside the backward of the units before it
  /// (PyTorch DDP's buckets, Megatron-LM's --overlap-grad-reduce, DeepSpeed's overlap_comm); the
  /// updated parameters are gathered after the optimizer, exposed.
  Grads,
  /// `all`: as `grads`, and each unit's all-gather of its updated parameters runs before that
  /// unit's forward in the next step, beside the forward of the unit before it (Megatron-LM's
  /// --overlap-param-gather, which needs --overlap-grad-reduce and the distributed optimizer).
  All,
  /// `none`: the gradient reductions start after the last micro-batch's backward and the
  /// parameter all-gathers after the optimizer, all exposed (Megatron-LM's default, without
  /// --overlap-grad-reduce; DeepSpeed's ZeRO stages 1 and 2 without overlap_comm).
  None,
};
/// The value as written: `grads`, `all`, `none`.
llvm::StringRef toString(DataParallelOverlap overlap);

/// `grad_reduce = reduce_scatter | all_reduce;`: the collective that sums the accumulated
/// gradients once per step over the axes where the optimizer is sharded and the gradients are
/// not (ZeRO stage 1). Either way each rank then updates its shard and the updated parameters
/// are all-gathered; the two differ in the bytes the sum moves.
enum class GradReduce {
  /// `reduce_scatter` (the default): each rank receives the sum of the shard it updates (ZeRO's
  /// stage 1 as Rajbhandari et al. 2020 count it, Megatron-LM's distributed optimizer, DeepSpeed's
  /// ZeRO optimizer at stage 1).
  ReduceScatter,
  /// `all_reduce`: every rank receives the whole sum and updates its shard of it (DeepSpeed's
  /// BF16_Optimizer, which its engine reduces with buffered_allreduce_fallback; PyTorch's
  /// ZeroRedundancyOptimizer under DistributedDataParallel).
  AllReduce,
};
/// The value as written: `reduce_scatter`, `all_reduce`.
llvm::StringRef toString(GradReduce reduce);

/// `ep_overlap = false | true;`: whether the expert-parallel all-to-alls of one micro-batch run
/// beside the compute of another.
enum class ExpertOverlap {
  /// `false` (the default): each MoE layer's dispatch and combine are on the critical path.
  Off,
  /// `true`: Megatron-Core's batch-level overlap (--overlap-moe-expert-parallel-comm, with
  /// --delay-wgrad-compute as its documentation pairs them): the forward of one micro-batch runs
  /// layer by layer beside the backward of the one before it, each pass's all-to-alls beside the
  /// other's compute (megatron/core/pipeline_parallel/combined_1f1b.py); the first forward and
  /// the last backward, and under interleaving the warm-up forwards and cool-down backwards, run
  /// alone.
  On,
};
/// The value as written: `false`, `true`.
llvm::StringRef toString(ExpertOverlap overlap);

/// `dispatcher = alltoall | deepep | hybridep;`: how an expert group's dispatch and combine move
/// the routed rows.
enum class ExpertDispatcher {
  /// `alltoall` (the default): one all-to-all over the group, each routed row sent to its
  /// expert's rank (Megatron-Core's --moe-token-dispatcher-type alltoall).
  AllToAll,
  /// `deepep`, `hybridep`: Megatron-Core's flex dispatcher over DeepEP or NVIDIA's HybridEP, which
  /// send a token once to each other node that holds one of its experts and forward it there over
  /// NVLink to the experts' ranks (DeepSeek-AI 2024, §3.2.2; DeepEP's internode kernels). Across
  /// nodes placec overlaps DeepEP's two stages and runs HybridEP's one after the other
  /// (cost::CostModel::getExpertExchangeSeconds).
  DeepEP,
  HybridEP,
};
/// The value as written: `alltoall`, `deepep`, `hybridep`.
llvm::StringRef toString(ExpertDispatcher dispatcher);

/// `expert_tensor = split | fold;`: how the routed experts meet the tensor axes.
enum class ExpertTensor {
  /// `split` (the default): each routed expert is split over the tensor axes like a dense MLP
  /// (Megatron-Core's expert tensor-parallel size equal to the tensor-parallel size). Every
  /// tensor-parallel rank routes all the tokens of its group.
  Split,
  /// `fold`: Megatron-Core's MoE parallel folding with --expert-tensor-parallel-size 1 (Liu et
  /// al. 2025, "MoE Parallel Folding", arXiv:2504.14960): the routed experts are whole on each
  /// device and the tensor axes' devices join the expert group, E/(ep·t) experts a device; each
  /// tensor-parallel rank routes its own sequence shard, and the dispatch and combine run over the
  /// expert and tensor axes together.
  Fold,
};
/// The value as written: `split`, `fold`.
llvm::StringRef toString(ExpertTensor mode);

/// `expert_context = split | fold;`: how the routed experts meet the sequence (context-parallel)
/// axes; its values are ExpertTensor's. `split` (the default): the sequence axes' devices hold the
/// same experts, which they replicate like a batch axis (their gradients summed over them).
/// `fold`: the sequence axes' devices join the expert group, E/(ep·cp) experts a device (times
/// the tensor axes' degree under `expert_tensor = fold`), each routing its own part of the
/// sequence as before: Megatron-Core's expert groups, which take the context-parallel ranks
/// before the data-parallel ones (its rank orders tp-cp-ep-dp-pp and tp-ep-dp-pp), and
/// torchtitan's, whose expert_parallel_degree borrows from the FSDP and context ranks.

/// `sp_inputs = regather | keep;`: what a column-parallel product (QKV, the MLP's input, the
/// output layer) keeps of its input for its weight gradient under sequence parallelism, where the
/// input is the all-gather of the sequence-split activations.
enum class SequenceParallelInputs {
  /// `regather` (the default): the sequence shard, gathered again in the backward beside the
  /// product's input gradient (Korthikanti et al. 2022, §4.2.2: "we store the sharded input and
  /// perform an extra all-gather in the backward pass"; Megatron-LM's and Transformer Engine's
  /// linears). The activation counts of docs/plan.md (s·b·h·34/t) assume it.
  Regather,
  /// `keep`: the gathered input itself, no second all-gather (PyTorch's tensor parallelism, where
  /// the matmul saves the all-gathered DTensor; placert's CPU trainer): each of the two layer
  /// inputs (QKV's and the MLP's) keeps s·b·h·e bytes instead of s·b·h·e/t.
  Keep,
};
/// The value as written: `regather`, `keep`.
llvm::StringRef toString(SequenceParallelInputs inputs);

/// How the attention of a context-parallel layer sees the keys and values of the whole
/// sequence (`context = …;` in a strategy).
enum class ContextMethod {
  Ring,      ///< K/V blocks passed around the ring, overlapped with blockwise attention.
  AllGather, ///< K/V all-gathered before the attention, dK/dV reduce-scattered after.
  AllToAll,  ///< Ulysses: all-to-all from sequence-split to head-split and back.
};
llvm::StringRef toString(ContextMethod method);

struct Axis {
  std::string name;
  AxisKind kind = AxisKind::Batch;
  int64_t size = 1;
  llvm::SMLoc loc;
};

/// A device mesh: axes from outermost (slowest-varying rank) to innermost. A device's rank is the
/// row-major index of its coordinates.
class Mesh {
public:
  std::vector<Axis> axes;

  int64_t getNumDevices() const;
  /// The index of the named axis, or -1.
  int findAxis(llvm::StringRef name) const;
  /// The rank distance between neighbours along an axis: the product of the inner axes' sizes.
  int64_t getStride(unsigned axis) const;
  /// The product of the sizes of every axis of a kind (1 when there is none).
  int64_t getDegree(AxisKind kind) const;
  /// The devices that see different samples: the batch axes and the expert axes (which are
  /// batch axes for everything but the routed experts).
  int64_t getSampleDegree() const {
    return getDegree(AxisKind::Batch) * getDegree(AxisKind::Expert);
  }
  /// The rank groups of an axis: each group holds the ranks that differ only in that axis's
  /// coordinate, in coordinate order; groups are ordered by their first rank.
  std::vector<std::vector<int64_t>> getGroups(unsigned axis) const;
  /// The number of rank groups of an axis: the device count divided by the axis size.
  int64_t getNumGroups(unsigned axis) const;
  /// Group `index` of getGroups(axis), computed alone (for printing the first few of a big mesh).
  std::vector<int64_t> getGroup(unsigned axis, int64_t index) const;
  /// True when every group of the axis lies inside one node of `devicesPerNode` devices.
  bool isIntraNode(unsigned axis, int64_t devicesPerNode) const;
};

/// The four training states.
enum class State { Params, Grads, Optimizer, Activations };
constexpr unsigned kNumStates = 4;
constexpr std::array<State, kNumStates> kAllStates = {State::Params, State::Grads, State::Optimizer,
                                                      State::Activations};
llvm::StringRef toString(State state);

/// How a state is placed over one mesh axis.
enum class PlacementMode {
  Replicated,        ///< `replicate(ax)`: the whole state over this axis.
  Sharded,           ///< `shard(ax)`: 1/n per device, never gathered.
  ShardedWithGather, ///< `gather(ax)`: 1/n stored, gathered around each use.
  TensorSplit,       ///< Tensor axis: split by each tensor's TP kind (the default; `shard(tp)`).
  StageSplit,        ///< Layers axis: split by pipeline stage (always).
  BatchSplit,        ///< Activations on a batch axis: each device keeps its own samples (always).
  SequenceSplit,     ///< Activations on a sequence axis: each device keeps its part (always).
};

llvm::StringRef toString(PlacementMode mode);

enum class Tier { Device, Host, Nvme };
llvm::StringRef toString(Tier tier);

/// What activations keep for the backward.
enum class ActivationMode {
  Keep,               ///< Everything the backward needs.
  RecomputeSelective, ///< Everything but attention scores, softmax and dropout.
  RecomputeFull,      ///< Layer inputs only.
  /// PyTorch's per-op selective checkpointing with torchtitan's "op" policy: the attention
  /// kernel's outputs and every other matrix product's output in forward order are kept.
  RecomputeOps,
  /// Megatron-Core's checkpoint of the core attention (`--recompute-granularity selective`,
  /// recompute_modules core_attn): what the attention kernel alone keeps is dropped and its
  /// forward runs again in the backward from the stored queries, keys and values, with its
  /// context-parallel exchanges. Under materialized attention, RecomputeSelective's set.
  RecomputeAttention,
  /// Megatron-Core's selective recomputation of a set of its modules (`--recompute-modules`,
  /// Strategy::recomputeModules, RecomputeModule): `recompute(core_attn, moe_act, …)`.
  RecomputeModules,
};

/// The Megatron-Core modules `recompute(…)` names (TransformerConfig.recompute_modules,
/// megatron/core/transformer/transformer_config.py), bits of Strategy::recomputeModules, in the
/// order Megatron-Core lists them.
enum RecomputeModule : unsigned {
  /// `core_attn`: the attention kernel's forward again (RecomputeAttention's alone).
  kRecomputeCoreAttention = 1u << 0,
  /// `moe_act`: the experts' activation function, its output not kept.
  kRecomputeMoeActivation = 1u << 1,
  /// `layernorm`: the norms that are modules of their own (an MoE layer's before its router, a
  /// latent attention's before its down-projections), their outputs not kept.
  kRecomputeLayernorm = 1u << 2,
  /// `mla_up_proj`: latent attention's up-projections and rotary embedding, Q, K and V not kept.
  kRecomputeMlaUpProjection = 1u << 3,
  /// `mlp`: a dense layer's whole MLP, from its input.
  kRecomputeMlp = 1u << 4,
};
/// Every RecomputeModule with its Megatron-Core name, in Megatron-Core's order.
llvm::ArrayRef<std::pair<RecomputeModule, llvm::StringRef>> getRecomputeModuleNames();
/// The RecomputeModule of Megatron-Core name `name`, or nothing for another name.
std::optional<RecomputeModule> findRecomputeModule(llvm::StringRef name);
/// Whether `name` is one of Megatron-Core's recompute modules placec does not describe (`moe`,
/// `shared_experts`: checkpoints of the whole MoE layer or of the shared experts' MLP).
inline bool isUndescribedRecomputeModule(llvm::StringRef name) {
  return name == "moe" || name == "shared_experts";
}

llvm::StringRef toString(ActivationMode mode);
/// The mode as written: toString, `recompute(layers = n)` when only the first `recomputeLayers`
/// layers of each model chunk are recomputed (Strategy::recomputeLayers), or
/// `recompute(core_attn, moe_act)` for the modules of `recomputeModules`.
std::string getActivationModeText(ActivationMode mode, int64_t recomputeLayers,
                                  unsigned recomputeModules = 0);

struct AxisPlacement {
  PlacementMode mode = PlacementMode::Replicated;
  /// `gather(ax, keep_after_forward = true)`: keep the gathered unit from forward to backward.
  bool keepAfterForward = false;
  /// True when written in the source; false when it is the axis kind's default.
  bool isExplicit = false;
  llvm::SMLoc loc;
};

/// The placement of one state: a mode per mesh axis (indexed like Mesh::axes) and a tier.
struct StatePlacement {
  std::vector<AxisPlacement> axes;
  Tier tier = Tier::Device;
  bool tierExplicit = false;
  llvm::SMLoc tierLoc;
  /// Where the `state = …;` line is; invalid when the state takes only defaults.
  llvm::SMLoc loc;

  /// The product of the sizes of the axes whose mode is `mode`.
  int64_t getDegree(const Mesh &mesh, PlacementMode mode) const;
};

enum class Schedule {
  OneFOneB,
  GPipe,
  Interleaved,
  ZeroBubble,  ///< ZB-H1 (Qi et al. 2024): 1F1B with the weight gradients filling the bubble.
  ZeroBubbleV, ///< ZB-V: two chunks per stage in a V.
  DualPipe,    ///< DeepSeek-V3's bidirectional pipeline (two copies of the stage's layers).
  DualPipeV,   ///< DualPipe cut in half: one copy, two chunks per stage in a V.
};
llvm::StringRef toString(Schedule schedule);

/// A pipeline layout as Megatron-Core writes it (megatron/core/transformer/
/// pipeline_parallel_layer_layout.py): virtual stages separated by `|`, each a run of `E` (the
/// embedding), `t` (a transformer layer), `m` (a multi-token prediction module) and `L` (the
/// output layer and the loss); `x*n` repeats one symbol and `(…)*n` a group, commas are
/// cosmetic.
struct PipelineLayoutSpec {
  std::string text; ///< As written, for printing and the Megatron-LM export.
  llvm::SMLoc loc;  ///< The string's opening quote, or invalid.
  /// Per virtual stage: its transformer layers and its multi-token prediction modules.
  std::vector<int64_t> layers, mtpLayers;
  bool empty() const { return layers.empty(); }
  int64_t getNumLayers() const;
  int64_t getNumMtpLayers() const;
};

/// Parses Megatron-Core's layout string. On failure returns nullopt with `error` set and
/// `offset` the byte of `text` at fault. Place's lowering places the embedding on the first
/// virtual stage's and the output layer, the loss and the modules on the last's, so the layout
/// must put `E` first, `L` last and every `m` in the last virtual stage after its layers; a
/// middle virtual stage without a layer is refused too.
std::optional<PipelineLayoutSpec> parsePipelineLayout(llvm::StringRef text, std::string &error,
                                                      size_t &offset);

struct Pipeline {
  Schedule schedule = Schedule::OneFOneB;
  /// Micro-batches per step; nullopt for `auto` (derived from the run).
  std::optional<int64_t> microbatches;
  int64_t chunks = 1; ///< Model chunks per stage (interleaving, ZB-V, DualPipeV: 2).
  /// Layers of the first and of the last stage when they differ from the others (embeddings and
  /// the output layer on them); 0: an even split.
  int64_t firstStageLayers = 0, lastStageLayers = 0;
  /// The embedding and the loss each counted as one layer in the split (Megatron-LM's
  /// --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split): the
  /// model's layers plus these divide evenly among the chunks, and the first chunk (the
  /// embedding's) and the last (the loss's) build one transformer layer fewer.
  bool embeddingLayer = false, lossLayer = false;
  /// `sends = scatter`: each tensor-parallel rank sends its 1/t of the activations (and, in the
  /// backward, of their gradients) that cross a stage boundary, and the receiving stage
  /// all-gathers them over the tensor axes (Narayanan et al. 2021, §4.1, "scatter/gather
  /// communication optimization"; Megatron-LM's default from February 2021, commit 72e4230,
  /// until its pipeline moved to Megatron-Core in January 2023, 39b83c7; DeepSpeed's pipeline
  /// engine partitions them the same way over its model-parallel group). Without it every
  /// tensor-parallel rank sends the whole replicated tensor. Only without sequence parallelism,
  /// whose boundary is already split over tp.
  bool scatterSends = false;
  /// `layout = "Et*4|(t*4|)*14tmL"`: Megatron-Core's pipeline layout (its
  /// --pipeline-model-parallel-layout), one entry per virtual stage in its order (virtual stage i
  /// on stage i mod p, its chunk i div p); empty when the split is even or set by first/last.
  PipelineLayoutSpec layout;
  /// The number of layers the split divides: the model's plus the counted embedding and loss.
  int64_t getSplitLayers(int64_t layers) const {
    return layers + (embeddingLayer ? 1 : 0) + (lossLayer ? 1 : 0);
  }
  llvm::SMLoc loc;
  /// `group = N` (interleaving): the micro-batches run in groups of N through each model chunk
  /// before the next (Megatron-Core's --microbatch-group-size-per-vp-stage, PyTorch's
  /// ScheduleInterleaved1F1B's rounds); 0: the pipeline size, Megatron-Core's default.
  int64_t group = 0;
  llvm::SMLoc groupLoc;
};

/// A strategy with every parameter bound: a mesh and a placement per state.
class Strategy {
public:
  std::string name; ///< The declared name, or the instantiation as written (`zero3(dp = 64)`).
  llvm::SMLoc loc;
  /// False for a mesh-less strategy (tiers and activation modes only, meant to be composed).
  bool hasMesh = false;
  Mesh mesh;
  std::array<StatePlacement, kNumStates> placements;
  /// The placements of routed experts' params, grads and optimizer state (`expert_params = …;`):
  /// as written on batch and sequence axes, else the dense state's mode there; always sharded
  /// on expert axes; split by each tensor's kind on tensor axes. Indexed by State (activations
  /// unused).
  std::array<StatePlacement, kNumStates> expertPlacements;
  ActivationMode activationMode = ActivationMode::Keep;
  llvm::SMLoc activationModeLoc;
  /// `recompute(layers = n)` (RecomputeFull only): the first n layers of each model chunk (the
  /// stage's layers, or each interleaved chunk's) are recomputed whole and the others keep their
  /// activations, as Megatron-LM's `--recompute-method block --recompute-num-layers n`; 0: every
  /// layer.
  int64_t recomputeLayers = 0;
  /// RecomputeModules only: the RecomputeModule bits it recomputes.
  unsigned recomputeModules = 0;
  /// Activations sharded along the sequence over the tensor axes (sequence parallelism).
  bool sequenceParallel = false;
  /// `context = ring | all_gather | all_to_all;`: the exchange of context-parallel attention.
  ContextMethod contextMethod = ContextMethod::Ring;
  llvm::SMLoc contextLoc;
  /// `async_tp = ...;`: which tensor-parallel collectives of sequence parallelism overlap the
  /// products that produce and consume them.
  AsyncTensorParallel asyncTensorParallel = AsyncTensorParallel::Off;
  llvm::SMLoc asyncTensorParallelLoc;
  /// `sp_inputs = ...;`: what sequence parallelism's column-parallel products keep of their input
  /// for the weight gradient (meaningful with sequenceParallel).
  SequenceParallelInputs sequenceParallelInputs = SequenceParallelInputs::Regather;
  llvm::SMLoc sequenceParallelInputsLoc;
  /// `dp_overlap = ...;`: which of the step's data-parallel collectives run beside compute.
  DataParallelOverlap dataParallelOverlap = DataParallelOverlap::Grads;
  llvm::SMLoc dataParallelOverlapLoc;
  /// `grad_reduce = ...;`: how the step sums the gradients where only the optimizer is sharded.
  GradReduce gradReduce = GradReduce::ReduceScatter;
  llvm::SMLoc gradReduceLoc;
  /// `ep_overlap = ...;`: whether the expert-parallel all-to-alls run beside another
  /// micro-batch's compute.
  ExpertOverlap expertOverlap = ExpertOverlap::Off;
  llvm::SMLoc expertOverlapLoc;
  /// `dispatcher = ...;`: how the expert-parallel all-to-alls move the routed rows.
  ExpertDispatcher expertDispatcher = ExpertDispatcher::AllToAll;
  llvm::SMLoc expertDispatcherLoc;
  /// `expert_tensor = ...;`: whether the routed experts are split over the tensor axes or fold
  /// them into the expert group.
  ExpertTensor expertTensor = ExpertTensor::Split;
  llvm::SMLoc expertTensorLoc;
  /// Whether the routed experts fold the tensor axes into their group (`expert_tensor = fold`)
  /// on a mesh with a tensor axis of more than one device.
  bool foldsExpertTensor() const {
    return expertTensor == ExpertTensor::Fold && mesh.getDegree(AxisKind::Tensor) > 1;
  }
  /// `expert_context = ...;`: whether the routed experts are replicated over the sequence axes
  /// or fold them into the expert group.
  ExpertTensor expertContext = ExpertTensor::Split;
  llvm::SMLoc expertContextLoc;
  /// Whether the routed experts fold the sequence axes into their group (`expert_context =
  /// fold`) on a mesh with a sequence axis of more than one device.
  bool foldsExpertContext() const {
    return expertContext == ExpertTensor::Fold && mesh.getDegree(AxisKind::Sequence) > 1;
  }
  /// Whether the routed experts' states are replicated (or sharded) over an axis of this kind:
  /// the batch axes, and the sequence axes unless the experts fold them (isExpertDataParallel).
  bool isExpertDataParallelAxis(AxisKind kind) const {
    return isExpertDataParallel(kind) && !(kind == AxisKind::Sequence && foldsExpertContext());
  }
  /// Whether an axis of this kind is one of the expert group's: the expert axes, and the tensor
  /// and sequence axes where the experts fold them.
  bool isExpertGroupAxis(AxisKind kind) const {
    return kind == AxisKind::Expert || (kind == AxisKind::Tensor && foldsExpertTensor()) ||
           (kind == AxisKind::Sequence && foldsExpertContext());
  }
  /// The devices of an expert group: the expert axes' degree, times the tensor and sequence axes'
  /// where they are folded in (Megatron-Core's --expert-model-parallel-size, torchtitan's
  /// expert_parallel_degree).
  int64_t getExpertGroupDegree() const {
    return mesh.getDegree(AxisKind::Expert) *
           (foldsExpertTensor() ? mesh.getDegree(AxisKind::Tensor) : 1) *
           (foldsExpertContext() ? mesh.getDegree(AxisKind::Sequence) : 1);
  }
  /// Whether the backward gathers the column-parallel products' inputs again: sequence
  /// parallelism with `sp_inputs = regather`.
  bool regathersInputs() const {
    return sequenceParallel && sequenceParallelInputs == SequenceParallelInputs::Regather;
  }
  std::optional<Pipeline> pipeline;

  /// Whether an axis of more than one device shards the optimizer (the dense one or the routed
  /// experts') but not the gradients: the axes `grad_reduce` acts on.
  bool shardsOptimizerOnly() const;
  /// Whether `grad_reduce = all_reduce` changes the step: it is written, and shardsOptimizerOnly.
  bool allReducesShardedOptimizer() const;

  const StatePlacement &getPlacement(State state) const {
    return placements[static_cast<unsigned>(state)];
  }
  StatePlacement &getPlacement(State state) { return placements[static_cast<unsigned>(state)]; }
  const StatePlacement &getExpertPlacement(State state) const {
    return expertPlacements[static_cast<unsigned>(state)];
  }
  StatePlacement &getExpertPlacement(State state) {
    return expertPlacements[static_cast<unsigned>(state)];
  }
};

/// Fills every expert placement slot that was not written: sharded on expert axes, the dense
/// state's mode (and tier) elsewhere. Sema calls it for each strategy it binds; code that builds or
/// changes a strategy calls it again after changing the dense placements.
void resolveExpertPlacements(Strategy &strategy);

//===----------------------------------------------------------------------===//
// Runs and programs
//===----------------------------------------------------------------------===//

enum class Precision {
  MixedBF16,
  MixedFP16,
  FP32,
  /// Low-precision matrix products, BF16 elsewhere: FP8 (`mixed(fp8)`, delayed, current or MX
  /// scaling), or NVFP4 (`mixed(fp4)`: Fp8Scaling::Nvfp4 says which).
  MixedFP8,
};
llvm::StringRef toString(Precision precision);

/// How `mixed(fp8)` scales its FP8 tensors (`scaling`):
/// - `tensor`, one scale per tensor whose amax costs the cast no pass of its own: delayed scaling
///   (Transformer Engine's DelayedScaling, which scales by the amax history and records the new
///   amax as it casts), or a tensorwise amax that the kernel producing the tensor computes
///   (torch.compile's fusion of torchao's dynamic scaling into its producer);
/// - `current`, one scale per tensor from the tensor's own amax, computed by a pass of its own
///   before the cast (Transformer Engine's Float8CurrentScaling, Megatron-LM's
///   `--fp8-recipe tensorwise`): each cast reads its input twice;
/// - `mx`, MXFP8 (OCP Microscaling: one E8M0 scale per 32 consecutive elements along the reduction
///   dimension, Blackwell's block-scaled tensor cores), as Transformer Engine's
///   MXFP8BlockScaling recipe runs it: every tensor that enters a product is quantized along its
///   rows and along its columns (the two products that read it reduce over different
///   dimensions), each copy with its scales;
/// - `nvfp4`, the products in NVFP4 (`mixed(fp4)`: E2M1 values, one E4M3 scale per 16
///   consecutive elements and one FP32 scale per tensor), as Transformer Engine's
///   NVFP4BlockScaling recipe runs it (NVIDIA, "Pretraining Large Language Models with NVFP4",
///   arXiv:2509.25149, §4): the weights' scales per 16×16 block, the inputs' and gradients' per 16
///   along a row, a random Hadamard transform fused into the casts that feed the weight gradient,
///   stochastic rounding of the gradients; like MXFP8, every tensor entering a product is
///   quantized along its rows and along its columns, each copy with its scales.
enum class Fp8Scaling { Tensor, Current, Mx, Nvfp4 };
llvm::StringRef toString(Fp8Scaling scaling);
/// Bytes per element of one MXFP8 copy of a tensor: the E4M3 value and a 32nd of its block's
/// one-byte E8M0 scale (OCP Microscaling Formats (MX) v1.0, §5: block size 32).
inline constexpr double kMxfp8BytesPerElement = 1 + 1.0 / 32;
/// Bytes per element of one NVFP4 copy: the 4-bit E2M1 value and a 16th of its block's one-byte
/// E4M3 scale (arXiv:2509.25149, §2; the per-tensor FP32 scale is left out).
inline constexpr double kNvfp4BytesPerElement = 0.5 + 1.0 / 16;
/// Whether a scaling is a block-scaled recipe (MXFP8, NVFP4), which keeps two copies of every
/// tensor entering a product, each with its block scales, and runs on Blackwell's tensor cores.
inline bool isBlockScaled(Fp8Scaling scaling) {
  return scaling == Fp8Scaling::Mx || scaling == Fp8Scaling::Nvfp4;
}
/// Bytes per element of one quantized copy of a product's operand under `scaling`.
inline double getQuantizedBytesPerElement(Fp8Scaling scaling) {
  return scaling == Fp8Scaling::Nvfp4 ? kNvfp4BytesPerElement
         : scaling == Fp8Scaling::Mx  ? kMxfp8BytesPerElement
                                      : 1;
}

enum class OptimizerKind { Adam, Sgd, SgdMomentum };
llvm::StringRef toString(OptimizerKind optimizer);

/// Adam's state as a run writes it (`adam(moments = bf16, master = none)`): its two moments in
/// fp32, 4 bytes each (the default), or in bf16, 2 (Megatron-LM's precision-aware optimizer,
/// `--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`; DeepSeek-V3); and, under mixed precision with
/// 16-bit parameters, the fp32 master copy kept (the default) or not (apex's DistributedFusedAdam
/// with `dtype` bf16, as NeMo runs it: the step updates the bf16 parameters themselves).
struct OptimizerStates {
  unsigned momentBytes = 4;
  bool master = true;
  bool isDefault() const { return momentBytes == 4 && master; }
};
/// The optimizer as a run writes it: `adam`, `adam(moments = bf16)`, `sgd(momentum = true)`.
std::string spellOptimizer(OptimizerKind optimizer, OptimizerStates states);

/// Bytes per parameter of each model state (LANGUAGE.md §6). `fp32Grads`: gradients accumulated,
/// stored and reduced in fp32 under mixed precision (`mixed(…, grads = fp32)`); `fp32Params`:
/// the parameters themselves kept in fp32 as the optimizer's master weights and cast to the
/// compute type on use (`mixed(…, params = fp32)`, which implies `fp32Grads`).
struct StateBytes {
  /// Under `mixed(fp8, scaling = mx)` the parameters' FP8 cache holds two MXFP8 copies with their
  /// scales: a fraction of a byte.
  double params;
  unsigned grads, optimizer;
  /// The parameters are the weights the optimizer updates (the fp32 ones under `fp32` and
  /// `params = fp32`, the 16-bit ones under `adam(master = none)`): its step reads and writes
  /// them; otherwise it writes their cast of its master copy.
  bool masterParams = false;
  /// Bytes of a gathered (or host-fetched) parameter: its compute-type cast under
  /// `params = fp32` (FSDP2 gathers the shards cast to bf16), the stored type otherwise.
  double gathered = 0;
  /// Of `optimizer`: the moments' count and bytes each.
  unsigned moments = 0, momentBytes = 0;
  /// Of `params`: the quantized copies of a weight that FP8 and FP4 training keep (Transformer
  /// Engine's weight cache, or the parameters themselves under `params = fp8 | fp4`), and what
  /// they are (`cacheWhat`: "FP8 copy", "two MXFP8 copies", …); 0 and empty otherwise.
  double cache = 0;
  const char *cacheWhat = "";
  /// Bytes of a parameter that no quantized product reads (quantizesParams is false for its unit:
  /// the embedding, the output layer, an mlp's layers): its weight alone, gathered as such. It
  /// differs from `params` only where `cache` is set.
  double weight = 0;
  /// The bytes of such a parameter: these bytes with `weight` for `params` and `gathered`, and
  /// no cache.
  StateBytes unquantized() const {
    StateBytes plain = *this;
    if (cache > 0) {
      plain.params = plain.gathered = weight;
      plain.cache = 0;
      plain.cacheWhat = "";
    }
    return plain;
  }
  /// Of `optimizer`: the fp32 master copy's bytes, 4 where the step writes the parameters' cast
  /// of it, none where it updates the parameters themselves.
  unsigned masterCopy() const { return masterParams ? 0 : 4; }
};
/// `fp8Params`: the parameters as their FP8 copies alone (Run::fp8Params); `fp8Transposes`: an
/// FP8 copy of one scale per tensor keeps its transpose beside it (keepsFp8Transposes, the
/// cluster's device).
StateBytes getStateBytes(Precision precision, OptimizerKind optimizer, bool fp32Grads,
                         bool fp32Params, Fp8Scaling scaling = Fp8Scaling::Tensor,
                         OptimizerStates states = {}, bool fp8Params = false,
                         bool fp8Transposes = false);
/// Whether `cluster`'s device keeps a transpose beside each FP8 copy of one scale per tensor
/// (keepsFp8Transposes of its family; false for a cluster that names no device).
bool keepsFp8Transposes(const Cluster &cluster);
/// A precision as a run writes it: `mixed(bf16)`, `mixed(fp8, gather = fp8, grads = fp32)`,
/// `mixed(bf16, params = fp32)`, `mixed(fp8, saved = fp8)`.
std::string spellPrecision(Precision precision, bool fp8Gather, bool fp32Grads, bool fp32Params,
                           bool fp8Saved = false, Fp8Scaling scaling = Fp8Scaling::Tensor,
                           bool fp8Attention = false, bool fp8Params = false);
/// Bytes per stored activation element: 2 under mixed precision, 4 under fp32.
unsigned getActivationBytes(Precision precision);

/// How a run computes the loss from the logits (`cross_entropy`): `fused`, one kernel that reads
/// the logits once and keeps an fp32 softmax beside them, and one that writes the gradient
/// (Transformer Engine's and Megatron-Core's fused loss, --cross-entropy-loss-fusion;
/// flash-attn's CrossEntropyLoss, as llm-foundry calls it); `vocab_parallel`, Megatron-LM's
/// vocabulary-parallel cross-entropy without that fusion (its default), the same buffers worked
/// by one kernel per operation: an fp32 copy of the logits, their maximum, the subtraction, the
/// exponential, the sum and the division in place; `fused_vocab_parallel`, the same operations
/// in Megatron-Core's four torch.compile'd functions (--cross-entropy-loss-fusion with its
/// default implementation, `native`: fused_vocab_parallel_cross_entropy); `unfused`, PyTorch's
/// `F.cross_entropy` over an fp32 copy of the logits (as torchtitan calls it), which keeps an fp32
/// log-softmax and makes two fp32 gradients; `chunked`, the output layer and the fused loss one
/// sequence at a time over one [seq, vocab] logits buffer, the gradient written over it (placert's
/// CUDA trainer).
enum class CrossEntropyKind { Fused, Unfused, Chunked, VocabParallel, FusedVocabParallel };
llvm::StringRef toString(CrossEntropyKind kind);

/// How a run's element-wise work executes (`kernels`): `fused`, each norm, rotary embedding and
/// MLP activation one kernel (Megatron-LM's and Transformer Engine's fused kernels, or
/// torch.compile); `eager`, PyTorch without compilation, each operator of the reference modules
/// its own kernel (cost::getEagerObstacle says where placec models it).
enum class KernelMode { Fused, Eager };
llvm::StringRef toString(KernelMode mode);

/// Where an all-gather of the parameters lands (`param_gather`): `in_place`, in the buffer that
/// the unit's parameters are views of (FSDP1's flat parameters, DeepSpeed's ZeRO-3, Megatron-LM's
/// distributed optimizer); `copy_out`, in one flat buffer from which each parameter is then copied
/// into its own tensor on the compute stream (PyTorch's FSDP2, `fully_shard`).
enum class ParamGather { InPlace, CopyOut };
llvm::StringRef toString(ParamGather gather);

/// How each micro-batch's weight gradients are added into the gradients a device stores
/// (`grad_accumulation`): `fused`, in the weight-gradient product's epilogue, which reads and
/// writes the stored gradient (Megatron-LM's and Transformer Engine's
/// gradient_accumulation_fusion); `add`, the product writes a fresh gradient in the compute type
/// and one kernel adds it into the stored one (Megatron-LM with --no-gradient-accumulation-fusion:
/// main_grad.add_(grad) in its data-parallel module's backward hook); `cast_add`, the fresh
/// gradient cast to the stored type by a kernel of its own, then added (DeepSpeed's BF16
/// optimizer: update_hp_grads, hp_grad.add_(lp_grad.to(fp32)), after every backward).
enum class GradAccumulation { Fused, Add, CastAdd };
llvm::StringRef toString(GradAccumulation accumulation);

/// How a context-parallel rank runs its attention over the keys and values of the other ranks
/// (`context_merge`): `fused`, Transformer Engine's context parallelism (Megatron-LM): the ring
/// runs one kernel per step and corrects the running output by each step's log-sum-exp with a
/// jit-fused kernel in the activation type; the all-gather runs one kernel per chunk of queries
/// over the keys it attends, which needs no merge; `eager`, PyTorch's context parallelism
/// (torch.distributed.tensor.experimental, which torchtitan's context_parallel runs): one kernel
/// per chunk of keys and values for either exchange, the ring's or the all-gather's, their
/// outputs merged and the gradients accumulated in fp32 by PyTorch's eager operators.
enum class ContextMerge { Fused, Eager };
llvm::StringRef toString(ContextMerge merge);

class Run {
public:
  std::string name;
  llvm::SMLoc loc;
  const Model *model = nullptr;
  const Cluster *cluster = nullptr;
  /// The run's strategy, fully bound (a composition or instantiation is resolved here).
  const Strategy *strategy = nullptr;
  int64_t microBatch = 0;
  int64_t globalBatch = 0;
  Precision precision = Precision::MixedBF16;
  /// `mixed(fp8, gather = fp8)`: parameters all-gathered in FP8 (torchtitan's
  /// enable_fsdp_float8_all_gather).
  bool fp8Gather = false;
  /// `mixed(…, grads = fp32)`: gradients accumulated over the micro-batches, kept and reduced in
  /// fp32 rather than in the parameters' type (Megatron-LM's default under bf16, torchtitan's
  /// FSDP reduce dtype, DeepSpeed's bf16 optimizer). Always false under `fp32`.
  bool fp32Grads = false;
  /// `mixed(…, params = fp32)`: the parameters are kept in fp32 and are the optimizer's master
  /// weights; every forward casts them to the compute type (PyTorch's autocast over fp32 modules,
  /// FSDP2's MixedPrecisionPolicy casting the shards before the all-gather). Implies fp32Grads.
  bool fp32Params = false;
  /// `mixed(fp8, …, params = fp8)`: the parameters are kept as Transformer Engine's FP8 tensors
  /// alone, with no bf16 copy beside them, and the fp32 master copy in the optimizer:
  /// Megatron-Core's --fp8-param-gather. Under one scale per tensor (with `gather = fp8`) each is
  /// one byte an element, and the distributed optimizer all-gathers the updated FP8 data; under
  /// MXFP8 each is two copies (along the rows and along the columns, each with its scales), and the
  /// optimizer all-gathers the updated parameters in bf16 through the gradient buffer
  /// (--reuse-grad-buf-for-mxfp8-param-ag) and casts each after its gather.
  bool fp8Params = false;
  /// `mixed(fp8, saved = fp8)`: the FP8 products keep their inputs for the backward as FP8, one
  /// byte per element (Transformer Engine's linears save the quantized input, and its
  /// LayerNormLinear's norm writes FP8), rather than in the activation type (PyTorch's float8
  /// linears save the high-precision input).
  bool fp8Saved = false;
  /// `mixed(fp8, scaling = current)` or `scaling = mx` (Fp8Scaling).
  Fp8Scaling fp8Scaling = Fp8Scaling::Tensor;
  /// `mixed(fp8 | fp4, attention = fp8)`: the attention kernel runs on FP8 inputs (Transformer
  /// Engine's FP8 dot-product attention, fp8_dot_product_attention, on cuDNN's FP8 SDPA): Q, K
  /// and V cast to FP8 before it and kept as FP8 for its backward, the output in the activation
  /// type, the output's gradient cast to FP8 before the backward.
  bool fp8Attention = false;
  OptimizerKind optimizer = OptimizerKind::Adam;
  /// Adam's moments' type and whether a master copy is kept (`adam(moments = …, master = …)`).
  OptimizerStates optimizerStates;
  CrossEntropyKind crossEntropy = CrossEntropyKind::Fused;
  KernelMode kernels = KernelMode::Fused;
  ParamGather paramGather = ParamGather::InPlace;
  ContextMerge contextMerge = ContextMerge::Fused;
  GradAccumulation gradAccumulation = GradAccumulation::Fused;
  /// `train_metrics = n`: metrics the training loop computes from the logits of every
  /// micro-batch after its backward, outside autograd, each a cross-entropy over an fp32 copy of
  /// the logits (Composer's training metrics: llm-foundry's MPT updates LanguageCrossEntropy and
  /// LanguagePerplexity, each `torch.nn.CrossEntropyLoss` under autocast). 0: none.
  int64_t trainMetrics = 0;
  /// Micro-batches per step per batch replica: the pipeline's micro-batches, or the gradient
  /// accumulation steps without a pipeline. Derived when not written; 0 when it cannot be.
  int64_t microbatchesPerStep = 0;
  /// `measured_step` and `measured_memory`: a measured step time and peak device memory, which
  /// `placec fidelity` and the reports compare with the predictions.
  std::optional<double> measuredStep;
  std::optional<double> measuredMemory;
  /// Where each field was written, by key, for notes.
  llvm::StringMap<llvm::SMLoc> fieldLocs;
};

/// The run's precision as it writes it, with every option it takes.
std::string spellPrecision(const Run &run);
/// getStateBytes of a run's precision, optimizer and their options.
StateBytes getStateBytes(const Run &run);

/// A whole program: the declarations of the main file and everything it imports, and the prelude.
class Program {
public:
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::unique_ptr<Cluster>> clusters;
  /// Declared strategies without parameters, and every strategy a run or composition binds.
  std::vector<std::unique_ptr<Strategy>> strategies;
  std::vector<std::unique_ptr<Run>> runs;

  const Model *findModel(llvm::StringRef name) const;
  const Cluster *findCluster(llvm::StringRef name) const;
  const Run *findRun(llvm::StringRef name) const;
};

/// Prints the program in placec's deterministic textual IR format (docs/ir.md).
void printProgram(const Program &program, llvm::raw_ostream &os);

} // namespace placec::ir

#endif // PLACEC_IR_IR_H
