// Communicators over MPI: one MPI communicator per axis group, every call with MPI_ERRORS_RETURN
// so that a failure becomes a Status naming the rank, the collective and the group.
#include "MpiCommunicator.h"

#define OMPI_SKIP_MPICXX 1
#include <climits>
#include <mpi.h>

namespace placert {

namespace {

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

Status failure(int rank, const char *what, const std::string &group, int code) {
  return Status(StatusCode::Communication, "rank " + std::to_string(rank) + ": " + what +
                                               " over '" + group + "' failed: " + mpiError(code));
}

Status tooLarge(int rank, const char *what, const std::string &group) {
  return Status(StatusCode::InvalidArgument, "rank " + std::to_string(rank) + ": " + what +
                                                 " over '" + group +
                                                 "': buffer over INT_MAX elements");
}

class MpiCommunicator : public Communicator {
public:
  /// The tag of ring steps (under the 32767 every MPI allows); pipeline messages run over their
  /// own (layers) communicator.
  static constexpr int kRingTag = 4242;

  MpiCommunicator(std::string name, MPI_Comm comm, int worldRank)
      : name(std::move(name)), comm(comm), worldRank(worldRank) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  ~MpiCommunicator() override {
    waitSends();
    MPI_Comm_free(&comm);
  }

  const std::string &getName() const override { return name; }
  int getRank() const override { return rank; }
  int getSize() const override { return size; }

  Status allReduce(float *buffer, int64_t elements) override {
    if (elements > INT_MAX)
      return tooLarge(worldRank, "all-reduce", name);
    int code =
        MPI_Allreduce(MPI_IN_PLACE, buffer, static_cast<int>(elements), MPI_FLOAT, MPI_SUM, comm);
    return code == MPI_SUCCESS ? Status::success() : failure(worldRank, "all-reduce", name, code);
  }

  Status reduceScatter(const float *input, float *output, int64_t inputElements) override {
    if (inputElements % size != 0)
      return Status(StatusCode::InvalidArgument,
                    "rank " + std::to_string(worldRank) + ": reduce-scatter over '" + name +
                        "': " + std::to_string(inputElements) + " elements do not divide among " +
                        std::to_string(size) + " ranks");
    if (inputElements / size > INT_MAX)
      return tooLarge(worldRank, "reduce-scatter", name);
    int code = MPI_Reduce_scatter_block(input, output, static_cast<int>(inputElements / size),
                                        MPI_FLOAT, MPI_SUM, comm);
    return code == MPI_SUCCESS ? Status::success()
                               : failure(worldRank, "reduce-scatter", name, code);
  }

  Status allGather(const float *input, float *output, int64_t outputElements) override {
    if (outputElements % size != 0)
      return Status(StatusCode::InvalidArgument,
                    "rank " + std::to_string(worldRank) + ": all-gather over '" + name +
                        "': " + std::to_string(outputElements) + " elements do not divide among " +
                        std::to_string(size) + " ranks");
    int64_t chunk = outputElements / size;
    if (chunk > INT_MAX)
      return tooLarge(worldRank, "all-gather", name);
    const void *send = input == output + rank * chunk ? MPI_IN_PLACE : input;
    int code = MPI_Allgather(send, static_cast<int>(chunk), MPI_FLOAT, output,
                             static_cast<int>(chunk), MPI_FLOAT, comm);
    return code == MPI_SUCCESS ? Status::success() : failure(worldRank, "all-gather", name, code);
  }

  Status broadcast(float *buffer, int64_t elements, int root) override {
    if (elements > INT_MAX)
      return tooLarge(worldRank, "broadcast", name);
    int code = MPI_Bcast(buffer, static_cast<int>(elements), MPI_FLOAT, root, comm);
    return code == MPI_SUCCESS ? Status::success() : failure(worldRank, "broadcast", name, code);
  }

  Status allToAll(const float *input, float *output, int64_t elements) override {
    if (elements % size != 0)
      return Status(StatusCode::InvalidArgument,
                    "rank " + std::to_string(worldRank) + ": all-to-all over '" + name +
                        "': " + std::to_string(elements) + " elements do not divide among " +
                        std::to_string(size) + " ranks");
    if (input == output)
      return Status(StatusCode::InvalidArgument, "rank " + std::to_string(worldRank) +
                                                     ": all-to-all over '" + name +
                                                     "' needs distinct input and output buffers");
    if (elements / size > INT_MAX)
      return tooLarge(worldRank, "all-to-all", name);
    int chunk = static_cast<int>(elements / size);
    int code = MPI_Alltoall(input, chunk, MPI_FLOAT, output, chunk, MPI_FLOAT, comm);
    return code == MPI_SUCCESS ? Status::success() : failure(worldRank, "all-to-all", name, code);
  }

