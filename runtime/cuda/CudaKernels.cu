// The CUDA kernels of the GPT trainer (CudaKernels.h): cuBLAS GEMMs in bf16 with fp32
// accumulation, and simple one-block-per-row kernels for the rest, fp32 math throughout.
#include "CudaKernels.h"

#include <algorithm>
#include <cmath>

namespace placert {
namespace cuda {
namespace kernels {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float toFloat(bf16 value) { return __bfloat162float(value); }
__device__ __forceinline__ bf16 toBf16(float value) { return __float2bfloat16_rn(value); }
__device__ __forceinline__ float toFloat(float value) { return value; }

unsigned gridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

__device__ __forceinline__ float warpSum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ float warpMax(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float blockSum(float value) {
  __shared__ float partial[32];
  __shared__ float total;
  value = warpSum(value);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0)
    partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    float v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f;
    v = warpSum(v);
    if (lane == 0)
      total = v;
  }
  __syncthreads();
  float result = total;
  __syncthreads();
  return result;
}

__device__ float blockMax(float value) {
  __shared__ float partial[32];
  __shared__ float total;
  value = warpMax(value);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0)
    partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    float v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : -INFINITY;
    v = warpMax(v);
    if (lane == 0)
      total = v;
  }
  __syncthreads();
  float result = total;
  __syncthreads();
  return result;
}

__global__ void floatToBf16Kernel(const float *in, bf16 *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = toBf16(in[i]);
}

__global__ void bf16ToFloatKernel(const bf16 *in, float *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = toFloat(in[i]);
}

__global__ void fillKernel(float *out, float value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

__global__ void accumulateKernel(float *out, const float *in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] += in[i];
}

template <class T> __global__ void accumulateBf16Kernel(bf16 *out, const T *in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = toBf16(toFloat(out[i]) + toFloat(in[i]));
}

/// Column sums of a [rows, cols] bf16 matrix added to out[cols] (fp32): a 32-column × 8-row
/// tile per block, each block over a chunk of rows, one atomic per column per block.
__global__ void columnSumKernel(const bf16 *in, float *out, int64_t rows, int64_t cols,
                                int64_t rowsPerBlock) {
  __shared__ float tile[8][33];
  int64_t col = blockIdx.x * 32 + threadIdx.x;
  int64_t begin = blockIdx.y * rowsPerBlock;
  int64_t end = min(rows, begin + rowsPerBlock);
  float sum = 0;
  if (col < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += 8)
      sum += toFloat(in[r * cols + col]);
  tile[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0;
    for (int i = 0; i < 8; ++i)
      total += tile[i][threadIdx.x];
    atomicAdd(&out[col], total);
  }
}

void columnSum(const bf16 *in, float *out, int64_t rows, int64_t cols, cudaStream_t stream) {
  int64_t rowsPerBlock = 256;
  dim3 grid(static_cast<unsigned>((cols + 31) / 32),
            static_cast<unsigned>((rows + rowsPerBlock - 1) / rowsPerBlock));
  columnSumKernel<<<grid, dim3(32, 8), 0, stream>>>(in, out, rows, cols, rowsPerBlock);
}

__global__ void addBiasKernel(bf16 *y, const bf16 *bias, int64_t rows, int64_t cols) {
  int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = toBf16(toFloat(y[i]) + toFloat(bias[i % cols]));
}

/// The same, 8 columns (16 bytes) per thread and row: cols a multiple of 8, rows of y and bias
/// 16-byte aligned. Grid (column groups / blockDim.x, row chunks).
__global__ void addBiasVectorKernel(bf16 *y, const bf16 *bias, int64_t rows, int64_t cols) {
  int64_t group = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (group * 8 >= cols)
    return;
  uint4 b = *reinterpret_cast<const uint4 *>(bias + group * 8);
  const __nv_bfloat162 *bp = reinterpret_cast<const __nv_bfloat162 *>(&b);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    uint4 *at = reinterpret_cast<uint4 *>(y + r * cols + group * 8);
    uint4 value = *at;
    __nv_bfloat162 *vp = reinterpret_cast<__nv_bfloat162 *>(&value);
    for (int i = 0; i < 4; ++i) {
      float2 sum = __bfloat1622float2(vp[i]), add = __bfloat1622float2(bp[i]);
      vp[i] = __floats2bfloat162_rn(sum.x + add.x, sum.y + add.y);
    }
    *at = value;
  }
}

