// multi_tensor.cpp - the multi-tensor launch plan and the CPU twin of the device's chunked sum of squares.
#include "kernels/cpu/multi_tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/error.h"

namespace ddp::kernels::cpu {

std::vector<MultiTensorLaunch> plan_multi_tensor(const std::vector<int64_t>& sizes, int64_t chunk,
                                                 int max_tensors, int max_blocks) {
  DDP_CHECK(chunk > 0, "plan_multi_tensor: chunk must be > 0 elements (got ", chunk, ")");
  DDP_CHECK(max_tensors >= 1 && max_blocks >= 1,
            "plan_multi_tensor: a launch needs room for at least one tensor and one block (got max_tensors ",
            max_tensors, ", max_blocks ", max_blocks, ")");
  std::vector<MultiTensorLaunch> plan;
  MultiTensorLaunch cur;
  int64_t blocks_before = 0;
  auto flush = [&] {
    if (cur.blocks.empty()) return;
    cur.first_block = blocks_before;
    blocks_before += static_cast<int64_t>(cur.blocks.size());
    plan.push_back(std::move(cur));
    cur = MultiTensorLaunch{};
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    DDP_CHECK(n >= 0, "plan_multi_tensor: tensor ", i, " has a negative size ", n);
    const int64_t chunks = (n + chunk - 1) / chunk;
    DDP_CHECK(chunks <= std::numeric_limits<int32_t>::max(), "plan_multi_tensor: tensor ", i, " of ", n,
              " elements has more than 2^31 chunks of ", chunk, "; use a larger chunk");
    for (int64_t c = 0; c < chunks; ++c) {
      if (static_cast<int64_t>(cur.blocks.size()) == max_blocks) flush();
      const int64_t index = static_cast<int64_t>(i);
      if (cur.tensors.empty() || cur.tensors.back() != index) {
        if (static_cast<int64_t>(cur.tensors.size()) == max_tensors) flush();
        cur.tensors.push_back(index);
      }
      cur.blocks.push_back({static_cast<int32_t>(cur.tensors.size() - 1), static_cast<int32_t>(c)});
    }
  }
  flush();
  return plan;
}

int64_t plan_block_count(const std::vector<MultiTensorLaunch>& plan) {
  int64_t n = 0;
  for (const auto& l : plan) n += static_cast<int64_t>(l.blocks.size());
  return n;
}

template <class T>
double chunked_sum_of_squares(const std::vector<const T*>& data, const std::vector<int64_t>& sizes,
                              int max_tensors, int max_blocks) {
  DDP_CHECK(data.size() == sizes.size(), "chunked_sum_of_squares: ", data.size(), " pointers for ",
            sizes.size(), " sizes");
  const auto plan = plan_multi_tensor(sizes, kMultiTensorChunk, max_tensors, max_blocks);
  std::vector<double> partials;
  partials.reserve(static_cast<size_t>(plan_block_count(plan)));
  for (const auto& launch : plan) {
    for (const MultiTensorBlock& b : launch.blocks) {
      const size_t t = static_cast<size_t>(launch.tensors[static_cast<size_t>(b.slot)]);
      const int64_t begin = static_cast<int64_t>(b.chunk) * kMultiTensorChunk;
      const int64_t end = std::min(begin + kMultiTensorChunk, sizes[t]);
      const T* x = data[t] + begin;
      partials.push_back(block_reduce_in_fixed_order(
          end - begin, [&](int64_t i) { return static_cast<double>(x[i]); },
          [](double acc, double v) { return std::fma(v, v, acc); }));
    }
  }
  return block_reduce_in_fixed_order(
      static_cast<int64_t>(partials.size()), [&](int64_t i) { return partials[static_cast<size_t>(i)]; },
      [](double acc, double v) { return acc + v; });
}

template double chunked_sum_of_squares<float>(const std::vector<const float*>&, const std::vector<int64_t>&,
                                              int, int);
template double chunked_sum_of_squares<double>(const std::vector<const double*>&, const std::vector<int64_t>&,
                                               int, int);

}  // namespace ddp::kernels::cpu
