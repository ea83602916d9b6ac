// The compute kernels of the mlp behind a small interface: a CPU implementation on OpenBLAS now,
// a CUDA/cuBLAS one later. Row-major fp32 throughout; `x` is [batch, in], `w` is [out, in].
#ifndef PLACERT_SRC_KERNELS_H
#define PLACERT_SRC_KERNELS_H

#include "placert/placert.h"

#include <cstdint>
#include <memory>

namespace placert {

class Kernels {
public:
  virtual ~Kernels() = default;
  /// y[batch, out] = x · wᵀ (+ bias when not null).
  virtual void linearForward(const float *x, const float *w, const float *bias, float *y,
                             int64_t batch, int64_t in, int64_t out) = 0;
  /// dw[out, in] += dyᵀ · x; dbias[out] += Σ dy (when not null).
  virtual void linearWeightGrad(const float *x, const float *dy, float *dw, float *dbias,
                                int64_t batch, int64_t in, int64_t out) = 0;
  /// dx[batch, in] = dy · w.
  virtual void linearInputGrad(const float *dy, const float *w, float *dx, int64_t batch,
                               int64_t in, int64_t out) = 0;
  /// y = gelu(x), tanh approximation.
  virtual void geluForward(const float *x, float *y, int64_t n) = 0;
  /// dx = dy · gelu'(x), in place on dy allowed.
  virtual void geluBackward(const float *x, const float *dy, float *dx, int64_t n) = 0;
  /// Σ (y − t)² · scale, and dy = 2 (y − t) · scale.
  virtual double mseLoss(const float *y, const float *target, float *dy, int64_t n,
                         double scale) = 0;
};

std::unique_ptr<Kernels> createCpuKernels();

/// Adam (β1 0.9, β2 0.999, ε 1e-8, bias correction) at step `t` (from 1): returns the update to
/// add to the parameters in `delta`.
void adamDelta(const float *grad, float *m, float *v, float *delta, int64_t n, int64_t t,
               double learningRate);
/// SGD, with momentum 0.9 when `momentum` is not null.
void sgdDelta(const float *grad, float *momentum, float *delta, int64_t n, double learningRate);

/// `value` rounded to the nearest `dtype` value (ties to even), as a float: bf16 keeps the top 16
/// bits of the fp32 pattern; fp16 is IEEE half (overflow to ±inf, subnormals below 2^-14); fp32
/// is the identity. NaN stays NaN.
float roundTo(DType dtype, float value);
/// Rounds `n` values in place (nothing for fp32).
void roundTo(DType dtype, float *values, int64_t n);

} // namespace placert

#endif // PLACERT_SRC_KERNELS_H
