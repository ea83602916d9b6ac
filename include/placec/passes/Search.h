// Strategy search: enumerates the meshes and placements a run's model and cluster allow, keeps
// the ones the verifier accepts (capacity included), and ranks them by predicted step time. A
// closed-form fast path decides and predicts what the verifier and the analyses would, so that
// the whole space is searched exhaustively; the winners are re-checked by the real pipeline
// (createVerifyPass, plan::lowerRun, analysis::analyze) before they are reported.
#ifndef PLACEC_PASSES_SEARCH_H
#define PLACEC_PASSES_SEARCH_H

#include "placec/ir/IR.h"
#include "placec/passes/Analysis.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace placec::search {

/// Where parameters live over the batch sub-axes (`inner` is the intra-node `dp_local`).
enum class ParamChoice : uint8_t {
  Replicate,
  GatherInner,
  GatherInnerKeep, ///< gather(dp_local, keep_after_forward = true)
  GatherAll,
  GatherAllKeep,
  Host,          ///< replicated, @ host
  HostGatherAll, ///< gather over every batch axis, @ host
};
enum class GradChoice : uint8_t { Replicate, ShardInner, ShardAll };
enum class OptimizerChoice : uint8_t { Replicate, ShardInner, ShardAll, HostShardAll };

llvm::StringRef toString(ParamChoice choice);
llvm::StringRef toString(GradChoice choice);
llvm::StringRef toString(OptimizerChoice choice);

