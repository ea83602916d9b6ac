// libFuzzer entry point for `placec format`: formats arbitrary bytes as a .place file and, when
// they are accepted, checks the formatter's promise that its output is a fixed point (formatting
// it again changes nothing).
#include "placec/frontend/Formatter.h"
#include "placec/ir/Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace {

std::optional<std::string> format(llvm::StringRef text) {
  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  unsigned id = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, "<fuzz-input>"), llvm::SMLoc());
  return placec::formatBuffer(id, diags);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::optional<std::string> once =
      format(llvm::StringRef(reinterpret_cast<const char *>(data), size));
  if (!once)
    return 0;
  std::optional<std::string> twice = format(*once);
  if (!twice || *twice != *once)
    __builtin_trap(); // The formatted text must format to itself.
  return 0;
}
