// test_loss.cpp - cross_entropy (mean, sum, ignore_index, (..., C) logits, stability at large logits, bad
// targets) and mse_loss against plain float64 references; gradcheck; float32 vs float64; CUDA parity.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ops/loss.h"
#include "runtime/tensor/device_checks.h"
#include "tests/ops_nn/ops_nn_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
// Mean (or sum) over non-ignored rows of -log softmax(x)[target], plainly in double.
double reference_ce(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t cols,
                    bool mean = true, int64_t ignore = -12345) {
  double total = 0;
  int64_t n = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore) continue;
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    total += m + std::log(s) - x[r * cols + t[r]];
    ++n;
  }
  return mean ? total / static_cast<double>(n) : total;
}
std::vector<int64_t> random_targets(int64_t n, int64_t cols, uint64_t seed) {
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int64_t>((seed * 2654435761u + 97 * i) % cols);
  return t;
}
Tensor targets_tensor(const std::vector<int64_t>& t, const Shape& shape) {
  return Tensor::from_data(t, shape);
}
}  // namespace

TEST(CrossEntropy, MatchesReference) {
  for (int64_t cols : {1, 2, 7, 33}) {
    for (int64_t rows : {1, 5}) {
      Tensor x = random_f64({rows, cols}, 100 + cols, false) * 3.0;
      auto t = random_targets(rows, cols, cols);
      Tensor loss = ops::cross_entropy(x, targets_tensor(t, {rows}));
      EXPECT_EQ(loss.shape(), Shape{});
      EXPECT_NEAR(loss.item(), reference_ce(values(x), t, cols), 1e-12) << rows << "x" << cols;
    }
  }
}

TEST(CrossEntropy, LeadingDimensionsAreRows) {
  Tensor x = random_f64({2, 3, 5}, 4, false);
  auto t = random_targets(6, 5, 9);
  EXPECT_NEAR(ops::cross_entropy(x, targets_tensor(t, {2, 3})).item(), reference_ce(values(x), t, 5), 1e-12);
}

TEST(CrossEntropy, SumAndIgnoreIndex) {
  Tensor x = random_f64({6, 4}, 12, false);
  std::vector<int64_t> t = {1, -1, 3, 0, -1, 2};
  ops::CrossEntropyOptions opt;
  opt.ignore_index = -1;
  EXPECT_NEAR(ops::cross_entropy(x, targets_tensor(t, {6}), opt).item(),
              reference_ce(values(x), t, 4, true, -1), 1e-12);
  opt.reduction = ops::LossReduction::Sum;
  EXPECT_NEAR(ops::cross_entropy(x, targets_tensor(t, {6}), opt).item(),
              reference_ce(values(x), t, 4, false, -1), 1e-12);
  // An ignore index inside [0, C) ignores that class.
  opt.ignore_index = 3;
  std::vector<int64_t> t2 = {1, 3, 3, 0, 2, 2};
  EXPECT_NEAR(ops::cross_entropy(x, targets_tensor(t2, {6}), opt).item(),
              reference_ce(values(x), t2, 4, false, 3), 1e-12);
}

TEST(CrossEntropy, AllIgnoredMeanIsNan) {
  ops::CrossEntropyOptions opt;
  opt.ignore_index = 0;
  EXPECT_TRUE(
      std::isnan(ops::cross_entropy(random_f64({2, 3}, 1, false), targets_tensor({0, 0}, {2}), opt).item()));
}

TEST(CrossEntropy, LargeLogitsAreStable) {
  // Exact values: with logits (1000, 0, -1000) the loss of target 0 is ~0 and of target 2 is ~2000.
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = Tensor::from_vector({1000, 0, -1000, 1000, 0, -1000}, {2, 3}, dt);
    ops::CrossEntropyOptions sum;
    sum.reduction = ops::LossReduction::Sum;
    EXPECT_NEAR(ops::cross_entropy(x.slice0(0, 1), targets_tensor({0}, {1}), sum).item(), 0.0, 1e-6);
    EXPECT_NEAR(ops::cross_entropy(x.slice0(1, 2), targets_tensor({2}, {1}), sum).item(), 2000.0, 1e-3);
    // Shift invariance: logits + 1000 give the same loss and gradient as the logits themselves.
    Tensor base = random_f64({4, 9}, 31, false).to(dt);
    auto t = random_targets(4, 9, 2);
    Tensor shifted = (base + 1000.0).detach().set_requires_grad(true);
    Tensor plain = base.detach().set_requires_grad(true);
    Tensor ls = ops::cross_entropy(shifted, targets_tensor(t, {4}));
    Tensor lp = ops::cross_entropy(plain, targets_tensor(t, {4}));
    ASSERT_TRUE(std::isfinite(ls.item()));
    EXPECT_NEAR(ls.item(), reference_ce(values(base), t, 9), dt == DType::F32 ? 1e-3 : 1e-10);
    EXPECT_NEAR(ls.item(), lp.item(), dt == DType::F32 ? 1e-3 : 1e-10);
    autograd::backward(ls);
    autograd::backward(lp);
    for (double g : values(shifted.grad())) EXPECT_TRUE(std::isfinite(g));
    EXPECT_TRUE(all_close(shifted.grad(), plain.grad(), dt == DType::F32 ? 1e-4 : 1e-10));
  }
}

