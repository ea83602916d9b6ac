// Unit tests of a GPT layer with grouped-query attention on one device (GptModel, tensor degree
// 1): its gradients against central finite differences, its attention against a direct
// computation from the documented layout of attn.qkv ([kv head][its query heads, k, v][head
// dim]; [head][q, k, v][head dim] for multi-head attention), and its equality with a multi-head
// layer whose heads of a group share their key and value rows; and the head's copy of a tied
// embedding on another pipeline stage (its tensor, its counts, its math).
#include "GptModel.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace placert;
using namespace placert::gpt;

/// One device runs no tensor- or context-parallel collective.
class NoCollectives : public UnitCollectives {
public:
  Status allReduce(float *, int64_t) override { return fail(); }
  Status allGather(const float *, float *, int64_t) override { return fail(); }
  Status reduceScatter(const float *, float *, int64_t) override { return fail(); }
  Status allToAll(const float *, float *, int64_t) override { return fail(); }
  Status ringStep(const float *, float *, int64_t) override { return fail(); }

private:
  static Status fail() { return Status(StatusCode::InvalidArgument, "a collective on one device"); }
};

std::vector<float> randomVector(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(engine);
  return values;
}

/// A layer of hidden 16, heads 4 (head dim 4), seq 4, ffn 16 on a micro-batch of 2: GPT-2's
/// layout (layernorm, gelu, biases, no rope) or LLaMA's (rmsnorm, swiglu, no biases, rope).
GptConfig layerConfig(int64_t kvHeads, bool llama) {
  GptConfig config;
  config.shape.name = "g";
  config.shape.layers = 1;
  config.shape.hidden = 16;
  config.shape.heads = 4;
  config.shape.seq = 4;
  config.shape.vocab = 8;
  config.shape.ffn = 16;
  config.shape.swiglu = config.shape.rmsNorm = config.shape.rope = llama;
  config.shape.bias = !llama;
  config.shape.kvHeads = kvHeads;
  config.microBatch = 2;
  config.globalBatch = 2;
  return config;
}

/// The layer's parameters from the seed, as the trainer initializes them.
std::vector<float> initialWeights(const GptModel &model) {
  std::vector<float> weights(static_cast<size_t>(model.getLocalParams(UnitKind::Layer, 0)));
  for (const TensorInfo &tensor : model.getTensors(UnitKind::Layer, 0))
    for (int64_t i = 0; i < tensor.rows * tensor.cols; ++i)
      weights[static_cast<size_t>(tensor.localOffset + i)] = model.initialValue(7, tensor, i);
  return weights;
}

struct LayerResult {
  std::vector<float> output, inputGrad, grads;
};

/// The layer's output on `input`, and the gradients of Σ outputWeight · output.
LayerResult runLayer(GptModel &model, const std::vector<float> &weights,
                     const std::vector<float> &input, const std::vector<float> &outputWeight) {
  NoCollectives none;
  LayerResult result;
  result.output.assign(input.size(), 0.0f);
  result.inputGrad.assign(input.size(), 0.0f);
  result.grads.assign(weights.size(), 0.0f);
  UnitActivations saved;
  double loss = 0;
  Status status = model.forward(UnitKind::Layer, 0, weights.data(), nullptr, nullptr, nullptr,
                                input.data(), result.output.data(), saved, none, loss, false);
  EXPECT_TRUE(status.isOk()) << status.getMessage();
  status = model.backward(UnitKind::Layer, 0, weights.data(), nullptr, nullptr, input.data(),
                          outputWeight.data(), result.inputGrad.data(), result.grads.data(),
                          nullptr, saved, none);
  EXPECT_TRUE(status.isOk()) << status.getMessage();
  return result;
}

double weightedOutput(GptModel &model, const std::vector<float> &weights,
                      const std::vector<float> &input, const std::vector<float> &outputWeight) {
  NoCollectives none;
  std::vector<float> output(input.size());
  UnitActivations saved;
  double loss = 0;
  Status status = model.forward(UnitKind::Layer, 0, weights.data(), nullptr, nullptr, nullptr,
                                input.data(), output.data(), saved, none, loss, false);
  EXPECT_TRUE(status.isOk()) << status.getMessage();
  double sum = 0;
  for (size_t i = 0; i < output.size(); ++i)
    sum += static_cast<double>(outputWeight[i]) * output[i];
  return sum;
}

