// Unit tests of a mixture-of-experts layer on one device (GptModel, every degree 1): its output
// against a direct computation from the definition (docs/runtime.md: router scores, top-k with
// ties to the lower expert, renormalised weights, each expert's MLP on the tokens routed to it,
// shared experts, the Switch load-balancing loss), and its gradients against central finite
// differences of Σ outputWeight · output + the load-balancing loss.
#include "GptKernels.h"
#include "GptModel.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace placert;
using namespace placert::gpt;

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

/// Hidden 8, heads 2, seq 4, micro-batch 2 (8 tokens), 4 experts of width 6, a shared expert of
/// width 4, top-2, aux loss 0.1 (large enough for its gradient to show). `llama`: swiglu,
/// rmsnorm, no biases, softmax router, capacity factor 2; otherwise gelu, layernorm, biases,
/// sigmoid router, dropless.
GptConfig moeConfig(bool llama) {
  GptConfig config;
  GptShape &shape = config.shape;
  shape.name = "m";
  shape.layers = 1;
  shape.hidden = 8;
  shape.heads = 2;
  shape.seq = 4;
  shape.vocab = 8;
  shape.ffn = 8;
  shape.swiglu = shape.rmsNorm = llama;
  shape.bias = !llama;
  shape.moe.experts = 4;
  shape.moe.topK = 2;
  shape.moe.expertFfn = 6;
  shape.moe.sharedExperts = 1;
  shape.moe.sharedExpertFfn = 4;
  shape.moe.router = llama ? MoeRouter::Softmax : MoeRouter::Sigmoid;
  shape.moe.capacityFactor = llama ? 2.0 : 0.0;
  shape.moe.auxLoss = 0.1;
  config.microBatch = 2;
  config.globalBatch = 2;
  return config;
}

std::vector<float> initial(const GptModel &model, UnitKind kind) {
  std::vector<float> weights(static_cast<size_t>(model.getLocalParams(kind, 0)));
  for (const TensorInfo &tensor : model.getTensors(kind, 0))
    for (int64_t i = 0; i < tensor.rows * tensor.cols; ++i)
      weights[static_cast<size_t>(tensor.localOffset + i)] = model.initialValue(7, tensor, i);
  return weights;
}

const float *tensorOf(const GptModel &model, UnitKind kind, const std::vector<float> &weights,
                      const std::string &suffix) {
  for (const TensorInfo &tensor : model.getTensors(kind, 0))
    if (tensor.name == "layers.0." + suffix)
      return weights.data() + tensor.localOffset;
  return nullptr;
}

struct LayerRun {
  std::vector<float> output, inputGrad, grads, expertGrads;
  std::vector<int64_t> experts;
  double aux = 0;
};

LayerRun runLayer(GptModel &model, const std::vector<float> &weights,
                  const std::vector<float> &expertWeights, const std::vector<float> &input,
                  const std::vector<float> &outputWeight, bool backward) {
  NoCollectives none;
  LayerRun run;
  run.output.assign(input.size(), 0.0f);
  run.inputGrad.assign(input.size(), 0.0f);
  run.grads.assign(weights.size(), 0.0f);
  run.expertGrads.assign(expertWeights.size(), 0.0f);
  UnitActivations saved;
  double loss = 0;
  Status status =
      model.forward(UnitKind::Layer, 0, weights.data(), nullptr, nullptr, nullptr, input.data(),
                    run.output.data(), saved, none, loss, false, {expertWeights.data(), nullptr});
  EXPECT_TRUE(status.isOk()) << status.getMessage();
  run.aux = saved.auxLoss;
  run.experts = saved.moeExperts;
  if (backward) {
    status = model.backward(UnitKind::Layer, 0, weights.data(), nullptr, nullptr, input.data(),
                            outputWeight.data(), run.inputGrad.data(), run.grads.data(), nullptr,
                            saved, none, {expertWeights.data(), run.expertGrads.data()});
    EXPECT_TRUE(status.isOk()) << status.getMessage();
  }
  return run;
}

