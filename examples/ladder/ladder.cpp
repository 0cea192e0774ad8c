// ladder.cpp - the part the five rungs share (ladder.h): parameter broadcast, the counting group, the
// synthetic data, the timed step and the programs' main.
#include "examples/ladder/ladder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/core/terminal_text.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/tensor_comm_buffer.h"
#include "runtime/ops/loss.h"

namespace ddp::ladder {

void broadcast_parameters(const nn::Module& model, dist::ProcessGroup& group) {
  std::vector<std::shared_ptr<dist::Work>> works;
  for (const Tensor& p : model.parameters())
    if (p.numel() > 0) works.push_back(group.broadcast(comm_buffer_of(p), 0));
  for (auto& w : works) w->wait();
}

Tensor gradient_of(const Tensor& param, const char* rung) {
  DDP_CHECK(param.grad().defined(), rung, ": parameter '", param.name(), "' (shape ",
            shape_str(param.shape()),
            ") got no gradient in this backward; rungs 1-4 expect every parameter to be used - rung 5 "
            "(DistributedDataParallel with find_unused_parameters) handles unused ones");
  return param.grad();
}

void wait_quietly(dist::Work& work) {
  try {
    work.wait();
  } catch (const std::exception&) {  // reported by whoever waited first, or the step that is unwinding now
  }
}

// ---- CountingGroup ----
CountingGroup::CountingGroup(std::shared_ptr<dist::ProcessGroup> inner)
    : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)) {}
std::shared_ptr<dist::Work> CountingGroup::allreduce(dist::CommBuffer buf, dist::ReduceOp op) {
  ++allreduces_;
  allreduce_bytes_ += static_cast<int64_t>(buf.nbytes());
  return inner_->allreduce(std::move(buf), op);
}
std::shared_ptr<dist::Work> CountingGroup::broadcast(dist::CommBuffer buf, int root) {
  return inner_->broadcast(std::move(buf), root);
}
std::shared_ptr<dist::Work> CountingGroup::allgather(dist::CommBuffer in, dist::CommBuffer out) {
  return inner_->allgather(std::move(in), std::move(out));
}
std::shared_ptr<dist::Work> CountingGroup::reduce_scatter(dist::CommBuffer in, dist::CommBuffer out,
                                                          dist::ReduceOp op) {
  return inner_->reduce_scatter(std::move(in), std::move(out), op);
}
std::shared_ptr<dist::Work> CountingGroup::barrier() { return inner_->barrier(); }
uint64_t CountingGroup::next_sequence_number() const { return inner_->next_sequence_number(); }
std::string CountingGroup::backend_name() const { return inner_->backend_name(); }
const dist::FlightRecorder* CountingGroup::flight_recorder() const { return inner_->flight_recorder(); }
void CountingGroup::abort(const std::string& why) { inner_->abort(why); }
bool CountingGroup::aborted() const { return inner_->aborted(); }
bool CountingGroup::device_memory_only() const { return inner_->device_memory_only(); }
bool CountingGroup::records_device_events() const { return inner_->records_device_events(); }
dist::CommBuffer CountingGroup::allocate_comm_buffer(int64_t numel, DType dtype, Device device) {
  return inner_->allocate_comm_buffer(numel, dtype, device);
}

// ---- data and step ----
Batch synthetic_batch(int64_t step, int64_t rows, int64_t features, int64_t classes, DType dtype) {
  DDP_CHECK(rows >= 0 && features >= 1 && classes >= 1, "synthetic_batch: rows ", rows, ", features ",
            features, ", classes ", classes, " (need rows >= 0, features >= 1, classes >= 1)");
  Batch b;
  b.x = Tensor::randn({rows, features}, 1000 + static_cast<uint64_t>(step), dtype);
  const std::vector<double> x = b.x.to_double_vector();
  std::vector<int64_t> y(static_cast<size_t>(rows));
  const int64_t scored = std::min(features, classes);
  for (int64_t r = 0; r < rows; ++r) {  // the label: which of the first `classes` features is largest
    const double* row = x.data() + r * features;
    y[static_cast<size_t>(r)] = std::max_element(row, row + scored) - row;
  }
  b.y = Tensor::from_data(y, {rows});
  return b;
}

StepResult train_step(GradientSync& sync, optim::Optimizer& opt, const Batch& batch, CountingGroup* counter) {
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (counter) counter->reset_counts();
  StepResult r;
  const auto start = clock::now();
  Tensor loss = ops::cross_entropy(sync.forward(batch.x), batch.y);
  autograd::backward(loss);
  const auto backward_done = clock::now();
  sync.finish();
  const auto synced = clock::now();
  opt.step();
  opt.zero_grad();
  r.step_s = seconds(clock::now() - start);
  const double measured = sync.measured_exposed_s();
  r.exposed_s = measured >= 0 ? measured : seconds(synced - backward_done);
  r.loss = loss.item();
  if (counter) {
    r.collectives = counter->allreduces();
    r.bytes = counter->allreduce_bytes();
  }
  return r;
}

