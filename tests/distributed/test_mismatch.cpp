// test_mismatch.cpp - ranks that issue DIFFERENT collectives under the same sequence number (uneven steps:
// one rank finished its loop and all-reduces a metric while the other still all-reduces a gradient bucket).
// Without per-call Gloo tags the larger message lands in the smaller buffer and Gloo aborts the process;
// here every rank gets a clear error naming the sequence number and each rank's call, and nobody blames the
// transport (issue 10, defect 5). Debug mode is off: this is the default path.
#include <gtest/gtest.h>

#include <chrono>

#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;

namespace {
std::string error_of(const std::shared_ptr<Work>& w) {
  try {
    w->wait();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
ProcessGroupOptions short_timeout() {
  ProcessGroupOptions o;
  o.timeout = 2s;
  o.debug_collectives = false;
  return o;
}
}  // namespace

TEST(CollectiveMismatch, DifferentSizesUnderOneSequenceNumberAreAnErrorNotAnAbort) {
  std::vector<std::string> errors(2);
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg) {
        std::vector<float> grads(20000, 1.0f);
        pg.allreduce(comm_buffer(grads.data(), 16))->wait();  // #0 matches
        // #1: rank 0 reduces a 20000-float bucket, rank 1 a 1-element metric
        errors[rank] = rank == 0 ? error_of(pg.allreduce(comm_buffer(grads.data(), 20000)))
                                 : error_of(pg.allreduce(comm_buffer(grads.data(), 1)));
      },
      short_timeout());
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[r];
    EXPECT_NE(e.find("collective mismatch at sequence number 1"), std::string::npos) << e;
    EXPECT_NE(e.find("allreduce (20000 x float32, sum)"), std::string::npos) << e;
    EXPECT_NE(e.find("allreduce (1 x float32, sum)"), std::string::npos) << e;
    EXPECT_NE(e.find("this rank (" + std::to_string(r) + ")"), std::string::npos) << e;
    EXPECT_EQ(e.find("transport failed"), std::string::npos) << e;
  }
}

TEST(CollectiveMismatch, DifferentKindsNameBothCallsAndNeverBlameTheTransport) {
  std::vector<std::string> errors(3);
  run_threads(
      3,
      [&](int rank, ProcessGroup& pg) {
        std::vector<double> buf(64, 1.0);
        errors[rank] = rank == 2 ? error_of(pg.broadcast(comm_buffer(buf.data(), 64), 0))
                                 : error_of(pg.allreduce(comm_buffer(buf.data(), 64)));
      },
      short_timeout());
  for (int r = 0; r < 3; ++r) {
    const std::string& e = errors[r];
    EXPECT_NE(e.find("collective mismatch at sequence number 0"), std::string::npos) << e;
    EXPECT_NE(e.find("broadcast (64 x float64, root 0)"), std::string::npos) << e;
    EXPECT_NE(e.find("allreduce (64 x float64, sum)"), std::string::npos) << e;
    EXPECT_EQ(e.find("transport failed"), std::string::npos) << e;
  }
}
