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
  // A mixture of experts trains micro-batch by micro-batch (the load-balancing loss is each global
  // micro-batch's: the spec's micro-batch times every batch-like rank); a dense model takes the
  // whole global batch at once.
  const bool moe = shape.moe.experts > 0;
  const int64_t microbatches = moe ? spec.microbatches : 1;
  gpt::GptConfig config;
  config.shape = shape;
  config.microBatch = spec.globalBatch / microbatches;
  config.globalBatch = spec.globalBatch;
  config.microbatches = microbatches;
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
  for (int64_t l = 0; l < shape.layers; ++l) {
    add(gpt::UnitKind::Layer, l);
    if (shape.moe.isMoeLayer(l))
      add(gpt::UnitKind::Experts, l);
  }
  add(gpt::UnitKind::Head, shape.layers);

  std::vector<float> p(static_cast<size_t>(total)), w(p.size()), m(p.size()), v(p.size()),
      g(p.size()), delta(p.size());
  for (const Unit &unit : units)
    for (const gpt::TensorInfo &tensor : model.getTensors(unit.kind, unit.layer))
      for (int64_t k = 0; k < tensor.rows * tensor.cols; ++k)
        p[static_cast<size_t>(unit.offset + tensor.localOffset + k)] =
            model.initialValue(seed, tensor, k);

  const int64_t B = spec.globalBatch, Bm = B / microbatches, s = shape.seq, rows = Bm * s;
  const int64_t h = shape.hidden;
  NoCollectives none;
  CheckResult failed;
  failed.passed = false;
  failed.paramsError = INFINITY;
  std::vector<double> referenceLosses;
  for (int step = 0; step < steps; ++step) {
    w = p;
    roundTo(spec.paramType, w.data(), total);
    std::fill(g.begin(), g.end(), 0.0f);
    double loss = 0;
    for (int64_t mb = 0; mb < microbatches; ++mb) {
      std::vector<int32_t> tokens(static_cast<size_t>(rows)), targets(tokens.size());
      for (int64_t r = 0; r < Bm; ++r)
        for (int64_t q = 0; q < s; ++q) {
          int64_t sample = step * B + mb * Bm + r;
          tokens[r * s + q] = gpt::sampleToken(seed, sample, q, shape.vocab);
          targets[r * s + q] = gpt::sampleToken(seed, sample, q + 1, shape.vocab);
        }
      // outputs[i]: unit i's output (embed, layers); a unit's input is the output of the last
      // unit before it that is not experts.
      std::vector<std::vector<float>> outputs(units.size());
      std::vector<gpt::UnitActivations> saved(units.size());
      const float *table = &w[static_cast<size_t>(units[0].offset)];
      auto previous = [&](size_t i) -> const float * {
        while (i > 0 && units[i - 1].kind == gpt::UnitKind::Experts)
          --i;
        return i > 0 ? outputs[i - 1].data() : nullptr;
      };
      auto experts = [&](size_t i) {
        gpt::ExpertTensors tensors;
        if (i + 1 < units.size() && units[i + 1].kind == gpt::UnitKind::Experts) {
          tensors.weights = &w[static_cast<size_t>(units[i + 1].offset)];
          tensors.grads = &g[static_cast<size_t>(units[i + 1].offset)];
        }
        return tensors;
      };
      for (size_t i = 0; i < units.size(); ++i) {
        const Unit &unit = units[i];
        if (unit.kind == gpt::UnitKind::Experts)
          continue;
        if (unit.kind != gpt::UnitKind::Head)
          outputs[i].resize(static_cast<size_t>(rows * h));
        double unitLoss = 0;
        Status status = model.forward(unit.kind, unit.layer, &w[static_cast<size_t>(unit.offset)],
                                      table, tokens.data(), targets.data(), previous(i),
                                      outputs[i].empty() ? nullptr : outputs[i].data(), saved[i],
                                      none, unitLoss, false, experts(i));
        if (!status.isOk())
          return failed;
        loss += unitLoss + saved[i].auxLoss;
      }
      std::vector<float> outputGrad, inputGrad;
      for (size_t i = units.size(); i-- > 0;) {
        const Unit &unit = units[i];
        if (unit.kind == gpt::UnitKind::Experts)
          continue;
        inputGrad.assign(unit.kind == gpt::UnitKind::Embed ? 0 : static_cast<size_t>(rows * h),
                         0.0f);
        Status status = model.backward(
            unit.kind, unit.layer, &w[static_cast<size_t>(unit.offset)], table, tokens.data(),
            previous(i), outputGrad.data(), inputGrad.data(), &g[static_cast<size_t>(unit.offset)],
            &g[static_cast<size_t>(units[0].offset)], saved[i], none, experts(i));
        if (!status.isOk())
          return failed;
        outputGrad = std::move(inputGrad);
      }
    }
    referenceLosses.push_back(loss);
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
