// The mlp trainer: the layout of each unit's states over the mesh, the ops of a StepPlan as
// methods, the pipeline schedule, and the end-of-run check against a single device and metrics.
#include "Checkpoint.h"
#include "Kernels.h"
#include "MlpReference.h"
#include "placert/placert.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace placert {

namespace {

enum class Split { Column, Row, Replicated };

std::string join(const AxisGroup &axes) {
  std::string result;
  for (const std::string &axis : axes)
    result += (result.empty() ? "" : ",") + axis;
  return result;
}

bool sameSet(const AxisGroup &a, const AxisGroup &b) {
  return std::set<std::string>(a.begin(), a.end()) == std::set<std::string>(b.begin(), b.end());
}

bool contains(const AxisGroup &axes, const std::string &axis) {
  return std::find(axes.begin(), axes.end(), axis) != axes.end();
}

AxisGroup difference(const AxisGroup &all, const AxisGroup &remove) {
  AxisGroup result;
  for (const std::string &axis : all)
    if (!contains(remove, axis))
      result.push_back(axis);
  return result;
}

/// One micro-batch's activations of a unit.
struct Stash {
  Buffer input;    ///< The layer's input after the activation function (or the data).
  Buffer received; ///< The pre-activation input received from the previous stage.
  Buffer output;   ///< The layer's output before the activation function.
  Buffer outputGrad;
  Buffer inputGrad; ///< The gradient of the pre-activation input, when no unit of this stage
                    ///< receives it (sent to the previous stage, or the model input).
};

struct UnitState {
  UnitSpec spec;
  bool local = false; ///< On this rank's stage.
  Split split = Split::Replicated;
  int64_t in = 0, out = 0;           ///< Full dimensions.
  int64_t localIn = 0, localOut = 0; ///< After the tensor-parallel split.
  int64_t rowOffset = 0, columnOffset = 0;
  int64_t weightElements = 0, biasElements = 0;
  int64_t owned = 0;       ///< Elements the optimizer updates on this rank.
  int64_t ownedOffset = 0; ///< Where they are in the stored parameter shard.
  Buffer params;           ///< Stored shard over P.
  Buffer gathered;         ///< The whole unit around a use (P not empty).
  Buffer grads;            ///< Accumulated gradients, shard over G.
  Buffer gradScratch;      ///< One micro-batch's full gradients.
  Buffer gradChunk;        ///< Reduce-scattered gradients on their way to the host.
  Buffer stepGrad;         ///< The owned piece after the step's reduce-scatter.
  Buffer hostGrad;         ///< The step's reduced gradients copied to the host optimizer.
  Buffer optimizerState;   ///< Accounting for the optimizer state (m, v, master copy).
  std::vector<float> m, v;
  std::vector<float> master; ///< The fp32 master copy of the owned elements; the stored params
                             ///< hold it rounded to the param dtype.
  Buffer update;             ///< The owned params, updated on the host, on their way to the device.
  std::vector<Stash> stash;
};

} // namespace

struct MlpTrainer::Impl {
  Runtime &runtime;
  MlpShape shape;
  TrainingSpec spec;
  StatePlacement placement;
  std::vector<UnitState> units;
  std::unique_ptr<Kernels> kernels = createCpuKernels();

  AxisGroup batchAxes, tensorAxes, stepScatter, stepReduce;
  std::string layersAxis;
  int stage = 0, stages = 1, tensorIndex = 0, tensorDegree = 1, batchIndex = 0, batchDegree = 1;
  int64_t step = 0;         ///< The current step, from 0.
  int64_t firstStep = 0;    ///< The first step this process runs (after a resume).
  int64_t dataPosition = 0; ///< The global sample index where the current step's batch starts.
  uint64_t seed = 0;        ///< Of the initial values and the data (a checkpoint's on resume).
  double stepLoss = 0;
  bool died = false;

  Impl(Runtime &runtime, MlpShape shape, TrainingSpec spec, StatePlacement placement)
      : runtime(runtime), shape(std::move(shape)), spec(std::move(spec)),
        placement(std::move(placement)) {}

  std::string prefix() const { return "rank " + std::to_string(runtime.getRank()) + ": "; }
  Status invalid(const std::string &message) const {
    return Status(StatusCode::InvalidArgument, prefix() + message);
  }
  Status mismatch(const UnitState &unit, const char *op, int64_t planned, int64_t actual) const {
    return invalid(std::string(op) + " of " + unit.spec.name + ": the plan moves " +
                   std::to_string(planned) + " elements but the runtime's layout has " +
                   std::to_string(actual));
  }
  Status unitOf(int index, UnitState *&unit) {
    if (index < 0 || index >= static_cast<int>(units.size()) || !units[index].local)
      return invalid("unit " + std::to_string(index) + " is not on stage " + std::to_string(stage));
    unit = &units[index];
    return Status::success();
  }
  CallInfo info(State state, Phase phase, DType dtype) const {
    return CallInfo{stage, state, phase, dtype};
  }
  Buffer transient(Tier tier, State state, int64_t elements, DType dtype) {
    return Buffer(&runtime.getMemory(), tier, state, false, elements, elements * getSize(dtype));
  }
  int64_t parameterBytes(int64_t elements) const { return elements * getSize(spec.paramType); }

  const float *weights(UnitState &unit) {
    return placement.paramShard.empty() ? unit.params.get() : unit.gathered.get();
  }
  /// The unit before `unit` on this stage, or null.
  UnitState *previousOnStage(UnitState &unit) {
    size_t index = static_cast<size_t>(&unit - units.data());
    if (index == 0 || !units[index - 1].local)
      return nullptr;
    return &units[index - 1];
  }
  UnitState *nextOnStage(UnitState &unit) {
    size_t index = static_cast<size_t>(&unit - units.data());
    if (index + 1 >= units.size() || !units[index + 1].local)
      return nullptr;
    return &units[index + 1];
  }
  /// The pre-activation input of a unit (layer > 0).
  Buffer &inputPre(UnitState &unit, int mb) {
    if (UnitState *previous = previousOnStage(unit))
      return previous->stash[mb].output;
    return unit.stash[mb].received;
  }
  Buffer &inputGrad(UnitState &unit, int mb) {
    if (UnitState *previous = previousOnStage(unit))
      return previous->stash[mb].outputGrad;
    return unit.stash[mb].inputGrad;
  }
  /// Fills `rows` samples of micro-batch `mb` (inputs, or targets when `targets`).
  void sampleData(int mb, bool targets, float *out) const {
    int64_t b = spec.microBatch;
    int64_t first = dataPosition + (mb * batchDegree + batchIndex) * b;
    int64_t width = targets ? shape.output : shape.input;
    for (int64_t r = 0; r < b; ++r)
      for (int64_t e = 0; e < width; ++e)
        out[r * width + e] = sampleValue(seed, first + r, targets, e);
  }

