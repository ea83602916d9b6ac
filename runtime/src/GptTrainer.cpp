// The GPT trainer: the units `embed`, `layer.i` and `head` of a transformer over the shared state
// layout (TrainerCore.h). Each unit's forward, recompute and backward runs the math of GptModel and
// performs the tensor-, sequence- and context-parallel collectives the plan lists after the
// computation, in the plan's order, failing with "plan mismatch" where the math needs another one.
#include "GptModel.h"
#include "GptReference.h"
#include "TrainerCore.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace placert {

namespace {

using gpt::UnitKind;

/// "an all-gather", "a reduce-scatter".
std::string withArticle(Collective collective) {
  std::string name = toString(collective);
  return (name[0] == 'a' ? "an " : "a ") + name;
}

/// One micro-batch's activations of a unit.
struct GptStash {
  Buffer received;     ///< The unit's input from the previous stage.
  Buffer output;       ///< embed, layers: the unit's output (the next unit's input).
  Buffer receivedGrad; ///< The output's gradient from the next stage.
  Buffer inputGrad;    ///< layers, head: the input's gradient.
  gpt::UnitActivations saved;
};

struct GptUnit {
  UnitKind kind = UnitKind::Layer;
  int64_t layer = 0;
  std::vector<GptStash> stash;
};

struct GptCore;

/// The collectives of one unit's computation, checked against the plan's list as they come.
class PlannedCollectives : public gpt::UnitCollectives {
public:
  PlannedCollectives(GptCore &core, const UnitState &unit, Phase phase, const char *what,
                     const std::vector<PlannedCollective> &planned)
      : core(core), unit(unit), phase(phase), what(what), planned(planned) {}
  Status allReduce(float *buffer, int64_t elements) override;
  Status allGather(const float *input, float *output, int64_t outputElements) override;
  Status reduceScatter(const float *input, float *output, int64_t inputElements) override;
  Status allToAll(const float *input, float *output, int64_t elements) override;
  Status ringStep(const float *input, float *output, int64_t elements) override;
  Status expertAllToAll(const float *input, const std::vector<int64_t> &sendCounts, float *output,
                        const std::vector<int64_t> &recvCounts, bool capacity) override;
  Status expertCounts(const float *input, const std::vector<int64_t> &sendCounts, float *output,
                      const std::vector<int64_t> &recvCounts) override;
  Status batchAllReduce(float *buffer, int64_t elements) override;
  /// Fails when planned collectives were left over.
  Status finish();

private:
  /// Which axes a collective of the computation runs over.
  enum class Over { Tensor, Sequence, Expert, Batch };
  /// `exact`: the plan's element count must be the computation's (dropless routing's chunks
  /// depend on the routing, so its all-to-alls check only the kind and the axes).
  Status next(Collective collective, int64_t elements, const PlannedCollective *&op,
              Communicator *&group, Over over, bool exact = true);
  GptCore &core;
  const UnitState &unit;
  Phase phase;
  const char *what;
  const std::vector<PlannedCollective> &planned;
  size_t position = 0;
};

struct GptCore : Trainer::Core {
  GptShape shape;
  Recompute recompute;
  bool sequenceParallel;
  bool regatherInputs = false;
  ContextParallelism context;
  std::unique_ptr<gpt::GptModel> model;
  std::vector<GptUnit> layout; ///< Parallel to `units`.

  ExpertParallelism expert;
  /// The axes of the experts' group (the expert axes, and the tensor axes too when the experts
  /// fold them) and of the ranks that route different tokens of the global micro-batch (the
  /// batch-like axes, and the tensor axes too when folded), in mesh order.
  AxisGroup expertGroupAxes, routingAxes;

  GptCore(Runtime &runtime, GptShape shape, TrainingSpec spec, StatePlacement placement,
          Recompute recompute, bool sequenceParallel, ContextParallelism context,
          ExpertParallelism expert)
      : Core(runtime, std::move(spec), std::move(placement), shape.name), shape(std::move(shape)),
        recompute(recompute), sequenceParallel(sequenceParallel), context(std::move(context)),
        expert(std::move(expert)) {
    expertPlacement = this->expert.placement;
    expertsFoldContext = this->expert.foldContext;
  }

  GptUnit &of(const UnitState &unit) { return layout[static_cast<size_t>(&unit - units.data())]; }
  const GptUnit &of(const UnitState &unit) const {
    return layout[static_cast<size_t>(&unit - units.data())];
  }
  int64_t boundaryElements() const { return model->getLocalRows() * shape.hidden; }
  /// The unit's input: the previous unit's output on this stage, or what the previous stage sent
  /// (expert units are part of their layer's computation, not a unit of the chain).
  Buffer &input(UnitState &unit, int mb) {
    size_t index = static_cast<size_t>(&unit - units.data());
    size_t previous = index;
    while (previous > 0 && units[previous - 1].spec.experts)
      --previous;
    if (previous > 0 && units[previous - 1].local)
      return layout[previous - 1].stash[mb].output;
    return of(unit).stash[mb].received;
  }
  Buffer &outputGrad(UnitState &unit, int mb) {
    size_t index = static_cast<size_t>(&unit - units.data());
    size_t next = index + 1;
    while (next < units.size() && units[next].spec.experts)
      ++next;
    if (next < units.size() && units[next].local)
      return layout[next].stash[mb].inputGrad;
    return of(unit).stash[mb].receivedGrad;
  }
  /// The expert unit of a mixture-of-experts layer's unit (the one after it), or null.
  UnitState *expertsOf(const UnitState &unit) {
    size_t index = static_cast<size_t>(&unit - units.data());
    if (of(unit).kind != UnitKind::Layer || !shape.moe.isMoeLayer(of(unit).layer) ||
        index + 1 >= units.size() || !units[index + 1].spec.experts)
      return nullptr;
    return &units[index + 1];
  }
  /// Whether this rank adds the load-balancing loss to the step's loss (it is the same on every
  /// batch-like rank): coordinate 0 on the tensor and every batch-like axis.
  bool countsAuxLoss() const {
    if (tensorIndex != 0)
      return false;
    for (const std::string &axis : batchAxes)
      if (runtime.getCoordinate(axis) != 0)
        return false;
    return true;
  }
  /// The micro-batch's token ids and next-token targets, b · seq/cp each: this rank's tokens of
  /// each sample, at their global positions (context parallelism's load-balanced split).
  void sampleTokens(int mb, std::vector<int32_t> &tokens, std::vector<int32_t> &targets) const {
    int64_t b = spec.microBatch, sl = model->getLocalSeq();
    int64_t first = dataPosition + (mb * batchDegree + batchIndex) * b;
    tokens.resize(static_cast<size_t>(b * sl));
    targets.resize(static_cast<size_t>(b * sl));
    for (int64_t p = 0; p < sl; ++p) {
      int64_t position = model->getPosition(p);
      for (int64_t r = 0; r < b; ++r) {
        tokens[r * sl + p] = gpt::sampleToken(seed, first + r, position, shape.vocab);
        targets[r * sl + p] = gpt::sampleToken(seed, first + r, position + 1, shape.vocab);
      }
    }
  }
  UnitState *embedUnit() { return units.empty() || !units[0].local ? nullptr : &units[0]; }
  /// Whether the head reads the embedding unit's table: tied, on the embedding's stage.
  bool readsEmbedding() const { return shape.tiedEmbeddings && !model->getConfig().embeddingCopy; }

