// test_synthetic.cpp - the synthetic generators are deterministic per seed and carry the structure they
// promise: teacher labels a softmax regression learns (its loss must fall), tokens whose successor is
// mostly a fixed function of the current token.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "runtime/core/error.h"
#include "runtime/data/synthetic.h"

namespace ddp::data {
namespace {

TEST(Synthetic, ClassificationIsDeterministicPerSeed) {
  auto a = synthetic_classification(64, {1, 4, 4}, 5, 11);
  auto b = synthetic_classification(64, {1, 4, 4}, 5, 11);
  auto c = synthetic_classification(64, {1, 4, 4}, 5, 12);
  ASSERT_EQ(a->x().shape(), (Shape{64, 1, 4, 4}));
  ASSERT_EQ(a->y().shape(), (Shape{64}));
  EXPECT_EQ(a->x().to_double_vector(), b->x().to_double_vector());
  EXPECT_EQ(a->y().to_double_vector(), b->y().to_double_vector());
  EXPECT_NE(a->x().to_double_vector(), c->x().to_double_vector());
  std::map<int64_t, int> classes;
  for (double v : a->y().to_double_vector()) {
    ASSERT_TRUE(v >= 0 && v < 5) << v;
    ++classes[static_cast<int64_t>(v)];
  }
  EXPECT_GE(classes.size(), 3u) << "the teacher should use several classes";
  EXPECT_THROW(synthetic_classification(0, {3}, 2, 0), Error);
  EXPECT_THROW(synthetic_classification(4, {3}, 1, 0), Error);
}

// Plain softmax regression, full-batch gradient descent in float64: the loss must at least halve.
TEST(Synthetic, ClassificationLabelsAreLearnable) {
  const int64_t n = 256, f = 8, k = 4;
  auto ds = synthetic_classification(n, {f}, k, 3);
  const auto x = ds->x().to_double_vector();
  const auto y = ds->y().to_double_vector();
  std::vector<double> w(static_cast<size_t>(k * f), 0.0);
  auto loss_and_grad = [&](std::vector<double>* grad) {
    double loss = 0;
    if (grad) std::fill(grad->begin(), grad->end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> logits(static_cast<size_t>(k), 0.0);
      for (int64_t c = 0; c < k; ++c)
        for (int64_t j = 0; j < f; ++j) logits[c] += w[c * f + j] * x[i * f + j];
      double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
      for (double& l : logits) z += std::exp(l - mx);
      const auto label = static_cast<int64_t>(y[i]);
      loss += -(logits[label] - mx - std::log(z)) / n;
      if (grad)
        for (int64_t c = 0; c < k; ++c) {
          const double p = std::exp(logits[c] - mx) / z - (c == label ? 1.0 : 0.0);
          for (int64_t j = 0; j < f; ++j) (*grad)[c * f + j] += p * x[i * f + j] / n;
        }
    }
    return loss;
  };
  const double initial = loss_and_grad(nullptr);
  std::vector<double> grad(w.size());
  for (int step = 0; step < 100; ++step) {
    loss_and_grad(&grad);
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 1.0 * grad[i];
  }
  const double final_loss = loss_and_grad(nullptr);
  EXPECT_NEAR(initial, std::log(4.0), 1e-9);
  EXPECT_LT(final_loss, 0.5 * initial) << "initial " << initial << " final " << final_loss;
}

TEST(Synthetic, TokensFollowTheChainExceptForNoise) {
  const int64_t vocab = 16, len = 20000;
  const double noise = 0.1;
  const auto tokens = synthetic_tokens(len, vocab, 5, noise);
  EXPECT_EQ(tokens, synthetic_tokens(len, vocab, 5, noise));
  EXPECT_NE(tokens, synthetic_tokens(len, vocab, 6, noise));
  // Count each token's most frequent successor: it should follow about 1 - noise + noise / vocab of the time.
  std::map<int32_t, std::map<int32_t, int>> succ;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    ASSERT_TRUE(tokens[i] >= 0 && tokens[i] < vocab);
    ++succ[tokens[i]][tokens[i + 1]];
  }
  int64_t predictable = 0;
  for (auto& [tok, m] : succ) {
    int best = 0;
    for (auto& [next, count] : m) best = std::max(best, count);
    predictable += best;
  }
  const double rate = static_cast<double>(predictable) / (len - 1);
  EXPECT_NEAR(rate, 1 - noise + noise / vocab, 0.02);
  // noise = 1: no structure; the best successor is right about 1 / vocab of the time (plus sampling slack).
  const auto uniform = synthetic_tokens(len, vocab, 5, 1.0);
  std::map<int32_t, std::map<int32_t, int>> usucc;
  for (size_t i = 0; i + 1 < uniform.size(); ++i) ++usucc[uniform[i]][uniform[i + 1]];
  int64_t upred = 0;
  for (auto& [tok, m] : usucc) {
    int best = 0;
    for (auto& [next, count] : m) best = std::max(best, count);
    upred += best;
  }
  EXPECT_LT(static_cast<double>(upred) / (len - 1), 0.2);
  auto ds = synthetic_token_dataset(1000, vocab, 8, 5);
  EXPECT_EQ(ds->size(), (1000 - 1) / 8);
  EXPECT_EQ(ds->vocab_size(), vocab);
}

}  // namespace
}  // namespace ddp::data
