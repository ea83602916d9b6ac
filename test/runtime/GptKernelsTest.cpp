// Unit tests of placert's GPT kernels: every backward against central finite differences of its
// forward, grouped-query attention against a direct softmax and against multi-head attention
// with shared keys and values, blockwise (ring) attention over the blocks of context ranks
// against the whole sequence's attention, the vocabulary-parallel embedding and cross-entropy
// split in two against the unsplit ones and against a direct log-softmax, rotary positions and
// learned positions at given positions, and Adam against its formula (Kingma & Ba 2015, Alg. 1).
#include "GptKernels.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace {

using namespace placert::gpt;

std::vector<float> randomVector(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(engine);
  return values;
}

double dot(const std::vector<float> &a, const std::vector<float> &b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i)
    sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

/// Checks `analytic` = ∂f/∂x at x by central differences: f is evaluated in double on fp32
/// outputs, so the step is large (1e-2) and the tolerance relative to the gradient's scale.
void expectGradient(std::vector<float> &x, const std::vector<float> &analytic,
                    const std::function<double()> &f, const char *what) {
  ASSERT_EQ(x.size(), analytic.size());
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
    EXPECT_NEAR(analytic[i], numeric, 2e-3 * largest + 1e-4) << what << "[" << i << "]";
  }
}

TEST(GptKernels, LayerNormForwardNormalizes) {
  const int64_t rows = 3, cols = 8;
  std::vector<float> x = randomVector(rows * cols, 1, 3.0f);
  std::vector<float> gamma(cols, 1.0f), beta(cols, 0.0f), y(rows * cols), mean(rows), rstd(rows);
  layerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows,
                   cols, 1e-5f);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0, sq = 0;
    for (int64_t c = 0; c < cols; ++c) {
      sum += y[r * cols + c];
      sq += static_cast<double>(y[r * cols + c]) * y[r * cols + c];
    }
    EXPECT_NEAR(sum / cols, 0.0, 1e-5);
    EXPECT_NEAR(sq / cols, 1.0, 1e-3); // variance 1 up to ε/variance
  }
}

TEST(GptKernels, LayerNormBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 6;
  std::vector<float> x = randomVector(rows * cols, 2, 2.0f);
  std::vector<float> gamma = randomVector(cols, 3), beta = randomVector(cols, 4);
  std::vector<float> weight = randomVector(rows * cols, 5); // L = Σ weight · y
  std::vector<float> y(rows * cols), mean(rows), rstd(rows);
  auto loss = [&] {
    layerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows,
                     cols, 1e-5f);
    return dot(weight, y);
  };
  loss();
  std::vector<float> dx(rows * cols), dgamma(cols, 0.0f), dbeta(cols, 0.0f);
  layerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), weight.data(), dx.data(),
                    dgamma.data(), dbeta.data(), rows, cols);
  expectGradient(x, dx, loss, "dx");
  expectGradient(gamma, dgamma, loss, "dgamma");
  expectGradient(beta, dbeta, loss, "dbeta");
  // Accumulation: a second backward adds the same amounts again.
  std::vector<float> dgamma2 = dgamma;
  layerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), weight.data(), dx.data(),
                    dgamma2.data(), dbeta.data(), rows, cols);
  for (int64_t c = 0; c < cols; ++c)
    EXPECT_FLOAT_EQ(dgamma2[c], 2 * dgamma[c]);
}

TEST(GptKernels, AttentionIsCausal) {
  const int64_t batch = 1, seq = 4, heads = 2, headDim = 3, width = heads * headDim;
  std::vector<float> q = randomVector(seq * width, 6), k = randomVector(seq * width, 7),
                     v = randomVector(seq * width, 8);
  std::vector<float> out(seq * width), probs(batch * heads * seq * seq);
  attentionForward(q.data(), k.data(), v.data(), out.data(), probs.data(), batch, seq, heads,
                   headDim);
  // Position 0 attends only to itself: its output is its own value row.
  for (int64_t c = 0; c < width; ++c)
    EXPECT_NEAR(out[c], v[c], 1e-6);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < seq; ++i) {
      double total = 0;
      for (int64_t j = 0; j < seq; ++j) {
        float p = probs[(h * seq + i) * seq + j];
        if (j > i) {
          EXPECT_EQ(p, 0.0f);
        }
        total += p;
      }
      EXPECT_NEAR(total, 1.0, 1e-6);
    }
  // Changing the last position's key and value leaves the earlier outputs unchanged.
  std::vector<float> out2(seq * width);
  for (int64_t c = 0; c < width; ++c) {
    k[(seq - 1) * width + c] += 1.0f;
    v[(seq - 1) * width + c] += 1.0f;
  }
  attentionForward(q.data(), k.data(), v.data(), out2.data(), probs.data(), batch, seq, heads,
                   headDim);
  for (int64_t i = 0; i < (seq - 1) * width; ++i)
    EXPECT_EQ(out[i], out2[i]);
}

