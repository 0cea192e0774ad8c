// deterministic_reduction.cpp - the exact micro-batch mean of the deterministic mode (see the header).
#include "runtime/ddp/deterministic_reduction.h"

#include <algorithm>
#include <bit>

#include "kernels/cpu/fixed_point.h"
#include "runtime/core/error.h"
#include "runtime/distributed/host_collectives.h"

namespace ddp {
namespace {

void check_tensor(const Tensor& t, const char* what, size_t i) {
  DDP_CHECK(t.defined(), "DeterministicReduction: ", what, " ", i, " is undefined");
  DDP_CHECK(t.device().is_cpu(), "DeterministicReduction: ", what, " ", i, " is on ", t.device().str(),
            "; the deterministic mode runs on the CPU (docs/determinism.md)");
  DDP_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, "DeterministicReduction: ", what, " ", i,
            " is ", dtype_name(t.dtype()), "; the deterministic mode keeps float32 or float64 parameters "
            "(bf16 compute is fine: --dtype bfloat16 keeps float32 weights)");
}

template <class F>
void dispatch(DType d, F&& f) {
  if (d == DType::F32)
    f(float{});
  else
    f(double{});
}

}  // namespace

DeterministicReduction::DeterministicReduction(std::vector<Tensor> params, std::vector<Tensor> buffers,
                                               std::shared_ptr<dist::ProcessGroup> pg,
                                               DeterministicOptions options)
    : params_(std::move(params)), pg_(std::move(pg)), options_(options) {
  DDP_CHECK(pg_ != nullptr, "DeterministicReduction: the process group is null");
  DDP_CHECK(options_.micro_batches >= 1, "DeterministicReduction: micro_batches must be >= 1, got ",
            options_.micro_batches);
  DDP_CHECK(options_.block >= 1, "DeterministicReduction: block must be >= 1, got ", options_.block);
  for (size_t i = 0; i < params_.size(); ++i) check_tensor(params_[i], "parameter", i);
  for (auto& b : buffers)
    if (b.defined() && (b.dtype() == DType::F32 || b.dtype() == DType::F64) && b.device().is_cpu())
      buffers_.push_back(b);
  // 2^headroom > the most contributions a block can get (the micro-batches of a step; buffers: the same).
  headroom_ = static_cast<int>(std::bit_width(static_cast<uint64_t>(options_.micro_batches)));
  auto add = [&](const Tensor& t) {
    Segment s{t.numel(), total_blocks_, total_elements_};
    total_blocks_ += (s.numel + options_.block - 1) / options_.block;
    total_elements_ += s.numel;
    segments_.push_back(s);
  };
  for (auto& p : params_) add(p);
  for (auto& b : buffers_) add(b);
}

void DeterministicReduction::before_micro_batch() {
  if (step_start_buffers_.empty()) {
    for (auto& b : buffers_) step_start_buffers_.push_back(b.clone());
    return;
  }
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_from(step_start_buffers_[i]);
}

void DeterministicReduction::end_micro_batch() {
  DDP_CHECK(static_cast<int64_t>(grads_.size()) < options_.micro_batches, "DeterministicReduction: this rank ",
            "gave ", grads_.size() + 1, " micro-batches in one step, more than the step's ",
            options_.micro_batches, " (DeterministicOptions::micro_batches); call finish_step() after each step");
  std::vector<Tensor> g(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    g[i] = params_[i].grad();
    if (g[i].defined()) {
      DDP_CHECK(g[i].dtype() == params_[i].dtype() && g[i].numel() == params_[i].numel(),
                "DeterministicReduction: parameter ", i, "'s gradient is ", dtype_name(g[i].dtype()), " of ",
                g[i].numel(), " elements; expected its parameter's ", dtype_name(params_[i].dtype()), " of ",
                params_[i].numel());
      params_[i].set_grad(Tensor());  // moved: the next micro-batch's backward starts a fresh gradient
    }
  }
  grads_.push_back(std::move(g));
  std::vector<Tensor> bv;
  for (auto& b : buffers_) bv.push_back(b.clone());
  buffer_values_.push_back(std::move(bv));
}