  Status layoutUnits() override;
  void allocateActivations(int64_t microbatches) override {
    for (GptUnit &unit : layout)
      unit.stash.resize(static_cast<size_t>(microbatches));
  }
  void initialValues(const UnitState &unit, std::vector<float> &local) override;
  Status activationBuffer(UnitState &unit, int mb, Phase phase, bool receiving, int64_t elements,
                          Buffer *&buffer) override;
  int64_t getFullParams() const override;
  int64_t getFullIndex(const UnitState &unit, int64_t localIndex) const override;
  Status checkpointContents(bool save, CheckpointContents &contents) override;
  CheckResult checkReference(const std::vector<float> &full,
                             const std::vector<double> &losses) override {
    return checkGptAgainstReference(shape, spec, seed, runtime.getOptions().steps, full, losses,
                                    runtime.getOptions().tolerance, static_cast<int>(firstStep));
  }
  std::string describeModel() const override {
    auto flag = [](bool value) { return value ? "true" : "false"; };
    return "{\"name\": \"" + shape.name +
           "\", \"kind\": \"transformer\", \"layers\": " + std::to_string(shape.layers) +
           ", \"hidden\": " + std::to_string(shape.hidden) +
           ", \"heads\": " + std::to_string(shape.heads) +
           ", \"kv_heads\": " + std::to_string(shape.getKvHeads()) +
           ", \"seq\": " + std::to_string(shape.seq) +
           ", \"vocab\": " + std::to_string(shape.vocab) +
           ", \"ffn\": " + std::to_string(shape.ffn) +
           ", \"tied_embeddings\": " + flag(shape.tiedEmbeddings) +
           ", \"swiglu\": " + flag(shape.swiglu) + ", \"rmsnorm\": " + flag(shape.rmsNorm) +
           ", \"bias\": " + flag(shape.bias) + ", \"rope\": " + flag(shape.rope) + moeJson() + "}";
  }
  std::string moeJson() const {
    const MoeShape &e = shape.moe;
    if (e.experts == 0)
      return "";
    char factor[64], aux[64];
    std::snprintf(factor, sizeof factor, "%.17g", e.capacityFactor);
    std::snprintf(aux, sizeof aux, "%.17g", e.auxLoss);
    return ", \"experts\": " + std::to_string(e.experts) +
           ", \"top_k\": " + std::to_string(e.topK) +
           ", \"expert_ffn\": " + std::to_string(e.expertFfn) +
           ", \"shared_experts\": " + std::to_string(e.sharedExperts) +
           ", \"shared_expert_ffn\": " + std::to_string(e.sharedExpertFfn) +
           ", \"moe_every\": " + std::to_string(e.moeEvery) +
           ", \"dense_layers\": " + std::to_string(e.denseLayers) + ", \"router\": \"" +
           (e.router == MoeRouter::Softmax ? "softmax" : "sigmoid") +
           "\", \"capacity_factor\": " + factor + ", \"aux_loss\": " + aux;
  }
  void clearActivations() override {
    for (GptUnit &unit : layout)
      for (GptStash &stash : unit.stash)
        stash = GptStash();
  }

