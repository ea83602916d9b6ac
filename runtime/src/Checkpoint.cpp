// Sharded checkpoints: the save protocol (shard files, manifest last, atomic renames), the
// manifest's JSON, and the validating, resharding load (docs/checkpoints.md).
#include "Checkpoint.h"

#include "Crc32.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <mpi.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace placert {

namespace fs = std::filesystem;

static_assert(sizeof(float) == 4, "checkpoints store IEEE fp32");

std::string checkpointName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

namespace {

constexpr const char *kFormat = "placert-checkpoint";

std::string rankFileName(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.bin", rank);
  return name;
}

std::string errnoText() { return std::strerror(errno); }

//===----------------------------------------------------------------------===//
// A small JSON reader (the runtime depends on the standard library, MPI and BLAS only)
//===----------------------------------------------------------------------===//

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  bool integral = false; ///< A number written without fraction or exponent.
  int64_t integer = 0;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  /// An object's members, in order: keys[i] names values[i]. (Not pairs: a pair of an incomplete
  /// type is not allowed here.)
  std::vector<std::string> keys;
  std::vector<Json> values;

  const Json *get(const std::string &key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key)
        return &values[i];
    return nullptr;
  }
};

class JsonParser {
public:
  explicit JsonParser(const std::string &text) : text(text) {}

  bool parse(Json &result, std::string &error) {
    if (!value(result, 0) || (skip(), pos != text.size())) {
      error = message.empty() ? "unexpected text" : message;
      error += " at byte " + std::to_string(pos);
      return false;
    }
    return true;
  }

private:
  void skip() {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool fail(const std::string &what) {
    if (message.empty())
      message = what;
    return false;
  }
  bool literal(const char *word) {
    size_t n = std::strlen(word);
    if (text.compare(pos, n, word) != 0)
      return fail("invalid literal");
    pos += n;
    return true;
  }
  bool stringValue(std::string &out) {
    ++pos; // the opening quote
    while (pos < text.size() && text[pos] != '"') {
      char c = text[pos++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= text.size())
        break;
      char e = text[pos++];
      switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u': {
        if (pos + 4 > text.size())
          return fail("truncated \\u escape");
        unsigned code =
            static_cast<unsigned>(std::strtoul(text.substr(pos, 4).c_str(), nullptr, 16));
        pos += 4;
        out += code < 0x80 ? static_cast<char>(code) : '?';
        break;
      }
      default:
        out += e;
      }
    }
    if (pos >= text.size())
      return fail("unterminated string");
    ++pos;
    return true;
  }
  bool value(Json &out, int depth) {
    if (depth > 64)
      return fail("nesting too deep");
    skip();
    if (pos >= text.size())
      return fail("unexpected end");
    char c = text[pos];
    if (c == '{') {
      out.kind = Json::Kind::Object;
      ++pos;
      skip();
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        return true;
      }
      while (true) {
        skip();
        if (pos >= text.size() || text[pos] != '"')
          return fail("expected a key");
        std::string key;
        if (!stringValue(key))
          return false;
        skip();
        if (pos >= text.size() || text[pos] != ':')
          return fail("expected ':'");
        ++pos;
        Json member;
        if (!value(member, depth + 1))
          return false;
        out.keys.push_back(std::move(key));
        out.values.push_back(std::move(member));
        skip();
        if (pos < text.size() && text[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < text.size() && text[pos] == '}') {
          ++pos;
          return true;
        }
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      out.kind = Json::Kind::Array;
      ++pos;
      skip();
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        return true;
      }
      while (true) {
        Json element;
        if (!value(element, depth + 1))
          return false;
        out.array.push_back(std::move(element));
        skip();
        if (pos < text.size() && text[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < text.size() && text[pos] == ']') {
          ++pos;
          return true;
        }
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      out.kind = Json::Kind::String;
      return stringValue(out.string);
    }
    if (c == 't' || c == 'f') {
      out.kind = Json::Kind::Bool;
      out.boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n')
      return literal("null");
    size_t start = pos;
    if (text[pos] == '-')
      ++pos;
    bool fraction = false;
    while (pos < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.' ||
            text[pos] == 'e' || text[pos] == 'E' || text[pos] == '+' || text[pos] == '-')) {
      fraction |= !std::isdigit(static_cast<unsigned char>(text[pos]));
      ++pos;
    }
    std::string number = text.substr(start, pos - start);
    if (number.empty() || number == "-")
      return fail("unexpected character");
    out.kind = Json::Kind::Number;
    char *end = nullptr;
    out.number = std::strtod(number.c_str(), &end);
    if (*end != '\0')
      return fail("invalid number");
    if (!fraction) {
      errno = 0;
      out.integer = std::strtoll(number.c_str(), &end, 10);
      out.integral = errno == 0 && *end == '\0';
    }
    return true;
  }

  const std::string &text;
  size_t pos = 0;
  std::string message;
};

} // namespace

std::string jsonQuote(const std::string &text) {
  std::string result = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      result += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      result += escaped;
      continue;
    }
    result += c;
  }
  return result + "\"";
}

