// placert's GPU API (library placert::cuda, runtime/cuda): the NCCL communicator and the GPT
// trainer that `placec compile --target=cuda` programs call. Like placert.h it needs the C++
// standard library only; CUDA, cuBLAS, NCCL and MPI stay behind it.
#ifndef PLACERT_CUDA_H
#define PLACERT_CUDA_H

#include "placert/placert.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace placert {
namespace cuda {

//===----------------------------------------------------------------------===//
// Process setup
//===----------------------------------------------------------------------===//

/// The job as seen by this process: MPI (when built with it and started by mpirun) or one rank.
struct Job {
  int rank = 0;
  int worldSize = 1;
  int device = 0;
};

/// Initializes MPI when available (a plain launch is one rank), picks the device rank % devices.
/// Fails with a clear status when there is no CUDA device or MPI is missing for several ranks.
Status initJob(int *argc, char ***argv, Job &job);
/// Finalizes MPI when initJob started it.
void finalizeJob();

//===----------------------------------------------------------------------===//
// NCCL communicators
//===----------------------------------------------------------------------===//

enum class ElementType { Float32, BFloat16 };

/// A Communicator over device pointers: one NCCL communicator per mesh-axis group, its own CUDA
/// stream, errors as Status naming the collective and the group, and a deadline on every wait
/// (ncclCommGetAsyncError polling; past it the communicator is aborted and the call fails with
/// StatusCode::Timeout instead of hanging on a dead rank). The Communicator methods are
/// synchronous; the *Async ones enqueue on the communicator's stream after `waitFor` (a
/// cudaEvent_t, may be null) and are completed by synchronize().
class NcclCommunicator : public Communicator {
public:
  /// Creates the group of the ranks with the same `color`, ordered by `key` (collective over the
  /// world: every rank calls it, in the same order). The unique id is broadcast over MPI within
  /// the group; without MPI only a one-rank group can be created.
  static Status create(const Job &job, std::string name, int color, int key, double timeoutSeconds,
                       std::unique_ptr<NcclCommunicator> &result);
  ~NcclCommunicator() override;

  const std::string &getName() const override;
  int getRank() const override;
  int getSize() const override;
  Status allReduce(float *buffer, int64_t elements) override;
  Status reduceScatter(const float *input, float *output, int64_t inputElements) override;
  Status allGather(const float *input, float *output, int64_t outputElements) override;
  Status broadcast(float *buffer, int64_t elements, int root) override;
  Status allToAll(const float *input, float *output, int64_t elements) override;
  Status ringStep(const float *input, float *output, int64_t elements) override;
  Status allToAllv(const float *input, const std::vector<int64_t> &sendCounts, float *output,
                   const std::vector<int64_t> &recvCounts) override;
  Status send(const float *buffer, int64_t elements, int peer, int tag) override;
  Status recv(float *buffer, int64_t elements, int peer, int tag) override;
  Status waitSends() override;

