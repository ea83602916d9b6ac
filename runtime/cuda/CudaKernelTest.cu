// placert-cuda-kernel-test: every CUDA kernel of the GPT trainer against the fp32 CPU reference
// (runtime/src/GptKernels.h; Kernels.h's linear and GELU when built with the CPU placert, else
// the same formulas in double precision here) on fresh seeded random inputs. bf16 operands are
// rounded once and given to both sides, so the comparison measures the kernels, not the inputs.
// Pass: ‖out − ref‖ / ‖ref‖ below 1e-2 for bf16 outputs or operands, 1e-5 for fp32 paths; NaN
// or Inf never passes. Exits 77 (skipped) when there is no CUDA device.
#include "CudaKernels.h"
#include "GptKernels.h"
#ifdef PLACERT_KERNEL_TEST_CPU_KERNELS
#include "Kernels.h"
#endif

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace placert;
using namespace placert::cuda::kernels;

namespace {

int passed = 0, failed = 0;

/// xorshift64*: uniform in [lo, hi).
struct Random {
  uint64_t state;
  explicit Random(uint64_t seed) : state(seed * 0x9e3779b97f4a7c15ull + 1) {}
  double next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return static_cast<double>((state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
  }
  std::vector<float> uniform(size_t n, float lo, float hi) {
    std::vector<float> out(n);
    for (float &v : out)
      v = lo + static_cast<float>(next()) * (hi - lo);
    return out;
  }
  std::vector<int32_t> ints(size_t n, int64_t lo, int64_t hi) {
    std::vector<int32_t> out(n);
    for (int32_t &v : out)
      v = static_cast<int32_t>(lo + static_cast<int64_t>(next() * static_cast<double>(hi - lo)));
    return out;
  }
};

float roundBf16(float value) { return __bfloat162float(__float2bfloat16_rn(value)); }
std::vector<float> rounded(std::vector<float> values) {
  for (float &v : values)
    v = roundBf16(v);
  return values;
}

void check(cudaError_t error, const char *what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "placert-cuda-kernel-test: %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

/// A device copy of host values, as bf16 or fp32 or int32.
template <class T> struct Device {
  T *data = nullptr;
  size_t n = 0;
  explicit Device(size_t n) : n(n) {
    check(cudaMalloc(reinterpret_cast<void **>(&data), std::max<size_t>(1, n) * sizeof(T)),
          "cudaMalloc");
  }
  Device(const Device &) = delete;
  ~Device() { cudaFree(data); }
};

Device<bf16> *toBf16(const std::vector<float> &host) {
  auto *d = new Device<bf16>(host.size());
  std::vector<bf16> tmp(host.size());
  for (size_t i = 0; i < host.size(); ++i)
    tmp[i] = __float2bfloat16_rn(host[i]);
  check(cudaMemcpy(d->data, tmp.data(), tmp.size() * sizeof(bf16), cudaMemcpyHostToDevice), "copy");
  return d;
}

template <class T> Device<T> *toDevice(const std::vector<T> &host) {
  auto *d = new Device<T>(host.size());
  check(cudaMemcpy(d->data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "copy");
  return d;
}

std::vector<float> fromDevice(const Device<bf16> &d) {
  check(cudaDeviceSynchronize(), "kernel");
  std::vector<bf16> tmp(d.n);
  check(cudaMemcpy(tmp.data(), d.data, d.n * sizeof(bf16), cudaMemcpyDeviceToHost), "copy");
  std::vector<float> out(d.n);
  for (size_t i = 0; i < d.n; ++i)
    out[i] = __bfloat162float(tmp[i]);
  return out;
}

std::vector<float> fromDevice(const Device<float> &d) {
  check(cudaDeviceSynchronize(), "kernel");
  std::vector<float> out(d.n);
  check(cudaMemcpy(out.data(), d.data, d.n * sizeof(float), cudaMemcpyDeviceToHost), "copy");
  return out;
}

/// Records one comparison: relative L2 error against `tolerance`; non-finite values fail.
void compare(const std::string &name, const std::vector<float> &out, const std::vector<float> &ref,
             double tolerance) {
  double diff = 0, norm = 0;
  bool finite = out.size() == ref.size();
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (!std::isfinite(out[i]) || !std::isfinite(ref[i]))
      finite = false;
    diff += (static_cast<double>(out[i]) - ref[i]) * (static_cast<double>(out[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  double relative = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
  bool ok = finite && norm > 0 && relative < tolerance;
  std::printf("%-34s %s  rel.err %.3e (tolerance %.0e)%s\n", name.c_str(), ok ? "PASS" : "FAIL",
              relative, tolerance,
              !finite ? " non-finite or size mismatch" : (norm > 0 ? "" : " zero reference"));
  (ok ? passed : failed)++;
}

constexpr double kBf16Tolerance = 1e-2, kFp32Tolerance = 1e-5;

void referenceLinearForward(const std::vector<float> &x, const std::vector<float> &w,
                            const std::vector<float> &b, std::vector<float> &y, int64_t batch,
                            int64_t in, int64_t out) {
#ifdef PLACERT_KERNEL_TEST_CPU_KERNELS
  createCpuKernels()->linearForward(x.data(), w.data(), b.data(), y.data(), batch, in, out);
#else
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = b[o];
      for (int64_t i = 0; i < in; ++i)
        sum += static_cast<double>(x[r * in + i]) * w[o * in + i];
      y[r * out + o] = static_cast<float>(sum);
    }
#endif
}

void referenceLinearWeightGrad(const std::vector<float> &x, const std::vector<float> &dy,
                               std::vector<float> &dw, std::vector<float> &db, int64_t batch,
                               int64_t in, int64_t out) {
#ifdef PLACERT_KERNEL_TEST_CPU_KERNELS
  createCpuKernels()->linearWeightGrad(x.data(), dy.data(), dw.data(), db.data(), batch, in, out);
#else
  for (int64_t o = 0; o < out; ++o) {
    double bias = 0;
    for (int64_t r = 0; r < batch; ++r)
      bias += dy[r * out + o];
    db[o] += static_cast<float>(bias);
    for (int64_t i = 0; i < in; ++i) {
      double sum = 0;
      for (int64_t r = 0; r < batch; ++r)
        sum += static_cast<double>(dy[r * out + o]) * x[r * in + i];
      dw[o * in + i] += static_cast<float>(sum);
    }
  }
#endif
}

void referenceLinearInputGrad(const std::vector<float> &dy, const std::vector<float> &w,
                              std::vector<float> &dx, int64_t batch, int64_t in, int64_t out) {
#ifdef PLACERT_KERNEL_TEST_CPU_KERNELS
  createCpuKernels()->linearInputGrad(dy.data(), w.data(), dx.data(), batch, in, out);
#else
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t i = 0; i < in; ++i) {
      double sum = 0;
      for (int64_t o = 0; o < out; ++o)
        sum += static_cast<double>(dy[r * out + o]) * w[o * in + i];
      dx[r * in + i] = static_cast<float>(sum);
    }
#endif
}

void referenceGelu(const std::vector<float> &x, const std::vector<float> &dy, std::vector<float> &y,
                   std::vector<float> &dx) {
#ifdef PLACERT_KERNEL_TEST_CPU_KERNELS
  auto cpu = createCpuKernels();
  cpu->geluForward(x.data(), y.data(), static_cast<int64_t>(x.size()));
  cpu->geluBackward(x.data(), dy.data(), dx.data(), static_cast<int64_t>(x.size()));
#else
  const double k = 0.7978845608028654;
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i], t = std::tanh(k * (v + 0.044715 * v * v * v));
    y[i] = static_cast<float>(0.5 * v * (1 + t));
    dx[i] = static_cast<float>(
        dy[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v)));
  }
#endif
}

void testLinear(Random &random, cublasHandle_t handle, int64_t batch, int64_t in, int64_t out) {
  const std::string suffix = " [out " + std::to_string(out) + "]";
  auto x = rounded(random.uniform(batch * in, -1, 1));
  auto w = rounded(random.uniform(out * in, -0.5f, 0.5f));
  auto b = rounded(random.uniform(out, -1, 1));
  auto dy = rounded(random.uniform(batch * out, -1, 1));
  std::vector<float> y(batch * out), dx(batch * in);
  auto dw = random.uniform(out * in, -1, 1), db = random.uniform(out, -1, 1);
  std::vector<float> dwRef = dw, dbRef = db;
  referenceLinearForward(x, w, b, y, batch, in, out);
  referenceLinearWeightGrad(x, dy, dwRef, dbRef, batch, in, out);
  referenceLinearInputGrad(dy, w, dx, batch, in, out);

  auto dX = toBf16(x), dW = toBf16(w), dB = toBf16(b), dDy = toBf16(dy);
  Device<bf16> dY(batch * out), dDx(batch * in);
  auto dDw = toDevice(dw), dDb = toDevice(db);
  bool ok = linearForward(handle, dX->data, dW->data, dB->data, dY.data, batch, in, out, false,
                          nullptr) == CUBLAS_STATUS_SUCCESS;
  ok &= linearWeightGrad(handle, dX->data, dDy->data, dDw->data, dDb->data, batch, in, out,
                         nullptr) == CUBLAS_STATUS_SUCCESS;
  ok &= linearInputGrad(handle, dDy->data, dW->data, dDx.data, batch, in, out, false, nullptr) ==
        CUBLAS_STATUS_SUCCESS;
  if (!ok)
    std::printf("linear: a cuBLAS call failed\n");
  compare("linearForward y" + suffix, fromDevice(dY), y, kBf16Tolerance);
  compare("linearWeightGrad dw (+=)" + suffix, fromDevice(*dDw), dwRef, kBf16Tolerance);
  compare("linearWeightGrad dbias (+=)" + suffix, fromDevice(*dDb), dbRef, kBf16Tolerance);
  compare("linearInputGrad dx" + suffix, fromDevice(dDx), dx, kBf16Tolerance);
  delete dX, delete dW, delete dB, delete dDy, delete dDw, delete dDb;
}

void testGelu(Random &random) {
  const int64_t n = 5000;
  auto x = rounded(random.uniform(n, -4, 4)), dy = rounded(random.uniform(n, -1, 1));
  std::vector<float> y(n), dx(n);
  referenceGelu(x, dy, y, dx);
  auto dX = toBf16(x), dDy = toBf16(dy);
  Device<bf16> dY(n), dDx(n);
  geluForward(dX->data, dY.data, n, nullptr);
  geluBackward(dX->data, dDy->data, dDx.data, n, nullptr);
  compare("geluForward", fromDevice(dY), y, kBf16Tolerance);
  compare("geluBackward", fromDevice(dDx), dx, kBf16Tolerance);
  delete dX, delete dDy;
}

void testLayerNorm(Random &random) {
  const int64_t rows = 37, cols = 300;
  auto x = rounded(random.uniform(rows * cols, -2, 3));
  auto gamma = rounded(random.uniform(cols, 0.5f, 1.5f));
  auto beta = rounded(random.uniform(cols, -0.5f, 0.5f));
  auto dy = rounded(random.uniform(rows * cols, -1, 1));
  std::vector<float> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols);
  auto dgamma = random.uniform(cols, -1, 1), dbeta = random.uniform(cols, -1, 1);
  std::vector<float> dgammaRef = dgamma, dbetaRef = dbeta;
  gpt::layerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                        rows, cols, 1e-5f);
  gpt::layerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                         dgammaRef.data(), dbetaRef.data(), rows, cols);
  auto dX = toBf16(x), dG = toBf16(gamma), dB = toBf16(beta), dDy = toBf16(dy);
  Device<bf16> dY(rows * cols), dDx(rows * cols);
  Device<float> dMean(rows), dRstd(rows);
  auto dDg = toDevice(dgamma), dDb = toDevice(dbeta);
  layerNormForward(dX->data, dG->data, dB->data, dY.data, dMean.data, dRstd.data, rows, cols, 1e-5f,
                   nullptr);
  layerNormBackward(dX->data, dG->data, dMean.data, dRstd.data, dDy->data, dDx.data, dDg->data,
                    dDb->data, rows, cols, false, nullptr);
  compare("layerNormForward y", fromDevice(dY), y, kBf16Tolerance);
  compare("layerNormForward mean", fromDevice(dMean), mean, kFp32Tolerance);
  compare("layerNormForward rstd", fromDevice(dRstd), rstd, kFp32Tolerance);
  compare("layerNormBackward dx", fromDevice(dDx), dx, kBf16Tolerance);
  compare("layerNormBackward dgamma (+=)", fromDevice(*dDg), dgammaRef, kBf16Tolerance);
  compare("layerNormBackward dbeta (+=)", fromDevice(*dDb), dbetaRef, kBf16Tolerance);
  delete dX, delete dG, delete dB, delete dDy, delete dDg, delete dDb;
}