void addBias(bf16 *y, const bf16 *bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols % 8 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(bias) % 16 == 0) {
    int64_t groups = cols / 8;
    unsigned threads = static_cast<unsigned>(std::min<int64_t>(groups, 128));
    dim3 grid(static_cast<unsigned>((groups + threads - 1) / threads),
              static_cast<unsigned>(std::min<int64_t>(rows, 4096)));
    addBiasVectorKernel<<<grid, threads, 0, stream>>>(y, bias, rows, cols);
    return;
  }
  addBiasKernel<<<gridFor(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;

__global__ void geluForwardKernel(const bf16 *x, bf16 *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = toFloat(x[i]);
    float inner = kSqrt2OverPi * (v + 0.044715f * v * v * v);
    y[i] = toBf16(0.5f * v * (1.0f + tanhf(inner)));
  }
}

__global__ void geluBackwardKernel(const bf16 *x, const bf16 *dy, bf16 *dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = toFloat(x[i]);
    float inner = kSqrt2OverPi * (v + 0.044715f * v * v * v);
    float t = tanhf(inner);
    float derivative = 0.5f * (1.0f + t) +
                       0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3 * 0.044715f * v * v);
    dx[i] = toBf16(toFloat(dy[i]) * derivative);
  }
}

__global__ void layerNormForwardKernel(const bf16 *x, const bf16 *gamma, const bf16 *beta, bf16 *y,
                                       float *mean, float *rstd, int64_t cols, float epsilon) {
  const bf16 *row = x + blockIdx.x * cols;
  float sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    sum += toFloat(row[c]);
  float mu = blockSum(sum) / static_cast<float>(cols);
  float sq = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float d = toFloat(row[c]) - mu;
    sq += d * d;
  }
  float s = rsqrtf(blockSum(sq) / static_cast<float>(cols) + epsilon);
  bf16 *out = y + blockIdx.x * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    out[c] = toBf16((toFloat(row[c]) - mu) * s * toFloat(gamma[c]) + toFloat(beta[c]));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = s;
  }
}

/// dx = rstd · (dy·γ − mean(dy·γ) − x̂ · mean(dy·γ · x̂)) per row.
__global__ void layerNormBackwardKernel(const bf16 *x, const bf16 *gamma, const float *mean,
                                        const float *rstd, const bf16 *dy, bf16 *dx, int64_t cols,
                                        bool accumulateDx) {
  int64_t offset = blockIdx.x * cols;
  float mu = mean[blockIdx.x], s = rstd[blockIdx.x];
  float sumG = 0, sumGX = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float g = toFloat(dy[offset + c]) * toFloat(gamma[c]);
    float xhat = (toFloat(x[offset + c]) - mu) * s;
    sumG += g;
    sumGX += g * xhat;
  }
  float meanG = blockSum(sumG) / static_cast<float>(cols);
  float meanGX = blockSum(sumGX) / static_cast<float>(cols);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float g = toFloat(dy[offset + c]) * toFloat(gamma[c]);
    float xhat = (toFloat(x[offset + c]) - mu) * s;
    float value = s * (g - meanG - xhat * meanGX);
    if (accumulateDx)
      value += toFloat(dx[offset + c]);
    dx[offset + c] = toBf16(value);
  }
}

/// dgamma += Σ dy · x̂, dbeta += Σ dy over the rows (32-column tiles as in columnSumKernel).
__global__ void layerNormParamGradKernel(const bf16 *x, const float *mean, const float *rstd,
                                         const bf16 *dy, float *dgamma, float *dbeta, int64_t rows,
                                         int64_t cols, int64_t rowsPerBlock) {
  __shared__ float tileG[8][33];
  __shared__ float tileB[8][33];
  int64_t col = blockIdx.x * 32 + threadIdx.x;
  int64_t begin = blockIdx.y * rowsPerBlock;
  int64_t end = min(rows, begin + rowsPerBlock);
  float sumG = 0, sumB = 0;
  if (col < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += 8) {
      float d = toFloat(dy[r * cols + col]);
      sumG += d * (toFloat(x[r * cols + col]) - mean[r]) * rstd[r];
      sumB += d;
    }
  tileG[threadIdx.y][threadIdx.x] = sumG;
  tileB[threadIdx.y][threadIdx.x] = sumB;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float g = 0, b = 0;
    for (int i = 0; i < 8; ++i) {
      g += tileG[i][threadIdx.x];
      b += tileB[i][threadIdx.x];
    }
    atomicAdd(&dgamma[col], g);
    atomicAdd(&dbeta[col], b);
  }
}