TEST(GptKernels, AttentionBackwardMatchesFiniteDifferences) {
  const int64_t batch = 2, seq = 4, heads = 2, headDim = 3, n = batch * seq * heads * headDim;
  std::vector<float> q = randomVector(n, 9), k = randomVector(n, 10), v = randomVector(n, 11);
  std::vector<float> weight = randomVector(n, 12);
  std::vector<float> out(n), probs(batch * heads * seq * seq);
  auto loss = [&] {
    attentionForward(q.data(), k.data(), v.data(), out.data(), probs.data(), batch, seq, heads,
                     headDim);
    return dot(weight, out);
  };
  loss();
  std::vector<float> dq(n, 7.0f), dk(n, 7.0f), dv(n, 7.0f); // overwritten, not accumulated
  attentionBackward(q.data(), k.data(), v.data(), probs.data(), weight.data(), dq.data(), dk.data(),
                    dv.data(), batch, seq, heads, headDim);
  expectGradient(q, dq, loss, "dq");
  expectGradient(k, dk, loss, "dk");
  expectGradient(v, dv, loss, "dv");
}

/// Causal attention written out directly in double: query head h of `heads` reads key/value head
/// h / (heads / kvHeads) of q [rows, heads·d] and k, v [rows, kvHeads·d].
std::vector<double> naiveAttention(const std::vector<float> &q, const std::vector<float> &k,
                                   const std::vector<float> &v, int64_t batch, int64_t seq,
                                   int64_t heads, int64_t kvHeads, int64_t headDim) {
  std::vector<double> out(static_cast<size_t>(batch * seq * heads * headDim));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t kv = h * kvHeads / heads; // the same as h / (heads / kvHeads)
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<double> weights(static_cast<size_t>(i + 1));
        double total = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double score = 0;
          for (int64_t d = 0; d < headDim; ++d)
            score += static_cast<double>(q[((b * seq + i) * heads + h) * headDim + d]) *
                     k[((b * seq + j) * kvHeads + kv) * headDim + d];
          weights[j] = std::exp(score / std::sqrt(static_cast<double>(headDim)));
          total += weights[j];
        }
        for (int64_t d = 0; d < headDim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j)
            acc += weights[j] / total * v[((b * seq + j) * kvHeads + kv) * headDim + d];
          out[((b * seq + i) * heads + h) * headDim + d] = acc;
        }
      }
    }
  return out;
}

TEST(GptKernels, GroupedAttentionMatchesDirectSoftmax) {
  const int64_t batch = 2, seq = 5, heads = 4, headDim = 3;
  for (int64_t kvHeads : {4, 2, 1}) {
    SCOPED_TRACE("kv heads " + std::to_string(kvHeads));
    std::vector<float> q = randomVector(batch * seq * heads * headDim, 30);
    std::vector<float> k = randomVector(batch * seq * kvHeads * headDim, 31);
    std::vector<float> v = randomVector(batch * seq * kvHeads * headDim, 32);
    std::vector<float> out(q.size()), probs(batch * heads * seq * seq);
    attentionForward(q.data(), k.data(), v.data(), out.data(), probs.data(), batch, seq, heads,
                     kvHeads, headDim);
    std::vector<double> want = naiveAttention(q, k, v, batch, seq, heads, kvHeads, headDim);
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_NEAR(out[i], want[i], 1e-6) << i;
  }
}

