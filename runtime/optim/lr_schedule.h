// lr_schedule.h - learning-rate schedules: linear warmup then cosine decay to min_lr (or constant).
#pragma once
#include <cmath>
#include <cstdint>

#include "runtime/core/error.h"

namespace ddp::optim {

struct WarmupCosine {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  bool cosine = true;  // false: constant max_lr after warmup

  // The rate for optimizer step `step` (0-based): (step+1)/warmup * max during warmup, then cosine from
  // max_lr at the end of warmup to min_lr at total_steps (held at min_lr after).
  double at(int64_t step) const {
    DDP_CHECK(total_steps > 0 && warmup_steps >= 0, "lr schedule: total_steps must be > 0 and warmup >= 0");
    if (step < warmup_steps)
      return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    if (!cosine) return max_lr;
    if (step >= total_steps) return min_lr;
    const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
    const double progress = static_cast<double>(step - warmup_steps) / span;
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
  }
};

}  // namespace ddp::optim
