// The state layout every trainer shares (TrainerCore.h): setup of the groups and of each unit's
// states, the plan's state ops, the pipeline schedules, the training loop, --check and --metrics.
#include "Kernels.h"
#include "TrainerCore.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace placert {

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

Trainer::Trainer(std::unique_ptr<Core> core) : core(std::move(core)) {}
Trainer::~Trainer() = default;

void Trainer::addUnit(UnitSpec unit) {
  UnitState state;
  state.spec = std::move(unit);
  core->units.push_back(std::move(state));
}

int Trainer::getStage() const { return core->stage; }
int Trainer::getNumStages() const { return core->stages; }
Status Trainer::setup() { return core->setup(); }
int Trainer::train(const std::vector<StageProgram> &stages) { return core->train(stages); }

Status Trainer::Core::setup() {
  seed = runtime.getOptions().seed;
  AxisGroup sampleAxes; // the batch-kind axes: replicas that train on different samples
  for (const Axis &axis : runtime.getMesh()) {
    switch (axis.kind) {
    case AxisKind::Batch:
      batchAxes.push_back(axis.name);
      sampleAxes.push_back(axis.name);
      break;
    case AxisKind::Expert:
      batchAxes.push_back(axis.name);
      sampleAxes.push_back(axis.name);
      expertAxes.push_back(axis.name);
      break;
    case AxisKind::Sequence:
      batchAxes.push_back(axis.name);
      contextAxes.push_back(axis.name);
      break;
    case AxisKind::Tensor:
      tensorAxes.push_back(axis.name);
      break;
    case AxisKind::Layers:
      layersAxis = axis.name;
      break;
    }
  }
  stage = layersAxis.empty() ? 0 : runtime.getCoordinate(layersAxis);
  stages = layersAxis.empty() ? 1 : runtime.getAxisSize(layersAxis);
  tensorIndex = runtime.getGroupIndex(tensorAxes);
  tensorDegree = runtime.getGroupSize(tensorAxes);
  batchIndex = runtime.getGroupIndex(sampleAxes);
  batchDegree = runtime.getGroupSize(sampleAxes);
  contextIndex = runtime.getGroupIndex(contextAxes);
  contextDegree = runtime.getGroupSize(contextAxes);
  expertIndex = runtime.getGroupIndex(expertAxes);
  expertDegree = runtime.getGroupSize(expertAxes);
  bool anyExperts = false;
  for (const UnitState &unit : units)
    anyExperts |= unit.spec.experts;

  // The nestings the layout supports (docs/runtime.md), for the dense states and the experts'.
  auto layoutStates = [&](const StatePlacement &placement, const AxisGroup &axes, const char *what,
                          StateLayout &layout) -> Status {
    const AxisGroup &P = placement.paramShard, &G = placement.gradShard,
                    &O = placement.optimizerShard;
    layout.placement = placement;
    layout.batchAxes = axes;
    layout.stepScatter = difference(O, G);
    layout.stepReduce = difference(difference(axes, G), layout.stepScatter);
    for (const AxisGroup *group : {&P, &G, &O})
      for (const std::string &axis : *group)
        if (!contains(axes, axis))
          return invalid(std::string(what) + " sharded over '" + axis + "', which is not one of " +
                         "their data-parallel axes '" + join(axes) + "'");
    for (const std::string &axis : G)
      if (!contains(O, axis))
        return invalid(std::string(what) + ": grads sharded over '" + axis +
                       "' feed an optimizer replicated over it: unsupported layout");
    if (!P.empty() && !sameSet(P, G))
      return invalid(std::string(what) + ": params sharded over '" + join(P) +
                     "' with grads sharded over '" + join(G) +
                     "': the runtime supports params sharded like the grads, or not at all");
    return Status::success();
  };
  PLACERT_TRY(layoutStates(placement, batchAxes, "the states", denseLayout));
  if (anyExperts)
    PLACERT_TRY(layoutStates(expertPlacement,
                             difference(difference(batchAxes, expertAxes),
                                        expertsFoldContext ? contextAxes : AxisGroup()),
                             "the expert states", expertLayout));
  if (spec.globalBatch != spec.microBatch * batchDegree * spec.microbatches)
    return invalid("global batch " + std::to_string(spec.globalBatch) + " is not micro-batch " +
                   std::to_string(spec.microBatch) + " x batch degree " +
                   std::to_string(batchDegree) + " x micro-batches " +
                   std::to_string(spec.microbatches));
  PLACERT_TRY(layoutUnits());

  // Every group the ops may use, created by every rank in the same order (MPI_Comm_split is
  // collective over the world; stages that met their groups in different orders would hang).
  AxisGroup layers = layersAxis.empty() ? AxisGroup() : AxisGroup{layersAxis};
  std::vector<AxisGroup> groups = {tensorAxes, contextAxes, layers};
  if (anyExperts) {
    groups.push_back(expertAxes);
    groups.push_back(batchAxes);
  }
  groups.insert(groups.end(), modelGroups.begin(), modelGroups.end());
  for (const StateLayout *layout : {&denseLayout, &expertLayout}) {
    if (layout == &expertLayout && !anyExperts)
      continue;
    const AxisGroup &P = layout->placement.paramShard, &G = layout->placement.gradShard,
                    &O = layout->placement.optimizerShard;
    AxisGroup nested; // the params all-gather's keys: grads shard index outside, scatter inside
    for (const AxisGroup *part : std::initializer_list<const AxisGroup *>{&G, &layout->stepScatter})
      for (const std::string &axis : *part)
        if (contains(O, axis) && !contains(P, axis))
          nested.push_back(axis);
    for (const AxisGroup *axes : std::initializer_list<const AxisGroup *>{
             &P, &G, &layout->stepScatter, &layout->stepReduce, &nested})
      groups.push_back(*axes);
  }
  for (const AxisGroup &axes : groups)
    if (!axes.empty())
      PLACERT_TRY(runtime.createGroup(axes));
  runtime.sealGroups();

  MemoryTracker *memory = &runtime.getMemory();
  int64_t microbatches = spec.microbatches;
  for (UnitState &unit : units) {
    unit.local = unit.spec.stage == stage;
    if (!unit.local)
      continue;
    const StateLayout &layout = layoutOf(unit);
    const StatePlacement &placement = layout.placement;
    const AxisGroup &P = placement.paramShard, &G = placement.gradShard,
                    &O = placement.optimizerShard;
    int paramShard = runtime.getGroupSize(P), gradShard = runtime.getGroupSize(G),
        optimizerShard = runtime.getGroupSize(O);
    int64_t gradIndex = runtime.getGroupIndex(G),
            scatterIndex = runtime.getGroupIndex(layout.stepScatter);
    int scatterSize = runtime.getGroupSize(layout.stepScatter);
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

    // Initial values: the whole local (tensor-parallel) unit, then this rank's shard of it.
    std::vector<float> local(static_cast<size_t>(params));
    initialValues(unit, local);
    int64_t shardIndex = runtime.getGroupIndex(P);
    std::copy(local.begin() + shardIndex * stored, local.begin() + (shardIndex + 1) * stored,
              unit.params.get());
    // Mixed precision: the optimizer keeps the fp32 values; the working params are rounded.
    unit.master.assign(unit.params.get() + unit.ownedOffset,
                       unit.params.get() + unit.ownedOffset + unit.owned);
    roundTo(spec.paramType, unit.params.get(), stored);
  }
  allocateActivations(microbatches);
  return Status::success();
}