namespace {

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

bool writeAll(int fd, const void *data, size_t size) {
  const char *bytes = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t written = ::write(fd, bytes, size);
    if (written < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

bool readAt(int fd, void *data, size_t size, int64_t offset) {
  char *bytes = static_cast<char *>(data);
  while (size > 0) {
    ssize_t got = ::pread(fd, bytes, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return false;
    bytes += got;
    size -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

/// fsyncs a file or a directory (a rename is durable once its directory is synced).
Status syncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return Status(StatusCode::Io, "cannot open '" + path + "' to sync it: " + errnoText());
  int code = ::fsync(fd);
  std::string error = errnoText();
  ::close(fd);
  if (code != 0)
    return Status(StatusCode::Io, "cannot sync '" + path + "': " + error);
  return Status::success();
}

/// Writes `text` to `path` and fsyncs it.
Status writeFileSynced(const std::string &path, const std::string &text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return Status(StatusCode::Io, "cannot create '" + path + "': " + errnoText());
  bool ok = writeAll(fd, text.data(), text.size()) && ::fsync(fd) == 0;
  std::string error = errnoText();
  ::close(fd);
  if (!ok)
    return Status(StatusCode::Io, "cannot write '" + path + "': " + error);
  return Status::success();
}

bool readFile(const std::string &path, std::string &text) {
  FILE *file = std::fopen(path.c_str(), "rb");
  if (!file)
    return false;
  char chunk[65536];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, file)) > 0)
    text.append(chunk, got);
  bool ok = !std::ferror(file);
  std::fclose(file);
  return ok;
}

//===----------------------------------------------------------------------===//
// Collectives outside the plan, under the watchdog
//===----------------------------------------------------------------------===//

Status mpiFailure(Runtime &runtime, const std::string &what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Status(StatusCode::Communication, "rank " + std::to_string(runtime.getRank()) + ": " +
                                               what + " failed: " + std::string(text, length));
}

/// Rank 0's `text` on every rank.
Status broadcastString(Runtime &runtime, const std::string &what, std::string &text) {
  return runtime.guarded(what, [&]() -> Status {
    long long length = static_cast<long long>(text.size());
    int code = MPI_Bcast(&length, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (code != MPI_SUCCESS)
      return mpiFailure(runtime, what, code);
    text.resize(static_cast<size_t>(length));
    code = MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD);
    return code == MPI_SUCCESS ? Status::success() : mpiFailure(runtime, what, code);
  });
}

/// Every rank's `mine` on rank 0 (empty elsewhere).
Status gatherStrings(Runtime &runtime, const std::string &what, const std::string &mine,
                     std::vector<std::string> &all) {
  return runtime.guarded(what, [&]() -> Status {
    int size = runtime.getWorldSize(), rank = runtime.getRank();
    int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
    int code = MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (code != MPI_SUCCESS)
      return mpiFailure(runtime, what, code);
    int total = 0;
    for (int i = 0; i < size; ++i) {
      offsets[static_cast<size_t>(i)] = total;
      total += lengths[static_cast<size_t>(i)];
    }
    std::string joined(rank == 0 ? static_cast<size_t>(total) : 0, '\0');
    code = MPI_Gatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(), offsets.data(),
                       MPI_CHAR, 0, MPI_COMM_WORLD);
    if (code != MPI_SUCCESS)
      return mpiFailure(runtime, what, code);
    all.clear();
    if (rank == 0)
      for (int i = 0; i < size; ++i)
        all.push_back(joined.substr(static_cast<size_t>(offsets[static_cast<size_t>(i)]),
                                    static_cast<size_t>(lengths[static_cast<size_t>(i)])));
    return Status::success();
  });
}

/// Combines each rank's error (empty: none) into one message on every rank; identical messages
/// are listed once with their ranks.
Status agree(Runtime &runtime, const std::string &what, const std::string &mine,
             std::string &combined) {
  std::vector<std::string> all;
  PLACERT_TRY(gatherStrings(runtime, what, mine, all));
  combined.clear();
  if (runtime.getRank() == 0) {
    std::vector<std::pair<std::string, std::vector<int>>> messages;
    for (size_t rank = 0; rank < all.size(); ++rank) {
      if (all[rank].empty())
        continue;
      auto it = std::find_if(messages.begin(), messages.end(),
                             [&](const auto &entry) { return entry.first == all[rank]; });
      if (it == messages.end())
        messages.push_back({all[rank], {static_cast<int>(rank)}});
      else
        it->second.push_back(static_cast<int>(rank));
    }
    for (const auto &[message, ranks] : messages) {
      std::string who = ranks.size() == all.size() ? "every rank"
                        : ranks.size() == 1        ? "rank " + std::to_string(ranks[0])
                                                   : "ranks ";
      if (ranks.size() > 1 && ranks.size() < all.size())
        for (size_t i = 0; i < ranks.size(); ++i)
          who += (i ? ", " : "") + std::to_string(ranks[i]);
      combined += (combined.empty() ? "" : "\n  ") + who + ": " + message;
    }
  }
  return broadcastString(runtime, what, combined);
}

//===----------------------------------------------------------------------===//
// The manifest
//===----------------------------------------------------------------------===//

/// A shard: `blocks` blocks of `elements` (block i at `offset + i * stride`), stored back to back
/// at `fileOffset` in the file of `rank`, with one CRC over them.
struct ManifestShard {
  int64_t offset = 0, elements = 0;
  int64_t blocks = 1, stride = 0;
  int rank = 0;
  int64_t fileOffset = 0;
  uint32_t crc = 0;
  int64_t getTotal() const { return blocks * elements; }
};

/// One block of a shard, for tiling and overlaps.
struct Block {
  int64_t offset = 0, elements = 0;
  const ManifestShard *shard = nullptr;
  int64_t index = 0; ///< Within its shard.
};

/// The blocks of `shards`, sorted by offset.
std::vector<Block> blocksOf(const std::vector<ManifestShard> &shards) {
  std::vector<Block> blocks;
  for (const ManifestShard &shard : shards)
    for (int64_t i = 0; i < shard.blocks; ++i)
      blocks.push_back({shard.offset + i * shard.stride, shard.elements, &shard, i});
  std::sort(blocks.begin(), blocks.end(),
            [](const Block &a, const Block &b) { return a.offset < b.offset; });
  return blocks;
}

struct Manifest {
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::vector<ManifestShard>> shards;
  std::map<std::string, std::vector<Block>> blocks;     ///< Sorted by offset.
  std::map<int, std::pair<std::string, int64_t>> files; ///< rank → (file, bytes)
  std::map<std::string, int64_t> scalars;
};

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// The element count of a shape read from a manifest, or -1 when its bytes (4 per element) would
/// not fit in an int64_t.
int64_t countElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > INT64_MAX / 4)
      return -1;
  return n;
}