  Status setup();
  Status runStep(const StageProgram &program);
  Status gatherFullParams(std::vector<float> &full);
  // Checkpoints (the end of this file).
  Status checkpointContents(bool save, CheckpointContents &contents);
  Status save();
  Status resume();
  Status writeMetrics(const std::vector<double> &losses, const std::vector<double> &seconds,
                      double sum, double sumSquares, const CheckResult *check);
};

MlpTrainer::MlpTrainer(Runtime &runtime, MlpShape shape, TrainingSpec spec,
                       StatePlacement placement)
    : impl(std::make_unique<Impl>(runtime, std::move(shape), std::move(spec),
                                  std::move(placement))) {}

MlpTrainer::~MlpTrainer() = default;

void MlpTrainer::addUnit(UnitSpec unit) {
  UnitState state;
  state.spec = std::move(unit);
  impl->units.push_back(std::move(state));
}

int MlpTrainer::getStage() const { return impl->stage; }
int MlpTrainer::getNumStages() const { return impl->stages; }

Status MlpTrainer::Impl::setup() {
  seed = runtime.getOptions().seed;
  for (const Axis &axis : runtime.getMesh()) {
    if (axis.kind == AxisKind::Batch)
      batchAxes.push_back(axis.name);
    else if (axis.kind == AxisKind::Tensor)
      tensorAxes.push_back(axis.name);
    else
      layersAxis = axis.name;
  }
  stage = layersAxis.empty() ? 0 : runtime.getCoordinate(layersAxis);
  stages = layersAxis.empty() ? 1 : runtime.getAxisSize(layersAxis);
  tensorIndex = runtime.getGroupIndex(tensorAxes);
  tensorDegree = runtime.getGroupSize(tensorAxes);
  batchIndex = runtime.getGroupIndex(batchAxes);
  batchDegree = runtime.getGroupSize(batchAxes);
  const AxisGroup &P = placement.paramShard, &G = placement.gradShard,
                  &O = placement.optimizerShard;
  stepScatter = difference(O, G);
  stepReduce = difference(difference(batchAxes, G), stepScatter);

  // The nestings the layout supports (docs/runtime.md).
  for (const std::string &axis : G)
    if (!contains(O, axis))
      return invalid("grads sharded over '" + axis +
                     "' feed an optimizer replicated over it: unsupported layout");
  if (!P.empty() && !sameSet(P, G))
    return invalid("params sharded over '" + join(P) + "' with grads sharded over '" + join(G) +
                   "': the runtime supports params sharded like the grads, or not at all");
  if (placement.paramsTier != Tier::Device)
    return invalid("params @ host is not supported by the CPU runtime yet");
  if (spec.globalBatch != spec.microBatch * batchDegree * spec.microbatches)
    return invalid("global batch " + std::to_string(spec.globalBatch) + " is not micro-batch " +
                   std::to_string(spec.microBatch) + " x batch degree " +
                   std::to_string(batchDegree) + " x micro-batches " +
                   std::to_string(spec.microbatches));
  if (static_cast<int64_t>(units.size()) != shape.layers)
    return invalid("the program declares " + std::to_string(units.size()) + " units for " +
                   std::to_string(shape.layers) + " layers");

  // Every group the ops may use, created by every rank in the same order (MPI_Comm_split is
  // collective over the world; stages that met their groups in different orders would hang).
  AxisGroup nested; // the params all-gather's keys: grads shard index outside, scatter inside
  for (const AxisGroup *part : std::initializer_list<const AxisGroup *>{&G, &stepScatter})
    for (const std::string &axis : *part)
      if (contains(O, axis) && !contains(P, axis))
        nested.push_back(axis);
  AxisGroup layers = layersAxis.empty() ? AxisGroup() : AxisGroup{layersAxis};
  for (const AxisGroup *axes : std::initializer_list<const AxisGroup *>{
           &tensorAxes, &layers, &P, &G, &stepScatter, &stepReduce, &nested})
    if (!axes->empty())
      PLACERT_TRY(runtime.createGroup(*axes));
  runtime.sealGroups();

  int paramShard = runtime.getGroupSize(P), gradShard = runtime.getGroupSize(G),
      optimizerShard = runtime.getGroupSize(O);
  int64_t gradIndex = runtime.getGroupIndex(G), scatterIndex = runtime.getGroupIndex(stepScatter);
  int scatterSize = runtime.getGroupSize(stepScatter);
  MemoryTracker *memory = &runtime.getMemory();
  int64_t microbatches = spec.microbatches;
  for (UnitState &unit : units) {
    int64_t i = unit.spec.layer;
    unit.in = i == 0 ? shape.input : shape.width;
    unit.out = i + 1 == shape.layers ? shape.output : shape.width;
    unit.split = i % 2 == 1 ? Split::Row : i + 1 < shape.layers ? Split::Column : Split::Replicated;
    unit.localIn = unit.in;
    unit.localOut = unit.out;
    if (unit.split == Split::Column) {
      if (unit.out % tensorDegree != 0)
        return invalid(unit.spec.name + ": " + std::to_string(unit.out) +
                       " output features do not divide among " + std::to_string(tensorDegree) +
                       " tensor-parallel ranks");
      unit.localOut = unit.out / tensorDegree;
      unit.rowOffset = tensorIndex * unit.localOut;
    } else if (unit.split == Split::Row) {
      if (unit.in % tensorDegree != 0)
        return invalid(unit.spec.name + ": " + std::to_string(unit.in) +
                       " input features do not divide among " + std::to_string(tensorDegree) +
                       " tensor-parallel ranks");
      unit.localIn = unit.in / tensorDegree;
      unit.columnOffset = tensorIndex * unit.localIn;
    }
    unit.weightElements = unit.localOut * unit.localIn;
    unit.biasElements = unit.split == Split::Column ? unit.localOut : unit.out;
    if (unit.weightElements + unit.biasElements != unit.spec.params)
      return invalid(unit.spec.name + ": the plan says " + std::to_string(unit.spec.params) +
                     " parameters per device but the tensor-parallel split gives " +
                     std::to_string(unit.weightElements + unit.biasElements));
    if (stages > 1 && tensorDegree > 1 && unit.spec.stage + 1 < stages) {
      const UnitState *next = &unit + 1;
      if (&unit - units.data() + 1 < static_cast<int64_t>(units.size()) &&
          next->spec.stage != unit.spec.stage && unit.split == Split::Column)
        return invalid("stage " + std::to_string(unit.spec.stage) + " ends with the column-" +
                       "parallel " + unit.spec.name +
                       ": with tensor parallelism every stage needs an even number of layers");
    }
    unit.local = unit.spec.stage == stage;
    if (!unit.local)
      continue;
    int64_t params = unit.spec.params;
    if (params % optimizerShard != 0 || params % paramShard != 0)
      return invalid(unit.spec.name + ": " + std::to_string(params) +
                     " parameters do not divide among the " + std::to_string(optimizerShard) +
                     " optimizer shards over '" + join(O) + "' (choose sizes that divide)");
    unit.owned = params / optimizerShard;
    unit.ownedOffset = P.empty() ? (gradIndex * scatterSize + scatterIndex) * unit.owned
                                 : scatterIndex * unit.owned;
    int64_t stored = params / paramShard;
    unit.params =
        Buffer(memory, placement.paramsTier, State::Params, true, stored, parameterBytes(stored));
    int64_t gradElements = params / gradShard;
    unit.grads = Buffer(memory, placement.gradsTier, State::Grads, true, gradElements,
                        gradElements * getSize(spec.gradType));
    unit.optimizerState = Buffer(memory, placement.optimizerTier, State::Optimizer, true, 0,
                                 unit.owned * spec.optimizerBytesPerParam);
    if (spec.optimizer != OptimizerKind::Sgd)
      unit.m.assign(static_cast<size_t>(unit.owned), 0.0f);
    if (spec.optimizer == OptimizerKind::Adam)
      unit.v.assign(static_cast<size_t>(unit.owned), 0.0f);
    unit.stash.resize(static_cast<size_t>(microbatches));

    // Initial values: the whole local (tensor-parallel) unit, then this rank's shard of it.
    std::vector<float> local(static_cast<size_t>(params));
    std::string weightName = "layers." + std::to_string(i) + ".weight";
    std::string biasName = "layers." + std::to_string(i) + ".bias";
    for (int64_t r = 0; r < unit.localOut; ++r)
      for (int64_t c = 0; c < unit.localIn; ++c)
        local[r * unit.localIn + c] =
            initialValue(runtime.getOptions().seed, weightName,
                         (r + unit.rowOffset) * unit.in + c + unit.columnOffset, unit.in);
    for (int64_t j = 0; j < unit.biasElements; ++j)
      local[unit.weightElements + j] =
          initialValue(runtime.getOptions().seed, biasName,
                       j + (unit.split == Split::Column ? unit.rowOffset : 0), unit.in);
    int64_t shardIndex = runtime.getGroupIndex(P);
    std::copy(local.begin() + shardIndex * stored, local.begin() + (shardIndex + 1) * stored,
              unit.params.get());
    // Mixed precision: the optimizer keeps the fp32 values; the working params are rounded.
    unit.master.assign(unit.params.get() + unit.ownedOffset,
                       unit.params.get() + unit.ownedOffset + unit.owned);
    roundTo(spec.paramType, unit.params.get(), stored);
  }
  return Status::success();
}

