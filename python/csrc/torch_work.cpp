// torch_work.cpp - TorchWork's waiting and completion, and the Completer thread.
#include "torch_work.h"

#include <c10/util/Exception.h>

namespace ddp_torch {

TorchWork::TorchWork(int rank, c10d::OpType op, std::string name, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, op),
      name(std::move(name)),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

bool TorchWork::isCompleted() { return future_->completed(); }

bool TorchWork::isSuccess() const { return future_->completed() && !future_->hasError(); }

std::exception_ptr TorchWork::exception() const {
  return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
}

bool TorchWork::wait(std::chrono::milliseconds timeout) {
  // Waiting on the ddp.cpp works themselves tells the shm group that a caller blocks (it then spins longer
  // instead of sleeping); their errors are reported through the future below, once.
  bool parts_done = true;
  for (auto& p : parts) {
    try {
      if (timeout == kNoTimeout) {
        p->wait();
      } else if (!p->wait_for(timeout)) {
        parts_done = false;
      }
    } catch (...) {
    }
  }
  if (parts_done) {
    complete();  // here rather than on the Completer: no second thread hand-off
  } else {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!future_->completed()) {
      TORCH_CHECK_WITH(DistBackendError, std::chrono::steady_clock::now() < until, "ddpcpp: ", name,
                       " did not complete within the ", timeout.count(), " ms given to wait()");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
  return true;
}

void TorchWork::complete() {
  if (claimed_.exchange(true)) {  // the other thread is completing it
    future_->wait();
    return;
  }
  std::string error;
  for (auto& p : parts) {
    try {
      p->ddp::dist::Work::wait();  // the base wait: this thread's waiting is not a caller blocking
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (error.empty() && after) {
    try {
      after();
    } catch (const std::exception& e) {
      error = std::string("after the collective: ") + e.what();
    }
  }
  after = nullptr;  // drops the staged tensors it holds (parts stay: a waiter may be reading them)
  if (!error.empty()) {
    auto err = std::make_exception_ptr(
        c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                              "ddpcpp: " + name + " failed: " + error));
    future_->setError(err);
    return;
  }
  future_->markCompleted(c10::IValue(outputs_));
}

Completer::Completer() : thread_([this] { loop(); }) {}

Completer::~Completer() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Completer::push(c10::intrusive_ptr<TorchWork> w) {
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(std::move(w));
  }
  cv_.notify_one();
}

void Completer::loop() {
  for (;;) {
    c10::intrusive_ptr<TorchWork> w;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      w = std::move(queue_.front());
      queue_.pop_front();
    }
    w->complete();
  }
}

}  // namespace ddp_torch
