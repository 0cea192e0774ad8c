// comm_hook.h - what a DDP bucket's communication does, as an interface (like PyTorch's
// register_comm_hook): the reducer fills a bucket with this rank's gradients divided by the world size, hands
// it to the hook when the bucket is ready, and waits on the returned Work at the end of backward; once waited,
// the bucket holds the averaged gradients that are written back to .grad. Built-ins: AllreduceHook (the
// default), BF16CompressHook (all-reduce in bfloat16) and PowerSGDHook (powersgd_hook.h).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/distributed/process_group.h"
#include "runtime/nn/module.h"

namespace ddp {

struct GradBucket {
  size_t index = 0;      // launch order within the iteration (0 first)
  bool is_last = false;  // the last bucket of this iteration
  Tensor buffer;         // flat: this rank's gradients / world size; the hook leaves the average here
  // Set only for the default AllreduceHook on a buffer in the backend's communication memory: buffer holds
  // the undivided gradients and the all-reduce averages (one pass less over the gradients).
  bool average = false;
  std::vector<Tensor> gradients;  // per parameter: a view of buffer with the parameter's shape
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual const char* name() const = 0;
  // Called once by the reducer: reject parameters this hook cannot handle, with a clear error.
  virtual void check_parameters(const std::vector<nn::NamedTensor>& params) { (void)params; }
  // Starts the bucket's communication (it may run on while backward continues); the reducer waits on the
  // returned Work, after which bucket.buffer holds the result. Buckets come in the same order on every rank.
  virtual std::shared_ptr<dist::Work> run(dist::ProcessGroup& pg, GradBucket& bucket) = 0;
  // True when the result is not left in the bucket but elsewhere (a reduce-scatter into this rank's shard,
  // runtime/ddp/sharded/): the reducer then allocates each bucket's buffer for one backward only, frees it
  // once its communication finished, and leaves every .grad none after a synchronized backward.
  virtual bool result_is_sharded() const { return false; }
  // A sharded hook: every bucket of a synchronized backward (or of its Join shadow) has been communicated and
  // waited for; `parameters_used[i]` says whether any rank gave parameter i a gradient. The hook's owner adds
  // the results into its gradient shards here, as the reducer's write-back adds into .grad.
  virtual void sharded_results_ready(const std::vector<uint8_t>& parameters_used) { (void)parameters_used; }
  // Bytes this rank handed to all-reduces so far (each collective's buffer counted once).
  int64_t bytes_communicated() const { return bytes_; }
  // Called by the reducer that uses this hook: a hook keeps per-bucket state, so it serves one reducer only
  // (make one hook per rank, also when ranks are threads).
  void attach(const void* reducer);

 protected:
  int64_t bytes_ = 0;

 private:
  const void* reducer_ = nullptr;
};

// All-reduce (sum) of the divided gradients in place: the average.
class AllreduceHook final : public CommHook {
 public:
  const char* name() const override { return "allreduce"; }
  std::shared_ptr<dist::Work> run(dist::ProcessGroup& pg, GradBucket& bucket) override;
};

// All-reduce in bfloat16 (half the bytes), converted back when waited. Every backend reduces bfloat16 (NCCL
// on the GPU; Gloo and shm on the host, accumulating in float32).
class BF16CompressHook final : public CommHook {
 public:
  const char* name() const override { return "bf16"; }
  std::shared_ptr<dist::Work> run(dist::ProcessGroup& pg, GradBucket& bucket) override;
};

// A Work that finishes in steps on wait(): first waits `first` (a collective already issued), then runs
// `then` on the waiting thread (which may issue and wait further collectives). Errors surface from wait().
class ChainedWork final : public dist::Work {
 public:
  ChainedWork(std::string description, std::shared_ptr<dist::Work> first, std::function<void()> then);
  void wait() override;
  bool wait_for(std::chrono::milliseconds timeout) override;
  bool is_completed() override;
  std::exception_ptr error() override;

 private:
  std::shared_ptr<dist::Work> first_;
  std::function<void()> then_;
  bool ran_ = false;
};

// "allreduce" | "bf16" | "powersgd" (PowerSGD with rank `powersgd_rank`, compression from iteration
// `powersgd_start_iter`); anything else is an error naming the choices.
std::shared_ptr<CommHook> make_comm_hook(const std::string& name, int powersgd_rank = 1,
                                         int64_t powersgd_start_iter = 10);

}  // namespace ddp