TEST(CrossEntropy, BackwardIsSoftmaxMinusOnehotOverN) {
  Tensor x = random_f64({3, 4}, 77);
  std::vector<int64_t> t = {2, 0, 3};
  autograd::backward(ops::cross_entropy(x, targets_tensor(t, {3})));
  std::vector<double> xv = values(x), expected(12);
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int c = 0; c < 4; ++c) s += std::exp(xv[r * 4 + c]);
    for (int c = 0; c < 4; ++c)
      expected[r * 4 + c] = (std::exp(xv[r * 4 + c]) / s - (c == t[r] ? 1 : 0)) / 3.0;
  }
  EXPECT_TRUE(all_close(x.grad(), expected, 1e-14));
}

TEST(CrossEntropy, Gradcheck) {
  for (Shape s : std::vector<Shape>{{1, 1}, {3, 7}, {5, 3}, {2, 2, 5}}) {
    const int64_t rows = shape_numel(s) / s.back();
    Shape ts(s.begin(), s.end() - 1);
    Tensor t = targets_tensor(random_targets(rows, s.back(), 5), ts);
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], in[1]); },
                          {random_f64(s, 3), t}))
        << shape_str(s);
    ops::CrossEntropyOptions opt;
    opt.reduction = ops::LossReduction::Sum;
    opt.ignore_index = 0;
    EXPECT_TRUE(
        gradcheck([&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], in[1], opt); },
                  {random_f64(s, 4), t}))
        << shape_str(s);
  }
}

TEST(CrossEntropy, Float32MatchesFloat64) {
  Tensor x = random_f64({8, 101}, 9, false) * 5.0;
  Tensor t = targets_tensor(random_targets(8, 101, 3), {8});
  EXPECT_TRUE(float32_matches_float64(
      [&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], t); }, {x}, 1e-5, 1e-5));
}

TEST(CrossEntropy, BadTargetNamesValueAndPosition) {
  Tensor x = random_f64({4, 5}, 1, false);
  try {
    ops::cross_entropy(x, targets_tensor({0, 4, 5, 1}, {4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("target 5 at position 2"), std::string::npos) << msg;
  }
  try {
    ops::cross_entropy(x, targets_tensor({0, -1, 1, 1}, {4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target -1 at position 1"), std::string::npos) << e.what();
  }
}

TEST(CrossEntropy, RejectsBadShapesAndDtypes) {
  Tensor x = random_f64({4, 5}, 1, false);
  EXPECT_THROW(ops::cross_entropy(x, targets_tensor({0, 1, 2}, {3})), Error);
  EXPECT_THROW(ops::cross_entropy(x, Tensor::zeros({4}, DType::F32)), Error);
  EXPECT_THROW(ops::cross_entropy(Tensor::zeros({}), targets_tensor({0}, {1})), Error);
}

TEST(MseLoss, MatchesReferenceAndGradcheck) {
  for (Shape s : std::vector<Shape>{{1}, {3, 4}, {2, 1, 5}}) {
    Tensor p = random_f64(s, 1), t = random_f64(s, 2);
    std::vector<double> pv = values(p), tv = values(t);
    double expected = 0;
    for (size_t i = 0; i < pv.size(); ++i) expected += (pv[i] - tv[i]) * (pv[i] - tv[i]);
    expected /= static_cast<double>(pv.size());
    EXPECT_NEAR(ops::mse_loss(p, t).item(), expected, 1e-13);
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::mse_loss(in[0], in[1]); }, {p, t}))
        << shape_str(s);
  }
  EXPECT_THROW(ops::mse_loss(random_f64({3}, 1), random_f64({4}, 1)), Error);
}

TEST(CrossEntropy, CudaMatchesCpu) {
  DDP_SKIP_WITHOUT_GPU();
  // float32 on both sides: relative error bound 1e-5.
  Tensor x = random_f64({2, 7, 1001}, 5) * 4.0;
  Tensor t = targets_tensor(random_targets(14, 1001, 8), {2, 7});
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], in[1]); },
                          {x, t}, 1e-6, 1e-5);
  // GPT-2's vocabulary: 50257 classes, 49-50 per thread of the one-pass log-sum-exp (kernels/cuda/loss.cu),
  // whose running max grows and rescales the running sum many times per row.
  Tensor xv = random_f64({3, 50257}, 7) * 4.0;
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], in[1]); },
                          {xv, targets_tensor(random_targets(3, 50257, 10), {3})}, 1e-6, 1e-5);
  std::vector<int64_t> tv = random_targets(14, 1001, 8);
  tv[3] = -100;
  ops::CrossEntropyOptions opt;
  opt.ignore_index = -100;
  expect_cuda_matches_cpu(
      [&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], in[1], opt); },
      {x, targets_tensor(tv, {2, 7})}, 1e-6, 1e-5);
  tv[5] = 1001;
  try {
    ops::cross_entropy(x.to(DType::F32).to(Device::cuda(0)), targets_tensor(tv, {2, 7}).to(Device::cuda(0)),
                       opt);
    check_device_errors();  // a GPU reports a bad target here, not in the op
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 1001 at position 5"), std::string::npos) << e.what();
  }
}

