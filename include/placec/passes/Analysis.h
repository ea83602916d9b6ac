// Analyses over a StepPlan: memory per device (per state, persistent and transient, device and
// host), communication per collective × axis × state × phase, and step time.
#ifndef PLACEC_PASSES_ANALYSIS_H
#define PLACEC_PASSES_ANALYSIS_H

#include "placec/passes/StepPlan.h"

#include "llvm/ADT/ArrayRef.h"

#include <optional>
#include <string>
#include <vector>

namespace placec::analysis {

/// Bytes per device (or per node for host memory) by state.
struct MemoryBreakdown {
  double params = 0;
  double grads = 0;
  double optimizer = 0;
  /// Activations kept for the backward at the peak (all in-flight micro-batches).
  double activations = 0;
  /// Gather buffers and other memory alive only around a use.
  double transient = 0;
  /// The most memory in use at any point of the step.
  double peak = 0;

  double getPersistent() const { return params + grads + optimizer; }
};

struct StageMemory {
  int stage = 0;
  MemoryBreakdown device;
  MemoryBreakdown host;
};

struct MemoryReport {
  /// The stage with the highest device peak (the only stage without a pipeline).
  MemoryBreakdown device;
  MemoryBreakdown host;
  std::vector<StageMemory> stages;
  /// False for an abstract model: activations are unknown and reported as such.
  bool activationsKnown = true;
  double deviceCapacity = 0;
  std::optional<double> hostCapacity;
  bool fitsDevice = true;
  bool fitsHost = true;
};

/// The link a collective's traffic crosses.
enum class LinkClass { IntraNode, InterNode, Host };
llvm::StringRef toString(LinkClass link);

/// One entry per collective kind × axis group × state × phase.
struct CommEntry {
  /// The pipeline stage whose devices make these calls (0 without a pipeline).
  int stage = 0;
  std::string axis; ///< The group's axis names joined with ',' (`dp`, `node,gpu`).
  std::vector<unsigned> axes;
  int64_t groupSize = 1;
  plan::OpKind collective = plan::OpKind::AllReduce;
  ir::State state = ir::State::Grads;
  plan::Phase phase = plan::Phase::Step;
  /// Calls per step on each device.
  int64_t count = 0;
  /// The collective's full buffer in bytes (all-reduce buffer, all-gather output, reduce-scatter
  /// input), per call.
  double messageBytes = 0;
  /// messageBytes × count: every call's buffer together (calls on different units may differ in
  /// size, so messageBytes is then their mean).
  double totalBytes = 0;
  /// Bytes each device puts on the wire per step with ring algorithms, all calls together.
  double sentBytes = 0;
  LinkClass link = LinkClass::IntraNode;
  /// α–β time per step, all calls together.
  double timeSeconds = 0;
};

struct TimeReport {
  /// False when the model says too little to time the step (an abstract model).
  bool known = true;
  double flopsPerStep = 0; ///< Model FLOPs of the step, all devices (recomputation excluded).
  double computeSeconds = 0;
  double exposedCommSeconds = 0;
  double bubbleSeconds = 0;
  double stepSeconds = 0;
  double mfu = 0;
  double tokensPerSecond = 0;
};

struct RunAnalysis {
  MemoryReport memory;
  std::vector<CommEntry> communication;
  TimeReport time;
};

/// Activation bytes of one transformer layer for one micro-batch of `microBatch` sequences, with
/// 16-bit activations scaled by `activationBytes / 2` (Korthikanti et al. 2022, Table 2).
double getTransformerLayerActivationBytes(const ir::TransformerConfig &config, double microBatch,
                                          double tensorDegree, bool sequenceParallel,
                                          ir::ActivationMode mode, unsigned activationBytes);

/// Micro-batches whose activations pipeline stage `stage` of `stages` holds at its peak.
double getInFlightMicrobatches(ir::Schedule schedule, int64_t stages, int64_t microbatches,
                               int64_t chunks, int stage);

/// Compute slowdown while communication kernels run alongside it: the average of Lee et al. 2025
/// ("Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning",
/// arXiv:2507.03114, §1: overlapped compute is 18.9% slower on average, 40% at most, on A100,
/// H100, MI210 and MI250; the collectives take SMs and memory bandwidth from the kernels).
inline constexpr double kOverlapComputeSlowdown = 0.189;

/// Seconds that `commSeconds` of communication overlapped with `computeSeconds` of compute add
/// to the compute: the compute runs `1 + κ` times slower while the communication lasts (κ =
/// kOverlapComputeSlowdown), so the window takes max(comm, compute + comm · κ/(1 + κ)) and
/// exposes max(comm − compute, comm · κ/(1 + κ)).
double getOverlapExposedSeconds(double commSeconds, double computeSeconds);

/// One unit of a forward or backward pass, or `count` identical units in a row: the overlappable
/// communication it needs before its compute (parameter gathers) and after it (gradient
/// reductions), and its compute, in seconds.
struct PassUnit {
  double gather = 0;
  double reduce = 0;
  double compute = 0;
  int64_t count = 1;
};

/// Seconds that the overlappable communication of one pass over `units` (in pass order) adds to
/// its compute, when gathered parameters are prefetched one unit ahead (the two gathered units
/// the memory analysis budgets) and gradients are reduced as soon as a unit's backward ends: the
/// first unit's gather has no compute beside it, unit j's compute overlaps the gather of unit
/// j + 1 and the reduction of unit j − 1 (each window as getOverlapExposedSeconds), and the last
/// unit's reduction ends the pass:
/// `G_1 + Σ_j max(G_{j+1} + R_{j−1} − C_j, (G_{j+1} + R_{j−1})·κ/(1 + κ)) + R_k`.
double getPassExposedSeconds(llvm::ArrayRef<PassUnit> units);

/// The position in the pass of each op of `ops` (a stage's forward or backward list): positions
/// are the units in the order the pass computes them; a parameter gather belongs to the unit
/// computed next (the one that needs it: the head's backward also gathers a tied embedding), any
/// other op to the unit computed last (its gradient reductions follow its backward). Ops before
/// the first compute belong to position 0. Returns the number of positions.
size_t getPassPositions(const std::vector<plan::Op> &ops, std::vector<size_t> &positions);

/// Runs the three analyses over a plan.
RunAnalysis analyze(const plan::StepPlan &plan);

} // namespace placec::analysis

#endif // PLACEC_PASSES_ANALYSIS_H