/// Central differences of f at each element of x against `analytic`, with a tolerance relative
/// to the gradient's largest element (f is computed in fp32).
void expectGradient(std::vector<float> &x, const std::vector<float> &analytic,
                    const std::function<double()> &f, const std::string &what) {
  double largest = 0;
  for (float g : analytic)
    largest = std::max(largest, std::fabs(static_cast<double>(g)));
  ASSERT_GT(largest, 1e-3) << what << ": the gradient is all but zero, the test checks nothing";
  const float step = 1e-2f;
  for (size_t i = 0; i < x.size(); ++i) {
    float saved = x[i];
    x[i] = saved + step;
    double plus = f();
    x[i] = saved - step;
    double minus = f();
    x[i] = saved;
    double numeric = (plus - minus) / (2.0 * static_cast<double>(step));
    EXPECT_NEAR(analytic[i], numeric, 3e-3 * largest + 1e-4) << what << "[" << i << "]";
  }
}

class GroupedLayer : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(GroupedLayer, GradientsMatchFiniteDifferences) {
  auto [kvHeads, llama] = GetParam();
  GptModel model(layerConfig(kvHeads, llama));
  std::vector<float> weights = initialWeights(model);
  const size_t rows = 2 * 4, hidden = 16;
  std::vector<float> input = randomVector(rows * hidden, 41);
  std::vector<float> outputWeight = randomVector(rows * hidden, 42);
  LayerResult result = runLayer(model, weights, input, outputWeight);
  auto f = [&] { return weightedOutput(model, weights, input, outputWeight); };
  // Each tensor on its own, so that a failure names it; the qkv rows hold the grouped heads.
  for (const TensorInfo &tensor : model.getTensors(UnitKind::Layer, 0)) {
    auto begin = weights.begin() + tensor.localOffset;
    size_t size = static_cast<size_t>(tensor.rows * tensor.cols);
    std::vector<float> piece(begin, begin + static_cast<ptrdiff_t>(size));
    std::vector<float> analytic(result.grads.begin() + tensor.localOffset,
                                result.grads.begin() + tensor.localOffset +
                                    static_cast<ptrdiff_t>(size));
    auto fPiece = [&] {
      std::copy(piece.begin(), piece.end(), begin);
      return f();
    };
    expectGradient(piece, analytic, fPiece, tensor.name);
    std::copy(piece.begin(), piece.end(), begin);
  }
  expectGradient(input, result.inputGrad, f, "input");
}

