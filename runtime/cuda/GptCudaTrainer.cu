// GptCudaTrainer (placert/cuda.h): the GPT-2 layout on one GPU or data parallel over NCCL with
// ZeRO stages 0-3. bf16 working weights, fp32 master weights, fp32 Adam moments, bf16 gradients
// (the plan's mixed-precision dtypes; a unit's gradient of one micro-batch is summed in fp32 while
// its backward runs); activations in bf16; every allocation from CUDA's stream-ordered caching
// pool, whose high-water mark is the reported peak. Gradient reductions run on the communicator's
// stream as each unit's backward finishes; under ZeRO-3 the next block's parameters are gathered
// while the current one computes.
#include "CudaKernels.h"
#include "placert/cuda.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <fstream>
#include <limits>
#include <sstream>

namespace placert {
namespace cuda {

using kernels::bf16;

namespace {

#define CUDA_TRY(expr, what)                                                                       \
  do {                                                                                             \
    cudaError_t cudaTryError_ = (expr);                                                            \
    if (cudaTryError_ != cudaSuccess)                                                              \
      return ::placert::Status(::placert::StatusCode::InvalidArgument,                             \
                               std::string(what) + ": " + cudaGetErrorString(cudaTryError_));      \
  } while (false)

#define CUBLAS_TRY(expr, what)                                                                     \
  do {                                                                                             \
    cublasStatus_t cublasTryStatus_ = (expr);                                                      \
    if (cublasTryStatus_ != CUBLAS_STATUS_SUCCESS)                                                 \
      return ::placert::Status(::placert::StatusCode::InvalidArgument,                             \
                               std::string(what) + ": cuBLAS status " +                            \
                                   std::to_string(static_cast<int>(cublasTryStatus_)));            \
  } while (false)

#define LAUNCH_TRY(what)                                                                           \
  do {                                                                                             \
    std::string launchError_ = kernels::checkLaunch(what);                                         \
    if (!launchError_.empty())                                                                     \
      return ::placert::Status(::placert::StatusCode::InvalidArgument, launchError_);              \
  } while (false)

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// out[i] = value of global element begin + i of a tensor: uniform in [−a, a) with a = √3·std
/// (standard deviation `std`) when std > 0, else `constant`.
__global__ void initTensorKernel(float *out, int64_t n, int64_t begin, uint64_t seed, float std,
                                 float constant) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (std > 0) {
      uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(begin + i)));
      float u = static_cast<float>(h >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
      out[i] = u * std * 1.7320508f;
    } else {
      out[i] = constant;
    }
  }
}

/// Synthetic sequences that a model can learn: token s of sample g is (start + s·stride) mod
/// vocab with start and stride hashed from (seed, g); targets are the next tokens.
__global__ void tokensKernel(int32_t *tokens, int32_t *targets, int64_t rows, int64_t seq,
                             int64_t firstSample, int64_t vocab, uint64_t seed) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    int64_t sample = firstSample + r / seq, s = r % seq;
    uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(sample) * 2 + 1));
    int64_t start = static_cast<int64_t>(h % static_cast<uint64_t>(vocab));
    int64_t stride = 1 + static_cast<int64_t>((h >> 32) % 7);
    tokens[r] = static_cast<int32_t>((start + s * stride) % vocab);
    targets[r] = static_cast<int32_t>((start + (s + 1) * stride) % vocab);
  }
}

__global__ void copyBf16Kernel(const bf16 *in, bf16 *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

unsigned blocksFor(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535 * 16)));
}

std::string jsonEscape(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out;
}

/// One tensor of a unit: offset and size in the unit's flat layout, and its initialization.
struct TensorSlot {
  int64_t offset = 0, elements = 0;
  float std = 0, constant = 0;
};

/// A unit of the layout: the embeddings, one block, or the final LayerNorm. Stored flat and padded
/// to a multiple of 8 × the data-parallel degree, so that shards split evenly and stay aligned.
struct Unit {
  std::vector<TensorSlot> tensors;
  int64_t elements = 0, padded = 0, shard = 0;
  int64_t flatOffset = 0; ///< Where the unit starts in the whole-model parameter order.
  // Persistent state (stage dependent; see allocate()).
  bf16 *working = nullptr;                             ///< Full (stage < 3) or the shard (stage 3).
  float *master = nullptr, *m = nullptr, *v = nullptr; ///< Full (stage 0) or the shard.
  bf16 *grads = nullptr;     ///< Stage ≤ 1: the full gradient, summed over the micro-batches.
  bf16 *gradShard = nullptr; ///< Stage ≥ 1: the reduced shard the optimizer reads.
  // Per micro-batch.
  bf16 *gathered = nullptr;       ///< Stage 3: the gathered parameters while in use.
  bf16 *gradsTransient = nullptr; ///< Stage ≥ 2: this micro-batch's full gradient until reduced.
  /// While the unit's backward runs: this micro-batch's gradient summed in fp32 (GEMMs, bias and
  /// LayerNorm reductions, embedding scatter), added into the bf16 gradient when it is done.
  float *gradsFloat = nullptr;
  cudaEvent_t gatherDone = nullptr;
};

// Offsets of a block's tensors in its unit.
struct BlockLayout {
  int64_t ln1g, ln1b, wqkv, bqkv, wproj, bproj, ln2g, ln2b, wfc, bfc, wfp, bfp, total;
  BlockLayout(int64_t c, int64_t f) {
    int64_t at = 0;
    auto take = [&](int64_t n) {
      int64_t here = at;
      at += n;
      return here;
    };
    ln1g = take(c);
    ln1b = take(c);
    wqkv = take(3 * c * c);
    bqkv = take(3 * c);
    wproj = take(c * c);
    bproj = take(c);
    ln2g = take(c);
    ln2b = take(c);
    wfc = take(f * c);
    bfc = take(f);
    wfp = take(c * f);
    bfp = take(c);
    total = at;
  }
};

/// The saved activations of one block for one micro-batch (qkv rows ordered [head][q, k, v]
/// [headDim] like the CPU trainer's attn.qkv.weight, so that a column split keeps whole heads)
/// (bf16 [rows, ·], stats fp32 [rows]).
struct BlockActivations {
  bf16 *x = nullptr, *ln1 = nullptr, *qkv = nullptr, *att = nullptr, *x2 = nullptr, *ln2 = nullptr,
       *h = nullptr, *g = nullptr;
  float *mean1 = nullptr, *rstd1 = nullptr, *mean2 = nullptr, *rstd2 = nullptr;
  float *lse = nullptr; ///< Fused attention: [microBatch, heads, seq] log-sum-exp.
};

} // namespace

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

