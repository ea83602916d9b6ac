// Fused causal attention for the GPT trainer: the scores never reach device memory. The algorithm
// is FlashAttention-2's (Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
// Partitioning", 2023, Algorithms 1 and 2): the forward walks the key blocks of a query block with
// an online softmax and keeps only the log-sum-exp of each row; the backward walks the query blocks
// of a key block, recomputes the probabilities from that log-sum-exp, and accumulates dQ in fp32
// with atomics. The matrix products are warp-level bf16 tensor-core instructions
// (mma.sync.m16n8k16, fp32 accumulation; fragment layouts from the PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type").
//
// Layout (CudaKernels.h): element d of head h of token s of sequence b of q, k and v is at
// [(b·seq + s)·ldIn + h·headStride + d]; of out, dout at [(b·seq + s)·ldOut + h·headDim + d].
// The log-sum-exp is kept in base 2 over the scores scaled by 1/√headDim · log2(e):
// lse[(b·heads + h)·seq + s].
#include "CudaKernels.h"

#include <cmath>
#include <type_traits>

namespace placert {
namespace cuda {
namespace kernels {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kBlockRows = kWarps * kRowsPerWarp; // 64 queries (forward) or keys (backward)
constexpr int kPad = 8;                           // bf16 elements of padding per shared row
constexpr double kLog2e = 1.4426950408889634;     // log2(e)

/// D += A·B for one 16×8×16 tile: a[4] (row-major 16×16), b[2] (column-major 16×8), d[4].
__device__ __forceinline__ void mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/// Columns [16·kk, 16·kk + 16) of a 16-row fp32 accumulator tile (acc[n-tile][4], the mma D
/// layout) as the bf16 A fragment of the next product: the D layout of two adjacent n-tiles is
/// the A layout of one 16-wide k-step.
__device__ __forceinline__ void accumulatorToA(uint32_t a[4], const float (*acc)[4], int kk) {
  a[0] = pack(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = pack(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = pack(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = pack(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

/// Two adjacent bf16 of a row (the pair an mma fragment register holds).
__device__ __forceinline__ uint32_t pair(const bf16 *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Four 8×8 bf16 matrices from shared memory (ldmatrix): lane l gives the address of row l % 8
/// of matrix l / 8; register i receives matrix i's elements (row lane / 4, columns 2·(lane % 4)
/// and + 1), or with `.trans` (rows 2·(lane % 4) and + 1, column lane / 4).
__device__ __forceinline__ void ldmatrix(uint32_t r[4], const bf16 *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sharedAddress(row)));
}
__device__ __forceinline__ void ldmatrixTrans(uint32_t r[4], const bf16 *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sharedAddress(row)));
}

/// The A fragment of rows [0, 16) and columns [k0, k0 + 16) of a row-major shared tile.
__device__ __forceinline__ void loadA(uint32_t a[4], const bf16 *tile, int stride, int k0,
                                      int lane) {
  ldmatrix(a, tile + (lane & 15) * stride + k0 + (lane >> 4) * 8);
}

/// The B fragments (k [k0, k0 + 16)) of n-tiles [n0, n0 + 8) (b[0], b[1]) and [n0 + 8, n0 + 16)
/// (b[2], b[3]) of B = Xᵀ, where X is row-major [n][k] in shared memory.
__device__ __forceinline__ void loadBT(uint32_t b[4], const bf16 *x, int stride, int n0, int k0,
                                       int lane) {
  ldmatrix(b, x + (n0 + (lane >> 4) * 8 + (lane & 7)) * stride + k0 + ((lane >> 3) & 1) * 8);
}

/// The same two B fragments of B = X, where X is row-major [k][n] in shared memory.
__device__ __forceinline__ void loadB(uint32_t b[4], const bf16 *x, int stride, int n0, int k0,
                                      int lane) {
  ldmatrixTrans(b, x + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * stride + n0 + (lane >> 4) * 8);
}

/// 16 bytes from global to shared memory without passing through registers (cp.async); zeros
/// when !valid.
__device__ __forceinline__ void copyAsync(bf16 *shared, const bf16 *global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sharedAddress(shared)),
               "l"(global), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void commitAsync() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void waitAsync() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// Copies rows [row0, row0 + rows) of one head (headDim D) into a padded shared tile; rows past
/// `seq` become zeros.
template <int D>
__device__ __forceinline__ void loadTile(bf16 *tile, const bf16 *base, int64_t ld, int row0,
                                         int rows, int seq) {
  constexpr int chunks = D / 8; // 16-byte pieces per row
  for (int i = threadIdx.x; i < rows * chunks; i += blockDim.x) {
    int r = i / chunks, c = (i % chunks) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row0 + r < seq)
      value = *reinterpret_cast<const uint4 *>(base + static_cast<int64_t>(row0 + r) * ld + c);
    *reinterpret_cast<uint4 *>(tile + r * (D + kPad) + c) = value;
  }
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// Grid (query blocks, heads, batch), kWarps warps; warp w owns queries q0 + 16w .. q0 + 16w + 15.
/// The key and value blocks are double-buffered: block j + 1 is copied (cp.async) while block j
/// is worked.
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    flashForwardKernel(const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                       const bf16 *__restrict__ v, int64_t ldIn, int64_t headStride,
                       bf16 *__restrict__ out, int64_t ldOut, float *__restrict__ lse, int seq,
                       int heads, float scaleLog2) {
  extern __shared__ __align__(16) unsigned char shared[];
  constexpr int stride = D + kPad, tileElements = kBlockRows * stride, chunks = D / 8;
  bf16 *kTiles = reinterpret_cast<bf16 *>(shared); // [2][64][D + pad]
  bf16 *vTiles = kTiles + 2 * tileElements;        // [2][64][D + pad]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, b = blockIdx.z;
  // The longest query blocks first.
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBlockRows;
  const int64_t token0 = static_cast<int64_t>(b) * seq;
  const bf16 *qHead = q + token0 * ldIn + h * headStride;
  const bf16 *kHead = k + token0 * ldIn + h * headStride;
  const bf16 *vHead = v + token0 * ldIn + h * headStride;

  const int lastKey = min(q0 + kBlockRows, seq); // keys [0, lastKey) can be seen
  const int blocks = (lastKey + kBlockRows - 1) / kBlockRows;
  auto fetch = [&](int buffer, int k0) {
    bf16 *kt = kTiles + buffer * tileElements, *vt = vTiles + buffer * tileElements;
    for (int i = threadIdx.x; i < kBlockRows * chunks; i += blockDim.x) {
      int r = i / chunks, c = (i % chunks) * 8;
      bool inside = k0 + r < seq;
      int64_t row = inside ? k0 + r : 0;
      copyAsync(kt + r * stride + c, kHead + row * ldIn + c, inside);
      copyAsync(vt + r * stride + c, vHead + row * ldIn + c, inside);
    }
    commitAsync();
  };
  fetch(0, 0);

  // This warp's queries as A fragments (rows past seq read as zeros).
  const int rowA = q0 + warp * kRowsPerWarp + g, rowB = rowA + 8;
  uint32_t qa[D / 16][4];
  for (int kk = 0; kk < D / 16; ++kk) {
    int c = kk * 16 + 2 * t;
    const bf16 *ra = qHead + static_cast<int64_t>(rowA) * ldIn;
    const bf16 *rb = qHead + static_cast<int64_t>(rowB) * ldIn;
    qa[kk][0] = rowA < seq ? pair(ra + c) : 0u;
    qa[kk][1] = rowB < seq ? pair(rb + c) : 0u;
    qa[kk][2] = rowA < seq ? pair(ra + c + 8) : 0u;
    qa[kk][3] = rowB < seq ? pair(rb + c + 8) : 0u;
  }

  float acc[D / 8][4];
  for (int dt = 0; dt < D / 8; ++dt)
    acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  float maxA = -INFINITY, maxB = -INFINITY, sumA = 0.0f, sumB = 0.0f;

  for (int block = 0; block < blocks; ++block) {
    const int k0 = block * kBlockRows;
    if (block + 1 < blocks) {
      fetch((block + 1) & 1, k0 + kBlockRows);
      waitAsync<1>();
    } else {
      waitAsync<0>();
    }
    __syncthreads();
    const bf16 *kTile = kTiles + (block & 1) * tileElements;
    const bf16 *vTile = vTiles + (block & 1) * tileElements;

    // S = Q Kᵀ for 16 queries × 64 keys.
    float s[kBlockRows / 8][4];
    for (int nt = 0; nt < kBlockRows / 8; ++nt)
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    for (int kk = 0; kk < D / 16; ++kk)
      for (int np = 0; np < kBlockRows / 16; ++np) {
        uint32_t bf[4];
        loadBT(bf, kTile, stride, np * 16, kk * 16, lane);
        mma(s[2 * np], qa[kk], bf);
        mma(s[2 * np + 1], qa[kk], bf + 2);
      }
    // Causal mask, scale, and the running maximum of rows A (g) and B (g + 8).
    float blockMaxA = -INFINITY, blockMaxB = -INFINITY;
    for (int nt = 0; nt < kBlockRows / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        int key = k0 + nt * 8 + 2 * t + (e & 1);
        int query = e < 2 ? rowA : rowB;
        float value = (key <= query && key < seq) ? s[nt][e] * scaleLog2 : -INFINITY;
        s[nt][e] = value;
        if (e < 2)
          blockMaxA = fmaxf(blockMaxA, value);
        else
          blockMaxB = fmaxf(blockMaxB, value);
      }
    for (int offset = 1; offset < 4; offset *= 2) {
      blockMaxA = fmaxf(blockMaxA, __shfl_xor_sync(0xffffffffu, blockMaxA, offset));
      blockMaxB = fmaxf(blockMaxB, __shfl_xor_sync(0xffffffffu, blockMaxB, offset));
    }
    float newMaxA = fmaxf(maxA, blockMaxA), newMaxB = fmaxf(maxB, blockMaxB);
    // A row with no visible key yet keeps exponents finite.
    float baseA = newMaxA == -INFINITY ? 0.0f : newMaxA;
    float baseB = newMaxB == -INFINITY ? 0.0f : newMaxB;
    float rescaleA = exp2f(maxA - baseA), rescaleB = exp2f(maxB - baseB);
    maxA = newMaxA;
    maxB = newMaxB;
    sumA *= rescaleA;
    sumB *= rescaleB;
    for (int dt = 0; dt < D / 8; ++dt) {
      acc[dt][0] *= rescaleA;
      acc[dt][1] *= rescaleA;
      acc[dt][2] *= rescaleB;
      acc[dt][3] *= rescaleB;
    }
    for (int nt = 0; nt < kBlockRows / 8; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - baseA);
      s[nt][1] = exp2f(s[nt][1] - baseA);
      s[nt][2] = exp2f(s[nt][2] - baseB);
      s[nt][3] = exp2f(s[nt][3] - baseB);
      sumA += s[nt][0] + s[nt][1];
      sumB += s[nt][2] + s[nt][3];
    }
    // O += P V: P's accumulator layout is the A layout of the next product, 16 keys at a time.
    for (int kk = 0; kk < kBlockRows / 16; ++kk) {
      uint32_t pa[4];
      accumulatorToA(pa, s, kk);
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bf[4];
        loadB(bf, vTile, stride, dp * 16, kk * 16, lane);
        mma(acc[2 * dp], pa, bf);
        mma(acc[2 * dp + 1], pa, bf + 2);
      }
    }
    // The buffer just read is the one the next iteration's copy fills.
    __syncthreads();
  }

  for (int offset = 1; offset < 4; offset *= 2) {
    sumA += __shfl_xor_sync(0xffffffffu, sumA, offset);
    sumB += __shfl_xor_sync(0xffffffffu, sumB, offset);
  }
  float invA = 1.0f / sumA, invB = 1.0f / sumB;
  bf16 *outHead = out + token0 * ldOut + h * D;
  for (int dt = 0; dt < D / 8; ++dt) {
    int c = dt * 8 + 2 * t;
    if (rowA < seq)
      *reinterpret_cast<uint32_t *>(outHead + static_cast<int64_t>(rowA) * ldOut + c) =
          pack(acc[dt][0] * invA, acc[dt][1] * invA);
    if (rowB < seq)
      *reinterpret_cast<uint32_t *>(outHead + static_cast<int64_t>(rowB) * ldOut + c) =
          pack(acc[dt][2] * invB, acc[dt][3] * invB);
  }
  if (lse && t == 0) {
    float *lseHead = lse + (static_cast<int64_t>(b) * heads + h) * seq;
    if (rowA < seq)
      lseHead[rowA] = maxA + log2f(sumA);
    if (rowB < seq)
      lseHead[rowB] = maxB + log2f(sumB);
  }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// delta[(b·heads + h)·seq + s] = Σ_d dout · out over head h of token s: one warp per (token,
/// head).
__global__ void flashDeltaKernel(const bf16 *__restrict__ out, const bf16 *__restrict__ dout,
                                 int64_t ldOut, float *__restrict__ delta, int64_t tokens, int seq,
                                 int heads, int headDim) {
  int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x & 31;
  if (item >= tokens * heads)
    return;
  int64_t token = item / heads;
  int h = static_cast<int>(item % heads);
  const bf16 *o = out + token * ldOut + h * headDim;
  const bf16 *d = dout + token * ldOut + h * headDim;
  float sum = 0.0f;
  for (int i = lane; i < headDim; i += 32)
    sum += __bfloat162float(o[i]) * __bfloat162float(d[i]);
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) {
    int64_t b = token / seq, s = token % seq;
    delta[(b * heads + h) * seq + s] = sum;
  }
}

/// dq (bf16, laid out like q) = scale · dqAccum ([tokens, heads·headDim] fp32).
__global__ void flashDqKernel(const float *__restrict__ dqAccum, bf16 *__restrict__ dq,
                              int64_t ldIn, int64_t headStride, int64_t tokens, int heads,
                              int headDim, float scale) {
  int64_t width = static_cast<int64_t>(heads) * headDim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens * width;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t token = i / width, column = i % width;
    int64_t h = column / headDim, d = column % headDim;
    dq[token * ldIn + h * headStride + d] = __float2bfloat16_rn(dqAccum[i] * scale);
  }
}

/// 4 bytes from global to shared memory (cp.async); zero when !valid.
__device__ __forceinline__ void copyAsync4(float *shared, const float *global, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sharedAddress(shared)),
               "l"(global), "r"(valid ? 4 : 0)
               : "memory");
}

