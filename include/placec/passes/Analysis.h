// Analyses over a StepPlan: memory per device (per state, persistent and transient, device and
// host), communication per collective × axis × state × phase, and step time. Every number comes
// from the cost model (CostModel.h); with `explain` the analysis also records each formula with
// the numbers put in, from the same calls (`placec report --explain`).
#ifndef PLACEC_PASSES_ANALYSIS_H
#define PLACEC_PASSES_ANALYSIS_H

#include "placec/passes/CostModel.h"
#include "placec/passes/StepPlan.h"

#include "llvm/ADT/ArrayRef.h"

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace placec::analysis {

using cost::Explanation;
using cost::MemoryBreakdown;

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
  /// Ranks of the group inside one node.
  int64_t groupPerNode = 1;
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
  /// Time per step, all calls together (CostModel::getCollectiveSeconds).
  double timeSeconds = 0;
};

struct TimeReport {
  /// False when the model says too little to time the step (an abstract model).
  bool known = true;
  double flopsPerStep = 0; ///< Model FLOPs of the step, all devices (recomputation excluded).
  double computeSeconds = 0;
  double exposedCommSeconds = 0;
  double bubbleSeconds = 0;
  /// The optimizer step of the slowest stage (memory-bound; part of computeSeconds' stage).
  double optimizerSeconds = 0;
  double stepSeconds = 0;
  double mfu = 0;
  double tokensPerSecond = 0;
  /// False when AnalysisOptions let the step go untimed: the run does not fit (`untimedUnfit`),
  /// or its slowest stage's compute and critical communication alone take longer than
  /// `stepBound`. Then `stepSeconds` holds that lower bound (0 for a run that does not fit) and
  /// the communication is not listed.
  bool timed = true;
};

/// The formulas behind every figure of a run's analysis, with the numbers put in.
struct RunExplanation {
  /// Memory of the stage the report shows (the one with the highest device peak).
  int stage = 0;
  std::vector<Explanation> deviceMemory;
  std::vector<Explanation> hostMemory;
  /// One per RunAnalysis::communication entry, in the same order: the entry's count, bytes and
  /// time.
  struct Communication {
    /// The entry: `all-gather params over dp (forward)`, with `, stage 1` under a pipeline.
    std::string figure;
    std::vector<Explanation> lines;
  };
  std::vector<Communication> communication;
  /// The compute of each kind of unit of the slowest stage: its kernels and their times.
  std::vector<Communication> compute;
  std::vector<Explanation> time;
};

struct RunAnalysis {
  MemoryReport memory;
  std::vector<CommEntry> communication;
  TimeReport time;
  /// Filled when the analysis was asked to explain.
  std::optional<RunExplanation> explanation;
};

/// The position in the pass of each op of `ops` (a stage's forward or backward list): positions
/// are the units in the order the pass computes them; a parameter gather belongs to the unit
/// computed next (the one that needs it: the head's backward also gathers a tied embedding), any
/// other op to the unit computed last (its gradient reductions follow its backward). Ops before
/// the first compute belong to position 0. Returns the number of positions.
size_t getPassPositions(const std::vector<plan::Op> &ops, std::vector<size_t> &positions);

/// The name of a communication entry's op kind in reports: `all-gather`, `send`,
/// `host->device`.
std::string getCollectiveName(plan::OpKind kind);

/// The cost model's collective of a plan op.
cost::Collective getCollective(plan::OpKind kind);

struct AnalysisOptions {
  /// Record the formula of every figure (RunAnalysis::explanation).
  bool explain = false;
  /// A caller that ranks runs by step time (the search) needs no time of a run that cannot rank:
  /// one whose step is at least m × (the compute and the critical-path communication of one of
  /// its stages per micro-batch), when that is above this bound; and, with `untimedUnfit`, one
  /// over the device's or the host's memory. Such a run's memory is analysed and its time is not
  /// (TimeReport::timed).
  double stepBound = std::numeric_limits<double>::infinity();
  bool untimedUnfit = false;
};

/// Runs the three analyses over a plan.
RunAnalysis analyze(const plan::StepPlan &plan, const AnalysisOptions &options = {});

} // namespace placec::analysis

#endif // PLACEC_PASSES_ANALYSIS_H
