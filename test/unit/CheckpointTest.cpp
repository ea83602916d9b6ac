// Unit tests for checkpoints: placert's CRC-32 against llvm::crc32 and the check value of the
// CRC-32/ISO-HDLC catalogue, and placec's manifest reader on hand-written checkpoints.
#include "placec/backends/Checkpoint.h"

#include "Crc32.h" // runtime/src: header-only, no MPI

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

TEST(Crc32, CatalogueCheckValue) {
  // The "check" value of CRC-32/ISO-HDLC (the zlib CRC) in Greg Cook's catalogue of parametrised
  // CRC algorithms: the CRC of the ASCII string "123456789".
  const char *text = "123456789";
  EXPECT_EQ(placert::crc32(0, text, 9), 0xCBF43926u);
  EXPECT_EQ(placert::crc32(0, text, 0), 0u);
}

TEST(Crc32, AgreesWithLlvmOnRandomData) {
  std::mt19937 random(12345);
  for (size_t size : {1u, 3u, 64u, 1000u, 65537u}) {
    std::vector<uint8_t> data(size);
    for (uint8_t &byte : data)
      byte = static_cast<uint8_t>(random());
    EXPECT_EQ(placert::crc32(0, data.data(), size), llvm::crc32(llvm::ArrayRef<uint8_t>(data)))
        << size << " bytes";
    // Continuing a CRC over a split buffer gives the CRC of the whole, as with zlib.
    size_t half = size / 2;
    uint32_t first = placert::crc32(0, data.data(), half);
    EXPECT_EQ(placert::crc32(first, data.data() + half, size - half),
              llvm::crc32(llvm::ArrayRef<uint8_t>(data)));
  }
}

/// A checkpoint directory with one tensor of shape [2, 3] in two shards written by ranks 0 and 1.
class ManifestTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("placec-checkpoint", directory));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(directory); }

  void write(const std::string &name, const std::string &bytes) {
    llvm::SmallString<256> path(directory);
    llvm::sys::path::append(path, name);
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << bytes;
  }
  static std::string floats(std::vector<float> values) {
    return std::string(reinterpret_cast<const char *>(values.data()), values.size() * 4);
  }
  static std::string hex(const std::string &bytes) {
    char text[16];
    std::snprintf(text, sizeof text, "%08x",
                  llvm::crc32(llvm::ArrayRef<uint8_t>(
                      reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size())));
    return text;
  }
  /// The manifest with the shards' offsets and element counts as given.
  void writeCheckpoint(int64_t secondOffset, int64_t secondElements) {
    std::string a = floats({1, 2, 3, 4}), b = floats({5, 6});
    write("rank-00000.bin", a);
    write("rank-00001.bin", b);
    write("manifest.json",
          "{\"format\": \"placert-checkpoint\", \"version\": 1, \"run\": \"r\", \"ranks\": 2,"
          "\"scalars\": {\"step\": 7}, \"files\": [{\"rank\": 0, \"path\": \"rank-00000.bin\", "
          "\"bytes\": 16}, {\"rank\": 1, \"path\": \"rank-00001.bin\", \"bytes\": 8}],"
          "\"tensors\": [{\"name\": \"w\", \"shape\": [2, 3], \"shards\": ["
          "{\"offset\": 0, \"elements\": 4, \"rank\": 0, \"file_offset\": 0, \"crc32\": \"" +
              hex(a) + "\"}, {\"offset\": " + std::to_string(secondOffset) +
              ", \"elements\": " + std::to_string(secondElements) +
              ", \"rank\": 1, \"file_offset\": 0, \"crc32\": \"" + hex(b) + "\"}]}]}");
  }

  llvm::SmallString<128> directory;
};

TEST_F(ManifestTest, ReadsAndVerifies) {
  writeCheckpoint(4, 2);
  llvm::Expected<placec::checkpoint::Manifest> manifest =
      placec::checkpoint::readManifest(directory);
  ASSERT_TRUE(bool(manifest)) << llvm::toString(manifest.takeError());
  EXPECT_EQ(manifest->scalars["step"], 7);
  ASSERT_EQ(manifest->tensors.size(), 1u);
  EXPECT_EQ(manifest->tensors[0].getElements(), 6);
  int64_t shards = 0, bytes = 0;
  llvm::Error error = placec::checkpoint::verifyChecksums(*manifest, shards, bytes);
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
  EXPECT_EQ(shards, 2);
  EXPECT_EQ(bytes, 24);
}

TEST_F(ManifestTest, RejectsAGapAndAnOverlap) {
  writeCheckpoint(5, 1); // element 4 is in no shard
  llvm::Expected<placec::checkpoint::Manifest> gap = placec::checkpoint::readManifest(directory);
  ASSERT_FALSE(bool(gap));
  EXPECT_NE(llvm::toString(gap.takeError()).find("do not cover"), std::string::npos);
  writeCheckpoint(3, 2); // element 3 is in both
  llvm::Expected<placec::checkpoint::Manifest> overlap =
      placec::checkpoint::readManifest(directory);
  ASSERT_FALSE(bool(overlap));
  llvm::consumeError(overlap.takeError());
}

TEST_F(ManifestTest, DetectsAFlippedBit) {
  writeCheckpoint(4, 2);
  write("rank-00001.bin", floats({5, 6.5f}));
  llvm::Expected<placec::checkpoint::Manifest> manifest =
      placec::checkpoint::readManifest(directory);
  ASSERT_TRUE(bool(manifest)) << llvm::toString(manifest.takeError());
  int64_t shards = 0, bytes = 0;
  llvm::Error error = placec::checkpoint::verifyChecksums(*manifest, shards, bytes);
  ASSERT_TRUE(bool(error));
  EXPECT_NE(llvm::toString(std::move(error)).find("checksum mismatch"), std::string::npos);
}

} // namespace
