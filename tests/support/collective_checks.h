// collective_checks.h - checks shared by the failure tests of every CPU backend (test_failures.cpp runs them
// on gloo, test_shm.cpp on shm): what a rank sees when a peer skips a collective.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "runtime/distributed/process_group.h"

namespace ddp::testing {

// The error text of w's collective ("" when it succeeded).
std::string error_of(const std::shared_ptr<dist::Work>& w);
// The text of the ddp::Error that f throws ("" when it throws none).
std::string error_of(const std::function<void()>& f);

// Three thread ranks on `backend` with a 1 s timeout; rank 1 skips collective #1. Ranks 0 and 2 must fail
// within the timeout + `slack` with an error naming "<backend> allreduce #1 (...)", themselves and rank 1 as
// the missing one, and their group must refuse the next collective ("failed earlier").
void expect_skipped_collective_names_the_missing_rank(const std::string& backend, std::chrono::seconds slack);

}  // namespace ddp::testing
