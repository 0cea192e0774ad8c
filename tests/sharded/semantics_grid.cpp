// semantics_grid.cpp - the model, the wrappers of each ZeRO stage and the one training loop of the semantics
// grid (semantics_grid.h). The loop is written once: what differs between stages is only which wrapper runs
// the forward, which optimizer steps and how the gradient norm is clipped.
#include "tests/sharded/semantics_grid.h"

#include <chrono>
#include <memory>

#include "models/branchy.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/join.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/shape.h"
#include "tests/support/ddp_test_util.h"
#include "tests/support/shared_linear.h"

namespace ddp::testing::grid {

namespace {

constexpr int64_t kRows = 3;
constexpr int kIn = 6, kHidden = 8, kClasses = 3;
constexpr double kClip = 0.05;

// items.0 -> [norm] -> items.1 [twice] -> [experts.e] -> [mix -> again] -> items.2 -> head. The items and the
// experts are ZeRO-3 units (ModuleList items); head, norm, mix, again and spare are the root unit. Modules
// are called through operator() so that their forward hooks run.
class GridNet : public nn::Module {
 public:
  explicit GridNet(const NetConfig& c) : c_(c) {
    items = register_module("items", std::make_shared<nn::ModuleList<nn::Module>>());
    items->push_back(std::make_shared<nn::Linear>(kIn, kHidden, true, DType::F64));
    auto i2 = std::make_shared<nn::Linear>(kHidden, kHidden, true, DType::F64);
    if (c.tied_across_units)  // items.1 reuses items.2's weight: two units share one parameter
      items->push_back(std::make_shared<SharedLinear>(i2->weight, Tensor::zeros({kHidden}, DType::F64)));
    else
      items->push_back(std::make_shared<nn::Linear>(kHidden, kHidden, true, DType::F64));
    items->push_back(i2);
    if (c.batchnorm)
      norm = register_module("norm", std::make_shared<nn::BatchNorm2d>(kHidden, 0.1, 1e-5, DType::F64));
    if (c.experts) {
      experts = register_module("experts", std::make_shared<nn::ModuleList<nn::Linear>>());
      experts->push_back(std::make_shared<nn::Linear>(kHidden, kHidden, true, DType::F64));
      experts->push_back(std::make_shared<nn::Linear>(kHidden, kHidden, true, DType::F64));
      spare = register_module("spare", std::make_shared<nn::Linear>(kHidden, kHidden, true, DType::F64));
    }
    if (c.tied) {
      mix = register_module("mix", std::make_shared<nn::Linear>(kHidden, kHidden, true, DType::F64));
      again = register_module(
          "again", std::make_shared<SharedLinear>(mix->weight, Tensor::zeros({kHidden}, DType::F64)));
    }
    head = register_module("head", std::make_shared<nn::Linear>(kHidden, kClasses, true, DType::F64));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::relu((*items)[0](x));
    if (norm) h = ops::reshape((*norm)(ops::reshape(h, {kRows, kHidden, 1, 1})), {kRows, kHidden});
    h = ops::relu((*items)[1](h));
    if (c_.twice) h = ops::relu((*items)[1](h));
    if (experts) h = ops::relu((*experts)[static_cast<size_t>(models::Branchy::expert_for(x))](h));
    if (mix) h = ops::relu((*again)(ops::relu((*mix)(h))));
    return (*head)(ops::relu((*items)[2](h)));
  }
  std::shared_ptr<nn::ModuleList<nn::Module>> items;
  std::shared_ptr<nn::ModuleList<nn::Linear>> experts;
  std::shared_ptr<nn::BatchNorm2d> norm;
  std::shared_ptr<nn::Linear> mix, spare, head;
  std::shared_ptr<SharedLinear> again;

 private:
  NetConfig c_;
};

std::shared_ptr<GridNet> make_net(const NetConfig& c) {
  nn::manual_seed(36);
  return std::make_shared<GridNet>(c);
}

Batch batch_of(int step, int micro, int rank) {
  Batch b;
  b.x = Tensor::randn({kRows, kIn}, 3600 + 101 * step + 13 * micro + rank, DType::F64);
  std::vector<int64_t> y(kRows);
  for (int64_t i = 0; i < kRows; ++i) y[i] = (i + step + micro + 2 * rank) % kClasses;
  b.y = Tensor::from_data(y, {kRows});
  return b;
}

std::unique_ptr<optim::Optimizer> make_opt(Opt o, std::vector<nn::NamedTensor> ps) {
  if (o == Opt::AdamW)
    return std::make_unique<optim::AdamW>(std::move(ps),
                                          optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.1});
  return std::make_unique<optim::SGD>(std::move(ps),
                                      optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05});
}

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

// The user's check between forward and backward.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One rank's wrapper and optimizer of the stage under test.
struct Stage {
  std::unique_ptr<DistributedDataParallel> ddp;  // stages 0, 1
  std::unique_ptr<ShardedDataParallel> sdp;      // stages 2, 3
  std::unique_ptr<optim::Optimizer> opt;
  Joinable* zero = nullptr;  // stage 1
  ShardedOptimizer* sharded = nullptr;

