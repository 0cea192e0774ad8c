// synthetic.h - generated datasets for tests and benchmarks, with a structure a model can learn so that
// "the loss goes down" is a meaningful check. Same arguments -> same data on every machine.
//
// Images: x ~ N(0, 1) per element (Tensor::randn with `seed`); the label is the class a fixed random linear
//   "teacher" scores highest: y = argmax_c (W x)_c, W ~ N(0, 1) (classes x features) from seed + 1. The
//   classes are linearly separable, so a linear model or MLP can drive the loss towards zero.
// Tokens: a Markov chain over the vocabulary: token t+1 = next[token t], where next is a fixed random
//   permutation (DistributedSampler::permutation(vocab, seed)), except that with probability `noise` it is
//   uniform at random. A bigram model reaches a loss near the chain's entropy; noise = 1 gives uniformly
//   random tokens (for throughput benchmarks, where learnability does not matter).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/data/tensor_dataset.h"
#include "runtime/data/text_dataset.h"

namespace ddp::data {

// x float32 (n, sample_shape...), y int64 (n) in [0, num_classes).
std::shared_ptr<TensorDataset> synthetic_classification(int64_t n, const Shape& sample_shape,
                                                        int64_t num_classes, uint64_t seed);

// num_tokens tokens in [0, vocab_size) from the Markov chain above; noise in [0, 1].
std::vector<int32_t> synthetic_tokens(int64_t num_tokens, int64_t vocab_size, uint64_t seed,
                                      double noise = 0.1);

// The same tokens as windows of block_size (see text_dataset.h for the sample definition).
std::shared_ptr<TokenWindowDataset> synthetic_token_dataset(int64_t num_tokens, int64_t vocab_size,
                                                            int64_t block_size, uint64_t seed,
                                                            double noise = 0.1);

}  // namespace ddp::data
