// The mlp trainer: each unit is one linear layer (Megatron-LM's column/row pairs under tensor
// parallelism), gelu between layers, mean squared error at the end; the state layout, the ops and
// the loop are the shared Trainer's.
#include "Kernels.h"
#include "MlpReference.h"
#include "TrainerCore.h"

#include <cstdio>
#include <cstdlib>

namespace placert {

namespace {

enum class Split { Column, Row, Replicated };

/// One micro-batch's activations of a unit.
struct Stash {
  Buffer input;    ///< The layer's input after the activation function (or the data).
  Buffer received; ///< The pre-activation input received from the previous stage.
  Buffer output;   ///< The layer's output before the activation function.
  Buffer outputGrad;
  Buffer inputGrad; ///< The gradient of the pre-activation input, when no unit of this stage
                    ///< receives it (sent to the previous stage, or the model input).
};

/// The mlp shape of a unit.
struct MlpUnit {
  Split split = Split::Replicated;
  int64_t in = 0, out = 0;           ///< Full dimensions.
  int64_t localIn = 0, localOut = 0; ///< After the tensor-parallel split.
  int64_t rowOffset = 0, columnOffset = 0;
  int64_t weightElements = 0, biasElements = 0;
  std::vector<Stash> stash;
};

struct MlpCore : Trainer::Core {
  MlpShape shape;
  std::vector<MlpUnit> layout; ///< Parallel to `units`.
  std::unique_ptr<Kernels> kernels = createCpuKernels();

  MlpCore(Runtime &runtime, MlpShape shape, TrainingSpec spec, StatePlacement placement)
      : Core(runtime, std::move(spec), std::move(placement), shape.name), shape(std::move(shape)) {}

