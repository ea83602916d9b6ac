// The CUDA kernels of the GPT trainer: bf16 storage, fp32 accumulation, the math of the CPU
// reference (runtime/src/GptKernels.h, runtime/src/Kernels.h). GEMMs go through cuBLAS
// (cublasGemmEx, CUBLAS_COMPUTE_32F, tensor cores); everything else is a plain kernel. Row-major
// throughout, like the reference. Every function enqueues work on `stream` and returns at once;
// errors surface through checkLaunch / the next synchronizing call.
#ifndef PLACERT_CUDA_CUDAKERNELS_H
#define PLACERT_CUDA_CUDAKERNELS_H

#include <cstdint>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <string>

namespace placert {
namespace cuda {
namespace kernels {

using bf16 = __nv_bfloat16;

/// "" when the last launch succeeded, else "<what>: <cuda error string>".
std::string checkLaunch(const char *what);

// Conversions.
void floatToBf16(const float *in, bf16 *out, int64_t n, cudaStream_t stream);
void bf16ToFloat(const bf16 *in, float *out, int64_t n, cudaStream_t stream);
void fill(float *out, float value, int64_t n, cudaStream_t stream);
/// out += in (fp32).
void accumulate(float *out, const float *in, int64_t n, cudaStream_t stream);
/// out = bf16(out + in), summed in fp32 and rounded once (gradients kept in bf16).
void accumulate(bf16 *out, const float *in, int64_t n, cudaStream_t stream);
void accumulate(bf16 *out, const bf16 *in, int64_t n, cudaStream_t stream);

// GEMMs (Kernels.h): x [batch, in], w [out, in], row-major.
/// y = x · wᵀ (+ bias when not null); with `accumulateOutput` y += x · wᵀ (+ bias).
cublasStatus_t linearForward(cublasHandle_t handle, const bf16 *x, const bf16 *w, const bf16 *bias,
                             bf16 *y, int64_t batch, int64_t in, int64_t out, bool accumulateOutput,
                             cudaStream_t stream);
/// dw += dyᵀ · x (fp32); dbias += Σ dy when not null.
cublasStatus_t linearWeightGrad(cublasHandle_t handle, const bf16 *x, const bf16 *dy, float *dw,
                                float *dbias, int64_t batch, int64_t in, int64_t out,
                                cudaStream_t stream);
/// dx = dy · w, or dx += dy · w with `accumulateOutput`.
cublasStatus_t linearInputGrad(cublasHandle_t handle, const bf16 *dy, const bf16 *w, bf16 *dx,
                               int64_t batch, int64_t in, int64_t out, bool accumulateOutput,
                               cudaStream_t stream);

// GELU, tanh approximation.
void geluForward(const bf16 *x, bf16 *y, int64_t n, cudaStream_t stream);
void geluBackward(const bf16 *x, const bf16 *dy, bf16 *dx, int64_t n, cudaStream_t stream);

// LayerNorm over `cols`; gamma and beta are bf16 working weights.
void layerNormForward(const bf16 *x, const bf16 *gamma, const bf16 *beta, bf16 *y, float *mean,
                      float *rstd, int64_t rows, int64_t cols, float epsilon, cudaStream_t stream);
/// dx = ∂L/∂x, or dx += ∂L/∂x with `accumulateDx` (the residual stream); dgamma, dbeta += (fp32).
void layerNormBackward(const bf16 *x, const bf16 *gamma, const float *mean, const float *rstd,
                       const bf16 *dy, bf16 *dx, float *dgamma, float *dbeta, int64_t rows,
                       int64_t cols, bool accumulateDx, cudaStream_t stream);

/// Scratch of the attention: fp32 scores and bf16 probabilities/gradients of one sequence.
struct AttentionWorkspace {
  float *scores = nullptr; ///< [heads, seq, seq]
  bf16 *probs = nullptr;   ///< [heads, seq, seq]
  bf16 *dscores = nullptr; ///< [heads, seq, seq] (backward only)
  static int64_t getElements(int64_t seq, int64_t heads) { return heads * seq * seq; }
};

/// Causal attention (GptKernels.h). Head h of q, k and v starts at column h·headStride of rows
/// with leading dimension `ldIn` (headStride = headDim for separate [rows, heads·headDim] arrays;
/// 3·headDim for the trainer's qkv rows ordered [head][q, k, v][headDim]); out is [rows, ldOut]
/// with head h in columns h·headDim. The probabilities are not kept: the backward recomputes them
/// from q and k, one sequence at a time.
cublasStatus_t attentionForward(cublasHandle_t handle, const bf16 *q, const bf16 *k, const bf16 *v,
                                int64_t ldIn, int64_t headStride, bf16 *out, int64_t ldOut,
                                int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                                AttentionWorkspace workspace, cudaStream_t stream);
/// dq, dk, dv (overwritten; laid out like q, k, v) from dout (laid out like out).
cublasStatus_t attentionBackward(cublasHandle_t handle, const bf16 *q, const bf16 *k, const bf16 *v,
                                 int64_t ldIn, int64_t headStride, const bf16 *dout, int64_t ldOut,
                                 bf16 *dq, bf16 *dk, bf16 *dv, int64_t batch, int64_t seq,
                                 int64_t heads, int64_t headDim, AttentionWorkspace workspace,
                                 cudaStream_t stream);

/// Fused causal attention (FlashAttention.cu): the scores stay on chip. Supported when headDim is
/// 16, 32, 64 or 128 and every leading dimension and head offset is a multiple of 8 elements.
bool flashAttentionSupports(int64_t headDim, int64_t ldIn, int64_t headStride, int64_t ldOut);
/// Scratch of the fused backward: dQ in fp32 [tokens, heads·headDim] and Σ dout·out per row
/// [batch, heads, seq].
struct FlashWorkspace {
  float *dqAccum = nullptr;
  float *delta = nullptr;
  static int64_t getDqElements(int64_t tokens, int64_t heads, int64_t headDim);
  static int64_t getDeltaElements(int64_t tokens, int64_t heads);
};
/// out as attentionForward; lse [batch, heads, seq] (fp32, base 2 over the scaled scores) when not
/// null, for the backward.
cudaError_t flashAttentionForward(const bf16 *q, const bf16 *k, const bf16 *v, int64_t ldIn,
                                  int64_t headStride, bf16 *out, int64_t ldOut, float *lse,
                                  int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                                  cudaStream_t stream);
/// dq, dk, dv (overwritten) from the forward's out and lse and from dout.
cudaError_t flashAttentionBackward(const bf16 *q, const bf16 *k, const bf16 *v, int64_t ldIn,
                                   int64_t headStride, const bf16 *out, const bf16 *dout,
                                   int64_t ldOut, const float *lse, bf16 *dq, bf16 *dk, bf16 *dv,
                                   int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                                   FlashWorkspace workspace, cudaStream_t stream);

/// Token + position embedding (vocabulary-parallel; `positions` may be null).
void embeddingForward(const int32_t *tokens, const bf16 *table, const bf16 *positions, bf16 *out,
                      int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                      int64_t vocabLocal, cudaStream_t stream);
/// dtable, dpositions += (fp32, atomics).
void embeddingBackward(const int32_t *tokens, const bf16 *dout, float *dtable, float *dpositions,
                       int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                       int64_t vocabLocal, cudaStream_t stream);

// Vocabulary-parallel cross-entropy, the three steps of GptKernels.h on bf16 logits.
void crossEntropyRowMax(const bf16 *logits, float *rowMax, int64_t rows, int64_t vocabLocal,
                        cudaStream_t stream);
void crossEntropyPartials(const bf16 *logits, const int32_t *targets, const float *rowMax,
                          float *sumExp, float *targetLogit, int64_t rows, int64_t vocabLocal,
                          int64_t vocabOffset, cudaStream_t stream);
/// *loss += Σ_r (log sumExp[r] − targetLogit[r]) · scale (device double); dlogits may alias
/// logits.
void crossEntropyLossAndGrad(const bf16 *logits, const int32_t *targets, const float *rowMax,
                             const float *sumExp, const float *targetLogit, bf16 *dlogits,
                             double *loss, int64_t rows, int64_t vocabLocal, int64_t vocabOffset,
                             double scale, cudaStream_t stream);

/// Fused Adam (β1 0.9, β2 0.999, ε 1e-8, bias correction at step t ≥ 1) on fp32 master weights
/// and moments; writes the bf16 working copy when `working` is not null.
void adamUpdate(float *master, const float *grad, float *m, float *v, bf16 *working, int64_t n,
                int64_t t, float learningRate, cudaStream_t stream);
/// The same on bf16 gradients (converted to fp32 as they are read).
void adamUpdate(float *master, const bf16 *grad, float *m, float *v, bf16 *working, int64_t n,
                int64_t t, float learningRate, cudaStream_t stream);

} // namespace kernels
} // namespace cuda
} // namespace placert

#endif // PLACERT_CUDA_CUDAKERNELS_H