Status MlpTrainer::setup() { return impl->setup(); }

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

Status MlpTrainer::recvActivations(int index, int mb, int peerStage, int64_t elements, DType dtype,
                                   Phase phase) {
  (void)dtype;
  UnitState *unit;
  PLACERT_TRY(impl->unitOf(index, unit));
  Stash &stash = unit->stash[mb];
  Buffer &target = phase == Phase::Forward ? stash.received : stash.outputGrad;
  int64_t expected =
      impl->spec.microBatch * (phase == Phase::Forward ? unit->localIn : unit->localOut);
  if (elements != expected)
    return impl->mismatch(*unit, "recv", elements, expected);
  target = impl->transient(Tier::Device, State::Activations, elements, impl->spec.activationType);
  Communicator *group;
  PLACERT_TRY(impl->runtime.getGroup({impl->layersAxis}, group));
  return impl->runtime.recv(*group, target.get(), elements, peerStage,
                            mb * 2 + (phase == Phase::Backward ? 1 : 0));
}

Status MlpTrainer::sendActivations(int index, int mb, int peerStage, int64_t elements, DType dtype,
                                   Phase phase) {
  UnitState *unit;
  PLACERT_TRY(impl->unitOf(index, unit));
  Buffer &source = phase == Phase::Forward ? unit->stash[mb].output : impl->inputGrad(*unit, mb);
  if (elements != source.getElements())
    return impl->mismatch(*unit, "send", elements, source.getElements());
  Communicator *group;
  PLACERT_TRY(impl->runtime.getGroup({impl->layersAxis}, group));
  return impl->runtime.send(*group, impl->layersAxis, source.get(), elements, peerStage,
                            mb * 2 + (phase == Phase::Backward ? 1 : 0),
                            impl->info(State::Activations, phase, dtype));
}

Status MlpTrainer::gatherParams(int index, int mb, const AxisGroup &axes, int64_t elements,
                                DType dtype, Phase phase) {
  (void)mb;
  UnitState *unit;
  PLACERT_TRY(impl->unitOf(index, unit));
  if (!sameSet(axes, impl->placement.paramShard))
    return impl->invalid("params gather of " + unit->spec.name + " over '" + join(axes) +
                         "' but params are sharded over '" + join(impl->placement.paramShard) +
                         "'");
  if (elements != unit->spec.params)
    return impl->mismatch(*unit, "all-gather", elements, unit->spec.params);
  unit->gathered = impl->transient(Tier::Device, State::Params, elements, impl->spec.paramType);
  Communicator *group;
  PLACERT_TRY(impl->runtime.getGroup(axes, group));
  return impl->runtime.allGather(*group, join(axes), unit->params.get(), unit->gathered.get(),
                                 elements, impl->info(State::Params, phase, dtype));
}

Status MlpTrainer::freeGathered(int index, int mb, int64_t elements, Phase phase) {
  (void)mb;
  (void)phase;
  UnitState *unit;
  PLACERT_TRY(impl->unitOf(index, unit));
  if (elements != unit->gathered.getElements())
    return impl->mismatch(*unit, "free", elements, unit->gathered.getElements());
  unit->gathered.release();
  return Status::success();
}