TEST_P(GroupedLayer, EqualsMultiHeadWithSharedKeysAndValues) {
  auto [kvHeads, llama] = GetParam();
  const int64_t heads = 4, headDim = 4, group = heads / kvHeads;
  GptModel grouped(layerConfig(kvHeads, llama)), multi(layerConfig(heads, llama));
  std::vector<float> gWeights = initialWeights(grouped);
  std::map<std::string, TensorInfo> gTensors;
  for (const TensorInfo &tensor : grouped.getTensors(UnitKind::Layer, 0))
    gTensors[tensor.name] = tensor;
  // The multi-head layer: every tensor as the grouped one's, except that attn.qkv's key and value
  // rows of head j are the grouped layer's of kv head j / group. Multi-head rows are
  // [head][q, k, v][dim]; grouped rows [kv head][its `group` query heads, k, v][dim].
  auto groupedRow = [&](int64_t head, int part, int64_t d) {
    int64_t g = head / group, base = g * (group + 2) * headDim;
    if (part == 0)
      return base + (head % group) * headDim + d;
    return base + (group + part - 1) * headDim + d;
  };
  std::vector<float> mWeights(static_cast<size_t>(multi.getLocalParams(UnitKind::Layer, 0)));
  std::vector<TensorInfo> mTensors = multi.getTensors(UnitKind::Layer, 0);
  for (const TensorInfo &tensor : mTensors) {
    const TensorInfo &source = gTensors.at(tensor.name);
    float *to = mWeights.data() + tensor.localOffset;
    const float *from = gWeights.data() + source.localOffset;
    if (tensor.name.find("attn.qkv") == std::string::npos) {
      ASSERT_EQ(tensor.rows * tensor.cols, source.rows * source.cols) << tensor.name;
      std::copy(from, from + tensor.rows * tensor.cols, to);
      continue;
    }
    ASSERT_EQ(tensor.rows, 3 * heads * headDim);
    ASSERT_EQ(source.rows, (heads + 2 * kvHeads) * headDim);
    for (int64_t head = 0; head < heads; ++head)
      for (int part = 0; part < 3; ++part)
        for (int64_t d = 0; d < headDim; ++d)
          std::copy(from + groupedRow(head, part, d) * tensor.cols,
                    from + (groupedRow(head, part, d) + 1) * tensor.cols,
                    to + ((head * 3 + part) * headDim + d) * tensor.cols);
  }
  const size_t rows = 2 * 4, hidden = 16;
  std::vector<float> input = randomVector(rows * hidden, 43);
  std::vector<float> outputWeight = randomVector(rows * hidden, 44);
  LayerResult g = runLayer(grouped, gWeights, input, outputWeight);
  LayerResult m = runLayer(multi, mWeights, input, outputWeight);
  for (size_t i = 0; i < g.output.size(); ++i)
    EXPECT_NEAR(g.output[i], m.output[i], 1e-6) << "output[" << i << "]";
  for (size_t i = 0; i < g.inputGrad.size(); ++i)
    EXPECT_NEAR(g.inputGrad[i], m.inputGrad[i], 1e-5) << "input gradient[" << i << "]";
  // The gradient of a shared key or value row is the sum of the multi-head rows it was copied to.
  for (const TensorInfo &tensor : mTensors) {
    const TensorInfo &source = gTensors.at(tensor.name);
    std::vector<double> want(static_cast<size_t>(source.rows * source.cols), 0.0);
    const float *mGrad = m.grads.data() + tensor.localOffset;
    if (tensor.name.find("attn.qkv") == std::string::npos) {
      std::copy(mGrad, mGrad + tensor.rows * tensor.cols, want.begin());
    } else {
      for (int64_t head = 0; head < heads; ++head)
        for (int part = 0; part < 3; ++part)
          for (int64_t d = 0; d < headDim; ++d)
            for (int64_t c = 0; c < tensor.cols; ++c)
              want[static_cast<size_t>(groupedRow(head, part, d) * tensor.cols + c)] +=
                  mGrad[((head * 3 + part) * headDim + d) * tensor.cols + c];
    }
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(g.grads[static_cast<size_t>(source.localOffset) + i], want[i], 1e-5)
          << tensor.name << "[" << i << "]";
  }
}

