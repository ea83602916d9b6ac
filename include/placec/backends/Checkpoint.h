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

/// The manifest format versions this placec reads: the same as placert's
/// (kCheckpointFormatVersion and kOldestCheckpointFormatVersion in runtime/src/Checkpoint.h, which
/// docs/checkpoints.md describes; a unit test keeps them equal).
constexpr int64_t kFormatVersion = 2;
constexpr int64_t kOldestFormatVersion = 1;

struct Manifest {
  std::string directory; ///< The checkpoint directory the manifest is in.
  int64_t formatVersion = 0;
  /// The versions of the placec that generated the program that wrote it and of its placert
  /// (empty in format 1, which did not record them).
  std::string placecVersion, placertVersion;
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

/// The same checks on the text of a manifest; `manifestPath` only names it in messages, and no
/// file is read (the fuzzer calls it). `directory` is left empty.
llvm::Expected<Manifest> parseManifest(llvm::StringRef text, llvm::StringRef manifestPath);

/// Prints the manifest as tables: run, strategy, mesh, scalars, files, tensors and shards.
void printManifest(const Manifest &manifest, llvm::raw_ostream &os);

/// Reads every shard and compares its CRC-32 (llvm::crc32) with the manifest's. Returns the
/// first mismatch, truncated or missing file as an error; `checked` receives the shard count.
llvm::Error verifyChecksums(const Manifest &manifest, int64_t &checked, int64_t &bytes);

} // namespace placec::checkpoint

#endif // PLACEC_BACKENDS_CHECKPOINT_H