Status parseGptOptions(int argc, char **argv, GptOptions &options, bool &help) {
  help = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) -> Status {
      if (i + 1 >= argc)
        return {StatusCode::InvalidArgument, "option " + arg + " needs a value"};
      out = argv[++i];
      return Status::success();
    };
    std::string text;
    try {
      if (arg == "--steps") {
        PLACERT_TRY(value(text));
        options.steps = std::stoi(text);
      } else if (arg == "--warmup") {
        PLACERT_TRY(value(text));
        options.warmupSteps = std::stoi(text);
      } else if (arg == "--seed") {
        PLACERT_TRY(value(text));
        options.seed = std::stoull(text);
      } else if (arg == "--metrics") {
        PLACERT_TRY(value(options.metricsPath));
      } else if (arg == "--timeout") {
        PLACERT_TRY(value(text));
        options.timeoutSeconds = std::stod(text);
      } else if (arg == "--peak-tflops") {
        PLACERT_TRY(value(text));
        options.peakFlops = std::stod(text) * 1e12;
      } else if (arg == "--quiet") {
        options.quiet = true;
      } else if (arg == "--help" || arg == "-h") {
        std::printf("usage: %s [--steps N] [--warmup N] [--seed S] [--metrics FILE] "
                    "[--timeout SECONDS] [--peak-tflops X] [--quiet]\n",
                    argv[0]);
        help = true;
        return Status::success();
      } else {
        return {StatusCode::InvalidArgument, "unknown option '" + arg + "' (see --help)"};
      }
    } catch (const std::exception &) {
      return {StatusCode::InvalidArgument, "option " + arg + ": bad value '" + text + "'"};
    }
  }
  if (options.steps < 1 || options.warmupSteps < 0)
    return {StatusCode::InvalidArgument, "--steps must be at least 1 and --warmup at least 0"};
  return Status::success();
}

//===----------------------------------------------------------------------===//
// The trainer
//===----------------------------------------------------------------------===//

struct GptCudaTrainer::Impl {
  Job job;
  GptShape shape;
  GptRunSpec spec;
  GptOptions options;
  int64_t ffn = 0, headDim = 0, rows = 0, microbatches = 1;
  std::vector<Unit> units; ///< 0: embeddings, 1..layers: blocks, layers + 1: final LayerNorm.
  std::unique_ptr<NcclCommunicator> comm;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudaMemPool_t pool = nullptr;
  cudaEvent_t paramsReady = nullptr;
  void *cublasWorkspace = nullptr;
  // Per-step buffers.
  int32_t *tokens = nullptr, *targets = nullptr;
  float *rowMax = nullptr, *sumExp = nullptr, *targetLogit = nullptr, *lossScalar = nullptr;
  double *loss = nullptr;
  kernels::AttentionWorkspace attention;
  kernels::FlashWorkspace flash;
  std::map<CommKey, CommCount> counters;
  std::vector<int32_t> hostTokens, hostTargets;
  int64_t step = 0;

  ~Impl() {
    if (stream)
      cudaStreamSynchronize(stream);
    // Give the device memory back to the pool (several trainers may live in one process, as in
    // the end-to-end test) unless a collective is still pending after a failure.
    bool idle = stream && (!comm || cudaStreamQuery(static_cast<cudaStream_t>(comm->getStream())) ==
                                        cudaSuccess);
    if (idle) {
      for (Unit &unit : units) {
        for (bf16 **p :
             {&unit.working, &unit.grads, &unit.gradShard, &unit.gathered, &unit.gradsTransient})
          (void)release(*p, stream);
        for (float **p : {&unit.master, &unit.m, &unit.v, &unit.gradsFloat})
          (void)release(*p, stream);
      }
      (void)release(tokens, stream);
      (void)release(targets, stream);
      for (float **p : {&rowMax, &sumExp, &targetLogit, &lossScalar, &attention.scores,
                        &flash.dqAccum, &flash.delta})
        (void)release(*p, stream);
      (void)release(loss, stream);
      (void)release(attention.probs, stream);
      (void)release(attention.dscores, stream);
      (void)release(cublasWorkspace, stream);
      cudaStreamSynchronize(stream);
    }
    comm.reset();
    for (Unit &unit : units)
      if (unit.gatherDone)
        cudaEventDestroy(unit.gatherDone);
    if (paramsReady)
      cudaEventDestroy(paramsReady);
    if (cublas)
      cublasDestroy(cublas);
    if (stream)
      cudaStreamDestroy(stream);
  }

  int rank() const { return comm ? comm->getRank() : 0; }
  int world() const { return spec.dataParallel; }
  Unit &embeddings() { return units.front(); }
  Unit &finalNorm() { return units.back(); }
  int64_t hidden() const { return shape.hidden; }

  void count(Collective collective, State state, Phase phase, int64_t bytes) {
    CommCount &c = counters[CommKey{0, spec.axis, collective, state, phase}];
    c.count += 1;
    c.bytes += bytes;
  }

  template <class T> Status allocate(T *&pointer, int64_t elements, cudaStream_t on) {
    CUDA_TRY(cudaMallocAsync(reinterpret_cast<void **>(&pointer),
                             static_cast<size_t>(std::max<int64_t>(1, elements)) * sizeof(T), on),
             "cudaMallocAsync of " + std::to_string(elements * int64_t(sizeof(T))) +
                 " bytes (device memory exhausted?)");
    return Status::success();
  }
  template <class T> Status release(T *&pointer, cudaStream_t on) {
    if (pointer)
      CUDA_TRY(cudaFreeAsync(pointer, on), "cudaFreeAsync");
    pointer = nullptr;
    return Status::success();
  }

  Status setup();
  Status buildUnits();
  Status initializeUnit(Unit &unit);
  Status gather(int index, Phase phase);
  Status waitGathered(int index);
  const bf16 *params(int index) {
    Unit &unit = units[index];
    return spec.zeroStage == 3 ? unit.gathered : unit.working;
  }
  Status beginGrads(int index);
  /// The unit's fp32 gradient of this micro-batch (while its backward runs).
  float *grads(int index) { return units[index].gradsFloat; }
  /// The bf16 gradient this micro-batch's is added to.
  bf16 *gradsBf16(int index) {
    Unit &unit = units[index];
    return spec.zeroStage >= 2 ? unit.gradsTransient : unit.grads;
  }
  Status finishGrads(int index, bool lastMicrobatch);
  Status forwardBlock(int layer, BlockActivations &acts, bf16 *out);
  Status backwardBlock(int layer, BlockActivations &acts, bf16 *dres, bf16 *scratch);
  Status microbatch(int64_t index, bool last);
  Status optimizerStep();
  Status runStep(double &lossValue);
};

Status GptCudaTrainer::Impl::buildUnits() {
  const int64_t c = shape.hidden, v = shape.vocab, s = shape.seq;
  const float std = 0.02f;
  // GPT-2's scaled init of the residual projections: 0.02 / √(2·layers).
  const float residualStd = std / std::sqrt(2.0f * static_cast<float>(shape.layers));
  units.clear();
  units.emplace_back();
  units[0].tensors = {{0, v * c, std, 0}, {v * c, s * c, std, 0}};
  units[0].elements = v * c + s * c;
  BlockLayout layout(c, ffn);
  for (int64_t l = 0; l < shape.layers; ++l) {
    Unit unit;
    unit.tensors = {{layout.ln1g, c, 0, 1},
                    {layout.ln1b, c, 0, 0},
                    {layout.wqkv, 3 * c * c, std, 0},
                    {layout.bqkv, 3 * c, 0, 0},
                    {layout.wproj, c * c, residualStd, 0},
                    {layout.bproj, c, 0, 0},
                    {layout.ln2g, c, 0, 1},
                    {layout.ln2b, c, 0, 0},
                    {layout.wfc, ffn * c, std, 0},
                    {layout.bfc, ffn, 0, 0},
                    {layout.wfp, c * ffn, residualStd, 0},
                    {layout.bfp, c, 0, 0}};
    unit.elements = layout.total;
    units.push_back(std::move(unit));
  }
  Unit last;
  last.tensors = {{0, c, 0, 1}, {c, c, 0, 0}};
  last.elements = 2 * c;
  units.push_back(std::move(last));
  int64_t align = 8 * static_cast<int64_t>(world());
  int64_t flat = 0;
  for (Unit &unit : units) {
    unit.padded = (unit.elements + align - 1) / align * align;
    unit.shard = unit.padded / world();
    unit.flatOffset = flat;
    flat += unit.elements;
  }
  if (!options.initialParameters.empty() &&
      static_cast<int64_t>(options.initialParameters.size()) != flat)
    return {StatusCode::InvalidArgument,
            "initial parameters: " + std::to_string(options.initialParameters.size()) +
                " values for a model of " + std::to_string(flat)};
  return Status::success();
}

