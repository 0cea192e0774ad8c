// test_tails_targets.cpp - the partial vector that ends every SIMD loop (kernels/cpu/simd-inl.h: LoadTail,
// StoreTail and the Map* tails; masked loads and stores on AVX2 and AVX-512, a stack buffer on the older
// targets), on every instruction set the dispatcher can pick here, for every length from 1 to two vectors and
// one, float32 and float64:
//  - arrays that end at the last byte before an inaccessible page are read and written without touching it
//    (a load or store of a whole vector at the tail would stop the test with SIGSEGV);
//  - an element-wise kernel gives its tail elements bitwise the values the same inputs get inside whole
//    vectors (the tail runs the same vector code).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/softmax.h"
#include "tests/ops_simd/simd_test_util.h"

using namespace ddp::testing;
namespace kc = ddp::kernels::cpu;

namespace {
// n elements of T that end exactly where a PROT_NONE page begins.
template <class T>
class GuardedArray {
 public:
  explicit GuardedArray(size_t n) : n_(n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t data_pages = (n * sizeof(T) + page - 1) / page;
    bytes_ = (data_pages + 1) * page;
    base_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(base_, MAP_FAILED);
    char* guard = static_cast<char*>(base_) + data_pages * page;
    EXPECT_EQ(mprotect(guard, page, PROT_NONE), 0);
    p_ = reinterpret_cast<T*>(guard) - n;
  }
  ~GuardedArray() { munmap(base_, bytes_); }
  GuardedArray(const GuardedArray&) = delete;
  GuardedArray& operator=(const GuardedArray&) = delete;
  T* data() { return p_; }
  std::vector<T> values() const { return std::vector<T>(p_, p_ + n_); }

 private:
  size_t n_, bytes_ = 0;
  void* base_ = nullptr;
  T* p_ = nullptr;
};

template <class T>
void fill(T* p, size_t n, double lo, double hi) {
  const std::vector<double> v = spread(static_cast<int64_t>(n), lo, hi);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(v[i]);
}

template <class T>
bool same_bits(const T* a, const T* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

// Up to two AVX-512 vectors of float32 and one (33), every tail length of every target on the way.
constexpr size_t kMaxLength = 33;

template <class T>
void run_kernels_at_page_end() {
  for (size_t n = 1; n <= kMaxLength; ++n) {
    SCOPED_TRACE("length " + std::to_string(n));
    GuardedArray<T> x(n), g(n), y(n), w(n), b(n), dx(n);
    fill(x.data(), n, -3.0, 3.0);
    fill(g.data(), n, -1.0, 1.0);
    fill(w.data(), n, 0.5, 1.5);
    fill(b.data(), n, -0.5, 0.5);
    kc::exp_forward(x.data(), y.data(), static_cast<int64_t>(n));               // MapUnary
    kc::gelu_backward(g.data(), x.data(), dx.data(), static_cast<int64_t>(n));  // MapBinary
    kc::softmax_forward(x.data(), y.data(), 1, static_cast<int64_t>(n));        // LoadTail, StoreTail
    kc::log_softmax_forward(x.data(), y.data(), 1, static_cast<int64_t>(n));
    T mean = 0, rstd = 0;
    kc::layernorm_forward(x.data(), w.data(), b.data(), y.data(), &mean, &rstd, 1, static_cast<int64_t>(n),
                          1e-5);  // MapTernary
    GuardedArray<T> dw(n), db(n);
    std::memset(dw.data(), 0, n * sizeof(T));
    std::memset(db.data(), 0, n * sizeof(T));
    kc::layernorm_backward(g.data(), x.data(), w.data(), &mean, &rstd, dx.data(), dw.data(), db.data(), 1,
                           static_cast<int64_t>(n));
    for (T v : y.values()) ASSERT_TRUE(std::isfinite(static_cast<double>(v)));
    for (T v : dx.values()) ASSERT_TRUE(std::isfinite(static_cast<double>(v)));
  }
}

// The n values computed alone (the last n % lanes in a partial vector) against the same values at the start
// of a 64-element array (whole vectors on every target).
template <class T, class Kernel>
void expect_tail_bits_equal_whole_vector_bits(const Kernel& kernel) {
  for (size_t n = 1; n <= kMaxLength; ++n) {
    SCOPED_TRACE("length " + std::to_string(n));
    GuardedArray<T> x(n), g(n), y(n);
    fill(x.data(), n, -4.0, 4.0);
    fill(g.data(), n, -1.0, 1.0);
    kernel(g.data(), x.data(), y.data(), static_cast<int64_t>(n));
    std::vector<T> wx(64, T(0.25)), wg(64, T(0.5)), wy(64);
    std::memcpy(wx.data(), x.data(), n * sizeof(T));
    std::memcpy(wg.data(), g.data(), n * sizeof(T));
    kernel(wg.data(), wx.data(), wy.data(), 64);
    ASSERT_TRUE(same_bits(y.data(), wy.data(), n));
  }
}
}  // namespace

TEST(TailsTargets, KernelsReadAndWriteNothingPastTheEndOfTheirArraysOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    run_kernels_at_page_end<float>();
    run_kernels_at_page_end<double>();
  });
}

TEST(TailsTargets, TailElementsGetTheBitsOfWholeVectorsOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    const auto exp_unary = [](const auto*, const auto* x, auto* y, int64_t n) { kc::exp_forward(x, y, n); };
    const auto gelu_unary = [](const auto*, const auto* x, auto* y, int64_t n) { kc::gelu_forward(x, y, n); };
    const auto gelu_binary = [](const auto* g, const auto* x, auto* y, int64_t n) {
      kc::gelu_backward(g, x, y, n);
    };
    expect_tail_bits_equal_whole_vector_bits<float>(exp_unary);
    expect_tail_bits_equal_whole_vector_bits<float>(gelu_unary);
    expect_tail_bits_equal_whole_vector_bits<float>(gelu_binary);
    expect_tail_bits_equal_whole_vector_bits<double>(exp_unary);
    expect_tail_bits_equal_whole_vector_bits<double>(gelu_binary);
  });
}
