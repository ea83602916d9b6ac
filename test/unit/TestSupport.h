// Helpers shared by the unit tests: compile Place text through the front end and the verifier.
#ifndef PLACEC_TEST_UNIT_TESTSUPPORT_H
#define PLACEC_TEST_UNIT_TESTSUPPORT_H

#include "placec/frontend/Frontend.h"
#include "placec/passes/Passes.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

namespace placec::unittest {

/// A program compiled from text and verified, with the diagnostics it produced as text.
struct Compiled {
  llvm::SourceMgr sourceMgr;
  DiagnosticEngine diags{sourceMgr};
  std::string messages;
  llvm::raw_string_ostream messageStream{messages};
  /// Null when parsing, Sema or the verifier failed.
  std::unique_ptr<ir::Program> program;
};

/// Compiles `text` (named `name` in diagnostics) with capacity reported as a warning, as
/// `placec report` does.
inline std::unique_ptr<Compiled> compile(const std::string &text, const char *name = "test.place") {
  auto result = std::make_unique<Compiled>();
  result->diags.setOutput(result->messageStream);
  auto files = parseProgram(llvm::MemoryBuffer::getMemBufferCopy(text, name), result->diags);
  if (!files.empty())
    result->program = buildProgram(files, result->diags);
  if (result->program) {
    PassManager passes;
    VerifyOptions options;
    options.capacityIsError = false;
    passes.addPass(createVerifyPass(options));
    if (!passes.run(*result->program, result->diags))
      result->program.reset();
  }
  return result;
}

} // namespace placec::unittest

#endif // PLACEC_TEST_UNIT_TESTSUPPORT_H
