// libFuzzer entry point for `placec import config.json` (a Hugging Face config): feeds arbitrary
// bytes to the Hugging Face importer as the JSON file (the first byte picks a --seq). Reads no
// files.
#include "placec/backends/Export.h"
#include "placec/ir/Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // No --seq, short and long ones, and one past every limit.
  static constexpr int64_t kSeq[] = {0, 1, 4096, 131072, int64_t(1) << 40};
  uint8_t pick = size > 0 ? data[0] : 0;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);

  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  unsigned id = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, "config.json"), llvm::SMLoc());
  placec::bridge::ImportOptions options;
  options.seq = kSeq[pick % std::size(kSeq)];
  options.inputName = "hf/config.json";
  llvm::raw_null_ostream out;
  // What the driver does: a JSON object with model_type is a Hugging Face config.
  (void)placec::bridge::isHuggingFaceConfig(text);
  placec::bridge::importHuggingFace(id, options, diags, out);
  return 0;
}