/// One point of the space. The mesh is [pp, dp_node, dp_local, cp, tp] with axes of size one
/// left out; when the batch degree is not split (dpLocal == 1) its one axis is `dp`. `cp` is a
/// sequence (context-parallel) axis; the model states are placed over it like over the batch
/// axes (ParamChoice::GatherAll and the other `all` choices include it).
struct Candidate {
  int64_t pp = 1, dpNode = 1, dpLocal = 1, cp = 1, tp = 1;
  /// Expert parallelism (mixture-of-experts models): an `ep` axis after the batch axes, a batch
  /// axis for the dense tensors (the `all` choices include it) that splits the routed experts,
  /// whose placement follows the dense one over `dp` (ZeRO over the expert-data-parallel group
  /// when the dense states are sharded over all batch axes).
  int64_t ep = 1;
  /// The routed experts' params and grads replicated over `dp` (their optimizer as the dense
  /// one's): ZeRO-1 for the experts under ZeRO-3 for the dense tensors, which saves gathering the
  /// experts around each use at the price of memory.
  bool expertsReplicated = false;
  /// How attention exchanges keys and values over `cp` (meaningful when cp > 1).
  ir::ContextMethod context = ir::ContextMethod::Ring;
  /// `async_tp = …;` (only with tp > 1; `true` and `forward` with sequence parallelism too).
  ir::AsyncTensorParallel asyncTp = ir::AsyncTensorParallel::Off;
  /// `ep_overlap = true;`: the expert all-to-alls beside another micro-batch's compute (only with
  /// ep > 1, no pipeline or an interleaved one, no full recomputation, not fp32: the verifier's
  /// conditions).
  bool epOverlap = false;
  /// `expert_tensor = fold;`: the routed experts whole over ep × tp (only with ep > 1 and tp > 1,
  /// where the group ep·tp divides the experts).
  bool expertFold = false;
  /// `expert_context = fold;`: the routed experts split over ep × cp, the context ranks joining the
  /// expert group as Megatron-Core and torchtitan form it (only with ep > 1 and cp > 1, where the
  /// group ep·cp, times tp when folded too, divides the experts). The experts' data-parallel axes
  /// are then the batch axes alone.
  bool contextFold = false;
  /// `dispatcher = …;` (only with ep > 1): the searched run's strategy's, the same for every
  /// candidate.
  ir::ExpertDispatcher dispatcher = ir::ExpertDispatcher::AllToAll;
  /// `grad_reduce = …;`: the searched run's strategy's, the same for every candidate (written
  /// where the candidate shards the optimizer and not the gradients).
  ir::GradReduce gradReduce = ir::GradReduce::ReduceScatter;
  /// `sp_inputs = …;` of its sequence parallelism (the search's `--sp-inputs`, the same for every
  /// candidate).
  ir::SequenceParallelInputs spInputs = ir::SequenceParallelInputs::Regather;
  /// `dp_overlap = …;`: when the step's data-parallel collectives run (the search's
  /// `--dp-overlap`, the same for every candidate).
  ir::DataParallelOverlap dpOverlap = ir::DataParallelOverlap::Grads;
  /// The run's precision for this candidate; `mixed(fp8, gather = fp8)` when fp8Gather.
  ir::Precision precision = ir::Precision::MixedBF16;
  bool fp8Gather = false;
  /// The run's `grads = fp32` (false under fp32, where gradients are fp32 anyway).
  bool fp32Grads = false;
  /// The run's `params = fp32` (false under fp32).
  bool fp32Params = false;
  /// The run's `params = fp8` (under mixed(fp8) only): the parameters as their FP8 copies alone,
  /// on the device, whole under MXFP8 and gathered as FP8 under one scale per tensor (the
  /// verifier's rule `precision`).
  bool fp8Params = false;
  /// The run's `saved = fp8` (under mixed(fp8) only).
  bool fp8Saved = false;
  /// The run's `scaling` (MXFP8 under mixed(fp8) only).
  ir::Fp8Scaling fp8Scaling = ir::Fp8Scaling::Tensor;
  /// The run's `attention = fp8` (under mixed(fp8) and mixed(fp4) only).
  bool fp8Attention = false;
  ParamChoice params = ParamChoice::Replicate;
  GradChoice grads = GradChoice::Replicate;
  OptimizerChoice optimizer = OptimizerChoice::Replicate;
  ir::ActivationMode activations = ir::ActivationMode::Keep;
  bool sequenceParallel = false;
  int64_t microBatch = 1;
  int64_t microbatches = 1; ///< Per step per batch replica (pipeline or accumulation).
  ir::Schedule schedule = ir::Schedule::OneFOneB;
  int64_t chunks = 1;
  /// Interleaving's micro-batch group (`group = N`; 0: Megatron-Core's default, the stages):
  /// cost::getSmallestMicrobatchGroup's, where the stages do not divide the micro-batches.
  int64_t group = 0;
  /// Uneven stages (`first = k, last = k`): the layers of the first and of the last stage, the
  /// others sharing the rest evenly; 0: every stage the same.
  int64_t edgeLayers = 0;
  /// The embedding and the loss counted as layers of the interleaved split (`embedding_layer =
  /// true, loss_layer = true`: Megatron-LM's --account-for-*-in-pipeline-split): the first
  /// stage's first chunk and the last stage's last chunk hold one layer fewer than the others.
  /// edgeLayers then holds the first and the last stage's layers over all their chunks.
  bool countedSplit = false;
  /// The fast path's index of this candidate's (micro-batch, schedule) step among its mesh's, the
  /// same for every candidate of that mesh with the same step: the evaluator keys what a
  /// schedule holds by it. -1 (candidates built elsewhere): looked up by the schedule's fields.
  int32_t stepIndex = -1;

  // Predictions of the fast path.
  double stepSeconds = 0;
  double peakBytes = 0;     ///< Device peak of the fullest stage.
  double hostPeakBytes = 0; ///< Host bytes per device of that stage.

  int64_t getBatchDegree() const { return dpNode * dpLocal; }
  /// The devices that hold the same parameters: batch × context.
  int64_t getDataDegree() const { return dpNode * dpLocal * cp; }
  bool isSplit() const { return dpNode > 1 && dpLocal > 1; }
  /// `[pp = 8, dp = 16, tp = 8]`.
  std::string formatMesh() const;
  /// The routed experts' layout over their axes: `-` without an expert axis, else `split`,
  /// `fold(tp)`, `fold(cp)` or `fold(cp, tp)` (expert_tensor, expert_context), then
  /// ` + ep_overlap` where set.
  std::string formatExperts() const;
  /// `mixed(bf16)`, `mixed(fp8, gather = fp8)`: the run's `precision` value.
  std::string formatPrecision() const;
  /// A one-line summary: mesh, context method, placements, activations, micro-batching,
  /// schedule, precision.
  std::string describe() const;
};

