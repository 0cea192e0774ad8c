// ddp_disagree_worker.cpp - one rank of the multi-process disagreement test
// (tests/ddp/test_disagreement_processes.cpp): a float64 model whose middle layer rank 0 skips in the first
// step (find_unused_parameters off). Rank 0 gets the unused-parameter error, catches it, steps like the
// others and trains on; every rank prints "caught: <first line>" (if it caught one) and its parameters'
// checksum with full precision. Exit 0 unless something else failed.
#include <cstdio>
#include <string>

#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/init.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"

namespace {
using namespace ddp;
struct Skippable : nn::Module {
  std::shared_ptr<nn::Linear> a, b, c;
  bool use_b = true;
  Skippable() {
    a = register_module("a", std::make_shared<nn::Linear>(4, 6, true, DType::F64));
    b = register_module("b", std::make_shared<nn::Linear>(6, 6, true, DType::F64));
    c = register_module("c", std::make_shared<nn::Linear>(6, 3, true, DType::F64));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::relu(a->forward(x));
    if (use_b) h = ops::relu(b->forward(h));
    return c->forward(h);
  }
};
}  // namespace

int main() {
  try {
    dist::DistContext ctx = dist::init_distributed(dist::init_from_env(), "gloo");
    const int rank = ctx.group->rank();
    nn::manual_seed(1000 + rank);
    auto model = std::make_shared<Skippable>();
    DDPOptions o;
    o.bucket_cap_mb = o.first_bucket_mb = 1e-9;  // one bucket per parameter
    DistributedDataParallel ddp(model, ctx.group, o);
    optim::SGD opt(model->named_parameters(), {.lr = 0.1});
    std::string caught;
    for (int step = 0; step < 4; ++step) {
      model->use_b = !(rank == 0 && step == 0);
      Tensor x = Tensor::randn({3, 4}, 100 * step + rank, DType::F64);
      Tensor y = Tensor::from_data<int64_t>({step % 3, (step + rank) % 3, 1}, {3});
      opt.zero_grad();
      try {
        autograd::backward(ops::cross_entropy(ddp.forward(x), y));
      } catch (const Error& e) {
        std::string m = e.what();
        caught = m.substr(0, m.find('\n'));
      }
      opt.step();
    }
    double checksum = 0, weight = 1;
    for (auto& p : model->parameters())
      for (double v : p.to_double_vector()) checksum += v * (weight += 0.001);
    if (!caught.empty()) std::printf("caught: %s\n", caught.c_str());
    std::printf("rebuilt %d params %.17g\n", ddp.reducer().buckets_rebuilt() ? 1 : 0, checksum);
    ctx.group->barrier()->wait();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_disagree_worker: %s\n", e.what());
    return 1;
  }
}
