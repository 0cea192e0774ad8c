// zero_memory.cpp - bench_zero_memory: per-rank memory and step time of ZeRO stages 0-3 (issue 23's "Memory"
// and "Step time" targets). For a GPT in float32 with AdamW, worlds as threads of one process:
//   stage 0: DistributedDataParallel + AdamW
//   stage 1: DistributedDataParallel + ZeroRedundancyOptimizer(AdamW)
//   stage 2: ShardedDataParallel(stage 2) + ShardedOptimizer(AdamW)
//   stage 3: ShardedDataParallel(stage 3, a second group for the gathers) + ShardedOptimizer(AdamW)
// Each run trains 3 steps on random tokens, then every rank reports the bytes its tensors hold:
//   parameters  stage 0/1: every parameter's nbytes; 2/3: ShardedDataParallel::memory_account (2: the whole
//               bucket buffers the parameters are views of, 3: this rank's shards)
//   gradients   stage 0/1: every .grad's nbytes; 2/3: this rank's gradient shards (memory_account)
//   optimizer   stage 0: AdamW::state() (tensors of more than one element, as ShardedOptimizer::state_bytes);
//               1: ZeroRedundancyOptimizer::local_state_bytes(); 2/3: ShardedOptimizer::state_bytes()
//   comm        not in the sum (the formula leaves it out): stage 0/1 the reducer's all-reduce bucket buffers
//               (bucket_numel * 4, alive for the whole run); 2/3 the peak of bucket buffers alive at once
//               (they live for one backward only), and the gathered-parameter peak (ZeRO-3)
// beside ddp::zero_formula_bytes(stage, Psi, 4, K, world) and the deviation. Then the step time at world 2:
// --rounds rounds, each running every stage once (interleaved, so the machine's drift hits all alike), the
// median over rounds of steps 2..3, and the time ZeRO-2/3's forward and backward waited for gathers.
//
//   bin/bench_zero_memory --json runs/zero_memory.jsonl           # tiny and ~20M GPT, worlds 1 2 4
//   bin/bench_zero_memory --models tiny --worlds 2 --rounds 1     # a quick look
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "models/gpt.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/sharded/memory_account.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"

using namespace ddp;
using Clock = std::chrono::steady_clock;

namespace {

struct Sizes {
  std::string name;
  models::GPTConfig config;
};

Sizes gpt_of(const std::string& name) {
  Sizes s{name, {}};
  if (name == "gpt20m") {  // 6 blocks of width 512: 19.3M parameters
    s.config.d_model = 512;
    s.config.n_head = 8;
    s.config.n_layer = 6;
    s.config.context = 64;
  } else if (name != "tiny") {
    throw std::runtime_error("bench_zero_memory: --models takes tiny and gpt20m, not " + name);
  }
  return s;
}

// One rank's figures of one run.
struct Row {
  std::string model;
  int stage = 0, world = 1, rank = 0;
  int64_t psi = 0;
  int k = 0;  // optimizer bytes per parameter
  int64_t param_bytes = 0, grad_bytes = 0, opt_bytes = 0, comm_bytes = 0, gathered_peak = 0;
  std::vector<double> step_s;  // every step
  double gather_wait_s = 0;    // steps 2.., ZeRO-2/3
  int64_t measured() const { return param_bytes + grad_bytes + opt_bytes; }
  double formula() const { return zero_formula_bytes(stage, psi, 4, k, world); }
  double deviation() const { return static_cast<double>(measured()) / formula() - 1.0; }
};

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

optim::OptimizerFactory adamw() {
  return [](std::vector<nn::NamedTensor> ps) {
    return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 1e-3});
  };
}

int64_t state_bytes(const std::map<std::string, Tensor>& state) {
  int64_t bytes = 0;
  for (auto& [name, t] : state)
    if (t.defined() && t.numel() > 1) bytes += static_cast<int64_t>(t.nbytes());  // not the step counters
  return bytes;
}

// Random tokens for one rank (targets: the next token).
std::pair<Tensor, Tensor> batch_of(const models::GPTConfig& c, int64_t batch, int rank) {
  std::vector<int64_t> tokens(batch * c.context), targets(tokens.size());
  uint64_t s = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1);
  for (auto& t : tokens) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(c.vocab));
  }
  for (size_t i = 0; i < tokens.size(); ++i) targets[i] = tokens[(i + 1) % tokens.size()];
  return {Tensor::from_data<int64_t>(tokens, {batch, c.context}), Tensor::from_data<int64_t>(targets, {batch, c.context})};
}

