// synthetic.cpp - the teacher-labelled images and the Markov-chain tokens. Random draws use raw 64-bit
// outputs of std::mt19937_64 (no std::distribution, whose algorithms differ between standard libraries).
#include "runtime/data/synthetic.h"

#include <random>

#include "runtime/core/error.h"
#include "runtime/data/distributed_sampler.h"

namespace ddp::data {
namespace {

// Uniform in [0, 1) from the top 53 bits.
double unit_uniform(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1.0p-53; }

// Uniform in [0, n) without modulo bias.
int64_t uniform_below(std::mt19937_64& gen, uint64_t n) {
  const uint64_t reject_below = (0 - n) % n;
  uint64_t x = gen();
  while (x < reject_below) x = gen();
  return static_cast<int64_t>(x % n);
}

}  // namespace

std::shared_ptr<TensorDataset> synthetic_classification(int64_t n, const Shape& sample_shape,
                                                        int64_t num_classes, uint64_t seed) {
  DDP_CHECK(n >= 1, "synthetic_classification: n must be >= 1, got ", n);
  DDP_CHECK(num_classes >= 2, "synthetic_classification: num_classes must be >= 2, got ", num_classes);
  const int64_t features = shape_numel(sample_shape);
  DDP_CHECK(features >= 1, "synthetic_classification: sample_shape ", shape_str(sample_shape),
            " must have at least one element");
  Shape x_shape{n};
  x_shape.insert(x_shape.end(), sample_shape.begin(), sample_shape.end());
  Tensor x = Tensor::randn(x_shape, seed, DType::F32);
  Tensor w = Tensor::randn({num_classes, features}, seed + 1, DType::F64);
  Tensor y = Tensor::empty({n}, DType::I64);
  const float* xs = x.data<float>();
  const double* ws = w.data<double>();
  int64_t* ys = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    double best_score = 0;
    for (int64_t c = 0; c < num_classes; ++c) {
      double score = 0;
      for (int64_t f = 0; f < features; ++f) score += ws[c * features + f] * xs[i * features + f];
      if (c == 0 || score > best_score) best = c, best_score = score;
    }
    ys[i] = best;
  }
  return std::make_shared<TensorDataset>(std::move(x), std::move(y));
}

std::vector<int32_t> synthetic_tokens(int64_t num_tokens, int64_t vocab_size, uint64_t seed, double noise) {
  DDP_CHECK(num_tokens >= 1, "synthetic_tokens: num_tokens must be >= 1, got ", num_tokens);
  DDP_CHECK(vocab_size >= 1 && vocab_size <= (int64_t{1} << 31) - 1,
            "synthetic_tokens: vocab_size must be in [1, 2^31), got ", vocab_size);
  DDP_CHECK(noise >= 0.0 && noise <= 1.0, "synthetic_tokens: noise must be in [0, 1], got ", noise);
  const std::vector<int64_t> next = DistributedSampler::permutation(vocab_size, seed);
  std::mt19937_64 gen(seed ^ 0x9E3779B97F4A7C15ull);
  std::vector<int32_t> tokens(static_cast<size_t>(num_tokens));
  int64_t cur = uniform_below(gen, static_cast<uint64_t>(vocab_size));
  for (auto& t : tokens) {
    t = static_cast<int32_t>(cur);
    cur = unit_uniform(gen) < noise ? uniform_below(gen, static_cast<uint64_t>(vocab_size))
                                    : next[static_cast<size_t>(cur)];
  }
  return tokens;
}

std::shared_ptr<TokenWindowDataset> synthetic_token_dataset(int64_t num_tokens, int64_t vocab_size,
                                                            int64_t block_size, uint64_t seed, double noise) {
  return std::make_shared<TokenWindowDataset>(synthetic_tokens(num_tokens, vocab_size, seed, noise),
                                              block_size, vocab_size);
}

}  // namespace ddp::data