/// out[r, :] = w · x[r, :] + b for w [out, in].
std::vector<double> linear(const float *w, const float *b, const std::vector<double> &x, int64_t in,
                           int64_t out) {
  std::vector<double> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double sum = b ? b[o] : 0.0;
    for (int64_t i = 0; i < in; ++i)
      sum += static_cast<double>(w[o * in + i]) * x[static_cast<size_t>(i)];
    y[static_cast<size_t>(o)] = sum;
  }
  return y;
}

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/// One MLP by the definition: up [fused · f, h] (swiglu: gate rows, then up rows), down [h, f].
std::vector<double> mlp(bool swiglu, const float *up, const float *upBias, const float *down,
                        const float *downBias, const std::vector<double> &x, int64_t h, int64_t f) {
  std::vector<double> a = linear(up, upBias, x, h, f), g(static_cast<size_t>(f));
  if (swiglu) {
    std::vector<double> u = linear(up + f * h, upBias ? upBias + f : nullptr, x, h, f);
    for (int64_t i = 0; i < f; ++i)
      g[static_cast<size_t>(i)] = a[static_cast<size_t>(i)] /
                                  (1.0 + std::exp(-a[static_cast<size_t>(i)])) *
                                  u[static_cast<size_t>(i)];
  } else {
    for (int64_t i = 0; i < f; ++i)
      g[static_cast<size_t>(i)] = gelu(a[static_cast<size_t>(i)]);
  }
  return linear(down, downBias, g, f, h);
}

class MoeLayer : public ::testing::TestWithParam<bool> {};