/// The layer's output written out directly in double from the documented layout, with the MLP's
/// weights and biases zero (so the layer is x + proj(attention(qkv(norm1(x)))) + proj bias): the
/// rows of attn.qkv group g = [its heads/kvHeads query heads, its key head, its value head], each
/// head `headDim` rows; query head j reads group j / (heads/kvHeads); RoPE turns the pair (2i,
/// 2i + 1) of each query and key head at position p by p · 10000^(−2i/headDim).
std::vector<double> directAttentionBlock(const GptModel &model, const std::vector<float> &weights,
                                         const std::vector<float> &x) {
  const GptShape &m = model.getConfig().shape;
  const int64_t h = m.hidden, heads = m.heads, kvHeads = m.getKvHeads(), d = h / heads;
  const int64_t s = m.seq, rows = model.getConfig().microBatch * s, group = heads / kvHeads;
  std::map<std::string, const float *> tensor;
  for (const TensorInfo &info : model.getTensors(UnitKind::Layer, 0))
    tensor[info.name.substr(std::string("layers.0.").size())] = weights.data() + info.localOffset;
  auto get = [&](const char *name) -> const float * {
    auto it = tensor.find(name);
    return it == tensor.end() ? nullptr : it->second;
  };
  const int64_t qkvRows = (heads + 2 * kvHeads) * d;
  std::vector<double> y(static_cast<size_t>(rows * h)), qkv(static_cast<size_t>(rows * qkvRows));
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.data() + r * h;
    double mean = 0, square = 0;
    for (int64_t c = 0; c < h; ++c)
      mean += xr[c] / static_cast<double>(h);
    for (int64_t c = 0; c < h; ++c) {
      double centered = m.rmsNorm ? xr[c] : xr[c] - mean;
      square += centered * centered / static_cast<double>(h);
    }
    for (int64_t c = 0; c < h; ++c) {
      double centered = m.rmsNorm ? xr[c] : xr[c] - mean;
      y[r * h + c] = centered / std::sqrt(square + 1e-5) * get("ln1.weight")[c] +
                     (m.rmsNorm ? 0.0 : get("ln1.bias")[c]);
    }
    for (int64_t o = 0; o < qkvRows; ++o) {
      double acc = get("attn.qkv.bias") ? get("attn.qkv.bias")[o] : 0.0;
      for (int64_t c = 0; c < h; ++c)
        acc += y[r * h + c] * get("attn.qkv.weight")[o * h + c];
      qkv[r * qkvRows + o] = acc;
    }
  }
  // q of query head j, k and v of the group it reads, at row r, element e of the head.
  auto rotated = [&](int64_t r, int64_t firstRow, int64_t e) {
    const double *head = &qkv[r * qkvRows + firstRow];
    if (!m.rope)
      return head[e];
    int64_t pair = e / 2 * 2;
    double angle = static_cast<double>(r % s) *
                   std::pow(10000.0, -static_cast<double>(pair) / static_cast<double>(d));
    return e % 2 == 0 ? head[pair] * std::cos(angle) - head[pair + 1] * std::sin(angle)
                      : head[pair] * std::sin(angle) + head[pair + 1] * std::cos(angle);
  };
  std::vector<double> attention(static_cast<size_t>(rows * h));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < heads; ++j) {
      int64_t g = j / group, base = g * (group + 2) * d;
      int64_t qRow = base + (j % group) * d, kRow = base + group * d, vRow = kRow + d;
      int64_t first = r - r % s; // the sequence's first row: causal attention to [first, r]
      std::vector<double> weight;
      double total = 0;
      for (int64_t t = first; t <= r; ++t) {
        double score = 0;
        for (int64_t e = 0; e < d; ++e)
          score += rotated(r, qRow, e) * rotated(t, kRow, e);
        weight.push_back(std::exp(score / std::sqrt(static_cast<double>(d))));
        total += weight.back();
      }
      for (int64_t e = 0; e < d; ++e) {
        double acc = 0;
        for (int64_t t = first; t <= r; ++t)
          acc += weight[static_cast<size_t>(t - first)] / total * qkv[t * qkvRows + vRow + e];
        attention[r * h + j * d + e] = acc;
      }
    }
  std::vector<double> out(static_cast<size_t>(rows * h));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < h; ++o) {
      double acc = x[r * h + o] + (get("attn.proj.bias") ? get("attn.proj.bias")[o] : 0.0);
      for (int64_t c = 0; c < h; ++c)
        acc += attention[r * h + c] * get("attn.proj.weight")[o * h + c];
      out[r * h + o] = acc;
    }
  return out;
}

TEST_P(GroupedLayer, AttentionMatchesTheDocumentedLayout) {
  auto [kvHeads, llama] = GetParam();
  GptModel model(layerConfig(kvHeads, llama));
  std::vector<float> weights = initialWeights(model);
  // The MLP contributes nothing: gelu(0) = 0 and silu(0) · up = 0.
  for (const TensorInfo &tensor : model.getTensors(UnitKind::Layer, 0))
    if (tensor.name.find(".mlp.") != std::string::npos)
      std::fill(weights.begin() + tensor.localOffset,
                weights.begin() + tensor.localOffset + tensor.rows * tensor.cols, 0.0f);
  std::vector<float> input = randomVector(8 * 16, 47), outputWeight(8 * 16, 1.0f);
  LayerResult result = runLayer(model, weights, input, outputWeight);
  std::vector<double> want = directAttentionBlock(model, weights, input);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(result.output[i], want[i], 1e-5) << "output[" << i << "]";
}

