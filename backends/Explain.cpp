// --explain: the formulas behind every memory, communication and time figure of a run, with the
// numbers put in. The analysis records them from the same cost-model calls that compute the
// figures (passes/Analysis.cpp), so an explanation cannot disagree with the report.
#include "ReportSupport.h"

#include <fmt/format.h>

using namespace llvm;

namespace placec::report {

RunExplanation explainRun(const RunReport &report) {
  analysis::AnalysisOptions options;
  options.explain = true;
  analysis::RunAnalysis explained = analysis::analyze(*report.plan, options);
  return explained.explanation ? std::move(*explained.explanation) : RunExplanation();
}

std::string formatExplanation(const Explanation &explanation) {
  std::string text = explanation.figure + " = " + explanation.formula;
  if (explanation.unit.empty())
    return text;
  double value = explanation.value;
  StringRef unit = explanation.unit;
  if (unit == "B")
    return text + " = " + formatBytes(value);
  if (unit == "s")
    return text + " = " + formatSeconds(value);
  if (unit == "%")
    return text + " = " + formatPercent(value);
  if (unit == "tokens/s")
    return text + " = " + formatCount(value) + " tokens/s";
  if (unit == "calls")
    return text + " = " + formatInteger(value);
  return text + " = " + formatSignificant(value);
}

} // namespace placec::report
