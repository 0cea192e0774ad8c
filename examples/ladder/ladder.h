// ladder.h - what the five rungs of the ladder share (examples/ladder/rung*.cpp, walked by docs/ladder.md),
// so that each rung's file shows only the idea it adds: the interface a rung implements (GradientSync), the
// model and its synthetic data, one timed training step, a process group that counts what a step sends, and
// the programs' main. Everything here uses the runtime's public headers only.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/distributed/process_group.h"
#include "runtime/nn/module.h"
#include "runtime/optim/optimizer.h"

namespace ddp::ladder {

// What a rung is given: this rank's replica of the model and the group of all ranks.
struct RungContext {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<dist::ProcessGroup> group;
  double bucket_mb = 1.0;  // rungs 4 and 5: a bucket closes once it holds this many MiB of gradients
};

// One rung: how every rank's gradients become the average over all ranks. A step runs forward(x), then
// autograd::backward(loss), then finish(); after finish() every parameter's .grad is the mean over the ranks,
// the same on every rank. Rungs 1-4 expect every parameter to get a gradient in every backward (the reducer
// of rung 5 also copes with those that do not: find_unused_parameters).
class GradientSync {
 public:
  explicit GradientSync(RungContext ctx) : ctx_(std::move(ctx)) {}
  virtual ~GradientSync() = default;
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  virtual Tensor forward(const Tensor& x) { return ctx_.model->forward(x); }
  virtual void finish() {}
  // Seconds the last step waited for communication after backward's last node, when the rung measures that
  // itself (rung 5: DDP waits inside backward); negative: the step's time in finish() is that wait.
  virtual double measured_exposed_s() { return -1; }

 protected:
  RungContext ctx_;
};

using RungFactory = std::function<std::unique_ptr<GradientSync>(const RungContext&)>;
// One per rung file.
std::unique_ptr<GradientSync> make_rung1(const RungContext& ctx);  // rung1_each.cpp
std::unique_ptr<GradientSync> make_rung2(const RungContext& ctx);  // rung2_flat.cpp
std::unique_ptr<GradientSync> make_rung3(const RungContext& ctx);  // rung3_hooks.cpp
std::unique_ptr<GradientSync> make_rung4(const RungContext& ctx);  // rung4_buckets.cpp
std::unique_ptr<GradientSync> make_rung5(const RungContext& ctx);  // rung5_ddp.cpp

// Rung 4's bucketing (rung4_buckets.cpp), here so the tests can hold it against the reducer's: walks the
// parameters in reverse registration order and closes a bucket as soon as it holds >= cap_bytes. Returns
// the buckets (parameter indices) in launch order.
std::vector<std::vector<size_t>> reverse_order_buckets(const std::vector<size_t>& param_bytes,
                                                       size_t cap_bytes);

// ---- shared by the rungs ----
// Every rank's parameters become rank 0's: replicas must start equal (rung 5's DDP does this itself).
void broadcast_parameters(const nn::Module& model, dist::ProcessGroup& group);
// The gradient every rung needs to exist after backward, or an error naming the parameter and the rung.
Tensor gradient_of(const Tensor& param, const char* rung);
// Waits for a collective and drops its error: for destructors, which may run while an exception (perhaps that
// collective's own) unwinds and must not throw a second one.
void wait_quietly(dist::Work& work);

// A ProcessGroup that hands every call to `inner` and counts the all-reduces issued through it and their
// bytes: the programs' "collectives per step" and "bytes per step".
class CountingGroup final : public dist::ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<dist::ProcessGroup> inner);
  std::shared_ptr<dist::Work> allreduce(dist::CommBuffer buf, dist::ReduceOp op) override;
  std::shared_ptr<dist::Work> broadcast(dist::CommBuffer buf, int root) override;
  std::shared_ptr<dist::Work> allgather(dist::CommBuffer in, dist::CommBuffer out) override;
  std::shared_ptr<dist::Work> reduce_scatter(dist::CommBuffer in, dist::CommBuffer out,
                                             dist::ReduceOp op) override;
  std::shared_ptr<dist::Work> barrier() override;
  uint64_t next_sequence_number() const override;
  std::string backend_name() const override;
  const dist::FlightRecorder* flight_recorder() const override;
  void abort(const std::string& why) override;
  bool aborted() const override;
  bool device_memory_only() const override;
  bool records_device_events() const override;
  dist::CommBuffer allocate_comm_buffer(int64_t numel, DType dtype, Device device) override;

  // All-reduces and their bytes since the last reset.
  int64_t allreduces() const { return allreduces_; }
  int64_t allreduce_bytes() const { return allreduce_bytes_; }
  void reset_counts() { allreduces_ = allreduce_bytes_ = 0; }

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
  std::atomic<int64_t> allreduces_{0}, allreduce_bytes_{0};
};

// The synthetic problem: `rows` rows of `features` standard-normal inputs (seeded by `step`), each labelled
// with which of its first `classes` features is largest (learnable, so the loss falls). Every rank makes the
// same global batch and trains its own slice: rows [rank * b, (rank + 1) * b).
struct Batch {
  Tensor x, y;
  Batch rows(int64_t begin, int64_t end) const { return {x.slice0(begin, end), y.slice0(begin, end)}; }
};
Batch synthetic_batch(int64_t step, int64_t rows, int64_t features, int64_t classes, DType dtype);

// What one step measured.
struct StepResult {
  double loss = 0;
  double step_s = 0;        // forward through optimizer step and zero_grad
  double exposed_s = 0;     // waiting for communication after backward's last node
  int64_t collectives = 0;  // all-reduces issued (when the rung's group is a CountingGroup, else 0)
  int64_t bytes = 0;        // their bytes
};
// One step: forward, cross-entropy, backward, sync.finish(), optimizer step, zero_grad. `counter` (may be
// null) is reset before the step and read after it.
StepResult train_step(GradientSync& sync, optim::Optimizer& opt, const Batch& batch, CountingGroup* counter);

// main() of a rung's program: flags, init_distributed (a world of one without a launcher), the model, the
// training loop, a summary printed by rank 0, and --json for tools/bench_ladder.py.
int rung_main(int argc, char** argv, const char* program, const char* idea, const RungFactory& make);

}  // namespace ddp::ladder