/// Causal attention of `batch` sequences of `seq` tokens against the CPU reference, through the
/// cuBLAS path (scores in device memory) and the fused path (FlashAttention.cu), each on separate
/// q, k, v arrays and on the trainer's packed [rows, 3·width] array ([head][q, k, v][headDim]).
/// Every output is poisoned (NaN) before each run, so an unwritten element fails.
void testAttention(Random &random, cublasHandle_t handle, int64_t batch, int64_t seq,
                   int64_t heads, int64_t headDim, bool cublasPath) {
  const int64_t width = heads * headDim, n = batch * seq * width, rows = batch * seq;
  const std::string size = " [b" + std::to_string(batch) + " s" + std::to_string(seq) + " h" +
                           std::to_string(heads) + " d" + std::to_string(headDim) + "]";
  auto q = rounded(random.uniform(n, -1, 1)), k = rounded(random.uniform(n, -1, 1));
  auto v = rounded(random.uniform(n, -1, 1)), dout = rounded(random.uniform(n, -1, 1));
  std::vector<float> out(n), probs(batch * heads * seq * seq), dq(n), dk(n), dv(n);
  gpt::attentionForward(q.data(), k.data(), v.data(), out.data(), probs.data(), batch, seq, heads,
                        headDim);
  gpt::attentionBackward(q.data(), k.data(), v.data(), probs.data(), dout.data(), dq.data(),
                         dk.data(), dv.data(), batch, seq, heads, headDim);
  std::vector<float> packed(rows * 3 * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < headDim; ++d) {
        float *at = &packed[r * 3 * width + h * 3 * headDim + d];
        at[0] = q[r * width + h * headDim + d];
        at[headDim] = k[r * width + h * headDim + d];
        at[2 * headDim] = v[r * width + h * headDim + d];
      }
  auto dQ = toBf16(q), dK = toBf16(k), dV = toBf16(v), dPacked = toBf16(packed);
  auto dDout = toBf16(dout);
  Device<bf16> dOut(n), dDq(n), dDk(n), dDv(n), dGrad(rows * 3 * width);
  Device<float> lse(batch * heads * seq), dqAccum(FlashWorkspace::getDqElements(rows, heads, headDim)),
      delta(FlashWorkspace::getDeltaElements(rows, heads));
  int64_t square = cublasPath ? AttentionWorkspace::getElements(seq, heads) : 1;
  Device<float> scores(square);
  Device<bf16> p(square), ds(square);
  AttentionWorkspace workspace{scores.data, p.data, ds.data};
  FlashWorkspace flash{dqAccum.data, delta.data};

  for (int fused = cublasPath ? 0 : 1; fused < 2; ++fused)
    for (int layout = 0; layout < 2; ++layout) {
      const bool isPacked = layout == 1;
      const bf16 *qq = isPacked ? dPacked->data : dQ->data;
      const bf16 *kk = isPacked ? dPacked->data + headDim : dK->data;
      const bf16 *vv = isPacked ? dPacked->data + 2 * headDim : dV->data;
      const int64_t ldIn = isPacked ? 3 * width : width, stride = isPacked ? 3 * headDim : headDim;
      bf16 *gq = isPacked ? dGrad.data : dDq.data, *gk = isPacked ? dGrad.data + headDim : dDk.data;
      bf16 *gv = isPacked ? dGrad.data + 2 * headDim : dDv.data;
      for (void *poisoned : {static_cast<void *>(dOut.data), static_cast<void *>(dDq.data),
                             static_cast<void *>(dDk.data), static_cast<void *>(dDv.data)})
        check(cudaMemset(poisoned, 0xff, n * sizeof(bf16)), "cudaMemset");
      check(cudaMemset(dGrad.data, 0xff, rows * 3 * width * sizeof(bf16)), "cudaMemset");
      bool ok;
      if (fused) {
        ok = flashAttentionForward(qq, kk, vv, ldIn, stride, dOut.data, width, lse.data, batch,
                                   seq, heads, headDim, nullptr) == cudaSuccess;
        ok &= flashAttentionBackward(qq, kk, vv, ldIn, stride, dOut.data, dDout->data, width,
                                     lse.data, gq, gk, gv, batch, seq, heads, headDim, flash,
                                     nullptr) == cudaSuccess;
      } else {
        ok = attentionForward(handle, qq, kk, vv, ldIn, stride, dOut.data, width, batch, seq,
                              heads, headDim, workspace, nullptr) == CUBLAS_STATUS_SUCCESS;
        ok &= attentionBackward(handle, qq, kk, vv, ldIn, stride, dDout->data, width, gq, gk, gv,
                                batch, seq, heads, headDim, workspace,
                                nullptr) == CUBLAS_STATUS_SUCCESS;
      }
      const std::string name = std::string(fused ? "flashAttention" : "attention") +
                               (isPacked ? " packed" : "") + size;
      if (!ok)
        std::printf("%s: a launch failed: %s\n", name.c_str(),
                    cudaGetErrorString(cudaGetLastError()));
      std::vector<float> gotQ = fromDevice(dDq), gotK = fromDevice(dDk), gotV = fromDevice(dDv);
      if (isPacked) {
        std::vector<float> grad = fromDevice(dGrad);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < heads; ++h)
            for (int64_t d = 0; d < headDim; ++d) {
              const float *at = &grad[r * 3 * width + h * 3 * headDim + d];
              gotQ[r * width + h * headDim + d] = at[0];
              gotK[r * width + h * headDim + d] = at[headDim];
              gotV[r * width + h * headDim + d] = at[2 * headDim];
            }
      }
      compare(name + " out", fromDevice(dOut), out, kBf16Tolerance);
      compare(name + " dq", gotQ, dq, kBf16Tolerance);
      compare(name + " dk", gotK, dk, kBf16Tolerance);
      compare(name + " dv", gotV, dv, kBf16Tolerance);
    }
  delete dQ, delete dK, delete dV, delete dPacked, delete dDout;
}

