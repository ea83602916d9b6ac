// NcclCommunicator (placert/cuda.h): placert's Communicator over NCCL on device pointers, one
// NCCL communicator and CUDA stream per group, bootstrapped over MPI (or alone for one rank),
// with a deadline on every wait; and the job setup (MPI when built with it, device choice).
#include "placert/cuda.h"

#include <cuda_runtime.h>
#include <nccl.h>
#ifdef PLACERT_CUDA_HAVE_MPI
#include <mpi.h>
#endif

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace placert {
namespace cuda {

namespace {

#ifdef PLACERT_CUDA_HAVE_MPI
bool startedMpi = false;
#endif

std::string rankPrefix(const Job &job) { return "rank " + std::to_string(job.rank) + ": "; }

ncclDataType_t toNccl(ElementType type) {
  return type == ElementType::Float32 ? ncclFloat32 : ncclBfloat16;
}

} // namespace

Status initJob(int *argc, char ***argv, Job &job) {
#ifdef PLACERT_CUDA_HAVE_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
      return {StatusCode::Communication, "MPI_Init failed"};
    startedMpi = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &job.worldSize);
#else
  (void)argc;
  (void)argv;
  job.rank = 0;
  job.worldSize = 1;
#endif
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0)
    return {StatusCode::InvalidArgument,
            rankPrefix(job) + "no CUDA device (" +
                (error != cudaSuccess ? std::string(cudaGetErrorString(error))
                                      : std::string("0 devices")) +
                ")"};
  job.device = job.rank % devices;
  error = cudaSetDevice(job.device);
  if (error != cudaSuccess)
    return {StatusCode::InvalidArgument, rankPrefix(job) + "cudaSetDevice(" +
                                             std::to_string(job.device) +
                                             "): " + cudaGetErrorString(error)};
  return Status::success();
}

void finalizeJob() {
#ifdef PLACERT_CUDA_HAVE_MPI
  if (startedMpi) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
  }
#endif
}

struct NcclCommunicator::Impl {
  Job job;
  std::string name;
  int rank = 0, size = 1;
  double timeoutSeconds = 300;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted = false;

  Status fail(const std::string &what, ncclResult_t result) const {
    return {StatusCode::Communication,
            rankPrefix(job) + what + " over '" + name + "' failed: " + ncclGetErrorString(result)};
  }
  Status failCuda(const std::string &what, cudaError_t error) const {
    return {StatusCode::Communication,
            rankPrefix(job) + what + " over '" + name + "' failed: " + cudaGetErrorString(error)};
  }
  Status waitEvent(void *waitFor) {
    if (!waitFor)
      return Status::success();
    cudaError_t error = cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(waitFor), 0);
    return error == cudaSuccess ? Status::success() : failCuda("cudaStreamWaitEvent", error);
  }
};

NcclCommunicator::NcclCommunicator() : impl(std::make_unique<Impl>()) {}

NcclCommunicator::~NcclCommunicator() {
  if (impl->comm) {
    if (impl->aborted)
      ncclCommAbort(impl->comm);
    else
      ncclCommDestroy(impl->comm);
  }
  if (impl->stream)
    cudaStreamDestroy(impl->stream);
}

Status NcclCommunicator::create(const Job &job, std::string name, int color, int key,
                                double timeoutSeconds, std::unique_ptr<NcclCommunicator> &result) {
  std::unique_ptr<NcclCommunicator> communicator(new NcclCommunicator());
  Impl &impl = *communicator->impl;
  impl.job = job;
  impl.name = std::move(name);
  impl.timeoutSeconds = timeoutSeconds;
  ncclUniqueId id;
#ifdef PLACERT_CUDA_HAVE_MPI
  MPI_Comm group;
  if (MPI_Comm_split(MPI_COMM_WORLD, color, key, &group) != MPI_SUCCESS)
    return {StatusCode::Communication,
            rankPrefix(job) + "MPI_Comm_split for group '" + impl.name + "' failed"};
  MPI_Comm_rank(group, &impl.rank);
  MPI_Comm_size(group, &impl.size);
  // Rank 0 says whether it has an id before sending it, so that a failure there does not leave
  // the others waiting in the broadcast.
  ncclResult_t idResult = impl.rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
  int haveId = idResult == ncclSuccess ? 1 : 0;
  int broadcast = MPI_Bcast(&haveId, 1, MPI_INT, 0, group);
  if (broadcast == MPI_SUCCESS && haveId)
    broadcast = MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group);
  MPI_Comm_free(&group);
  if (broadcast != MPI_SUCCESS)
    return {StatusCode::Communication,
            rankPrefix(job) + "broadcast of the NCCL id of group '" + impl.name + "' failed"};
  if (idResult != ncclSuccess)
    return impl.fail("ncclGetUniqueId", idResult);
  if (!haveId)
    return {StatusCode::Communication,
            rankPrefix(job) + "group '" + impl.name + "': its rank 0 could not create the NCCL id"};
