// The fp32 CPU kernels of the GPT transformer: layer normalization, causal multi-head and
// grouped-query attention, the vocabulary-parallel embedding and cross-entropy, and fused Adam.
// Sums accumulate in double.
#include "GptKernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace placert {
namespace gpt {

void layerNormForward(const float *x, const float *gamma, const float *beta, float *y, float *mean,
                      float *rstd, int64_t rows, int64_t cols, float epsilon) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols;
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c)
      sum += xr[c];
    double mu = sum / static_cast<double>(cols);
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) {
      double d = xr[c] - mu;
      sq += d * d;
    }
    double variance = sq / static_cast<double>(cols);
    double s = 1.0 / std::sqrt(variance + epsilon);
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(s);
    float *yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      yr[c] = static_cast<float>((xr[c] - mu) * s * gamma[c] + beta[c]);
  }
}

void layerNormBackward(const float *x, const float *gamma, const float *mean, const float *rstd,
                       const float *dy, float *dx, float *dgamma, float *dbeta, int64_t rows,
                       int64_t cols) {
  // With x̂ = (x − μ)·s and g = dy·γ: dx = s · (g − mean(g) − x̂ · mean(g · x̂)).
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols;
    const float *dyr = dy + r * cols;
    double mu = mean[r], s = rstd[r];
    double sumG = 0, sumGX = 0;
    for (int64_t c = 0; c < cols; ++c) {
      double xhat = (xr[c] - mu) * s;
      double g = static_cast<double>(dyr[c]) * gamma[c];
      sumG += g;
      sumGX += g * xhat;
      dgamma[c] += static_cast<float>(dyr[c] * xhat);
      dbeta[c] += dyr[c];
    }
    double meanG = sumG / static_cast<double>(cols), meanGX = sumGX / static_cast<double>(cols);
    float *dxr = dx + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      double xhat = (xr[c] - mu) * s;
      double g = static_cast<double>(dyr[c]) * gamma[c];
      dxr[c] = static_cast<float>(s * (g - meanG - xhat * meanGX));
    }
  }
}

void attentionForward(const float *q, const float *k, const float *v, float *out, float *probs,
                      int64_t batch, int64_t seq, int64_t heads, int64_t kvHeads, int64_t headDim) {
  const int64_t width = heads * headDim, kvWidth = kvHeads * headDim, group = heads / kvHeads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(headDim));
  std::vector<double> scores(static_cast<size_t>(seq));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvColumn = (h / group) * headDim;
      for (int64_t i = 0; i < seq; ++i) {
        const float *qi = q + (b * seq + i) * width + h * headDim;
        double maxScore = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          const float *kj = k + (b * seq + j) * kvWidth + kvColumn;
          double dot = 0;
          for (int64_t d = 0; d < headDim; ++d)
            dot += static_cast<double>(qi[d]) * kj[d];
          scores[j] = dot * scale;
          maxScore = std::max(maxScore, scores[j]);
        }
        double total = 0;
        for (int64_t j = 0; j <= i; ++j) {
          scores[j] = std::exp(scores[j] - maxScore);
          total += scores[j];
        }
        float *p = probs + ((b * heads + h) * seq + i) * seq;
        for (int64_t j = 0; j < seq; ++j)
          p[j] = j <= i ? static_cast<float>(scores[j] / total) : 0.0f;
        float *oi = out + (b * seq + i) * width + h * headDim;
        for (int64_t d = 0; d < headDim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j)
            acc += static_cast<double>(p[j]) * v[(b * seq + j) * kvWidth + kvColumn + d];
          oi[d] = static_cast<float>(acc);
        }
      }
    }
}