TEST(GptKernels, GroupedAttentionEqualsMultiHeadWithSharedKeysAndValues) {
  // GQA is multi-head attention whose heads of a group read one key/value head: with k and v
  // copied to every query head of their group, the multi-head kernel gives the same output and
  // dq, and each group's dk, dv are the sums of its heads'.
  const int64_t batch = 2, seq = 4, heads = 4, headDim = 2, rows = batch * seq;
  for (int64_t kvHeads : {2, 1}) {
    SCOPED_TRACE("kv heads " + std::to_string(kvHeads));
    const int64_t group = heads / kvHeads;
    std::vector<float> q = randomVector(rows * heads * headDim, 33);
    std::vector<float> k = randomVector(rows * kvHeads * headDim, 34);
    std::vector<float> v = randomVector(rows * kvHeads * headDim, 35);
    std::vector<float> dout = randomVector(rows * heads * headDim, 36);
    std::vector<float> kWide(q.size()), vWide(q.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < headDim; ++d) {
          kWide[(r * heads + h) * headDim + d] = k[(r * kvHeads + h / group) * headDim + d];
          vWide[(r * heads + h) * headDim + d] = v[(r * kvHeads + h / group) * headDim + d];
        }
    std::vector<float> out(q.size()), probs(batch * heads * seq * seq), outWide(q.size()),
        probsWide(probs.size());
    attentionForward(q.data(), k.data(), v.data(), out.data(), probs.data(), batch, seq, heads,
                     kvHeads, headDim);
    attentionForward(q.data(), kWide.data(), vWide.data(), outWide.data(), probsWide.data(), batch,
                     seq, heads, headDim);
    EXPECT_EQ(out, outWide);
    EXPECT_EQ(probs, probsWide);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> dqWide(q.size()), dkWide(q.size()), dvWide(q.size());
    attentionBackward(q.data(), k.data(), v.data(), probs.data(), dout.data(), dq.data(), dk.data(),
                      dv.data(), batch, seq, heads, kvHeads, headDim);
    attentionBackward(q.data(), kWide.data(), vWide.data(), probsWide.data(), dout.data(),
                      dqWide.data(), dkWide.data(), dvWide.data(), batch, seq, heads, headDim);
    EXPECT_EQ(dq, dqWide);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < kvHeads; ++g)
        for (int64_t d = 0; d < headDim; ++d) {
          double sumK = 0, sumV = 0;
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            sumK += dkWide[(r * heads + h) * headDim + d];
            sumV += dvWide[(r * heads + h) * headDim + d];
          }
          EXPECT_NEAR(dk[(r * kvHeads + g) * headDim + d], sumK, 1e-6);
          EXPECT_NEAR(dv[(r * kvHeads + g) * headDim + d], sumV, 1e-6);
        }
  }
}

TEST(GptKernels, GroupedAttentionBackwardMatchesFiniteDifferences) {
  const int64_t batch = 2, seq = 4, heads = 4, headDim = 3, rows = batch * seq;
  for (int64_t kvHeads : {2, 1}) {
    SCOPED_TRACE("kv heads " + std::to_string(kvHeads));
    std::vector<float> q = randomVector(rows * heads * headDim, 37);
    std::vector<float> k = randomVector(rows * kvHeads * headDim, 38);
    std::vector<float> v = randomVector(rows * kvHeads * headDim, 39);
    std::vector<float> weight = randomVector(q.size(), 40);
    std::vector<float> out(q.size()), probs(batch * heads * seq * seq);
    auto loss = [&] {
      attentionForward(q.data(), k.data(), v.data(), out.data(), probs.data(), batch, seq, heads,
                       kvHeads, headDim);
      return dot(weight, out);
    };
    loss();
    std::vector<float> dq(q.size(), 7.0f), dk(k.size(), 7.0f), dv(v.size(), 7.0f);
    attentionBackward(q.data(), k.data(), v.data(), probs.data(), weight.data(), dq.data(),
                      dk.data(), dv.data(), batch, seq, heads, kvHeads, headDim);
    expectGradient(q, dq, loss, "dq");
    expectGradient(k, dk, loss, "dk");
    expectGradient(v, dv, loss, "dv");
  }
}

/// The positions a context rank holds under Megatron-Core's load-balanced split, written out here
/// independently of the runtime: the sequence in 2·cp chunks, rank r takes chunks r and
/// 2·cp − 1 − r.
std::vector<int64_t> balancedPositions(int64_t seq, int64_t cp, int64_t rank) {
  std::vector<int64_t> positions;
  int64_t chunk = seq / (2 * cp);
  for (int64_t c : {rank, 2 * cp - 1 - rank})
    for (int64_t p = 0; p < chunk; ++p)
      positions.push_back(c * chunk + p);
  return positions;
}

/// Rows `positions` of every sample of x [batch · seq, width], as [batch · positions, width].
std::vector<float> takeRows(const std::vector<float> &x, const std::vector<int64_t> &positions,
                            int64_t batch, int64_t seq, int64_t width) {
  std::vector<float> rows;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t p : positions)
      rows.insert(rows.end(), x.begin() + (b * seq + p) * width,
                  x.begin() + (b * seq + p + 1) * width);
  return rows;
}

