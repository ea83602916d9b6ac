// The runtime's process-wide pieces: names of the plan vocabulary, options, memory accounting,
// the mesh of MPI communicators with its byte counters, and the watchdog that ends a job whose
// collective does not complete (a peer rank may have died).
#include "MpiCommunicator.h"
#include "placert/placert.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace placert {

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

static const char *const kUsage =
    "options:\n"
    "  --steps N              training steps (default 3)\n"
    "  --seed S               seed of the initial parameters and the data (default 1)\n"
    "  --check                compare with a single-device run on rank 0 (relative error 1e-5)\n"
    "  --metrics FILE         write bytes per collective, peak state memory, losses and step\n"
    "                         times as JSON\n"
    "  --timeout SECONDS      deadline of one collective or receive (default 60)\n"
    "  --save DIR             save sharded checkpoints into DIR (after the last step)\n"
    "  --save-every N         ... and after every N steps\n"
    "  --resume DIR           continue from a checkpoint (DIR/latest when DIR holds several);\n"
    "                         --steps counts from the start of training\n"
    "  --quiet                print nothing but errors\n"
    "fault injection, for tests:\n"
    "  --skip-grad-reduction  skip every gradient reduction (breaks gradient integrity)\n"
    "  --die-at-step K --die-rank R   rank R exits in the middle of step K\n"
    "  --die-in-save K --die-rank R   rank R exits while writing the checkpoint of step K\n";

Status parseOptions(int argc, char **argv, Options &options, bool &help) {
  help = false;
  auto bad = [](const std::string &what) {
    return Status(StatusCode::InvalidArgument, what + "\n" + kUsage);
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *name, std::string &out) {
      if (i + 1 >= argc)
        return false;
      (void)name;
      out = argv[++i];
      return true;
    };
    auto number = [&](const char *name, double &out) -> Status {
      std::string text;
      if (!value(name, text))
        return bad(std::string("option ") + name + " needs a value");
      char *end = nullptr;
      out = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0')
        return bad(std::string("option ") + name + ": '" + text + "' is not a number");
      return Status::success();
    };
    double number_ = 0;
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", kUsage);
      help = true;
      return Status::success();
    } else if (arg == "--steps") {
      PLACERT_TRY(number("--steps", number_));
      if (number_ < 1)
        return bad("--steps must be at least 1");
      options.steps = static_cast<int>(number_);
    } else if (arg == "--seed") {
      PLACERT_TRY(number("--seed", number_));
      options.seed = static_cast<uint64_t>(number_);
    } else if (arg == "--check") {
      options.check = true;
    } else if (arg == "--metrics") {
      if (!value("--metrics", options.metricsPath))
        return bad("option --metrics needs a file");
    } else if (arg == "--timeout") {
      PLACERT_TRY(number("--timeout", number_));
      if (number_ <= 0)
        return bad("--timeout must be positive");
      options.timeoutSeconds = number_;
    } else if (arg == "--quiet") {
      options.quiet = true;
    } else if (arg == "--skip-grad-reduction") {
      options.skipGradReduction = true;
    } else if (arg == "--die-at-step") {
      PLACERT_TRY(number("--die-at-step", number_));
      options.dieAtStep = static_cast<int>(number_);
    } else if (arg == "--save") {
      if (!value("--save", options.savePath))
        return bad("option --save needs a directory");
    } else if (arg == "--save-every") {
      PLACERT_TRY(number("--save-every", number_));
      if (number_ < 1)
        return bad("--save-every must be at least 1");
      options.saveEvery = static_cast<int>(number_);
    } else if (arg == "--resume") {
      if (!value("--resume", options.resumePath))
        return bad("option --resume needs a directory");
    } else if (arg == "--die-in-save") {
      PLACERT_TRY(number("--die-in-save", number_));
      options.dieInSave = static_cast<int>(number_);
    } else if (arg == "--die-rank") {
      PLACERT_TRY(number("--die-rank", number_));
      options.dieRank = static_cast<int>(number_);
    } else {
      return bad("unknown option '" + arg + "'");
    }
  }
  if (options.saveEvery > 0 && options.savePath.empty())
    return bad("--save-every needs --save DIR");
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

unsigned MemoryTracker::index(Tier tier, State state, bool persistent) {
  return (tier == Tier::Host ? 8u : 0u) + (persistent ? 4u : 0u) + static_cast<unsigned>(state);
}

void MemoryTracker::add(Tier tier, State state, bool persistent, int64_t bytes) {
  unsigned i = index(tier, state, persistent);
  current[i] += bytes;
  peak[i] = std::max(peak[i], current[i]);
}

void MemoryTracker::remove(Tier tier, State state, bool persistent, int64_t bytes) {
  current[index(tier, state, persistent)] -= bytes;
}

