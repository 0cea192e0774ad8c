// test_empty_batch_backward.cpp - every op's forward and backward on a batch of 0 rows and on 0 columns
// (features, classes, channels, tokens): outputs have the right shape (a loss's mean over no rows is NaN, as
// PyTorch), gradients of parameters that saw no rows are zeros (a sum over nothing), the rest empty; run
// after a large call of the op on the same thread and on a fresh thread; float32 and float64. Inputs that
// cannot mean anything (classes = 0 with rows to classify, batch statistics of no values, normalizing over
// no features, a convolution over no input channels) are clear errors.
#include <gtest/gtest.h>

#include <limits>

#include "runtime/ops/activation.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/batchnorm.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/dropout.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/layernorm.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/pool.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape.h"
#include "runtime/ops/softmax.h"
#include "tests/ops_core/empty_case.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
using I = const Inputs&;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// The expectation of an op whose output is empty: every gradient is zeros (a parameter that saw no rows
// gets a sum over nothing; an empty input's gradient has no values).
Expect empty_out(std::function<Shape(int64_t, int64_t)> out_shape) {
  return [out_shape](int64_t r, int64_t c, const Inputs& in) {
    Expected e{out_shape(r, c), {}, {}};
    e.out = filled(shape_numel(e.out_shape), 0.0);  // no values: the output is empty
    for (const Tensor& t : in) e.grads.push_back(filled(t.numel(), 0.0));
    return e;
  };
}

Inputs int_indices(int64_t n, int64_t modulo) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i % modulo;
  return {Tensor::from_data(v, {n})};
}

std::vector<EmptyCase> row_cases() {  // empty when rows = 0; cols is a feature size > 0
  return {
      {"linear",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, 3}, dt, 1), leaf({c, 3}, dt, 2), leaf({c}, dt, 3)};
       },
       [](I in) { return ops::linear(in[0], in[1], in[2]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"linear without bias",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, 3}, dt, 1), leaf({c, 3}, dt, 2)};
       },
       [](I in) { return ops::linear(in[0], in[1]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"linear of 3-D input",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({2, r, 3}, dt, 1), leaf({c, 3}, dt, 2), leaf({c}, dt, 3)};
       },
       [](I in) { return ops::linear(in[0], in[1], in[2]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{2, r, c};
       })},
      {"matmul",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, 3}, dt, 1), leaf({3, c}, dt, 2)};
       },
       [](I in) { return ops::matmul(in[0], in[1]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"add a broadcast row",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({c}, dt, 2)};
       },
       [](I in) { return ops::add(in[0], in[1]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"sub a broadcast row",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({1, c}, dt, 2)};
       },
       [](I in) { return ops::sub(in[0], in[1]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"mul by a broadcast row",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({c}, dt, 2)};
       },
       [](I in) { return ops::mul(in[0], in[1]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"div by a broadcast row",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), Tensor::uniform({c}, 2, 1.0, 2.0, dt).set_requires_grad(true)};
       },
       [](I in) { return ops::div(in[0], in[1]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"layer_norm",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({c}, dt, 2), leaf({c}, dt, 3)};
       },
       [](I in) { return ops::layer_norm(in[0], in[1], in[2]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"embedding",
       [](int64_t r, int64_t c, DType dt) {
         Inputs in{leaf({7, c}, dt, 1)};
         in.push_back(int_indices(r, 7)[0]);
         return in;
       },
       [](I in) { return ops::embedding(in[0], in[1]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"conv2d",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, 2, 5, 5}, dt, 1), leaf({c, 2, 3, 3}, dt, 2), leaf({c}, dt, 3)};
       },
       [](I in) { return ops::conv2d(in[0], in[1], in[2], 1, 1); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c, 5, 5};
       }),
       16, 24},
      {"batch_norm2d in eval mode",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c, 2, 2}, dt, 1), leaf({c}, dt, 2), leaf({c}, dt, 3), Tensor::zeros({c}, dt),
                       Tensor::ones({c}, dt)};
       },
       [](I in) { return ops::batch_norm2d(in[0], in[1], in[2], in[3], in[4], false); },
       empty_out([](int64_t r, int64_t c) {
         return Shape{r, c, 2, 2};
       }),
       64, 32},
      {"max_pool2d",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c, 4, 4}, dt, 1)};
       },
       [](I in) { return ops::max_pool2d(in[0], 2); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c, 2, 2};
       }),
       64, 32},
      {"avg_pool2d",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c, 4, 4}, dt, 1)};
       },
       [](I in) { return ops::avg_pool2d(in[0], 2); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c, 2, 2};
       }),
       64, 32},
      {"causal_self_attention",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c, 6}, dt, 1)};
       },
       [](I in) { return ops::causal_self_attention(in[0], 2); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c, 2};
       }),
       8, 40},
      {"softmax",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1)};
       },
       [](I in) { return ops::softmax(in[0]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"log_softmax",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1)};
       },
       [](I in) { return ops::log_softmax(in[0]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"relu gelu tanh sigmoid exp log",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1)};
       },
       [](I in) { return ops::log(ops::exp(ops::sigmoid(ops::tanh(ops::gelu(ops::relu(in[0])))))); },
       empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"dropout",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1)};
       },
       [](I in) { return ops::dropout(in[0], 0.5, true, 77); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"reshape transpose slice",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1)};
       },
       [](I in) {
         return ops::slice(ops::transpose(ops::reshape(in[0], {in[0].size(0), 1, in[0].size(1)}), 0, 2), 1, 0,
                           1);
       },
       empty_out([](int64_t r, int64_t c) {
         return Shape{c, 1, r};
       })},
  };
}

