// placert-cuda-gpt-test: the GPU trainer end to end against the CPU reference trainer
// (runtime/src/GptReference.h, fp32): a small GPT, the CPU's initial parameters and tokens, three
// Adam steps with two micro-batches each, under ZeRO stages 0-3 on one GPU (and 0 and 3 with full
// recomputation, and 0 and 3 with the materialized attention); the losses and the final parameters
// (rounded to bf16 on both sides) must agree within 2e-2 (bf16 activations and GEMM operands
// against fp32). Exits 77 (skipped) without a CUDA device.
#include "GptModel.h"
#include "GptReference.h"
#include "Kernels.h"
#include "placert/cuda.h"

#include <cstdio>
#include <string>

using namespace placert;

int main(int argc, char **argv) {
  cuda::Job job;
  Status status = cuda::initJob(&argc, &argv, job);
  if (!status.isOk()) {
    bool noDevice = status.getMessage().find("no CUDA device") != std::string::npos;
    std::printf("placert-cuda-gpt-test: %s%s\n", status.getMessage().c_str(),
                noDevice ? ": skipped" : "");
    cuda::finalizeJob();
    return noDevice ? 77 : 1;
  }
  GptShape shape{"tiny", 2, 64, 4, 16, 96, 256, true};
  const uint64_t seed = 5;
  const int steps = 3;
  const double tolerance = 2e-2;

  // The CPU reference's initial parameters, unit by unit, tensor by tensor.
  gpt::GptConfig config;
  config.shape = shape;
  gpt::GptModel model(config);
  std::vector<float> initial;
  auto append = [&](gpt::UnitKind kind, int64_t layer) {
    for (const gpt::TensorInfo &tensor : model.getTensors(kind, layer))
      for (int64_t k = 0; k < tensor.rows * tensor.cols; ++k)
        initial.push_back(model.initialValue(seed, tensor, k));
  };
  append(gpt::UnitKind::Embed, -1);
  for (int64_t l = 0; l < shape.layers; ++l)
    append(gpt::UnitKind::Layer, l);
  append(gpt::UnitKind::Head, shape.layers);

  TrainingSpec reference;
  reference.globalBatch = 4;
  reference.microBatch = 2;
  reference.paramType = DType::BF16; // the working copy the forward reads
  reference.gradType = DType::BF16;  // the trainer's gradients (it rounds each micro-batch's sum)
  reference.learningRate = 1e-3;

  int failures = 0;
  // Stages 0-3, then stages 0 and 3 with full recomputation, with the fused attention; then
  // stages 0 and 3 with the materialized attention (the scores through device memory).
  const int cases = 8;
  for (int index = 0; index < cases; ++index) {
    int stage = index < 4 ? index : (index % 2) * 3;
    bool recomputeFull = index == 4 || index == 5;
    bool fused = index < 6;
    cuda::GptRunSpec spec;
    spec.run = "tiny_zero" + std::to_string(stage) + (recomputeFull ? "_full" : "") +
               (fused ? "" : "_materialized");
    spec.recomputeFull = recomputeFull;
    spec.fusedAttention = fused;
    spec.globalBatch = reference.globalBatch;
    spec.microBatch = reference.microBatch;
    spec.zeroStage = stage;
    spec.learningRate = reference.learningRate;
    cuda::GptOptions options;
    options.steps = steps;
    options.warmupSteps = 0;
    options.seed = seed;
    options.quiet = true;
    options.initialParameters = initial;
    options.tokenSource = [&](int64_t sample, int64_t position) {
      return gpt::sampleToken(seed, sample, position, shape.vocab);
    };
    std::unique_ptr<cuda::GptCudaTrainer> trainer;
    cuda::GptMetrics metrics;
    std::vector<float> params;
    status = cuda::GptCudaTrainer::create(job, shape, spec, options, trainer);
    if (status.isOk())
      status = trainer->train(metrics);
    if (status.isOk())
      status = trainer->getParameters(params);
    if (!status.isOk()) {
      std::printf("%s: FAIL %s\n", spec.run.c_str(), status.getMessage().c_str());
      ++failures;
      continue;
    }
    roundTo(DType::BF16, params.data(), static_cast<int64_t>(params.size()));
    CheckResult result =
        checkGptAgainstReference(shape, reference, seed, steps, params, metrics.losses, tolerance);
    std::printf("%s: %s  params rel.err %.3e, losses max rel.err %.3e (tolerance %.0e); "
                "losses",
                spec.run.c_str(), result.passed ? "PASS" : "FAIL", result.paramsError,
                result.lossError, tolerance);
    for (double loss : metrics.losses)
      std::printf(" %.5f", loss);
    std::printf("\n");
    if (!result.passed)
      ++failures;
  }
  std::printf("%d passed, %d failed\n", cases - failures, failures);
  cuda::finalizeJob();
  return failures == 0 ? 0 : 1;
}
