// test_poll_until.cpp - the deadline loop of the non-blocking NCCL communicator
// (runtime/distributed/poll_until.h): done, failed and timed-out outcomes, and that a query that never finishes is bounded by the deadline.
#include <gtest/gtest.h>

#include "runtime/distributed/poll_until.h"

using namespace std::chrono;
using ddp::dist::poll_until;
using ddp::dist::PollOutcome;
using ddp::dist::PollState;

TEST(PollUntil, ReturnsDoneAfterSomeInProgressQueries) {
  int calls = 0;
  auto q = [&] { return ++calls < 5 ? PollState::InProgress : PollState::Done; };
  EXPECT_EQ(poll_until(q, steady_clock::now() + seconds(30), milliseconds(0)), PollOutcome::Done);
  EXPECT_EQ(calls, 5);
}

TEST(PollUntil, ReportsFailureAtOnce) {
  int calls = 0;
  auto q = [&] {
    ++calls;
    return PollState::Failed;
  };
  EXPECT_EQ(poll_until(q, steady_clock::now() + seconds(30)), PollOutcome::Failed);
  EXPECT_EQ(calls, 1);
}

TEST(PollUntil, AStuckOperationTimesOutAtTheDeadline) {
  int calls = 0;
  auto q = [&] {
    ++calls;
    return PollState::InProgress;  // a peer that died after the unique-id exchange: never completes
  };
  const auto t0 = steady_clock::now();
  EXPECT_EQ(poll_until(q, t0 + milliseconds(50), milliseconds(1)), PollOutcome::TimedOut);
  EXPECT_GE(steady_clock::now() - t0, milliseconds(50));
  EXPECT_GE(calls, 2);
}

TEST(PollUntil, QueriesOnceEvenPastTheDeadline) {
  int calls = 0;
  auto q = [&] {
    ++calls;
    return PollState::Done;
  };
  EXPECT_EQ(poll_until(q, steady_clock::now() - seconds(1)), PollOutcome::Done);
  EXPECT_EQ(calls, 1);
}