/// Grid (key blocks, heads, batch), kWarps warps; warp w owns keys k0 + 16w .. k0 + 16w + 15 and
/// walks the query blocks of BQ queries that can see them. The query block's Q, dO, log-sum-exp
/// and delta are double-buffered: block i + 1 is copied (cp.async) while block i is worked. Only
/// the query blocks that cross a warp's diagonal or the end of the sequence are masked, and a
/// warp that none of a block's queries see only writes zeros for its part of dS.
template <int D, int BQ>
__global__ void __launch_bounds__(kWarps * 32)
    flashBackwardKernel(const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                        const bf16 *__restrict__ v, int64_t ldIn, int64_t headStride,
                        const bf16 *__restrict__ dout, int64_t ldOut, const float *__restrict__ lse,
                        const float *__restrict__ delta, float *__restrict__ dqAccum,
                        bf16 *__restrict__ dk, bf16 *__restrict__ dv, int seq, int heads,
                        float scale, float scaleLog2) {
  extern __shared__ __align__(16) unsigned char shared[];
  constexpr int stride = D + kPad, chunks = D / 8;
  constexpr int dsStride = kBlockRows + kPad;
  bf16 *kTile = reinterpret_cast<bf16 *>(shared); // [64][D + pad]
  bf16 *vTile = kTile + kBlockRows * stride;      // [64][D + pad]
  bf16 *qTiles = vTile + kBlockRows * stride;     // [2][BQ][D + pad]
  bf16 *doTiles = qTiles + 2 * BQ * stride;       // [2][BQ][D + pad]
  bf16 *dsTile = doTiles + 2 * BQ * stride;       // [BQ][64 + pad]: dS[query][key]
  float *lseTiles = reinterpret_cast<float *>(dsTile + BQ * dsStride); // [2][BQ]
  float *deltaTiles = lseTiles + 2 * BQ;                               // [2][BQ]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, b = blockIdx.z;
  const int k0 = blockIdx.x * kBlockRows;
  const int64_t token0 = static_cast<int64_t>(b) * seq;
  const bf16 *qHead = q + token0 * ldIn + h * headStride;
  const bf16 *kHead = k + token0 * ldIn + h * headStride;
  const bf16 *vHead = v + token0 * ldIn + h * headStride;
  const bf16 *doHead = dout + token0 * ldOut + h * D;
  const float *lseHead = lse + (static_cast<int64_t>(b) * heads + h) * seq;
  const float *deltaHead = delta + (static_cast<int64_t>(b) * heads + h) * seq;
  const int64_t dqLd = static_cast<int64_t>(heads) * D;
  float *dqHead = dqAccum + token0 * dqLd + h * D;

  auto fetch = [&](int buffer, int i0) {
    bf16 *qt = qTiles + buffer * BQ * stride, *dot = doTiles + buffer * BQ * stride;
    for (int i = threadIdx.x; i < BQ * chunks; i += blockDim.x) {
      int r = i / chunks, c = (i % chunks) * 8;
      bool inside = i0 + r < seq;
      int64_t row = inside ? i0 + r : 0;
      copyAsync(qt + r * stride + c, qHead + row * ldIn + c, inside);
      copyAsync(dot + r * stride + c, doHead + row * ldOut + c, inside);
    }
    for (int i = threadIdx.x; i < BQ; i += blockDim.x) {
      bool inside = i0 + i < seq;
      int64_t row = inside ? i0 + i : 0;
      copyAsync4(lseTiles + buffer * BQ + i, lseHead + row, inside);
      copyAsync4(deltaTiles + buffer * BQ + i, deltaHead + row, inside);
    }
    commitAsync();
  };

  loadTile<D>(kTile, kHead, ldIn, k0, kBlockRows, seq);
  loadTile<D>(vTile, vHead, ldIn, k0, kBlockRows, seq);
  const int iStart = (k0 / BQ) * BQ;
  fetch(0, iStart);

  const int warpKey0 = k0 + warp * kRowsPerWarp;
  const int keyA = warpKey0 + g, keyB = keyA + 8;
  const bf16 *kWarp = kTile + warp * kRowsPerWarp * stride;
  const bf16 *vWarp = vTile + warp * kRowsPerWarp * stride;
  float dkAcc[D / 8][4], dvAcc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dkAcc[dt][e] = dvAcc[dt][e] = 0.0f;

  for (int i0 = iStart, buffer = 0; i0 < seq; i0 += BQ, buffer ^= 1) {
    if (i0 + BQ < seq) {
      fetch(buffer ^ 1, i0 + BQ);
      waitAsync<1>();
    } else {
      waitAsync<0>();
    }
    // Also: the previous block's dQ product has read dsTile.
    __syncthreads();
    const bf16 *qTile = qTiles + buffer * BQ * stride;
    const bf16 *doTile = doTiles + buffer * BQ * stride;
    const float *lseTile = lseTiles + buffer * BQ;
    const float *deltaTile = deltaTiles + buffer * BQ;

    // A query sees this warp's keys only from warpKey0 on.
    if (i0 + BQ - 1 < warpKey0) {
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int column = nt * 8 + 2 * t + (e & 1);
          int keyLocal = warp * kRowsPerWarp + g + (e < 2 ? 0 : 8);
          dsTile[column * dsStride + keyLocal] = __float2bfloat16_rn(0.0f);
        }
    } else {
      // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ: 16 keys × BQ queries.
      float s[BQ / 8][4], dp[BQ / 8][4];
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] = dp[nt][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ka[4], va[4];
        loadA(ka, kWarp, stride, kk * 16, lane);
        loadA(va, vWarp, stride, kk * 16, lane);
#pragma unroll
        for (int np = 0; np < BQ / 16; ++np) {
          uint32_t bq[4], bdo[4];
          loadBT(bq, qTile, stride, np * 16, kk * 16, lane);
          loadBT(bdo, doTile, stride, np * 16, kk * 16, lane);
          mma(s[2 * np], ka, bq);
          mma(s[2 * np + 1], ka, bq + 2);
          mma(dp[2 * np], va, bdo);
          mma(dp[2 * np + 1], va, bdo + 2);
        }
      }
      // Pᵀ = exp2(scaled Sᵀ − lse) on visible pairs, dSᵀ = Pᵀ ∘ (dPᵀ − delta). Queries before
      // the warp's last key, or keys or queries past the sequence, need the mask.
      const bool masked =
          i0 < warpKey0 + kRowsPerWarp - 1 || i0 + BQ > seq || warpKey0 + kRowsPerWarp > seq;
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int column = nt * 8 + 2 * t + (e & 1);
          float p = exp2f(s[nt][e] * scaleLog2 - lseTile[column]);
          if (masked) {
            int query = i0 + column;
            int key = e < 2 ? keyA : keyB;
            if (key > query || query >= seq || key >= seq)
              p = 0.0f;
          }
          s[nt][e] = p;
          dp[nt][e] = p * (dp[nt][e] - deltaTile[column]);
        }
      // dV += Pᵀ dO and dK += dSᵀ Q (scaled at the end), BQ queries as the inner dimension.