  Status forward(int index, int mb, const std::vector<PlannedCollective> &planned);
  Status recomputeUnit(int index, int mb, const std::vector<PlannedCollective> &planned);
  Status backward(int index, int mb, const std::vector<PlannedCollective> &planned);
  Status allReduceReplicatedGrads(int index, int mb, const AxisGroup &axes, int64_t elements,
                                  DType dtype);
  Status allReduceEmbeddingGrads(int index, const AxisGroup &axes, int peerStage, int64_t elements,
                                 DType dtype);
};

Status PlannedCollectives::next(Collective collective, int64_t elements,
                                const PlannedCollective *&op, Communicator *&group, Over over,
                                bool exact) {
  // Context parallelism's exchanges run over the sequence axes, expert parallelism's over the
  // experts' group (the expert axes, with the tensor axes when the experts fold them), the
  // load-balancing statistics over the ranks that route different tokens (every batch-like
  // axis, with the tensor axes when folded), the rest over the tensor axes.
  const AxisGroup &axes = over == Over::Sequence ? core.contextAxes
                          : over == Over::Expert ? core.expertGroupAxes
                          : over == Over::Batch  ? core.routingAxes
                                                 : core.tensorAxes;
  const char *kind = over == Over::Sequence ? "sequence"
                     : over == Over::Expert ? "expert"
                     : over == Over::Batch  ? "batch-like"
                                            : "tensor";
  auto fail = [&](const std::string &why) {
    return core.invalid(std::string("plan mismatch in the ") + what + " of " + unit.spec.name +
                        ": the computation needs " + withArticle(collective) + " of " +
                        std::to_string(elements) + " elements over the " + kind + " axes, " + why);
  };
  if (position >= planned.size())
    return fail("but the plan lists no more collectives for it");
  op = &planned[position++];
  if (op->collective != collective || (exact && op->elements != elements))
    return fail("but the plan's next one is " + withArticle(op->collective) + " of " +
                std::to_string(op->elements) + " elements");
  if (!sameSet(op->axes, axes))
    return fail("but the plan's runs over '" + join(op->axes) + "'");
  // The group in mesh order, so that its ranks are the context (or expert, or tensor) indices.
  return core.runtime.getGroup(over == Over::Tensor ? op->axes : axes, group);
}

Status PlannedCollectives::allReduce(float *buffer, int64_t elements) {
  const PlannedCollective *op;
  Communicator *group;
  PLACERT_TRY(next(Collective::AllReduce, elements, op, group, Over::Tensor));
  return core.runtime.allReduce(*group, join(op->axes), buffer, elements,
                                core.info(State::Activations, phase, op->dtype));
}

Status PlannedCollectives::allGather(const float *input, float *output, int64_t outputElements) {
  const PlannedCollective *op;
  Communicator *group;
  PLACERT_TRY(next(Collective::AllGather, outputElements, op, group, Over::Tensor));
  return core.runtime.allGather(*group, join(op->axes), input, output, outputElements,
                                core.info(State::Activations, phase, op->dtype));
}

Status PlannedCollectives::reduceScatter(const float *input, float *output, int64_t inputElements) {
  const PlannedCollective *op;
  Communicator *group;
  PLACERT_TRY(next(Collective::ReduceScatter, inputElements, op, group, Over::Tensor));
  return core.runtime.reduceScatter(*group, join(op->axes), input, output, inputElements,
                                    core.info(State::Activations, phase, op->dtype));
}

Status PlannedCollectives::allToAll(const float *input, float *output, int64_t elements) {
  const PlannedCollective *op;
  Communicator *group;
  PLACERT_TRY(next(Collective::AllToAll, elements, op, group, Over::Sequence));
  return core.runtime.allToAll(*group, join(op->axes), input, output, elements,
                               core.info(State::Activations, phase, op->dtype));
}

Status PlannedCollectives::ringStep(const float *input, float *output, int64_t elements) {
  const PlannedCollective *op;
  Communicator *group;
  PLACERT_TRY(next(Collective::RingStep, elements, op, group, Over::Sequence));
  return core.runtime.ringStep(*group, join(op->axes), input, output, elements,
                               core.info(State::Activations, phase, op->dtype));
}

Status PlannedCollectives::expertAllToAll(const float *input,
                                          const std::vector<int64_t> &sendCounts, float *output,
                                          const std::vector<int64_t> &recvCounts, bool capacity) {
  // The plan counts a rank's whole buffer, as for every all-to-all.
  int64_t elements = 0;
  for (int64_t count : sendCounts)
    elements += count;
  const PlannedCollective *op;
  Communicator *group;
  PLACERT_TRY(next(Collective::AllToAll, elements, op, group, Over::Expert, capacity));
  return core.runtime.allToAllv(*group, join(op->axes), input, sendCounts, output, recvCounts,
                                core.info(State::Activations, phase, op->dtype));
}

Status PlannedCollectives::expertCounts(const float *input, const std::vector<int64_t> &sendCounts,
                                        float *output, const std::vector<int64_t> &recvCounts) {
  Communicator *group;
  PLACERT_TRY(core.runtime.getGroup(core.expertGroupAxes, group));
  return core.runtime.allToAllv(*group, join(core.expertGroupAxes), input, sendCounts, output,
                                recvCounts, core.info(State::Activations, phase, DType::FP32));
}

Status PlannedCollectives::batchAllReduce(float *buffer, int64_t elements) {
  const PlannedCollective *op;
  Communicator *group;
  PLACERT_TRY(next(Collective::AllReduce, elements, op, group, Over::Batch));
  return core.runtime.allReduce(*group, join(op->axes), buffer, elements,
                                core.info(State::Activations, phase, op->dtype));
}

Status PlannedCollectives::finish() {
  if (position == planned.size())
    return Status::success();
  return core.invalid(std::string("plan mismatch in the ") + what + " of " + unit.spec.name +
                      ": the plan lists " + std::to_string(planned.size() - position) +
                      " more collective(s) (next: " + toString(planned[position].collective) +
                      " of " + std::to_string(planned[position].elements) +
                      " elements) that the computation does not perform");
}

Status GptCore::layoutUnits() {
  int64_t t = tensorDegree;
  const MoeShape &moe = shape.moe;
  int64_t moeLayers = 0;
  for (int64_t l = 0; l < shape.layers; ++l)
    moeLayers += moe.isMoeLayer(l) ? 1 : 0;
  if (static_cast<int64_t>(units.size()) != shape.layers + 2 + moeLayers)
    return invalid("the program declares " + std::to_string(units.size()) + " units for a " +
                   "transformer of " + std::to_string(shape.layers) + " layers (embed, the layers" +
                   (moeLayers > 0 ? ", the experts of its " + std::to_string(moeLayers) +
                                        " mixture-of-experts layers"
                                  : std::string()) +
                   ", head)");
  auto divides = [&](int64_t value, const char *what) -> Status {
    if (value % t != 0)
      return invalid(std::string(what) + " " + std::to_string(value) + " does not divide among " +
                     std::to_string(t) + " tensor-parallel ranks");
    return Status::success();
  };
  if (shape.heads <= 0 || shape.kvHeads < 0 || shape.heads % shape.getKvHeads() != 0)
    return invalid("kv_heads " + std::to_string(shape.kvHeads) + " does not divide heads " +
                   std::to_string(shape.heads) + " (grouped-query attention)");
  PLACERT_TRY(divides(shape.heads, "heads"));
  // Each tensor rank holds whole groups: heads/t query heads and kv heads/t key/value heads.
  PLACERT_TRY(divides(shape.getKvHeads(), "kv_heads"));
  PLACERT_TRY(divides(shape.ffn, "ffn"));
  PLACERT_TRY(divides(shape.vocab, "vocab"));
  if (shape.hidden % shape.heads != 0)
    return invalid("hidden " + std::to_string(shape.hidden) + " is not a multiple of heads " +
                   std::to_string(shape.heads));
  // Context parallelism: the program's sequence axes are the mesh's; the load-balanced split cuts
  // each sequence into 2·cp chunks; Ulysses gives each context rank whole groups of heads.
  int64_t cp = contextDegree;
  if ((cp > 1 || !context.axes.empty()) &&
      (!sameSet(context.axes, contextAxes) || context.degree != cp))
    return invalid("the program's context parallelism over '" + join(context.axes) + "' (" +
                   std::to_string(context.degree) + " ranks) does not match the mesh, " +
                   (contextAxes.empty() ? std::string("which has no sequence axis")
                                        : "whose sequence axes are '" + join(contextAxes) + "' (" +
                                              std::to_string(cp) + " ranks)"));
  if (cp > 1) {
    if (shape.seq % (2 * cp) != 0)
      return invalid("seq " + std::to_string(shape.seq) + " does not split into 2 x " +
                     std::to_string(cp) + " chunks (context parallelism's load-balanced split)");
    if (context.method == ContextMethod::AllToAll &&
        ((shape.heads / t) % cp != 0 || (shape.getKvHeads() / t) % cp != 0))
      return invalid("the " + std::to_string(shape.heads / t) + " heads and " +
                     std::to_string(shape.getKvHeads() / t) +
                     " kv heads of a tensor rank do not divide among " + std::to_string(cp) +
                     " context ranks (all-to-all attention gives each whole heads)");
  }
  if (sequenceParallel)
    PLACERT_TRY(
        divides(spec.microBatch * shape.seq / cp, "micro-batch x seq / cp (sequence parallelism)"));
  // Expert parallelism: the program's expert axes are the mesh's; experts divide among them.
  int64_t ep = expertDegree;
  if ((ep > 1 || !expert.axes.empty()) &&
      (!sameSet(expert.axes, expertAxes) || expert.degree != ep))
    return invalid("the program's expert parallelism over '" + join(expert.axes) + "' (" +
                   std::to_string(expert.degree) + " ranks) does not match the mesh, " +
                   (expertAxes.empty() ? std::string("which has no expert axis")
                                       : "whose expert axes are '" + join(expertAxes) + "' (" +
                                             std::to_string(ep) + " ranks)"));
  if (moe.experts > 0) {
    if (moe.experts < 2 || moe.topK < 1 || moe.topK > moe.experts)
      return invalid("a mixture of experts needs at least 2 experts and top_k in [1, experts] (" +
                     std::to_string(moe.experts) + " experts, top_k " + std::to_string(moe.topK) +
                     ")");
    if (moe.experts % ep != 0)
      return invalid("experts " + std::to_string(moe.experts) + " do not divide among " +
                     std::to_string(ep) + " expert-parallel ranks");
    // The tensor and sequence axes folded into the experts' group, as Place says them
    // (docs/language.md, 6.4: expert_tensor = fold, expert_context = fold).
    if (expert.foldTensor) {
      if (ep < 2 || t < 2)
        return invalid("experts folding the tensor axes need an expert axis and a tensor axis "
                       "(expert degree " +
                       std::to_string(ep) + ", tensor degree " + std::to_string(t) + ")");
      if (!sequenceParallel)
        return invalid("experts folding the tensor axes need sequence parallelism (each tensor "
                       "rank routes its own sequence shard)");
      if (moe.sharedExperts > 0)
        return invalid("shared experts beside experts folding the tensor axes are not "
                       "supported: the runtime's folded MoE layer has no tensor-parallel MLP");
    }
    if (expert.foldContext && (ep < 2 || cp < 2))
      return invalid("experts folding the sequence axes need an expert axis and a sequence axis "
                     "(expert degree " +
                     std::to_string(ep) + ", context degree " + std::to_string(cp) + ")");
    int64_t group = ep * (expert.foldTensor ? t : 1) * (expert.foldContext ? cp : 1);
    if (moe.experts % group != 0)
      return invalid("experts " + std::to_string(moe.experts) + " do not divide among the " +
                     std::to_string(group) + " ranks of the experts' group");
    PLACERT_TRY(divides(moe.expertFfn, "expert_ffn"));
    PLACERT_TRY(
        divides(moe.sharedExperts * moe.sharedExpertFfn, "shared_experts x shared_expert_ffn"));
    // Token dropping is not implemented: a capacity factor must leave room for every token.
    if (moe.capacityFactor > 0 &&
        moe.capacityFactor * static_cast<double>(moe.topK) < static_cast<double>(moe.experts))
      return invalid("capacity_factor " + std::to_string(moe.capacityFactor) +
                     " could drop tokens (it must be at least experts / top_k = " +
                     std::to_string(moe.experts) + " / " + std::to_string(moe.topK) +
                     "): the runtime routes without dropping");
    if (moe.auxLoss < 0)
      return invalid("aux_loss must not be negative");
  } else if (ep > 1) {
    return invalid("an expert axis of " + std::to_string(ep) +
                   " ranks for a model without experts");
  } else if (expert.foldTensor || expert.foldContext) {
    return invalid(std::string("experts folding the ") +
                   (expert.foldTensor ? "tensor" : "sequence") +
                   " axes for a model without experts");
  }
  // Tied embeddings with the head on another stage: the head holds a copy of the token
  // embedding, whose gradient allReduceEmbeddingGrads sums with the embedding's before the
  // step's reductions, on the whole accumulated gradients.
  bool embeddingCopy = shape.tiedEmbeddings && units.front().spec.stage != units.back().spec.stage;
  if (embeddingCopy &&
      (!denseLayout.placement.gradShard.empty() || denseLayout.placement.gradsTier != Tier::Device))
    return invalid("tied embeddings with the embedding on stage " +
                   std::to_string(units.front().spec.stage) + " and the head on stage " +
                   std::to_string(units.back().spec.stage) +
                   " need the gradients whole on the device, where the embedding's and its "
                   "copy's are summed before the step's reductions; they are " +
                   (denseLayout.placement.gradShard.empty()
                        ? std::string("on the host")
                        : "sharded over '" + join(denseLayout.placement.gradShard) + "'"));
  gpt::GptConfig config;
  config.shape = shape;
  config.microBatch = spec.microBatch;
  config.globalBatch = spec.globalBatch;
  config.tensorDegree = tensorDegree;
  config.tensorIndex = tensorIndex;
  config.sequenceParallel = sequenceParallel && tensorDegree > 1;
  config.regatherInputs = regatherInputs;
  config.recompute = recompute;
  config.contextDegree = contextDegree;
  config.contextIndex = contextIndex;
  config.contextMethod = context.method;
  // Folded, the experts' group and the routing ranks take the tensor axes too, and the experts'
  // group the sequence axes where they fold them, in mesh order.
  bool fold = expert.foldTensor;
  auto withAxes = [&](const AxisGroup &axes, bool tensor, bool context) {
    AxisGroup result;
    for (const Axis &axis : runtime.getMesh())
      if (contains(axes, axis.name) || (tensor && contains(tensorAxes, axis.name)) ||
          (context && contains(contextAxes, axis.name)))
        result.push_back(axis.name);
    return result;
  };
  expertGroupAxes = withAxes(expertAxes, fold, expert.foldContext);
  routingAxes = withAxes(batchAxes, fold, false);
  modelGroups.clear();
  if (fold || expert.foldContext)
    modelGroups = {expertGroupAxes, routingAxes};
  config.expertFold = fold;
  config.expertDegree = runtime.getGroupSize(expertGroupAxes);
  config.expertIndex = runtime.getGroupIndex(expertGroupAxes);
  config.batchLikeDegree = runtime.getGroupSize(routingAxes);
  config.microbatches = spec.microbatches;
  config.embeddingCopy = embeddingCopy;
  model = std::make_unique<gpt::GptModel>(config);
  layout.clear();
  layout.resize(units.size());
  // embed, then each layer followed by its experts when it is a mixture-of-experts layer, head.
  int64_t nextLayer = 0;
  for (size_t index = 0; index < units.size(); ++index) {
    GptUnit &unit = layout[index];
    bool expertUnit = index > 0 && layout[index - 1].kind == UnitKind::Layer &&
                      moe.isMoeLayer(layout[index - 1].layer);
    unit.kind = index == 0                  ? UnitKind::Embed
                : index + 1 == units.size() ? UnitKind::Head
                : expertUnit                ? UnitKind::Experts
                                            : UnitKind::Layer;
    unit.layer = unit.kind == UnitKind::Embed     ? -1
                 : unit.kind == UnitKind::Experts ? nextLayer - 1
                                                  : nextLayer++;
    if (units[index].spec.layer != unit.layer ||
        units[index].spec.experts != (unit.kind == UnitKind::Experts))
      return invalid(units[index].spec.name + ": unit " + std::to_string(index) +
                     " of a transformer is " +
                     (unit.kind == UnitKind::Experts ? "the experts of layer " : "layer ") +
                     std::to_string(unit.layer) + ", the program says " +
                     (units[index].spec.experts ? "the experts of layer " : "layer ") +
                     std::to_string(units[index].spec.layer));
    if (unit.kind == UnitKind::Experts && units[index].spec.stage != units[index - 1].spec.stage)
      return invalid(units[index].spec.name + " is on stage " +
                     std::to_string(units[index].spec.stage) + ", its layer on stage " +
                     std::to_string(units[index - 1].spec.stage));
    int64_t params = model->getLocalParams(unit.kind, unit.layer);
    if (params != units[index].spec.params)
      return invalid(
          units[index].spec.name + ": the plan says " + std::to_string(units[index].spec.params) +
          " parameters per device but the tensor-parallel split gives " + std::to_string(params));
  }
  return Status::success();
}

void GptCore::initialValues(const UnitState &state, std::vector<float> &local) {
  const GptUnit &unit = of(state);
  for (const gpt::TensorInfo &tensor : model->getTensors(unit.kind, unit.layer))
    for (int64_t r = 0; r < tensor.localRows; ++r)
      for (int64_t c = 0; c < tensor.localCols; ++c)
        local[static_cast<size_t>(tensor.localOffset + r * tensor.localCols + c)] =
            model->initialValue(seed, tensor,
                                tensor.globalRow(r) * tensor.cols + c + tensor.colOffset);
}

Status GptCore::activationBuffer(UnitState &state, int mb, Phase phase, bool receiving,
                                 int64_t elements, Buffer *&buffer) {
  GptStash &stash = of(state).stash[mb];
  if (receiving) {
    buffer = phase == Phase::Forward ? &stash.received : &stash.receivedGrad;
    if (elements != boundaryElements())
      return mismatch(state, "recv", elements, boundaryElements());
    *buffer = transient(Tier::Device, State::Activations, elements, spec.activationType);
    return Status::success();
  }
  buffer = phase == Phase::Forward ? &stash.output : &stash.inputGrad;
  return Status::success();
}

int64_t GptCore::getFullParams() const {
  int64_t total = 0;
  for (const GptUnit &unit : layout)
    total += model->getFullParams(unit.kind, unit.layer);
  return total;
}

int64_t GptCore::getFullIndex(const UnitState &state, int64_t localIndex) const {
  const GptUnit &unit = of(state);
  int64_t offset = 0;
  for (const GptUnit &previous : layout) {
    if (&previous == &unit)
      break;
    offset += model->getFullParams(previous.kind, previous.layer);
  }
  for (const gpt::TensorInfo &tensor : model->getTensors(unit.kind, unit.layer)) {
    int64_t size = tensor.localRows * tensor.localCols;
    if (localIndex < tensor.localOffset + size) {
      if ((tensor.split == gpt::Split::Replicated && tensorIndex != 0) || tensor.copy)
        return -1;
      return offset + tensor.logicalIndex(localIndex - tensor.localOffset);
    }
    offset += tensor.rows * tensor.cols;
  }
  return -1;
}

/// A run of a unit's local flat range in one of its tensors: `blocks` blocks of `elements`,
/// `stride` apart in the tensor (row-major [rows, cols]), back to back in the local unit.
struct TensorRun {
  const gpt::TensorInfo *tensor = nullptr;
  int64_t logical = 0, elements = 0;
  int64_t local = 0; ///< Where it starts in the local unit.
  int64_t blocks = 1, stride = 0;
};

/// The runs of the local flat range [begin, end) in `tensors` (one unit's, tensor-parallel
/// local shapes): the part of a tensor whose local rows are whole rows (every split but the row
/// split) is one contiguous run; the whole local rows of a row-parallel slice (a column slice
/// of each row) are one strided run.
std::vector<TensorRun> tensorRuns(const std::vector<gpt::TensorInfo> &tensors, int64_t begin,
                                  int64_t end) {
  std::vector<TensorRun> runs;
  for (const gpt::TensorInfo &tensor : tensors) {
    int64_t size = tensor.localRows * tensor.localCols;
    int64_t from = std::max(begin, tensor.localOffset);
    int64_t to = std::min(end, tensor.localOffset + size);
    for (int64_t i = from; i < to;) {
      int64_t k = i - tensor.localOffset;
      int64_t r = k / tensor.localCols, c = k % tensor.localCols;
      int64_t logical = tensor.logicalIndex(k);
      if (tensor.localCols == tensor.cols && tensor.segmentRows == 0) {
        runs.push_back({&tensor, logical, to - i, i, 1, 0});
        break;
      }
      if (tensor.localCols == tensor.cols) {
        // Segmented rows (experts, fused gate and up pieces): contiguous within a segment.
        int64_t segmentEnd = tensor.localOffset +
                             (r / tensor.segmentRows + 1) * tensor.segmentRows * tensor.localCols;
        int64_t length = std::min(to, segmentEnd) - i;
        runs.push_back({&tensor, logical, length, i, 1, 0});
        i += length;
        continue;
      }
      int64_t rows = c == 0 ? (to - i) / tensor.localCols : 0;
      if (rows > 1) {
        runs.push_back({&tensor, logical, tensor.localCols, i, rows, tensor.cols});
        i += rows * tensor.localCols;
        continue;
      }
      int64_t length = std::min(tensor.localCols - c, to - i);
      runs.push_back({&tensor, logical, length, i, 1, 0});
      i += length;
    }
  }
  return runs;
}

/// The transformer's checkpoint names its tensors as GptModel does (`embed.tokens` [vocab,
/// hidden], `layers.<l>.attn.qkv.weight` [(heads + 2·kv heads)·head dim, hidden] in the
/// group-major layout of GptModel::getQkvRows, `final_norm.bias` [hidden], ...), with the
/// optimizer state under the same names plus `.exp_avg` / `.exp_avg_sq`. The qkv tensor's column
/// split is a contiguous range of whole groups, so its local piece maps to one run of the global
/// tensor under any tensor degree.
Status GptCore::checkpointContents(bool save, CheckpointContents &contents) {
  std::vector<std::string> suffixes = checkpointSuffixes();
  for (const GptUnit &unit : layout)
    for (const gpt::TensorInfo &tensor : model->getTensors(unit.kind, unit.layer))
      for (const std::string &suffix : suffixes)
        contents.tensors[tensor.name + suffix] =
            !tensor.dims.empty() ? tensor.dims
            : tensor.isVector()  ? std::vector<int64_t>{tensor.rows}
                                 : std::vector<int64_t>{tensor.rows, tensor.cols};

  // This rank owns `owned` elements of its local unit; replicas of them (other coordinates on
  // the batch axes the optimizer is not sharded over, other tensor ranks for what tensor
  // parallelism replicates) do not write them. A load fills replicated tensors on every tensor
  // rank: their place in the model does not depend on the tensor rank.
  // The experts of an expert rank are its own: only the expert-data-parallel replicas (the
  // expert units' batch axes) hold copies.
  for (UnitState &state : units) {
    if (!state.local)
      continue;
    bool writer = isCheckpointWriter(state);
    int64_t shardIndex = runtime.getGroupIndex(placementOf(state).paramShard);
    const GptUnit &unit = of(state);
    std::vector<gpt::TensorInfo> tensors = model->getTensors(unit.kind, unit.layer);
    int64_t stored = state.params.getElements();
    int64_t ownedStart = shardIndex * stored + state.ownedOffset;
    std::vector<float> *states[] = {&state.master, &state.m, &state.v};
    for (const TensorRun &run : tensorRuns(tensors, ownedStart, ownedStart + state.owned)) {
      // The head's copy of the token embedding is saved as the embedding and loaded from it.
      bool replicated = run.tensor->split == gpt::Split::Replicated;
      if (save && (!writer || (replicated && tensorIndex != 0) || run.tensor->copy))
        continue;
      for (size_t s = 0; s < suffixes.size(); ++s)
        contents.shards.push_back({run.tensor->name + suffixes[s], run.logical, run.elements,
                                   states[s]->data() + (run.local - ownedStart), run.blocks,
                                   run.stride});
    }
    if (save)
      continue;
    // The stored params shard: the master values, rounded to the param dtype after the load.
    int64_t storedStart = shardIndex * stored;
    for (const TensorRun &run : tensorRuns(tensors, storedStart, storedStart + stored))
      contents.shards.push_back({run.tensor->name, run.logical, run.elements,
                                 state.params.get() + (run.local - storedStart), run.blocks,
                                 run.stride});
  }
  return Status::success();
}

/// A mixture-of-experts layer's experts for its computation (`grads`: their gradient target too).
Status expertTensorsOf(GptCore &core, UnitState &unit, const char *what, bool grads,
                       gpt::ExpertTensors &experts) {
  experts = gpt::ExpertTensors();
  UnitState *expertUnit = core.expertsOf(unit);
  if (!expertUnit)
    return Status::success();
  if (!core.hasWeights(*expertUnit))
    return core.invalid(std::string(what) + " of " + unit.spec.name + " before its experts' (" +
                        expertUnit->spec.name + ") params were gathered");
  experts.weights = core.weights(*expertUnit);
  if (grads) {
    // Whole on every tensor rank (their rows are the whole micro-batch's), so they accumulate
    // like the layer's under any parallelism.
    experts.grads = core.gradTarget(*expertUnit);
  }
  return Status::success();
}

Status GptCore::forward(int index, int mb, const std::vector<PlannedCollective> &planned) {
  UnitState *unit;
  PLACERT_TRY(unitOf(index, unit));
  GptUnit &piece = of(*unit);
  if (piece.kind == UnitKind::Experts)
    return invalid("forward of " + unit->spec.name +
                   ": the experts compute in their layer's forward");
  GptStash &stash = piece.stash[mb];
  if (!hasWeights(*unit))
    return invalid("forward of " + unit->spec.name + " before its params were gathered");
  const float *tiedTable = nullptr;
  if (piece.kind == UnitKind::Head && readsEmbedding()) {
    UnitState *embed = embedUnit();
    if (!embed || !hasWeights(*embed))
      return invalid("forward of " + unit->spec.name +
                     " before the tied embedding's params were gathered");
    tiedTable = weights(*embed);
  }
  const float *in = nullptr;
  if (piece.kind != UnitKind::Embed) {
    Buffer &buffer = input(*unit, mb);
    if (buffer.getElements() != boundaryElements())
      return invalid("forward of " + unit->spec.name + ": its input has not arrived");
    in = buffer.get();
  }
  float *out = nullptr;
  if (piece.kind != UnitKind::Head) {
    stash.output =
        transient(Tier::Device, State::Activations, boundaryElements(), spec.activationType);
    out = stash.output.get();
  }
  std::vector<int32_t> tokens, targets;
  sampleTokens(mb, tokens, targets);
  gpt::ExpertTensors experts;
  PLACERT_TRY(expertTensorsOf(*this, *unit, "forward", false, experts));
  PlannedCollectives collectives(*this, *unit, Phase::Forward, "forward", planned);
  double loss = 0;
  PLACERT_TRY(model->forward(piece.kind, piece.layer, weights(*unit), tiedTable, tokens.data(),
                             targets.data(), in, out, stash.saved, collectives, loss,
                             /*recomputing=*/false, experts));
  PLACERT_TRY(collectives.finish());
  if (tensorIndex == 0)
    stepLoss += loss;
  // The load-balancing loss is the global micro-batch's, the same on every rank: counted once.
  if (countsAuxLoss())
    stepLoss += stash.saved.auxLoss;
  return Status::success();
}

Status GptCore::recomputeUnit(int index, int mb, const std::vector<PlannedCollective> &planned) {
  UnitState *unit;
  PLACERT_TRY(unitOf(index, unit));
  GptUnit &piece = of(*unit);
  GptStash &stash = piece.stash[mb];
  PlannedCollectives collectives(*this, *unit, Phase::Backward, "recomputed forward", planned);
  if (piece.kind == UnitKind::Experts)
    return invalid("recompute of " + unit->spec.name +
                   ": the experts compute in their layer's forward");
  if (recompute == Recompute::Selective) {
    if (piece.kind != UnitKind::Layer)
      return invalid("selective recomputation of " + unit->spec.name + ", which has no attention");
    model->recomputeAttention(stash.saved);
    return collectives.finish();
  }
  if (recompute != Recompute::Full)
    return invalid("recompute of " + unit->spec.name + " but the activations are kept");
  if (!hasWeights(*unit))
    return invalid("recompute of " + unit->spec.name + " before its params were gathered");
  const float *tiedTable = nullptr;
  if (piece.kind == UnitKind::Head && readsEmbedding()) {
    UnitState *embed = embedUnit();
    if (!embed || !hasWeights(*embed))
      return invalid("recompute of " + unit->spec.name +
                     " before the tied embedding's params were gathered");
    tiedTable = weights(*embed);
  }
  Buffer &buffer = input(*unit, mb);
  if (buffer.getElements() != boundaryElements())
    return invalid("recompute of " + unit->spec.name + ": its stored input is missing");
  std::vector<float> scratch(static_cast<size_t>(boundaryElements()));
  std::vector<int32_t> tokens, targets;
  sampleTokens(mb, tokens, targets);
  double loss = 0;
  gpt::ExpertTensors experts;
  PLACERT_TRY(expertTensorsOf(*this, *unit, "recompute", false, experts));
  PLACERT_TRY(model->forward(piece.kind, piece.layer, weights(*unit), tiedTable, tokens.data(),
                             targets.data(), buffer.get(), scratch.data(), stash.saved, collectives,
                             loss, /*recomputing=*/true, experts));
  return collectives.finish();
}

Status GptCore::backward(int index, int mb, const std::vector<PlannedCollective> &planned) {
  UnitState *unit;
  PLACERT_TRY(unitOf(index, unit));
  const Options &options = runtime.getOptions();
  if (options.dieAtStep == step && options.dieRank == runtime.getRank() && !died) {
    std::fprintf(stderr, "placert: rank %d: fault injection: exiting in the middle of step %lld\n",
                 runtime.getRank(), static_cast<long long>(step));
    std::fflush(stderr);
    std::_Exit(2);
  }
  GptUnit &piece = of(*unit);
  GptStash &stash = piece.stash[mb];
  if (piece.kind == UnitKind::Experts)
    return invalid("backward of " + unit->spec.name +
                   ": the experts compute in their layer's backward");
  if (!hasWeights(*unit))
    return invalid("backward of " + unit->spec.name + " before its params were gathered");
  const float *tiedTable = nullptr;
  float *tiedGrads = nullptr;
  if (piece.kind == UnitKind::Head && readsEmbedding()) {
    UnitState *embed = embedUnit();
    if (!embed || !hasWeights(*embed))
      return invalid("backward of " + unit->spec.name +
                     " before the tied embedding's params were gathered");
    tiedTable = weights(*embed);
    tiedGrads = gradTarget(*embed);
  }
  const float *in = nullptr;
  float *inGrad = nullptr;
  if (piece.kind != UnitKind::Embed) {
    Buffer &buffer = input(*unit, mb);
    if (buffer.getElements() != boundaryElements())
      return invalid("backward of " + unit->spec.name + ": its stored input is missing");
    in = buffer.get();
    stash.inputGrad =
        transient(Tier::Device, State::Activations, boundaryElements(), spec.activationType);
    inGrad = stash.inputGrad.get();
  }
  const float *outGrad = nullptr;
  if (piece.kind != UnitKind::Head) {
    Buffer &buffer = outputGrad(*unit, mb);
    if (buffer.getElements() != boundaryElements())
      return invalid("backward of " + unit->spec.name + ": its output gradient has not arrived");
    outGrad = buffer.get();
  }
  // Under sequence parallelism the replicated tensors' gradients of one micro-batch are partial
  // sums until allReduceReplicatedGrads; they are kept apart from the accumulated ones.
  bool separate = sequenceParallel && tensorDegree > 1 && piece.kind != UnitKind::Embed;
  float *grads = gradTarget(*unit, separate);
  std::vector<int32_t> tokens, targets;
  sampleTokens(mb, tokens, targets);
  PlannedCollectives collectives(*this, *unit, Phase::Backward, "backward", planned);
  gpt::ExpertTensors experts;
  PLACERT_TRY(expertTensorsOf(*this, *unit, "backward", true, experts));
  Status status =
      model->backward(piece.kind, piece.layer, weights(*unit), tiedTable, tokens.data(), in,
                      outGrad, inGrad, grads, tiedGrads, stash.saved, collectives, experts);
  if (!status.isOk())
    return invalid("backward of " + unit->spec.name + ": " + status.getMessage());
  PLACERT_TRY(collectives.finish());
  stash.saved = gpt::UnitActivations();
  return Status::success();
}

Status GptCore::allReduceReplicatedGrads(int index, int mb, const AxisGroup &axes, int64_t elements,
                                         DType dtype) {
  (void)mb;
  UnitState *unit;
  PLACERT_TRY(unitOf(index, unit));
  GptUnit &piece = of(*unit);
  if (!sameSet(axes, tensorAxes))
    return invalid("replicated-gradient all-reduce of " + unit->spec.name + " over '" + join(axes) +
                   "', which are not the tensor axes");
  std::vector<std::pair<int64_t, int64_t>> ranges =
      model->getReplicatedRanges(piece.kind, piece.layer);
  int64_t total = 0;
  for (const auto &range : ranges)
    total += range.second;
  if (elements != total)
    return mismatch(*unit, "replicated-gradient all-reduce", elements, total);
  if (!unit->gradScratch.isAllocated())
    return invalid("replicated-gradient all-reduce of " + unit->spec.name + " before its backward");
  float *grads = unit->gradScratch.get();
  if (!runtime.getOptions().skipGradReduction) {
    std::vector<float> packed;
    packed.reserve(static_cast<size_t>(total));
    for (const auto &[offset, size] : ranges)
      packed.insert(packed.end(), grads + offset, grads + offset + size);
    Communicator *group;
    PLACERT_TRY(runtime.getGroup(axes, group));
    PLACERT_TRY(runtime.allReduce(*group, join(axes), packed.data(), total,
                                  info(State::Grads, Phase::Backward, dtype)));
    const float *next = packed.data();
    for (const auto &[offset, size] : ranges) {
      std::copy(next, next + size, grads + offset);
      next += size;
    }
  }
  // Whole gradients on the device accumulate here; sharded ones go on to their reduce-scatter.
  const StatePlacement &placement = placementOf(*unit);
  if (placement.gradShard.empty() && placement.gradsTier == Tier::Device) {
    for (int64_t i = 0; i < unit->grads.getElements(); ++i)
      unit->grads.get()[i] += grads[i];
    unit->gradScratch.release();
  }
  return Status::success();
}

Status GptCore::allReduceEmbeddingGrads(int index, const AxisGroup &axes, int peerStage,
                                        int64_t elements, DType dtype) {
  UnitState *unit;
  PLACERT_TRY(unitOf(index, unit));
  const GptUnit &piece = of(*unit);
  const char *what = "word-embedding gradient all-reduce";
  if (!model->getConfig().embeddingCopy ||
      (piece.kind != UnitKind::Embed && piece.kind != UnitKind::Head))
    return invalid(std::string(what) + " of " + unit->spec.name +
                   ", which is neither the word embedding nor its copy on another stage");
  const UnitSpec &peer = piece.kind == UnitKind::Embed ? units.back().spec : units.front().spec;
  if (axes.size() != 1 || axes[0] != layersAxis || peerStage != peer.stage)
    return invalid(std::string(what) + " of " + unit->spec.name + " over '" + join(axes) +
                   "' with stage " + std::to_string(peerStage) + ", but " + peer.name +
                   " is on stage " + std::to_string(peer.stage) + " of the pipeline axis '" +
                   layersAxis + "'");
  const gpt::TensorInfo *table = nullptr;
  std::vector<gpt::TensorInfo> tensors = model->getTensors(piece.kind, piece.layer);
  for (const gpt::TensorInfo &tensor : tensors)
    if (tensor.name == "embed.tokens")
      table = &tensor;
  if (!table)
    return invalid(std::string(what) + " of " + unit->spec.name + ", which has no token table");
  int64_t size = table->localRows * table->localCols;
  if (elements != size)
    return mismatch(*unit, what, elements, size);
  if (runtime.getOptions().skipGradReduction)
    return Status::success();
  Communicator *group;
  PLACERT_TRY(runtime.getGroup(axes, group));
  // After every activation message of the step: a tag none of them has (2·mb + phase).
  int tag = static_cast<int>(2 * spec.microbatches);
  return runtime.pairAllReduce(*group, layersAxis, unit->grads.get() + table->localOffset, size,
                               peerStage, tag, info(State::Grads, Phase::Step, dtype));
}

} // namespace

