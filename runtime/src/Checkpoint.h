// Sharded checkpoints of a trainer's state: every rank writes the pieces of the logical tensors it
// owns to its own file, rank 0 writes the manifest last, and the checkpoint directory appears by
// an atomic rename; loading reads, on each rank, only the shards that overlap what it needs, under
// any placement. The interface is a list of flat element ranges of logical tensors, so any trainer
// (mlp, transformer) can use it (docs/checkpoints.md).
#ifndef PLACERT_SRC_CHECKPOINT_H
#define PLACERT_SRC_CHECKPOINT_H

#include "placert/placert.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace placert {

/// A run of a logical tensor (row-major flat elements [offset, offset + elements)) and where its
/// fp32 values are in this rank's memory. A strided run has `blocks` such runs, block i at
/// `offset + i * stride` (a column slice of consecutive rows), back to back in memory.
struct CheckpointShard {
  std::string tensor;
  int64_t offset = 0;
  int64_t elements = 0;
  float *data = nullptr;
  int64_t blocks = 1;
  int64_t stride = 0;
};

/// The manifest's format version that saveCheckpoint writes, and the oldest one loadCheckpoint
/// reads; a checkpoint of any other version is refused with both versions named. Version 2 names
/// it "format_version" (version 1 named it "version") and records "placec_version" and
/// "placert_version". A change that a reader must know about increments it.
constexpr int kCheckpointFormatVersion = 2;
constexpr int kOldestCheckpointFormatVersion = 1;

/// What a trainer saves or loads.
struct CheckpointContents {
  /// Every logical tensor of the model (every rank lists them all) and its shape.
  std::map<std::string, std::vector<int64_t>> tensors;
  /// Saving: the runs this rank writes; every element of every tensor must be written by
  /// exactly one rank. Loading: the runs this rank needs, filled from the checkpoint.
  std::vector<CheckpointShard> shards;
  /// Integer state (step, data position, seed). Saving: rank 0's values are written; loading:
  /// set to the checkpoint's values.
  std::map<std::string, int64_t> scalars;
  /// Saving: JSON values written into the manifest under these keys, to describe the run
  /// (model, run, strategy, mesh, placement). Loading: ignored.
  std::vector<std::pair<std::string, std::string>> description;
  /// Saving: the version of the placec that generated the program (TrainingSpec::placecVersion).
  std::string placecVersion;
};

/// The largest shard a rank writes, in elements (4 MiB): longer runs are split, so that one
/// checksum covers a bounded range and a reader needs one bounded buffer.
constexpr int64_t kMaxShardElements = int64_t(1) << 20;

/// Saves the state after `step` steps as `directory`/step-NNNNNNNN and points
/// `directory`/latest at it. Collective over every rank. The fault injection of
/// `--die-in-save` happens here.
Status saveCheckpoint(Runtime &runtime, const std::string &directory, int64_t step,
                      const CheckpointContents &contents);

/// Loads `path` (a checkpoint directory, or a directory of checkpoints: its `latest`, else its
/// newest complete one) into `contents.shards` and `contents.scalars`. Collective over every
/// rank. Validates the manifest, the files and the checksum of every shard it reads on every
/// rank before writing any destination; on any error, nothing is written and every rank gets a
/// message naming what is wrong. `loaded` receives the checkpoint directory.
Status loadCheckpoint(Runtime &runtime, const std::string &path, CheckpointContents &contents,
                      std::string &loaded);

/// The name of the checkpoint directory of `step` ("step-00000012").
std::string checkpointName(int64_t step);

/// Parses the text of a manifest.json and checks it as loadCheckpoint does before it reads any
/// shard (JSON syntax, format and format version, every field's type, shards inside their files,
/// every tensor tiled exactly once), without touching the file system. Returns what is wrong, or
/// an empty string. For tests and the fuzzer (fuzz/).
std::string checkManifest(const std::string &text);

/// `text` as a JSON string literal, quotes included.
std::string jsonQuote(const std::string &text);

} // namespace placert

#endif // PLACERT_SRC_CHECKPOINT_H
