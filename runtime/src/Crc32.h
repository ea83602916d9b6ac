// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, the checksum of zlib and gzip) for the
// checkpoint shards, eight bytes per step ("slicing by 8": eight tables, table k giving the CRC
// contribution of a byte followed by k zero bytes). Header-only and free of dependencies so that
// placec's unit tests can check it against llvm::crc32.
#ifndef PLACERT_SRC_CRC32_H
#define PLACERT_SRC_CRC32_H

#include <array>
#include <cstddef>
#include <cstdint>

namespace placert {

namespace detail {
using Crc32Tables = std::array<std::array<uint32_t, 256>, 8>;

inline const Crc32Tables &crc32Tables() {
  static const Crc32Tables tables = [] {
    Crc32Tables result{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      result[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; ++n)
      for (size_t k = 1; k < 8; ++k)
        result[k][n] = (result[k - 1][n] >> 8) ^ result[0][result[k - 1][n] & 0xFFu];
    return result;
  }();
  return tables;
}
} // namespace detail

/// Continues `crc` (0 to start) over `size` bytes, like zlib's crc32(crc, data, size): the
/// register starts at all ones and the result is complemented.
inline uint32_t crc32(uint32_t crc, const void *data, size_t size) {
  const detail::Crc32Tables &t = detail::crc32Tables();
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  uint32_t c = crc ^ 0xFFFFFFFFu;
  // Eight bytes at a time: the register is xor-ed into the first four (read little-endian).
  for (; size >= 8; size -= 8, bytes += 8) {
    uint32_t low = uint32_t(bytes[0]) | uint32_t(bytes[1]) << 8 | uint32_t(bytes[2]) << 16 |
                   uint32_t(bytes[3]) << 24;
    uint32_t high = uint32_t(bytes[4]) | uint32_t(bytes[5]) << 8 | uint32_t(bytes[6]) << 16 |
                    uint32_t(bytes[7]) << 24;
    low ^= c;
    c = t[7][low & 0xFFu] ^ t[6][(low >> 8) & 0xFFu] ^ t[5][(low >> 16) & 0xFFu] ^ t[4][low >> 24] ^
        t[3][high & 0xFFu] ^ t[2][(high >> 8) & 0xFFu] ^ t[1][(high >> 16) & 0xFFu] ^
        t[0][high >> 24];
  }
  for (size_t i = 0; i < size; ++i)
    c = t[0][(c ^ bytes[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

} // namespace placert

#endif // PLACERT_SRC_CRC32_H