// ---- main ----
namespace {
std::vector<int64_t> parse_widths(const std::string& text) {
  std::vector<int64_t> widths;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1)
      throw cli::UsageError(
          "--hidden expects comma-separated positive layer widths such as 1024,1024; got '" + text + "'");
    widths.push_back(v);
  }
  return widths;
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

int rung_main(int argc, char** argv, const char* program, const char* idea, const RungFactory& make) {
  try {
    int steps = 30, warmup = 5;
    int64_t batch = 32, features = 784, classes = 10;
    double bucket_mb = 1.0, lr = 0.05;
    std::string hidden = "1024,1024", backend = "auto", json_path;
    cli::Parser p(program, std::string("One rung of the gradient-synchronisation ladder (docs/ladder.md): ") +
                               idea + " Trains the MLP on synthetic data; run alone or under ddprun.");
    p.add("steps", &steps, "timed training steps", cli::Bounds::at_least(1));
    p.add("warmup", &warmup, "untimed steps before them", cli::Bounds::at_least(0));
    p.add("batch", &batch, "rows per rank per step", cli::Bounds::at_least(1));
    p.add("features", &features, "input width of the MLP", cli::Bounds::at_least(1));
    p.add("hidden", &hidden, "hidden layer widths, comma-separated");
    p.add("classes", &classes, "output width (labels)", cli::Bounds::at_least(1));
    p.add("bucket-mb", &bucket_mb, "rungs 4 and 5: bucket cap in MiB", cli::Bounds::above(0));
    p.add("lr", &lr, "SGD learning rate", cli::Bounds::above(0));
    p.add("backend", &backend, "process group backend: auto, shm, gloo, hier");
    p.add("json", &json_path,
          "write the timed steps of rank 0 to this file (tools/bench_ladder.py reads it)");
    p.parse(argc, argv);
    const std::vector<int64_t> widths = parse_widths(hidden);

    auto ctx = dist::init_distributed(dist::init_from_env(), backend);
    const int rank = ctx.group->rank(), world = ctx.group->size();
    auto counter = std::make_shared<CountingGroup>(ctx.group);
    nn::manual_seed(42 + static_cast<uint64_t>(rank));  // different on each rank: the rung must broadcast
    auto model = std::make_shared<models::MLP>(models::MLPConfig{features, widths, classes, DType::F32});
    std::unique_ptr<GradientSync> sync = make({model, counter, bucket_mb});
    optim::SGD opt(model->named_parameters(), {.lr = lr, .momentum = 0.9});
    int64_t numel = 0;
    for (const Tensor& t : model->parameters()) numel += t.numel();

    std::vector<StepResult> timed;
    double first_loss = 0;
    for (int step = 0; step < warmup + steps; ++step) {
      const Batch mine = synthetic_batch(step, batch * world, features, classes, DType::F32)
                             .rows(rank * batch, (rank + 1) * batch);
      StepResult r = train_step(*sync, opt, mine, counter.get());
      if (step == 0) first_loss = r.loss;
      if (step >= warmup) timed.push_back(r);
    }
    if (rank != 0) return 0;
    std::vector<double> step_ms, exposed_ms;
    for (auto& r : timed) {
      step_ms.push_back(r.step_s * 1e3);
      exposed_ms.push_back(r.exposed_s * 1e3);
    }
    const double mib = 1024.0 * 1024.0;
    std::string shape = std::to_string(features);
    for (int64_t w : widths) shape.append(1, '-').append(std::to_string(w));
    shape.append(1, '-').append(std::to_string(classes));
    std::printf(
        "%s: world %d (%s), MLP %s: %lld parameters (%.2f MiB), batch %lld per rank, %d steps after %d "
        "warm-up\n",
        program, world, ctx.group->backend_name().c_str(), shape.c_str(), static_cast<long long>(numel),
        static_cast<double>(numel) * 4 / mib, static_cast<long long>(batch), steps, warmup);
    std::printf("  idea: %s\n", idea);
    std::printf(
        "  step %.3f ms (median), exposed communication %.3f ms (median), %lld all-reduce(s) per step, "
        "%.3f MiB per step; loss %.4f -> %.4f\n",
        median(step_ms), median(exposed_ms), static_cast<long long>(timed.back().collectives),
        static_cast<double>(timed.back().bytes) / mib, first_loss, timed.back().loss);
    if (!json_path.empty()) {
      nlohmann::json j = {
          {"program", program},  {"world", world},          {"backend", ctx.group->backend_name()},
          {"parameters", numel}, {"batch", batch},          {"bucket_mb", bucket_mb},
          {"step_ms", step_ms},  {"exposed_ms", exposed_ms}};
      std::vector<int64_t> collectives, bytes;
      for (auto& r : timed) {
        collectives.push_back(r.collectives);
        bytes.push_back(r.bytes);
      }
      j["collectives"] = collectives;
      j["bytes"] = bytes;
      std::ofstream out(json_path);
      DDP_CHECK(out && (out << j.dump() << "\n"), program, ": cannot write --json ", json_path);
    }
    return 0;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", log::for_user(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", log::error_line(program, e.what()).c_str());
    return 1;
  }
}

}  // namespace ddp::ladder