/// Whether `blocks` blocks of `elements` at `offset + i * stride` lie in [0, total), computed
/// without overflow for any values.
bool insideTensor(int64_t offset, int64_t elements, int64_t blocks, int64_t stride, int64_t total) {
  if (offset < 0 || elements < 0 || blocks < 1 || offset > total || elements > total - offset)
    return false;
  // The last block starts (blocks - 1) * stride after the first.
  return blocks == 1 || (stride >= 0 && stride <= (total - offset - elements) / (blocks - 1));
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// Checks that `shards` (blocks sorted by offset) cover [0, elements) once; returns what is
/// wrong.
std::string checkTiling(const std::string &tensor, const std::vector<Block> &shards,
                        int64_t elements) {
  int64_t next = 0;
  for (const Block &shard : shards) {
    if (shard.elements <= 0)
      return "tensor '" + tensor + "' has an empty shard";
    if (shard.offset > next)
      return "no shard holds elements [" + std::to_string(next) + ", " +
             std::to_string(shard.offset) + ") of tensor '" + tensor + "'";
    if (shard.offset < next)
      return "shards of tensor '" + tensor + "' overlap at element " + std::to_string(shard.offset);
    next = shard.offset + shard.elements;
  }
  if (next != elements)
    return "the shards of tensor '" + tensor + "' hold " + std::to_string(next) + " of its " +
           std::to_string(elements) + " elements";
  return "";
}

bool getInt(const Json &object, const char *key, int64_t &out) {
  const Json *value = object.get(key);
  if (!value || value->kind != Json::Kind::Number || !value->integral)
    return false;
  out = value->integer;
  return true;
}

/// Reads the manifest's shards and scalars, checking types and that every tensor is tiled.
std::string parseManifest(const std::string &text, Manifest &manifest) {
  Json root;
  std::string error;
  if (!JsonParser(text).parse(root, error))
    return "manifest.json is not valid JSON: " + error;
  const Json *format = root.get("format");
  if (root.kind != Json::Kind::Object || !format || format->string != kFormat)
    return "manifest.json is not a placert checkpoint manifest (no \"format\": \"" +
           std::string(kFormat) + "\")";
  // Format 1 named its version "version".
  const Json *version = root.get("format_version");
  if (!version)
    version = root.get("version");
  std::string readable = "placert " PLACERT_VERSION_STRING " reads format versions " +
                         std::to_string(kOldestCheckpointFormatVersion) + " to " +
                         std::to_string(kCheckpointFormatVersion);
  if (!version || version->kind != Json::Kind::Number || !version->integral)
    return "manifest.json has no format version (an integer \"format_version\"); " + readable;
  if (version->integer < kOldestCheckpointFormatVersion ||
      version->integer > kCheckpointFormatVersion) {
    std::string writer;
    const Json *placec = root.get("placec_version");
    const Json *placert = root.get("placert_version");
    if (placec && placec->kind == Json::Kind::String)
      writer += " by a program of placec " + placec->string;
    if (placert && placert->kind == Json::Kind::String)
      writer += " with placert " + placert->string;
    return "the checkpoint has format version " + std::to_string(version->integer) +
           (writer.empty() ? "" : " (written" + writer + ")") + ", which is " +
           (version->integer > kCheckpointFormatVersion ? "newer" : "older") +
           " than this placert supports: " + readable;
  }
  const Json *scalars = root.get("scalars");
  if (!scalars || scalars->kind != Json::Kind::Object)
    return "manifest.json has no \"scalars\" object";
  for (size_t i = 0; i < scalars->keys.size(); ++i) {
    const std::string &name = scalars->keys[i];
    const Json &value = scalars->values[i];
    if (value.kind != Json::Kind::Number || !value.integral)
      return "manifest.json: scalar '" + name + "' is not an integer";
    manifest.scalars[name] = value.integer;
  }
  const Json *files = root.get("files");
  if (!files || files->kind != Json::Kind::Array)
    return "manifest.json has no \"files\" array";
  for (const Json &file : files->array) {
    int64_t rank = 0, bytes = 0;
    const Json *path = file.get("path");
    if (!getInt(file, "rank", rank) || !getInt(file, "bytes", bytes) || !path ||
        path->kind != Json::Kind::String || path->string.find('/') != std::string::npos ||
        bytes < 0 || rank < 0 || rank > INT32_MAX)
      return "manifest.json: an entry of \"files\" lacks a rank, a path in the checkpoint or a "
             "size";
    if (!manifest.files.emplace(static_cast<int>(rank), std::make_pair(path->string, bytes)).second)
      return "manifest.json: \"files\" lists rank " + std::to_string(rank) + " twice";
  }
  const Json *tensors = root.get("tensors");
  if (!tensors || tensors->kind != Json::Kind::Array)
    return "manifest.json has no \"tensors\" array";
  for (const Json &tensor : tensors->array) {
    const Json *name = tensor.get("name");
    const Json *shape = tensor.get("shape");
    const Json *shards = tensor.get("shards");
    if (!name || name->kind != Json::Kind::String || !shape || shape->kind != Json::Kind::Array ||
        !shards || shards->kind != Json::Kind::Array)
      return "manifest.json: a tensor lacks its name, shape or shards";
    if (manifest.shapes.count(name->string))
      return "manifest.json: tensor '" + name->string + "' is listed twice";
    std::vector<int64_t> &dims = manifest.shapes[name->string];
    for (const Json &dim : shape->array) {
      if (dim.kind != Json::Kind::Number || !dim.integral || dim.integer < 0)
        return "manifest.json: tensor '" + name->string + "' has an invalid shape";
      dims.push_back(dim.integer);
    }
    int64_t total = countElements(dims);
    if (total < 0)
      return "manifest.json: tensor '" + name->string + "' has shape " + shapeText(dims) +
             ", too many elements for a checkpoint";
    int64_t described = 0; // Elements of the tensor in its shards so far.
    std::vector<ManifestShard> &list = manifest.shards[name->string];
    for (const Json &shard : shards->array) {
      ManifestShard entry;
      int64_t rank = 0;
      const Json *crc = shard.get("crc32");
      if (!getInt(shard, "offset", entry.offset) || !getInt(shard, "elements", entry.elements) ||
          !getInt(shard, "rank", rank) || !getInt(shard, "file_offset", entry.fileOffset) || !crc ||
          crc->kind != Json::Kind::String)
        return "manifest.json: a shard of tensor '" + name->string +
               "' lacks its offset, elements, rank, file_offset or crc32";
      const Json *blocks = shard.get("blocks");
      if (blocks &&
          (!getInt(shard, "blocks", entry.blocks) || !getInt(shard, "stride", entry.stride) ||
           entry.blocks < 1 || (entry.blocks > 1 && entry.stride < entry.elements)))
        return "manifest.json: a shard of tensor '" + name->string +
               "' has invalid blocks or stride";
      if (entry.elements < 0 || entry.elements > kMaxShardElements ||
          entry.blocks > kMaxShardElements || entry.getTotal() > kMaxShardElements)
        return "manifest.json: a shard of tensor '" + name->string + "' has " +
               std::to_string(entry.elements) + " x " + std::to_string(entry.blocks) +
               " elements, more than the " + std::to_string(kMaxShardElements) + " placert writes";
      auto file = rank < 0 || rank > INT32_MAX ? manifest.files.end()
                                               : manifest.files.find(static_cast<int>(rank));
      if (file == manifest.files.end())
        return "manifest.json: a shard of tensor '" + name->string + "' is in the file of rank " +
               std::to_string(rank) + ", which \"files\" does not list";
      entry.rank = static_cast<int>(rank);
      entry.crc = static_cast<uint32_t>(std::strtoul(crc->string.c_str(), nullptr, 16));
      if (entry.fileOffset < 0 || entry.fileOffset > file->second.second - entry.getTotal() * 4)
        return "manifest.json: a shard of tensor '" + name->string + "' lies outside " +
               file->second.first;
      // Inside the tensor, and not more elements in all than it has (before any block is listed,
      // so that a bad manifest cannot make the reader list many).
      if (!insideTensor(entry.offset, entry.elements, entry.blocks, entry.stride, total))
        return "manifest.json: a shard of tensor '" + name->string +
               "' holds elements outside its shape " + shapeText(dims);
      if (entry.getTotal() > total - described)
        return "manifest.json: the shards of tensor '" + name->string + "' hold more than its " +
               std::to_string(total) + " elements";
      described += entry.getTotal();
      list.push_back(entry);
    }
    std::vector<Block> &sorted = manifest.blocks[name->string];
    sorted = blocksOf(list);
    std::string tiling = checkTiling(name->string, sorted, total);
    if (!tiling.empty())
      return "manifest.json: " + tiling;
  }
  return "";
}

/// Finds the checkpoint directory `path` names; returns what is wrong.
std::string resolve(const std::string &path, std::string &directory) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return "'" + path + "' does not exist";
  if (!fs::is_directory(path, ec))
    return "'" + path + "' is not a checkpoint (not a directory)";
  fs::path root(path);
  if (fs::exists(root / "manifest.json", ec)) {
    directory = path;
    return "";
  }
  std::string latest;
  if (readFile((root / "latest").string(), latest)) {
    while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back())))
      latest.pop_back();
    if (!latest.empty() && latest.find('/') == std::string::npos &&
        fs::exists(root / latest / "manifest.json", ec)) {
      directory = (root / latest).string();
      return "";
    }
  }
  // No usable `latest` (a crash between renames): the newest complete checkpoint.
  std::string newest, unfinished;
  bool rankFiles = false;
  for (const fs::directory_entry &entry : fs::directory_iterator(root, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) == 0)
      rankFiles = true;
    if (name.rfind("step-", 0) != 0 || !entry.is_directory(ec))
      continue;
    if (fs::exists(entry.path() / "manifest.json", ec))
      newest = std::max(newest, name);
    else
      unfinished = std::max(unfinished, name);
  }
  if (!newest.empty()) {
    directory = (root / newest).string();
    return "";
  }
  if (rankFiles)
    return "'" + path + "' is an unfinished save: it has shard files but no manifest.json (the " +
           "save did not complete)";
  if (!unfinished.empty())
    return "'" + path + "' holds only an unfinished save ('" + unfinished +
           "' has no manifest.json: the save did not complete)";
  return "'" + path + "' is not a checkpoint (no manifest.json, no 'latest', no step-* " +
         "directories)";
}

} // namespace

