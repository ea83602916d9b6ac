// The layout every trainer shares: each unit's states over the batch axes and tiers, the plan's
// state ops, the pipeline schedule, the training loop with --check and --metrics. A model (mlp,
// GPT) derives from Trainer::Core and supplies the unit shapes, initial values, activations and
// the single-device reference through the hooks below.
#ifndef PLACERT_SRC_TRAINERCORE_H
#define PLACERT_SRC_TRAINERCORE_H

#include "Checkpoint.h"
#include "MlpReference.h"
#include "placert/placert.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace placert {

std::string join(const AxisGroup &axes);
bool sameSet(const AxisGroup &a, const AxisGroup &b);
bool contains(const AxisGroup &axes, const std::string &axis);
AxisGroup difference(const AxisGroup &all, const AxisGroup &remove);

/// Where one kind of state lives over the axes its replicas differ on: the dense units' over
/// every batch-like axis, the expert units' over the expert-data-parallel axes (the batch-like
/// axes but the expert axes, which split the experts instead).
struct StateLayout {
  StatePlacement placement;
  AxisGroup batchAxes;   ///< The data-parallel axes of these states, in mesh order.
  AxisGroup stepScatter; ///< O − G: the step's reduce-scatter.
  AxisGroup stepReduce;  ///< What is left of the batch axes: the step's all-reduce.
};

/// The states of one unit on this rank.
struct UnitState {
  UnitSpec spec;
  bool local = false;      ///< On this rank's stage.
  int64_t owned = 0;       ///< Elements the optimizer updates on this rank.
  int64_t ownedOffset = 0; ///< Where they are in the stored parameter shard.
  Buffer params;           ///< Stored shard over P.
  Buffer gathered;         ///< The whole unit around a use (P not empty).
  Buffer deviceParams;     ///< params @ host: the stored shard brought to the device for a use.
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
};

struct Trainer::Core {
  Runtime &runtime;
  TrainingSpec spec;
  StatePlacement placement;
  std::string modelName;
  std::vector<UnitState> units;
  /// Expert parallelism (GptTrainer): the placement of the expert units' states and the mesh's
  /// expert axes, which split the experts and are batch axes for everything else.
  StatePlacement expertPlacement;
  AxisGroup expertAxes;
  int expertIndex = 0, expertDegree = 1;
  /// Groups of axes the model's own collectives use besides the ones setup derives (the folded
  /// experts' group of expert and tensor axes), set by layoutUnits and created with the others.
  std::vector<AxisGroup> modelGroups;
  /// The experts fold the sequence axes into their group: the expert units' states are not data
  /// parallel over them (set by the model's trainer before setup).
  bool expertsFoldContext = false;

  /// The axes the dense states are data parallel over: the batch, sequence (context) and expert
  /// axes, in mesh order.
  AxisGroup batchAxes;
  AxisGroup tensorAxes;
  /// The dense units' state layout and the expert units'.
  StateLayout denseLayout, expertLayout;
  const StateLayout &layoutOf(const UnitState &unit) const {
    return unit.spec.experts ? expertLayout : denseLayout;
  }
  const StatePlacement &placementOf(const UnitState &unit) const {
    return layoutOf(unit).placement;
  }
  bool hasExpertUnits() const {
    return std::any_of(units.begin(), units.end(),
                       [](const UnitState &unit) { return unit.spec.experts; });
  }
  /// The sequence axes (mesh order): their ranks share samples and split the tokens.
  AxisGroup contextAxes;
  std::string layersAxis;
  int stage = 0, stages = 1, tensorIndex = 0, tensorDegree = 1;
  /// Which samples a rank trains on: its index among the batch-kind axes (the sequence axes
  /// split samples, they do not add any), and the number of such replicas.
  int batchIndex = 0, batchDegree = 1;
  int contextIndex = 0, contextDegree = 1;
  int64_t step = 0;         ///< The current step, from 0.
  int64_t firstStep = 0;    ///< The first step this process runs (after a resume).
  int64_t dataPosition = 0; ///< The global sample index where the current step's batch starts.
  uint64_t seed = 0;        ///< Of the initial values and the data (a checkpoint's on resume).
  double stepLoss = 0;
  bool died = false;