/// Row (h, i) of one sequence's scores: p = softmax(scale · s[j ≤ i]), zeros above the diagonal.
__global__ void causalSoftmaxKernel(const float *scores, bf16 *probs, int64_t seq, float scale) {
  int64_t row = blockIdx.x; // h · seq + i
  int64_t i = row % seq;
  const float *s = scores + row * seq;
  bf16 *p = probs + row * seq;
  float localMax = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    localMax = fmaxf(localMax, s[j] * scale);
  float rowMax = blockMax(localMax);
  float localSum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    localSum += expf(s[j] * scale - rowMax);
  float inverse = 1.0f / blockSum(localSum);
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x)
    p[j] = toBf16(j <= i ? expf(s[j] * scale - rowMax) * inverse : 0.0f);
}

/// dS[j] = P[j] (dP[j] − Σ_k P[k] dP[k]) · scale; dP arrives in the fp32 scores buffer.
__global__ void causalSoftmaxBackwardKernel(const bf16 *probs, const float *dprobs, bf16 *dscores,
                                            int64_t seq, float scale) {
  int64_t row = blockIdx.x;
  int64_t i = row % seq;
  const bf16 *p = probs + row * seq;
  const float *dp = dprobs + row * seq;
  bf16 *ds = dscores + row * seq;
  float localDot = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    localDot += toFloat(p[j]) * dp[j];
  float dot = blockSum(localDot);
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x)
    ds[j] = toBf16(j <= i ? toFloat(p[j]) * (dp[j] - dot) * scale : 0.0f);
}

__global__ void embeddingForwardKernel(const int32_t *tokens, const bf16 *table,
                                       const bf16 *positions, bf16 *out, int64_t seq,
                                       int64_t hidden, int64_t vocabOffset, int64_t vocabLocal) {
  int64_t r = blockIdx.x;
  int64_t local = static_cast<int64_t>(tokens[r]) - vocabOffset;
  bool inRange = local >= 0 && local < vocabLocal;
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float value = inRange ? toFloat(table[local * hidden + c]) : 0.0f;
    if (positions)
      value += toFloat(positions[(r % seq) * hidden + c]);
    out[r * hidden + c] = toBf16(value);
  }
}

__global__ void embeddingBackwardKernel(const int32_t *tokens, const bf16 *dout, float *dtable,
                                        float *dpositions, int64_t seq, int64_t hidden,
                                        int64_t vocabOffset, int64_t vocabLocal) {
  int64_t r = blockIdx.x;
  int64_t local = static_cast<int64_t>(tokens[r]) - vocabOffset;
  bool inRange = local >= 0 && local < vocabLocal;
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float d = toFloat(dout[r * hidden + c]);
    if (inRange)
      atomicAdd(&dtable[local * hidden + c], d);
    if (dpositions)
      atomicAdd(&dpositions[(r % seq) * hidden + c], d);
  }
}

__global__ void rowMaxKernel(const bf16 *logits, float *rowMax, int64_t vocabLocal) {
  const bf16 *row = logits + blockIdx.x * vocabLocal;
  float localMax = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocabLocal; c += blockDim.x)
    localMax = fmaxf(localMax, toFloat(row[c]));
  float result = blockMax(localMax);
  if (threadIdx.x == 0)
    rowMax[blockIdx.x] = result;
}

__global__ void partialsKernel(const bf16 *logits, const int32_t *targets, const float *rowMax,
                               float *sumExp, float *targetLogit, int64_t vocabLocal,
                               int64_t vocabOffset) {
  const bf16 *row = logits + blockIdx.x * vocabLocal;
  float m = rowMax[blockIdx.x];
  float local = 0;
  for (int64_t c = threadIdx.x; c < vocabLocal; c += blockDim.x)
    local += expf(toFloat(row[c]) - m);
  float total = blockSum(local);
  if (threadIdx.x == 0) {
    sumExp[blockIdx.x] = total;
    int64_t target = static_cast<int64_t>(targets[blockIdx.x]) - vocabOffset;
    targetLogit[blockIdx.x] = target >= 0 && target < vocabLocal ? toFloat(row[target]) - m : 0.0f;
  }
}