#pragma unroll
      for (int kk = 0; kk < BQ / 16; ++kk) {
        uint32_t pa[4], dsa[4];
        accumulatorToA(pa, s, kk);
        accumulatorToA(dsa, dp, kk);
#pragma unroll
        for (int dp2 = 0; dp2 < D / 16; ++dp2) {
          uint32_t bdo[4], bq[4];
          loadB(bdo, doTile, stride, dp2 * 16, kk * 16, lane);
          loadB(bq, qTile, stride, dp2 * 16, kk * 16, lane);
          mma(dvAcc[2 * dp2], pa, bdo);
          mma(dvAcc[2 * dp2 + 1], pa, bdo + 2);
          mma(dkAcc[2 * dp2], dsa, bq);
          mma(dkAcc[2 * dp2 + 1], dsa, bq + 2);
        }
      }
      // dS (bf16, the value the dK product used) into shared memory as [query][key] for dQ.
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int column = nt * 8 + 2 * t + (e & 1);
          int keyLocal = warp * kRowsPerWarp + g + (e < 2 ? 0 : 8);
          dsTile[column * dsStride + keyLocal] = __float2bfloat16_rn(dp[nt][e]);
        }
    }
    __syncthreads();
    // dQ[i0 .., :] += dS K: the BQ/16 row tiles of 16 queries split over the warps, each warp a
    // slice of the D columns.
    constexpr int rowTiles = BQ / 16;
    constexpr int warpsPerRowTile = kWarps / rowTiles;
    constexpr int columns = D / warpsPerRowTile;
    const int rowTile = warp % rowTiles, column0 = (warp / rowTiles) * columns;
    float dq[columns / 8][4];