TEST(GptKernels, BlockwiseAttentionOverContextRanksEqualsWholeAttention) {
  // Each of cp simulated ranks holds its load-balanced tokens of every sample; its queries meet
  // the ranks' key/value blocks one by one (in ring order: its own, then the previous rank's, ...),
  // as ring attention does. The outputs and gradients, put back at their positions, are the
  // whole sequence's (attentionForward and attentionBackward, checked against finite differences
  // and a direct softmax above).
  const int64_t batch = 2, seq = 12, heads = 4, headDim = 3, width = heads * headDim;
  for (int64_t cp : {2, 3})
    for (int64_t kvHeads : {4, 2, 1}) {
      SCOPED_TRACE("cp " + std::to_string(cp) + ", kv heads " + std::to_string(kvHeads));
      const int64_t kvWidth = kvHeads * headDim, local = seq / cp, rows = batch * local;
      std::vector<float> q = randomVector(batch * seq * width, 50);
      std::vector<float> k = randomVector(batch * seq * kvWidth, 51);
      std::vector<float> v = randomVector(batch * seq * kvWidth, 52);
      std::vector<float> dout = randomVector(batch * seq * width, 53);
      std::vector<float> out(q.size()), probs(batch * heads * seq * seq);
      attentionForward(q.data(), k.data(), v.data(), out.data(), probs.data(), batch, seq, heads,
                       kvHeads, headDim);
      std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
      attentionBackward(q.data(), k.data(), v.data(), probs.data(), dout.data(), dq.data(),
                        dk.data(), dv.data(), batch, seq, heads, kvHeads, headDim);

      std::vector<std::vector<int64_t>> positions;
      std::vector<std::vector<float>> qs, ks, vs, douts, outs, dks, dvs;
      std::vector<std::vector<double>> lses;
      for (int64_t r = 0; r < cp; ++r) {
        positions.push_back(balancedPositions(seq, cp, r));
        qs.push_back(takeRows(q, positions[r], batch, seq, width));
        ks.push_back(takeRows(k, positions[r], batch, seq, kvWidth));
        vs.push_back(takeRows(v, positions[r], batch, seq, kvWidth));
        douts.push_back(takeRows(dout, positions[r], batch, seq, width));
        dks.emplace_back(static_cast<size_t>(rows * kvWidth), 0.0f);
        dvs.emplace_back(static_cast<size_t>(rows * kvWidth), 0.0f);
      }
      for (int64_t r = 0; r < cp; ++r) {
        std::vector<double> rowMax(static_cast<size_t>(rows * heads), -INFINITY),
            rowSum(rowMax.size(), 0.0), acc(static_cast<size_t>(rows * width), 0.0);
        for (int64_t step = 0; step < cp; ++step) {
          int64_t home = (r - step + cp) % cp;
          attentionBlockForward(qs[r].data(), ks[home].data(), vs[home].data(), positions[r].data(),
                                positions[home].data(), batch, local, local, heads, kvHeads,
                                headDim, rowMax.data(), rowSum.data(), acc.data());
        }
        outs.emplace_back(static_cast<size_t>(rows * width));
        lses.emplace_back(static_cast<size_t>(rows * heads));
        attentionBlockFinish(rowMax.data(), rowSum.data(), acc.data(), outs[r].data(),
                             lses[r].data(), rows, heads, headDim);
        std::vector<float> want = takeRows(out, positions[r], batch, seq, width);
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_NEAR(outs[r][i], want[i], 1e-6) << "rank " << r << " out[" << i << "]";
      }
      // The backward: each rank's queries visit every block; a block's dk, dv sum every rank's
      // terms (what the ring carries home).
      for (int64_t r = 0; r < cp; ++r) {
        std::vector<double> delta(static_cast<size_t>(rows * heads));
        attentionBlockDelta(outs[r].data(), douts[r].data(), delta.data(), rows, heads, headDim);
        std::vector<float> dqLocal(static_cast<size_t>(rows * width), 0.0f);
        for (int64_t step = 0; step < cp; ++step) {
          int64_t home = (r - step + cp) % cp;
          attentionBlockBackward(qs[r].data(), ks[home].data(), vs[home].data(), douts[r].data(),
                                 lses[r].data(), delta.data(), positions[r].data(),
                                 positions[home].data(), batch, local, local, heads, kvHeads,
                                 headDim, dqLocal.data(), dks[home].data(), dvs[home].data());
        }
        std::vector<float> want = takeRows(dq, positions[r], batch, seq, width);
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_NEAR(dqLocal[i], want[i], 1e-5) << "rank " << r << " dq[" << i << "]";
      }
      for (int64_t r = 0; r < cp; ++r) {
        std::vector<float> wantK = takeRows(dk, positions[r], batch, seq, kvWidth),
                           wantV = takeRows(dv, positions[r], batch, seq, kvWidth);
        for (size_t i = 0; i < wantK.size(); ++i) {
          EXPECT_NEAR(dks[r][i], wantK[i], 1e-5) << "rank " << r << " dk[" << i << "]";
          EXPECT_NEAR(dvs[r][i], wantV[i], 1e-5) << "rank " << r << " dv[" << i << "]";
        }
      }
    }
}