void attentionBackward(const float *q, const float *k, const float *v, const float *probs,
                       const float *dout, float *dq, float *dk, float *dv, int64_t batch,
                       int64_t seq, int64_t heads, int64_t kvHeads, int64_t headDim) {
  const int64_t width = heads * headDim, kvWidth = kvHeads * headDim, group = heads / kvHeads;
  std::fill(dq, dq + batch * seq * width, 0.0f);
  std::fill(dk, dk + batch * seq * kvWidth, 0.0f);
  std::fill(dv, dv + batch * seq * kvWidth, 0.0f);
  const double scale = 1.0 / std::sqrt(static_cast<double>(headDim));
  std::vector<double> dp(static_cast<size_t>(seq));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      // The key/value head of query head h: its dk and dv gather the whole group's terms.
      const int64_t kvColumn = (h / group) * headDim;
      for (int64_t i = 0; i < seq; ++i) {
        const float *p = probs + ((b * heads + h) * seq + i) * seq;
        const float *doi = dout + (b * seq + i) * width + h * headDim;
        // dP[j] = dout_i · v_j; dV_j += P[j] · dout_i.
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const float *vj = v + (b * seq + j) * kvWidth + kvColumn;
          float *dvj = dv + (b * seq + j) * kvWidth + kvColumn;
          double acc = 0;
          for (int64_t d = 0; d < headDim; ++d) {
            acc += static_cast<double>(doi[d]) * vj[d];
            dvj[d] += p[j] * doi[d];
          }
          dp[j] = acc;
          dot += acc * p[j];
        }
        // Softmax backward: dS[j] = P[j] (dP[j] − Σ P·dP), scores = q·k · scale.
        const float *qi = q + (b * seq + i) * width + h * headDim;
        float *dqi = dq + (b * seq + i) * width + h * headDim;
        for (int64_t j = 0; j <= i; ++j) {
          double ds = p[j] * (dp[j] - dot) * scale;
          const float *kj = k + (b * seq + j) * kvWidth + kvColumn;
          float *dkj = dk + (b * seq + j) * kvWidth + kvColumn;
          for (int64_t d = 0; d < headDim; ++d) {
            dqi[d] += static_cast<float>(ds * kj[d]);
            dkj[d] += static_cast<float>(ds * qi[d]);
          }
        }
      }
    }
}

void attentionBlockForward(const float *q, const float *k, const float *v,
                           const int64_t *qPositions, const int64_t *kPositions, int64_t batch,
                           int64_t qSeq, int64_t kSeq, int64_t heads, int64_t kvHeads,
                           int64_t headDim, double *rowMax, double *rowSum, double *acc) {
  const int64_t width = heads * headDim, kvWidth = kvHeads * headDim, group = heads / kvHeads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(headDim));
  std::vector<double> scores(static_cast<size_t>(kSeq));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < qSeq; ++i) {
      const int64_t row = b * qSeq + i;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kvColumn = (h / group) * headDim;
        const float *qi = q + row * width + h * headDim;
        double blockMax = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < kSeq; ++j) {
          if (kPositions[j] > qPositions[i])
            continue;
          const float *kj = k + (b * kSeq + j) * kvWidth + kvColumn;
          double dot = 0;
          for (int64_t d = 0; d < headDim; ++d)
            dot += static_cast<double>(qi[d]) * kj[d];
          scores[j] = dot * scale;
          blockMax = std::max(blockMax, scores[j]);
        }
        if (blockMax == -std::numeric_limits<double>::infinity())
          continue; // every key of the block is in this query's future
        double &m = rowMax[row * heads + h], &l = rowSum[row * heads + h];
        double *a = acc + row * width + h * headDim;
        // Rescale what the earlier blocks summed to the new maximum, then add this block.
        double newMax = std::max(m, blockMax), rescale = std::exp(m - newMax);
        l *= rescale;
        for (int64_t d = 0; d < headDim; ++d)
          a[d] *= rescale;
        for (int64_t j = 0; j < kSeq; ++j) {
          if (kPositions[j] > qPositions[i])
            continue;
          double weight = std::exp(scores[j] - newMax);
          l += weight;
          const float *vj = v + (b * kSeq + j) * kvWidth + kvColumn;
          for (int64_t d = 0; d < headDim; ++d)
            a[d] += weight * vj[d];
        }
        m = newMax;
      }
    }
}

void attentionBlockFinish(const double *rowMax, const double *rowSum, const double *acc, float *out,
                          double *lse, int64_t rows, int64_t heads, int64_t headDim) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      double l = rowSum[r * heads + h];
      lse[r * heads + h] = rowMax[r * heads + h] + std::log(l);
      for (int64_t d = 0; d < headDim; ++d) {
        int64_t e = (r * heads + h) * headDim + d;
        out[e] = static_cast<float>(acc[e] / l);
      }
    }
}

void attentionBlockDelta(const float *out, const float *dout, double *delta, int64_t rows,
                         int64_t heads, int64_t headDim) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      double sum = 0;
      for (int64_t d = 0; d < headDim; ++d) {
        int64_t e = (r * heads + h) * headDim + d;
        sum += static_cast<double>(out[e]) * dout[e];
      }
      delta[r * heads + h] = sum;
    }
}