#else
  (void)color;
  (void)key;
  if (job.worldSize != 1)
    return {StatusCode::InvalidArgument, "group '" + impl.name +
                                             "': placert_cuda was built without MPI, so a job "
                                             "runs on one rank only"};
  impl.rank = 0;
  impl.size = 1;
  ncclResult_t got = ncclGetUniqueId(&id);
  if (got != ncclSuccess)
    return impl.fail("ncclGetUniqueId", got);
#endif
  cudaError_t error = cudaStreamCreateWithFlags(&impl.stream, cudaStreamNonBlocking);
  if (error != cudaSuccess)
    return impl.failCuda("cudaStreamCreate", error);
  // ncclCommInitRank blocks until every rank of the group has called it: run it on a helper
  // thread and give up after the deadline (the thread is left behind; the caller exits).
  struct InitState {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    ncclResult_t result = ncclSuccess;
    ncclComm_t comm = nullptr;
  };
  auto state = std::make_shared<InitState>();
  int device = job.device, size = impl.size, rank = impl.rank;
  std::thread([state, device, size, rank, id]() mutable {
    cudaSetDevice(device);
    ncclComm_t comm = nullptr;
    ncclResult_t result = ncclCommInitRank(&comm, size, id, rank);
    std::lock_guard<std::mutex> lock(state->mutex);
    state->comm = comm;
    state->result = result;
    state->finished = true;
    state->done.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(state->mutex);
  if (!state->done.wait_for(lock, std::chrono::duration<double>(timeoutSeconds),
                            [&] { return state->finished; }))
    return {StatusCode::Timeout,
            rankPrefix(job) + "ncclCommInitRank over '" + impl.name + "' did not complete within " +
                std::to_string(static_cast<int>(timeoutSeconds)) + "s (a peer rank may have died)"};
  if (state->result != ncclSuccess)
    return impl.fail("ncclCommInitRank", state->result);
  impl.comm = state->comm;
  result = std::move(communicator);
  return Status::success();
}

const std::string &NcclCommunicator::getName() const { return impl->name; }
int NcclCommunicator::getRank() const { return impl->rank; }
int NcclCommunicator::getSize() const { return impl->size; }
void *NcclCommunicator::getStream() const { return impl->stream; }

Status NcclCommunicator::synchronize(const std::string &what) {
  auto start = std::chrono::steady_clock::now();
  while (true) {
    cudaError_t query = cudaStreamQuery(impl->stream);
    if (query == cudaSuccess)
      return Status::success();
    if (query != cudaErrorNotReady)
      return impl->failCuda(what, query);
    ncclResult_t asyncError = ncclSuccess;
    ncclResult_t got = ncclCommGetAsyncError(impl->comm, &asyncError);
    if (got != ncclSuccess)
      return impl->fail(what, got);
    if (asyncError != ncclSuccess && asyncError != ncclInProgress) {
      impl->aborted = true;
      return impl->fail(what, asyncError);
    }
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > impl->timeoutSeconds) {
      impl->aborted = true;
      ncclCommAbort(impl->comm);
      impl->comm = nullptr;
      return {StatusCode::Timeout, rankPrefix(impl->job) + what + " over '" + impl->name +
                                       "' did not complete within " +
                                       std::to_string(static_cast<int>(impl->timeoutSeconds)) +
                                       "s (a peer rank may have died)"};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status NcclCommunicator::allReduceAsync(void *buffer, int64_t elements, ElementType type,
                                        void *waitFor) {
  PLACERT_TRY(impl->waitEvent(waitFor));
  ncclResult_t got = ncclAllReduce(buffer, buffer, static_cast<size_t>(elements), toNccl(type),
                                   ncclSum, impl->comm, impl->stream);
  return got == ncclSuccess ? Status::success() : impl->fail("all-reduce", got);
}

Status NcclCommunicator::reduceScatterAsync(const void *input, void *output, int64_t inputElements,
                                            ElementType type, void *waitFor) {
  if (inputElements % impl->size != 0)
    return {StatusCode::InvalidArgument, rankPrefix(impl->job) + "reduce-scatter over '" +
                                             impl->name + "': " + std::to_string(inputElements) +
                                             " elements do not split over " +
                                             std::to_string(impl->size) + " ranks"};
  PLACERT_TRY(impl->waitEvent(waitFor));
  ncclResult_t got =
      ncclReduceScatter(input, output, static_cast<size_t>(inputElements / impl->size),
                        toNccl(type), ncclSum, impl->comm, impl->stream);
  return got == ncclSuccess ? Status::success() : impl->fail("reduce-scatter", got);
}

Status NcclCommunicator::allGatherAsync(const void *input, void *output, int64_t outputElements,
                                        ElementType type, void *waitFor) {
  if (outputElements % impl->size != 0)
    return {StatusCode::InvalidArgument, rankPrefix(impl->job) + "all-gather over '" + impl->name +
                                             "': " + std::to_string(outputElements) +
                                             " elements do not split over " +
                                             std::to_string(impl->size) + " ranks"};
  PLACERT_TRY(impl->waitEvent(waitFor));
  ncclResult_t got = ncclAllGather(input, output, static_cast<size_t>(outputElements / impl->size),
                                   toNccl(type), impl->comm, impl->stream);
  return got == ncclSuccess ? Status::success() : impl->fail("all-gather", got);
}

Status NcclCommunicator::allReduce(float *buffer, int64_t elements) {
  PLACERT_TRY(allReduceAsync(buffer, elements, ElementType::Float32, nullptr));
  return synchronize("all-reduce");
}

Status NcclCommunicator::reduceScatter(const float *input, float *output, int64_t inputElements) {
  PLACERT_TRY(reduceScatterAsync(input, output, inputElements, ElementType::Float32, nullptr));
  return synchronize("reduce-scatter");
}

Status NcclCommunicator::allGather(const float *input, float *output, int64_t outputElements) {
  PLACERT_TRY(allGatherAsync(input, output, outputElements, ElementType::Float32, nullptr));
  return synchronize("all-gather");
}

Status NcclCommunicator::broadcast(float *buffer, int64_t elements, int root) {
  ncclResult_t got = ncclBroadcast(buffer, buffer, static_cast<size_t>(elements), ncclFloat32, root,
                                   impl->comm, impl->stream);
  if (got != ncclSuccess)
    return impl->fail("broadcast", got);
  return synchronize("broadcast");
}

Status NcclCommunicator::allToAll(const float *input, float *output, int64_t elements) {
  if (elements % impl->size != 0 || input == output)
    return {StatusCode::InvalidArgument,
            rankPrefix(impl->job) + "all-to-all over '" + impl->name +
                "': " + std::to_string(elements) + " elements over " + std::to_string(impl->size) +
                " ranks need equal chunks and distinct input and output buffers"};
  size_t chunk = static_cast<size_t>(elements / impl->size);
  // Grouped point-to-point calls: NCCL has no all-to-all collective of its own.
  ncclResult_t got = ncclGroupStart();
  for (int peer = 0; peer < impl->size && got == ncclSuccess; ++peer) {
    got = ncclSend(input + peer * chunk, chunk, ncclFloat32, peer, impl->comm, impl->stream);
    if (got == ncclSuccess)
      got = ncclRecv(output + peer * chunk, chunk, ncclFloat32, peer, impl->comm, impl->stream);
  }
  ncclResult_t ended = ncclGroupEnd();
  if (got != ncclSuccess || ended != ncclSuccess)
    return impl->fail("all-to-all", got != ncclSuccess ? got : ended);
  return synchronize("all-to-all");
}

Status NcclCommunicator::allToAllv(const float *input, const std::vector<int64_t> &sendCounts,
                                   float *output, const std::vector<int64_t> &recvCounts) {
  if (static_cast<int>(sendCounts.size()) != impl->size ||
      static_cast<int>(recvCounts.size()) != impl->size || input == output)
    return {StatusCode::InvalidArgument,
            rankPrefix(impl->job) + "all-to-all over '" + impl->name +
                "' needs one send and one receive count per rank and distinct buffers"};
  // Grouped point-to-point calls of each peer's count, as allToAll.
  size_t sendOffset = 0, recvOffset = 0;
  ncclResult_t got = ncclGroupStart();
  for (int peer = 0; peer < impl->size && got == ncclSuccess; ++peer) {
    size_t sendCount = static_cast<size_t>(sendCounts[peer]);
    size_t recvCount = static_cast<size_t>(recvCounts[peer]);
    if (sendCount > 0)
      got = ncclSend(input + sendOffset, sendCount, ncclFloat32, peer, impl->comm, impl->stream);
    if (got == ncclSuccess && recvCount > 0)
      got = ncclRecv(output + recvOffset, recvCount, ncclFloat32, peer, impl->comm, impl->stream);
    sendOffset += sendCount;
    recvOffset += recvCount;
  }
  ncclResult_t ended = ncclGroupEnd();
  if (got != ncclSuccess || ended != ncclSuccess)
    return impl->fail("all-to-all", got != ncclSuccess ? got : ended);
  return synchronize("all-to-all");
}

Status NcclCommunicator::ringStep(const float *input, float *output, int64_t elements) {
  size_t count = static_cast<size_t>(elements);
  // In place, the block to send is copied first: the receive overwrites the buffer.
  float *copy = nullptr;
  if (input == output) {
    cudaError_t error = cudaMalloc(&copy, count * sizeof(float));
    if (error == cudaSuccess)
      error = cudaMemcpyAsync(copy, input, count * sizeof(float), cudaMemcpyDeviceToDevice,
                              impl->stream);
    if (error != cudaSuccess) {
      cudaFree(copy);
      return impl->failCuda("ring-step", error);
    }
    input = copy;
  }
  int next = (impl->rank + 1) % impl->size, previous = (impl->rank + impl->size - 1) % impl->size;
  ncclResult_t got = ncclGroupStart();
  if (got == ncclSuccess)
    got = ncclSend(input, count, ncclFloat32, next, impl->comm, impl->stream);
  if (got == ncclSuccess)
    got = ncclRecv(output, count, ncclFloat32, previous, impl->comm, impl->stream);
  ncclResult_t ended = ncclGroupEnd();
  Status status = got != ncclSuccess || ended != ncclSuccess
                      ? impl->fail("ring-step", got != ncclSuccess ? got : ended)
                      : synchronize("ring-step");
  if (copy)
    cudaFree(copy);
  return status;
}

Status NcclCommunicator::send(const float *buffer, int64_t elements, int peer, int /*tag*/) {
  // NCCL orders point-to-point calls per peer and stream, so the tag is not needed.
  ncclResult_t got =
      ncclSend(buffer, static_cast<size_t>(elements), ncclFloat32, peer, impl->comm, impl->stream);
  return got == ncclSuccess ? Status::success() : impl->fail("send", got);
}

Status NcclCommunicator::recv(float *buffer, int64_t elements, int peer, int /*tag*/) {
  ncclResult_t got =
      ncclRecv(buffer, static_cast<size_t>(elements), ncclFloat32, peer, impl->comm, impl->stream);
  if (got != ncclSuccess)
    return impl->fail("recv", got);
  return synchronize("recv");
}

Status NcclCommunicator::waitSends() { return synchronize("send"); }

} // namespace cuda
} // namespace placert
