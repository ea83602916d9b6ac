// CPU kernels of the mlp on OpenBLAS, and the optimizer updates.
#include "Kernels.h"

#include <cblas.h>
#include <cmath>
#include <cstring>

namespace placert {

namespace {

class CpuKernels : public Kernels {
public:
  void linearForward(const float *x, const float *w, const float *bias, float *y, int64_t batch,
                     int64_t in, int64_t out) override {
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t j = 0; j < out; ++j)
        y[i * out + j] = bias ? bias[j] : 0.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(batch),
                static_cast<int>(out), static_cast<int>(in), 1.0f, x, static_cast<int>(in), w,
                static_cast<int>(in), 1.0f, y, static_cast<int>(out));
  }

  void linearWeightGrad(const float *x, const float *dy, float *dw, float *dbias, int64_t batch,
                        int64_t in, int64_t out) override {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(out),
                static_cast<int>(in), static_cast<int>(batch), 1.0f, dy, static_cast<int>(out), x,
                static_cast<int>(in), 1.0f, dw, static_cast<int>(in));
    if (dbias)
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t j = 0; j < out; ++j)
          dbias[j] += dy[i * out + j];
  }

  void linearInputGrad(const float *dy, const float *w, float *dx, int64_t batch, int64_t in,
                       int64_t out) override {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(batch),
                static_cast<int>(in), static_cast<int>(out), 1.0f, dy, static_cast<int>(out), w,
                static_cast<int>(in), 0.0f, dx, static_cast<int>(in));
  }

  void geluForward(const float *x, float *y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) {
      double v = x[i];
      double inner = kSqrt2OverPi * (v + 0.044715 * v * v * v);
      y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(inner)));
    }
  }

  void geluBackward(const float *x, const float *dy, float *dx, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) {
      double v = x[i];
      double inner = kSqrt2OverPi * (v + 0.044715 * v * v * v);
      double t = std::tanh(inner);
      double derivative =
          0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3 * 0.044715 * v * v);
      dx[i] = static_cast<float>(dy[i] * derivative);
    }
  }

  double mseLoss(const float *y, const float *target, float *dy, int64_t n, double scale) override {
    double loss = 0;
    for (int64_t i = 0; i < n; ++i) {
      double diff = static_cast<double>(y[i]) - target[i];
      loss += diff * diff * scale;
      dy[i] = static_cast<float>(2 * diff * scale);
    }
    return loss;
  }

private:
  static constexpr double kSqrt2OverPi = 0.7978845608028654;
};

} // namespace

std::unique_ptr<Kernels> createCpuKernels() { return std::make_unique<CpuKernels>(); }

void adamDelta(const float *grad, float *m, float *v, float *delta, int64_t n, int64_t t,
               double learningRate) {
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double correction1 = 1 - std::pow(beta1, static_cast<double>(t));
  double correction2 = 1 - std::pow(beta2, static_cast<double>(t));
  for (int64_t i = 0; i < n; ++i) {
    m[i] = static_cast<float>(beta1 * m[i] + (1 - beta1) * grad[i]);
    v[i] = static_cast<float>(beta2 * v[i] + (1 - beta2) * static_cast<double>(grad[i]) * grad[i]);
    double mHat = m[i] / correction1, vHat = v[i] / correction2;
    delta[i] = static_cast<float>(-learningRate * mHat / (std::sqrt(vHat) + eps));
  }
}

void sgdDelta(const float *grad, float *momentum, float *delta, int64_t n, double learningRate) {
  for (int64_t i = 0; i < n; ++i) {
    float direction = grad[i];
    if (momentum) {
      momentum[i] = 0.9f * momentum[i] + grad[i];
      direction = momentum[i];
    }
    delta[i] = static_cast<float>(-learningRate * direction);
  }
}

float roundTo(DType dtype, float value) {
  if (dtype == DType::FP32 || std::isnan(value) || std::isinf(value))
    return value;
  if (dtype == DType::BF16) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    bits += 0x7fffu + ((bits >> 16) & 1u); // ties to even; the carry may reach the exponent (inf)
    bits &= 0xffff0000u;
    float result;
    std::memcpy(&result, &bits, sizeof result);
    return result;
  }
  // fp16: 10 fraction bits, normal from 2^-14, largest 65504; from 65520 (halfway to 2^16) on,
  // ties to even rounds to 2^16, which overflows to infinity.
  double magnitude = std::fabs(static_cast<double>(value));
  double rounded;
  if (magnitude >= 65520.0) {
    rounded = INFINITY;
  } else if (magnitude < 0x1.0p-14) {
    rounded = std::nearbyint(magnitude * 0x1.0p24) * 0x1.0p-24; // subnormal: steps of 2^-24
  } else {
    int exponent; // magnitude = f · 2^exponent, f in [0.5, 1): steps of 2^(exponent − 11)
    std::frexp(magnitude, &exponent);
    rounded = std::ldexp(std::nearbyint(std::ldexp(magnitude, 11 - exponent)), exponent - 11);
  }
  return static_cast<float>(std::copysign(rounded, static_cast<double>(value)));
}

void roundTo(DType dtype, float *values, int64_t n) {
  if (dtype == DType::FP32)
    return;
  for (int64_t i = 0; i < n; ++i)
    values[i] = roundTo(dtype, values[i]);
}

} // namespace placert
