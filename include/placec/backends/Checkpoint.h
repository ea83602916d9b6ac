// Reading the checkpoints that placert writes (docs/checkpoints.md): the manifest, independently
// of the runtime's reader, a table of it, and a verification of every shard's CRC-32, for
// `placec inspect DIR`.
#ifndef PLACEC_BACKENDS_CHECKPOINT_H
#define PLACEC_BACKENDS_CHECKPOINT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace placec::checkpoint {

struct Shard {
  int64_t offset = 0, elements = 0; ///< Flat elements of the logical tensor.
  int64_t blocks = 1, stride = 0;   ///< Strided: `blocks` runs of `elements`, `stride` apart.
  int rank = 0;                     ///< The rank that wrote it, in whose file it is.
  int64_t fileOffset = 0;           ///< Bytes.
  uint32_t crc = 0;                 ///< CRC-32 of its fp32 bytes.
};

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<Shard> shards;
  int64_t getElements() const;
};

struct File {
  int rank = 0;
  std::string path; ///< Relative to the checkpoint directory.
  int64_t bytes = 0;
};

struct Manifest {
  std::string directory; ///< The checkpoint directory the manifest is in.
  std::string run, strategy, model, optimizer;
  std::string mesh; ///< "dp=4", "pp=2 x dp=2".
  int64_t ranks = 0;
  std::map<std::string, int64_t> scalars;
  std::vector<File> files;
  std::vector<Tensor> tensors;
};

/// Reads the manifest of `path`: a checkpoint directory, or a directory of checkpoints (its
/// `latest`). Checks its structure: types, files that exist, shards inside their file, and every
/// tensor covered exactly once.
llvm::Expected<Manifest> readManifest(llvm::StringRef path);

/// Prints the manifest as tables: run, strategy, mesh, scalars, files, tensors and shards.
void printManifest(const Manifest &manifest, llvm::raw_ostream &os);

/// Reads every shard and compares its CRC-32 (llvm::crc32) with the manifest's. Returns the
/// first mismatch, truncated or missing file as an error; `checked` receives the shard count.
llvm::Error verifyChecksums(const Manifest &manifest, int64_t &checked, int64_t &bytes);

} // namespace placec::checkpoint

#endif // PLACEC_BACKENDS_CHECKPOINT_H
