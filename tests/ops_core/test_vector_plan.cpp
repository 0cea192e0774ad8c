// test_vector_plan.cpp - the plan the memory-bound CUDA kernels follow for 16-byte accesses
// (kernels/cpu/vector_plan.h; the kernels: kernels/cuda/vector_access.cuh), run on the host with the loop the
// kernels run: for every size (0 to primes to large), every misalignment of every pointer (0..3 elements past
// a 16-byte boundary) and several thread counts, every element is visited exactly once, every vector access
// is aligned for each pointer and inside [0, n), pointers misaligned differently fall back to scalar, and
// equally misaligned ones peel a scalar head and then run whole vectors.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/vector_plan.h"
#include "runtime/core/dtype.h"

using namespace ddp;
using ddp::kernels::VectorPlan;

namespace {
constexpr int kMaxOffset = 3;

// A buffer with room for n elements of T after an offset of up to kMaxOffset elements from a 64-byte
// boundary.
template <class T>
struct Buffer {
  explicit Buffer(int64_t n) : bytes(static_cast<size_t>(n + kMaxOffset) * sizeof(T) + 128) {}
  const T* at(int offset) const {
    const auto base = (reinterpret_cast<uintptr_t>(bytes.data()) + 63) / 64 * 64;
    return reinterpret_cast<const T*>(base) + offset;
  }
  std::vector<unsigned char> bytes;
};

template <class T>
bool aligned_vector(const T* p, int64_t i, int width) {
  return reinterpret_cast<uintptr_t>(p + i) % (sizeof(T) * static_cast<size_t>(width)) == 0;
}

// Runs the plan's loop for every thread of `threads` and checks coverage and alignment; returns a failure
// message or "".
template <class Index, class... T>
std::string check_plan(const VectorPlan& p, int64_t n, Index threads, const T*... ptrs) {
  std::vector<int> visits(static_cast<size_t>(n), 0);
  std::string bad;
  for (Index t = 0; t < threads; ++t)
    kernels::for_each_planned<Index>(
        p, t, threads,
        [&](Index i) {
          if (i < 0 || int64_t(i) + p.width > n) bad = "a vector past the end at " + std::to_string(i);
          if (!(aligned_vector(ptrs, i, p.width) && ...)) bad = "a misaligned vector at " + std::to_string(i);
          for (int l = 0; l < p.width && int64_t(i) + l < n; ++l) ++visits[static_cast<size_t>(i + l)];
        },
        [&](Index i) {
          if (i < 0 || int64_t(i) >= n)
            bad = "a scalar outside [0, n) at " + std::to_string(i);
          else
            ++visits[static_cast<size_t>(i)];
        });
  if (!bad.empty()) return bad;
  for (int64_t i = 0; i < n; ++i)
    if (visits[static_cast<size_t>(i)] != 1)
      return "element " + std::to_string(i) + " visited " + std::to_string(visits[static_cast<size_t>(i)]) +
             " times";
  return "";
}

std::vector<int64_t> sizes() {
  return {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 97, 101, 1021, 4099};
}

// Every offset combination of two pointers (a, b) of types A and B with `width`-element vectors.
template <class A, class B>
void check_pairs(int width) {
  for (int64_t n : sizes()) {
    Buffer<A> a(n);
    Buffer<B> b(n);
    for (int oa = 0; oa <= kMaxOffset; ++oa)
      for (int ob = 0; ob <= kMaxOffset; ++ob) {
        const A* pa = a.at(oa);
        const B* pb = b.at(ob);
        const VectorPlan p = kernels::plan_vectors(width, n, pa, pb);
        SCOPED_TRACE("n " + std::to_string(n) + " offsets " + std::to_string(oa) + ", " + std::to_string(ob) +
                     " width " + std::to_string(width));
        EXPECT_EQ(p.n, n);
        for (int32_t threads : {1, 3, 256}) EXPECT_EQ(check_plan<int32_t>(p, n, threads, pa, pb), "");
        EXPECT_EQ(check_plan<int64_t>(p, n, int64_t{5}, pa, pb), "");
        const int ma = oa % width, mb = ob % width;
        if (ma != mb) {
          EXPECT_EQ(p.vectors, 0) << "differently misaligned pointers: all scalar";
          EXPECT_EQ(p.head, 0);
          EXPECT_EQ(p.scalars(), n);
        } else {
          const int64_t head = (width - ma) % width;
          const int64_t vectors = n >= head ? (n - head) / width : 0;
          EXPECT_EQ(p.vectors, vectors);
          if (vectors > 0) {
            EXPECT_EQ(p.head, head);
            EXPECT_EQ(p.width, width);
            EXPECT_LT(p.scalars(), 2 * width) << "at most a head and a tail of scalars";
          }
          if (ma == 0) {
            EXPECT_EQ(p.head, 0) << "aligned pointers: no head";
          }
        }
      }
  }
}
}  // namespace