  DistributedDataParallel& dp() { return sdp ? sdp->ddp() : *ddp; }
  Tensor forward(const Tensor& x) { return sdp ? sdp->forward(x) : ddp->forward(x); }
};

void train_rank(const Case& c, int rank, dist::ProcessGroup& pg, dist::Store& store, Outcome& out) {
  const Pattern& p = *c.pattern;
  auto model = make_net(p.net);
  DDPOptions d;
  d.find_unused_parameters = p.find_unused;
  d.static_graph = p.static_graph;
  Stage s;
  auto inner = [&p](std::vector<nn::NamedTensor> ps) { return make_opt(p.opt, std::move(ps)); };
  if (c.stage >= 2) {
    ShardOptions o;
    o.stage = c.stage;
    o.ddp = d;
    o.prefetch = c.prefetch;
    if (c.stage == 3 && c.world > 1) {
      dist::DistEnv env;
      env.rank = rank;
      env.world_size = c.world;
      dist::ProcessGroupOptions po;
      po.timeout = std::chrono::seconds(10);
      po.name = "gather";
      o.gather_group = dist::new_process_group(env, store, c.backend, po);
    }
    s.sdp = std::make_unique<ShardedDataParallel>(model, borrow(pg), o);
    auto opt = std::make_unique<ShardedOptimizer>(*s.sdp, inner);
    s.sharded = opt.get();
    s.opt = std::move(opt);
  } else {
    s.ddp = std::make_unique<DistributedDataParallel>(model, borrow(pg), d);
    if (c.stage == 1) {
      auto zero =
          std::make_unique<optim::ZeroRedundancyOptimizer>(model->named_parameters(), borrow(pg), inner);
      s.zero = zero.get();
      if (p.clip)
        zero->set_join_gradient_transform([model] { optim::clip_grad_norm_(model->parameters(), kClip); });
      s.opt = std::move(zero);
    } else {
      s.opt = inner(model->named_parameters());
    }
  }
  std::unique_ptr<Join> join;
  if (c.uneven > 0) {
    JoinOptions jo;
    jo.zero_grad_set_to_none = p.set_to_none;
    if (s.zero) jo.joinables = {s.zero};
    if (s.sdp) {
      jo.joinables = {s.sdp.get(), s.sharded};
      if (p.clip) s.sharded->set_join_gradient_transform([&s] { s.sdp->clip_grad_norm_(kClip); });
    }
    join = std::make_unique<Join>(s.dp(), jo);
  }
  auto backward_of = [&](int step, int micro) {
    Batch b = batch_of(step, micro, rank);
    Tensor loss = ops::cross_entropy(s.forward(b.x), b.y) * (1.0 / p.accumulation);
    if (step == p.raise_step) throw UserError("step " + std::to_string(step) + " rejected by the loop");
    autograd::backward(loss);
  };
  const int steps = c.steps - c.uneven * rank;
  for (int step = 0; step < steps; ++step) {
    if (step != p.step_without_backward) {
      try {
        for (int k = 0; k < p.backwards; ++k)
          for (int a = 0; a < p.accumulation; ++a) {
            const int micro = k * p.accumulation + a;
            if (a + 1 < p.accumulation) {
              auto guard = s.dp().no_sync();
              backward_of(step, micro);
            } else {
              backward_of(step, micro);
            }
          }
      } catch (const UserError&) {
        continue;  // every rank abandons the iteration: no backward, no step
      }
      if (p.clip) {
        if (s.sdp)
          s.sdp->clip_grad_norm_(kClip);
        else
          optim::clip_grad_norm_(model->parameters(), kClip);
      }
    }
    s.opt->step();
    s.opt->zero_grad(p.set_to_none);
  }
  if (join) join->join();
  std::unique_ptr<ShardedDataParallel::GatheredScope> whole;
  if (s.sdp) whole = std::make_unique<ShardedDataParallel::GatheredScope>(*s.sdp);
  out.params[rank] = snapshot_params(*model);
  out.buffers[rank] = snapshot_buffers(*model);
}

}  // namespace

std::string Case::name() const {
  std::string n = "zero" + std::to_string(stage) + " world " + std::to_string(world) + " " + backend;
  if (stage == 3) n += " prefetch " + std::to_string(prefetch);
  if (uneven > 0)
    n += " join (rank r runs " + std::to_string(steps) + " - " + std::to_string(uneven) + "r steps)";
  return pattern->name + ": " + n;
}

Outcome run_case(const Case& c) {
  Outcome out;
  out.params.resize(c.world);
  out.buffers.resize(c.world);
  out.errors.resize(c.world);
  dist::ProcessGroupOptions po;
  po.timeout =
      std::chrono::seconds(10);  // a rank left waiting fails the case in seconds, with the collective
  dist::run_threads(
      c.world,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        try {
          train_rank(c, rank, pg, store, out);
        } catch (const std::exception& e) {
          out.errors[rank] = e.what();
        }
      },
      po, c.backend);
  return out;
}

std::vector<std::vector<double>> initial_params(const Pattern& p) {
  return snapshot_params(*make_net(p.net));
}

}  // namespace ddp::testing::grid
