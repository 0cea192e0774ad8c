// extensions.cpp - bench_extensions: what ZeroRedundancyOptimizer and the PowerSGD comm hook change on the tiny
// GPT (the demo's shape, synthetic tokens), ranks as threads of this process over Gloo on loopback. For each
// world size, every configuration runs once per round, rounds interleaved (so machine load hits all alike);
// per configuration: median step time over the measured steps of each round, then the median over rounds;
// optimizer-state bytes held by each rank; bytes each rank hands to the gradient all-reduces per step.
//
//   bin/bench_extensions --worlds 1,2,4 --rounds 3 --steps 10
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "models/train_step.h"
#include "runtime/core/cli.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/powersgd_hook.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/local_world.h"

namespace {
using namespace ddp;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string name;
  bool zero = false;
  int powersgd_rank = 0;  // 0: plain all-reduce
};

struct Measured {
  double step_s = 0;
  int64_t state_bytes_rank0 = 0, state_bytes_max = 0;
  double comm_bytes_per_step = 0;  // rank 0, over the measured steps
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Measured run_once(const Config& c, int world, int steps, int warmup, int64_t batch) {
  Measured m;
  std::vector<int64_t> state(world);
  std::mutex mu;
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    std::shared_ptr<dist::ProcessGroup> group(std::shared_ptr<dist::ProcessGroup>{}, &pg);
    nn::manual_seed(1);
    models::GPTConfig gc;  // the demo's tiny GPT: 2 layers, d_model 128, context 64, 256 symbols
    auto model = std::make_shared<models::GPT>(gc);
    DDPOptions o;
    if (c.powersgd_rank > 0) {
      PowerSGDOptions po;
      po.matrix_approximation_rank = c.powersgd_rank;
      po.start_iter = 2;
      o.comm_hook = std::make_shared<PowerSGDHook>(po);
    }
    DistributedDataParallel ddp(model, group, o);
    auto make = [](std::vector<nn::NamedTensor> ps) -> std::unique_ptr<optim::Optimizer> {
      return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 1e-3});
    };
    std::unique_ptr<optim::Optimizer> opt =
        c.zero ? std::make_unique<optim::ZeroRedundancyOptimizer>(model->named_parameters(), group, make)
               : make(model->named_parameters());
    std::vector<double> times;
    int64_t bytes_at_warmup = 0;
    for (int s = 0; s < steps; ++s) {
      std::vector<int64_t> x(batch * gc.context), y(batch * gc.context);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = static_cast<int64_t>((i * 31 + s * 7 + rank * 13) % 256);
        y[i] = (x[i] * 5 + 1) % 256;
      }
      if (s == warmup) bytes_at_warmup = ddp.reducer().comm_hook().bytes_communicated();
      auto micro_batch = [&] {
        data::Batch b;
        b.x = Tensor::from_data(x, {batch, gc.context});
        b.y = Tensor::from_data(y, {batch, gc.context});
        return b;
      };
      const auto t0 = Clock::now();
      models::train_step(ddp, *opt, micro_batch, {});  // train's step (models/train_step.h)
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (s >= warmup) times.push_back(dt);
    }
    auto* z = dynamic_cast<optim::ZeroRedundancyOptimizer*>(opt.get());
    int64_t bytes = 0;
    if (z) {
      bytes = z->local_state_bytes();
    } else {
      for (auto& [k, t] : opt->state()) bytes += static_cast<int64_t>(t.nbytes());
    }
    std::lock_guard<std::mutex> g(mu);
    state[rank] = bytes;
    if (rank == 0) {
      m.step_s = median(times);
      m.comm_bytes_per_step = static_cast<double>(ddp.reducer().comm_hook().bytes_communicated() - bytes_at_warmup) /
                              static_cast<double>(steps - warmup);
    }
  });
  m.state_bytes_rank0 = state[0];
  m.state_bytes_max = *std::max_element(state.begin(), state.end());
  return m;
}
}  // namespace

int main(int argc, char** argv) {
  std::string worlds_s = "1,2,4";
  int rounds = 3, steps = 10, warmup = 4;
  int64_t batch = 4;
  ddp::cli::Parser p("bench_extensions", "ZeRO optimizer-state bytes and PowerSGD bytes/step time on the tiny GPT.");
  p.add("worlds", &worlds_s, "comma-separated world sizes (ranks are threads)");
  p.add("rounds", &rounds, "interleaved rounds per configuration");
  p.add("steps", &steps, "steps per run (the first --warmup are not timed)");
  p.add("warmup", &warmup, "untimed steps (bucket rebuild, PowerSGD start at iteration 2)");
  p.add("batch", &batch, "sequences per rank per step");
  try {
    p.parse(argc, argv);
  } catch (const ddp::cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  std::vector<int> worlds;
  std::stringstream ss(worlds_s);
  for (std::string t; std::getline(ss, t, ',');) worlds.push_back(std::stoi(t));
  const std::vector<Config> configs = {{"ddp+adamw", false, 0},
                                       {"ddp+zero(adamw)", true, 0},
                                       {"powersgd r1", false, 1},
                                       {"powersgd r2", false, 2},
                                       {"powersgd r4", false, 4}};
  std::printf("| world | configuration | median step ms | optimizer state rank 0 / max rank (KiB) | "
              "all-reduce bytes/step rank 0 (KiB) |\n|---|---|---|---|---|\n");
  for (int w : worlds) {
    std::map<std::string, std::vector<double>> times;
    std::map<std::string, Measured> last;
    for (int r = 0; r < rounds; ++r)
      for (const Config& c : configs) {
        if (w == 1 && c.powersgd_rank > 0) continue;  // no communication to compress
        Measured m = run_once(c, w, steps, warmup, batch);
        times[c.name].push_back(m.step_s);
        last[c.name] = m;
      }
    for (const Config& c : configs) {
      if (!last.count(c.name)) continue;
      const Measured& m = last[c.name];
      std::printf("| %d | %s | %.1f | %.1f / %.1f | %.1f |\n", w, c.name.c_str(), 1e3 * median(times[c.name]),
                  m.state_bytes_rank0 / 1024.0, m.state_bytes_max / 1024.0, m.comm_bytes_per_step / 1024.0);
    }
    std::fflush(stdout);
  }
  return 0;
}