/// Master weights (full or this rank's shard) from the seed, then the bf16 working copy.
Status GptCudaTrainer::Impl::initializeUnit(Unit &unit) {
  const bool shardedMaster = spec.zeroStage >= 1;
  const int64_t begin = shardedMaster ? rank() * unit.shard : 0;
  const int64_t end = shardedMaster ? begin + unit.shard : unit.padded;
  uint64_t seed = options.seed * 0x100000001b3ull + static_cast<uint64_t>(&unit - units.data());
  float *master = unit.master;
  CUDA_TRY(cudaMemsetAsync(master, 0, static_cast<size_t>(end - begin) * sizeof(float), stream),
           "cudaMemsetAsync");
  for (const TensorSlot &tensor : unit.tensors) {
    if (!options.initialParameters.empty())
      break;
    int64_t from = std::max(begin, tensor.offset);
    int64_t to = std::min(end, tensor.offset + tensor.elements);
    if (from >= to)
      continue;
    initTensorKernel<<<blocksFor(to - from), 256, 0, stream>>>(
        master + (from - begin), to - from, from, seed, tensor.std, tensor.constant);
  }
  if (!options.initialParameters.empty()) {
    int64_t from = begin, to = std::min(end, unit.elements);
    if (from < to)
      CUDA_TRY(cudaMemcpyAsync(master, options.initialParameters.data() + unit.flatOffset + from,
                               static_cast<size_t>(to - from) * sizeof(float),
                               cudaMemcpyHostToDevice, stream),
               "copy of the initial parameters");
  }
  LAUNCH_TRY("parameter initialization");
  // Working copy: the full unit below stage 3 (all-gathered from the master shards under stages
  // 1-2), the shard under stage 3.
  if (spec.zeroStage == 0) {
    kernels::floatToBf16(master, unit.working, unit.padded, stream);
  } else if (spec.zeroStage == 3) {
    kernels::floatToBf16(master, unit.working, unit.shard, stream);
  } else {
    bf16 *mine = unit.working + rank() * unit.shard;
    kernels::floatToBf16(master, mine, unit.shard, stream);
    CUDA_TRY(cudaStreamSynchronize(stream), "parameter initialization");
    PLACERT_TRY(
        comm->allGatherAsync(mine, unit.working, unit.padded, ElementType::BFloat16, nullptr));
    PLACERT_TRY(comm->synchronize("all-gather of the initial parameters"));
  }
  LAUNCH_TRY("working copy");
  return Status::success();
}

Status GptCudaTrainer::Impl::setup() {
  PLACERT_TRY(GptCudaTrainer::checkSupported(shape, spec));
  if (spec.dataParallel != job.worldSize)
    return {StatusCode::InvalidArgument,
            "run '" + spec.run + "' needs " + std::to_string(spec.dataParallel) +
                " ranks (its data-parallel degree) but the job has " +
                std::to_string(job.worldSize) + " (start it with mpirun -np " +
                std::to_string(spec.dataParallel) + ")"};
  if (spec.microBatch < 1 || spec.globalBatch % (spec.microBatch * spec.dataParallel) != 0)
    return {StatusCode::InvalidArgument,
            "run '" + spec.run + "': global batch " + std::to_string(spec.globalBatch) +
                " is not a multiple of micro batch × data parallel = " +
                std::to_string(spec.microBatch * spec.dataParallel)};
  ffn = shape.ffn > 0 ? shape.ffn : 4 * shape.hidden;
  headDim = shape.hidden / shape.heads;
  rows = spec.microBatch * shape.seq;
  microbatches = spec.globalBatch / (spec.microBatch * spec.dataParallel);
  if (options.peakFlops > 0)
    spec.peakFlops = options.peakFlops;

  CUDA_TRY(cudaSetDevice(job.device), "cudaSetDevice");
  CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, job.device), "cudaDeviceGetDefaultMemPool");
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
           "cudaMemPoolSetAttribute");
  CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  CUBLAS_TRY(cublasCreate(&cublas), "cublasCreate");
  CUBLAS_TRY(cublasSetStream(cublas, stream), "cublasSetStream");
  const size_t workspaceBytes = 32u << 20;
  CUDA_TRY(cudaMallocAsync(&cublasWorkspace, workspaceBytes, stream), "cuBLAS workspace");
  CUBLAS_TRY(cublasSetWorkspace(cublas, cublasWorkspace, workspaceBytes), "cublasSetWorkspace");
  CUDA_TRY(cudaEventCreateWithFlags(&paramsReady, cudaEventDisableTiming), "cudaEventCreate");
  PLACERT_TRY(NcclCommunicator::create(job, spec.axis, 0, job.rank, options.timeoutSeconds, comm));

  PLACERT_TRY(buildUnits());
  for (Unit &unit : units) {
    CUDA_TRY(cudaEventCreateWithFlags(&unit.gatherDone, cudaEventDisableTiming), "cudaEventCreate");
    int64_t stateElements = spec.zeroStage == 0 ? unit.padded : unit.shard;
    PLACERT_TRY(allocate(unit.working, spec.zeroStage == 3 ? unit.shard : unit.padded, stream));
    PLACERT_TRY(allocate(unit.master, stateElements, stream));
    PLACERT_TRY(allocate(unit.m, stateElements, stream));
    PLACERT_TRY(allocate(unit.v, stateElements, stream));
    CUDA_TRY(cudaMemsetAsync(unit.m, 0, stateElements * sizeof(float), stream), "memset");
    CUDA_TRY(cudaMemsetAsync(unit.v, 0, stateElements * sizeof(float), stream), "memset");
    if (spec.zeroStage <= 1) {
      PLACERT_TRY(allocate(unit.grads, unit.padded, stream));
      CUDA_TRY(cudaMemsetAsync(unit.grads, 0, unit.padded * sizeof(bf16), stream), "memset");
    }
    if (spec.zeroStage >= 1) {
      PLACERT_TRY(allocate(unit.gradShard, unit.shard, stream));
      CUDA_TRY(cudaMemsetAsync(unit.gradShard, 0, unit.shard * sizeof(bf16), stream), "memset");
    }
    PLACERT_TRY(initializeUnit(unit));
  }
  PLACERT_TRY(allocate(tokens, rows, stream));
  PLACERT_TRY(allocate(targets, rows, stream));
  PLACERT_TRY(allocate(rowMax, rows, stream));
  PLACERT_TRY(allocate(sumExp, rows, stream));
  PLACERT_TRY(allocate(targetLogit, rows, stream));
  PLACERT_TRY(allocate(loss, 1, stream));
  PLACERT_TRY(allocate(lossScalar, 1, stream));
  if (spec.fusedAttention) {
    PLACERT_TRY(allocate(flash.dqAccum,
                         kernels::FlashWorkspace::getDqElements(rows, shape.heads, headDim), stream));
    PLACERT_TRY(
        allocate(flash.delta, kernels::FlashWorkspace::getDeltaElements(rows, shape.heads), stream));
  } else {
    int64_t square = kernels::AttentionWorkspace::getElements(shape.seq, shape.heads);
    PLACERT_TRY(allocate(attention.scores, square, stream));
    PLACERT_TRY(allocate(attention.probs, square, stream));
    PLACERT_TRY(allocate(attention.dscores, square, stream));
  }
  CUDA_TRY(cudaStreamSynchronize(stream), "setup");
  CUDA_TRY(cudaEventRecord(paramsReady, stream), "cudaEventRecord");
  return Status::success();
}

