// test_parallel.cpp - the intra-op thread pool (kernels/cpu/parallel.h): every parallelized kernel gives
// bitwise-identical results with thread budgets 1, 2 and 3 (elementwise splits, the fixed-block
// reductions, the attention's (batch, head) pairs), a budget of 1 starts no thread, a budget of 2 starts
// exactly one worker, idle workers sleep after their short spin, and jobs are right whatever state a worker
// is in. Thread-count checks run in a fresh child process (EXPECT_EXIT) so that other tests' pools do not
// count.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <unistd.h>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/softmax.h"
#include "tests/ops_simd/simd_test_util.h"

using namespace ddp;
using namespace ddp::testing;
namespace kc = ddp::kernels::cpu;

namespace {
// Task ids of this process and the one-letter state of each (R running, S sleeping, ...).
std::vector<std::pair<int, char>> threads_and_states() {
  std::vector<std::pair<int, char>> out;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string line;
    std::getline(f, line);
    const size_t close = line.rfind(')');
    out.push_back({std::atoi(e->d_name), close + 2 < line.size() ? line[close + 2] : '?'});
  }
  closedir(dir);
  return out;
}
int thread_count() { return static_cast<int>(threads_and_states().size()); }

// Runs every parallelized kernel on sizes above the threshold (odd sizes: uneven splits) and returns all
// outputs concatenated as bytes.
std::vector<char> run_all_kernels() {
  std::vector<char> bytes;
  auto keep = [&](const auto& v) {
    const char* p = reinterpret_cast<const char*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(v[0]));
  };
  const int64_t n = 300007;
  const std::vector<float> x = cast_to<float>(spread(n, -6, 6)), g = cast_to<float>(spread(n, -2, 2)),
                           pos = cast_to<float>(spread(n, 0.01, 50));
  std::vector<float> y(n);
  kc::gelu_forward(x.data(), y.data(), n), keep(y);
  kc::gelu_backward(g.data(), x.data(), y.data(), n), keep(y);
  kc::tanh_forward(x.data(), y.data(), n), keep(y);
  kc::sigmoid_forward(x.data(), y.data(), n), keep(y);
  kc::exp_forward(x.data(), y.data(), n), keep(y);
  kc::log_forward(pos.data(), y.data(), n), keep(y);
  kc::relu_backward(g.data(), x.data(), y.data(), n), keep(y);
  kc::dropout_apply(x.data(), y.data(), n, kc::dropout_key(3), 17, kc::dropout_threshold(0.3), 1.0f / 0.7f);
  keep(y);
  std::vector<float> w = x, buf(n, 0.5f), m(n, 0.1f), v(n, 0.2f);
  kc::sgd_step(w.data(), g.data(), buf.data(), n, 0.01, 0.9, 0.0, 1e-4, true, false), keep(w), keep(buf);
  kc::adamw_step(w.data(), g.data(), m.data(), v.data(), n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.5, 0.1);
  keep(w), keep(m), keep(v);
  // Row kernels: 2999 rows of 100 (the blocks of 64 rows end mid-split), cross-entropy targets spread. A few
  // rows of logits near 1e7 (the softmax family's exp takes another form for them) sit next to the thread
  // splits of budgets 2 and 3: their neighbours must not change how they are summed.
  const int64_t rows = 2999, cols = 100;
  std::vector<float> xl = x;
  for (int64_t huge : {1003, 1503, 2003})
    for (int64_t c = 0; c < cols; ++c) xl[huge * cols + c] += 1e7f;
  std::vector<float> r(rows * cols), dr(rows * cols), lse(rows), mean(rows), rstd(rows), dw(cols), db(cols);
  kc::softmax_forward(xl.data(), r.data(), rows, cols), keep(r);
  kc::softmax_backward(r.data(), g.data(), dr.data(), rows, cols), keep(dr);
  kc::log_softmax_forward(xl.data(), r.data(), rows, cols), keep(r);
  kc::log_softmax_backward(r.data(), g.data(), dr.data(), rows, cols), keep(dr);
  std::vector<int64_t> t(rows);
  for (int64_t i = 0; i < rows; ++i) t[i] = (i * 37) % cols;
  int64_t count = 0;
  const std::vector<double> loss = {
      kc::cross_entropy_forward(xl.data(), t.data(), rows, cols, false, -100, lse.data(), &count)};
  keep(loss), keep(lse);
  const float dl = 1.0f;
  kc::cross_entropy_backward(xl.data(), t.data(), lse.data(), &dl, double(rows), rows, cols, false, -100,
                             dr.data());
  keep(dr);
  const std::vector<float> lw = cast_to<float>(spread(cols, 0.5, 1.5)),
                           lb = cast_to<float>(spread(cols, -1, 1));
  kc::layernorm_forward(x.data(), lw.data(), lb.data(), r.data(), mean.data(), rstd.data(), rows, cols, 1e-5);
  keep(r), keep(mean), keep(rstd);
  kc::layernorm_backward(g.data(), x.data(), lw.data(), mean.data(), rstd.data(), dr.data(), dw.data(),
                         db.data(), rows, cols);
  keep(dr), keep(dw), keep(db);
  // Causal attention: its (batch, head) pairs spread over the pool (11 pairs: the splits of budgets 2 and 3
  // fall inside a batch row), context 37 (two row blocks), float32 and float64.
  const int64_t B = 11, T = 37, C = 12, H = 1;
  auto attention = [&](auto zero) {
    using S = decltype(zero);
    std::vector<S> qkv(B * T * 3 * C), dy(B * T * C), ya(B * T * C), att(B * H * T * T), dqkv(B * T * 3 * C);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<S>(x[i]) / S(4);
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<S>(g[i]);
    kc::attention_forward(qkv.data(), ya.data(), att.data(), B, T, C, H);
    kc::attention_backward(dy.data(), qkv.data(), att.data(), dqkv.data(), B, T, C, H);
    keep(ya), keep(att), keep(dqkv);
  };
  attention(0.0f);
  attention(0.0);
  return bytes;
}
}  // namespace