TEST_P(MoeLayer, OutputIsTheDefinition) {
  bool llama = GetParam();
  GptModel model(moeConfig(llama));
  const GptShape &m = model.getConfig().shape;
  const int64_t h = m.hidden, E = m.moe.experts, K = m.moe.topK, f = m.moe.expertFfn,
                fs = m.moe.sharedExpertFfn, rows = 8, fused = llama ? 2 : 1;
  std::vector<float> weights = initial(model, UnitKind::Layer);
  std::vector<float> experts = initial(model, UnitKind::Experts);
  std::vector<float> input = randomVector(static_cast<size_t>(rows * h), 11);
  LayerRun run = runLayer(model, weights, experts, input, {}, false);
  // The attention half is the dense layer's; the MLP half is checked from x1 = output of the
  // same layer with every expert and the shared expert zeroed (then the block adds nothing but
  // the down biases, which are zeroed too).
  std::vector<float> zeroExperts(experts.size(), 0.0f), zeroWeights = weights;
  for (const TensorInfo &tensor : model.getTensors(UnitKind::Layer, 0))
    if (tensor.name.find("moe.shared") != std::string::npos)
      std::fill(zeroWeights.begin() + tensor.localOffset,
                zeroWeights.begin() + tensor.localOffset + tensor.rows * tensor.cols, 0.0f);
  LayerRun attentionOnly = runLayer(model, zeroWeights, zeroExperts, input, {}, false);

  // y2 = norm2(x1) with the layer's ln2.
  const float *ln2 = tensorOf(model, UnitKind::Layer, weights, "ln2.weight");
  const float *ln2b = tensorOf(model, UnitKind::Layer, weights, "ln2.bias");
  const float *router = tensorOf(model, UnitKind::Layer, weights, "moe.router.weight");
  const float *sharedUp = tensorOf(model, UnitKind::Layer, weights, "moe.shared.up.weight");
  const float *sharedUpBias = tensorOf(model, UnitKind::Layer, weights, "moe.shared.up.bias");
  const float *sharedDown = tensorOf(model, UnitKind::Layer, weights, "moe.shared.down.weight");
  const float *sharedDownBias = tensorOf(model, UnitKind::Layer, weights, "moe.shared.down.bias");
  const float *up = tensorOf(model, UnitKind::Experts, experts, "moe.experts.up.weight");
  const float *upBias = tensorOf(model, UnitKind::Experts, experts, "moe.experts.up.bias");
  const float *down = tensorOf(model, UnitKind::Experts, experts, "moe.experts.down.weight");
  const float *downBias = tensorOf(model, UnitKind::Experts, experts, "moe.experts.down.bias");
  ASSERT_TRUE(router && up && down && sharedUp && sharedDown);
  std::vector<double> counts(static_cast<size_t>(E), 0.0), scoreSums(counts.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *x1 = attentionOnly.output.data() + r * h;
    double mean = 0, square = 0;
    for (int64_t c = 0; c < h; ++c) {
      mean += x1[c] / static_cast<double>(h);
      square += static_cast<double>(x1[c]) * x1[c] / static_cast<double>(h);
    }
    std::vector<double> y2(static_cast<size_t>(h));
    for (int64_t c = 0; c < h; ++c)
      y2[static_cast<size_t>(c)] =
          llama ? x1[c] / std::sqrt(square + 1e-5) * ln2[c]
                : (x1[c] - mean) / std::sqrt(square - mean * mean + 1e-5) * ln2[c] + ln2b[c];
    std::vector<double> z = linear(router, nullptr, y2, h, E), p(static_cast<size_t>(E));
    double total = 0;
    for (int64_t e = 0; e < E; ++e)
      total += std::exp(z[static_cast<size_t>(e)]);
    for (int64_t e = 0; e < E; ++e)
      p[static_cast<size_t>(e)] = llama ? std::exp(z[static_cast<size_t>(e)]) / total
                                        : 1.0 / (1.0 + std::exp(-z[static_cast<size_t>(e)]));
    // Top-k: the k largest scores; a tie goes to the lower expert.
    std::vector<int64_t> chosen;
    for (int64_t j = 0; j < K; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end() &&
            (best < 0 || p[static_cast<size_t>(e)] > p[static_cast<size_t>(best)]))
          best = e;
      chosen.push_back(best);
    }
    double selected = 0;
    for (int64_t e : chosen)
      selected += p[static_cast<size_t>(e)];
    std::vector<double> out(x1, x1 + h);
    for (int64_t j = 0; j < K; ++j) {
      int64_t e = chosen[static_cast<size_t>(j)];
      EXPECT_EQ(run.experts[static_cast<size_t>(r * K + j)], e) << "token " << r;
      counts[static_cast<size_t>(e)] += 1;
      std::vector<double> y =
          mlp(llama, up + e * fused * f * h, upBias ? upBias + e * fused * f : nullptr,
              down + e * h * f, downBias ? downBias + e * h : nullptr, y2, h, f);
      for (int64_t c = 0; c < h; ++c)
        out[static_cast<size_t>(c)] +=
            p[static_cast<size_t>(e)] / selected * y[static_cast<size_t>(c)];
    }
    for (int64_t e = 0; e < E; ++e)
      scoreSums[static_cast<size_t>(e)] += p[static_cast<size_t>(e)];
    std::vector<double> shared =
        mlp(llama, sharedUp, sharedUpBias, sharedDown, sharedDownBias, y2, h, fs);
    for (int64_t c = 0; c < h; ++c)
      EXPECT_NEAR(run.output[static_cast<size_t>(r * h + c)],
                  out[static_cast<size_t>(c)] + shared[static_cast<size_t>(c)], 2e-5)
          << "token " << r << ", column " << c;
  }
  // Switch Transformer's loss, eq. 4: α · E · Σ_e f_e · P_e over the 8 tokens.
  double aux = 0;
  for (int64_t e = 0; e < E; ++e)
    aux += counts[static_cast<size_t>(e)] / (rows * K) * scoreSums[static_cast<size_t>(e)] / rows;
  EXPECT_NEAR(run.aux, 0.1 * E * aux, 1e-6);
}

TEST_P(MoeLayer, GradientsMatchFiniteDifferences) {
  bool llama = GetParam();
  GptModel model(moeConfig(llama));
  std::vector<float> weights = initial(model, UnitKind::Layer);
  std::vector<float> experts = initial(model, UnitKind::Experts);
  std::vector<float> input = randomVector(8 * 8, 21);
  std::vector<float> outputWeight = randomVector(input.size(), 22);
  LayerRun analytic = runLayer(model, weights, experts, input, outputWeight, true);
  // f = Σ outputWeight · output + aux. A step that changes a token's experts makes f jump: those
  // points are skipped (the routing is piecewise constant), and most points must be checked.
  auto f = [&](std::vector<int64_t> &routing) {
    LayerRun run = runLayer(model, weights, experts, input, outputWeight, false);
    routing = run.experts;
    double sum = run.aux;
    for (size_t i = 0; i < run.output.size(); ++i)
      sum += static_cast<double>(outputWeight[i]) * run.output[i];
    return sum;
  };
  auto check = [&](std::vector<float> &x, const std::vector<float> &gradient,
                   const std::string &what) {
    double largest = 0;
    for (float g : gradient)
      largest = std::max(largest, std::fabs(static_cast<double>(g)));
    ASSERT_GT(largest, 1e-3) << what << ": the gradient is all but zero";
    const float step = 1e-3f;
    size_t checked = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      float saved = x[i];
      std::vector<int64_t> plusRouting, minusRouting;
      x[i] = saved + step;
      double plus = f(plusRouting);
      x[i] = saved - step;
      double minus = f(minusRouting);
      x[i] = saved;
      if (plusRouting != analytic.experts || minusRouting != analytic.experts)
        continue;
      ++checked;
      double numeric = (plus - minus) / (2.0 * static_cast<double>(step));
      EXPECT_NEAR(gradient[i], numeric, 2e-2 * largest + 2e-3) << what << "[" << i << "]";
    }
    EXPECT_GT(checked, x.size() * 9 / 10) << what;
  };
  check(weights, analytic.grads, "layer weights");
  check(experts, analytic.expertGrads, "expert weights");
  check(input, analytic.inputGrad, "input");
}