int64_t MemoryTracker::getCurrent(Tier tier, State state, bool persistent) const {
  return current[index(tier, state, persistent)];
}

int64_t MemoryTracker::getPeak(Tier tier, State state, bool persistent) const {
  return peak[index(tier, state, persistent)];
}

Buffer::Buffer(MemoryTracker *tracker, Tier tier, State state, bool persistent, int64_t elements,
               int64_t bytes)
    : data(static_cast<size_t>(elements), 0.0f), tracker(tracker), tier(tier), state(state),
      persistent(persistent), bytes(bytes) {
  if (tracker)
    tracker->add(tier, state, persistent, bytes);
}

Buffer::Buffer(Buffer &&other) noexcept { *this = std::move(other); }

Buffer &Buffer::operator=(Buffer &&other) noexcept {
  if (this != &other) {
    release();
    data = std::move(other.data);
    tracker = other.tracker;
    tier = other.tier;
    state = other.state;
    persistent = other.persistent;
    bytes = other.bytes;
    other.tracker = nullptr;
    other.data.clear();
  }
  return *this;
}

void Buffer::release() {
  if (tracker)
    tracker->remove(tier, state, persistent, bytes);
  tracker = nullptr;
  data.clear();
  data.shrink_to_fit();
}

//===----------------------------------------------------------------------===//
// Watchdog
//===----------------------------------------------------------------------===//

/// A thread that ends the job when an armed call passes its deadline. MPI gives no timeout on a
/// blocking collective whose peer died; OpenMPI ends the job when a rank exits non-zero, and
/// this covers the cases it does not (a peer that hangs, or is stopped).
class Watchdog {
public:
  Watchdog(int rank, double seconds) : rank(rank), seconds(seconds) {
    thread = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    thread.join();
  }
  void arm(std::string what) {
    std::lock_guard<std::mutex> lock(mutex);
    description = std::move(what);
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(seconds));
    armed = true;
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex);
    armed = false;
  }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::milliseconds(100));
      if (armed && std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr,
                     "placert: rank %d: %s did not complete within %gs (a peer rank may have "
                     "died)\n",
                     rank, description.c_str(), seconds);
        std::fflush(stderr);
        // Exiting without MPI_Finalize makes mpirun end every rank of the job.
        std::_Exit(3);
      }
    }
  }

  int rank;
  double seconds;
  std::mutex mutex;
  std::condition_variable wake;
  std::thread thread;
  std::string description;
  std::chrono::steady_clock::time_point deadline;
  bool armed = false;
  bool stopping = false;
};

/// Arms the watchdog for the lifetime of one call.
class Armed {
public:
  Armed(Watchdog &watchdog, std::string what) : watchdog(watchdog) {
    watchdog.arm(std::move(what));
  }
  ~Armed() { watchdog.disarm(); }

private:
  Watchdog &watchdog;
};

//===----------------------------------------------------------------------===//
// Runtime
//===----------------------------------------------------------------------===//

struct Runtime::Impl {
  Options options;
  std::vector<Axis> mesh;
  std::vector<int> coordinates;
  int rank = 0, worldSize = 1;
  std::map<std::string, std::unique_ptr<Communicator>> groups;
  std::map<CommKey, CommCount> counters;
  MemoryTracker memory;
  std::unique_ptr<Watchdog> watchdog;
  bool ownsMpi = false;
  bool sealed = false; ///< No more groups: creating one is collective over every rank.

  int axisIndex(const std::string &name) const {
    for (size_t i = 0; i < mesh.size(); ++i)
      if (mesh[i].name == name)
        return static_cast<int>(i);
    return -1;
  }
  void count(const CommKey &key, int64_t bytes) {
    CommCount &entry = counters[key];
    ++entry.count;
    entry.bytes += bytes;
  }
  std::string describe(Collective collective, const std::string &group) const {
    return std::string(toString(collective)) + " over '" + group + "'";
  }
};

Runtime::Runtime() : impl(std::make_unique<Impl>()) {}

Runtime::~Runtime() {
  impl->watchdog.reset();
  impl->groups.clear();
  if (impl->ownsMpi)
    finalizeMpi();
}