__global__ void lossAndGradKernel(const bf16 *logits, const int32_t *targets, const float *rowMax,
                                  const float *sumExp, const float *targetLogit, bf16 *dlogits,
                                  double *loss, int64_t vocabLocal, int64_t vocabOffset,
                                  double scale) {
  int64_t r = blockIdx.x;
  const bf16 *row = logits + r * vocabLocal;
  bf16 *drow = dlogits + r * vocabLocal;
  float m = rowMax[r], inverse = 1.0f / sumExp[r];
  int64_t target = static_cast<int64_t>(targets[r]) - vocabOffset;
  float s = static_cast<float>(scale);
  // Every thread reads its logits before writing: dlogits may alias logits, element by element.
  for (int64_t c = threadIdx.x; c < vocabLocal; c += blockDim.x) {
    float softmax = expf(toFloat(row[c]) - m) * inverse;
    drow[c] = toBf16((softmax - (c == target ? 1.0f : 0.0f)) * s);
  }
  if (threadIdx.x == 0)
    atomicAdd(loss, (log(static_cast<double>(sumExp[r])) - targetLogit[r]) * scale);
}

template <class G>
__global__ void adamKernel(float *master, const G *grad, float *m, float *v, bf16 *working,
                           int64_t n, float correction1, float correction2, float learningRate) {
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = toFloat(grad[i]);
    float mi = beta1 * m[i] + (1 - beta1) * g;
    float vi = beta2 * v[i] + (1 - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mHat = mi / correction1, vHat = vi / correction2;
    float updated = master[i] - learningRate * mHat / (sqrtf(vHat) + eps);
    master[i] = updated;
    if (working)
      working[i] = toBf16(updated);
  }
}

/// Binds `stream` to the handle only when another stream is bound: cublasSetStream also puts the
/// handle back on cuBLAS's default workspace, dropping one set with cublasSetWorkspace (cuBLAS
/// documentation, cublasSetStream).
cublasStatus_t useStream(cublasHandle_t handle, cudaStream_t stream) {
  cudaStream_t bound = nullptr;
  if (cublasStatus_t got = cublasGetStream(handle, &bound); got != CUBLAS_STATUS_SUCCESS)
    return got;
  return bound == stream ? CUBLAS_STATUS_SUCCESS : cublasSetStream(handle, stream);
}

