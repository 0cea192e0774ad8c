// collective_checks.cpp - the skipped-collective scenario every CPU backend must pass.
#include "tests/support/collective_checks.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"

namespace ddp::testing {

using namespace std::chrono_literals;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string error_of(const std::shared_ptr<dist::Work>& w) {
  try {
    w->wait();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_skipped_collective_names_the_missing_rank(const std::string& backend,
                                                      std::chrono::seconds slack) {
  dist::ProcessGroupOptions options;
  options.timeout = 1s;
  options.debug_collectives = false;
  dist::run_threads(
      3,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        std::vector<float> buf(16, 1.0f);
        pg.allreduce(dist::comm_buffer(buf.data(), 16))->wait();  // #0: everyone
        if (rank == 1) {
          store.wait({"done/0", "done/2"}, 30s);  // skips #1, stays alive until the others saw the error
          return;
        }
        auto start = std::chrono::steady_clock::now();
        std::string err = error_of(pg.allreduce(dist::comm_buffer(buf.data(), 16), dist::ReduceOp::Max));
        auto elapsed = std::chrono::steady_clock::now() - start;
        store.set("done/" + std::to_string(rank), "1");
        EXPECT_NE(err.find(backend + " allreduce #1 (16 x float32 on cpu, max)"), std::string::npos) << err;
        EXPECT_NE(err.find("on rank " + std::to_string(rank) + " of 3"), std::string::npos) << err;
        EXPECT_NE(err.find("rank(s) 1 (last reached: #0) did not arrive"), std::string::npos) << err;
        // A bound against hanging, not a speed check: the error must come with the timeout, not much later.
        EXPECT_LT(elapsed, options.timeout + slack);
        // The group is unusable afterwards and says why, at once.
        std::string again = error_of(pg.allreduce(dist::comm_buffer(buf.data(), 16)));
        EXPECT_NE(again.find("failed earlier"), std::string::npos) << again;
      },
      options, backend);
}

}  // namespace ddp::testing
