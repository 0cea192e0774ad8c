// comm_hook.cpp - the built-in hooks (all-reduce, bf16) and the chained Work the multi-step hooks use.
#include "runtime/ddp/comm_hook.h"

#include "runtime/ddp/powersgd_hook.h"
#include "runtime/distributed/comm_buffer_of.h"

namespace ddp {

void CommHook::attach(const void* reducer) {
  DDP_CHECK(reducer_ == nullptr || reducer_ == reducer, "DDP: the ", name(),
            " comm hook is already used by another DDP reducer; hooks keep per-bucket state, so give every "
            "DistributedDataParallel (every rank, also ranks that are threads) its own hook object");
  reducer_ = reducer;
}

std::shared_ptr<dist::Work> AllreduceHook::run(dist::ProcessGroup& pg, GradBucket& bucket) {
  bytes_ += static_cast<int64_t>(bucket.buffer.nbytes());
  return pg.allreduce(comm_buffer_of(bucket.buffer),
                      bucket.average ? dist::ReduceOp::Avg : dist::ReduceOp::Sum);
}

std::shared_ptr<dist::Work> BF16CompressHook::run(dist::ProcessGroup& pg, GradBucket& bucket) {
  Tensor compressed = bucket.buffer.to(DType::BF16);
  bytes_ += static_cast<int64_t>(compressed.nbytes());
  auto first = pg.allreduce(comm_buffer_of(compressed), dist::ReduceOp::Sum);
  Tensor out = bucket.buffer;
  return std::make_shared<ChainedWork>("bf16 allreduce of bucket " + std::to_string(bucket.index), first,
                                       [out, compressed]() mutable { out.copy_from(compressed); });
}

ChainedWork::ChainedWork(std::string description, std::shared_ptr<dist::Work> first, std::function<void()> then)
    : dist::Work(std::move(description)), first_(std::move(first)), then_(std::move(then)) {}

void ChainedWork::wait() {
  if (!ran_) {
    ran_ = true;
    try {
      first_->wait();
      if (then_) then_();
      finish();
    } catch (...) {
      finish(std::current_exception());
    }
    then_ = nullptr;  // drop captured buffers
  }
  dist::Work::wait();  // rethrows the error, if any
}

bool ChainedWork::wait_for(std::chrono::milliseconds timeout) {
  if (!ran_ && !first_->wait_for(timeout)) return false;
  wait();
  return true;
}

bool ChainedWork::is_completed() { return ran_ && host_done(); }

std::exception_ptr ChainedWork::error() { return ran_ ? dist::Work::error() : first_->error(); }

std::shared_ptr<CommHook> make_comm_hook(const std::string& name, int powersgd_rank, int64_t powersgd_start_iter) {
  if (name == "allreduce") return std::make_shared<AllreduceHook>();
  if (name == "bf16") return std::make_shared<BF16CompressHook>();
  if (name == "powersgd") {
    PowerSGDOptions o;
    o.matrix_approximation_rank = powersgd_rank;
    o.start_iter = powersgd_start_iter;
    return std::make_shared<PowerSGDHook>(o);
  }
  DDP_FAIL("comm hook '", name, "': expected allreduce, bf16 or powersgd");
}

}  // namespace ddp