std::string checkManifest(const std::string &text) {
  Manifest manifest;
  return parseManifest(text, manifest);
}

//===----------------------------------------------------------------------===//
// Save
//===----------------------------------------------------------------------===//

Status saveCheckpoint(Runtime &runtime, const std::string &directory, int64_t step,
                      const CheckpointContents &contents) {
  int rank = runtime.getRank();
  const Options &options = runtime.getOptions();
  std::string name = checkpointName(step);
  fs::path root(directory), temporary = root / (name + ".tmp"), final = root / name;
  std::string what = "checkpoint " + name;

  // Rank 0 makes the temporary directory (a stale one is an earlier save that did not finish).
  std::string error;
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (!ec)
      fs::remove_all(temporary, ec);
    if (!ec)
      fs::create_directory(temporary, ec);
    if (ec)
      error = "cannot create '" + temporary.string() + "': " + ec.message();
  }
  PLACERT_TRY(broadcastString(runtime, "broadcast over the world (" + what + ": start)", error));
  if (!error.empty())
    return Status(StatusCode::Io, "rank " + std::to_string(rank) + ": " + error);

  // Fault injection: the rank exits with half of its first shard written.
  bool dies = options.dieInSave == step && options.dieRank == rank;
  auto die = [&] {
    std::fprintf(stderr,
                 "placert: rank %d: fault injection: exiting in the middle of saving checkpoint "
                 "%s\n",
                 rank, name.c_str());
    std::fflush(stderr);
    std::_Exit(2);
  };
  if (dies && contents.shards.empty())
    die();

  // Every rank streams its shards from memory into its own file, checksum by checksum.
  std::ostringstream mine;
  std::string fileName = rankFileName(rank);
  if (!contents.shards.empty()) {
    std::string path = (temporary / fileName).string();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
      error = "cannot create '" + path + "': " + errnoText();
    } else {
      // The pieces written, each at most kMaxShardElements: whole blocks of a strided run
      // grouped, or a contiguous run (or a block too long to group) cut.
      struct Piece {
        const CheckpointShard *shard;
        int64_t offset, elements, blocks, stride;
        const float *data;
      };
      std::vector<Piece> pieces;
      for (const CheckpointShard &shard : contents.shards) {
        int64_t blocks = std::max<int64_t>(shard.blocks, 1);
        if (blocks > 1 && shard.elements <= kMaxShardElements) {
          int64_t group = kMaxShardElements / shard.elements;
          for (int64_t b = 0; b < blocks; b += group) {
            int64_t n = std::min(group, blocks - b);
            pieces.push_back({&shard, shard.offset + b * shard.stride, shard.elements, n,
                              n > 1 ? shard.stride : 0, shard.data + b * shard.elements});
          }
          continue;
        }
        for (int64_t b = 0; b < blocks; ++b)
          for (int64_t first = 0; first < shard.elements; first += kMaxShardElements)
            pieces.push_back({&shard, shard.offset + b * shard.stride + first,
                              std::min(kMaxShardElements, shard.elements - first), 1, 0,
                              shard.data + b * shard.elements + first});
      }
      int64_t fileOffset = 0;
      for (const Piece &piece : pieces) {
        size_t bytes = static_cast<size_t>(piece.elements * piece.blocks) * sizeof(float);
        if (dies) {
          writeAll(fd, piece.data, bytes / 2);
          ::fsync(fd);
          die();
        }
        if (!writeAll(fd, piece.data, bytes)) {
          error = "cannot write '" + path + "': " + errnoText();
          break;
        }
        char crc[16];
        std::snprintf(crc, sizeof crc, "%08" PRIx32, crc32(0, piece.data, bytes));
        mine << piece.shard->tensor << ' ' << piece.offset << ' ' << piece.elements << ' '
             << fileOffset << ' ' << crc << ' ' << piece.blocks << ' ' << piece.stride << '\n';
        fileOffset += static_cast<int64_t>(bytes);
      }
      if (error.empty() && ::fsync(fd) != 0)
        error = "cannot sync '" + path + "': " + errnoText();
      ::close(fd);
      if (error.empty())
        mine.str("file " + fileName + " " + std::to_string(fileOffset) + "\n" + mine.str());
    }
  }
  std::string report = error.empty() ? mine.str() : "error " + error;
  std::vector<std::string> all;
  PLACERT_TRY(
      gatherStrings(runtime, "gather over the world (" + what + ": shard lists)", report, all));

  // Rank 0 checks that every element was written once, writes the manifest last and publishes.
  std::string result;
  if (rank == 0) {
    std::map<std::string, std::vector<ManifestShard>> shards;
    std::vector<std::pair<int, std::pair<std::string, int64_t>>> files;
    for (size_t r = 0; r < all.size() && result.empty(); ++r) {
      std::istringstream lines(all[r]);
      std::string line;
      while (std::getline(lines, line) && result.empty()) {
        if (line.rfind("error ", 0) == 0) {
          result = "rank " + std::to_string(r) + ": " + line.substr(6);
          break;
        }
        std::istringstream fields(line);
        if (line.rfind("file ", 0) == 0) {
          std::string word, file;
          int64_t bytes = 0;
          fields >> word >> file >> bytes;
          files.push_back({static_cast<int>(r), {file, bytes}});
          continue;
        }
        std::string tensor, crc;
        ManifestShard shard;
        fields >> tensor >> shard.offset >> shard.elements >> shard.fileOffset >> crc >>
            shard.blocks >> shard.stride;
        shard.rank = static_cast<int>(r);
        shard.crc = static_cast<uint32_t>(std::strtoul(crc.c_str(), nullptr, 16));
        if (!contents.tensors.count(tensor))
          result = "rank " + std::to_string(r) + " wrote unknown tensor '" + tensor + "'";
        shards[tensor].push_back(shard);
      }
    }
    for (const auto &[tensor, shape] : contents.tensors) {
      if (!result.empty())
        break;
      std::vector<ManifestShard> &list = shards[tensor];
      std::sort(list.begin(), list.end(),
                [](const ManifestShard &a, const ManifestShard &b) { return a.offset < b.offset; });
      result = checkTiling(tensor, blocksOf(list), product(shape));
      if (!result.empty())
        result = "the trainer's shards are inconsistent: " + result;
    }
    if (result.empty()) {
      std::ostringstream json;
      json << "{\n  \"format\": \"" << kFormat
           << "\",\n  \"format_version\": " << kCheckpointFormatVersion
           << ",\n  \"placec_version\": "
           << jsonQuote(contents.placecVersion.empty() ? "unknown" : contents.placecVersion)
           << ",\n  \"placert_version\": \"" PLACERT_VERSION_STRING "\",\n";
      for (const auto &[key, value] : contents.description)
        json << "  " << jsonQuote(key) << ": " << value << ",\n";
      json << "  \"ranks\": " << runtime.getWorldSize() << ",\n  \"scalars\": {";
      bool first = true;
      for (const auto &[key, value] : contents.scalars) {
        json << (first ? "" : ", ") << jsonQuote(key) << ": " << value;
        first = false;
      }
      json << "},\n  \"files\": [";
      for (size_t i = 0; i < files.size(); ++i)
        json << (i ? ",\n" : "\n") << "    {\"rank\": " << files[i].first
             << ", \"path\": " << jsonQuote(files[i].second.first)
             << ", \"bytes\": " << files[i].second.second << "}";
      json << "\n  ],\n  \"tensors\": [";
      first = true;
      for (const auto &[tensor, shape] : contents.tensors) {
        json << (first ? "\n" : ",\n") << "    {\"name\": " << jsonQuote(tensor)
             << ", \"shape\": " << shapeText(shape) << ", \"shards\": [";
        first = false;
        const std::vector<ManifestShard> &list = shards[tensor];
        for (size_t i = 0; i < list.size(); ++i) {
          char crc[16];
          std::snprintf(crc, sizeof crc, "%08" PRIx32, list[i].crc);
          json << (i ? ",\n" : "\n") << "      {\"offset\": " << list[i].offset
               << ", \"elements\": " << list[i].elements;
          if (list[i].blocks > 1)
            json << ", \"blocks\": " << list[i].blocks << ", \"stride\": " << list[i].stride;
          json << ", \"rank\": " << list[i].rank << ", \"file_offset\": " << list[i].fileOffset
               << ", \"crc32\": \"" << crc << "\"}";
        }
        json << "]}";
      }
      json << "\n  ]\n}\n";
      // The manifest, then the directory's entries, are durable before the rename publishes
      // them; the rename and `latest` are durable once the parent directory is synced.
      Status status = writeFileSynced((temporary / "manifest.json").string(), json.str());
      if (status.isOk())
        status = syncPath(temporary.string());
      std::error_code ec;
      if (status.isOk() && fs::exists(final, ec)) {
        // Saving a step again (a rerun): the new checkpoint replaces the old one. A crash
        // between the renames leaves no `final`, and loading falls back to the newest other one.
        fs::path old = root / (name + ".old");
        fs::remove_all(old, ec);
        fs::rename(final, old, ec);
        if (!ec)
          fs::remove_all(old, ec);
        if (ec)
          status =
              Status(StatusCode::Io, "cannot replace '" + final.string() + "': " + ec.message());
      }
      if (status.isOk()) {
        fs::rename(temporary, final, ec);
        if (ec)
          status = Status(StatusCode::Io, "cannot rename '" + temporary.string() + "' to '" +
                                              final.string() + "': " + ec.message());
      }
      if (status.isOk())
        status = syncPath(root.string());
      if (status.isOk())
        status = writeFileSynced((root / "latest.tmp").string(), name + "\n");
      if (status.isOk()) {
        fs::rename(root / "latest.tmp", root / "latest", ec);
        if (ec)
          status = Status(StatusCode::Io,
                          "cannot update '" + (root / "latest").string() + "': " + ec.message());
      }
      if (status.isOk())
        status = syncPath(root.string());
      if (!status.isOk())
        result = status.getMessage();
    }
  }
  PLACERT_TRY(broadcastString(runtime, "broadcast over the world (" + what + ": result)", result));
  if (!result.empty())
    return Status(StatusCode::Io, "saving '" + final.string() + "' failed: " + result);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Load