/// What the fast path decides for one candidate.
struct FastVerdict {
  /// Empty when the candidate is accepted; otherwise the name of the first rule that rejects it
  /// (a string literal).
  llvm::StringRef rejectedBy;
  double stepSeconds = 0;
  double peakBytes = 0;
  double hostPeakBytes = 0;
  /// Bytes per step each device of the slowest stage sends over inter-node links.
  double interNodeBytes = 0;
  /// False when an accepted candidate was not timed because its compute alone outlasts the step
  /// bound it was evaluated against (Evaluator::evaluate): stepSeconds is then that lower bound.
  bool timed = true;
  /// Some stage's deferred weight passes hold more than the micro-batches' activations
  /// (cost::getDeferredWeightExtraBytes): its schedule's count in flight alone does not order its
  /// memory against another schedule's of the same layout.
  bool deferredExtra = false;
};

struct SearchOptions {
  /// Devices to search for; 0: the cluster's. Must be a multiple of devices_per_node.
  int64_t devices = 0;
  /// The precisions to explore; empty: the run's own (and its `gather = fp8` setting) only.
  /// MixedFP8 here explores both `mixed(fp8)` and, where parameters are gathered,
  /// `mixed(fp8, gather = fp8)`. The caller checks that the cluster has an FP8 peak.
  std::vector<ir::Precision> precisions;
  /// `--precision …,fp4`: NVFP4 products as well (`mixed(fp4)`, MixedFP8 at ir::Fp8Scaling::Nvfp4,
  /// its inputs kept as NVFP4). The caller checks that the cluster has an FP4 peak on Blackwell.
  bool fp4 = false;
  /// The pipeline schedules to explore; empty: isDefaultSearchSchedule's (1f1b, interleaved,
  /// zero_bubble, zbv and dualpipev; for a mixture of experts 1f1b and interleaved).
  std::vector<ir::Schedule> schedules;
  /// The activation modes to explore; empty: keep, recompute(selective) and recompute, and
  /// recompute(op) too where the run's strategy uses it. Every mode listed applies to the model
  /// (parseActivationModes checks it).
  std::vector<ir::ActivationMode> activations;
  /// The async_tp settings to explore where tp > 1; empty: `false` and `true` for dense models,
  /// `false` for mixtures of experts. `false` and `wgrad` are explored with and without sequence
  /// parallelism, `true` and `forward` with it.
  std::vector<ir::AsyncTensorParallel> asyncTp;
  /// When set, asked of each accepted candidate that would enter the top: a reason to leave it
  /// out (`placec search --target`: what the framework's bridge cannot express), or empty.
  /// Called from the search's threads at once.
  std::function<std::string(const Candidate &)> refusal;
  /// The context-parallel methods explored over context axes of more than one device, each where
  /// its divisibility holds; empty: no context axis (`--context none`); nullopt: ring, all_gather
  /// and all_to_all. Plans without a context axis are always part of the space.
  std::optional<std::vector<ir::ContextMethod>> contextMethods;
  /// The ep_overlap settings to explore for a mixture of experts where they apply (ep > 1, no
  /// pipeline, no full recomputation, not fp32); empty: `false`. Elsewhere `false`.
  std::vector<ir::ExpertOverlap> epOverlap;
  /// The expert_tensor settings to explore for a mixture of experts where `fold` applies (ep > 1,
  /// tp > 1, ep·tp dividing the experts); empty: `split`. Elsewhere `split`.
  std::vector<ir::ExpertTensor> expertTensor;
  /// The dispatchers to explore over expert axes of more than one device; empty: the searched
  /// run's. Without an expert axis, `alltoall`.
  std::vector<ir::ExpertDispatcher> dispatchers;
  /// The expert_context settings to explore for a mixture of experts where `fold` applies (ep > 1,
  /// cp > 1, the expert group dividing the experts); empty: `split`. Elsewhere `split`.
  std::vector<ir::ExpertTensor> expertContext;
  /// What sequence parallelism's column-parallel products keep in every candidate (`sp_inputs`):
  /// `regather` as Megatron-LM, `keep` as PyTorch.
  ir::SequenceParallelInputs spInputs = ir::SequenceParallelInputs::Regather;
  /// When every candidate's step runs its data-parallel collectives (`dp_overlap`): `grads` as
  /// PyTorch's DDP and FSDP; `all` as Megatron-LM with --overlap-param-gather; `none` as
  /// Megatron-LM without --overlap-grad-reduce. A candidate that it would change nothing for
  /// (no step reduction, or no step all-gather of the parameters) keeps the default.
  ir::DataParallelOverlap dpOverlap = ir::DataParallelOverlap::Grads;
  /// Per-device memory budget in bytes; 0: the cluster's device_memory.
  double memoryBudget = 0;
  unsigned topK = 10;
  /// Skip the capacity pruning by lower bounds (tests compare both).
  bool pruneByLowerBound = true;
  /// Only candidates this accepts are part of the space (tests and --max-params use it).
  std::function<bool(const Candidate &)> filter;
  /// Called now and then with the fraction of the space done.
  std::function<void(double)> progress;
  /// Called with each accepted candidate and its predictions, in search order. A search with
  /// this callback runs on one thread.
  std::function<void(const Candidate &)> onAccepted;
  /// Threads that evaluate the space, at most one per hardware thread the process may use; 0:
  /// one per hardware thread. The result does not depend on it (ties are broken by the order of
  /// a one-thread search). `filter` and `progress` are called from these threads (`progress`
  /// from one at a time).
  unsigned threads = 0;
};