TEST(VectorPlan, PacksAreOneSixteenByteAccess) {
  EXPECT_EQ(sizeof(kernels::Pack<float, 4>), 16u);
  EXPECT_EQ(alignof(kernels::Pack<float, 4>), 16u);
  EXPECT_EQ(sizeof(kernels::Pack<double, 2>), 16u);
  EXPECT_EQ(alignof(kernels::Pack<double, 2>), 16u);
  EXPECT_EQ(sizeof(kernels::Pack<BFloat16, 8>), 16u);
  EXPECT_EQ(alignof(kernels::Pack<BFloat16, 8>), 16u);
  EXPECT_EQ(alignof(kernels::Pack<BFloat16, 4>), 8u) << "the bf16 side of a float32 <-> bf16 conversion";
}

TEST(VectorPlan, EveryElementOnceForEveryMisalignmentSameType) {
  check_pairs<float, float>(4);
  check_pairs<double, double>(2);
  check_pairs<BFloat16, BFloat16>(8);
}

TEST(VectorPlan, EveryElementOnceForEveryMisalignmentMixedTypes) {
  check_pairs<float, BFloat16>(4);  // to_bf16 / from_bf16: 16-byte float32, 8-byte bfloat16 accesses
  check_pairs<int64_t, float>(2);   // a conversion: the wider type sets the width
  check_pairs<uint8_t, float>(4);
}

// Three and four pointers (a binary op, AdamW's w, g, m, v): one pointer off by one element is enough to fall
// back to scalar; all equally off peel the same head.
TEST(VectorPlan, ManyPointersAgreeOrFallBack) {
  for (int64_t n : sizes()) {
    Buffer<float> w(n), g(n), m(n), v(n);
    for (int ow = 0; ow <= kMaxOffset; ++ow)
      for (int og = 0; og <= kMaxOffset; ++og)
        for (int om = 0; om <= kMaxOffset; ++om)
          for (int ov : {0, 1, 3}) {
            const VectorPlan p = kernels::plan_vectors(4, n, w.at(ow), g.at(og), m.at(om), v.at(ov));
            SCOPED_TRACE("n " + std::to_string(n) + " offsets " + std::to_string(ow) + std::to_string(og) +
                         std::to_string(om) + std::to_string(ov));
            EXPECT_EQ(check_plan<int32_t>(p, n, 7, w.at(ow), g.at(og), m.at(om), v.at(ov)), "");
            if (!(ow == og && og == om && om == ov)) {
              EXPECT_EQ(p.vectors, 0);
            } else if (n >= 8) {
              EXPECT_GT(p.vectors, 0);
            }
          }
  }
}

TEST(VectorPlan, ALargeSizeIsCoveredInBothIndexTypes) {
  const int64_t n = (int64_t{1} << 20) + 3;
  Buffer<float> a(n), b(n);
  for (int offset : {0, 1}) {
    const VectorPlan p = kernels::plan_vectors(4, n, a.at(offset), b.at(offset));
    EXPECT_EQ(p.head, offset == 0 ? 0 : 3);
    EXPECT_EQ(p.vectors, (n - p.head) / 4);
    EXPECT_EQ(check_plan<int32_t>(p, n, 1024 * 13, a.at(offset), b.at(offset)), "");
    EXPECT_EQ(check_plan<int64_t>(p, n, int64_t{1000}, a.at(offset), b.at(offset)), "");
  }
}

TEST(VectorPlan, PointersNotAlignedToTheirElementAreScalar) {
  Buffer<float> a(64);
  const auto* odd = reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(a.at(0)) + 2);
  const VectorPlan p = kernels::plan_vectors(4, 32, odd, odd);
  EXPECT_EQ(p.vectors, 0);
  EXPECT_EQ(p.scalars(), 32);
}

TEST(VectorPlan, ThirtyTwoBitIndexWhereTheGridStrideCannotOverflow) {
  const int64_t limit = INT32_MAX - int64_t{65535} * 1024;
  EXPECT_TRUE(kernels::index_fits_32(0));
  EXPECT_TRUE(kernels::index_fits_32(limit));
  EXPECT_FALSE(kernels::index_fits_32(limit + 1));
  EXPECT_FALSE(kernels::index_fits_32(int64_t{1} << 31));
}