  Status allToAllv(const float *input, const std::vector<int64_t> &sendCounts, float *output,
                   const std::vector<int64_t> &recvCounts) override {
    if (static_cast<int>(sendCounts.size()) != size || static_cast<int>(recvCounts.size()) != size)
      return Status(StatusCode::InvalidArgument,
                    "rank " + std::to_string(worldRank) + ": all-to-all over '" + name +
                        "' needs one send and one receive count per rank of the group");
    if (input == output)
      return Status(StatusCode::InvalidArgument, "rank " + std::to_string(worldRank) +
                                                     ": all-to-all over '" + name +
                                                     "' needs distinct input and output buffers");
    std::vector<int> sendInts(size), recvInts(size), sendOffsets(size), recvOffsets(size);
    int64_t sendTotal = 0, recvTotal = 0;
    for (int k = 0; k < size; ++k) {
      if (sendTotal + sendCounts[k] > INT_MAX || recvTotal + recvCounts[k] > INT_MAX)
        return tooLarge(worldRank, "all-to-all", name);
      sendInts[k] = static_cast<int>(sendCounts[k]);
      recvInts[k] = static_cast<int>(recvCounts[k]);
      sendOffsets[k] = static_cast<int>(sendTotal);
      recvOffsets[k] = static_cast<int>(recvTotal);
      sendTotal += sendCounts[k];
      recvTotal += recvCounts[k];
    }
    int code = MPI_Alltoallv(input, sendInts.data(), sendOffsets.data(), MPI_FLOAT, output,
                             recvInts.data(), recvOffsets.data(), MPI_FLOAT, comm);
    return code == MPI_SUCCESS ? Status::success() : failure(worldRank, "all-to-all", name, code);
  }

  Status ringStep(const float *input, float *output, int64_t elements) override {
    if (elements > INT_MAX)
      return tooLarge(worldRank, "ring-step", name);
    // One combined send and receive: every rank sends and receives at once, so the ring cannot
    // deadlock whatever the message size.
    int next = (rank + 1) % size, previous = (rank + size - 1) % size;
    int count = static_cast<int>(elements), code;
    if (input == output)
      code = MPI_Sendrecv_replace(output, count, MPI_FLOAT, next, kRingTag, previous, kRingTag,
                                  comm, MPI_STATUS_IGNORE);
    else
      code = MPI_Sendrecv(input, count, MPI_FLOAT, next, kRingTag, output, count, MPI_FLOAT,
                          previous, kRingTag, comm, MPI_STATUS_IGNORE);
    return code == MPI_SUCCESS ? Status::success() : failure(worldRank, "ring-step", name, code);
  }

  Status send(const float *buffer, int64_t elements, int peer, int tag) override {
    if (elements > INT_MAX)
      return tooLarge(worldRank, "send", name);
    MPI_Request request;
    int code = MPI_Isend(buffer, static_cast<int>(elements), MPI_FLOAT, peer, tag, comm, &request);
    if (code != MPI_SUCCESS)
      return failure(worldRank, "send", name, code);
    pending.push_back(request);
    return Status::success();
  }

  Status recv(float *buffer, int64_t elements, int peer, int tag) override {
    if (elements > INT_MAX)
      return tooLarge(worldRank, "recv", name);
    int code =
        MPI_Recv(buffer, static_cast<int>(elements), MPI_FLOAT, peer, tag, comm, MPI_STATUS_IGNORE);
    return code == MPI_SUCCESS ? Status::success() : failure(worldRank, "recv", name, code);
  }

  Status waitSends() override {
    if (pending.empty())
      return Status::success();
    int code = MPI_Waitall(static_cast<int>(pending.size()), pending.data(), MPI_STATUSES_IGNORE);
    pending.clear();
    return code == MPI_SUCCESS ? Status::success() : failure(worldRank, "send", name, code);
  }

private:
  std::string name;
  MPI_Comm comm;
  int worldRank;
  int rank = 0, size = 1;
  std::vector<MPI_Request> pending;
};

} // namespace

Status initializeMpi(int *argc, char ***argv, bool &owns, int &rank, int &worldSize) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  owns = !initialized;
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return Status(StatusCode::Communication, "MPI_Init failed");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  return Status::success();
}

void finalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

void abortMpi(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

Status createMpiCommunicator(const std::string &name, int color, int key, int worldRank,
                             std::unique_ptr<Communicator> &result) {
  MPI_Comm comm;
  int code = MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);
  if (code != MPI_SUCCESS)
    return failure(worldRank, "communicator split", name, code);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  result = std::make_unique<MpiCommunicator>(name, comm, worldRank);
  return Status::success();
}

Status worldSumDoubles(double *values, int count, int rank) {
  int code = MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return code == MPI_SUCCESS ? Status::success() : failure(rank, "all-reduce", "world", code);
}

Status worldReduceFloats(float *values, int64_t count, int root, int rank) {
  if (count > INT_MAX)
    return tooLarge(rank, "reduce", "world");
  int code = MPI_Reduce(rank == root ? MPI_IN_PLACE : values, values, static_cast<int>(count),
                        MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
  return code == MPI_SUCCESS ? Status::success() : failure(rank, "reduce", "world", code);
}

Status worldGatherStrings(const std::string &mine, std::vector<std::string> &all, int rank) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  int code = MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (code != MPI_SUCCESS)
    return failure(rank, "gather", "world", code);
  int total = 0;
  for (int i = 0; i < size; ++i) {
    offsets[i] = total;
    total += lengths[i];
  }
  std::string joined(rank == 0 ? static_cast<size_t>(total) : 0, '\0');
  code = MPI_Gatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(), offsets.data(),
                     MPI_CHAR, 0, MPI_COMM_WORLD);
  if (code != MPI_SUCCESS)
    return failure(rank, "gather", "world", code);
  all.clear();
  if (rank == 0)
    for (int i = 0; i < size; ++i)
      all.push_back(
          joined.substr(static_cast<size_t>(offsets[i]), static_cast<size_t>(lengths[i])));
  return Status::success();
}

int worldBroadcast(int value) {
  MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return value;
}

} // namespace placert
