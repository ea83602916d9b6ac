// Expands transformer and mlp models into their parameter tensors, each tagged with its
// tensor-parallel split kind, and sums parameters by part of the model.
#include "placec/ir/IR.h"

#include "llvm/ADT/Twine.h"

#include <limits>

using namespace llvm;

namespace placec::ir {

static int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_mul_overflow(a, b, &result))
    return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                              : std::numeric_limits<int64_t>::max();
  return result;
}

static int64_t saturatingAdd(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_add_overflow(a, b, &result))
    return a < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  return result;
}

namespace {
/// Appends tensors to a list, computing each element count.
class TensorListBuilder {
public:
  explicit TensorListBuilder(std::vector<Tensor> &tensors) : tensors(tensors) {}

  void add(const Twine &name, std::vector<int64_t> shape, TensorSplit split, int layer) {
    Tensor tensor;
    tensor.name = name.str();
    tensor.numElements = 1;
    for (int64_t extent : shape)
      tensor.numElements = saturatingMul(tensor.numElements, extent);
    tensor.shape = std::move(shape);
    tensor.split = split;
    tensor.layer = layer;
    tensors.push_back(std::move(tensor));
  }

private:
  std::vector<Tensor> &tensors;
};
} // namespace

/// The layer index as stored in Tensor::layer, clamped into int.
static int toLayerIndex(int64_t layer) {
  if (layer > std::numeric_limits<int>::max())
    return std::numeric_limits<int>::max();
  return static_cast<int>(layer);
}