// Multi-head attention (kv heads = heads = 4) runs the same tests, with one head per group.
INSTANTIATE_TEST_SUITE_P(KvHeads, GroupedLayer,
                         ::testing::Combine(::testing::Values<int64_t>(4, 2, 1), ::testing::Bool()),
                         [](const auto &info) {
                           int64_t kvHeads = std::get<0>(info.param);
                           return std::string(kvHeads == 4   ? "Mha"
                                              : kvHeads == 1 ? "Mqa"
                                                             : "Gqa2") +
                                  (std::get<1>(info.param) ? "Llama" : "Gpt2");
                         });

TEST(GptModel, KvHeadsEqualToHeadsIsMultiHeadAttention) {
  // kv_heads = heads and kv_heads unset (0) are the same model: the qkv rows are 3·hidden in the
  // multi-head order, and the layer computes the same bits.
  for (bool llama : {false, true}) {
    GptModel unset(layerConfig(0, llama)), explicitHeads(layerConfig(4, llama));
    EXPECT_EQ(unset.getQkvRows(), 3 * 16);
    EXPECT_EQ(explicitHeads.getQkvRows(), 3 * 16);
    std::vector<float> weights = initialWeights(unset);
    ASSERT_EQ(weights, initialWeights(explicitHeads));
    std::vector<float> input = randomVector(8 * 16, 45), outputWeight = randomVector(8 * 16, 46);
    LayerResult a = runLayer(unset, weights, input, outputWeight);
    LayerResult b = runLayer(explicitHeads, weights, input, outputWeight);
    EXPECT_EQ(a.output, b.output);
    EXPECT_EQ(a.inputGrad, b.inputGrad);
    EXPECT_EQ(a.grads, b.grads);
  }
}

TEST(GptModel, QkvRowsCountGroupedHeads) {
  // (heads + 2 · kv heads) · head dim: hidden 16 with 4 heads of 4.
  EXPECT_EQ(GptModel(layerConfig(2, true)).getQkvRows(), (4 + 2 * 2) * 4);
  EXPECT_EQ(GptModel(layerConfig(1, true)).getQkvRows(), (4 + 2 * 1) * 4);
  // With 2 kv heads and 2 tensor ranks, rank 1 holds the second half of the rows: the whole
  // group of kv head 1 (query heads 2 and 3, then its key and its value).
  GptConfig config = layerConfig(2, false);
  config.tensorDegree = 2;
  config.tensorIndex = 1;
  for (const TensorInfo &tensor : GptModel(config).getTensors(UnitKind::Layer, 0))
    if (tensor.name == "layers.0.attn.qkv.weight") {
      EXPECT_EQ(tensor.localRows, 16);
      EXPECT_EQ(tensor.rowOffset, 16);
    }
}