// Cases whose result is not empty when the batch is: losses (a mean over no rows is NaN, a sum 0), and a
// concat of an empty tensor with a full one.
std::vector<EmptyCase> loss_cases() {
  return {
      {"cross_entropy mean",
       [](int64_t r, int64_t c, DType dt) {
         Inputs in{leaf({r, c}, dt, 1)};
         in.push_back(int_indices(r, c)[0]);
         return in;
       },
       [](I in) { return ops::cross_entropy(in[0], in[1]); },
       [](int64_t r, int64_t c, const Inputs&) {
         return Expected{{}, {kNaN}, {filled(r * c, 0.0)}};
       }},
      {"cross_entropy sum",
       [](int64_t r, int64_t c, DType dt) {
         Inputs in{leaf({r, c}, dt, 1)};
         in.push_back(int_indices(r, c)[0]);
         return in;
       },
       [](I in) {
         return ops::cross_entropy(in[0], in[1],
                                   {.ignore_index = std::nullopt, .reduction = ops::LossReduction::Sum});
       },
       [](int64_t r, int64_t c, const Inputs&) {
         return Expected{{}, {0.0}, {filled(r * c, 0.0)}};
       }},
      {"mse_loss",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({r, c}, dt, 2)};
       },
       [](I in) { return ops::mse_loss(in[0], in[1]); },
       [](int64_t r, int64_t c, const Inputs&) {
         return Expected{{}, {kNaN}, {filled(r * c, 0.0), filled(r * c, 0.0)}};
       }},
      {"concat of an empty and a full tensor",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({2, c}, dt, 2)};
       },
       [](I in) {
         return ops::concat({in[0], in[1]}, 0);
       },
       [](int64_t r, int64_t c, const Inputs& in) {
         return Expected{{r + 2, c}, in[1].to_double_vector(), {filled(r * c, 0.0), filled(2 * c, 1.0)}};
       }},
  };
}