TEST(MseLoss, CudaMatchesCpu) {
  DDP_SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return ops::mse_loss(in[0], in[1]); },
                          {random_f64({3, 257}, 1), random_f64({3, 257}, 2)}, 1e-6, 1e-5);
}

// The backward writes the logits' gradient over the logits when nothing else holds them (loss.h): the
// gradient is bitwise the one a separate buffer gives, over devices, dtypes, shapes (one row, one class,
// primes, empty), mean/sum and ignore_index; a caller who holds the logits sees them unchanged; retain_graph
// keeps them (a second backward gives exactly twice the gradient).
TEST(CrossEntropy, GradientOverTheLogitsEqualsASeparateBufferBitwise) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  int cases = 0;
  for (Device dev : devices)
    for (DType dtype : {DType::F32, DType::F64})
      for (int64_t rows : {0, 1, 3, 17})
        for (int64_t cols : {1, 2, 7, 64, 257})
          for (bool sum : {false, true})
            for (bool ignore : {false, true}) {
              SCOPED_TRACE(dev.str() + " " + std::string(dtype_name(dtype)) + " rows " + std::to_string(rows) + " cols " +
                           std::to_string(cols) + (sum ? " sum" : " mean") + (ignore ? " ignore" : ""));
              std::vector<int64_t> tv = random_targets(rows, cols, 11 + rows * cols);
              ops::CrossEntropyOptions opt;
              if (sum) opt.reduction = ops::LossReduction::Sum;
              if (ignore && rows > 0) {
                opt.ignore_index = -100;
                tv[0] = -100;
              }
              const Tensor t = targets_tensor(tv, {rows}).to(dev);
              auto leaf = [&] {
                Tensor x = (random_f64({rows, cols}, 5 + cols, false) * 3.0).to(dtype).to(dev);
                x.set_requires_grad(true);
                return x;
              };
              // Over the logits: the logits are a temporary only the loss's node holds.
              Tensor xa = leaf();
              const int64_t before = ops::cross_entropy_gradients_over_logits();
              // (the loss in a statement of its own: a temporary lives to the end of its full expression)
              Tensor loss_a = ops::cross_entropy(ops::mul_scalar(xa, 1.0), t, opt);
              autograd::backward(loss_a);
              const int64_t over = 1;
              EXPECT_EQ(ops::cross_entropy_gradients_over_logits(), before + over) << "not written over the logits";
              // A separate buffer: the caller holds the logits, which must come out unchanged.
              Tensor xb = leaf();
              Tensor held = ops::mul_scalar(xb, 1.0);
              const std::vector<double> held_before = held.to(Device::cpu()).to_double_vector();
              autograd::backward(ops::cross_entropy(held, t, opt));
              EXPECT_EQ(ops::cross_entropy_gradients_over_logits(), before + over) << "overwrote held logits";
              EXPECT_EQ(held.to(Device::cpu()).to_double_vector(), held_before) << "held logits changed";
              EXPECT_EQ(xa.grad().to(Device::cpu()).to_double_vector(),
                        xb.grad().to(Device::cpu()).to_double_vector())
                  << "the gradient over the logits differs from a separate buffer's";
              // retain_graph: the logits survive for the second backward.
              Tensor xc = leaf();
              Tensor loss = ops::cross_entropy(ops::mul_scalar(xc, 1.0), t, opt);
              autograd::backward(loss, {.retain_graph = true});
              autograd::backward(loss, {.retain_graph = true});
              EXPECT_EQ(ops::cross_entropy_gradients_over_logits(), before + over) << "overwrote retained logits";
              std::vector<double> twice = xb.grad().to(Device::cpu()).to_double_vector();
              for (double& v : twice) v *= 2;
              EXPECT_EQ(xc.grad().to(Device::cpu()).to_double_vector(), twice) << "retain_graph";
              ++cases;
            }
  EXPECT_GE(cases, 160);
}

