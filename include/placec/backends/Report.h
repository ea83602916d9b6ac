// The report backends: a run's step plan and analyses printed as text tables, JSON
// (docs/report-json.md), GitHub Markdown or a self-contained HTML page with charts
// (docs/report-html.md); the difference between two runs (`placec diff`); and
// the formulas behind every memory and communication figure (`--explain`).
#ifndef PLACEC_BACKENDS_REPORT_H
#define PLACEC_BACKENDS_REPORT_H

#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"
#include "placec/passes/Analysis.h"
#include "placec/passes/Search.h"
#include "placec/passes/StepPlan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace placec::report {

/// The version of the JSON schema (docs/report-json.md); raised on any incompatible change.
constexpr int kJsonSchemaVersion = 1;

enum class Format { Text, Json, Markdown, Html };

/// A diagnostic resolved to its file, line and column, as the reports show it.
struct ReportDiagnostic {
  Severity severity = Severity::Error;
  std::string rule; ///< Empty when the diagnostic belongs to no named rule.
  std::string message;
  std::string file; ///< Empty when the diagnostic has no location.
  unsigned line = 0, column = 0;
  /// The notes reported right after the diagnostic.
  std::vector<ReportDiagnostic> notes;
};

/// One run, lowered and analyzed.
struct RunReport {
  const ir::Run *run = nullptr;
  std::unique_ptr<plan::StepPlan> plan;
  analysis::RunAnalysis analysis;
  /// The diagnostics about this run: located in its declaration, or naming it.
  std::vector<ReportDiagnostic> diagnostics;
};

/// Lowers a verified run to its step plan and runs the analyses over it.
RunReport analyzeRun(const ir::Run &run);

/// The engine's diagnostics with locations resolved; each note is attached to the error or
/// warning before it.
std::vector<ReportDiagnostic> collectDiagnostics(DiagnosticEngine &diags);

/// Gives each report the diagnostics of `all` that belong to its run.
void attachDiagnostics(llvm::MutableArrayRef<RunReport> reports,
                       llvm::ArrayRef<ReportDiagnostic> all, DiagnosticEngine &diags);

struct ReportOptions {
  Format format = Format::Text;
  /// Adds the formula behind every memory, communication and time figure.
  bool explain = false;
  /// The input file as the user named it, shown in headings and in the JSON.
  std::string inputName;
};

/// Prints the report of the given runs in `options.format`. `diagnostics` are all of the
/// program's diagnostics (the JSON lists them; text and Markdown list the warnings).
void printReport(llvm::ArrayRef<RunReport> runs, llvm::ArrayRef<ReportDiagnostic> diagnostics,
                 const ReportOptions &options, llvm::raw_ostream &os);

void printTextReport(llvm::ArrayRef<RunReport> runs, llvm::ArrayRef<ReportDiagnostic> diagnostics,
                     const ReportOptions &options, llvm::raw_ostream &os);
void printJsonReport(llvm::ArrayRef<RunReport> runs, llvm::ArrayRef<ReportDiagnostic> diagnostics,
                     const ReportOptions &options, llvm::raw_ostream &os);
void printMarkdownReport(llvm::ArrayRef<RunReport> runs,
                         llvm::ArrayRef<ReportDiagnostic> diagnostics, const ReportOptions &options,
                         llvm::raw_ostream &os);
/// One HTML page with no external resources: inline SVG charts of memory, communication and
/// time with the runs side by side, each with a table of its numbers, then the text report's
/// tables.
void printHtmlReport(llvm::ArrayRef<RunReport> runs, llvm::ArrayRef<ReportDiagnostic> diagnostics,
                     const ReportOptions &options, llvm::raw_ostream &os);

/// A deterministic, evenly spread sample of the candidates a search accepts, in search order: at
/// most `capacity` of them, every `getStride()`-th.
class CandidateSample {
public:
  explicit CandidateSample(size_t capacity = 400) : capacity(capacity) {}
  void add(const search::Candidate &candidate);
  const std::vector<search::Candidate> &getCandidates() const { return kept; }
  uint64_t getStride() const { return stride; }

private:
  size_t capacity;
  uint64_t stride = 1, seen = 0;
  std::vector<search::Candidate> kept;
};

/// The HTML page of `placec search --format=html`: the search's numbers, a scatter of the
/// sampled and the fastest candidates (device memory against step time) with the chosen plan
/// and the memory budget marked, the fastest plans as a table, and the chosen plan's Place text.
void printSearchHtml(const ir::Run &run, const search::SearchResult &result,
                     const CandidateSample &sample, llvm::StringRef inputName,
                     llvm::StringRef placeText, llvm::raw_ostream &os);