#pragma unroll
    for (int dt = 0; dt < columns / 8; ++dt)
      dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kBlockRows / 16; ++kk) {
      uint32_t a[4];
      loadA(a, dsTile + rowTile * 16 * dsStride, dsStride, kk * 16, lane);
#pragma unroll
      for (int dp2 = 0; dp2 < columns / 16; ++dp2) {
        uint32_t bk[4];
        loadB(bk, kTile, stride, column0 + dp2 * 16, kk * 16, lane);
        mma(dq[2 * dp2], a, bk);
        mma(dq[2 * dp2 + 1], a, bk + 2);
      }
    }
    const int queryA = i0 + rowTile * 16 + g, queryB = queryA + 8;
#pragma unroll
    for (int dt = 0; dt < columns / 8; ++dt) {
      int c = column0 + dt * 8 + 2 * t;
      if (queryA < seq) {
        atomicAdd(dqHead + queryA * dqLd + c, dq[dt][0]);
        atomicAdd(dqHead + queryA * dqLd + c + 1, dq[dt][1]);
      }
      if (queryB < seq) {
        atomicAdd(dqHead + queryB * dqLd + c, dq[dt][2]);
        atomicAdd(dqHead + queryB * dqLd + c + 1, dq[dt][3]);
      }
    }
  }

  bf16 *dkHead = dk + token0 * ldIn + h * headStride;
  bf16 *dvHead = dv + token0 * ldIn + h * headStride;
  for (int dt = 0; dt < D / 8; ++dt) {
    int c = dt * 8 + 2 * t;
    if (keyA < seq) {
      *reinterpret_cast<uint32_t *>(dkHead + static_cast<int64_t>(keyA) * ldIn + c) =
          pack(dkAcc[dt][0] * scale, dkAcc[dt][1] * scale);
      *reinterpret_cast<uint32_t *>(dvHead + static_cast<int64_t>(keyA) * ldIn + c) =
          pack(dvAcc[dt][0], dvAcc[dt][1]);
    }
    if (keyB < seq) {
      *reinterpret_cast<uint32_t *>(dkHead + static_cast<int64_t>(keyB) * ldIn + c) =
          pack(dkAcc[dt][2] * scale, dkAcc[dt][3] * scale);
      *reinterpret_cast<uint32_t *>(dvHead + static_cast<int64_t>(keyB) * ldIn + c) =
          pack(dvAcc[dt][2], dvAcc[dt][3]);
    }
  }
}

