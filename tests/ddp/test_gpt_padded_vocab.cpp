// test_gpt_padded_vocab.cpp - a vocabulary padded for the GEMMs (GPTConfig::vocab_padded, bench_e2e's GPT-2 at
// 50304 rows for 50257 tokens) and the loss over its first columns (ops::CrossEntropyOptions::classes): the
// padded model is the unpadded one with extra rows that nothing reads - the same loss and gradients (float64,
// 1e-12), zero gradient in the padding rows, tied and untied - and the loss op itself equals the loss on the
// classes' columns alone, bitwise on the CPU, with clear errors for a bad classes value or target.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "runtime/autograd/engine.h"
#include "runtime/ops/loss.h"

using namespace ddp;

namespace {
// Cross-entropy over the first `classes` columns, the other options at their defaults.
ops::CrossEntropyOptions classes_only(int64_t classes) {
  ops::CrossEntropyOptions o;
  o.classes = classes;
  return o;
}
constexpr int64_t kVocab = 11, kPadded = 16, kC = 8, kT = 6, kB = 2;

std::shared_ptr<models::GPT> make(bool tied, int64_t padded) {
  models::GPTConfig c;
  c.vocab = kVocab;
  c.vocab_padded = padded;
  c.context = kT;
  c.d_model = kC;
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
// Copies the unpadded model's parameters into the padded one (the table rows into the first vocab rows).
void copy_into(const nn::Module& from, const nn::Module& to) {
  for (const auto& p : from.named_parameters()) {
    Tensor dst = find(to, p.name);
    ASSERT_TRUE(dst.defined()) << p.name;
    if (dst.shape() == p.tensor.shape()) {
      dst.copy_from(p.tensor);
    } else {
      ASSERT_EQ(dst.size(0), kPadded) << p.name;
      dst.slice0(0, kVocab).copy_from(p.tensor);
    }
  }
}
double loss_and_backward(models::GPT& m) {
  std::vector<int64_t> x(kB * kT), y(kB * kT);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i * 5) % kVocab, y[i] = (i * 7 + 3) % kVocab;
  Tensor loss = ops::cross_entropy(m.forward(Tensor::from_data<int64_t>(x, {kB, kT})),
                                   Tensor::from_data<int64_t>(y, {kB, kT}), classes_only(m.loss_classes()));
  autograd::backward(loss);
  return loss.item();
}
}  // namespace

TEST(GptPaddedVocab, EqualsTheUnpaddedModelAndThePaddingRowsGetNoGradient) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    auto plain = make(tied, 0), padded = make(tied, kPadded);
    copy_into(*plain, *padded);
    EXPECT_EQ(padded->loss_classes(), kVocab);
    EXPECT_EQ(plain->loss_classes(), 0);
    EXPECT_NEAR(loss_and_backward(*padded), loss_and_backward(*plain), 1e-12);
    for (const auto& p : plain->named_parameters()) {
      const auto want = p.tensor.grad().to_double_vector();
      const auto got = find(*padded, p.name).grad().to_double_vector();
      const size_t n = want.size();
      ASSERT_GE(got.size(), n) << p.name;
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << p.name << " [" << i << "]";
      for (size_t i = n; i < got.size(); ++i) ASSERT_EQ(got[i], 0.0) << p.name << ": padding row gradient";
    }
    const std::string prompt = "\x01\x02";  // bytes are tokens: below the vocabulary of 11
    EXPECT_EQ(padded->generate(prompt, 4, 0.0, 1), plain->generate(prompt, 4, 0.0, 1)) << "greedy samples differ";
  }
}

TEST(GptPaddedVocab, BelowTheVocabularyIsRefusedByName) {
  try {
    make(false, kVocab - 1);
    FAIL() << "accepted vocab_padded below vocab";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_padded = 10 is below vocab = 11"), std::string::npos) << e.what();
  }
}

TEST(CrossEntropyClasses, EqualsTheLossOnTheClassColumnsBitwiseWithZeroPaddingGradient) {
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t rows : {0, 1, 5})
      for (int64_t classes : {1, 7, 64})
        for (int64_t pad : {0, 1, 57}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " rows " + std::to_string(rows) + " classes " +
                       std::to_string(classes) + " pad " + std::to_string(pad));
          const int64_t stride = classes + pad;
          std::vector<double> v(static_cast<size_t>(rows * stride)), dense(static_cast<size_t>(rows * classes));
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < stride; ++c) {
              const double x = 3 * std::sin(0.7 * static_cast<double>(r * stride + c + 1));
              v[r * stride + c] = x;
              if (c < classes) dense[r * classes + c] = x;
            }
          std::vector<int64_t> t(static_cast<size_t>(rows));
          for (int64_t r = 0; r < rows; ++r) t[r] = (r * 3) % classes;
          const Tensor targets = Tensor::from_data<int64_t>(t, {rows});
          Tensor xp = Tensor::from_vector(v, {rows, stride}, dtype).set_requires_grad(true);
          Tensor xd = Tensor::from_vector(dense, {rows, classes}, dtype).set_requires_grad(true);
          Tensor lp = ops::cross_entropy(xp, targets, classes_only(classes));
          Tensor ld = ops::cross_entropy(xd, targets);
          autograd::backward(lp);
          autograd::backward(ld);
          const auto a = lp.to_double_vector(), b = ld.to_double_vector();
          if (rows > 0) {
            EXPECT_EQ(a, b) << "loss";
          }
          const auto gp = xp.grad().to_double_vector(), gd = xd.grad().to_double_vector();
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < stride; ++c)
              ASSERT_EQ(gp[r * stride + c], c < classes ? gd[r * classes + c] : 0.0) << "row " << r << " col " << c;
        }
}

TEST(CrossEntropyClasses, BadClassesOrATargetInThePaddingAreRefusedByName) {
  const Tensor x = Tensor::zeros({2, 8}, DType::F64);
  auto message = [&](const Tensor& t, int64_t classes) {
    try {
      ops::cross_entropy(x, t, classes_only(classes));
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor ok = Tensor::from_data<int64_t>({1, 2}, {2});
  EXPECT_NE(message(ok, 9).find("classes = 9 but the logits of shape (2, 8) have 8 columns"), std::string::npos)
      << message(ok, 9);
  EXPECT_NE(message(ok, -1).find("classes = -1"), std::string::npos);
  const Tensor in_padding = Tensor::from_data<int64_t>({1, 6}, {2});
  const std::string m = message(in_padding, 5);
  EXPECT_NE(m.find("target 6 at position 1"), std::string::npos) << m;
  EXPECT_NE(m.find("outside [0, 5)"), std::string::npos) << m;
}
