// The passes over the IR and the pipeline that runs them.
#ifndef PLACEC_PASSES_PASSES_H
#define PLACEC_PASSES_PASSES_H

#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"
#include "placec/passes/Analysis.h"

#include "llvm/ADT/StringRef.h"

#include <functional>
#include <memory>
#include <vector>

namespace placec {

/// A pass reads (and may annotate) the program and reports through the diagnostic engine.
class Pass {
public:
  virtual ~Pass() = default;
  /// The pass's name, as `--print-after-all` shows it.
  virtual llvm::StringRef getName() const = 0;
  /// Runs the pass; returns false after reporting at least one error.
  virtual bool run(ir::Program &program, DiagnosticEngine &diags) = 0;
};

/// Options that change what the verifier treats as an error.
struct VerifyOptions {
  /// Per-device and host memory over capacity is an error (`placec check`); otherwise it is left
  /// to the reports.
  bool capacityIsError = true;
  /// A run over capacity gets a note with the first change that makes it fit, found by lowering
  /// and analysing variants of its strategy. A caller that needs only the verdict (the search)
  /// can turn this off.
  bool suggestCapacityFixes = true;
  /// Called with each run's analysis when the verifier computes it (the runs that pass the rules
  /// checked before the capacity), so that a caller does not analyse the run again.
  std::function<void(const ir::Run &, analysis::RunAnalysis &)> onAnalysis;
  /// That analysis's options: a caller that ranks runs by step time leaves untimed those that
  /// cannot rank (stepBound, untimedUnfit). The verdicts do not change.
  analysis::AnalysisOptions analysis;
};

/// Checks the composition rules of the language (docs/rules.md) on every run.
std::unique_ptr<Pass> createVerifyPass(VerifyOptions options = {});

/// Runs passes in order, stopping after the first that fails. With `printAfterAll`, prints the IR
/// to `dump` after each pass.
class PassManager {
public:
  void addPass(std::unique_ptr<Pass> pass) { passes.push_back(std::move(pass)); }
  void setPrintAfterAll(llvm::raw_ostream *dump) { this->dump = dump; }
  bool run(ir::Program &program, DiagnosticEngine &diags);

private:
  std::vector<std::unique_ptr<Pass>> passes;
  llvm::raw_ostream *dump = nullptr;
};

} // namespace placec

#endif // PLACEC_PASSES_PASSES_H
