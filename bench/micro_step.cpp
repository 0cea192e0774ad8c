// micro_step.cpp - whole training steps through the engine (Google Benchmark): the MLP 784-1024-1024-10 at
// batch 64 (forward, cross-entropy, backward, SGD; 6 * 1,863,690 * 64 = 0.716 GFLOP per step) with one and
// two BLAS threads, the tiny GPT (vocab 256, context 64, d 128, 4 heads, 2 blocks, batch 16), and the cost of
// tracing: the same DDP step (world of one, Gloo) with the tracer off and on (target: on costs < 2%), and
// gradient_as_bucket_view against the default gradient handling (DDPStepBucketView).
// Ceiling: the machine's BLAS peak (micro_ops' raw GEMM rows).
#include <benchmark/benchmark.h>

#include "kernels/cpu/gemm.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/train_step.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/init.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "runtime/trace/trace.h"

using namespace ddp;

namespace {
Tensor labels(int64_t n, int64_t classes) {
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = i % classes;
  return Tensor::from_data(y, {n});
}

// The same batch every step, as models::train_step takes its micro-batches.
std::function<data::Batch()> batch_of(const Tensor& x, const Tensor& y) {
  return [x, y] {
    data::Batch b;
    b.x = x;
    b.y = y;
    return b;
  };
}

void MLPStep(benchmark::State& state) {
  kernels::cpu::set_blas_threads(static_cast<int>(state.range(0)));
  nn::manual_seed(1);
  models::MLP model(models::MLPConfig{});
  optim::SGD opt(model.named_parameters(), {.lr = 0.01});
  Tensor x = Tensor::randn({64, 784}, 2), y = labels(64, 10);
  for (auto _ : state) {
    autograd::backward(ops::cross_entropy(model.forward(x), y));
    opt.step();
    opt.zero_grad();
  }
  const double flops = 6.0 * static_cast<double>(model.num_parameters()) * 64;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads " + std::to_string(state.range(0)));
}
BENCHMARK(MLPStep)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void TinyGPTStep(benchmark::State& state) {
  kernels::cpu::set_blas_threads(static_cast<int>(state.range(0)));
  nn::manual_seed(1);
  models::GPT model(models::GPTConfig{});
  optim::AdamW opt(model.named_parameters(), {.lr = 3e-4});
  std::vector<int64_t> t(16 * 64);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>((i * 31 + 7) % 256);
  Tensor x = Tensor::from_data(t, {16, 64}), y = Tensor::from_data(t, {16, 64});
  for (auto _ : state) {
    autograd::backward(ops::cross_entropy(model.forward(x), y));
    opt.step();
    opt.zero_grad();
  }
  const double flops = model.flops_per_token_forward() * 3 * 16 * 64;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(16 * 64, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(TinyGPTStep)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// DDP step (world 1) with tracing off (range 0) or on (range 1): forward/backward scopes, ready instants,
// bucket events, iteration markers.
void DDPStepTracing(benchmark::State& state) {
  kernels::cpu::set_blas_threads(1);
  static dist::DistContext ctx = dist::init_distributed(dist::DistEnv{}, "gloo");
  nn::manual_seed(1);
  auto model = std::make_shared<models::MLP>(models::MLPConfig{});
  DDPOptions o;
  o.first_bucket_mb = o.bucket_cap_mb = 1.0;
  DistributedDataParallel ddp(model, ctx.group, o);
  optim::SGD opt(model->named_parameters(), {.lr = 0.01});
  Tensor x = Tensor::randn({64, 784}, 2), y = labels(64, 10);
  auto& tracer = trace::global_tracer();
  tracer.set_enabled(state.range(0) == 1);
  int64_t it = 0;
  for (auto _ : state) {
    if (state.range(0) == 1) tracer.begin_iteration(it);
    models::train_step(ddp, opt, batch_of(x, y), {});  // train's step: forward, backward, optimizer scopes
    if (state.range(0) == 1) tracer.end_iteration(it);
    ++it;
    if (it % 256 == 0) tracer.clear();
  }
  tracer.set_enabled(false);
  tracer.clear();
  state.SetLabel(state.range(0) ? "tracing on" : "tracing off");
}
BENCHMARK(DDPStepTracing)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
// The cost of find_unused_parameters in isolation (world 1, so the used-map all-reduce is nearly free and the
// graph traversal dominates): the tiny GPT's DDP step with the flag off (range 0) and on (range 1).
void GPTStepFindUnused(benchmark::State& state) {
  kernels::cpu::set_blas_threads(1);
  static dist::DistContext ctx = dist::init_distributed(dist::DistEnv{}, "gloo");
  nn::manual_seed(1);
  auto model = std::make_shared<models::GPT>(models::GPTConfig{});
  DDPOptions o;
  o.find_unused_parameters = state.range(0) == 1;
  DistributedDataParallel ddp(model, ctx.group, o);
  optim::AdamW opt(model->named_parameters(), {.lr = 3e-4});
  std::vector<int64_t> t(16 * 64);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>((i * 31 + 7) % 256);
  Tensor x = Tensor::from_data(t, {16, 64}), y = Tensor::from_data(t, {16, 64});
  for (auto _ : state) models::train_step(ddp, opt, batch_of(x, y), {});
  state.SetLabel(state.range(0) ? "find_unused_parameters on" : "off");
}
BENCHMARK(GPTStepFindUnused)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// gradient_as_bucket_view (issue 10): the MLP's DDP step (world 1, Gloo) with gradients in their own memory
// and zero_grad() setting them to none (range 0, the default), against gradients that ARE views of the bucket
// buffers and zero_grad(set_to_none = false) zeroing them in place (range 1). Counter "grad MB new/step":
// gradient memory that is new this step (allocated by the step) - 0 when the buckets are the gradients.
void DDPStepBucketView(benchmark::State& state) {
  kernels::cpu::set_blas_threads(1);
  static dist::DistContext ctx = dist::init_distributed(dist::DistEnv{}, "gloo");
  const bool view = state.range(0) == 1;
  nn::manual_seed(1);
  auto model = std::make_shared<models::MLP>(models::MLPConfig{});
  DDPOptions o;
  o.gradient_as_bucket_view = view;
  DistributedDataParallel ddp(model, ctx.group, o);
  optim::SGD opt(model->named_parameters(), {.lr = 0.01});
  Tensor x = Tensor::randn({64, 784}, 2), y = labels(64, 10);
  auto params = model->parameters();
  std::vector<std::weak_ptr<Storage>> last(params.size());  // expired: that memory was freed since
  double new_bytes = 0;
  int64_t steps = 0;
  for (auto _ : state) {
    autograd::backward(ops::cross_entropy(ddp.forward(x), y));
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& mem = params[i].grad().storage();
      if (steps > 0 && last[i].lock() != mem) new_bytes += static_cast<double>(params[i].grad().nbytes());
      last[i] = mem;
    }
    ++steps;
    opt.step();
    opt.zero_grad(/*set_to_none=*/!view);
  }
  state.counters["grad MB new/step"] = steps > 1 ? new_bytes / 1e6 / static_cast<double>(steps - 1) : 0;
  state.SetLabel(view ? "bucket view, zero in place" : "own grads, set to none");
}
BENCHMARK(DDPStepBucketView)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
}  // namespace

BENCHMARK_MAIN();
