// test_gpt_tied_head.cpp - GPTConfig::tie_head (GPT-2's tying, bench_e2e --config gpt2-small): the head uses
// the token embedding's weight, so the model has one (vocab, d) parameter fewer and that parameter's gradient
// holds both uses - rows of tokens that never occur in the input get a gradient through the head only.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "runtime/autograd/engine.h"
#include "runtime/ops/loss.h"

using namespace ddp;

namespace {
std::shared_ptr<models::GPT> make(bool tied) {
  models::GPTConfig c;
  c.vocab = 11;
  c.context = 6;
  c.d_model = 8;
  c.n_head = 2;
  c.n_layer = 1;
  c.dtype = DType::F64;
  c.tie_head = tied;
  nn::manual_seed(3);
  return std::make_shared<models::GPT>(c);
}
Tensor find(const nn::Module& m, const std::string& name) {
  for (const auto& p : m.named_parameters())
    if (p.name == name) return p.tensor;
  return Tensor();
}
// The largest |gradient| in the wte rows of tokens 2..vocab-1 after one backward on tokens drawn from {0, 1}.
double unused_rows_gradient(models::GPT& m) {
  std::vector<int64_t> x(2 * 6), y(2 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 2, y[i] = (i + 1) % 2;
  autograd::backward(ops::cross_entropy(m.forward(Tensor::from_data<int64_t>(x, {2, 6})),
                                        Tensor::from_data<int64_t>(y, {2, 6})));
  const auto g = find(m, "wte.weight").grad().to_double_vector();
  double worst = 0;
  for (size_t i = 2 * 8; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i]));
  return worst;
}
}  // namespace

TEST(GptTiedHead, OneParameterFewerAndNoHeadWeight) {
  auto tied = make(true), untied = make(false);
  EXPECT_EQ(tied->num_parameters(), untied->num_parameters() - 11 * 8);
  EXPECT_FALSE(find(*tied, "head.weight").defined());
  EXPECT_TRUE(find(*untied, "head.weight").defined());
}

TEST(GptTiedHead, TheEmbeddingGradientHoldsTheHeadsUseToo) {
  auto tied = make(true), untied = make(false);
  EXPECT_EQ(unused_rows_gradient(*untied), 0.0) << "untied: rows of absent tokens get no gradient";
  EXPECT_GT(unused_rows_gradient(*tied), 1e-6) << "tied: the head's gradient reaches every wte row";
}