/// Whether a framework's bridge exports a plan (`placec compile --target=…`): the target's name
/// and the first part of the plan it cannot express (empty when it exports it).
struct BridgeVerdict {
  std::string target;
  std::string refusal;
  bool exports() const { return refusal.empty(); }
  /// `exports it`, or `refuses it: ` and the refusal.
  std::string describe() const { return exports() ? "exports it" : "refuses it: " + refusal; }
};

/// The targets of the verdicts that export a plan, `megatron, torchtitan`, or `-` for none.
std::string formatExports(const std::vector<BridgeVerdict> &verdicts);

struct SearchResult {
  /// Candidates in the space (after the filter), and how many of them each rule rejected.
  uint64_t spaceSize = 0;
  std::map<std::string, uint64_t> rejectedByRule;
  uint64_t accepted = 0;
  /// Candidates rejected by capacity in groups by the closed-form lower bound, unevaluated.
  uint64_t prunedByLowerBound = 0;
  /// Candidates rejected by capacity unevaluated because the same plan with a schedule that
  /// keeps fewer micro-batches in flight (1f1b, zbv) is over the budget.
  uint64_t prunedBySchedule = 0;
  /// Accepted candidates left untimed because a lower bound of their step (m micro-batches of
  /// their stages' compute, and on the exact path of the communication on their critical path)
  /// is slower than every plan kept for the top (counted in `accepted`, never in `top`).
  uint64_t prunedByStep = 0;
  /// Mixture-of-experts search: candidates rejected by capacity unevaluated because the same plan
  /// keeping fewer activations (a stronger recomputation) or a smaller micro-batch is over the
  /// budget.
  uint64_t prunedByMemoryOrder = 0;
  uint64_t meshes = 0;
  /// The best accepted candidates, fastest first (ties: less memory), each re-checked by the
  /// real pipeline; their analyses in the same order.
  std::vector<Candidate> top;
  std::vector<analysis::RunAnalysis> topAnalyses;
  /// Candidates the fast path accepted but the verifier rejected (should be zero).
  uint64_t disagreements = 0;
  /// When nothing fits: the candidate that passes every other rule with the least device peak.
  std::optional<Candidate> smallest;
  double seconds = 0;
  /// The threads that evaluated the space (getSearchThreads, at most one per group of candidates).
  unsigned threads = 1;
  /// The cluster the search ran on (a copy with the searched device count and budget).
  std::shared_ptr<ir::Cluster> cluster;
  /// For each plan of `top`, what each bridge says of it (SearchCommandOptions::bridges); empty
  /// when not asked.
  std::vector<std::vector<BridgeVerdict>> topBridges;
  /// SearchOptions::refusal: the accepted candidates it refused as they were about to enter the
  /// top (those it was asked of), and the best of them with its reason.
  uint64_t refused = 0;
  std::optional<Candidate> bestRefused;
  std::string bestRefusal;
  /// How many of them each reason refused.
  std::map<std::string, uint64_t> refusals;
};