void attentionBlockBackward(const float *q, const float *k, const float *v, const float *dout,
                            const double *lse, const double *delta, const int64_t *qPositions,
                            const int64_t *kPositions, int64_t batch, int64_t qSeq, int64_t kSeq,
                            int64_t heads, int64_t kvHeads, int64_t headDim, float *dq, float *dk,
                            float *dv) {
  const int64_t width = heads * headDim, kvWidth = kvHeads * headDim, group = heads / kvHeads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(headDim));
  std::vector<double> dqi(static_cast<size_t>(headDim));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < qSeq; ++i) {
      const int64_t row = b * qSeq + i;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kvColumn = (h / group) * headDim;
        const float *qi = q + row * width + h * headDim;
        const float *doi = dout + row * width + h * headDim;
        const double rowLse = lse[row * heads + h], rowDelta = delta[row * heads + h];
        std::fill(dqi.begin(), dqi.end(), 0.0);
        for (int64_t j = 0; j < kSeq; ++j) {
          if (kPositions[j] > qPositions[i])
            continue;
          const float *kj = k + (b * kSeq + j) * kvWidth + kvColumn;
          const float *vj = v + (b * kSeq + j) * kvWidth + kvColumn;
          float *dkj = dk + (b * kSeq + j) * kvWidth + kvColumn;
          float *dvj = dv + (b * kSeq + j) * kvWidth + kvColumn;
          double dot = 0, dp = 0;
          for (int64_t d = 0; d < headDim; ++d) {
            dot += static_cast<double>(qi[d]) * kj[d];
            dp += static_cast<double>(doi[d]) * vj[d];
          }
          // P = exp(score − lse); dV += P · dout; dS = P · (dP − delta), scores = q · k · scale.
          double p = std::exp(dot * scale - rowLse), ds = p * (dp - rowDelta) * scale;
          for (int64_t d = 0; d < headDim; ++d) {
            dvj[d] += static_cast<float>(p * doi[d]);
            dkj[d] += static_cast<float>(ds * qi[d]);
            dqi[static_cast<size_t>(d)] += ds * kj[d];
          }
        }
        float *dqRow = dq + row * width + h * headDim;
        for (int64_t d = 0; d < headDim; ++d)
          dqRow[d] += static_cast<float>(dqi[static_cast<size_t>(d)]);
      }
    }
}

void embeddingForward(const int32_t *tokens, const float *table, const float *positions, float *out,
                      int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                      int64_t vocabLocal, const int64_t *rowPositions) {
  for (int64_t r = 0; r < rows; ++r) {
    float *o = out + r * hidden;
    int64_t local = static_cast<int64_t>(tokens[r]) - vocabOffset;
    bool mine = local >= 0 && local < vocabLocal;
    int64_t position = rowPositions ? rowPositions[r] : r % seq;
    const float *p = positions ? positions + position * hidden : nullptr;
    for (int64_t c = 0; c < hidden; ++c)
      o[c] = (mine ? table[local * hidden + c] : 0.0f) + (p ? p[c] : 0.0f);
  }
}

void embeddingBackward(const int32_t *tokens, const float *dout, float *dtable, float *dpositions,
                       int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                       int64_t vocabLocal, const int64_t *rowPositions) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *d = dout + r * hidden;
    int64_t local = static_cast<int64_t>(tokens[r]) - vocabOffset;
    if (local >= 0 && local < vocabLocal)
      for (int64_t c = 0; c < hidden; ++c)
        dtable[local * hidden + c] += d[c];
    int64_t position = rowPositions ? rowPositions[r] : r % seq;
    if (dpositions)
      for (int64_t c = 0; c < hidden; ++c)
        dpositions[position * hidden + c] += d[c];
  }
}

void crossEntropyRowMax(const float *logits, float *rowMax, int64_t rows, int64_t vocabLocal) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *l = logits + r * vocabLocal;
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < vocabLocal; ++c)
      best = std::max(best, l[c]);
    rowMax[r] = best;
  }
}

void crossEntropyPartials(const float *logits, const int32_t *targets, const float *rowMax,
                          float *sumExp, float *targetLogit, int64_t rows, int64_t vocabLocal,
                          int64_t vocabOffset) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *l = logits + r * vocabLocal;
    double total = 0;
    for (int64_t c = 0; c < vocabLocal; ++c)
      total += std::exp(static_cast<double>(l[c]) - rowMax[r]);
    sumExp[r] = static_cast<float>(total);
    int64_t local = static_cast<int64_t>(targets[r]) - vocabOffset;
    targetLogit[r] = local >= 0 && local < vocabLocal ? l[local] - rowMax[r] : 0.0f;
  }
}

