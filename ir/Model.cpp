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
  const bool grouped = config.kvHeads > 0 && config.kvHeads != config.heads && config.heads > 0;
  const int64_t qkvRows =
      grouped ? saturatingAdd(h, saturatingMul(2, saturatingMul(config.kvHeads, h / config.heads)))
              : saturatingMul(3, h);
  const bool layerNorm = config.norm == NormKind::LayerNorm;
  const int64_t numLayers = std::max<int64_t>(config.layers, 0);
  const int headLayer = toLayerIndex(numLayers);

  // Embeddings, before the first layer.
  builder.add("embed.tokens", {vocab, h}, TensorSplit::Vocabulary, -1);
  if (config.positions == PositionKind::Learned)
    builder.add("embed.positions", {config.seq, h}, TensorSplit::Replicated, -1);

  auto addNorm = [&](const Twine &prefix, int layer) {
    builder.add(prefix + ".weight", {h}, TensorSplit::Replicated, layer);
    if (layerNorm)
      builder.add(prefix + ".bias", {h}, TensorSplit::Replicated, layer);
  };

  for (int64_t l = 0; l < numLayers; ++l) {
    const int layer = toLayerIndex(l);
    const std::string prefix = (Twine("layers.") + Twine(l)).str();
    addNorm(prefix + ".ln1", layer);
    builder.add(prefix + ".attn.qkv.weight", {qkvRows, h}, TensorSplit::Column, layer);
    if (config.bias || config.qkvBias)
      builder.add(prefix + ".attn.qkv.bias", {qkvRows}, TensorSplit::Column, layer);
    builder.add(prefix + ".attn.proj.weight", {h, h}, TensorSplit::Row, layer);
    if (config.bias)
      builder.add(prefix + ".attn.proj.bias", {h}, TensorSplit::Replicated, layer);
    addNorm(prefix + ".ln2", layer);
    switch (config.mlp) {
    case MlpActivation::Gelu:
      builder.add(prefix + ".mlp.fc.weight", {ffn, h}, TensorSplit::Column, layer);
      if (config.bias)
        builder.add(prefix + ".mlp.fc.bias", {ffn}, TensorSplit::Column, layer);
      builder.add(prefix + ".mlp.proj.weight", {h, ffn}, TensorSplit::Row, layer);
      if (config.bias)
        builder.add(prefix + ".mlp.proj.bias", {h}, TensorSplit::Replicated, layer);
      break;
    case MlpActivation::Swiglu:
      builder.add(prefix + ".mlp.gate.weight", {ffn, h}, TensorSplit::Column, layer);
      if (config.bias)
        builder.add(prefix + ".mlp.gate.bias", {ffn}, TensorSplit::Column, layer);
      builder.add(prefix + ".mlp.up.weight", {ffn, h}, TensorSplit::Column, layer);
      if (config.bias)
        builder.add(prefix + ".mlp.up.bias", {ffn}, TensorSplit::Column, layer);
      builder.add(prefix + ".mlp.down.weight", {h, ffn}, TensorSplit::Row, layer);
      if (config.bias)
        builder.add(prefix + ".mlp.down.bias", {h}, TensorSplit::Replicated, layer);
      break;
    }
  }

  // The head, after the last layer.
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

int64_t Model::getHeadParams() const {
  int64_t numLayers = getNumLayers();
  return sumParams(tensors, [&](const Tensor &t) { return t.layer >= numLayers; });
}

int64_t Model::getParamsWithSplit(TensorSplit split) const {
  return sumParams(tensors, [&](const Tensor &t) { return t.split == split; });
}

int64_t Model::getTensorParams() const {
  return sumParams(tensors, [](const Tensor &) { return true; });
}

} // namespace placec::ir
