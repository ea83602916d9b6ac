// The one diagnostic engine of placec: errors, warnings and notes on llvm::SourceMgr locations,
// printed as `file:line:col: error: message [rule]` with the source line and a caret, counted, and
// optionally checked against `expected-*` comments (--verify-diagnostics).
#ifndef PLACEC_IR_DIAGNOSTICS_H
#define PLACEC_IR_DIAGNOSTICS_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/SMLoc.h"
#include "llvm/Support/SourceMgr.h"

#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace placec {

enum class Severity { Error, Warning, Note };

/// "error", "warning" or "note", as diagnostics and reports print it.
llvm::StringRef toString(Severity severity);

/// One reported diagnostic, kept so that --verify-diagnostics can match it and tests can inspect
/// it.
struct Diagnostic {
  Severity severity;
  llvm::SMLoc loc;
  std::string message; ///< Without the rule suffix.
  std::string rule;    ///< Empty when the diagnostic belongs to no named rule.

  /// The message as printed: `message [rule]`.
  std::string getFullMessage() const;
};

class DiagnosticEngine {
public:
  explicit DiagnosticEngine(llvm::SourceMgr &sourceMgr);

  llvm::SourceMgr &getSourceMgr() { return sourceMgr; }

  /// Reports a diagnostic. `rule` names the language rule that is broken (LANGUAGE.md §8), or is
  /// empty. An invalid location prints as `placec: error: …`.
  void report(Severity severity, llvm::SMLoc loc, const llvm::Twine &message,
              llvm::StringRef rule = {}, llvm::ArrayRef<llvm::SMRange> ranges = {});

  void error(llvm::SMLoc loc, const llvm::Twine &message, llvm::StringRef rule = {},
             llvm::ArrayRef<llvm::SMRange> ranges = {}) {
    report(Severity::Error, loc, message, rule, ranges);
  }
  void warning(llvm::SMLoc loc, const llvm::Twine &message, llvm::StringRef rule = {},
               llvm::ArrayRef<llvm::SMRange> ranges = {}) {
    report(Severity::Warning, loc, message, rule, ranges);
  }
  /// A note belongs to the diagnostic reported just before it.
  void note(llvm::SMLoc loc, const llvm::Twine &message) { report(Severity::Note, loc, message); }

  unsigned getNumErrors() const { return numErrors; }
  unsigned getNumWarnings() const { return numWarnings; }
  bool hasErrors() const { return numErrors != 0; }

  /// Where diagnostics are printed (stderr by default). In verify mode nothing is printed.
  void setOutput(llvm::raw_ostream &os) { out = &os; }
  /// Stops printing; diagnostics are still counted and kept.
  void setQuiet(bool quiet) { this->quiet = quiet; }
  /// Treats warnings as errors.
  void setWarningsAsErrors(bool enable) { warningsAsErrors = enable; }

  const std::vector<Diagnostic> &getDiagnostics() const { return diagnostics; }

  /// Verify mode: diagnostics are collected, not printed, and `verify()` compares them with the
  /// `// expected-error@+N {{text}}`, `expected-warning` and `expected-note` comments found in
  /// every buffer of the source manager. Returns true when they match one for one; otherwise prints
  /// what differs to the output stream.
  void enableVerifyMode() { verifyMode = true; }
  bool isVerifyMode() const { return verifyMode; }
  bool verify();
  /// Diagnostics in this buffer need no expectation in verify mode (the prelude, which cannot
  /// hold `expected-*` comments: its notes point at declarations users refer to).
  void addUncheckedBuffer(unsigned bufferId) { uncheckedBuffers.push_back(bufferId); }

  /// Stops reporting after this many errors (0: no limit); one more note says so.
  void setErrorLimit(unsigned limit) { errorLimit = limit; }

private:
  void print(const Diagnostic &diag, llvm::ArrayRef<llvm::SMRange> ranges);

  llvm::SourceMgr &sourceMgr;
  llvm::raw_ostream *out;
  std::vector<Diagnostic> diagnostics;
  std::vector<unsigned> uncheckedBuffers;
  unsigned numErrors = 0;
  unsigned numWarnings = 0;
  unsigned errorLimit = 0;
  bool limitReached = false;
  bool suppressNotes = false;
  bool quiet = false;
  bool verifyMode = false;
  bool warningsAsErrors = false;
};

} // namespace placec

#endif // PLACEC_IR_DIAGNOSTICS_H