Status Trainer::recvActivations(int index, int mb, int peerStage, int64_t elements, DType dtype,
                                Phase phase) {
  (void)dtype;
  UnitState *unit;
  PLACERT_TRY(core->unitOf(index, unit));
  Buffer *target;
  PLACERT_TRY(core->activationBuffer(*unit, mb, phase, /*receiving=*/true, elements, target));
  Communicator *group;
  PLACERT_TRY(core->runtime.getGroup({core->layersAxis}, group));
  return core->runtime.recv(*group, target->get(), elements, peerStage,
                            mb * 2 + (phase == Phase::Backward ? 1 : 0));
}

Status Trainer::sendActivations(int index, int mb, int peerStage, int64_t elements, DType dtype,
                                Phase phase) {
  UnitState *unit;
  PLACERT_TRY(core->unitOf(index, unit));
  Buffer *source;
  PLACERT_TRY(core->activationBuffer(*unit, mb, phase, /*receiving=*/false, elements, source));
  if (elements != source->getElements())
    return core->mismatch(*unit, "send", elements, source->getElements());
  Communicator *group;
  PLACERT_TRY(core->runtime.getGroup({core->layersAxis}, group));
  return core->runtime.send(*group, core->layersAxis, source->get(), elements, peerStage,
                            mb * 2 + (phase == Phase::Backward ? 1 : 0),
                            core->info(State::Activations, phase, dtype));
}

