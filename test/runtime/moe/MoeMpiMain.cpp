// A mixture-of-experts transformer trained by placert on MPI ranks under expert parallelism, with
// the step program written by hand the way `placec compile` writes one: each unit's compute call
// lists the collectives its math performs (the trainer fails with "plan mismatch" otherwise), the
// state ops follow the placements. `--config NAME` picks the mesh and the model (below); the other
// flags are placert's (`--check` compares with the single-device reference, `--save`/`--resume`
// checkpoints). The expected element counts are written from docs/runtime.md's layout and the
// MoE contract's formulas, independently of the runtime's code:
//   per-source-rank capacity C = ceil(capacity_factor · tokens · top_k / experts) rows per expert,
//   dispatch and combine all-to-alls of a rank's whole buffer, experts · C · hidden elements
//   (as every all-to-all of the plan counts; (ep − 1) / ep of it leaves the rank).
#include "placert/placert.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace placert;

namespace {

struct Config {
  std::vector<Axis> mesh;
  GptShape shape;
  int64_t microBatch = 1, microbatches = 1;
  bool sequenceParallel = false;
  StatePlacement dense, experts;
  int stages = 1;
  Recompute recompute = Recompute::None;
  /// The experts fold the tensor axes (`expert_tensor = fold`): whole experts over ep × tp, each
  /// tensor rank routing its own sequence shard.
  bool foldTensor = false;
  /// Adam, except for the models with biases: the key bias of attention has a zero gradient (a
  /// constant added to every score of a row leaves the softmax as it is), so its computed
  /// gradient is rounding noise, which Adam's normalisation turns into updates of ±lr whose sign
  /// depends on the summation order. SGD keeps noise as small as it is.
  OptimizerKind optimizer = OptimizerKind::Adam;
  double learningRate = 1e-3;
};

/// The model every configuration starts from: 2 layers, hidden 16, 4 heads, seq 8, vocab 32,
/// 4 experts of width 24, top-2, softmax router, capacity factor 2 (= experts / top_k: nothing
/// drops), aux loss 0.01.
GptShape baseShape() {
  GptShape shape{"moe", 2, 16, 4, 8, 32, 32, true};
  shape.moe.experts = 4;
  shape.moe.topK = 2;
  shape.moe.expertFfn = 24;
  shape.moe.capacityFactor = 2.0;
  shape.moe.auxLoss = 0.01;
  return shape;
}

bool makeConfig(const std::string &name, Config &config) {
  config.shape = baseShape();
  GptShape &shape = config.shape;
  if (name == "ep_dp") {
    // dp 2 × ep 2, LLaMA layout (swiglu: fused gate and up experts), one shared expert of width 8,
    // two micro-batches (the aux loss of each global micro-batch).
    config.mesh = {{"dp", AxisKind::Batch, 2}, {"ep", AxisKind::Expert, 2}};
    shape.swiglu = shape.rmsNorm = shape.rope = true;
    shape.bias = false;
    shape.tiedEmbeddings = false;
    shape.moe.sharedExperts = 1;
    shape.moe.sharedExpertFfn = 8;
    config.microBatch = 1;
    config.microbatches = 2;
    return true;
  }
  if (name == "ep_dp_zero") {
    // ZeRO-1: dense optimizer state sharded over dp × ep, the experts' over dp (their
    // expert-data-parallel group); dropless routing.
    config.mesh = {{"dp", AxisKind::Batch, 2}, {"ep", AxisKind::Expert, 2}};
    shape.swiglu = shape.rmsNorm = true;
    shape.bias = false;
    shape.moe.capacityFactor = 0;
    config.dense.optimizerShard = {"dp", "ep"};
    config.experts.optimizerShard = {"dp"};
    config.microBatch = 2;
    return true;
  }
  if (name == "ep_tp") {
    // ep 2 × tp 2, GPT-2 layout (gelu experts with biases), layer 0 dense, layer 1 MoE, a sigmoid
    // router with top-1 and capacity factor 4 (= experts / top_k).
    config.mesh = {{"ep", AxisKind::Expert, 2}, {"tp", AxisKind::Tensor, 2}};
    config.optimizer = OptimizerKind::Sgd;
    config.learningRate = 0.1;
    shape.moe.denseLayers = 1;
    shape.moe.topK = 1;
    shape.moe.capacityFactor = 4.0;
    shape.moe.router = MoeRouter::Sigmoid;
    config.microBatch = 2;
    return true;
  }
  if (name == "ep_tp_sp") {
    // ep 2 × tp 2 with sequence parallelism, biases, a shared expert, full recomputation.
    config.mesh = {{"ep", AxisKind::Expert, 2}, {"tp", AxisKind::Tensor, 2}};
    config.optimizer = OptimizerKind::Sgd;
    config.learningRate = 0.1;
    shape.moe.sharedExperts = 1;
    shape.moe.sharedExpertFfn = 8;
    config.sequenceParallel = true;
    config.recompute = Recompute::Full;
    config.microBatch = 2;
    return true;
  }
  if (name == "ep_tp_fold") {
    // ep 2 × tp 2 folded (docs/runtime.md, "Folded experts"), sequence parallelism, LLaMA layout,
    // dropless, the load-balancing loss: 4 experts over the group of 4, one whole expert a rank.
    config.mesh = {{"ep", AxisKind::Expert, 2}, {"tp", AxisKind::Tensor, 2}};
    shape.swiglu = shape.rmsNorm = shape.rope = true;
    shape.bias = false;
    shape.moe.capacityFactor = 0;
    config.sequenceParallel = true;
    config.foldTensor = true;
    config.microBatch = 2;
    return true;
  }
  if (name == "ep_pp") {
    // pp 2 × ep 2, 4 layers, every second layer MoE (layers 0 and 2: one on each stage), 1F1B
    // over 2 micro-batches, dropless.
    config.mesh = {{"pp", AxisKind::Layers, 2}, {"ep", AxisKind::Expert, 2}};
    shape.layers = 4;
    shape.moe.moeEvery = 2;
    shape.moe.capacityFactor = 0;
    shape.tiedEmbeddings = false;
    shape.swiglu = true;
    shape.bias = false;
    config.microbatches = 2;
    config.stages = 2;
    return true;
  }
  // ep_dp_<k>: the model of the checkpoint test, on dp × ep meshes of 4 ranks.
  if (name == "ckpt_ep2" || name == "ckpt_ep4" || name == "ckpt_ep1") {
    int ep = name == "ckpt_ep2" ? 2 : name == "ckpt_ep4" ? 4 : 1;
    if (ep < 4)
      config.mesh.push_back({"dp", AxisKind::Batch, 4 / ep});
    if (ep > 1)
      config.mesh.push_back({"ep", AxisKind::Expert, ep});
    shape.swiglu = true;
    shape.bias = false;
    shape.moe.sharedExperts = 1;
    shape.moe.sharedExpertFfn = 8;
    return true;
  }
  return false;
}

int64_t product(const std::vector<Axis> &mesh, AxisKind kind) {
  int64_t degree = 1;
  for (const Axis &axis : mesh)
    if (axis.kind == kind)
      degree *= axis.size;
  return degree;
}

AxisGroup axesOf(const std::vector<Axis> &mesh, std::initializer_list<AxisKind> kinds) {
  AxisGroup axes;
  for (const Axis &axis : mesh)
    for (AxisKind kind : kinds)
      if (axis.kind == kind)
        axes.push_back(axis.name);
  return axes;
}

/// One unit of the hand-written plan.
struct PlanUnit {
  std::string name;
  int layer = 0, stage = 0;
  bool experts = false, moe = false;
  enum Kind { Embed, Layer, Experts, Head } kind = Layer;
  int64_t params = 0;     ///< Per device, after the tensor- and expert-parallel splits.
  int64_t replicated = 0; ///< Elements tensor parallelism replicates (sequence parallelism).
};

struct Plan {
  Config config;
  std::vector<PlanUnit> units;
  int64_t t = 1, ep = 1, batchLike = 1, rows = 0, boundary = 0;
  AxisGroup tp, epAxes;
  /// The experts' group and the ranks that route different tokens: the expert axes and the
  /// batch-like ones, with the tensor axes too when folded (mesh order); `routed`: the rows an
  /// MoE layer routes on a rank.
  AxisGroup groupAxes, routingAxes;
  int64_t group = 1, routing = 1, routed = 0;
};

Plan makePlan(const Config &config) {
  Plan plan;
  plan.config = config;
  const GptShape &m = config.shape;
  const MoeShape &e = m.moe;
  plan.t = product(config.mesh, AxisKind::Tensor);
  plan.ep = product(config.mesh, AxisKind::Expert);
  plan.batchLike = product(config.mesh, AxisKind::Batch) * plan.ep;
  plan.tp = axesOf(config.mesh, {AxisKind::Tensor});
  plan.epAxes = axesOf(config.mesh, {AxisKind::Expert});
  plan.rows = config.microBatch * m.seq;
  plan.boundary = config.sequenceParallel ? plan.rows * m.hidden / plan.t : plan.rows * m.hidden;
  const bool fold = config.foldTensor;
  plan.groupAxes = axesOf(config.mesh, fold ? std::initializer_list<AxisKind>{AxisKind::Expert,
                                                                              AxisKind::Tensor}
                                            : std::initializer_list<AxisKind>{AxisKind::Expert});
  plan.routingAxes = axesOf(config.mesh, fold ? std::initializer_list<AxisKind>{AxisKind::Batch,
                                                                                AxisKind::Expert,
                                                                                AxisKind::Tensor}
                                              : std::initializer_list<AxisKind>{AxisKind::Batch,
                                                                                AxisKind::Expert});
  plan.group = fold ? plan.ep * plan.t : plan.ep;
  plan.routing = fold ? plan.batchLike * plan.t : plan.batchLike;
  plan.routed = fold ? plan.rows / plan.t : plan.rows;
  const int64_t h = m.hidden, t = plan.t, d = h / m.heads, fused = m.swiglu ? 2 : 1;
  const int64_t norm = m.rmsNorm ? h : 2 * h, bias = m.bias ? 1 : 0;
  auto stageOf = [&](int64_t layer) { return static_cast<int>(layer * config.stages / m.layers); };
  PlanUnit embed{"embed", -1, 0};
  embed.kind = PlanUnit::Embed;
  embed.params = m.vocab / t * h + (m.rope ? 0 : m.seq * h);
  plan.units.push_back(embed);
  for (int64_t l = 0; l < m.layers; ++l) {
    PlanUnit layer{"layer." + std::to_string(l), static_cast<int>(l), stageOf(l)};
    layer.moe = e.isMoeLayer(l);
    // Norms; qkv [3h, h] column (+ bias); proj [h, h] row (+ replicated bias).
    layer.params = 2 * norm + 3 * h * h / t + bias * 3 * h / t + h * h / t + bias * h;
    layer.replicated = 2 * norm + bias * h;
    (void)d;
    if (!layer.moe) {
      // The dense MLP: up (and gate) [ffn, h] column, down [h, ffn] row, biases.
      layer.params += (fused + 1) * m.ffn * h / t + bias * (fused * m.ffn / t + h);
      layer.replicated += bias * h;
    } else {
      // The router [E, h] (replicated) and the shared experts, one MLP of width S · f_s.
      int64_t width = e.sharedExperts * e.sharedExpertFfn;
      // Its gradient is whole on every tensor rank (the block sees the gathered rows): not part
      // of sequence parallelism's all-reduce; folded, each tensor rank routes its own rows and
      // the router's gradients are summed with the norms'.
      layer.params += e.experts * h;
      if (fold)
        layer.replicated += e.experts * h;
      if (width > 0) {
        layer.params += (fused + 1) * width * h / t + bias * (fused * width / t + h);
        layer.replicated += bias * h;
      }
    }
    plan.units.push_back(layer);
    if (layer.moe) {
      // experts / ep experts: up [fused · f, h] column, down [h, f] row, biases; folded,
      // experts / (ep · t) whole ones.
      PlanUnit experts{layer.name + ".experts", static_cast<int>(l), layer.stage, true};
      experts.kind = PlanUnit::Experts;
      int64_t local = e.experts / plan.group, f = e.expertFfn, split = fold ? 1 : t;
      experts.params = local * ((fused + 1) * f * h / split + bias * (fused * f / split + h));
      experts.replicated = 0; // the experts see every row too
      plan.units.push_back(experts);
    }
  }
  PlanUnit head{"head", static_cast<int>(m.layers), config.stages - 1};
  head.kind = PlanUnit::Head;
  head.params = norm + (m.tiedEmbeddings ? 0 : m.vocab / t * h);
  head.replicated = norm;
  plan.units.push_back(head);
  return plan;
}

using List = std::vector<PlannedCollective>;

/// The collectives of a unit's computation, in the order of the math (docs/runtime.md).
List collectivesOf(const Plan &plan, const PlanUnit &unit, bool forward) {
  const Config &c = plan.config;
  const GptShape &m = c.shape;
  const MoeShape &e = m.moe;
  const int64_t R = plan.rows, h = m.hidden, t = plan.t, ep = plan.ep;
  const bool sp = c.sequenceParallel && t > 1, parallel = t > 1;
  List list;
  auto tp = [&](Collective collective, int64_t elements) {
    list.push_back({collective, plan.tp, elements, DType::FP32});
  };
  auto gather = [&] {
    if (sp)
      tp(Collective::AllGather, R * h);
  };
  auto reduce = [&] {
    if (sp)
      tp(Collective::ReduceScatter, R * h);
    else if (parallel)
      tp(Collective::AllReduce, R * h);
  };
  // Dispatch and combine: E · C · h, C the capacity; dropless: the plan's expectation T · k · h
  // (the routing decides; the trainer checks only the kind and the axes).
  const int64_t T = plan.routed; // folded: this tensor rank's own rows
  const bool fold = c.foldTensor;
  int64_t capacity = e.capacityFactor > 0
                         ? static_cast<int64_t>(std::ceil(
                               e.capacityFactor * static_cast<double>(T * e.topK) / e.experts))
                         : 0;
  int64_t exchanged = capacity > 0 ? e.experts * capacity * h : T * e.topK * h;
  auto expertExchange = [&] {
    if (ep > 1)
      list.push_back({Collective::AllToAll, plan.groupAxes, exchanged, DType::FP32});
  };
  switch (unit.kind) {
  case PlanUnit::Embed:
    if (forward)
      reduce();
    else
      gather();
    break;
  case PlanUnit::Head:
    if (forward) {
      gather();
      if (parallel)
        tp(Collective::AllGather, 3 * R * t); // the vocabulary-parallel cross-entropy
    } else {
      reduce();
    }
    break;
  case PlanUnit::Experts:
    break;
  case PlanUnit::Layer:
    // Folded, an MoE layer's block has no pair of its own (its rows are the rank's own).
    if (forward) {
      gather();
      reduce();
      if (!(unit.moe && fold))
        gather();
      if (unit.moe) {
        if (e.auxLoss > 0 && plan.routing > 1)
          list.push_back({Collective::AllReduce, plan.routingAxes, 2 * e.experts, DType::FP32});
        expertExchange();
        expertExchange();
      }
      if (!(unit.moe && fold))
        reduce();
    } else {
      if (!(unit.moe && fold))
        gather();
      if (unit.moe) {
        if (parallel && e.topK > 1 && !fold) // the combine weights' gradients, b·s·top_k
          tp(Collective::AllReduce, R * e.topK);
        expertExchange();
        expertExchange();
      }
      if (!(unit.moe && fold))
        reduce();
      gather();
      reduce();
    }
    break;
  }
  return list;
}

/// The state layout of a unit's kind: P, G, O and what the step all-reduces.
struct Layout {
  StatePlacement placement;
  AxisGroup stepReduce;
};

Layout layoutOf(const Plan &plan, const PlanUnit &unit) {
  Layout layout;
  layout.placement = unit.experts ? plan.config.experts : plan.config.dense;
  AxisGroup axes = unit.experts ? axesOf(plan.config.mesh, {AxisKind::Batch})
                                : axesOf(plan.config.mesh, {AxisKind::Batch, AxisKind::Expert});
  for (const std::string &axis : axes) {
    bool sharded = false;
    for (const std::string &other : layout.placement.optimizerShard)
      sharded |= other == axis;
    if (!sharded)
      layout.stepReduce.push_back(axis);
  }
  return layout;
}

int64_t groupSize(const std::vector<Axis> &mesh, const AxisGroup &axes) {
  int64_t size = 1;
  for (const std::string &name : axes)
    for (const Axis &axis : mesh)
      if (axis.name == name)
        size *= axis.size;
  return size;
}

std::vector<StageProgram> makePrograms(const Plan &plan, GptTrainer &trainer) {
  const Config &c = plan.config;
  std::vector<StageProgram> programs(static_cast<size_t>(c.stages));
  for (int s = 0; s < c.stages; ++s) {
    std::vector<int> local; // indices of the compute units of the stage, in model order
    std::vector<int> all;   // every unit of the stage
    for (size_t i = 0; i < plan.units.size(); ++i)
      if (plan.units[i].stage == s) {
        all.push_back(static_cast<int>(i));
        if (!plan.units[i].experts)
          local.push_back(static_cast<int>(i));
      }
    StageProgram &program = programs[static_cast<size_t>(s)];
    int last = c.stages - 1;
    program.forward = [&plan, &trainer, local, s, last](int mb) -> Status {
      if (s > 0)
        PLACERT_TRY(trainer.recvActivations(local.front(), mb, s - 1, plan.boundary, DType::FP32,
                                            Phase::Forward));
      for (int i : local)
        PLACERT_TRY(trainer.forward(i, mb, collectivesOf(plan, plan.units[i], true)));
      if (s < last)
        PLACERT_TRY(trainer.sendActivations(local.back(), mb, s + 1, plan.boundary, DType::FP32,
                                            Phase::Forward));
      return Status::success();
    };
    program.backward = [&plan, &trainer, local, s, last](int mb) -> Status {
      const Config &c = plan.config;
      if (s < last)
        PLACERT_TRY(trainer.recvActivations(local.back(), mb, s + 1, plan.boundary, DType::FP32,
                                            Phase::Backward));
      for (auto it = local.rbegin(); it != local.rend(); ++it) {
        const PlanUnit &unit = plan.units[static_cast<size_t>(*it)];
        if (c.recompute == Recompute::Full && unit.kind == PlanUnit::Layer)
          PLACERT_TRY(trainer.recompute(*it, mb, collectivesOf(plan, unit, true)));
        PLACERT_TRY(trainer.backward(*it, mb, collectivesOf(plan, unit, false)));
        if (c.sequenceParallel && plan.t > 1 && unit.kind != PlanUnit::Embed) {
          PLACERT_TRY(
              trainer.allReduceReplicatedGrads(*it, mb, plan.tp, unit.replicated, DType::FP32));
          // The experts' replicated down biases, when the model has biases.
          const PlanUnit *next = static_cast<size_t>(*it + 1) < plan.units.size()
                                     ? &plan.units[static_cast<size_t>(*it + 1)]
                                     : nullptr;
          if (next && next->experts && next->replicated > 0)
            PLACERT_TRY(trainer.allReduceReplicatedGrads(*it + 1, mb, plan.tp, next->replicated,
                                                         DType::FP32));
        }
      }
      if (s > 0)
        PLACERT_TRY(trainer.sendActivations(local.front(), mb, s - 1, plan.boundary, DType::FP32,
                                            Phase::Backward));
      return Status::success();
    };
    program.step = [&plan, &trainer, all]() -> Status {
      for (int i : all) {
        const PlanUnit &unit = plan.units[static_cast<size_t>(i)];
        Layout layout = layoutOf(plan, unit);
        const AxisGroup &O = layout.placement.optimizerShard;
        int64_t owned = unit.params / groupSize(plan.config.mesh, O);
        if (!O.empty())
          PLACERT_TRY(trainer.reduceScatterGrads(i, O, unit.params, DType::FP32, Phase::Step));
        if (!layout.stepReduce.empty())
          PLACERT_TRY(trainer.allReduceGrads(i, layout.stepReduce, O.empty() ? unit.params : owned,
                                             DType::FP32));
        PLACERT_TRY(trainer.optimizerUpdate(i, owned));
        if (!O.empty())
          PLACERT_TRY(trainer.allGatherParams(i, O, unit.params, DType::FP32));
      }
      return Status::success();
    };
  }
  return programs;
}

} // namespace