template <int D> constexpr int queryBlock() { return D >= 128 ? 32 : 64; }

template <int D> size_t backwardShared() {
  constexpr int bq = queryBlock<D>();
  return sizeof(bf16) * ((2 * kBlockRows + 4 * bq) * (D + kPad) + bq * (kBlockRows + kPad)) +
         sizeof(float) * 4 * bq;
}

template <int D>
cudaError_t forward(const bf16 *q, const bf16 *k, const bf16 *v, int64_t ldIn, int64_t headStride,
                    bf16 *out, int64_t ldOut, float *lse, int64_t batch, int64_t seq, int64_t heads,
                    cudaStream_t stream) {
  float scaleLog2 = static_cast<float>(kLog2e / std::sqrt(static_cast<double>(D)));
  dim3 grid(static_cast<unsigned>((seq + kBlockRows - 1) / kBlockRows),
            static_cast<unsigned>(heads), static_cast<unsigned>(batch));
  const size_t shared = sizeof(bf16) * 4 * kBlockRows * (D + kPad);
  auto kernel = flashForwardKernel<D>;
  if (cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(shared));
      error != cudaSuccess)
    return error;
  kernel<<<grid, kWarps * 32, shared, stream>>>(q, k, v, ldIn, headStride, out, ldOut, lse,
                                                static_cast<int>(seq), static_cast<int>(heads),
                                                scaleLog2);
  return cudaGetLastError();
}