Status MlpTrainer::forward(int index, int mb) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  if (!t.placement.paramShard.empty() && !unit->gathered.isAllocated())
    return t.invalid("forward of " + unit->spec.name + " before its params were gathered");
  int64_t b = t.spec.microBatch;
  Stash &stash = unit->stash[mb];
  stash.input =
      t.transient(Tier::Device, State::Activations, b * unit->localIn, t.spec.activationType);
  if (unit->spec.layer == 0) {
    t.sampleData(mb, false, stash.input.get());
  } else {
    Buffer &pre = t.inputPre(*unit, mb);
    if (pre.getElements() != b * unit->localIn)
      return t.invalid("forward of " + unit->spec.name + ": its input has not arrived");
    t.kernels->geluForward(pre.get(), stash.input.get(), b * unit->localIn);
  }
  stash.output =
      t.transient(Tier::Device, State::Activations, b * unit->localOut, t.spec.activationType);
  const float *w = t.weights(*unit);
  // A row-parallel layer's output is a partial sum; one rank of the group adds the bias.
  const float *bias =
      unit->split == Split::Row && t.tensorIndex != 0 ? nullptr : w + unit->weightElements;
  t.kernels->linearForward(stash.input.get(), w, bias, stash.output.get(), b, unit->localIn,
                           unit->localOut);
  return Status::success();
}

Status MlpTrainer::backward(int index, int mb) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  const Options &options = t.runtime.getOptions();
  if (options.dieAtStep == t.step && options.dieRank == t.runtime.getRank() && !t.died) {
    std::fprintf(stderr, "placert: rank %d: fault injection: exiting in the middle of step %lld\n",
                 t.runtime.getRank(), static_cast<long long>(t.step));
    std::fflush(stderr);
    std::_Exit(2);
  }
  if (!t.placement.paramShard.empty() && !unit->gathered.isAllocated())
    return t.invalid("backward of " + unit->spec.name + " before its params were gathered");
  int64_t b = t.spec.microBatch;
  Stash &stash = unit->stash[mb];
  if (unit->spec.layer + 1 == t.shape.layers) {
    // The loss: mean squared error over the global batch and the outputs, so that the summed
    // gradients of every rank and micro-batch equal the single-device gradient.
    std::vector<float> targets(static_cast<size_t>(b * t.shape.output));
    t.sampleData(mb, true, targets.data());
    stash.outputGrad =
        t.transient(Tier::Device, State::Activations, b * unit->localOut, t.spec.activationType);
    double loss = t.kernels->mseLoss(
        stash.output.get(), targets.data(), stash.outputGrad.get(), b * t.shape.output,
        1.0 / static_cast<double>(t.spec.globalBatch * t.shape.output));
    if (t.tensorIndex == 0)
      t.stepLoss += loss;
  }
  if (stash.outputGrad.getElements() != b * unit->localOut)
    return t.invalid("backward of " + unit->spec.name + ": its output gradient has not arrived");

  bool accumulateInPlace = t.placement.gradShard.empty() && t.placement.gradsTier == Tier::Device;
  if (!accumulateInPlace)
    unit->gradScratch = t.transient(Tier::Device, State::Grads, unit->spec.params, t.spec.gradType);
  float *grads = accumulateInPlace ? unit->grads.get() : unit->gradScratch.get();
  t.kernels->linearWeightGrad(stash.input.get(), stash.outputGrad.get(), grads,
                              grads + unit->weightElements, b, unit->localIn, unit->localOut);

  bool needsInputGrad =
      unit->spec.layer > 0 || (unit->split == Split::Column && t.tensorDegree > 1);
  if (needsInputGrad) {
    Buffer &dx = t.inputGrad(*unit, mb);
    dx = t.transient(Tier::Device, State::Activations, b * unit->localIn, t.spec.activationType);
    t.kernels->linearInputGrad(stash.outputGrad.get(), t.weights(*unit), dx.get(), b, unit->localIn,
                               unit->localOut);
    // gelu' scales each element, so it commutes with the tensor-parallel sum that follows.
    if (unit->spec.layer > 0)
      t.kernels->geluBackward(t.inputPre(*unit, mb).get(), dx.get(), dx.get(), b * unit->localIn);
  }
  return Status::success();
}

Status MlpTrainer::tensorAllReduce(int index, int mb, const AxisGroup &axes, int64_t elements,
                                   DType dtype, Phase phase) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  if (!sameSet(axes, t.tensorAxes))
    return t.invalid("tensor-parallel all-reduce over '" + join(axes) +
                     "', which are not the tensor axes");
  Buffer &buffer = phase == Phase::Forward ? unit->stash[mb].output : t.inputGrad(*unit, mb);
  if (elements != buffer.getElements())
    return t.mismatch(*unit, "all-reduce", elements, buffer.getElements());
  Communicator *group;
  PLACERT_TRY(t.runtime.getGroup(axes, group));
  return t.runtime.allReduce(*group, join(axes), buffer.get(), elements,
                             t.info(State::Activations, phase, dtype));
}

Status MlpTrainer::reduceScatterGrads(int index, const AxisGroup &axes, int64_t elements,
                                      DType dtype, Phase phase) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  bool perMicrobatch = phase != Phase::Step;
  const AxisGroup &expectedAxes = perMicrobatch ? t.placement.gradShard : t.stepScatter;
  if (!sameSet(axes, expectedAxes))
    return t.invalid("gradient reduce-scatter of " + unit->spec.name + " over '" + join(axes) +
                     "' but the layout scatters over '" + join(expectedAxes) + "'");
  Buffer &input = perMicrobatch ? unit->gradScratch : unit->grads;
  if (elements != input.getElements())
    return t.mismatch(*unit, "reduce-scatter", elements, input.getElements());
  int size = t.runtime.getGroupSize(axes);
  int64_t chunk = elements / size;
  Tier tier = perMicrobatch ? Tier::Device : t.placement.gradsTier;
  Buffer output = t.transient(tier, State::Grads, chunk, t.spec.gradType);
  if (t.runtime.getOptions().skipGradReduction) {
    // Fault injection: keep this rank's own chunk, unsummed.
    int64_t offset = t.runtime.getGroupIndex(axes) * chunk;
    std::copy(input.get() + offset, input.get() + offset + chunk, output.get());
  } else {
    Communicator *group;
    PLACERT_TRY(t.runtime.getGroup(axes, group));
    PLACERT_TRY(t.runtime.reduceScatter(*group, join(axes), input.get(), output.get(), elements,
                                        t.info(State::Grads, phase, dtype)));
  }
  if (!perMicrobatch) {
    unit->stepGrad = std::move(output);
    return Status::success();
  }
  unit->gradScratch.release();
  if (t.placement.gradsTier == Tier::Host) {
    unit->gradChunk = std::move(output);
    return Status::success();
  }
  for (int64_t i = 0; i < chunk; ++i)
    unit->grads.get()[i] += output.get()[i];
  return Status::success();
}

