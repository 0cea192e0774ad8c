// sharded_kill_worker.cpp - one rank of the "rank killed during a ZeRO-3 parameter gather" test
// (tests/sharded/test_sharded_asymmetric.cpp), run under ddprun: ZeRO-3 (ShardedDataParallel with a gather
// group, prefetch 1) over a float32 model of three Linear units (items.0, items.1, items.2), SGD, --steps
// steps numbered from 1 (the flight recorder's iteration). At step --kill-step, rank --kill-rank SIGKILLs
// itself in a forward pre-hook of items.0 (--when):
//   before  the hook runs before the wrapper's own: the rank dies before it issues items.0's gather, which
//   the
//           others have issued and wait in;
//   after   the hook runs after the wrapper's: the rank dies with items.0 gathered and items.1's gather (the
//           prefetch) issued - in flight on the others.
// --ignore-term: SIGTERM is ignored, as by a rank on another node that this node's launcher cannot stop: the
// others must then end on their own, with the collective's error, not by ddprun's signal.
// SIGPIPE is ignored (as the Python interpreter does for PyTorch's workers) unless --keep-sigpipe: Gloo
// writes to its sockets with writev(), and a survivor writing to the killed rank's socket at the wrong moment
// was killed by SIGPIPE, silently, instead of failing with the collective's error (seen about once in 8 runs
// of the world of 3; rank 0 then takes the store with it and rank 2 cannot say which rank did not arrive).
// Each step prints "rank R step S done". A rank whose collective fails prints "sharded_kill_worker: rank R:
// <error>" on stderr, waits --linger seconds (rank 0 hosts the store, which the other survivors ask which
// ranks arrived at the collective) and exits 1. Exits 0 after its last step otherwise.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/autograd/engine.h"
#include "runtime/core/cli.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"

namespace {
using namespace ddp;

struct ThreeUnits : nn::Module {
  std::shared_ptr<nn::ModuleList<nn::Linear>> items;
  ThreeUnits() {
    items = register_module("items", std::make_shared<nn::ModuleList<nn::Linear>>());
    items->push_back(std::make_shared<nn::Linear>(16, 32));
    items->push_back(std::make_shared<nn::Linear>(32, 32));
    items->push_back(std::make_shared<nn::Linear>(32, 4));
  }
  Tensor forward(const Tensor& x) override {
    return (*items)[2](ops::relu((*items)[1](ops::relu((*items)[0](x)))));
  }
};
}  // namespace

int main(int argc, char** argv) {
  std::string backend = "gloo", when = "before";
  int kill_rank = 1, kill_step = 2, steps = 4;
  double linger_s = 1;
  bool ignore_term = false, keep_sigpipe = false;
  cli::Parser p("sharded_kill_worker", "one rank of the killed-during-a-ZeRO-3-gather test");
  p.add("kill-rank", &kill_rank, "the rank that SIGKILLs itself");
  p.add("kill-step", &kill_step, "the step (from 1) in whose forward it does");
  p.add("when", &when, "before | after the wrapper's pre-hook of items.0");
  p.add("steps", &steps, "steps to train");
  p.add("backend", &backend, "process group backend (both groups)");
  p.add("ignore-term", &ignore_term, "ignore SIGTERM (end on the collective's error, not ddprun's signal)");
  p.add("keep-sigpipe", &keep_sigpipe, "leave SIGPIPE's default action (death) in place");
  p.add("linger", &linger_s, "seconds a failed rank waits before it exits");
  try {
    p.parse(argc, argv);
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (ignore_term) ::signal(SIGTERM, SIG_IGN);
  if (!keep_sigpipe) ::signal(SIGPIPE, SIG_IGN);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Outside the try below: the store (rank 0's) must outlive the error, for the linger.
  dist::DistContext ctx = dist::init_distributed(dist::init_from_env(), backend);
  const int rank = ctx.group->rank();
  try {
    dist::ProcessGroupOptions go;
    go.name = "gather";
    ShardOptions o;
    o.stage = 3;
    o.gather_group = dist::new_process_group(ctx.env, ctx.store, backend, go);
    nn::manual_seed(7);
    auto model = std::make_shared<ThreeUnits>();
    int step = 0;
    auto kill_hook = [&](nn::Module&) {
      if (rank == kill_rank && step == kill_step) ::raise(SIGKILL);
    };
    static char before_owner, after_owner;
    if (when == "before") (*model->items)[0].add_forward_hooks(&before_owner, kill_hook, nullptr);
    ShardedDataParallel sdp(model, ctx.group, o);
    if (when == "after") (*model->items)[0].add_forward_hooks(&after_owner, kill_hook, nullptr);
    ShardedOptimizer opt(sdp, [](std::vector<nn::NamedTensor> ps) {
      return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.05});
    });
    for (step = 1; step <= steps; ++step) {
      dist::set_flight_iteration(step);
      Tensor x = Tensor::randn({8, 16}, 100 * step + rank);
      Tensor y = Tensor::from_data<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {8});
      autograd::backward(ops::cross_entropy(sdp.forward(x), y));
      opt.step();
      opt.zero_grad();
      std::printf("rank %d step %d done\n", rank, step);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sharded_kill_worker: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::duration<double>(linger_s));
    return 1;
  }
}
