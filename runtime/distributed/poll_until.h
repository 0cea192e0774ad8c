// poll_until.h - waits for an asynchronous operation that is only observable by polling (a non-blocking NCCL
// communicator's state), with a deadline: the loop the NCCL group uses for communicator creation, enqueueing
// and finalization. Plain C++ so the timeout logic is tested without a GPU
// (tests/distributed/test_poll_until.cpp).
#pragma once
#include <chrono>
#include <thread>

namespace ddp::dist {

enum class PollState { InProgress, Done, Failed };
enum class PollOutcome { Done, Failed, TimedOut };

// Calls query() (returning a PollState) until it is no longer InProgress or `deadline` passes; sleeps
// `period` between queries. query() is called at least once, even when the deadline has already passed.
template <class Query>
PollOutcome poll_until(Query&& query, std::chrono::steady_clock::time_point deadline,
                       std::chrono::milliseconds period = std::chrono::milliseconds(1)) {
  while (true) {
    switch (query()) {
      case PollState::Done:
        return PollOutcome::Done;
      case PollState::Failed:
        return PollOutcome::Failed;
      case PollState::InProgress:
        break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return PollOutcome::TimedOut;
    std::this_thread::sleep_for(period);
  }
}

}  // namespace ddp::dist
