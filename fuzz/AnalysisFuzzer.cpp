// libFuzzer entry point for everything after the front end: parses arbitrary bytes as a .place
// file and, when they build and verify as `placec report` verifies them (capacity left to the
// report), lowers every run to its step plan, analyzes it and prints the reports with every
// formula (text, JSON and HTML), and the difference between the first two runs. The cost model's
// arithmetic on inputs no test wrote (huge or tiny sizes, degenerate meshes, every combination
// of settings) must give a report or a diagnostic, never a crash, a hang or undefined behavior.
// Reads no files.
#include "PlaceInput.h"
#include "placec/backends/Report.h"
#include "placec/frontend/Frontend.h"
#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"
#include "placec/passes/Passes.h"

#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace {

void runAnalysis(llvm::StringRef input) {
  placec::fuzz::PlaceInput parsed;
  if (!parsed.parse(input))
    return;
  placec::DiagnosticEngine &diags = parsed.diags;
  std::unique_ptr<placec::ir::Program> program = placec::buildProgram(parsed.files, diags);
  if (!program || diags.hasErrors())
    return;
  placec::VerifyOptions verifyOptions;
  verifyOptions.capacityIsError = false;
  if (!placec::createVerifyPass(verifyOptions)->run(*program, diags) || diags.hasErrors())
    return;

  std::vector<placec::report::RunReport> reports;
  for (const std::unique_ptr<placec::ir::Run> &run : program->runs)
    reports.push_back(placec::report::analyzeRun(*run));
  std::vector<placec::report::ReportDiagnostic> diagnostics =
      placec::report::collectDiagnostics(diags);
  placec::report::attachDiagnostics(reports, diagnostics, diags);

  llvm::raw_null_ostream null;
  placec::report::ReportOptions options;
  options.explain = true;
  options.inputName = placec::fuzz::kInputName.str();
  for (placec::report::Format format :
       {placec::report::Format::Text, placec::report::Format::Json, placec::report::Format::Html}) {
    options.format = format;
    placec::report::printReport(reports, diagnostics, options, null);
  }
  if (reports.size() >= 2)
    placec::report::printDiff({&reports[0], "a"}, {&reports[1], "b"}, placec::report::Format::Text,
                              null);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  runAnalysis(llvm::StringRef(reinterpret_cast<const char *>(data), size));
  return 0;
}