TEST_P(MoeLayer, LoadBalancingLossHasARouterGradient) {
  // With every output weight 0 the only gradient is the load-balancing loss's: it reaches the
  // router (through P_e) and nothing else of the MLP half.
  bool llama = GetParam();
  GptModel model(moeConfig(llama));
  std::vector<float> weights = initial(model, UnitKind::Layer);
  std::vector<float> experts = initial(model, UnitKind::Experts);
  std::vector<float> input = randomVector(8 * 8, 31);
  LayerRun run =
      runLayer(model, weights, experts, input, std::vector<float>(input.size(), 0.0f), true);
  double router = 0, expert = 0;
  for (const TensorInfo &tensor : model.getTensors(UnitKind::Layer, 0))
    if (tensor.name.find("moe.router") != std::string::npos)
      for (int64_t i = 0; i < tensor.rows * tensor.cols; ++i)
        router += std::fabs(run.grads[static_cast<size_t>(tensor.localOffset + i)]);
  for (float g : run.expertGrads)
    expert += std::fabs(g);
  EXPECT_GT(router, 1e-6);
  EXPECT_EQ(expert, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, MoeLayer, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? std::string("LlamaSoftmaxCapacity")
                                             : std::string("Gpt2SigmoidDropless");
                         });

TEST(MoeLayout, ExpertTensorsSplitOverExpertAndTensorRanks) {
  // 4 experts of width 6 over ep 2 × tp 2, swiglu: expert rank 1, tensor rank 1 holds experts 2
  // and 3; of each, the gate rows [3, 6) and the up rows [6 + 3, 6 + 6) of its 12 up rows.
  GptConfig config = moeConfig(true);
  config.expertDegree = 2;
  config.expertIndex = 1;
  config.tensorDegree = 2;
  config.tensorIndex = 1;
  GptModel model(config);
  std::vector<TensorInfo> tensors = model.getTensors(UnitKind::Experts, 0);
  ASSERT_EQ(tensors.size(), 2u);
  const TensorInfo &up = tensors[0];
  EXPECT_EQ(up.name, "layers.0.moe.experts.up.weight");
  EXPECT_EQ(up.dims, (std::vector<int64_t>{4, 12, 8}));
  EXPECT_EQ(up.localRows, 2 * 2 * 3);
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < up.localRows; ++r)
    rows.push_back(up.globalRow(r));
  // Expert 2 is rows [24, 36), expert 3 rows [36, 48) of the flattened [4 · 12, 8].
  EXPECT_EQ(rows, (std::vector<int64_t>{27, 28, 29, 33, 34, 35, 39, 40, 41, 45, 46, 47}));
  const TensorInfo &down = tensors[1];
  EXPECT_EQ(down.dims, (std::vector<int64_t>{4, 8, 6}));
  EXPECT_EQ(down.localRows, 2 * 8);
  EXPECT_EQ(down.localCols, 3);
  // Element 0 of the piece: expert 2, row 0, column 3 of [4 · 8, 6].
  EXPECT_EQ(down.logicalIndex(0), (2 * 8) * 6 + 3);
  // Each expert of the [8 · 8] capacity-2 micro-batch of 8 tokens with top-2 has room for
  // ceil(2 · 8 · 2 / 4) = 8 rows per source rank.
  EXPECT_EQ(model.getExpertCapacity(), 8);
}

} // namespace
