// libFuzzer entry point for `placec import --megatron FLAGS`: feeds arbitrary bytes to the
// Megatron-LM flags importer as a file of flags, with a cluster as `--from` would give it (the
// first byte picks the device count and whether a model is named). Reads no files.
#include "placec/backends/Export.h"
#include "placec/ir/Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static constexpr int64_t kDevices[] = {64, 1, 8, 7, 512, 0};
  uint8_t pick = size > 0 ? data[0] : 0;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);

  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  unsigned id = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, "megatron.flags"), llvm::SMLoc());
  placec::bridge::ImportOptions options;
  // `--model` is optional for Megatron-LM: without it the model is declared from the flags.
  options.modelName = pick & 0x80 ? "gpt_1b" : "";
  options.clusterName = "a100_64";
  options.fromPath = "models.place";
  options.devices = kDevices[(pick & 0x7f) % std::size(kDevices)];
  options.layers = pick & 0x80 ? 24 : 0;
  options.inputName = "megatron.flags";
  llvm::raw_null_ostream out;
  placec::bridge::importMegatron(id, options, diags, out);
  return 0;
}