template <int D>
cudaError_t backward(const bf16 *q, const bf16 *k, const bf16 *v, int64_t ldIn, int64_t headStride,
                     const bf16 *out, const bf16 *dout, int64_t ldOut, const float *lse, bf16 *dq,
                     bf16 *dk, bf16 *dv, int64_t batch, int64_t seq, int64_t heads,
                     FlashWorkspace workspace, cudaStream_t stream) {
  const int64_t tokens = batch * seq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  cudaError_t error = cudaMemsetAsync(
      workspace.dqAccum, 0, sizeof(float) * static_cast<size_t>(tokens * heads * D), stream);
  if (error != cudaSuccess)
    return error;
  int64_t warps = tokens * heads;
  flashDeltaKernel<<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, stream>>>(
      out, dout, ldOut, workspace.delta, tokens, static_cast<int>(seq), static_cast<int>(heads), D);
  if ((error = cudaGetLastError()) != cudaSuccess)
    return error;
  constexpr int bq = queryBlock<D>();
  size_t shared = backwardShared<D>();
  auto kernel = flashBackwardKernel<D, bq>;
  if ((error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(shared))) != cudaSuccess)
    return error;
  dim3 grid(static_cast<unsigned>((seq + kBlockRows - 1) / kBlockRows),
            static_cast<unsigned>(heads), static_cast<unsigned>(batch));
  kernel<<<grid, kWarps * 32, shared, stream>>>(
      q, k, v, ldIn, headStride, dout, ldOut, lse, workspace.delta, workspace.dqAccum, dk, dv,
      static_cast<int>(seq), static_cast<int>(heads), static_cast<float>(scale),
      static_cast<float>(scale * kLog2e));
  if ((error = cudaGetLastError()) != cudaSuccess)
    return error;
  int64_t elements = tokens * heads * D;
  int64_t blocks = std::min<int64_t>((elements + 255) / 256, 65535 * 8);
  flashDqKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      workspace.dqAccum, dq, ldIn, headStride, tokens, static_cast<int>(heads), D,
      static_cast<float>(scale));
  return cudaGetLastError();
}