/// cublasGemmEx in column-major terms with bf16 A and B, fp32 compute, C of type `cType`.
cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t transA, cublasOperation_t transB,
                    int64_t m, int64_t n, int64_t k, const bf16 *a, int64_t lda, const bf16 *b,
                    int64_t ldb, void *c, cudaDataType_t cType, int64_t ldc, float beta) {
  float alpha = 1.0f;
  return cublasGemmEx(handle, transA, transB, static_cast<int>(m), static_cast<int>(n),
                      static_cast<int>(k), &alpha, a, CUDA_R_16BF, static_cast<int>(lda), b,
                      CUDA_R_16BF, static_cast<int>(ldb), &beta, c, cType, static_cast<int>(ldc),
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t gemmStrided(cublasHandle_t handle, cublasOperation_t transA,
                           cublasOperation_t transB, int64_t m, int64_t n, int64_t k, const bf16 *a,
                           int64_t lda, int64_t strideA, const bf16 *b, int64_t ldb,
                           int64_t strideB, void *c, cudaDataType_t cType, int64_t ldc,
                           int64_t strideC, int64_t count) {
  float alpha = 1.0f, beta = 0.0f;
  return cublasGemmStridedBatchedEx(
      handle, transA, transB, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha,
      a, CUDA_R_16BF, static_cast<int>(lda), strideA, b, CUDA_R_16BF, static_cast<int>(ldb),
      strideB, &beta, c, cType, static_cast<int>(ldc), strideC, static_cast<int>(count),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

} // namespace

std::string checkLaunch(const char *what) {
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess)
    return "";
  return std::string(what) + ": " + cudaGetErrorString(error);
}

void floatToBf16(const float *in, bf16 *out, int64_t n, cudaStream_t stream) {
  floatToBf16Kernel<<<gridFor(n), kThreads, 0, stream>>>(in, out, n);
}

void bf16ToFloat(const bf16 *in, float *out, int64_t n, cudaStream_t stream) {
  bf16ToFloatKernel<<<gridFor(n), kThreads, 0, stream>>>(in, out, n);
}

void fill(float *out, float value, int64_t n, cudaStream_t stream) {
  fillKernel<<<gridFor(n), kThreads, 0, stream>>>(out, value, n);
}

void accumulate(float *out, const float *in, int64_t n, cudaStream_t stream) {
  accumulateKernel<<<gridFor(n), kThreads, 0, stream>>>(out, in, n);
}

void accumulate(bf16 *out, const float *in, int64_t n, cudaStream_t stream) {
  accumulateBf16Kernel<<<gridFor(n), kThreads, 0, stream>>>(out, in, n);
}

void accumulate(bf16 *out, const bf16 *in, int64_t n, cudaStream_t stream) {
  accumulateBf16Kernel<<<gridFor(n), kThreads, 0, stream>>>(out, in, n);
}

// Row-major y[batch, out] = x[batch, in] · w[out, in]ᵀ is column-major yᵀ = w · xᵀ, where the
// memory of w read column-major is wᵀ (so op T) and that of x is xᵀ (op N).
cublasStatus_t linearForward(cublasHandle_t handle, const bf16 *x, const bf16 *w, const bf16 *bias,
                             bf16 *y, int64_t batch, int64_t in, int64_t out, bool accumulateOutput,
                             cudaStream_t stream) {
  if (cublasStatus_t set = useStream(handle, stream); set != CUBLAS_STATUS_SUCCESS)
    return set;
  cublasStatus_t status = gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, w, in, x, in, y,
                               CUDA_R_16BF, out, accumulateOutput ? 1.0f : 0.0f);
  if (status == CUBLAS_STATUS_SUCCESS && bias)
    addBias(y, bias, batch, out, stream);
  return status;
}

// dw[out, in] += dyᵀ · x is column-major dwᵀ += xᵀ · dy: x's memory is xᵀ (N), dy's is dyᵀ (T).
cublasStatus_t linearWeightGrad(cublasHandle_t handle, const bf16 *x, const bf16 *dy, float *dw,
                                float *dbias, int64_t batch, int64_t in, int64_t out,
                                cudaStream_t stream) {
  if (cublasStatus_t set = useStream(handle, stream); set != CUBLAS_STATUS_SUCCESS)
    return set;
  cublasStatus_t status = gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, x, in, dy, out, dw,
                               CUDA_R_32F, in, 1.0f);
  if (status == CUBLAS_STATUS_SUCCESS && dbias)
    columnSum(dy, dbias, batch, out, stream);
  return status;
}

// dx[batch, in] = dy · w is column-major dxᵀ = wᵀ · dyᵀ: both memories read as is (N, N).
cublasStatus_t linearInputGrad(cublasHandle_t handle, const bf16 *dy, const bf16 *w, bf16 *dx,
                               int64_t batch, int64_t in, int64_t out, bool accumulateOutput,
                               cudaStream_t stream) {
  if (cublasStatus_t set = useStream(handle, stream); set != CUBLAS_STATUS_SUCCESS)
    return set;
  return gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, w, in, dy, out, dx, CUDA_R_16BF, in,
              accumulateOutput ? 1.0f : 0.0f);
}

void geluForward(const bf16 *x, bf16 *y, int64_t n, cudaStream_t stream) {
  geluForwardKernel<<<gridFor(n), kThreads, 0, stream>>>(x, y, n);
}

void geluBackward(const bf16 *x, const bf16 *dy, bf16 *dx, int64_t n, cudaStream_t stream) {
  geluBackwardKernel<<<gridFor(n), kThreads, 0, stream>>>(x, dy, dx, n);
}

void layerNormForward(const bf16 *x, const bf16 *gamma, const bf16 *beta, bf16 *y, float *mean,
                      float *rstd, int64_t rows, int64_t cols, float epsilon, cudaStream_t stream) {
  if (rows == 0)
    return;
  layerNormForwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, gamma, beta, y, mean, rstd, cols, epsilon);
}

void layerNormBackward(const bf16 *x, const bf16 *gamma, const float *mean, const float *rstd,
                       const bf16 *dy, bf16 *dx, float *dgamma, float *dbeta, int64_t rows,
                       int64_t cols, bool accumulateDx, cudaStream_t stream) {
  if (rows == 0)
    return;
  int64_t rowsPerBlock = 256;
  dim3 grid(static_cast<unsigned>((cols + 31) / 32),
            static_cast<unsigned>((rows + rowsPerBlock - 1) / rowsPerBlock));
  layerNormParamGradKernel<<<grid, dim3(32, 8), 0, stream>>>(x, mean, rstd, dy, dgamma, dbeta, rows,
                                                             cols, rowsPerBlock);
  layerNormBackwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, gamma, mean, rstd, dy, dx, cols, accumulateDx);
}