std::vector<Tensor> buildTransformerTensors(const TransformerConfig &config) {
  std::vector<Tensor> tensors;
  TensorListBuilder builder(tensors);
  const int64_t h = config.hidden;
  const int64_t ffn = config.ffn > 0 ? config.ffn : saturatingMul(4, h);
  const int64_t vocab = config.vocab;
  // Grouped-query attention (Ainslie et al. 2023): the queries keep `heads` heads of h/heads
  // columns, keys and values have `kv_heads` heads each.
  // With `head_dim` the query and output projections are heads·head_dim wide instead of h.
  const int64_t headDim = config.getHeadDim();
  // Under latent attention the output projection reads heads·v_head_dim.
  const int64_t queryWidth = config.isLatentAttention()
                                 ? saturatingMul(config.heads, config.getValueHeadDim())
                             : config.headDim > 0 ? saturatingMul(config.heads, headDim)
                                                  : h;
  const bool grouped = config.kvHeads > 0 && config.kvHeads != config.heads && config.heads > 0;
  const int64_t kvWidth =
      config.headDim > 0 || grouped ? saturatingMul(config.getKvHeads(), headDim) : h;
  const int64_t qkvRows = saturatingAdd(queryWidth, saturatingMul(2, kvWidth));
  const bool layerNorm = config.norm == NormKind::LayerNorm;
  const int64_t numLayers = std::max<int64_t>(config.layers, 0);
  const int headLayer =
      toLayerIndex(saturatingAdd(numLayers, std::max<int64_t>(config.mtpLayers, 0)));

  // Embeddings, before the first layer.
  builder.add("embed.tokens", {vocab, h}, TensorSplit::Vocabulary, -1);
  if (config.positions == PositionKind::Learned)
    builder.add("embed.positions", {config.seq, h}, TensorSplit::Replicated, -1);

  auto addNorm = [&](const Twine &prefix, int layer) {
    builder.add(prefix + ".weight", {h}, TensorSplit::Replicated, layer);
    if (layerNorm)
      builder.add(prefix + ".bias", {h}, TensorSplit::Replicated, layer);
  };
  if (config.embeddingNorm) {
    size_t first = tensors.size();
    addNorm("embed.norm", -1);
    for (size_t i = first; i < tensors.size(); ++i)
      tensors[i].embeddingNorm = true;
  }

  // A feed-forward block of `width` (times `experts` stacked on the first dimension when
  // `experts` > 0): gelu's fc and proj, or swiglu's gate, up and down, as Megatron-LM splits them.
  auto addMlp = [&](const std::string &prefix, int64_t width, int64_t experts, int layer,
                    bool expert) {
    auto shape = [&](std::vector<int64_t> dims) {
      if (experts > 0)
        dims.insert(dims.begin(), experts);
      return dims;
    };
    auto add = [&](const Twine &name, std::vector<int64_t> dims, TensorSplit split) {
      builder.add(name, shape(std::move(dims)), split, layer);
      tensors.back().expert = expert;
    };
    // A row-parallel bias is replicated over the tensor axes; stacked per expert it is still
    // one row per expert.
    switch (config.mlp) {
    case MlpActivation::Gelu:
    case MlpActivation::Relu2:
      add(prefix + ".fc.weight", {width, h}, TensorSplit::Column);
      if (config.bias)
        add(prefix + ".fc.bias", {width}, TensorSplit::Column);
      add(prefix + ".proj.weight", {h, width}, TensorSplit::Row);
      if (config.bias)
        add(prefix + ".proj.bias", {h}, TensorSplit::Replicated);
      break;
    case MlpActivation::Swiglu:
      add(prefix + ".gate.weight", {width, h}, TensorSplit::Column);
      if (config.bias)
        add(prefix + ".gate.bias", {width}, TensorSplit::Column);
      add(prefix + ".up.weight", {width, h}, TensorSplit::Column);
      if (config.bias)
        add(prefix + ".up.bias", {width}, TensorSplit::Column);
      add(prefix + ".down.weight", {h, width}, TensorSplit::Row);
      if (config.bias)
        add(prefix + ".down.bias", {h}, TensorSplit::Replicated);
      break;
    }
  };
  // A mixture-of-experts block (Shazeer et al. 2017; Fedus et al. 2021): the router's linear
  // scores, the routed experts stacked, and the shared experts as one MLP of their summed width
  // (DeepSeek-V3's and Qwen2-MoE's shared experts are one wide MLP of the same activation).
  // Multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", §2.1), as Megatron-Core splits
  // it: the down-projections to the latents (and the shared rotary key) replicated over the
  // tensor axes, the latents' norms, the up-projections to the heads column-parallel. Without
  // q_lora_rank the queries are one projection of the hidden state.
  auto addLatentAttention = [&](const std::string &prefix, int layer) {
    const int64_t heads = config.heads, qk = config.getQueryKeyHeadDim();
    const int64_t kvUp = saturatingMul(heads, saturatingAdd(headDim, config.getValueHeadDim()));
    auto addLatentNorm = [&](const Twine &name, int64_t width) {
      builder.add(prefix + "." + name + ".weight", {width}, TensorSplit::Replicated, layer);
      if (layerNorm)
        builder.add(prefix + "." + name + ".bias", {width}, TensorSplit::Replicated, layer);
    };
    if (config.qLoraRank > 0) {
      builder.add(prefix + ".q_down.weight", {config.qLoraRank, h}, TensorSplit::Replicated, layer);
      addLatentNorm("q_latent_norm", config.qLoraRank);
      builder.add(prefix + ".q_up.weight", {saturatingMul(heads, qk), config.qLoraRank},
                  TensorSplit::Column, layer);
    } else {
      builder.add(prefix + ".q.weight", {saturatingMul(heads, qk), h}, TensorSplit::Column, layer);
    }
    builder.add(prefix + ".kv_down.weight",
                {saturatingAdd(config.kvLoraRank, config.ropeHeadDim), h}, TensorSplit::Replicated,
                layer);
    addLatentNorm("kv_latent_norm", config.kvLoraRank);
    builder.add(prefix + ".kv_up.weight", {kvUp, config.kvLoraRank}, TensorSplit::Column, layer);
  };
  const MoeConfig &moe = config.moe;
  auto addMoe = [&](const std::string &prefix, int layer) {
    builder.add(prefix + ".router.weight", {moe.experts, h}, TensorSplit::Replicated, layer);
    tensors.back().router = true;
    if (moe.routerBias) {
      builder.add(prefix + ".router.bias", {moe.experts}, TensorSplit::Replicated, layer);
      tensors.back().router = true;
    }
    addMlp(prefix + ".experts", moe.expertFfn > 0 ? moe.expertFfn : ffn, moe.experts, layer, true);
    if (moe.sharedExperts > 0)
      addMlp(prefix + ".shared",
             saturatingMul(moe.sharedExperts, moe.sharedExpertFfn > 0 ? moe.sharedExpertFfn
                                              : moe.expertFfn > 0     ? moe.expertFfn
                                                                      : ffn),
             0, layer, false);
  };

  // One transformer block's tensors under `prefix`, at block index `layer`.
  auto addLayer = [&](const std::string &prefix, int layer) {
    addNorm(prefix + ".ln1", layer);
    if (config.isLatentAttention()) {
      addLatentAttention(prefix + ".attn", layer);
    } else {
      builder.add(prefix + ".attn.qkv.weight", {qkvRows, h}, TensorSplit::Column, layer);
      if (config.bias || config.qkvBias)
        builder.add(prefix + ".attn.qkv.bias", {qkvRows}, TensorSplit::Column, layer);
      if (config.qkNorm) {
        builder.add(prefix + ".attn.q_norm.weight", {headDim}, TensorSplit::Replicated, layer);
        builder.add(prefix + ".attn.k_norm.weight", {headDim}, TensorSplit::Replicated, layer);
      }
    }
    // Attention sinks: one logit per head, split with the heads.
    if (config.sinks)
      builder.add(prefix + ".attn.sinks", {config.heads}, TensorSplit::Column, layer);
    builder.add(prefix + ".attn.proj.weight", {h, queryWidth}, TensorSplit::Row, layer);
    if (config.bias)
      builder.add(prefix + ".attn.proj.bias", {h}, TensorSplit::Replicated, layer);
    if (config.postNorm)
      addNorm(prefix + ".attn_post_norm", layer);
    addNorm(prefix + ".ln2", layer);
    if (config.isMoeBlock(layer))
      addMoe(prefix + ".moe", layer);
    else
      addMlp(prefix + ".mlp", ffn, 0, layer, false);
    if (config.postNorm)
      addNorm(prefix + ".mlp_post_norm", layer);
  };
  for (int64_t l = 0; l < numLayers; ++l)
    addLayer((Twine("layers.") + Twine(l)).str(), toLayerIndex(l));

  // Multi-token prediction modules (DeepSeek-V3 §2.2, as Megatron-Core's
  // MultiTokenPredictionLayer builds them: enorm, hnorm, eh_proj column-parallel from 2·h to h
  // without a bias, the transformer layer, final_layernorm), blocks L … L + n − 1.
  for (int64_t k = 0; k < std::max<int64_t>(config.mtpLayers, 0); ++k) {
    const int layer = toLayerIndex(saturatingAdd(numLayers, k));
    const std::string prefix = (Twine("mtp.") + Twine(k)).str();
    addNorm(prefix + ".enorm", layer);
    addNorm(prefix + ".hnorm", layer);
    builder.add(prefix + ".eh_proj.weight", {h, saturatingMul(2, h)}, TensorSplit::Column, layer);
    addLayer(prefix, layer);
    addNorm(prefix + ".final_norm", layer);
  }

  // The head, after the last layer and the multi-token prediction modules.
  addNorm("final_norm", headLayer);
  if (!config.tiedEmbeddings)
    builder.add("output.weight", {vocab, h}, TensorSplit::Vocabulary, headLayer);
  return tensors;
}