/// Stage 3: all-gathers unit `index` into a transient buffer on the communicator's stream.
Status GptCudaTrainer::Impl::gather(int index, Phase phase) {
  if (spec.zeroStage != 3 || index < 0 || index >= static_cast<int>(units.size()))
    return Status::success();
  Unit &unit = units[index];
  if (unit.gathered)
    return Status::success();
  cudaStream_t commStream = static_cast<cudaStream_t>(comm->getStream());
  PLACERT_TRY(allocate(unit.gathered, unit.padded, commStream));
  PLACERT_TRY(comm->allGatherAsync(unit.working, unit.gathered, unit.padded, ElementType::BFloat16,
                                   paramsReady));
  CUDA_TRY(cudaEventRecord(unit.gatherDone, commStream), "cudaEventRecord");
  count(Collective::AllGather, State::Params, phase, unit.padded * 2);
  return Status::success();
}

Status GptCudaTrainer::Impl::waitGathered(int index) {
  if (spec.zeroStage != 3)
    return Status::success();
  CUDA_TRY(cudaStreamWaitEvent(stream, units[index].gatherDone, 0), "cudaStreamWaitEvent");
  return Status::success();
}

/// The start of a unit's backward: the zeroed fp32 sum of its gradient, and under stage ≥ 2 a
/// zeroed bf16 full gradient for this micro-batch (the plan's transient).
Status GptCudaTrainer::Impl::beginGrads(int index) {
  Unit &unit = units[index];
  if (spec.zeroStage >= 2) {
    PLACERT_TRY(allocate(unit.gradsTransient, unit.padded, stream));
    CUDA_TRY(cudaMemsetAsync(unit.gradsTransient, 0, unit.padded * sizeof(bf16), stream),
             "cudaMemsetAsync");
  }
  PLACERT_TRY(allocate(unit.gradsFloat, unit.padded, stream));
  CUDA_TRY(cudaMemsetAsync(unit.gradsFloat, 0, unit.padded * sizeof(float), stream),
           "cudaMemsetAsync");
  return Status::success();
}