// A bad target on a GPU: the op does not wait; the row is left out of the loss and gets zero gradient
// (nothing read through it: compute-sanitizer memcheck runs CrossEntropy.Cuda*), and the check raises it.
// Reference: the CPU loss over the good rows only (float32 on both sides: 1e-5 relative).
TEST(CrossEntropy, CudaBadTargetIsLeftOutOfLossAndGradientAndRaisedAtTheCheck) {
  DDP_SKIP_WITHOUT_GPU();
  Tensor x = random_f64({4, 5}, 6, false).to(DType::F32);
  Tensor xd = x.to(Device::cuda(0)).clone().detach();
  xd.set_requires_grad(true);
  Tensor loss = ops::cross_entropy(xd, targets_tensor({1, 7, 2, -4}, {4}).to(Device::cuda(0)));
  autograd::backward(loss);
  const double got = values(loss)[0];  // to_double_vector: item() would raise the pending check here
  Tensor good = Tensor::empty({2, 5}, DType::F32);
  good.slice0(0, 1).copy_from(x.slice0(0, 1));
  good.slice0(1, 2).copy_from(x.slice0(2, 3));
  good.set_requires_grad(true);
  Tensor ref = ops::cross_entropy(good, targets_tensor({1, 2}, {2}));
  autograd::backward(ref);
  EXPECT_NEAR(got, values(ref)[0], 1e-5 * std::abs(values(ref)[0]));
  const std::vector<double> g = values(xd.grad()), gr = values(good.grad());
  for (int c = 0; c < 5; ++c) {
    EXPECT_NEAR(g[c], gr[c], 1e-6);
    EXPECT_EQ(g[5 + c], 0.0);
    EXPECT_NEAR(g[10 + c], gr[5 + c], 1e-6);
    EXPECT_EQ(g[15 + c], 0.0);
  }
  try {
    check_device_errors();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 7 at position 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pending_device_checks(), 0);
}

// A padded vocabulary on CUDA (ops::CrossEntropyOptions::classes: the kernels read the padded rows in place and
// zero the padding columns' gradient) against the CPU, which copies the classes' columns out.
TEST(CrossEntropy, CudaClassesMatchCpu) {
  DDP_SKIP_WITHOUT_GPU();
  for (int64_t pad : {1, 47}) {
    Tensor x = random_f64({2, 7, 1001 + pad}, 6) * 4.0;
    Tensor t = targets_tensor(random_targets(14, 1001, 9), {2, 7});
    ops::CrossEntropyOptions opt;
    opt.classes = 1001;
    expect_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], in[1], opt); }, {x, t}, 1e-6, 1e-5);
  }
}

