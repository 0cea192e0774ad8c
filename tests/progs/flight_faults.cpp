// flight_faults.cpp - one rank of the flight-recorder scenarios (tests/launch/test_flight_scenarios.cpp), run
// under ddprun: a small float32 MLP under DDP with one bucket per parameter, SGD (or ZeRO with --zero),
// trained for --steps steps numbered from 1 (the flight recorder's iteration). At step --fault-step, rank
// --fault-rank does one thing wrong (--fault):
//   none         nothing (the run succeeds)
//   stop         SIGSTOPs itself before its backward (hangs the others; the stall watchdog stops the job)
//   kill         SIGKILLs itself before its backward (leaves no flight record)
//   skip-bucket  its comm hook skips the all-reduce of bucket --bucket (a completed Work, nothing sent)
//   size         its comm hook all-reduces bucket --bucket with one element less
//   uneven       it has run out of data: it leaves the loop before that step and exits normally (no Join)
//   zero-skip    it skips its optimizer step (with --zero: ZeRO's broadcasts of that step)
// --groups 2 adds a second process group over the same ranks ("gather", as ZeRO-3's parameter all-gathers):
// each step all-gathers a small tensor on it before its forward (tag "zero3 param gather"), so its ranks
// write a second record, flight.rank<R>.gather.json. --fill N issues N one-element all-reduces on every group
// before training, so that the rings hold N entries and a dump takes a while (the "huge rings" of the
// ddprun recorder-settings grid, tests/launch/test_flight_recorder_settings.cpp).
// --join wraps the loop in ddp::Join (with --fault uneven the rank that runs out joins and shadows the
// others' steps). Prints "done" and exits 0 when it finished all its steps.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/autograd/engine.h"
#include "runtime/core/cli.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/join.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/distributed/tensor_comm_buffer.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"

namespace {
using namespace ddp;

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  Mlp() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(16, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(32, 4));
  }
  Tensor forward(const Tensor& x) override {
    return fc3->forward(ops::relu(fc2->forward(ops::relu(fc1->forward(x)))));
  }
};

// The default all-reduce, except for one bucket on the faulty step.
class FaultyHook final : public CommHook {
 public:
  const char* name() const override { return "faulty allreduce"; }
  std::shared_ptr<dist::Work> run(dist::ProcessGroup& pg, GradBucket& bucket) override {
    if (armed && static_cast<int>(bucket.index) == bucket_index) {
      if (fault == "skip-bucket") {
        auto w = std::make_shared<dist::Work>("skipped on purpose");
        w->finish();
        return w;
      }
      if (fault == "size")
        return pg.allreduce(comm_buffer_of(bucket.buffer.slice0(0, bucket.buffer.numel() - 1)),
                            dist::ReduceOp::Sum);
    }
    return pg.allreduce(comm_buffer_of(bucket.buffer), dist::ReduceOp::Sum);
  }
  std::string fault;
  int bucket_index = 0;
  bool armed = false;
};
}  // namespace

int main(int argc, char** argv) {
  std::string fault = "none", backend = "auto";
  int fault_rank = 1, fault_step = 3, steps = 5, bucket = 2, groups = 1, fill = 0;
  bool zero = false, use_join = false;
  cli::Parser p("flight_faults", "one rank of the flight-recorder scenarios");
  p.add("fault", &fault, "none | stop | kill | skip-bucket | size | uneven | zero-skip");
  p.add("fault-rank", &fault_rank, "the rank that does it");
  p.add("fault-step", &fault_step, "the step (from 1) at which it does it");
  p.add("steps", &steps, "steps to train");
  p.add("bucket", &bucket, "the bucket index for skip-bucket and size");
  p.add("backend", &backend, "process group backend");
  p.add("zero", &zero, "ZeRO (sharded optimizer state) instead of SGD");
  p.add("join", &use_join, "train under ddp::Join (uneven steps are then shadowed)");
  p.add("groups", &groups, "1, or 2: a second group 'gather' all-gathers once a step",
        cli::Bounds::between(1, 2));
  p.add("fill", &fill, "one-element all-reduces on every group before training",
        cli::Bounds::between(0, 1000000));
  try {
    p.parse(argc, argv);
    dist::DistContext ctx = dist::init_distributed(dist::init_from_env(), backend);
    const int rank = ctx.group->rank();
    std::shared_ptr<dist::ProcessGroup> gather;
    if (groups == 2) {
      dist::ProcessGroupOptions go;
      go.name = "gather";
      gather = dist::new_process_group(ctx.env, ctx.store, dist::resolve_backend(backend), go);
    }
    for (auto* g : {ctx.group.get(), gather.get()}) {
      if (g == nullptr || fill == 0) continue;
      // Issued back to back, waited at the end: the group's worker runs them as fast as it can.
      Tensor one = Tensor::ones({1});
      std::vector<std::shared_ptr<dist::Work>> works;
      for (int i = 0; i < fill; ++i) works.push_back(g->allreduce(comm_buffer_of(one), dist::ReduceOp::Sum));
      for (auto& w : works) w->wait();
    }
    nn::manual_seed(7);
    auto model = std::make_shared<Mlp>();
    auto hook = std::make_shared<FaultyHook>();
    hook->fault = fault;
    hook->bucket_index = bucket;
    DDPOptions o;
    o.bucket_cap_mb = o.first_bucket_mb = 1e-9;  // one bucket per parameter: 6 buckets
    o.comm_hook = hook;
    DistributedDataParallel ddp(model, ctx.group, o);
    std::unique_ptr<optim::Optimizer> opt;
    if (zero)
      opt = std::make_unique<optim::ZeroRedundancyOptimizer>(
          model->named_parameters(), ctx.group, [](std::vector<nn::NamedTensor> ps) {
            return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.05});
          });
    else
      opt = std::make_unique<optim::SGD>(model->named_parameters(), optim::SGDOptions{.lr = 0.05});
    std::unique_ptr<Join> join;
    if (use_join) {
      JoinOptions jo;
      if (zero) jo.joinables.push_back(static_cast<optim::ZeroRedundancyOptimizer*>(opt.get()));
      join = std::make_unique<Join>(ddp, jo);
    }
    for (int step = 1; step <= steps; ++step) {
      const bool faulty = rank == fault_rank && step == fault_step;
      if (faulty && fault == "uneven") break;
      dist::set_flight_iteration(step);
      if (gather) {
        dist::FlightIssuer who("zero3 param gather");
        Tensor mine = Tensor::ones({4}), all = Tensor::zeros({4 * gather->size()});
        gather->allgather(comm_buffer_of(mine), comm_buffer_of(all))->wait();
      }
      Tensor x = Tensor::randn({8, 16}, 100 * step + rank);
      Tensor y = Tensor::from_data<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {8});
      opt->zero_grad();
      Tensor loss = ops::cross_entropy(ddp.forward(x), y);
      if (faulty && fault == "stop") ::raise(SIGSTOP);
      if (faulty && fault == "kill") ::raise(SIGKILL);
      hook->armed = faulty;
      autograd::backward(loss);
      hook->armed = false;
      if (!(faulty && fault == "zero-skip")) opt->step();
    }
    if (join) join->join();
    std::printf("done\n");
    return 0;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flight_faults: %s\n", e.what());
    return 1;
  }
}