void testEmbedding(Random &random) {
  // A vocabulary shard [offset, offset + local) of a vocabulary of 50: some tokens fall outside.
  const int64_t rows = 24, seq = 6, hidden = 40, vocab = 50, offset = 20, local = 17;
  auto tokens = random.ints(rows, 0, vocab);
  auto table = rounded(random.uniform(local * hidden, -1, 1));
  auto positions = rounded(random.uniform(seq * hidden, -1, 1));
  auto dout = rounded(random.uniform(rows * hidden, -1, 1));
  std::vector<float> out(rows * hidden);
  auto dtable = random.uniform(local * hidden, -1, 1), dpos = random.uniform(seq * hidden, -1, 1);
  std::vector<float> dtableRef = dtable, dposRef = dpos;
  gpt::embeddingForward(tokens.data(), table.data(), positions.data(), out.data(), rows, seq,
                        hidden, offset, local);
  gpt::embeddingBackward(tokens.data(), dout.data(), dtableRef.data(), dposRef.data(), rows, seq,
                         hidden, offset, local);
  auto dTok = toDevice(tokens);
  auto dTable = toBf16(table), dPos = toBf16(positions), dDout = toBf16(dout);
  Device<bf16> dOut(rows * hidden);
  auto dDtable = toDevice(dtable), dDpos = toDevice(dpos);
  embeddingForward(dTok->data, dTable->data, dPos->data, dOut.data, rows, seq, hidden, offset,
                   local, nullptr);
  embeddingBackward(dTok->data, dDout->data, dDtable->data, dDpos->data, rows, seq, hidden, offset,
                    local, nullptr);
  compare("embeddingForward", fromDevice(dOut), out, kBf16Tolerance);
  // Sums of bf16-exact values in fp32: the order of the atomics is the only difference.
  compare("embeddingBackward dtable (+=)", fromDevice(*dDtable), dtableRef, kFp32Tolerance);
  compare("embeddingBackward dpositions (+=)", fromDevice(*dDpos), dposRef, kFp32Tolerance);
  delete dTok, delete dTable, delete dPos, delete dDout, delete dDtable, delete dDpos;
}