Status MlpTrainer::allReduceGrads(int index, const AxisGroup &axes, int64_t elements, DType dtype) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  if (!sameSet(axes, t.stepReduce))
    return t.invalid("gradient all-reduce of " + unit->spec.name + " over '" + join(axes) +
                     "' but the layout reduces over '" + join(t.stepReduce) + "'");
  Buffer &buffer = unit->stepGrad.isAllocated() ? unit->stepGrad : unit->grads;
  if (elements != buffer.getElements())
    return t.mismatch(*unit, "all-reduce", elements, buffer.getElements());
  if (t.runtime.getOptions().skipGradReduction)
    return Status::success();
  Communicator *group;
  PLACERT_TRY(t.runtime.getGroup(axes, group));
  return t.runtime.allReduce(*group, join(axes), buffer.get(), elements,
                             t.info(State::Grads, Phase::Step, dtype));
}

Status MlpTrainer::gradsToHost(int index, int64_t elements, DType dtype, Phase phase) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  if (phase == Phase::Step) {
    // Replicated gradients were reduced on the device; the optimizer reads them on the host.
    Buffer &source = unit->stepGrad.isAllocated() ? unit->stepGrad : unit->grads;
    if (elements != source.getElements())
      return t.mismatch(*unit, "device-to-host", elements, source.getElements());
    unit->hostGrad = t.transient(Tier::Host, State::Grads, elements, t.spec.gradType);
    std::copy(source.get(), source.get() + elements, unit->hostGrad.get());
    t.runtime.countTransfer(Collective::DeviceToHost, elements,
                            t.info(State::Grads, Phase::Step, dtype));
    return Status::success();
  }
  Buffer &source = unit->gradChunk.isAllocated() ? unit->gradChunk : unit->gradScratch;
  if (elements != source.getElements() || elements != unit->grads.getElements())
    return t.mismatch(*unit, "device-to-host", elements, unit->grads.getElements());
  for (int64_t i = 0; i < elements; ++i)
    unit->grads.get()[i] += source.get()[i];
  t.runtime.countTransfer(Collective::DeviceToHost, elements,
                          t.info(State::Grads, Phase::Backward, dtype));
  source.release();
  return Status::success();
}

Status MlpTrainer::optimizerUpdate(int index, int64_t elements) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  Buffer &grads = unit->hostGrad.isAllocated()   ? unit->hostGrad
                  : unit->stepGrad.isAllocated() ? unit->stepGrad
                                                 : unit->grads;
  if (elements != unit->owned || grads.getElements() != unit->owned)
    return t.mismatch(*unit, "optimizer-update", elements, unit->owned);
  // Mixed precision: the fully reduced gradient is rounded to the grad dtype (as the reference
  // does; rounding each rank's partial sum would depend on the summation order), and the update
  // applies to the fp32 master copy.
  std::vector<float> grad(grads.get(), grads.get() + elements);
  roundTo(t.spec.gradType, grad.data(), elements);
  std::vector<float> delta(static_cast<size_t>(elements));
  switch (t.spec.optimizer) {
  case OptimizerKind::Adam:
    adamDelta(grad.data(), unit->m.data(), unit->v.data(), delta.data(), elements, t.step + 1,
              t.spec.learningRate);
    break;
  case OptimizerKind::Sgd:
    sgdDelta(grad.data(), nullptr, delta.data(), elements, t.spec.learningRate);
    break;
  case OptimizerKind::SgdMomentum:
    sgdDelta(grad.data(), unit->m.data(), delta.data(), elements, t.spec.learningRate);
    break;
  }
  for (int64_t i = 0; i < elements; ++i)
    unit->master[static_cast<size_t>(i)] += delta[static_cast<size_t>(i)];
  std::fill(unit->grads.get(), unit->grads.get() + unit->grads.getElements(), 0.0f);
  unit->stepGrad.release();
  unit->hostGrad.release();
  if (t.placement.optimizerTier == Tier::Host) {
    // The master copy is updated on the host; its rounding travels to the device with
    // paramsToDevice.
    unit->update = t.transient(Tier::Host, State::Params, elements, t.spec.paramType);
    std::copy(unit->master.begin(), unit->master.end(), unit->update.get());
    roundTo(t.spec.paramType, unit->update.get(), elements);
    return Status::success();
  }
  float *params = unit->params.get() + unit->ownedOffset;
  std::copy(unit->master.begin(), unit->master.end(), params);
  roundTo(t.spec.paramType, params, elements);
  return Status::success();
}

Status MlpTrainer::paramsToDevice(int index, int64_t elements, DType dtype) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  if (elements != unit->update.getElements())
    return t.mismatch(*unit, "host-to-device", elements, unit->update.getElements());
  std::copy(unit->update.get(), unit->update.get() + elements,
            unit->params.get() + unit->ownedOffset);
  t.runtime.countTransfer(Collective::HostToDevice, elements,
                          t.info(State::Params, Phase::Step, dtype));
  unit->update.release();
  return Status::success();
}

Status MlpTrainer::allGatherParams(int index, const AxisGroup &axes, int64_t elements,
                                   DType dtype) {
  Impl &t = *impl;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  AxisGroup expected = difference(t.placement.optimizerShard, t.placement.paramShard);
  if (!sameSet(axes, expected))
    return t.invalid("params all-gather of " + unit->spec.name + " over '" + join(axes) +
                     "' but the optimizer's pieces differ over '" + join(expected) + "'");
  if (elements != unit->params.getElements())
    return t.mismatch(*unit, "all-gather", elements, unit->params.getElements());
  // Order the group's keys as the pieces nest: the grads shard index outside, the step's
  // scatter index inside.
  AxisGroup ordered;
  for (const std::string &axis : t.placement.gradShard)
    if (contains(axes, axis))
      ordered.push_back(axis);
  for (const std::string &axis : t.stepScatter)
    if (contains(axes, axis))
      ordered.push_back(axis);
  Communicator *group;
  PLACERT_TRY(t.runtime.getGroup(ordered, group));
  if (unit->ownedOffset != group->getRank() * unit->owned)
    return t.invalid("params all-gather of " + unit->spec.name +
                     ": the owned piece is not where the group's order puts it");
  return t.runtime.allGather(*group, join(axes), unit->params.get() + unit->ownedOffset,
                             unit->params.get(), elements,
                             t.info(State::Params, Phase::Step, dtype));
}

//===----------------------------------------------------------------------===//
// The training loop
//===----------------------------------------------------------------------===//