TEST(GptKernels, BlockwiseAttentionBackwardMatchesFiniteDifferences) {
  // One rank's queries (positions 2, 3, 8, 9 of 12) over two key/value blocks, one of them
  // partly in the queries' future (positions 4..7 and 0, 1, 10, 11), grouped heads.
  const int64_t batch = 2, heads = 4, kvHeads = 2, headDim = 3, local = 4;
  const int64_t width = heads * headDim, kvWidth = kvHeads * headDim, rows = batch * local;
  std::vector<int64_t> queries = {2, 3, 8, 9}, first = {4, 5, 6, 7}, second = {0, 1, 10, 11};
  std::vector<float> q = randomVector(rows * width, 54);
  std::vector<float> k1 = randomVector(rows * kvWidth, 55), v1 = randomVector(rows * kvWidth, 56);
  std::vector<float> k2 = randomVector(rows * kvWidth, 57), v2 = randomVector(rows * kvWidth, 58);
  std::vector<float> weight = randomVector(rows * width, 59), out(rows * width);
  std::vector<double> lse(static_cast<size_t>(rows * heads));
  auto loss = [&] {
    std::vector<double> rowMax(static_cast<size_t>(rows * heads), -INFINITY),
        rowSum(rowMax.size(), 0.0), acc(static_cast<size_t>(rows * width), 0.0);
    attentionBlockForward(q.data(), k1.data(), v1.data(), queries.data(), first.data(), batch,
                          local, local, heads, kvHeads, headDim, rowMax.data(), rowSum.data(),
                          acc.data());
    attentionBlockForward(q.data(), k2.data(), v2.data(), queries.data(), second.data(), batch,
                          local, local, heads, kvHeads, headDim, rowMax.data(), rowSum.data(),
                          acc.data());
    attentionBlockFinish(rowMax.data(), rowSum.data(), acc.data(), out.data(), lse.data(), rows,
                         heads, headDim);
    return dot(weight, out);
  };
  loss();
  std::vector<double> delta(static_cast<size_t>(rows * heads));
  attentionBlockDelta(out.data(), weight.data(), delta.data(), rows, heads, headDim);
  std::vector<float> dq(q.size(), 0.0f), dk1(k1.size(), 0.0f), dv1(v1.size(), 0.0f),
      dk2(k2.size(), 0.0f), dv2(v2.size(), 0.0f);
  attentionBlockBackward(q.data(), k1.data(), v1.data(), weight.data(), lse.data(), delta.data(),
                         queries.data(), first.data(), batch, local, local, heads, kvHeads, headDim,
                         dq.data(), dk1.data(), dv1.data());
  attentionBlockBackward(q.data(), k2.data(), v2.data(), weight.data(), lse.data(), delta.data(),
                         queries.data(), second.data(), batch, local, local, heads, kvHeads,
                         headDim, dq.data(), dk2.data(), dv2.data());
  expectGradient(q, dq, loss, "dq");
  expectGradient(k1, dk1, loss, "dk of the first block");
  expectGradient(v1, dv1, loss, "dv of the first block");
  expectGradient(k2, dk2, loss, "dk of the second block");
  expectGradient(v2, dv2, loss, "dv of the second block");
  // Keys after every query (positions 10 and 11) get no gradient.
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j : {2, 3}) // positions 10 and 11
      for (int64_t c = 0; c < kvWidth; ++c) {
        EXPECT_EQ(dk2[(b * local + j) * kvWidth + c], 0.0f);
        EXPECT_EQ(dv2[(b * local + j) * kvWidth + c], 0.0f);
      }
}

