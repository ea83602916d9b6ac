// Unit tests of placert's checkpoint manifest reader (runtime/src/Checkpoint.cpp, checkManifest):
// the format versions it reads and refuses, and manifests that once made it overflow int64_t (found
// while writing fuzz/PlacertManifestFuzzer.cpp, after the fuzzer of placec inspect's reader found
// the same overflow of a shape's element count there).
#include "Checkpoint.h"

#include "gtest/gtest.h"
#include <string>

namespace {

/// A manifest of one tensor "w" [2, 3] in two shards of the files of ranks 0 (16 bytes) and 1
/// (8 bytes); `version` is the text of its version members, `shards` of its shards.
std::string manifest(const std::string &version = "\"format_version\": 2, \"placec_version\": "
                                                  "\"1.2.3\", \"placert_version\": \"4.5.6\"",
                     const std::string &shards =
                         "{\"offset\": 0, \"elements\": 4, \"rank\": 0, \"file_offset\": 0, "
                         "\"crc32\": \"00000000\"}, {\"offset\": 4, \"elements\": 2, \"rank\": 1, "
                         "\"file_offset\": 0, \"crc32\": \"00000000\"}",
                     const std::string &shape = "[2, 3]") {
  return "{\"format\": \"placert-checkpoint\", " + version +
         ", \"run\": \"r\", \"ranks\": 2, \"scalars\": {\"step\": 7}, \"files\": [{\"rank\": 0, "
         "\"path\": \"rank-00000.bin\", \"bytes\": 16}, {\"rank\": 1, \"path\": "
         "\"rank-00001.bin\", \"bytes\": 8}], \"tensors\": [{\"name\": \"w\", \"shape\": " +
         shape + ", \"shards\": [" + shards + "]}]}";
}

/// Expects `text` to be refused with a message containing each of `parts`.
void expectRefused(const std::string &text, std::initializer_list<const char *> parts) {
  std::string error = placert::checkManifest(text);
  ASSERT_FALSE(error.empty()) << "accepted: " << text;
  for (const char *part : parts)
    EXPECT_NE(error.find(part), std::string::npos) << "'" << error << "' lacks '" << part << "'";
}

TEST(CheckpointManifest, AcceptsAValidManifest) {
  EXPECT_EQ(placert::checkManifest(manifest()), "");
}

TEST(CheckpointManifest, ReadsFormatOne) {
  // Format 1 named its version "version" and recorded no placec or placert version.
  EXPECT_EQ(placert::checkManifest(manifest("\"version\": 1")), "");
}

TEST(CheckpointManifest, RefusesANewerFormatNamingBothVersions) {
  expectRefused(manifest("\"format_version\": 3, \"placec_version\": \"9.0.0\""),
                {"format version 3", "written by a program of placec 9.0.0",
                 "newer than this placert supports",
                 "placert " PLACERT_VERSION_STRING " reads format versions 1 to 2"});
}

TEST(CheckpointManifest, RefusesAnOlderOrMissingFormatVersion) {
  expectRefused(manifest("\"format_version\": 0"),
                {"format version 0", "older than this placert supports", "versions 1 to 2"});
  expectRefused(manifest("\"placec_version\": \"0.1.0\""),
                {"has no format version", "versions 1 to 2"});
  expectRefused(manifest("\"format_version\": \"2\""), {"has no format version"});
  expectRefused(manifest("\"format_version\": 2.5"), {"has no format version"});
}

// Each manifest below overflowed an int64_t in the reader (undefined behaviour) before it was
// checked without overflow.

TEST(CheckpointManifest, RefusesAShapeWithTooManyElements) {
  expectRefused(manifest("\"format_version\": 2",
                         "{\"offset\": 0, \"elements\": 4, \"rank\": 0, \"file_offset\": 0, "
                         "\"crc32\": \"0\"}",
                         "[4611686018427387904, 4]"),
                {"tensor 'w' has shape [4611686018427387904, 4], too many elements"});
}

TEST(CheckpointManifest, RefusesAShardFarOutsideItsFile) {
  expectRefused(manifest("\"format_version\": 2",
                         "{\"offset\": 0, \"elements\": 4, \"rank\": 0, \"file_offset\": "
                         "9223372036854775807, \"crc32\": \"0\"}"),
                {"a shard of tensor 'w' lies outside rank-00000.bin"});
}

TEST(CheckpointManifest, RefusesAShardOutsideItsTensor) {
  // A stride that would put the second block 2^62 elements on.
  expectRefused(manifest("\"format_version\": 2",
                         "{\"offset\": 0, \"elements\": 1, \"blocks\": 2, \"stride\": "
                         "4611686018427387904, \"rank\": 0, \"file_offset\": 0, \"crc32\": \"0\"}"),
                {"a shard of tensor 'w' holds elements outside its shape [2, 3]"});
  expectRefused(manifest("\"format_version\": 2",
                         "{\"offset\": 9223372036854775807, \"elements\": 4, \"rank\": 0, "
                         "\"file_offset\": 0, \"crc32\": \"0\"}"),
                {"outside its shape [2, 3]"});
  expectRefused(manifest("\"format_version\": 2",
                         "{\"offset\": -2, \"elements\": 4, \"rank\": 0, \"file_offset\": 0, "
                         "\"crc32\": \"0\"}"),
                {"outside its shape [2, 3]"});
}

TEST(CheckpointManifest, RefusesMoreShardElementsThanTheTensorHas) {
  expectRefused(manifest("\"format_version\": 2",
                         "{\"offset\": 0, \"elements\": 4, \"rank\": 0, \"file_offset\": 0, "
                         "\"crc32\": \"0\"}, {\"offset\": 0, \"elements\": 4, \"rank\": 0, "
                         "\"file_offset\": 0, \"crc32\": \"0\"}"),
                {"the shards of tensor 'w' hold more than its 6 elements"});
}

TEST(CheckpointManifest, RefusesRanksOutsideAnInt) {
  // 2^32 would have been read as rank 0.
  expectRefused(manifest("\"format_version\": 2",
                         "{\"offset\": 0, \"elements\": 4, \"rank\": 4294967296, \"file_offset\": "
                         "0, \"crc32\": \"0\"}"),
                {"in the file of rank 4294967296, which \"files\" does not list"});
}

TEST(CheckpointManifest, RefusesATensorListedTwice) {
  std::string text = manifest();
  std::string tensor = text.substr(text.find("{\"name\""));
  tensor.pop_back(); // the closing brace of the manifest
  tensor.pop_back(); // the closing bracket of "tensors"
  text.insert(text.size() - 2, ", " + tensor);
  expectRefused(text, {"tensor 'w' is listed twice"});
}

} // namespace