double crossEntropyLossAndGrad(const float *logits, const int32_t *targets, const float *rowMax,
                               const float *sumExp, const float *targetLogit, float *dlogits,
                               int64_t rows, int64_t vocabLocal, int64_t vocabOffset,
                               double scale) {
  double loss = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float *l = logits + r * vocabLocal;
    float *dl = dlogits + r * vocabLocal;
    double total = sumExp[r];
    loss += (std::log(total) - targetLogit[r]) * scale;
    int64_t local = static_cast<int64_t>(targets[r]) - vocabOffset;
    for (int64_t c = 0; c < vocabLocal; ++c) {
      double softmax = std::exp(static_cast<double>(l[c]) - rowMax[r]) / total;
      dl[c] = static_cast<float>((softmax - (c == local ? 1.0 : 0.0)) * scale);
    }
  }
  return loss;
}

void rmsNormForward(const float *x, const float *gamma, float *y, float *rstd, int64_t rows,
                    int64_t cols, float epsilon) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols;
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c)
      sq += static_cast<double>(xr[c]) * xr[c];
    double s = 1.0 / std::sqrt(sq / static_cast<double>(cols) + epsilon);
    rstd[r] = static_cast<float>(s);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = static_cast<float>(xr[c] * s * gamma[c]);
  }
}

void rmsNormBackward(const float *x, const float *gamma, const float *rstd, const float *dy,
                     float *dx, float *dgamma, int64_t rows, int64_t cols) {
  // With g = dy·γ: dx = s · (g − x · s² · mean(g · x)).
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols;
    const float *dyr = dy + r * cols;
    double s = rstd[r], sumGX = 0;
    for (int64_t c = 0; c < cols; ++c) {
      sumGX += static_cast<double>(dyr[c]) * gamma[c] * xr[c];
      dgamma[c] += static_cast<float>(dyr[c] * xr[c] * s);
    }
    double meanGX = sumGX / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] =
          static_cast<float>(s * (static_cast<double>(dyr[c]) * gamma[c] - xr[c] * s * s * meanGX));
  }
}

void swigluForward(const float *gate, const float *up, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double a = gate[i], sigmoid = 1.0 / (1.0 + std::exp(-a));
    out[i] = static_cast<float>(a * sigmoid * up[i]);
  }
}

void swigluBackward(const float *gate, const float *up, const float *dout, float *dgate, float *dup,
                    int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double a = gate[i], sigmoid = 1.0 / (1.0 + std::exp(-a));
    dup[i] = static_cast<float>(dout[i] * a * sigmoid);
    dgate[i] = static_cast<float>(dout[i] * up[i] * sigmoid * (1.0 + a * (1.0 - sigmoid)));
  }
}

void ropeApply(float *x, int64_t rows, int64_t seq, int64_t heads, int64_t headDim, bool inverse,
               const int64_t *rowPositions) {
  for (int64_t r = 0; r < rows; ++r) {
    double position = static_cast<double>(rowPositions ? rowPositions[r] : r % seq);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i + 1 < headDim; i += 2) {
        double angle =
            position * std::pow(10000.0, -static_cast<double>(i) / static_cast<double>(headDim));
        double c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
        float *pair = x + r * heads * headDim + h * headDim + i;
        double x0 = pair[0], x1 = pair[1];
        pair[0] = static_cast<float>(x0 * c - x1 * s);
        pair[1] = static_cast<float>(x0 * s + x1 * c);
      }
  }
}

void adamUpdate(float *master, const float *grad, float *m, float *v, int64_t n, int64_t t,
                float learningRate) {
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double correction1 = 1 - std::pow(beta1, static_cast<double>(t));
  double correction2 = 1 - std::pow(beta2, static_cast<double>(t));
  for (int64_t i = 0; i < n; ++i) {
    double g = grad[i];
    m[i] = static_cast<float>(beta1 * m[i] + (1 - beta1) * g);
    v[i] = static_cast<float>(beta2 * v[i] + (1 - beta2) * g * g);
    double mHat = m[i] / correction1, vHat = v[i] / correction2;
    master[i] = static_cast<float>(master[i] - learningRate * mHat / (std::sqrt(vHat) + eps));
  }
}

} // namespace gpt
} // namespace placert