  MlpUnit &of(const UnitState &unit) { return layout[static_cast<size_t>(&unit - units.data())]; }
  const MlpUnit &of(const UnitState &unit) const {
    return layout[static_cast<size_t>(&unit - units.data())];
  }
  /// The unit before `unit` on this stage, or null.
  UnitState *previousOnStage(UnitState &unit) {
    size_t index = static_cast<size_t>(&unit - units.data());
    if (index == 0 || !units[index - 1].local)
      return nullptr;
    return &units[index - 1];
  }
  /// The pre-activation input of a unit (layer > 0).
  Buffer &inputPre(UnitState &unit, int mb) {
    if (UnitState *previous = previousOnStage(unit))
      return of(*previous).stash[mb].output;
    return of(unit).stash[mb].received;
  }
  Buffer &inputGrad(UnitState &unit, int mb) {
    if (UnitState *previous = previousOnStage(unit))
      return of(*previous).stash[mb].outputGrad;
    return of(unit).stash[mb].inputGrad;
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

  Status layoutUnits() override;
  void allocateActivations(int64_t microbatches) override {
    for (MlpUnit &unit : layout)
      unit.stash.resize(static_cast<size_t>(microbatches));
  }
  void initialValues(const UnitState &unit, std::vector<float> &local) override;
  Status activationBuffer(UnitState &unit, int mb, Phase phase, bool receiving, int64_t elements,
                          Buffer *&buffer) override;
  int64_t getFullParams() const override;
  int64_t getFullIndex(const UnitState &unit, int64_t flat) const override;
  CheckResult checkReference(const std::vector<float> &full,
                             const std::vector<double> &losses) override {
    ReferenceConfig config{shape.layers,     shape.width,    shape.input,       shape.output,
                           spec.globalBatch, spec.optimizer, spec.learningRate, seed,
                           spec.paramType,   spec.gradType};
    return checkAgainstReference(config, runtime.getOptions().steps, full, losses,
                                 runtime.getOptions().tolerance, static_cast<int>(firstStep));
  }
  std::string describeModel() const override {
    return "{\"name\": \"" + shape.name +
           "\", \"kind\": \"mlp\", \"layers\": " + std::to_string(shape.layers) +
           ", \"width\": " + std::to_string(shape.width) +
           ", \"input\": " + std::to_string(shape.input) +
           ", \"output\": " + std::to_string(shape.output) + "}";
  }
  Status checkpointContents(bool save, CheckpointContents &contents) override;
  void clearActivations() override {
    for (MlpUnit &unit : layout)
      for (Stash &stash : unit.stash)
        stash = Stash();
  }

  Status forward(int index, int mb);
  Status backward(int index, int mb);
  Status tensorAllReduce(int index, int mb, const AxisGroup &axes, int64_t elements, DType dtype,
                         Phase phase);
};

Status MlpCore::layoutUnits() {
  if (static_cast<int64_t>(units.size()) != shape.layers)
    return invalid("the program declares " + std::to_string(units.size()) + " units for " +
                   std::to_string(shape.layers) + " layers");
  if (contextDegree > 1)
    return invalid("context parallelism over '" + join(contextAxes) +
                   "' splits sequences, and an mlp has none");
  layout.clear();
  layout.resize(units.size());
  for (size_t index = 0; index < units.size(); ++index) {
    UnitState &state = units[index];
    MlpUnit &unit = layout[index];
    int64_t i = state.spec.layer;
    unit.in = i == 0 ? shape.input : shape.width;
    unit.out = i + 1 == shape.layers ? shape.output : shape.width;
    unit.split = i % 2 == 1 ? Split::Row : i + 1 < shape.layers ? Split::Column : Split::Replicated;
    unit.localIn = unit.in;
    unit.localOut = unit.out;
    if (unit.split == Split::Column) {
      if (unit.out % tensorDegree != 0)
        return invalid(state.spec.name + ": " + std::to_string(unit.out) +
                       " output features do not divide among " + std::to_string(tensorDegree) +
                       " tensor-parallel ranks");
      unit.localOut = unit.out / tensorDegree;
      unit.rowOffset = tensorIndex * unit.localOut;
    } else if (unit.split == Split::Row) {
      if (unit.in % tensorDegree != 0)
        return invalid(state.spec.name + ": " + std::to_string(unit.in) +
                       " input features do not divide among " + std::to_string(tensorDegree) +
                       " tensor-parallel ranks");
      unit.localIn = unit.in / tensorDegree;
      unit.columnOffset = tensorIndex * unit.localIn;
    }
    unit.weightElements = unit.localOut * unit.localIn;
    unit.biasElements = unit.split == Split::Column ? unit.localOut : unit.out;
    if (unit.weightElements + unit.biasElements != state.spec.params)
      return invalid(state.spec.name + ": the plan says " + std::to_string(state.spec.params) +
                     " parameters per device but the tensor-parallel split gives " +
                     std::to_string(unit.weightElements + unit.biasElements));
    if (stages > 1 && tensorDegree > 1 && state.spec.stage + 1 < stages &&
        index + 1 < units.size() && units[index + 1].spec.stage != state.spec.stage &&
        unit.split == Split::Column)
      return invalid("stage " + std::to_string(state.spec.stage) + " ends with the column-" +
                     "parallel " + state.spec.name +
                     ": with tensor parallelism every stage needs an even number of layers");
  }
  return Status::success();
}

void MlpCore::initialValues(const UnitState &state, std::vector<float> &local) {
  const MlpUnit &unit = of(state);
  int64_t i = state.spec.layer;
  std::string weightName = "layers." + std::to_string(i) + ".weight";
  std::string biasName = "layers." + std::to_string(i) + ".bias";
  for (int64_t r = 0; r < unit.localOut; ++r)
    for (int64_t c = 0; c < unit.localIn; ++c)
      local[r * unit.localIn + c] = initialValue(
          seed, weightName, (r + unit.rowOffset) * unit.in + c + unit.columnOffset, unit.in);
  for (int64_t j = 0; j < unit.biasElements; ++j)
    local[unit.weightElements + j] = initialValue(
        seed, biasName, j + (unit.split == Split::Column ? unit.rowOffset : 0), unit.in);
}

Status MlpCore::activationBuffer(UnitState &state, int mb, Phase phase, bool receiving,
                                 int64_t elements, Buffer *&buffer) {
  MlpUnit &unit = of(state);
  if (receiving) {
    Stash &stash = unit.stash[mb];
    buffer = phase == Phase::Forward ? &stash.received : &stash.outputGrad;
    int64_t expected = spec.microBatch * (phase == Phase::Forward ? unit.localIn : unit.localOut);
    if (elements != expected)
      return mismatch(state, "recv", elements, expected);
    *buffer = transient(Tier::Device, State::Activations, elements, spec.activationType);
    return Status::success();
  }
  buffer = phase == Phase::Forward ? &unit.stash[mb].output : &inputGrad(state, mb);
  return Status::success();
}

int64_t MlpCore::getFullParams() const {
  int64_t total = 0;
  for (int64_t i = 0; i < shape.layers; ++i) {
    int64_t in = i == 0 ? shape.input : shape.width;
    int64_t out = i + 1 == shape.layers ? shape.output : shape.width;
    total += out * in + out;
  }
  return total;
}

int64_t MlpCore::getFullIndex(const UnitState &state, int64_t flat) const {
  const MlpUnit &unit = of(state);
  int64_t offset = 0;
  for (int64_t i = 0; i < state.spec.layer; ++i) {
    int64_t in = i == 0 ? shape.input : shape.width;
    int64_t out = i + 1 == shape.layers ? shape.output : shape.width;
    offset += out * in + out;
  }
  if (flat < unit.weightElements) {
    if (unit.split == Split::Replicated && tensorIndex != 0)
      return -1;
    int64_t r = flat / unit.localIn, c = flat % unit.localIn;
    return offset + (r + unit.rowOffset) * unit.in + c + unit.columnOffset;
  }
  if (unit.split != Split::Column && tensorIndex != 0)
    return -1;
  return offset + unit.out * unit.in + flat - unit.weightElements + unit.rowOffset;
}

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
std::vector<Run> logicalRuns(const MlpUnit &unit, int64_t begin, int64_t end) {
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

/// The mlp's checkpoint names its tensors per layer (`layers.<l>.weight` [out, in],
/// `layers.<l>.bias` [out], and the optimizer moments with the same shapes).
Status MlpCore::checkpointContents(bool save, CheckpointContents &contents) {
  std::vector<std::string> suffixes = checkpointSuffixes();
  for (const UnitState &state : units)
    for (const std::string &suffix : suffixes) {
      const MlpUnit &unit = of(state);
      std::string layer = "layers." + std::to_string(state.spec.layer);
      contents.tensors[layer + ".weight" + suffix] = {unit.out, unit.in};
      contents.tensors[layer + ".bias" + suffix] = {unit.out};
    }

  // This rank owns `owned` elements of its local unit; replicas of them (other coordinates on
  // the batch axes the optimizer is not sharded over, other tensor ranks for what tensor
  // parallelism replicates) do not write them.
  int64_t shardIndex = runtime.getGroupIndex(placement.paramShard);
  for (UnitState &state : units) {
    if (!state.local)
      continue;
    bool writer = isCheckpointWriter(state);
    const MlpUnit &unit = of(state);
    std::string layer = "layers." + std::to_string(state.spec.layer);
    int64_t stored = state.params.getElements();
    int64_t ownedStart = shardIndex * stored + state.ownedOffset;
    std::vector<float> *states[] = {&state.master, &state.m, &state.v};
    for (const Run &run : logicalRuns(unit, ownedStart, ownedStart + state.owned)) {
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
           state.params.get() + (run.local - shardIndex * stored), run.blocks, run.stride});
  }
  return Status::success();
}

} // namespace

MlpTrainer::MlpTrainer(Runtime &runtime, MlpShape shape, TrainingSpec spec,
                       StatePlacement placement)
    : Trainer(std::make_unique<MlpCore>(runtime, std::move(shape), std::move(spec),
                                        std::move(placement))) {}

Status MlpTrainer::forward(int unit, int mb) {
  return static_cast<MlpCore &>(*core).forward(unit, mb);
}
Status MlpTrainer::backward(int unit, int mb) {
  return static_cast<MlpCore &>(*core).backward(unit, mb);
}
Status MlpTrainer::tensorAllReduce(int unit, int mb, const AxisGroup &axes, int64_t elements,
                                   DType dtype, Phase phase) {
  return static_cast<MlpCore &>(*core).tensorAllReduce(unit, mb, axes, elements, dtype, phase);
}

namespace {

Status MlpCore::forward(int index, int mb) {
  MlpCore &t = *this;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  MlpUnit *dims = &t.of(*unit);
  if (!t.hasWeights(*unit))
    return t.invalid("forward of " + unit->spec.name + " before its params were gathered");
  int64_t b = t.spec.microBatch;
  Stash &stash = dims->stash[mb];
  stash.input =
      t.transient(Tier::Device, State::Activations, b * dims->localIn, t.spec.activationType);
  if (unit->spec.layer == 0) {
    t.sampleData(mb, false, stash.input.get());
  } else {
    Buffer &pre = t.inputPre(*unit, mb);
    if (pre.getElements() != b * dims->localIn)
      return t.invalid("forward of " + unit->spec.name + ": its input has not arrived");
    t.kernels->geluForward(pre.get(), stash.input.get(), b * dims->localIn);
  }
  stash.output =
      t.transient(Tier::Device, State::Activations, b * dims->localOut, t.spec.activationType);
  const float *w = t.weights(*unit);
  // A row-parallel layer's output is a partial sum; one rank of the group adds the bias.
  const float *bias =
      dims->split == Split::Row && t.tensorIndex != 0 ? nullptr : w + dims->weightElements;
  t.kernels->linearForward(stash.input.get(), w, bias, stash.output.get(), b, dims->localIn,
                           dims->localOut);
  return Status::success();
}

Status MlpCore::backward(int index, int mb) {
  MlpCore &t = *this;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  MlpUnit *dims = &t.of(*unit);
  const Options &options = t.runtime.getOptions();
  if (options.dieAtStep == t.step && options.dieRank == t.runtime.getRank() && !t.died) {
    std::fprintf(stderr, "placert: rank %d: fault injection: exiting in the middle of step %lld\n",
                 t.runtime.getRank(), static_cast<long long>(t.step));
    std::fflush(stderr);
    std::_Exit(2);
  }
  if (!t.hasWeights(*unit))
    return t.invalid("backward of " + unit->spec.name + " before its params were gathered");
  int64_t b = t.spec.microBatch;
  Stash &stash = dims->stash[mb];
  if (unit->spec.layer + 1 == t.shape.layers) {
    // The loss: mean squared error over the global batch and the outputs, so that the summed
    // gradients of every rank and micro-batch equal the single-device gradient.
    std::vector<float> targets(static_cast<size_t>(b * t.shape.output));
    t.sampleData(mb, true, targets.data());
    stash.outputGrad =
        t.transient(Tier::Device, State::Activations, b * dims->localOut, t.spec.activationType);
    double loss = t.kernels->mseLoss(
        stash.output.get(), targets.data(), stash.outputGrad.get(), b * t.shape.output,
        1.0 / static_cast<double>(t.spec.globalBatch * t.shape.output));
    if (t.tensorIndex == 0)
      t.stepLoss += loss;
  }
  if (stash.outputGrad.getElements() != b * dims->localOut)
    return t.invalid("backward of " + unit->spec.name + ": its output gradient has not arrived");

  float *grads = t.gradTarget(*unit);
  t.kernels->linearWeightGrad(stash.input.get(), stash.outputGrad.get(), grads,
                              grads + dims->weightElements, b, dims->localIn, dims->localOut);

  bool needsInputGrad =
      unit->spec.layer > 0 || (dims->split == Split::Column && t.tensorDegree > 1);
  if (needsInputGrad) {
    Buffer &dx = t.inputGrad(*unit, mb);
    dx = t.transient(Tier::Device, State::Activations, b * dims->localIn, t.spec.activationType);
    t.kernels->linearInputGrad(stash.outputGrad.get(), t.weights(*unit), dx.get(), b, dims->localIn,
                               dims->localOut);
    // gelu' scales each element, so it commutes with the tensor-parallel sum that follows.
    if (unit->spec.layer > 0)
      t.kernels->geluBackward(t.inputPre(*unit, mb).get(), dx.get(), dx.get(), b * dims->localIn);
  }
  return Status::success();
}

Status MlpCore::tensorAllReduce(int index, int mb, const AxisGroup &axes, int64_t elements,
                                DType dtype, Phase phase) {
  MlpCore &t = *this;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  MlpUnit *dims = &t.of(*unit);
  if (!sameSet(axes, t.tensorAxes))
    return t.invalid("tensor-parallel all-reduce over '" + join(axes) +
                     "', which are not the tensor axes");
  Buffer &buffer = phase == Phase::Forward ? dims->stash[mb].output : t.inputGrad(*unit, mb);
  if (elements != buffer.getElements())
    return t.mismatch(*unit, "all-reduce", elements, buffer.getElements());
  Communicator *group;
  PLACERT_TRY(t.runtime.getGroup(axes, group));
  return t.runtime.allReduce(*group, join(axes), buffer.get(), elements,
                             t.info(State::Activations, phase, dtype));
}

} // namespace

} // namespace placert
