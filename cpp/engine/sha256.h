// SHA-256 (FIPS 180-4), small and dependency-free, for prefix-cache block keys. Not constant-time
// and not meant for secrets; it only has to make accidental key collisions impossible in practice.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace mlxb {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, int64_t bytes);
  // Little helpers for length-prefixed fields (domain separation): u64 little-endian.
  void update_u64(uint64_t v);
  void update_field(const std::string& s);  // length then bytes
  Digest finish();  // the object must not be updated afterwards

 private:
  void compress(const uint8_t* block);
  uint32_t h_[8];
  uint8_t buf_[64];
  int64_t buf_len_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(const void* data, int64_t bytes);
std::string to_hex(const Digest& d);

struct DigestHash {
  size_t operator()(const Digest& d) const {
    size_t h = 0;
    for (int i = 0; i < 8; ++i) h = (h << 8) | d[i];
    return h;
  }
};

}  // namespace mlxb
