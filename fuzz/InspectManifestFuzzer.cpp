// libFuzzer entry point for the checkpoint manifest reader of `placec inspect`
// (backends/Checkpoint.cpp): parses and checks arbitrary bytes as a manifest.json and, when they
// are accepted, prints the manifest's tables. Reads no files.
#include "placec/backends/Checkpoint.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<placec::checkpoint::Manifest> manifest =
      placec::checkpoint::parseManifest(text, "ckpt/manifest.json");
  if (!manifest) {
    llvm::consumeError(manifest.takeError());
    return 0;
  }
  llvm::raw_null_ostream out;
  placec::checkpoint::printManifest(*manifest, out);
  return 0;
}