TEST(GptKernels, EmbeddingSplitInTwoEqualsUnsplit) {
  const int64_t rows = 6, seq = 3, hidden = 4, vocab = 8;
  std::vector<int32_t> tokens = {0, 7, 3, 4, 4, 1};
  std::vector<float> table = randomVector(vocab * hidden, 13),
                     positions = randomVector(seq * hidden, 14);
  std::vector<float> whole(rows * hidden);
  embeddingForward(tokens.data(), table.data(), positions.data(), whole.data(), rows, seq, hidden,
                   0, vocab);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < hidden; ++c)
      EXPECT_FLOAT_EQ(whole[r * hidden + c],
                      table[tokens[r] * hidden + c] + positions[(r % seq) * hidden + c]);
  // Two vocabulary halves: positions on the first only, partial rows summed.
  std::vector<float> first(rows * hidden), second(rows * hidden);
  embeddingForward(tokens.data(), table.data(), positions.data(), first.data(), rows, seq, hidden,
                   0, vocab / 2);
  embeddingForward(tokens.data(), table.data() + vocab / 2 * hidden, nullptr, second.data(), rows,
                   seq, hidden, vocab / 2, vocab / 2);
  for (int64_t i = 0; i < rows * hidden; ++i)
    EXPECT_FLOAT_EQ(first[i] + second[i], whole[i]);

  // Backward: dtable rows are the sums of the rows of their tokens; halves agree with unsplit.
  std::vector<float> dout = randomVector(rows * hidden, 15);
  std::vector<float> dtable(vocab * hidden, 0.0f), dpos(seq * hidden, 0.0f);
  embeddingBackward(tokens.data(), dout.data(), dtable.data(), dpos.data(), rows, seq, hidden, 0,
                    vocab);
  for (int64_t c = 0; c < hidden; ++c) {
    EXPECT_FLOAT_EQ(dtable[4 * hidden + c], dout[3 * hidden + c] + dout[4 * hidden + c]);
    EXPECT_FLOAT_EQ(dtable[2 * hidden + c], 0.0f);
    EXPECT_FLOAT_EQ(dpos[1 * hidden + c], dout[1 * hidden + c] + dout[4 * hidden + c]);
  }
  std::vector<float> dsplit(vocab * hidden, 0.0f);
  embeddingBackward(tokens.data(), dout.data(), dsplit.data(), nullptr, rows, seq, hidden, 0,
                    vocab / 2);
  embeddingBackward(tokens.data(), dout.data(), dsplit.data() + vocab / 2 * hidden, nullptr, rows,
                    seq, hidden, vocab / 2, vocab / 2);
  for (int64_t i = 0; i < vocab * hidden; ++i)
    EXPECT_FLOAT_EQ(dsplit[i], dtable[i]);
}

/// Runs the three cross-entropy steps over `pieces` vocabulary pieces, combining the partials as
/// the tensor-parallel reductions would (max, then sums). Returns the loss; fills dlogits.
double crossEntropySplit(const std::vector<float> &logits, const std::vector<int32_t> &targets,
                         std::vector<float> &dlogits, int64_t rows, int64_t vocab, int pieces,
                         double scale) {
  const int64_t local = vocab / pieces;
  std::vector<std::vector<float>> slices(pieces, std::vector<float>(rows * local));
  for (int p = 0; p < pieces; ++p)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < local; ++c)
        slices[p][r * local + c] = logits[r * vocab + p * local + c];
  std::vector<float> rowMax(rows, -INFINITY), partMax(rows);
  for (int p = 0; p < pieces; ++p) {
    crossEntropyRowMax(slices[p].data(), partMax.data(), rows, local);
    for (int64_t r = 0; r < rows; ++r)
      rowMax[r] = std::max(rowMax[r], partMax[r]);
  }
  std::vector<float> sumExp(rows, 0.0f), target(rows, 0.0f), partSum(rows), partTarget(rows);
  for (int p = 0; p < pieces; ++p) {
    crossEntropyPartials(slices[p].data(), targets.data(), rowMax.data(), partSum.data(),
                         partTarget.data(), rows, local, p * local);
    for (int64_t r = 0; r < rows; ++r) {
      sumExp[r] += partSum[r];
      target[r] += partTarget[r];
    }
  }
  double loss = 0;
  dlogits.assign(rows * vocab, 0.0f);
  std::vector<float> dslice(rows * local);
  for (int p = 0; p < pieces; ++p) {
    double pieceLoss =
        crossEntropyLossAndGrad(slices[p].data(), targets.data(), rowMax.data(), sumExp.data(),
                                target.data(), dslice.data(), rows, local, p * local, scale);
    if (p == 0) {
      loss = pieceLoss; // every piece computes the same total from the reduced partials
    } else {
      EXPECT_DOUBLE_EQ(pieceLoss, loss);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < local; ++c)
        dlogits[r * vocab + p * local + c] = dslice[r * local + c];
  }
  return loss;
}

TEST(GptKernels, CrossEntropyMatchesLogSoftmax) {
  const int64_t rows = 4, vocab = 6;
  std::vector<float> logits = randomVector(rows * vocab, 16, 3.0f);
  std::vector<int32_t> targets = {5, 0, 2, 3};
  std::vector<float> dlogits;
  double scale = 1.0 / rows;
  double loss = crossEntropySplit(logits, targets, dlogits, rows, vocab, 1, scale);
  double expected = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (int64_t c = 0; c < vocab; ++c)
      total += std::exp(static_cast<double>(logits[r * vocab + c]));
    expected += -(logits[r * vocab + targets[r]] - std::log(total)) * scale;
  }
  EXPECT_NEAR(loss, expected, 1e-6);
  auto f = [&] {
    std::vector<float> unused;
    return crossEntropySplit(logits, targets, unused, rows, vocab, 1, scale);
  };
  expectGradient(logits, dlogits, f, "dlogits");
}

