// ft_client.cpp - the heartbeat and epoch-watch thread of a fault-tolerant worker (see ft_client.h).
#include "runtime/distributed/ft_client.h"

#include <time.h>

#include <algorithm>

#include "runtime/core/error.h"

namespace ddp::dist::ft {

Client::Client(std::shared_ptr<Store> store, ClientOptions options) : store_(std::move(store)), opt_(options) {
  DDP_CHECK(store_ != nullptr, "fault tolerance: the client needs a store connection");
  // Short store calls: a store that does not answer within the deadline is a lost coordinator.
  store_->set_timeout(std::max(std::chrono::milliseconds(100), opt_.deadline / 2));
  const std::string epoch = store_->get(kEpochKey);
  latest_ = Membership::decode(store_->get(members_key(std::stoll(epoch))));
  store_->set(heartbeat_key(opt_.slot), Heartbeat{opt_.incarnation, beat_++, 0}.encode());
  thread_ = std::thread([this] { loop(); });
}

Client::~Client() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Client::on_change(std::function<void(const std::string&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  callback_ = std::move(callback);
}

void Client::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  try {
    store_->set(heartbeat_key(opt_.slot), Heartbeat{opt_.incarnation, Heartbeat::kFinished, committed_step_.load()}.encode());
  } catch (const std::exception&) {
    // ddprun is gone: nobody is left to tell.
  }
}

Membership Client::latest() {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

std::string Client::coordinator_lost() {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

std::optional<Membership> Client::wait_for_epoch_after(int64_t after, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return latest_.epoch > after || !lost_.empty(); });
  if (latest_.epoch > after) return latest_;
  return std::nullopt;
}

bool Client::poll_epochs() {
  int64_t known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = latest_.epoch;
  }
  const auto text = store_->try_get(kEpochKey);
  if (!text || std::stoll(*text) <= known) return false;
  Membership m = Membership::decode(store_->get(members_key(std::stoll(*text))));
  std::function<void(const std::string&)> callback;
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = m;
    callback = callback_;
  }
  // The callback (the trainer aborts its group there) runs before the waiters wake: whoever sees the new
  // epoch through wait_for_epoch_after() finds the old group already aborted.
  if (callback) callback("membership epoch " + std::to_string(m.epoch) + ": " + m.reason);
  cv_.notify_all();
  return true;
}

void Client::loop() {
  using Clock = std::chrono::steady_clock;
  auto last_answer = Clock::now();
  std::string last_error;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    try {
      const int64_t beat = finished_.load() ? Heartbeat::kFinished : beat_++;
      store_->set(heartbeat_key(opt_.slot), Heartbeat{opt_.incarnation, beat, committed_step_.load()}.encode());
      poll_epochs();
      last_answer = Clock::now();
      ++beats_;
    } catch (const std::exception& e) {
      last_error = e.what();
    }
    timespec cpu{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    cpu_ns_ = static_cast<int64_t>(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec;
    lock.lock();
    if (Clock::now() - last_answer > opt_.deadline && lost_.empty()) {
      lost_ = "the fault-tolerance coordinator (ddprun's store at " + store_->host() + ":" +
              std::to_string(store_->port()) + ") has not answered for " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_answer).count()) +
              " ms (--heartbeat-timeout): ddprun on the first node is gone or unreachable (" + last_error + ")";
      auto callback = callback_;
      const std::string why = lost_;
      lock.unlock();
      if (callback) callback(why);
      cv_.notify_all();
      lock.lock();
    }
    cv_.wait_for(lock, opt_.period, [&] { return stop_; });
  }
}

}  // namespace ddp::dist::ft
