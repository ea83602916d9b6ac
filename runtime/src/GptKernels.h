// The fp32 CPU kernels of the GPT transformer (GPT-2 layout: learned positions, pre-LayerNorm,
// causal multi-head or grouped-query attention, GELU MLP, tied or untied output, cross-entropy).
// They are the reference: the trainer computes with them on the CPU, and the CUDA kernels
// (runtime/cuda) are checked against them. Row-major throughout; a token row is one (sequence,
// position) pair, rows ordered batch-major ([batch, seq] flattened). GEMMs go through Kernels
// (Kernels.h).
#ifndef PLACERT_SRC_GPTKERNELS_H
#define PLACERT_SRC_GPTKERNELS_H

#include <cstdint>

namespace placert {
namespace gpt {

/// y[r, :] = (x[r, :] − mean) · rstd · gamma + beta over `cols`; saves mean[r] and rstd[r].
void layerNormForward(const float *x, const float *gamma, const float *beta, float *y, float *mean,
                      float *rstd, int64_t rows, int64_t cols, float epsilon);
/// dx = ∂L/∂x (overwritten); dgamma and dbeta are accumulated (+=).
void layerNormBackward(const float *x, const float *gamma, const float *mean, const float *rstd,
                       const float *dy, float *dx, float *dgamma, float *dbeta, int64_t rows,
                       int64_t cols);

/// Causal softmax attention with grouped queries (Ainslie et al. 2023). q and out are
/// [batch · seq, heads · headDim] (head h in columns h·headDim ..), k and v [batch · seq, kvHeads ·
/// headDim]; query head h attends with key/value head h / (heads / kvHeads) (contiguous groups;
/// kvHeads = heads is multi-head attention, 1 multi-query). Scores scaled by 1/√headDim, position
/// i attends to positions ≤ i. `probs` [batch, heads, seq, seq] receives the softmax (zeros above
/// the diagonal) for the backward.
void attentionForward(const float *q, const float *k, const float *v, float *out, float *probs,
                      int64_t batch, int64_t seq, int64_t heads, int64_t kvHeads, int64_t headDim);
/// dq, dk, dv (overwritten) from dout and the saved probabilities; dk and dv of a key/value head
/// sum the contributions of every query head of its group.
void attentionBackward(const float *q, const float *k, const float *v, const float *probs,
                       const float *dout, float *dq, float *dk, float *dv, int64_t batch,
                       int64_t seq, int64_t heads, int64_t kvHeads, int64_t headDim);

/// Multi-head attention: q, k, v and out all [batch · seq, heads · headDim].
inline void attentionForward(const float *q, const float *k, const float *v, float *out,
                             float *probs, int64_t batch, int64_t seq, int64_t heads,
                             int64_t headDim) {
  attentionForward(q, k, v, out, probs, batch, seq, heads, heads, headDim);
}
inline void attentionBackward(const float *q, const float *k, const float *v, const float *probs,
                              const float *dout, float *dq, float *dk, float *dv, int64_t batch,
                              int64_t seq, int64_t heads, int64_t headDim) {
  attentionBackward(q, k, v, probs, dout, dq, dk, dv, batch, seq, heads, heads, headDim);
}

/// out[r, :] = table[tokens[r] − vocabOffset, :] when the token is in [vocabOffset, vocabOffset +
/// vocabLocal), zero otherwise (vocabulary-parallel embedding; the partial rows are summed over
/// the tensor axes), plus positions[r mod seq, :] when `positions` is not null.
void embeddingForward(const int32_t *tokens, const float *table, const float *positions, float *out,
                      int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                      int64_t vocabLocal);
/// dtable[tokens[r] − vocabOffset, :] += dout[r, :] for the local tokens; dpositions[r mod seq, :]
/// += dout[r, :] when not null.
void embeddingBackward(const int32_t *tokens, const float *dout, float *dtable, float *dpositions,
                       int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                       int64_t vocabLocal);

/// Vocabulary-parallel cross-entropy (Megatron-LM's), in three steps around the tensor-parallel
/// reductions. `logits` is [rows, vocabLocal], columns vocabOffset .. of the vocabulary.
/// 1. rowMax[r] = max over the local columns (the caller takes the max over the tensor axes).
void crossEntropyRowMax(const float *logits, float *rowMax, int64_t rows, int64_t vocabLocal);
/// 2. sumExp[r] = Σ exp(logit − rowMax[r]) over the local columns, targetLogit[r] = the target's
///    logit − rowMax[r] when the target is local, else 0 (the caller sums both over the axes).
void crossEntropyPartials(const float *logits, const int32_t *targets, const float *rowMax,
                          float *sumExp, float *targetLogit, int64_t rows, int64_t vocabLocal,
                          int64_t vocabOffset);
/// 3. Returns Σ_r (log sumExp[r] − targetLogit[r]) · scale and writes
///    dlogits = (softmax − onehot(target)) · scale for the local columns.
double crossEntropyLossAndGrad(const float *logits, const int32_t *targets, const float *rowMax,
                               const float *sumExp, const float *targetLogit, float *dlogits,
                               int64_t rows, int64_t vocabLocal, int64_t vocabOffset, double scale);

/// RMSNorm (Zhang & Sennrich 2019): y[r, :] = x[r, :] · rstd · gamma with rstd = 1/√(mean(x²) +
/// epsilon); saves rstd[r].
void rmsNormForward(const float *x, const float *gamma, float *y, float *rstd, int64_t rows,
                    int64_t cols, float epsilon);
/// dx = ∂L/∂x (overwritten); dgamma is accumulated (+=).
void rmsNormBackward(const float *x, const float *gamma, const float *rstd, const float *dy,
                     float *dx, float *dgamma, int64_t rows, int64_t cols);

/// SwiGLU (Shazeer 2020): out = silu(gate) · up, element by element.
void swigluForward(const float *gate, const float *up, float *out, int64_t n);
/// dgate and dup (overwritten) from dout.
void swigluBackward(const float *gate, const float *up, const float *dout, float *dgate, float *dup,
                    int64_t n);

/// Rotary position embedding (Su et al. 2021) in place on x [rows, heads · headDim], rows ordered
/// [batch, seq]: each pair (2i, 2i + 1) of a head at position p = row mod seq is rotated by
/// p · 10000^(−2i/headDim). `inverse` rotates back (the backward of the forward rotation).
void ropeApply(float *x, int64_t rows, int64_t seq, int64_t heads, int64_t headDim, bool inverse);

/// Fused Adam on fp32 master weights (β1 0.9, β2 0.999, ε 1e-8, bias correction at step t ≥ 1):
/// updates master, m and v in place from grad.
void adamUpdate(float *master, const float *grad, float *m, float *v, int64_t n, int64_t t,
                float learningRate);

} // namespace gpt
} // namespace placert

#endif // PLACERT_SRC_GPTKERNELS_H