//===----------------------------------------------------------------------===//

namespace {

/// The shards a rank reads and, for each, the copies out of it into the requests.
struct ReadPlan {
  struct Copy {
    int64_t from; ///< Elements into the shard's data.
    float *to;
    int64_t count;
  };
  struct Read {
    const ManifestShard *shard;
    std::string tensor;
    std::vector<Copy> copies;
  };
  std::vector<Read> reads;
};

/// Validates the manifest against the request and plans the reads; returns what is wrong.
std::string planReads(const Manifest &manifest, const CheckpointContents &contents,
                      ReadPlan &plan) {
  for (const auto &[tensor, shape] : contents.tensors) {
    auto it = manifest.shapes.find(tensor);
    if (it == manifest.shapes.end())
      return "it has no tensor '" + tensor + "' (a checkpoint of another model or optimizer?)";
    if (it->second != shape)
      return "tensor '" + tensor + "' has shape " + shapeText(it->second) + " but the model's is " +
             shapeText(shape) + " (a checkpoint of another model?)";
  }
  for (const auto &[tensor, shape] : manifest.shapes)
    if (!contents.tensors.count(tensor))
      return "it holds tensor '" + tensor + "' " + shapeText(shape) +
             ", which the model does not have (a checkpoint of another model or optimizer?)";
  std::map<const ManifestShard *, size_t> index;
  for (const CheckpointShard &request : contents.shards) {
    const std::vector<Block> &list = manifest.blocks.at(request.tensor);
    for (int64_t b = 0; b < std::max<int64_t>(request.blocks, 1); ++b) {
      int64_t begin = request.offset + b * request.stride, end = begin + request.elements;
      float *to = request.data + b * request.elements;
      // The blocks of the checkpoint that overlap [begin, end): from the last one starting at
      // or before `begin`.
      auto it =
          std::upper_bound(list.begin(), list.end(), begin, [](int64_t offset, const Block &block) {
            return offset < block.offset;
          });
      if (it != list.begin())
        --it;
      for (; it != list.end() && it->offset < end; ++it) {
        int64_t first = std::max(begin, it->offset);
        int64_t last = std::min(end, it->offset + it->elements);
        if (first >= last)
          continue;
        auto [entry, added] = index.emplace(it->shard, plan.reads.size());
        if (added)
          plan.reads.push_back({it->shard, request.tensor, {}});
        plan.reads[entry->second].copies.push_back(
            {it->index * it->elements + (first - it->offset), to + (first - begin), last - first});
      }
    }
  }
  // Read each file front to back.
  std::sort(plan.reads.begin(), plan.reads.end(), [](const auto &a, const auto &b) {
    return std::tie(a.shard->rank, a.shard->fileOffset) <
           std::tie(b.shard->rank, b.shard->fileOffset);
  });
  return "";
}

} // namespace

