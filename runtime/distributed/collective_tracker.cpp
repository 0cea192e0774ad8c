// collective_tracker.cpp - arrival marks, straggler reports and the debug-mode call comparison.
#include "runtime/distributed/collective_tracker.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "runtime/core/error.h"
#include "runtime/distributed/collective.h"

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

std::string arrival_signature(const CollectiveDesc& d) {
  std::string s = collective_name(d.kind);
  if (d.kind == CollectiveKind::Barrier) return s;
  s += " (" + std::to_string(d.count) + " x " + std::string(dtype_name(d.dtype));
  if (d.kind == CollectiveKind::Allreduce || d.kind == CollectiveKind::ReduceScatter)
    s += std::string(", ") + reduce_op_name(d.op);
  if (d.kind == CollectiveKind::Broadcast) s += ", root " + std::to_string(d.root);
  return s + ")";
}

void CollectiveTracker::note_start(uint64_t seq) {
  started_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  started_seq_ = seq;
}

void CollectiveTracker::mark_arrived(uint64_t seq) {
  if (size_ == 1) return;
  note_start(seq);
  {
    std::lock_guard<std::mutex> g(publish_mu_);
    to_publish_ = std::to_string(seq) + "|";
  }
  publish_cv_.notify_one();
}

void CollectiveTracker::mark_arrived(const CollectiveDesc& d) {
  if (size_ == 1) return;
  note_start(d.seq);
  {
    std::lock_guard<std::mutex> g(publish_mu_);
    to_publish_ = std::to_string(d.seq) + "|" + arrival_signature(d);
  }
  publish_cv_.notify_one();
}

void CollectiveTracker::publish_loop() {
  const std::string k = key("arrived/" + std::to_string(rank_));
  std::unique_lock<std::mutex> lock(publish_mu_);
  for (;;) {
    publish_cv_.wait(lock, [this] { return stop_ || to_publish_.has_value(); });
    if (!to_publish_) return;  // stopping with nothing left to write
    const std::string value = std::move(*to_publish_);
    to_publish_.reset();
    lock.unlock();
    try {
      publish_store_->set(k, value);
    } catch (const std::exception&) {
      // The store is gone (shutdown, or rank 0 died): the collective itself will report the failure.
    }
    lock.lock();
    if (stop_ && !to_publish_) return;
  }
}

std::vector<CollectiveTracker::Mark> CollectiveTracker::marks() {
  std::vector<Mark> out;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;  // this rank is here (its own published mark may lag)
    Mark m{r, std::nullopt, ""};
    if (auto v = store_->try_get(key("arrived/" + std::to_string(r)))) {
      const std::string& text = *v;
      uint64_t last = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), last);
      if (ec == std::errc()) {
        m.last_arrived = last;
        const size_t used = static_cast<size_t>(p - text.data());
        if (used < text.size() && text[used] == '|') m.call = text.substr(used + 1);
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<CollectiveTracker::Straggler> CollectiveTracker::missing_ranks(uint64_t seq) {
  std::vector<Straggler> out;
  for (auto& m : marks())
    if (!m.last_arrived || *m.last_arrived < seq) out.push_back(m);
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
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    const double elapsed = static_cast<double>(now_ns - started_ns_) * 1e-9;
    when = seconds(elapsed) + " after it started (timeout " + std::to_string(timeout_.count()) + " ms)";
  }
  const bool closed = peer_closed(cause);
  std::string msg = backend + " " + d.str() + " failed on rank " + std::to_string(rank_) + " of " +
                    std::to_string(size_) + " " + when + ": ";
  if (closed)
    msg +=
        "a peer closed its connection - a rank exited or was killed, or its node's launcher was stopped "
        "(look for the first failure in the other ranks' output); ";
  std::vector<Mark> all;
  std::string store_problem;
  try {
    all = marks();
  } catch (const std::exception& e) {
    store_problem = e.what();
  }
  if (!store_problem.empty())
    return msg + "could not ask the store which ranks arrived (" + store_problem + "). Cause reported by " +
           backend + ": " + cause;
  const std::string mine = arrival_signature(d);
  std::vector<Mark> missing, different;
  bool all_calls_known = true;
  for (auto& m : all) {
    if (!m.last_arrived || *m.last_arrived < d.seq) {
      missing.push_back(m);
    } else if (*m.last_arrived == d.seq) {
      if (m.call.empty())
        all_calls_known = false;
      else if (m.call != mine)
        different.push_back(m);
    }
  }
  auto last_str = [](const Mark& m) {
    return m.last_arrived ? "#" + std::to_string(*m.last_arrived) : std::string("none");
  };
  if (!different.empty()) {
    msg += "collective mismatch at sequence number " + std::to_string(d.seq) + ": this rank (" +
           std::to_string(rank_) + ") calls " + mine;
    for (auto& m : different) msg += ", rank " + std::to_string(m.rank) + " calls " + m.call;
    msg += ". ";
    msg += kMismatchHint;
  } else if (!missing.empty()) {
    msg += "rank(s) ";
    for (size_t i = 0; i < missing.size(); ++i) {
      if (i) msg += ", ";
      msg += std::to_string(missing[i].rank) + " (last reached: " + last_str(missing[i]) + ")";
    }
    msg +=
        " did not arrive at this collective. A rank skipped it, crashed or is stuck: every rank must issue "
        "the same collectives in the same order (DDP_DEBUG_COLLECTIVES=1 checks this)";
  } else if (closed) {
    msg += "all ranks had arrived at this collective";
  } else if (all_calls_known) {
    msg += "all ranks arrived at this collective with the same call (" + mine +
           "), so the transport failed or a rank is too slow";
  } else {
    msg +=
        "all ranks arrived at this sequence number (" + backend +
        " does not report their calls, so a mismatch of kind or size is possible: "
        "DDP_DEBUG_COLLECTIVES=1 compares them), so the transport failed, a rank is too slow, or the calls "
        "differ";
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