void testCrossEntropy(Random &random) {
  const int64_t rows = 19, vocab = 1000, offset = 300, local = 400;
  auto logits = rounded(random.uniform(rows * local, -6, 6));
  auto targets = random.ints(rows, 0, vocab);
  targets[0] = static_cast<int32_t>(offset); // at least one local target
  std::vector<float> rowMax(rows), sumExp(rows), targetLogit(rows), dlogits(rows * local);
  const double scale = 1.0 / 57;
  gpt::crossEntropyRowMax(logits.data(), rowMax.data(), rows, local);
  gpt::crossEntropyPartials(logits.data(), targets.data(), rowMax.data(), sumExp.data(),
                            targetLogit.data(), rows, local, offset);
  double loss =
      gpt::crossEntropyLossAndGrad(logits.data(), targets.data(), rowMax.data(), sumExp.data(),
                                   targetLogit.data(), dlogits.data(), rows, local, offset, scale);
  auto dLogits = toBf16(logits);
  auto dTargets = toDevice(targets);
  Device<float> dMax(rows), dSum(rows), dTarget(rows);
  Device<bf16> dGrad(rows * local);
  Device<double> dLoss(1);
  check(cudaMemset(dLoss.data, 0, sizeof(double)), "memset");
  crossEntropyRowMax(dLogits->data, dMax.data, rows, local, nullptr);
  crossEntropyPartials(dLogits->data, dTargets->data, dMax.data, dSum.data, dTarget.data, rows,
                       local, offset, nullptr);
  crossEntropyLossAndGrad(dLogits->data, dTargets->data, dMax.data, dSum.data, dTarget.data,
                          dGrad.data, dLoss.data, rows, local, offset, scale, nullptr);
  compare("crossEntropyRowMax", fromDevice(dMax), rowMax, kFp32Tolerance);
  compare("crossEntropyPartials sumExp", fromDevice(dSum), sumExp, kFp32Tolerance);
  compare("crossEntropyPartials targetLogit", fromDevice(dTarget), targetLogit, kFp32Tolerance);
  compare("crossEntropyLossAndGrad dlogits", fromDevice(dGrad), dlogits, kBf16Tolerance);
  double gpuLoss = 0;
  check(cudaMemcpy(&gpuLoss, dLoss.data, sizeof(double), cudaMemcpyDeviceToHost), "copy");
  compare("crossEntropyLossAndGrad loss", {static_cast<float>(gpuLoss)}, {static_cast<float>(loss)},
          kFp32Tolerance);
  delete dLogits, delete dTargets;
}

