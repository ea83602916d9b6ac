// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, the checksum of zlib and gzip) for the
// checkpoint shards. Header-only and free of dependencies so that placec's unit tests can check it
// against llvm::crc32.
#ifndef PLACERT_SRC_CRC32_H
#define PLACERT_SRC_CRC32_H

#include <array>
#include <cstddef>
#include <cstdint>

namespace placert {

namespace detail {
/// The byte-wise table: entry n is the CRC of the single byte n.
inline const std::array<uint32_t, 256> &crc32Table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> result{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      result[n] = c;
    }
    return result;
  }();
  return table;
}
} // namespace detail

/// Continues `crc` (0 to start) over `size` bytes, like zlib's crc32(crc, data, size): the
/// register starts at all ones and the result is complemented.
inline uint32_t crc32(uint32_t crc, const void *data, size_t size) {
  const std::array<uint32_t, 256> &table = detail::crc32Table();
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i)
    c = table[(c ^ bytes[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

} // namespace placert

#endif // PLACERT_SRC_CRC32_H