// Per sequence b and head h, with row-major Q_h, K_h, V_h of [seq, headDim] at leading dimension
// ldIn (their memory read column-major is Q_hᵀ …, headDim × seq):
//   scores (row-major [seq, seq]) = Q Kᵀ  ⇔ column-major scoresᵀ = K Qᵀ: gemm(T, N, K, Q)
//   out = P V                          ⇔ outᵀ = Vᵀ Pᵀ:                 gemm(N, N, V, P)
// and in the backward
//   dP = dO Vᵀ  ⇔ dPᵀ = V dOᵀ:   gemm(T, N, V, dO)
//   dV = Pᵀ dO  ⇔ dVᵀ = dOᵀ P:   gemm(N, T, dO, P)
//   dQ = dS K   ⇔ dQᵀ = Kᵀ dSᵀ:  gemm(N, N, K, dS)
//   dK = dSᵀ Q  ⇔ dKᵀ = Qᵀ dS:   gemm(N, T, Q, dS)
// each strided over the heads (stride headDim in the activations, seq² in the scratch).
/// One sequence's causal softmax probabilities of every head into workspace.probs (the scaled
/// scores Kᵀ Q pass through workspace.scores).
static cublasStatus_t attentionProbabilities(cublasHandle_t handle, const bf16 *q, const bf16 *k,
                                      int64_t ldIn, int64_t headStride, int64_t seq, int64_t heads,
                                      int64_t headDim, AttentionWorkspace workspace,
                                      cudaStream_t stream) {
  float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
  cublasStatus_t status =
      gemmStrided(handle, CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, headDim, k, ldIn, headStride, q,
                  ldIn, headStride, workspace.scores, CUDA_R_32F, seq, seq * seq, heads);
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  causalSoftmaxKernel<<<static_cast<unsigned>(heads * seq), kThreads, 0, stream>>>(
      workspace.scores, workspace.probs, seq, scale);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t attentionForward(cublasHandle_t handle, const bf16 *q, const bf16 *k, const bf16 *v,
                                int64_t ldIn, int64_t headStride, bf16 *out, int64_t ldOut,
                                int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                                AttentionWorkspace workspace, cudaStream_t stream) {
  if (cublasStatus_t set = useStream(handle, stream); set != CUBLAS_STATUS_SUCCESS)
    return set;
  int64_t square = seq * seq;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t in = b * seq * ldIn, o = b * seq * ldOut;
    cublasStatus_t status = attentionProbabilities(handle, q + in, k + in, ldIn, headStride, seq,
                                                   heads, headDim, workspace, stream);
    if (status != CUBLAS_STATUS_SUCCESS)
      return status;
    status =
        gemmStrided(handle, CUBLAS_OP_N, CUBLAS_OP_N, headDim, seq, seq, v + in, ldIn, headStride,
                    workspace.probs, seq, square, out + o, CUDA_R_16BF, ldOut, headDim, heads);
    if (status != CUBLAS_STATUS_SUCCESS)
      return status;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t attentionBackward(cublasHandle_t handle, const bf16 *q, const bf16 *k, const bf16 *v,
                                 int64_t ldIn, int64_t headStride, const bf16 *dout, int64_t ldOut,
                                 bf16 *dq, bf16 *dk, bf16 *dv, int64_t batch, int64_t seq,
                                 int64_t heads, int64_t headDim, AttentionWorkspace workspace,
                                 cudaStream_t stream) {
  if (cublasStatus_t set = useStream(handle, stream); set != CUBLAS_STATUS_SUCCESS)
    return set;
  float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
  int64_t square = seq * seq;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t in = b * seq * ldIn, o = b * seq * ldOut;
    // Recompute the probabilities.
    cublasStatus_t status = attentionProbabilities(handle, q + in, k + in, ldIn, headStride, seq,
                                                   heads, headDim, workspace, stream);
    if (status != CUBLAS_STATUS_SUCCESS)
      return status;
    // dP into the scores buffer, then dS.
    status =
        gemmStrided(handle, CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, headDim, v + in, ldIn, headStride,
                    dout + o, ldOut, headDim, workspace.scores, CUDA_R_32F, seq, square, heads);
    if (status != CUBLAS_STATUS_SUCCESS)
      return status;
    status =
        gemmStrided(handle, CUBLAS_OP_N, CUBLAS_OP_T, headDim, seq, seq, dout + o, ldOut, headDim,
                    workspace.probs, seq, square, dv + in, CUDA_R_16BF, ldIn, headStride, heads);
    if (status != CUBLAS_STATUS_SUCCESS)
      return status;
    causalSoftmaxBackwardKernel<<<static_cast<unsigned>(heads * seq), kThreads, 0, stream>>>(
        workspace.probs, workspace.scores, workspace.dscores, seq, scale);
    status =
        gemmStrided(handle, CUBLAS_OP_N, CUBLAS_OP_N, headDim, seq, seq, k + in, ldIn, headStride,
                    workspace.dscores, seq, square, dq + in, CUDA_R_16BF, ldIn, headStride, heads);
    if (status != CUBLAS_STATUS_SUCCESS)
      return status;
    status =
        gemmStrided(handle, CUBLAS_OP_N, CUBLAS_OP_T, headDim, seq, seq, q + in, ldIn, headStride,
                    workspace.dscores, seq, square, dk + in, CUDA_R_16BF, ldIn, headStride, heads);
    if (status != CUBLAS_STATUS_SUCCESS)
      return status;
  }
  return CUBLAS_STATUS_SUCCESS;
}

void embeddingForward(const int32_t *tokens, const bf16 *table, const bf16 *positions, bf16 *out,
                      int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                      int64_t vocabLocal, cudaStream_t stream) {
  if (rows == 0)
    return;
  embeddingForwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      tokens, table, positions, out, seq, hidden, vocabOffset, vocabLocal);
}