Status Trainer::gatherParams(int index, int mb, const AxisGroup &axes, int64_t elements,
                             DType dtype, Phase phase) {
  (void)mb;
  UnitState *unit;
  PLACERT_TRY(core->unitOf(index, unit));
  const StatePlacement &placement = core->placementOf(*unit);
  if (!sameSet(axes, placement.paramShard))
    return core->invalid("params gather of " + unit->spec.name + " over '" + join(axes) +
                         "' but params are sharded over '" + join(placement.paramShard) + "'");
  if (elements != unit->spec.params)
    return core->mismatch(*unit, "all-gather", elements, unit->spec.params);
  // params @ host: the shard brought to the device just before is what is gathered.
  bool fromHost = placement.paramsTier == Tier::Host;
  if (fromHost && !unit->deviceParams.isAllocated())
    return core->invalid("params gather of " + unit->spec.name +
                         " before its shard was brought from the host");
  unit->gathered = core->transient(Tier::Device, State::Params, elements, core->spec.paramType);
  Communicator *group;
  PLACERT_TRY(core->runtime.getGroup(axes, group));
  PLACERT_TRY(core->runtime.allGather(
      *group, join(axes), fromHost ? unit->deviceParams.get() : unit->params.get(),
      unit->gathered.get(), elements, core->info(State::Params, phase, dtype)));
  unit->deviceParams.release();
  return Status::success();
}

Status Trainer::freeGathered(int index, int mb, int64_t elements, Phase phase) {
  (void)mb;
  (void)phase;
  UnitState *unit;
  PLACERT_TRY(core->unitOf(index, unit));
  if (elements != unit->gathered.getElements())
    return core->mismatch(*unit, "free", elements, unit->gathered.getElements());
  unit->gathered.release();
  return Status::success();
}

Status Trainer::bringParams(int index, int mb, int64_t elements, DType dtype, Phase phase) {
  (void)mb;
  UnitState *unit;
  PLACERT_TRY(core->unitOf(index, unit));
  if (core->placementOf(*unit).paramsTier != Tier::Host)
    return core->invalid("host-to-device of " + unit->spec.name + "'s params, which live on the " +
                         "device");
  if (elements != unit->params.getElements())
    return core->mismatch(*unit, "host-to-device", elements, unit->params.getElements());
  unit->deviceParams = core->transient(Tier::Device, State::Params, elements, core->spec.paramType);
  std::copy(unit->params.get(), unit->params.get() + elements, unit->deviceParams.get());
  core->runtime.countTransfer(Collective::HostToDevice, elements,
                              core->info(State::Params, phase, dtype));
  return Status::success();
}

Status Trainer::paramsToHost(int index, int64_t elements, DType dtype) {
  UnitState *unit;
  PLACERT_TRY(core->unitOf(index, unit));
  if (elements != unit->update.getElements())
    return core->mismatch(*unit, "device-to-host", elements, unit->update.getElements());
  std::copy(unit->update.get(), unit->update.get() + elements,
            unit->params.get() + unit->ownedOffset);
  core->runtime.countTransfer(Collective::DeviceToHost, elements,
                              core->info(State::Params, Phase::Step, dtype));
  unit->update.release();
  return Status::success();
}