  Core(Runtime &runtime, TrainingSpec spec, StatePlacement placement, std::string modelName)
      : runtime(runtime), spec(std::move(spec)), placement(std::move(placement)),
        modelName(std::move(modelName)) {}
  virtual ~Core() = default;

  //===--------------------------------------------------------------------===//
  // Model hooks
  //===--------------------------------------------------------------------===//

  /// Checks the units against the model and the tensor-parallel split (every unit, local or not).
  virtual Status layoutUnits() = 0;
  /// Prepares the per-micro-batch activations of the local units.
  virtual void allocateActivations(int64_t microbatches) = 0;
  /// Fills `local` with the unit's initial values after the tensor-parallel split.
  virtual void initialValues(const UnitState &unit, std::vector<float> &local) = 0;
  /// The buffer a pipeline message of `unit` goes to (`receiving`, allocated here with
  /// `elements`) or comes from.
  virtual Status activationBuffer(UnitState &unit, int mb, Phase phase, bool receiving,
                                  int64_t elements, Buffer *&buffer) = 0;
  /// The whole model's parameter count, and where element `localIndex` of the unit's
  /// tensor-parallel piece goes in it (-1 when another tensor rank contributes it).
  virtual int64_t getFullParams() const = 0;
  virtual int64_t getFullIndex(const UnitState &unit, int64_t localIndex) const = 0;
  /// Trains one device on the whole batch and compares (rank 0 only).
  virtual CheckResult checkReference(const std::vector<float> &full,
                                     const std::vector<double> &losses) = 0;
  /// Drops every micro-batch's activations at the end of a step.
  virtual void clearActivations() = 0;
  /// The model as a JSON object, for a checkpoint's manifest.
  virtual std::string describeModel() const = 0;
  /// The logical tensors of a checkpoint, named as the model names them, and this rank's runs
  /// of them: the runs it writes (`save`) or needs (docs/checkpoints.md).
  virtual Status checkpointContents(bool save, CheckpointContents &contents) = 0;

  //===--------------------------------------------------------------------===//
  // Shared helpers
  //===--------------------------------------------------------------------===//

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
  /// The unit's whole tensor-parallel piece: the gathered copy, the shard brought from the host,
  /// or the stored params.
  const float *weights(UnitState &unit) {
    const StatePlacement &placement = placementOf(unit);
    if (!placement.paramShard.empty())
      return unit.gathered.get();
    return placement.paramsTier == Tier::Host ? unit.deviceParams.get() : unit.params.get();
  }
  bool hasWeights(UnitState &unit) {
    const StatePlacement &placement = placementOf(unit);
    if (!placement.paramShard.empty())
      return unit.gathered.isAllocated();
    return placement.paramsTier != Tier::Host || unit.deviceParams.isAllocated();
  }
  /// Where one micro-batch's gradients of the unit go: the accumulated grads when they are whole
  /// and on the device (and `separate` is false), else a zeroed scratch buffer, allocated on
  /// first use in the micro-batch.
  float *gradTarget(UnitState &unit, bool separate = false) {
    const StatePlacement &placement = placementOf(unit);
    bool inPlace = !separate && placement.gradShard.empty() && placement.gradsTier == Tier::Device;
    if (inPlace && !unit.gradScratch.isAllocated())
      return unit.grads.get();
    if (!unit.gradScratch.isAllocated())
      unit.gradScratch = transient(Tier::Device, State::Grads, unit.spec.params, spec.gradType);
    return unit.gradScratch.get();
  }

  Status setup();
  Status runStep(const StageProgram &program);
  Status gatherFullParams(std::vector<float> &full);
  /// The optimizer state suffixes a checkpoint holds next to the params ("", ".exp_avg", ...).
  std::vector<std::string> checkpointSuffixes() const;
  /// Whether this rank writes what it owns of a unit: coordinate 0 on every batch axis the
  /// optimizer state of its kind (dense or expert) is replicated over.
  bool isCheckpointWriter(const UnitState &unit) const;
  Status save();
  Status resume();
  Status writeMetrics(const std::vector<double> &losses, const std::vector<double> &seconds,
                      double sum, double sumSquares, const CheckResult *check);
  int train(const std::vector<StageProgram> &programs);
};

} // namespace placert

#endif // PLACERT_SRC_TRAINERCORE_H
