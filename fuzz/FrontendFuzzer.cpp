// libFuzzer entry point for the front end: parses arbitrary bytes as a .place file and, when they
// parse, prints the AST, builds the IR with the prelude, verifies and prints it. Reads no files.
#include "PlaceInput.h"
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

void runFrontend(llvm::StringRef input) {
  placec::fuzz::PlaceInput parsed;
  if (!parsed.parse(input))
    return;
  placec::DiagnosticEngine &diags = parsed.diags;
  llvm::raw_null_ostream null;
  placec::printAst(*parsed.files.back(), null);

  // Imports are not followed: resolving them is parseProgram's job, which reads files. The
  // ImportDecls stay in the AST, and names from files never read are simply undeclared.
  std::unique_ptr<placec::ir::Program> program = placec::buildProgram(parsed.files, diags);
  if (!program)
    return;

  placec::ir::printProgram(*program, null);
  if (!placec::createVerifyPass()->run(*program, diags))
    return;
  placec::ir::printProgram(*program, null);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  runFrontend(llvm::StringRef(reinterpret_cast<const char *>(data), size));
  return 0;
}