// Empty when cols = 0 (features, channels, tokens), with rows > 0.
std::vector<EmptyCase> column_cases() {
  return {
      // x (rows, 0) W (4, 0): the output is the bias on every row, the bias gradient counts the rows.
      {"linear over no input features",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({4, c}, dt, 2), leaf({4}, dt, 3)};
       },
       [](I in) { return ops::linear(in[0], in[1], in[2]); },
       [](int64_t r, int64_t, const Inputs& in) {
         std::vector<double> out, b = in[2].to_double_vector();
         for (int64_t i = 0; i < r; ++i) out.insert(out.end(), b.begin(), b.end());
         return Expected{{r, 4}, out, {{}, {}, filled(4, static_cast<double>(r))}};
       }},
      {"matmul over an empty inner dimension",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({c, 4}, dt, 2)};
       },
       [](I in) { return ops::matmul(in[0], in[1]); },
       [](int64_t r, int64_t, const Inputs&) {
         return Expected{{r, 4}, filled(r * 4, 0.0), {{}, {}}};
       }},
      {"add a broadcast column",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({r, 1}, dt, 2)};
       },
       [](I in) { return ops::add(in[0], in[1]); },
       [](int64_t r, int64_t c, const Inputs&) {
         return Expected{{r, c}, {}, {{}, filled(r, 0.0)}};
       }},
      {"mul by a broadcast column",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({r, 1}, dt, 2)};
       },
       [](I in) { return ops::mul(in[0], in[1]); },
       [](int64_t r, int64_t c, const Inputs&) {
         return Expected{{r, c}, {}, {{}, filled(r, 0.0)}};
       }},
      {"mean over no columns",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1)};
       },
       [](I in) { return ops::mean(in[0], {1}); },
       [](int64_t r, int64_t, const Inputs&) {
         return Expected{{r}, filled(r, kNaN), {{}}};
       }},
      {"softmax over no classes",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1)};
       },
       [](I in) { return ops::softmax(in[0]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"log_softmax over no classes",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1)};
       },
       [](I in) { return ops::log_softmax(in[0]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"embedding of width 0",
       [](int64_t r, int64_t c, DType dt) {
         Inputs in{leaf({7, c}, dt, 1)};
         in.push_back(int_indices(r, 7)[0]);
         return in;
       },
       [](I in) { return ops::embedding(in[0], in[1]); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c};
       })},
      {"causal_self_attention of no tokens",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c, 6}, dt, 1)};
       },
       [](I in) { return ops::causal_self_attention(in[0], 2); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c, 2};
       }),
       8, 40},
      {"avg_pool2d of no channels",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c, 4, 4}, dt, 1)};
       },
       [](I in) { return ops::avg_pool2d(in[0], 2); }, empty_out([](int64_t r, int64_t c) {
         return Shape{r, c, 2, 2};
       }),
       64, 32},
      {"concat of an empty and a full tensor",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, c}, dt, 1), leaf({r, 2}, dt, 2)};
       },
       [](I in) {
         return ops::concat({in[0], in[1]}, 1);
       },
       [](int64_t r, int64_t, const Inputs& in) {
         return Expected{{r, 2}, in[1].to_double_vector(), {{}, filled(2 * r, 1.0)}};
       }},
  };
}
}  // namespace

TEST(EmptyBatchBackward, EveryOpOnZeroRowsGivesEmptyOutputsAndZeroParameterGradients) {
  for (const EmptyCase& c : row_cases()) check_case(c, no_rows());
}

TEST(EmptyBatchBackward, LossesOverZeroRowsAreNaNForAMeanAndZeroForASum) {
  for (const EmptyCase& c : loss_cases()) check_case(c, no_rows());
}

TEST(EmptyBatchBackward, EveryOpOnZeroColumnsGivesTheRightShapesAndGradients) {
  for (const EmptyCase& c : column_cases()) check_case(c, no_cols());
}

TEST(EmptyBatchBackward, InputsWithNothingToComputeAreClearErrors) {
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor logits = leaf({3, 0}, dt, 1);
    try {
      ops::cross_entropy(logits, int_indices(3, 1)[0]);
      ADD_FAILURE() << "cross_entropy over zero classes accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("zero classes"), std::string::npos) << e.what();
    }
    try {
      ops::layer_norm(leaf({4, 0}, dt, 5), leaf({0}, dt, 6), leaf({0}, dt, 7));
      ADD_FAILURE() << "layer_norm over zero features accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs a non-empty last dimension"), std::string::npos)
          << e.what();
    }
    try {
      ops::conv2d(leaf({2, 0, 5, 5}, dt, 8), leaf({3, 0, 3, 3}, dt, 9));
      ADD_FAILURE() << "conv2d over zero input channels accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("only the batch dimension may be 0"), std::string::npos)
          << e.what();
    }
    Tensor x = leaf({0, 3, 2, 2}, dt, 2);
    try {
      ops::batch_norm2d(x, leaf({3}, dt, 3), leaf({3}, dt, 4), Tensor::zeros({3}, dt), Tensor::ones({3}, dt),
                        true);
      ADD_FAILURE() << "batch_norm2d training over an empty batch accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("more than one value per channel"), std::string::npos) << e.what();
    }
  }
}
