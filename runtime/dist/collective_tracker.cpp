// collective_tracker.cpp - arrival marks, straggler reports and the debug-mode call comparison.
#include "runtime/dist/collective_tracker.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "runtime/core/error.h"

namespace ddp::dist {

CollectiveTracker::CollectiveTracker(std::shared_ptr<Store> store, std::string prefix, int rank, int size,
                                     std::chrono::milliseconds timeout)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size), timeout_(timeout) {
  if (size_ > 1) {
    publish_store_ = store_->clone();
    publisher_ = std::thread([this] { publish_loop(); });
  }
}

CollectiveTracker::~CollectiveTracker() {
  {
    std::lock_guard<std::mutex> g(publish_mu_);
    stop_ = true;
  }
  publish_cv_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

void CollectiveTracker::mark_arrived(uint64_t seq) {
  if (size_ == 1) return;
  started_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  started_seq_ = seq;
  {
    std::lock_guard<std::mutex> g(publish_mu_);
    to_publish_ = seq;
  }
  publish_cv_.notify_one();
}

void CollectiveTracker::publish_loop() {
  const std::string k = key("arrived/" + std::to_string(rank_));
  std::unique_lock<std::mutex> lock(publish_mu_);
  for (;;) {
    publish_cv_.wait(lock, [this] { return stop_ || to_publish_.has_value(); });
    if (!to_publish_) return;  // stopping with nothing left to write
    const uint64_t seq = *to_publish_;
    to_publish_.reset();
    lock.unlock();
    try {
      publish_store_->set(k, std::to_string(seq));
    } catch (const std::exception&) {
      // The store is gone (shutdown, or rank 0 died): the collective itself will report the failure.
    }
    lock.lock();
    if (stop_ && !to_publish_) return;
  }
}

std::vector<CollectiveTracker::Straggler> CollectiveTracker::missing_ranks(uint64_t seq) {
  std::vector<Straggler> out;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;  // this rank is here (its own published mark may lag)
    auto v = store_->try_get(key("arrived/" + std::to_string(r)));
    if (!v) {
      out.push_back({r, std::nullopt});
      continue;
    }
    uint64_t last = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), last);
    if (ec != std::errc() || last < seq) out.push_back({r, last});
  }
  return out;
}

namespace {
// Transport errors that mean the other end of a connection went away (exited, killed, its node's launcher
// stopped), as opposed to a timeout.
bool peer_closed(const std::string& cause) {
  for (const char* s : {"Connection reset by peer", "Connection closed by peer", "Broken pipe",
                        "closed the connection", "Connection refused", "ECONNRESET", "EPIPE"})
    if (cause.find(s) != std::string::npos) return true;
  return false;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), s < 10 ? "%.2f s" : "%.0f s", s);
  return buf;
}
}  // namespace

std::string CollectiveTracker::failure_message(const CollectiveDesc& d, const std::string& backend,
                                               const std::string& cause) {
  std::string when = "after timeout " + std::to_string(timeout_.count()) + " ms";
  if (started_seq_ == d.seq) {
    const double elapsed = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   std::chrono::steady_clock::now().time_since_epoch())
                                                   .count() -
                                               started_ns_) *
                           1e-9;
    when = seconds(elapsed) + " after it started (timeout " + std::to_string(timeout_.count()) + " ms)";
  }
  const bool closed = peer_closed(cause);
  std::string msg = backend + " " + d.str() + " failed on rank " + std::to_string(rank_) + " of " +
                    std::to_string(size_) + " " + when + ": ";
  if (closed)
    msg +=
        "a peer closed its connection - a rank exited or was killed, or its node's launcher was stopped "
        "(look for the first failure in the other ranks' output); ";
  std::vector<Straggler> missing;
  std::string store_problem;
  try {
    missing = missing_ranks(d.seq);
  } catch (const std::exception& e) {
    store_problem = e.what();
  }
  if (!store_problem.empty()) {
    msg += "could not ask the store which ranks arrived (" + store_problem + ")";
  } else if (missing.empty()) {
    msg += closed ? "all ranks had arrived at this collective"
                  : "all ranks arrived at this collective, so the transport failed or a rank is too slow";
  } else {
    msg += "rank(s) ";
    for (size_t i = 0; i < missing.size(); ++i) {
      if (i) msg += ", ";
      msg += std::to_string(missing[i].rank);
      msg += " (last reached: ";
      msg += missing[i].last_arrived ? std::string(1, '#').append(std::to_string(*missing[i].last_arrived))
                                     : std::string("none");
      msg += ")";
    }
    msg +=
        " did not arrive at this collective. A rank skipped it, crashed or is stuck: every rank must issue "
        "the same collectives in the same order (DDP_DEBUG_COLLECTIVES=1 checks this)";
  }
  return msg + ". Cause reported by " + backend + ": " + cause;
}

void CollectiveTracker::check_same_call(const CollectiveDesc& d) {
  const std::string mine = d.str(false);
  const std::string base = "dbg/" + std::to_string(d.seq) + "/";
  store_->set(key(base + std::to_string(rank_)), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key(base + std::to_string(r)));
  try {
    store_->wait(keys, timeout_);
  } catch (const Error& e) {
    DDP_FAIL(
        failure_message(d, "debug check of", std::string("not every rank published its call: ") + e.what()));
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    std::string theirs = store_->get(keys[r], timeout_);
    DDP_CHECK(
        theirs == mine, "collective mismatch at sequence number ", d.seq, ": rank ", rank_, " calls ", mine,
        " but rank ", r, " calls ", theirs,
        ". Every rank must issue the same collectives, with the same counts and dtypes, in the same order");
  }
  // Every rank published seq's key only after reading all of seq-1's keys: ours for seq-1 is no longer
  // needed.
  if (d.seq > 0) store_->delete_key(key("dbg/" + std::to_string(d.seq - 1) + "/" + std::to_string(rank_)));
}

}  // namespace ddp::dist