/// Keeps the memory a search frees for its next candidates. The exact path (a mixture of experts)
/// lowers and analyses every candidate into a step plan of its own and frees it; glibc's malloc
/// gives the freed top of its heap back to the system each time (its trim threshold, which it
/// raises only as large mmap'd blocks are freed), and the next candidate faults the pages in
/// again one by one. This raises the trim threshold to 256 MiB and holds the mmap threshold at
/// 32 MiB, for the whole process; it does nothing on another C library. A process that searches
/// (`placec search`, the search benchmarks) calls it once, first.
void retainFreedMemory();

/// The threads a search with `options` runs on: `options.threads` but at most one per hardware
/// thread, or one per hardware thread when it is 0; one when `options.onAccepted` is set.
unsigned getSearchThreads(const SearchOptions &options);

/// A copy of the run's cluster with `devices` devices (0: unchanged) and `budget` bytes of
/// device memory (0: unchanged).
std::shared_ptr<ir::Cluster> makeSearchCluster(const ir::Cluster &cluster, int64_t devices,
                                               double budget);

/// Searches the space of the run's model on `options.devices` devices of the run's cluster.
/// The run's own strategy is ignored; its batch sizes and optimizer are kept, and its precision
/// unless `options.precisions` names others.
SearchResult searchStrategies(const ir::Run &run, const SearchOptions &options = {});

/// A candidate's bound strategy, as Sema would build it from `formatStrategy`'s text.
std::unique_ptr<ir::Strategy> buildStrategy(const Candidate &candidate, llvm::StringRef name);

/// A run of `base`'s model, batch and optimizer, the candidate's precision, with its strategy
/// (which the caller keeps alive) on `cluster`.
std::unique_ptr<ir::Run> buildRun(const ir::Run &base, const ir::Cluster &cluster,
                                  const ir::Strategy &strategy, const Candidate &candidate);

/// The closed-form fast path: the verifier's decision (rules `gradient-integrity` and
/// `capacity`) and the analyses' step time and memory, for `run`'s model on `cluster`.
FastVerdict evaluateFast(const ir::Run &run, const ir::Cluster &cluster,
                         const Candidate &candidate);

/// The slow path: the verifier (capacity as an error) and the analyses on the built run. Returns
/// the first rule with an error (empty when accepted) and, where that is none or `capacity`,
/// fills `analysisOut` (a run another rule rejects is not analysed). A ranking's analysis leaves
/// untimed (analysis::TimeReport::timed) a run whose compute and critical communication alone
/// take longer than `stepBound` and, with `untimedUnfit`, a run over capacity; the rule found is
/// the same.
std::string evaluateExact(const ir::Run &run, const ir::Cluster &cluster,
                          const Candidate &candidate, analysis::RunAnalysis *analysisOut,
                          double stepBound = std::numeric_limits<double>::infinity(),
                          bool untimedUnfit = false);

/// Enumerates every candidate of the space (before any rule), in search order, for the run's
/// own precision or for `precisions` (as SearchOptions::precisions).
void forEachCandidate(const ir::Run &run, const ir::Cluster &cluster,
                      const std::function<void(const Candidate &)> &callback,
                      const std::vector<ir::Precision> &precisions = {},
                      const std::vector<ir::AsyncTensorParallel> &asyncTp = {},
                      ir::SequenceParallelInputs spInputs = ir::SequenceParallelInputs::Regather,
                      ir::DataParallelOverlap dpOverlap = ir::DataParallelOverlap::Grads);

/// Whether the search evaluates every candidate for `model` exactly, through the verifier and
/// the analyses of its step plan, rather than by the closed-form fast path, which holds for
/// identical layers only: a mixture of experts (its MoE layers and its experts' placement), a
/// model whose layers alternate sliding-window and full attention (`full_every`), and one with
/// multi-token prediction modules (`mtp_layers`, blocks of their own on the last stage).
bool searchesExactly(const ir::Model &model);
/// Why `model` is searched exactly, for diagnostics: "has routed experts", "alternates
/// sliding-window and full-attention layers" or "has multi-token prediction modules on its last
/// stage"; empty when it is not.
std::string getExactSearchReason(const ir::Model &model);

/// Whether the search of `model` explores `schedule` when `--schedules` does not list the
/// schedules: every one but gpipe (1F1B is never slower and never larger); for a mixture of
/// experts 1f1b and interleaved (Megatron-Core's schedules for MoE layers), the others only where
/// `--schedules` names them.
bool isDefaultSearchSchedule(const ir::Model &model, ir::Schedule schedule);

