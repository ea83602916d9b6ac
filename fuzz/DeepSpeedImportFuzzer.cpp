// libFuzzer entry point for `placec import CONFIG.json`: feeds arbitrary bytes to the DeepSpeed
// config importer as the JSON file, with a model and cluster as `--from` would give them (the
// first byte picks the device and layer counts). Reads no files.
#include "placec/backends/Export.h"
#include "placec/ir/Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // Device counts of real clusters and awkward ones (1, a prime), layer counts likewise.
  static constexpr int64_t kDevices[] = {64, 1, 8, 7, 512, 0};
  static constexpr int64_t kLayers[] = {32, 0, 1, 3, 96};
  uint8_t pick = size > 0 ? data[0] : 0;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);

  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  unsigned id = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, "ds_config.json"), llvm::SMLoc());
  placec::bridge::ImportOptions options;
  options.modelName = "llama_7b";
  options.clusterName = "a100_64";
  options.fromPath = "models.place";
  options.devices = kDevices[pick % std::size(kDevices)];
  options.layers = kLayers[pick / std::size(kDevices) % std::size(kLayers)];
  options.inputName = "ds_config.json";
  llvm::raw_null_ostream out;
  placec::bridge::importDeepSpeed(id, options, diags, out);
  return 0;
}