std::vector<Row> run(const Sizes& m, int stage, int world, int steps, int64_t batch, int prefetch,
                     const std::string& backend) {
  std::vector<Row> rows(world);
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        nn::manual_seed(1234);
        auto model = std::make_shared<models::GPT>(m.config);
        auto [x, y] = batch_of(m.config, batch, rank);
        Row& r = rows[rank];
        r.model = m.name;
        r.stage = stage;
        r.world = world;
        r.rank = rank;
        for (auto& p : model->named_parameters()) r.psi += p.tensor.numel();
        auto timed_steps = [&](auto&& forward, auto&& step, auto&& after_first) {
          for (int i = 0; i < steps; ++i) {
            pg.barrier()->wait();  // every rank starts the step together
            const auto t0 = Clock::now();
            Tensor loss = ops::cross_entropy(forward(x), y);
            autograd::backward(loss);
            step();
            r.step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            if (i == 0) after_first();
          }
        };
        if (stage <= 1) {
          DistributedDataParallel ddp(model, borrow(pg));
          std::unique_ptr<optim::Optimizer> opt;
          optim::ZeroRedundancyOptimizer* zero = nullptr;
          if (stage == 0) {
            opt = adamw()(model->named_parameters());
          } else {
            auto z = std::make_unique<optim::ZeroRedundancyOptimizer>(model->named_parameters(), borrow(pg), adamw());
            zero = z.get();
            opt = std::move(z);
          }
          timed_steps([&](const Tensor& t) { return ddp.forward(t); },
                      [&] {
                        opt->step();
                        opt->zero_grad();
                      },
                      [] {});
          for (auto& p : model->parameters()) {
            r.param_bytes += static_cast<int64_t>(p.nbytes());
            if (p.grad().defined()) r.grad_bytes += static_cast<int64_t>(p.grad().nbytes());
          }
          r.opt_bytes = stage == 0 ? state_bytes(opt->state()) : zero->local_state_bytes();
          const size_t nb = ddp.reducer().bucket_layout().size();
          for (size_t b = 0; b < nb; ++b) r.comm_bytes += ddp.reducer().bucket_numel(b) * 4;
          r.k = static_cast<int>(2 * 4);  // AdamW: two moments; the measured figure is checked against it
        } else {
          ShardOptions o;
          o.stage = stage;
          o.prefetch = prefetch;
          if (stage == 3) {
            dist::DistEnv env;
            env.rank = rank;
            env.world_size = world;
            dist::ProcessGroupOptions po;
            po.name = "gather";
            o.gather_group = dist::new_process_group(env, store, backend, po);
          }
          ShardedDataParallel sdp(model, borrow(pg), o);
          ShardedOptimizer opt(sdp, adamw());
          timed_steps([&](const Tensor& t) { return sdp.forward(t); },
                      [&] {
                        opt.step();
                        opt.zero_grad();
                      },
                      [&] { sdp.reset_gather_stats(); });
          r.gather_wait_s = sdp.gather_wait_s();
          const MemoryAccount a = sdp.memory_account(opt.state_bytes(), 8);
          r.param_bytes = a.parameter_bytes;
          r.grad_bytes = a.gradient_bytes;
          r.opt_bytes = a.optimizer_bytes;
          r.comm_bytes = a.bucket_peak_bytes;
          r.gathered_peak = a.gathered_peak_bytes;
          r.k = 8;
        }
      },
      dist::ProcessGroupOptions{}, backend);
  return rows;
}

