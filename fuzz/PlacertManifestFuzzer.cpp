// libFuzzer entry point for the checkpoint manifest reader of placert (runtime/src/Checkpoint.cpp,
// the one a training program runs on `--resume`): parses and checks arbitrary bytes as a
// manifest.json, as a load does before it reads any shard. Reads no files.
#include "Checkpoint.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  placert::checkManifest(std::string(reinterpret_cast<const char *>(data), size));
  return 0;
}