TEST(GptKernels, CrossEntropySplitInTwoEqualsUnsplit) {
  const int64_t rows = 5, vocab = 8;
  std::vector<float> logits = randomVector(rows * vocab, 17, 4.0f);
  // Targets in both halves, and the largest logit of some rows in the half without the target.
  std::vector<int32_t> targets = {0, 7, 3, 4, 6};
  logits[0 * vocab + 6] = 9.0f;
  logits[1 * vocab + 1] = 9.0f;
  std::vector<float> whole, split;
  double lossWhole = crossEntropySplit(logits, targets, whole, rows, vocab, 1, 0.5);
  double lossSplit = crossEntropySplit(logits, targets, split, rows, vocab, 2, 0.5);
  EXPECT_NEAR(lossSplit, lossWhole, 1e-6);
  for (int64_t i = 0; i < rows * vocab; ++i)
    EXPECT_NEAR(split[i], whole[i], 1e-7);
}

TEST(GptKernels, RmsNormBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 6;
  std::vector<float> x = randomVector(rows * cols, 30, 2.0f), gamma = randomVector(cols, 31);
  std::vector<float> weight = randomVector(rows * cols, 32);
  std::vector<float> y(rows * cols), rstd(rows);
  auto loss = [&] {
    rmsNormForward(x.data(), gamma.data(), y.data(), rstd.data(), rows, cols, 1e-5f);
    return dot(weight, y);
  };
  loss();
  // The forward: mean of y² / γ² is 1 (up to ε) for each row.
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c)
      sq += std::pow(y[r * cols + c] / gamma[c], 2);
    EXPECT_NEAR(sq / cols, 1.0, 1e-3);
  }
  std::vector<float> dx(rows * cols), dgamma(cols, 0.0f);
  rmsNormBackward(x.data(), gamma.data(), rstd.data(), weight.data(), dx.data(), dgamma.data(),
                  rows, cols);
  expectGradient(x, dx, loss, "dx");
  expectGradient(gamma, dgamma, loss, "dgamma");
}

TEST(GptKernels, SwigluBackwardMatchesFiniteDifferences) {
  const int64_t n = 10;
  std::vector<float> gate = randomVector(n, 33, 3.0f), up = randomVector(n, 34, 2.0f);
  std::vector<float> weight = randomVector(n, 35), out(n);
  auto loss = [&] {
    swigluForward(gate.data(), up.data(), out.data(), n);
    return dot(weight, out);
  };
  loss();
  // silu(a) = a / (1 + e^−a): silu(0) = 0, silu(a) → a for large a.
  std::vector<float> a = {0.0f, 20.0f}, one = {1.0f, 1.0f}, silu(2);
  swigluForward(a.data(), one.data(), silu.data(), 2);
  EXPECT_EQ(silu[0], 0.0f);
  EXPECT_NEAR(silu[1], 20.0f, 1e-6);
  std::vector<float> dgate(n), dup(n);
  swigluBackward(gate.data(), up.data(), weight.data(), dgate.data(), dup.data(), n);
  expectGradient(gate, dgate, loss, "dgate");
  expectGradient(up, dup, loss, "dup");
}

TEST(GptKernels, RopeRotatesPairsAndInvertsItself) {
  const int64_t rows = 6, seq = 3, heads = 2, headDim = 4, n = rows * heads * headDim;
  std::vector<float> x = randomVector(n, 36), rotated = x;
  ropeApply(rotated.data(), rows, seq, heads, headDim, false);
  // Position 0 (rows 0 and 3) is not rotated; other rows keep each pair's length.
  for (int64_t c = 0; c < heads * headDim; ++c) {
    EXPECT_EQ(rotated[c], x[c]);
    EXPECT_EQ(rotated[3 * heads * headDim + c], x[3 * heads * headDim + c]);
  }
  for (int64_t i = 0; i < n; i += 2)
    EXPECT_NEAR(std::hypot(rotated[i], rotated[i + 1]), std::hypot(x[i], x[i + 1]), 1e-6);
  // Row 1 (position 1), head 0, pair 0: the angle is 1 radian.
  const float *before = x.data() + heads * headDim, *after = rotated.data() + heads * headDim;
  EXPECT_NEAR(after[0], before[0] * std::cos(1.0) - before[1] * std::sin(1.0), 1e-6);
  EXPECT_NEAR(after[1], before[0] * std::sin(1.0) + before[1] * std::cos(1.0), 1e-6);
  // The inverse rotation is the transpose: applied after the forward it gives x back, and it is
  // the backward (⟨w, R x⟩ = ⟨Rᵀ w, x⟩).
  std::vector<float> back = rotated;
  ropeApply(back.data(), rows, seq, heads, headDim, true);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(back[i], x[i], 1e-6);
  std::vector<float> w = randomVector(n, 37), wBack = w;
  ropeApply(wBack.data(), rows, seq, heads, headDim, true);
  EXPECT_NEAR(dot(w, rotated), dot(wBack, x), 1e-5);
}