/// The unit's gradients of this micro-batch are complete on the compute stream: the fp32 sum is
/// added into the bf16 gradient and freed, then the bf16 gradient is reduced on the
/// communicator's stream (all-reduce under stage 0 and reduce-scatter under stage 1 once per
/// step, after the last micro-batch; reduce-scatter and accumulate every micro-batch under 2-3).
/// Counted under the plan's keys (the once-per-step reductions are phase step, as in the report,
/// although they overlap the backward here) with the bytes moved: bf16 gradients.
Status GptCudaTrainer::Impl::finishGrads(int index, bool lastMicrobatch) {
  Unit &unit = units[index];
  if (unit.gradsFloat) {
    kernels::accumulate(gradsBf16(index), unit.gradsFloat, unit.padded, stream);
    PLACERT_TRY(release(unit.gradsFloat, stream));
  }
  if (spec.zeroStage <= 1 && !lastMicrobatch)
    return Status::success();
  cudaEvent_t done;
  CUDA_TRY(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  CUDA_TRY(cudaEventRecord(done, stream), "cudaEventRecord");
  cudaStream_t commStream = static_cast<cudaStream_t>(comm->getStream());
  Status status;
  if (spec.zeroStage == 0) {
    status = comm->allReduceAsync(unit.grads, unit.padded, ElementType::BFloat16, done);
    count(Collective::AllReduce, State::Grads, Phase::Step, unit.padded * 2);
  } else if (spec.zeroStage == 1) {
    status = comm->reduceScatterAsync(unit.grads, unit.gradShard, unit.padded,
                                      ElementType::BFloat16, done);
    count(Collective::ReduceScatter, State::Grads, Phase::Step, unit.padded * 2);
  } else {
    bf16 *piece = nullptr;
    status = allocate(piece, unit.shard, commStream);
    if (status.isOk())
      status = comm->reduceScatterAsync(unit.gradsTransient, piece, unit.padded,
                                        ElementType::BFloat16, done);
    count(Collective::ReduceScatter, State::Grads, Phase::Backward, unit.padded * 2);
    if (status.isOk()) {
      kernels::accumulate(unit.gradShard, piece, unit.shard, commStream);
      status = release(piece, commStream);
    }
    if (status.isOk())
      status = release(unit.gradsTransient, commStream);
  }
  cudaEventDestroy(done); // Released by CUDA once the waits that use it have completed.
  return status;
}

Status GptCudaTrainer::Impl::forwardBlock(int layer, BlockActivations &a, bf16 *out) {
  const int64_t c = hidden(), n = rows;
  BlockLayout layout(c, ffn);
  const bf16 *p = params(layer + 1);
  kernels::layerNormForward(a.x, p + layout.ln1g, p + layout.ln1b, a.ln1, a.mean1, a.rstd1, n, c,
                            1e-5f, stream);
  CUBLAS_TRY(kernels::linearForward(cublas, a.ln1, p + layout.wqkv, p + layout.bqkv, a.qkv, n, c,
                                    3 * c, false, stream),
             "qkv projection");
  if (spec.fusedAttention)
    CUDA_TRY(kernels::flashAttentionForward(a.qkv, a.qkv + headDim, a.qkv + 2 * headDim, 3 * c,
                                            3 * headDim, a.att, c, a.lse, spec.microBatch,
                                            shape.seq, shape.heads, headDim, stream),
             "fused attention");
  else
    CUBLAS_TRY(kernels::attentionForward(cublas, a.qkv, a.qkv + headDim, a.qkv + 2 * headDim,
                                         3 * c, 3 * headDim, a.att, c, spec.microBatch, shape.seq,
                                         shape.heads, headDim, attention, stream),
               "attention");
  copyBf16Kernel<<<blocksFor(n * c), 256, 0, stream>>>(a.x, a.x2, n * c);
  CUBLAS_TRY(kernels::linearForward(cublas, a.att, p + layout.wproj, p + layout.bproj, a.x2, n, c,
                                    c, true, stream),
             "attention output projection");
  kernels::layerNormForward(a.x2, p + layout.ln2g, p + layout.ln2b, a.ln2, a.mean2, a.rstd2, n, c,
                            1e-5f, stream);
  CUBLAS_TRY(kernels::linearForward(cublas, a.ln2, p + layout.wfc, p + layout.bfc, a.h, n, c, ffn,
                                    false, stream),
             "mlp up projection");
  kernels::geluForward(a.h, a.g, n * ffn, stream);
  copyBf16Kernel<<<blocksFor(n * c), 256, 0, stream>>>(a.x2, out, n * c);
  CUBLAS_TRY(kernels::linearForward(cublas, a.g, p + layout.wfp, p + layout.bfp, out, n, ffn, c,
                                    true, stream),
             "mlp down projection");
  LAUNCH_TRY("block forward");
  return Status::success();
}

/// dres holds ∂L/∂(block output) and receives ∂L/∂(block input). scratch: [rows, max(ffn, 3c)]
/// twice over plus [rows, c].
Status GptCudaTrainer::Impl::backwardBlock(int layer, BlockActivations &a, bf16 *dres,
                                           bf16 *scratch) {
  const int64_t c = hidden(), n = rows;
  BlockLayout layout(c, ffn);
  const bf16 *p = params(layer + 1);
  float *gr = grads(layer + 1);
  const int64_t wide = std::max(ffn, 3 * c);
  bf16 *dwide = scratch, *dnarrow = scratch + n * wide;
  // MLP.
  CUBLAS_TRY(
      kernels::linearInputGrad(cublas, dres, p + layout.wfp, dwide, n, ffn, c, false, stream),
      "mlp down projection backward");
  CUBLAS_TRY(kernels::linearWeightGrad(cublas, a.g, dres, gr + layout.wfp, gr + layout.bfp, n, ffn,
                                       c, stream),
             "mlp down projection weight gradient");
  kernels::geluBackward(a.h, dwide, dwide, n * ffn, stream);
  CUBLAS_TRY(
      kernels::linearInputGrad(cublas, dwide, p + layout.wfc, dnarrow, n, c, ffn, false, stream),
      "mlp up projection backward");
  CUBLAS_TRY(kernels::linearWeightGrad(cublas, a.ln2, dwide, gr + layout.wfc, gr + layout.bfc, n, c,
                                       ffn, stream),
             "mlp up projection weight gradient");
  kernels::layerNormBackward(a.x2, p + layout.ln2g, a.mean2, a.rstd2, dnarrow, dres,
                             gr + layout.ln2g, gr + layout.ln2b, n, c, true, stream);
  // Attention.
  CUBLAS_TRY(
      kernels::linearInputGrad(cublas, dres, p + layout.wproj, dnarrow, n, c, c, false, stream),
      "attention output projection backward");
  CUBLAS_TRY(kernels::linearWeightGrad(cublas, a.att, dres, gr + layout.wproj, gr + layout.bproj, n,
                                       c, c, stream),
             "attention output projection weight gradient");
  if (spec.fusedAttention)
    CUDA_TRY(kernels::flashAttentionBackward(a.qkv, a.qkv + headDim, a.qkv + 2 * headDim, 3 * c,
                                             3 * headDim, a.att, dnarrow, c, a.lse, dwide,
                                             dwide + headDim, dwide + 2 * headDim, spec.microBatch,
                                             shape.seq, shape.heads, headDim, flash, stream),
             "fused attention backward");
  else
    CUBLAS_TRY(kernels::attentionBackward(cublas, a.qkv, a.qkv + headDim, a.qkv + 2 * headDim,
                                          3 * c, 3 * headDim, dnarrow, c, dwide, dwide + headDim,
                                          dwide + 2 * headDim, spec.microBatch, shape.seq,
                                          shape.heads, headDim, attention, stream),
               "attention backward");
  CUBLAS_TRY(
      kernels::linearInputGrad(cublas, dwide, p + layout.wqkv, dnarrow, n, c, 3 * c, false, stream),
      "qkv projection backward");
  CUBLAS_TRY(kernels::linearWeightGrad(cublas, a.ln1, dwide, gr + layout.wqkv, gr + layout.bqkv, n,
                                       c, 3 * c, stream),
             "qkv projection weight gradient");
  kernels::layerNormBackward(a.x, p + layout.ln1g, a.mean1, a.rstd1, dnarrow, dres,
                             gr + layout.ln1g, gr + layout.ln1b, n, c, true, stream);
  LAUNCH_TRY("block backward");
  return Status::success();
}

/// Forward and backward of one micro-batch (`index` within this rank's share of the step).
Status GptCudaTrainer::Impl::microbatch(int64_t index, bool last) {
  const int64_t c = hidden(), n = rows, v = shape.vocab, layers = shape.layers;
  const int64_t firstSample =
      step * spec.globalBatch + (rank() * microbatches + index) * spec.microBatch;
  if (options.tokenSource) {
    hostTokens.resize(static_cast<size_t>(n));
    hostTargets.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      hostTokens[r] = options.tokenSource(firstSample + r / shape.seq, r % shape.seq);
      hostTargets[r] = options.tokenSource(firstSample + r / shape.seq, r % shape.seq + 1);
    }
    // From pageable memory: each copy returns once the host vector is staged.
    CUDA_TRY(cudaMemcpyAsync(tokens, hostTokens.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream),
             "token copy");
    CUDA_TRY(cudaMemcpyAsync(targets, hostTargets.data(), n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream),
             "token copy");
  } else {
    tokensKernel<<<blocksFor(n), 256, 0, stream>>>(tokens, targets, n, shape.seq, firstSample, v,
                                                   options.seed);
  }
  // Activations of every block (inputs chained: block l's output is block l+1's input).
  std::vector<BlockActivations> acts(static_cast<size_t>(layers));
  bf16 *finalInput = nullptr, *finalOut = nullptr, *logits = nullptr;
  float *finalMean = nullptr, *finalRstd = nullptr;
  // Everything but the block input: kept from the forward to the backward, or under full
  // recomputation allocated around the block's forward and again around its backward.
  auto allocateInner = [&](BlockActivations &a) -> Status {
    PLACERT_TRY(allocate(a.ln1, n * c, stream));
    PLACERT_TRY(allocate(a.qkv, n * 3 * c, stream));
    PLACERT_TRY(allocate(a.att, n * c, stream));
    PLACERT_TRY(allocate(a.x2, n * c, stream));
    PLACERT_TRY(allocate(a.ln2, n * c, stream));
    PLACERT_TRY(allocate(a.h, n * ffn, stream));
    PLACERT_TRY(allocate(a.g, n * ffn, stream));
    PLACERT_TRY(allocate(a.mean1, n, stream));
    PLACERT_TRY(allocate(a.rstd1, n, stream));
    PLACERT_TRY(allocate(a.mean2, n, stream));
    if (spec.fusedAttention)
      PLACERT_TRY(allocate(a.lse, n * shape.heads, stream));
    return allocate(a.rstd2, n, stream);
  };
  auto releaseInner = [&](BlockActivations &a) -> Status {
    for (bf16 **p : {&a.ln1, &a.qkv, &a.att, &a.x2, &a.ln2, &a.h, &a.g})
      PLACERT_TRY(release(*p, stream));
    for (float **p : {&a.mean1, &a.rstd1, &a.mean2, &a.rstd2, &a.lse})
      PLACERT_TRY(release(*p, stream));
    return Status::success();
  };
  const bool recompute = spec.recomputeFull;
  for (auto &a : acts) {
    PLACERT_TRY(allocate(a.x, n * c, stream));
    if (!recompute)
      PLACERT_TRY(allocateInner(a));
  }
  PLACERT_TRY(allocate(finalInput, n * c, stream));
  PLACERT_TRY(allocate(finalOut, n * c, stream));
  PLACERT_TRY(allocate(finalMean, n, stream));
  PLACERT_TRY(allocate(finalRstd, n, stream));

  // Forward. Under stage 3 the embeddings and the final norm stay gathered for the micro-batch
  // (the tied embedding is used again by the output layer); block l + 1 is gathered while block
  // l computes.
  const int lastUnit = static_cast<int>(units.size()) - 1;
  PLACERT_TRY(gather(0, Phase::Forward));
  PLACERT_TRY(gather(1, Phase::Forward));
  PLACERT_TRY(gather(lastUnit, Phase::Forward));
  PLACERT_TRY(waitGathered(0));
  const bf16 *embed = params(0);
  kernels::embeddingForward(tokens, embed, embed + v * c, layers > 0 ? acts[0].x : finalInput, n,
                            shape.seq, c, 0, v, stream);
  for (int64_t l = 0; l < layers; ++l) {
    PLACERT_TRY(gather(static_cast<int>(l) + 2, Phase::Forward));
    PLACERT_TRY(waitGathered(static_cast<int>(l) + 1));
    bf16 *out = l + 1 < layers ? acts[l + 1].x : finalInput;
    if (recompute)
      PLACERT_TRY(allocateInner(acts[l]));
    PLACERT_TRY(forwardBlock(static_cast<int>(l), acts[l], out));
    if (recompute)
      PLACERT_TRY(releaseInner(acts[l]));
    if (spec.zeroStage == 3 && l + 1 <= layers)
      PLACERT_TRY(release(units[l + 1].gathered, stream));
  }
  PLACERT_TRY(waitGathered(lastUnit));
  const bf16 *norm = params(lastUnit);
  kernels::layerNormForward(finalInput, norm, norm + c, finalOut, finalMean, finalRstd, n, c, 1e-5f,
                            stream);
  LAUNCH_TRY("forward");

  // The loss and the output layer's backward, one sequence at a time, so that only one sequence's
  // logits [seq, vocab] exist at once (the report's activations do not count the logits; all of
  // them in bf16 would be 2·rows·vocab bytes, 0.77 GiB for the bench/gpu models). The
  // embeddings' gradient is summed in fp32 from here to the embedding backward at the end.
  PLACERT_TRY(beginGrads(0));
  PLACERT_TRY(beginGrads(lastUnit));
  bf16 *dres = nullptr, *scratch = nullptr;
  const int64_t wide = std::max(ffn, 3 * c);
  PLACERT_TRY(allocate(dres, n * c, stream));
  PLACERT_TRY(allocate(scratch, n * (2 * wide + c), stream));
  bf16 *dfinal = scratch;
  float *gEmbed = grads(0), *gNorm = grads(lastUnit);
  const int64_t chunk = shape.seq;
  PLACERT_TRY(allocate(logits, chunk * v, stream));
  const double scale = 1.0 / static_cast<double>(spec.globalBatch * shape.seq);
  for (int64_t r = 0; r < n; r += chunk) {
    const int64_t k = std::min(chunk, n - r);
    CUBLAS_TRY(kernels::linearForward(cublas, finalOut + r * c, embed, nullptr, logits, k, c, v,
                                      false, stream),
               "output layer");
    kernels::crossEntropyRowMax(logits, rowMax + r, k, v, stream);
    kernels::crossEntropyPartials(logits, targets + r, rowMax + r, sumExp + r, targetLogit + r, k,
                                  v, 0, stream);
    kernels::crossEntropyLossAndGrad(logits, targets + r, rowMax + r, sumExp + r, targetLogit + r,
                                     logits, loss, k, v, 0, scale, stream);
    CUBLAS_TRY(
        kernels::linearInputGrad(cublas, logits, embed, dfinal + r * c, k, c, v, false, stream),
        "output layer backward");
    CUBLAS_TRY(kernels::linearWeightGrad(cublas, finalOut + r * c, logits, gEmbed, nullptr, k, c, v,
                                         stream),
               "output layer weight gradient");
  }
  PLACERT_TRY(release(logits, stream));
  LAUNCH_TRY("loss and output layer");

  // Backward.
  kernels::layerNormBackward(finalInput, norm, finalMean, finalRstd, dfinal, dres, gNorm, gNorm + c,
                             n, c, false, stream);
  PLACERT_TRY(finishGrads(lastUnit, last));
  if (spec.zeroStage == 3)
    PLACERT_TRY(release(units[lastUnit].gathered, stream));
  PLACERT_TRY(gather(static_cast<int>(layers), Phase::Backward));
  for (int64_t l = layers - 1; l >= 0; --l) {
    int unit = static_cast<int>(l) + 1;
    if (l >= 1)
      PLACERT_TRY(gather(unit - 1, Phase::Backward));
    PLACERT_TRY(waitGathered(unit));
    PLACERT_TRY(beginGrads(unit));
    if (recompute) {
      // The block's forward again from its saved input; its output is written over the next
      // block's input (or the final norm's), which the backward no longer needs.
      PLACERT_TRY(allocateInner(acts[l]));
      PLACERT_TRY(
          forwardBlock(static_cast<int>(l), acts[l], l + 1 < layers ? acts[l + 1].x : finalInput));
    }
    PLACERT_TRY(backwardBlock(static_cast<int>(l), acts[l], dres, scratch));
    // Block l's saved tensors and its output (block l + 1's input, which a recomputation of
    // block l would have written) are no longer needed; its own input is (block l − 1's output).
    PLACERT_TRY(releaseInner(acts[l]));
    if (l + 1 < layers)
      PLACERT_TRY(release(acts[l + 1].x, stream));
    PLACERT_TRY(finishGrads(unit, last));
    if (spec.zeroStage == 3)
      PLACERT_TRY(release(units[unit].gathered, stream));
  }
  kernels::embeddingBackward(tokens, dres, gEmbed, gEmbed + v * c, n, shape.seq, c, 0, v, stream);
  PLACERT_TRY(finishGrads(0, last));
  if (spec.zeroStage == 3)
    PLACERT_TRY(release(units[0].gathered, stream));
  LAUNCH_TRY("backward");

  PLACERT_TRY(release(dres, stream));
  PLACERT_TRY(release(scratch, stream));
  for (auto &a : acts) {
    PLACERT_TRY(release(a.x, stream));
    PLACERT_TRY(releaseInner(a));
  }
  PLACERT_TRY(release(finalInput, stream));
  PLACERT_TRY(release(finalOut, stream));
  PLACERT_TRY(release(finalMean, stream));
  PLACERT_TRY(release(finalRstd, stream));
  return Status::success();
}