Status Runtime::create(int *argc, char ***argv, std::vector<Axis> mesh, const Options &options,
                       std::unique_ptr<Runtime> &result) {
  std::unique_ptr<Runtime> runtime(new Runtime());
  Impl &impl = *runtime->impl;
  impl.options = options;
  impl.mesh = std::move(mesh);
  PLACERT_TRY(initializeMpi(argc, argv, impl.ownsMpi, impl.rank, impl.worldSize));
  int64_t devices = 1;
  for (const Axis &axis : impl.mesh) {
    if (axis.size < 1)
      return Status(StatusCode::InvalidArgument, "axis '" + axis.name + "' has size < 1");
    devices *= axis.size;
  }
  if (devices != impl.worldSize)
    return Status(StatusCode::InvalidArgument,
                  "rank " + std::to_string(impl.rank) + ": the mesh has " +
                      std::to_string(devices) + " devices but the job has " +
                      std::to_string(impl.worldSize) + " ranks (run it with mpirun -np " +
                      std::to_string(devices) + ")");
  // Row-major coordinates, outermost axis first.
  impl.coordinates.assign(impl.mesh.size(), 0);
  int rest = impl.rank;
  for (size_t i = impl.mesh.size(); i-- > 0;) {
    impl.coordinates[i] = rest % impl.mesh[i].size;
    rest /= impl.mesh[i].size;
  }
  impl.watchdog = std::make_unique<Watchdog>(impl.rank, options.timeoutSeconds);
  result = std::move(runtime);
  return Status::success();
}

int Runtime::getRank() const { return impl->rank; }
int Runtime::getWorldSize() const { return impl->worldSize; }
const Options &Runtime::getOptions() const { return impl->options; }
const std::vector<Axis> &Runtime::getMesh() const { return impl->mesh; }

int Runtime::getCoordinate(const std::string &axis) const {
  int i = impl->axisIndex(axis);
  return i < 0 ? 0 : impl->coordinates[i];
}

int Runtime::getAxisSize(const std::string &axis) const {
  int i = impl->axisIndex(axis);
  return i < 0 ? 1 : impl->mesh[i].size;
}

int Runtime::getGroupSize(const AxisGroup &axes) const {
  int size = 1;
  for (const std::string &axis : axes)
    size *= getAxisSize(axis);
  return size;
}

int Runtime::getGroupIndex(const AxisGroup &axes) const {
  int index = 0;
  for (const std::string &axis : axes)
    index = index * getAxisSize(axis) + getCoordinate(axis);
  return index;
}

Status Runtime::getGroup(const AxisGroup &axes, Communicator *&group) {
  std::string name;
  for (const std::string &axis : axes)
    name += (name.empty() ? "" : ",") + axis;
  auto it = impl->groups.find(name);
  if (it != impl->groups.end()) {
    group = it->second.get();
    return Status::success();
  }
  if (impl->sealed)
    return Status(StatusCode::InvalidArgument, "rank " + std::to_string(impl->rank) +
                                                   ": no communicator over '" + name +
                                                   "' was created at setup");
  PLACERT_TRY(createGroup(axes));
  group = impl->groups[name].get();
  return Status::success();
}

void Runtime::sealGroups() { impl->sealed = true; }

Status Runtime::createGroup(const AxisGroup &axes) {
  std::string name;
  for (const std::string &axis : axes) {
    if (impl->axisIndex(axis) < 0)
      return Status(StatusCode::InvalidArgument,
                    "rank " + std::to_string(impl->rank) + ": no mesh axis named '" + axis + "'");
    name += (name.empty() ? "" : ",") + axis;
  }
  if (impl->groups.count(name))
    return Status::success();
  // Color: the coordinates on every other axis; key: the row-major index over the group's axes
  // in the given order.
  int color = 0;
  for (size_t i = 0; i < impl->mesh.size(); ++i) {
    bool inGroup = false;
    for (const std::string &axis : axes)
      inGroup |= axis == impl->mesh[i].name;
    color = color * impl->mesh[i].size + (inGroup ? 0 : impl->coordinates[i]);
  }
  std::unique_ptr<Communicator> created;
  PLACERT_TRY(createMpiCommunicator(name, color, getGroupIndex(axes), impl->rank, created));
  impl->groups.emplace(name, std::move(created));
  return Status::success();
}

Status Runtime::allReduce(Communicator &group, const std::string &label, float *buffer,
                          int64_t elements, const CallInfo &info) {
  impl->count({info.stage, label, Collective::AllReduce, info.state, info.phase},
              elements * getSize(info.dtype));
  Armed armed(*impl->watchdog, impl->describe(Collective::AllReduce, label));
  return group.allReduce(buffer, elements);
}

Status Runtime::reduceScatter(Communicator &group, const std::string &label, const float *input,
                              float *output, int64_t inputElements, const CallInfo &info) {
  impl->count({info.stage, label, Collective::ReduceScatter, info.state, info.phase},
              inputElements * getSize(info.dtype));
  Armed armed(*impl->watchdog, impl->describe(Collective::ReduceScatter, label));
  return group.reduceScatter(input, output, inputElements);
}