void testAdam(Random &random) {
  const int64_t n = 4099;
  const float lr = 1e-3f;
  auto master = random.uniform(n, -1, 1), m = random.uniform(n, -0.1f, 0.1f);
  auto v = random.uniform(n, 0.001f, 0.01f);
  std::vector<float> masterRef = master, mRef = m, vRef = v;
  auto dMaster = toDevice(master), dM = toDevice(m), dV = toDevice(v);
  Device<bf16> working(n);
  for (int64_t t = 1; t <= 3; ++t) {
    auto grad = random.uniform(n, -1, 1);
    gpt::adamUpdate(masterRef.data(), grad.data(), mRef.data(), vRef.data(), n, t, lr);
    auto dGrad = toDevice(grad);
    adamUpdate(dMaster->data, dGrad->data, dM->data, dV->data, working.data, n, t, lr, nullptr);
    check(cudaDeviceSynchronize(), "adam");
    delete dGrad;
  }
  compare("adamUpdate master (3 steps)", fromDevice(*dMaster), masterRef, kFp32Tolerance);
  compare("adamUpdate m", fromDevice(*dM), mRef, kFp32Tolerance);
  compare("adamUpdate v", fromDevice(*dV), vRef, kFp32Tolerance);
  compare("adamUpdate bf16 working copy", fromDevice(working), masterRef, kBf16Tolerance);
  delete dMaster, delete dM, delete dV;

  // bf16 gradients (the trainer's): the reference gets the same rounded gradients in fp32.
  master = random.uniform(n, -1, 1), m = random.uniform(n, -0.1f, 0.1f);
  v = random.uniform(n, 0.001f, 0.01f);
  masterRef = master, mRef = m, vRef = v;
  dMaster = toDevice(master), dM = toDevice(m), dV = toDevice(v);
  for (int64_t t = 1; t <= 3; ++t) {
    auto grad = rounded(random.uniform(n, -1, 1));
    gpt::adamUpdate(masterRef.data(), grad.data(), mRef.data(), vRef.data(), n, t, lr);
    auto dGrad = toBf16(grad);
    adamUpdate(dMaster->data, dGrad->data, dM->data, dV->data, nullptr, n, t, lr, nullptr);
    check(cudaDeviceSynchronize(), "adam");
    delete dGrad;
  }
  compare("adamUpdate bf16 grads master", fromDevice(*dMaster), masterRef, kFp32Tolerance);
  compare("adamUpdate bf16 grads v", fromDevice(*dV), vRef, kFp32Tolerance);
  delete dMaster, delete dM, delete dV;
}