bool aligned(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Calls run(std::integral_constant<int, D>) for the supported head size D = headDim (16, 32, 64,
/// otherwise 128: the callers have checked flashAttentionSupports).
template <class Run> cudaError_t withHeadDim(int64_t headDim, Run run) {
  switch (headDim) {
  case 16:
    return run(std::integral_constant<int, 16>());
  case 32:
    return run(std::integral_constant<int, 32>());
  case 64:
    return run(std::integral_constant<int, 64>());
  default:
    return run(std::integral_constant<int, 128>());
  }
}

} // namespace

bool flashAttentionSupports(int64_t headDim, int64_t ldIn, int64_t headStride, int64_t ldOut) {
  bool dims = headDim == 16 || headDim == 32 || headDim == 64 || headDim == 128;
  // 16-byte rows: every leading dimension and head offset a multiple of 8 elements.
  return dims && ldIn % 8 == 0 && headStride % 8 == 0 && ldOut % 8 == 0;
}

int64_t FlashWorkspace::getDqElements(int64_t tokens, int64_t heads, int64_t headDim) {
  return tokens * heads * headDim;
}

int64_t FlashWorkspace::getDeltaElements(int64_t tokens, int64_t heads) { return tokens * heads; }

cudaError_t flashAttentionForward(const bf16 *q, const bf16 *k, const bf16 *v, int64_t ldIn,
                                  int64_t headStride, bf16 *out, int64_t ldOut, float *lse,
                                  int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                                  cudaStream_t stream) {
  if (!flashAttentionSupports(headDim, ldIn, headStride, ldOut) || !aligned(q) || !aligned(k) ||
      !aligned(v) || !aligned(out))
    return cudaErrorInvalidValue;
  return withHeadDim(headDim, [&](auto d) {
    return forward<decltype(d)::value>(q, k, v, ldIn, headStride, out, ldOut, lse, batch, seq,
                                       heads, stream);
  });
}

cudaError_t flashAttentionBackward(const bf16 *q, const bf16 *k, const bf16 *v, int64_t ldIn,
                                   int64_t headStride, const bf16 *out, const bf16 *dout,
                                   int64_t ldOut, const float *lse, bf16 *dq, bf16 *dk, bf16 *dv,
                                   int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                                   FlashWorkspace workspace, cudaStream_t stream) {
  if (!flashAttentionSupports(headDim, ldIn, headStride, ldOut) || !aligned(q) || !aligned(k) ||
      !aligned(v) || !aligned(out) || !aligned(dout) || !aligned(dq) || !aligned(dk) ||
      !aligned(dv) || !lse || !workspace.dqAccum || !workspace.delta)
    return cudaErrorInvalidValue;
  return withHeadDim(headDim, [&](auto d) {
    return backward<decltype(d)::value>(q, k, v, ldIn, headStride, out, dout, ldOut, lse, dq, dk,
                                        dv, batch, seq, heads, workspace, stream);
  });
}

} // namespace kernels
} // namespace cuda
} // namespace placert
