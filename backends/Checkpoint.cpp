// `placec inspect`: reads a placert checkpoint's manifest with llvm::json, prints it as tables and
// verifies each shard's CRC-32 with llvm::crc32 (an implementation independent of the runtime's).
#include "placec/backends/Checkpoint.h"

#include "placec/Config.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace llvm;

namespace placec::checkpoint {

int64_t Tensor::getElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

namespace {

Error failure(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message.str());
}

std::optional<int64_t> getInt(const json::Object &object, StringRef key) {
  return object.getInteger(key);
}

std::string getString(const json::Object &object, StringRef key) {
  std::optional<StringRef> value = object.getString(key);
  return value ? value->str() : "";
}

/// The most elements placert writes in one shard (kMaxShardElements in runtime/src/Checkpoint.h).
constexpr int64_t kMaxShardElements = int64_t(1) << 20;

/// Whether `blocks` blocks of `elements` at `offset + i * stride` lie in [0, total), computed
/// without overflow for any values.
bool insideTensor(int64_t offset, int64_t elements, int64_t blocks, int64_t stride, int64_t total) {
  if (offset < 0 || elements < 0 || blocks < 1 || offset > total || elements > total - offset)
    return false;
  return blocks == 1 || (stride >= 0 && stride <= (total - offset - elements) / (blocks - 1));
}

std::string formatBytes(int64_t bytes) {
  if (bytes >= (int64_t(1) << 20))
    return formatv("{0:f2} MiB", double(bytes) / double(1 << 20)).str();
  if (bytes >= 1024)
    return formatv("{0:f2} KiB", double(bytes) / 1024.0).str();
  return std::to_string(bytes) + " B";
}

} // namespace

Expected<Manifest> readManifest(StringRef path) {
  if (!sys::fs::is_directory(path))
    return failure("'" + path + "' is not a checkpoint directory");
  SmallString<256> directory(path);
  SmallString<256> manifestPath(directory);
  sys::path::append(manifestPath, "manifest.json");
  if (!sys::fs::exists(manifestPath)) {
    SmallString<256> latest(directory);
    sys::path::append(latest, "latest");
    ErrorOr<std::unique_ptr<MemoryBuffer>> pointer = MemoryBuffer::getFile(latest);
    if (!pointer)
      return failure("'" + path +
                     "' is not a checkpoint: it has no manifest.json (an unfinished save?) and "
                     "no 'latest'");
    // `latest` names a checkpoint inside the directory, as placert writes and reads it.
    StringRef name = (*pointer)->getBuffer().trim();
    if (name.empty() || name.contains('/') || name == "." || name == "..")
      return failure("'" + latest + "' does not name a checkpoint in '" + path + "'");
    sys::path::append(directory, name);
    manifestPath = directory;
    sys::path::append(manifestPath, "manifest.json");
  }
  ErrorOr<std::unique_ptr<MemoryBuffer>> text = MemoryBuffer::getFile(manifestPath);
  if (!text)
    return failure("cannot read '" + manifestPath + "': " + text.getError().message());
  Expected<Manifest> manifest = parseManifest((*text)->getBuffer(), manifestPath);
  if (manifest)
    manifest->directory = directory.str().str();
  return manifest;
}