void testConversions(Random &random) {
  const int64_t n = 3001;
  auto values = random.uniform(n, -100, 100), other = random.uniform(n, -1, 1);
  auto dValues = toDevice(values), dOther = toDevice(other);
  Device<bf16> halves(n);
  Device<float> back(n);
  floatToBf16(dValues->data, halves.data, n, nullptr);
  bf16ToFloat(halves.data, back.data, n, nullptr);
  // Round to nearest even on both sides: the same bf16 values.
  compare("floatToBf16 + bf16ToFloat", fromDevice(back), rounded(values), kFp32Tolerance);
  std::vector<float> sum(n);
  for (int64_t i = 0; i < n; ++i)
    sum[i] = values[i] + other[i];
  accumulate(dValues->data, dOther->data, n, nullptr);
  compare("accumulate (+=)", fromDevice(*dValues), sum, kFp32Tolerance);
  // Into bf16 storage: the sum of the rounded value and the addend, rounded once.
  auto base = rounded(random.uniform(n, -10, 10)), addend = random.uniform(n, -1, 1);
  auto halfAddend = rounded(random.uniform(n, -1, 1));
  std::vector<float> fromFloat(n), fromHalf(n);
  for (int64_t i = 0; i < n; ++i) {
    fromFloat[i] = roundBf16(base[i] + addend[i]);
    fromHalf[i] = roundBf16(fromFloat[i] + halfAddend[i]);
  }
  auto dBase = toBf16(base), dHalfAddend = toBf16(halfAddend);
  auto dAddend = toDevice(addend);
  accumulate(dBase->data, dAddend->data, n, nullptr);
  compare("accumulate bf16 += fp32", fromDevice(*dBase), fromFloat, kFp32Tolerance);
  accumulate(dBase->data, dHalfAddend->data, n, nullptr);
  compare("accumulate bf16 += bf16", fromDevice(*dBase), fromHalf, kFp32Tolerance);
  delete dValues, delete dOther, delete dBase, delete dAddend, delete dHalfAddend;
}

} // namespace

