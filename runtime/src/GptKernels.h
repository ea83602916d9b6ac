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

/// Blockwise causal attention (the online softmax of Milakov & Gimelshein 2018 and
/// FlashAttention, over the key/value blocks of Ring Attention, Liu et al. 2023): adds one block
/// of keys and values to the running softmax of a block of queries. q is [batch · qSeq, heads ·
/// headDim], k and v [batch · kSeq, kvHeads · headDim], grouped as in attentionForward; query
/// row i of a sample attends to key row j of the same sample when kPositions[j] ≤ qPositions[i]
/// (global token positions, qSeq and kSeq of them). The running state of each query row and head
/// ([batch · qSeq, heads], `acc` × headDim) starts as rowMax = −∞, rowSum = 0, acc = 0; after a
/// block it holds the largest score m seen so far, Σ exp(score − m) and Σ exp(score − m) · v.
void attentionBlockForward(const float *q, const float *k, const float *v,
                           const int64_t *qPositions, const int64_t *kPositions, int64_t batch,
                           int64_t qSeq, int64_t kSeq, int64_t heads, int64_t kvHeads,
                           int64_t headDim, double *rowMax, double *rowSum, double *acc);
/// The attention output out = acc / rowSum ([rows, heads · headDim]) and each row and head's
/// log-sum-exp of the scores, lse = rowMax + log rowSum, which the backward needs.
void attentionBlockFinish(const double *rowMax, const double *rowSum, const double *acc, float *out,
                          double *lse, int64_t rows, int64_t heads, int64_t headDim);
/// delta[row, head] = Σ dout · out over the head's elements (= Σ_j P_ij · dP_ij, the softmax
/// backward's row term).
void attentionBlockDelta(const float *out, const float *dout, double *delta, int64_t rows,
                         int64_t heads, int64_t headDim);
/// The backward of one block from the saved lse and delta (probabilities recomputed as
/// exp(score − lse)): adds this block's terms to dq, and to dk, dv of the block (+=; the key/value
/// head of a group sums its query heads' terms). Layouts and positions as attentionBlockForward.
void attentionBlockBackward(const float *q, const float *k, const float *v, const float *dout,
                            const double *lse, const double *delta, const int64_t *qPositions,
                            const int64_t *kPositions, int64_t batch, int64_t qSeq, int64_t kSeq,
                            int64_t heads, int64_t kvHeads, int64_t headDim, float *dq, float *dk,
                            float *dv);

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
/// the tensor axes), plus positions[p, :] when `positions` is not null, with p the row's position
/// rowPositions[r], or r mod seq without them (context parallelism holds other positions).
void embeddingForward(const int32_t *tokens, const float *table, const float *positions, float *out,
                      int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                      int64_t vocabLocal, const int64_t *rowPositions = nullptr);
/// dtable[tokens[r] − vocabOffset, :] += dout[r, :] for the local tokens; dpositions[p, :] +=
/// dout[r, :] when not null, p as in embeddingForward.
void embeddingBackward(const int32_t *tokens, const float *dout, float *dtable, float *dpositions,
                       int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                       int64_t vocabLocal, const int64_t *rowPositions = nullptr);

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
/// [batch, seq]: each pair (2i, 2i + 1) of a head at position p = row mod seq (or
/// rowPositions[row] when given) is rotated by p · 10000^(−2i/headDim). `inverse` rotates back
/// (the backward of the forward rotation).
void ropeApply(float *x, int64_t rows, int64_t seq, int64_t heads, int64_t headDim, bool inverse,
               const int64_t *rowPositions = nullptr);

/// Fused Adam on fp32 master weights (β1 0.9, β2 0.999, ε 1e-8, bias correction at step t ≥ 1):
/// updates master, m and v in place from grad.
void adamUpdate(float *master, const float *grad, float *m, float *v, int64_t n, int64_t t,
                float learningRate);

} // namespace gpt
} // namespace placert

#endif // PLACERT_SRC_GPTKERNELS_H
