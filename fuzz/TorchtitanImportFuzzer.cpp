// libFuzzer entry point for `placec import job.toml` (a torchtitan job config): feeds arbitrary
// bytes to the torchtitan importer as the TOML file, with a cluster (and, for half the inputs, a
// model) as `--from` would give them; the first byte picks the device count. Reads no files.
#include "placec/backends/Export.h"
#include "placec/ir/Diagnostics.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static constexpr int64_t kDevices[] = {64, 1, 8, 7, 512, 0, 128};
  uint8_t pick = size > 0 ? data[0] : 0;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);

  llvm::SourceMgr sourceMgr;
  placec::DiagnosticEngine diags(sourceMgr);
  diags.setQuiet(true);
  unsigned id = sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, "job.toml"),
                                             llvm::SMLoc());
  placec::bridge::ImportOptions options;
  // `--model` is optional: without it the model comes from torchtitan's llama3 flavors.
  options.modelName = pick & 0x80 ? "llama3_8b" : "";
  options.layers = pick & 0x80 ? 32 : 0;
  options.modelSeq = pick & 0x80 ? 8192 : 0;
  options.clusterName = "h100_64";
  options.fromPath = "models.place";
  options.devices = kDevices[(pick & 0x7f) % std::size(kDevices)];
  options.inputName = "job.toml";
  llvm::raw_null_ostream out;
  placec::bridge::importTorchtitan(id, options, diags, out);
  return 0;
}