int main(int argc, char **argv) {
  // --quick: the short sizes only (for compute-sanitizer, which slows every kernel many times).
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (argc > 1 && !quick) {
    std::fprintf(stderr, "usage: placert-cuda-kernel-test [--quick]\n");
    return 2;
  }
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::printf("placert-cuda-kernel-test: no CUDA device (%s): skipped\n",
                error != cudaSuccess ? cudaGetErrorString(error) : "0 devices");
    return 77;
  }
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "placert-cuda-kernel-test: cublasCreate failed\n");
    return 1;
  }
  Random random(20261121);
  // 80 outputs take the 16-byte bias kernel; 75 the one-element one.
  testLinear(random, handle, 67, 96, 80);
  testLinear(random, handle, 67, 96, 75);
  testGelu(random);
  testLayerNorm(random);
  // Partial tiles (40 and 100 tokens), every head size of the fused path, and real lengths (the
  // cuBLAS path's softmax loops over rows longer than its 256 threads from 257 tokens on).
  testAttention(random, handle, 2, 40, 3, 16, true);
  testAttention(random, handle, 2, 100, 2, 32, true);
  if (!quick) {
    testAttention(random, handle, 2, 1024, 4, 64, true);
    testAttention(random, handle, 1, 1024, 2, 128, true);
    testAttention(random, handle, 1, 2048, 1, 128, false);
  } else {
    testAttention(random, handle, 1, 130, 2, 64, true);
    testAttention(random, handle, 1, 70, 1, 128, true);
  }
  testEmbedding(random);
  testCrossEntropy(random);
  testAdam(random);
  testConversions(random);
  cublasDestroy(handle);
  check(cudaGetLastError(), "kernels");
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