Status Runtime::allGather(Communicator &group, const std::string &label, const float *input,
                          float *output, int64_t outputElements, const CallInfo &info) {
  impl->count({info.stage, label, Collective::AllGather, info.state, info.phase},
              outputElements * getSize(info.dtype));
  Armed armed(*impl->watchdog, impl->describe(Collective::AllGather, label));
  return group.allGather(input, output, outputElements);
}

Status Runtime::allToAll(Communicator &group, const std::string &label, const float *input,
                         float *output, int64_t elements, const CallInfo &info) {
  impl->count({info.stage, label, Collective::AllToAll, info.state, info.phase},
              elements * getSize(info.dtype));
  Armed armed(*impl->watchdog, impl->describe(Collective::AllToAll, label));
  return group.allToAll(input, output, elements);
}

Status Runtime::ringStep(Communicator &group, const std::string &label, const float *input,
                         float *output, int64_t elements, const CallInfo &info) {
  impl->count({info.stage, label, Collective::RingStep, info.state, info.phase},
              elements * getSize(info.dtype));
  Armed armed(*impl->watchdog, impl->describe(Collective::RingStep, label));
  return group.ringStep(input, output, elements);
}

Status Runtime::allToAllv(Communicator &group, const std::string &label, const float *input,
                          const std::vector<int64_t> &sendCounts, float *output,
                          const std::vector<int64_t> &recvCounts, const CallInfo &info) {
  int64_t sent = 0;
  for (int64_t count : sendCounts)
    sent += count;
  impl->count({info.stage, label, Collective::AllToAll, info.state, info.phase},
              sent * getSize(info.dtype));
  Armed armed(*impl->watchdog, impl->describe(Collective::AllToAll, label));
  return group.allToAllv(input, sendCounts, output, recvCounts);
}

Status Runtime::send(Communicator &group, const std::string &label, const float *buffer,
                     int64_t elements, int peer, int tag, const CallInfo &info) {
  impl->count({info.stage, label, Collective::Send, info.state, info.phase},
              elements * getSize(info.dtype));
  return group.send(buffer, elements, peer, tag);
}

Status Runtime::recv(Communicator &group, float *buffer, int64_t elements, int peer, int tag) {
  Armed armed(*impl->watchdog, impl->describe(Collective::Recv, group.getName()));
  return group.recv(buffer, elements, peer, tag);
}

Status Runtime::pairAllReduce(Communicator &group, const std::string &label, float *buffer,
                              int64_t elements, int peer, int tag, const CallInfo &info) {
  impl->count({info.stage, label, Collective::AllReduce, info.state, info.phase},
              elements * getSize(info.dtype));
  Armed armed(*impl->watchdog, impl->describe(Collective::AllReduce, label));
  // The buffer is sent as it is and summed into only after the send completed.
  std::vector<float> theirs(static_cast<size_t>(elements));
  PLACERT_TRY(group.send(buffer, elements, peer, tag));
  PLACERT_TRY(group.recv(theirs.data(), elements, peer, tag));
  PLACERT_TRY(group.waitSends());
  for (int64_t i = 0; i < elements; ++i)
    buffer[i] += theirs[static_cast<size_t>(i)];
  return Status::success();
}

void Runtime::countTransfer(Collective collective, int64_t elements, const CallInfo &info) {
  impl->count({info.stage, "host", collective, info.state, info.phase},
              elements * getSize(info.dtype));
}

const std::map<CommKey, CommCount> &Runtime::getCounters() const { return impl->counters; }
MemoryTracker &Runtime::getMemory() { return impl->memory; }

Status Runtime::worldSum(double *values, int count) {
  Armed armed(*impl->watchdog, "all-reduce over the world (metrics)");
  return worldSumDoubles(values, count, impl->rank);
}

Status Runtime::worldSumFloats(float *values, int64_t count, int root) {
  Armed armed(*impl->watchdog, "reduce over the world (check)");
  return worldReduceFloats(values, count, root, impl->rank);
}

Status Runtime::gatherStrings(const std::string &mine, std::vector<std::string> &all) {
  Armed armed(*impl->watchdog, "gather over the world (metrics)");
  return worldGatherStrings(mine, all, impl->rank);
}

int Runtime::worldBroadcastInt(int value) {
  Armed armed(*impl->watchdog, "broadcast over the world (check)");
  return worldBroadcast(value);
}

Status Runtime::guarded(const std::string &what, const std::function<Status()> &call) {
  Armed armed(*impl->watchdog, what);
  return call();
}

void Runtime::abort(const Status &status) {
  std::fprintf(stderr, "placert: rank %d: error: %s\n", impl->rank, status.getMessage().c_str());
  std::fflush(stderr);
  abortMpi(1);
  std::_Exit(1);
}

} // namespace placert