// With the split thresholds as they are, and with every parallel_for forced to split (the streaming kernels
// - optimizer steps, dropout, column sums - only split from 1M elements per thread, above these sizes).
TEST(IntraOpParallel, ResultsAreBitwiseIdenticalForThreadBudgets1To3) {
  const int saved = kc::thread_budget();
  for (bool forced : {false, true}) {
    SCOPED_TRACE(forced ? "split forced" : "default thresholds");
    kc::set_parallel_split_always(forced);
    kc::set_thread_budget(1);
    const std::vector<char> one = run_all_kernels();
    kc::set_thread_budget(2);
    const std::vector<char> two = run_all_kernels();
    EXPECT_GE(kc::pool_threads_started(), 1) << "budget 2 never used the pool: the comparison is vacuous";
    kc::set_thread_budget(3);
    const std::vector<char> three = run_all_kernels();
    ASSERT_EQ(one.size(), two.size());
    EXPECT_TRUE(std::memcmp(one.data(), two.data(), one.size()) == 0) << "budget 1 vs 2 differ";
    EXPECT_TRUE(std::memcmp(one.data(), three.data(), one.size()) == 0) << "budget 1 vs 3 differ";
  }
  kc::set_parallel_split_always(false);
  kc::set_thread_budget(saved);
}

// Which kernels split, and from what size: the streaming kernels stay on the calling thread below
// kParallelMinStreaming elements per thread and split above it; set_parallel_split_always splits anything.
TEST(IntraOpParallel, StreamingKernelsSplitOnlyFromTheirThreshold) {
  const int saved = kc::thread_budget();
  kc::set_thread_budget(2);
  auto threads_used = [](int64_t n) {
    std::vector<std::thread::id> seen;
    std::mutex mu;
    kc::parallel_for(n, 64, kc::kParallelMinStreaming, [&](int64_t, int64_t) {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(std::this_thread::get_id());
    });
    return seen.size();
  };
  EXPECT_EQ(threads_used(2 * kc::kParallelMinStreaming - 64), 1u);
  EXPECT_EQ(threads_used(2 * kc::kParallelMinStreaming), 2u);
  kc::set_parallel_split_always(true);
  EXPECT_EQ(threads_used(128), 2u);
  kc::set_parallel_split_always(false);
  kc::set_thread_budget(saved);
}

TEST(IntraOpParallel, SmallInputsStayOnTheCallingThread) {
  const int saved = kc::thread_budget();
  kc::set_thread_budget(2);
  std::vector<std::thread::id> seen;
  kc::parallel_for(kc::kParallelMinElements, 64, kc::kParallelMinElements,
                   [&](int64_t, int64_t) { seen.push_back(std::this_thread::get_id()); });
  kc::set_thread_budget(saved);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::this_thread::get_id());
}