Status Trainer::reduceScatterGrads(int index, const AxisGroup &axes, int64_t elements, DType dtype,
                                   Phase phase) {
  Core &t = *core;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  bool perMicrobatch = phase != Phase::Step;
  const StateLayout &layout = t.layoutOf(*unit);
  const AxisGroup &expectedAxes = perMicrobatch ? layout.placement.gradShard : layout.stepScatter;
  if (!sameSet(axes, expectedAxes))
    return t.invalid("gradient reduce-scatter of " + unit->spec.name + " over '" + join(axes) +
                     "' but the layout scatters over '" + join(expectedAxes) + "'");
  Buffer &input = perMicrobatch ? unit->gradScratch : unit->grads;
  if (elements != input.getElements())
    return t.mismatch(*unit, "reduce-scatter", elements, input.getElements());
  int size = t.runtime.getGroupSize(axes);
  int64_t chunk = elements / size;
  Tier tier = perMicrobatch ? Tier::Device : layout.placement.gradsTier;
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
  if (layout.placement.gradsTier == Tier::Host) {
    unit->gradChunk = std::move(output);
    return Status::success();
  }
  for (int64_t i = 0; i < chunk; ++i)
    unit->grads.get()[i] += output.get()[i];
  return Status::success();
}

Status Trainer::allReduceGrads(int index, const AxisGroup &axes, int64_t elements, DType dtype) {
  Core &t = *core;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  const AxisGroup &stepReduce = t.layoutOf(*unit).stepReduce;
  if (!sameSet(axes, stepReduce))
    return t.invalid("gradient all-reduce of " + unit->spec.name + " over '" + join(axes) +
                     "' but the layout reduces over '" + join(stepReduce) + "'");
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

Status Trainer::gradsToHost(int index, int64_t elements, DType dtype, Phase phase) {
  Core &t = *core;
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

Status Trainer::optimizerUpdate(int index, int64_t elements) {
  Core &t = *core;
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
  const StatePlacement &placement = t.placementOf(*unit);
  bool paramsOnHost = placement.paramsTier == Tier::Host;
  if (placement.optimizerTier == Tier::Host && !paramsOnHost) {
    // The master copy is updated on the host; its rounding travels to the device with
    // paramsToDevice.
    unit->update = t.transient(Tier::Host, State::Params, elements, t.spec.paramType);
    std::copy(unit->master.begin(), unit->master.end(), unit->update.get());
    roundTo(t.spec.paramType, unit->update.get(), elements);
    return Status::success();
  }
  if (placement.optimizerTier == Tier::Device && paramsOnHost) {
    // Updated on the device; paramsToHost takes the rounded params to the stored shard.
    unit->update = t.transient(Tier::Device, State::Params, elements, t.spec.paramType);
    std::copy(unit->master.begin(), unit->master.end(), unit->update.get());
    roundTo(t.spec.paramType, unit->update.get(), elements);
    return Status::success();
  }
  float *params = unit->params.get() + unit->ownedOffset;
  std::copy(unit->master.begin(), unit->master.end(), params);
  roundTo(t.spec.paramType, params, elements);
  return Status::success();
}

Status Trainer::paramsToDevice(int index, int64_t elements, DType dtype) {
  Core &t = *core;
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

Status Trainer::allGatherParams(int index, const AxisGroup &axes, int64_t elements, DType dtype) {
  Core &t = *core;
  UnitState *unit;
  PLACERT_TRY(t.unitOf(index, unit));
  const StateLayout &layout = t.layoutOf(*unit);
  AxisGroup expected = difference(layout.placement.optimizerShard, layout.placement.paramShard);
  if (!sameSet(axes, expected))
    return t.invalid("params all-gather of " + unit->spec.name + " over '" + join(axes) +
                     "' but the optimizer's pieces differ over '" + join(expected) + "'");
  if (elements != unit->params.getElements())
    return t.mismatch(*unit, "all-gather", elements, unit->params.getElements());
  // Order the group's keys as the pieces nest: the grads shard index outside, the step's
  // scatter index inside.
  AxisGroup ordered;
  for (const std::string &axis : layout.placement.gradShard)
    if (contains(axes, axis))
      ordered.push_back(axis);
  for (const std::string &axis : layout.stepScatter)
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

Status Trainer::Core::runStep(const StageProgram &program) {
  int m = static_cast<int>(spec.microbatches);
  if (!program.forwardChunks.empty()) {
    // Interleaved 1F1B (Narayanan et al. 2021, §2.2; Megatron-Core's schedule): the micro-batches
    // in groups of n (the pipeline stages unless spec.microbatchGroup says otherwise; the last
    // group whatever is left), each group through chunk 0, then chunk 1, and so on (Megatron-
    // Core's get_schedule_table); the backwards take the same entries with the chunks in reverse;
    // (p − s − 1)·2 + (v − 1)·n warm-up forwards (all m·v where they are more; Megatron-LM before
    // November 2024 ran every forward first where m = p), then one forward and one backward
    // alternating, then the cool-down. What each stage holds is cost::getInFlightMicrobatches's
    // count.
    int v = static_cast<int>(program.forwardChunks.size()), p = stages;
    if (static_cast<int>(program.backwardChunks.size()) != v)
      return invalid("the stage program has " + std::to_string(v) + " forward and " +
                     std::to_string(program.backwardChunks.size()) + " backward chunks");
    int n = spec.microbatchGroup > 0 ? static_cast<int>(spec.microbatchGroup) : p;
    if (n < p || n > m)
      return invalid("the interleaved schedule's micro-batch group (" + std::to_string(n) +
                     ") must lie between the pipeline stages (" + std::to_string(p) +
                     ") and the micro-batches (" + std::to_string(m) + ")");
    if (m % n != 0 && m % n < p)
      return invalid("the interleaved schedule's last micro-batch group (" + std::to_string(m % n) +
                     " of " + std::to_string(m) + " in groups of " + std::to_string(n) +
                     ") must be whole or hold at least the pipeline stages (" + std::to_string(p) +
                     ")");
    int total = m * v;
    std::vector<std::pair<int, int>> table; // (micro-batch, chunk) of each virtual micro-batch
    table.reserve(static_cast<size_t>(total));
    for (int first = 0; first < m; first += n)
      for (int chunk = 0; chunk < v; ++chunk)
        for (int mb = first; mb < std::min(m, first + n); ++mb)
          table.emplace_back(mb, chunk);
    auto runForward = [&](int k) {
      auto [mb, chunk] = table[static_cast<size_t>(k)];
      return program.forwardChunks[static_cast<size_t>(chunk)](mb);
    };
    auto runBackward = [&](int k) {
      auto [mb, chunk] = table[static_cast<size_t>(k)];
      return program.backwardChunks[static_cast<size_t>(v - 1 - chunk)](mb);
    };
    int warmup = std::min(total, (p - stage - 1) * 2 + (v - 1) * n);
    for (int k = 0; k < warmup; ++k)
      PLACERT_TRY(runForward(k));
    for (int k = warmup; k < total; ++k) {
      PLACERT_TRY(runForward(k));
      PLACERT_TRY(runBackward(k - warmup));
    }
    for (int k = total - warmup; k < total; ++k)
      PLACERT_TRY(runBackward(k));
  } else if (spec.schedule == Schedule::GPipe || stages == 1) {
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
  clearActivations();
  for (UnitState &unit : units)
    unit.deviceParams.release();
  return Status::success();
}

Status Trainer::Core::gatherFullParams(std::vector<float> &full) {
  // Each parameter is contributed by one rank: the one at coordinate 0 on every batch axis it is
  // not sharded over and, for what tensor parallelism replicates, at tensor index 0 (the model's
  // getFullIndex says -1 elsewhere).
  int64_t total = getFullParams();
  full.assign(static_cast<size_t>(total), 0.0f);
  {
    for (UnitState &unit : units) {
      if (!unit.local)
        continue;
      const StateLayout &layout = layoutOf(unit);
      bool contributes = true;
      for (const std::string &axis : layout.batchAxes)
        if (!contains(layout.placement.paramShard, axis) && runtime.getCoordinate(axis) != 0)
          contributes = false;
      if (!contributes)
        continue;
      int64_t shardIndex = runtime.getGroupIndex(layout.placement.paramShard);
      int64_t stored = unit.params.getElements();
      for (int64_t k = 0; k < stored; ++k) {
        int64_t index = getFullIndex(unit, shardIndex * stored + k);
        if (index >= 0)
          full[static_cast<size_t>(index)] = unit.params.get()[k];
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

Status Trainer::Core::writeMetrics(const std::vector<double> &losses,
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
  json << "{\n  \"placec_version\": "
       << jsonQuote(spec.placecVersion.empty() ? "unknown" : spec.placecVersion)
       << ",\n  \"placert_version\": \"" PLACERT_VERSION_STRING "\",\n  \"run\": \"" << spec.run
       << "\",\n  \"model\": \"" << modelName << "\",\n  \"ranks\": " << runtime.getWorldSize()
       << ",\n  \"steps\": " << steps << ",\n  \"first_step\": " << firstStep
       << ",\n  \"seed\": " << seed << ",\n  \"losses\": [";
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

int Trainer::Core::train(const std::vector<StageProgram> &programs) {
  Core &t = *this;
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
      check = t.checkReference(full, losses);
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

std::vector<std::string> Trainer::Core::checkpointSuffixes() const {
  std::vector<std::string> suffixes = {""};
  if (spec.optimizer != OptimizerKind::Sgd)
    suffixes.push_back(".exp_avg");
  if (spec.optimizer == OptimizerKind::Adam)
    suffixes.push_back(".exp_avg_sq");
  return suffixes;
}

bool Trainer::Core::isCheckpointWriter(const UnitState &unit) const {
  bool writer = true;
  for (const std::string &axis : layoutOf(unit).stepReduce)
    writer &= runtime.getCoordinate(axis) == 0;
  return writer;
}

namespace {

std::string jsonAxes(const AxisGroup &axes) {
  std::string text = "[";
  for (size_t i = 0; i < axes.size(); ++i)
    text += (i ? ", \"" : "\"") + axes[i] + "\"";
  return text + "]";
}

} // namespace

Status Trainer::Core::save() {
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
            (axis.kind == AxisKind::Batch      ? "batch"
             : axis.kind == AxisKind::Tensor   ? "tensor"
             : axis.kind == AxisKind::Sequence ? "sequence"
             : axis.kind == AxisKind::Expert   ? "expert"
                                               : "layers") +
            "\", \"size\": " + std::to_string(axis.size) + "}";
  const char *optimizer = spec.optimizer == OptimizerKind::Adam  ? "adam"
                          : spec.optimizer == OptimizerKind::Sgd ? "sgd"
                                                                 : "sgd-momentum";
  contents.placecVersion = spec.placecVersion;
  contents.description = {
      {"model", describeModel()},
      {"run", "\"" + spec.run + "\""},
      {"strategy", "\"" + spec.strategy + "\""},
      {"mesh", mesh + "]"},
      {"placement",
       "{\"params\": " + jsonAxes(placement.paramShard) +
           ", \"grads\": " + jsonAxes(placement.gradShard) +
           ", \"optimizer\": " + jsonAxes(placement.optimizerShard) +
           (expertAxes.empty() && !hasExpertUnits()
                ? std::string()
                : ", \"expert_params\": " + jsonAxes(expertPlacement.paramShard) +
                      ", \"expert_grads\": " + jsonAxes(expertPlacement.gradShard) +
                      ", \"expert_optimizer\": " + jsonAxes(expertPlacement.optimizerShard)) +
           "}"},
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

Status Trainer::Core::resume() {
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