Expected<Manifest> parseManifest(StringRef text, StringRef manifestPath) {
  Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return failure("'" + manifestPath + "' is not valid JSON: " + toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root || getString(*root, "format") != "placert-checkpoint")
    return failure("'" + manifestPath + "' is not a placert checkpoint manifest");
  // Format 1 named its version "version".
  const json::Value *version = root->get("format_version");
  if (!version)
    version = root->get("version");
  std::string readable = formatv("placec {0} reads format versions {1} to {2}", PLACEC_VERSION,
                                 kOldestFormatVersion, kFormatVersion)
                             .str();
  std::optional<int64_t> formatVersion = version ? version->getAsInteger() : std::nullopt;
  if (!formatVersion)
    return failure("'" + manifestPath +
                   "' has no format version (an integer \"format_version\"); " + readable);
  Manifest manifest;
  manifest.formatVersion = *formatVersion;
  manifest.placecVersion = getString(*root, "placec_version");
  manifest.placertVersion = getString(*root, "placert_version");
  if (*formatVersion < kOldestFormatVersion || *formatVersion > kFormatVersion) {
    std::string writer;
    if (!manifest.placecVersion.empty())
      writer += " by a program of placec " + manifest.placecVersion;
    if (!manifest.placertVersion.empty())
      writer += " with placert " + manifest.placertVersion;
    return failure("'" + manifestPath + "': the checkpoint has format version " +
                   Twine(*formatVersion) + (writer.empty() ? "" : " (written" + writer + ")") +
                   ", which is " + (*formatVersion > kFormatVersion ? "newer" : "older") +
                   " than this placec supports: " + readable);
  }

  manifest.run = getString(*root, "run");
  manifest.strategy = getString(*root, "strategy");
  manifest.optimizer = getString(*root, "optimizer");
  manifest.ranks = getInt(*root, "ranks").value_or(0);
  if (const json::Object *model = root->getObject("model"))
    manifest.model = getString(*model, "name");
  if (const json::Array *mesh = root->getArray("mesh"))
    for (const json::Value &axis : *mesh)
      if (const json::Object *object = axis.getAsObject())
        manifest.mesh += (manifest.mesh.empty() ? "" : " x ") + getString(*object, "name") + "=" +
                         std::to_string(getInt(*object, "size").value_or(0));
  const json::Object *scalars = root->getObject("scalars");
  if (!scalars)
    return failure("'" + manifestPath + "' has no scalars");
  for (const auto &[key, value] : *scalars) {
    std::optional<int64_t> number = value.getAsInteger();
    if (!number)
      return failure("'" + manifestPath + "': scalar '" + key.str() + "' is not an integer");
    manifest.scalars[key.str()] = *number;
  }
  const json::Array *files = root->getArray("files");
  const json::Array *tensors = root->getArray("tensors");
  if (!files || !tensors)
    return failure("'" + manifestPath + "' lacks \"files\" or \"tensors\"");
  std::map<int, int64_t> fileBytes;
  for (const json::Value &value : *files) {
    const json::Object *object = value.getAsObject();
    std::optional<int64_t> rank = object ? getInt(*object, "rank") : std::nullopt;
    std::optional<int64_t> bytes = object ? getInt(*object, "bytes") : std::nullopt;
    if (!rank || !bytes || getString(*object, "path").empty() || *rank < 0 || *rank > INT32_MAX ||
        *bytes < 0)
      return failure("'" + manifestPath + "': a file entry lacks its rank, path or bytes");
    if (!fileBytes.emplace(static_cast<int>(*rank), *bytes).second)
      return failure("'" + manifestPath + "': \"files\" lists rank " + Twine(*rank) + " twice");
    manifest.files.push_back({static_cast<int>(*rank), getString(*object, "path"), *bytes});
  }
  for (const json::Value &value : *tensors) {
    const json::Object *object = value.getAsObject();
    const json::Array *shape = object ? object->getArray("shape") : nullptr;
    const json::Array *shards = object ? object->getArray("shards") : nullptr;
    if (!shape || !shards || getString(*object, "name").empty())
      return failure("'" + manifestPath + "': a tensor lacks its name, shape or shards");
    Tensor tensor;
    tensor.name = getString(*object, "name");
    if (llvm::any_of(manifest.tensors, [&](const Tensor &t) { return t.name == tensor.name; }))
      return failure("'" + manifestPath + "': tensor '" + tensor.name + "' is listed twice");
    int64_t total = 1; // Its elements, whose bytes must fit in an int64_t.
    for (const json::Value &dim : *shape) {
      std::optional<int64_t> size = dim.getAsInteger();
      if (!size || *size < 0)
        return failure("'" + manifestPath + "': tensor '" + tensor.name + "' has a bad shape");
      tensor.shape.push_back(*size);
      if (__builtin_mul_overflow(total, *size, &total) || total > INT64_MAX / 4)
        return failure("'" + manifestPath + "': tensor '" + tensor.name +
                       "' has too many elements for a checkpoint");
    }
    int64_t described = 0; // Elements of the tensor in its shards so far.
    for (const json::Value &entry : *shards) {
      const json::Object *shard = entry.getAsObject();
      if (!shard)
        return failure("'" + manifestPath + "': a shard of '" + tensor.name + "' is not an object");
      std::optional<int64_t> offset = getInt(*shard, "offset"),
                             elements = getInt(*shard, "elements"), rank = getInt(*shard, "rank"),
                             fileOffset = getInt(*shard, "file_offset");
      std::optional<int64_t> blocks = getInt(*shard, "blocks").value_or(1),
                             stride = getInt(*shard, "stride").value_or(0);
      std::string crc = getString(*shard, "crc32");
      uint32_t checksum = 0;
      if (!offset || !elements || !rank || !fileOffset || crc.empty() ||
          StringRef(crc).getAsInteger(16, checksum) || *elements <= 0 || *blocks < 1 ||
          (*blocks > 1 && *stride < *elements))
        return failure("'" + manifestPath + "': a shard of '" + tensor.name +
                       "' lacks a valid offset, elements, blocks, stride, rank, file_offset or "
                       "crc32");
      if (*elements > kMaxShardElements || *blocks > kMaxShardElements / *elements)
        return failure("'" + manifestPath + "': a shard of '" + tensor.name + "' has " +
                       Twine(*blocks) + " x " + Twine(*elements) + " elements, more than the " +
                       Twine(kMaxShardElements) + " placert writes in one");
      int64_t shardElements = *blocks * *elements;
      auto file = *rank < 0 || *rank > INT32_MAX ? fileBytes.end()
                                                 : fileBytes.find(static_cast<int>(*rank));
      if (file == fileBytes.end() || *fileOffset < 0 ||
          *fileOffset > file->second - shardElements * 4)
        return failure("'" + manifestPath + "': a shard of '" + tensor.name +
                       "' lies outside the file of rank " + std::to_string(*rank));
      if (!insideTensor(*offset, *elements, *blocks, *stride, total))
        return failure("'" + manifestPath + "': a shard of '" + tensor.name +
                       "' holds elements outside the tensor");
      if (shardElements > total - described)
        return failure("'" + manifestPath + "': the shards of '" + tensor.name +
                       "' hold more than its " + Twine(total) + " elements");
      described += shardElements;
      tensor.shards.push_back(
          {*offset, *elements, *blocks, *stride, static_cast<int>(*rank), *fileOffset, checksum});
    }
    // Every block of every shard, in order, must tile the tensor.
    std::vector<std::pair<int64_t, int64_t>> blocks;
    for (const Shard &shard : tensor.shards)
      for (int64_t b = 0; b < shard.blocks; ++b)
        blocks.push_back({shard.offset + b * shard.stride, shard.elements});
    llvm::sort(blocks);
    int64_t next = 0;
    for (const auto &[offset, elements] : blocks) {
      if (offset != next)
        return failure("'" + manifestPath + "': the shards of '" + tensor.name +
                       "' do not cover it exactly once (at element " + std::to_string(next) + ")");
      next += elements;
    }
    if (next != tensor.getElements())
      return failure("'" + manifestPath + "': the shards of '" + tensor.name + "' hold " +
                     std::to_string(next) + " of its " + std::to_string(tensor.getElements()) +
                     " elements");
    manifest.tensors.push_back(std::move(tensor));
  }
  return manifest;
}

