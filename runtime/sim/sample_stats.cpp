// sample_stats.cpp - percentiles by linear interpolation over the sorted samples.
#include "runtime/sim/sample_stats.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"

namespace ddp::sim {

double percentile(std::vector<double> samples, double q) {
  DDP_CHECK(!samples.empty(), "percentile of an empty sample; run at least one measured step");
  DDP_CHECK(q >= 0 && q <= 1, "percentile: q = ", q, " must be in [0, 1]");
  std::sort(samples.begin(), samples.end());
  const double pos = q * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return samples[lo] + frac * (samples[hi] - samples[lo]);
}

SampleStats summarize(const std::vector<double>& samples) {
  SampleStats s;
  s.count = samples.size();
  s.median = percentile(samples, 0.5);
  s.p10 = percentile(samples, 0.1);
  s.p90 = percentile(samples, 0.9);
  s.min = *std::min_element(samples.begin(), samples.end());
  s.max = *std::max_element(samples.begin(), samples.end());
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / static_cast<double>(samples.size());
  return s;
}

}  // namespace ddp::sim
