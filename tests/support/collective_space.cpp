// collective_space.cpp - boundary counts, seeded inputs and the reference of the collective tests
// (collective_space.h).
#include "tests/support/collective_space.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include <gtest/gtest.h>

namespace ddp::testing {

using dist::ReduceOp;

namespace {
bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}
bool is_integer(DType t) { return t == DType::I32 || t == DType::I64; }
}  // namespace

uint64_t space_seed() {
  const char* s = std::getenv("DDP_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261201;
}

std::vector<int64_t> boundary_counts(int world, size_t es, size_t slot_bytes, size_t max_bytes,
                                     std::mt19937_64& rng, int random_count) {
  std::set<int64_t> n;
  auto around = [&](int64_t c) {
    for (int64_t d = -1; d <= 1; ++d)
      if (c + d >= 0) n.insert(c + d);
  };
  for (int64_t c : {0, 1, 2, 3}) n.insert(c);
  around(world);
  const int64_t align = static_cast<int64_t>(64 / es);
  for (int64_t k : {1, 2, 3}) around(k * align);
  around(world * align);
  const int64_t small = static_cast<int64_t>(kSmallAllreduceBytes / es);
  const int64_t direct = static_cast<int64_t>((kDirectBytes + es - 1) / es);
  const int64_t slot = static_cast<int64_t>(slot_bytes / es);
  around(small);
  around(direct);
  if (slot > 0) {
    around(slot);
    around(2 * slot);
  }
  // Past the small-message size: a per-rank share that is already a whole number of 64-byte lines, with 1 ..
  // world - 1 elements left over, alone and after a full slot.
  const int64_t m = small / (world * align) + 1;
  for (int64_t base : {world * align * m, (slot > 0 ? slot : 2 * small) + world * align * m})
    for (int64_t r = 1; r < world; ++r) n.insert(base + r);
  // Primes: the small ones and one just below each power of two up to kMaxSpaceBytes.
  for (int64_t p : {5, 7, 13, 31, 61, 127, 251, 1021}) n.insert(p);
  for (int64_t pow2 = 4096; pow2 * static_cast<int64_t>(es) <= static_cast<int64_t>(max_bytes); pow2 *= 4) {
    int64_t p = pow2 - 1;
    while (!is_prime(p)) --p;
    n.insert(p);
  }
  // Log-uniform: as many small counts as large ones.
  std::uniform_real_distribution<double> log_count(0.0, std::log(static_cast<double>(max_bytes / es)));
  for (int i = 0; i < random_count; ++i) n.insert(static_cast<int64_t>(std::exp(log_count(rng))));
  std::vector<int64_t> out;
  for (int64_t c : n)
    if (c * static_cast<int64_t>(es) <= static_cast<int64_t>(max_bytes) + 64) out.push_back(c);
  return out;
}

double load_element(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return static_cast<const BFloat16*>(p)[i].to_float();
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    default: break;
  }
  ADD_FAILURE() << "dtype " << dtype_name(t);
  return 0;
}

void store_element(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DType::F64: static_cast<double*>(p)[i] = v; return;
    case DType::BF16: static_cast<BFloat16*>(p)[i] = BFloat16::from_float(static_cast<float>(v)); return;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); return;
    default: ADD_FAILURE() << "dtype " << dtype_name(t);
  }
}

double space_input(uint64_t call, int rank, int64_t i, DType t) {
  uint64_t x = space_seed() * 0x9E3779B97F4A7C15ull ^ (call << 40) ^ (static_cast<uint64_t>(rank) << 32) ^
               static_cast<uint64_t>(i);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  const double u = static_cast<double>(x % 2000001) / 1000000.0 - 1.0;  // [-1, 1]
  switch (t) {
    case DType::F32: return static_cast<float>(u * 100);
    case DType::F64: return u * 100;
    case DType::BF16: return BFloat16::from_float(static_cast<float>(u * 100)).to_float();
    case DType::I32:
    case DType::I64: return std::round(u * 1000);
    default: return 0;
  }
}

Expected space_reference(uint64_t call, int world, int64_t i, DType t, ReduceOp op) {
  double acc = space_input(call, 0, i, t), abs_sum = std::abs(acc);
  for (int r = 1; r < world; ++r) {
    const double v = space_input(call, r, i, t);
    abs_sum += std::abs(v);
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc += v;
    if (op == ReduceOp::Max) acc = std::max(acc, v);
    if (op == ReduceOp::Min) acc = std::min(acc, v);
  }
  if (op == ReduceOp::Max || op == ReduceOp::Min) return {acc, 0.0};  // a copy of one input: exact
  if (op == ReduceOp::Avg) {
    if (is_integer(t)) return {std::trunc(acc / world), 0.0};
    acc /= world;
    abs_sum /= world;
  }
  if (is_integer(t)) return {acc, 0.0};
  const double eps = t == DType::F64 ? 0x1p-52 : t == DType::F32 ? 0x1p-23 : 0x1p-7;
  return {acc, abs_sum * eps * (world + 1)};
}

}  // namespace ddp::testing