void printManifest(const Manifest &manifest, raw_ostream &os) {
  os << "checkpoint " << manifest.directory << "\n";
  os << "  format version " << manifest.formatVersion << ", written by placec "
     << (manifest.placecVersion.empty() ? "unknown" : manifest.placecVersion) << " with placert "
     << (manifest.placertVersion.empty() ? "unknown" : manifest.placertVersion) << "\n";
  os << "  run " << manifest.run << ", strategy " << manifest.strategy << ", model "
     << manifest.model << ", optimizer " << manifest.optimizer << "\n";
  os << "  mesh " << manifest.mesh << " (" << manifest.ranks << " ranks)\n";
  for (const auto &[key, value] : manifest.scalars)
    os << "  " << key << " " << value << "\n";
  int64_t total = 0;
  os << "\n  " << left_justify("file", 18) << right_justify("rank", 6) << right_justify("bytes", 14)
     << "\n";
  for (const File &file : manifest.files) {
    os << "  " << left_justify(file.path, 18) << right_justify(std::to_string(file.rank), 6)
       << right_justify(std::to_string(file.bytes), 14) << "\n";
    total += file.bytes;
  }
  os << "  " << left_justify("total", 18) << right_justify("", 6)
     << right_justify(std::to_string(total), 14) << "  (" << formatBytes(total) << ")\n";
  os << "\n  " << left_justify("tensor", 28) << left_justify("shape", 12)
     << right_justify("elements", 10) << right_justify("shards", 8) << "  writing ranks\n";
  for (const Tensor &tensor : manifest.tensors) {
    std::string shape = "[";
    for (size_t i = 0; i < tensor.shape.size(); ++i)
      shape += (Twine(i ? "," : "") + Twine(tensor.shape[i])).str();
    shape += "]";
    std::vector<int> ranks;
    for (const Shard &shard : tensor.shards)
      if (!llvm::is_contained(ranks, shard.rank))
        ranks.push_back(shard.rank);
    llvm::sort(ranks);
    std::string writers;
    for (int rank : ranks)
      writers += (Twine(writers.empty() ? "" : ",") + Twine(rank)).str();
    os << "  " << left_justify(tensor.name, 28) << left_justify(shape, 12)
       << right_justify(std::to_string(tensor.getElements()), 10)
       << right_justify(std::to_string(tensor.shards.size()), 8) << "  " << writers << "\n";
  }
}