Status MlpTrainer::Impl::runStep(const StageProgram &program) {
  int m = static_cast<int>(spec.microbatches);
  if (spec.schedule == Schedule::GPipe || stages == 1) {
    // GPipe (and no pipeline): every forward, then every backward. Without a pipeline this is
    // plain gradient accumulation; 1F1B with one stage is the same order micro-batch by
    // micro-batch.
    if (stages == 1) {
      for (int mb = 0; mb < m; ++mb) {
        PLACERT_TRY(program.forward(mb));
        PLACERT_TRY(program.backward(mb));
      }
    } else {
      for (int mb = 0; mb < m; ++mb)
        PLACERT_TRY(program.forward(mb));
      for (int mb = 0; mb < m; ++mb)
        PLACERT_TRY(program.backward(mb));
    }
  } else {
    // 1F1B: p − s − 1 warm-up forwards, then one forward and one backward, then the cool-down.
    int warmup = std::min(stages - stage - 1, m);
    for (int mb = 0; mb < warmup; ++mb)
      PLACERT_TRY(program.forward(mb));
    for (int mb = warmup; mb < m; ++mb) {
      PLACERT_TRY(program.forward(mb));
      PLACERT_TRY(program.backward(mb - warmup));
    }
    for (int mb = m - warmup; mb < m; ++mb)
      PLACERT_TRY(program.backward(mb));
  }
  PLACERT_TRY(program.step());
  if (!layersAxis.empty()) {
    Communicator *group;
    PLACERT_TRY(runtime.getGroup({layersAxis}, group));
    PLACERT_TRY(group->waitSends());
  }
  for (UnitState &unit : units)
    for (Stash &stash : unit.stash)
      stash = Stash();
  return Status::success();
}

Status MlpTrainer::Impl::gatherFullParams(std::vector<float> &full) {
  // Each parameter is contributed by one rank: the one at coordinate 0 on every batch axis it is
  // not sharded over and, for what tensor parallelism replicates, at tensor index 0.
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (int64_t i = 0; i < shape.layers; ++i) {
    offsets.push_back(total);
    int64_t in = i == 0 ? shape.input : shape.width;
    int64_t out = i + 1 == shape.layers ? shape.output : shape.width;
    total += out * in + out;
  }
  full.assign(static_cast<size_t>(total), 0.0f);
  bool contributes = true;
  for (const std::string &axis : batchAxes)
    if (!contains(placement.paramShard, axis) && runtime.getCoordinate(axis) != 0)
      contributes = false;
  if (contributes) {
    int64_t shardIndex = runtime.getGroupIndex(placement.paramShard);
    for (UnitState &unit : units) {
      if (!unit.local)
        continue;
      int64_t stored = unit.params.getElements();
      for (int64_t k = 0; k < stored; ++k) {
        int64_t flat = shardIndex * stored + k;
        int64_t offset = offsets[static_cast<size_t>(unit.spec.layer)];
        if (flat < unit.weightElements) {
          if (unit.split == Split::Replicated && tensorIndex != 0)
            continue;
          int64_t r = flat / unit.localIn, c = flat % unit.localIn;
          offset += (r + unit.rowOffset) * unit.in + c + unit.columnOffset;
        } else {
          if (unit.split != Split::Column && tensorIndex != 0)
            continue;
          offset += unit.out * unit.in + flat - unit.weightElements + unit.rowOffset;
        }
        full[static_cast<size_t>(offset)] = unit.params.get()[k];
      }
    }
  }
  return runtime.worldSumFloats(full.data(), total, 0);
}

