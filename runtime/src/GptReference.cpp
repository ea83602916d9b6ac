// The single-device GPT reference: embed, the layers and the head in model order on the whole
// global batch, the optimizer on every parameter, no mesh and no collectives.
#include "GptReference.h"

#include "GptModel.h"
#include "Kernels.h"

#include <algorithm>
#include <cmath>

namespace placert {

namespace {

/// A single device has no tensor- or context-parallel collectives; being asked for one is a bug.
class NoCollectives : public gpt::UnitCollectives {
public:
  Status allReduce(float *, int64_t) override { return fail(); }
  Status allGather(const float *, float *, int64_t) override { return fail(); }
  Status reduceScatter(const float *, float *, int64_t) override { return fail(); }
  Status allToAll(const float *, float *, int64_t) override { return fail(); }
  Status ringStep(const float *, float *, int64_t) override { return fail(); }

private:
  static Status fail() {
    return Status(StatusCode::InvalidArgument, "the single-device reference ran a collective");
  }
};

} // namespace

CheckResult checkGptAgainstReference(const GptShape &shape, const TrainingSpec &spec, uint64_t seed,
                                     int steps, const std::vector<float> &params,
                                     const std::vector<double> &losses, double tolerance,
                                     int firstStep) {
  gpt::GptConfig config;
  config.shape = shape;
  config.microBatch = spec.globalBatch;
  config.globalBatch = spec.globalBatch;
  gpt::GptModel model(config);
  struct Unit {
    gpt::UnitKind kind;
    int64_t layer, offset, size;
  };
  std::vector<Unit> units;
  int64_t total = 0;
  auto add = [&](gpt::UnitKind kind, int64_t layer) {
    int64_t size = model.getFullParams(kind, layer);
    units.push_back({kind, layer, total, size});
    total += size;
  };
  add(gpt::UnitKind::Embed, -1);
  for (int64_t l = 0; l < shape.layers; ++l)
    add(gpt::UnitKind::Layer, l);
  add(gpt::UnitKind::Head, shape.layers);

  std::vector<float> p(static_cast<size_t>(total)), w(p.size()), m(p.size()), v(p.size()),
      g(p.size()), delta(p.size());
  for (const Unit &unit : units)
    for (const gpt::TensorInfo &tensor : model.getTensors(unit.kind, unit.layer))
      for (int64_t k = 0; k < tensor.rows * tensor.cols; ++k)
        p[static_cast<size_t>(unit.offset + tensor.localOffset + k)] =
            model.initialValue(seed, tensor, k);

  const int64_t B = spec.globalBatch, s = shape.seq, rows = B * s, h = shape.hidden;
  NoCollectives none;
  CheckResult failed;
  failed.passed = false;
  failed.paramsError = INFINITY;
  std::vector<double> referenceLosses;
  for (int step = 0; step < steps; ++step) {
    w = p;
    roundTo(spec.paramType, w.data(), total);
    std::vector<int32_t> tokens(static_cast<size_t>(rows)), targets(tokens.size());
    for (int64_t r = 0; r < B; ++r)
      for (int64_t q = 0; q < s; ++q) {
        tokens[r * s + q] = gpt::sampleToken(seed, step * B + r, q, shape.vocab);
        targets[r * s + q] = gpt::sampleToken(seed, step * B + r, q + 1, shape.vocab);
      }
    // outputs[i]: unit i's output (embed, layers); the head's input is the last layer's output.
    std::vector<std::vector<float>> outputs(units.size());
    std::vector<gpt::UnitActivations> saved(units.size());
    const float *table = &w[static_cast<size_t>(units[0].offset)];
    double loss = 0;
    for (size_t i = 0; i < units.size(); ++i) {
      const Unit &unit = units[i];
      if (unit.kind != gpt::UnitKind::Head)
        outputs[i].resize(static_cast<size_t>(rows * h));
      double unitLoss = 0;
      Status status = model.forward(
          unit.kind, unit.layer, &w[static_cast<size_t>(unit.offset)], table, tokens.data(),
          targets.data(), i > 0 ? outputs[i - 1].data() : nullptr,
          outputs[i].empty() ? nullptr : outputs[i].data(), saved[i], none, unitLoss, false);
      if (!status.isOk())
        return failed;
      loss += unitLoss;
    }
    referenceLosses.push_back(loss);
    std::fill(g.begin(), g.end(), 0.0f);
    std::vector<float> outputGrad, inputGrad;
    for (size_t i = units.size(); i-- > 0;) {
      const Unit &unit = units[i];
      inputGrad.assign(unit.kind == gpt::UnitKind::Embed ? 0 : static_cast<size_t>(rows * h), 0.0f);
      Status status =
          model.backward(unit.kind, unit.layer, &w[static_cast<size_t>(unit.offset)], table,
                         tokens.data(), i > 0 ? outputs[i - 1].data() : nullptr, outputGrad.data(),
                         inputGrad.data(), &g[static_cast<size_t>(unit.offset)],
                         &g[static_cast<size_t>(units[0].offset)], saved[i], none);
      if (!status.isOk())
        return failed;
      outputGrad = std::move(inputGrad);
    }
    roundTo(spec.gradType, g.data(), total);
    switch (spec.optimizer) {
    case OptimizerKind::Adam:
      adamDelta(g.data(), m.data(), v.data(), delta.data(), total, step + 1, spec.learningRate);
      break;
    case OptimizerKind::Sgd:
      sgdDelta(g.data(), nullptr, delta.data(), total, spec.learningRate);
      break;
    case OptimizerKind::SgdMomentum:
      sgdDelta(g.data(), m.data(), delta.data(), total, spec.learningRate);
      break;
    }
    for (int64_t k = 0; k < total; ++k)
      p[static_cast<size_t>(k)] += delta[static_cast<size_t>(k)];
  }
  roundTo(spec.paramType, p.data(), total);
  return compareWithReference(params, p, losses, referenceLosses, tolerance, firstStep);
}

} // namespace placert
