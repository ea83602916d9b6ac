// The single-device mlp: the same kernels on the whole global batch, no mesh, no sharding.
#include "MlpReference.h"

#include "Kernels.h"

#include <algorithm>
#include <cmath>

namespace placert {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hashName(const std::string &name) {
  uint64_t hash = 0xcbf29ce484222325ULL; // FNV-1a
  for (unsigned char c : name)
    hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

/// Uniform in [−1, 1).
double uniform(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = splitmix64(splitmix64(splitmix64(a) ^ b) ^ c);
  return static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

} // namespace

float initialValue(uint64_t seed, const std::string &name, int64_t index, int64_t fanIn) {
  return static_cast<float>(uniform(seed, hashName(name), static_cast<uint64_t>(index)) /
                            std::sqrt(static_cast<double>(fanIn)));
}

float sampleValue(uint64_t seed, int64_t sample, bool target, int64_t feature) {
  uint64_t stream = target ? 0x7461726765747321ULL : 0x696e707574732121ULL;
  return static_cast<float>(
      uniform(seed ^ stream, static_cast<uint64_t>(sample), static_cast<uint64_t>(feature)));
}

CheckResult compareWithReference(const std::vector<float> &params,
                                 const std::vector<float> &reference,
                                 const std::vector<double> &losses,
                                 const std::vector<double> &referenceLosses, double tolerance,
                                 int firstStep) {
  CheckResult result;
  if (params.size() != reference.size()) {
    result.paramsError = INFINITY;
    result.passed = false;
    return result;
  }
  double diff = 0, norm = 0;
  for (size_t k = 0; k < reference.size(); ++k) {
    double d = static_cast<double>(params[k]) - reference[k];
    diff += d * d;
    norm += static_cast<double>(reference[k]) * reference[k];
  }
  result.paramsError = std::sqrt(diff / norm);
  for (size_t s = static_cast<size_t>(firstStep); s < referenceLosses.size(); ++s) {
    size_t mine = s - static_cast<size_t>(firstStep);
    double error = mine < losses.size() ? std::fabs(losses[mine] - referenceLosses[s]) /
                                              std::fabs(referenceLosses[s])
                                        : INFINITY;
    result.lossError = std::max(result.lossError, error);
  }
  result.passed = result.paramsError <= tolerance && result.lossError <= tolerance;
  return result;
}

CheckResult checkAgainstReference(const ReferenceConfig &config, int steps,
                                  const std::vector<float> &params,
                                  const std::vector<double> &losses, double tolerance,
                                  int firstStep) {
  std::unique_ptr<Kernels> kernels = createCpuKernels();
  int64_t L = config.layers, B = config.globalBatch;
  std::vector<int64_t> in(L), out(L), offset(L);
  int64_t total = 0;
  for (int64_t i = 0; i < L; ++i) {
    in[i] = i == 0 ? config.input : config.width;
    out[i] = i + 1 == L ? config.output : config.width;
    offset[i] = total;
    total += out[i] * in[i] + out[i];
  }
  // p: the fp32 master copy; w: the working params, p rounded to the param dtype.
  std::vector<float> p(static_cast<size_t>(total)), w(p.size()), m(p.size()), v(p.size()),
      g(p.size()), delta(p.size());
  for (int64_t i = 0; i < L; ++i) {
    std::string weight = "layers." + std::to_string(i) + ".weight";
    std::string bias = "layers." + std::to_string(i) + ".bias";
    for (int64_t k = 0; k < out[i] * in[i]; ++k)
      p[offset[i] + k] = initialValue(config.seed, weight, k, in[i]);
    for (int64_t k = 0; k < out[i]; ++k)
      p[offset[i] + out[i] * in[i] + k] = initialValue(config.seed, bias, k, in[i]);
  }
  std::vector<double> referenceLosses;
  for (int step = 0; step < steps; ++step) {
    w = p;
    roundTo(config.paramType, w.data(), total);
    // inputs[i]: the layer's input after the activation; pre[i]: its output before it.
    std::vector<std::vector<float>> inputs(L), pre(L);
    inputs[0].resize(static_cast<size_t>(B * config.input));
    for (int64_t s = 0; s < B; ++s)
      for (int64_t e = 0; e < config.input; ++e)
        inputs[0][s * config.input + e] = sampleValue(config.seed, step * B + s, false, e);
    for (int64_t i = 0; i < L; ++i) {
      if (i > 0) {
        inputs[i].resize(pre[i - 1].size());
        kernels->geluForward(pre[i - 1].data(), inputs[i].data(),
                             static_cast<int64_t>(pre[i - 1].size()));
      }
      pre[i].resize(static_cast<size_t>(B * out[i]));
      const float *weights = &w[offset[i]];
      kernels->linearForward(inputs[i].data(), weights, weights + out[i] * in[i], pre[i].data(), B,
                             in[i], out[i]);
    }
    std::vector<float> targets(static_cast<size_t>(B * config.output));
    for (int64_t s = 0; s < B; ++s)
      for (int64_t e = 0; e < config.output; ++e)
        targets[s * config.output + e] = sampleValue(config.seed, step * B + s, true, e);
    std::vector<float> dy(targets.size());
    referenceLosses.push_back(kernels->mseLoss(pre[L - 1].data(), targets.data(), dy.data(),
                                               static_cast<int64_t>(dy.size()),
                                               1.0 / static_cast<double>(B * config.output)));
    std::fill(g.begin(), g.end(), 0.0f);
    for (int64_t i = L; i-- > 0;) {
      float *gw = &g[offset[i]];
      kernels->linearWeightGrad(inputs[i].data(), dy.data(), gw, gw + out[i] * in[i], B, in[i],
                                out[i]);
      if (i == 0)
        break;
      std::vector<float> dx(static_cast<size_t>(B * in[i]));
      kernels->linearInputGrad(dy.data(), &w[offset[i]], dx.data(), B, in[i], out[i]);
      kernels->geluBackward(pre[i - 1].data(), dx.data(), dx.data(), B * in[i]);
      dy = std::move(dx);
    }
    roundTo(config.gradType, g.data(), total);
    switch (config.optimizer) {
    case OptimizerKind::Adam:
      adamDelta(g.data(), m.data(), v.data(), delta.data(), total, step + 1, config.learningRate);
      break;
    case OptimizerKind::Sgd:
      sgdDelta(g.data(), nullptr, delta.data(), total, config.learningRate);
      break;
    case OptimizerKind::SgdMomentum:
      sgdDelta(g.data(), m.data(), delta.data(), total, config.learningRate);
      break;
    }
    for (int64_t k = 0; k < total; ++k)
      p[k] += delta[k];
  }

  w = p;
  roundTo(config.paramType, w.data(), total);
  p = std::move(w);

  return compareWithReference(params, p, losses, referenceLosses, tolerance, firstStep);
}

} // namespace placert
