// sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), small and dependency-free, for the store's
// challenge-response authentication. Not for bulk hashing: a clear, byte-at-a-time implementation.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp::dist {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);
// Lowercase hex of a digest (tests, logs).
std::string to_hex(const Digest& d);
// Compares without an early exit, so the time taken does not tell where two digests differ.
bool digest_equal(const Digest& a, const Digest& b);
// The same for byte strings (proofs and tags read from the wire): the time depends on the lengths only.
bool bytes_equal_constant_time(std::string_view a, std::string_view b);

}  // namespace ddp::dist