Error verifyChecksums(const Manifest &manifest, int64_t &checked, int64_t &bytes) {
  checked = 0;
  bytes = 0;
  std::map<int, const File *> files;
  for (const File &file : manifest.files) {
    files[file.rank] = &file;
    SmallString<256> path(manifest.directory);
    sys::path::append(path, file.path);
    uint64_t size = 0;
    if (sys::fs::file_size(path, size))
      return failure("shard file '" + path + "' is missing");
    if (static_cast<int64_t>(size) != file.bytes)
      return failure("shard file '" + path + "' has " + std::to_string(size) +
                     " bytes, the manifest records " + std::to_string(file.bytes) +
                     " (truncated?)");
  }
  for (const File &file : manifest.files) {
    SmallString<256> path(manifest.directory);
    sys::path::append(path, file.path);
    ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
        MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
    if (!buffer)
      return failure("cannot read '" + path + "': " + buffer.getError().message());
    ArrayRef<uint8_t> data(reinterpret_cast<const uint8_t *>((*buffer)->getBufferStart()),
                           (*buffer)->getBufferSize());
    for (const Tensor &tensor : manifest.tensors)
      for (const Shard &shard : tensor.shards) {
        if (shard.rank != file.rank)
          continue;
        ArrayRef<uint8_t> piece =
            data.slice(static_cast<size_t>(shard.fileOffset),
                       static_cast<size_t>(shard.blocks * shard.elements * 4));
        uint32_t crc = llvm::crc32(piece);
        if (crc != shard.crc)
          return failure(formatv("checksum mismatch: '{0}', shard of '{1}' at elements [{2}, "
                                 "{3}) (byte {4}): CRC-32 {5:x-8}, the manifest records {6:x-8}",
                                 path, tensor.name, shard.offset, shard.offset + shard.elements,
                                 shard.fileOffset, crc, shard.crc)
                             .str());
        ++checked;
        bytes += shard.blocks * shard.elements * 4;
      }
  }
  return Error::success();
}

} // namespace placec::checkpoint
