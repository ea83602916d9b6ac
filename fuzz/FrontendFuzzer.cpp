// libFuzzer entry point for the front end: parses arbitrary bytes as a .place file and, when they
// parse, prints the AST, builds the IR with the prelude, verifies and prints it. Reads no files.
#include "placec/frontend/Frontend.h"
#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"
#include "placec/passes/Passes.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace {

/// The name the fuzzed buffer is registered under; no file of that name is ever opened.
constexpr llvm::StringLiteral kInputName = "<fuzz-input>";

void runFrontend(llvm::StringRef input) {
  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);

  // The prelude comes first, as buildProgram expects; it is parsed from its compiled-in text.
  unsigned preludeId = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(placec::kPreludeText, placec::kPreludeName), llvm::SMLoc());
  std::vector<std::unique_ptr<placec::ast::File>> files;
  files.push_back(placec::parseBuffer(preludeId, diags));
  if (!files.back() || diags.hasErrors())
    __builtin_trap(); // The prelude must always parse.

  // A copy, so that the buffer ends in the NUL that MemoryBuffer promises its readers.
  unsigned inputId = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(input, kInputName), llvm::SMLoc());
  std::unique_ptr<placec::ast::File> file = placec::parseBuffer(inputId, diags);
  if (!file)
    return;
  llvm::raw_null_ostream null;
  placec::printAst(*file, null);

  // Imports are not followed: resolving them is parseProgram's job, which reads files. The
  // ImportDecls stay in the AST, and names from files never read are simply undeclared.
  files.push_back(std::move(file));
  std::unique_ptr<placec::ir::Program> program = placec::buildProgram(files, diags);
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