TEST(GptModel, HeadsCopyOfTheTiedEmbedding) {
  // Tied embeddings with the head on another pipeline stage: the head's last tensor is
  // embed.tokens again [vocab 8, hidden 16], split over the vocabulary; the unit's local params
  // count it, the model's parameters do not.
  GptConfig config = layerConfig(0, false);
  config.shape.tiedEmbeddings = true;
  config.embeddingCopy = true;
  config.tensorDegree = 2;
  config.tensorIndex = 1;
  GptModel model(config);
  std::vector<TensorInfo> tensors = model.getTensors(UnitKind::Head, -1);
  ASSERT_EQ(tensors.size(), 3u); // final_norm.weight, final_norm.bias, the copy
  const TensorInfo &copy = tensors.back();
  EXPECT_TRUE(copy.copy);
  EXPECT_EQ(copy.name, "embed.tokens");
  EXPECT_EQ(copy.rows, 8);
  EXPECT_EQ(copy.cols, 16);
  EXPECT_EQ(copy.localRows, 4);
  EXPECT_EQ(copy.rowOffset, 4);
  EXPECT_EQ(copy.localOffset, 2 * 16);
  EXPECT_EQ(model.getLocalParams(UnitKind::Head, -1), 2 * 16 + 4 * 16);
  EXPECT_EQ(model.getFullParams(UnitKind::Head, -1), 2 * 16);
  // The copy starts equal to the embedding's rows it stands for.
  std::vector<TensorInfo> embed = model.getTensors(UnitKind::Embed, -1);
  ASSERT_EQ(embed.front().name, "embed.tokens");
  for (int64_t i = 0; i < 8 * 16; ++i)
    ASSERT_EQ(model.initialValue(7, copy, i), model.initialValue(7, embed.front(), i));

  // On one tensor rank the head with its copy computes what the head reading the embedding's
  // table computes, bit for bit, and accumulates the table's gradient into the copy.
  GptConfig one = layerConfig(0, false);
  one.shape.tiedEmbeddings = true;
  GptConfig withCopy = one;
  withCopy.embeddingCopy = true;
  GptModel reading(one), holding(withCopy);
  std::vector<TensorInfo> own = holding.getTensors(UnitKind::Head, -1);
  std::vector<float> weights(static_cast<size_t>(holding.getLocalParams(UnitKind::Head, -1)));
  for (const TensorInfo &tensor : own)
    for (int64_t i = 0; i < tensor.rows * tensor.cols; ++i)
      weights[static_cast<size_t>(tensor.localOffset + i)] = holding.initialValue(7, tensor, i);
  const TensorInfo &table = own.back();
  std::vector<float> tableWeights(weights.begin() + table.localOffset, weights.end());
  std::vector<float> input = randomVector(8 * 16, 47);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 0}, targets = {2, 3, 4, 5, 6, 7, 0, 1};
  NoCollectives none;
  UnitActivations savedReading, savedHolding;
  double lossReading = 0, lossHolding = 0;
  ASSERT_TRUE(reading
                  .forward(UnitKind::Head, -1, weights.data(), tableWeights.data(), tokens.data(),
                           targets.data(), input.data(), nullptr, savedReading, none, lossReading,
                           false)
                  .isOk());
  ASSERT_TRUE(holding
                  .forward(UnitKind::Head, -1, weights.data(), nullptr, tokens.data(),
                           targets.data(), input.data(), nullptr, savedHolding, none, lossHolding,
                           false)
                  .isOk());
  EXPECT_EQ(lossReading, lossHolding);
  EXPECT_GT(lossHolding, 0);
  std::vector<float> gradsReading(weights.size()), gradsHolding(weights.size());
  std::vector<float> tableGrads(tableWeights.size());
  std::vector<float> inGradReading(input.size()), inGradHolding(input.size());
  ASSERT_TRUE(reading
                  .backward(UnitKind::Head, -1, weights.data(), tableWeights.data(), tokens.data(),
                            input.data(), nullptr, inGradReading.data(), gradsReading.data(),
                            tableGrads.data(), savedReading, none)
                  .isOk());
  ASSERT_TRUE(holding
                  .backward(UnitKind::Head, -1, weights.data(), nullptr, tokens.data(),
                            input.data(), nullptr, inGradHolding.data(), gradsHolding.data(),
                            nullptr, savedHolding, none)
                  .isOk());
  EXPECT_EQ(inGradReading, inGradHolding);
  std::vector<float> copyGrads(gradsHolding.begin() + table.localOffset, gradsHolding.end());
  EXPECT_EQ(copyGrads, tableGrads);
  EXPECT_GT(*std::max_element(copyGrads.begin(), copyGrads.end()), 0.0f);
  // The head's own tensors (the final norm) take the same gradients either way.
  EXPECT_TRUE(std::equal(gradsReading.begin(), gradsReading.begin() + table.localOffset,
                         gradsHolding.begin()));
}

} // namespace