// bf16 logits (the GPT's classifier under bf16 compute): the loss is float32 and, on the CPU, bitwise the
// float32 loss of the same values; the gradient is bfloat16, bitwise the float32 gradient rounded once - the
// values the float32 path handed the classifier's bf16 GEMMs. Over shapes at the kernels' boundaries (one
// class, 7/8/9 columns around the 8-per-load vectors, a prime, padding that keeps or breaks row_stride % 8),
// mean/sum, ignore_index, and an incoming gradient other than 1. On a GPU the same grid against that CPU
// reference: the loss within 1e-5 relative plus 2e-6 a row (each row's float32 log-sum-exp in another order),
// each gradient element within one bf16 ulp (2^-8 relative) plus 4e-6 of the row scale (that lse difference,
// where p - 1 cancels near the target; seen at 3.7e-9 on the H200 for rows 33, cols 1).
TEST(CrossEntropy, Bf16LogitsEqualTheirFloat32ValuesWithARoundedGradient) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  int cases = 0;
  for (Device dev : devices)
    for (int64_t rows : {0, 1, 5, 33})
      for (int64_t cols : {1, 7, 8, 9, 257, 1001})
        for (int64_t pad : {0, 1, 7})
          for (int variant = 0; variant < 3; ++variant) {  // mean; sum + dloss 0.25; mean + ignore_index
            const int64_t stride = cols + pad;
            SCOPED_TRACE(dev.str() + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
                         " pad " + std::to_string(pad) + " variant " + std::to_string(variant));
            ops::CrossEntropyOptions opt;
            opt.classes = pad > 0 ? cols : 0;
            std::vector<int64_t> tv = random_targets(rows, cols, 3 + rows + cols);
            if (variant == 1) opt.reduction = ops::LossReduction::Sum;
            if (variant == 2 && rows > 0) {
              opt.ignore_index = -100;
              tv[0] = -100;
            }
            const double dloss = variant == 1 ? 0.25 : 1.0;
            // bf16 values, held as bf16 and as their exact float32
            Tensor x16 = (random_f64({rows, stride}, 9 + cols, false) * 4.0).to(DType::F32).to(DType::BF16);
            Tensor x32 = x16.to(DType::F32);
            // the reference: float32 on the CPU
            Tensor r32 = x32.clone();
            r32.set_requires_grad(true);
            Tensor ref = ops::cross_entropy(r32, targets_tensor(tv, {rows}), opt);
            autograd::backward(ops::mul_scalar(ref, dloss));
            const std::vector<double> ref_grad = values(r32.grad().to(DType::BF16));
            // bf16 on the device
            Tensor l16 = x16.to(dev);
            l16.set_requires_grad(true);
            Tensor loss = ops::cross_entropy(l16, targets_tensor(tv, {rows}).to(dev), opt);
            EXPECT_EQ(loss.dtype(), DType::F32);
            autograd::backward(ops::mul_scalar(loss, dloss));
            ASSERT_EQ(l16.grad().dtype(), DType::BF16);
            const double got = values(loss)[0], want = values(ref)[0];
            const std::vector<double> g = values(l16.grad());
            if (dev.is_cpu()) {
              EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << got << " vs " << want;
              EXPECT_EQ(g, ref_grad);
            } else {
              // Each row's float32 lse may differ in its last bits (|logits| < 16: ~1e-6): the loss by that
              // per row; a gradient element by one bf16 ulp of itself plus that times the row's scale (p - 1
              // near the target cancels).
              const double counted = variant == 1 ? 1.0 : static_cast<double>(rows - (variant == 2 ? 1 : 0));
              const double scale = dloss / std::max(counted, 1.0);
              if (std::isnan(want))
                EXPECT_TRUE(std::isnan(got));
              else
                EXPECT_NEAR(got, want, 1e-5 * std::abs(want) + 2e-6 * static_cast<double>(rows));
              ASSERT_EQ(g.size(), ref_grad.size());
              for (size_t i = 0; i < g.size(); ++i)
                ASSERT_LE(std::abs(g[i] - ref_grad[i]), std::ldexp(std::abs(ref_grad[i]), -8) + 4e-6 * scale)
                    << "element " << i;
            }
            ++cases;
          }
  EXPECT_GE(cases, 216);
}

// On a GPU the bf16 kernels take eight logits per 16-byte load only from aligned rows (kernels/cuda/loss.cu):
// logits that start one element into their memory (a view) take the one-element path and give the same loss.
TEST(CrossEntropy, CudaBf16LogitsAtAnUnalignedStartMatchTheAlignedOnes) {
  DDP_SKIP_WITHOUT_GPU();
  const int64_t rows = 4, cols = 64;
  Tensor base =
      (random_f64({rows * cols + 1}, 21, false) * 4.0).to(DType::F32).to(DType::BF16).to(Device::cuda(0));
  Tensor unaligned = base.slice0(1, rows * cols + 1).view({rows, cols});
  Tensor aligned = unaligned.clone();
  Tensor t = targets_tensor(random_targets(rows, cols, 5), {rows}).to(Device::cuda(0));
  EXPECT_NEAR(values(ops::cross_entropy(unaligned, t))[0], values(ops::cross_entropy(aligned, t))[0], 1e-6);
}