/// Parses `--schedules 1f1b,zbv` into schedules for `run`'s search; on an error (an unknown name)
/// returns nullopt and sets `error`.
std::optional<std::vector<ir::Schedule>> parseSchedules(llvm::StringRef text, const ir::Run &run,
                                                        std::string &error);

/// Parses `--activations keep,selective,full,op` into activation modes; on an error returns
/// nullopt and sets `error` (an unknown name, op for a model it does not apply to, or a mode
/// that `kernels = eager` is not modelled for).
std::optional<std::vector<ir::ActivationMode>>
parseActivationModes(llvm::StringRef text, const ir::Run &run, std::string &error);

/// Parses `--async-tp false,wgrad` into async_tp settings; on an error (an unknown name)
/// returns nullopt and sets `error`.
std::optional<std::vector<ir::AsyncTensorParallel>> parseAsyncTensorParallel(llvm::StringRef text,
                                                                             std::string &error);

/// Parses `--ep-overlap false,true` into ep_overlap settings; on an error (an unknown name, or
/// `true` for a model without experts) returns nullopt and sets `error`.
std::optional<std::vector<ir::ExpertOverlap>>
parseExpertOverlap(llvm::StringRef text, const ir::Run &run, std::string &error);

/// Parses `--dispatcher alltoall,deepep,hybridep` into dispatchers; on an error (an unknown name,
/// a flex dispatcher for a model without experts or with a capacity factor) sets `error` and
/// returns nullopt.
std::optional<std::vector<ir::ExpertDispatcher>>
parseDispatchers(llvm::StringRef text, const ir::Run &run, std::string &error);
/// Parses `--expert-tensor split,fold` into expert_tensor settings; on an error (an unknown
/// name, or `fold` for a model without experts) returns nullopt and sets `error`.
std::optional<std::vector<ir::ExpertTensor>>
parseExpertTensor(llvm::StringRef text, const ir::Run &run, std::string &error);

/// Parses `--expert-context split,fold` into expert_context settings; on an error (an unknown
/// name, or `fold` for a model without experts) returns nullopt and sets `error`.
std::optional<std::vector<ir::ExpertTensor>>
parseExpertContext(llvm::StringRef text, const ir::Run &run, std::string &error);

/// Parses `--context ring,all_to_all` into the context-parallel methods to explore (`none`
/// alone: an empty list, no context axis); on an error (an unknown name) returns nullopt and sets
/// `error`.
std::optional<std::vector<ir::ContextMethod>> parseContextMethods(llvm::StringRef text,
                                                                  std::string &error);

/// Parses `--precision bf16,fp8,fp4` into precisions, `fp4` into `fp4` (NVFP4 is MixedFP8 at
/// another scaling: SearchOptions::fp4); on an error returns nullopt and sets `error` (an unknown
/// name, fp8 on the run's cluster without an FP8 peak, fp4 without an FP4 peak on Blackwell, or
/// either under `kernels = eager`).
std::optional<std::vector<ir::Precision>> parsePrecisions(llvm::StringRef text, const ir::Run &run,
                                                          std::string &error, bool *fp4 = nullptr);

/// A candidate's async_tp setting as its summary and the table show it: `async_tp` (true),
/// `async_tp=forward`, `async_tp=wgrad`; empty for false.
std::string formatAsyncTp(ir::AsyncTensorParallel value);

/// Place text: `strategy NAME { … }` for the candidate.
std::string formatStrategy(const Candidate &candidate, llvm::StringRef name);
/// Place text of a model and a cluster declaration (for `-o best.place`).
std::string formatModel(const ir::Model &model);
std::string formatCluster(const ir::Cluster &cluster);
/// Place text of a run using `strategyName`.
std::string formatRun(const ir::Run &base, const Candidate &candidate, llvm::StringRef name,
                      llvm::StringRef strategyName, llvm::StringRef clusterName);

/// The strategy families of `--max-params`.
enum class Family { Dp, Zero1, Zero2, Zero3 };
llvm::StringRef toString(Family family);
bool isInFamily(const Candidate &candidate, Family family, bool tensorParallel);

struct MaxParamsRow {
  Family family = Family::Dp;
  bool tensorParallel = false;
  /// The largest fitting model of the shape family; nullopt when not even the smallest fits.
  std::optional<ir::TransformerConfig> config;
  int64_t params = 0;
  std::optional<Candidate> best;
};

