// placert-cuda-attention-bench: times the fused causal attention (FlashAttention.cu) forward and
// backward on one GPU, on q, k and v packed as the GPT trainer keeps them (the qkv projection's
// output, rows [head][q, k, v][headDim]).
//
//   placert-cuda-attention-bench BATCH SEQ HEADS HEAD_DIM [REPEATS]
//
// prints one line: the shape, the median forward and backward milliseconds over REPEATS (default
// 20) timed calls after two untimed ones, and their rates in TFLOP/s counting the causal half of
// the products (forward 2 · 2·b·h·s²·d / 2; backward 2.5 times that: five products against two).
// Inputs are random (never zeros); outputs are poisoned with NaN before the timed calls and
// checked for NaN after them. Exits 1 with a message naming the failing call, 77 without a device.
#include "CudaKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using placert::cuda::kernels::bf16;

namespace {

#define BENCH_CHECK(call)                                                                          \
  do {                                                                                             \
    cudaError_t error_ = (call);                                                                   \
    if (error_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "placert-cuda-attention-bench: %s: %s\n", #call,                        \
                   cudaGetErrorString(error_));                                                    \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

/// Uniform values in [-1, 1) from a hash of the index and the seed.
__global__ void randomFill(bf16 *out, int64_t n, uint32_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    out[i] = __float2bfloat16_rn(static_cast<float>(x >> 8) / 8388608.0f - 1.0f);
  }
}

__global__ void poison(bf16 *out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(NAN);
}

__global__ void countNan(const bf16 *in, int64_t n, unsigned long long *count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!isfinite(__bfloat162float(in[i])))
      atomicAdd(count, 1ull);
}

bf16 *allocate(int64_t n) {
  void *p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, sizeof(bf16) * static_cast<size_t>(n)));
  return static_cast<bf16 *>(p);
}

double median(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

bool parse(const char *text, int64_t &value) {
  char *end = nullptr;
  long long parsed = std::strtoll(text, &end, 10);
  if (!end || *end || parsed <= 0)
    return false;
  value = parsed;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  int64_t batch = 0, seq = 0, heads = 0, headDim = 0, repeats = 20;
  if ((argc != 5 && argc != 6) || !parse(argv[1], batch) || !parse(argv[2], seq) ||
      !parse(argv[3], heads) || !parse(argv[4], headDim) ||
      (argc == 6 && !parse(argv[5], repeats))) {
    std::fprintf(stderr, "usage: placert-cuda-attention-bench BATCH SEQ HEADS HEAD_DIM [REPEATS] "
                         "(positive integers)\n");
    return 1;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "placert-cuda-attention-bench: no CUDA device, skipped\n");
    return 77;
  }
  const int64_t tokens = batch * seq, width = heads * headDim, ldIn = 3 * width;
  const int64_t headStride = 3 * headDim;
  if (!placert::cuda::kernels::flashAttentionSupports(headDim, ldIn, headStride, width)) {
    std::fprintf(stderr,
                 "placert-cuda-attention-bench: head size %lld is not supported (16, 32, "
                 "64 or 128)\n",
                 static_cast<long long>(headDim));
    return 1;
  }
  bf16 *qkv = allocate(tokens * ldIn), *dqkv = allocate(tokens * ldIn);
  bf16 *out = allocate(tokens * width), *dout = allocate(tokens * width);
  float *lse = nullptr, *dqAccum = nullptr, *delta = nullptr;
  using placert::cuda::kernels::FlashWorkspace;
  BENCH_CHECK(cudaMalloc(&lse, sizeof(float) * static_cast<size_t>(tokens * heads)));
  BENCH_CHECK(cudaMalloc(
      &dqAccum,
      sizeof(float) * static_cast<size_t>(FlashWorkspace::getDqElements(tokens, heads, headDim))));
  BENCH_CHECK(
      cudaMalloc(&delta, sizeof(float) *
                             static_cast<size_t>(FlashWorkspace::getDeltaElements(tokens, heads))));
  randomFill<<<1024, 256>>>(qkv, tokens * ldIn, 1u);
  randomFill<<<1024, 256>>>(dout, tokens * width, 2u);
  poison<<<1024, 256>>>(out, tokens * width);
  poison<<<1024, 256>>>(dqkv, tokens * ldIn);
  BENCH_CHECK(cudaGetLastError());

  const bf16 *q = qkv, *k = qkv + headDim, *v = qkv + 2 * headDim;
  bf16 *dq = dqkv, *dk = dqkv + headDim, *dv = dqkv + 2 * headDim;
  auto forward = [&] {
    return placert::cuda::kernels::flashAttentionForward(q, k, v, ldIn, headStride, out, width, lse,
                                                         batch, seq, heads, headDim, 0);
  };
  auto backward = [&] {
    return placert::cuda::kernels::flashAttentionBackward(
        q, k, v, ldIn, headStride, out, dout, width, lse, dq, dk, dv, batch, seq, heads, headDim,
        FlashWorkspace{dqAccum, delta}, 0);
  };
  for (int i = 0; i < 2; ++i) {
    BENCH_CHECK(forward());
    BENCH_CHECK(backward());
  }
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  // Milliseconds of one call, between two events.
  auto time = [&](auto call) {
    float ms = 0.0f;
    BENCH_CHECK(cudaEventRecord(start));
    BENCH_CHECK(call());
    BENCH_CHECK(cudaEventRecord(stop));
    BENCH_CHECK(cudaEventSynchronize(stop));
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  };
  std::vector<float> forwardMs, backwardMs;
  for (int64_t i = 0; i < repeats; ++i) {
    forwardMs.push_back(time(forward));
    backwardMs.push_back(time(backward));
  }
  unsigned long long *nan = nullptr, count = 0;
  BENCH_CHECK(cudaMalloc(&nan, sizeof(unsigned long long)));
  BENCH_CHECK(cudaMemset(nan, 0, sizeof(unsigned long long)));
  countNan<<<1024, 256>>>(out, tokens * width, nan);
  countNan<<<1024, 256>>>(dqkv, tokens * ldIn, nan);
  BENCH_CHECK(cudaGetLastError());
  BENCH_CHECK(cudaMemcpy(&count, nan, sizeof(count), cudaMemcpyDeviceToHost));
  if (count) {
    std::fprintf(stderr, "placert-cuda-attention-bench: %llu outputs not finite\n", count);
    return 1;
  }
  const double forwardFlops = 2.0 * batch * heads * static_cast<double>(seq) * seq * headDim;
  const double fwd = median(forwardMs), bwd = median(backwardMs);
  std::printf("batch %lld seq %lld heads %lld head_dim %lld: forward %.3f ms %.1f TFLOP/s, "
              "backward %.3f ms %.1f TFLOP/s\n",
              static_cast<long long>(batch), static_cast<long long>(seq),
              static_cast<long long>(heads), static_cast<long long>(headDim), fwd,
              forwardFlops / (fwd * 1e-3) / 1e12, bwd, 2.5 * forwardFlops / (bwd * 1e-3) / 1e12);
  return 0;
}
