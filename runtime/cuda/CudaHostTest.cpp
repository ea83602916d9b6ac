// placert-cuda-host-test: the host-side parts of placert_cuda that need no GPU (parameter and
// FLOP counts, option parsing, what the trainer supports), so that CPU-only CI checks them. It
// makes no CUDA call.
#include "placert/cuda.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace placert;
using namespace placert::cuda;

namespace {

int failures = 0;

void expect(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok)
    ++failures;
}

} // namespace

int main() {
  // GPT-2 medium with the vocabulary padded to 50304: `placec report bench/gpu/gpt-350m.place`
  // counts 354871296 parameters (the tied layout: embeddings, positions, 24 blocks, final norm).
  GptShape medium{"gpt350m", 24, 1024, 16, 1024, 50304, 0, true};
  expect(GptCudaTrainer::getParameterCount(medium) == 354871296,
         "parameters of the 350M GPT = placec's count 354871296");
  // One block by hand: 2 LayerNorms (4c), qkv (3c² + 3c), projection (c² + c), MLP (8c² + 5c).
  GptShape one{"one", 1, 8, 2, 4, 16, 0, true};
  int64_t block = 4 * 8 + 3 * 64 + 3 * 8 + 64 + 8 + 4 * 64 + 32 + 4 * 64 + 8;
  expect(GptCudaTrainer::getParameterCount(one) == 16 * 8 + 4 * 8 + block + 2 * 8,
         "parameters of a one-block GPT counted by hand");
  // FLOPs: (6·N + 12·layers·hidden·seq) per token (PaLM, appendix B), 2 sequences of 4.
  double expected = (6.0 * GptCudaTrainer::getParameterCount(one) + 12.0 * 1 * 8 * 4) * 8;
  expect(std::fabs(GptCudaTrainer::getModelFlopsPerStep(one, 2) - expected) < 1e-6 * expected,
         "model FLOPs per step");

  GptOptions options;
  bool help = false;
  std::vector<std::string> words = {"prog",          "--steps", "7",         "--warmup", "1",
                                    "--peak-tflops", "989",     "--metrics", "m.json",   "--quiet"};
  std::vector<char *> argv;
  for (std::string &w : words)
    argv.push_back(w.data());
  Status status = parseGptOptions(static_cast<int>(argv.size()), argv.data(), options, help);
  expect(status.isOk() && options.steps == 7 && options.warmupSteps == 1 &&
             std::fabs(options.peakFlops - 989e12) < 1 && options.metricsPath == "m.json" &&
             options.quiet && !help,
         "options parse");
  std::vector<std::string> bad = {"prog", "--steps", "x"};
  std::vector<char *> badArgv;
  for (std::string &w : bad)
    badArgv.push_back(w.data());
  GptOptions badOptions;
  status = parseGptOptions(3, badArgv.data(), badOptions, help);
  expect(!status.isOk() && status.getMessage().find("--steps") != std::string::npos,
         "a bad option value is an error naming the option");
  std::vector<std::string> unknown = {"prog", "--frobnicate"};
  std::vector<char *> unknownArgv;
  for (std::string &w : unknown)
    unknownArgv.push_back(w.data());
  status = parseGptOptions(2, unknownArgv.data(), badOptions, help);
  expect(!status.isOk() && status.getMessage().find("--frobnicate") != std::string::npos,
         "an unknown option is an error naming it");
  // What the trainer does not implement is refused before any CUDA call, naming it.
  GptRunSpec spec;
  spec.run = "r";
  spec.globalBatch = 8;
  spec.microBatch = 2;
  expect(GptCudaTrainer::checkSupported(medium, spec).isOk(), "the 350M GPT is supported");
  auto refusedFor = [&](GptShape shape, const std::string &word, const std::string &what) {
    Status refused = GptCudaTrainer::checkSupported(shape, spec);
    expect(!refused.isOk() && refused.getMessage().find(word) != std::string::npos,
           what + " is refused: " + refused.getMessage());
  };
  // The 350M GPT with one thing changed.
  auto refusedWith = [&](void (*change)(GptShape &), const std::string &word,
                         const std::string &what) {
    GptShape shape = medium;
    change(shape);
    refusedFor(shape, word, what);
  };
  refusedWith([](GptShape &s) { s.swiglu = true; }, "swiglu", "SwiGLU");
  refusedWith([](GptShape &s) { s.rmsNorm = true; }, "rmsnorm", "RMSNorm");
  refusedWith([](GptShape &s) { s.bias = false; }, "bias", "no biases");
  refusedWith([](GptShape &s) { s.rope = true; }, "rope", "rotary positions");
  refusedWith([](GptShape &s) { s.kvHeads = 4; }, "kv_heads", "grouped-query attention");
  refusedWith([](GptShape &s) { s.tiedEmbeddings = false; }, "ties", "untied embeddings");
  refusedWith([](GptShape &s) { s.moe.experts = 8; }, "mixture of experts", "a mixture of experts");
  GptShape wide{"wide", 2, 96, 1, 32, 128, 0, true}; // one head of 96
  refusedFor(wide, "head dimension 96", "a fused-attention head of 96");
  GptRunSpec materialized = spec;
  materialized.fusedAttention = false;
  expect(GptCudaTrainer::checkSupported(wide, materialized).isOk(),
         "a head of 96 runs with the materialized attention");
  GptRunSpec stage4 = spec;
  stage4.zeroStage = 4;
  expect(!GptCudaTrainer::checkSupported(medium, stage4).isOk(), "ZeRO stage 4 is refused");
  std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