double mib(double b) { return b / (1024.0 * 1024.0); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_zero_memory: per-rank memory and step time of ZeRO stages 0-3 on a GPT"};
  std::vector<std::string> model_names{"tiny", "gpt20m"};
  std::vector<int> worlds{1, 2, 4};
  std::string backend = "shm", json_path, timing_model = "gpt20m";
  int steps = 3, rounds = 3;
  int64_t batch = 4;
  app.add_option("--models", model_names, "tiny (default GPTConfig) and/or gpt20m (d 512, 6 blocks, context 64)");
  app.add_option("--worlds", worlds, "world sizes of the memory table");
  app.add_option("--backend", backend, "shm or gloo");
  app.add_option("--steps", steps, "training steps per run (the step time is the median of steps 2..)");
  app.add_option("--batch", batch, "sequences per rank per step");
  app.add_option("--rounds", rounds, "step-time rounds at world 2 (each runs every stage once); 0: none");
  app.add_option("--timing-model", timing_model, "the model of the step-time rounds");
  app.add_option("--json", json_path, "write one JSON line per row here");
  CLI11_PARSE(app, argc, argv);
  if (steps < 2) steps = 2;

  std::ofstream json;
  if (!json_path.empty()) json.open(json_path);
  auto emit = [&](nlohmann::json j) {
    if (json.is_open()) json << j.dump() << "\n";
  };

  // ---- memory ----
  std::printf("memory per rank after %d AdamW steps, float32 (MiB; sum = parameters + gradients + optimizer)\n",
              steps);
  std::printf("%-7s %10s %5s %5s %4s %9s %9s %9s %9s %9s %7s %9s %9s\n", "model", "params", "world", "stage",
              "rank", "param", "grad", "optim", "sum", "formula", "dev%", "comm", "gathered");
  for (auto& name : model_names) {
    const Sizes m = gpt_of(name);
    for (int world : worlds)
      for (int stage = 0; stage <= 3; ++stage)
        for (const Row& r : run(m, stage, world, steps, batch, 1, backend)) {
          std::printf("%-7s %10lld %5d %5d %4d %9.3f %9.3f %9.3f %9.3f %9.3f %+7.2f %9.3f %9.3f\n", r.model.c_str(),
                      static_cast<long long>(r.psi), r.world, r.stage, r.rank, mib(r.param_bytes), mib(r.grad_bytes),
                      mib(r.opt_bytes), mib(r.measured()), mib(r.formula()), 100 * r.deviation(), mib(r.comm_bytes),
                      mib(r.gathered_peak));
          emit({{"kind", "memory"}, {"model", r.model}, {"params", r.psi}, {"world", r.world}, {"stage", r.stage},
                {"rank", r.rank}, {"param_bytes", r.param_bytes}, {"grad_bytes", r.grad_bytes},
                {"optimizer_bytes", r.opt_bytes}, {"measured_bytes", r.measured()}, {"formula_bytes", r.formula()},
                {"deviation", r.deviation()}, {"comm_bytes", r.comm_bytes}, {"gathered_peak_bytes", r.gathered_peak},
                {"k", r.k}, {"backend", backend}, {"steps", steps}, {"batch", batch}});
        }
    std::fflush(stdout);
  }

  // ---- step time at world 2, stages interleaved ----
  if (rounds <= 0) return 0;
  const Sizes m = gpt_of(timing_model);
  struct Variant {
    std::string label;
    int stage, prefetch;
  };
  const std::vector<Variant> variants{{"ddp", 0, 1}, {"zero1", 1, 1}, {"zero2", 2, 1}, {"zero3", 3, 1},
                                      {"zero3_prefetch0", 3, 0}};
  std::map<std::string, std::vector<double>> step_s, wait_s;
  for (int round = 0; round < rounds; ++round)
    for (auto& v : variants) {
      const auto rows = run(m, v.stage, 2, steps, batch, v.prefetch, backend);
      for (size_t i = 1; i < rows[0].step_s.size(); ++i) {  // steps 2..: the slower rank's
        step_s[v.label].push_back(std::max(rows[0].step_s[i], rows[1].step_s[i]));
      }
      const double waited = std::max(rows[0].gather_wait_s, rows[1].gather_wait_s) / (steps - 1);
      wait_s[v.label].push_back(waited);
    }
  const double base = median(step_s["ddp"]);
  std::printf("\nstep time at world 2, %s, batch %lld x %lld tokens per rank, %s, %d rounds x steps 2..%d\n",
              timing_model.c_str(), static_cast<long long>(batch), static_cast<long long>(m.config.context),
              backend.c_str(), rounds, steps);
  std::printf("%-16s %10s %8s %12s %9s\n", "variant", "median ms", "x ddp", "gather ms", "gather %");
  for (auto& v : variants) {
    const double t = median(step_s[v.label]), w = median(wait_s[v.label]);
    std::printf("%-16s %10.1f %8.3f %12.2f %9.2f\n", v.label.c_str(), 1e3 * t, t / base, 1e3 * w, 100 * w / t);
    emit({{"kind", "step_time"}, {"model", timing_model}, {"world", 2}, {"variant", v.label}, {"stage", v.stage},
          {"prefetch", v.prefetch}, {"median_step_s", t}, {"ratio_to_ddp", t / base}, {"gather_wait_s", w},
          {"samples_s", step_s[v.label]}, {"backend", backend}, {"batch", batch}, {"rounds", rounds}});
  }
  return 0;
}