std::vector<Tensor> buildMlpTensors(const MlpConfig &config) {
  std::vector<Tensor> tensors;
  TensorListBuilder builder(tensors);
  const int64_t numLayers = std::max<int64_t>(config.layers, 0);
  for (int64_t i = 0; i < numLayers; ++i) {
    const int64_t in = i == 0 ? config.input : config.width;
    const int64_t out = i + 1 == numLayers ? config.output : config.width;
    // Megatron pairs: a column-parallel layer feeds the row-parallel one after it, so the pair
    // needs one all-reduce; a trailing unpaired layer is replicated.
    TensorSplit weightSplit = TensorSplit::Replicated;
    if (i % 2 == 1)
      weightSplit = TensorSplit::Row;
    else if (i + 1 < numLayers)
      weightSplit = TensorSplit::Column;
    TensorSplit biasSplit =
        weightSplit == TensorSplit::Column ? TensorSplit::Column : TensorSplit::Replicated;
    const int layer = toLayerIndex(i);
    const std::string prefix = (Twine("layers.") + Twine(i)).str();
    builder.add(prefix + ".weight", {out, in}, weightSplit, layer);
    builder.add(prefix + ".bias", {out}, biasSplit, layer);
  }
  return tensors;
}

//===----------------------------------------------------------------------===//
// Model
//===----------------------------------------------------------------------===//

int64_t Model::getNumLayers() const {
  switch (kind) {
  case ModelKind::Transformer:
    return transformer.layers;
  case ModelKind::Mlp:
    return mlp.layers;
  case ModelKind::Abstract:
    return 0;
  }
  return 0;
}

/// Sums the element counts of the tensors that satisfy `pred`.
template <typename Pred> static int64_t sumParams(const std::vector<Tensor> &tensors, Pred pred) {
  int64_t sum = 0;
  for (const Tensor &tensor : tensors)
    if (pred(tensor))
      sum = saturatingAdd(sum, tensor.numElements);
  return sum;
}

int64_t Model::getLayerParams() const {
  int64_t numLayers = getNumLayers();
  return sumParams(tensors, [&](const Tensor &t) { return t.layer >= 0 && t.layer < numLayers; });
}

int64_t Model::getEmbeddingParams() const {
  return sumParams(tensors, [](const Tensor &t) { return t.layer < 0; });
}

int64_t Model::getHeadLayer() const {
  return kind == ModelKind::Transformer ? transformer.getNumBlocks() : getNumLayers();
}

int64_t Model::getHeadParams() const {
  int64_t head = getHeadLayer();
  return sumParams(tensors, [&](const Tensor &t) { return t.layer >= head; });
}

int64_t Model::getMtpParams() const {
  if (kind != ModelKind::Transformer)
    return 0;
  return sumParams(tensors, [&](const Tensor &t) { return transformer.isMtpBlock(t.layer); });
}

int64_t Model::getParamsWithSplit(TensorSplit split) const {
  return sumParams(tensors, [&](const Tensor &t) { return t.split == split; });
}

int64_t Model::getTensorParams() const {
  return sumParams(tensors, [](const Tensor &) { return true; });
}

int64_t Model::getExpertParams() const {
  return sumParams(tensors, [](const Tensor &t) { return t.expert; });
}

int64_t Model::getActiveParams() const {
  if (!isMoe())
    return numParams;
  // Each routed expert's share of the stacked tensors is the same, so a token's top_k experts
  // use top_k / experts of them.
  const MoeConfig &moe = transformer.moe;
  return numParams - getExpertParams() + getExpertParams() / moe.experts * moe.topK;
}

} // namespace placec::ir