GptTrainer::GptTrainer(Runtime &runtime, GptShape shape, TrainingSpec spec,
                       StatePlacement placement, Recompute recompute, bool sequenceParallel,
                       ContextParallelism context, ExpertParallelism expert)
    : Trainer(std::make_unique<GptCore>(runtime, std::move(shape), std::move(spec),
                                        std::move(placement), recompute, sequenceParallel,
                                        std::move(context), std::move(expert))) {}

void GptTrainer::setRegatherInputs(bool regather) {
  static_cast<GptCore &>(*core).regatherInputs = regather;
}

Status GptTrainer::forward(int unit, int mb, const std::vector<PlannedCollective> &collectives) {
  return static_cast<GptCore &>(*core).forward(unit, mb, collectives);
}

Status GptTrainer::recompute(int unit, int mb, const std::vector<PlannedCollective> &collectives) {
  return static_cast<GptCore &>(*core).recomputeUnit(unit, mb, collectives);
}

Status GptTrainer::backward(int unit, int mb, const std::vector<PlannedCollective> &collectives) {
  return static_cast<GptCore &>(*core).backward(unit, mb, collectives);
}

Status GptTrainer::allReduceReplicatedGrads(int unit, int mb, const AxisGroup &axes,
                                            int64_t elements, DType dtype) {
  return static_cast<GptCore &>(*core).allReduceReplicatedGrads(unit, mb, axes, elements, dtype);
}

Status GptTrainer::allReduceEmbeddingGrads(int unit, const AxisGroup &axes, int peerStage,
                                           int64_t elements, DType dtype) {
  return static_cast<GptCore &>(*core).allReduceEmbeddingGrads(unit, axes, peerStage, elements,
                                                               dtype);
}

} // namespace placert