int64_t DeterministicReduction::finish_step() {
  const int64_t block = options_.block;
  const size_t np = params_.size();
  // The contributions of segment k from local micro-batch m (undefined: none, i.e. zero).
  auto contribution = [&](size_t m, size_t k) -> const Tensor& {
    return k < np ? grads_[m][k] : buffer_values_[m][k - np];
  };
  auto target = [&](size_t k) -> const Tensor& { return k < np ? params_[k] : buffers_[k - np]; };

  // 1. Block exponents, MAX over every contribution of every rank.
  // Then one flag per parameter: 1 when some micro-batch gave it a gradient.
  const int64_t nflags = static_cast<int64_t>(np);
  Tensor exps = Tensor::empty({total_blocks_ + nflags}, DType::I32);
  std::fill(exps.data<int32_t>(), exps.data<int32_t>() + total_blocks_, kernels::cpu::kNoExponent);
  std::fill(exps.data<int32_t>() + total_blocks_, exps.data<int32_t>() + total_blocks_ + nflags, 0);
  for (size_t m = 0; m < grads_.size(); ++m)
    for (size_t k = 0; k < segments_.size(); ++k) {
      const Tensor& c = contribution(m, k);
      if (!c.defined()) continue;
      if (k < np) exps.data<int32_t>()[total_blocks_ + static_cast<int64_t>(k)] = 1;
      const Segment& s = segments_[k];
      dispatch(c.dtype(), [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::block_exponents(c.data<T>(), s.numel, block, exps.data<int32_t>() + s.block_offset);
      });
    }
  host_allreduce(*pg_, exps, dist::ReduceOp::Max);

  // 2-3. Fixed point, added locally, then over the ranks with the count in the last element.
  Tensor acc = Tensor::empty({total_elements_ + 1}, DType::I64);  // each segment's first contribution stores
  int64_t* a = acc.data<int64_t>();
  const int32_t* e = exps.data<int32_t>();
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    bool first = true;
    for (size_t m = 0; m < grads_.size(); ++m) {
      const Tensor& c = contribution(m, k);
      if (!c.defined()) continue;
      dispatch(c.dtype(), [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::quantize_add(c.data<T>(), s.numel, block, e + s.block_offset, headroom_,
                                   a + s.element_offset, first);
      });
      first = false;
    }
    if (first) std::fill(a + s.element_offset, a + s.element_offset + s.numel, int64_t{0});  // none here
  }
  a[total_elements_] = static_cast<int64_t>(grads_.size());
  host_allreduce(*pg_, acc, dist::ReduceOp::Sum);
  a = acc.data<int64_t>();
  const int64_t count = a[total_elements_];
  bytes_last_step_ = static_cast<int64_t>(exps.nbytes() + acc.nbytes());
  grads_.clear();
  buffer_values_.clear();
  if (count == 0) {
    step_start_buffers_.clear();
    return 0;
  }

  // 4. The mean, rounded once, into .grad and the buffers.
  for (size_t k = 0; k < segments_.size(); ++k) {
    if (k < np && e[total_blocks_ + static_cast<int64_t>(k)] == 0) {
      params_[k].set_grad(Tensor());  // no gradient anywhere: left none, as DDP leaves a parameter nobody used
      continue;
    }
    const Segment& s = segments_[k];
    const Tensor& t = target(k);
    Tensor out = k < np ? Tensor::empty(t.shape(), t.dtype()) : t;
    dispatch(t.dtype(), [&](auto zero) {
      using T = decltype(zero);
      kernels::cpu::dequantize_mean(a + s.element_offset, s.numel, block, e + s.block_offset, headroom_, count,
                                    out.data<T>());
    });
    if (k < np) params_[k].set_grad(out);
  }
  step_start_buffers_.clear();
  return count;
}

}  // namespace ddp