Status loadCheckpoint(Runtime &runtime, const std::string &path, CheckpointContents &contents,
                      std::string &loaded) {
  std::string error = resolve(path, loaded);
  Manifest manifest;
  if (error.empty()) {
    std::string text;
    if (!readFile((fs::path(loaded) / "manifest.json").string(), text))
      error = "cannot read manifest.json: " + errnoText();
    else
      error = parseManifest(text, manifest);
    if (!error.empty())
      error = "'" + loaded + "': " + error;
  }
  ReadPlan plan;
  if (error.empty()) {
    error = planReads(manifest, contents, plan);
    if (!error.empty())
      error = "'" + loaded + "': " + error;
  }

  // The files this rank reads: present, with the size the manifest records.
  std::map<int, int> descriptors;
  auto closeAll = [&] {
    for (auto &[rank, fd] : descriptors)
      ::close(fd);
    descriptors.clear();
  };
  for (const ReadPlan::Read &read : plan.reads) {
    if (!error.empty())
      break;
    if (descriptors.count(read.shard->rank))
      continue;
    const auto &[file, bytes] = manifest.files.at(read.shard->rank);
    std::string filePath = (fs::path(loaded) / file).string();
    int fd = ::open(filePath.c_str(), O_RDONLY);
    if (fd < 0) {
      error = "shard file '" + filePath + "' is missing or unreadable (" + errnoText() + ")";
      break;
    }
    descriptors[read.shard->rank] = fd;
    struct stat info;
    if (::fstat(fd, &info) != 0 || info.st_size != bytes)
      error = "shard file '" + filePath +
              "' is truncated or damaged: " + std::to_string(static_cast<long long>(info.st_size)) +
              " bytes, the manifest records " + std::to_string(bytes);
  }

  // Two passes with one bounded buffer: verify every checksum, agree over the ranks, then read
  // again (from the page cache) into the destinations, checking again.
  std::vector<float> buffer;
  auto readShard = [&](const ReadPlan::Read &read) -> std::string {
    const ManifestShard &shard = *read.shard;
    buffer.resize(static_cast<size_t>(shard.getTotal()));
    size_t bytes = static_cast<size_t>(shard.getTotal()) * sizeof(float);
    const std::string &file = manifest.files.at(shard.rank).first;
    if (!readAt(descriptors.at(shard.rank), buffer.data(), bytes, shard.fileOffset))
      return "cannot read '" + file + "' at byte " + std::to_string(shard.fileOffset) + ": " +
             errnoText();
    if (crc32(0, buffer.data(), bytes) != shard.crc) {
      char expected[16];
      std::snprintf(expected, sizeof expected, "%08" PRIx32, shard.crc);
      return "checksum mismatch in '" + (fs::path(loaded) / file).string() + "': the shard of '" +
             read.tensor + "' at elements [" + std::to_string(shard.offset) + ", " +
             std::to_string(shard.offset + shard.elements) + ")" +
             (shard.blocks > 1 ? " x " + std::to_string(shard.blocks) + " blocks, stride " +
                                     std::to_string(shard.stride)
                               : "") +
             " (byte " + std::to_string(shard.fileOffset) + ") does not have CRC-32 " + expected;
    }
    return "";
  };
  for (const ReadPlan::Read &read : plan.reads) {
    if (!error.empty())
      break;
    error = readShard(read);
  }
  std::string combined;
  Status status = agree(runtime, "gather over the world (checkpoint load: validation)",
                        error.empty() ? "" : "checkpoint " + error, combined);
  if (!status.isOk() || !combined.empty()) {
    closeAll();
    PLACERT_TRY(status);
    return Status(StatusCode::InvalidArgument, "rank " + std::to_string(runtime.getRank()) +
                                                   ": cannot resume, nothing was loaded:\n  " +
                                                   combined);
  }

  for (const ReadPlan::Read &read : plan.reads) {
    error = readShard(read);
    if (!error.empty()) {
      closeAll();
      return Status(StatusCode::Io, "rank " + std::to_string(runtime.getRank()) +
                                        ": checkpoint changed while it was loaded: " + error);
    }
    for (const ReadPlan::Copy &copy : read.copies)
      std::copy(buffer.begin() + copy.from, buffer.begin() + copy.from + copy.count, copy.to);
  }
  closeAll();
  contents.scalars = manifest.scalars;
  return Status::success();
}

} // namespace placert