namespace {

std::string jsonNumber(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

} // namespace

Status MlpTrainer::Impl::writeMetrics(const std::vector<double> &losses,
                                      const std::vector<double> &seconds, double sum,
                                      double sumSquares, const CheckResult *check) {
  int64_t steps = runtime.getOptions().steps - firstStep;
  // This rank's part: counters per step and persistent peak bytes per tier and state.
  std::ostringstream mine;
  mine << "    {\"rank\": " << runtime.getRank() << ", \"stage\": " << stage
       << ",\n     \"communication\": [";
  bool first = true;
  for (const auto &[key, value] : runtime.getCounters()) {
    mine << (first ? "\n" : ",\n") << "       {\"stage\": " << key.stage << ", \"axis\": \""
         << key.axis << "\", \"collective\": \"" << toString(key.collective) << "\", \"state\": \""
         << toString(key.state) << "\", \"phase\": \"" << toString(key.phase)
         << "\", \"count\": " << jsonNumber(double(value.count) / steps)
         << ", \"total_bytes\": " << jsonNumber(double(value.bytes) / steps)
         << ", \"message_bytes\": " << jsonNumber(double(value.bytes) / double(value.count)) << "}";
    first = false;
  }
  mine << "],\n     \"memory\": {";
  MemoryTracker &memory = runtime.getMemory();
  for (Tier tier : {Tier::Device, Tier::Host}) {
    mine << (tier == Tier::Device ? "" : ", ") << "\"" << toString(tier) << "\": {";
    for (State state : {State::Params, State::Grads, State::Optimizer})
      mine << (state == State::Params ? "" : ", ") << "\"" << toString(state)
           << "\": " << memory.getPeak(tier, state, true);
    mine << ", \"transient_peak\": {";
    for (State state : {State::Params, State::Grads, State::Activations})
      mine << (state == State::Params ? "" : ", ") << "\"" << toString(state)
           << "\": " << memory.getPeak(tier, state, false);
    mine << "}}";
  }
  mine << "}}";
  std::vector<std::string> all;
  PLACERT_TRY(runtime.gatherStrings(mine.str(), all));
  if (runtime.getRank() != 0)
    return Status::success();

  std::ostringstream json;
  json << "{\n  \"run\": \"" << spec.run << "\",\n  \"model\": \"" << shape.name
       << "\",\n  \"ranks\": " << runtime.getWorldSize() << ",\n  \"steps\": " << steps
       << ",\n  \"first_step\": " << firstStep << ",\n  \"seed\": " << seed << ",\n  \"losses\": [";
  for (size_t i = 0; i < losses.size(); ++i)
    json << (i ? ", " : "") << jsonNumber(losses[i]);
  json << "],\n  \"step_seconds\": [";
  for (size_t i = 0; i < seconds.size(); ++i)
    json << (i ? ", " : "") << jsonNumber(seconds[i]);
  json << "],\n  \"checksum\": {\"sum\": " << jsonNumber(sum)
       << ", \"sum_squares\": " << jsonNumber(sumSquares) << "},\n";
  if (check)
    json << "  \"check\": {\"params_relative_error\": " << jsonNumber(check->paramsError)
         << ", \"loss_relative_error\": " << jsonNumber(check->lossError)
         << ", \"passed\": " << (check->passed ? "true" : "false") << "},\n";
  json << "  \"per_rank\": [\n";
  for (size_t i = 0; i < all.size(); ++i)
    json << all[i] << (i + 1 < all.size() ? ",\n" : "\n");
  json << "  ]\n}\n";
  std::ofstream file(runtime.getOptions().metricsPath);
  file << json.str();
  if (!file)
    return Status(StatusCode::Io,
                  "rank 0: cannot write '" + runtime.getOptions().metricsPath + "'");
  return Status::success();
}

int MlpTrainer::train(const std::vector<StageProgram> &programs) {
  Impl &t = *impl;
  Runtime &runtime = t.runtime;
  const Options &options = runtime.getOptions();
  bool verbose = runtime.getRank() == 0 && !options.quiet;
  if (static_cast<int>(programs.size()) != t.stages)
    runtime.abort(t.invalid("the program has " + std::to_string(programs.size()) +
                            " stage programs for " + std::to_string(t.stages) + " stages"));
  std::vector<double> losses, seconds;
  if (!options.resumePath.empty()) {
    Status status = t.resume();
    if (!status.isOk())
      runtime.abort(status);
  }
  for (t.step = t.firstStep; t.step < options.steps; ++t.step) {
    auto start = std::chrono::steady_clock::now();
    t.stepLoss = 0;
    Status status = t.runStep(programs[static_cast<size_t>(t.stage)]);
    if (!status.isOk())
      runtime.abort(status);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    double loss = t.stepLoss;
    status = runtime.worldSum(&loss, 1);
    if (!status.isOk())
      runtime.abort(status);
    losses.push_back(loss);
    if (verbose)
      std::printf("step %lld: loss %.9g (%.3f ms)\n", static_cast<long long>(t.step + 1), loss,
                  seconds.back() * 1e3);
    t.dataPosition += t.spec.globalBatch;
    bool last = t.step + 1 == options.steps;
    if (!options.savePath.empty() &&
        (last || (options.saveEvery > 0 && (t.step + 1) % options.saveEvery == 0))) {
      status = t.save();
      if (!status.isOk())
        runtime.abort(status);
    }
  }

  std::vector<float> full;
  Status status = t.gatherFullParams(full);
  if (!status.isOk())
    runtime.abort(status);
  double sum = 0, sumSquares = 0;
  for (float value : full) {
    sum += value;
    sumSquares += static_cast<double>(value) * value;
  }
  int exitCode = 0;
  CheckResult check;
  if (options.check) {
    if (runtime.getRank() == 0) {
      ReferenceConfig config{
          t.shape.layers,     t.shape.width,    t.shape.input,       t.shape.output,
          t.spec.globalBatch, t.spec.optimizer, t.spec.learningRate, t.seed,
          t.spec.paramType,   t.spec.gradType};
      check = checkAgainstReference(config, options.steps, full, losses, options.tolerance,
                                    static_cast<int>(t.firstStep));
      std::printf("check against one device: params relative error %.3g, losses relative error "
                  "%.3g (tolerance %.0e): %s\n",
                  check.paramsError, check.lossError, options.tolerance,
                  check.passed ? "ok" : "FAILED");
    }
    check.passed = runtime.worldBroadcastInt(check.passed ? 1 : 0) != 0;
    if (!check.passed) {
      if (runtime.getRank() == 0)
        std::fprintf(stderr, "placert: rank 0: error: the run differs from the single-device "
                             "reference (--check)\n");
      exitCode = 1;
    }
  }
  if (verbose)
    std::printf("parameters: sum %.9g, sum of squares %.9g\n", sum, sumSquares);
  if (!options.metricsPath.empty()) {
    status = t.writeMetrics(losses, seconds, sum, sumSquares, options.check ? &check : nullptr);
    if (!status.isOk())
      runtime.abort(status);
  }
  return exitCode;
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

namespace {

/// A run of a unit's local (tensor-parallel) flat range in a logical tensor: `blocks` blocks of
/// `elements`, `stride` apart in the tensor, back to back in the local unit.
struct Run {
  bool bias = false;
  int64_t logical = 0, elements = 0;
  int64_t local = 0; ///< Where it starts in the local unit (weight slice, then bias slice).
  int64_t blocks = 1, stride = 0;
};

/// The runs of the local flat range [begin, end) of `unit` in `layers.<l>.weight` ([out, in],
/// row-major) and `layers.<l>.bias`: contiguous runs merged, and the whole rows of a
/// row-parallel slice (a column slice of each row) as one strided run.
std::vector<Run> logicalRuns(const UnitState &unit, int64_t begin, int64_t end) {
  std::vector<Run> runs;
  auto add = [&](bool bias, int64_t logical, int64_t elements, int64_t local) {
    if (!runs.empty() && runs.back().bias == bias && runs.back().blocks == 1 &&
        runs.back().logical + runs.back().elements == logical &&
        runs.back().local + runs.back().elements == local) {
      runs.back().elements += elements;
      return;
    }
    runs.push_back({bias, logical, elements, local, 1, 0});
  };
  int64_t weightEnd = std::min(end, unit.weightElements);
  for (int64_t i = begin; i < weightEnd;) {
    int64_t r = i / unit.localIn, c = i % unit.localIn;
    int64_t logical = (r + unit.rowOffset) * unit.in + c + unit.columnOffset;
    int64_t rows = c == 0 ? (weightEnd - i) / unit.localIn : 0;
    if (rows > 1 && unit.localIn < unit.in) {
      runs.push_back({false, logical, unit.localIn, i, rows, unit.in});
      i += rows * unit.localIn;
      continue;
    }
    int64_t length = std::min(unit.localIn - c, weightEnd - i);
    add(false, logical, length, i);
    i += length;
  }
  int64_t biasBegin = std::max(begin, unit.weightElements);
  if (end > biasBegin)
    add(true, biasBegin - unit.weightElements + (unit.split == Split::Column ? unit.rowOffset : 0),
        end - biasBegin, biasBegin);
  return runs;
}

std::string jsonAxes(const AxisGroup &axes) {
  std::string text = "[";
  for (size_t i = 0; i < axes.size(); ++i)
    text += (i ? ", \"" : "\"") + axes[i] + "\"";
  return text + "]";
}

} // namespace

Status MlpTrainer::Impl::checkpointContents(bool save, CheckpointContents &contents) {
  // The logical tensors: fp32 master params and the optimizer's moments, whatever the placement.
  std::vector<std::string> suffixes = {""};
  if (spec.optimizer != OptimizerKind::Sgd)
    suffixes.push_back(".exp_avg");
  if (spec.optimizer == OptimizerKind::Adam)
    suffixes.push_back(".exp_avg_sq");
  for (const UnitState &unit : units)
    for (const std::string &suffix : suffixes) {
      std::string layer = "layers." + std::to_string(unit.spec.layer);
      contents.tensors[layer + ".weight" + suffix] = {unit.out, unit.in};
      contents.tensors[layer + ".bias" + suffix] = {unit.out};
    }

  // This rank owns `owned` elements of its local unit; replicas of them (other coordinates on
  // the batch axes the optimizer is not sharded over, other tensor ranks for what tensor
  // parallelism replicates) do not write them.
  bool writer = true;
  for (const std::string &axis : stepReduce)
    writer &= runtime.getCoordinate(axis) == 0;
  int64_t shardIndex = runtime.getGroupIndex(placement.paramShard);
  for (UnitState &unit : units) {
    if (!unit.local)
      continue;
    std::string layer = "layers." + std::to_string(unit.spec.layer);
    int64_t stored = unit.params.getElements();
    int64_t ownedStart = shardIndex * stored + unit.ownedOffset;
    std::vector<float> *states[] = {&unit.master, &unit.m, &unit.v};
    for (const Run &run : logicalRuns(unit, ownedStart, ownedStart + unit.owned)) {
      bool replicated = unit.split == Split::Replicated || (run.bias && unit.split == Split::Row);
      if (save && (!writer || (replicated && tensorIndex != 0)))
        continue;
      for (size_t s = 0; s < suffixes.size(); ++s)
        contents.shards.push_back(
            {layer + (run.bias ? ".bias" : ".weight") + suffixes[s], run.logical, run.elements,
             states[s]->data() + (run.local - ownedStart), run.blocks, run.stride});
    }
    if (save)
      continue;
    // The stored params shard: the master values, rounded to the param dtype after the load.
    for (const Run &run : logicalRuns(unit, shardIndex * stored, (shardIndex + 1) * stored))
      contents.shards.push_back(
          {layer + (run.bias ? ".bias" : ".weight"), run.logical, run.elements,
           unit.params.get() + (run.local - shardIndex * stored), run.blocks, run.stride});
  }
  return Status::success();
}

Status MlpTrainer::Impl::save() {
  CheckpointContents contents;
  PLACERT_TRY(checkpointContents(true, contents));
  int64_t completed = step + 1;
  contents.scalars = {{"step", completed},
                      {"data_position", dataPosition},
                      {"seed", static_cast<int64_t>(seed)},
                      {"global_batch", spec.globalBatch}};
  std::string mesh = "[";
  for (const Axis &axis : runtime.getMesh())
    mesh += std::string(mesh.size() > 1 ? ", " : "") + "{\"name\": \"" + axis.name +
            "\", \"kind\": \"" +
            (axis.kind == AxisKind::Batch    ? "batch"
             : axis.kind == AxisKind::Tensor ? "tensor"
                                             : "layers") +
            "\", \"size\": " + std::to_string(axis.size) + "}";
  const char *optimizer = spec.optimizer == OptimizerKind::Adam  ? "adam"
                          : spec.optimizer == OptimizerKind::Sgd ? "sgd"
                                                                 : "sgd-momentum";
  contents.description = {
      {"model", "{\"name\": \"" + shape.name + "\", \"kind\": \"mlp\", \"layers\": " +
                    std::to_string(shape.layers) + ", \"width\": " + std::to_string(shape.width) +
                    ", \"input\": " + std::to_string(shape.input) +
                    ", \"output\": " + std::to_string(shape.output) + "}"},
      {"run", "\"" + spec.run + "\""},
      {"strategy", "\"" + spec.strategy + "\""},
      {"mesh", mesh + "]"},
      {"placement", "{\"params\": " + jsonAxes(placement.paramShard) +
                        ", \"grads\": " + jsonAxes(placement.gradShard) +
                        ", \"optimizer\": " + jsonAxes(placement.optimizerShard) + "}"},
      {"optimizer", std::string("\"") + optimizer + "\""},
      {"param_dtype", std::string("\"") + toString(spec.paramType) + "\""}};
  auto start = std::chrono::steady_clock::now();
  PLACERT_TRY(saveCheckpoint(runtime, runtime.getOptions().savePath, completed, contents));
  if (runtime.getRank() == 0 && !runtime.getOptions().quiet)
    std::printf("saved checkpoint %s/%s (%.3f ms)\n", runtime.getOptions().savePath.c_str(),
                checkpointName(completed).c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() *
                    1e3);
  return Status::success();
}

Status MlpTrainer::Impl::resume() {
  CheckpointContents contents;
  PLACERT_TRY(checkpointContents(false, contents));
  std::string loaded;
  auto start = std::chrono::steady_clock::now();
  PLACERT_TRY(loadCheckpoint(runtime, runtime.getOptions().resumePath, contents, loaded));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const char *name : {"step", "data_position", "seed"})
    if (!contents.scalars.count(name))
      return invalid("checkpoint '" + loaded + "' has no scalar '" + name + "'");
  firstStep = contents.scalars["step"];
  dataPosition = contents.scalars["data_position"];
  seed = static_cast<uint64_t>(contents.scalars["seed"]);
  // The stored params are the master rounded to the param dtype, as after an update.
  for (UnitState &unit : units)
    if (unit.local)
      roundTo(spec.paramType, unit.params.get(), unit.params.getElements());
  const Options &options = runtime.getOptions();
  if (firstStep >= options.steps)
    return invalid("checkpoint '" + loaded + "' is at step " + std::to_string(firstStep) +
                   ": --steps " + std::to_string(options.steps) +
                   " leaves nothing to run (--steps counts from the start of training)");
  if (options.check && dataPosition != firstStep * spec.globalBatch)
    return invalid("--check needs the data position of checkpoint '" + loaded +
                   "' to be its step x the global batch (" + std::to_string(dataPosition) +
                   " samples after " + std::to_string(firstStep) + " steps of " +
                   std::to_string(spec.globalBatch) + ")");
  if (runtime.getRank() == 0 && !options.quiet)
    std::printf("resumed from %s: step %lld, data position %lld, seed %llu (%.3f ms)\n",
                loaded.c_str(), static_cast<long long>(firstStep),
                static_cast<long long>(dataPosition), static_cast<unsigned long long>(seed),
                seconds * 1e3);
  return Status::success();
}

} // namespace placert