/// For each family, with and without tensor parallelism: the largest transformer of the run's
/// shape that fits, scaling the hidden size with the layers (the aspect ratio hidden / layers
/// kept, rounded to whole layers; heads grow with the hidden size; the head dimension, the ffn
/// ratio, seq and vocab kept).
std::vector<MaxParamsRow> findMaxParams(const ir::Run &run, const SearchOptions &options);

/// Options of `placec search`.
struct SearchCommandOptions {
  std::string runName;
  int64_t devices = 0;
  std::string memoryBudget; ///< Bytes or a quantity (`80 GiB`, `70GB`); empty: device_memory.
  /// `--precision`: a comma-separated list of bf16, fp16, fp32, fp8; empty: the run's own.
  std::string precisions;
  /// `--schedules`: a comma-separated list of pipeline schedules; empty: the default set.
  std::string schedules;
  /// `--activations`: a comma-separated list of keep, selective, full and op; empty: the default
  /// set (SearchOptions::activations).
  std::string activations;
  /// `--async-tp`: a comma-separated list of false, true, forward and wgrad; empty: the default
  /// set (SearchOptions::asyncTp).
  std::string asyncTp;
  /// `--ep-overlap`: a comma-separated list of false and true; empty: false
  /// (SearchOptions::epOverlap).
  std::string epOverlap;
  /// `--expert-tensor`: a comma-separated list of split and fold; empty: split
  /// (SearchOptions::expertTensor).
  std::string expertTensor;
  /// `--dispatcher`: a comma-separated list of alltoall, deepep and hybridep; empty: the run's
  /// (SearchOptions::dispatchers).
  std::string dispatcher;
  /// `--expert-context`: a comma-separated list of split and fold; empty: split
  /// (SearchOptions::expertContext).
  std::string expertContext;
  /// `--context`: a comma-separated list of none, ring, all_gather and all_to_all; empty: every
  /// method (SearchOptions::contextMethods).
  std::string context;
  /// `--sp-inputs`: regather or keep; empty: regather.
  std::string spInputs;
  /// `--dp-overlap`: grads, all or none; empty: grads.
  std::string dpOverlap;
  unsigned topK = 5;
  /// `--threads`: SearchOptions::threads (0: one per hardware thread).
  unsigned threads = 0;
  bool json = false;
  /// `--format=md`: the table as GitHub Markdown and the best plan in a code block.
  bool markdown = false;
  bool maxParams = false;
  std::string outputFile; ///< `-o`: the best plan as a complete .place file; empty: none.
  bool progress = false;  ///< Show a progress bar on stderr (when it is a terminal).
  /// Passed on to SearchOptions::onAccepted.
  std::function<void(const Candidate &)> onAccepted;
  /// When set, each plan of the top is built as the run it prints (buildRun) and given to this,
  /// which says whether each framework's bridge exports it (SearchResult::topBridges; `placec
  /// search` asks Megatron-LM's, torchtitan's and DeepSpeed's), or only the one named by its
  /// second argument when that is not empty.
  std::function<std::vector<BridgeVerdict>(const ir::Run &, llvm::StringRef only)> bridges;
  /// `--target`: the framework whose bridge must export every plan listed (its name, as `bridges`
  /// gives it: the caller checks it is one); empty: any plan. Needs `bridges`. It also sets what
  /// --async-tp, --sp-inputs and --activations default to: the framework's own.
  std::string target;
  /// When set, prints the result in place of the table or JSON (`--format=html`); `placeText`
  /// is the best plan's Place text (empty when nothing fits).
  std::function<void(const ir::Run &, const SearchResult &, llvm::StringRef placeText,
                     llvm::raw_ostream &)>
      print;
};

/// Parses `80 GiB`, `80GB`, `8.5e10` into bytes.
std::optional<double> parseBytes(llvm::StringRef text);

/// `placec search`: runs the search on a loaded program and prints the result. Returns the exit
/// code (1 when nothing fits or on a usage error).
int runSearchCommand(const ir::Program &program, const SearchCommandOptions &options,
                     llvm::raw_ostream &out, llvm::raw_ostream &err);

} // namespace placec::search

#endif // PLACEC_PASSES_SEARCH_H