void embeddingBackward(const int32_t *tokens, const bf16 *dout, float *dtable, float *dpositions,
                       int64_t rows, int64_t seq, int64_t hidden, int64_t vocabOffset,
                       int64_t vocabLocal, cudaStream_t stream) {
  if (rows == 0)
    return;
  embeddingBackwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      tokens, dout, dtable, dpositions, seq, hidden, vocabOffset, vocabLocal);
}

void crossEntropyRowMax(const bf16 *logits, float *rowMax, int64_t rows, int64_t vocabLocal,
                        cudaStream_t stream) {
  if (rows == 0)
    return;
  rowMaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, rowMax, vocabLocal);
}

void crossEntropyPartials(const bf16 *logits, const int32_t *targets, const float *rowMax,
                          float *sumExp, float *targetLogit, int64_t rows, int64_t vocabLocal,
                          int64_t vocabOffset, cudaStream_t stream) {
  if (rows == 0)
    return;
  partialsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      logits, targets, rowMax, sumExp, targetLogit, vocabLocal, vocabOffset);
}

void crossEntropyLossAndGrad(const bf16 *logits, const int32_t *targets, const float *rowMax,
                             const float *sumExp, const float *targetLogit, bf16 *dlogits,
                             double *loss, int64_t rows, int64_t vocabLocal, int64_t vocabOffset,
                             double scale, cudaStream_t stream) {
  if (rows == 0)
    return;
  lossAndGradKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      logits, targets, rowMax, sumExp, targetLogit, dlogits, loss, vocabLocal, vocabOffset, scale);
}

namespace {
template <class G>
void launchAdam(float *master, const G *grad, float *m, float *v, bf16 *working, int64_t n,
                int64_t t, float learningRate, cudaStream_t stream) {
  double correction1 = 1 - std::pow(0.9, static_cast<double>(t));
  double correction2 = 1 - std::pow(0.999, static_cast<double>(t));
  adamKernel<<<gridFor(n), kThreads, 0, stream>>>(master, grad, m, v, working, n,
                                                  static_cast<float>(correction1),
                                                  static_cast<float>(correction2), learningRate);
}
} // namespace

void adamUpdate(float *master, const float *grad, float *m, float *v, bf16 *working, int64_t n,
                int64_t t, float learningRate, cudaStream_t stream) {
  launchAdam(master, grad, m, v, working, n, t, learningRate, stream);
}

void adamUpdate(float *master, const bf16 *grad, float *m, float *v, bf16 *working, int64_t n,
                int64_t t, float learningRate, cudaStream_t stream) {
  launchAdam(master, grad, m, v, working, n, t, learningRate, stream);
}

} // namespace kernels
} // namespace cuda
} // namespace placert
