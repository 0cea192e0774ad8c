// test_grad_destinations.cpp - the backward of every op with parameters (linear, embedding, layer norm,
// conv2d, batch norm; attention's projections are linears) writes its parameter gradients straight into their DDP bucket
// slots in the default mode: the reducer copies no gradient into a bucket (IterationStats::
// num_gradients_copied) for the GPT and the CNN, and the gradients are bitwise those of gradient_as_bucket_view
// and of a run where every gradient is copied (a second post-accumulate hook on every parameter turns the
// destinations off, tests/ddp/test_default_mode_grad_hooks.cpp). Worlds 1 and 2, float32 and float64.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "models/cnn.h"
#include "models/gpt.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/shape.h"

using namespace ddp;

namespace {

using Grads = std::vector<std::vector<double>>;

Grads grads_of(nn::Module& m) {
  Grads out;
  for (auto& p : m.named_parameters()) out.push_back(p.tensor.grad().to_double_vector());
  return out;
}

enum class Mode { Default, View, Copied };

struct Outcome {
  Grads grads;
  size_t copied = 0, params = 0;
};

// Three steps (past the bucket rebuild) of `model_name` on rank-dependent data; the last step's outcome.
Outcome run(const std::string& model_name, DType dtype, int world, int rank, dist::ProcessGroup& pg, Mode mode) {
  nn::manual_seed(11);
  std::shared_ptr<nn::Module> model;
  Tensor x, y;
  if (model_name == "gpt") {
    models::GPTConfig c;
    c.vocab = 32;
    c.context = 8;
    c.d_model = 16;
    c.n_head = 2;
    c.n_layer = 2;
    c.dtype = dtype;
    model = std::make_shared<models::GPT>(c);
  } else {
    models::CNNConfig c;
    c.channels1 = 4;
    c.channels2 = 6;
    c.image = 12;
    c.dtype = dtype;
    model = std::make_shared<models::CNN>(c);
  }
  DDPOptions opt;
  opt.gradient_as_bucket_view = mode == Mode::View;
  opt.first_bucket_mb = opt.bucket_cap_mb = 0.001;  // several buckets
  if (mode == Mode::Copied)
    for (auto& p : model->named_parameters())
      p.tensor.impl()->add_post_accumulate_hook(nullptr, [](TensorImpl&) {});
  DistributedDataParallel ddp(model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg),
                              opt);
  for (int step = 0; step < 3; ++step) {
    for (auto& p : model->named_parameters()) p.tensor.set_grad(Tensor());  // zero_grad(set_to_none)
    const uint64_t seed = 1000 + 10 * step + static_cast<uint64_t>(rank);
    Tensor loss;
    if (model_name == "gpt") {
      std::vector<int64_t> ids(2 * 8), targets(2 * 8);
      for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = static_cast<int64_t>((seed * 7 + i * 13) % 32);
        targets[i] = static_cast<int64_t>((seed * 5 + i * 3) % 32);
      }
      Tensor logits = ddp.forward(Tensor::from_data<int64_t>(ids, {2, 8}));
      loss = ops::cross_entropy(ops::reshape(logits, {16, 32}), Tensor::from_data<int64_t>(targets, {16}));
    } else {
      Tensor img = Tensor::randn({2, 1, 12, 12}, seed, dtype);
      loss = ops::cross_entropy(ddp.forward(img), Tensor::from_data<int64_t>({1, 7}, {2}));
    }
    autograd::backward(loss);
  }
  (void)world;
  Outcome o;
  o.grads = grads_of(*model);
  o.copied = ddp.reducer().last_stats().num_gradients_copied;
  o.params = model->named_parameters().size();
  return o;
}

}  // namespace

TEST(GradDestinations, EveryParameterOpWritesIntoItsBucketSlot) {
  dist::ProcessGroupOptions po;
  po.timeout = std::chrono::seconds(60);
  for (const std::string model : {"gpt", "cnn"})
    for (DType dtype : {DType::F32, DType::F64})
      for (int world : {1, 2}) {
        SCOPED_TRACE(model + " " + std::string(dtype_name(dtype)) + " world " + std::to_string(world));
        std::mutex mu;
        std::vector<std::map<Mode, Outcome>> out(static_cast<size_t>(world));
        dist::run_threads(
            world,
            [&](int rank, dist::ProcessGroup& pg) {
              for (Mode m : {Mode::Default, Mode::View, Mode::Copied}) {
                Outcome o = run(model, dtype, world, rank, pg, m);
                std::lock_guard<std::mutex> g(mu);
                out[static_cast<size_t>(rank)][m] = std::move(o);
              }
            },
            po);
        for (int r = 0; r < world; ++r) {
          auto& o = out[static_cast<size_t>(r)];
          EXPECT_EQ(o[Mode::Default].copied, 0u) << "rank " << r << ": of " << o[Mode::Default].params;
          EXPECT_EQ(o[Mode::View].copied, 0u) << "rank " << r;
          EXPECT_EQ(o[Mode::Copied].copied, o[Mode::Copied].params) << "rank " << r;
          EXPECT_EQ(o[Mode::Default].grads, o[Mode::Copied].grads) << "rank " << r;
          EXPECT_EQ(o[Mode::View].grads, o[Mode::Copied].grads) << "rank " << r;
        }
      }
}