TEST(IntraOpParallel, RangesCoverEverythingOnceWithAlignedBoundaries) {
  const int saved = kc::thread_budget();
  for (int budget : {1, 2, 3, 5}) {
    kc::set_thread_budget(budget);
    for (int64_t n : {int64_t(1), int64_t(100), int64_t(1) << 16, int64_t(1000003)}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      kc::parallel_for(n, 64, 1000, [&](int64_t b, int64_t e) {
        EXPECT_TRUE(b % 64 == 0) << b;
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "n " << n << " i " << i;
    }
  }
  kc::set_thread_budget(saved);
}

// World 2 on 2 cores runs 1 thread per rank: no pool thread may appear.
// Workers poll for kPoolSpinMicros after a job before they sleep, and park_pool_workers() sends them to sleep
// early (parallel.h): every job's ranges are run exactly once whichever state a worker is in when it is
// posted - spinning, parked, or asleep after the spin - for budgets 2 and 3 (also under the TSan pass).
TEST(IntraOpParallel, JobsAreRightWhileWorkersSpinParkAndSleep) {
  const int saved = kc::thread_budget();
  for (int budget : {2, 3}) {
    kc::set_thread_budget(budget);
    kc::set_parallel_split_always(true);
    for (int round = 0; round < 300; ++round) {
      std::vector<int64_t> out(1000, -1);
      kc::parallel_for(1000, 1, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = out[i] == -1 ? i * 3 + round : -2;  // -2: run twice
      });
      for (int64_t i = 0; i < 1000; ++i)
        ASSERT_EQ(out[i], i * 3 + round) << "budget " << budget << " round " << round;
      if (round % 3 == 0) kc::park_pool_workers();
      if (round % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(3 * kc::kPoolSpinMicros));
    }
    kc::set_parallel_split_always(false);
  }
  kc::set_thread_budget(saved);
}

TEST(IntraOpParallelDeathTest, BudgetOneStartsNoThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        kc::set_thread_budget(1);
        const int before = thread_count();
        run_all_kernels();
        const bool ok = kc::pool_threads_started() == 0 && thread_count() == before;
        if (!ok)
          std::fprintf(stderr, "threads %d -> %d, pool %d\n", before, thread_count(),
                       kc::pool_threads_started());
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Budget 2: exactly one pool worker (the caller is the second thread), and once the work is done every
// thread but the caller is asleep (polled for up to 10 s, so a loaded machine cannot fail it).
TEST(IntraOpParallelDeathTest, BudgetTwoStartsOneWorkerThatSleepsWhenIdle) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        kc::set_thread_budget(2);
        const int before = thread_count();
        run_all_kernels();
        run_all_kernels();
        const int after = thread_count();
        bool asleep = false;
        const int self = static_cast<int>(getpid());
        for (int i = 0; i < 1000 && !asleep; ++i) {
          asleep = true;
          for (auto [tid, state] : threads_and_states())
            if (tid != self && state == 'R') asleep = false;
          if (!asleep) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        const bool ok = kc::pool_threads_started() == 1 && after == before + 1 && asleep;
        if (!ok)
          std::fprintf(stderr, "threads %d -> %d, pool %d, asleep %d\n", before, after,
                       kc::pool_threads_started(), asleep);
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// The streaming kernels (SGD, AdamW, dropout, column sums) at 1M elements, budget 2: below their threshold
// (2 x kParallelMinStreaming), so no pool worker starts; at 4M elements the SGD step splits. Exit code 0 when
// so (run in a fresh child process).
int streaming_kernels_child() {
  kc::set_thread_budget(2);
  const int64_t n = 1 << 20;
  std::vector<float> w(n, 1.0f), g(n, 0.5f), buf(n, 0.1f), m(n, 0.1f), v(n, 0.2f), y(n);
  kc::sgd_step(w.data(), g.data(), buf.data(), n, 0.01, 0.9, 0.0, 1e-4, false, false);
  kc::adamw_step(w.data(), g.data(), m.data(), v.data(), n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.5, 0.1);
  kc::dropout_apply(w.data(), y.data(), n, kc::dropout_key(3), 0, kc::dropout_threshold(0.3), 2.0f);
  kc::sum_middle(w.data(), 1, 1024, 1024, y.data(), 1.0);
  const int below = kc::pool_threads_started();
  std::vector<float> big(4 * n, 1.0f), gbig(4 * n, 0.5f);
  kc::sgd_step(big.data(), gbig.data(), static_cast<float*>(nullptr), 4 * n, 0.01, 0.0, 0.0, 0.0, false,
               false);
  const int above = kc::pool_threads_started();
  if (below != 0 || above != 1) std::fprintf(stderr, "pool threads %d below, %d above\n", below, above);
  return below == 0 && above == 1 ? 0 : 1;
}

TEST(IntraOpParallelDeathTest, StreamingKernelsStartNoThreadBelowTheirThreshold) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(streaming_kernels_child()), ::testing::ExitedWithCode(0), "");
}
