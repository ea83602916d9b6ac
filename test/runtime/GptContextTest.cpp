// Unit tests of context parallelism in a GPT layer (GptModel): the load-balanced token split, and
// a layer run by cp simulated context ranks (threads of this process exchanging through shared
// memory, one computing at a time) with ring or all-to-all attention, against the same layer on
// one device over the whole sequence (outputs, input gradients, the ranks' summed parameter
// gradients), against central finite differences, and the exchanges it makes against the sizes
// the step plan counts.
#include "GptModel.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <gtest/gtest.h>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace placert {
/// Names the method in gtest's messages.
void PrintTo(ContextMethod method, std::ostream *os) {
  *os << (method == ContextMethod::Ring ? "ring" : "all_to_all");
}
} // namespace placert

namespace {

using namespace placert;
using namespace placert::gpt;

std::vector<float> randomVector(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(engine);
  return values;
}

/// Megatron-Core's load-balanced split written out here: the sequence in 2·cp chunks, rank r
/// holds chunks r and 2·cp − 1 − r.
std::vector<int64_t> balancedPositions(int64_t seq, int64_t cp, int64_t rank) {
  std::vector<int64_t> positions;
  int64_t chunk = seq / (2 * cp);
  for (int64_t c : {rank, 2 * cp - 1 - rank})
    for (int64_t p = 0; p < chunk; ++p)
      positions.push_back(c * chunk + p);
  return positions;
}

TEST(GptContext, LoadBalancedSplit) {
  // Megatron-Core's example: 8 tokens over 2 ranks, chunks of 2: rank 0 holds 0, 1, 6, 7.
  std::vector<int64_t> rank0, rank1;
  for (int64_t p = 0; p < 4; ++p) {
    rank0.push_back(contextPosition(8, 2, 0, p));
    rank1.push_back(contextPosition(8, 2, 1, p));
  }
  EXPECT_EQ(rank0, (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(rank1, (std::vector<int64_t>{2, 3, 4, 5}));
  // Every rank holds as many tokens, and together they hold every position once.
  for (int64_t cp : {1, 2, 3, 4}) {
    const int64_t seq = 24;
    std::vector<int64_t> all;
    for (int64_t r = 0; r < cp; ++r)
      for (int64_t p = 0; p < seq / cp; ++p) {
        EXPECT_EQ(contextPosition(seq, cp, r, p), balancedPositions(seq, cp, r)[p]);
        all.push_back(contextPosition(seq, cp, r, p));
      }
    std::sort(all.begin(), all.end());
    for (int64_t p = 0; p < seq; ++p)
      EXPECT_EQ(all[p], p);
  }
}

/// The context ranks of one simulated group: threads that run only while holding `mutex`, and
/// give it up while they wait at a collective, so that one computes at a time.
struct ThreadGroup {
  explicit ThreadGroup(int size) : size(size), inputs(size) {}
  /// Waits until every rank has arrived (called with `lock` on `mutex` held).
  void arrive(std::unique_lock<std::mutex> &lock) {
    int generation = this->generation;
    if (++arrived == size) {
      arrived = 0;
      ++this->generation;
      wake.notify_all();
      return;
    }
    wake.wait(lock, [&] { return this->generation != generation; });
  }
  int size;
  std::mutex mutex;
  std::condition_variable wake;
  int arrived = 0, generation = 0;
  std::vector<const float *> inputs;
};

/// One rank's collectives in a ThreadGroup: all-to-all and ring steps through shared memory; the
/// calls (kind and elements) are recorded. There is no tensor parallelism here.
class ThreadCollectives : public UnitCollectives {
public:
  ThreadCollectives(ThreadGroup &group, int rank, std::unique_lock<std::mutex> &lock)
      : group(group), rank(rank), lock(lock) {}
  Status allReduce(float *, int64_t) override { return fail(); }
  Status allGather(const float *, float *, int64_t) override { return fail(); }
  Status reduceScatter(const float *, float *, int64_t) override { return fail(); }
  Status allToAll(const float *input, float *output, int64_t elements) override {
    calls.emplace_back("all-to-all", elements);
    int64_t chunk = elements / group.size;
    std::vector<float> received(static_cast<size_t>(elements));
    group.inputs[rank] = input;
    group.arrive(lock);
    for (int j = 0; j < group.size; ++j)
      std::copy(group.inputs[j] + rank * chunk, group.inputs[j] + (rank + 1) * chunk,
                received.begin() + j * chunk);
    group.arrive(lock); // every rank has read before any buffer changes
    std::copy(received.begin(), received.end(), output);
    return Status::success();
  }
  Status ringStep(const float *input, float *output, int64_t elements) override {
    calls.emplace_back("ring-step", elements);
    group.inputs[rank] = input;
    group.arrive(lock);
    const float *previous = group.inputs[(rank + group.size - 1) % group.size];
    std::vector<float> received(previous, previous + elements);
    group.arrive(lock);
    std::copy(received.begin(), received.end(), output);
    return Status::success();
  }
  std::vector<std::pair<std::string, int64_t>> calls;

private:
  static Status fail() {
    return Status(StatusCode::InvalidArgument, "a tensor-parallel collective without tensor ranks");
  }
  ThreadGroup &group;
  int rank;
  std::unique_lock<std::mutex> &lock;
};

/// One device runs no collective.
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

/// A layer of hidden 16, heads 4 (head dim 4), seq 8, ffn 16 on a micro-batch of 2, in GPT-2's
/// layout (layernorm, gelu, biases, learned positions elsewhere) or LLaMA's (rmsnorm, swiglu, no
/// biases, rope).
GptConfig layerConfig(int64_t kvHeads, bool llama) {
  GptConfig config;
  config.shape.name = "g";
  config.shape.layers = 1;
  config.shape.hidden = 16;
  config.shape.heads = 4;
  config.shape.seq = 8;
  config.shape.vocab = 8;
  config.shape.ffn = 16;
  config.shape.swiglu = config.shape.rmsNorm = config.shape.rope = llama;
  config.shape.bias = !llama;
  config.shape.kvHeads = kvHeads;
  config.microBatch = 2;
  config.globalBatch = 2;
  return config;
}

std::vector<float> initialWeights(const GptModel &model) {
  std::vector<float> weights(static_cast<size_t>(model.getLocalParams(UnitKind::Layer, 0)));
  for (const TensorInfo &tensor : model.getTensors(UnitKind::Layer, 0))
    for (int64_t i = 0; i < tensor.rows * tensor.cols; ++i)
      weights[static_cast<size_t>(tensor.localOffset + i)] = model.initialValue(7, tensor, i);
  return weights;
}

/// Rows `positions` of every sample of x [batch · seq, width].
std::vector<float> takeRows(const std::vector<float> &x, const std::vector<int64_t> &positions,
                            int64_t batch, int64_t seq, int64_t width) {
  std::vector<float> rows;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t p : positions)
      rows.insert(rows.end(), x.begin() + (b * seq + p) * width,
                  x.begin() + (b * seq + p + 1) * width);
  return rows;
}

/// What a layer's forward and backward give: on one device, or on the context ranks put back at
/// their positions (outputs, input gradients) and summed (parameter gradients).
struct LayerResult {
  std::vector<float> output, inputGrad, grads;
  std::vector<std::vector<std::pair<std::string, int64_t>>> forwardCalls, backwardCalls;
};

/// The layer on one device over the whole sequence; the gradients are those of Σ outputWeight ·
/// output.
LayerResult runWhole(const GptConfig &config, const std::vector<float> &weights,
                     const std::vector<float> &input, const std::vector<float> &outputWeight) {
  GptModel model(config);
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

/// The layer on `cp` context ranks (threads), each holding its load-balanced rows of `input`;
/// `backward` false runs the forward only.
LayerResult runContext(GptConfig config, int cp, ContextMethod method,
                       const std::vector<float> &weights, const std::vector<float> &input,
                       const std::vector<float> &outputWeight, bool backward = true) {
  const int64_t b = config.microBatch, s = config.shape.seq, h = config.shape.hidden;
  config.contextDegree = cp;
  config.contextMethod = method;
  LayerResult result;
  result.output.assign(input.size(), 0.0f);
  result.inputGrad.assign(input.size(), 0.0f);
  result.grads.assign(weights.size(), 0.0f);
  result.forwardCalls.resize(cp);
  result.backwardCalls.resize(cp);
  std::vector<LayerResult> ranks(cp);
  std::vector<Status> statuses(cp);
  ThreadGroup group(cp);
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r)
    threads.emplace_back([&, r] {
      std::unique_lock<std::mutex> lock(group.mutex);
      GptConfig mine = config;
      mine.contextIndex = r;
      GptModel model(mine);
      std::vector<int64_t> positions = balancedPositions(s, cp, r);
      std::vector<float> x = takeRows(input, positions, b, s, h);
      std::vector<float> w = takeRows(outputWeight, positions, b, s, h);
      LayerResult &rank = ranks[r];
      rank.output.assign(x.size(), 0.0f);
      rank.inputGrad.assign(x.size(), 0.0f);
      rank.grads.assign(weights.size(), 0.0f);
      UnitActivations saved;
      double loss = 0;
      ThreadCollectives forward(group, r, lock), back(group, r, lock);
      statuses[r] = model.forward(UnitKind::Layer, 0, weights.data(), nullptr, nullptr, nullptr,
                                  x.data(), rank.output.data(), saved, forward, loss, false);
      if (statuses[r].isOk() && backward)
        statuses[r] =
            model.backward(UnitKind::Layer, 0, weights.data(), nullptr, nullptr, x.data(), w.data(),
                           rank.inputGrad.data(), rank.grads.data(), nullptr, saved, back);
      result.forwardCalls[r] = forward.calls;
      result.backwardCalls[r] = back.calls;
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int r = 0; r < cp; ++r) {
    EXPECT_TRUE(statuses[r].isOk()) << "rank " << r << ": " << statuses[r].getMessage();
    std::vector<int64_t> positions = balancedPositions(s, cp, r);
    for (int64_t bi = 0; bi < b; ++bi)
      for (size_t p = 0; p < positions.size(); ++p)
        for (int64_t c = 0; c < h; ++c) {
          size_t from = (bi * positions.size() + p) * h + c, to = (bi * s + positions[p]) * h + c;
          result.output[to] = ranks[r].output[from];
          result.inputGrad[to] = ranks[r].inputGrad[from];
        }
    for (size_t i = 0; i < weights.size(); ++i)
      result.grads[i] += ranks[r].grads[i];
  }
  return result;
}

/// (method, context ranks, kv heads, LLaMA's layout or GPT-2's).
using ContextCase = std::tuple<ContextMethod, int, int64_t, bool>;

class ContextLayer : public ::testing::TestWithParam<ContextCase> {};

TEST_P(ContextLayer, EqualsTheLayerOnOneDevice) {
  auto [method, cp, kvHeads, llama] = GetParam();
  GptConfig config = layerConfig(kvHeads, llama);
  std::vector<float> weights = initialWeights(GptModel(config));
  std::vector<float> input = randomVector(2 * 8 * 16, 71),
                     outputWeight = randomVector(2 * 8 * 16, 72);
  LayerResult whole = runWhole(config, weights, input, outputWeight);
  LayerResult split = runContext(config, cp, method, weights, input, outputWeight);
  for (size_t i = 0; i < whole.output.size(); ++i)
    EXPECT_NEAR(split.output[i], whole.output[i], 1e-5) << "output[" << i << "]";
  for (size_t i = 0; i < whole.inputGrad.size(); ++i)
    EXPECT_NEAR(split.inputGrad[i], whole.inputGrad[i], 1e-5) << "input gradient[" << i << "]";
  for (const TensorInfo &tensor : GptModel(config).getTensors(UnitKind::Layer, 0))
    for (int64_t i = 0; i < tensor.rows * tensor.cols; ++i) {
      size_t k = static_cast<size_t>(tensor.localOffset + i);
      EXPECT_NEAR(split.grads[k], whole.grads[k], 1e-4) << tensor.name << "[" << i << "]";
    }
}

TEST_P(ContextLayer, ExchangesWhatThePlanCounts) {
  // The step plan's sizes (include/placec/passes/StepPlan.h, getUnitCollectives), per rank with
  // b = 2, s = 8, kv heads · head dim of K and V, no tensor parallelism: ring: cp − 1 steps of
  // the K, V block 2·b·(s/cp)·kv·d forward, cp − 1 of twice that and one of it backward;
  // all-to-all: b·(s/cp)·(heads + 2·kv)·d then b·(s/cp)·heads·d forward, the reverse backward.
  auto [method, cp, kvHeads, llama] = GetParam();
  GptConfig config = layerConfig(kvHeads, llama);
  std::vector<float> weights = initialWeights(GptModel(config));
  std::vector<float> input = randomVector(2 * 8 * 16, 73),
                     outputWeight = randomVector(2 * 8 * 16, 74);
  LayerResult split = runContext(config, cp, method, weights, input, outputWeight);
  const int64_t local = 2 * 8 / cp, d = 4, heads = 4;
  using Calls = std::vector<std::pair<std::string, int64_t>>;
  Calls forward, backward;
  if (method == ContextMethod::Ring) {
    int64_t block = 2 * local * kvHeads * d;
    for (int i = 1; i < cp; ++i) {
      forward.emplace_back("ring-step", block);
      backward.emplace_back("ring-step", 2 * block);
    }
    backward.emplace_back("ring-step", block);
  } else {
    int64_t qkv = local * (heads + 2 * kvHeads) * d, out = local * heads * d;
    forward = {{"all-to-all", qkv}, {"all-to-all", out}};
    backward = {{"all-to-all", out}, {"all-to-all", qkv}};
  }
  for (int r = 0; r < cp; ++r) {
    EXPECT_EQ(split.forwardCalls[r], forward) << "rank " << r;
    EXPECT_EQ(split.backwardCalls[r], backward) << "rank " << r;
  }
}

std::string caseName(const ::testing::TestParamInfo<ContextCase> &info) {
  auto [method, cp, kvHeads, llama] = info.param;
  return std::string(method == ContextMethod::Ring ? "Ring" : "AllToAll") + std::to_string(cp) +
         "Kv" + std::to_string(kvHeads) + (llama ? "Llama" : "Gpt2");
}

// Ring over 2 and 4 ranks (chunks of 2 and 1 tokens), all-to-all over 2 (each rank then holds
// whole groups: 2 query heads and their kv heads / 2 key/value heads).
INSTANTIATE_TEST_SUITE_P(Ring, ContextLayer,
                         ::testing::Combine(::testing::Values(ContextMethod::Ring),
                                            ::testing::Values(2, 4),
                                            ::testing::Values<int64_t>(4, 2, 1), ::testing::Bool()),
                         caseName);
INSTANTIATE_TEST_SUITE_P(AllToAll, ContextLayer,
                         ::testing::Combine(::testing::Values(ContextMethod::AllToAll),
                                            ::testing::Values(2), ::testing::Values<int64_t>(4, 2),
                                            ::testing::Bool()),
                         caseName);

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

class ContextLayerGradients : public ::testing::TestWithParam<ContextMethod> {};

TEST_P(ContextLayerGradients, MatchFiniteDifferences) {
  // Σ outputWeight · output over every context rank's rows, as a function of the input and of
  // the attention's weights, each forward run on 2 context ranks; grouped-query attention with
  // rope (the positions matter) in the LLaMA layout.
  ContextMethod method = GetParam();
  GptConfig config = layerConfig(2, true);
  std::vector<float> weights = initialWeights(GptModel(config));
  std::vector<float> input = randomVector(2 * 8 * 16, 75),
                     outputWeight = randomVector(2 * 8 * 16, 76);
  LayerResult split = runContext(config, 2, method, weights, input, outputWeight);
  auto f = [&] {
    LayerResult forward = runContext(config, 2, method, weights, input, outputWeight, false);
    double sum = 0;
    for (size_t i = 0; i < forward.output.size(); ++i)
      sum += static_cast<double>(outputWeight[i]) * forward.output[i];
    return sum;
  };
  for (const TensorInfo &tensor : GptModel(config).getTensors(UnitKind::Layer, 0)) {
    if (tensor.name.find(".attn.") == std::string::npos)
      continue;
    auto begin = weights.begin() + tensor.localOffset;
    size_t size = static_cast<size_t>(tensor.rows * tensor.cols);
    std::vector<float> piece(begin, begin + static_cast<ptrdiff_t>(size));
    std::vector<float> analytic(split.grads.begin() + tensor.localOffset,
                                split.grads.begin() + tensor.localOffset +
                                    static_cast<ptrdiff_t>(size));
    auto fPiece = [&] {
      std::copy(piece.begin(), piece.end(), begin);
      return f();
    };
    expectGradient(piece, analytic, fPiece, tensor.name);
    std::copy(piece.begin(), piece.end(), begin);
  }
  expectGradient(input, split.inputGrad, f, "input");
}

INSTANTIATE_TEST_SUITE_P(Methods, ContextLayerGradients,
                         ::testing::Values(ContextMethod::Ring, ContextMethod::AllToAll),
                         [](const auto &info) {
                           return std::string(info.param == ContextMethod::Ring ? "Ring"
                                                                                : "AllToAll");
                         });

} // namespace