TEST(GptKernels, PositionsOfAContextRankAreThoseOfTheWholeSequence) {
  // A context rank's rows at their global positions: rotary positions and learned positions give
  // what the whole sequence gives at those rows.
  const int64_t batch = 2, seq = 8, heads = 2, headDim = 4, hidden = 6, vocab = 5;
  const int64_t width = heads * headDim;
  std::vector<float> x = randomVector(batch * seq * width, 60), whole = x;
  ropeApply(whole.data(), batch * seq, seq, heads, headDim, false);
  std::vector<int32_t> tokens(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 3) % vocab);
  std::vector<float> table = randomVector(vocab * hidden, 61),
                     learned = randomVector(seq * hidden, 62);
  std::vector<float> embedded(static_cast<size_t>(batch * seq * hidden));
  embeddingForward(tokens.data(), table.data(), learned.data(), embedded.data(), batch * seq, seq,
                   hidden, 0, vocab);
  for (int64_t rank = 0; rank < 2; ++rank) {
    std::vector<int64_t> positions = balancedPositions(seq, 2, rank), rowPositions;
    std::vector<int32_t> localTokens;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p : positions) {
        rowPositions.push_back(p);
        localTokens.push_back(tokens[static_cast<size_t>(b * seq + p)]);
      }
    const int64_t rows = static_cast<int64_t>(rowPositions.size());
    std::vector<float> local = takeRows(x, positions, batch, seq, width);
    ropeApply(local.data(), rows, seq, heads, headDim, false, rowPositions.data());
    EXPECT_EQ(local, takeRows(whole, positions, batch, seq, width)) << "rank " << rank;
    ropeApply(local.data(), rows, seq, heads, headDim, true, rowPositions.data());
    std::vector<float> back = takeRows(x, positions, batch, seq, width);
    for (size_t i = 0; i < back.size(); ++i)
      EXPECT_NEAR(local[i], back[i], 1e-6);
    std::vector<float> localEmbedded(static_cast<size_t>(rows * hidden));
    embeddingForward(localTokens.data(), table.data(), learned.data(), localEmbedded.data(), rows,
                     seq, hidden, 0, vocab, rowPositions.data());
    EXPECT_EQ(localEmbedded, takeRows(embedded, positions, batch, seq, hidden)) << "rank " << rank;
    // The positions' gradient goes to the global rows.
    std::vector<float> dout(static_cast<size_t>(rows * hidden), 1.0f);
    std::vector<float> dtable(vocab * hidden, 0.0f), dlearned(seq * hidden, 0.0f);
    embeddingBackward(localTokens.data(), dout.data(), dtable.data(), dlearned.data(), rows, seq,
                      hidden, 0, vocab, rowPositions.data());
    for (int64_t p = 0; p < seq; ++p) {
      bool mine = std::find(positions.begin(), positions.end(), p) != positions.end();
      EXPECT_EQ(dlearned[p * hidden], mine ? static_cast<float>(batch) : 0.0f) << "position " << p;
    }
  }
}

TEST(GptKernels, AdamFollowsItsFormula) {
  const int64_t n = 5;
  std::vector<float> master = randomVector(n, 18), m = randomVector(n, 19, 0.1f);
  std::vector<float> v = randomVector(n, 20, 0.1f), grad = randomVector(n, 21);
  for (float &value : v)
    value = std::fabs(value);
  const float lr = 1e-2f;
  const int64_t t = 3;
  std::vector<double> expected(n), expectedM(n), expectedV(n);
  for (int64_t i = 0; i < n; ++i) {
    expectedM[i] = 0.9 * m[i] + 0.1 * grad[i];
    expectedV[i] = 0.999 * v[i] + 0.001 * grad[i] * grad[i];
    double mHat = expectedM[i] / (1 - 0.9 * 0.9 * 0.9);
    double vHat = expectedV[i] / (1 - 0.999 * 0.999 * 0.999);
    expected[i] = master[i] - lr * mHat / (std::sqrt(vHat) + 1e-8);
  }
  adamUpdate(master.data(), grad.data(), m.data(), v.data(), n, t, lr);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(m[i], expectedM[i], 1e-7);
    EXPECT_NEAR(v[i], expectedV[i], 1e-7);
    EXPECT_NEAR(master[i], expected[i], 1e-6);
  }
  // The first step moves every weight by about the learning rate against its gradient's sign.
  std::vector<float> w(n, 0.0f), m0(n, 0.0f), v0(n, 0.0f);
  adamUpdate(w.data(), grad.data(), m0.data(), v0.data(), n, 1, lr);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(w[i], grad[i] > 0 ? -lr : lr, 1e-5);
}

} // namespace