/// One side of a diff: a run and the file it came from.
struct DiffSide {
  const RunReport *report = nullptr;
  std::string file;
};

/// Prints what changes from run `a` to run `b`: memory per state (device and host),
/// communication per axis (bytes sent and time) and step time, with signed deltas and ratios.
void printDiff(const DiffSide &a, const DiffSide &b, Format format, llvm::raw_ostream &os);

//===----------------------------------------------------------------------===//
// placec fidelity
//===----------------------------------------------------------------------===//

/// One run with a measured step time or peak memory, and placec's predictions for it.
struct FidelityRow {
  std::string set;  ///< The folder the file is in: `calibration`, `holdout`.
  std::string file; ///< The file name.
  std::string run;
  int64_t devices = 0;
  std::string device; ///< The cluster's device preset, or its name.
  /// What the model is: `dense transformer`, `mixture of experts` (a transformer with routed
  /// experts) or `mlp`.
  std::string modelKind;
  /// The analysis's step time and its parts (the slowest stage's compute, optimizer step and
  /// exposed communication, and the pipeline bubble).
  analysis::TimeReport predictedTime;
  std::optional<double> measuredStep;
  double predictedMemory = 0;
  std::optional<double> measuredMemory;

  /// (predicted − measured) / measured; 0 without a measurement.
  double getStepError() const;
  double getMemoryError() const;
};

/// The accuracy `placec fidelity` must reach (fractions); unset: not checked.
struct FidelityLimits {
  std::optional<double> maxMeanStepError, maxStepError, maxMemoryError;
};

/// Prints the rows, the mean and largest error per set and over all rows, and whether they are
/// within `limits`; returns false when they are not.
bool printFidelity(llvm::ArrayRef<FidelityRow> rows, const FidelityLimits &limits, bool json,
                   llvm::raw_ostream &os);

/// The step-time error of some rows: how many, how many beyond the goal's largest error (10 %),
/// the mean and the largest |error| (fractions) and the `file:run` of the largest.
struct FidelityErrors {
  unsigned rows = 0;
  unsigned overGoal = 0;
  double meanError = 0;
  double maxError = 0;
  std::string worst;
};

/// One point of `placec fidelity --fit`'s grid: values of the cost model's two fitted constants
/// (`kGemmTileOverheadK`, `kTrainingKernelEfficiency`) and the step-time errors of the rows timed
/// with them (docs/fidelity.md, "The model and its constants"). When the rows include the set
/// `calibration` the fit is over its rows and the others are held out, reported and not fitted;
/// otherwise the fit is over every row.
struct FidelityFitPoint {
  double tileOverheadK = 0;
  double kernelEfficiency = 0;
  std::string fittedOn; ///< `calibration`, or `all` when no row is in that set.
  FidelityErrors fitted;
  FidelityErrors heldOut; ///< No rows without a `calibration` set.
};

/// The grid `placec fidelity --fit` times the rows over: the kernel efficiency from 0.70 to 1.00
/// in steps of 0.01 (the steps it was fitted in), for each tile overhead from 0 to 512 in steps
/// of 32.
std::vector<FidelityFitPoint> getFidelityFitGrid();
/// Fills `point`'s errors from `rows`, timed with its constants.
void scoreFidelityFit(FidelityFitPoint &point, llvm::ArrayRef<FidelityRow> rows);
/// The grid scored: each tile overhead's best kernel efficiency, every kernel efficiency at the
/// code's tile overhead, the best point (the lowest mean over the fitted rows, then the lowest
/// largest error) and the code's own constants, as text or as JSON.
void printFidelityFit(llvm::ArrayRef<FidelityFitPoint> points, bool json, llvm::raw_ostream &os);

/// `placec devices`: every device preset, its datasheet figures and the GEMM efficiency the cost
/// model takes for it, as a text table with the sources, or as JSON.
void printDevices(bool json, llvm::raw_ostream &os);

//===----------------------------------------------------------------------===//
// --explain
//===----------------------------------------------------------------------===//

/// One figure of the report and how it is computed, with the numbers put in.
using Explanation = cost::Explanation;
/// Every figure of a run with its formula (analysis::RunExplanation).
using RunExplanation = analysis::RunExplanation;

/// The run's memory, communication and time with the formula of each figure, as the analysis
/// computes them.
RunExplanation explainRun(const RunReport &report);

/// Formats an explanation as one line: `params = 1557611200 × 2 B / 64 (gather over dp) = 48.7
/// MB`.
std::string formatExplanation(const Explanation &explanation);

} // namespace placec::report

#endif // PLACEC_BACKENDS_REPORT_H