int main(int argc, char **argv) {
  // --config NAME is this program's; the rest are placert's options.
  std::string name;
  std::vector<char *> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      name = argv[++i];
    else
      rest.push_back(argv[i]);
  }
  Config config;
  if (!makeConfig(name, config)) {
    std::fprintf(stderr,
                 "usage: %s --config ep_dp|ep_dp_zero|ep_tp|ep_tp_sp|ep_tp_fold|ep_pp|ckpt_ep1|"
                 "ckpt_ep2|ckpt_ep4 [placert options]\n",
                 argv[0]);
    return 1;
  }
  int count = static_cast<int>(rest.size());
  rest.push_back(nullptr);
  char **args = rest.data();
  Options options;
  bool help = false;
  Status status = parseOptions(count, args, options, help);
  if (!status.isOk() || help) {
    std::fprintf(stderr, "%s\n", status.getMessage().c_str());
    return status.isOk() ? 0 : 1;
  }
  std::unique_ptr<Runtime> runtime;
  status = Runtime::create(&count, &args, config.mesh, options, runtime);
  if (!status.isOk()) {
    std::fprintf(stderr, "placert: %s\n", status.getMessage().c_str());
    return 1;
  }
  Plan plan = makePlan(config);
  TrainingSpec spec;
  spec.run = name;
  spec.strategy = name;
  spec.microBatch = config.microBatch;
  spec.microbatches = config.microbatches;
  spec.globalBatch =
      config.microBatch * config.microbatches * product(config.mesh, AxisKind::Batch) * plan.ep;
  spec.schedule = Schedule::OneFOneB;
  spec.optimizer = config.optimizer;
  spec.learningRate = config.learningRate;
  spec.optimizerBytesPerParam = config.optimizer == OptimizerKind::Adam ? 8 : 0;
  ContextParallelism context;
  ExpertParallelism expert{plan.epAxes, static_cast<int>(plan.ep), config.experts,
                           config.foldTensor};
  GptTrainer trainer(*runtime, config.shape, spec, config.dense, config.recompute,
                     config.sequenceParallel, context, expert);
  for (const PlanUnit &unit : plan.units)
    trainer.addUnit({unit.name, unit.layer, unit.stage, unit.params, unit.experts});
  status = trainer.setup();
  if (!status.isOk())
    runtime->abort(status);
  std::vector<StageProgram> programs = makePrograms(plan, trainer);
  return trainer.train(programs);
}
