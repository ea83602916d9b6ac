// What the .place fuzzers share: the fuzzed bytes parsed as one file after the prelude, as
// buildProgram expects them. Reads no files.
#ifndef PLACEC_FUZZ_PLACEINPUT_H
#define PLACEC_FUZZ_PLACEINPUT_H

#include "placec/frontend/Frontend.h"
#include "placec/ir/Diagnostics.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <vector>

namespace placec::fuzz {

/// The name the fuzzed buffer is registered under; no file of that name is ever opened.
constexpr llvm::StringLiteral kInputName = "<fuzz-input>";

/// A fuzzed buffer parsed as one .place file after the prelude: the source manager, the quiet
/// diagnostics engine and the parsed files (the prelude first, the input last) that the front end's
/// later stages take.
struct PlaceInput {
  llvm::SourceMgr sourceMgr;
  DiagnosticEngine diags{sourceMgr};
  std::vector<std::unique_ptr<ast::File>> files;

  /// Parses the prelude from its compiled-in text, then `input`. False when the input does not
  /// parse; the prelude always must.
  bool parse(llvm::StringRef input) {
    diags.setQuiet(true);
    unsigned preludeId = sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBuffer(kPreludeText, kPreludeName), llvm::SMLoc());
    files.push_back(parseBuffer(preludeId, diags));
    if (!files.back() || diags.hasErrors())
      __builtin_trap();
    // A copy, so that the buffer ends in the NUL that MemoryBuffer promises its readers.
    unsigned inputId = sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(input, kInputName), llvm::SMLoc());
    std::unique_ptr<ast::File> file = parseBuffer(inputId, diags);
    if (!file)
      return false;
    files.push_back(std::move(file));
    return true;
  }
};

} // namespace placec::fuzz

#endif // PLACEC_FUZZ_PLACEINPUT_H
