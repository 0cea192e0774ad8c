// torch_work.h - the c10d::Work that the ddpcpp backend returns: one or more ddp.cpp collectives (Works of the
// shm group) plus what must happen after them (copying staged results back), with a future that resolves to
// the output tensor list - DDP's comm hooks chain on it. A Completer thread per backend waits for the works in
// issue order, runs the after-step and completes the future; a ddp.cpp error becomes a DistBackendError. A
// caller blocked in wait() completes its work itself when the collective ends first.
#pragma once
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/distributed/process_group.h"

namespace ddp_torch {

class TorchWork : public c10d::Work {
 public:
  TorchWork(int rank, c10d::OpType op, std::string name, std::vector<at::Tensor> outputs);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override { return future_; }

  // Filled by the backend before the work is handed to the Completer.
  std::vector<std::shared_ptr<ddp::dist::Work>> parts;
  std::function<void()> after;  // on the Completer thread, once every part succeeded
  const std::string name;       // "allreduce", "_reduce_scatter_base", ... for messages

  // Waits for the parts, runs `after`, completes the future (or sets its error). Run by the Completer, or by a
  // caller blocked in wait() once the parts are done (one thread hand-off fewer); whoever comes second waits
  // for the first.
  void complete();

 private:
  std::atomic<bool> claimed_{false};
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Completes TorchWorks in issue order on its own thread.
class Completer {
 public:
  Completer();
  ~Completer();  // completes what is queued, then joins
  void push(c10::intrusive_ptr<TorchWork> w);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<TorchWork>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddp_torch