  /// The communicator's stream (a cudaStream_t).
  void *getStream() const;
  Status allReduceAsync(void *buffer, int64_t elements, ElementType type, void *waitFor);
  Status reduceScatterAsync(const void *input, void *output, int64_t inputElements,
                            ElementType type, void *waitFor);
  Status allGatherAsync(const void *input, void *output, int64_t outputElements, ElementType type,
                        void *waitFor);
  /// Waits for everything enqueued so far, polling for NCCL errors until the deadline; `what`
  /// names the collective in the message.
  Status synchronize(const std::string &what);

private:
  NcclCommunicator();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

//===----------------------------------------------------------------------===//
// The GPT trainer
//===----------------------------------------------------------------------===//

/// The transformer's shape (placert.h's, shared with the CPU trainer); the GPU trainer runs the
/// GPT-2 layout (learned positions, pre-LayerNorm, GELU, biases) with tied embeddings.
using GptShape = ::placert::GptShape;

/// What the run and its strategy ask for. Data parallelism over every rank; ZeRO stage 0 (plain
/// data parallel: all-reduce), 1 (optimizer sharded), 2 (+ gradients), 3 (+ parameters, gathered
/// per block with the next block's gather prefetched).
struct GptRunSpec {
  std::string run;
  std::string axis = "dp"; ///< The batch axis names joined with ',' (counter keys).
  int64_t globalBatch = 0, microBatch = 0;
  int dataParallel = 1;
  int zeroStage = 0;
  /// Full recomputation: keep only each block's input and run its forward again before its
  /// backward (the attention probabilities are recomputed in the backward either way).
  bool recomputeFull = false;
  /// Fused attention (`attention = flash`, FlashAttention-2's algorithm): only the log-sum-exp of
  /// each row is kept for the backward. false: `attention = materialized`, the scores of one
  /// sequence through device memory (cuBLAS products and a softmax kernel).
  bool fusedAttention = true;
  double learningRate = 3e-4;
  double peakFlops = 0;          ///< Per device, bf16 dense, for MFU (the .place cluster's).
  double predictedPeakBytes = 0; ///< The report's per-device peak, for the comparison (0: none).
  /// The version of the placec that generated the program ("0.1.0"), written into --metrics.
  std::string placecVersion;
};

struct GptOptions {
  int steps = 10;
  int warmupSteps = 2; ///< Not timed.
  uint64_t seed = 1;
  std::string metricsPath;
  double timeoutSeconds = 300;
  double peakFlops = 0; ///< Overrides GptRunSpec::peakFlops when > 0.
  bool quiet = false;
  /// Tests: the initial parameters, every unit whole in order (embed.tokens, embed.positions,
  /// layers.i.*, final_norm.*; the CPU trainer's tensors and order), instead of the seeded init.
  std::vector<float> initialParameters;
  /// Tests: token `position` (0 … seq; the last one only a target) of global sample `sample`,
  /// instead of the synthetic sequences.
  std::function<int32_t(int64_t sample, int64_t position)> tokenSource;
};

/// Parses `--steps N --warmup N --seed S --metrics FILE --timeout SECONDS --peak-tflops X --quiet
/// --help`.
Status parseGptOptions(int argc, char **argv, GptOptions &options, bool &help);

/// What a run measured (after the warm-up steps).
struct GptMetrics {
  std::vector<double> losses;
  double secondsPerStep = 0;
  double tokensPerSecond = 0; ///< Whole job.
  double modelFlopsPerStep = 0;
  double mfu = 0;
  int64_t peakDeviceBytes = 0; ///< The caching allocator's high-water mark (this rank).
  int64_t parameters = 0;
  std::map<CommKey, CommCount> counters;
};

/// Trains the GPT on synthetic tokens (hashed from the seed) with bf16 working weights, fp32
/// master weights and fp32 Adam moments.
class GptCudaTrainer {
public:
  static Status create(const Job &job, GptShape shape, GptRunSpec spec, GptOptions options,
                       std::unique_ptr<GptCudaTrainer> &result);
  ~GptCudaTrainer();

  /// Runs the warm-up and timed steps.
  Status train(GptMetrics &metrics);
  /// The fp32 master weights, every unit whole in the order of GptOptions::initialParameters
  /// (all-gathered when sharded; collective over the ranks).
  Status getParameters(std::vector<float> &parameters);
  /// Prints the summary (rank 0) and writes the metrics JSON when asked.
  Status report(const GptMetrics &metrics) const;

  /// 6·N·tokens + the attention's 12·layers·hidden·seq·tokens (PaLM appendix B; causal masking
  /// not discounted), per step for the whole job.
  static double getModelFlopsPerStep(const GptShape &shape, int64_t globalBatch);
  /// Parameters of the GPT-2 layout with a tied output embedding.
  static int64_t getParameterCount(const GptShape &shape);
  /// Whether the trainer implements the shape and the run (no CUDA call): the GPT-2 layout
  /// (GELU, LayerNorm, learned positions, biases, tied embeddings, multi-head attention, dense
  /// MLPs), the fused attention's head sizes, ZeRO 0-3 and a whole number of micro-batches. An
  /// error names what is not implemented; create() checks the same first.
  static Status checkSupported(const GptShape &shape, const GptRunSpec &spec);

private:
  GptCudaTrainer();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// The whole program: initJob, create, train, report, finalizeJob. Returns the exit code.
int runGpt(int argc, char **argv, const GptShape &shape, const GptRunSpec &spec);

} // namespace cuda
} // namespace placert

#endif // PLACERT_CUDA_H