/// Adam on each unit's master weights (full or shard), then the working copy: written whole under
/// stage 0, written as this rank's piece and all-gathered under stages 1-2, left sharded under 3.
Status GptCudaTrainer::Impl::optimizerStep() {
  PLACERT_TRY(comm->synchronize("gradient reduction"));
  const float lr = static_cast<float>(spec.learningRate);
  cudaStream_t commStream = static_cast<cudaStream_t>(comm->getStream());
  for (Unit &unit : units) {
    if (spec.zeroStage == 0) {
      kernels::adamUpdate(unit.master, unit.grads, unit.m, unit.v, unit.working, unit.padded,
                          step + 1, lr, stream);
      CUDA_TRY(cudaMemsetAsync(unit.grads, 0, unit.padded * sizeof(bf16), stream), "memset");
      continue;
    }
    bf16 *target = spec.zeroStage == 3 ? unit.working : unit.working + rank() * unit.shard;
    kernels::adamUpdate(unit.master, unit.gradShard, unit.m, unit.v, target, unit.shard, step + 1,
                        lr, stream);
    CUDA_TRY(cudaMemsetAsync(unit.gradShard, 0, unit.shard * sizeof(bf16), stream), "memset");
    if (spec.zeroStage == 1)
      CUDA_TRY(cudaMemsetAsync(unit.grads, 0, unit.padded * sizeof(bf16), stream), "memset");
    if (spec.zeroStage <= 2) {
      CUDA_TRY(cudaEventRecord(paramsReady, stream), "cudaEventRecord");
      PLACERT_TRY(comm->allGatherAsync(target, unit.working, unit.padded, ElementType::BFloat16,
                                       paramsReady));
      count(Collective::AllGather, State::Params, Phase::Step, unit.padded * 2);
    }
  }
  LAUNCH_TRY("optimizer step");
  // The next forward reads the working copy: the compute stream waits for the all-gathers.
  cudaEvent_t gathered;
  CUDA_TRY(cudaEventCreateWithFlags(&gathered, cudaEventDisableTiming), "cudaEventCreate");
  CUDA_TRY(cudaEventRecord(gathered, commStream), "cudaEventRecord");
  CUDA_TRY(cudaStreamWaitEvent(stream, gathered, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(gathered);
  CUDA_TRY(cudaEventRecord(paramsReady, stream), "cudaEventRecord");
  return Status::success();
}

Status GptCudaTrainer::Impl::runStep(double &lossValue) {
  CUDA_TRY(cudaMemsetAsync(loss, 0, sizeof(double), stream), "memset");
  for (int64_t mb = 0; mb < microbatches; ++mb)
    PLACERT_TRY(microbatch(mb, mb + 1 == microbatches));
  PLACERT_TRY(optimizerStep());
  double mine = 0;
  CUDA_TRY(cudaMemcpyAsync(&mine, loss, sizeof(double), cudaMemcpyDeviceToHost, stream),
           "loss copy");
  CUDA_TRY(cudaStreamSynchronize(stream), "step " + std::to_string(step));
  lossValue = mine;
  if (world() > 1) {
    // The loss over the job: a small uncounted all-reduce (metrics, not part of the plan).
    float value = static_cast<float>(mine);
    CUDA_TRY(cudaMemcpy(lossScalar, &value, sizeof(float), cudaMemcpyHostToDevice), "loss copy");
    PLACERT_TRY(comm->allReduce(lossScalar, 1));
    CUDA_TRY(cudaMemcpy(&value, lossScalar, sizeof(float), cudaMemcpyDeviceToHost), "loss copy");
    lossValue = value;
  }
  ++step;
  return Status::success();
}

Status GptCudaTrainer::checkSupported(const GptShape &shape, const GptRunSpec &spec) {
  if (shape.layers < 1 || shape.hidden < 1 || shape.heads < 1 || shape.seq < 1 || shape.vocab < 2)
    return {StatusCode::InvalidArgument, "model '" + shape.name + "': incomplete shape"};
  if (!shape.tiedEmbeddings)
    return {StatusCode::InvalidArgument,
            "model '" + shape.name + "': the GPU trainer ties the output layer to the embedding"};
  if (shape.hidden % shape.heads != 0)
    return {StatusCode::InvalidArgument,
            "model '" + shape.name + "': hidden " + std::to_string(shape.hidden) +
                " is not a multiple of heads " + std::to_string(shape.heads)};
  const char *layout = shape.swiglu    ? "mlp = swiglu (the trainer implements GELU)"
                       : shape.rmsNorm ? "norm = rmsnorm (the trainer implements LayerNorm)"
                       : !shape.bias   ? "bias = false (the trainer's layers have biases)"
                       : shape.rope    ? "positions = rope (the trainer implements learned positions)"
                       : shape.moe.experts > 0
                           ? "a mixture of experts (the trainer's layers have dense MLPs)"
                           : nullptr;
  if (layout)
    return {StatusCode::InvalidArgument,
            "model '" + shape.name + "': " + layout + "; the CPU trainer runs it"};
  if (shape.getKvHeads() != shape.heads)
    return {StatusCode::InvalidArgument,
            "model '" + shape.name + "': kv_heads " + std::to_string(shape.kvHeads) +
                ": the GPU trainer implements multi-head attention (kv_heads = heads)"};
  if (spec.zeroStage < 0 || spec.zeroStage > 3)
    return {StatusCode::InvalidArgument, "ZeRO stage must be 0..3"};
  if (spec.fusedAttention &&
      !kernels::flashAttentionSupports(shape.hidden / shape.heads, 3 * shape.hidden,
                                       3 * (shape.hidden / shape.heads), shape.hidden))
    return {StatusCode::InvalidArgument,
            "model '" + shape.name + "': head dimension " +
                std::to_string(shape.hidden / shape.heads) +
                ": the fused attention runs heads of 16, 32, 64 or 128 (attention = materialized "
                "runs any)"};
  return Status::success();
}

GptCudaTrainer::GptCudaTrainer() : impl(std::make_unique<Impl>()) {}
GptCudaTrainer::~GptCudaTrainer() = default;

Status GptCudaTrainer::create(const Job &job, GptShape shape, GptRunSpec spec, GptOptions options,
                              std::unique_ptr<GptCudaTrainer> &result) {
  std::unique_ptr<GptCudaTrainer> trainer(new GptCudaTrainer());
  trainer->impl->job = job;
  trainer->impl->shape = std::move(shape);
  trainer->impl->spec = std::move(spec);
  trainer->impl->options = std::move(options);
  PLACERT_TRY(trainer->impl->setup());
  result = std::move(trainer);
  return Status::success();
}

int64_t GptCudaTrainer::getParameterCount(const GptShape &shape) {
  int64_t c = shape.hidden, f = shape.ffn > 0 ? shape.ffn : 4 * shape.hidden;
  int64_t block = BlockLayout(c, f).total;
  return shape.vocab * c + shape.seq * c + shape.layers * block + 2 * c;
}

double GptCudaTrainer::getModelFlopsPerStep(const GptShape &shape, int64_t globalBatch) {
  double tokens = static_cast<double>(globalBatch) * static_cast<double>(shape.seq);
  double params = static_cast<double>(getParameterCount(shape));
  double attention = 12.0 * static_cast<double>(shape.layers) * static_cast<double>(shape.hidden) *
                     static_cast<double>(shape.seq);
  return (6.0 * params + attention) * tokens;
}

Status GptCudaTrainer::train(GptMetrics &metrics) {
  Impl &i = *impl;
  metrics = GptMetrics();
  for (int s = 0; s < i.options.warmupSteps; ++s) {
    double lossValue = 0;
    PLACERT_TRY(i.runStep(lossValue));
    if (!i.options.quiet && i.job.rank == 0)
      std::printf("warm-up step %d: loss %.6f\n", s, lossValue);
  }
  // The peak is that of the timed steps (the warm-up has allocated everything once already).
  uint64_t zero = 0;
  CUDA_TRY(cudaMemPoolSetAttribute(i.pool, cudaMemPoolAttrUsedMemHigh, &zero),
           "cudaMemPoolSetAttribute");
  i.counters.clear();
  auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < i.options.steps; ++s) {
    double lossValue = 0;
    PLACERT_TRY(i.runStep(lossValue));
    metrics.losses.push_back(lossValue);
    if (!std::isfinite(lossValue))
      return {StatusCode::CheckFailed, "step " + std::to_string(s) + ": the loss is not finite"};
    if (!i.options.quiet && i.job.rank == 0)
      std::printf("step %d: loss %.6f\n", s, lossValue);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t high = 0;
  CUDA_TRY(cudaMemPoolGetAttribute(i.pool, cudaMemPoolAttrUsedMemHigh, &high),
           "cudaMemPoolGetAttribute");
  metrics.secondsPerStep = seconds / i.options.steps;
  metrics.tokensPerSecond =
      static_cast<double>(i.spec.globalBatch * i.shape.seq) / metrics.secondsPerStep;
  metrics.modelFlopsPerStep = getModelFlopsPerStep(i.shape, i.spec.globalBatch);
  if (i.spec.peakFlops > 0)
    metrics.mfu = metrics.modelFlopsPerStep /
                  (metrics.secondsPerStep * i.spec.peakFlops * i.spec.dataParallel);
  metrics.peakDeviceBytes = static_cast<int64_t>(high);
  metrics.parameters = getParameterCount(i.shape);
  metrics.counters = i.counters;
  return Status::success();
}

Status GptCudaTrainer::getParameters(std::vector<float> &parameters) {
  Impl &i = *impl;
  CUDA_TRY(cudaStreamSynchronize(i.stream), "getParameters");
  parameters.clear();
  for (Unit &unit : i.units) {
    std::vector<float> host(static_cast<size_t>(unit.padded));
    if (i.spec.zeroStage == 0) {
      CUDA_TRY(
          cudaMemcpy(host.data(), unit.master, unit.padded * sizeof(float), cudaMemcpyDeviceToHost),
          "parameter copy");
    } else {
      float *full = nullptr;
      PLACERT_TRY(i.allocate(full, unit.padded, i.stream));
      CUDA_TRY(cudaStreamSynchronize(i.stream), "getParameters");
      PLACERT_TRY(i.comm->allGather(unit.master, full, unit.padded));
      CUDA_TRY(cudaMemcpy(host.data(), full, unit.padded * sizeof(float), cudaMemcpyDeviceToHost),
               "parameter copy");
      PLACERT_TRY(i.release(full, i.stream));
      CUDA_TRY(cudaStreamSynchronize(i.stream), "getParameters");
    }
    parameters.insert(parameters.end(), host.begin(), host.begin() + unit.elements);
  }
  return Status::success();
}

Status GptCudaTrainer::report(const GptMetrics &metrics) const {
  const Impl &i = *impl;
  if (i.job.rank != 0)
    return Status::success();
  cudaDeviceProp properties;
  std::string device = "unknown";
  if (cudaGetDeviceProperties(&properties, i.job.device) == cudaSuccess)
    device = properties.name;
  std::printf("run %s: %s, %lld parameters, dp %d, zero %d, %d step(s) timed on %s\n",
              i.spec.run.c_str(), i.shape.name.c_str(), static_cast<long long>(metrics.parameters),
              i.spec.dataParallel, i.spec.zeroStage, i.options.steps, device.c_str());
  std::printf("  %.1f tokens/s, %.3f s/step, MFU %s, peak device memory %.2f GiB",
              metrics.tokensPerSecond, metrics.secondsPerStep,
              i.spec.peakFlops > 0 ? (std::to_string(metrics.mfu * 100).substr(0, 5) + "%").c_str()
                                   : "n/a (no peak)",
              static_cast<double>(metrics.peakDeviceBytes) / (1 << 30));
  if (i.spec.predictedPeakBytes > 0)
    std::printf(" (report predicts %.2f GiB)", i.spec.predictedPeakBytes / (1 << 30));
  std::printf("\n");
  if (i.options.metricsPath.empty())
    return Status::success();
  std::ostringstream os;
  os.precision(10);
  os << "{\n  \"placec_version\": \""
     << jsonEscape(i.spec.placecVersion.empty() ? "unknown" : i.spec.placecVersion)
     << "\",\n  \"placert_version\": \"" PLACERT_VERSION_STRING "\",\n  \"run\": \""
     << jsonEscape(i.spec.run) << "\",\n  \"model\": \"" << jsonEscape(i.shape.name)
     << "\",\n  \"device\": \"" << jsonEscape(device)
     << "\",\n  \"parameters\": " << metrics.parameters
     << ",\n  \"data_parallel\": " << i.spec.dataParallel
     << ",\n  \"zero_stage\": " << i.spec.zeroStage
     << ",\n  \"global_batch\": " << i.spec.globalBatch
     << ",\n  \"micro_batch\": " << i.spec.microBatch << ",\n  \"seq\": " << i.shape.seq
     << ",\n  \"steps\": " << i.options.steps
     << ",\n  \"seconds_per_step\": " << metrics.secondsPerStep
     << ",\n  \"tokens_per_second\": " << metrics.tokensPerSecond
     << ",\n  \"model_flops_per_step\": " << metrics.modelFlopsPerStep
     << ",\n  \"peak_flops\": " << i.spec.peakFlops << ",\n  \"mfu\": " << metrics.mfu
     << ",\n  \"peak_device_bytes\": " << metrics.peakDeviceBytes
     << ",\n  \"predicted_peak_bytes\": " << i.spec.predictedPeakBytes << ",\n  \"losses\": [";
  for (size_t k = 0; k < metrics.losses.size(); ++k)
    os << (k ? ", " : "") << metrics.losses[k];
  os << "],\n  \"communication\": [";
  bool first = true;
  for (const auto &[key, value] : metrics.counters) {
    os << (first ? "\n" : ",\n") << "    {\"axis\": \"" << jsonEscape(key.axis)
       << "\", \"collective\": \"" << toString(key.collective) << "\", \"state\": \""
       << toString(key.state) << "\", \"phase\": \"" << toString(key.phase)
       << "\", \"count\": " << value.count << ", \"bytes\": " << value.bytes << "}";
    first = false;
  }
  os << (first ? "]\n}\n" : "\n  ]\n}\n");
  std::ofstream file(i.options.metricsPath);
  file << os.str();
  if (!file)
    return {StatusCode::Io, "cannot write the metrics to '" + i.options.metricsPath + "'"};
  return Status::success();
}

int runGpt(int argc, char **argv, const GptShape &shape, const GptRunSpec &spec) {
  GptOptions options;
  bool help = false;
  Status status = parseGptOptions(argc, argv, options, help);
  if (!status.isOk()) {
    std::fprintf(stderr, "placert: error: %s\n", status.getMessage().c_str());
    return 1;
  }
  if (help)
    return 0;
  Job job;
  status = initJob(&argc, &argv, job);
  std::unique_ptr<GptCudaTrainer> trainer;
  GptMetrics metrics;
  if (status.isOk())
    status = GptCudaTrainer::create(job, shape, spec, options, trainer);
  if (status.isOk())
    status = trainer->train(metrics);
  if (status.isOk())
    status = trainer->report(metrics);
  trainer.reset();
  if (!status.isOk()) {
    std::fprintf(stderr, "placert: rank %d: error: %s\n", job.rank, status.getMessage().c_str());
    // A failed rank cannot finalize MPI collectively; the launcher ends the job on exit(1).
    return 1;
  }
  finalizeJob();
  return 0;
}

} // namespace cuda
} // namespace placert
